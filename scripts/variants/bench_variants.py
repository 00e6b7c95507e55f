"""Time source-level variants of specs beside cuBLAS, on the GPU machine from the repository root:

    python3 scripts/variants/bench_variants.py specs/sgemm_v3.gemm specs/sgemm_v3.gemm:o_snake+u4
    SIZES=4096x4096x4096 RUNS=30 python3 scripts/variants/bench_variants.py ...

Each argument is SPEC or SPEC:NAME[+NAME...] with names from transforms.py. Every variant is
built with nvcc (in parallel), checked once against float64 at 1024^3, then timed by
gemmdsl.bench exactly as `gemmdsl bench` times specs. SK_OFF=1 turns stream-K off,
SK_WAVES=W gives it W whole waves more than the partial one, and SK_IDLE=PCT / SK_MIN=K
change schedule.py's thresholds, for measuring stream-K's rule.
"""
import dataclasses
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cupy  # noqa: E402

import gemmdsl.runtime as runtime  # noqa: E402
from gemmdsl import schedule  # noqa: E402
from gemmdsl.bench import bench, format_table  # noqa: E402
from gemmdsl.compiler import compile_path  # noqa: E402
from transforms import TRANSFORMS, codegen_patch  # noqa: E402

PATCHES = ("H", "W")  # codegen_patch names; the others transform the emitted text


def variant(argument: str):
    """(label, Artifacts) of SPEC[:NAME+NAME...]."""
    path, _, names = argument.partition(":")
    names = names.split("+") if names else []
    with codegen_patch(names):
        artifacts = compile_path(path)
    for name in names:
        if name not in PATCHES:
            changed = TRANSFORMS[name](artifacts.cuda)
            assert changed != artifacts.cuda, f"{name} does not apply to {path}"
            artifacts = dataclasses.replace(artifacts, cuda=changed)
    return artifacts.name + (f":{'+'.join(names)}" if names else ""), artifacts


def prebuild(artifacts) -> None:
    built_for = runtime.build_target(artifacts.metadata["target"], cupy.cuda.Device().compute_capability)
    runtime.BinaryCache(runtime.cache_dir()).get_or_build(
        runtime.cubin_cache_name(artifacts.metadata, artifacts.cuda, built_for),
        lambda: runtime.compile_cubin(artifacts.cuda, built_for))


def relative_error(kernel) -> float:
    a = cupy.random.uniform(-1, 1, (1024, 1024), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (1024, 1024), dtype=cupy.float32)
    c = cupy.full((1024, 1024), cupy.nan, dtype=cupy.float32)
    kernel(a, b, c)
    reference = a.astype(cupy.float64) @ b.astype(cupy.float64)
    return float(cupy.linalg.norm(c - reference) / cupy.linalg.norm(reference))


def main() -> None:
    variants = [variant(argument) for argument in sys.argv[1:]]
    with ThreadPoolExecutor(os.cpu_count() or 4) as pool:
        list(pool.map(prebuild, [artifacts for _, artifacts in variants]))
    if os.environ.get("SK_OFF"):
        runtime.stream_k_split = lambda tiles, k_tiles, slots: schedule.StreamKSplit(tiles, k_tiles, slots, 0, 0)
    if os.environ.get("SK_WAVES"):  # stream-K takes this many whole waves more than the partial one
        extra, plain = int(os.environ["SK_WAVES"]), schedule.stream_k_split

        def wider(tiles, k_tiles, slots):
            split = plain(tiles, k_tiles, slots)
            shared = split.sk_tiles + extra * slots
            if not split.sk_tiles or shared > tiles:
                return split
            return schedule.StreamKSplit(tiles, k_tiles, slots, shared, slots)
        runtime.stream_k_split = wider
    if os.environ.get("SK_IDLE"):
        schedule.MIN_IDLE_PERCENT = int(os.environ["SK_IDLE"])
    if os.environ.get("SK_MIN"):
        schedule.MIN_K_TILES_PER_BLOCK = int(os.environ["SK_MIN"])
    kernels = []
    for label, artifacts in variants:
        kernel = runtime.Kernel(artifacts)
        kernel.name = label
        function = kernel._functions[kernel.requirements.vector_entry]
        print(f"{label}: {function.num_regs} registers, {function.local_size_bytes} bytes local, "
              f"error vs float64 {relative_error(kernel):.1e}", flush=True)
        kernels.append(kernel)
    sizes = runtime.parse_sizes(os.environ.get("SIZES", "1024x1024x1024,2048x2048x2048,4096x4096x4096,"
                                                         "8192x8192x8192,4096x4096x1024"))
    print(format_table(bench(kernels, sizes, runs=int(os.environ.get("RUNS", 20)))))


if __name__ == "__main__":
    main()

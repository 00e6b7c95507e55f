"""Where a dequantizing decode kernel's time goes, block by block: the kernel of a spec, built with clock64 read at
its start, after A and the words are staged (the first barrier), after the mainloop and at its end, and the global
timer at start and end; one launch on a cold L2 (a 256 MB buffer written first) with random weights, then the
spread over blocks (min, 10th, 50th, 90th percentile, max) of each phase in microseconds at the SM's measured clock.

    python3 scripts/decode_timeline.py specs/w4a16_decode_m8.gemm 1x8192x8192 [SPEC MxNxK ...]

Needs a GPU, nvcc, CuPy and PyTorch. The probes are added to the generated .cu's text (`instrumented`), so the
kernel is the spec's own; tests/test_decode_timeline.py checks that every shipped decode spec's text takes them.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "tests")]

PROBES = """__device__ unsigned long long timeline_probes[65536 * 8];
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ long long sm_clock() {
    long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
    return t;
}
"""
RECORD = """
    if (threadIdx.x == 0) {
        const unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
        unsigned long long* probe = timeline_probes + block * 8;
        probe[0] = start_ns; probe[1] = start_clock; probe[2] = staged_clock; probe[3] = loop_clock;
        probe[4] = sm_clock(); probe[5] = global_ns();
    }
}"""
MAX_BLOCKS = 65536
PHASES = (("stage", 1, 2), ("loop", 2, 3), ("reduce", 3, 4))


def instrumented(cuda: str, name: str) -> str:
    """The generated file with the timeline's probes in NAME_kernel; ValueError naming an anchor it lacks."""
    edits = [
        (f"namespace {name}_detail {{", PROBES + f"namespace {name}_detail {{"),
        (f"    using namespace {name}_detail;\n",
         f"    using namespace {name}_detail;\n    const unsigned long long start_ns = global_ns();\n"
         "    const long long start_clock = sm_clock();\n"),
        ("    __syncthreads();\n    // A word of the warp's tile",
         "    __syncthreads();\n    const long long staged_clock = sm_clock();\n    // A word of the warp's tile"),
        ("    if (gridDim.z == 1) store_tile(", "    const long long loop_clock = sm_clock();\n    if (gridDim.z == 1) store_tile("),
        ("    else reduce_slices(acc, C, workspace, counters, m0, tile0, M, N);\n}",
         "    else reduce_slices(acc, C, workspace, counters, m0, tile0, M, N);" + RECORD),
    ]
    for anchor, replacement in edits:
        if anchor not in cuda:
            raise ValueError(f"{name}.cu lacks the timeline's anchor {anchor!r}")
        cuda = cuda.replace(anchor, replacement, 1)
    return cuda


def main() -> int:
    args = sys.argv[1:]
    if not args or len(args) % 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        import cupy
        import torch
    except ImportError as missing:
        print(f"decode_timeline: {missing.name} is not installed; the timeline needs a GPU, CuPy and PyTorch",
              file=sys.stderr)
        return 2
    import numpy as np

    import quant_bench
    from gemmdsl.frontend import load_spec
    from gemmdsl.paths.dequant.lowering import decode_config
    from gemmdsl.quant_bench import TorchGpu
    from gemmdsl.verify import TorchArrays

    class OneCopy(TorchGpu):
        def copies(self, nbytes: int) -> int:
            return 1  # one weight: a single cold launch reads it, no rotation through copies

    gpu, arrays = OneCopy(), TorchArrays(0, tf32=False)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    with tempfile.TemporaryDirectory() as scratch:
        for spec, size in zip(args[::2], args[1::2]):
            m, n, k = map(int, size.split("x"))
            subprocess.run([sys.executable, "-m", "gemmdsl.cli", "compile", spec, "-o", scratch, "--no-nvcc"],
                           check=True, stdout=subprocess.DEVNULL)
            name = Path(spec).stem
            source = Path(scratch) / f"{name}_timeline.cu"
            source.write_text(instrumented((Path(scratch) / f"{name}.cu").read_text(), name))
            cubin = source.with_suffix(".cubin")
            subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-O3", "-o", str(cubin), str(source)], check=True)
            module = cupy.RawModule(path=str(cubin))
            kernel = module.get_function(f"{name}_kernel")
            config = decode_config(load_spec(spec))
            fmt = config.fmt
            kernel.max_dynamic_shared_size_bytes = config.smem_bytes
            packed = quant_bench.weight_on_gpu(gpu, arrays, fmt, n, k).packed[0]
            a = arrays.random(m * k, fmt.activation).reshape(m, k)
            c = arrays.poisoned(m * n, config.c).reshape(m, n)
            workspace = torch.zeros(max(16, config.workspace_bytes(m, n, k)), dtype=torch.uint8, device="cuda")
            grid = config.grid(m, n, k)
            blocks = grid[0] * grid[1] * grid[2]
            if blocks > MAX_BLOCKS:
                print(f"{name} {size}: {blocks} blocks, more than the {MAX_BLOCKS} the probes hold")
                continue
            pointer = lambda t: np.uint64(t.data_ptr() if t is not None else 0)  # noqa: E731
            arguments = (pointer(a), pointer(packed["weights"]), pointer(packed.get("scales")),
                         pointer(packed.get("zeros")), pointer(c), pointer(workspace),
                         np.uint64(workspace.data_ptr() + m * n * 4), np.int32(m), np.int32(n), np.int32(k))
            for _ in range(3):  # the last launch is the one read: every earlier one warmed the code, not the data
                flush.fill_(1)
                kernel(grid, (config.warps * 32,), arguments, shared_mem=config.smem_bytes)
            torch.cuda.synchronize()
            probes = cupy.ndarray((MAX_BLOCKS * 8,), dtype=cupy.uint64, memptr=module.get_global("timeline_probes"))
            t = probes[: blocks * 8].get().reshape(blocks, 8).astype(np.int64)
            mhz = (t[:, 4] - t[:, 1]) / ((t[:, 5] - t[:, 0]) / 1e3)
            spread = lambda v: " ".join(f"{x:6.2f}" for x in np.percentile(v, [0, 10, 50, 90, 100]))  # noqa: E731
            print(f"{name} {size}: grid {grid}, span {(t[:, 5].max() - t[:, 0].min()) / 1e3:.2f} us, "
                  f"SM clock {np.median(mhz):.0f} MHz (us: min p10 p50 p90 max)")
            print(f"  start  {spread((t[:, 0] - t[:, 0].min()) / 1e3)}")
            for phase, first, last in PHASES:
                print(f"  {phase:6s} {spread((t[:, last] - t[:, first]) / mhz)}")
            print(f"  end    {spread((t[:, 5] - t[:, 0].min()) / 1e3)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

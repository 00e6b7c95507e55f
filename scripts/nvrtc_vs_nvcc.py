"""NVRTC against nvcc on the shipped specs: for each spec the registers of both builds of the same
source, whether their machine code differs, and their times (on a GPU; nvcc must be on PATH).

    PYTHONPATH=. python scripts/nvrtc_vs_nvcc.py [SPEC...] [--sizes 4096] [--runs 20]

Both builds of every spec are made first, in parallel, into gemmdsl's cubin cache (the key
includes the compiler, so they sit side by side). The two cubins' kernels are compared
instruction by instruction (`sass_difference`). Then the two builds are timed against each other
launch for launch (`bench.time_interleaved`), once with nvcc's launch first in each round and
once with NVRTC's, on the inputs `gemmdsl bench` uses; the ratio is of the medians over both
passes. Timing each build in its own pass (as this script did before 2026-11-26) lets the clock
drift between the passes into the ratio.
"""
from __future__ import annotations

import argparse
import os
import statistics
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gemmdsl import runtime
from gemmdsl.bench import buffer_sets, in_layouts, input_set, matrix_bytes, time_interleaved
from gemmdsl.compiler import compile_path
from gemmdsl.precisions import comparison
from gemmdsl.verify import arrays_for

ROOT = Path(__file__).resolve().parent.parent
# The high word of an sm_70+ instruction: bits 46-57 name the dependency barriers it sets and waits on;
# the rest of it (stall count, yield, operand reuse, operands) and the whole low word are the code.
BARRIER_BITS = 0xFFF << 46


def prebuild(artifacts, built_for: str, compiler: str) -> Path:
    name = runtime.cubin_cache_name(artifacts.metadata, artifacts.cuda, built_for, compiler)
    return runtime.BinaryCache(runtime.cache_dir()).get_or_build(
        name, lambda: runtime.compile_cubin(artifacts.cuda, built_for, compiler))


def text_sections(cubin: bytes) -> dict[str, bytes]:
    """The `.text.KERNEL` sections of a 64-bit ELF cubin, by section name."""
    header_offset, = struct.unpack_from("<Q", cubin, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", cubin, header_offset + i * entry_size) for i in range(count)]
    names_at, names_size = headers[names_index][4:6]
    names = cubin[names_at:names_at + names_size]
    sections = {}
    for name_at, _, _, _, offset, size in headers:
        name = names[name_at:names.index(b"\0", name_at)].decode()
        if name.startswith(".text."):
            sections[name] = cubin[offset:offset + size]
    return sections


def sass_difference(nvcc_cubin: bytes, nvrtc_cubin: bytes) -> str:
    """`same` when every kernel's instructions match bit for bit; else how many differ only in
    their dependency-barrier bits (the same code, its scoreboards numbered otherwise) and how many
    otherwise, out of all."""
    nvcc, nvrtc = text_sections(nvcc_cubin), text_sections(nvrtc_cubin)
    if nvcc.keys() != nvrtc.keys() or any(len(nvcc[name]) != len(nvrtc[name]) for name in nvcc):
        return "different kernels or lengths"
    total = barriers = other = 0
    for name, code in nvcc.items():
        for at in range(0, len(code), 16):
            low, high = struct.unpack_from("<QQ", code, at)
            low2, high2 = struct.unpack_from("<QQ", nvrtc[name], at)
            total += 1
            if low != low2 or (high ^ high2) & ~BARRIER_BITS:
                other += 1
            elif high != high2:
                barriers += 1
    return "same" if barriers + other == 0 else f"{barriers} barrier-only, {other} other of {total}"


def paired_times(nvcc: runtime.Kernel, nvrtc: runtime.Kernel, size, runs: int) -> tuple[float, float]:
    """Median milliseconds of each build, the two taking turns launch for launch, in both orders."""
    import cupy

    compared = comparison(nvcc.metadata)
    arrays = arrays_for(compared, seed=0)
    properties = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    sets = [input_set(arrays, compared, size)
            for _ in range(buffer_sets(matrix_bytes(size, compared.input_dtype), properties["l2CacheSize"]))]
    launches = {kernel: [kernel.bind(*in_layouts(kernel, arrays, operands)) for operands in sets]
                for kernel in (nvcc, nvrtc)}
    first = time_interleaved([launches[nvcc], launches[nvrtc]], runs, warmup=5)
    second = time_interleaved([launches[nvrtc], launches[nvcc]], runs, warmup=5)
    return statistics.median(first[0] + second[1]), statistics.median(first[1] + second[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", default=sorted(map(str, (ROOT / "specs").glob("*.gemm"))))
    parser.add_argument("--sizes", default="4096", help="MxNxK,... (default 4096 cubed)")
    parser.add_argument("--runs", type=int, default=20, help="launches of each build per order")
    args = parser.parse_args()
    import cupy

    runtime.require_gpu()
    runtime.require_fp32_cublas()
    compiled = [compile_path(path) for path in args.specs]
    capability = cupy.cuda.Device().compute_capability
    jobs = [(artifacts, runtime.build_target(artifacts.metadata["target"], capability), compiler)
            for artifacts in compiled for compiler in runtime.COMPILERS]
    with ThreadPoolExecutor(os.cpu_count() or 4) as pool:
        cubins = list(pool.map(lambda job: prebuild(*job).read_bytes(), jobs))
    nvcc_version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    nvrtc_version = ".".join(map(str, cupy.cuda.nvrtc.getVersion()))
    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    print(f"{name.decode() if isinstance(name, bytes) else name} | CuPy {cupy.__version__} | NVRTC {nvrtc_version} "
          f"| {nvcc_version} | median of {2 * args.runs} launches per build, taking turns")
    print(f"{'spec':<20} {'size':<16} {'regs nvcc':>9} {'regs nvrtc':>10} {'machine code':<34} {'ms nvcc':>8} "
          f"{'ms nvrtc':>8} {'nvrtc/nvcc':>10}")
    for index, artifacts in enumerate(compiled):
        kernels = []
        for compiler in runtime.COMPILERS:
            os.environ["GEMMDSL_COMPILER"] = compiler
            kernels.append(runtime.Kernel(artifacts))
        nvcc, nvrtc = kernels
        difference = sass_difference(cubins[2 * index], cubins[2 * index + 1])
        entry = nvcc.requirements.vector_entry
        for size in runtime.parse_sizes(args.sizes):
            try:
                nvcc_ms, nvrtc_ms = paired_times(nvcc, nvrtc, size, args.runs)
                times = f"{nvcc_ms:8.3f} {nvrtc_ms:8.3f} {100 * nvrtc_ms / nvcc_ms:9.1f}%"
            except ValueError as err:  # a size this exact-shape kernel cannot take
                times = f"skipped: {err}"
            print(f"{nvcc.name:<20} {runtime.format_size(size):<16} {nvcc.registers[entry]:>9} "
                  f"{nvrtc.registers[entry]:>10} {difference:<34} {times}")


if __name__ == "__main__":
    main()

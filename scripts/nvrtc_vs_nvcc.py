"""NVRTC against nvcc on the shipped specs: the registers of each build of the same source and
their times, side by side (on a GPU; nvcc must be on PATH).

    PYTHONPATH=. python scripts/nvrtc_vs_nvcc.py [SPEC...] [--sizes 4096] [--runs 20]

Both builds of every spec are made first, in parallel, into gemmdsl's cubin cache (the key
includes the compiler, so they sit side by side); then each spec is loaded once per compiler
(GEMMDSL_COMPILER) and all of them are timed together by `gemmdsl.bench.bench`, each launch
beside cuBLAS. A row per spec and size: registers of the vector kernel from each build, the
median times, and NVRTC's time as % of nvcc's.
"""
from __future__ import annotations

import argparse
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gemmdsl import runtime
from gemmdsl.bench import bench, comparison_groups
from gemmdsl.compiler import compile_path

ROOT = Path(__file__).resolve().parent.parent


def prebuild(artifacts, built_for: str, compiler: str) -> None:
    name = runtime.cubin_cache_name(artifacts.metadata, artifacts.cuda, built_for, compiler)
    runtime.BinaryCache(runtime.cache_dir()).get_or_build(
        name, lambda: runtime.compile_cubin(artifacts.cuda, built_for, compiler))


def load_with(compiler: str, artifacts) -> runtime.Kernel:
    os.environ["GEMMDSL_COMPILER"] = compiler
    return runtime.Kernel(artifacts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", default=sorted(map(str, (ROOT / "specs").glob("*.gemm"))))
    parser.add_argument("--sizes", default="4096", help="MxNxK,... (default 4096 cubed)")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    import cupy

    runtime.require_gpu()
    runtime.require_fp32_cublas()
    compiled = [compile_path(path) for path in args.specs]
    capability = cupy.cuda.Device().compute_capability
    jobs = [(artifacts, runtime.build_target(artifacts.metadata["target"], capability), compiler)
            for artifacts in compiled for compiler in runtime.COMPILERS]
    with ThreadPoolExecutor(os.cpu_count() or 4) as pool:
        list(pool.map(lambda job: prebuild(*job), jobs))
    kernels = [load_with(compiler, artifacts) for artifacts in compiled for compiler in runtime.COMPILERS]
    sizes = runtime.parse_sizes(args.sizes)
    report = bench(kernels, sizes, runs=args.runs)
    # Per size, bench's rows are each comparison group's cuBLAS row followed by its kernels.
    groups = comparison_groups(kernels)
    in_row_order = [kernel for members in groups.values() for kernel in members]
    per_size = len(in_row_order) + len(groups)
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    nvrtc = ".".join(map(str, cupy.cuda.nvrtc.getVersion()))
    print(f"{report.device} | CuPy {report.cupy_version} | NVRTC {nvrtc} | {nvcc} | median of {report.runs} launches")
    print(f"{'spec':<20} {'size':<16} {'regs nvcc':>9} {'regs nvrtc':>10} {'ms nvcc':>8} {'ms nvrtc':>8} "
          f"{'nvrtc/nvcc':>10}")
    for size_index, size in enumerate(sizes):
        rows = report.rows[size_index * per_size:(size_index + 1) * per_size]
        row_of = dict(zip(map(id, in_row_order), (row for row in rows if not row.name.startswith("cuBLAS"))))
        for pair in range(len(compiled)):
            nvcc, nvrtc = kernels[2 * pair], kernels[2 * pair + 1]
            nvcc_row, nvrtc_row = row_of[id(nvcc)], row_of[id(nvrtc)]
            assert nvcc_row.name == nvcc.name and nvrtc_row.name == nvrtc.name
            entry = nvcc.requirements.vector_entry
            times = ([f"{nvcc_row.median_ms:8.3f}", f"{nvrtc_row.median_ms:8.3f}",
                      f"{100 * nvrtc_row.median_ms / nvcc_row.median_ms:9.1f}%"]
                     if nvcc_row.median_ms and nvrtc_row.median_ms else ["-", "-", "skipped"])
            print(f"{nvcc.name:<20} {runtime.format_size(size):<16} {nvcc.registers[entry]:>9} "
                  f"{nvrtc.registers[entry]:>10} {times[0]:>8} {times[1]:>8} {times[2]:>10}")


if __name__ == "__main__":
    main()

"""Time generated kernels against cuBLAS at their own precision, and against their unit's peak.

Method, and why:
- CUDA events around every launch; the median of `runs` timed launches (at
  least 20) after `warmup` untimed ones, so one slow launch does not move it.
- Events only measure GPU time if the GPU never idles waiting for the host
  between them. A short spin kernel runs first and keeps the GPU busy while
  the host enqueues every timed launch, so even a 50 microsecond kernel is
  timed back to back.
- When A, B and C would stay in L2 between launches (50 MB on an H100), the
  launches rotate over enough copies of the inputs to exceed twice the L2, so
  every launch reads A and B from DRAM as a real caller's would.
- cuBLAS (cupy.matmul on float32, TF32 off) is timed the same way, in the
  same process, on the same buffers: once alone (its own row), and again
  beside every kernel, launch for launch (cuBLAS, kernel, cuBLAS, kernel, ...),
  so that each kernel's percentage of cuBLAS compares launches made under the
  same clocks. An H100 under a long FMA-bound run moves its clocks by a few
  percent, enough to decide a comparison between near-equal kernels.
- The FMA peak is measured, not taken from a datasheet: a kernel of independent
  FMA chains in registers, timed at the clocks this GPU actually runs. Tensor-core kernels
  are rated against their instruction's peak in gemmdsl/targets.py (PEAK_TFLOPS, for the H100 the
  mma.sync rates measured in a register-only loop, 3xTF32 a third of TF32's; WGMMA_PEAK_TFLOPS,
  the datasheet's wgmma rate, for Hopper's own path). A cuBLAS row is rated against the
  mma.sync rate of its group.
- `batch` > 1 times batched specs (`batch: strided`) on that many GEMMs of each size in 3-D
  arrays, against cuBLAS's strided-batched GEMM on the same arrays (a 3-D matmul); the
  figures count every GEMM of the batch. Specs without a batch are skipped with a note.
- Each kernel is compared with cuBLAS at its own precision (gemmdsl/precisions.py): FMA and
  3xTF32 kernels with SGEMM (CuPy, TF32 off), bf16 and f16 kernels with cuBLAS on the same
  16-bit inputs, writing C in the kernel's C type (the inputs' type, or f32 through torch.mm's
  out_dtype), and TF32 kernels with cuBLAS in TF32 mode (both through PyTorch). Kernels are
  timed in groups of one comparison, on inputs of their type; each group has its own cuBLAS row.
- FP8 kernels are compared with torch._scaled_mm on A and B of the kernel's own types (e4m3 x e5m2 and
  e5m2 x e4m3 too), in its mode for the kernel's scales (tensorwise for `scale: tensor`, blockwise for
  `scale: block` where it has one, else rowwise) and accumulation (`use_fast_accum`). It has no e5m2 x e5m2:
  that group's row times torch._scaled_mm on the same bytes read as e4m3, and its name says so.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any, Callable, TextIO

import numpy

from .arrays import DTYPE_NAMES, ITEM_SIZES
from .family_kernel import read_shapes, run_on_specs_and_families
from .file_kinds import inputs_help
from .grouped_bench import bench_grouped
from .precisions import Comparison, comparison
from .runtime.binaries import parse_target
from .runtime.commands import format_size
from .runtime.environment import GpuUnavailable, require_fp32_cublas
from .runtime.kernel import Kernel
from .runtime.operands import Size
from .shape_sets import DEFAULT_SHAPES, RANDOM_PREFIX, RandomShapes, named_lists, shape_source
from .paths import path_of
from .targets import unit_peak_tflops
from .bench_fuse import baselines
from .quant_bench import bench_quantized, format_quantized_table
from .verify import Case, CupyArrays, arrays_for, chain_operands, random_operand

DEFAULT_SIZES = "1024x1024x1024,2048x2048x2048,4096x4096x4096,8192x8192x8192,4096x4096x1024"
MIN_RUNS = 20
DEFAULT_WARMUP = 5
L2_MULTIPLE = 2  # the rotated buffer sets together exceed this many L2 caches
UNPADDED = Case("contiguous", padded=False, batch=1, scalars=False)  # how a fused kernel's residual is laid out
SPIN_NS_PER_RUN = 200_000  # GPU time bought per timed launch for the host to enqueue it; ~10x CuPy's overhead

SPIN_SOURCE = r"""
extern "C" __global__ void gemmdsl_spin(unsigned long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < nanoseconds);
}
"""

PEAK_CHAINS = 8  # independent accumulators per thread: enough to hide the FMA latency
PEAK_UNROLL = 16
PEAK_ITERATIONS = 4096
PEAK_THREADS = 256
PEAK_BLOCKS_PER_SM = 8  # 8 x 256 = 2048 threads, a full SM
PEAK_RUNS = 5
PEAK_SOURCE = rf"""
extern "C" __global__ void gemmdsl_fma_peak(float* sink, int iterations, float scale, float offset) {{
    float acc[{PEAK_CHAINS}];
    #pragma unroll
    for (int j = 0; j < {PEAK_CHAINS}; ++j) acc[j] = threadIdx.x * 1e-3f + j;
    for (int i = 0; i < iterations; ++i) {{
        #pragma unroll
        for (int r = 0; r < {PEAK_UNROLL}; ++r) {{
            #pragma unroll
            for (int j = 0; j < {PEAK_CHAINS}; ++j) acc[j] = fmaf(acc[j], scale, offset);
        }}
    }}
    float sum = 0.0f;
    #pragma unroll
    for (int j = 0; j < {PEAK_CHAINS}; ++j) sum += acc[j];
    if (sum == -1.0f) sink[0] = sum;  // never true here, but the compiler cannot know: the FMAs stay
}}
"""


@dataclass(frozen=True)
class Row:
    """One kernel (or cuBLAS) at one size; the figures are None when the kernel was skipped."""

    name: str
    m: int
    n: int
    k: int
    buffer_sets: int
    median_ms: float | None = None
    tflops: float | None = None
    pct_of_cublas: float | None = None
    pct_of_peak: float | None = None
    note: str = ""
    cublas_ms: float | None = None  # median of the cuBLAS launches interleaved with this kernel's
    batch: int = 1  # GEMMs per launch, each of m x n x k


@dataclass(frozen=True)
class BenchReport:
    device: str
    cupy_version: str
    peak_tflops: float
    runs: int
    warmup: int
    rows: list[Row]


class Progress:
    """A status line on stderr: redrawn in place on a terminal, one line per step in a log."""

    def __init__(self, total: int, stream: TextIO | None = None):
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()

    def start(self, label: str) -> None:
        self.done += 1
        text = f"[{self.done}/{self.total}] {label}"
        self.stream.write(f"\r\033[K{text}" if self.live else f"{text}\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.live:
            self.stream.write("\r\033[K")
            self.stream.flush()


def check_runs(runs: int) -> None:
    if runs < MIN_RUNS:
        raise ValueError(f"runs={runs}: at least {MIN_RUNS} timed runs are needed for a stable median")


def bench(kernels: list[Kernel], sizes: list[Size], runs: int = MIN_RUNS, warmup: int = DEFAULT_WARMUP,
          seed: int = 0, progress: Progress | None = None, batch: int = 1) -> BenchReport:
    """Time every kernel and cuBLAS at every size (`batch` GEMMs of it per launch); see the module
    docstring for the method."""
    import cupy

    check_runs(runs)
    check_batch(batch)
    require_fp32_cublas()
    groups = comparison_groups(kernels)
    progress = progress or Progress(1 + len(sizes) * (len(groups) + len(kernels)))
    properties = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    progress.start("measuring the FP32 FMA peak")
    peak = measure_fma_peak(cupy.cuda.Device().id, properties["multiProcessorCount"])
    sm = parse_target("sm_{}{}".format(*cupy.cuda.Device().compute_capability))[0]
    rows = []
    for size in sizes:
        for compared, members in groups.items():
            unit_peak = peak if compared.unit == "fma" else unit_peak_tflops(compared.unit, sm)
            arrays = arrays_for(compared, seed)
            count = buffer_sets(batch * matrix_bytes(size, compared.input_dtype), properties["l2CacheSize"])
            sets = [input_set(arrays, compared, size, batch) for _ in range(count)]
            peaks = [instruction_peak(kernel, compared.unit, sm, unit_peak) for kernel in members]
            rows += bench_size(members, compared, arrays, size, batch, sets, runs, warmup, unit_peak, peaks,
                               progress)
    progress.finish()
    name = properties["name"]
    return BenchReport(device=name.decode() if isinstance(name, bytes) else name, cupy_version=cupy.__version__,
                       peak_tflops=peak, runs=runs, warmup=warmup, rows=rows)


def comparison_groups(kernels: list[Kernel]) -> dict[Comparison, list[Kernel]]:
    """The kernels by the cuBLAS call they are compared with, in first-seen order: the order of
    `bench`'s rows at each size is, per group, that cuBLAS row and then the group's kernels."""
    groups: dict[Comparison, list[Kernel]] = {}
    for kernel in kernels:
        groups.setdefault(comparison(kernel.metadata), []).append(kernel)
    return groups


def instruction_peak(kernel: Kernel, unit: str, sm: int, unit_peak: float) -> float:
    """wgmma's peak for a kernel on Hopper's own path, else its unit's (`unit_peak`)."""
    spec = getattr(kernel, "spec", None)  # a family's kernel has members, not one spec
    if spec is not None:
        return path_of(spec).peak_tflops(sm).get(unit, unit_peak)
    return unit_peak


def is_cublas_row(name: str) -> bool:
    """Whether a report row is a baseline (`cublas_name`, or a fused kernel's PyTorch chain), not a kernel."""
    return name == "cuBLAS" or name.startswith(("cuBLAS ", "cuBLASLt: ", "torch unfused: "))


def cublas_name(compared: Comparison) -> str:
    """`cuBLAS` for SGEMM (the name earlier reports and the tuner use), else `cuBLAS <precision>`."""
    return "cuBLAS" if compared.cublas == "SGEMM" else f"cuBLAS {compared.cublas}"


def bench_size(kernels: list[Kernel], compared: Comparison, arrays: CupyArrays, size: Size, batch: int,
               sets: list[tuple], runs: int, warmup: int, peak: float, kernel_peaks: list[float],
               progress: Progress) -> list[Row]:
    """cuBLAS at the kernels' precision alone first, then each kernel interleaved with it, on the same inputs."""
    name = arrays.baseline_name or cublas_name(compared)
    label = format_batched_size(size, batch)
    progress.start(f"{name} at {label}")
    cublas = [partial(arrays.cublas_into, a, b, c) for a, b, c in sets]
    cublas_ms = statistics.median(time_launches(cublas, runs, warmup))
    rows = [measured_row(name, size, len(sets), cublas_ms, cublas_ms, peak, batch)]
    for kernel, kernel_peak in zip(kernels, kernel_peaks):
        progress.start(f"{kernel.name} at {label}")
        rows += kernel_row(kernel, arrays, size, batch, sets, runs, warmup, cublas, kernel_peak)
    return rows


def kernel_row(kernel: Kernel, arrays: CupyArrays, size: Size, batch: int, sets: list[tuple], runs: int,
               warmup: int, cublas: list[Callable[[], Any]], peak: float) -> list[Row]:
    """The kernel against cuBLAS at its precision; a fused kernel against PyTorch's chains (`fused_rows`)."""
    skipped = partial(Row, kernel.name, *size, buffer_sets=len(sets), batch=batch)
    if batch > 1 and not kernel.requirements.batched:
        return [skipped(note="skipped: not a batched spec (`batch: strided` in its problem section)")]
    fuse = kernel.metadata.get("fuse")
    try:
        operands = [in_layouts(kernel, arrays, operands) for operands in sets]
        chains = [chain_operands(arrays, fuse, *size, UNPADDED) if fuse else {} for _ in operands]
        launches = [kernel.bind(*abc, **chain) for abc, chain in zip(operands, chains)]
    except ValueError as err:  # a size this exact-shape kernel cannot take
        return [skipped(note=f"skipped: {err}")]
    if fuse and not arrays.baseline_applies(fuse):
        return fused_rows(kernel, fuse, size, operands, chains, launches, runs, warmup, peak)
    cublas_times, times = time_interleaved([cublas, launches], runs, warmup)
    return [measured_row(kernel.name, size, len(sets), statistics.median(times), statistics.median(cublas_times),
                         peak, batch)]


def fused_rows(kernel: Kernel, fuse: dict, size: Size, operands: list[tuple], chains: list[dict],
               launches: list[Callable[[], Any]], runs: int, warmup: int, peak: float) -> list[Row]:
    """A fused kernel against each PyTorch baseline of its chain (bench_fuse.baselines), interleaved launch
    for launch: a row per baseline, then the kernel's, its ratio taken against the fastest baseline."""
    sets = len(operands)
    per_set = [baselines(fuse, *abc, chain) for abc, chain in zip(operands, chains)]
    rows, best = [], None
    for name in per_set[0]:
        base_times, times = time_interleaved([[found[name] for found in per_set], launches], runs, warmup)
        base_ms, kernel_ms = statistics.median(base_times), statistics.median(times)
        rows.append(measured_row(name, size, sets, base_ms, base_ms, peak))
        if best is None or base_ms < best[0]:
            best = (base_ms, kernel_ms)
    return rows + [measured_row(kernel.name, size, sets, best[1], best[0], peak)]


def measured_row(name: str, size: Size, sets: int, median_ms: float, cublas_ms: float, peak: float,
                 batch: int = 1) -> Row:
    tflops = tflops_of(size, median_ms, batch)
    return Row(name, *size, buffer_sets=sets, batch=batch, median_ms=median_ms, tflops=tflops,
               pct_of_cublas=100 * cublas_ms / median_ms, pct_of_peak=100 * tflops / peak, cublas_ms=cublas_ms)


def tflops_of(size: Size, milliseconds: float, batch: int = 1) -> float:
    m, n, k = size
    return 2 * batch * m * n * k / (milliseconds * 1e-3) / 1e12


def check_batch(batch: int) -> None:
    if batch < 1:
        raise ValueError(f"batch={batch}: a launch multiplies at least one GEMM")


def format_batched_size(size: Size, batch: int) -> str:
    """`MxNxK`, or `B x MxNxK` for a batch of B GEMMs."""
    return format_size(size) if batch == 1 else f"{batch} x {format_size(size)}"


def matrix_bytes(size: Size, dtype: str = "f32") -> int:
    """Bytes of A, B and C together (C taken as wide as A and B)."""
    m, n, k = size
    return ITEM_SIZES[DTYPE_NAMES[dtype]] * (m * k + k * n + m * n)


def buffer_sets(set_bytes: int, l2_bytes: int) -> int:
    """How many input sets to rotate over so that together they exceed L2_MULTIPLE x the L2."""
    return max(1, math.ceil(L2_MULTIPLE * l2_bytes / set_bytes))


def input_set(arrays: CupyArrays, compared: Comparison, size: Size, batch: int = 1) -> tuple:
    """Row-major A and B (column-major for torch._scaled_mm) of the comparison's input types (an FP8 pairing:
    each its own), and cuBLAS's C (3-D for a batch)."""
    m, n, k = size
    a_dtype, b_dtype = compared.input_dtypes
    a = random_operand(arrays, a_dtype, "row", m, k, batch=batch)
    b = random_operand(arrays, b_dtype, arrays.b_layout, k, n, batch=batch)
    return a, b, arrays.cublas_out(m, n, compared.c_dtype, batch)


def in_layouts(kernel: Kernel, arrays: CupyArrays, operands: tuple) -> tuple:
    """A row-major input set in the kernel's layouts, and a C of the kernel's type: column-major
    operands become column-major copies, so every kernel (and cuBLAS) reads the same values."""
    a, b, cublas_c = operands
    c_dtype = kernel.metadata.get("dtypes", {}).get("c", "f32")
    c = arrays.poisoned(math.prod(cublas_c.shape), c_dtype).reshape(tuple(cublas_c.shape))
    layouts = [kernel.requirements.layouts[name] for name in ("A", "B", "C")]
    return tuple(x if layout == "row" else arrays.column_major(x) for x, layout in zip((a, b, c), layouts))


def time_launches(launches: list[Callable[[], Any]], runs: int, warmup: int) -> list[float]:
    """Milliseconds of each of `runs` launches, rotating over `launches`."""
    return time_interleaved([launches], runs, warmup)[0]


def time_interleaved(groups: list[list[Callable[[], Any]]], runs: int, warmup: int) -> list[list[float]]:
    """Milliseconds of `runs` launches of each group, the groups taking turns launch by launch, so
    that every group runs under the same clocks.

    A group's launches are one per buffer set, and the sequence of launches as a whole walks the
    sets in turn: a set is read again only after every other set has been, whichever group reads
    it, so no launch finds the inputs of the launch before it in L2."""
    import cupy

    def launch(g: int, i: int) -> None:
        launches = groups[g]
        launches[(i * len(groups) + g) % len(launches)]()

    for i in range(warmup):
        for g in range(len(groups)):
            launch(g, i)
    spin(runs * len(groups) * SPIN_NS_PER_RUN)
    events = [[(cupy.cuda.Event(), cupy.cuda.Event()) for _ in groups] for _ in range(runs)]
    for i, round_events in enumerate(events):
        for g, (start, end) in enumerate(round_events):
            start.record()
            launch(g, i)
            end.record()
    events[-1][-1][1].synchronize()
    return [[cupy.cuda.get_elapsed_time(*events[i][g]) for i in range(runs)] for g in range(len(groups))]


def spin(nanoseconds: int) -> None:
    """Occupy the GPU for a while so that the launches enqueued next queue up behind it."""
    raw_kernel(SPIN_SOURCE, "gemmdsl_spin")((1,), (1,), (numpy.uint64(nanoseconds),))


@cache
def raw_kernel(source: str, name: str) -> Any:
    """A helper kernel, compiled once per process."""
    import cupy

    return cupy.RawKernel(source, name)


@cache
def measure_fma_peak(device_id: int, sm_count: int) -> float:
    """FP32 TFLOP/s of dependent-free FMA chains on every SM of the current device (`device_id`); the best of
    a few runs, measured once per process and device: a tuning worker calls bench once per candidate."""
    import cupy

    kernel = raw_kernel(PEAK_SOURCE, "gemmdsl_fma_peak")
    blocks = sm_count * PEAK_BLOCKS_PER_SM
    args = (cupy.zeros(1, dtype=cupy.float32), numpy.int32(PEAK_ITERATIONS), numpy.float32(0.999),
            numpy.float32(0.001))
    best_ms = min(time_launches([partial(kernel, (blocks,), (PEAK_THREADS,), args)], PEAK_RUNS, warmup=1))
    fmas = blocks * PEAK_THREADS * PEAK_ITERATIONS * PEAK_UNROLL * PEAK_CHAINS
    return 2 * fmas / (best_ms * 1e-3) / 1e12


def format_table(report: BenchReport) -> str:
    """The report as a plain-text table, one row per kernel and size, cuBLAS first."""
    width = max(len("kernel"), *(len(row.name) for row in report.rows))
    lines = [
        f"{report.device} | CuPy {report.cupy_version} | measured FP32 FMA peak {report.peak_tflops:.1f} TFLOP/s",
        f"median of {report.runs} timed launches after {report.warmup} warm-up; inputs rotate over `sets` "
        f"buffer sets exceeding {L2_MULTIPLE}x L2;",
        "% cuBLAS against the cuBLAS launches interleaved with the kernel's (their median: cuBLAS ms)",
        "",
        f"{'size':<16} {'kernel':<{width}} {'ms':>9} {'TFLOP/s':>8} {'% cuBLAS':>8} {'cuBLAS ms':>9} {'% peak':>7} "
        f"{'sets':>5}",
    ]
    lines += [format_row(row, width) for row in report.rows]
    return "\n".join(lines)


def format_row(row: Row, width: int) -> str:
    head = f"{format_batched_size((row.m, row.n, row.k), row.batch):<16} {row.name:<{width}}"
    if row.median_ms is None:
        return f"{head} {row.note}"
    return (f"{head} {row.median_ms:>9.3f} {row.tflops:>8.2f} {row.pct_of_cublas:>8.1f} {row.cublas_ms:>9.3f} "
            f"{row.pct_of_peak:>7.1f} {row.buffer_sets:>5}")


def geomean_lines(report: BenchReport) -> list[str]:
    """Per kernel: the geometric mean of its ratios to cuBLAS over the sizes it ran, and its lowest."""
    lines = []
    for name in dict.fromkeys(row.name for row in report.rows if not is_cublas_row(row.name)):
        measured = [row for row in report.rows if row.name == name and row.pct_of_cublas is not None]
        skipped = sum(1 for row in report.rows if row.name == name) - len(measured)
        if not measured:
            lines.append(f"{name}: no size ran")
            continue
        ratios = [row.pct_of_cublas / 100 for row in measured]
        lowest = min(measured, key=lambda row: row.pct_of_cublas)
        line = (f"{name}: geometric mean {statistics.geometric_mean(ratios):.3f}x cuBLAS over {len(measured)} "
                f"sizes, lowest {lowest.pct_of_cublas / 100:.3f}x at "
                f"{format_batched_size((lowest.m, lowest.n, lowest.k), lowest.batch)}")
        lines.append(line + (f" ({skipped} skipped)" if skipped else ""))
    return lines


def write_json(report: BenchReport, path: str | Path) -> None:
    Path(path).write_text(json.dumps(asdict(report), indent=2) + "\n")


def checked_int_argument(check: Callable[[int], None]) -> Callable[[str], int]:
    """An argparse type: an integer that `check` accepts, its ValueError becoming argparse's message."""

    def parse(text: str) -> int:
        try:
            value = int(text)
            check(value)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return value

    return parse


runs_argument = checked_int_argument(check_runs)
batch_argument = checked_int_argument(check_batch)


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("specs", nargs="+", metavar="SPEC", help=inputs_help("bench", "files to compile and time"))
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--sizes", help=f"comma-separated MxNxK problem sizes (default {DEFAULT_SIZES})")
    sizes.add_argument("--shapes", nargs="?", const=str(DEFAULT_SHAPES), metavar="SOURCE",
                       help="the sizes listed in a file, one MxNxK per line; a shipped list by name ("
                            f"{', '.join(named_lists())}: gemmdsl/shapes/NAME.txt); or {RANDOM_PREFIX}COUNT:SEED, "
                            "COUNT shapes drawn log-uniformly (gemmdsl/shape_sets.py). Without SOURCE: default, "
                            "the awkward shapes and the usual sizes")
    parser.add_argument("--runs", type=runs_argument, default=MIN_RUNS,
                        help=f"timed launches per kernel and size, median reported (default and minimum {MIN_RUNS})")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP,
                        help=f"untimed launches first (default {DEFAULT_WARMUP})")
    parser.add_argument("--seed", type=int, default=0, help="random seed for the inputs (default 0)")
    parser.add_argument("--batch", type=batch_argument, default=1, metavar="B",
                        help="B GEMMs of each size per launch, for batched specs (`batch: strided`), against "
                             "cuBLAS's strided-batched GEMM; specs without a batch are skipped (default 1)")
    parser.add_argument("--json", metavar="FILE", help="also write the report to FILE as JSON")


def bench_main(args: argparse.Namespace) -> int:
    """`gemmdsl bench`: prints the table; 1 on a compile error, 2 on bad sizes or without a GPU.

    runs and warmup fall back to their defaults for a Namespace built without add_bench_arguments.
    """
    sizes_text = args.sizes or DEFAULT_SIZES
    if getattr(args, "shapes", None):
        try:
            source = shape_source(args.shapes)
            shapes = source.shapes() if isinstance(source, RandomShapes) else read_shapes(source)
            sizes_text = ",".join(map(format_size, shapes))
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    work = partial(bench_and_report, runs=getattr(args, "runs", MIN_RUNS),
                   warmup=getattr(args, "warmup", DEFAULT_WARMUP), seed=args.seed, json_path=args.json,
                   batch=getattr(args, "batch", 1))
    return run_on_specs_and_families(args.specs, sizes_text, work)


def bench_and_report(kernels: list[Kernel], sizes: list[Size], runs: int, warmup: int, seed: int,
                     json_path: str | None, batch: int = 1) -> int:
    for kernel in kernels:
        if kernel.requirements.grouped:  # its own configurations and references (grouped_bench.py)
            print("\n".join(bench_grouped(kernel, runs, warmup, seed)))
            print()
    quantized = [kernel for kernel in kernels if "quant" in kernel.metadata]  # packed weights (quant_bench.py)
    kernels = [kernel for kernel in kernels if not kernel.requirements.grouped and kernel not in quantized]
    record, status = {}, 0
    if quantized:
        try:
            quantized_report = bench_quantized(quantized, sizes, runs, warmup, seed,
                                               Progress(len(quantized) * len(sizes)))
        except GpuUnavailable as err:  # no PyTorch
            print(f"error: {err}", file=sys.stderr)
            status = 2
        else:
            print(format_quantized_table(quantized_report))
            print()
            print("\n".join(geomean_lines(quantized_report)))
            record["quantized"] = asdict(quantized_report)
    if kernels:
        report = bench(kernels, sizes, runs=runs, warmup=warmup, seed=seed, batch=batch)
        print(format_table(report))
        print()
        print("\n".join(geomean_lines(report)))
        record = {**asdict(report), **record}
    if json_path and record:
        Path(json_path).write_text(json.dumps(record, indent=2) + "\n")
    return status

"""`gemmdsl bench` for dequantizing specs (paths/dequant; bench.py hands them over), and the timing
scripts/quant_bench.py uses: the kernel beside BF16 (FP16) cuBLAS on the dequantized weight and, where the format
is one it takes, torch._weight_int4pack_mm, in one process.

Method, and why:
- The weight: a random N x K weight quantized in the spec's format and packed (quant_operands.draw_weight), made
  once per N x K and kept for every M; cuBLAS multiplies its dequantization rounded to A's type
  (torch.matmul(a, w.T), C in A's type), torch._weight_int4pack_mm its codes and scales in its own packing.
- A decode call lasts a few microseconds, about what the host needs to launch it: each contender is captured in
  a CUDA graph of at least REPEATS launches (after `warmup` untimed ones) and timed with CUDA events around a
  replay, so the host's launch cost is not timed.
- Each graph cycles through copies of its weights that together hold ROTATE_L2 times the L2 (one launch per
  copy at least, MAX_COPIES at most), so no launch finds its weights in L2 from the one before: a 32 MB int4
  weight of 8192 x 8192 fits the H200's 50 MB L2, and a caller's next layer reads another weight.
- The contenders' graphs are replayed in turn, `runs` rounds, so that all run under the same clocks; each
  reports the median of its rounds per launch.
- GB/s counts the bytes each contender must move: the kernel its packed weights, scales and zero points
  (quant_layout.packed_bytes), A and C; cuBLAS its 16-bit weight, A and C; torch._weight_int4pack_mm its packed
  codes and scale-and-zero table, A and C. A decode call is bound by them.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from .precisions import comparison
from .quant_layout import CODE_BIAS, QuantFormat, packed_bytes
from .quant_operands import draw_weight
from .quant_reference import rounded_weight
from .quantize import QuantizeError
from .ir import DType
from .runtime.commands import format_size
from .runtime.environment import GpuUnavailable
from .runtime.operands import Size
from .verify import CupyArrays, arrays_for, device_packed

REPEATS = 20  # launches per graph at least
ROTATE_L2 = 3  # a graph's weight copies hold at least this many L2s
MAX_COPIES = 256  # of a weight so small that ROTATE_L2 L2s would take more (it then stays partly in L2)
INT4PACK = "torch._weight_int4pack_mm"
INT4PACK_GROUPS = (32, 64, 128, 256)
INT4PACK_MIDDLE = 8  # its weight is (code - 8) * scale + zero
INT4PACK_ERRORS = (RuntimeError, AttributeError, NotImplementedError)  # a PyTorch or GPU without it


def int4pack_refusal(fmt: QuantFormat) -> str:
    """Why torch._weight_int4pack_mm cannot multiply `fmt` ('' when it can): 4-bit codes against bf16, in groups."""
    if fmt.bits != 4 or fmt.activation != "bf16" or fmt.group not in INT4PACK_GROUPS:
        return (f"{INT4PACK} takes 4-bit codes against bf16 in groups of {', '.join(map(str, INT4PACK_GROUPS))}, not "
                f"{fmt.weight} against {fmt.activation} {f'in groups of {fmt.group}' if fmt.group else 'per channel'}")
    return ""


def int4pack_codes(weight: Any, fmt: QuantFormat) -> tuple[np.ndarray, np.ndarray]:
    """torch._weight_int4pack_mm's codes (int32 0..15, N x K) and zeros (N x G) for `weight` (quantize.Canonical):
    (code - 8) * scale + zero is the dequantized weight (q - zero point) * scale."""
    bias = CODE_BIAS[fmt.weight]
    points = 0.0 if weight.zeros is None else weight.zeros.astype(np.float64)
    return weight.q.astype(np.int32) + bias, (INT4PACK_MIDDLE - bias - points) * weight.scales


class TorchGpu:
    """What bench asks of PyTorch beyond verify's arrays: the GPU's name and L2, the baselines' calls, the weight
    copies and the graphs' timing. GpuUnavailable without PyTorch."""

    def __init__(self):
        try:
            import torch
        except ImportError as err:
            raise GpuUnavailable(f"PyTorch is not installed ({err}); bench of a dequantizing spec times it in CUDA "
                                 "graphs beside cuBLAS through it: pip install torch") from None
        self.torch = torch
        self.name = torch.cuda.get_device_name()
        self.version = torch.__version__
        self.l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size

    def copies(self, nbytes: int) -> int:
        """How many copies of `nbytes` hold ROTATE_L2 L2s (at least one, at most MAX_COPIES)."""
        return min(MAX_COPIES, max(1, -(-ROTATE_L2 * self.l2_bytes // max(1, nbytes))))

    def copied(self, x: Any, nbytes: int) -> list:
        return [x] + [x.clone() for _ in range(self.copies(nbytes) - 1)]

    def matmul(self, a: Any, w: Any) -> Callable[[], Any]:
        return lambda: self.torch.matmul(a, w.T)

    def int4pack(self, weight: Any, fmt: QuantFormat) -> list[tuple[Any, Any]]:
        """torch._weight_int4pack_mm's operands for `weight` (quantize.Canonical), one per copy: its packing (uint8
        pairs, even k in the high nibble, of codes 0..15) and its table [G, N, 2] of scale and zero, with the
        zero that makes (code - 8) * scale + zero = (q - zero point) * scale."""
        torch = self.torch
        host_codes, zero = int4pack_codes(weight, fmt)
        codes = torch.from_numpy(host_codes).cuda()
        pairs = (codes[:, ::2] << 4 | codes[:, 1::2]).to(torch.uint8)
        try:
            packed = torch._convert_weight_to_int4pack(pairs, 8)
        except RuntimeError:  # releases before 2.5 take the int32 codes
            packed = torch._convert_weight_to_int4pack(codes, 8)
        table = torch.zeros(weight.scales.shape[1], weight.scales.shape[0], 2, dtype=torch.bfloat16, device="cuda")
        for column, values in enumerate((weight.scales, zero)):
            table[:, :, column] = torch.from_numpy(np.ascontiguousarray(values.T, dtype=np.float32)).cuda()
        nbytes = packed.numel() * packed.element_size() + table.numel() * table.element_size()
        return [(packed, table)] + [(packed.clone(), table.clone()) for _ in range(self.copies(nbytes) - 1)]

    def int4pack_call(self, a: Any, operands: tuple[Any, Any], group: int) -> Callable[[], Any]:
        return lambda: self.torch._weight_int4pack_mm(a, operands[0], group, operands[1])

    def time(self, launch_sets: list[list[Callable[[], Any]]], runs: int, warmup: int) -> list[float]:
        """Median seconds per launch of each set (see the module's docstring): a CUDA graph per set of at least
        REPEATS launches cycling through the set (one per weight copy), the graphs replayed in turn, `runs`
        rounds. Replayed on the stream the events are recorded on; a kernel launch follows torch's stream."""
        torch = self.torch
        stream = torch.cuda.Stream()
        graphs = []
        with torch.cuda.stream(stream):
            for launches in launch_sets:
                for i in range(max(1, warmup)):  # cuBLAS sets up its workspace before a capture
                    launches[i % len(launches)]()
                torch.cuda.synchronize()
                graph, length = torch.cuda.CUDAGraph(), max(REPEATS, len(launches))
                with torch.cuda.graph(graph, stream=stream):
                    for i in range(length):
                        launches[i % len(launches)]()
                graphs.append((graph, length))
            seconds: list[list[float]] = [[] for _ in graphs]
            for _ in range(runs):
                for (graph, length), kept in zip(graphs, seconds):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record(stream)
                    graph.replay()
                    end.record(stream)
                    end.synchronize()
                    kept.append(start.elapsed_time(end) / 1e3 / length)
        return [statistics.median(kept) for kept in seconds]


@dataclass
class Weights:
    """One N x K weight on the GPU, made once for every M: the kernel's packed arrays, the dequantized weight in A's
    type (cuBLAS's) and torch._weight_int4pack_mm's operands, each as copies (TorchGpu.copies); `int4pack_note`
    says why there are none of the last."""

    fmt: QuantFormat
    n: int
    k: int
    packed: list[dict[str, Any]]
    dense: list[Any]
    int4pack: list[tuple[Any, Any]]
    int4pack_note: str = ""


def weights_for(gpu: TorchGpu, arrays: CupyArrays, fmt: QuantFormat, weight: Any) -> Weights:
    """`weight` (a quantize.Canonical of N x K) packed, dequantized and in torch's int4 packing, in copies."""
    n, k = weight.q.shape
    packed = [device_packed(arrays, weight, fmt) for _ in range(gpu.copies(packed_bytes(n, k, fmt)))]
    rounded = (rounded_weight(weight.q, weight.scales, weight.zeros, weight.group, DType(fmt.activation))
               if fmt.scaled else weight.q)  # 16-bit weights are their own
    dense = gpu.copied(arrays.device_as(rounded.astype(np.float32), fmt.activation), 2 * n * k)
    note, int4pack = int4pack_refusal(fmt), []
    if not note:
        try:
            int4pack = gpu.int4pack(weight, fmt)
        except INT4PACK_ERRORS as err:
            note = f"{INT4PACK}: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
    return Weights(fmt, n, k, packed, dense, int4pack, note)


@dataclass(frozen=True)
class Timing:
    """Seconds per launch: the kernel, cuBLAS on the dequantized weight, torch._weight_int4pack_mm (None: not
    timed)."""

    ours: float
    cublas: float
    int4pack: float | None


def time_call(kernel: Any, gpu: TorchGpu, arrays: CupyArrays, weights: Weights, m: int, runs: int,
              warmup: int) -> Timing:
    """The kernel at M x N x K on the weight's copies (each bound once: operands checked, the split-K workspace
    kept), beside the baselines on the same A. ValueError where the kernel refuses the call."""
    fmt, c_dtype = weights.fmt, kernel.metadata["dtypes"]["c"]
    a = arrays.random(m * weights.k, fmt.activation).reshape(m, weights.k)
    c = arrays.poisoned(m * weights.n, c_dtype).reshape(m, weights.n)
    sets = [[kernel.bind(a, packed, c) for packed in weights.packed], [gpu.matmul(a, w) for w in weights.dense]]
    if weights.int4pack:
        sets.append([gpu.int4pack_call(a, operands, fmt.group) for operands in weights.int4pack])
    ours, cublas, *int4pack = gpu.time(sets, runs, warmup)
    return Timing(ours, cublas, int4pack[0] if int4pack else None)


@dataclass(frozen=True)
class QuantRow:
    """One contender at one size; the figures are None when the kernel was skipped."""

    batch: ClassVar[int] = 1  # one GEMM per launch (bench.geomean_lines reads it)
    name: str
    m: int
    n: int
    k: int
    weight_copies: int = 0
    median_us: float | None = None
    tflops: float | None = None
    gbs: float | None = None  # the bytes it must move (the module's docstring), per second
    pct_of_cublas: float | None = None  # cuBLAS's time over its own, in percent
    pct_of_int4pack: float | None = None
    note: str = ""


def moved_bytes(fmt: QuantFormat, c_dtype: str, m: int, n: int, k: int) -> dict[str, int]:
    """The bytes each contender must read and write at M x N x K (A and C of 2 bytes, the kernel's C of its
    type)."""
    edges = 2 * m * k + 2 * m * n
    found = {"ours": packed_bytes(n, k, fmt) + 2 * m * k + m * n * (4 if c_dtype == "f32" else 2),
             "cublas": 2 * n * k + edges}
    if fmt.group:
        found["int4pack"] = n * k // 2 + 4 * n * fmt.groups(k) + edges
    return found


def timed_rows(kernel_name: str, cublas_name: str, fmt: QuantFormat, c_dtype: str, size: Size, copies: int,
               timing: Timing, int4pack_note: str) -> list[QuantRow]:
    """cuBLAS's row, torch._weight_int4pack_mm's where it ran, and the kernel's, its ratios to both."""
    m, n, k = size
    moved = moved_bytes(fmt, c_dtype, m, n, k)

    def row(name: str, key: str, seconds: float, **extra: Any) -> QuantRow:
        return QuantRow(name, m, n, k, copies, median_us=seconds * 1e6, tflops=2 * m * n * k / seconds / 1e12,
                        gbs=moved[key] / seconds / 1e9, pct_of_cublas=100 * timing.cublas / seconds, **extra)

    rows = [row(cublas_name, "cublas", timing.cublas)]
    if timing.int4pack is not None:
        rows.append(row(INT4PACK, "int4pack", timing.int4pack))
    rows.append(row(kernel_name, "ours", timing.ours, note=int4pack_note,
                    pct_of_int4pack=None if timing.int4pack is None else 100 * timing.int4pack / timing.ours))
    return rows


@dataclass(frozen=True)
class QuantBenchReport:
    device: str
    torch_version: str
    runs: int
    warmup: int
    rows: list[QuantRow]


def bench_quantized(kernels: list[Any], sizes: list[Size], runs: int, warmup: int, seed: int, progress: Any,
                    gpu: TorchGpu | None = None) -> QuantBenchReport:
    """Time every dequantizing kernel at every size (the module's docstring); a size the kernel refuses is a row
    with a note. GpuUnavailable without PyTorch."""
    gpu = gpu or TorchGpu()
    rows: list[QuantRow] = []
    for kernel in kernels:
        compared = comparison(kernel.metadata)
        arrays, rng = arrays_for(compared, seed), np.random.default_rng(seed)
        cublas_name = f"cuBLAS {compared.cublas}"
        weights: Weights | None = None
        for size in sizes:
            m, n, k = size
            progress.start(f"{kernel.name} at {format_size(size)}")
            if k % kernel.k_multiple:
                rows.append(QuantRow(kernel.name, m, n, k, note=f"skipped: refused: K = {k} is not a multiple of "
                                                                f"{kernel.k_multiple}"))
                continue
            try:
                if weights is None or (weights.n, weights.k) != (n, k):
                    weights = None  # the last size's copies are freed before this one's are made
                    weights = weights_for(gpu, arrays, kernel.format, draw_weight(rng, kernel.format, n, k))
                timing = time_call(kernel, gpu, arrays, weights, m, runs, warmup)
            except (QuantizeError, ValueError) as err:
                rows.append(QuantRow(kernel.name, m, n, k, note=f"skipped: {err}"))
                continue
            rows += timed_rows(kernel.name, cublas_name, kernel.format, kernel.metadata["dtypes"]["c"], size,
                               len(weights.packed), timing, weights.int4pack_note)
    progress.finish()
    return QuantBenchReport(gpu.name, gpu.version, runs, warmup, rows)


def format_quantized_table(report: QuantBenchReport) -> str:
    """The report as a plain-text table, per size cuBLAS first, then torch._weight_int4pack_mm, then the kernel."""
    width = max(len("kernel"), *(len(row.name) for row in report.rows))
    lines = [f"{report.device} | PyTorch {report.torch_version} | dequantizing kernels",
             f"median of {report.runs} rounds, each a CUDA graph of at least {REPEATS} launches per contender "
             f"(after {report.warmup} warm-up), replayed in turn; each graph cycles through `copies` of its weights "
             f"holding {ROTATE_L2}x L2;",
             "GB/s: the bytes each must move (the kernel: its packed weights, scales and zero points, A and C); "
             "% cuBLAS and % int4pack: their times over the kernel's",
             "",
             f"{'size':<16} {'kernel':<{width}} {'us':>9} {'TFLOP/s':>8} {'GB/s':>7} {'% cuBLAS':>8} "
             f"{'% int4pack':>10} {'copies':>6}"]
    for row in report.rows:
        head = f"{format_size((row.m, row.n, row.k)):<16} {row.name:<{width}}"
        if row.median_us is None:
            lines.append(f"{head} {row.note}")
            continue
        int4pack = "-" if row.pct_of_int4pack is None else f"{row.pct_of_int4pack:.1f}"
        lines.append(f"{head} {row.median_us:>9.2f} {row.tflops:>8.2f} {row.gbs:>7.0f} {row.pct_of_cublas:>8.1f} "
                     f"{int4pack:>10} {row.weight_copies:>6}" + (f"  ({row.note})" if row.note else ""))
    return "\n".join(lines)

"""`gemmdsl verify` and `gemmdsl bench` for `batch: grouped` specs (verify.py and bench.py hand them over):
mixtures of experts' group sizes, checked against float64 and timed against PyTorch's grouped GEMM and a loop of
its per-group GEMMs, at the kernel's precision (the device's torch; the kernel takes its tensors). One path for
16-bit and FP8 kernels, parametrized by the kernel's types and fuse chain (GroupedTypes):

| operands | grouped GEMM | per group |
| --- | --- | --- |
| bf16 / f16 | torch._grouped_mm | torch.mm |
| e4m3 / e5m2 | torch._scaled_grouped_mm (scale_a (M,), scale_b (G, N)) | torch._scaled_mm (rowwise: (m_g, 1), (1, N)) |

verify: for each case, random A (M x K) and B (G x N x K for `b: col`) in the operands' types (random normal
values rounded to them), positive random scales where the chain takes them (row_scale (M,), col_scale (G, N)),
C poisoned with NaN, one call; the groups' rows must match the float64 product of the very values the kernel
read (FP8 values and f32 scales are exact in float64) within `allowed_error`, and the rows after the last group
must still be NaN. The cases: odd group sizes with empty groups, a single group, every group empty, K = 0, each
K rounded up to TMA's 16-byte rows of A and B (`cases_for`).

bench: four configurations (CONFIGURATIONS). Each timing is the median of `runs` samples, a sample being CUDA
events around `LAUNCHES` back-to-back launches after `warmup` untimed ones; the contenders are sampled in turn
in one process, so clocks and L2 state drift alike for all. FP8's grouped contender is timed where this PyTorch
runs torch._scaled_grouped_mm on this GPU (one small trial call decides), else the loop is the yardstick.
"""
from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, replace
from functools import cache, partial
from typing import Any, Callable

import numpy as np

from .arrays import ITEM_SIZES
from .fuse_operands import FuseOperands
from .fuse_reference import apply_chain
from .grouped_schedule import group_rows
from .precisions import Comparison, comparison

LAUNCHES = 10
TMA_ROW_BYTES = 16  # a TMA map's rows (A's and B's K extent) are multiples of 16 bytes
LIBRARY_MULTIPLE = 16  # torch._scaled_grouped_mm takes K and N in multiples of 16
SCALES = (0.25, 1.75)  # positive, as quantization scales are
# What a PyTorch without an FP8 grouped GEMM on this GPU raises (a missing op, a refused architecture or shape).
LIBRARY_ERRORS = (RuntimeError, ValueError, TypeError, NotImplementedError, AttributeError)
# (name, experts, tokens, N, K, sizes): "even" splits the tokens equally, "skewed" draws them (group_sizes),
# "empty" also leaves every seventh expert without tokens.
CONFIGURATIONS = (("8 experts, even", 8, 16384, 4096, 4096, "even"),
                  ("8 experts, skewed", 8, 16384, 4096, 4096, "skewed"),
                  ("64 experts, some empty", 64, 32768, 2048, 4096, "empty"),
                  ("8 experts, 64 tokens", 8, 64, 4096, 4096, "skewed"))  # a decode step: reading B is the time


def group_sizes(groups: int, tokens: int, seed: int, split: str) -> list[int]:
    """Deterministic group sizes summing to `tokens`: equal for "even"; otherwise uneven (a router's skew),
    none a multiple of 128 unless by chance, and for "empty" every seventh group gets no tokens."""
    if split == "even":
        return [tokens // groups + (g < tokens % groups) for g in range(groups)]
    empty = split == "empty"
    rng = random.Random(seed)
    weights = [0.0 if empty and g % 7 == 3 else rng.uniform(0.2, 1.8) for g in range(groups)]
    total = sum(weights)
    sizes = [int(tokens * w / total) for w in weights]
    live = [g for g in range(groups) if weights[g] > 0]
    sizes[live[-1]] += tokens - sum(sizes)
    return sizes


VERIFY_GROUPS = (4, 9)  # gemmdsl.verify's group counts on a grouped spec: drawn from this range


def verify_group_ends(rows: int, seed: int) -> list[int]:
    """offs for `verify` on a grouped spec at M = rows (the group count is B's first dimension): VERIFY_GROUPS
    groups drawn from `seed`, each row in one group, sizes split at random points (uneven, mostly off any tile),
    an empty group between others and at times an empty first or last group; as cumulative row ends."""
    rng = random.Random(seed)
    groups = rng.randint(*VERIFY_GROUPS)
    empty = {rng.randrange(1, groups - 1)} | {g for g in (0, groups - 1) if rng.random() < 0.3}
    live = [g for g in range(groups) if g not in empty]
    cuts = sorted(rng.randint(0, rows) for _ in live[1:])
    sizes = dict.fromkeys(range(groups), 0)
    for g, start, end in zip(live, [0] + cuts, cuts + [rows]):
        sizes[g] = end - start
    return cumulative(list(sizes.values()))


def cumulative(sizes: list[int]) -> list[int]:
    ends, end = [], 0
    for size in sizes:
        end += size
        ends.append(end)
    return ends


@dataclass(frozen=True)
class GroupedCase:
    name: str
    sizes: tuple[int, ...]
    n: int
    k: int
    spare_rows: int  # rows of A and C after the last group (C's must stay untouched)


VERIFY_CASES = (
    GroupedCase("odd sizes, empty groups", (0, 1, 127, 129, 0, 300, 5, 0), 264, 200, 37),
    GroupedCase("one group", (515,), 520, 136, 0),
    GroupedCase("every group empty", (0, 0, 0), 256, 64, 19),
    GroupedCase("K = 0", (3, 0, 130), 264, 0, 5),
)


def cases_for(itemsize: int) -> tuple[GroupedCase, ...]:
    """VERIFY_CASES with each K rounded up to TMA's 16-byte rows of A and B for operands of `itemsize` bytes
    (8 16-bit elements, 16 FP8 ones): the kernel's maps, and torch's FP8 GEMMs, take no other K."""
    multiple = TMA_ROW_BYTES // itemsize
    return tuple(replace(case, k=-(-case.k // multiple) * multiple) for case in VERIFY_CASES)


@dataclass(frozen=True)
class GroupedTypes:
    """A grouped kernel's operands as PyTorch makes them (torch dtype names), the chain's scales its call takes,
    and PyTorch's GEMMs at its precision."""

    a: str
    b: str
    c: str
    scales: tuple[str, ...]  # "row_scale" (one per row of A), "col_scale" (G x N): fuse { scale: ...; }
    b_col: bool
    fast_accumulation: bool = False  # FP8: torch's use_fast_accum, as the kernel's `accumulate`

    @classmethod
    def of(cls, kernel: Any) -> "GroupedTypes":
        """From what a Kernel and a FamilyKernel both have: requirements and metadata."""
        dtypes = kernel.requirements.dtypes
        fuse = FuseOperands.from_metadata(kernel.metadata)
        return cls(dtypes["A"], dtypes["B"], dtypes["C"], fuse.names if fuse else (),
                   kernel.requirements.layouts["B"] == "col", comparison(kernel.metadata).fast_accumulation)

    @property
    def scaled(self) -> bool:
        """Whether torch multiplies these operands only through its scaled matmuls (FP8 A and B)."""
        return self.a.startswith("float8")

    @property
    def grouped_name(self) -> str:
        return "torch._scaled_grouped_mm" if self.scaled else "torch._grouped_mm"

    @property
    def loop_name(self) -> str:
        return f"torch.{'_scaled_mm' if self.scaled else 'mm'} per group"


def scale_shapes(names: tuple[str, ...], rows: int, groups: int, n: int) -> dict[str, tuple[int, ...]]:
    """The chain's scales a grouped call passes: row_scale one per row of A, col_scale a row of N per group
    (torch._scaled_grouped_mm's scale_a and scale_b)."""
    shapes = {"row_scale": (rows,), "col_scale": (groups, n)}
    return {name: shapes[name] for name in names}


@dataclass(frozen=True)
class GroupedOperands:
    a: Any  # M x K
    mat_b: Any  # G x K x N, as torch._grouped_mm and the kernel take B (`b: col`: the view w.mT of G x N x K)
    offs: Any
    scales: dict[str, Any]  # the kernel's keyword arguments
    scale_a: Any = None  # FP8: torch's scales, the kernel's or ones where its chain has none
    scale_b: Any = None


def make_operands(torch: Any, types: GroupedTypes, case: GroupedCase, seed: int) -> GroupedOperands:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    rows = sum(case.sizes) + case.spare_rows
    groups = len(case.sizes)

    def normal(*shape: int, dtype: str) -> Any:
        return torch.randn(*shape, device="cuda", generator=generator).to(getattr(torch, dtype))

    a = normal(rows, case.k, dtype=types.a)
    b = normal(*((groups, case.n, case.k) if types.b_col else (groups, case.k, case.n)), dtype=types.b)
    offs = torch.tensor(cumulative(list(case.sizes)), dtype=torch.int32, device="cuda")
    low, high = SCALES
    scales = {name: torch.rand(*shape, device="cuda", generator=generator) * (high - low) + low
              for name, shape in scale_shapes(types.scales, rows, groups, case.n).items()}
    operands = GroupedOperands(a, b.mT if types.b_col else b, offs, scales)
    if not types.scaled:
        return operands
    return replace(operands, scale_a=scales.get("row_scale", torch.ones(rows, device="cuda")),
                   scale_b=scales.get("col_scale", torch.ones(groups, case.n, device="cuda")))


def float64_host(x: Any) -> np.ndarray:
    return x.double().cpu().numpy()


def reference(a: Any, mat_b: Any, offs: list[int], rows: int, fuse: dict | None = None, row_scale: Any = None,
              col_scale: Any = None) -> np.ndarray:
    """float64 C (NumPy): each group's rows of A times its K x N matrix of `mat_b`, then the fuse chain
    (fuse_reference.apply_chain) with the group's rows of row_scale and its row of col_scale; the rows after
    the last group NaN, which the kernel must leave. Scaling the product by row and column is scaling the
    operands first: C is the product of the dequantized operands."""
    a, mat_b = np.asarray(a, dtype=np.float64), np.asarray(mat_b, dtype=np.float64)
    c = np.full((rows, mat_b.shape[2]), np.nan)
    for g, (start, end) in enumerate(group_rows(list(offs), rows)):
        product = a[start:end] @ mat_b[g]
        c[start:end] = product if fuse is None else apply_chain(
            fuse, product, row_scale=None if row_scale is None else np.asarray(row_scale)[start:end],
            col_scale=None if col_scale is None else np.asarray(col_scale)[g])
    return c


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """||actual - expected||_F / ||expected||_F, or the absolute norm where `expected` is zero (K = 0, no rows:
    C must be exactly zero); NaN where `actual` has a non-finite value."""
    scale = float(np.linalg.norm(expected))
    return float(np.linalg.norm(actual - expected)) / (scale or 1.0)


def allowed_error(compared: Comparison, library_error: float | None) -> float:
    """The largest relative error that passes. FP8: precisions.FP8_FACTOR times torch._scaled_grouped_mm's
    error on the same operands where it ran (both round to BF16, which dominates). Otherwise (16-bit operands;
    no FP8 grouped GEMM in this PyTorch on this GPU; a product that is zero or empty) the rule of 16-bit inputs
    (precisions.py): the reference multiplies the very values the kernel read exactly, so what is left is f32
    accumulation (FMA_TOLERANCE; FP8's promoted every 128 products) plus rounding C to its type, which its unit
    roundoff bounds element by element (2^-8 for BF16)."""
    if compared.relative_to_cublas and library_error is not None:
        return compared.tolerance(compared.c_dtype, library_error)
    return replace(compared, relative_to_cublas=False).tolerance(compared.c_dtype, None)


@dataclass(frozen=True)
class CaseCheck:
    error: float  # relative to float64 over the groups' rows
    finite: bool  # every value of the groups' rows
    untouched: bool  # the rows after the last group are still NaN
    tolerance: float

    @property
    def failures(self) -> list[str]:
        return [why for why, bad in (("non-finite values in the groups' rows", not self.finite),
                                     ("rows after the last group were written", not self.untouched),
                                     (f"error {self.error:.2e} over {self.tolerance:.1e}",
                                      self.finite and not self.error <= self.tolerance)) if bad]

    @property
    def passed(self) -> bool:
        return not self.failures


def check_case(got: np.ndarray, expected: np.ndarray, grouped_rows: int, tolerance: float) -> CaseCheck:
    """C as the kernel left it (float64 on the host) against `reference`."""
    groups_part = got[:grouped_rows]
    return CaseCheck(error=relative_error(groups_part, expected[:grouped_rows]),
                     finite=bool(np.isfinite(groups_part).all()), untouched=bool(np.isnan(got[grouped_rows:]).all()),
                     tolerance=tolerance)


@cache
def scaled_grouped_mm_runs(torch: Any) -> bool:
    """Whether this PyTorch runs torch._scaled_grouped_mm on this GPU (sm_90 and 10.x, PyTorch 2.8 on): one
    16 x 16 x 16 call, as verify.ScaledMmArrays decides on torch._scaled_mm's blockwise mode."""
    ones = torch.ones(16, 16, device="cuda").to(torch.float8_e4m3fn)
    try:
        torch._scaled_grouped_mm(ones, ones[None].mT, torch.ones(16, device="cuda"), torch.ones(1, 16, device="cuda"),
                                 offs=torch.tensor([16], dtype=torch.int32, device="cuda"), out_dtype=torch.bfloat16)
    except LIBRARY_ERRORS:
        return False
    return True


def library_grouped(torch: Any, types: GroupedTypes, operands: GroupedOperands) -> Any:
    """PyTorch's grouped GEMM at the kernel's precision, C in the kernel's type."""
    out = getattr(torch, types.c)
    if types.scaled:
        return torch._scaled_grouped_mm(operands.a, operands.mat_b, operands.scale_a, operands.scale_b,
                                        offs=operands.offs, out_dtype=out, use_fast_accum=types.fast_accumulation)
    return torch._grouped_mm(operands.a, operands.mat_b, offs=operands.offs, out_dtype=out)


def library_error(torch: Any, types: GroupedTypes, operands: GroupedOperands, grouped_rows: int,
                  expected: np.ndarray) -> float | None:
    """torch._scaled_grouped_mm's error on the groups' rows (None where it refuses the case). It takes N in
    multiples of 16 and A's rows up to the groups' end: B gets zero columns and scale_b ones, cut off after."""
    n = operands.mat_b.shape[2]
    weights = operands.mat_b.mT  # G x N x K
    groups, _, k = weights.shape
    padded = torch.zeros(groups, n + -n % LIBRARY_MULTIPLE, k, device="cuda").to(weights.dtype)
    padded[:, :n] = weights
    scale_b = torch.ones(groups, padded.shape[1], device="cuda")
    scale_b[:, :n] = operands.scale_b
    trimmed = replace(operands, a=operands.a[:grouped_rows], mat_b=padded.mT, scale_a=operands.scale_a[:grouped_rows],
                      scale_b=scale_b)
    try:
        theirs = library_grouped(torch, types, trimmed)
    except LIBRARY_ERRORS:
        return None
    return relative_error(float64_host(theirs[:grouped_rows, :n]), expected[:grouped_rows])


def verify_grouped(kernel: Any, seed: int = 0) -> tuple[int, int]:
    """(cases passed, cases run), printing a line per case."""
    import torch

    types = GroupedTypes.of(kernel)
    compared = comparison(kernel.metadata)
    fuse = kernel.metadata.get("fuse")
    # torch._scaled_grouped_mm scales but has no activation: a chain with one is held to C's rounding
    library = (types.scaled and compared.relative_to_cublas and not (fuse or {}).get("activation")
               and scaled_grouped_mm_runs(torch))
    cases = cases_for(ITEM_SIZES[types.a])
    passed = 0
    for index, case in enumerate(cases):
        operands = make_operands(torch, types, case, seed + index)
        rows, grouped_rows = operands.a.shape[0], sum(case.sizes)
        c = torch.full((rows, case.n), float("nan"), dtype=getattr(torch, types.c), device="cuda")
        kernel(operands.a, operands.mat_b, c, offs=operands.offs, **operands.scales)
        torch.cuda.synchronize()
        expected = reference(float64_host(operands.a), float64_host(operands.mat_b), operands.offs.tolist(), rows, fuse,
                             **{name: float64_host(value) for name, value in operands.scales.items()})
        nontrivial = grouped_rows and case.k  # else C's rows are zero or none: nothing to compare
        theirs = library_error(torch, types, operands, grouped_rows, expected) if library and nontrivial else None
        check = check_case(float64_host(c), expected, grouped_rows, allowed_error(compared, theirs))
        passed += check.passed
        failures = check.failures
        print(f"{'PASS' if check.passed else 'FAIL'}  {kernel.name:<20} {case.name:<26} groups {list(case.sizes)} "
              f"N={case.n} K={case.k}  vs f64 {check.error:.2e}"
              + (f" ({types.grouped_name} {theirs:.2e})" if theirs is not None else "")
              + (f"  -- {'; '.join(failures)}" if failures else ""), flush=True)
    return passed, len(cases)


def per_group_calls(torch: Any, types: GroupedTypes, operands: GroupedOperands, out: Any) -> list[Callable[[], Any]]:
    """The loop contender: one GEMM per non-empty group at the kernel's precision, arguments made beforehand
    (FP8: rowwise scales scale_a (m_g, 1) and scale_b (1, N), f32, B column-major; torch._scaled_mm writes a C
    of its own from the caching allocator)."""
    calls = []
    for g, (start, end) in enumerate(group_rows(operands.offs.tolist(), operands.a.shape[0])):
        if end == start:
            continue
        a, b = operands.a[start:end], operands.mat_b[g]
        if types.scaled:
            calls.append(partial(torch._scaled_mm, a, b, scale_a=operands.scale_a[start:end].reshape(-1, 1).clone(),
                                 scale_b=operands.scale_b[g].reshape(1, -1).clone(), out_dtype=out.dtype,
                                 use_fast_accum=types.fast_accumulation))
        else:
            calls.append(partial(torch.mm, a, b, out=out[start:end]))
    return calls


def bench_grouped(kernel: Any, runs: int, warmup: int, seed: int) -> list[str]:
    """The table's lines: per configuration, ms and TFLOP/s of the kernel, PyTorch's grouped GEMM (where it
    runs) and the loop, and the speed relative to the grouped GEMM (else to the loop)."""
    import torch

    types = GroupedTypes.of(kernel)
    library = not types.scaled or scaled_grouped_mm_runs(torch)
    baseline = types.grouped_name if library else types.loop_name
    ratio_width = len(baseline) + 4  # " vs NAME"
    lines = [f"{'configuration':<24} {'contender':<26} {'ms':>9} {'TFLOP/s':>8} {'vs ' + baseline:>{ratio_width}}"]
    for index, (name, groups, tokens, n, k, split) in enumerate(CONFIGURATIONS):
        sizes = group_sizes(groups, tokens, seed + index, split)
        operands = make_operands(torch, types, GroupedCase(name, tuple(sizes), n, k, 0), seed)
        c = torch.empty(tokens, n, dtype=getattr(torch, types.c), device="cuda")
        loop_calls = per_group_calls(torch, types, operands, torch.empty_like(c))

        def ours():
            kernel(operands.a, operands.mat_b, c, offs=operands.offs, **operands.scales)

        def loop():
            for call in loop_calls:
                call()

        contenders = {"gemmdsl " + kernel.name: ours}
        if library:
            contenders[types.grouped_name] = partial(library_grouped, torch, types, operands)
        contenders[types.loop_name] = loop
        for launch in contenders.values():
            for _ in range(warmup):
                launch()
        samples = {label: [] for label in contenders}
        events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        for _ in range(runs):
            for label, launch in contenders.items():
                events[0].record()
                for _ in range(LAUNCHES):
                    launch()
                events[1].record()
                events[1].synchronize()
                samples[label].append(events[0].elapsed_time(events[1]) / LAUNCHES)
        flops = 2.0 * tokens * n * k
        reference_ms = statistics.median(samples[baseline])
        for label, times in samples.items():
            ms = statistics.median(times)
            lines.append(f"{name:<24} {label:<26} {ms:>9.3f} {flops / ms / 1e9:>8.1f} "
                         f"{reference_ms / ms:>{ratio_width - 1}.3f}x")
    return lines

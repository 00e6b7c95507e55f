"""`gemmdsl verify` and `gemmdsl bench` for `batch: grouped` specs (verify.py and bench.py hand them over):
mixtures of experts' group sizes, checked against float64 and timed against torch._grouped_mm and a loop of
cuBLAS GEMMs (torch.mm per group), in PyTorch (the device's torch; the kernel takes its tensors).

verify: for each case, random A (M x K) and B (G x N x K for `b: col`), C poisoned with NaN, one call; every
group's rows must match float64 within the verify tolerance of a 16-bit C, and the rows after the last group
must still be NaN. The cases: odd group sizes with empty groups, a single group, every group empty, K = 0.

bench: two configurations, 8 experts x 16384 tokens at N = K = 4096, and 64 experts x 32768 tokens at N = 2048,
K = 4096 with some experts empty (`group_sizes`, seeded). Each timing is the median of `runs` samples, a sample
being CUDA events around `LAUNCHES` back-to-back launches after `warmup` untimed ones; the three contenders are
sampled in turn in one process, so clocks and L2 state drift alike for all.
"""
from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

from .grouped_schedule import group_rows

RELATIVE_TOLERANCE = 2e-2  # bf16 C: 8 bits of mantissa, rounded once; errors relative to the largest |C| value
LAUNCHES = 10
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


def _operands(torch, case: GroupedCase, b_col: bool, seed: int):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    rows = sum(case.sizes) + case.spare_rows
    groups = len(case.sizes)
    a = torch.randn(rows, case.k, device="cuda", generator=generator).to(torch.bfloat16)
    shape = (groups, case.n, case.k) if b_col else (groups, case.k, case.n)
    b = torch.randn(*shape, device="cuda", generator=generator).to(torch.bfloat16)
    offs = torch.tensor(cumulative(list(case.sizes)), dtype=torch.int32, device="cuda")
    return a, b, offs


def reference(torch, a, b, offs_list: list[int], b_col: bool, rows: int, n: int):
    """float64 C of the groups' rows (rows after the last group: NaN, which the kernel must leave)."""
    c = torch.full((rows, n), float("nan"), dtype=torch.float64, device=a.device)
    for g, (start, end) in enumerate(group_rows(offs_list, rows)):
        weights = b[g].double()
        c[start:end] = a[start:end].double() @ (weights.T if b_col else weights)
    return c


def verify_grouped(kernel, seed: int = 0) -> tuple[int, int]:
    """(cases passed, cases run), printing a line per case."""
    import torch

    b_col = kernel.requirements.layouts["B"] == "col"
    passed = 0
    for index, case in enumerate(VERIFY_CASES):
        a, b, offs = _operands(torch, case, b_col, seed + index)
        rows = a.shape[0]
        c = torch.full((rows, case.n), float("nan"), dtype=torch.bfloat16, device="cuda")
        kernel(a, b.mT if b_col else b, c, offs=offs)
        torch.cuda.synchronize()
        expected = reference(torch, a, b, offs.tolist(), b_col, rows, case.n)
        grouped_rows = sum(case.sizes)
        got = c.double()
        scale = max(expected[:grouped_rows].abs().max().item() if grouped_rows and case.n else 0.0, 1.0)
        error = (got[:grouped_rows] - expected[:grouped_rows]).abs().max().item() / scale if grouped_rows else 0.0
        untouched = bool(torch.isnan(got[grouped_rows:]).all().item())
        finite = bool(torch.isfinite(got[:grouped_rows]).all().item())
        ok = finite and untouched and error <= RELATIVE_TOLERANCE
        passed += ok
        failures = [why for why, bad in (("non-finite values in the groups' rows", not finite),
                                         ("rows after the last group were written", not untouched),
                                         (f"error {error:.2e} over {RELATIVE_TOLERANCE:.0e}",
                                          error > RELATIVE_TOLERANCE)) if bad]
        print(f"{'PASS' if ok else 'FAIL'}  {kernel.name:<20} {case.name:<26} groups {list(case.sizes)} N={case.n} "
              f"K={case.k}  vs f64 {error:.2e}" + (f"  -- {'; '.join(failures)}" if failures else ""), flush=True)
    return passed, len(VERIFY_CASES)


def bench_grouped(kernel, runs: int, warmup: int, seed: int) -> list[str]:
    """The table's lines: per configuration, ms and TFLOP/s of the kernel, torch._grouped_mm and the loop."""
    import torch

    b_col = kernel.requirements.layouts["B"] == "col"
    lines = [f"{'configuration':<24} {'contender':<22} {'ms':>9} {'TFLOP/s':>8} {'vs _grouped_mm':>15}"]
    for index, (name, groups, tokens, n, k, split) in enumerate(CONFIGURATIONS):
        sizes = group_sizes(groups, tokens, seed + index, split)
        case = GroupedCase(name, tuple(sizes), n, k, 0)
        a, b, offs = _operands(torch, case, b_col, seed)
        c = torch.empty(tokens, n, dtype=torch.bfloat16, device="cuda")
        mat_b = b.mT if b_col else b  # G x K x N, as torch._grouped_mm and the kernel take B
        out = torch.empty_like(c)
        ends = cumulative(sizes)
        starts = [0, *ends[:-1]]

        def ours():
            kernel(a, mat_b, c, offs=offs)

        def grouped_mm():
            torch._grouped_mm(a, mat_b, offs=offs, out_dtype=torch.bfloat16)

        def loop():
            for g in range(groups):
                if ends[g] > starts[g]:
                    torch.mm(a[starts[g]:ends[g]], mat_b[g], out=out[starts[g]:ends[g]])

        contenders = {"gemmdsl " + kernel.name: ours, "torch._grouped_mm": grouped_mm, "torch.mm per group": loop}
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
        baseline = statistics.median(samples["torch._grouped_mm"])
        for label, times in samples.items():
            ms = statistics.median(times)
            lines.append(f"{name:<24} {label:<22} {ms:>9.3f} {flops / ms / 1e9:>8.1f} {baseline / ms:>14.3f}x")
    return lines

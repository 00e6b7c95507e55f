"""The fused kernels against their baselines, from `gemmdsl bench --json` reports, as one short table.

    python3 scripts/fuse_table.py REPORT.json [REPORT.json ...]

Each line is one size: a fused kernel's median ms and, for each baseline measured at that size, the
baseline's ms divided by the kernel's (above 1: the kernel is faster; against its own unfused twin, what
the fused work costs: 0.97 is 3%). A library baseline is the run bench interleaved with the kernel; the
twin is another kernel, timed apart, so under a drifting clock (long runs at the power cap) its ratio moves
by a few percent from run to run.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Each fused kernel and its unfused twin; the rows of bench's library baselines name the chain's formula.
COMPARISONS = (("linear_gelu", "linear_bf16"), ("linear_gelu_pingpong", "linear_bf16_pingpong"),
               ("hgemm_h100_relu_residual", "linear_bf16"), ("hgemm_mma_fused", "hgemm_mma_bf16c"),
               ("sgemm_fused", "sgemm_v3"))
LIBRARY_BASELINES = ("cuBLASLt", "torch unfused")


def formula(kernel: str) -> str:
    return json.loads((ROOT / "generated" / f"{kernel}.json").read_text())["fuse"]["formula"]


def rows_by_size(paths: list[str]) -> dict[tuple[int, int, int], dict[str, float]]:
    """Every measured row's median ms, by size and name (the last report wins where two measured the same)."""
    found: dict[tuple[int, int, int], dict[str, float]] = {}
    for path in paths:
        for row in json.loads(Path(path).read_text())["rows"]:
            if row["median_ms"] is not None:
                found.setdefault((row["m"], row["n"], row["k"]), {})[row["name"]] = row["median_ms"]
    return found


def interleaved_baselines(paths: list[str]) -> dict[tuple[tuple[int, int, int], str], dict[str, float]]:
    """For each kernel row (size, name), the library rows bench timed launch for launch with it: those of its
    size just before it in its report (bench writes a kernel's baselines, then the kernel). Two kernels with the
    same baseline each get their own run of it, which the clock may have moved between them."""
    found: dict[tuple[tuple[int, int, int], str], dict[str, float]] = {}
    for path in paths:
        latest: dict[tuple[int, int, int], dict[str, float]] = {}
        for row in json.loads(Path(path).read_text())["rows"]:
            size, name = (row["m"], row["n"], row["k"]), row["name"]
            if row["median_ms"] is None:
                continue
            if name.startswith(tuple(f"{library}:" for library in LIBRARY_BASELINES)):
                latest.setdefault(size, {})[name] = row["median_ms"]
            else:
                found[(size, name)] = dict(latest.get(size, {}))
    return found


def table(paths: list[str]) -> list[str]:
    lines = []
    interleaved = interleaved_baselines(paths)
    for size, times in sorted(rows_by_size(paths).items()):
        shape = "x".join(map(str, size))
        for kernel, twin in COMPARISONS:
            if kernel not in times:
                continue
            libraries = {**times, **interleaved.get((size, kernel), {})}  # its own run of each baseline first
            ratios = [f"{twin} {times[twin] / times[kernel]:.3f}x"] if twin in times else []
            ratios += [f"{name} {libraries[name] / times[kernel]:.3f}x"
                       for name in (f"{library}: {formula(kernel)}" for library in LIBRARY_BASELINES) if name in libraries]
            lines.append(f"{shape:<17} {kernel:<25} {times[kernel]:.4f} ms  " + "  ".join(ratios))
    return lines


if __name__ == "__main__":
    print("\n".join(table(sys.argv[1:])) or "no fused kernel measured")

"""The fused kernels against their baselines, from `gemmdsl bench --json` reports, as one short table.

    python3 scripts/fuse_table.py REPORT.json [REPORT.json ...]

Each line is one size: a fused kernel's median ms and, for each baseline measured at that size, the
baseline's ms divided by the kernel's (above 1: the kernel is faster; against its own unfused twin, what
the fused work costs: 0.97 is 3%).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Each fused kernel and its unfused twin; the rows of bench's library baselines name the chain's formula.
COMPARISONS = (("linear_gelu", "linear_bf16"), ("hgemm_h100_relu_residual", "linear_bf16"))
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


def table(paths: list[str]) -> list[str]:
    lines = []
    for size, times in sorted(rows_by_size(paths).items()):
        shape = "x".join(map(str, size))
        for kernel, twin in COMPARISONS:
            if kernel not in times:
                continue
            baselines = [twin, *(f"{library}: {formula(kernel)}" for library in LIBRARY_BASELINES)]
            ratios = [f"{name} {times[name] / times[kernel]:.3f}x" for name in baselines if name in times]
            lines.append(f"{shape:<17} {kernel:<25} {times[kernel]:.4f} ms  " + "  ".join(ratios))
    return lines


if __name__ == "__main__":
    print("\n".join(table(sys.argv[1:])) or "no fused kernel measured")

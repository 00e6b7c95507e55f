"""The tables of docs/performance.md's "Families at shapes nobody tuned for", from scripts/family_study.py's JSON:
per family its ratios to cuBLAS (the member the family ran, and the fastest member: what a perfect rule would
reach), the rule's regret (the picked member's time over the fastest member's) and the cycle model's truth
(predicted against measured time per member and shape, and the rank correlation of the members per shape).

    [GEMMDSL_GPU=PROFILE] python3 scripts/family_tables.py study.json [--rule] [--shapes] [--families DIR]

The predictions are today's: each family is compiled here, and its members' models (on the profile $GEMMDSL_GPU
names, else the target's reference GPU's: docs/calibration.md) priced at every shape the study timed, so a change to the model is judged against
times measured before it. `--rule` judges the rule the same way: the member today's model picks, at its measured
time, where the study timed it. Shapes whose reference refused them (`reference_refused`: torch._scaled_mm's K and N
off 16, for the FP8 families) are left out of the ratios and tabled on their own after them. `--families DIR` reads
the family files from DIR instead of specs/ (given again, from each DIR in turn): candidate families studied before
they ship.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gemmdsl.cycles import choose, estimate  # noqa: E402
from gemmdsl.family import compile_family_path  # noqa: E402
from gemmdsl.targets import ARCHS  # noqa: E402

def family_files(directory: Path = ROOT / "specs") -> dict[str, Path]:
    """The families of a directory by their first member's name, as the study's rows name them (`members[0]`)."""
    found = {}
    for path in sorted(directory.glob("*.gemmf")):
        first = re.search(r"^\s*use\s+(\w+)\.gemm", path.read_text(), re.M)
        if first:
            found.setdefault(first[1], path)
    return found


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def spearman(x: list[float], y: list[float]) -> float:
    def ranks(values):
        order = sorted(range(len(values)), key=values.__getitem__)
        result = [0.0] * len(values)
        for rank, index in enumerate(order):
            result[index] = rank
        return result

    rx, ry = ranks(x), ranks(y)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den if den else 1.0


def member_times(row: dict) -> dict[int, float]:
    return {int(key[len("member"):]): value for key, value in row.items()
            if key.startswith("member") and key != "members"}


def summary(ratios: list[float]) -> str:
    return (f"{statistics.geometric_mean(ratios):.3f} | {percentile(ratios, 0.1):.3f} | {min(ratios):.3f} | "
            f"{sum(r < 0.6 for r in ratios)}")


def tables(rows: list[dict], rule: bool = False, per_shape: bool = False,
           family_dirs: tuple[Path, ...] = (ROOT / "specs",)) -> list[str]:
    files = {}
    for directory in reversed(family_dirs):  # the first directory that has a family wins
        files |= family_files(directory)
    families: dict[str, list[dict]] = {}
    for row in rows:
        if "cublas" in row:
            families.setdefault(row["members"][0], []).append(row)
    clock = ARCHS[90].reference_clock_mhz  # the profile's: the clock the model's cycles are times at
    lines = ["| family | shapes | ran: geomean, p10, lowest, below 0.6x | total time vs cuBLAS | fastest member: "
             "geomean, p10, lowest, below 0.6x | picked within 5% of fastest | within 25% | worst regret | "
             "prediction within 20% | median Spearman |", "| --- " * 10 + "|"]
    shape_lines = []
    for first, family_rows in families.items():
        family = compile_family_path(files[first])
        models = family.models
        by_name = {model.name: index for index, model in enumerate(models)}
        ran, fastest, regrets, errors, rhos = [], [], [], [], []
        family_ms = cublas_ms = 0.0
        for row in family_rows:
            # the study's members by today's index (a family may list them in another order, or fewer, since)
            times = {by_name[row["members"][i]]: ms for i, ms in member_times(row).items()
                     if row["members"][i] in by_name}
            m, n, k = row["shape"]
            picked = choose(models, m, n, k) if rule else by_name.get(row["members"][row["chosen"]], -1)
            picked_ms = times.get(picked, row["family"]) if rule else row["family"]
            ran.append(row["cublas"] / picked_ms)
            best = min(times.values())
            fastest.append(row["cublas"] / min(best, row["family"]))
            regrets.append(picked_ms / best)
            family_ms += picked_ms
            cublas_ms += row["cublas"]
            predicted = {i: estimate(models[i], m, n, k).cycles / clock / 1e3 for i in times}
            errors += [abs(predicted[i] - times[i]) / times[i] for i in times]
            if len(times) >= 3:
                rhos.append(spearman([predicted[i] for i in times], [times[i] for i in times]))
            if per_shape:
                name = models[picked].name if picked >= 0 else row["members"][row["chosen"]]
                shape_lines.append(f"| {first} | {m}x{n}x{k} | {row['cublas'] * 1e3:.1f} | {picked_ms * 1e3:.1f} | "
                                   f"{row['cublas'] / picked_ms:.3f} | {name} | {row['cublas'] / best:.3f} |")
        within = sum(r <= 1.05 for r in regrets) / len(regrets)
        within25 = sum(r <= 1.25 for r in regrets) / len(regrets)
        truth = sum(e <= 0.2 for e in errors) / len(errors)
        rho = statistics.median(rhos) if rhos else float("nan")
        lines.append(f"| {first} | {len(family_rows)} | {summary(ran)} | {cublas_ms / family_ms:.3f} | "
                     f"{summary(fastest)} | {within:.0%} | {within25:.0%} | {max(regrets):.2f} | {truth:.0%} | "
                     f"{rho:.2f} |")
    if per_shape:
        lines += ["", "| family | shape | cuBLAS us | family us | ratio | member | fastest member's ratio |",
                  "| --- " * 7 + "|"] + shape_lines
    return lines + refused_tables(rows, per_shape)


def refused_tables(rows: list[dict], per_shape: bool = False) -> list[str]:
    """The shapes the reference refused (torch._scaled_mm's K and N off 16, for the FP8 families), which the study
    timed the family and its members at alone: per family their count, the rule's regret there and the family's
    time; with per_shape every such shape and the reference's message."""
    families: dict[str, list[dict]] = {}
    for row in rows:
        if "reference_refused" in row and "family" in row:
            families.setdefault(row["members"][0], []).append(row)
    if not families:
        return []
    lines = ["", "| family | shapes the reference refused | picked within 5% of fastest | worst regret | "
                 "family's total us |", "| --- " * 5 + "|"]
    shape_lines = []
    for first, family_rows in families.items():
        regrets = [row["family"] / min(member_times(row).values(), default=row["family"]) for row in family_rows]
        total = sum(row["family"] for row in family_rows) * 1e3
        lines.append(f"| {first} | {len(family_rows)} | {sum(r <= 1.05 for r in regrets) / len(regrets):.0%} | "
                     f"{max(regrets):.2f} | {total:.1f} |")
        shape_lines += [f"| {first} | {'x'.join(map(str, row['shape']))} | {row['family'] * 1e3:.1f} | "
                        f"{row['members'][row['chosen']]} | {regret:.2f} | {row['reference_refused']} |"
                        for row, regret in zip(family_rows, regrets)]
    if per_shape:
        lines += ["", "| family | shape | family us | member | regret | the reference's refusal |",
                  "| --- " * 6 + "|"] + shape_lines
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", nargs="+")
    parser.add_argument("--rule", action="store_true", help="judge the rule as the model picks now")
    parser.add_argument("--shapes", action="store_true", help="also every shape's row")
    parser.add_argument("--families", type=Path, action="append", help="a directory of family files (default specs/)")
    args = parser.parse_args(argv)
    rows = [row for path in args.study for row in json.loads(Path(path).read_text())["rows"]]
    print("\n".join(tables(rows, args.rule, args.shapes, tuple(args.families or [ROOT / "specs"]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

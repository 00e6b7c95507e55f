#!/usr/bin/env python3
"""How well the tuner's ranking predicts the GPU's, from `gemmdsl tune ... --exhaustive --json FILE` results.

For each results file (one template timed exhaustively), the template is screened again with the
current cost model (no GPU; the template path is the file's "template" entry, or --template) and
each timed candidate's score is joined to its measurement by name. Printed per template:

  - Spearman's rank correlation between the score and the measured speed (percent of the cuBLAS
    launches timed beside each candidate, which is what `tune` ranks by; ties get average ranks);
  - the top 8 of the tuner's order (score, then its tie-breaks: tune.rank_key) against the best
    measured candidate: how much slower the best of the top 8 is ("gap");

and with --svg-dir, an SVG scatter of predicted score vs measured TFLOP/s per template, one marker per
candidate, the top 8 highlighted. Rescoring reads ptxas's registers and spills where the results
record them (`tune` with nvcc builds every survivor), the estimate elsewhere; --estimate reads the
estimate only. --recorded uses the scores stored in the file instead of rescoring
(for results written by an older model: a pruned candidate then has score 0). --strip DIR writes a copy
of each file with only the timed candidates and the fields this study reads (how
tests/fixtures/tune_h100/ was made).

    PYTHONPATH=$PWD python scripts/tune_ranking.py tests/fixtures/tune_h100/*.json --svg-dir docs/ranking
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gemmdsl.targets import ARCHS  # noqa: E402
from gemmdsl.tune_db import average_ranks, spearman  # noqa: E402,F401  (average_ranks: the tests read it here)

TOP = 8  # the tuner's default budget
TIMED_ON_SMS = ARCHS[90].reference_sms  # tests/fixtures/tune_h100 were timed on an H100 SXM, every template


@dataclass(frozen=True)
class Point:
    name: str
    score: float
    pct_cublas: float
    tflops: float
    top: bool  # among the tuner's first TOP
    place: int  # in the tuner's order, 1-based


@dataclass(frozen=True)
class Study:
    template: str
    device: str
    points: list[Point]
    sizes: str = ""  # the timed sizes, "4096x4096x4096,..."

    @property
    def rho(self) -> float:
        return spearman([p.score for p in self.points], [p.pct_cublas for p in self.points])

    @property
    def best(self) -> Point:
        return max(self.points, key=lambda p: p.pct_cublas)

    @property
    def best_of_top(self) -> Point:
        return max((p for p in self.points if p.top), key=lambda p: p.pct_cublas)

    @property
    def gap_pct(self) -> float:
        """How much slower the best of the top TOP is than the best measured, in percent."""
        return 100 * (self.best.pct_cublas / self.best_of_top.pct_cublas - 1)


def measured_rows(data: dict) -> list[dict]:
    return [row for row in data["candidates"] if "measured" in row]


def study(data: dict, template: str | None = None, recorded: bool = False, sms: int | None = None,
          estimate: bool = False) -> Study:
    """Score every timed candidate (the current model, or as recorded) and put it beside its measurement.
    The current model reads ptxas's figures where the results record them, as `tune` does with nvcc on
    PATH (tune.with_ptxas); `estimate` scores on the register estimate alone, as with --no-nvcc."""
    from gemmdsl import tune

    rows = measured_rows(data)
    template = template or data.get("template")
    if recorded:
        scored = {row["name"]: row["prediction"]["score"] for row in rows}
        order = sorted(rows, key=lambda row: (-round(row["prediction"]["score"], 6),
                                              row.get("rank", math.inf), row["name"]))
        places = {row["name"]: place for place, row in enumerate(order, 1)}
    else:
        if not template:
            raise ValueError("the results name no template; pass --template")
        path = Path(template) if Path(template).is_file() else ROOT / template
        sizes = [tuple(size) for size in data["sizes"]]
        wanted = {row["name"] for row in rows}
        candidates = [c for c in tune.expand(path.read_text(encoding="utf-8"), str(template)) if c.name in wanted]
        report = tune.screen(candidates, sizes, min_warps=0, path=str(template))
        recorded_ptxas = {row["name"]: row["prediction"]["ptxas"] for row in rows
                          if not estimate and row.get("prediction", {}).get("ptxas")}
        if recorded_ptxas:  # a candidate without figures is "not built" and keeps its estimate
            report, _ = tune.with_ptxas(report, sizes, lambda survivor: recorded_ptxas[survivor.candidate.name])
        ranked = tune.rank(report.timeable, sizes, sms or TIMED_ON_SMS)
        scored = {s.candidate.name: s.prediction.score for s in ranked}
        places = {s.candidate.name: place for place, s in enumerate(ranked, 1)}
        missing = wanted - set(scored)
        if missing:
            raise ValueError(f"the screening leaves out {len(missing)} timed candidates, e.g. {sorted(missing)[0]}")
    points = [Point(row["name"], scored[row["name"]], row["measured"]["geomean_pct_cublas"],
                    row["measured"]["geomean_tflops"], places[row["name"]] <= TOP, places[row["name"]])
              for row in rows]
    device = data.get("device", {}).get("name", "")
    sizes = ",".join("x".join(map(str, size)) for size in data.get("sizes", []))
    return Study(str(template or "?"), device, points, sizes)


def strip(data: dict) -> dict:
    """The results with only the timed candidates and the fields a study reads."""
    keep = ("name", "choices", "status", "reason", "rank", "prediction", "measured")
    out = {key: value for key, value in data.items() if key != "candidates"}
    out["candidates"] = [{key: row[key] for key in keep if key in row} for row in measured_rows(data)]
    for row in out["candidates"]:
        row["measured"] = {key: row["measured"][key] for key in ("geomean_ms", "geomean_tflops", "geomean_pct_cublas")}
    return out


# --- the plot ---------------------------------------------------------------------------------


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]."""
    if high <= low:
        high = low + 1
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if raw <= m * step)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 10))
    return ticks


def svg_scatter(points: Sequence[tuple[float, float, bool]], title: str, x_label: str, y_label: str,
                width: int = 640, height: int = 420, note: str = "") -> str:
    """An SVG scatter plot: one circle per (x, y, highlighted); highlighted ones are filled orange and drawn last."""
    left, right, top, bottom = 70, 20, 46, 56
    xs = [p[0] for p in points] or [0.0]
    ys = [p[1] for p in points] or [0.0]
    xticks, yticks = nice_ticks(min(xs), max(xs)), nice_ticks(min(ys), max(ys))
    x0, x1, y0, y1 = xticks[0], xticks[-1], yticks[0], yticks[-1]
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x0) / ((x1 - x0) or 1) * plot_w

    def py(y: float) -> float:
        return top + plot_h - (y - y0) / ((y1 - y0) or 1) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2:.1f}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>']
    if note:
        out.append(f'<text x="{width / 2:.1f}" y="37" text-anchor="middle" fill="#555">{escape(note)}</text>')
    for x in xticks:
        out.append(f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{top + plot_h}" stroke="#eee"/>')
        out.append(f'<text x="{px(x):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{x:g}</text>')
    for y in yticks:
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{left + plot_w}" y2="{py(y):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 14}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(f'<text transform="translate(18 {top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle">'
               f'{escape(y_label)}</text>')
    for x, y, highlighted in sorted(points, key=lambda p: p[2]):
        style = 'fill="#e67e22" stroke="#8a4b00"' if highlighted else 'fill="#4a78b0" fill-opacity="0.45" stroke="none"'
        out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="{4.5 if highlighted else 3.5}" {style}/>')
    legend_y = top + 14
    out.append(f'<circle cx="{left + 14}" cy="{legend_y}" r="4.5" fill="#e67e22" stroke="#8a4b00"/>'
               f'<text x="{left + 24}" y="{legend_y + 4}">the tuner\'s top {TOP} (kept)</text>')
    out.append(f'<circle cx="{left + 14}" cy="{legend_y + 16}" r="3.5" fill="#4a78b0" fill-opacity="0.45"/>'
               f'<text x="{left + 24}" y="{legend_y + 20}">other valid candidates</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def study_svg(result: Study) -> str:
    name = Path(result.template).name
    at = f" at {result.sizes}" if result.sizes else ""
    title = f"{name}{at}: predicted score vs measured ({len(result.points)} candidates)"
    note = (f"Spearman {result.rho:.2f}; best of the top {TOP} {result.gap_pct:.1f}% slower than the best"
            + (f"; {result.device}" if result.device else ""))
    return svg_scatter([(p.score, p.tflops, p.top) for p in result.points], title,
                       "predicted score (fraction of the peak of the unit that multiplies)", "measured TFLOP/s (geomean over sizes)",
                       note=note)


def report_lines(result: Study) -> list[str]:
    best, top = result.best, result.best_of_top
    first = min(result.points, key=lambda p: p.place)
    return [f"{result.template}: {len(result.points)} timed candidates" + (f" on {result.device}" if result.device else ""),
            f"  Spearman(score, measured % of cuBLAS) = {result.rho:.3f}",
            f"  best measured {best.name} {best.pct_cublas:.1f}% (rank {best.place}); best of the top {TOP} "
            f"{top.name} {top.pct_cublas:.1f}%: {result.gap_pct:.1f}% slower; ranked first {first.name} "
            f"{first.pct_cublas:.1f}%"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", metavar="RESULTS.json", help="`gemmdsl tune --exhaustive --json` output")
    parser.add_argument("--template", help="the template, where the results do not name it (one results file)")
    parser.add_argument("--recorded", action="store_true", help="use the scores stored in the results")
    parser.add_argument("--estimate", action="store_true",
                        help="rescore on the register estimate, ignoring the ptxas figures the results record "
                             "(as `tune --no-nvcc` ranks)")
    parser.add_argument("--sms", type=int, default=None,
                        help=f"SM count for the wave term (default {TIMED_ON_SMS}: the H100 SXM the fixtures ran on)")
    parser.add_argument("--svg-dir", metavar="DIR", help="write <template stem>.svg scatter plots there")
    parser.add_argument("--strip", metavar="DIR", help="write stripped copies of the results there and stop")
    args = parser.parse_args(argv)
    if args.template and len(args.results) > 1:
        parser.error("--template goes with one results file")
    for name in args.results:
        data = json.loads(Path(name).read_text())
        if args.strip:
            if args.template:
                data["template"] = args.template
            Path(args.strip).mkdir(parents=True, exist_ok=True)
            (Path(args.strip) / Path(name).name).write_text(json.dumps(strip(data), indent=1) + "\n")
            continue
        result = study(data, args.template, args.recorded, args.sms, args.estimate)
        print("\n".join(report_lines(result)))
        if args.svg_dir:
            Path(args.svg_dir).mkdir(parents=True, exist_ok=True)
            # Named after the results file (tune_T.json -> T.svg, tune_T_2048.json -> T_2048.svg): one
            # template timed at two sizes gives two plots.
            stem = Path(name).stem.removeprefix("tune_")
            path = Path(args.svg_dir) / f"{stem}.svg"
            path.write_text(study_svg(result))
            print(f"  wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a search prints and writes: the winner's spec with its header, the screening report, the exhaustive
comparison and the results JSON."""
from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Sequence

from ..source import CompileError, Diagnostic, Severity, SourceFile, Span
from .templates import Candidate, line_column
from .screen import REASONS, REASON_WORDS, ScreenReport, Size, Survivor, candidate_path
from .timing import Measurement, Timing


def winner_text(candidate: Candidate, name: str, header: Sequence[str]) -> str:
    """The candidate as a plain spec named `name`, its leading comment replaced by `header`."""
    old = candidate.name
    body = candidate.text[candidate.body_start:]
    offset = candidate.name_start - candidate.body_start
    assert body[offset:offset + len(old)] == old
    body = body[:offset] + name + body[offset + len(old):]
    return "".join(f"// {line}".rstrip() + "\n" for line in header) + body


def winner_header(name: str, template_path: str, candidate: Candidate, measurement: Measurement, timing: Timing,
                  search_lines: Sequence[str], date: str) -> list[str]:
    lines = [f"{name}: tuned by `gemmdsl tune {template_path}` on {date}",
             f"winner: candidate {candidate.name}, choices {candidate.describe()}",
             f"device: {timing.device}, CuPy {timing.cupy_version}, measured FP32 FMA peak "
             f"{timing.peak_tflops:.1f} TFLOP/s; median of {timing.runs} launches"]
    for size, ms, tflops, pct in measurement.per_size:
        lines.append(f"  {'x'.join(map(str, size))}: {ms:.3f} ms, {tflops:.2f} TFLOP/s, {pct:.1f}% of cuBLAS "
                     f"timed beside it ({ms * pct / 100:.3f} ms)")
    if len(measurement.per_size) > 1:
        lines.append(f"  geomean: {measurement.geomean_ms:.3f} ms, {measurement.geomean_tflops:.2f} TFLOP/s, "
                     f"{measurement.geomean_pct_cublas:.1f}% of cuBLAS")
    lines += list(search_lines)
    return lines


def write_winner(output: str | Path, name: str, template_path: str, candidate: Candidate,
                 measurement: Measurement, timing: Timing, search_lines: Sequence[str],
                 date: str | None = None) -> str:
    """Write the winning spec (checked by the front end first) and return its text."""
    from ..compiler import write_outputs
    from ..frontend import load

    date = date or datetime.date.today().isoformat()
    text = winner_text(candidate, name, winner_header(name, template_path, candidate, measurement, timing,
                                                      search_lines, date))
    load(SourceFile(str(output), text))  # a CompileError here would be a bug in the renaming
    output = Path(output)
    write_outputs(output.parent if str(output.parent) else Path("."), {output.name: text.encode()})
    return text


# ---------------------------------------------------------------------------
# Reports


def screen_lines(report: ScreenReport, kept: Sequence[Survivor], dropped: dict[str, list],
                 budget: int) -> list[str]:
    """The pruning report: generated, rejected by reason, pruned by rule, kept."""
    lines = [f"generated {report.generated:,} candidates: {len(report.rejected):,} rejected by the front end, "
             f"{report.valid:,} valid"]
    for shape, count, first in report.rejected_by_reason():
        lines.append(f"  rejected {count:>5,}  {shape}")
    lines.append(f"pruned {report.pruned_count:,} of the valid by the analysis, {len(report.survivors):,} left")
    for reason in REASONS:
        items = report.pruned.get(reason, [])
        if items:
            lines.append(f"  pruned   {len(items):>5,}  {REASON_WORDS[reason]} (e.g. {items[0][0].name}: {items[0][1]})")
    for reason, items in dropped.items():
        lines.append(f"  dropped  {len(items):>5,}  {REASON_WORDS[reason]} (e.g. {items[0][0].name}: {items[0][1]})")
    lines.append(f"kept {len(kept)} for timing (budget {budget}), best predicted first")
    return lines


def nothing_survived(path: str, first: Candidate, report: ScreenReport) -> str:
    """The error when screening keeps no candidate, at the template's kernel name; where the front end
    rejected candidates, the most common reason follows, positioned in the first candidate it rejected."""
    line, column = line_column(first.text, first.name_start)  # the text before the name is the template's
    name = first.name.removesuffix(f"_t{first.index}")
    try:
        template = SourceFile.read(path, suffix="")
    except CompileError:  # gone since it was read: the message without the quoted line
        template = None
    hint, reason = None, None
    if report.rejected:
        _, count, diagnostic = report.rejected_by_reason()[0]
        candidate = next(candidate for candidate, rejected in report.rejected if rejected is diagnostic)
        reason = diagnostic.render(SourceFile(candidate_path(path, candidate), candidate.text))
        hint = (f"{len(report.rejected):,} of {report.generated:,} candidates were rejected by the front end; "
                f"the most common reason ({count:,}) follows")
    error = Diagnostic(Severity.ERROR, Span(path, line, column, line, column + len(name)),
                       "no candidate survived the screening; nothing to time", hint)
    return "\n".join(filter(None, (error.render(template), reason)))


def kept_lines(kept: Sequence[Survivor]) -> list[str]:
    width = max((len(s.candidate.name) for s in kept), default=4)
    return [f"  {s.candidate.name:<{width}}  score {s.prediction.score:.3f}  {s.prediction.summary()}  "
            f"[{s.candidate.describe()}]" for s in kept]


def search_summary(report: ScreenReport, kept: Sequence[Survivor], dropped: dict[str, list],
                   timed: int, exhaustive_line: str | None) -> list[str]:
    """The one-paragraph account of the search that goes into the winner's header."""
    pruned = ", ".join(f"{REASON_WORDS[r]} {len(report.pruned[r])}" for r in REASONS if report.pruned.get(r))
    dropped_text = ", ".join(f"{REASON_WORDS[r]} {len(items)}" for r, items in dropped.items())
    lines = [f"search: {report.generated} generated, {len(report.rejected)} rejected by the front end, "
             f"{report.pruned_count} pruned by the analysis" + (f" ({pruned})" if pruned else ""),
             f"  {len(kept)} kept" + (f" after nvcc ({dropped_text})" if dropped_text else "") + f", {timed} timed"]
    if exhaustive_line:
        lines.append(exhaustive_line)
    return lines


def exhaustive_comparison(timing: Timing, kept: Sequence[Survivor]) -> tuple[str, Measurement, Measurement]:
    """(one line, best of the pruned search, best of all) from one timing of every valid candidate."""
    best = timing.ranking()[0]
    pruned_best = timing.ranking(s.candidate.name for s in kept)[0]
    if pruned_best.name == best.name:
        line = f"exhaustive: timing all {len(timing.measurements)} valid candidates found the same winner"
    else:
        gap = 100 * (best.geomean_pct_cublas / pruned_best.geomean_pct_cublas - 1)
        line = (f"exhaustive: the best of all {len(timing.measurements)} valid candidates is {best.name} "
                f"({best.geomean_pct_cublas:.1f}% of cuBLAS); the pruned search's {pruned_best.name} "
                f"({pruned_best.geomean_pct_cublas:.1f}%) is {gap:.1f}% slower")
    return line, pruned_best, best


def results_json(report: ScreenReport, ranked: Sequence[Survivor], kept: Sequence[Survivor],
                 dropped: dict[str, list], sizes: Sequence[Size], timing: Timing | None = None,
                 template: str | None = None, scored: Sequence[Survivor] = ()) -> dict:
    """Every candidate's fate, prediction and (when timed) measurement, for tools and later analysis
    (scripts/tune_ranking.py). `scored`: every timeable candidate ranked, so that pruned ones carry
    their score too."""
    from dataclasses import asdict

    status: dict[str, dict] = {}
    for candidate, diagnostic in report.rejected:
        status[candidate.name] = {"status": "rejected", "detail": diagnostic.message}
    for reason, items in report.pruned.items():
        for candidate, detail in items:
            status[candidate.name] = {"status": "pruned", "reason": reason, "detail": detail}
    for place, survivor in enumerate(ranked, 1):
        status[survivor.candidate.name] = {"status": "survivor", "rank": place}
    for reason, items in dropped.items():
        for candidate, detail in items:
            status.setdefault(candidate.name, {}).update(status="dropped", reason=reason, detail=detail)
    predictions = {s.candidate.name: s.prediction for s in [*report.timeable, *scored, *ranked, *kept]}
    for survivor in kept:
        status[survivor.candidate.name]["status"] = "kept"
    rows = []
    for candidate in sorted({c for c, _ in report.rejected} | {s.candidate for s in report.timeable}
                            | {c for items in report.pruned.values() for c, _ in items}, key=lambda c: c.index):
        row = {"name": candidate.name, "choices": candidate.summary, **status[candidate.name]}
        if candidate.name in predictions:
            row["prediction"] = asdict(predictions[candidate.name])
        if timing is not None and candidate.name in timing.measurements:
            m = timing.measurements[candidate.name]
            row["measured"] = {"geomean_ms": m.geomean_ms, "geomean_tflops": m.geomean_tflops,
                               "geomean_pct_cublas": m.geomean_pct_cublas,
                               "per_size": [{"size": list(size), "ms": ms, "tflops": tf, "pct_cublas": pct}
                                            for size, ms, tf, pct in m.per_size]}
        rows.append(row)
    out = {"template": template, "sizes": [list(size) for size in sizes], "generated": report.generated, "rejected": len(report.rejected),
           "pruned": {reason: len(items) for reason, items in report.pruned.items()},
           "survivors": len(report.survivors), "dropped": {reason: len(items) for reason, items in dropped.items()},
           "kept": [s.candidate.name for s in kept], "candidates": rows}
    if timing is not None:
        out["device"] = {"name": timing.device, "cupy": timing.cupy_version, "peak_tflops": timing.peak_tflops,
                         "runs": timing.runs,
                         "cublas_ms": [{"size": list(size), "ms": ms} for size, ms in timing.cublas_ms.items()]}
    return out


def write_results_json(path: str | Path, data: dict) -> bool:
    """Write `data` to `path` whole or not at all; False (after the error) when it cannot be written."""
    import json

    from ..compiler import OutputError, write_outputs

    path = Path(path)
    try:
        write_outputs(path.parent, {path.name: (json.dumps(data, indent=1) + "\n").encode()})
    except OutputError as err:
        print(f"error: {err}", file=sys.stderr)
        return False
    return True

"""Screening: each candidate through the front end, then the pruning rules on what its path predicts of it
(`predict`: the path's `facts.prediction`, paths/facts.py); no GPU, no nvcc."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .. import ir
from ..prediction import Prediction
from ..source import CompileError, Diagnostic, Severity, SourceFile
from ..targets import arch
from .templates import Candidate


DEFAULT_MIN_WARPS = 8
REASONS = ("tile", "conflicts", "registers", "occupancy")
REASON_WORDS = {
    "tile": "block tile does not divide the sizes",
    "conflicts": "predicted bank conflicts",
    "registers": "register estimate over the cap (predicted spills)",
    "occupancy": "too few warps per SM",
    "ptxas spills": "ptxas spills registers",
    "ptxas occupancy": "too few warps per SM with ptxas's registers",
    "build": "nvcc failed",
}
Size = tuple[int, int, int]


@dataclass(frozen=True)
class Survivor:
    candidate: Candidate
    spec: ir.KernelSpec
    prediction: Prediction


@dataclass
class ScreenReport:
    generated: int = 0
    rejected: list[tuple[Candidate, Diagnostic]] = field(default_factory=list)
    pruned: dict[str, list[tuple[Candidate, str]]] = field(default_factory=dict)  # reason -> (candidate, detail)
    survivors: list[Survivor] = field(default_factory=list)
    timeable: list[Survivor] = field(default_factory=list)  # every valid candidate that tiles the sizes

    @property
    def valid(self) -> int:
        return self.generated - len(self.rejected)

    @property
    def pruned_count(self) -> int:
        return sum(len(items) for items in self.pruned.values())

    def rejected_by_reason(self) -> list[tuple[str, int, Diagnostic]]:
        """(reason, count, first diagnostic), most frequent first. Messages that differ only in numbers and
        quoted names are one reason, shown with those folded (N, '…'); a message that never varies is shown as is."""
        groups: dict[str, list[Diagnostic]] = {}
        for _, diagnostic in self.rejected:
            groups.setdefault(message_shape(diagnostic.message), []).append(diagnostic)
        reasons = []
        for shape, items in groups.items():
            same = all(d.message == items[0].message for d in items)
            reasons.append((items[0].message if same else shape, len(items), items[0]))
        return sorted(reasons, key=lambda item: (-item[1], item[0]))


def message_shape(message: str) -> str:
    """A diagnostic message with its numbers and quoted words folded, so like errors group together."""
    shape = re.sub(r"'[^']*'|`[^`]*`", "'…'", message)
    return re.sub(r"\d+", "N", shape)


def predict(spec: ir.KernelSpec, size: Size, ptxas: dict | None = None) -> Prediction:
    """Run the analysis passes on a valid spec and read off what screening and ranking use: the prediction
    the spec's path makes of it (its `facts`, paths/facts.py)."""
    from ..analysis import analyze

    analysis = analyze(spec, size, ptxas, hints=False)
    return analysis.path.facts.prediction(analysis, ptxas)


def reference_sms(spec: ir.KernelSpec) -> int:
    """The SM count the ranking assumes without --sms: the target's reference GPU's (targets.Arch)."""
    return arch(spec.target.sm).reference_sms


def checked_bounds(spec: ir.KernelSpec) -> bool:
    """Whether the kernel handles sizes that are not multiples of its tile (`bounds: checked`)."""
    return bool(getattr(spec.problem, "checked", False))


def tiles_all(spec: ir.KernelSpec, sizes: Sequence[Size]) -> bool:
    """Whether the kernel can run every size: its tile divides them all, or its bounds are checked."""
    tile = (spec.block.m, spec.block.n, spec.block.k)
    return checked_bounds(spec) or all(not any(e % t for e, t in zip(size, tile)) for size in sizes)


def analysis_size(spec: ir.KernelSpec, size: Size) -> Size:
    """The size the passes analyse: `size` rounded up to whole tiles (they count whole tiles only)."""
    tile = (spec.block.m, spec.block.n, spec.block.k)
    return tuple(-(-extent // step) * step for extent, step in zip(size, tile))  # type: ignore[return-value]


def prune_reason(spec: ir.KernelSpec, prediction: Prediction | None, sizes: Sequence[Size],
                 min_warps: int = DEFAULT_MIN_WARPS, conflict_pct: float | None = None) -> tuple[str, str] | None:
    """(rule, detail) of the first pruning rule the candidate breaks, or None."""
    tile = (spec.block.m, spec.block.n, spec.block.k)
    if not tiles_all(spec, sizes):
        size = next(size for size in sizes if any(e % t for e, t in zip(size, tile)))
        return "tile", (f"{'x'.join(map(str, tile))} does not divide {'x'.join(map(str, size))} "
                        "(bounds: exact)")
    assert prediction is not None
    p = prediction
    if conflict_pct is not None and (p.load_conflicts or p.store_conflicts) and p.conflict_pct >= conflict_pct:
        return "conflicts", (f"{p.load_conflicts:,} load and {p.store_conflicts:,} store wavefronts beyond ideal "
                             f"({p.conflict_pct:.1f}%)")
    if p.ptxas is not None and p.registers > p.register_cap:
        return "registers", f"ptxas {p.registers} > cap {p.register_cap}"
    if p.ptxas is None and p.predicted_spill:
        return "registers", (f"estimate at least {p.register_low} (its {100 * p.estimate_band:.0f}% band, "
                             f"accumulators and fragments) > cap {p.register_cap}")
    if p.warps_per_sm < min_warps:
        return "occupancy", f"{p.warps_per_sm} warps per SM < {min_warps}"
    return None


def screen(candidates: Sequence[Candidate], sizes: Sequence[Size], min_warps: int = DEFAULT_MIN_WARPS,
           conflict_pct: float | None = None, path: str = "<template>.gemm",
           progress: Callable[[int, int], None] | None = None) -> ScreenReport:
    """Front end, then the analysis-based pruning rules, for every candidate (no GPU, no nvcc)."""
    from ..frontend import load

    report = ScreenReport(generated=len(candidates))
    for done, candidate in enumerate(candidates, 1):
        if progress is not None:
            progress(done, len(candidates))
        try:
            spec, _ = load(SourceFile(candidate_path(path, candidate), candidate.text))
        except CompileError as err:
            errors = [d for d in err.diagnostics if d.severity is Severity.ERROR] or err.diagnostics
            report.rejected.append((candidate, errors[0]))
            continue
        prediction = predict(spec, analysis_size(spec, sizes[0])) if tiles_all(spec, sizes) else None
        reason = prune_reason(spec, prediction, sizes, min_warps, conflict_pct)
        if prediction is not None:
            report.timeable.append(Survivor(candidate, spec, prediction))
        if reason is not None:
            report.pruned.setdefault(reason[0], []).append((candidate, reason[1]))
        else:
            report.survivors.append(Survivor(candidate, spec, prediction))
    return report


def candidate_path(template_path: str, candidate: Candidate) -> str:
    """The display name of a candidate in diagnostics: `template.tgemm[t12]`."""
    return f"{template_path}[t{candidate.index}]"

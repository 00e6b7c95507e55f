"""Analysis: run every pass on a spec's lowered plan and collect their facts and verdicts.

    analysis = analyze(spec, problem=(4096, 4096, 4096), ptxas=None)
    summary_lines(analysis)             # one line per pass, for the .cu header

`gemmdsl check` (check.py) formats what this returns.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import ir
from .abi import size_errors
from .errors import GemmdslError
from .layout import TileLayout
from .passes import DEFAULT_PROBLEM, Context, PassManager, PassOutcome, ProblemSize
from .paths import InstructionPath, path_of, plan_kernel
from .plan import KernelPlan
from .source import CompileError, Diagnostic, Severity


class ProblemSizeError(GemmdslError, ValueError):
    """The problem size is below 1, beyond what the launchers take (abi.size_errors), or not a multiple of the
    block tile of a `bounds: exact` spec."""


class InexactProblemError(CompileError, ProblemSizeError):
    """A problem size that a `bounds: exact` spec does not divide into whole tiles: positioned at the spec's
    `bounds` key, which is what refuses it."""


@dataclass(frozen=True)
class Analysis:
    spec: ir.KernelSpec
    layout: TileLayout
    problem: ProblemSize
    ptxas: dict | None
    facts: dict[str, object]
    outcomes: list[PassOutcome]

    @property
    def path(self) -> InstructionPath:
        """The instruction path the spec was lowered through."""
        return path_of(self.spec)

    @property
    def warnings(self) -> list[Diagnostic]:
        return [w for outcome in self.outcomes for w in outcome.warnings]


def default_problem(spec: ir.KernelSpec) -> tuple[int, int, int]:
    """The problem `compile` analyses a spec at: DEFAULT_PROBLEM, each extent rounded up to the block tile
    where the spec says `bounds: exact` (a 96-row tile cannot run 4096 rows)."""
    if spec.problem.bounds is not ir.Bounds.EXACT:
        return tuple(DEFAULT_PROBLEM)
    tile = (spec.block.m, spec.block.n, spec.block.k)
    return tuple(-(-extent // step) * step for extent, step in zip(DEFAULT_PROBLEM, tile))


def analyze(spec: ir.KernelSpec, problem: tuple[int, int, int] = DEFAULT_PROBLEM,
            ptxas: dict | None = None, plan: KernelPlan | None = None, hints: bool = True) -> Analysis:
    """Run every pass on a validated spec (lowered to `plan` unless given); with `bounds: exact`,
    `problem` must be a multiple of the tile. hints=False leaves out the warnings' hints that cost analysis of
    their own (Context.hints)."""
    size = ProblemSize(*problem)
    tile = (spec.block.m, spec.block.n, spec.block.k)
    if any(extent <= 0 for extent in size):
        raise ProblemSizeError(f"problem {size} has a size below 1")
    beyond = size_errors(size, tile)
    if beyond:
        raise ProblemSizeError("; ".join(beyond))
    if spec.problem.bounds is ir.Bounds.EXACT and any(extent % step for extent, step in zip(size, tile)):
        tile_text = "x".join(map(str, tile))
        raise InexactProblemError([Diagnostic(
            Severity.ERROR, spec.problem.at("bounds"),
            f"problem {size} is not a multiple of the block tile {tile_text}, and the spec says `bounds: exact`",
            f"analyse a problem of whole {tile_text} tiles (--problem), or write `bounds: checked;`")])
    context = Context(plan or plan_kernel(spec), size, ptxas, hints=hints)
    outcomes = PassManager(context.plan.path.passes).run(context)
    return Analysis(spec, context.layout, size, ptxas, dict(context.facts), outcomes)


def summary_lines(analysis: Analysis) -> list[str]:
    """One verdict per pass, in pass order. Deterministic; call with ptxas=None for the .cu header."""
    return [f"{outcome.name}: {outcome.verdict}" for outcome in analysis.outcomes]

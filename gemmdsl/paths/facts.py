"""What the tools read of an instruction path: facts, which `check`, `profile` and `tune` format, compare and
rank without asking which path a spec is on. A path's `facts` attribute is one of these; the defaults (None)
stand for the tile paths' figures (FMA and mma.sync), which the tools' shared report and counters read.

    facts.headline(analysis)             check: the report's first line, or None for the tile report
    facts.alarms(analysis)               check: banners the report opens with (ptxas spills, serialization)
    facts.figures(analysis)              check --json: the path's figures, or None for the tile figures
    facts.ncu_metrics                    profile: the Nsight Compute counters to read, or None for the shared ones
    facts.comparisons(analysis)          profile: (label, predicted, counter) rows, or None for the shared rows
    facts.prediction(analysis, ptxas)    tune: what screening and ranking read (prediction.Prediction)
    facts.scores_on_ptxas                tune: whether survivors are scored again on ptxas's figures
    facts.dequantization(analysis)       check: a quantized B's dequantization cost per k-tile, or None
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..analysis import Analysis
    from ..prediction import Prediction


@dataclass(frozen=True)
class DequantCost:
    """What turning one k-tile of B's codes into A's type costs a consumer thread (`check` states it)."""

    instructions: int  # per consumer thread and k-tile: unpacking the codes, the zero points, the scales
    detail: str  # how they are spent, e.g. "4 lop3 + 4 hsub2 + 4 hmul2 per 8 codes"


@dataclass(frozen=True)
class Comparison:
    """One row of `profile`'s table: a predicted figure and the counter that measures it."""

    label: str
    predicted: float | str | None
    counter: str | None  # an ncu metric, or ncu_counters.MEASURED_BLOCKS_PER_SM


class ToolFacts(ABC):
    """What the tools read of a path; None where the tile paths' shared figures apply."""

    ncu_metrics: tuple[str, ...] | None = None
    scores_on_ptxas = False

    def headline(self, analysis: Analysis) -> str | None:
        return None

    def alarms(self, analysis: Analysis) -> list[str]:
        return []

    def figures(self, analysis: Analysis) -> dict[str, Any] | None:
        return None

    def comparisons(self, analysis: Analysis) -> list[Comparison] | None:
        return None

    def dequantization(self, analysis: Analysis) -> DequantCost | None:
        """A quantized B's dequantization per k-tile; None where the path does not dequantize."""
        return None

    @abstractmethod
    def prediction(self, analysis: Analysis, ptxas: dict | None) -> Prediction:
        """Defined by each path (prediction.tile_prediction is the tile paths')."""

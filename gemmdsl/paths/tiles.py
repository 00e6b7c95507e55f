"""What the FMA and mma.sync paths share: kernels lowered to a TileLayout (layout.py), validated by
validate.py's tile rules, analysed by the tile passes (passes/) and emitted by emit/kernel.py from the
parts each path supplies (`math_parts`), with the launchers of emit/launcher.py."""
from __future__ import annotations

from abc import abstractmethod

from ..emit import emit_tile_definitions
from ..emit.kernel import MathParts
from ..passes import ALL_PASSES
from ..plan import KernelPlan, tile_plan
from ..prediction import Prediction, tile_prediction
from .interface import InstructionPath
from .facts import ToolFacts


class TileFacts(ToolFacts):
    """The tile paths' facts: the tools' shared report and counters, the FMA cost model's prediction."""

    def prediction(self, analysis, ptxas: dict | None) -> Prediction:
        return tile_prediction(analysis, ptxas)


class TilePath(InstructionPath):
    lowering: type  # the TileLayout subclass of the path's kernels
    passes = ALL_PASSES
    facts = TileFacts()

    def validate(self, checker) -> None:
        checker.check_tiles()

    def lower(self, spec) -> KernelPlan:
        return tile_plan(spec, self.lowering, self)

    def emit_definitions(self, plan, out) -> None:
        emit_tile_definitions(plan, out)

    @abstractmethod
    def math_parts(self, spec, layout, out, double: bool) -> MathParts:
        """The fragments, the math and the epilogue of one kernel (emit/kernel.py's choose_parts)."""

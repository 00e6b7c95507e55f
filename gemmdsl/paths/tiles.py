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
    register_copies = False  # whether `copy: registers` is generated
    register_tile: str  # what to shrink for fewer live registers, as validate's budget warning says it

    def validate(self, checker) -> None:
        checker.check_tiles(self)

    @abstractmethod
    def check_threads(self, checker) -> bool:
        """validate.py's rules of the thread layout (and the instruction); whether they hold."""

    @abstractmethod
    def check_stages(self, checker, threads_ok: bool) -> int:
        """validate.py's rules of the lowered shared-memory stages; their bytes."""

    @abstractmethod
    def emit_fragment_helpers(self, helpers, out) -> None:
        """The wrappers of the fragments' shared-memory loads (emit/helpers.py's HelperEmitter asks)."""

    def emit_math_helpers(self, layout, out) -> None:
        """The wrappers of the instruction, after the copies' (none for fmaf)."""

    @abstractmethod
    def register_estimate(self, layout):
        """passes/registers.py's RegisterEstimate of one of the path's layouts."""

    @abstractmethod
    def register_advice(self, spec) -> tuple:
        """What the register pass's warnings point at (a Span), how to need fewer registers, and what to
        weigh against a spill (None: nothing)."""

    @abstractmethod
    def live_registers(self, spec) -> tuple[str, int]:
        """A thread's accumulators (as words) and the 32-bit registers they and one k-step's fragments hold."""

    def lower(self, spec) -> KernelPlan:
        return tile_plan(spec, self.lowering, self)

    def emit_definitions(self, plan, out) -> None:
        emit_tile_definitions(plan, out)

    @abstractmethod
    def math_parts(self, spec, layout, out, double: bool) -> MathParts:
        """The fragments, the math and the epilogue of one kernel (emit/kernel.py's choose_parts)."""

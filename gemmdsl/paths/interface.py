"""The interface every instruction path implements (the registry, paths/__init__.py, lists the paths; its
docstring says what each method supplies). A module of its own so that a path's modules and the stages that
are handed a path import the interface, not the registry, which imports every path."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from .facts import ToolFacts

if TYPE_CHECKING:
    from ..emitter import Emitter
    from ..ir import KernelSpec
    from ..plan import KernelPlan


class InstructionPath(ABC):
    """What an instruction family supplies; see the module docstring. Defaults are the shared behaviour."""

    name: str
    passes: tuple = ()
    batch_strides_note = "(a stride of 0\nshares one matrix)."
    facts: ToolFacts  # what the tools read of it (paths/facts.py)

    @abstractmethod
    def selects(self, spec: KernelSpec) -> bool:
        """Defined by each path."""

    @abstractmethod
    def validate(self, checker: Any) -> None:
        """Defined by each path."""

    @abstractmethod
    def lower(self, spec: KernelSpec) -> KernelPlan:
        """Defined by each path."""

    @abstractmethod
    def emit_definitions(self, plan: KernelPlan, out: Emitter) -> None:
        """Defined by each path."""

    @abstractmethod
    def member_model(self, artifacts: Any) -> Any:
        """Defined by each path."""

    def host_includes(self, spec: KernelSpec) -> list[str]:
        return []

    def launch_contract(self, plan: KernelPlan) -> list[str] | None:
        """The contract's lines on operand alignment, or None for the shared vector-access rule."""
        return None

    def launcher_notes(self, plan: KernelPlan) -> list[str]:
        return []

    def metadata(self, plan: KernelPlan) -> dict:
        return {}

    def peak_tflops(self, sm: int) -> dict[str, float]:
        from ..targets import PEAK_TFLOPS

        return PEAK_TFLOPS.get(sm, {})

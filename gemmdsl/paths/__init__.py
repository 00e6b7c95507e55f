"""Instruction paths: one object per instruction family, chosen once per spec, that supplies everything
the family does differently.

    path = path_of(spec)          # the registered path whose `selects` takes the spec
    plan = path.lower(spec)       # plan.plan_kernel: the KernelPlan, which keeps `path`

Shared code never asks which family a spec is; it asks the plan's path. A path supplies:

- `validate(checker)`: its rules (validate.py's checker collects the diagnostics);
- `lower(spec)`: the KernelPlan, its kernels' layouts and its LaunchPlan (launch_plan.py);
- `passes`: the analysis passes analysis.py runs on the plan;
- `emit_definitions(plan, out)` and `host_includes(specs)`: the kernels, helpers and launchers of the
  .cu; each path's epilogue part (emit/epilogue.py and emit/fragment_epilogue.py for the tile paths,
  paths/wgmma/epilogue.py for wgmma) turns accumulators into C, and is where a per-element step
  shared by every path is called;
- `launch_contract(plan)`, `launcher_notes(plan)`, `batch_strides_note`: what the launchers refuse and
  do beyond the shared rules, for the .cu's and the header's comments;
- `metadata(plan)`: NAME.json's keys beyond the shared ones and the launch plan;
- `member_model(analysis, sms)`: a kernel family's cycle model of a member (cycles.MemberModel), and
  `lowered_member_model(layout, sms)` where the model needs no analysis;
- `peak_tflops(sm)`: the instruction's peaks by unit;
- what the tools print of it: `report(analysis)` and `report_facts(analysis)` (check),
  `ncu_metrics` and `comparison_rows(analysis, metrics)` (profile), `predict(analysis, ptxas)` (tune);
  None where the tile report, metrics or prediction shared by the FMA and mma.sync paths apply.

Adding a path (FP8 wgmma, sm_100's tcgen05): make a package `gemmdsl/paths/<name>/` holding that
path's own modules (its layout, validation rules, passes, emitters, launcher) and `path.py`, which
defines `PATH`, an instance of an `InstructionPath` subclass whose `selects(spec)` takes its specs;
then add `"gemmdsl.paths.<name>.path"` to `REGISTERED` below, before any path whose `selects` would
also take its specs. Nothing else in
gemmdsl changes: tests/test_paths.py checks that shared modules do not branch on a family.
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..cycles import MemberModel
    from ..emitter import Emitter
    from ..ir import KernelSpec
# `KernelPlan` (plan.py) and `Analysis` (analysis.py) in the annotations below name the stages that ask for a
# path: they import this module, so it names them without importing them back.

# The paths, in the order `path_of` asks them; each module defines PATH. Imported when first asked, since
# a path's modules (its emitters, passes) sit above the plan that asks for them.
REGISTERED = (
    "gemmdsl.paths.wgmma_fp8.path",
    "gemmdsl.paths.wgmma.path",
    "gemmdsl.paths.mma_sync.path",
    "gemmdsl.paths.fma.path",
)


class InstructionPath(ABC):
    """What an instruction family supplies; see the module docstring. Defaults are the shared behaviour."""

    name: str
    passes: tuple = ()
    batch_strides_note = "(a stride of 0\nshares one matrix)."
    ncu_metrics: tuple[str, ...] | None = None
    tune_reads_ptxas = False  # the tuner scores survivors on ptxas's registers and spills (tune.ranks_on_ptxas)

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
    def member_model(self, analysis: Analysis, sms: int) -> MemberModel:
        """Defined by each path."""

    def lowered_member_model(self, layout: Any, sms: int) -> MemberModel | None:
        """The member model from the lowering alone, where the path's model reads no analysis pass (the
        tuner's score of many candidates skips the passes so); None otherwise."""
        return None

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

    def report(self, analysis: Analysis) -> str | None:
        return None

    def report_facts(self, analysis: Analysis) -> dict | None:
        return None

    def comparison_rows(self, analysis: Analysis, metrics: dict[str, float]) -> list | None:
        return None

    def predict(self, analysis: Analysis, ptxas: dict | None) -> Any:
        return None


@cache
def registered() -> tuple[InstructionPath, ...]:
    return tuple(importlib.import_module(name).PATH for name in REGISTERED)


def path_of(spec: KernelSpec) -> InstructionPath:
    """The path that generates `spec`: the first registered one that selects it."""
    return next(path for path in registered() if path.selects(spec))

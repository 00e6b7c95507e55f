"""Instruction paths: one object per instruction family, chosen once per spec, that supplies everything
the family does differently.

    path = path_of(spec)          # the registered path whose `selects` takes the spec
    plan = path.lower(spec)       # plan_kernel(spec): the KernelPlan, which keeps `path`

Shared code never asks which family a spec is; it asks the plan's path. A path (an `InstructionPath`,
paths/interface.py) supplies:

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
- `member_model(artifacts)`: a kernel family's cycle model of a member;
- `peak_tflops(sm)`: the instruction's peaks by unit;
- `facts`: what the tools (check, profile, tune) read of it, a `ToolFacts` (paths/facts.py): its report's
  figures, its counters, its prediction. The tools never ask which path a spec is on; paths never import
  the tools (tests/test_imports.py holds the layers).

Adding a path (FP8 wgmma, sm_100's tcgen05): make a package `gemmdsl/paths/<name>/` holding that
path's own modules (its layout, validation rules, passes, emitters, launcher) and `path.py`, which
defines `PATH`, an instance of an `InstructionPath` subclass whose `selects(spec)` takes its specs;
then add `"gemmdsl.paths.<name>.path"` to `REGISTERED` below, before any path whose `selects` would
also take its specs. Nothing else in
gemmdsl changes: tests/test_paths.py checks that shared modules do not branch on a family.
"""
from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

from .interface import InstructionPath

if TYPE_CHECKING:
    from ..ir import KernelSpec
    from ..plan import KernelPlan

# The paths, in the order `path_of` asks them; each module defines PATH. Imported when first asked: a path's
# modules (its emitters, passes) import the shared stages, which this registry sits above (the shared stages
# are handed the plan's path, never look it up: tests/test_imports.py).
REGISTERED = (
    "gemmdsl.paths.wgmma_fp8.path",
    "gemmdsl.paths.wgmma.path",
    "gemmdsl.paths.mma_sync.path",
    "gemmdsl.paths.fma.path",
)


@cache
def registered() -> tuple[InstructionPath, ...]:
    return tuple(importlib.import_module(name).PATH for name in REGISTERED)


def path_of(spec: KernelSpec) -> InstructionPath:
    """The path that generates `spec`: the first registered one that selects it."""
    return next(path for path in registered() if path.selects(spec))


def plan_kernel(spec: KernelSpec) -> KernelPlan:
    """Lower a validated spec through its instruction path, chosen here once."""
    return path_of(spec).lower(spec)

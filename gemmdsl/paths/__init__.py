"""Instruction paths: one object per instruction family, chosen once per spec, that supplies everything
the family does differently.

    path = path_of(spec)          # the registered path whose `selects` takes the spec
    plan = path.lower(spec)       # plan_kernel(spec): the KernelPlan, which keeps `path`

Shared code never asks which family a spec is; it asks the plan's path. A path (an `InstructionPath`,
paths/interface.py) supplies:

- what the front end asks before a spec exists (parser.py): `takes(shape, a, b)`, whether a spec whose
  `mma` section's shape reads as the type `shape` (None: no `mma` section) with operands of types a and b
  is the path's (`selects(spec)` asks the same of a spec); `key_sets`, the parser's key sets
  (parser.KEY_SETS) its specs may hold; `shape_syntax` and `shape_type`, a shape of its own; and the defaults of the keys a spec leaves out (`default_copy`,
  `default_swizzle_bytes`, `default_accumulate`, `smem_in_global_order`, `smem_read`);
- `unit(spec)` and `warp_tile(spec)`: what multiplies and what one warp accumulates (passes/intensity.py);
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
- `facts`: what the tools (check, profile, tune) read of it, a `ToolFacts` (paths/facts.py): its report's
  figures, its counters, its prediction. The tools never ask which path a spec is on; paths never import
  the tools (tests/test_imports.py holds the layers).

Adding a path (FP8 wgmma, sm_100's tcgen05): make a package `gemmdsl/paths/<name>/` holding that
path's own modules (its layout, validation rules, passes, emitters, launcher, cycle model) and `path.py`,
which defines `PATH`, an instance of an `InstructionPath` subclass whose `takes` (or `selects`) takes its
specs; then add `"gemmdsl.paths.<name>.path"` to `REGISTERED` below, before any path whose `selects`
would also take its specs. A path defined outside the package (a plug-in, a test's) is added with
`register(module)` instead. Nothing else in gemmdsl changes: tests/test_paths.py and
tests/test_branches_pipeline.py check that shared modules do not branch on a family, and
tests/test_toy_path.py compiles a spec on a path registered from a module of its own.
"""
from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

from .facts import DequantCost
from .interface import InstructionPath

if TYPE_CHECKING:
    from ..ir import DType, KernelSpec
    from ..plan import KernelPlan

# The paths, in the order `path_of` asks them; each module defines PATH. Imported when first asked: a path's
# modules (its emitters, passes) import the shared stages, which this registry sits above (the shared stages
# are handed the plan's path, never look it up: tests/test_imports.py).
REGISTERED = (
    "gemmdsl.paths.dequant.path",
    "gemmdsl.paths.wgmma_fp8.path",
    "gemmdsl.paths.wgmma.path",
    "gemmdsl.paths.mma_sync.path",
    "gemmdsl.paths.gemv.path",
    "gemmdsl.paths.fma.path",
)


_ADDED: list[str] = []  # modules `register` added, asked before REGISTERED's, the latest first


@cache
def registered() -> tuple[InstructionPath, ...]:
    return tuple(importlib.import_module(name).PATH for name in (*_ADDED, *REGISTERED))


def register(module: str) -> InstructionPath:
    """Add the path an importable module defines (its `PATH`), inside gemmdsl or not: asked before the
    shipped paths, so that its `takes` or `selects` may claim specs they would also take. Returns the path."""
    if module not in _ADDED:
        _ADDED.insert(0, module)
        registered.cache_clear()
    return importlib.import_module(module).PATH


def unregister(module: str) -> None:
    """Take back a path `register` added."""
    _ADDED.remove(module)
    registered.cache_clear()


def path_of(spec: KernelSpec) -> InstructionPath:
    """The path that generates `spec`: the first registered one that selects it."""
    return next(path for path in registered() if path.selects(spec))


def path_taking(shape: type | None, a: DType | None, b: DType | None) -> InstructionPath:
    """The path of a spec that does not exist yet (the front end's question): the first registered one that
    takes its `mma` section's shape type and its operand types."""
    return next(path for path in registered() if path.takes(shape, a, b))


def plan_kernel(spec: KernelSpec) -> KernelPlan:
    """Lower a validated spec through its instruction path, chosen here once."""
    return path_of(spec).lower(spec)

"""Instruction paths: one object per instruction family, chosen once per spec, that supplies everything
the family does differently.

    path = path_of(spec)          # the registered path whose `selects` takes the spec
    plan = path.lower(spec)       # plan.plan_kernel: the KernelPlan, which keeps `path`

Shared code never asks which family a spec is; it asks the plan's path. A path supplies:

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
- what the tools print of it: `report(analysis)` and `report_facts(analysis)` (check),
  `ncu_metrics` and `comparison_rows(analysis, metrics)` (profile), `predict(analysis, ptxas)` (tune);
  None where the tile report, metrics or prediction shared by the FMA and mma.sync paths apply.

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
import re
from abc import ABC, abstractmethod
from functools import cache
from typing import TYPE_CHECKING, Any

from ..ir import Precision

if TYPE_CHECKING:
    from ..cycles import MemberModel
    from ..emitter import Emitter
    from ..ir import Accumulate, CopyMode, DType, KernelSpec, Pair
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
    # The front end's questions (parser.py), asked before a spec exists.
    key_sets: frozenset[str] = frozenset()  # the parser's KEY_SETS whose keys the path's specs may hold
    default_copy: CopyMode  # `pipeline { copy: ...; }` left out
    default_swizzle_bytes: int | None = None  # `smem a|b { swizzle: ...; }` left out: a swizzle mode, or none
    default_accumulate: Accumulate | None = None  # `mma { accumulate: ...; }` left out
    # A shape of the path's own (`mma { shape: ...; }` beyond ir.MmaShape's names): its syntax, whose named
    # groups are the sizes `shape_type` is built from.
    shape_syntax: re.Pattern | None = None
    shape_type: type | None = None

    @abstractmethod
    def takes(self, shape: type | None, a: DType | None, b: DType | None) -> bool:
        """Whether a spec whose `mma` section's shape reads as `shape` (ir.MmaShape, ir.WgmmaShape; None without
        an `mma` section) with A and B of types a and b (None: not read) is this path's."""

    def selects(self, spec: KernelSpec) -> bool:
        mma = spec.mma
        return self.takes(None if mma is None else type(mma.shape), spec.problem.a.dtype, spec.problem.b.dtype)

    def smem_in_global_order(self, dtype: DType) -> bool:
        """Whether an operand of this type lands in shared memory in its global order unless the spec says
        otherwise (else the order the FMA outer product reads best)."""
        return False

    def smem_read(self, read: Any, dtype: DType) -> dict:
        """The ir.SmemLayout fields of `smem a|b { read: ...; }` (`read`, None where left out)."""
        return {}

    def unit(self, spec: KernelSpec) -> str:
        """What multiplies, as precisions.py and the peaks name it: the tensor cores' element type, or TF32's
        precision (the FMA and FP8 paths say otherwise)."""
        precision = spec.mma.precision
        if precision is Precision.TF32X3:
            return "3xtf32"
        return "tf32" if precision is Precision.TF32 else spec.problem.a.dtype.value

    def warp_tile(self, spec: KernelSpec) -> Pair:
        """Rows and columns of C one warp accumulates."""
        return spec.mma.warp_tile

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

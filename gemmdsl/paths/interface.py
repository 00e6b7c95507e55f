"""The interface every instruction path implements (the registry, paths/__init__.py, lists the paths; its
docstring says what each method supplies). A module of its own so that a path's modules and the stages that
are handed a path import the interface, not the registry, which imports every path."""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from ..ir import Precision
from .facts import ToolFacts

if TYPE_CHECKING:
    from ..analysis import Analysis
    from ..cycles import MemberModel
    from ..emitter import Emitter
    from ..ir import Accumulate, CopyMode, DType, KernelSpec, Pair
    from ..plan import KernelPlan


class InstructionPath(ABC):
    """What an instruction family supplies; see the module docstring. Defaults are the shared behaviour."""

    name: str
    passes: tuple = ()
    batch_strides_note = "(a stride of 0\nshares one matrix)."
    facts: ToolFacts  # what the tools read of it (paths/facts.py)
    # Whether the block that finishes a stream-K tile adds the other blocks' partial sums before its epilogue,
    # so a fuse chain sees each element's whole sum (the wgmma path); elsewhere the partial sums meet in C.
    stream_k_sums_whole = False
    # The front end's questions (parser.py), asked before a spec exists.
    key_sets: frozenset[str] = frozenset()  # the parser's KEY_SETS whose keys the path's specs may hold
    default_copy: CopyMode  # `pipeline { copy: ...; }` left out
    default_swizzle_bytes: int | None = None  # `smem a|b { swizzle: ...; }` left out: a swizzle mode, or none
    default_accumulate: Accumulate | None = None  # `mma { accumulate: ...; }` left out
    default_stages = 1  # `pipeline { stages: ...; }` left out
    # A shape of the path's own (`mma { shape: ...; }` beyond ir.MmaShape's names): its syntax, whose named
    # groups are the sizes `shape_type` is built from.
    shape_syntax: re.Pattern | None = None
    shape_type: type | None = None
    shape_words: tuple[str, ...] = ()  # the plain words `shape_syntax` takes, named in the parser's hints
    # The weight types (ir.Problem.weights: integer codes, or e4m3 against a 16-bit A) whose B the path
    # dequantizes with `quant b { ... }` (docs/quantized.md); validation refuses quantized weights elsewhere.
    weight_types: frozenset[DType] = frozenset()

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

    def load_vectors(self, dtype: DType) -> tuple[int, ...]:
        """The vector widths (elements, narrowest first) a global load of an operand of `dtype` may take."""
        return dtype.vector_widths

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

    def header(self, plan: KernelPlan) -> str | None:
        """NAME.h where the path's launchers are its own (the dequantizing path's); None: the shared header of
        the tile launchers (emit/header.py)."""
        return None

    def peak_tflops(self, sm: int) -> dict[str, float]:
        from ..targets import PEAK_TFLOPS

        return PEAK_TFLOPS.get(sm, {})

"""Shared -> register fragment loads of one k-step.

`SharedLoads` issues `lds` (ld.volatile.shared) for the plan's fragment loads
(`KernelLayout.fragment_loads`, the list the analysis counts). An ldmatrix engine would be another
class with the same methods: `declare()`, `emit_stage_pointers(stage, name)` and
`load(kk, buffer, source)`.
"""
from __future__ import annotations

from ..emitter import Emitter
from ..expr import Expr
from ..layout import KernelLayout
from .ctext import OPERANDS, as_vector, stage_base


class SharedLoads:
    """Fragments loaded with lds, single- or double-buffered (the `buffer` index is C text)."""

    def __init__(self, layout: KernelLayout, out: Emitter, double: bool):
        self.layout = layout
        self.out = out
        self.double = double

    def declare(self) -> None:
        buffers = "[2]" if self.double else ""
        self.out.line(f"float a_frag{buffers}[FRAG_M];")
        self.out.line(f"float b_frag{buffers}[FRAG_N];")

    def emit_stage_pointers(self, stage: str, name: str) -> None:
        """Declare `a_<name>` / `b_<name>`, the start of shared-memory stage `stage` of A and B."""
        for operand in OPERANDS:
            self.out.line(f"const float* const {operand.value}_{name} = {stage_base(operand, stage)};")

    def load(self, kk: Expr | int, buffer: str, source: str = "read") -> None:
        """Fragments of k index `kk` from the stage that `a_<source>` / `b_<source>` point at."""
        for operand in OPERANDS:
            frag = f"{operand.value}_frag{buffer}"
            for load in self.layout.fragment_loads(operand, kk):
                address = f"{operand.value}_{source} + {load.offset.render()}"
                self.out.line(f"{as_vector(f'{frag}[{load.index}]', load.width)} = lds{32 * load.width}({address});")

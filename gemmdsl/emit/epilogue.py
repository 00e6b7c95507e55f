"""The epilogue: the accumulators to C, walking each of a thread's lines of C.

Three forms: store (C = acc), alpha_beta (C = alpha * acc + beta * C) and, for a work tile that
holds only a k-range of its C tile (stream-K), an atomic add into C. Checked bounds add an edge
path that stores one element at a time, only inside C.
"""
from __future__ import annotations

from contextlib import nullcontext

from .. import ir
from ..emitter import Emitter
from ..layout import KernelLayout
from .ctext import VECTOR_TYPES, as_vector, component, make_vector
from .scheduler import WorkTile


class Epilogue:
    def __init__(self, spec: ir.KernelSpec, layout: KernelLayout, out: Emitter):
        self.spec = spec
        self.layout = layout
        self.out = out

    def emit(self, work: WorkTile) -> None:
        o = self.out
        width = self.layout.c_store_width()
        alpha_beta = self.spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
        what = "C = alpha * acc + beta * C (C is not read when beta == 0)" if alpha_beta else "C = acc"
        major = self.spec.problem.c.layout.value
        o.comment(f"Epilogue: {what}; C is {major}-major, {width} float(s) per store along each "
                  f"{'row' if major == 'row' else 'column'} of C.")
        if work.atomic:
            o.comment("A share of a stream-K tile: add it to C, which the launcher set to beta * C\n"
                      "(0 for epilogue: store) before this kernel started.")
        if not self.spec.problem.checked:
            self._emit_c_stores(guarded=False, atomic=work.atomic)
            return
        with o.block("if (block_inside)"):
            self._emit_c_stores(guarded=False, atomic=work.atomic)
        with o.block("else"):
            o.comment("Edge block: one element at a time, only inside C.")
            self._emit_c_stores(guarded=True, atomic=work.atomic)

    def _emit_c_stores(self, guarded: bool, atomic: bool) -> None:
        """Store the accumulators, walking each of a thread's lines of C (rows of row-major C,
        columns of column-major C) and storing along the line, where C is contiguous."""
        o = self.out
        width = 1 if guarded else self.layout.c_store_width()
        line_axis, along = ("m", "n") if self.spec.problem.c.layout is ir.MatrixLayout.ROW else ("n", "m")
        line_index, line_loops = _epilogue_axis(line_axis)
        _, along_loops = _epilogue_axis(along)
        repeat, micro = line_loops
        with o.unrolled(repeat, f"REPEAT_{line_axis.upper()}"):
            with o.unrolled(micro, f"MICRO_{line_axis.upper()}"):
                o.line(f"const int {line_index} = block_{line_axis} + thread_{line_axis} + {repeat} * "
                       f"REPEAT_STRIDE_{line_axis.upper()} + {micro};")
                o.line(f"const int f{line_axis} = {repeat} * MICRO_{line_axis.upper()} + {micro};")
                limit = f"if ({line_index} < {line_axis.upper()})" if guarded else None
                with o.block(limit) if limit else nullcontext():
                    o.line(f"float* const c_line = C + (size_t){line_index} * ldc + block_{along} + thread_{along};")
                    self._emit_line_stores(along, along_loops, width, guarded, atomic)

    def _emit_line_stores(self, axis: str, loops: tuple[str, str], width: int, guarded: bool,
                          atomic: bool) -> None:
        o = self.out
        repeat, micro = loops
        alpha_beta = self.spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
        vtype = VECTOR_TYPES[width]
        with o.unrolled(repeat, f"REPEAT_{axis.upper()}"):
            with o.unrolled(micro, f"MICRO_{axis.upper()}", width):
                o.line(f"const int offset = {repeat} * REPEAT_STRIDE_{axis.upper()} + {micro};")
                o.line(f"const int f{axis} = {repeat} * MICRO_{axis.upper()} + {micro};")
                limit = f"if (block_{axis} + thread_{axis} + offset < {axis.upper()})" if guarded else None
                with o.block(limit) if limit else nullcontext():
                    values = [_accumulator(axis, e) for e in range(width)]
                    if alpha_beta:
                        values = [f"alpha * {v}" for v in values]
                    o.line(f"{vtype} out = {make_vector(width, values)};")
                    if atomic:
                        self._emit_atomic_add(width)
                    else:
                        self._emit_store(width, alpha_beta)

    def _emit_store(self, width: int, alpha_beta: bool) -> None:
        """c_line[offset] = out (+ beta * the old value)."""
        o, vtype = self.out, VECTOR_TYPES[width]
        if alpha_beta:
            with o.block("if (beta != 0.0f)"):
                o.line(f"const {vtype} old = {as_vector('c_line[offset]', width, const=True)};")
                for e in range(width):
                    o.line(f"{component('out', width, e)} += beta * {component('old', width, e)};")
        o.line(f"{as_vector('c_line[offset]', width)} = out;")

    def _emit_atomic_add(self, width: int) -> None:
        """c_line[offset] += out: one vector reduction where the target has it (sm_90 adds float2 and
        float4 in one instruction), one per element otherwise."""
        o = self.out
        if width > 1 and self.layout.arch.has_vector_atomic_add:
            o.line(f"atomicAdd(reinterpret_cast<{VECTOR_TYPES[width]}*>(&c_line[offset]), out);")
            return
        for e in range(width):
            target = "c_line[offset]" if e == 0 else f"c_line[offset + {e}]"
            o.line(f"atomicAdd(&{target}, {component('out', width, e)});")


def _epilogue_axis(axis: str) -> tuple[str, tuple[str, str]]:
    """(name of the global index, (repeat loop variable, micro loop variable)) along m or n."""
    return ("row", ("rm", "i")) if axis == "m" else ("col", ("rn", "j"))


def _accumulator(along: str, element: int) -> str:
    """The accumulator of element `element` of a store that runs along `along` (m or n)."""
    step = f" + {element}" if element else ""
    return f"acc[fm{step}][fn]" if along == "m" else f"acc[fm][fn{step}]"

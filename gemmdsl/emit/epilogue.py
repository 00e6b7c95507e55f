"""The epilogue: the accumulators to C, walking each of a thread's lines of C.

Three forms: store (C = acc), alpha_beta (C = alpha * acc + beta * C) and, for a work tile that
holds only a k-range of its C tile (stream-K), an atomic add into C. Checked bounds add an edge
path that stores only inside C: whole vectors when C's edge cannot split one (N, or M for
column-major C, a multiple of the width), one element at a time otherwise. The scalar kernel (A or B
not vector-aligned) still stores vectors where C is aligned. One-element stores of a thread's micro
tile leave most of each 32-byte sector unwritten, and stream-K's one-element atomic adds cost four
times the vector ones: in a short-K call (2048x2048x77) or a call of edge tiles only (127x4096x4096)
that was most of the time.
"""
from __future__ import annotations

from contextlib import nullcontext

from .. import ir
from ..emitter import Emitter
from ..layout import KernelLayout
from .ctext import VECTOR_TYPES, as_vector, component, make_vector
from .scheduler import WorkTile

FLOAT_BYTES = 4  # C is float on the FMA path


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
            self._emit_c_stores(width, guarded=False, atomic=work.atomic)
            return
        aligned_width = self.layout.c_store_width(aligned_c=True)
        aligned = (f"reinterpret_cast<size_t>(C) % {aligned_width * FLOAT_BYTES} == 0 && ldc % {aligned_width} == 0"
                   if aligned_width > width else "")
        with o.block("if (block_inside)"):
            self._emit_either(aligned, aligned_width, width, guarded=False, atomic=work.atomic)
        with o.block("else"):
            o.comment("Edge block: only inside C; whole vectors where C's edge cannot split one.")
            extent = "N" if major == "row" else "M"
            wholly = " && ".join(filter(None, (aligned, f"{extent} % {aligned_width} == 0")))
            self._emit_either(wholly if aligned_width > 1 else "", aligned_width, 1, guarded=True, atomic=work.atomic)

    def _emit_either(self, test: str, wide: int, narrow: int, guarded: bool, atomic: bool) -> None:
        """Stores `wide` at a time where the run-time `test` holds, `narrow` at a time otherwise."""
        if not test:
            self._emit_c_stores(narrow, guarded, atomic)
            return
        with self.out.block(f"if ({test})"):
            self._emit_c_stores(wide, guarded, atomic)
        with self.out.block("else"):
            self._emit_c_stores(narrow, guarded, atomic)

    def _emit_c_stores(self, width: int, guarded: bool, atomic: bool) -> None:
        """Store the accumulators `width` at a time, walking each of a thread's lines of C (rows of
        row-major C, columns of column-major C) and storing along the line, where C is contiguous."""
        o = self.out
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

"""The epilogue: the accumulators to C, walking each of a thread's lines of C.

Three forms: store (C = acc), alpha_beta (C = alpha * acc + beta * C) and, for a work tile that
holds only a k-range of its C tile (stream-K), an atomic add into C. Checked bounds add an edge
path that stores only inside C: whole vectors when C's edge cannot split one (N, or M for
column-major C, a multiple of the width), one element at a time otherwise. The scalar kernel (A or B
not vector-aligned) still stores vectors where C is aligned. One-element stores of a thread's micro
tile leave most of each 32-byte sector unwritten, and stream-K's one-element atomic adds cost four
times the vector ones: in a short-K call (2048x2048x77) or a call of edge tiles only (127x4096x4096)
that was most of the time. Where C allows no vector (a misaligned C, or an edge that splits one),
a stream-K share's one-element adds go through shared memory (`StagedAdds`): a thread's micro tile
puts four neighbours of a warp instruction 16 bytes apart, about 20 sectors of C per instruction,
and L2 serves atomics sector by sector; staged, a warp adds 32 consecutive elements (4 or 5
sectors). Measured on the H100: 4096x127x4096 (every tile an edge tile, ldc = 127) 29.0 -> 33.7
TFLOP/s.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from functools import cached_property

from .. import ir
from ..emitter import Emitter
from ..layout import KernelLayout
from .ctext import VECTOR_TYPES, as_vector, component, make_vector
from .fuse import FuseChain, to_float
from .scale_c import FROM_FLOAT
from .scheduler import WorkTile

FLOAT_BYTES = 4  # C is float on the FMA path
# Floats added to each staged line's pitch: rows of the staging buffer start 4 banks apart, and
# stay 16-byte aligned.
STAGING_PAD = 4


@dataclass(frozen=True)
class StagedAdds:
    """A stream-K share's one-element atomic adds, staged through shared memory.

    One (repeat, micro) step along C's line axis (m for row-major C) at a time, every thread writes
    its line of accumulators to slot `thread_line / MICRO` of the buffer (a slot per distinct
    thread line, each `pitch` floats: the tile's extent along the other axis and a pad), then the
    block adds the buffer to C, consecutive threads on consecutive elements. It needs the threads'
    lines to be the multiples of MICRO below `slots` x MICRO, with each slot covered whole, and the
    buffer to fit in the pipeline's shared memory, which the share has finished reading."""

    line: str  # "m" or "n": the axis of C's lines
    slots: int
    pitch: int

    @property
    def along(self) -> str:
        return "n" if self.line == "m" else "m"


def staged_adds(spec: ir.KernelSpec, layout: KernelLayout) -> StagedAdds | None:
    """How this kernel stages one-element atomic adds, or None where its thread layout or shared
    memory does not allow it (the adds then go straight from the accumulators)."""
    import numpy as np

    if layout.element_bytes != FLOAT_BYTES:  # the buffer is the pipeline's shared memory, as floats
        return None
    line = "m" if spec.problem.c.layout is ir.MatrixLayout.ROW else "n"
    along = "n" if line == "m" else "m"
    micro = spec.threads.micro.m if line == "m" else spec.threads.micro.n
    extent = layout.bn if along == "n" else layout.bm
    env = layout.thread_env()
    lines = np.asarray(env[f"thread_{line}"])
    if np.any(lines % micro):
        return None
    slots = lines // micro
    count = int(slots.max()) + 1
    covered = np.zeros((count, extent), dtype=bool)
    for _, coordinate in layout.fragment_rows(along):  # every element a thread holds along the line
        covered[slots, coordinate.evaluate(env)] = True
    pitch = extent + STAGING_PAD
    if not covered.all() or count * pitch > layout.smem_elems:
        return None
    return StagedAdds(line, count, pitch)


class Epilogue:
    def __init__(self, spec: ir.KernelSpec, layout: KernelLayout, out: Emitter):
        self.spec = spec
        self.layout = layout
        self.out = out
        self.fuse = FuseChain(spec) if spec.fuse is not None else None
        self.c_type = spec.problem.c.dtype.c_type
        # 16-bit C: one element a store (layout.c_store_width), rounded once from its f32 accumulator
        self.narrow_c = spec.problem.c.dtype is not ir.DType.F32

    @cached_property
    def staged(self) -> StagedAdds | None:
        """Only kernels with one-element atomic adds ask (stream-K shares)."""
        return staged_adds(self.spec, self.layout)

    def emit(self, work: WorkTile) -> None:
        o = self.out
        width = self.layout.c_store_width()
        alpha_beta = self.spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
        what = "C = alpha * acc + beta * C (C is not read when beta == 0)" if alpha_beta else "C = acc"
        major = self.spec.problem.c.layout.value
        o.comment(f"Epilogue: {what}; C is {major}-major, {width} {self.c_type}(s) per store along each "
                  f"{'row' if major == 'row' else 'column'} of C.")
        if work.atomic:
            o.comment("A share of a stream-K tile: add it to C, which the launcher set to beta * C\n"
                      "(0 for epilogue: store) before this kernel started.")
        if self.fuse is not None:
            self._emit_fuse_values(self.fuse)
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

    def _emit_fuse_values(self, fuse: FuseChain) -> None:
        """The fuse chain's values of each row and column of this thread's micro tiles, loaded once."""
        o = self.out
        o.comment(f"Fused: C = {self.spec.fuse.describe(self.spec.problem.epilogue is ir.Epilogue.ALPHA_BETA)}; "
                  "the values of this thread's rows and columns, loaded once.")
        for axis, load in (("m", fuse.load_row), ("n", fuse.load_col)):
            A = axis.upper()
            o.line(f"fuse_{axis} fuse_{axis}_values[REPEAT_{A} * MICRO_{A}];")
            repeat, micro = _epilogue_axis(axis)[1]
            with o.unrolled(repeat, f"REPEAT_{A}"), o.unrolled(micro, f"MICRO_{A}"):
                o.line(f"fuse_{axis}_values[{repeat} * MICRO_{A} + {micro}] = "
                       f"{load(f'block_{axis} + thread_{axis} + {repeat} * REPEAT_STRIDE_{A} + {micro}')};")

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
        if atomic and width == 1 and self.staged is not None:
            self._emit_staged_adds(self.staged, guarded)
            return
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
                    o.line(f"{self.c_type}* const c_line = C + (size_t){line_index} * ldc + block_{along} + "
                           f"thread_{along};")
                    self._emit_line_stores(along, along_loops, width, guarded, atomic)

    def _emit_staged_adds(self, staged: StagedAdds, guarded: bool) -> None:
        """C += the accumulators, one element per atomic add, through shared memory (`StagedAdds`)."""
        o, line, along = self.out, staged.line, staged.along
        line_index, (line_repeat, line_micro) = _epilogue_axis(line)
        along_index, (along_repeat, along_micro) = _epilogue_axis(along)
        L, A = line.upper(), along.upper()
        extent = f"B{A}"
        scale = "alpha * " if self.spec.problem.epilogue is ir.Epilogue.ALPHA_BETA else ""
        o.comment("One-element atomic adds, staged through shared memory a line of each thread's tile at a\n"
                  "time, so that a warp adds consecutive elements of C (a few sectors per instruction).")
        o.line("__syncthreads();  // the pipeline's stages are no longer read")
        with o.unrolled(line_repeat, f"REPEAT_{L}"):
            with o.unrolled(line_micro, f"MICRO_{L}"):
                o.line(f"const int f{line} = {line_repeat} * MICRO_{L} + {line_micro};")
                with o.unrolled(along_repeat, f"REPEAT_{A}"):
                    with o.unrolled(along_micro, f"MICRO_{A}"):
                        o.line(f"const int f{along} = {along_repeat} * MICRO_{A} + {along_micro};")
                        o.line(f"smem[thread_{line} / MICRO_{L} * {staged.pitch} + thread_{along} + {along_repeat} * "
                               f"REPEAT_STRIDE_{A} + {along_micro}] = {scale}acc[fm][fn];")
                o.line("__syncthreads();")
                o.line("#pragma unroll")
                with o.block(f"for (int e = tid; e < {staged.slots} * {extent}; e += {self.layout.threads})"):
                    o.line(f"const int slot = e / {extent};")
                    o.line(f"const int {line_index} = block_{line} + slot * MICRO_{L} + {line_repeat} * "
                           f"REPEAT_STRIDE_{L} + {line_micro};")
                    o.line(f"const int {along_index} = block_{along} + e % {extent};")
                    bounds = "if (row < M && col < N)" if guarded else None
                    with o.block(bounds) if bounds else nullcontext():
                        o.line(f"atomicAdd(&C[(size_t){line_index} * ldc + {along_index}], "
                               f"smem[slot * {staged.pitch} + e % {extent}]);")
                o.line("__syncthreads();")

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
                    if self.fuse is not None:  # validation keeps stream-K's atomic adds out
                        self._emit_fused_store(self.fuse, axis, width)
                        return
                    values = [_accumulator(axis, e) for e in range(width)]
                    if alpha_beta:
                        values = [f"alpha * {v}" for v in values]
                    o.line(f"{vtype} out = {make_vector(width, values)};")
                    if atomic:
                        self._emit_atomic_add(width)
                    else:
                        self._emit_store(width, alpha_beta)

    def _emit_fused_store(self, fuse: FuseChain, axis: str, width: int) -> None:
        """c_line[offset] = the fuse chain of `width` accumulators along `axis` (C's old value read only where
        beta is not 0)."""
        o, vtype = self.out, VECTOR_TYPES[width]
        old = "0.0f"
        if self.spec.problem.epilogue is ir.Epilogue.ALPHA_BETA:
            old = "old"
            o.line(f"{vtype} old = {make_vector(width, ['0.0f'] * width)};")
            o.line(f"if (beta != 0.0f) old = {as_vector('c_line[offset]', width, const=True)};")
        index = {"m": "row", "n": "col"}
        index[axis] = f"block_{axis} + thread_{axis} + offset"
        o.line(f"{vtype} out;")
        for e in range(width):
            step = f" + {e}" if e else ""
            row, col = (index["m"] + (step if axis == "m" else ""), index["n"] + (step if axis == "n" else ""))
            fm, fn = ("fm" + step, "fn") if axis == "m" else ("fm", "fn" + step)
            value = fuse.element(_accumulator(axis, e), f"fuse_m_values[{fm}]", f"fuse_n_values[{fn}]",
                                 component(old, width, e) if old != "0.0f" else old, row, col)
            o.line(f"{component('out', width, e)} = {value};")
        o.line(f"{as_vector('c_line[offset]', width)} = out;")

    def _emit_store(self, width: int, alpha_beta: bool) -> None:
        """c_line[offset] = out (+ beta * the old value)."""
        o, vtype = self.out, VECTOR_TYPES[width]
        if self.narrow_c:  # one element (c_store_width), read and written in C's type
            c = self.spec.problem.c.dtype
            if alpha_beta:
                o.line(f"if (beta != 0.0f) out += beta * {to_float(c, 'c_line[offset]')};")
            o.line(f"c_line[offset] = {FROM_FLOAT[c].format('out')};")
            return
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
            o.uses("float2 and float4 atomicAdd")
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

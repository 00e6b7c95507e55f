"""The epilogue of tensor-core kernels: the accumulators to C over the instruction's C fragment.

Register pair (2h, 2h+1) of block (i, j) holds two neighbours along n (`MmaLayout.c_pair`).
Row-major C stores the pair as one 2-element vector (float2, __nv_bfloat162, __half2); column-major
C, edge blocks and the scalar variant store element by element. The value stored is converted to
C's element type (round to nearest); accumulation is FP32 throughout. Forms as in epilogue.py:
store, alpha_beta, and the stream-K atomic add (f32 C only, which validation requires).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..emitter import Emitter
from ..expr import Var
from ..mma_layout import MmaLayout
from .fuse import FuseChain
from .scheduler import WorkTile


@dataclass(frozen=True)
class CElement:
    """How C's element type is read and written from FP32 values, singly and in pairs."""

    c_type: str
    pair_type: str
    to_float: str  # a C function, "" for none
    from_float: str
    pair_to_float2: str
    pair_from_floats: str


C_ELEMENTS = {
    ir.DType.F32: CElement("float", "float2", "", "", "", "make_float2"),
    ir.DType.BF16: CElement("__nv_bfloat16", "__nv_bfloat162", "__bfloat162float", "__float2bfloat16",
                            "__bfloat1622float2", "__floats2bfloat162_rn"),
    ir.DType.F16: CElement("__half", "__half2", "__half2float", "__float2half", "__half22float2",
                           "__floats2half2_rn"),
}


def _call(function: str, argument: str) -> str:
    return f"{function}({argument})" if function else argument


class FragmentEpilogue:
    def __init__(self, spec: ir.KernelSpec, layout: MmaLayout, out: Emitter):
        self.spec = spec
        self.layout = layout
        self.out = out
        self.c = C_ELEMENTS[spec.problem.c.dtype]
        self.alpha_beta = spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
        self.row_major = spec.problem.c.layout is ir.MatrixLayout.ROW
        self.fuse = FuseChain(spec) if spec.fuse is not None else None

    def emit(self, work: WorkTile) -> None:
        o = self.out
        what = "C = alpha * acc + beta * C (C is not read when beta == 0)" if self.alpha_beta else "C = acc"
        o.comment(f"Epilogue: {what}; C is {self.spec.problem.c.layout.value}-major {self.c.c_type}; "
                  "each thread holds pairs of neighbours along n.")
        pairs = self.row_major and self.layout.c_store_width() == 2
        if work.atomic:
            o.comment("A share of a stream-K tile: add it to C, which the launcher set to beta * C\n"
                      "(0 for epilogue: store) before this kernel started.")
            self._emit_atomics(pairs)
            return
        if self.fuse is not None:
            self._emit_fuse_values(self.fuse)
        if not self.spec.problem.checked:
            self._emit_pairs(self._emit_pair if pairs else lambda: self._emit_elements(guarded=False))
            return
        with o.block("if (block_inside)"):
            self._emit_pairs(self._emit_pair if pairs else lambda: self._emit_elements(guarded=False))
        with o.block("else"):
            o.comment("Edge block: one element at a time, only inside C.")
            self._emit_pairs(lambda: self._emit_elements(guarded=True))

    def _emit_pairs(self, store) -> None:
        """For every accumulator pair: its row and first column in C, the scaled values, then `store`."""
        o = self.out
        m, n = self.layout.c_pair(Var("i"), Var("j"), Var("h"))
        with o.unrolled("i", "BLOCKS_M"), o.unrolled("j", "BLOCKS_N"), o.unrolled("h", "2"):
            o.line(f"const int row = block_m + {m.render()};")
            o.line(f"const int col = block_n + {n.render()};")
            scale = "alpha * " if self.alpha_beta and self.fuse is None else ""  # the chain applies alpha itself
            o.line(f"float2 out = make_float2({scale}acc[i][j][2 * h], {scale}acc[i][j][2 * h + 1]);")
            store()

    def _emit_fuse_values(self, fuse: FuseChain) -> None:
        """The fuse chain's values of this thread's rows (two per block row: h = 0, 1) and columns (a pair per
        block column), loaded once: every pair of a row shares them."""
        o = self.out
        o.comment(f"Fused: C = {self.spec.fuse.describe(self.alpha_beta)}; the values of this thread's rows and "
                  "columns, loaded once.")
        row, _ = self.layout.c_pair(Var("i"), 0, Var("h"))
        _, col = self.layout.c_pair(0, Var("j"), 0)
        o.line("fuse_m fuse_m_values[BLOCKS_M][2];")
        with o.unrolled("i", "BLOCKS_M"), o.unrolled("h", "2"):
            o.line(f"fuse_m_values[i][h] = {fuse.load_row(f'block_m + {row.render()}')};")
        o.line("fuse_n fuse_n_values[BLOCKS_N][2];")
        with o.unrolled("j", "BLOCKS_N"), o.unrolled("e", "2"):
            o.line(f"fuse_n_values[j][e] = {fuse.load_col(f'block_n + {col.render()} + e')};")

    def _fused(self, value: str, element: int, old: str) -> str:
        """Element `element` (0: col, 1: col + 1) of the pair through the fuse chain; `old` its value in C."""
        assert self.fuse is not None
        column = "col" if element == 0 else "col + 1"
        return self.fuse.element(value, "fuse_m_values[i][h]", f"fuse_n_values[j][{element}]", old, "row", column)

    def _address(self, column: str) -> str:
        if self.row_major:
            return f"C + (size_t)row * ldc + {column}"
        return f"C + (size_t)({column}) * ldc + row"

    def _emit_pair(self) -> None:
        """Both values in one vector store (row-major C, pair inside C)."""
        o, c = self.out, self.c
        o.line(f"{c.pair_type}* const pair = reinterpret_cast<{c.pair_type}*>({self._address('col')});")
        if self.fuse is not None:
            old = ("old.x", "old.y") if self.alpha_beta else ("0.0f", "0.0f")
            if self.alpha_beta:
                o.line(f"const float2 old = beta != 0.0f ? {_call(c.pair_to_float2, '*pair')} : make_float2(0.0f, 0.0f);")
            o.line(f"out.x = {self._fused('out.x', 0, old[0])};")
            o.line(f"out.y = {self._fused('out.y', 1, old[1])};")
        elif self.alpha_beta:
            with o.block("if (beta != 0.0f)"):
                o.line(f"const float2 old = {_call(c.pair_to_float2, '*pair')};")
                o.line("out.x += beta * old.x;")
                o.line("out.y += beta * old.y;")
        o.line(f"*pair = {c.pair_from_floats}(out.x, out.y);")

    def _emit_elements(self, guarded: bool) -> None:
        o, c = self.out, self.c
        for e, (column, value) in enumerate((("col", "out.x"), ("col + 1", "out.y"))):
            inside = f"if (row < M && {column} < N)" if guarded else ""
            with o.block(inside):
                o.line(f"{c.c_type}* const element = {self._address(column)};")
                if self.alpha_beta:
                    o.line(f"const float old = beta != 0.0f ? {_call(c.to_float, '*element')} : 0.0f;")
                if self.fuse is not None:
                    value = self._fused(value, e, "old" if self.alpha_beta else "0.0f")
                elif self.alpha_beta:
                    value = f"{value} + beta * old"
                o.line(f"*element = {_call(c.from_float, value)};")

    def _emit_atomics(self, pairs: bool) -> None:
        """Stream-K: add each pair into f32 C, a pair in one vector atomic where this kernel's C is pair-aligned
        (`pairs`: the variants the launcher runs on such C) and the arch has one; an edge tile of checked bounds
        adds only its elements inside C, one at a time."""
        vector = pairs and self.layout.arch.has_vector_atomic_add
        if not self.spec.problem.checked:
            self._emit_pairs(lambda: self._emit_atomic_pair(vector))
            return
        o = self.out
        with o.block("if (block_inside)"):
            self._emit_pairs(lambda: self._emit_atomic_pair(vector))
        with o.block("else"):
            o.comment("Edge tile: one element at a time, only inside C.")
            self._emit_pairs(self._emit_atomic_elements)

    def _emit_atomic_pair(self, vector: bool) -> None:
        o = self.out
        if vector:
            o.uses("float2 and float4 atomicAdd")
            o.line(f"atomicAdd(reinterpret_cast<float2*>({self._address('col')}), out);")
            return
        o.line(f"atomicAdd({self._address('col')}, out.x);")
        o.line(f"atomicAdd({self._address('col + 1')}, out.y);")

    def _emit_atomic_elements(self) -> None:
        o = self.out
        o.line(f"if (row < M && col < N) atomicAdd({self._address('col')}, out.x);")
        o.line(f"if (row < M && col + 1 < N) atomicAdd({self._address('col + 1')}, out.y);")

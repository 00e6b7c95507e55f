"""The epilogue of the wgmma path: a consumer warpgroup's accumulators straight to C.

wgmma's accumulator layout (PTX ISA, "Matrix fragments for wgmma .m64nNk16"): in each instruction's
64 x N tile, warp w of the warpgroup holds rows 16w..16w+15; lane l holds, for every 8-column chunk j,
d[4j], d[4j+1] at row l/4, columns 8j + 2(l%4) and + 1, and d[4j+2], d[4j+3] eight rows below. So
each thread stores pairs of neighbouring columns: one 8-byte (f32) or 4-byte (16-bit) store when C's
pointer and ldc keep the pair aligned, two element stores otherwise.

A fuse chain's vectors (a bias, the scales) come from shared memory: warp 1 of the producer warpgroup
stages each tile's as f32 while the consumers multiply it (`emit_vector_tile`, behind the `vectors_full`
and `vectors_empty` mbarriers of paths/wgmma/mbarrier.py), so the epilogue never waits on a global load
for them (docs/fusion.md, "How each path runs it"). Under `schedule: pingpong` each consumer has a buffer and
a pair of barriers of its own, and the warp fills them in the order the consumers take the block's tiles.
"""
from __future__ import annotations

from ... import ir
from ...emit.fuse import FuseChain
from ...emitter import Emitter
from .layout import WgmmaLayout

PAIR_TYPES = {ir.DType.F32: "float2", ir.DType.BF16: "__nv_bfloat162", ir.DType.F16: "__half2"}


def _pair(dtype: ir.DType, x: str, y: str) -> str:
    return {ir.DType.F32: f"make_float2({x}, {y})", ir.DType.BF16: f"__floats2bfloat162_rn({x}, {y})",
            ir.DType.F16: f"__floats2half2_rn({x}, {y})"}[dtype]


def _to_float(dtype: ir.DType, value: str) -> str:
    return {ir.DType.F32: value, ir.DType.BF16: f"__bfloat162float({value})",
            ir.DType.F16: f"__half2float({value})"}[dtype]


def _from_float(dtype: ir.DType, value: str) -> str:
    return {ir.DType.F32: value, ir.DType.BF16: f"__float2bfloat16_rn({value})",
            ir.DType.F16: f"__float2half_rn({value})"}[dtype]


class AccumulatorEpilogue:
    def __init__(self, layout: WgmmaLayout, out: Emitter):
        self.layout = layout
        self.spec = layout.spec
        self.out = out
        self.c = self.spec.problem.c.dtype
        self.fuse = FuseChain(self.spec) if self.spec.fuse is not None else None
        # A fuse chain applies alpha and beta itself, before the stores (`emit_tile`).
        self.alpha_beta = self.spec.problem.epilogue is ir.Epilogue.ALPHA_BETA and self.fuse is None
        self.checked = self.spec.problem.checked

    def emit_helpers(self) -> None:
        if self.fuse is not None:
            self.fuse.emit_helpers(self.out)
            self.fuse.emit_pair_helper(self.out)
            self.out.line()
        o, c = self.out, self.c
        element, pair = c.c_type, PAIR_TYPES[c]
        what = "alpha * acc + beta * C (C is read only when beta is not 0)" if self.alpha_beta else "acc"
        guard = ", inside C only (bounds: checked)" if self.checked else ""
        o.comment(f"C(row, col) and C(row, col + 1) = {what}{guard}.\n"
                  f"`pairs`: C's pointer and ldc keep every pair {2 * c.bytes}-byte aligned, so one {pair} store "
                  "writes both.")
        with o.block(f"static __device__ __forceinline__ void store_pair({element}* C, int ldc, int M, int N, int row, "
                     "int col, float x, float y, float alpha, float beta, bool pairs)"):
            if self.checked:
                o.line("if (row >= M || col >= N) return;")
            else:
                o.line("(void)M;")
            if self.alpha_beta:
                o.line("x *= alpha;")
                o.line("y *= alpha;")
            else:
                o.line("(void)alpha;")
                o.line("(void)beta;")
            o.line(f"{element}* const p = C + (size_t)row * ldc + col;")
            with o.block("if (pairs && col + 1 < N)" if self.checked else "if (pairs)"):
                if self.alpha_beta:
                    with o.block("if (beta != 0.0f)"):
                        o.line(f"const {pair} old = *reinterpret_cast<const {pair}*>(p);")
                        if c is ir.DType.F32:
                            o.line("x += beta * old.x;")
                            o.line("y += beta * old.y;")
                        else:
                            o.line("x += beta * __low2float(old);")
                            o.line("y += beta * __high2float(old);")
                o.line(f"*reinterpret_cast<{pair}*>(p) = {_pair(c, 'x', 'y')};")
                o.line("return;")
            if self.alpha_beta:
                o.line(f"if (beta != 0.0f) x += beta * {_to_float(c, 'p[0]')};")
            o.line(f"p[0] = {_from_float(c, 'x')};")
            with o.block("if (col + 1 < N)"):
                if self.alpha_beta:
                    o.line(f"if (beta != 0.0f) y += beta * {_to_float(c, 'p[1]')};")
                o.line(f"p[1] = {_from_float(c, 'y')};")

    def constants(self) -> list[tuple[str, int]]:
        return [("VECTOR_BYTES", self.layout.vector_bytes)] if self.stages_vectors else []

    def emit_finish(self) -> None:
        """After the consumer's last tile: nothing is left in flight."""

    @property
    def c_pointer(self) -> str:
        """The kernel's C parameter: a batch's first C (each tile names its GEMM's `C`: paths/wgmma/persistent.py)."""
        return "C_batch" if self.layout.batched else "C"

    def emit_state(self) -> None:
        """What a consumer keeps across its tiles: whether C's pairs are aligned, and with staged vectors the
        parity of the tile's use of their buffer."""
        self.emit_pairs_flag()
        if self.stages_vectors:
            self.out.line("unsigned vectors_phase = 0;")

    @property
    def stages_vectors(self) -> bool:
        return self.fuse is not None and self.layout.staged_vectors

    def emit_vector_loader_state(self) -> None:
        """The state of the producer warp that stages the vectors: its lane, the parity of the buffer's use, and
        under pingpong which consumer's buffer the next tile's go to."""
        self.out.line("const int lane = tid % 32;")
        self.out.line("unsigned vectors_phase = 0;")
        if self.layout.pingpong:
            self.out.line("int slot = 0;  // the buffer of the consumer whose turn the next tile is")

    def _vector_buffer(self, index: str) -> tuple[str, str, str]:
        """The staged vectors' floats and their `full` and `empty` barriers: the block's, or under pingpong those
        of consumer `index`."""
        if not self.layout.pingpong:
            return "vectors", "vectors_full", "vectors_empty"
        floats = self.layout.tile_vector_bytes // 4
        return f"vectors + {index} * {floats}", f"vectors_full + {index}", f"vectors_empty + {index}"

    def emit_vector_tile(self) -> None:
        """One tile's vectors into shared memory as f32 (0 past the tile's rows and N), once the consumers have
        read the last tile's; each lane arrives on `vectors_full` after its stores (the arrival releases them)."""
        o, fuse = self.out, self.fuse
        buffer, full, empty = self._vector_buffer("slot")
        o.line(f"mbarrier_wait(smem_u32({empty}), vectors_phase ^ 1);")
        if self.layout.pingpong:
            o.line(f"float* const tile_vectors = {buffer};")
            buffer = "tile_vectors"
        rows = "group_end" if self.layout.grouped else "M"  # a grouped tile's rows end with its group's
        for axis, extent, start, bound in ((ir.Broadcast.M, "BM", "block_m", rows),
                                           (ir.Broadcast.N, "BN", "block_n", "N")):
            for member in fuse.staged_members(axis):
                with o.block(f"for (int i = lane; i < {extent}; i += 32)"):
                    o.line(f"const int index = {start} + i;")
                    o.line(f"{buffer}[{self.layout.vector_offsets[member.pointer]} + i] = index < {bound} ? "
                           f"{fuse.load_for_tile(member, 'index')} : 0.0f;")
        o.line(f"mbarrier_arrive(smem_u32({full}));")
        if self.layout.pingpong:
            o.line("if (++slot == CONSUMERS) { slot = 0; vectors_phase ^= 1; }")
        else:
            o.line("vectors_phase ^= 1;")

    def emit_pairs_flag(self) -> None:
        batch = " && stride_c % 2 == 0" if self.layout.batched else ""
        self.out.line(f"const bool pairs = reinterpret_cast<size_t>({self.c_pointer}) % {2 * self.c.bytes} == 0 && "
                      f"ldc % 2 == 0{batch};")

    starts_tiles = False  # whether emit_tile_start emits anything

    def emit_tile_start(self) -> None:
        """Before a tile's main loop: nothing here (the stmatrix epilogue starts R's first boxes)."""

    residual_argument = "R"  # what the chain's pairs read R through (a null R: staged in shared memory instead)

    def emit_tile(self) -> None:
        """The tile's epilogue: the fuse chain in place on the accumulators, if any, then the stores."""
        if self.fuse is not None:
            self.emit_chain(self.fuse)
        self.emit()

    def emit_chain(self, fuse: FuseChain) -> None:
        """The fuse chain on every accumulator of this consumer: each row's values read once, each pair's
        columns' per pair, from the tile's vectors that the producer staged in shared memory."""
        o = self.out
        o.comment(f"Fused: C = {self.spec.fuse.describe(self.spec.problem.epilogue is ir.Epilogue.ALPHA_BETA)}, "
                  "in place, before the stores.")
        staged = self.stages_vectors
        buffer, full, empty = self._vector_buffer("consumer")
        with o.block(""):
            o.line("const int warp = tid / 32, lane = tid % 32;")
            if staged:
                o.line(f"mbarrier_wait(smem_u32({full}), vectors_phase);  // this tile's vectors are staged")
            if staged and self.layout.pingpong:
                o.line(f"const float* const tile_vectors = {buffer};")
                buffer = "tile_vectors"
            o.line("fuse_m fuse_m_values[M_REPEAT][2];  // rows l/4 and l/4 + 8 of each 64-row instruction tile")
            offsets = self.layout.vector_offsets
            with o.unrolled("mr", "M_REPEAT"), o.unrolled("h", "2"):
                row = f"{self.layout.consumer_row}warp * 16 + lane / 4 + mr * 64 + h * 8"
                o.line(f"fuse_m_values[mr][h] = {fuse.staged(ir.Broadcast.M, buffer, offsets, row)};")
            if fuse.members(ir.Broadcast.N):
                o.comment("A pair's columns: four lanes read 8 neighbouring floats, the warp's other lanes the same ones\n"
                          "(broadcasts), so each read is one wavefront.")
            n0, n1 = (fuse.staged(ir.Broadcast.N, buffer, offsets, f"col{step} - block_n").replace("{", "{{")
                      .replace("}", "}}") for step in ("", " + 1"))  # braces kept through emit_pair_loop's format
            self.emit_pair_loop(fuse.pair("C", "{row}", "fuse_m_values[mr][{half}]", n0, n1, "{x}", "{y}",
                                          self.residual_argument))
            if staged:
                o.line(f"mbarrier_arrive(smem_u32({empty}));  // read: the producer may stage the next tile's")
                o.line("vectors_phase ^= 1;")

    def emit(self) -> None:
        """This consumer's rows of the tile at (block_m, block_n)."""
        self.emit_direct()

    def emit_direct(self) -> None:
        """Pair stores from the accumulators to C (the staged epilogues' way for calls TMA cannot store)."""
        self.out.line("const int warp = tid / 32, lane = tid % 32;")
        self.emit_pair_loop("store_pair(C, ldc, M, N, {row}, col, {x}, {y}, alpha, beta, pairs);")

    def emit_pair_loop(self, statement: str) -> None:
        """`statement` for each pair of this consumer's accumulators, with `{row}`, `{x}`, `{y}` and `{half}` filled
        in (the pair's row of C, its two accumulators, and 0 for the upper row l/4, 1 for l/4 + 8; `col` is its
        first column); `warp` and `lane` are declared by the caller."""
        o = self.out
        o.comment("Warp w of the warpgroup holds rows 16w.. of each 64-row instruction tile; lane l rows l/4 and\n"
                  "l/4 + 8, columns 2(l%4) and + 1 of every 8-column chunk.")
        o.line(f"const int row0 = block_m + {self.layout.consumer_row}warp * 16 + lane / 4;")
        o.line("const int col0 = block_n + lane % 4 * 2;")
        with o.unrolled("mr", "M_REPEAT"):
            with o.unrolled("nr", "N_REPEAT"):
                with o.unrolled("j", "WGMMA_N / 8"):
                    o.line("float* const d = acc + (mr * N_REPEAT + nr) * (WGMMA_N / 2) + 4 * j;")
                    o.line("const int row = row0 + mr * 64, col = col0 + nr * WGMMA_N + 8 * j;")
                    o.line(statement.format(row="row", x="d[0]", y="d[1]", half=0))
                    o.line(statement.format(row="row + 8", x="d[2]", y="d[3]", half=1))

"""`store: tma` for 16-bit C: each warp stages its own boxes with stmatrix.

The staged epilogue of store.py, for bf16 and f16 C, in three changes measured on the H100
(2026-11-24, docs/emitted-code.md, "16-bit C by stmatrix"):
- alpha and beta first, once for the tile (beta * C read only when beta is not 0): the box loop then
  only converts and stores, with no branch of its own;
- stmatrix writes four 8x8 matrices of 16-bit elements per instruction straight from the accumulator
  layout (two 8-column chunks, rows 0-7 and 8-15 of the warp's 16), where the pair stores wrote one
  pair each;
- a box is one warp's 16 rows, not the warpgroup's 64: the warp fills it, its lane 0 stores it and
  waits for the store that last used the buffer, and no warp waits for another (__syncwarp instead of
  two named barriers per box).
f32 C keeps store.py's form: the same changes measured 0.5-1.5% slower there.
"""
from __future__ import annotations

from .layout import SWIZZLE_ATOM, SWIZZLE_SPAN, WARP_ROWS, WARPS_PER_WARPGROUP
from .epilogue import PAIR_TYPES, _pair
from .store import StagedEpilogue

STMATRIX = r'''
// Four 8x8 matrices of 16-bit elements into shared memory (sm_90): lane l gives the address of row l % 8
// of matrix l / 8; register i holds, in every lane, the lane's pair of matrix i in the accumulator
// layout (row l / 4, columns 2(l % 4) and + 1).
static __device__ __forceinline__ void stmatrix_x4(unsigned address, unsigned r0, unsigned r1, unsigned r2, unsigned r3)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(address), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}'''


def _chunk(col: str) -> str:
    """The first of the four accumulators a thread holds in the 8-column chunk at column `col` of the
    consumer's tile, in instruction tile `mr` (the layout: epilogue.py)."""
    return f"acc + (mr * N_REPEAT + ({col}) / WGMMA_N) * (WGMMA_N / 2) + 4 * (({col}) % WGMMA_N / 8)"


class StmatrixEpilogue(StagedEpilogue):
    def emit_scaling_helpers(self) -> None:
        if not self.alpha_beta:
            return
        o, c = self.out, self.c
        o.comment("Staged calls only (C 16-byte aligned, ldc and N whole 16-byte units, so a pair inside C is whole\n"
                  "and aligned): x, y += beta * C(row, col), C(row, col + 1).")
        with o.block(f"static __device__ __forceinline__ void add_c(const {c.c_type}* C, int ldc, int M, int N, "
                     "int row, int col, float beta, float& x, float& y)"):
            o.line("if (row >= M || col >= N) return;")
            o.line(f"const {PAIR_TYPES[c]} old = *reinterpret_cast<const {PAIR_TYPES[c]}*>(C + (size_t)row * ldc + col);")
            o.line("x += beta * __low2float(old);")
            o.line("y += beta * __high2float(old);")

    def emit_box_helpers(self) -> None:
        o, c = self.out, self.c
        o.comment(f"Two floats as one {PAIR_TYPES[c]}, in a register as stmatrix takes it (the first in the low half).")
        with o.block("static __device__ __forceinline__ unsigned packed_pair(float x, float y)"):
            o.line(f"const {PAIR_TYPES[c]} pair = {_pair(c, 'x', 'y')};")
            o.line("return *reinterpret_cast<const unsigned*>(&pair);")
        o.lines(STMATRIX)

    def emit(self) -> None:
        o = self.out
        with o.block(f"if ({self.stage_test})"):
            o.line("const int warp = tid / 32, lane = tid % 32;")
            if self.alpha_beta:
                with o.unrolled("i", "ACCUMULATORS"):
                    o.line("acc[i] *= alpha;")
                with o.block("if (beta != 0.0f)"):
                    self.emit_pair_loop("add_c(C, ldc, M, N, {row}, col, beta, {x}, {y});")
            self.emit_boxes()
        with o.block("else"):
            self.emit_direct()

    def emit_boxes(self) -> None:
        o = self.out
        o.comment(f"{self.layout.c_box.count} boxes of {WARP_ROWS} rows x C_BOX_COLS columns per warp, in turn through "
                  "STORE_BUFFERS buffers of its own.")
        o.line(f"unsigned char* const buffers = staging + (consumer * {WARPS_PER_WARPGROUP} + warp) * STORE_BUFFERS * "
               "C_BOX_BYTES;")
        o.comment("stmatrix: lane l addresses the box's row l % 16 (matrices 0, 1: rows 0-7, 8-15 of an 8-column chunk;\n"
                  "2, 3: of the next chunk), its 16-byte chunk swizzled by the row's place in the 8-row pattern\n"
                  "(l % 8). The box's chunks j and j + 1 are then at lane_offset ^ (16 j).")
        o.line(f"const unsigned lane_offset = (lane & 15) * {SWIZZLE_SPAN} + ((((lane >> 4) ^ lane) & 7) << 4);")
        with o.unrolled("box", "C_BOXES"):
            o.line("const int mr = box / (BN / C_BOX_COLS);")
            o.line("const int first = box % (BN / C_BOX_COLS) * C_BOX_COLS;  // the box's first column")
            o.line("unsigned char* const buffer = buffers + box % STORE_BUFFERS * C_BOX_BYTES;")
            o.line("if (lane == 0) bulk_wait_read<STORE_BUFFERS - 1>();  // the store that last used it has read it")
            o.line("__syncwarp();")
            o.comment(f"Buffers start on {SWIZZLE_ATOM}-byte boundaries (where TMA starts the swizzle's pattern), so "
                      "the xor\nchanges only the 16-byte chunk.")
            o.line("const unsigned base = smem_u32(buffer) + lane_offset;")
            with o.unrolled("j", "C_BOX_COLS / 8", step=2):
                o.line(f"const float* const d = {_chunk('first + 8 * j')};")
                o.line(f"const float* const e = {_chunk('first + 8 * j + 8')};")
                o.line(f"stmatrix_x4(base ^ (j * 16), packed_pair(d[0], d[1]), packed_pair(d[2], d[3]), "
                       "packed_pair(e[0], e[1]), packed_pair(e[2], e[3]));")
            o.line("fence_proxy_async();")
            o.line("__syncwarp();")
            o.line("if (lane == 0) " + self.store_box("smem_u32(buffer)", "block_n + first",
                                                      f"block_m + consumer * CONSUMER_ROWS + mr * 64 + warp * {WARP_ROWS}"))

    def emit_finish(self) -> None:
        """After the consumer's last tile: each warp's stores must have read shared memory (and written C)
        before the block exits."""
        self.out.line("if (staged && tid % 32 == 0) bulk_wait_all();")

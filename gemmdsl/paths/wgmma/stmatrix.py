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

A row-major 16-bit residual R comes through the same buffers: each warp copies R's rows of its boxes in
by 16-byte cp.async copies, the first STORE_BUFFERS boxes before the tile's main loop, each later one once
the store of the box before it in the buffer has read it; the box loop reads R with ldmatrix at the
addresses stmatrix then writes C to, adds it (the chain's last step) and stores the box. R not 16-byte
aligned, or an ldr that is not, leaves R to the chain's per-pair reads (`residual_staged`).
"""
from __future__ import annotations

from .layout import CHUNK, SWIZZLE_ATOM, SWIZZLE_SPAN, WARP_ROWS, WARPS_PER_WARPGROUP
from .epilogue import PAIR_TYPES, _pair, _to_float
from .store import SWIZZLED_128B, StagedEpilogue

STMATRIX = r'''
// Four 8x8 matrices of 16-bit elements into shared memory (sm_90): lane l gives the address of row l % 8
// of matrix l / 8; register i holds, in every lane, the lane's pair of matrix i in the accumulator
// layout (row l / 4, columns 2(l % 4) and + 1).
static __device__ __forceinline__ void stmatrix_x4(unsigned address, unsigned r0, unsigned r1, unsigned r2, unsigned r3)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(address), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}'''


RESIDUAL_COPY = r'''
// Rows row.. row + 15, columns col.. col + 63 of R (one box of C's) into shared memory at `buffer`, in the
// 128-byte swizzle stmatrix and TMA use, as 16-byte cp.async copies (lane l copies chunks l, l + 32, ...; 0s
// past M and N: where C is staged, N is a whole number of chunks); one cp.async group.
static __device__ __forceinline__ void residual_box(unsigned buffer, const R_TYPE* R, int ldr, int M, int N, int row,
                                                    int col, int lane)
{
    #pragma unroll
    for (int i = 0; i < RESIDUAL_CHUNKS; ++i) {
        const int chunk = lane + 32 * i, r = chunk / 8, c = chunk % 8;
        const bool inside = row + r < M && col + 8 * c < N;
        const R_TYPE* const source = inside ? R + (size_t)(row + r) * ldr + col + 8 * c : R;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :: "r"(buffer + r * 128 + (((c ^ r) & 7) << 4)), "l"(source), "r"(inside ? 16 : 0) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Wait until at most PENDING of this thread's cp.async groups are still in flight.
template <int PENDING>
static __device__ __forceinline__ void residual_wait()
{
    asm volatile("cp.async.wait_group %0;" :: "n"(PENDING) : "memory");
}

// Four 8x8 matrices of 16-bit elements from shared memory, addressed as stmatrix_x4 addresses them: register i
// holds, in every lane, the lane's pair of matrix i in the accumulator layout.
static __device__ __forceinline__ void ldmatrix_x4(unsigned address, unsigned& r0, unsigned& r1, unsigned& r2,
                                                   unsigned& r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(address) : "memory");
}

// x, y += the pair of R in `pair` (the first in the low half).
static __device__ __forceinline__ void add_pair(unsigned pair, float& x, float& y)
{
    const R_PAIR r = *reinterpret_cast<const R_PAIR*>(&pair);
    x += __low2float(r);
    y += __high2float(r);
}'''


def _chunk(col: str) -> str:
    """The first of the four accumulators a thread holds in the 8-column chunk at column `col` of the
    consumer's tile, in instruction tile `mr` (the layout: epilogue.py)."""
    return f"acc + (mr * N_REPEAT + ({col}) / WGMMA_N) * (WGMMA_N / 2) + 4 * (({col}) % WGMMA_N / 8)"


class StmatrixEpilogue(StagedEpilogue):
    @property
    def stages_residual(self) -> bool:
        """A row-major 16-bit residual goes through the boxes' buffers (the module docstring)."""
        return self.layout.staged_residual

    @property
    def residual_argument(self) -> str:
        return "(residual_staged ? nullptr : R)" if self.stages_residual else "R"

    def emit_pairs_flag(self) -> None:
        super().emit_pairs_flag()
        if self.stages_residual:
            residual = self.fuse.chain.residual.dtype
            self.out.line(f"const bool residual_staged = staged && reinterpret_cast<size_t>(R) % {CHUNK} == 0 && "
                          f"ldr % {CHUNK // residual.bytes} == 0;  // R by 16-byte copies through the boxes")

    @property
    def starts_tiles(self) -> bool:
        return self.stages_residual

    def emit_tile_start(self) -> None:
        """R's first boxes, one per buffer, into this warp's buffers while the tile's main loop runs."""
        o = self.out
        with o.block("if (residual_staged)"):
            o.line("const int warp = tid / 32, lane = tid % 32;")
            o.line(f"unsigned char* const buffers = {self._buffers};")
            o.line("if (lane == 0) bulk_wait_read<0>();  // the last tile's stores have read the buffers")
            o.line("__syncwarp();")
            with o.unrolled("box", "(C_BOXES < STORE_BUFFERS ? C_BOXES : STORE_BUFFERS)"):
                o.line(f"residual_box(smem_u32(buffers + box * C_BOX_BYTES), R, ldr, M, N, {self._box_row('box')}, "
                       f"{self._box_col('box')}, lane);")

    @property
    def _buffers(self) -> str:
        return f"staging + (consumer * {WARPS_PER_WARPGROUP} + warp) * STORE_BUFFERS * C_BOX_BYTES"

    def _box_row(self, box: str) -> str:
        return f"block_m + {self.layout.consumer_row}({box}) / (BN / C_BOX_COLS) * 64 + warp * {WARP_ROWS}"

    @staticmethod
    def _box_col(box: str) -> str:
        return f"block_n + ({box}) % (BN / C_BOX_COLS) * C_BOX_COLS"

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
        o.comment("Calls TMA cannot store (C's rows or pointer off 16 bytes): the same, element by element.")
        with o.block(f"static __device__ __forceinline__ void add_c_elements(const {c.c_type}* C, int ldc, int M, int N, "
                     "int row, int col, float beta, float& x, float& y)"):
            o.line("if (row >= M) return;")
            o.line(f"const {c.c_type}* const p = C + (size_t)row * ldc + col;")
            o.line(f"if (col < N) x += beta * {_to_float(c, 'p[0]')};")
            o.line(f"if (col + 1 < N) y += beta * {_to_float(c, 'p[1]')};")

    def emit_box_helpers(self) -> None:
        o, c = self.out, self.c
        o.lines(SWIZZLED_128B)
        o.line()
        o.comment(f"Two floats as one {PAIR_TYPES[c]}, in a register as stmatrix takes it (the first in the low half).")
        with o.block("static __device__ __forceinline__ unsigned packed_pair(float x, float y)"):
            o.line(f"const {PAIR_TYPES[c]} pair = {_pair(c, 'x', 'y')};")
            o.line("return *reinterpret_cast<const unsigned*>(&pair);")
        o.lines(STMATRIX)
        if self.stages_residual:
            residual = self.fuse.chain.residual.dtype
            chunks = WARP_ROWS * SWIZZLE_SPAN // CHUNK // 32  # a box's 16-byte chunks per lane
            o.lines(RESIDUAL_COPY.replace("R_PAIR", PAIR_TYPES[residual]).replace("R_TYPE", residual.c_type)
                    .replace("RESIDUAL_CHUNKS", str(chunks)))

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
            self.emit_row_stores()

    def emit_row_stores(self) -> None:
        """Calls TMA cannot store: the same boxes through the warp's buffers, then written out a row at a time by
        the warp's lanes on consecutive columns (bounds checked). The accumulators' own pairs lie on 8 rows a
        warp: stored directly, each store instruction touched 8 rows' sectors for 4 bytes each, which ran C out
        at about a tenth of HBM's rate at calls that are all epilogue (K of a few dozen, odd N)."""
        o, c = self.out, self.c
        o.line("const int warp = tid / 32, lane = tid % 32;")
        if self.alpha_beta:
            with o.unrolled("i", "ACCUMULATORS"):
                o.line("acc[i] *= alpha;")
            with o.block("if (beta != 0.0f)"):
                self.emit_pair_loop("add_c_elements(C, ldc, M, N, {row}, col, beta, {x}, {y});")
        o.line(f"unsigned char* const buffers = {self._buffers};")
        o.line(f"const unsigned lane_offset = (lane & 15) * {SWIZZLE_SPAN} + ((((lane >> 4) ^ lane) & 7) << 4);")
        with o.unrolled("box", "C_BOXES"):
            o.line("const int mr = box / (BN / C_BOX_COLS);")
            o.line("const int first = box % (BN / C_BOX_COLS) * C_BOX_COLS;  // the box's first column")
            o.line("unsigned char* const buffer = buffers + box % STORE_BUFFERS * C_BOX_BYTES;")
            o.line("const unsigned base = smem_u32(buffer) + lane_offset;")
            with o.unrolled("j", "C_BOX_COLS / 8", step=2):
                o.line(f"const float* const d = {_chunk('first + 8 * j')};")
                o.line(f"const float* const e = {_chunk('first + 8 * j + 8')};")
                o.line("stmatrix_x4(base ^ (j * 16), packed_pair(d[0], d[1]), packed_pair(d[2], d[3]), "
                       "packed_pair(e[0], e[1]), packed_pair(e[2], e[3]));")
            o.line("__syncwarp();")
            o.line(f"const int box_row = block_m + {self.layout.consumer_row}mr * 64 + warp * {WARP_ROWS};")
            o.comment("Rows one at a time, not unrolled: under a narrow launch cap the unrolled stores spilled.")
            with o.block(f"for (int r = 0; r < {WARP_ROWS}; ++r)"):
                with o.block("if (box_row + r < M)"):
                    with o.unrolled("part", "C_BOX_COLS / 32"):
                        o.line("const int col = first + part * 32 + lane;")
                        with o.block("if (block_n + col < N)"):
                            o.line(f"C[(size_t)(box_row + r) * ldc + block_n + col] = "
                                   f"*reinterpret_cast<const {c.c_type}*>(buffer + swizzled_128b(r, (col - first) * "
                                   f"{c.bytes}));")
            o.line("__syncwarp();  // read before the buffer's next box")

    def emit_boxes(self) -> None:
        o = self.out
        o.comment(f"{self.layout.c_box.count} boxes of {WARP_ROWS} rows x C_BOX_COLS columns per warp, in turn through "
                  "STORE_BUFFERS buffers of its own.")
        o.line(f"unsigned char* const buffers = {self._buffers};")
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
            if self.stages_residual:
                with o.block("if (residual_staged)"):
                    o.line("if (box + 1 < C_BOXES) residual_wait<1>(); else residual_wait<0>();  // this box's R")
                    o.line("__syncwarp();  // every lane's copies have landed")
            with o.unrolled("j", "C_BOX_COLS / 8", step=2):
                const = "" if self.stages_residual else "const "  # R is added in place
                o.line(f"{const}float* const d = {_chunk('first + 8 * j')};")
                o.line(f"{const}float* const e = {_chunk('first + 8 * j + 8')};")
                if self.stages_residual:
                    with o.block("if (residual_staged)"):
                        o.comment("R's pairs, where stmatrix puts C's: the chain's last step, + R.")
                        o.line("unsigned r0, r1, r2, r3;")
                        o.line("ldmatrix_x4(base ^ (j * 16), r0, r1, r2, r3);")
                        o.line("add_pair(r0, d[0], d[1]);")
                        o.line("add_pair(r1, d[2], d[3]);")
                        o.line("add_pair(r2, e[0], e[1]);")
                        o.line("add_pair(r3, e[2], e[3]);")
                o.line("stmatrix_x4(base ^ (j * 16), packed_pair(d[0], d[1]), packed_pair(d[2], d[3]), "
                       "packed_pair(e[0], e[1]), packed_pair(e[2], e[3]));")
            o.line("fence_proxy_async();")
            o.line("__syncwarp();")
            o.line("if (lane == 0) " + self.store_box("smem_u32(buffer)", "block_n + first",
                                                      f"block_m + {self.layout.consumer_row}mr * 64 + warp * {WARP_ROWS}"))
            if self.stages_residual:
                with o.block("if (residual_staged && box + STORE_BUFFERS < C_BOXES)"):
                    o.comment("The box this buffer holds next: its R once the store has read the buffer, while the "
                              "next box is\nconverted.")
                    o.line("if (lane == 0) bulk_wait_read<0>();")
                    o.line("__syncwarp();")
                    o.line(f"residual_box(smem_u32(buffer), R, ldr, M, N, {self._box_row('box + STORE_BUFFERS')}, "
                           f"{self._box_col('box + STORE_BUFFERS')}, lane);")

    def emit_finish(self) -> None:
        """After the consumer's last tile: each warp's stores must have read shared memory (and written C)
        before the block exits."""
        self.out.line("if (staged && tid % 32 == 0) bulk_wait_all();")

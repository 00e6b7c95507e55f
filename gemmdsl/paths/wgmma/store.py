"""`store: tma`: the wgmma path's epilogue through shared memory and bulk tensor stores.

A consumer warpgroup writes its rows of the C tile one box at a time (64 rows by one 128-byte span:
32 f32 or 64 bf16/f16 columns) into one of two shared-memory buffers, in the 128-byte swizzle (so a
warp's pairs of columns, 8 rows apart in the accumulator layout, land in distinct banks); one thread
then issues a bulk tensor store of the box (cp.async.bulk.tensor, completing in a bulk group) and the
warpgroup fills the other buffer. Before a buffer is filled again, that thread waits until the store
that used it two boxes ago has read it, and the warpgroup waits for that thread (a named barrier of
its own). The last stores of a tile run on while the warpgroup multiplies the next tile: that is
the point, since the epilogue's global stores are otherwise time the tensor cores sit idle (docs/emitted-code.md,
"`store: tma`": with the stores removed, hgemm_h100 measured 11% faster at 4096^3).

TMA clips the box at C's last row, so checked bounds need no guard there; at the last column it was
seen to write the whole 16-byte unit that holds C's edge (N = 517 f32 columns wrote into the padding
after column 516; N = 1000 did not), so the staged path also needs N x element bytes to be a multiple
of 16. With that, C 16-byte aligned and rows a multiple of 16 bytes, the kernel stages; other calls
take the direct stores of `AccumulatorEpilogue` (the launcher then passes no tensor map for C, and the
kernel tests the same condition).
"""
from __future__ import annotations

from ... import ir
from .layout import STORE_BUFFERS
from .epilogue import PAIR_TYPES, AccumulatorEpilogue, _pair, _to_float

WARPGROUP_SYNC = r'''
// This consumer warpgroup's 128 threads (named barriers 2, 3, ...: one per consumer).
static __device__ __forceinline__ void warpgroup_sync(int consumer)
{
    asm volatile("bar.sync %0, 128;" :: "r"(2 + consumer) : "memory");
}'''

STORE_2D = r'''
// Box (inner, outer) of `map` from shared memory at `source`, as one bulk group.
static __device__ __forceinline__ void tma_store_2d(const void* map, unsigned source, int inner, int outer)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(map), "r"(inner), "r"(outer), "r"(source) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}'''
STORE_3D = r'''
// Box (inner, outer) of GEMM `gemm` of a batch (the map's third dimension) from shared memory at `source`, as one
// bulk group.
static __device__ __forceinline__ void tma_store_3d(const void* map, unsigned source, int inner, int outer, int gemm)
{
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];"
                 :: "l"(map), "r"(inner), "r"(outer), "r"(gemm), "r"(source) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}'''
STORE_HELPERS = r'''

// Wait until at most N of this thread's bulk groups still read shared memory.
template <int N>
static __device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

// Wait until this thread's bulk groups have completed (their writes are done).
static __device__ __forceinline__ void bulk_wait_all()
{
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
''' + WARPGROUP_SYNC

SWIZZLED_128B = r'''
// Byte offset of (row, byte) in a box of 128-byte rows in the 128-byte swizzle: the 16-byte chunk is
// xor-ed with row % 8, as TMA reads it back.
static __device__ __forceinline__ int swizzled_128b(int row, int byte)
{
    return row * 128 + ((((byte >> 4) ^ row) & 7) << 4) + (byte & 15);
}'''


class StagedEpilogue(AccumulatorEpilogue):
    def constants(self) -> list[tuple[str, int]]:
        box = self.layout.c_box
        return [*super().constants(), ("C_BOX_COLS", box.inner), ("C_BOX_BYTES", box.bytes), ("C_BOXES", box.count),
                ("STORE_BUFFERS", STORE_BUFFERS), ("STAGING_BYTES", self.layout.staging_bytes)]

    def emit_helpers(self) -> None:
        super().emit_helpers()
        self.out.line()
        self.emit_scaling_helpers()
        self.out.lines(STORE_3D if self.layout.three_d_maps else STORE_2D)
        self.out.line()
        self.out.lines(STORE_HELPERS)
        self.out.line()
        self.emit_box_helpers()

    def emit_scaling_helpers(self) -> None:
        o, c = self.out, self.c
        what = "alpha * acc + beta * C" if self.alpha_beta else "acc"
        o.comment(f"The pair C(row, col), C(row, col + 1) would be {what} (C read only when beta is not 0 and "
                  "inside C).")
        with o.block("static __device__ __forceinline__ float2 c_pair(const "
                     f"{c.c_type}* C, int ldc, int M, int N, int row, int col, float x, float y, float alpha, "
                     "float beta)"):
            if not self.alpha_beta:
                o.line("(void)C; (void)ldc; (void)M; (void)N; (void)row; (void)col; (void)alpha; (void)beta;")
                o.line("return make_float2(x, y);")
                return
            o.line("x *= alpha;")
            o.line("y *= alpha;")
            with o.block("if (beta != 0.0f && row < M)"):
                o.line(f"const {c.c_type}* const p = C + (size_t)row * ldc + col;")
                o.line(f"if (col < N) x += beta * {_to_float(c, 'p[0]')};")
                o.line(f"if (col + 1 < N) y += beta * {_to_float(c, 'p[1]')};")
            o.line("return make_float2(x, y);")

    def emit_box_helpers(self) -> None:
        self.out.lines(SWIZZLED_128B)

    def emit_pairs_flag(self) -> None:
        super().emit_pairs_flag()
        align, size = self.layout.global_alignment_bytes, self.c.bytes
        batch = f" && stride_c * {size} % {align} == 0" if self.layout.batched else ""
        self.out.line(f"const bool staged = reinterpret_cast<size_t>({self.c_pointer}) % {align} == 0 && "
                      f"(long long)ldc * {size} % {align} == 0 && (long long)N * {size} % {align} == 0{batch};"
                      "  // TMA can store C (the launcher agrees)")

    def store_box(self, source: str, inner: str, outer: str) -> str:
        """The bulk store of one staged box of C (of this tile's GEMM, in a batch)."""
        if self.layout.three_d_maps:
            return f"tma_store_3d(&map_c, {source}, {inner}, {outer}, {self.layout.map_index(ir.Operand.C)});"
        return f"tma_store_2d(&map_c, {source}, {inner}, {outer});"

    @property
    def stage_test(self) -> str:
        """When a tile of C leaves through TMA stores: where C has a map (`staged`); in a grouped launch, only a
        tile whose rows all lie in its group (M there is the group's end), since TMA clips at C's last row, not
        at a group's."""
        return "staged && block_m + BM <= M" if self.layout.grouped else "staged"

    def emit(self) -> None:
        o = self.out
        with o.block(f"if ({self.stage_test})"):
            o.comment(f"{self.layout.c_box.count} boxes of 64 rows x C_BOX_COLS columns per consumer, in turn through "
                      "STORE_BUFFERS buffers.")
            o.line("const int warp = tid / 32, lane = tid % 32;")
            o.line("const int r = warp * 16 + lane / 4;  // the box row of d[0], d[1]; d[2], d[3] are 8 below")
            o.line("unsigned char* const buffers = staging + consumer * STORE_BUFFERS * C_BOX_BYTES;")
            with o.unrolled("box", "C_BOXES"):
                o.line("const int mr = box / (BN / C_BOX_COLS);")
                o.line("const int first = box % (BN / C_BOX_COLS) * C_BOX_COLS;  // the box's first column")
                o.line("unsigned char* const buffer = buffers + box % STORE_BUFFERS * C_BOX_BYTES;")
                o.line("if (tid == 0) bulk_wait_read<STORE_BUFFERS - 1>();  // the store that last used it has read it")
                o.line("warpgroup_sync(consumer);")
                self.emit_box_pairs()
                o.line("fence_proxy_async();")
                o.line("warpgroup_sync(consumer);")
                o.line("if (tid == 0) " + self.store_box("smem_u32(buffer)", "block_n + first",
                                                         f"block_m + {self.layout.consumer_row}mr * 64"))
        with o.block("else"):
            self.emit_row_stores()

    def emit_box_pairs(self) -> None:
        """One box's accumulators, each lane's pairs on rows r and r + 8, through the epilogue (`c_pair`) into the
        swizzled `buffer`: what the TMA store and the row stores both write out."""
        o, c = self.out, self.c
        pair = PAIR_TYPES[c]
        with o.unrolled("j", "C_BOX_COLS / 8"):
            o.line("const int col = first + 8 * j;")
            o.line("const float* const d = acc + (mr * N_REPEAT + col / WGMMA_N) * (WGMMA_N / 2) + "
                   "4 * (col % WGMMA_N / 8);")
            o.line(f"const int row = block_m + {self.layout.consumer_row}mr * 64 + r;")
            o.line("const int gcol = block_n + col + lane % 4 * 2;")
            o.line(f"const int byte = (8 * j + lane % 4 * 2) * {c.bytes};")
            o.line("const float2 top = c_pair(C, ldc, M, N, row, gcol, d[0], d[1], alpha, beta);")
            o.line("const float2 bottom = c_pair(C, ldc, M, N, row + 8, gcol, d[2], d[3], alpha, beta);")
            o.line(f"*reinterpret_cast<{pair}*>(buffer + swizzled_128b(r, byte)) = {_pair(c, 'top.x', 'top.y')};")
            o.line(f"*reinterpret_cast<{pair}*>(buffer + swizzled_128b(r + 8, byte)) = "
                   f"{_pair(c, 'bottom.x', 'bottom.y')};")

    def emit_row_stores(self) -> None:
        """Calls TMA cannot store: the same boxes through the consumer's buffers, then written out a row at a time
        by each warp's lanes on consecutive columns (bounds checked), where the accumulators' own pairs lie on 8 rows
        a warp (stmatrix.py says what that cost)."""
        o, c = self.out, self.c
        o.line("const int warp = tid / 32, lane = tid % 32;")
        o.line("const int r = warp * 16 + lane / 4;  // the box row of d[0], d[1]; d[2], d[3] are 8 below")
        o.line("unsigned char* const buffer = staging + consumer * STORE_BUFFERS * C_BOX_BYTES;")
        with o.unrolled("box", "C_BOXES"):
            o.line("const int mr = box / (BN / C_BOX_COLS);")
            o.line("const int first = box % (BN / C_BOX_COLS) * C_BOX_COLS;  // the box's first column")
            o.line("warpgroup_sync(consumer);  // the last box's rows have been read")
            self.emit_box_pairs()
            o.line("warpgroup_sync(consumer);")
            o.line(f"const int box_row = block_m + {self.layout.consumer_row}mr * 64;")
            o.comment("The warpgroup's 64 rows, a warp's lanes on 32 consecutive columns of one row at a time.")
            with o.block("for (int step = 0; step < 64 * C_BOX_COLS / 128; ++step)"):
                o.line("const int index = step * 128 + tid;")
                o.line("const int row = index / C_BOX_COLS, col = index % C_BOX_COLS;")
                with o.block("if (box_row + row < M && block_n + first + col < N)"):
                    o.line(f"C[(size_t)(box_row + row) * ldc + block_n + first + col] = "
                           f"*reinterpret_cast<const {c.c_type}*>(buffer + swizzled_128b(row, col * {c.bytes}));")

    def emit_finish(self) -> None:
        """After the consumer's last tile: its stores must have read shared memory (and written C)
        before the block exits."""
        self.out.line("if (staged && tid == 0) bulk_wait_all();")

"""The math of 3xTF32 on the wgmma path: FP32-accurate products from three TF32 wgmma.

TMA brings the stage's f32 words as they are (FLOAT32 tensor maps). B is split before the consumers
see it, by the producer warpgroup's splitter warps (paths/wgmma/splitter.py): the big part of each
word, rounded to TF32 (to nearest, ties away: ctext.TF32_HELPER), replaces it in place, and the
small part, the rest rounded to TF32, goes to the same offset of the stage's slot of a split buffer,
so both keep the 128-byte swizzle and the same descriptors read them. A is split here, in registers:
each consumer thread loads its wgmma fragment words of the k-tile from the stage (wgmma takes A from
registers, B only from shared memory) and rounds them the same way. So wgmma reads only B from
shared memory, and the consumers spend a k-tile's issue slots on 16 loads and the rounding instead
of splitting whole stages.

The k-tile issues small x big and big x small for every k-step, then big x big for every k-step (the
small x small term is below FP32's rounding), into a second set of accumulators, `part`, which the
k-tile starts from zero (scale-d 0); once the group is done, `part` is added to `acc` in FP32.
Summing only one k-tile's products in the tensor cores, whose additions truncate, the big terms
last, and the rest with FP32 adds is what keeps the error at FP32's level (docs/performance.md, tensor-core notes
T2: chaining every product into one set measured 17.7x cuBLAS SGEMM's error on mma.sync).

A's fragment of one m64 x k8 step, per thread (PTX ISA, wgmma register fragments, .tf32): warp w of
the warpgroup holds rows 16w..16w+15; lane l holds row l / 4 and row l / 4 + 8, at k = l % 4 and
k = l % 4 + 4, as words a0 (row, k), a1 (row + 8, k), a2 (row, k + 4), a3 (row + 8, k + 4).
"""
from __future__ import annotations

from ... import ir
from .layout import CHUNK, SWIZZLE_SPAN, WGMMA_M
from ...emit.ctext import TF32_HELPER
from .math import WgmmaMath

A_WORDS = 4  # fragment words of A per thread and m64 x k8 step
SPLIT_HELPERS = r'''
// x rounded to TF32, kept in an f32 word: what wgmma reads exactly.
static __device__ __forceinline__ float tf32_round(float x)
{
    return __uint_as_float(to_tf32(x));
}
// What wgmma leaves of x when it reads x truncated to TF32, rounded to TF32 as wgmma will read it: half a TF32
// unit added to the bits, the 13 below left for wgmma to ignore (B's small part, wgmma_splitter.py).
static __device__ __forceinline__ float tf32_rest(float x)
{
    return __uint_as_float(__float_as_uint(x - __uint_as_float(__float_as_uint(x) & 0xFFFFE000u)) + 0x1000u);
}'''


class SplitWgmmaMath(WgmmaMath):
    waits_each_k_tile = True

    def __init__(self, layout, out):
        super().__init__(layout, out)
        assert layout.split and self.tf32 and layout.a_in_registers
        assert self.shape.k * self.layout.element_bytes == 2 * CHUNK  # a k8 step: two 16-byte chunks of a row
        self.accumulate = f"{self.function}_rs"
        self.overwrite = f"{self.function}_rs_set"

    def constants(self) -> list[tuple[str, int]]:
        return [*super().constants(), ("B_STAGE_BYTES", self.layout.stage_bytes_of(ir.Operand.B)),
                ("SPLIT_BYTES", self.layout.split_bytes)]

    def tiling_note(self) -> str:
        return (super().tiling_note() + "\n3xTF32: three products (small x big, big x small, big x big) per k-step, "
                "summed per k-tile in `part`\n(the big ones last) and added to `acc` in FP32; A from registers.")

    def emit_helpers(self) -> None:
        o = self.out
        self.emit_descriptors()
        self.emit_group_helpers()
        o.line()
        self._emit_instruction(self.accumulate, accumulate=True, a_in_registers=True)
        o.line()
        self._emit_instruction(self.overwrite, accumulate=False, a_in_registers=True)
        o.line()
        o.lines(TF32_HELPER)
        o.lines(SPLIT_HELPERS)

    def declare(self) -> None:
        o = self.out
        super().declare()
        o.line("float part[ACCUMULATORS];  // this k-tile's three products")
        o.line(f"unsigned a_big[M_REPEAT][BK / WGMMA_K][{A_WORDS}], a_small[M_REPEAT][BK / WGMMA_K][{A_WORDS}];")

    def emit_k_tile(self) -> None:
        o, layout = self.out, self.layout
        o.line("unsigned char* const tile_a = smem + stage * STAGE_BYTES;")
        o.comment(f"A's fragments of the k-tile, split in registers. Word k of row r lies at r * {SWIZZLE_SPAN} + "
                  f"((k / 4) ^ (r % 8)) * {CHUNK} + (k % 4) * 4\n(the 128-byte swizzle); every row this thread "
                  "loads has r % 8 = lane / 4.")
        with o.block(""):
            o.line("const int lane = tid % 32;")
            o.line(f"const unsigned char* const rows = tile_a + (consumer * CONSUMER_ROWS + (tid / 32) * 16 + lane / 4) "
                   f"* {SWIZZLE_SPAN} + (lane % 4) * 4;")
            with o.unrolled("mr", "M_REPEAT"):
                with o.unrolled("kk", "BK / WGMMA_K"):
                    with o.unrolled("j", str(A_WORDS)):
                        o.line(f"const int row = mr * {WGMMA_M} + (j % 2) * 8;")
                        o.line("const int chunk = (2 * kk + j / 2) ^ (lane / 4);")
                        o.line(f"const float x = *reinterpret_cast<const float*>(rows + row * {SWIZZLE_SPAN} + "
                               f"chunk * {CHUNK});")
                        o.line("const float big = tf32_round(x);")
                        o.line("a_big[mr][kk][j] = __float_as_uint(big);")
                        o.line("a_small[mr][kk][j] = __float_as_uint(x - big);  // read truncated to TF32")
        b = ir.Operand.B
        o.line(f"const unsigned long long big_b = {self.descriptor_function(b)}(smem_u32(tile_a + A_STAGE_BYTES));")
        o.line(f"const unsigned long long small_b = {self.descriptor_function(b)}(smem_u32(split + stage * "
               "B_STAGE_BYTES));")
        o.line("wgmma_fence();")
        k_step, n_step = layout.k_step(b), layout.row_step(b)
        o.comment(f"Descriptor steps (>> 4): k{self.shape.k} = {k_step} ({k_step << 4} bytes), {self.shape.n} rows of "
                  f"B = {n_step}. The small products of every k-step first (the\nfirst overwrites `part`), then the "
                  "big ones: the tensor cores truncate each sum, and the big\nterms added last make BK / WGMMA_K "
                  "truncations at the size of the result instead of three times as many.")
        d = "part + (mr * N_REPEAT + nr) * (WGMMA_N / 2)"
        b_at = f"{k_step} * kk + {n_step} * nr"
        for big in (False, True):
            with o.unrolled("kk", "BK / WGMMA_K"):
                with o.unrolled("mr", "M_REPEAT"):
                    with o.unrolled("nr", "N_REPEAT"):
                        if big:
                            o.line(f"{self.accumulate}({d}, a_big[mr][kk], big_b + {b_at});")
                            continue
                        o.line(f"if (kk == 0) {self.overwrite}({d}, a_small[mr][kk], big_b + {b_at});")
                        o.line(f"else {self.accumulate}({d}, a_small[mr][kk], big_b + {b_at});")
                        o.line(f"{self.accumulate}({d}, a_big[mr][kk], small_b + {b_at});")
        o.line("wgmma_commit();")
        o.line("wgmma_wait<0>();")
        with o.unrolled("i", "ACCUMULATORS"):
            o.line("acc[i] += part[i];")

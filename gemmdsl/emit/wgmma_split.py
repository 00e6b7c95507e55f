"""The math of 3xTF32 on the wgmma path: FP32-accurate products from three TF32 wgmma.

TMA brings the stage's f32 words as they are (FLOAT32 tensor maps). Once a stage has landed, the
consumer warpgroups split it together, word by word: the big part, the word rounded to TF32
(cvt.rna), replaces the word in place; the small part, the rest rounded to TF32, goes to the same
offset of a split buffer, so both keep the 128-byte swizzle TMA wrote and the same descriptors read
them. A proxy fence makes these ordinary stores visible to wgmma, and a named barrier waits for both
consumer warpgroups. The k-tile then issues small x big and big x small for every k-step, then big
x big for every k-step (the small x small term is below FP32's rounding), into a second set of
accumulators, `part`, which the k-tile starts from zero (scale-d 0); once the group is done, `part`
is added to `acc` in FP32. Summing only one k-tile's products in the tensor cores, whose additions
truncate, the big terms last, and the rest with FP32 adds is what keeps the error at FP32's level
(README, tensor-core note T2: chaining every product into one set measured 17.7x cuBLAS SGEMM's
error on mma.sync).

The split buffer holds two stages' small parts, used by alternate k-tiles: the barrier of k-tile t+1
comes after both warpgroups waited for k-tile t's group, so k-tile t+2 may overwrite t's small parts.
"""
from __future__ import annotations

from .. import ir
from .wgmma import WgmmaMath

SPLIT_HELPERS = r'''
// x rounded to TF32 (10-bit mantissa, to nearest, ties away), kept in an f32 word: what wgmma reads exactly.
static __device__ __forceinline__ float tf32_round(float x)
{
    unsigned bits;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
    return __uint_as_float(bits);
}

// The consumer warpgroups only (named barrier 1; the producer never waits on it).
static __device__ __forceinline__ void consumers_sync()
{
    asm volatile("bar.sync 1, %0;" :: "n"(CONSUMER_THREADS) : "memory");
}'''


class SplitWgmmaMath(WgmmaMath):
    def __init__(self, layout, out):
        super().__init__(layout, out)
        assert layout.split and self.tf32
        self.overwrite = f"{self.function}_set"

    def constants(self) -> list[tuple[str, int]]:
        return [*super().constants(), ("SPLIT_BYTES", self.layout.split_bytes)]

    def tiling_note(self) -> str:
        return (super().tiling_note() + "\n3xTF32: three products (small x big, big x small, big x big) per k-step, "
                "summed per k-tile in `part`\n(the big ones last) and added to `acc` in FP32.")

    def emit_helpers(self) -> None:
        super().emit_helpers()
        o = self.out
        o.line()
        self._emit_instruction(self.overwrite, accumulate=False)
        o.line()
        o.line(f"constexpr int CONSUMER_THREADS = {self.layout.consumers * 128};")
        o.lines(SPLIT_HELPERS)

    def declare(self) -> None:
        super().declare()
        self.out.line("float part[ACCUMULATORS];  // this k-tile's three products")

    def emit_k_tile(self) -> None:
        o, layout = self.out, self.layout
        o.line("unsigned char* const tile_a = smem + stage * STAGE_BYTES;")
        o.line("unsigned char* const small = split + (it & 1) * STAGE_BYTES;")
        words = layout.stage_bytes // 16
        threads = layout.consumers * 128
        assert words % threads == 0
        o.comment(f"Split the stage: {words} float4 of A and B, {words // threads} per consumer thread; big parts in "
                  "place, small parts\nat the same offset of `small`.")
        with o.block(""):
            o.line("float4* const big = reinterpret_cast<float4*>(tile_a);")
            o.line("float4* const rest = reinterpret_cast<float4*>(small);")
            with o.unrolled("i", f"STAGE_BYTES / 16 / CONSUMER_THREADS"):
                o.line("const int w = i * CONSUMER_THREADS + consumer * 128 + tid;")
                o.line("const float4 x = big[w];")
                o.line("const float4 hi = make_float4(tf32_round(x.x), tf32_round(x.y), tf32_round(x.z), "
                       "tf32_round(x.w));")
                o.line("big[w] = hi;")
                o.line("rest[w] = make_float4(tf32_round(x.x - hi.x), tf32_round(x.y - hi.y), tf32_round(x.z - hi.z), "
                       "tf32_round(x.w - hi.w));")
        o.line("fence_proxy_async();")
        o.line("consumers_sync();")
        a, b = ir.Operand.A, ir.Operand.B
        a_offset = f"consumer * CONSUMER_ROWS * BK * {layout.element_bytes}"
        o.line(f"const unsigned long long big_a = wgmma_descriptor(smem_u32(tile_a + {a_offset}));")
        o.line(f"const unsigned long long small_a = wgmma_descriptor(smem_u32(small + {a_offset}));")
        o.line("const unsigned long long big_b = wgmma_descriptor(smem_u32(tile_a + A_STAGE_BYTES));")
        o.line("const unsigned long long small_b = wgmma_descriptor(smem_u32(small + A_STAGE_BYTES));")
        o.line("wgmma_fence();")
        k_step, m_step, n_step = layout.k_step(a), layout.row_step(a), layout.row_step(b)
        o.comment(f"Descriptor steps (>> 4): k{self.shape.k} = {k_step} ({k_step << 4} bytes), 64 rows of A = "
                  f"{m_step}, {self.shape.n} rows of B = {n_step}. The small products of every k-step first (the\n"
                  "first overwrites `part`), then the big ones: the tensor cores truncate each sum, and the big\n"
                  "terms added last make BK / WGMMA_K truncations at the size of the result instead of three times "
                  "as many.")
        d = "part + (mr * N_REPEAT + nr) * (WGMMA_N / 2)"
        a_at, b_at = f"{k_step} * kk + {m_step} * mr", f"{k_step} * kk + {n_step} * nr"
        for first, big in ((True, False), (False, True)):
            with o.unrolled("kk", "BK / WGMMA_K"):
                with o.unrolled("mr", "M_REPEAT"):
                    with o.unrolled("nr", "N_REPEAT"):
                        if big:
                            o.line(f"{self.function}({d}, big_a + {a_at}, big_b + {b_at});")
                            continue
                        o.line(f"if (kk == 0) {self.overwrite}({d}, small_a + {a_at}, big_b + {b_at});")
                        o.line(f"else {self.function}({d}, small_a + {a_at}, big_b + {b_at});")
                        o.line(f"{self.function}({d}, big_a + {a_at}, small_b + {b_at});")
        o.line("wgmma_commit();")
        o.line("wgmma_wait<0>();")
        with o.unrolled("i", "ACCUMULATORS"):
            o.line("acc[i] += part[i];")

    def emit_release(self) -> None:
        """The k-tile's group has finished (emit_k_tile waited for it): its stage is free."""
        self.out.line("if (tid == 0) mbarrier_arrive(smem_u32(empty + stage));")

    def emit_drain(self) -> None:
        """Every k-tile released its own stage."""

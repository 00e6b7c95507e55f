"""The consumers' math of an FP8 spec with `accumulate: promoted` (DeepGEMM's and CUTLASS's FP8 scheme).

Hopper's FP8 wgmma sums its products into an accumulator that keeps fewer mantissa bits than an f32
(about 14, by the DeepSeek-V3 report's measurement), so a long K loses accuracy. Here each k-tile
(BK = 128 elements of K: four m64nNk32 steps) is summed by wgmma into `part` starting from zero
(scale-d 0 on the first step), one instruction's columns at a time; once that group has finished,
`part` is added into `acc` with f32 adds. `part` holds one instruction's columns only (N_REPEAT groups a
k-tile), so the registers of a 64 x 256 warpgroup tile fit with m64n128k32; the other consumer
warpgroups' wgmma run while this one waits and adds. The stage is released after the k-tile's last
group, as 3xTF32's k-tile does (paths/wgmma/split.py).
"""
from __future__ import annotations

from ... import ir
from ...fuse_ops.scale import BLOCK_SCALE_K
from ..wgmma.math import WgmmaMath


class PromotedWgmmaMath(WgmmaMath):
    waits_each_k_tile = True

    def __init__(self, layout, out):
        super().__init__(layout, out)
        self.overwrite = f"{self.function}_set"

    def constants(self) -> list[tuple[str, int]]:
        scale_block = [("SCALE_BLOCK", BLOCK_SCALE_K)] if self.layout.block_scaled else []
        return [*super().constants(), ("PART", self.layout.part_registers), *scale_block]

    def tiling_note(self) -> str:
        layout = self.layout
        chunks = (f"\n{layout.declared_shape} is issued as {layout.promotion_chunks} x {self.shape}: a {layout.declared_shape.n}-"
                  f"column `part` would not fit beside the accumulators." if layout.promotion_chunks > 1 else "")
        return (super().tiling_note() + "\nPromoted accumulation: each k-tile's wgmma sum of one instruction's "
                "columns goes to `part` (PART registers),\nthen into `acc` with f32 adds." + chunks)

    def emit_helpers(self) -> None:
        super().emit_helpers()
        self.out.line()
        self._emit_instruction(self.overwrite, accumulate=False)

    def declare(self) -> None:
        super().declare()
        self.out.line("float part[PART];  // one instruction's columns of the k-tile's sum, each m repeat")

    def emit_k_tile(self) -> None:
        o, layout = self.out, self.layout
        a, b = ir.Operand.A, ir.Operand.B
        o.line("unsigned char* const tile_a = smem + stage * STAGE_BYTES;")
        o.line(f"const unsigned long long desc_a = {self.descriptor_function(a)}(smem_u32({layout.consumer_a('tile_a')}));")
        o.line(f"const unsigned long long desc_b = {self.descriptor_function(b)}(smem_u32(tile_a + A_STAGE_BYTES));")
        if layout.block_scaled:
            self.emit_block_scales()
        k_step, m_step, n_step = layout.k_step(a), layout.row_step(a), layout.row_step(b)
        o.comment(f"Descriptor steps (>> 4): k{self.shape.k} = {k_step} ({k_step << 4} bytes), 64 rows of A = {m_step}, "
                  f"{self.shape.n} rows of B = {n_step}. One group per\ninstruction column: its k-steps sum into "
                  "`part` (the first overwrites it), then `part` is promoted into `acc`.")
        with o.unrolled("nr", "N_REPEAT"):
            o.line("wgmma_fence();")
            with o.unrolled("kk", "BK / WGMMA_K"):
                with o.unrolled("mr", "M_REPEAT"):
                    arguments = f"part + mr * (WGMMA_N / 2), desc_a + {k_step} * kk + {m_step} * mr, " \
                                f"desc_b + {k_step} * kk + {n_step} * nr"
                    o.line(f"if (kk == 0) {self.overwrite}({arguments});")
                    o.line(f"else {self.function}({arguments});")
            o.line("wgmma_commit();")
            o.line("wgmma_wait<0>();")
            with o.unrolled("mr", "M_REPEAT"):
                with o.unrolled("i", "WGMMA_N / 2"):
                    promoted = "part[mr * (WGMMA_N / 2) + i]"
                    if layout.block_scaled:
                        # Register i of an instruction: columns 8 (i / 4).., row l/4 + 8 ((i / 2) % 2).
                        promoted += (" * (a_scales[mr][(i / 2) % 2] * b_scales[(nr * WGMMA_N + 8 * (i / 4)) / "
                                     "SCALE_BLOCK])")
                    o.line(f"acc[(mr * N_REPEAT + nr) * (WGMMA_N / 2) + i] += {promoted};")

    def emit_block_scales(self) -> None:
        """Load the k-tile's block scales through L1 before its wgmma are issued, so the loads run under them:
        A's of the thread's rows (0 past M), B's of each 128 columns of the tile (0 past N)."""
        o = self.out
        o.comment("Block scales of k-tile kt (a_scale: M x k_tiles, b_scale: ceil(N / 128) x k_tiles, row-major); "
                  "the loads\nrun while the k-tile's wgmma do. Rows l/4 and l/4 + 8 of each 64-row instruction tile.")
        o.line("float a_scales[M_REPEAT][2], b_scales[BN / SCALE_BLOCK];")
        o.line(f"const int scale_row = block_m + {self.layout.consumer_row}tid / 32 * 16 + tid % 32 / 4;")
        with o.unrolled("mr", "M_REPEAT"):
            with o.unrolled("h", "2"):
                o.line("const int row = scale_row + mr * 64 + h * 8;")
                o.line("a_scales[mr][h] = row < M ? __ldg(a_scale + (long long)row * k_tiles + kt) : 0.0f;")
        with o.unrolled("j", "BN / SCALE_BLOCK"):
            o.line("const int column_block = block_n / SCALE_BLOCK + j;")
            o.line("b_scales[j] = column_block * SCALE_BLOCK < N ? "
                   "__ldg(b_scale + (long long)column_block * k_tiles + kt) : 0.0f;")

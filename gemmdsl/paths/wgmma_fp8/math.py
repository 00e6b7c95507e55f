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
from ..wgmma.math import WgmmaMath


class PromotedWgmmaMath(WgmmaMath):
    waits_each_k_tile = True

    def __init__(self, layout, out):
        super().__init__(layout, out)
        self.overwrite = f"{self.function}_set"

    def constants(self) -> list[tuple[str, int]]:
        return [*super().constants(), ("PART", self.layout.part_registers)]

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
        o.line(f"const unsigned long long desc_a = {self.descriptor_function(a)}(smem_u32(tile_a + consumer * "
               f"CONSUMER_ROWS * BK * {layout.element_bytes}));")
        o.line(f"const unsigned long long desc_b = {self.descriptor_function(b)}(smem_u32(tile_a + A_STAGE_BYTES));")
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
                    o.line("acc[(mr * N_REPEAT + nr) * (WGMMA_N / 2) + i] += part[mr * (WGMMA_N / 2) + i];")

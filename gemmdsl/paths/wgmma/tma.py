"""The producer of the wgmma path: one thread issues a bulk tensor copy (TMA) of A's and B's k-tile
into each free stage.

The copies are described by tensor maps the launcher builds on the host (paths/wgmma/launcher.py), 2-D
views of A and B as they lie in global memory, in the 128-byte swizzle: a k-major operand (A
row-major, B column-major) comes in one BK x rows box per k-tile; an MN-major one (A column-major, B
row-major) in rows / 64 boxes of 64 columns of m or n by BK rows of k, placed one after the other
(layout.TmaBox). TMA fills the parts of a box outside the matrix with zeros, so the edge tiles of checked
bounds (and a K that is not a multiple of BK) need no code of their own; the bytes it delivers are
always the whole box, which is what `full` expects.
"""
from __future__ import annotations

from ... import ir
from ...emitter import Emitter
from .layout import WgmmaLayout

HELPERS = r'''
// One 2-D box of `map` at coordinates (inner, outer) into shared memory at `destination`; completes
// as transaction bytes on `barrier`.
static __device__ __forceinline__ void tma_load_2d(unsigned destination, const void* map, int inner, int outer,
                                                   unsigned barrier)
{
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        :: "r"(destination), "l"(map), "r"(inner), "r"(outer), "r"(barrier) : "memory");
}'''
BATCHED_HELPERS = r'''
// One box of GEMM `gemm` of a batch: the maps' third dimension is the GEMM (its stride the batch stride).
static __device__ __forceinline__ void tma_load_3d(unsigned destination, const void* map, int inner, int outer, int gemm,
                                                   unsigned barrier)
{
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
        :: "r"(destination), "l"(map), "r"(inner), "r"(outer), "r"(gemm), "r"(barrier) : "memory");
}'''


class TmaProducer:
    def __init__(self, layout: WgmmaLayout, out: Emitter):
        self.layout = layout
        self.out = out

    def emit_helpers(self) -> None:
        self.out.lines(BATCHED_HELPERS if self.layout.three_d_maps else HELPERS)

    def _load(self, destination: str, operand: ir.Operand, inner: str, outer: str) -> str:
        operand_map = f"&map_{operand.value}"
        if self.layout.three_d_maps:
            return (f"tma_load_3d({destination}, {operand_map}, {inner}, {outer}, {self.layout.map_index(operand)}, "
                    "barrier);")
        return f"tma_load_2d({destination}, {operand_map}, {inner}, {outer}, barrier);"

    def emit_k_tile(self) -> None:
        """Wait for stage `stage` to be free, then copy k-tile `kt` of this tile's A rows and B columns."""
        o = self.out
        o.line("mbarrier_wait(smem_u32(empty + stage), phase ^ 1);")
        o.line("const unsigned barrier = smem_u32(full + stage);")
        o.line("mbarrier_arrive_expect_tx(barrier, STAGE_BYTES);")
        o.line("unsigned char* const tile_a = smem + stage * STAGE_BYTES;")
        for operand, base, start in ((ir.Operand.A, "tile_a", "block_m"), (ir.Operand.B, "tile_a + A_STAGE_BYTES",
                                                                          "block_n")):
            box = self.layout.boxes[operand]
            if box.k_major:
                o.line(self._load(f"smem_u32({base})", operand, "kt * BK", start))
                continue
            for panel in range(box.count):  # 64-wide panels of m or n, each BK rows of k
                offset = f" + {panel * box.bytes}" if panel else ""
                column = f" + {panel * box.inner}" if panel else ""
                o.line(self._load(f"smem_u32({base}{offset})", operand, f"{start}{column}", "kt * BK"))

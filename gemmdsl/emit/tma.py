"""The producer of the wgmma path: one thread issues a bulk tensor copy (TMA) of A's and B's k-tile
into each free stage.

The copies are described by tensor maps the launcher builds on the host (emit/tensor_maps.py):
k-major 2-D views of A (M x K) and B (N x K) with a BK x BM and a BK x BN box in the 128-byte
swizzle. TMA fills the parts of a box outside the matrix with zeros, so the edge tiles of checked
bounds (and a K that is not a multiple of BK) need no code of their own; the bytes it delivers are
always the whole box, which is what `full` expects.
"""
from __future__ import annotations

from ..emitter import Emitter
from ..wgmma_layout import WgmmaLayout

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


class TmaProducer:
    def __init__(self, layout: WgmmaLayout, out: Emitter):
        self.layout = layout
        self.out = out

    def emit_helpers(self) -> None:
        self.out.lines(HELPERS)

    def emit_k_tile(self) -> None:
        """Wait for stage `stage` to be free, then copy k-tile `kt` of this tile's A rows and B columns."""
        o = self.out
        o.line("mbarrier_wait(smem_u32(empty + stage), phase ^ 1);")
        o.line("const unsigned barrier = smem_u32(full + stage);")
        o.line("mbarrier_arrive_expect_tx(barrier, STAGE_BYTES);")
        o.line("unsigned char* const tile_a = smem + stage * STAGE_BYTES;")
        o.line("tma_load_2d(smem_u32(tile_a), &map_a, kt * BK, block_m, barrier);")
        o.line("tma_load_2d(smem_u32(tile_a + A_STAGE_BYTES), &map_b, kt * BK, block_n, barrier);")

"""`schedule: stream_k` on the wgmma path: a persistent wave whose blocks share the last tiles' k-tiles.

The launcher splits a call as every stream-K launch is split (schedule.py's stream_k_split, with one
slot per SM) and passes `sk_tiles` and `sk_blocks`: the last sk_tiles tiles' k-tiles are shared by
blocks 0..sk_blocks-1 in equal contiguous ranges, and the other tiles are plain ones that the blocks
walk blockIdx.x, + gridDim.x, ... afterwards. Producer and consumers walk the same pieces (tile,
k_first, k_end) in the same order: a block's range from its end, so its first piece starts at k-tile
0 of a tile (or inside it) and its last piece ends at a tile's last k-tile.

The pieces and the plain tiles are two loops over one body, not one loop that picks either: with one
loop, the k-loop's bounds came out of a division by k_tiles, and ptxas kept the ring's counters and
the wgmma descriptors in vector registers, moved to uniform ones before every wgmma (24 R2UR and 21
more instructions per k-tile per warp than the persistent kernel's loop): 2-5% slower where no tile
was shared (H100, 2026-11-26, docs/performance.md, \"Stream-K on the wgmma path\"). In the plain tiles' loop k_first
and k_end are constants, and the loop is the persistent kernel's. The range arithmetic is 32-bit
(the launcher shares at most schedule.MAX_WORK k-tiles): a 64-bit division is a called subroutine.

A piece that stops before the tile's last k-tile leaves the consumer's accumulators in the block's
slot of the workspace (`partials`: one slot per stream-K block, BM x BN floats in the accumulators'
own order, so each thread writes and reads whole float4s next to its neighbours') and raises the
slot's flag for that consumer. The block that does a tile's last k-tile (as its last piece) waits
for each earlier block's flag, adds that block's slot, lowers the flag again for the next launch,
and runs the epilogue: beta is applied once, any C type works, and the sums are added in the same
order on every run. A block leaves at most one partial sum per launch (its first piece:
schedule.StreamKSplit.contributors), and its first piece never waits, so no block waits on one that
is itself waiting.

The waits assume the contributing blocks run, which one wave of at most one block per SM does.
"""
from __future__ import annotations

from typing import Callable

from .persistent import PersistentScheduler
from ...emit.scheduler import emit_raster
from .store import WARPGROUP_SYNC

FLAG_HELPERS = r'''
// Stream-K's flags (paths/wgmma/stream_k.py). The writer: every thread's partial sums are stored, each
// thread fences them, the warpgroup meets, one thread raises the flag with release semantics.
static __device__ __forceinline__ void flag_raise(unsigned* flag)
{
    asm volatile("st.release.gpu.global.u32 [%0], 1;" :: "l"(flag) : "memory");
}

// The reader: one thread waits for the flag with acquire semantics, then its warpgroup meets.
static __device__ __forceinline__ void flag_wait(const unsigned* flag)
{
    unsigned raised = 0;
    do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(raised) : "l"(flag) : "memory");
    } while (raised == 0);
}'''


class StreamKPersistentScheduler(PersistentScheduler):
    k_first = "k_first"
    k_end = "k_end"
    k_count = "k_end - k_first"

    def emit_helpers(self) -> None:
        o = self.out
        o.lines(FLAG_HELPERS)
        o.line()
        o.lines(WARPGROUP_SYNC)  # the staged store offers it too: the file's prelude defines it once

    def emit_counts(self) -> None:
        super().emit_counts()
        o = self.out
        o.comment("Stream-K: the last sk_tiles tiles' k-tiles (sk_work of them) are shared by blocks 0..sk_blocks-1;\n"
                  "the first dp_tiles tiles are plain ones.")
        o.line("const int dp_tiles = tile_count - sk_tiles;")
        o.line("const int sk_work = sk_tiles * k_tiles;  // at most schedule.MAX_WORK")
        o.comment("Block b's range begins at sk_work * b / sk_blocks, computed without overflow as below.")
        o.line("const int sk_quotient = sk_blocks > 0 ? sk_work / sk_blocks : 0;")
        o.line("const int sk_remainder = sk_blocks > 0 ? sk_work % sk_blocks : 0;")

    def emit_loop(self, body: Callable[[], None], coordinates: bool = True) -> None:
        """This block's stream-K pieces (its range from the end), then its plain tiles: the same body in
        two loops (the module's docstring says why)."""
        o = self.out
        with o.block("if ((int)blockIdx.x < sk_blocks)"):
            o.line(f"const int sk_begin = {_range_begin('blockIdx.x')};")
            o.line(f"int sk_end = {_range_begin('(blockIdx.x + 1)')};")
            with o.block("while (sk_end > sk_begin)"):
                if coordinates:
                    o.line("const int tile = dp_tiles + (sk_end - 1) / k_tiles;")
                o.line("const int k_end = (sk_end - 1) % k_tiles + 1;")
                o.line("const int k_first = max(0, k_end - (sk_end - sk_begin));")
                o.line("sk_end -= k_end - k_first;")
                if coordinates:
                    emit_raster(self.spec, o, "tile")
                body()
        with o.block("for (int tile = blockIdx.x; tile < dp_tiles; tile += gridDim.x)"):
            o.line("const int k_first = 0, k_end = k_tiles;")
            if coordinates:
                emit_raster(self.spec, o, "tile")
            body()

    def emit_tile_end(self, epilogue: Callable[[], None]) -> None:
        o = self.out
        with o.block("if (k_end < k_tiles)"):
            o.comment("A share of a tile that a later block finishes: leave the partial sums in this block's slot.")
            o.line(f"float4* const slot = {_slot('blockIdx.x')};")
            with o.unrolled("i", "ACCUMULATORS / 4"):
                o.line("slot[i * 128] = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);")
            o.line("__threadfence();")
            o.line("warpgroup_sync(consumer);")
            o.line("if (tid == 0) flag_raise(flags + blockIdx.x * CONSUMERS + consumer);")
        with o.block("else"):
            with o.block("if (k_first > 0)"):
                o.comment("The tile's last piece: add the partial sums of the blocks that did its first k-tiles\n"
                          "(from the block whose range holds k-tile 0 of the tile, schedule.StreamKSplit.contributors).")
                o.line("const int first_unit = (tile - dp_tiles) * k_tiles;")
                o.line("int first_block = blockIdx.x;")
                o.line(f"while ({_range_begin('first_block')} > first_unit) --first_block;")
                with o.block("for (int from = first_block; from < (int)blockIdx.x; ++from)"):
                    o.line("unsigned* const flag = flags + from * CONSUMERS + consumer;")
                    o.line("if (tid == 0) flag_wait(flag);")
                    o.line("warpgroup_sync(consumer);")
                    o.line(f"const float4* const slot = {_slot('from')};")
                    with o.unrolled("i", "ACCUMULATORS / 4"):
                        o.line("const float4 p = __ldcg(slot + i * 128);  // from L2: another SM wrote it")
                        o.line("acc[4 * i] += p.x;")
                        o.line("acc[4 * i + 1] += p.y;")
                        o.line("acc[4 * i + 2] += p.z;")
                        o.line("acc[4 * i + 3] += p.w;")
                    o.line("if (tid == 0) *flag = 0;  // lowered for the next launch")
            epilogue()


    def emit_if_finishing(self, body: Callable[[], None]) -> None:
        """Only a tile's last piece runs the epilogue, so only it has the fuse chain's vectors staged or R's
        boxes copied: a piece that stops inside a tile leaves no read of them unmatched."""
        with self.out.block("if (k_end == k_tiles)"):
            body()


def _range_begin(block: str) -> str:
    """Where stream-K block `block`'s range begins, sk_work * block / sk_blocks, in 32-bit arithmetic
    (schedule.StreamKSplit.range_begin)."""
    return f"sk_quotient * {block} + sk_remainder * {block} / sk_blocks"


def _slot(block: str) -> str:
    """This thread's first float4 of `block`'s slot: the slot holds each consumer's ACCUMULATORS / 4 rows of
    128 float4s (one per thread), consumer after consumer."""
    return (f"reinterpret_cast<float4*>(partials) + ((size_t){block} * CONSUMERS + consumer) * (ACCUMULATORS / 4) * 128 "
            "+ tid")

"""`schedule: pingpong`: the consumer warpgroups of a persistent block take its tiles in turn.

Under `schedule: persistent` every consumer multiplies its rows of the same tile, so they reach the
epilogue together and the tensor cores idle while they apply the fuse chain and store C. Here consumer
c multiplies the block's tiles c, c + CONSUMERS, ... (each a whole BM x BN tile), and the main loops run
one after another: consumer c starts its tile's k-tiles once consumer c - 1 has issued the last of the
tile before, and then lets consumer c + 1 go. So while one consumer runs its epilogue, the next one's
main loop keeps wgmma busy (CUTLASS's KernelTmaWarpSpecializedPingpong works the same way).

The producer and the vector-staging warp are unchanged: they walk all of the block's tiles in order,
so the ring holds the k-tiles of the tile whose main loop runs, and a consumer's tile starts at k-tile
`nth * k_tiles` of the block's sequence (`nth`: the block's tiles before it). Each stage is read by one
consumer, so `empty` counts one arrival. The turns are also what keeps a consumer's parity waits on
`full` exact: it waits for a stage only after every k-tile before its tile has landed, so no `full`
barrier is more than one phase from the phase it waits for.

The turns go through one mbarrier per consumer, `turn[c]`: the consumer before c arrives on it (all 128
threads) after issuing its tile's last k-tile, and c waits for it before its next tile's first one
(consumer 0's first tile waits for nobody).
"""
from __future__ import annotations

from typing import Callable

from ...emit.scheduler import emit_raster
from .persistent import PersistentScheduler


class PingPongScheduler(PersistentScheduler):
    def emit_consumer_loop(self, body: Callable[[], None]) -> None:
        """This consumer's tiles, every CONSUMERS-th of the block's, with the ring's position at each."""
        o = self.out
        o.line("unsigned turn_phase = 0;  // the parity of this consumer's next wait on turn[consumer]")
        with o.block("for (int tile = blockIdx.x + consumer * gridDim.x, nth = consumer; tile < tile_count; "
                     "tile += CONSUMERS * gridDim.x, nth += CONSUMERS)"):
            emit_raster(self.spec, o, "tile")
            o.line("it = nth * k_tiles;  // the block's k-tiles before this tile's: the producer brought them first")
            body()

    def emit_main_loop_start(self) -> None:
        o = self.out
        with o.block("if (nth > 0)"):
            o.comment("The tile before this one in the block has issued its last k-tile.")
            o.line("mbarrier_wait(smem_u32(turn + consumer), turn_phase);")
            o.line("turn_phase ^= 1;")

    def emit_main_loop_end(self) -> None:
        self.out.line("mbarrier_arrive(smem_u32(turn + (consumer + 1) % CONSUMERS));  // the next tile's turn")

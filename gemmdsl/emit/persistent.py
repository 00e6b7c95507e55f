"""The tile scheduler of the wgmma path: every block walks C tiles blockIdx.x, + gridDim.x, ...

With `schedule: persistent` the launcher starts one wave, min(tiles, SMs) blocks, so each block
keeps its barriers, ring and register split for several tiles and the producer starts the next
tile's copies while the consumers still finish the last one; with `schedule: tiles` it starts one
block per tile and the loop runs once. Either way a tile number becomes (tile_m, tile_n) through the
spec's raster, the rule the other paths use (scheduler.emit_raster).
"""
from __future__ import annotations

from typing import Callable

from ..emitter import Emitter
from ..wgmma_layout import WgmmaLayout
from .scheduler import emit_raster, tiles


class PersistentScheduler:
    def __init__(self, layout: WgmmaLayout, out: Emitter):
        self.layout = layout
        self.spec = layout.spec
        self.out = out

    def emit_counts(self) -> None:
        o = self.out
        o.line(f"const int tile_count = {tiles(self.spec)};")
        o.line("const int k_tiles = " + ("(K + BK - 1) / BK;" if self.spec.problem.checked else "K / BK;"))

    def emit_loop(self, body: Callable[[], None]) -> None:
        """for each of this block's tiles: block_m, block_n, then `body`."""
        o = self.out
        with o.block("for (int tile = blockIdx.x; tile < tile_count; tile += gridDim.x)"):
            emit_raster(self.spec, o, "tile")
            body()

"""The tile scheduler of the wgmma path: every block walks C tiles blockIdx.x, + gridDim.x, ...

With `schedule: persistent` the launcher starts one wave, min(tiles, SMs) blocks, so each block
keeps its barriers, ring and register split for several tiles and the producer starts the next
tile's copies while the consumers still finish the last one; with `schedule: tiles` it starts one
block per tile and the loop runs once. Either way a tile number becomes (tile_m, tile_n) through the
spec's raster, the rule the other paths use (scheduler.emit_raster).

A scheduler tells the kernel (paths/wgmma/kernel.py) which k-tiles of the tile to multiply
(`k_first`, `k_end`, `k_count`: all of them here; a k-range with stream-K, paths/wgmma/stream_k.py) and what
follows a tile's last k-tile (`emit_tile_end`: here, the epilogue).
"""
from __future__ import annotations

from typing import Callable

from ... import ir
from ...abi import pointer_type
from ...emitter import Emitter
from .layout import WgmmaLayout
from ...emit.scheduler import emit_raster, tiles


class PersistentScheduler:
    k_first = "0"
    k_end = "k_tiles"
    k_count = "k_tiles"

    def __init__(self, layout: WgmmaLayout, out: Emitter):
        self.layout = layout
        self.spec = layout.spec
        self.out = out

    def emit_helpers(self) -> None:
        """Device helpers of the scheduler: none."""

    def emit_counts(self) -> None:
        o = self.out
        o.line(f"const int tile_count = {tiles(self.spec)};")
        o.line("const int k_tiles = " + ("(K + BK - 1) / BK;" if self.spec.problem.checked else "K / BK;"))

    def emit_loop(self, body: Callable[[], None], coordinates: bool = True) -> None:
        """for each of this block's tiles: block_m, block_n (unless the body needs no coordinates, as
        3xTF32's splitter does not), then `body`. A batch's tiles are numbered GEMM by GEMM: `gemm`, then
        `tile` within it."""
        o = self.out
        if not self.layout.batched:
            with o.block("for (int tile = blockIdx.x; tile < tile_count; tile += gridDim.x)"):
                if coordinates:
                    emit_raster(self.spec, o, "tile")
                body()
            return
        with o.block("for (int work = blockIdx.x; work < tile_count * batch; work += gridDim.x)"):
            if coordinates:
                o.line("const int gemm = work / tile_count, tile = work % tile_count;")
                emit_raster(self.spec, o, "tile")
            body()

    def emit_consumer_loop(self, body: Callable[[], None]) -> None:
        """A consumer's walk: the block's tiles, every consumer on each (paths/wgmma/pingpong.py deals them out)."""
        self.emit_loop(body)

    def emit_main_loop_start(self) -> None:
        """Before a consumer's first k-tile of a tile: nothing to wait for but the ring."""

    def emit_main_loop_end(self) -> None:
        """After a consumer has issued a tile's last k-tile: nobody to tell."""

    def emit_consumer_names(self) -> None:
        """What a consumer's epilogue names of its tile beyond block_m and block_n: a batch's tile's GEMM's C."""
        if self.layout.batched:
            self.out.line(f"{pointer_type(self.spec, ir.Operand.C)} const C = C_batch + (size_t)gemm * stride_c;  "
                          "// this tile's GEMM's C")

    def emit_tile_end(self, epilogue: Callable[[], None]) -> None:
        """A consumer's accumulators hold the tile's sum: the epilogue."""
        epilogue()

    def emit_if_finishing(self, body: Callable[[], None]) -> None:
        """`body` for the pieces whose epilogue runs in this block (what the epilogue reads ahead: the fuse
        chain's staged vectors, R's first boxes): every tile here."""
        body()

"""Launch shape: how many blocks, k-tiles and warps one launch of the kernel runs.

Other passes multiply their per-block, per-k-tile figures by these counts.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..layout import WARP
from .framework import Context, PassResult, ProblemSize


@dataclass(frozen=True)
class LaunchShape:
    problem: ProblemSize
    blocks: int  # ceil(M / BM) * ceil(N / BN), for one GEMM of a batch
    k_tiles: int  # ceil(K / BK), iterations of the main loop
    warps_per_block: int


def tiles(extent: int, tile: int) -> int:
    """Tiles covering `extent`; a partial edge tile counts (bounds: checked), and exact specs have none."""
    return -(-extent // tile)


class LaunchPass:
    name = "launch"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"launch"})

    def run(self, context: Context) -> PassResult:
        block = context.spec.block
        m, n, k = context.problem
        # Edge tiles are costed as whole ones: their predicated accesses issue the same instructions.
        shape = LaunchShape(context.problem, tiles(m, block.m) * tiles(n, block.n), tiles(k, block.k),
                            context.layout.threads // WARP)
        verdict = (f"{shape.blocks} blocks of {shape.warps_per_block} warps, "
                   f"{shape.k_tiles} k-tiles each, for {context.problem}")
        return PassResult({"launch": shape}, verdict)

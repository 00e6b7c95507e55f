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
    blocks: int  # (M / BM) * (N / BN)
    k_tiles: int  # K / BK, iterations of the main loop
    warps_per_block: int


class LaunchPass:
    name = "launch"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"launch"})

    def run(self, context: Context) -> PassResult:
        block = context.spec.block
        m, n, k = context.problem
        # bounds: exact — the launcher rejects sizes the tile does not divide, and check.analyze
        # refuses them before any pass runs, so these divisions are exact.
        shape = LaunchShape(context.problem, (m // block.m) * (n // block.n), k // block.k,
                            context.layout.threads // WARP)
        verdict = (f"{shape.blocks} blocks of {shape.warps_per_block} warps, "
                   f"{shape.k_tiles} k-tiles each, for {context.problem}")
        return PassResult({"launch": shape}, verdict)

"""Arithmetic intensity at the two levels the tiling controls.

Block level: each k-tile brings (BM + BN) * BK floats from global memory and does
2 * BM * BN * BK flops, so bigger (and squarer) blocks do more work per byte.
Warp level: per step of k a warp reads its tile's rows of A and columns of B from
shared memory once (lanes that share a row get it by broadcast) and does
2 * rows * cols flops; 4x8 lanes of 8x8 micro tiles cover 32x64 and beat 2x16
lanes, which cover 16x128 with the same flops but more bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from .framework import Context, PassResult
from .launch import tiles

F32_BYTES = 4


@dataclass(frozen=True)
class Intensity:
    block_flops_per_byte: float  # per k-tile, against global bytes
    warp_tile: ir.Pair  # C elements one warp computes
    warp_flops_per_byte: float  # per k step, against the distinct shared bytes the warp reads
    flops: int  # per launch
    global_bytes: dict[str, int]  # per launch: a, b, c as requested by the blocks (no cache reuse)

    @property
    def launch_flops_per_byte(self) -> float:
        return self.flops / sum(self.global_bytes.values())


def tile_intensity(rows: int, cols: int) -> float:
    """Flops per byte of a rows x cols outer product per step of k."""
    return 2 * rows * cols / ((rows + cols) * F32_BYTES)


def launch_global_bytes(spec: ir.KernelSpec, m: int, n: int, k: int) -> dict[str, int]:
    """Each column of blocks reads all of A and each row all of B; C is written once (and read for beta)."""
    c_passes = 2 if spec.problem.epilogue is ir.Epilogue.ALPHA_BETA else 1
    return {
        "a": m * k * tiles(n, spec.block.n) * F32_BYTES,
        "b": k * n * tiles(m, spec.block.m) * F32_BYTES,
        "c": m * n * c_passes * F32_BYTES,
    }


class IntensityPass:
    name = "intensity"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"intensity"})

    def run(self, context: Context) -> PassResult:
        spec = context.spec
        threads = spec.threads
        warp_tile = ir.Pair(threads.lanes.m * threads.fragment.m, threads.lanes.n * threads.fragment.n)
        m, n, k = context.problem
        intensity = Intensity(
            block_flops_per_byte=tile_intensity(spec.block.m, spec.block.n),
            warp_tile=warp_tile,
            warp_flops_per_byte=tile_intensity(warp_tile.m, warp_tile.n),
            flops=2 * m * n * k,
            global_bytes=launch_global_bytes(spec, m, n, k),
        )
        verdict = (f"{intensity.block_flops_per_byte:.1f} flop/B from global memory per block, "
                   f"{intensity.warp_flops_per_byte:.1f} flop/B from shared memory per {warp_tile} warp tile; "
                   f"{sum(intensity.global_bytes.values()) / 1e9:.2f} GB requested per launch")
        return PassResult({"intensity": intensity}, verdict)

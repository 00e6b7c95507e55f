"""Waves: how the launch's tiles fill the GPU, and what `schedule: stream_k` does about the last wave.

A GPU holds SMs x blocks-per-SM blocks at once (the slots); tiles beyond a multiple of
that run in a last, partial wave while the other slots idle. The SM count is the
target's reference GPU (targets.py); launchers use the real one at run time.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..schedule import (INTERIOR_MIN_WAVES_PER_STRIP, LAUNCHED_MIN_SAVED_K_TILES, StreamKSplit,
                        interior_split_pays, stream_k_split)
from ..targets import Occupancy
from .framework import Context, PassResult
from .launch import LaunchShape


@dataclass(frozen=True)
class Waves:
    slots: int  # blocks resident at once on the reference GPU
    tiles: int
    split: StreamKSplit | None  # schedule: stream_k only

    @property
    def waves(self) -> float:
        return self.tiles / self.slots if self.slots else 0.0

    @property
    def last_wave_fill(self) -> float:
        """Busy fraction of the last wave's slots."""
        left = self.tiles % self.slots if self.slots else 0
        return left / self.slots if left else 1.0


class WavesPass:
    name = "waves"
    needs = frozenset({"launch", "occupancy"})
    provides = frozenset({"waves"})

    def run(self, context: Context) -> PassResult:
        launch: LaunchShape = context.fact("launch")
        occupancy: Occupancy = context.fact("occupancy")
        arch = context.layout.arch
        slots = arch.reference_sms * occupancy.blocks_per_sm
        split = None
        if context.spec.block.stream_k and slots:
            split = stream_k_split(launch.blocks, launch.k_tiles, slots, min_saved_k_tiles=LAUNCHED_MIN_SAVED_K_TILES)
        waves = Waves(slots, launch.blocks, split)
        if not slots:
            return PassResult({"waves": waves}, "no block fits on an SM")
        verdict = (f"{launch.blocks:,} tiles in {waves.waves:.2f} waves of {slots} blocks "
                   f"({arch.reference_sms} SMs of an {arch.reference_gpu} x {occupancy.blocks_per_sm}); "
                   f"the last wave {waves.last_wave_fill:.0%} full")
        if split is not None and split.sk_tiles:
            verdict += (f"; stream-K: {split.sk_blocks} blocks share the last {split.sk_tiles} tiles' "
                        f"{split.sk_tiles * split.k_tiles:,} k-tiles")
        elif split is not None:
            verdict += "; stream-K does not pay at this size, so the launcher runs tiles only"
        if context.spec.problem.checked and not (split is not None and split.sk_tiles):
            verdict += _interior_note(context.spec, launch, slots)
        return PassResult({"waves": waves}, verdict)


def _interior_note(spec, launch: LaunchShape, slots: int) -> str:
    """How a checked call (one GEMM, vector-aligned operands) whose tiles do not all lie inside C is launched."""
    m, n, k = launch.problem
    bm, bn, bk = spec.block.m, spec.block.n, spec.block.k
    strips = (m % bm != 0) + (n % bn != 0)
    if not strips:
        return ""
    if interior_split_pays((bm, bn, bk), m, n, k, slots):
        each = "a launch of its own" if strips == 1 else "each a launch of its own"
        return f"; the interior kernel runs the tiles inside C, then {strips} edge strip{'s' * (strips > 1)}, {each}"
    return (f"; one launch of the checked kernel: an interior of under {INTERIOR_MIN_WAVES_PER_STRIP} waves per "
            "edge strip does not pay for strips run after it")

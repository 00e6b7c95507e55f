"""The k-loop: stages x copy x fragment buffering, composed from the parts it is handed.

A pipeline is given a copy engine (copy.py), a fragment engine (fragments.py) and a math engine
(math.py) and emits the loop over a work tile's k-tiles: when each k-tile is fetched and lands,
where the barriers go, and how fragment loads interleave with the math. `SingleStage` works with
either copy engine; `RegisterDoubleBuffer` and `AsyncRing` are the two multi-stage schedules.

The partial-k interior kernel of checked bounds (`partial_k`) runs on tiles inside C when K is not
a multiple of BK: only its partial last k-tile crosses a bound. The two multi-stage pipelines
multiply that k-tile first: their prologue fetches it, zero-filled past K (only the k bound is
tested), and their loop then runs the exact kernel's code on the full k-tiles, shifted by one
(`WorkTile.k_shift`). `SingleStage` fetches every k-tile in its loop; there the fetch tests whether
the k-tile is the partial one, last. Neither adds a second copy of a k-tile's math.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Callable

from .. import ir
from ..emitter import Emitter
from ..layout import KK
from .copy import AsyncCopy, DirectCopy, RegisterCopy
from .fragments import SharedLoads
from .ldmatrix import MmaFragments
from .math import FmaOuterProduct
from .mma_sync import MmaSync
from .scheduler import WorkTile


class KLoop:
    """What every pipeline shares: the loop header and the math of one k-tile."""

    def __init__(self, spec: ir.KernelSpec, out: Emitter, copy: RegisterCopy | AsyncCopy | DirectCopy,
                 fragments: SharedLoads | MmaFragments, math: FmaOuterProduct | MmaSync, partial_k: bool = False):
        self.spec = spec
        self.out = out
        self.copy = copy
        self.fragments = fragments
        self.math = math
        self.partial_k = partial_k  # the partial-k interior kernel: K % BK != 0, tiles inside C

    # Whether the partial-k kernel multiplies its partial k-tile first (fetched in the prologue).
    partial_k_first = True

    def emit(self, work: WorkTile) -> None:
        o = self.out
        if not self.partial_k:
            o.line(f"const int k_tiles = {work.k_tiles};")
            self._emit_loop(work)
            return
        if self.partial_k_first:
            o.comment("K % BK != 0 (the launcher runs this kernel only then): the partial last k-tile, K / BK,\n"
                      "is multiplied first, fetched zero-filled past K; then the full k-tiles, unguarded:\n"
                      "tile kt of the loop is k-tile kt - 1.")
            work = replace(work, k_shift="1")
        else:
            o.comment("K % BK != 0 (the launcher runs this kernel only then): the full k-tiles are fetched\n"
                      "unguarded, the partial last one, K / BK, zero-filled past K.")
        o.line(f"const int k_tiles = {work.k_tiles} + 1;")
        self._emit_loop(work)

    def _fetch_first(self, work: WorkTile, tile: str, stage: str) -> None:
        """Fetch tile `tile` of the range, which may be its first: in the partial-k kernel the first is the
        partial k-tile (its copy tests the k bound only), the others full k-tiles."""
        if not self.partial_k:
            self.copy.fetch(work, tile, stage)
            return
        if tile == "0":
            self.copy.fetch_partial_k("K / BK", stage)
            return
        with self.out.block(f"if ({tile} == 0)"):
            self.copy.fetch_partial_k("K / BK", stage)
        with self.out.block("else"):
            self.copy.fetch(work, tile, stage)

    def _emit_loop(self, work: WorkTile) -> None:
        raise NotImplementedError

    def _k_tile_loop(self) -> AbstractContextManager[None]:
        unroll = self.spec.pipeline.unroll
        if unroll > 1:
            self.out.line(f"#pragma unroll {unroll}  // pipeline unroll: k-tiles per loop iteration")
        return self.out.block("for (int kt = 0; kt < k_tiles; ++kt)")

    def _emit_compute(self, stage: str) -> None:
        """The k-tile's math, reading shared-memory stage `stage`."""
        o, fragments, steps = self.out, self.fragments, self.math.k_steps
        fragments.emit_stage_pointers(stage, "read")
        if fragments.double:
            o.comment("Fragments are double-buffered: slice kk+1 loads while slice kk multiplies.")
            fragments.load(0, "[0]")
            with o.unrolled("kk", steps):
                with o.block(f"if (kk + 1 < {steps})"):
                    fragments.load(KK + 1, "[(kk + 1) % 2]")
                self.math.step("[kk % 2]")
        else:
            with o.unrolled("kk", steps):
                fragments.load(KK, "")
                self.math.step("")

    def _emit_compute_with_handoff(self, stage: str, next_stage: str, handoff: Callable[[], None]) -> None:
        """The k-tile's math with fragments double-buffered across k-tiles, as sgemm_v3 does.

        In the last slice, `handoff` makes the next k-tile's stage ready (and ends with the
        k-tile's one barrier); the first fragments of that tile are then loaded before the
        last step of this one, so their latency hides behind its FMAs.
        """
        o, fragments, steps = self.out, self.fragments, self.math.k_steps
        fragments.emit_stage_pointers(stage, "read")
        with o.unrolled("kk", steps):
            with o.block(f"if (kk < {steps} - 1)"):
                fragments.load(KK + 1, "[(kk + 1) % 2]")
            with o.block("else"):
                handoff()
                with o.block("if (has_next)"):
                    fragments.emit_stage_pointers(next_stage, "next")
                    fragments.load(0, "[(kk + 1) % 2]", "next")
            self.math.step("[kk % 2]")


class SingleStage(KLoop):
    """One shared buffer: fetch, land, barrier, multiply, barrier."""

    partial_k_first = False  # every k-tile is fetched in the loop: the fetch tests for the last one

    def _emit_loop(self, work: WorkTile) -> None:
        o = self.out
        o.comment(self.copy.single_stage_note)
        self.copy.declare()
        with self._k_tile_loop():
            if self.partial_k:
                with o.block("if (kt + 1 < k_tiles)"):
                    self.copy.fetch(work, "kt", "0")
                with o.block("else"):
                    self.copy.fetch_partial_k("kt", "0")
            else:
                self.copy.fetch(work, "kt", "0")
            self.copy.land("0")
            o.line("__syncthreads();")
            self._emit_compute("0")
            o.line("__syncthreads();")


class RegisterDoubleBuffer(KLoop):
    copy: RegisterCopy

    def _emit_loop(self, work: WorkTile) -> None:
        o = self.out
        o.comment("Register-staged double buffer: tile kt+1 travels global -> registers while tile kt\n"
                  "is multiplied, then registers -> the other shared stage; one barrier per k-tile.")
        self.copy.declare()
        self._fetch_first(work, "0", "0")
        self.copy.land("0")
        o.line("__syncthreads();")
        with self._k_tile_loop():
            o.line("const int stage = kt % 2;")
            o.line("const bool has_next = kt + 1 < k_tiles;")
            with o.block("if (has_next)"):
                self.copy.fetch(work, "kt + 1", "stage ^ 1")
            # Measured on the H100 (docs/performance.md, notes): carrying the fragment double
            # buffer across k-tiles here, as the cp.async ring does, was 3% slower.
            self._emit_compute("stage")
            with o.block("if (has_next)"):
                self.copy.land("stage ^ 1")
            o.line("__syncthreads();")


class AsyncRing(KLoop):
    copy: AsyncCopy | DirectCopy

    def _emit_loop(self, work: WorkTile) -> None:
        o, copy = self.out, self.copy
        o.comment("cp.async ring of STAGES buffers: STAGES-1 k-tiles are in flight while one is\n"
                  "multiplied. Every iteration commits one group (possibly empty) so that\n"
                  "wait<STAGES-2> always means 'the next tile has landed'. One barrier per k-tile:\n"
                  "it also tells every thread that the stage refilled next is no longer read.")
        with o.unrolled("s", "STAGES - 1"):
            with o.block("if (s < k_tiles)"):
                self._fetch_first(work, "s", "s")
            copy.commit()
        double = self.fragments.double
        if double:
            self._emit_handoff()
            self.fragments.emit_stage_pointers("0", "first")
            self.fragments.load(0, "[0]", "first")
        with self._k_tile_loop():
            if not double:
                self._emit_handoff()
            o.line("const int next = kt + STAGES - 1;")
            with o.block("if (next < k_tiles)"):
                copy.fetch(work, "next", "next % STAGES")
            copy.commit()
            if double:
                o.line("const bool has_next = kt + 1 < k_tiles;")
                self._emit_compute_with_handoff("kt % STAGES", "(kt + 1) % STAGES", self._emit_handoff)
            else:
                self._emit_compute("kt % STAGES")

    def _emit_handoff(self) -> None:
        """The next k-tile has landed in its stage, and every thread is done with the stage refilled next."""
        self.copy.wait("STAGES - 2")
        self.out.line("__syncthreads();")

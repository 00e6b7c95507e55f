"""The math of one k-step over the accumulators.

`FmaOuterProduct`: each thread's FRAG_M x FRAG_N accumulators take the outer product of its A and
B fragments, one fmaf each, in the spec's fma_order. `MmaSync` (mma_sync.py) is the tensor-core
engine. Both offer `declare()` (the accumulators, zeroed), `step(buffer)`, `k_steps` (the C name
of the steps per k-tile) and what the kernel states about their tiling: `constants()`,
`tiling_note()` and `coordinates_note()`.
"""
from __future__ import annotations

from .. import ir
from ..emitter import Emitter
from ..layout import KernelLayout


class FmaOuterProduct:
    k_steps = "BK"  # one k index per step

    def __init__(self, spec: ir.KernelSpec, layout: KernelLayout, out: Emitter):
        self.spec = spec
        self.layout = layout
        self.order = spec.threads.fma_order
        self.out = out

    def tiling_note(self) -> str:
        spec, t = self.spec, self.spec.threads
        return (f"Block tile {spec.block.m}x{spec.block.n}x{spec.block.k}; {self.layout.threads} threads "
                f"({t.warps} warps of {t.lanes} {t.lane_order.value} lanes); each thread owns {t.fragment} of C.")

    def coordinates_note(self) -> str:
        t = self.spec.threads
        repeat = f", repeated {t.repeat} at {t.repeat_level.value} level" if t.repeat != ir.Pair(1, 1) else ""
        return (f"Thread coordinates: warps {t.warps}, lanes {t.lanes} ({t.lane_order.value}), "
                f"micro tile {t.micro}{repeat}.")

    def constants(self) -> list[tuple[str, int]]:
        t, layout = self.spec.threads, self.layout
        return [("MICRO_M", t.micro.m), ("MICRO_N", t.micro.n), ("REPEAT_M", t.repeat.m), ("REPEAT_N", t.repeat.n),
                ("REPEAT_STRIDE_M", layout.repeat_stride("m")), ("REPEAT_STRIDE_N", layout.repeat_stride("n")),
                ("FRAG_M", layout.frag_m), ("FRAG_N", layout.frag_n)]

    def declare(self) -> None:
        o = self.out
        o.line("float acc[FRAG_M][FRAG_N];")
        with o.unrolled("i", "FRAG_M"):
            with o.unrolled("j", "FRAG_N"):
                o.line("acc[i][j] = 0.0f;")

    def step(self, buffer: str) -> None:
        """acc += a_frag<buffer> x b_frag<buffer>."""
        o = self.out
        fma = f"acc[i][j] = fmaf(a_frag{buffer}[i], b_frag{buffer}[j], acc[i][j]);"
        if self.order is ir.FmaOrder.COL:
            with o.unrolled("j", "FRAG_N"), o.unrolled("i", "FRAG_M"):
                o.line(fma)
            return
        with o.unrolled("i", "FRAG_M"):
            if self.order is ir.FmaOrder.ROW:
                with o.unrolled("j", "FRAG_N"):
                    o.line(fma)
                return
            o.comment("fma_order: snake. Odd rows run backwards, so consecutive FMAs share a or b.")
            with o.unrolled("step", "FRAG_N"):
                o.line("const int j = i % 2 == 0 ? step : FRAG_N - 1 - step;")
                o.line(fma)

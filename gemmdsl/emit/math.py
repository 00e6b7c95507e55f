"""The math of one k-step over the accumulators.

`FmaOuterProduct`: each thread's FRAG_M x FRAG_N accumulators take the outer product of its A and
B fragments, one fmaf each, in the spec's fma_order. An mma.sync engine would be another class
with the same two methods: `declare()` (the accumulators, zeroed) and `step(buffer)`.
"""
from __future__ import annotations

from .. import ir
from ..emitter import Emitter


class FmaOuterProduct:
    def __init__(self, spec: ir.KernelSpec, out: Emitter):
        self.order = spec.threads.fma_order
        self.out = out

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

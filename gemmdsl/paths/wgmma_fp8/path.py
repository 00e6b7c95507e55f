"""The FP8 wgmma path: e4m3 and e5m2 A and B (any pairing) on Hopper's wgmma kernel (paths/wgmma), with
wgmma's m64nNk32 FP8 forms, TMA copies of bytes and, by default, promoted accumulation. Everything else,
the producer, the ring, the schedulers, the epilogues and the launchers, is the wgmma path's; this path
supplies its lowering (Fp8Layout), the promoted math and the FP8 peak."""
from __future__ import annotations

from ... import ir
from ...targets import WGMMA_PEAK_TFLOPS
from ..wgmma.path import WgmmaPath, fp8_operands
from .layout import Fp8Layout
from .math import PromotedWgmmaMath


class Fp8WgmmaPath(WgmmaPath):
    name = "wgmma_fp8"
    lowering = Fp8Layout
    default_accumulate = ir.Accumulate.PROMOTED

    def takes(self, shape, a, b) -> bool:
        return shape is ir.WgmmaShape and fp8_operands(a, b)

    def unit(self, spec: ir.KernelSpec) -> str:
        return "fp8"  # one unit whatever the pairing of e4m3 and e5m2

    def math(self, layout: Fp8Layout, out):
        return PromotedWgmmaMath(layout, out) if layout.promoted else super().math(layout, out)

    def metadata(self, plan) -> dict:
        return {**super().metadata(plan), "accumulate": plan.spec.mma.accumulate.value}

    def peak_tflops(self, sm: int) -> dict[str, float]:
        return {"fp8": WGMMA_PEAK_TFLOPS.get(sm, {})["fp8"]} if sm in WGMMA_PEAK_TFLOPS else {}


PATH = Fp8WgmmaPath()

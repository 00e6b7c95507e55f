"""The lowering of an FP8 wgmma spec: Hopper's wgmma kernel (paths/wgmma/layout.py) on 1-byte operands.

A k-tile row of the 128-byte swizzle holds 128 FP8 elements, so BK = 128 and each k-tile is four
m64nNk32 steps. TMA copies the bytes as UINT8: it never interprets them, and wgmma reads them as e4m3
or e5m2 as its instruction says. FP8 wgmma has no transpose, so both operands are k-major (A row-major,
B column-major: W as nn.Linear stores it).

`accumulate: promoted` adds a second set of registers, `part`: each k-tile's wgmma sum of one
instruction's columns (N of them, every m repeat), which the k-tile's first step overwrites (scale-d
0) and which is added into the f32 accumulators once its group has finished (paths/wgmma_fp8/math.py).
So the tensor cores' accumulator, which keeps fewer mantissa bits than an f32, never sums more than
BK = 128 products of K. `accumulate: fast` is the wgmma kernel's own k-loop.
"""
from __future__ import annotations

from ... import ir
from ..wgmma.layout import CONSUMER_RESERVE, WARPGROUP, WGMMA_M, WgmmaLayout


class Fp8Layout(WgmmaLayout):
    part_note = "the promotion's waits and FP32 adds"

    @property
    def promoted(self) -> bool:
        return self.spec.mma.accumulate is ir.Accumulate.PROMOTED

    @property
    def tma_data_type(self) -> str:
        """TMA copies FP8 as bytes (CU_TENSOR_MAP_DATA_TYPE_UINT8); the swizzle and the box are in bytes too."""
        return "u8"

    @property
    def part_registers(self) -> int:
        """Per consumer thread, promoted: one instruction's sum (N columns) of each m repeat."""
        return self.m_repeat * WGMMA_M * self.shape.n // WARPGROUP if self.promoted else 0

    @property
    def waited_groups_per_k_tile(self) -> int:
        """Promoted: one wgmma group per instruction column, each waited for before its sum is added."""
        return self.n_repeat if self.promoted else 0

    @property
    def register_summary(self) -> str:
        promoted = f" + {self.part_registers} of `part` (promoted sums)" if self.promoted else ""
        return f"{self.accumulators} accumulators{promoted}"

    @property
    def accumulator_sets(self) -> str:
        if not self.promoted:
            return ""
        return f"; {self.part_registers} of them `part`, the promoted sum of one instruction's columns"

    def fewer_registers_hint(self, have: int) -> str:
        if not self.promoted:
            return super().fewer_registers_hint(have)
        room = (have - CONSUMER_RESERVE - self.accumulators) // self.m_repeat * WARPGROUP // WGMMA_M // 8 * 8
        narrower = [n for n in (192, 128, 96, 64) if n <= room and self.bn % n == 0]
        instruction = f"m64n{narrower[0]}k{self.shape.k} " if narrower else "a narrower instruction "
        return (f"use {instruction}(promoted accumulation holds one instruction's columns beside the accumulators), "
                "`accumulate: fast;`, or a smaller block tile")

"""The lowering of an FP8 wgmma spec: Hopper's wgmma kernel (paths/wgmma/layout.py) on 1-byte operands.

A k-tile row of the 128-byte swizzle holds 128 FP8 elements, so BK = 128 and each k-tile is four
m64nNk32 steps. TMA copies the bytes as UINT8: it never interprets them, and wgmma reads them as e4m3
or e5m2 as its instruction says. FP8 wgmma has no transpose, so both operands are k-major (A row-major,
B column-major: W as nn.Linear stores it).

`accumulate: promoted` adds a second set of registers, `part`: each k-tile's wgmma sum of one chunk of
columns (every m repeat), which the k-tile's first step overwrites (scale-d 0) and which is added into
the f32 accumulators once its group has finished (paths/wgmma_fp8/math.py). So the tensor cores'
accumulator, which keeps fewer mantissa bits than an f32, never sums more than BK = 128 products of K.
A chunk is the spec's instruction when its `part` fits beside the accumulators; otherwise the widest
narrower instruction of the same k that divides it and fits (m64n256k32 is issued as two m64n128k32 per
k-step: the same products into the same accumulator registers, whose layout depends on the column only).
`accumulate: fast` is the wgmma kernel's own k-loop.
"""
from __future__ import annotations

from ... import ir
from ...targets import WARPGROUP
from ...fuse_ops.scale import BLOCK_SCALE_K
from ..wgmma.layout import CONSUMER_RESERVE, PRODUCER_REGISTERS, SPLIT_LOOP_RESERVE, WGMMA_M, WgmmaLayout

WGMMA_N_STEP = 8  # wgmma's N is a multiple of 8


class Fp8Layout(WgmmaLayout):
    part_note = "the promotion's waits and FP32 adds"

    def __init__(self, spec: ir.KernelSpec):
        super().__init__(spec)
        self.declared_shape: ir.WgmmaShape = self.shape
        if self.promoted:
            self.shape = self._promotion_shape()

    def _promotion_shape(self) -> ir.WgmmaShape:
        """The instruction a promoted k-tile issues: the declared one, or the widest narrower one (a
        divisor of its N) whose `part` fits beside the accumulators in the most setmaxnreg can give."""
        declared = self.declared_shape
        most = self._consumer_share(PRODUCER_REGISTERS[-1])
        for n in range(declared.n, 0, -WGMMA_N_STEP):
            part = self.m_repeat * WGMMA_M * n // WARPGROUP
            if declared.n % n == 0 and self.accumulators + part + self.scale_registers + SPLIT_LOOP_RESERVE <= most:
                return ir.WgmmaShape(n, declared.k, declared.m)
        return declared

    @property
    def promoted(self) -> bool:
        return self.spec.mma.accumulate is ir.Accumulate.PROMOTED

    @property
    def block_scaled(self) -> bool:
        """`fuse { scale: block; }`: each k-tile's sum is multiplied by A's and B's block scales as it is promoted."""
        fuse = self.spec.fuse
        return fuse is not None and fuse.scale is ir.ScaleVectors.BLOCK

    @property
    def scale_registers(self) -> int:
        """Block scales of the k-tile a consumer thread holds: A's of its 2 rows per m repeat, B's of each 128
        columns of the tile."""
        return 2 * self.m_repeat + self.bn // BLOCK_SCALE_K if self.block_scaled else 0

    @property
    def main_loop_registers(self) -> int:
        return super().main_loop_registers + self.scale_registers

    @property
    def promotion_chunks(self) -> int:
        """Instructions of `shape` that one declared instruction's columns take (1 unless narrowed)."""
        return self.declared_shape.n // self.shape.n

    @property
    def instruction_note(self) -> str:
        if self.promotion_chunks == 1:
            return str(self.shape)
        return f"{self.declared_shape} (promoted in chunks of {self.shape.n} columns: {self.shape})"

    @property
    def tma_data_type(self) -> str:
        """TMA copies FP8 as bytes (CU_TENSOR_MAP_DATA_TYPE_UINT8); the swizzle and the box are in bytes too."""
        return "u8"

    @property
    def part_registers(self) -> int:
        """Per consumer thread, promoted: one chunk's sum (`shape.n` columns) of each m repeat."""
        return self.m_repeat * WGMMA_M * self.shape.n // WARPGROUP if self.promoted else 0

    @property
    def waited_groups_per_k_tile(self) -> int:
        """Promoted: one wgmma group per chunk of columns, each waited for before its sum is added."""
        return self.n_repeat if self.promoted else 0

    @property
    def register_summary(self) -> str:
        promoted = f" + {self.part_registers} of `part` (promoted sums)" if self.promoted else ""
        scales = f" + {self.scale_registers} block scales" if self.block_scaled else ""
        return f"{self.accumulators} accumulators{promoted}{scales}"

    @property
    def accumulator_sets(self) -> str:
        if not self.promoted:
            return ""
        return f"; {self.part_registers} of them `part`, the promoted sum of {self.shape.n} columns"

    def fewer_registers_hint(self, have: int) -> str:
        if not self.promoted:
            return super().fewer_registers_hint(have)
        return ("`accumulate: fast;` (promoted accumulation holds a chunk of columns beside the accumulators), "
                "more consumer warpgroups or a smaller block tile")

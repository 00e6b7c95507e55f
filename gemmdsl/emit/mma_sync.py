"""The math of one k-step on tensor cores: `mma.sync` over a warp's BLOCKS_M x BLOCKS_N
instruction blocks, FP32 accumulators.

Same interface as `FmaOuterProduct` (math.py): `declare()`, `step(buffer)` and `k_steps` (the C
name of the number of steps per k-tile). Precisions:
- native (f16, bf16): one mma per block.
- tf32: each f32 fragment word is rounded to TF32 (to nearest, ties away: ctext.TF32_HELPER), one mma per block.
- 3xtf32: each word is split into a TF32 big part (rounded) and what is left, which the mma reads
  truncated to TF32 (it ignores the low 13 bits): that errs by under 2^-21 of the word, and the
  small part is unbiased in sign, so rounding it too bought no accuracy on the H100 (3xTF32's error
  1.42x cuBLAS SGEMM's at worst either way, 36 cases) and cost 2-4% of the speed (docs/performance.md, T15).
  Three mma (small x big, big x small, big x big) per block. They start from zero and the sum is added
  to the accumulator with an FP32 add: the tensor cores' own accumulation truncates, which on the
  H100 made a chained 3xTF32 product 18x less accurate than cuBLAS SGEMM (2048^3, uniform data;
  docs/performance.md), while this order is as accurate (0.36x of SGEMM's error).
"""
from __future__ import annotations

from .. import ir
from ..emitter import Emitter
from ..mma_layout import MmaLayout
from .ctext import TF32_HELPER


def mma_name(layout: MmaLayout) -> str:
    """The wrapper's name, e.g. mma_m16n8k16_bf16 or mma_m16n8k8_tf32."""
    kind = "tf32" if layout.element is ir.DType.F32 else layout.element.value
    return f"mma_{layout.mma.shape.value}_{kind}"


class MmaSync:
    k_steps = "K_STEPS"

    def __init__(self, layout: MmaLayout, out: Emitter):
        self.layout = layout
        self.precision = layout.mma.precision
        self.out = out
        self.mma = mma_name(layout)

    def tiling_note(self) -> str:
        layout, mma = self.layout, self.layout.mma
        precision = "" if self.precision is ir.Precision.NATIVE else f" ({self.precision.value})"
        return (f"Block tile {layout.bm}x{layout.bn}x{layout.bk}; {layout.threads} threads "
                f"({layout.spec.threads.warps} warps); each warp owns {layout.warp_tile} of C: "
                f"{mma.repeat} mma.sync {mma.shape.value}{precision} per k-step.")

    def coordinates_note(self) -> str:
        return ("Thread coordinates: the warp's tile, and the lane's place in the instruction's fragments\n"
                "(group_id: a row of an 8x8 matrix; thread_in_group: where along k, or n for C).")

    def constants(self) -> list[tuple[str, int]]:
        layout = self.layout
        return [("K_STEPS", layout.k_steps), ("BLOCKS_M", layout.blocks[ir.Operand.A]),
                ("BLOCKS_N", layout.blocks[ir.Operand.B]), ("A_REGS", layout.registers[ir.Operand.A]),
                ("B_REGS", layout.registers[ir.Operand.B])]

    def declare(self) -> None:
        o = self.out
        o.line("float acc[BLOCKS_M][BLOCKS_N][4];")
        with o.unrolled("i", "BLOCKS_M"), o.unrolled("j", "BLOCKS_N"), o.unrolled("e", "4"):
            o.line("acc[i][j][e] = 0.0f;")

    def step(self, buffer: str) -> None:
        """acc += a_frag<buffer> x b_frag<buffer>, block by block."""
        o = self.out
        if self.precision is ir.Precision.NATIVE:
            with o.unrolled("i", "BLOCKS_M"), o.unrolled("j", "BLOCKS_N"):
                o.line(f"{self.mma}(acc[i][j], a_frag{buffer}[i], b_frag{buffer}[j]);")
            return
        split = self.precision is ir.Precision.TF32X3
        for operand, blocks, registers in (("a", "BLOCKS_M", "A_REGS"), ("b", "BLOCKS_N", "B_REGS")):
            o.line(f"unsigned {operand}_big[{blocks}][{registers}];")
            if split:
                o.line(f"unsigned {operand}_small[{blocks}][{registers}];")
            with o.unrolled("i", blocks), o.unrolled("r", registers):
                word = f"{operand}_frag{buffer}[i][r]"
                o.line(f"{operand}_big[i][r] = to_tf32(__uint_as_float({word}));")
                if split:
                    o.line(f"{operand}_small[i][r] = __float_as_uint(__uint_as_float({word}) - "
                           f"__uint_as_float({operand}_big[i][r]));")
        with o.unrolled("i", "BLOCKS_M"), o.unrolled("j", "BLOCKS_N"):
            if not split:
                o.line(f"{self.mma}(acc[i][j], a_big[i], b_big[j]);")
                return
            o.line("float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};")
            o.line(f"{self.mma}(d, a_small[i], b_big[j]);")
            o.line(f"{self.mma}(d, a_big[i], b_small[j]);")
            o.line(f"{self.mma}(d, a_big[i], b_big[j]);")
            with o.unrolled("e", "4"):
                o.line("acc[i][j][e] += d[e];")


def emit_mma_helpers(layout: MmaLayout, out: Emitter) -> None:
    """The mma.sync wrapper (and for TF32 the rounding to TF32) the kernels use."""
    shape = layout.mma.shape
    a_regs, b_regs = layout.registers[ir.Operand.A], layout.registers[ir.Operand.B]
    kind = "tf32" if layout.element is ir.DType.F32 else layout.element.value
    c = ", ".join(f"%{i}" for i in range(4))
    a = ", ".join(f"%{4 + i}" for i in range(a_regs))
    b = ", ".join(f"%{4 + a_regs + i}" for i in range(b_regs))
    out.uses("mma.sync")
    out.comment(f"D = A * B + C on the tensor cores: one warp, {shape.m}x{shape.n}x{shape.k}, {kind} inputs, "
                "FP32 accumulators\n(the fragment layouts of the PTX ISA's mma.sync).")
    with out.block(f"static __device__ __forceinline__ void {mma_name(layout)}(float* c, const unsigned* a, "
                   "const unsigned* b)"):
        out.line(f'asm volatile("mma.sync.aligned.{shape.value}.row.col.f32.{kind}.{kind}.f32 {{{c}}}, {{{a}}}, '
                 f'{{{b}}}, {{{c}}};"')
        out.line('             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])')
        inputs = [f'"r"(a[{i}])' for i in range(a_regs)] + [f'"r"(b[{i}])' for i in range(b_regs)]
        out.line(f"             : {', '.join(inputs)});")
    if layout.mma.precision is not ir.Precision.NATIVE:
        out.lines(TF32_HELPER)

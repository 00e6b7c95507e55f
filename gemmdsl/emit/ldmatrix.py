"""Shared -> register fragments of one mma k-step: `ldmatrix` (x1/x2/x4, `.trans` where m or n is
contiguous in shared memory) or one 32-bit load per fragment register (TF32, or `read: 32`).

Same interface as `SharedLoads` (fragments.py): `declare()`, `emit_stage_pointers(stage, name)` and
`load(k_step, buffer, source)`; the loads are the plan's (`MmaLayout.matrix_loads` /
`word_loads`), the lists the bank-conflict analysis counts.

16-bit operands read by ldmatrix are addressed by 32-bit shared-memory address: the stage as an
address (`smem_address` of the stage, once per k-tile), plus each load's swizzled offset in bytes
(`addresses_ldmatrix`). From a generic pointer, ptxas rebuilt each address from the stage index
every k-tile (an IMAD and a LEA per ldmatrix) and spilled at 255 registers; from the address,
hgemm_h100_mma ran 10-11% faster on the H100, without spills. f32 operands (TF32's A) keep the
pointer: the address form did not change tf32_ldmatrix's speed and made the 3xTF32 kernels spill
(docs/performance.md, tensor-core note T9).
"""
from __future__ import annotations

from .. import ir
from ..emitter import Emitter
from ..expr import Expr
from ..mma_layout import MatrixLoad, MmaLayout
from .ctext import OPERANDS, stage_base


def ldmatrix_name(count: int, transpose: bool) -> str:
    return f"ldmatrix_x{count}{'_trans' if transpose else ''}"


def addresses_ldmatrix(layout: MmaLayout) -> bool:
    """Whether this kernel's ldmatrix take 32-bit shared addresses (16-bit elements) or pointers."""
    return layout.element.bytes == 2


class MmaFragments:
    def __init__(self, layout: MmaLayout, out: Emitter, double: bool):
        self.layout = layout
        self.out = out
        self.double = double
        self.element = layout.element.c_type

    def declare(self) -> None:
        buffers = "[2]" if self.double else ""
        self.out.line(f"unsigned a_frag{buffers}[BLOCKS_M][A_REGS];")
        self.out.line(f"unsigned b_frag{buffers}[BLOCKS_N][B_REGS];")

    def emit_stage_pointers(self, stage: str, name: str) -> None:
        """`a_<name>`, `b_<name>`: stage `stage` of each operand, as the 32-bit shared address that
        16-bit ldmatrix takes, or as a pointer."""
        for operand in OPERANDS:
            base = stage_base(operand, stage)
            if self.layout.read[operand] is ir.SmemRead.LDMATRIX and addresses_ldmatrix(self.layout):
                self.out.line(f"const unsigned {operand.value}_{name} = smem_address({base});")
            else:
                self.out.line(f"const {self.element}* const {operand.value}_{name} = {base};")

    def load(self, k_step: Expr | int, buffer: str, source: str = "read") -> None:
        """Fragments of k-step `k_step` from the stage that `a_<source>` / `b_<source>` point at."""
        for operand in OPERANDS:
            frag, base = f"{operand.value}_frag{buffer}", f"{operand.value}_{source}"
            if self.layout.read[operand] is ir.SmemRead.LDMATRIX:
                for load in self.layout.matrix_loads(operand, k_step):
                    self._emit_matrix_load(load, frag, base)
                continue
            for word in self.layout.word_loads(operand, k_step):
                self.out.line(f"{frag}[{word.block}][{word.register}] = lds_word({base} + {word.offset.render()});")

    def _emit_matrix_load(self, load: MatrixLoad, frag: str, base: str) -> None:
        registers = ", ".join(f"{frag}[{m.block}][{m.register}]" for m in load.matrices)
        offset = load.offset * self.layout.element.bytes if addresses_ldmatrix(self.layout) else load.offset
        self.out.line(f"{ldmatrix_name(load.count, load.transpose)}({registers}, {base} + {offset.render()});")


def emit_fragment_load_helpers(layout: MmaLayout, out: Emitter) -> None:
    """PTX wrappers for the ldmatrix forms and the 32-bit loads the kernels issue (volatile, so
    they stay as the analysis counts them)."""
    element = layout.element.c_type
    forms = sorted({(load.count, load.transpose) for op in OPERANDS
                    if layout.read[op] is ir.SmemRead.LDMATRIX for load in layout.matrix_loads(op, 0)})
    source, address = (("unsigned address", "address") if addresses_ldmatrix(layout)
                       else (f"const {element}* p", "smem_address(p)"))
    if forms:
        out.uses("ldmatrix")
    for count, transpose in forms:
        registers = ", ".join(f"unsigned& r{i}" for i in range(count))
        outputs = ", ".join(f'"=r"(r{i})' for i in range(count))
        placeholders = ", ".join(f"%{i}" for i in range(count))
        trans = ".trans" if transpose else ""
        with out.block(f"static __device__ __forceinline__ void {ldmatrix_name(count, transpose)}({registers}, "
                       f"{source})"):
            out.line(f'asm volatile("ldmatrix.sync.aligned.m8n8.x{count}{trans}.shared.b16 {{{placeholders}}}, '
                     f'[%{count}];" : {outputs} : "r"({address}));')
    if any(layout.read[op] is ir.SmemRead.LDS32 for op in OPERANDS):
        with out.block(f"static __device__ __forceinline__ unsigned lds_word(const {element}* p)"):
            out.line("unsigned v;")
            out.line('asm volatile("ld.volatile.shared.b32 %0, [%1];" : "=r"(v) : "r"(smem_address(p)));')
            out.line("return v;")

"""Helpers emitted before the kernels: the shared-memory layout functions and the PTX wrappers
(sts, cp.async; and the path's fragment loads and instructions: lds for FMA kernels, ldmatrix, 32-bit
fragment loads and mma.sync for tensor-core ones) for exactly the widths and forms the plan's
instructions use."""
from __future__ import annotations

from .. import ir
from ..emitter import Emitter
from ..plan import KernelPlan
from .ctext import OPERANDS, VECTOR_TYPES, component


class HelperEmitter:
    """The shared-memory layout functions and the PTX wrappers every kernel of the file uses."""

    def __init__(self, plan: KernelPlan, out: Emitter):
        self.spec = plan.spec
        self.smem = plan.layout.smem  # the variants share their shared-memory layout
        self.layouts = [variant.layout for variant in plan.variants]
        self.out = out
        self.cp_async = self.spec.pipeline.copy is ir.CopyMode.CP_ASYNC
        self.element = plan.layout.smem_dtype  # what shared memory holds (f32 on the FMA path, whatever the operands)
        self.layout = plan.layout
        self.path = plan.path  # a TilePath (paths/tiles.py): its fragment loads' and instruction's wrappers

    def emit(self) -> None:
        o = self.out
        o.comment("Shared-memory layouts: element offset of (m or n, k) within one pipeline stage.")
        for operand in OPERANDS:
            geometry = self.smem[operand]
            func = geometry.offset_func
            layout = self.spec.smem(operand)
            note = f"order {layout.order.value}, leading dimension {geometry.ld}"
            if layout.swizzle is not None:
                note += f", swizzle {layout.swizzle}"
            o.comment(f"{operand.value.upper()}: {note}")
            with o.block(f"static __device__ __forceinline__ int {func.name}(int mn, int k)"):
                o.line(f"return {func.body.render()};")
        o.line()
        self._emit_shared_access_helpers()
        if self.cp_async:
            o.line()
            self._emit_cp_async_helpers()
        self.path.emit_math_helpers(self.layout, o)

    def shared_widths(self, op: str) -> list[int]:
        """Vector widths (elements) of the shared-memory loads or stores the kernels issue."""
        return sorted({a.width for layout in self.layouts for a in layout.smem_accesses() if a.op == op})

    def _emit_shared_access_helpers(self) -> None:
        o = self.out
        o.comment("Every shared-memory load and store goes through these PTX wrappers. nvcc and\n"
                  "ptxas merge adjacent plain accesses into wider ones; `.volatile` accesses they\n"
                  "leave as written, so the instructions the bank-conflict analysis counts are the\n"
                  "ones that run. (`asm volatile` also keeps them in order around barriers.)")
        # one signature for every element type: a family's file defines it once for members of several types
        with o.block("static __device__ __forceinline__ unsigned smem_address(const void* p)"):
            o.line("return static_cast<unsigned>(__cvta_generic_to_shared(p));")
        self.path.emit_fragment_helpers(self, o)
        if not self.cp_async:
            for width in self.shared_widths("store"):
                emit_shared_access_wrapper(o, "store", width)

    def _emit_cp_async_helpers(self) -> None:
        o = self.out
        o.uses("cp.async")
        o.comment("cp.async (sm_80+): copy global -> shared without staging in registers.\n"
                  "16-byte copies bypass L1 (.cg); 4- and 8-byte copies must use .ca.")
        # Stores narrower than 4 bytes (16-bit scalar variants) are copied directly, not by cp.async.
        widths = sorted({width for layout in self.layouts for op in OPERANDS
                         if (width := layout.store_width(op)) * self.element.bytes >= 4})
        for width in widths:
            self._emit_cp_async_copy(width, zero_fill=False)
        if self.spec.problem.checked:
            o.comment("Edge tiles (bounds: checked): a copy reads only its first `src_bytes` bytes and\n"
                      "zero-fills the rest. A copy that reads nothing still needs a valid address: `inside`,\n"
                      "the tile's first element, which always lies in the matrix (a block or k-tile exists\n"
                      "only where it starts inside).")
            for width in widths:
                self._emit_cp_async_copy(width, zero_fill=True)
            self._emit_bytes_inside()
        o.lines("""
static __device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\\n" ::);
}

template <int PENDING>
static __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\\n" :: "n"(PENDING));
}""")

    def _emit_cp_async_copy(self, width: int, zero_fill: bool) -> None:
        """`cp_async_<bytes>(dst, src)`, or with `zero_fill` `cp_async_<bytes>_zfill(dst, src, src_bytes, inside)`."""
        size, element = self.element.bytes * width, self.element.c_type
        cache = "cg" if size == 16 else "ca"
        name, parameters = f"cp_async_{size}", f"{element}* smem_dst, const {element}* gmem_src"
        operands, source = f"{size}", "gmem_src"
        if zero_fill:
            name, parameters = f"{name}_zfill", f"{parameters}, int src_bytes, const {element}* inside"
            operands, source = f"{size}, %2", "src_bytes > 0 ? gmem_src : inside"
        inputs = f'"r"(smem_address(smem_dst)), "l"({source})' + (', "r"(src_bytes)' if zero_fill else "")
        with self.out.block(f"static __device__ __forceinline__ void {name}({parameters})"):
            self.out.line(f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {operands};\\n" :: {inputs});')

    def _emit_bytes_inside(self) -> None:
        o = self.out
        o.comment("Bytes of a `width`-element copy at (row, col) of a tile that lie inside the matrix,\n"
                  "given the rows and the contiguous elements the matrix has left from the tile's origin.")
        with o.block("static __device__ __forceinline__ int bytes_inside(int row, int rows, int col, int cols, "
                     "int width)"):
            o.line(f"return row < rows ? {self.element.bytes} * max(0, min(width, cols - col)) : 0;")


def emit_shared_access_wrapper(o: Emitter, kind: str, width: int) -> None:
    """`ldsN(p)` or `stsN(p, v)`: one volatile shared-memory load or store of `width` floats."""
    vtype, bits = VECTOR_TYPES[width], 32 * width
    first = 0 if kind == "load" else 1  # a store's operand %0 is the address
    regs = ", ".join(f"%{first + i}" for i in range(width))
    regs = f"{{{regs}}}" if width > 1 else regs
    vec = f".v{width}" if width > 1 else ""
    values = [f'"{"=f" if kind == "load" else "f"}"({component("v", width, e)})' for e in range(width)]
    if kind == "load":
        with o.block(f"static __device__ __forceinline__ {vtype} lds{bits}(const float* p)"):
            o.line(f"{vtype} v;")
            o.line(f'asm volatile("ld.volatile.shared{vec}.f32 {regs}, [%{width}];" : {", ".join(values)} '
                   f': "r"(smem_address(p)));')
            o.line("return v;")
    else:
        with o.block(f"static __device__ __forceinline__ void sts{bits}(float* p, {vtype} v)"):
            o.line(f'asm volatile("st.volatile.shared{vec}.f32 [%0], {regs};" :: "r"(smem_address(p)), '
                   f'{", ".join(values)});')

"""The K = 0 kernel (`NAME_scale_c`), in every file: a call with no products computes the epilogue of a zero
accumulator, C = beta * C (0 where beta is 0 or the epilogue is `store`), then the fuse chain, as the GEMM
kernels' epilogue would. The C launchers run it for K = 0, and so does the Python runtime: no kernel of the
GEMM path (TMA maps need positive extents) sees an empty k-range.
"""
from __future__ import annotations

from .. import ir
from ..abi import scale_c_parameters
from ..emitter import Emitter
from ..launch_plan import SCALE_C_THREADS
from ..plan import KernelPlan
from .fuse import FuseChain, to_float

FROM_FLOAT = {ir.DType.F32: "{}", ir.DType.BF16: "__float2bfloat16_rn({})", ir.DType.F16: "__float2half_rn({})"}


def emit_scale_c_kernel(plan: KernelPlan, o: Emitter, guard: str = "") -> None:
    """The kernel; with `guard` (a preprocessor test), its body only where the test holds and a trap elsewhere:
    on the wgmma path the fuse chain's helpers exist in the sm_90a passes only."""
    spec = plan.spec
    c = spec.problem.c
    parameters = ", ".join(f"{ctype} {name}" for ctype, name in scale_c_parameters(spec))
    chain = " and the fuse chain" if spec.fuse is not None else ""
    o.comment(f"K = 0: no products, so C is the epilogue of a zero accumulator: C = beta * C (0 where beta is 0){chain}.\n"
              "The launchers run it instead of the GEMM for K = 0; each block strides over C's elements"
              + (", blockIdx.z the GEMM of the batch." if spec.problem.batched else "."))
    o.line(f'extern "C" __global__ void __launch_bounds__({SCALE_C_THREADS}) {plan.launch.entries.scale_c}'
           f"({parameters})")
    with o.block(""):
        if guard:
            o.line(guard)
        if spec.problem.batched:
            o.line("C += blockIdx.z * stride_c;")
        if spec.problem.grouped:
            o.line("M = min(M, max(offs[groups - 1], 0));  // the groups' rows; those after them are left alone")
        o.line("const long long total = (long long)M * N;")
        # Consecutive threads walk C's contiguous dimension, so the accesses coalesce.
        row_major = c.layout is ir.MatrixLayout.ROW
        inner, outer, extent = ("col", "row", "N") if row_major else ("row", "col", "M")
        with o.block(f"for (long long e = (long long)blockIdx.x * {SCALE_C_THREADS} + threadIdx.x; e < total; "
                     f"e += (long long)gridDim.x * {SCALE_C_THREADS})"):
            o.line(f"const int {outer} = (int)(e / {extent}), {inner} = (int)(e % {extent});")
            o.line(f"{c.dtype.c_type}* const c = C + (size_t){outer} * ldc + {inner};")
            o.line(f"const float old = beta == 0.0f ? 0.0f : {to_float(c.dtype, '*c')};")
            if spec.fuse is None:
                value = "beta * old"
            else:
                fuse = FuseChain(spec)
                o.line(f"const fuse_m m = {fuse.load_row('row')};")
                o.line(f"const fuse_n n = {fuse.load_col('col')};")
                value = fuse.element("0.0f", "m", "n", "old", "row", "col", alpha="1.0f")
            o.line(f"*c = {FROM_FLOAT[c.dtype].format(value)};")
        if guard:
            o.line("#else")
            o.line("__trap();")
            o.line("#endif")

"""bf16 and f16 operands on the FMA path: shared memory holds f32 (layout.KernelLayout.shared_element), so the
register copy (emit/copy.py) widens each vector it loads before storing it there. `widen2` and `widen4` read two
or four elements as one 32- or 64-bit load and convert them with the paired instructions; one element takes the
scalar conversion (emit/fuse.to_float)."""
from __future__ import annotations

from ... import ir

# (the element, its pair type, the pair's conversion to float2) by operand type
PAIRS = {ir.DType.BF16: ("__nv_bfloat16", "__nv_bfloat162", "__bfloat1622float2"),
         ir.DType.F16: ("__half", "__half2", "__half22float2")}

WIDEN = r'''
// Two and four {element}s from global memory as the f32 this kernel's shared memory holds: one 32- or 64-bit
// load each, widened a pair at a time.
static __device__ __forceinline__ float2 widen2(const {element}* p)
{{
    return {convert}(*reinterpret_cast<const {pair}*>(p));
}}

static __device__ __forceinline__ float4 widen4(const {element}* p)
{{
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    const float2 lo = {convert}(*reinterpret_cast<const {pair}*>(&v.x));
    const float2 hi = {convert}(*reinterpret_cast<const {pair}*>(&v.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}}'''


def widening_helpers(dtype: ir.DType) -> str | None:
    """The C helpers a kernel of `dtype` operands widens its vectors with; None for f32 operands."""
    if dtype not in PAIRS:
        return None
    element, pair, convert = PAIRS[dtype]
    return WIDEN.format(element=element, pair=pair, convert=convert)

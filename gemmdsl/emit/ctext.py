"""Small pieces of C text the emitters share: vector types and their components, stage pointers."""
from __future__ import annotations

from .. import ir

VECTOR_TYPES = {1: "float", 2: "float2", 4: "float4"}

# FP32 -> TF32 for the tensor cores' TF32 and 3xTF32 products. On sm_90 ptxas expands cvt.rna.tf32.f32
# into several instructions (ncu counted 536 M instructions for a 4096^3 3xTF32 wgmma kernel, 4x what
# its loads, adds and wgmma need); two integer instructions do the same rounding.
TF32_HELPER = r'''
// x rounded to TF32 (10-bit mantissa), to nearest with ties away from zero as cvt.rna.tf32.f32 rounds, as
// the bits of an f32 word: adding half a TF32 unit to the magnitude's bits and clearing the 13 bits below
// it rounds the magnitude, a carry into the exponent included, and keeps infinities. (A NaN may become an
// infinity; the 3xTF32 small part x - big of it stays NaN.)
static __device__ __forceinline__ unsigned to_tf32(float x)
{
    return (__float_as_uint(x) + 0x1000u) & 0xFFFFE000u;
}'''
COMPONENTS = ("x", "y", "z", "w")
OPERANDS = (ir.Operand.A, ir.Operand.B)


def component(var: str, width: int, element: int) -> str:
    """Element `element` of a register holding a `width`-wide vector."""
    return var if width == 1 else f"{var}.{COMPONENTS[element]}"


def vector_of(var: str, vector: int, first: int, width: int) -> str:
    """A `width`-wide value made of elements first.. of a `vector`-wide register."""
    if width == vector:
        return var
    if width == 1:
        return component(var, vector, first)
    parts = ", ".join(component(var, vector, first + e) for e in range(width))
    return f"make_{VECTOR_TYPES[width]}({parts})"


def make_vector(width: int, values: list[str]) -> str:
    return values[0] if width == 1 else f"make_{VECTOR_TYPES[width]}({', '.join(values)})"


def as_vector(address: str, width: int, const: bool = False) -> str:
    """`address` (a float lvalue) reinterpreted as a `width`-wide vector lvalue."""
    if width == 1:
        return address
    qualifier = "const " if const else ""
    return f"*reinterpret_cast<{qualifier}{VECTOR_TYPES[width]}*>(&{address})"


def paren(text: str) -> str:
    """`text` in parentheses unless it is a single name or number."""
    return text if text.replace("_", "").isalnum() else f"({text})"


def stage_base(operand: ir.Operand, stage: str) -> str:
    """Pointer to shared-memory stage `stage` of an operand."""
    region = f"smem_{operand.value}"
    return region if stage == "0" else f"{region} + {paren(stage)} * {operand.value.upper()}_STAGE"

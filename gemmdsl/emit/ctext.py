"""Small pieces of C text the emitters share: vector types and their components, stage pointers."""
from __future__ import annotations

from .. import ir

VECTOR_TYPES = {1: "float", 2: "float2", 4: "float4"}
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

"""`bias: m | n [TYPE]`: add a vector broadcast along the other index of C (docs/fusion.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ir
from ..value_readers import BadValue, Value
from .base import Operand, Report, Work, FuseStep, register
from .checks import check_operand_type


def read_bias(reader: Any, value: Value) -> ir.Bias:
    """`m` or `n` (the index of C it runs along), then an optional element type (default: C's)."""
    if not 1 <= len(value.atoms) <= 2:
        raise BadValue(value.span, "expected `m` or `n` and an optional element type, as in `bias: n;` or "
                                   "`bias: n f32;`")
    along = reader.name(Value(value.atoms[:1], reader.span(value.atoms[0])), ("m", "n"),
                        "m (one value per row) or n (one per column)")
    if len(value.atoms) == 1:
        dtype = reader.element_type("c") or ir.DType.F32
    else:
        types = tuple(t.value for t in ir.DType)
        dtype = ir.DType(reader.name(Value(value.atoms[1:], reader.span(value.atoms[1])), types,
                                     "the bias's element type"))
    return ir.Bias(ir.Broadcast(along), dtype)


@register
@dataclass(frozen=True, kw_only=True)
class BiasStep(FuseStep):
    key = "bias"
    syntax = staticmethod(read_bias)
    order = 30
    operand_order = 10

    along: ir.Broadcast
    dtype: ir.DType

    @classmethod
    def from_value(cls, value: ir.Bias, span) -> "BiasStep":
        return cls(span=span, along=value.along, dtype=value.dtype)

    @property
    def value(self) -> ir.Bias:
        return ir.Bias(self.along, self.dtype)

    def metadata(self) -> dict:
        return {"along": self.along.value, "dtype": self.dtype.value}

    def check(self, spec: ir.KernelSpec, error: Report) -> None:
        if spec.problem.grouped:
            error(self.span, "a bias is not supported with batch: grouped yet: an expert's bias is per group, "
                             "which the chain's operands are not", "remove the bias")
        check_operand_type(spec, self.span, "bias", self.dtype, f"{self.along.value} f32", error)

    def describe(self, x: str) -> str:
        return f"{x} + bias[{self.along.value}]"

    def operands(self) -> tuple[Operand, ...]:
        return (Operand("bias", "vector", self.dtype, along=self.along, field="bias"),)

    @staticmethod
    def operands_of(entry: dict) -> tuple[Operand, ...]:
        return (Operand("bias", "vector", ir.DType(entry["dtype"]), along=ir.Broadcast(entry["along"]),
                        field="bias"),)

    def types(self) -> str:
        return f"bias {self.dtype.value}"

    def header(self, spec: ir.KernelSpec) -> tuple[str, ...]:
        rows = self.along is ir.Broadcast.M
        return (f"bias: {'M' if rows else 'N'} {self.dtype.value} values, one per {'row' if rows else 'column'}",)

    def c_statement(self, spec: ir.KernelSpec) -> str:
        return f"x += {self.along.value}.bias;"

    @staticmethod
    def reference(entry: dict, x: Any, operands: dict[str, Any]) -> Any:
        vector = np.asarray(operands["bias"], dtype=np.float64)
        return x + (vector[:, None] if entry["along"] == "m" else vector[None, :])

    def work(self, spec: ir.KernelSpec, reads: Any) -> Work:
        return Work(alu=1)


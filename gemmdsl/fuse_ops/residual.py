"""`residual: TYPE LAYOUT`: add an M x N matrix R, with a leading dimension ldr of its own (docs/fusion.md).

R is the chain's matrix operand: each element's value reaches `fuse_chain` as `r` (`load_residual`), or, on
the wgmma path's stmatrix store, through the staging boxes (paths/wgmma/stmatrix.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ir
from ..value_readers import matrix
from .base import Operand, Report, Work, FuseStep, register
from .checks import check_operand_type


@register
@dataclass(frozen=True, kw_only=True)
class Residual(FuseStep):
    key = "residual"
    syntax = staticmethod(matrix)
    order = 50
    operand_order = 20
    uses_r = True

    dtype: ir.DType
    layout: ir.MatrixLayout

    @classmethod
    def from_value(cls, value: ir.MatrixType, span) -> "Residual":
        return cls(span=span, dtype=value.dtype, layout=value.layout)

    @property
    def value(self) -> ir.MatrixType:
        return ir.MatrixType(self.dtype, self.layout)

    def metadata(self) -> dict:
        return {"dtype": self.dtype.value, "layout": self.layout.value}

    def check(self, spec: ir.KernelSpec, error: Report) -> None:
        if spec.problem.grouped:
            error(self.span, "a residual is not supported with batch: grouped yet: an expert's residual is per "
                             "group, which the chain's operands are not", "remove the residual")
        if spec.problem.batched:
            error(self.span, "a residual is not supported with batch: strided (it would need a batch stride "
                             "of its own)", "remove the residual, or `batch: strided;`")
        check_operand_type(spec, self.span, "residual", self.dtype, f"f32 {self.layout.value}", error)

    def describe(self, x: str) -> str:
        return f"{x} + R"

    def operands(self) -> tuple[Operand, ...]:
        return self.operands_of(self.metadata())

    @staticmethod
    def operands_of(entry: dict) -> tuple[Operand, ...]:
        return (Operand("residual", "matrix", ir.DType(entry["dtype"]), pointer="R",
                        layout=ir.MatrixLayout(entry["layout"]), ld="ldr"),)

    def types(self) -> str:
        return f"R {self.dtype.value} {self.layout.value}"

    def header(self, spec: ir.KernelSpec) -> tuple[str, ...]:
        return (f"R: an M x N {self.layout.value}-major {self.dtype.value} matrix, leading dimension ldr",)

    def c_statement(self, spec: ir.KernelSpec) -> str:
        return "x += r;"

    @staticmethod
    def reference(entry: dict, x: Any, operands: dict[str, Any]) -> Any:
        return x + np.asarray(operands["residual"], dtype=np.float64)

    def work(self, spec: ir.KernelSpec, reads: Any) -> Work:
        # copied through C's staging boxes: 16 bytes a copy, ldmatrix 4 pairs a lane, not a load per element
        return Work(alu=1 + (self.dtype.bytes == 2), loads=int(not reads.residual_copied))

"""Rules several ops' operands share."""
from __future__ import annotations

from .. import ir
from ..source import Span
from .base import Report


def check_operand_type(spec: ir.KernelSpec, span: Span, key: str, dtype: ir.DType, f32_spelling: str,
                       error: Report) -> None:
    """An operand of the chain is f32, bf16 or f16; on the FMA path f32 only (its files include no 16-bit types)."""
    if dtype is ir.DType.F32:
        return
    if dtype.fp8 or dtype.integer:
        error(span, f"the {key} is {dtype.value}; FP8 and the integer weight types are operand types of A and B only",
              f"give the {key} in bf16, f16 or f32")
    elif spec.mma is None:
        error(span, f"the {key} is {dtype.value}, but the FMA path reads f32 only", f"write `{key}: {f32_spelling};`")

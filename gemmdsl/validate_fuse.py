"""The cross-field rules of a `fuse` section (docs/fusion.md), called from validate.py for every path.

The parser has read each step on its own (an activation's name, the bias's axis and type, the
residual's type and layout); these rules say how the chain fits the rest of the spec.
"""
from __future__ import annotations

from typing import Callable

from . import ir
from .source import Span

Report = Callable[[Span, str, str | None], None]


def check_fuse(spec: ir.KernelSpec, error: Report) -> None:
    """Every rule of the spec's fuse chain; `error` takes (span, message, hint)."""
    fuse = spec.fuse
    if fuse is None:
        return
    if fuse.empty:
        error(fuse.span, "the fuse section has no step",
              "give at least one of `scale`, `bias`, `activation`, `residual`, or remove the section")
        return
    problem = spec.problem
    if fuse.scale is not None and problem.epilogue is ir.Epilogue.ALPHA_BETA:
        error(fuse.at("scale"), "scale vectors take alpha's place; they do not combine with epilogue: alpha_beta",
              "remove `epilogue: alpha_beta;` (the vectors can carry alpha), or the `scale` key")
    if spec.block.stream_k:
        error(spec.block.at("schedule"), "schedule: stream_k adds partial sums of an element from several blocks, "
                                         "but a fuse chain needs each element's whole sum in one place",
              "use `schedule: tiles;` (or `persistent` on the wgmma path) with a fuse section")
    if problem.grouped:
        error(fuse.span, "a fuse chain is not supported with batch: grouped yet: a mixture of experts' bias and "
                         "scales are per group, which the chain's vectors are not", "remove the fuse section")
    if fuse.residual is not None and problem.batched:
        error(fuse.at("residual"), "a residual is not supported with batch: strided (it would need a batch stride "
                                   "of its own)", "remove the residual, or `batch: strided;`")
    for key, dtype in (("bias", fuse.bias and fuse.bias.dtype), ("residual", fuse.residual and fuse.residual.dtype)):
        if dtype is None or dtype is ir.DType.F32:
            continue
        if dtype.fp8:
            error(fuse.at(key), f"the {key} is {dtype.value}; FP8 is an operand type of A and B only",
                  f"give the {key} in bf16, f16 or f32")
        elif spec.mma is None:  # the FMA path: f32 throughout, and its files include no 16-bit types
            error(fuse.at(key), f"the {key} is {dtype.value}, but the FMA path reads f32 only",
                  f"write `{key}: {_f32_spelling(key, fuse)};`")


def _f32_spelling(key: str, fuse: ir.FuseChain) -> str:
    if key == "bias":
        assert fuse.bias is not None
        return f"{fuse.bias.along.value} f32"
    assert fuse.residual is not None
    return f"f32 {fuse.residual.layout.value}"

"""The cross-field rules of a `fuse` section (docs/fusion.md), called from validate.py for every path.

The parser has read each step on its own (an activation's name, the bias's axis and type, the
residual's type and layout); these rules say how the chain fits the rest of the spec.
"""
from __future__ import annotations

from typing import Callable

from . import ir
from .source import Span

Report = Callable[[Span, str, str | None], None]

BLOCK_SCALE_K = 128  # DeepSeek's block: A's scales per 1 x 128, B's per 128 x 128


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
    if fuse.scale is ir.ScaleVectors.BLOCK:
        _check_block_scales(spec, error)
    if spec.block.stream_k:
        error(spec.block.at("schedule"), "schedule: stream_k adds partial sums of an element from several blocks, "
                                         "but a fuse chain needs each element's whole sum in one place",
              "use `schedule: tiles;` (or `persistent` on the wgmma path) with a fuse section")
    if problem.grouped:
        _check_grouped_chain(fuse, error)
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


def _check_grouped_chain(fuse: ir.FuseChain, error: Report) -> None:
    """batch: grouped takes row and column scales (row_scale per token, col_scale per group and column: G x N,
    paths/wgmma/grouped.py) and an activation; a bias or a residual would be per group too, which the chain's
    operands are not yet, and block scales are not generated for it."""
    for key, present in (("bias", fuse.bias is not None), ("residual", fuse.residual is not None)):
        if present:
            error(fuse.at(key), f"a {key} is not supported with batch: grouped yet: an expert's {key} is per group, "
                                "which the chain's operands are not", f"remove the {key}")
    if fuse.scale is ir.ScaleVectors.BLOCK:
        error(fuse.at("scale"), "block scales are not supported with batch: grouped yet",
              "`scale: rowcol;` (row_scale per token, col_scale per group and column: G x N), or a spec without "
              "batch: grouped")


def _check_block_scales(spec: ir.KernelSpec, error: Report) -> None:
    """`scale: block` multiplies each k-tile's FP8 sum by its block scales before promoting it into the f32
    accumulators (docs/fp8.md): FP8 wgmma, promoted, k-tiles of one scale block, whole B blocks per tile."""
    fuse, problem, mma = spec.fuse, spec.problem, spec.mma
    if not (problem.a.dtype.fp8 and problem.b.dtype.fp8) or mma is None or not isinstance(mma.shape, ir.WgmmaShape):
        error(fuse.at("scale"), "block scales are applied at FP8 wgmma's promotion step; this spec is not an FP8 "
                                "wgmma kernel", "use e4m3 or e5m2 A and B with a wgmma shape (m64nNk32), or "
                                                "`scale: rowcol;`")
        return
    if mma.accumulate is not ir.Accumulate.PROMOTED:
        error(mma.at("accumulate"), "block scales multiply each k-tile's sum before it is added to the f32 "
                                    "accumulators; fast accumulation sums the whole K in wgmma",
              "remove `accumulate: fast;` (promoted is the default)")
    if spec.block.k != BLOCK_SCALE_K:
        error(spec.block.at("tile"), f"block scales cover {BLOCK_SCALE_K} elements of K, and BK = {spec.block.k}",
              f"use {spec.block.m}x{spec.block.n}x{BLOCK_SCALE_K}")
    if spec.block.n % BLOCK_SCALE_K:
        error(spec.block.at("tile"), f"B's block scales cover {BLOCK_SCALE_K} columns, and BN = {spec.block.n} is "
                                     "not a multiple", f"use a BN that is a multiple of {BLOCK_SCALE_K}")


def _f32_spelling(key: str, fuse: ir.FuseChain) -> str:
    if key == "bias":
        assert fuse.bias is not None
        return f"{fuse.bias.along.value} f32"
    assert fuse.residual is not None
    return f"f32 {fuse.residual.layout.value}"

"""`scale: row | col | rowcol | tensor | tensor col | row tensor | block`: f32 scales in alpha's place
(docs/fusion.md), or FP8 block scales. A two-word value names A's scale, then B's.

Row and column scales multiply the accumulator by row_scale[m] and/or col_scale[n] in the epilogue. Per-tensor
scales are one f32 each in device memory (a_scale, b_scale: "scalar" operands), read by the kernel itself, so a
caller that keeps them on the GPU (Transformer Engine's delayed scaling) never copies them to the host. Block
scales (DeepSeek's: A per 1 x 128, B per 128 x 128) are applied by the FP8 wgmma main loop as it promotes each
k-tile (docs/fp8.md); the op only declares them: its operands are "k_loop" ones, and its C adds nothing to the
epilogue.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ir
from ..value_readers import BadValue, Choice, Value
from .base import Operand, Report, Work, FuseStep, register
from .kinds import K_BLOCK

BLOCK_SCALE_K = K_BLOCK  # DeepSeek's block: A's scales per 1 x 128, B's per 128 x 128


def scale_blocks(extent: int) -> int:
    return -(-extent // BLOCK_SCALE_K)


A_WORDS = ("row", "tensor")  # A's scale in a two-word value: per row of C, or one for the tensor
B_WORDS = ("col", "tensor")  # B's: per column of C, or one for the tensor
SCALE_SYNTAX = "`scale: tensor;`, `scale: tensor col;` or `scale: row tensor;`"


class ScaleWords(Choice):
    """`scale`'s value: one word (row, col, rowcol, tensor, block), or A's scale then B's (`tensor col`,
    `row tensor`); each wrong pairing is reported at the word that breaks it."""

    def __call__(self, reader: Any, value: Value) -> ir.ScaleVectors:
        words = tuple(reader.name(Value((atom,), reader.span(atom)), ("row", "col", "rowcol", "tensor", "block"),
                                  "row, col, rowcol, tensor or block") for atom in value.atoms)
        if len(words) > 2:
            raise BadValue(reader.span(value.atoms[2]), "expected at most two words: A's scale, then B's",
                           SCALE_SYNTAX)
        if " ".join(words) in self.choices:
            return self.enum_type(" ".join(words))
        spans = [reader.span(atom) for atom in value.atoms]
        raise BadValue(*_pairing_error(words, spans))


def _pairing_error(words: tuple[str, str], spans: list) -> tuple:
    """(span, message, hint) for two words that name no pairing of A's and B's scales."""
    for word, span in zip(words, spans):
        if word in ("rowcol", "block"):
            return span, f"`{word}` names both operands' scales and takes no second word", f"`scale: {word};`"
    if words == ("row", "col"):
        return spans[1], "A per row and B per column is spelled `rowcol`", "`scale: rowcol;`"
    if words == ("tensor", "tensor"):
        return spans[1], "`tensor` alone scales A and B per tensor", "`scale: tensor;`"
    if words[0] not in A_WORDS:
        return spans[0], f"A's scale is `row` (one per row of C) or `tensor`, found `{words[0]}`", \
            "A's scale comes first: `scale: tensor col;` scales A per tensor and B per column"
    return spans[1], f"B's scale is `col` (one per column of C) or `tensor`, found `{words[1]}`", \
        "B's scale comes second: `scale: row tensor;` scales A per row and B per tensor"


@register
@dataclass(frozen=True, kw_only=True)
class Scale(FuseStep):
    key = "scale"
    syntax = ScaleWords(ir.ScaleVectors, "row, col, rowcol, tensor, tensor col, row tensor or block",
                        tuple(s.value for s in ir.ScaleVectors))
    order = 10
    operand_order = 30

    vectors: ir.ScaleVectors

    @classmethod
    def from_value(cls, value: ir.ScaleVectors, span) -> "Scale":
        return cls(span=span, vectors=value)

    @property
    def value(self) -> ir.ScaleVectors:
        return self.vectors

    def metadata(self) -> str:
        return self.vectors.value

    def check(self, spec: ir.KernelSpec, error: Report) -> None:
        if spec.problem.epilogue is ir.Epilogue.ALPHA_BETA:
            error(self.span, "scale vectors take alpha's place; they do not combine with epilogue: alpha_beta",
                  "remove `epilogue: alpha_beta;` (the scales can carry alpha), or the `scale` key")
        if (self.vectors.a_tensor or self.vectors.b_tensor) and spec.problem.grouped:
            error(self.span, "per-tensor scales are not supported with batch: grouped (one B per group would want "
                             "a scale per group)", "`scale: rowcol;` (col_scale per group and column: G x N)")
        if self.vectors.blocks:
            _check_block_scales(spec, self, error)
            if spec.problem.grouped:
                error(self.span, "block scales are not supported with batch: grouped yet",
                      "`scale: rowcol;` (row_scale per token, col_scale per group and column: G x N), or a spec "
                      "without batch: grouped")

    def describe(self, x: str) -> str:
        if self.vectors.blocks:
            return "sum_kb(acc_kb * a_scale[m, kb] * b_scale[n / 128, kb])"
        return " * ".join([x] + [name for name, present in (("row_scale[m]", self.vectors.rows),
                                                            ("a_scale", self.vectors.a_tensor),
                                                            ("col_scale[n]", self.vectors.cols),
                                                            ("b_scale", self.vectors.b_tensor)) if present])

    def operands(self) -> tuple[Operand, ...]:
        return self.operands_of(self.vectors.value)

    @staticmethod
    def operands_of(entry: str) -> tuple[Operand, ...]:
        f32 = ir.DType.F32
        if entry == "block":
            return (Operand("a_scale", "k_loop", f32, along=ir.Broadcast.M, scale=True),
                    Operand("b_scale", "k_loop", f32, along=ir.Broadcast.N, per=BLOCK_SCALE_K, scale=True))
        vectors = ir.ScaleVectors(entry)
        a = (Operand("row_scale", "vector", f32, along=ir.Broadcast.M, field="scale", scale=True) if vectors.rows else
             Operand("a_scale", "scalar", f32, field="a_scale", scale=True) if vectors.a_tensor else None)
        b = (Operand("col_scale", "vector", f32, along=ir.Broadcast.N, field="scale", scale=True) if vectors.cols else
             Operand("b_scale", "scalar", f32, field="b_scale", scale=True) if vectors.b_tensor else None)
        return tuple(operand for operand in (a, b) if operand is not None)

    def header(self, spec: ir.KernelSpec) -> tuple[str, ...]:
        if self.vectors.blocks:
            return ("a_scale: M x ceil(K / 128) f32 values, row-major, one per row and 128 elements of K; "
                    "b_scale: ceil(N / 128) x ceil(K / 128) f32 values, row-major, one per 128 x 128 block of B "
                    "(DeepSeek's block scaling, applied to each k-tile's sum)",)
        parts = ["row_scale: M f32 values"] if self.vectors.rows else []
        if self.vectors.a_tensor:
            parts.append("a_scale: one f32 value, A's scale (read by the kernel: no copy to the host)")
        if self.vectors.b_tensor:
            parts.append("b_scale: one f32 value, B's scale (read by the kernel: no copy to the host)")
        if self.vectors.cols:
            parts.append("col_scale: groups x N f32 values, row-major (one row per group)" if spec.problem.grouped
                         else "col_scale: N f32 values")
        return tuple(parts)

    def c_factors(self) -> tuple[str, ...]:
        """Each scale's value as the chain's row (`m`) or column (`n`) carries it: a per-tensor scale rides with
        each row's values."""
        return tuple(f"{along.value}.{operand.field}" for operand in self.operands()
                     if (along := operand.kind.carried_along(operand)) is not None)

    @staticmethod
    def reference(entry: str, x: Any, operands: dict[str, Any]) -> Any:
        vectors = ir.ScaleVectors(entry)
        if vectors.rows:
            x = x * np.asarray(operands["row_scale"], dtype=np.float64)[:, None]
        if vectors.cols:
            x = x * np.asarray(operands["col_scale"], dtype=np.float64)[None, :]
        for name, present in (("a_scale", vectors.a_tensor), ("b_scale", vectors.b_tensor)):
            if present:  # a 0-dim or one-value array
                x = x * float(np.asarray(operands[name], dtype=np.float64).reshape(()))
        return x  # block scales: applied to the product (fuse_reference.block_scaled_product)

    def work(self, spec: ir.KernelSpec, reads: Any) -> Work:
        return Work(alu=len(self.c_factors()))  # a multiply per scale; a per-tensor one is read with each row's values

    def extra_bytes(self, spec: ir.KernelSpec, reads: Any, m: int, n: int, k: int) -> dict[str, tuple[int, int, int]]:
        """Block scales, read once per k-tile by each block (its rows' A scales, its columns' B scales) and by
        each consumer thread (those of its rows and of every 128 columns of the tile)."""
        if not self.vectors.blocks:
            return {}
        f32, k_tiles = ir.DType.F32.bytes, scale_blocks(k)
        tiles_m, tiles_n = -(-m // spec.block.m), -(-n // spec.block.n)
        thread_loads = tiles_m * tiles_n * k_tiles * (reads.threads if reads is not None else 0) * f32
        rows_per_thread = reads.rows_per_thread if reads is not None else 0
        return {"a_scale": (m * k_tiles * f32, tiles_n * m * k_tiles * f32, thread_loads * rows_per_thread),
                "b_scale": (scale_blocks(n) * k_tiles * f32, tiles_m * scale_blocks(n) * k_tiles * f32,
                            thread_loads * (spec.block.n // BLOCK_SCALE_K))}


def _check_block_scales(spec: ir.KernelSpec, step: Scale, error: Report) -> None:
    """`scale: block` multiplies each k-tile's FP8 sum by its block scales before promoting it into the f32
    accumulators (docs/fp8.md): FP8 wgmma, promoted, k-tiles of one scale block, whole B blocks per tile."""
    problem, mma = spec.problem, spec.mma
    if not (problem.a.dtype.fp8 and problem.b.dtype.fp8) or mma is None or not isinstance(mma.shape, ir.WgmmaShape):
        error(step.span, "block scales are applied at FP8 wgmma's promotion step; this spec is not an FP8 "
                         "wgmma kernel", "use e4m3 or e5m2 A and B with a wgmma shape (m64nNk32), or "
                                         "`scale: rowcol;`")
        return
    if mma.accumulate is not ir.Accumulate.PROMOTED:
        error(mma.at("accumulate"), "block scales multiply each k-tile's sum before it is added to the f32 "
                                    "accumulators; fast accumulation sums the whole K in wgmma",
              "remove `accumulate: fast;` (promoted is the default)")
    if spec.block.stream_k:
        error(spec.block.at("schedule"), "block scales are read by each k-tile's absolute index, and a stream-K "
                                         "piece counts its k-tiles from its own first", "use `schedule: persistent;`")
    if spec.block.k != BLOCK_SCALE_K:
        error(spec.block.at("tile"), f"block scales cover {BLOCK_SCALE_K} elements of K, and BK = {spec.block.k}",
              f"use {spec.block.m}x{spec.block.n}x{BLOCK_SCALE_K}")
    if spec.block.n % BLOCK_SCALE_K:
        error(spec.block.at("tile"), f"B's block scales cover {BLOCK_SCALE_K} columns, and BN = {spec.block.n} is "
                                     "not a multiple", f"use a BN that is a multiple of {BLOCK_SCALE_K}")

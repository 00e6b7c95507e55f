"""`scale: row | col | rowcol | block`: f32 scales in alpha's place (docs/fusion.md), or FP8 block scales.

Row and column scales multiply the accumulator by row_scale[m] and/or col_scale[n] in the epilogue. Block
scales (DeepSeek's: A per 1 x 128, B per 128 x 128) are applied by the FP8 wgmma main loop as it promotes each
k-tile (docs/fp8.md); the op only declares them: its operands are "k_loop" ones, and its C adds nothing to the
epilogue.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ir
from ..value_readers import Choice
from .base import Operand, Report, Work, FuseStep, register

BLOCK_SCALE_K = 128  # DeepSeek's block: A's scales per 1 x 128, B's per 128 x 128


def scale_blocks(extent: int) -> int:
    return -(-extent // BLOCK_SCALE_K)


@register
@dataclass(frozen=True, kw_only=True)
class Scale(FuseStep):
    key = "scale"
    syntax = Choice(ir.ScaleVectors, "row, col, rowcol or block", tuple(s.value for s in ir.ScaleVectors))
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
                  "remove `epilogue: alpha_beta;` (the vectors can carry alpha), or the `scale` key")
        if self.vectors.blocks:
            _check_block_scales(spec, self, error)
            if spec.problem.grouped:
                error(self.span, "block scales are not supported with batch: grouped yet",
                      "`scale: rowcol;` (row_scale per token, col_scale per group and column: G x N), or a spec "
                      "without batch: grouped")

    def describe(self, x: str) -> str:
        if self.vectors.blocks:
            return "sum_kb(acc_kb * a_scale[m, kb] * b_scale[n / 128, kb])"
        return " * ".join([x] + ["row_scale[m]"] * self.vectors.rows + ["col_scale[n]"] * self.vectors.cols)

    def operands(self) -> tuple[Operand, ...]:
        return self.operands_of(self.vectors.value)

    @staticmethod
    def operands_of(entry: str) -> tuple[Operand, ...]:
        f32 = ir.DType.F32
        if entry == "block":
            return Operand("a_scale", "k_loop", f32), Operand("b_scale", "k_loop", f32)
        vectors = ir.ScaleVectors(entry)
        return tuple(Operand(name, "vector", f32, along=along, field="scale")
                     for name, along, present in (("row_scale", ir.Broadcast.M, vectors.rows),
                                                  ("col_scale", ir.Broadcast.N, vectors.cols)) if present)

    def header(self, spec: ir.KernelSpec) -> tuple[str, ...]:
        if self.vectors.blocks:
            return ("a_scale: M x ceil(K / 128) f32 values, row-major, one per row and 128 elements of K; "
                    "b_scale: ceil(N / 128) x ceil(K / 128) f32 values, row-major, one per 128 x 128 block of B "
                    "(DeepSeek's block scaling, applied to each k-tile's sum)",)
        parts = ["row_scale: M f32 values"] if self.vectors.rows else []
        if self.vectors.cols:
            parts.append("col_scale: groups x N f32 values, row-major (one row per group)" if spec.problem.grouped
                         else "col_scale: N f32 values")
        return tuple(parts)

    def c_factors(self) -> tuple[str, ...]:
        return ("m.scale",) * self.vectors.rows + ("n.scale",) * self.vectors.cols

    @staticmethod
    def reference(entry: str, x: Any, operands: dict[str, Any]) -> Any:
        if entry in ("row", "rowcol"):
            x = x * np.asarray(operands["row_scale"], dtype=np.float64)[:, None]
        if entry in ("col", "rowcol"):
            x = x * np.asarray(operands["col_scale"], dtype=np.float64)[None, :]
        return x  # block scales: applied to the product (fuse_reference.block_scaled_product)

    def work(self, spec: ir.KernelSpec, reads: Any) -> Work:
        return Work(alu=self.vectors.rows + self.vectors.cols)

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

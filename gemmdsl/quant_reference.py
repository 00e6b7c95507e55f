"""Quantized weights (docs/quantized.md) in float64 with numpy: the reference a mixed-input GEMM is verified against.

The canonical form of B (N x K, as nn.Linear stores its weight): integer codes `q` (N x K; e4m3 weights as their
float values), `scales` (N x G, values of A's type) and optional integer `zeros` (N x G), G = ceil(K / group), or 1
for `group: channel` (group None). The weight is

    w[n, k] = (q[n, k] - zeros[n, k // group]) * scales[n, k // group]

and the product C = A @ w.T. A GPU result is compared with it, and with the product of cuBLAS-style dequantize-then-
multiply: w rounded to A's type first (`rounded_weight`).
"""
from __future__ import annotations

import numpy as np

from . import ir

E4M3_MAX = 448.0  # the largest finite e4m3 value (float8_e4m3fn has no infinities)


def group_index(k: int, group: int | None) -> np.ndarray:
    """The scale column of each of the K weights of a row: k // group, or 0 for per-channel scales."""
    return np.zeros(k, dtype=np.intp) if group is None else np.arange(k) // group


def dequantize(q: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None, group: int | None) -> np.ndarray:
    """The N x K weight in float64."""
    q = np.asarray(q, dtype=np.float64)
    columns = group_index(q.shape[1], group)
    offset = 0.0 if zeros is None else np.asarray(zeros, dtype=np.float64)[:, columns]
    return (q - offset) * np.asarray(scales, dtype=np.float64)[:, columns]


def reference_product(a: np.ndarray, q: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None,
                      group: int | None) -> np.ndarray:
    """C = A @ w.T in float64: A (M x K) times the dequantized weight (N x K)."""
    return np.asarray(a, dtype=np.float64) @ dequantize(q, scales, zeros, group).T


def rounded_weight(q: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None, group: int | None,
                   activation: ir.DType) -> np.ndarray:
    """The dequantized weight rounded to A's type (bf16 or f16), as float64: what a dequantize-then-cuBLAS
    baseline multiplies."""
    return round_to(dequantize(q, scales, zeros, group), activation)


def round_to(values: np.ndarray, dtype: ir.DType) -> np.ndarray:
    """`values` rounded to the nearest of `dtype` (f32, f16, bf16 or e4m3; ties to even, e4m3 saturating at
    +-448), as float64."""
    values = np.asarray(values, dtype=np.float64)
    if dtype is ir.DType.F32:
        return values.astype(np.float32).astype(np.float64)
    if dtype is ir.DType.F16:
        return values.astype(np.float16).astype(np.float64)
    if dtype is ir.DType.BF16:
        return _bf16_bits_to_float(_bf16_bits(values))
    if dtype is ir.DType.E4M3:
        return _round_e4m3(values)
    raise ValueError(f"no rounding to {dtype.value}")


def round_up_to(values: np.ndarray, dtype: ir.DType) -> np.ndarray:
    """Each non-negative value rounded up to the nearest of `dtype` (f16 or bf16), as float64: scales rounded
    so that no code of their group clips."""
    values = np.asarray(values, dtype=np.float64)
    nearest = round_to(values, dtype)
    if dtype is ir.DType.F16:
        above = np.nextafter(nearest.astype(np.float16), np.float16(np.inf)).astype(np.float64)
    elif dtype is ir.DType.BF16:
        above = _bf16_bits_to_float(_bf16_bits(nearest) + 1)
    else:
        raise ValueError(f"scales are stored as bf16 or f16, not {dtype.value}")
    return np.where(nearest < values, above, nearest)


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """The bf16 bit patterns (as uint32) of float64 values, rounded to nearest even through float32."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint32)


def _bf16_bits_to_float(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)


def e4m3_values() -> np.ndarray:
    """Every finite non-negative e4m3 value, ascending (code 0 to 126; 127 is NaN)."""
    codes = np.arange(127)
    exponent, mantissa = codes >> 3, codes & 7
    normal = (1 + mantissa / 8) * 2.0 ** (exponent - 7)
    return np.where(exponent == 0, mantissa / 8 * 2.0 ** -6, normal)


def _round_e4m3(values: np.ndarray) -> np.ndarray:
    grid = e4m3_values()
    magnitude = np.minimum(np.abs(values), E4M3_MAX)
    upper = np.clip(np.searchsorted(grid, magnitude), 1, len(grid) - 1)
    low, high = grid[upper - 1], grid[upper]
    # Nearest, ties to the even code (the lower one when its code, upper - 1, is even).
    take_high = (high - magnitude < magnitude - low) | ((high - magnitude == magnitude - low) & ((upper - 1) % 2 == 1))
    return np.sign(values) * np.where(take_high, high, low)

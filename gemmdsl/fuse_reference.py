"""The fuse chain (docs/fusion.md) in float64 with numpy: verify's and the tests' reference.

It reads the chain as NAME.json records it (`metadata["fuse"]`), so the reference follows the kernel
file's own account of what it computes.
"""
from __future__ import annotations

import math

import numpy as np

GELU_TANH_C = math.sqrt(2.0 / math.pi)
_erf = np.vectorize(math.erf, otypes=[np.float64])

ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(GELU_TANH_C * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}


BLOCK_SCALES = ("a_scale", "b_scale")  # `scale: block`'s operands, applied inside the product


def dequantize_blocks(a, b, a_scale, b_scale, block: int = 128):
    """A[m, k] * a_scale[m, k // 128] and B[k, n] * b_scale[n // 128, k // 128], in the operands' own type and
    library (NumPy arrays or GPU tensors: indexing by lists works alike in both)."""
    k_blocks = [kk // block for kk in range(a.shape[1])]
    n_blocks = [nn // block for nn in range(b.shape[1])]
    return a * a_scale[:, k_blocks], b * b_scale[n_blocks][:, k_blocks].T


def block_scaled_product(a: np.ndarray, b: np.ndarray, a_scale: np.ndarray, b_scale: np.ndarray,
                         block: int = 128) -> np.ndarray:
    """A @ B of the dequantized operands (`scale: block`), in float64."""
    a, b = dequantize_blocks(*(np.asarray(x, dtype=np.float64) for x in (a, b, a_scale, b_scale)), block=block)
    return a @ b


def apply_chain(fuse: dict, product: np.ndarray, *, alpha: float = 1.0, beta: float = 0.0,
                c: np.ndarray | None = None, bias: np.ndarray | None = None, residual: np.ndarray | None = None,
                row_scale: np.ndarray | None = None, col_scale: np.ndarray | None = None,
                alpha_beta: bool = False) -> np.ndarray:
    """C as the chain computes it from the M x N `product` A * B (of the dequantized operands for block
    scales: block_scaled_product), every operand read as float64."""
    x = np.asarray(product, dtype=np.float64)
    if fuse["scale"] not in (None, "block"):
        if fuse["scale"] in ("row", "rowcol"):
            x = x * np.asarray(row_scale, dtype=np.float64)[:, None]
        if fuse["scale"] in ("col", "rowcol"):
            x = x * np.asarray(col_scale, dtype=np.float64)[None, :]
    elif alpha_beta:
        x = alpha * x
    if alpha_beta and beta != 0.0:
        x = x + beta * np.asarray(c, dtype=np.float64)
    if fuse["bias"] is not None:
        vector = np.asarray(bias, dtype=np.float64)
        x = x + (vector[:, None] if fuse["bias"]["along"] == "m" else vector[None, :])
    if fuse["activation"] is not None:
        x = ACTIVATIONS[fuse["activation"]](x)
    if fuse["residual"] is not None:
        x = x + np.asarray(residual, dtype=np.float64)
    return x

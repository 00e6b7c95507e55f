"""The fuse chain (docs/fusion.md) in float64 with numpy: verify's and the tests' reference.

It reads the chain as NAME.json records it (`metadata["fuse"]`), so the reference follows the kernel
file's own account of what it computes.
"""
from __future__ import annotations

import numpy as np

from . import fuse_ops
from .ir import FUSE_BETA_ORDER


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
                c: np.ndarray | None = None, alpha_beta: bool = False, **operands) -> np.ndarray:
    """C as the chain computes it from the M x N `product` A * B (of the dequantized operands for block
    scales: block_scaled_product), every operand (`bias`, `residual`, `row_scale`, ... by keyword) read as
    float64. Each step is its op's `reference` (gemmdsl/fuse_ops/), in chain order."""
    x = np.asarray(product, dtype=np.float64)
    steps = [(op, fuse[op.key]) for op in fuse_ops.ops() if fuse.get(op.key) is not None]
    scaling = [(op, entry) for op, entry in steps if op.order < FUSE_BETA_ORDER]
    for op, entry in scaling:
        x = op.reference(entry, x, operands)
    if alpha_beta and not scaling:
        x = alpha * x
    if alpha_beta and beta != 0.0:
        x = x + beta * np.asarray(c, dtype=np.float64)
    for op, entry in steps:
        if op.order >= FUSE_BETA_ORDER:
            x = op.reference(entry, x, operands)
    return x

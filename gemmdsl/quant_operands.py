"""The operands `gemmdsl verify` and `gemmdsl bench` give a dequantizing kernel (paths/dequant): a random weight in
the spec's format, quantized by quantize.py, and quant_layout.pack's arrays as the GPU libraries hold them.
Pure numpy."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import ir
from .quant_layout import CODE_RANGE, QuantFormat
from .quantize import Canonical, quantize


def draw_weight(rng: np.random.Generator, fmt: QuantFormat, n: int, k: int) -> Canonical:
    """A standard normal N x K weight quantized in `fmt` (its type, group and A's type for the scales). Zero points
    are the quantizer's where it makes them (u4) and the format has them; a format with zero points whose
    quantizer is symmetric (s4, s8) gets them drawn over the type's range, so that the kernel's subtraction
    counts. The weight a kernel is held to is the dequantization of what is packed (`Canonical.dequantized`)."""
    canonical = quantize(rng.standard_normal((n, k)), ir.DType(fmt.weight), fmt.group, ir.DType(fmt.activation))
    zeros = canonical.zeros if fmt.zeros else None
    if fmt.zeros and zeros is None:
        low, high = CODE_RANGE[fmt.weight]
        zeros = rng.integers(low, high + 1, size=canonical.scales.shape, dtype=np.int8)
    return replace(canonical, zeros=zeros)


def signed_views(packed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """pack's arrays viewed as int32 (the weights' words) and int16 (the 16-bit scales and zero points): the
    types every GPU library has (PyTorch had no uint32 or uint16 tensors before 2.3), and the kernel reads bits."""
    return {name: array.view(np.int32) if array.dtype == np.uint32 else array.view(np.int16)
            for name, array in packed.items()}

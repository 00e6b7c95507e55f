"""Weights into the canonical quantized form (docs/quantized.md): quantize a float weight on the spot, or import a
GPTQ or AWQ checkpoint's packed tensors. Pure numpy; every error is a QuantizeError with a message for the user.

    canonical = quantize(w, ir.DType.S4, group=128, activation=ir.DType.BF16)
    canonical = import_gptq(qweight, qzeros, scales, group=128, activation=ir.DType.F16)
    canonical = import_awq(qweight, qzeros, scales, group=128, activation=ir.DType.F16)

The canonical form is quant_reference.py's: codes `q` (N x K int8; e4m3 weights as float32 values), `scales`
(N x G float32 holding values of A's type) and optional `zeros` (N x G int8).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ir
from .errors import GemmdslError
from .quant_reference import E4M3_MAX, dequantize, group_index, round_to, round_up_to

PACKED_CODES = 8  # 4-bit codes per int32 word in GPTQ's and AWQ's tensors
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # the column of a packed word's nibble i (nibble 0 the lowest), within its 8
CODE_RANGE = {ir.DType.S4: (-8, 7), ir.DType.U4: (0, 15), ir.DType.S8: (-128, 127)}
ACTIVATIONS = (ir.DType.BF16, ir.DType.F16)


class QuantizeError(GemmdslError, ValueError):
    """Weights that cannot be quantized or imported as asked (shapes, group, types)."""


@dataclass(frozen=True)
class Canonical:
    """B's weight in the canonical form; `dtype` the weight type, `group` None for one scale per column."""

    dtype: ir.DType
    q: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray | None
    group: int | None

    def dequantized(self) -> np.ndarray:
        return dequantize(self.q, self.scales, self.zeros, self.group)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays by name, as `gemmdsl quantize` writes them (no `zeros` without zero points)."""
        found = {"q": self.q, "scales": self.scales}
        return found if self.zeros is None else {**found, "zeros": self.zeros}


def groups(k: int, group: int | None) -> int:
    """Scale columns G of a K-long row."""
    return 1 if group is None else -(-k // group)


def quantize(w: np.ndarray, dtype: ir.DType, group: int | None, activation: ir.DType = ir.DType.BF16) -> Canonical:
    """A float N x K weight in the canonical form of `dtype`: s4 and s8 symmetric (scale max|w| / 7 or / 127 per
    group), u4 asymmetric (scale (max - min) / 15 over a range that holds 0, and a zero point), e4m3 scaled by
    max|w| / 448. Scales are rounded up to A's type (`activation`), and the codes are rounded against the rounded
    scale, so no code clips and every integer weight is within scale / 2 of w."""
    w = _weight(w, group, activation)
    n, k = w.shape
    blocks = w.reshape(n, groups(k, group), -1)  # _weight holds K to a multiple of the group
    zeros = None
    if dtype is ir.DType.U4:
        low, high = np.minimum(blocks.min(axis=2), 0.0), np.maximum(blocks.max(axis=2), 0.0)
        scales = round_up_to((high - low) / 15, activation)
        safe = np.where(scales > 0, scales, 1.0)
        zeros = np.clip(np.ceil(-low / safe - 0.5), 0, 15)
    else:
        top = {ir.DType.S4: 7, ir.DType.S8: 127, ir.DType.E4M3: E4M3_MAX}.get(dtype)
        if top is None:
            raise QuantizeError(f"cannot quantize to {dtype.value}: the weight types are s4, u4, s8 and e4m3")
        scales = round_up_to(np.abs(blocks).max(axis=2) / top, activation)
        safe = np.where(scales > 0, scales, 1.0)
    ratio = w / safe[:, group_index(k, group)]
    if dtype is ir.DType.E4M3:
        q = round_to(ratio, ir.DType.E4M3).astype(np.float32)
    else:
        low_code, high_code = CODE_RANGE[dtype]
        shifted = ratio + (0 if zeros is None else zeros[:, group_index(k, group)])
        q = np.clip(np.rint(shifted), low_code, high_code).astype(np.int8)
    return Canonical(dtype, q, scales.astype(np.float32), None if zeros is None else zeros.astype(np.int8), group)


def _weight(w: np.ndarray, group: int | None, activation: ir.DType) -> np.ndarray:
    w = np.asarray(w)
    if w.ndim != 2 or 0 in w.shape:
        raise QuantizeError(f"a weight is a 2-D N x K matrix, found shape {tuple(w.shape)}")
    if not np.issubdtype(w.dtype, np.floating):
        raise QuantizeError(f"a weight to quantize holds floats, found {w.dtype}")
    if not np.isfinite(w).all():
        raise QuantizeError("the weight holds NaN or infinite values")
    _check_group(w.shape[1], group)
    if activation not in ACTIVATIONS:
        raise QuantizeError(f"scales are stored in A's type, bf16 or f16, not {activation.value}")
    return w.astype(np.float64)


def _check_group(k: int, group: int | None) -> None:
    if group is not None and (group < 32 or group & (group - 1)):
        raise QuantizeError(f"a group is a power of two of at least 32 weights along K, found {group}")
    if group is not None and k % group:
        raise QuantizeError(f"K = {k} is not a multiple of the group ({group}): the last group would be partial "
                            "in the checkpoint formats; pad K or choose a group that divides it")


def import_gptq(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, group: int | None,
                activation: ir.DType = ir.DType.F16, zeros_plus_one: bool = True,
                g_idx: np.ndarray | None = None) -> Canonical:
    """GPTQ's 4-bit tensors in canonical u4 form: `qweight` int32 [K / 8, N], 8 codes per word packed along K, the
    lowest nibble first; `qzeros` int32 [G, N / 8] packed along N alike; `scales` [G, N]. GPTQ's original
    checkpoint format stores each zero point less one (the packer subtracts 1 and the kernels add it back):
    `zeros_plus_one` adds it (GPTQModel's and AutoGPTQ's "gptq_v2" format stores them as they are: pass False).
    An act-order checkpoint's `g_idx` must be the plain k // group (reordered groups are refused)."""
    qweight, qzeros, scales = (_int32(qweight, "qweight"), _int32(qzeros, "qzeros"), np.asarray(scales))
    k, n = qweight.shape[0] * PACKED_CODES, qweight.shape[1]
    g = _check_tensors(k, n, qzeros, scales, group, "qweight [K / 8, N]")
    if g_idx is not None and not np.array_equal(np.asarray(g_idx).reshape(-1), group_index(k, group)):
        raise QuantizeError("g_idx reorders the groups (act-order): only checkpoints whose g_idx is k // group "
                            "import; requantize without act-order, or with GPTQModel's `desc_act` off")
    q = unpack_nibbles(qweight.T, range(PACKED_CODES))  # N x K
    zeros = unpack_nibbles(qzeros, range(PACKED_CODES)).T[:n] + int(zeros_plus_one)  # N x G
    if zeros.max() > 15:
        raise QuantizeError("a zero point is 16 after adding 1: this checkpoint stores its zero points as they "
                            "are (GPTQ v2); import it without the zeros + 1 offset")
    return Canonical(ir.DType.U4, q.astype(np.int8), _scales(scales, g, n, activation), zeros.astype(np.int8), group)


def import_awq(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, group: int | None,
               activation: ir.DType = ir.DType.F16) -> Canonical:
    """AWQ's (AutoAWQ's GEMM format) 4-bit tensors in canonical u4 form: `qweight` int32 [K, N / 8] packed along N
    in AWQ's interleaved order (nibble i of a word holds column AWQ_ORDER[i] of its 8), `qzeros` int32 [G, N / 8]
    alike, `scales` [G, N]; w = (q - zeros) * scales, no offset."""
    qweight, qzeros, scales = (_int32(qweight, "qweight"), _int32(qzeros, "qzeros"), np.asarray(scales))
    k, n = qweight.shape[0], qweight.shape[1] * PACKED_CODES
    g = _check_tensors(k, n, qzeros, scales, group, "qweight [K, N / 8]")
    q = unpack_nibbles(qweight, AWQ_ORDER).T  # N x K
    zeros = unpack_nibbles(qzeros, AWQ_ORDER).T  # N x G
    return Canonical(ir.DType.U4, q.astype(np.int8), _scales(scales, g, n, activation), zeros.astype(np.int8), group)


def unpack_nibbles(words: np.ndarray, order) -> np.ndarray:
    """int32 words [R, C] -> codes 0..15 [R, 8 * C]: nibble i (from the lowest) of word c is column 8c + order[i]."""
    words = np.asarray(words).astype(np.uint32)
    codes = np.empty((words.shape[0], words.shape[1], PACKED_CODES), dtype=np.int16)
    for nibble, column in enumerate(order):
        codes[:, :, column] = (words >> (4 * nibble)) & 0xF
    return codes.reshape(words.shape[0], -1)


def _int32(array: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 2 or array.dtype not in (np.int32, np.uint32):
        raise QuantizeError(f"{name} is a 2-D int32 tensor, found {array.dtype} of shape {tuple(array.shape)}")
    return array


def _check_tensors(k: int, n: int, qzeros: np.ndarray, scales: np.ndarray, group: int | None, layout: str) -> int:
    """The checkpoint's G, once its tensors' shapes agree with K, N and the group."""
    _check_group(k, group)
    g = groups(k, group)
    if scales.shape != (g, n):
        raise QuantizeError(f"scales must be [G, N] = [{g}, {n}] for {layout} with K = {k} and group "
                            f"{group or 'channel'}, found {list(scales.shape)}")
    if qzeros.shape != (g, -(-n // PACKED_CODES)):
        raise QuantizeError(f"qzeros must be [G, N / 8] = [{g}, {-(-n // PACKED_CODES)}], found {list(qzeros.shape)}")
    return g


def _scales(scales: np.ndarray, g: int, n: int, activation: ir.DType) -> np.ndarray:
    """A checkpoint's [G, N] scales as canonical N x G values of A's type (f16 scales change under a bf16 A)."""
    if activation not in ACTIVATIONS:
        raise QuantizeError(f"scales are stored in A's type, bf16 or f16, not {activation.value}")
    if not np.isfinite(scales.astype(np.float64)).all():
        raise QuantizeError("the scales hold NaN or infinite values")
    return round_to(scales.astype(np.float64).T, activation).astype(np.float32)

"""Quantized weights' canonical form (docs/quantized.md): quantizing a float weight on the spot, importing GPTQ and
AWQ checkpoints (packed here from canonical values, as their formats describe), the float64 reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl import ir
from gemmdsl.quant_reference import (dequantize, e4m3_values, reference_product, round_to, round_up_to,
                                     rounded_weight)
from gemmdsl.quantize import QuantizeError, import_awq, import_gptq, quantize

INTEGERS = [ir.DType.S4, ir.DType.U4, ir.DType.S8]
ACTIVATIONS = [ir.DType.BF16, ir.DType.F16]


@st.composite
def weights(draw, max_groups: int = 4):
    group = draw(st.sampled_from([32, 64, 128, None]))
    k = (group or 32) * draw(st.integers(1, max_groups))
    n = draw(st.integers(1, 24))
    seed = draw(st.integers(0, 2**32 - 1))
    magnitude = draw(st.sampled_from([1e-3, 1.0, 300.0]))
    w = np.random.default_rng(seed).standard_normal((n, k)) * magnitude
    if draw(st.booleans()):
        w[:, : k // 2] = 0.0  # whole groups of zeros, or one-sided ranges
    return w, group


@settings(max_examples=60, deadline=None)
@given(case=weights(), dtype=st.sampled_from(INTEGERS), activation=st.sampled_from(ACTIVATIONS))
def test_an_integer_weight_dequantizes_within_half_a_scale(case, dtype, activation):
    w, group = case
    canonical = quantize(w, dtype, group, activation)
    n, k = w.shape
    g = 1 if group is None else k // group
    assert canonical.q.shape == (n, k) and canonical.q.dtype == np.int8
    assert canonical.scales.shape == (n, g) and canonical.scales.dtype == np.float32
    assert np.array_equal(round_to(canonical.scales, activation), canonical.scales)  # stored exactly in A's type
    low, high = {ir.DType.S4: (-8, 7), ir.DType.U4: (0, 15), ir.DType.S8: (-128, 127)}[dtype]
    assert low <= canonical.q.min() and canonical.q.max() <= high
    if dtype is ir.DType.U4:
        assert canonical.zeros.shape == (n, g) and 0 <= canonical.zeros.min() and canonical.zeros.max() <= 15
    else:
        assert canonical.zeros is None
    columns = np.zeros(k, dtype=int) if group is None else np.arange(k) // group
    error = np.abs(canonical.dequantized() - w)
    assert (error <= canonical.scales[:, columns] / 2 * (1 + 1e-12)).all()


@settings(max_examples=30, deadline=None)
@given(case=weights(), activation=st.sampled_from(ACTIVATIONS))
def test_an_e4m3_weight_dequantizes_within_fp8_rounding(case, activation):
    w, group = case
    canonical = quantize(w, ir.DType.E4M3, group, activation)
    assert canonical.q.dtype == np.float32 and np.array_equal(round_to(canonical.q, ir.DType.E4M3), canonical.q)
    columns = np.zeros(w.shape[1], dtype=int) if group is None else np.arange(w.shape[1]) // group
    scale = canonical.scales[:, columns]
    # e4m3 keeps 3 mantissa bits (half an ulp is 1/16 of the value), and its subnormals are 2^-9 apart
    assert (np.abs(canonical.dequantized() - w) <= np.abs(w) / 16 + scale * 2.0 ** -10 + 1e-300).all()


def test_the_scale_rounds_up_so_the_largest_weight_keeps_its_code():
    w = np.full((1, 32), 0.1)
    w[0, 0] = 7 * 1.00390625  # just above a bf16 step over 7: the nearest bf16 scale would be below max|w| / 7
    canonical = quantize(w, ir.DType.S4, 32, ir.DType.BF16)
    assert canonical.scales[0, 0] >= w[0, 0] / 7 and canonical.q[0, 0] == 7


def gptq_pack(q: np.ndarray, zeros: np.ndarray, stored_offset: int) -> tuple[np.ndarray, np.ndarray]:
    """GPTQ's layout, written from its description: qweight [K/8, N] with codes k = 8r..8r+7 of column n in word
    (r, n), the lowest nibble first; qzeros [G, N/8] with the zero points of columns 8c..8c+7 in word (g, c)."""
    n, k = q.shape
    qweight = np.zeros((k // 8, n), dtype=np.uint32)
    for i in range(8):
        qweight |= q.T[i::8].astype(np.uint32) << (4 * i)
    stored = zeros.T - stored_offset  # G x N
    qzeros = np.zeros((stored.shape[0], n // 8), dtype=np.uint32)
    for i in range(8):
        qzeros |= (stored[:, i::8].astype(np.uint32) & 0xF) << (4 * i)
    return qweight.view(np.int32), qzeros.view(np.int32)


def awq_pack(q: np.ndarray, zeros: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AWQ's layout, written from its description: qweight [K, N/8], word (k, c) holding columns 8c..8c+7 with
    nibble i (from the lowest) the column 8c + [0, 2, 4, 6, 1, 3, 5, 7][i]; qzeros [G, N/8] alike."""
    def pack(rows: np.ndarray) -> np.ndarray:  # rows x N -> rows x N/8
        words = np.zeros((rows.shape[0], rows.shape[1] // 8), dtype=np.uint32)
        for i, column in enumerate((0, 2, 4, 6, 1, 3, 5, 7)):
            words |= rows[:, column::8].astype(np.uint32) << (4 * i)
        return words.view(np.int32)

    return pack(q.T), pack(zeros.T)


@st.composite
def u4_checkpoints(draw):
    group = draw(st.sampled_from([32, 64, 128]))
    k = group * draw(st.integers(1, 4))
    n = 8 * draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q = rng.integers(0, 16, (n, k), dtype=np.int8)
    zeros = rng.integers(1, 16, (n, k // group), dtype=np.int8)  # 1..15: GPTQ v1 stores 0..14
    scales = rng.uniform(1e-3, 1e-1, (k // group, n)).astype(np.float16)
    return q, zeros, scales, group


@settings(max_examples=40, deadline=None)
@given(checkpoint=u4_checkpoints(), plus_one=st.booleans())
def test_gptq_import_gives_back_the_canonical_codes(checkpoint, plus_one):
    q, zeros, scales, group = checkpoint
    qweight, qzeros = gptq_pack(q, zeros, stored_offset=int(plus_one))
    canonical = import_gptq(qweight, qzeros, scales, group, ir.DType.F16, zeros_plus_one=plus_one)
    assert canonical.dtype is ir.DType.U4
    assert np.array_equal(canonical.q, q) and np.array_equal(canonical.zeros, zeros)
    assert np.array_equal(canonical.scales, scales.T.astype(np.float32))


@settings(max_examples=40, deadline=None)
@given(checkpoint=u4_checkpoints())
def test_awq_import_gives_back_the_canonical_codes(checkpoint):
    q, zeros, scales, group = checkpoint
    qweight, qzeros = awq_pack(q, zeros)
    canonical = import_awq(qweight, qzeros, scales, group, ir.DType.F16)
    assert np.array_equal(canonical.q, q) and np.array_equal(canonical.zeros, zeros)
    assert np.array_equal(canonical.scales, scales.T.astype(np.float32))


def test_a_bf16_activation_rounds_a_checkpoint_s_f16_scales():
    q, zeros, group = np.zeros((8, 32), np.int8), np.ones((8, 1), np.int8), 32
    scales = np.full((1, 8), 0.0999, np.float16)
    canonical = import_awq(*awq_pack(q, zeros), scales, group, ir.DType.BF16)
    assert np.array_equal(canonical.scales, round_to(scales.T.astype(np.float64), ir.DType.BF16))
    assert canonical.scales[0, 0] != np.float32(scales[0, 0])


def test_a_v2_checkpoint_read_with_the_offset_is_refused():
    q, zeros = np.zeros((8, 32), np.int8), np.full((8, 1), 15, np.int8)
    qweight, qzeros = gptq_pack(q, zeros, stored_offset=0)
    with pytest.raises(QuantizeError, match="zero point is 16 after adding 1"):
        import_gptq(qweight, qzeros, np.ones((1, 8), np.float16), 32, zeros_plus_one=True)


@pytest.mark.parametrize("call, message", [
    (lambda: quantize(np.ones((4, 100)), ir.DType.S4, 32), "K = 100 is not a multiple of the group"),
    (lambda: quantize(np.ones((4, 128)), ir.DType.S4, 48), "a power of two of at least 32"),
    (lambda: quantize(np.ones(128), ir.DType.S4, 32), "2-D N x K"),
    (lambda: quantize(np.full((1, 32), np.nan), ir.DType.S4, 32), "NaN"),
    (lambda: quantize(np.ones((1, 32)), ir.DType.BF16, 32), "cannot quantize to bf16"),
    (lambda: quantize(np.ones((1, 32)), ir.DType.S4, 32, ir.DType.F32), "bf16 or f16, not f32"),
    (lambda: import_gptq(np.zeros((4, 8), np.int32), np.zeros((1, 1), np.int32), np.ones((2, 8)), 32),
     r"scales must be \[G, N\] = \[1, 8\]"),
    (lambda: import_gptq(np.zeros((4, 8), np.float32), np.zeros((1, 1), np.int32), np.ones((1, 8)), 32),
     "qweight is a 2-D int32 tensor"),
    (lambda: import_awq(np.zeros((32, 1), np.int32), np.zeros((2, 1), np.int32), np.ones((1, 8)), 32),
     r"qzeros must be \[G, N / 8\] = \[1, 1\]"),
    (lambda: import_gptq(np.zeros((8, 8), np.int32), np.zeros((2, 1), np.int32), np.ones((2, 8)), 32,
                         g_idx=np.arange(64) % 2), "act-order"),
])
def test_what_cannot_be_quantized_or_imported_says_why(call, message):
    with pytest.raises(QuantizeError, match=message):
        call()


def test_the_reference_is_the_contract_s_formula():
    rng = np.random.default_rng(1)
    q = rng.integers(0, 16, (3, 64)).astype(np.int8)
    scales, zeros = rng.uniform(0.1, 1, (3, 2)), rng.integers(0, 16, (3, 2)).astype(np.int8)
    w = np.array([[(q[n, k] - zeros[n, k // 32]) * scales[n, k // 32] for k in range(64)] for n in range(3)])
    assert np.array_equal(dequantize(q, scales, zeros, 32), w)
    a = rng.standard_normal((2, 64))
    assert np.allclose(reference_product(a, q, scales, zeros, 32), a @ w.T, rtol=1e-14)
    assert np.array_equal(rounded_weight(q, scales, zeros, 32, ir.DType.BF16), round_to(w, ir.DType.BF16))
    assert np.array_equal(dequantize(q, scales[:, :1], None, None), q * scales[:, :1])


def test_rounding_to_bf16_f16_and_e4m3():
    assert round_to(np.array([1 + 2**-8]), ir.DType.BF16)[0] == 1.0  # a tie goes to the even 1.0
    assert round_to(np.array([1 + 3 * 2**-8]), ir.DType.BF16)[0] == 1 + 2**-6  # a tie goes to the even 1 + 2^-6
    assert round_to(np.array([1 + 2**-11]), ir.DType.F16)[0] == 1.0
    grid = e4m3_values()
    assert (len(grid), grid[-1], grid[1]) == (127, 448.0, 2.0 ** -9)
    assert round_to(np.array([1.0625, 1.1875, -500.0, 0.3]), ir.DType.E4M3).tolist() == [1.0, 1.25, -448.0, 0.3125]
    assert round_up_to(np.array([1 + 2**-9]), ir.DType.BF16)[0] == 1 + 2**-7
    assert round_up_to(np.array([1 + 2**-12]), ir.DType.F16)[0] == 1 + 2**-10
    assert round_up_to(np.array([1.0, 0.0]), ir.DType.BF16).tolist() == [1.0, 0.0]

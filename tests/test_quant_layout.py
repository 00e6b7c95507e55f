"""The dequantizing kernel's weight layout (gemmdsl/quant_layout.py): pack then unpack gives the canonical
weights back for every type, group and zero-point choice and any N, K; and a numpy model of the kernel's
inner loop (its 128-bit loads, the magic-number conversion and the swapped mma.sync m16n8k16) computes
W @ X^T from the packed arrays, with the fragment layouts written from the PTX ISA independently of the
module, so the packed order is proven before a GPU runs it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gemmdsl import quant_layout as ql
from gemmdsl.quant_layout import QuantFormat

from quant_cases import canonical_weights as canonical, dequantized, round_to as to_activation

INTEGER = ("s4", "u4", "s8")


@st.composite
def formats(draw) -> QuantFormat:
    weight = draw(st.sampled_from(sorted(ql.WEIGHT_BITS)))
    zeros = weight in INTEGER and draw(st.booleans())
    group = draw(st.sampled_from([None, 32, 64, 128])) if ql.WEIGHT_BITS[weight] < 16 else None
    return QuantFormat(weight, draw(st.sampled_from(ql.ACTIVATIONS)), group, zeros)


def random_case(fmt: QuantFormat, n: int, k_groups: int, seed: int):
    k = k_groups * (fmt.group or 16)
    return k, canonical(np.random.default_rng(seed), n, k, fmt)


@settings(max_examples=60, deadline=None)
@given(fmt=formats(), n=st.integers(1, 40), k_groups=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_unpack_inverts_pack(fmt, n, k_groups, seed):
    k, (q, scales, zeros) = random_case(fmt, n, k_groups, seed)
    packed = ql.pack(q, scales, zeros, fmt)
    n_pad, k_pad = fmt.padded(n, k)
    assert packed["weights"].dtype == np.uint32
    assert packed["weights"].shape == (n_pad // 16, k_pad // fmt.chunk_k, 32, 4)
    assert set(packed) == {"weights"} | ({"scales"} if fmt.scaled else set()) | ({"zeros"} if fmt.zeros else set())
    # The kernel reads each array by its element order alone; torch.from_numpy(...).cuda() keeps strides.
    assert all(array.flags["C_CONTIGUOUS"] for array in packed.values())
    q2, scales2, zeros2 = ql.unpack(packed, n, k, fmt)
    np.testing.assert_array_equal(q2, q)
    if fmt.scaled:
        np.testing.assert_array_equal(scales2, scales)
        assert packed["scales"].shape == (n_pad // 16, fmt.groups(k_pad), 8, 2)
    else:
        assert scales2 is None
    if fmt.zeros:
        np.testing.assert_array_equal(zeros2, zeros)
    else:
        assert zeros2 is None
    assert ql.packed_bytes(n, k, fmt) == sum(a.nbytes for a in packed.values())


@given(st.lists(st.sampled_from(ql.e4m3_values()[~np.isnan(ql.e4m3_values())]), min_size=1, max_size=50))
def test_e4m3_codes_invert_values(values):
    values = np.array(values, dtype=np.float32)
    np.testing.assert_array_equal(ql.e4m3_values()[ql.e4m3_codes(values)], values)


def test_the_fragment_order_covers_each_chunk_element_once():
    for bits in (4, 8, 16):
        rows, columns = ql.fragment_coordinates(bits)
        flat = rows.ravel() * ql.CHUNK_K[bits] + columns.ravel()
        assert sorted(flat) == list(range(16 * ql.CHUNK_K[bits]))


@pytest.mark.parametrize("bad, message", [
    (dict(q=np.full((16, 128), 8, np.int8)), "s4 codes must lie in -8..7"),
    (dict(q=np.zeros((16, 100), np.int8)), "not a multiple of the group"),
    (dict(scales=np.full((16, 1), 0.1, np.float32)), "exactly representable in bf16"),
    (dict(zeros=np.zeros((16, 1), np.int8)), "zero points given"),
])
def test_pack_refuses_what_the_kernel_cannot_read(bad, message):
    args = dict(q=np.zeros((16, 128), np.int8), scales=np.ones((16, 1), np.float32), zeros=None)
    args.update(bad)
    with pytest.raises(ValueError, match=message):
        ql.pack(args["q"], args["scales"], args["zeros"], QuantFormat("s4", "bf16", 128))


# --- a numpy model of the kernel's inner loop -----------------------------------------------------------------

def isa_a_fragment(lane: int) -> list[tuple[int, int]]:
    """(row, column) of elements a0..a7 of m16n8k16's A fragment (16-bit types), PTX ISA 9.7.13.4.8: a0, a1 at
    (groupID, 2 * threadID_in_group + i), a2, a3 eight rows down, a4..a7 the same eight columns right."""
    g, t = lane // 4, lane % 4
    return [(g + 8 * ((i // 2) % 2), 2 * t + (i % 2) + 8 * (i // 4)) for i in range(8)]


def isa_b_fragment(lane: int) -> list[tuple[int, int]]:
    """(k, column) of b0..b3 of m16n8k16's B fragment: (2 * threadID_in_group + i, groupID), b2, b3 eight k down."""
    g, t = lane // 4, lane % 4
    return [(2 * t + (i % 2) + 8 * (i // 2), g) for i in range(4)]


def isa_c_fragment(lane: int) -> list[tuple[int, int]]:
    """(row, column) of c0..c3: (groupID, 2 * threadID_in_group + i), c2, c3 eight rows down."""
    g, t = lane // 4, lane % 4
    return [(g + 8 * (i // 2), 2 * t + i % 2) for i in range(4)]


def halves(word: int, activation: str) -> tuple[float, float]:
    values = ql.bits_float(np.array([word & 0xFFFF, word >> 16], dtype=np.uint16), activation)
    return float(values[0]), float(values[1])


MAGIC = {"bf16": (0x4300, 128.0), "f16": (0x6400, 1024.0)}


def dequantized_registers(words: np.ndarray, step: int, fmt: QuantFormat, offset: tuple[float, float]):
    """The 4 registers (as 8 floats, register order) a lane feeds mma for k-step `step` of its chunk, computed
    as the kernel does from the bits: `offset` is bias + zero of the lane's rows g and g + 8."""
    magic_bits, magic = MAGIC[fmt.activation]
    registers = []
    if fmt.bits == 4:
        word = int(words[step])
        for j in range(4):
            pair = ((word >> (4 * j)) & 0x000F000F) | (magic_bits * 0x10001)
            lo, hi = halves(pair, fmt.activation)
            registers += [lo - magic - offset[j & 1], hi - magic - offset[j & 1]]
        return registers
    assert fmt.bits == 8
    for p in range(2):
        word = int(words[2 * step + p])
        for r in range(2):
            lo, hi = (word >> (8 * r)) & 0xFF, (word >> (8 * r + 16)) & 0xFF
            if fmt.weight == "e4m3":
                table = ql.e4m3_values()
                registers += [float(table[lo]), float(table[hi])]
            else:
                registers += [lo - offset[r], hi - offset[r]]
    return registers


def warp_mma(a_registers: list[list[float]], b_registers: list[list[float]]) -> list[list[float]]:
    """mma.sync m16n8k16 over a warp, from the ISA's fragment layouts: each lane's A and B elements into the
    16 x 16 and 16 x 8 operands (each element given by exactly one lane), the product into each lane's C."""
    a, b = np.full((16, 16), np.nan), np.full((16, 8), np.nan)
    for lane in range(32):
        for (row, col), value in zip(isa_a_fragment(lane), a_registers[lane]):
            assert np.isnan(a[row, col])
            a[row, col] = value
        for (kk, col), value in zip(isa_b_fragment(lane), b_registers[lane]):
            assert np.isnan(b[kk, col])
            b[kk, col] = value
    d = a @ b
    return [[d[row, col] for row, col in isa_c_fragment(lane)] for lane in range(32)]


def model_product(packed: dict, x: np.ndarray, n: int, k: int, fmt: QuantFormat) -> np.ndarray:
    """C^T = W X^T as the kernel computes it: per 16-row tile, chunk and k-step, each lane's registers from its
    128-bit load dequantized, one mma per 8 rows of X (X^T is the B operand: b0, b1 = X[g, 2t..2t+1]), each
    group's partial sums scaled in f32 by the scales of the lane's accumulator rows (g and g + 8)."""
    m = x.shape[0]
    n_pad, k_pad = fmt.padded(n, k)
    x_pad = np.zeros((8 * -(-m // 8), k_pad))
    x_pad[:m, :k] = x
    scales = ql.bits_float(packed["scales"], fmt.activation)
    offsets = (ql.bits_float(packed["zeros"], fmt.activation) if fmt.zeros
               else np.full(scales.shape, ql.CODE_BIAS.get(fmt.weight, 0), np.float32))
    c_t = np.zeros((n_pad, x_pad.shape[0]))
    for tile in range(n_pad // 16):
        for chunk in range(k_pad // fmt.chunk_k):
            for step in range(fmt.chunk_k // 16):
                k0 = chunk * fmt.chunk_k + step * 16
                group = k0 // fmt.group if fmt.group else 0
                a = [dequantized_registers(packed["weights"][tile, chunk, lane], step, fmt,
                                           tuple(offsets[tile, group, lane // 4])) for lane in range(32)]
                for n8 in range(x_pad.shape[0] // 8):
                    b = [[x_pad[n8 * 8 + col, k0 + kk] for kk, col in isa_b_fragment(lane)] for lane in range(32)]
                    for lane, c in enumerate(warp_mma(a, b)):
                        for i, ((row, col), value) in enumerate(zip(isa_c_fragment(lane), c)):
                            assert row == lane // 4 + 8 * (i // 2)  # the scale pair's half h is i // 2
                            scale = scales[tile, group, lane // 4, i // 2]
                            c_t[tile * 16 + row, n8 * 8 + col] += value * scale
    return c_t[:n, :m].T


@settings(max_examples=15, deadline=None)
@given(fmt=formats().filter(lambda f: f.scaled), n=st.integers(1, 20), k_groups=st.integers(1, 3),
       m=st.integers(1, 9), seed=st.integers(0, 2**32 - 1))
def test_the_kernel_model_multiplies_the_packed_weights(fmt, n, k_groups, m, seed):
    k, (q, scales, zeros) = random_case(fmt, n, k_groups, seed)
    x = to_activation(np.random.default_rng(seed + 1).standard_normal((m, k)), fmt.activation)
    packed = ql.pack(q, scales, zeros, fmt)
    expected = x.astype(np.float64) @ dequantized(q, scales, zeros, fmt).T
    np.testing.assert_allclose(model_product(packed, x, n, k, fmt), expected, rtol=1e-9, atol=1e-9)

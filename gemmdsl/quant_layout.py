"""The dequantizing kernel's weight layout: `pack` turns canonical quantized weights (integer codes or FP8
values, scales, zero points; docs/quantized.md) into the arrays the kernel streams, `unpack` turns them back.
Pure numpy, so that importers, the reference and the tests share it without a GPU.

The kernel multiplies with mma.sync m16n8k16 with the roles swapped: a 16-row tile of the weight W (N x K, as
nn.Linear stores it) is the instruction's A operand, so each lane holds, per 16-wide k-step, the 8 elements

    register a_j (j = 0..3), halves h = 0, 1:   row  g + 8 * (j & 1),   column  2t + 8 * (j >> 1) + h

of the 16 x 16 tile, where g = lane // 4 and t = lane % 4 (the PTX ISA's A fragment of m16n8k16 for 16-bit
types; gemmdsl/mma_layout.py). One 128-bit load per lane (4 words) brings exactly its elements of several
k-steps of one tile, and the 32 lanes' loads are one contiguous 512-byte segment:

    weights[tile, chunk, lane, word]     uint32, tile = n // 16, chunk = k // CHUNK_K

- 4-bit codes (s4, u4): CHUNK_K = 64, word w = k-step 4 * chunk + w. Nibble j of the word (bits 4j..4j+3)
  is register a_j's half 0 and nibble 4 + j its half 1. So `(word >> 4j) & 0x000F000F` puts a_j's two codes
  in the low bits of two 16-bit halves, and OR-ing the exponent of 128 (bf16, 0x4300) or 1024 (f16, 0x6400)
  makes the two 16-bit floats 128 + code (1024 + code): one shift and one lop3 per register, then a subtract
  of the bias (and zero point). For f16 the even registers need no shift (mask 0x000F000F) and the odd ones
  take the mask 0x00F000F0 (16 * code, corrected by a multiply-add by 1/16), FasterTransformer's order.
  Codes are stored biased to unsigned: s4's q + 8, u4's q.
- 8-bit (s8, e4m3): CHUNK_K = 32, word w = 2 * s + p for k-step 2 * chunk + s; byte b of the word is register
  a_{2p + (b & 1)}'s half b >> 1, so the byte pairs (0, 2) and (1, 3) are a register each (a byte permute or
  the mask 0x00FF00FF). s8 is stored as q + 128; e4m3 as its bit pattern.
- 16-bit (bf16 or f16 weights without quantization): CHUNK_K = 16, word j is register a_j (half 0 in the low
  16 bits).

N is padded to a multiple of 16 and K to a multiple of CHUNK_K with weight 0 (groups past K get scale 1, zero 0);
the kernel reads activations past K as 0 and stores no row past N, so any N and any K (a multiple of the group)
are accepted.

Scales (and zero points) are per 16-row tile and group, the two rows a lane's accumulators hold side by side:

    scales[tile, group, g, h] = scale[16 * tile + g + 8 * h, group]     uint16, A's dtype's bits

so one 32-bit load per lane per group brings its rows' scales. Zero points, where the spec has them, are
stored in the same order as the 16-bit float (A's dtype) of bias + zero, the value the kernel subtracts from
128 + code (the magic exponent is added by the kernel).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

TILE_N = 16
LANES = 32
WORDS = 4  # one 128-bit load per lane
CHUNK_K = {4: 64, 8: 32, 16: 16}  # k covered by one 128-bit load per lane, by the weight's bits
CODE_BIAS = {"s4": 8, "u4": 0, "s8": 128}  # added to q so that the stored code is unsigned
CODE_RANGE = {"s4": (-8, 7), "u4": (0, 15), "s8": (-128, 127)}
WEIGHT_BITS = {"s4": 4, "u4": 4, "s8": 8, "e4m3": 8, "bf16": 16, "f16": 16}
ACTIVATIONS = ("bf16", "f16")


@dataclass(frozen=True)
class QuantFormat:
    """What the layout depends on: B's type, A's type (the scales' and the kernel's 16-bit float), the group
    (None: one scale per output channel; for 16-bit weights: no scales) and whether there are zero points."""

    weight: str
    activation: str
    group: int | None
    zeros: bool = False

    def __post_init__(self):
        if self.weight not in WEIGHT_BITS:
            raise ValueError(f"weights of type {self.weight!r} have no packed layout (one of {sorted(WEIGHT_BITS)})")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activations of type {self.activation!r}: the kernel takes bf16 or f16")
        if self.zeros and self.weight not in CODE_BIAS:
            raise ValueError(f"zero points need integer weights, not {self.weight}")
        if self.group is not None and (self.group < 16 or self.group & (self.group - 1)):
            raise ValueError(f"group {self.group}: a power of two of at least 16")

    @classmethod
    def of(cls, spec: Any) -> "QuantFormat":
        """The format of a KernelSpec with a `quant b` block (ir.KernelSpec.quant, ir.WeightQuant)."""
        quant = spec.quant
        return cls(spec.problem.b.dtype.value, spec.problem.a.dtype.value, quant.group, quant.zeros)

    @property
    def bits(self) -> int:
        return WEIGHT_BITS[self.weight]

    @property
    def chunk_k(self) -> int:
        return CHUNK_K[self.bits]

    @property
    def scaled(self) -> bool:
        return self.bits < 16

    def groups(self, k: int) -> int:
        return -(-k // self.group) if self.group else 1

    def padded(self, n: int, k: int) -> tuple[int, int]:
        return -(-n // TILE_N) * TILE_N, -(-k // self.chunk_k) * self.chunk_k


def _format(fmt: QuantFormat | Any) -> QuantFormat:
    return fmt if isinstance(fmt, QuantFormat) else QuantFormat.of(fmt)


# --- 16-bit floats as bit patterns ----------------------------------------------------------------------------

def float_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """uint16 bit patterns of float32 values in bf16 or f16, which must represent them exactly."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == "f16":
        bits = values.astype(np.float16).view(np.uint16)
    else:
        bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    if not np.array_equal(bits_float(bits, dtype), values, equal_nan=True):
        raise ValueError(f"values not exactly representable in {dtype} (round them to {dtype} first)")
    return bits


def bits_float(bits: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values of uint16 bf16 or f16 bit patterns."""
    bits = np.asarray(bits, dtype=np.uint16)
    if dtype == "f16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def e4m3_values() -> np.ndarray:
    """float32 value of each of the 256 e4m3 codes (PyTorch's float8_e4m3fn: no infinities, NaN at 0x7f/0xff)."""
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent, mantissa = (codes >> 3) & 0xF, codes & 0x7
    magnitude = np.where(exponent == 0, mantissa / 8.0 * 2.0 ** -6, (1 + mantissa / 8.0) * 2.0 ** (exponent - 7.0))
    magnitude = np.where((codes & 0x7F) == 0x7F, np.nan, magnitude)
    return (sign * magnitude).astype(np.float32)


def e4m3_codes(values: np.ndarray) -> np.ndarray:
    """uint8 e4m3 codes of float32 values it represents exactly (-0.0 keeps its sign)."""
    values = np.asarray(values, dtype=np.float32)
    table = e4m3_values()
    finite = np.flatnonzero(~np.isnan(table))
    order = finite[np.argsort(table[finite], kind="stable")]
    keys = table[order]
    index = np.clip(np.searchsorted(keys, values), 0, keys.size - 1)
    codes = order[index].astype(np.uint8)
    zero = values == 0
    codes[zero] = np.where(np.signbit(values[zero]), 0x80, 0x00)
    if not np.array_equal(table[codes], values):
        raise ValueError("values not exactly representable in e4m3")
    return codes


# --- the fragment order ---------------------------------------------------------------------------------------

def fragment_coordinates(bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column (within a 16-row tile and a CHUNK_K-wide chunk) of every element of one chunk's packed
    words, as arrays of shape (LANES, WORDS, elements per word): the order the kernel's loads deliver."""
    per_word = 32 // bits
    lane = np.arange(LANES)[:, None, None]
    word = np.arange(WORDS)[None, :, None]
    slot = np.arange(per_word)[None, None, :]
    g, t = lane // 4, lane % 4
    if bits == 4:
        step, register, half = word, slot % 4, slot // 4
    elif bits == 8:
        step, register, half = word // 2, 2 * (word % 2) + slot % 2, slot // 2
    else:
        step, register, half = 0 * word, word + 0 * slot, slot
    row = g + 8 * (register & 1)
    column = 16 * step + 2 * t + 8 * (register >> 1) + half
    shape = (LANES, WORDS, per_word)
    return np.broadcast_to(row, shape), np.broadcast_to(column, shape)


def _tile(codes: np.ndarray, bits: int) -> np.ndarray:
    """Padded N x K codes (uint, `bits` wide) into weights[tile, chunk, lane, word] as uint32."""
    n, k = codes.shape
    chunk = CHUNK_K[bits]
    rows, columns = fragment_coordinates(bits)
    blocks = codes.reshape(n // TILE_N, TILE_N, k // chunk, chunk).transpose(0, 2, 1, 3)
    elements = blocks[:, :, rows, columns].astype(np.uint32)  # tile, chunk, lane, word, slot
    shifts = (np.arange(32 // bits) * bits).astype(np.uint32)
    return np.bitwise_or.reduce(elements << shifts, axis=-1).astype(np.uint32)


def _untile(words: np.ndarray, bits: int) -> np.ndarray:
    """The inverse of _tile: padded N x K codes."""
    tiles, chunks = words.shape[:2]
    chunk = CHUNK_K[bits]
    rows, columns = fragment_coordinates(bits)
    shifts = (np.arange(32 // bits) * bits).astype(np.uint32)
    elements = (words[..., None] >> shifts) & np.uint32((1 << bits) - 1)
    blocks = np.zeros((tiles, chunks, TILE_N, chunk), dtype=np.uint32)
    blocks[:, :, rows, columns] = elements
    return blocks.transpose(0, 2, 1, 3).reshape(tiles * TILE_N, chunks * chunk)


def _pair_rows(values: np.ndarray) -> np.ndarray:
    """N x G per-row values into [tile, group, g, h] = values[16 * tile + g + 8 * h, group]."""
    n, groups = values.shape
    return values.reshape(n // TILE_N, 2, 8, groups).transpose(0, 3, 2, 1)


def _unpair_rows(paired: np.ndarray) -> np.ndarray:
    tiles, groups = paired.shape[:2]
    return paired.transpose(0, 3, 2, 1).reshape(tiles * TILE_N, groups)


# --- pack and unpack ------------------------------------------------------------------------------------------

def pack(q: np.ndarray, scales: np.ndarray | None, zeros: np.ndarray | None,
         fmt: QuantFormat | Any) -> dict[str, np.ndarray]:
    """The kernel's arrays from canonical weights (N x K codes or values, N x G float32 scales, N x G int8 zero
    points or None): {"weights": uint32, "scales": uint16, "zeros": uint16} (scales and zeros only where the
    format has them), each C-contiguous: the kernel reads them by their element order alone, and a library's copy to
    the GPU keeps a strided array's strides. `fmt` is a QuantFormat or a spec with a `quant b` block."""
    fmt = _format(fmt)
    q = np.asarray(q)
    if q.ndim != 2:
        raise ValueError(f"weights of shape {q.shape}: expected N x K")
    n, k = q.shape
    if fmt.group and k % fmt.group:
        raise ValueError(f"K = {k} is not a multiple of the group ({fmt.group})")
    n_pad, k_pad = fmt.padded(n, k)
    # Padding holds weight 0: the code of 0 and, in groups past K, a zero point of 0 and a scale of 1.
    padded = np.full((n_pad, k_pad), CODE_BIAS.get(fmt.weight, 0), dtype=np.uint32)
    padded[:n, :k] = _codes(q, fmt)
    packed = {"weights": np.ascontiguousarray(_tile(padded, fmt.bits))}
    if not fmt.scaled:
        return packed
    groups, padded_groups = fmt.groups(k), fmt.groups(k_pad)
    scales = np.asarray(scales, dtype=np.float32)
    if scales.shape != (n, groups):
        raise ValueError(f"scales of shape {scales.shape}: expected {(n, groups)}")
    padded_scales = np.ones((n_pad, padded_groups), dtype=np.float32)
    padded_scales[:n, :groups] = scales
    packed["scales"] = _pair_rows(float_bits(padded_scales, fmt.activation)).copy()
    if fmt.zeros:
        if zeros is None or np.shape(zeros) != (n, groups):
            raise ValueError(f"zeros of shape {np.shape(zeros)}: expected {(n, groups)}")
        zeros = np.asarray(zeros, dtype=np.int32)
        low, high = CODE_RANGE[fmt.weight]
        if zeros.size and (zeros.min() < low or zeros.max() > high):
            raise ValueError(f"zero points must lie in {fmt.weight}'s range {low}..{high}")
        offsets = np.full((n_pad, padded_groups), CODE_BIAS[fmt.weight], dtype=np.float32)
        offsets[:n, :groups] += zeros
        packed["zeros"] = _pair_rows(float_bits(offsets, fmt.activation)).copy()
    elif zeros is not None:
        raise ValueError("zero points given for a format without them")
    return packed


def unpack(packed: dict[str, np.ndarray], n: int, k: int,
           fmt: QuantFormat | Any) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The canonical (q, scales, zeros) of `pack`'s arrays for an N x K weight: q as int8 codes (float32 values
    for e4m3 and 16-bit weights), scales float32 N x G, zeros int8 N x G or None."""
    fmt = _format(fmt)
    codes = _untile(packed["weights"], fmt.bits)[:n, :k]
    if fmt.weight in CODE_BIAS:
        q = (codes.astype(np.int32) - CODE_BIAS[fmt.weight]).astype(np.int8)
    elif fmt.weight == "e4m3":
        q = e4m3_values()[codes]
    else:
        q = bits_float(codes.astype(np.uint16), fmt.weight)
    if not fmt.scaled:
        return q, None, None
    groups = fmt.groups(k)
    scales = bits_float(_unpair_rows(packed["scales"]), fmt.activation)[:n, :groups]
    zeros = None
    if fmt.zeros:
        offsets = bits_float(_unpair_rows(packed["zeros"]), fmt.activation)[:n, :groups]
        zeros = (offsets - CODE_BIAS[fmt.weight]).astype(np.int8)
    return q, scales, zeros


def _codes(q: np.ndarray, fmt: QuantFormat) -> np.ndarray:
    """Unsigned stored codes of canonical weights."""
    if fmt.weight in CODE_BIAS:
        low, high = CODE_RANGE[fmt.weight]
        if q.size and (q.min() < low or q.max() > high):
            raise ValueError(f"{fmt.weight} codes must lie in {low}..{high}")
        return q.astype(np.int32) + CODE_BIAS[fmt.weight]
    if fmt.weight == "e4m3":
        return q if q.dtype == np.uint8 else e4m3_codes(q)
    return float_bits(q, fmt.weight)


def packed_shapes(n: int, k: int, fmt: QuantFormat) -> dict[str, tuple[tuple[int, ...], str]]:
    """`pack`'s arrays for an N x K weight: name -> (shape, numpy dtype name), in the kernel's order."""
    n_pad, k_pad = fmt.padded(n, k)
    tiles = n_pad // TILE_N
    shapes = {"weights": ((tiles, k_pad // fmt.chunk_k, LANES, WORDS), "uint32")}
    if fmt.scaled:
        pairs = ((tiles, fmt.groups(k_pad), 8, 2), "uint16")
        shapes["scales"] = pairs
        if fmt.zeros:
            shapes["zeros"] = pairs
    return shapes


def describe_layout(fmt: QuantFormat) -> dict[str, str]:
    """`pack`'s arrays in words, for NAME.json and NAME.h: each one's shape, type and what it holds."""
    padded = f"N / {TILE_N} and K / {fmt.chunk_k} rounded up"
    layout = {"weights": f"uint32 [N/{TILE_N}, K/{fmt.chunk_k}, {LANES}, {WORDS}] ({padded}): {fmt.weight} codes, "
                         "one 128-bit load per lane and chunk of k"}
    if fmt.scaled:
        groups = f"K/{fmt.group}" if fmt.group else "1"
        layout["scales"] = (f"uint16 [N/{TILE_N}, {groups}, 8, 2]: {fmt.activation} bits of scale[16 * tile + g + 8 * h, "
                            "group]")
        if fmt.zeros:
            layout["zeros"] = (f"uint16 [N/{TILE_N}, {groups}, 8, 2]: {fmt.activation} bits of {CODE_BIAS[fmt.weight]} "
                               "+ zero point, ordered as the scales")
    return layout


def packed_bytes(n: int, k: int, fmt: QuantFormat) -> int:
    """Bytes the kernel streams for an N x K weight: packed weights, scales and zero points."""
    n_pad, k_pad = fmt.padded(n, k)
    total = n_pad * k_pad * fmt.bits // 8
    if fmt.scaled:
        total += n_pad * fmt.groups(k_pad) * 2 * (2 if fmt.zeros else 1)
    return total

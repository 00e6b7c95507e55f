"""Shared by the quantized kernel's GPU and CPU emulator tests and its benchmark: random canonical weights on the GPU, packed with
quant_layout and dequantized in float64, and the reference products."""
from __future__ import annotations

import numpy as np

from gemmdsl import quant_layout as ql
from gemmdsl.paths.dequant.kernel import DecodeConfig
from gemmdsl.quant_layout import QuantFormat
from gemmdsl.quant_operands import signed_views


# (format, C's type, kernel shape): each integer type with and without zero points, FP8 weights per channel
# and per group, both activation types, every m_tiles, a small group with short k-slices.
CONFIGS = {
    "s4_g128_bf16": DecodeConfig(QuantFormat("s4", "bf16", 128), "bf16"),
    "u4_g128_zeros_bf16": DecodeConfig(QuantFormat("u4", "bf16", 128, True), "bf16"),
    "s4_g128_zeros_f16": DecodeConfig(QuantFormat("s4", "f16", 128, True), "f16", m_tiles=1),
    "s4_g32_zeros_bf16_m4": DecodeConfig(QuantFormat("s4", "bf16", 32, True), "bf16", m_tiles=4, k_slice=256,
                                         prefetch=4),  # a slice of 4 chunks
    "s8_channel_bf16": DecodeConfig(QuantFormat("s8", "bf16", None), "bf16"),
    "s8_channel_zeros_f16_f32": DecodeConfig(QuantFormat("s8", "f16", None, True), "f32", m_tiles=1),
    "s8_g128_bf16_f32": DecodeConfig(QuantFormat("s8", "bf16", 128), "f32"),
    "e4m3_channel_bf16": DecodeConfig(QuantFormat("e4m3", "bf16", None), "bf16", m_tiles=4, k_slice=512),
    "e4m3_g128_f16": DecodeConfig(QuantFormat("e4m3", "f16", 128), "f16"),
}


def bf16_round(values: np.ndarray) -> np.ndarray:
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    values = np.asarray(values, dtype=np.float32)
    return values.astype(np.float16).astype(np.float32) if dtype == "f16" else bf16_round(values)


def canonical_weights(rng: np.random.Generator, n: int, k: int, fmt: ql.QuantFormat):
    """Codes over the type's whole range, scales of both signs exact in A's type (never zero), zero points."""
    if fmt.weight in ql.CODE_BIAS:
        low, high = ql.CODE_RANGE[fmt.weight]
        q = rng.integers(low, high + 1, size=(n, k), dtype=np.int8)
    elif fmt.weight == "e4m3":
        table = ql.e4m3_values()
        q = table[rng.choice(np.flatnonzero(~np.isnan(table)), size=(n, k))]
    else:
        q = round_to(rng.standard_normal((n, k)), fmt.weight)
    if not fmt.scaled:
        return q, None, None
    groups = fmt.groups(k)
    scales = round_to(rng.uniform(0.5, 1.5, (n, groups)) * rng.choice([-1.0, 1.0], (n, groups)) / 8, fmt.activation)
    zeros = None
    if fmt.zeros:
        low, high = ql.CODE_RANGE[fmt.weight]
        zeros = rng.integers(low, high + 1, size=(n, groups), dtype=np.int8)
    return q, scales, zeros


def dequantized(q, scales, zeros, fmt: ql.QuantFormat) -> np.ndarray:
    """w = (q - zero) * scale in float64 (the contract's dequantized weight)."""
    q = np.asarray(q, dtype=np.float64)
    if scales is None:
        return q
    group_of = np.arange(q.shape[1]) // fmt.group if fmt.group else np.zeros(q.shape[1], dtype=int)
    z = 0.0 if zeros is None else zeros.astype(np.float64)[:, group_of]
    return (q - z) * scales.astype(np.float64)[:, group_of]


def device_packed(torch, packed: dict[str, np.ndarray]) -> dict:
    return {name: torch.from_numpy(view).cuda() for name, view in signed_views(packed).items()}


def spec_text(name: str, config: DecodeConfig) -> str:
    """A spec of the dequant path with `config`'s shape (docs/language.md's keys), which gemmdsl.load(name,
    text=...) compiles and loads like a shipped one."""
    fmt = config.fmt
    quant = f"group: {fmt.group};" if fmt.group else "group: channel;"
    zeros = " zeros: yes;" if fmt.zeros else ""
    return (f"gemm {name} {{\n"
            f"    problem  {{ a: {fmt.activation} row; b: {fmt.weight} col; c: {config.c} row; bounds: checked; }}\n"
            f"    quant b  {{ {quant}{zeros} }}\n"
            "    target   sm_90a;\n"
            f"    block    {{ tile: {config.m_tiles * 8}x{config.block_rows}x{config.k_slice}; }}\n"
            f"    threads  {{ warps: 1x{config.warps}; }}\n"
            f"    pipeline {{ stages: {config.prefetch}; }}\n"
            f"    budget   {{ blocks_per_sm: {config.blocks_per_sm}; }}\n"
            "}\n")

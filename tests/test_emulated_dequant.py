"""The dequantizing decode kernel (gemmdsl/paths/dequant) run on the CPU (tests/host_emulation.py, its mma.sync
and ldmatrix by tests/emulator/warp_host.h) and held to float64 on the dequantized weights.

Each shipped dequant spec runs as it ships at one split-K shape, and at M of 1, 5 and 17 (one and three 8-row
tiles of A past a block's edge), N of 16 and 40 (a tile, and a partial third one) and K of one and two k-slices
in a smaller shape of the same format (two warps, the shortest k-slice the format allows), so the calls stay
quick on the emulator's threads; so do the GPU test's kernel shapes (tests/quant_cases.CONFIGS: f16 activations,
an f32 C, ldmatrix.x2's single 8-row tile of A, four tiles), at one split-K shape. Random DecodeConfig shapes (hypothesis:
chunks per slice, chunks in flight, tiles a warp, rows of A) run at random M, N and K beside them. AddressSanitizer and UBSan stop any access outside an operand or a misaligned
one; C starts NaN, so an element the kernel does not write shows; a split-K call must leave its workspace and
counters zero again.

The dequantize-into-memory kernel (paths/dequant/expand.py) runs for each of the GPU test's formats at N of 5,
40 and 300 (one partial tile; three; several blocks, the last one's warps short of items) and K of the format's
smallest multiple and five of them (less than a chunk where groups allow it; several groups), into a W of NaN:
every element must be quant_reference's rounded weight, bit for bit. Skipped without g++.
"""
from __future__ import annotations

import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import host_emulation
from budget import examples
from gemmdsl import ir
from gemmdsl.compiler import compile_path, compile_text
from gemmdsl.frontend import load_spec
from gemmdsl.paths.dequant.kernel import DecodeConfig
from gemmdsl.paths.dequant.lowering import decode_config
from gemmdsl.quant_layout import QuantFormat, float_bits, pack
from gemmdsl.quant_reference import rounded_weight
from quant_cases import CONFIGS, canonical_weights, dequantized, round_to, spec_text

ROOT = Path(__file__).resolve().parent.parent
SPECS = ("w4a16_decode", "w4a16_decode_m8", "w4a16_decode_m32", "w4a16_zeros_decode", "w8a16_decode",
         "fp8w_a16_decode")
M_VALUES = (1, 5, 17)
N_VALUES = (16, 40)
# C's NaN, as the kernel's C type holds it: an element left unwritten stays NaN.
NAN_BITS = {"bf16": (np.uint16, 0x7FC0), "f16": (np.uint16, 0x7E00), "f32": (np.uint32, 0x7FC00000)}
pytestmark = pytest.mark.skipif(host_emulation.find_cxx() is None, reason="g++ not on PATH")


def test_the_dequant_specs_are_emulated():
    for stem in SPECS:
        assert host_emulation.emulates(load_spec(ROOT / "specs" / f"{stem}.gemm")), stem


def test_the_decode_kernels_inline_ptx_helpers_are_replaced():
    source = compile_path(ROOT / "specs" / "w4a16_decode.gemm").cuda
    host = host_emulation.host_source(source)
    assert "asm volatile(" in source and "asm volatile(" not in host
    assert "uint4 load_stream(" not in host and "void mma(" not in host and "w4a16_decode_kernel(" in host
    assert "unsigned char smem[]" not in host and "static bool last;" in host


def small_config(config: DecodeConfig) -> DecodeConfig:
    """`config`'s format and C type in two warps and the shortest k-slice the format takes (whole groups and
    128-bit loads)."""
    k_slice = max(config.fmt.chunk_k, config.fmt.group or 0)
    return replace(config, warps=2, k_slice=k_slice, prefetch=min(config.prefetch, k_slice // config.fmt.chunk_k))


@pytest.fixture(scope="module")
def kernels():
    """(runner, config), built once, of a shipped spec (stem, "shipped"), its small_config (stem, "small") or
    the small_config of a CONFIGS entry (name, "case")."""
    built = {}

    def kernel(name: str, size: str):
        if (name, size) not in built:
            if size == "shipped":
                config = decode_config(load_spec(ROOT / "specs" / f"{name}.gemm"))
                artifacts = compile_path(ROOT / "specs" / f"{name}.gemm")
            else:
                config = small_config(CONFIGS[name] if size == "case" else
                                      decode_config(load_spec(ROOT / "specs" / f"{name}.gemm")))
                artifacts = compile_text(spec_text(f"{name}_small", config), f"{name}_small.gemm")
            built[name, size] = (host_emulation.shared_build(artifacts.cuda, artifacts.metadata), config)
        return built[name, size]

    return kernel


def run_decode(binary: Path, config: DecodeConfig, m: int, n: int, k: int, directory: Path):
    """Runs the kernel on random canonical weights: (C as float64, its float64 reference, the bound on each
    element's error, the workspace the call left)."""
    fmt = config.fmt
    rng = np.random.default_rng(zlib.crc32(f"{fmt} {m} {n} {k}".encode()))
    q, scales, zeros = canonical_weights(rng, n, k, fmt)
    a = round_to(rng.standard_normal((m, k)), fmt.activation)
    for name, array in pack(q, scales, zeros, fmt).items():
        (directory / f"{name}.bin").write_bytes(array.tobytes())
    (directory / "A.bin").write_bytes(float_bits(a, fmt.activation).astype(np.uint16).tobytes())
    c_type, nan = NAN_BITS[config.c]
    (directory / "C.bin").write_bytes(np.full((m, n), nan, dtype=c_type).tobytes())
    (directory / "workspace.bin").write_bytes(bytes(config.workspace_bytes(m, n, k)))
    grid = config.grid(m, n, k)
    passed, output = host_emulation.run_argv(binary, [str(directory), str(m), str(n), str(k), *map(str, grid)])
    assert passed, output
    bits = np.frombuffer((directory / "C.out").read_bytes(), dtype=c_type).reshape(m, n)
    c = bits.view(np.float32) if config.c == "f32" else (
        bits.view(np.float16).astype(np.float32) if config.c == "f16" else (bits.astype(np.uint32) << 16).view(np.float32))
    w = dequantized(q, scales, zeros, fmt)
    a64 = a.astype(np.float64)
    # C's rounding to its type (half an ulp: 2^-9 of bf16, 2^-11 of f16) and f32 sums of exact products over K
    # (K units of 2^-24 of the sum of the products' magnitudes): twice both, and nothing else may differ.
    ulp = {"bf16": 2.0 ** -8, "f16": 2.0 ** -10, "f32": 0.0}[config.c]
    reference = a64 @ w.T
    bound = 2 * (ulp / 2 * np.abs(reference) + k * 2.0 ** -24 * (np.abs(a64) @ np.abs(w).T))
    workspace = np.frombuffer((directory / "workspace.out").read_bytes(), dtype=np.uint8)
    return c.astype(np.float64), reference, bound, workspace, grid


def check(c, reference, bound, workspace):
    assert np.isfinite(c).all(), "elements of C left unwritten (NaN) or not finite"
    error = np.abs(c - reference)
    assert (error <= bound).all(), f"worst element {np.unravel_index(np.argmax(error - bound), c.shape)}"
    assert np.linalg.norm(c - reference) / np.linalg.norm(reference) < 1e-2
    assert not workspace.any(), "the split-K workspace or counters not left zero"


@pytest.mark.parametrize("slices", (1, 2))
@pytest.mark.parametrize("n", N_VALUES)
@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("stem", SPECS)
def test_small_decode_kernel_matches_float64(kernels, stem, m, n, slices, tmp_path):
    binary, config = kernels(stem, "small")
    c, reference, bound, workspace, grid = run_decode(binary, config, m, n, slices * config.k_slice, tmp_path)
    assert grid[2] == slices
    check(c, reference, bound, workspace)


@pytest.mark.parametrize("stem", SPECS)
def test_shipped_decode_kernel_matches_float64(kernels, stem, tmp_path):
    binary, config = kernels(stem, "shipped")
    c, reference, bound, workspace, grid = run_decode(binary, config, 17, 40, 2 * config.k_slice, tmp_path)
    assert grid == (-(-17 // (8 * config.m_tiles)), 1, 2)  # every block of A's rows, one of W's, two k-slices
    check(c, reference, bound, workspace)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_decode_kernel_shapes_match_float64(kernels, name, tmp_path):
    binary, config = kernels(name, "case")
    c, reference, bound, workspace, grid = run_decode(binary, config, 17, 40, 2 * config.k_slice, tmp_path)
    assert grid[2] == 2
    check(c, reference, bound, workspace)


def run_dequantize(binary: Path, config: DecodeConfig, n: int, k: int, directory: Path) -> tuple[np.ndarray, np.ndarray]:
    """Runs the dequantize-into-memory kernel on random canonical weights: (W's bits, the reference's bits)."""
    fmt = config.fmt
    rng = np.random.default_rng(zlib.crc32(f"dequantize {fmt} {n} {k}".encode()))
    q, scales, zeros = canonical_weights(rng, n, k, fmt)
    for name, array in pack(q, scales, zeros, fmt).items():
        (directory / f"{name}.bin").write_bytes(array.tobytes())
    _, nan = NAN_BITS[fmt.activation]
    (directory / "W.bin").write_bytes(np.full((n, k), nan, dtype=np.uint16).tobytes())
    grid_x, _, _ = config.dequantize_grid(n, k)
    passed, output = host_emulation.run_argv(binary, ["dequantize", str(directory), str(n), str(k), str(grid_x)])
    assert passed, output
    w = np.frombuffer((directory / "W.out").read_bytes(), dtype=np.uint16).reshape(n, k)
    reference = rounded_weight(q, scales, zeros, fmt.group, ir.DType(fmt.activation))
    return w, float_bits(reference.astype(np.float32), fmt.activation)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_dequantize_kernel_writes_the_rounded_weight(kernels, name, tmp_path):
    binary, config = kernels(name, "case")
    smallest = config.k_multiple
    assert config.dequantize_grid(300, 5 * smallest)[0] > 1
    for n in (5, 40, 300):
        for k in (smallest, 5 * smallest):
            w, reference = run_dequantize(binary, config, n, k, tmp_path)
            wrong = np.argwhere(w != reference)
            assert not wrong.size, f"{n} x {k}: {len(wrong)} elements differ, the first at (n, k) = {tuple(wrong[0])}"


@pytest.mark.parametrize("stem", SPECS)
def test_k_zero_writes_zeros(kernels, stem, tmp_path):
    """K = 0: the one k-slice the grid rule gives finds no weights, groups or activations, and stores C = 0 (over a
    NaN-poisoned C), with no workspace."""
    binary, config = kernels(stem, "small")
    c, reference, bound, workspace, grid = run_decode(binary, config, 5, 40, 0, tmp_path)
    assert grid[2] == 1 and not workspace.size and (c == 0).all()


FORMATS = (QuantFormat("s4", "bf16", 64), QuantFormat("u4", "f16", 64, True), QuantFormat("s8", "bf16", None),
           QuantFormat("e4m3", "f16", 32))


@settings(max_examples=examples(2, 12), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_decode_shape_matches_float64(data, tmp_path_factory):
    """The mainloop's pipeline at its edges, for any DecodeConfig shape: a slice of one chunk or several, every
    chunk in flight or one, a warp's tiles, 8, 16 or 32 rows of A, one k-slice or two, at M, N and K off the
    block's edges."""
    fmt = data.draw(st.sampled_from(FORMATS), "format")
    chunks = data.draw(st.integers(max(1, (fmt.group or 0) // fmt.chunk_k), 4), "chunks per slice")
    if fmt.group:
        chunks -= chunks % (fmt.group // fmt.chunk_k)
    config = DecodeConfig(fmt, data.draw(st.sampled_from(("bf16", "f32")) if fmt.activation == "bf16" else
                                         st.sampled_from(("f16", "f32")), "C"),
                          warps=data.draw(st.integers(1, 2), "warps"), tiles=data.draw(st.integers(1, 2), "tiles"),
                          m_tiles=data.draw(st.sampled_from((1, 2, 4)), "m_tiles"), k_slice=chunks * fmt.chunk_k,
                          prefetch=data.draw(st.integers(1, chunks), "prefetch"))
    assert not config.problems()
    m = data.draw(st.integers(1, 2 * config.m_tiles * 8 + 1), "M")
    n = data.draw(st.integers(1, config.block_rows + 17), "N")
    k = config.k_multiple * data.draw(st.integers(1, 2 * config.k_slice // config.k_multiple), "K / k_multiple")
    artifacts = compile_text(spec_text("any_shape", config), "any_shape.gemm")
    binary = host_emulation.shared_build(artifacts.cuda, artifacts.metadata)
    check(*run_decode(binary, config, m, n, k, tmp_path_factory.mktemp("any"))[:4])

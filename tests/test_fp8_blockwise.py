"""FP8 block scaling (`fuse { scale: block; }`, DeepSeek-V3's 1 x 128 and 128 x 128 scales): its positioned
diagnostics, the emitted k-loop (scale loads before the wgmma, each promoted sum scaled), the launcher
parameters, the Python API's checks of a_scale and b_scale, and the float64 reference. GPU tests are in
tests/test_gpu_fp8.py."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl import ir
from gemmdsl.compiler import compile_path
from gemmdsl.frontend import load
from gemmdsl.fuse_operands import FuseOperands, byte_span, check_operand_names, fuse_arguments, fuse_views, moved
from gemmdsl.fuse_reference import block_scaled_product
from gemmdsl.paths.wgmma_fp8.layout import Fp8Layout
from gemmdsl.source import CompileError, Severity, SourceFile
from tests.test_fuse_operands import view

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "fp8_blockwise.gemm"
TEXT = SPEC.read_text()


def errors_of(old: str, new: str) -> list:
    assert TEXT.count(old) == 1, old
    text = TEXT.replace(old, new)
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    return [(d, text.splitlines()[d.span.line - 1][d.span.column - 1:]) for d in caught.value.diagnostics
            if d.severity is Severity.ERROR]


def test_the_spec_is_promoted_fp8_with_block_scales():
    spec = load(SourceFile("fp8_blockwise.gemm", TEXT))[0]
    assert spec.fuse.scale is ir.ScaleVectors.BLOCK and not spec.fuse.scale.rows and not spec.fuse.scale.cols
    layout = Fp8Layout(spec)
    assert layout.promoted and layout.block_scaled and layout.scale_registers == 2 + 2
    assert layout.consumer_registers_needed <= layout.consumer_registers


def test_fast_accumulation_is_refused_at_the_key():
    [(error, at)] = errors_of("m64n256k32; }", "m64n256k32; accumulate: fast; }")
    assert "block scales" in error.message and at.startswith("fast") and "accumulate: fast" in error.hint


def test_a_bn_of_part_of_a_b_block_is_refused_at_the_tile():
    [(error, at)] = [e for e in errors_of("128x256x128; raster", "128x192x128; raster")
                     if "block scales" in e[0].message]
    assert "BN = 192" in error.message and at.startswith("128x192x128") and "multiple of 128" in error.hint


def test_block_scales_with_stream_k_are_refused_at_the_schedule():
    """A stream-K piece counts its k-tiles from its own first, and the block scales are read by the absolute one."""
    [(error, at)] = [e for e in errors_of("schedule: persistent;", "schedule: stream_k;")
                     if "block scales" in e[0].message]
    assert "stream-K" in error.message and at.startswith("stream_k") and "persistent" in error.hint


def test_block_scales_on_a_16_bit_kernel_are_refused_at_the_key():
    text = (ROOT / "specs" / "hgemm_h100_bf16c.gemm").read_text()
    text = text.replace("problem", "fuse { scale: block; }\n    problem", 1)
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    [error] = [d for d in caught.value.diagnostics if "block scales" in d.message]
    line = text.splitlines()[error.span.line - 1][error.span.column - 1:]
    assert line.startswith("block") and "rowcol" in error.hint


def test_the_k_loop_loads_the_scales_before_the_wgmma_and_scales_each_promoted_sum():
    cuda = compile_path(SPEC).cuda
    loop = cuda[cuda.index("for (int kt = 0; kt < k_tiles; ++kt, ++it) {\n                const int stage = it % STAGES;\n"
                           "                const unsigned phase = (it / STAGES) & 1;\n                mbarrier_wait(smem_u32(full"):]
    order = [loop.index(s) for s in ("mbarrier_wait(smem_u32(full", "__ldg(a_scale + (long long)row * k_tiles + kt)",
                                      "__ldg(b_scale + (long long)column_block * k_tiles + kt)", "wgmma_fence();",
                                      "wgmma_wait<0>();", "acc[(mr * N_REPEAT + nr) * (WGMMA_N / 2) + i] += part[",
                                      "mbarrier_arrive(smem_u32(empty + stage))")]
    assert order == sorted(order)
    assert ("part[mr * (WGMMA_N / 2) + i] * (a_scales[mr][(i / 2) % 2] * b_scales[(nr * WGMMA_N + 8 * (i / 4)) / "
            "SCALE_BLOCK]);") in loop
    assert "row < M ? __ldg" in loop and "column_block * SCALE_BLOCK < N ? __ldg" in loop  # 0 past the edges
    assert re.search(r"#define SCALE_BLOCK 128|constexpr int SCALE_BLOCK = 128", cuda)
    assert "row_scale" not in cuda and "col_scale" not in cuda


def test_the_launchers_take_a_scale_and_b_scale_and_the_header_says_their_shapes():
    artifacts = compile_path(SPEC)
    assert re.search(r"int K, const float\* a_scale, const float\* b_scale", artifacts.header)
    assert "a_scale: M x ceil(K / 128) f32 values, row-major" in artifacts.header
    assert "b_scale: ceil(N / 128) x ceil(K / 128) f32 values, row-major" in artifacts.header
    assert artifacts.metadata["fuse"]["scale"] == "block"
    operands = FuseOperands.from_metadata(artifacts.metadata)
    assert operands.names == ("a_scale", "b_scale")


def test_the_python_api_checks_the_block_scales_shapes_and_types():
    fuse = FuseOperands.from_metadata({"fuse": {"formula": "f", "scale": "block"}})
    with pytest.raises(TypeError, match="a_scale=, b_scale="):
        check_operand_names("k", fuse, {})
    with pytest.raises(TypeError, match="row_scale="):
        check_operand_names("k", fuse, {"a_scale": 1, "b_scale": 1, "row_scale": 1})
    m, n, k = 300, 520, 1040  # 9 blocks of K, 5 of N
    good = {"a_scale": view((m, 9), (9, 1), "float32", 4, 0x1000), "b_scale": view((5, 9), (9, 1), "float32", 4, 0x9000)}
    views = fuse_views("k", fuse, good, m, n, k)
    assert (views["a_scale"].ld, views["b_scale"].per) == (9, 128)
    assert byte_span(views["b_scale"], m, n) == (0x9000, 0x9000 + 5 * 9 * 4)
    assert fuse_arguments(views) == (0x1000, 0x9000)
    assert moved(views, 64, 256)["b_scale"].pointer == 0x9000 + 2 * 9 * 4
    assert moved(views, 64, 256)["a_scale"].pointer == 0x1000 + 64 * 9 * 4
    with pytest.raises(ValueError, match=r"a_scale must be 300 x 9"):
        fuse_views("k", fuse, {**good, "a_scale": view((m, 8), (8, 1), "float32", 4)}, m, n, k)
    with pytest.raises(ValueError, match="row-major"):
        fuse_views("k", fuse, {**good, "b_scale": view((5, 9), (1, 5), "float32", 4)}, m, n, k)
    with pytest.raises(TypeError, match="float32"):
        fuse_views("k", fuse, {**good, "a_scale": view((m, 9), (9, 1), "float16", 2)}, m, n, k)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 300), k=st.integers(1, 300), seed=st.integers(0, 2 ** 31))
def test_the_reference_sums_each_k_block_times_its_scales(m, n, k, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    kb, nb = -(-k // 128), -(-n // 128)
    a_scale, b_scale = rng.random((m, kb)) + 0.5, rng.random((nb, kb)) + 0.5
    expected = np.zeros((m, n))
    for block in range(kb):
        ks = slice(block * 128, (block + 1) * 128)
        partial = a[:, ks] @ b[ks, :]
        expected += partial * a_scale[:, block][:, None] * b_scale[np.arange(n) // 128, block][None, :]
    np.testing.assert_allclose(block_scaled_product(a, b, a_scale, b_scale), expected, rtol=1e-12, atol=1e-12)


def test_verify_and_bench_compare_with_scaled_mms_blockwise_mode():
    from gemmdsl.precisions import comparison

    compared = comparison(compile_path(SPEC).metadata)
    assert (compared.unit, compared.block_scales, compared.fast_accumulation) == ("fp8", True, False)
    assert compared.cublas == "FP8 scaled_mm blockwise"
    rowwise = comparison(compile_path(ROOT / "specs" / "fp8_rowwise.gemm").metadata)
    assert not rowwise.block_scales and compared != rowwise  # timed in separate groups, each with its own call


class HostArrays:
    """verify's array calls on NumPy: scales in 0.25 .. 1.75 from a seeded generator."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def scales(self, count: int):
        return self.rng.uniform(0.25, 1.75, count)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 300), n=st.integers(1, 700), k=st.integers(1, 700), seed=st.integers(0, 99))
def test_verify_draws_a_positive_varied_scale_per_block(m, n, k, seed):
    from gemmdsl.verify import Case, chain_operands

    fuse = compile_path(SPEC).metadata["fuse"]
    chain = chain_operands(HostArrays(seed), fuse, m, n, k, Case("contiguous", False, 1, False))
    blocks = -(-k // 128)
    assert set(chain) == {"a_scale", "b_scale"}
    assert chain["a_scale"].shape == (m, blocks) and chain["b_scale"].shape == (-(-n // 128), blocks)
    for scales in chain.values():
        assert (scales >= 0.25).all() and (scales <= 1.75).all()
        assert scales.size == 1 or len(np.unique(scales)) > 1


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 300), k=st.integers(1, 300), seed=st.integers(0, 99))
def test_the_float64_reference_multiplies_the_dequantized_operands_after_the_chain_drops_the_block_scales(
        m, n, k, seed):
    """verify's float64 side: dequantize_blocks then the chain, which takes no block scale (fuse_reference)."""
    from gemmdsl.fuse_reference import apply_chain, dequantize_blocks

    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    a_scale, b_scale = rng.uniform(0.25, 1.75, (m, -(-k // 128))), rng.uniform(0.25, 1.75, (-(-n // 128), -(-k // 128)))
    da, db = dequantize_blocks(a, b, a_scale, b_scale)
    assert da[m - 1, k - 1] == a[m - 1, k - 1] * a_scale[m - 1, (k - 1) // 128]
    assert db[k - 1, n - 1] == b[k - 1, n - 1] * b_scale[(n - 1) // 128, (k - 1) // 128]
    fuse = compile_path(SPEC).metadata["fuse"]
    np.testing.assert_allclose(apply_chain(fuse, da @ db), block_scaled_product(a, b, a_scale, b_scale), rtol=1e-12)

"""The GEMV path from a spec: the shipped specs compile through it (two kernels, the tile launchers, metadata), its
refusals are positioned with hints, its configuration splits the warps as config.py says, the launchers pick the
windowed kernel for misaligned rows, and the families that list its members route a call with one row (or one
column) to them and calls with many rows elsewhere."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from gemmdsl import compiler, ir
from gemmdsl.cycles import choose, estimate
from gemmdsl.family import compile_family_path
from gemmdsl.paths.gemv.config import gemv_config
from gemmdsl.source import CompileError, SourceFile

ROOT = Path(__file__).resolve().parent.parent
SPECS = ("hgemv_1x4", "hgemv_4x1", "hgemv_bf16c_1x4", "hgemv_bf16c_4x1", "hgemv_f16_1x4", "hgemv_f16_4x1",
         "sgemv_1x4", "sgemv_4x1")
TENSOR_SPECS = tuple(f"{prefix}_mma_{shape}" for prefix in ("hgemv", "hgemv_bf16c", "hgemv_f16")
                     for shape in ("8x16", "8x16_w16", "16x16", "16x16_w4"))
FAMILIES = {"hgemm_h100_family": "hgemv", "hgemm_h100_bf16c_family": "hgemv_bf16c",
            "hgemm_h100_f16_family": "hgemv_f16", "tf32_h100_family": "sgemv", "sgemm_3xtf32_h100_family": "sgemv"}


def spec_text(name: str = "hgemv_1x4") -> str:
    return (ROOT / "specs" / f"{name}.gemm").read_text()


@pytest.mark.parametrize("name", SPECS)
def test_each_spec_compiles_on_the_gemv_path(name):
    artifacts = compiler.compile_path(ROOT / "specs" / f"{name}.gemm")
    assert artifacts.plan.path.name == "gemv"
    entries = artifacts.metadata["launch"]["entries"]
    assert entries["vector"] == f"{name}_kernel" and entries["scalar"] == f"{name}_kernel_scalar"
    assert f"{name}_gemv<false>(" in artifacts.cuda and f"{name}_gemv<true>(" in artifacts.cuda
    assert f'extern "C" cudaError_t {name}_launch_ld(' in artifacts.cuda
    config = gemv_config(artifacts.spec)
    streamed = ir.Operand.B if name.endswith("1x4") else ir.Operand.A
    assert config.streamed is streamed and config.small_rows == 1 and config.rows == 4
    assert artifacts.metadata["gemv"]["streamed"] == streamed.value
    # 16 bytes of A and B a load in the aligned kernel: the launcher's alignment test.
    vector = artifacts.metadata["launch"]["requirements"]["vector_elements"]
    assert vector == {"a": config.vector, "b": config.vector, "c": 1}


def test_the_warps_split_into_k_warps_and_row_warps():
    """1x4x2048 on 8 warps of bf16, two chunks a step: a warp covers 32 x 8 x 2 = 512 of K, so 4 K-warps and 2
    row-warps of 2 rows each; f32 halves the elements of a chunk."""
    config = gemv_config(compiler.compile_path(ROOT / "specs" / "hgemv_1x4.gemm").spec)
    assert (config.vector, config.warp_k, config.k_warps, config.row_warps, config.warp_rows) == (8, 512, 4, 2, 2)
    f32 = gemv_config(compiler.compile_path(ROOT / "specs" / "sgemv_1x4.gemm").spec)
    assert (f32.vector, f32.warp_k, f32.k_warps, f32.row_warps) == (4, 256, 4, 2)


REFUSALS = [
    ("warps: 1x8;", "warps: 1x1;", "lie along", "1x4x2048"),  # (with the square tile below)
    ("tile: 1x4x2048;", "tile: 32x64x2048;", "at most 16", "32x64x2048"),
    ("tile: 1x4x2048;", "tile: 1x4x1000;", "multiple of a warp's step", "1x4x1000"),
    ("tile: 1x4x2048;", "tile: 1x3x2048;", "do not split over 2 row-warps", "1x3x2048"),
    ("warps: 1x8;", "warps: 2x4;", "none across the small one", "2x4"),
    ("b: bf16 col;", "b: bf16 row;", "B must be column-major", "bf16 row"),
    ("a: bf16 row;", "a: bf16 col;", "A must be row-major", "bf16 col"),
    ("b: bf16 col;", "b: f16 col;", "of one type", "f16 col"),
    ("stages: 2; ", "stages: 2; copy: cp_async; ", "`copy` does not apply", "cp_async"),
    ("shape: gemv;", "shape: gemv; repeat: 1x2;", "`repeat` does not apply", "1x2"),
    ("target   sm_90;", "target   sm_90;\n    smem a { pad: 8; }", "does not take `smem a`", "smem a"),
    ("bounds: checked; }", "bounds: checked; batch: grouped; }", "batch: grouped", "grouped"),
]


@pytest.mark.parametrize("old, new, message, at", REFUSALS)
def test_refusals_are_positioned_with_a_hint(old, new, message, at):
    text = spec_text()
    if message == "lie along":  # a square tile says which operand streams by its warps alone
        text = text.replace("tile: 1x4x2048;", "tile: 4x4x2048;")
        at = "4x4x2048"
    assert_refused(text, old, new, message, at)


def assert_refused(text: str, old: str, new: str, message: str, at: str) -> None:
    """`text` with `old` made `new` is refused with `message`, positioned at `at` on its line, with a hint."""
    assert old in text
    changed = text.replace(old, new, 1)
    with pytest.raises(CompileError) as info:
        compiler.compile_source(SourceFile("g.gemm", changed))
    (error,) = [d for d in info.value.diagnostics if message in d.message]
    line = changed.split("\n")[error.span.line - 1]
    assert at in line[error.span.column - 1:] and error.hint


def test_a_register_hungry_tile_is_warned_at_its_stages():
    """16 small rows against 64 streamed rows a warp (1 row-warp) keep 16 x 64 sums a thread: far past the cap."""
    hungry = spec_text().replace("tile: 1x4x2048;", "tile: 16x64x4096;")
    warnings = compiler.compile_source(SourceFile("g.gemm", hungry)).warnings
    assert any("registers" in w.message and "stages" in hungry.split("\n")[w.span.line - 1] for w in warnings)
    assert not compiler.compile_source(SourceFile("g.gemm", spec_text())).warnings


def test_the_launcher_runs_the_windowed_kernel_for_misaligned_rows():
    """The shared kernel-choice rule with the path's requirements: 16-byte aligned rows of A and B run the aligned
    kernel, a K that puts rows off 16 bytes (or a pointer off them) the windowed one."""
    launch = compiler.compile_path(ROOT / "specs" / "hgemv_1x4.gemm").plan.launch
    rule = launch.kernel_choice_rule({"a": 2, "b": 2, "c": 4})
    aligned = {"A": 0, "B": 4096, "C": 0, "lda": 4096, "ldb": 4096, "ldc": 4096}
    assert rule.evaluate(aligned)["kernel"] == launch.entries.vector
    for change in ({"lda": 4097, "ldb": 4097}, {"B": 4098}, {"ldb": 4100}):
        assert rule.evaluate({**aligned, **change})["kernel"] == launch.entries.scalar


@pytest.mark.parametrize("family, prefix", FAMILIES.items())
def test_families_route_one_row_or_column_to_their_gemv_members(family, prefix):
    """At M = 1 against a 4096 x 4096 weight the 1x4 member runs, at N = 1 against such an A the 4x1 member; a square
    call and one of 64 rows stay on the tile members, which read the weight once where the GEMV members would read
    it once a row."""
    models = compile_family_path(ROOT / "specs" / f"{family}.gemmf").models
    names = [model.name for model in models]
    assert names[choose(models, 1, 4096, 4096)] == f"{prefix}_1x4"
    assert names[choose(models, 4096, 1, 4096)] == f"{prefix}_4x1"
    for shape in ((4096, 4096, 4096), (64, 8192, 8192)):
        assert not names[choose(models, *shape)].startswith(prefix)


@settings(max_examples=150, deadline=None)
@given(m=st.integers(1, 64), n=st.integers(1, 1 << 15), k=st.integers(1, 1 << 15))
def test_a_gemv_members_cycles_grow_with_the_rows_it_re_reads(m, n, k):
    """With one small row a block, M rows read the weight M times: the 1x4 member's cycles before the floor never
    fall as M grows, and at M rows its cycles are at least its memory floor at one row. (Its floor itself may fall:
    more blocks keep more bytes in flight, the floor's Little's law.)"""
    (model,) = [x for x in compile_family_path(ROOT / "specs" / "hgemm_h100_family.gemmf").models
                if x.name == "hgemv_1x4"]
    rows, fewer = estimate(model, m, n, k), estimate(model, max(1, m - 1), n, k)
    assert rows.compute_cycles >= fewer.compute_cycles
    assert rows.cycles >= estimate(model, 1, n, k).memory_cycles


@pytest.mark.parametrize("name", TENSOR_SPECS)
def test_each_tensor_spec_compiles_to_mma_sync_of_its_tiles(name):
    """`gemv_m16n8k16`: a warp's 16-row tiles of B against 8-row tiles of A, one mma.sync per tile pair and k-step
    (two a 32-element piece), B streaming (the square 16x16 tile by its warps, 1xW)."""
    artifacts = compiler.compile_path(ROOT / "specs" / f"{name}.gemm")
    config = gemv_config(artifacts.spec)
    assert config.tensor and config.streamed is ir.Operand.B and config.rows == 16
    assert config.small_rows == int(name.split("_mma_")[1].split("x")[0]) and config.row_warps == 1
    assert config.tiles == 1 and config.small_tiles == config.small_rows // 8
    assert config.warp_k == 4 * 8 * config.stages and config.k_warps == config.warps
    assert artifacts.metadata["gemv"]["instruction"] == "mma.sync m16n8k16"
    operand = "f16" if "_f16_" in name else "bf16"
    assert artifacts.cuda.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{operand}.{operand}.f32") == 1
    assert f"{name}_multiply(acc, w0, x0);" in artifacts.cuda and f"{name}_multiply(acc, w1, x1);" in artifacts.cuda
    assert "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800" in artifacts.cuda  # mma.sync: sm_80 and later
    assert not artifacts.warnings


TENSOR_REFUSALS = [
    ("tile: 8x16x1024;", "tile: 4x16x1024;", "8 at a time", "4x16x1024"),
    ("tile: 8x16x1024;", "tile: 8x24x1024;", "whole tiles of 16", "8x24x1024"),
    ("tile: 8x16x1024;", "tile: 8x16x1000;", "4 lanes a row", "8x16x1000"),
    ("a: bf16 row; b: bf16 col;", "a: f32 row; b: f32 col;", "16-bit A and B", "gemv_m16n8k16"),
]


@pytest.mark.parametrize("old, new, message, at", TENSOR_REFUSALS)
def test_tensor_refusals_are_positioned_with_a_hint(old, new, message, at):
    assert_refused(spec_text("hgemv_mma_8x16"), old, new, message, at)


def test_the_shape_word_reads_as_the_gemv_instruction():
    """`gemv` and `gemv_m16n8k16` are the path's two instructions; a misspelt one is an mma shape error."""
    assert not compiler.compile_path(ROOT / "specs" / "hgemv_1x4.gemm").spec.mma.shape.tensor
    assert compiler.compile_path(ROOT / "specs" / "hgemv_mma_8x16.gemm").spec.mma.shape.value == "gemv_m16n8k16"
    with pytest.raises(CompileError) as info:
        compiler.compile_source(SourceFile("g.gemm", spec_text("hgemv_mma_8x16").replace("gemv_m16n8k16",
                                                                                         "gemv_m16n8k8")))
    (error,) = info.value.diagnostics
    assert "gemv, gemv_m16n8k16, found 'gemv_m16n8k8'" in error.message and "'gemv_m16n8k16'" in error.hint

"""FP8 on Hopper (paths/wgmma_fp8): the element types and the accumulate key in the language, their
diagnostics, the lowering (1-byte TMA boxes, k32 descriptors, promoted registers), the generated code,
check's figures, and nvcc's build for sm_90a (SASS QGMMA where cuobjdump is installed). GPU tests are in
tests/test_gpu_fp8.py."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl import ir
from gemmdsl.analysis import analyze
from gemmdsl.build import build, find_nvcc
from gemmdsl.check import format_report
from gemmdsl.compiler import compile_path, compile_text
from gemmdsl.frontend import load
from gemmdsl.paths import path_of
from gemmdsl.paths.wgmma.layout import swizzled_offset
from gemmdsl.paths.wgmma_fp8.layout import Fp8Layout
from gemmdsl.source import CompileError, Severity, SourceFile
from gemmdsl.tensor_maps import tensor_map_requests
from gemmdsl.arrays import DTYPE_NAMES, ITEM_SIZES
from gemmdsl.precisions import comparison
from gemmdsl.verify import leading_dimension, pad_align

ROOT = Path(__file__).resolve().parents[1]
SPECS = {name: ROOT / "specs" / f"{name}.gemm" for name in ("fp8_h100", "fp8_h100_fast", "fp8_rowwise")}
TEXT = "gemm fp8_h100 {" + SPECS["fp8_h100"].read_text().split("gemm fp8_h100 {", 1)[1]


def spec_of(text: str = TEXT) -> ir.KernelSpec:
    return load(SourceFile("case.gemm", text))[0]


def errors_of(old: str, new: str) -> list:
    assert TEXT.count(old) == 1, old
    text = TEXT.replace(old, new)
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    return [d for d in caught.value.diagnostics if d.severity is Severity.ERROR]


def at(diagnostic, text: str) -> str:
    """The source text a diagnostic points at."""
    line = text.splitlines()[diagnostic.span.line - 1]
    return line[diagnostic.span.column - 1:]


def test_the_shipped_specs_take_the_fp8_path():
    for name, path in SPECS.items():
        spec = spec_of("gemm " + path.read_text().split("gemm ", 1)[1])
        assert path_of(spec).name == "wgmma_fp8"
        assert (spec.problem.a.dtype, spec.problem.b.dtype, spec.problem.c.dtype) == (
            ir.DType.E4M3, ir.DType.E4M3, ir.DType.BF16)
        assert spec.fuse.scale is ir.ScaleVectors.ROWCOL and spec.block.k == 128
    assert spec_of().mma.accumulate is ir.Accumulate.PROMOTED


def test_accumulate_defaults_to_promoted_for_fp8_and_is_none_otherwise():
    spec = spec_of(TEXT.replace(" accumulate: promoted;", ""))
    assert spec.mma.accumulate is ir.Accumulate.PROMOTED
    bf16 = (ROOT / "specs" / "hgemm_h100_bf16c.gemm").read_text()
    assert spec_of("gemm " + bf16.split("gemm ", 1)[1]).mma.accumulate is None


@pytest.mark.parametrize("operand, layout, hint", [
    ("a: e4m3 row", "a: e4m3 col", "`a: e4m3 row;`"),
    ("b: e4m3 col", "b: e4m3 row", "`b: e4m3 col;` (W as nn.Linear stores it"),
])
def test_an_mn_major_fp8_operand_is_an_error_at_its_layout_with_a_hint(operand, layout, hint):
    text = TEXT.replace(operand, layout)
    errors = errors_of(operand, layout)
    layout_errors = [d for d in errors if "k-major operands only" in d.message]
    assert len(layout_errors) == 1
    assert "FP8 wgmma" in layout_errors[0].message and hint in layout_errors[0].hint
    assert at(layout_errors[0], text).startswith(layout.split(": ")[1])


def test_fp8_c_bias_and_residual_are_errors():
    [c] = errors_of("c: bf16 row", "c: e4m3 row")
    assert "C is e4m3" in c.message and "bf16" in c.hint
    # (the bias's values also overflow the shared memory beside the ring, a second error at `stages`)
    [bias] = [d for d in errors_of("scale: rowcol;", "scale: rowcol; bias: n e5m2;") if "bias is" in d.message]
    assert "bias is e5m2" in bias.message
    [residual] = errors_of("scale: rowcol;", "scale: rowcol; residual: e4m3 row;")
    assert "residual is e4m3" in residual.message


def test_fp8_pairs_with_fp8_only():
    assert path_of(spec_of(TEXT.replace("b: e4m3 col", "b: e5m2 col"))).name == "wgmma_fp8"
    errors = errors_of("b: e4m3 col", "b: bf16 col")
    assert any("FP8 pairs with FP8 only" in d.message for d in errors)


def test_a_16_bit_wgmma_k_is_an_error_that_names_k32():
    [error] = errors_of("m64n128k32", "m64n128k16")
    assert "e4m3 operands take m64nNk32" in error.message and "m64n128k32" in error.hint


def test_accumulate_on_other_types_is_an_error():
    bf16 = (ROOT / "specs" / "hgemm_h100_bf16c.gemm").read_text()
    text = "gemm " + bf16.split("gemm ", 1)[1].replace("m64n256k16;", "m64n256k16; accumulate: fast;")
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    [error] = caught.value.diagnostics
    assert "applies to FP8 operands" in error.message and at(error, text).startswith("fast")


def test_fp8_on_mma_sync_is_an_error_that_points_to_wgmma():
    text = """gemm f { problem { a: e4m3 row; b: e4m3 col; c: bf16 row; } target sm_90;
        block { tile: 128x128x32; } threads { warps: 2x2; } mma { shape: m16n8k16; repeat: 4x8; }
        pipeline { stages: 3; } }"""
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    assert any("multiplied by wgmma only" in d.message and "m64n256k32" in d.hint
               for d in caught.value.diagnostics)


def test_promoted_m64n256_is_issued_in_two_chunks_of_128_columns():
    """A 256-column `part` (128 registers) beside 128 accumulators exceeds setmaxnreg's 240: the promotion
    runs in two m64n128k32 chunks per k-step instead, into the same accumulator registers."""
    spec = spec_of("gemm " + SPECS["fp8_rowwise"].read_text().split("gemm ", 1)[1])
    assert spec.mma.accumulate is ir.Accumulate.PROMOTED and spec.mma.shape == ir.WgmmaShape(256, 32)
    layout = Fp8Layout(spec)
    assert (layout.declared_shape, layout.shape, layout.promotion_chunks) == (
        ir.WgmmaShape(256, 32), ir.WgmmaShape(128, 32), 2)
    assert (layout.accumulators, layout.part_registers, layout.waited_groups_per_k_tile) == (128, 64, 2)
    assert layout.consumer_registers_needed == 200 <= layout.consumer_registers
    cuda = compile_text(SPECS["fp8_rowwise"].read_text(), "fp8_rowwise.gemm").cuda
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in cuda and "m64n256k32.f32" not in cuda
    assert "m64n256k32 is issued as 2 x m64n128k32" in cuda
    report = format_report(analyze(spec, (4096, 4096, 4096)))
    assert "wgmma m64n256k32 (promoted in chunks of 128 columns: m64n128k32)" in report
    assert "8 wgmma m64n128k32 per consumer per k-tile" in report


def test_the_rowwise_spec_is_fp8_h100s_kernel():
    """Same tile, same chunks: the kernels differ only in their names and the spec text they quote."""
    def body(name):
        cuda = compile_path(SPECS[name]).cuda.replace(name, "NAME")
        return cuda[cuda.index("#include"):].replace(
            "    // m64n256k32 is issued as 2 x m64n128k32: a 256-column `part` would not fit beside the "
            "accumulators.\n", "")
    assert body("fp8_rowwise") == body("fp8_h100")


@settings(max_examples=40, deadline=None)
@given(n=st.sampled_from(range(8, 257, 8)), warpgroups=st.sampled_from([1, 2]), m_repeat=st.sampled_from([1, 2]))
def test_the_promotion_chunk_is_the_widest_divisor_that_fits(n, warpgroups, m_repeat):
    bm, bn = 64 * warpgroups * m_repeat, n * max(1, 128 // n)
    text = TEXT.replace("128x256x128", f"{bm}x{bn}x128").replace("warpgroups: 2", f"warpgroups: {warpgroups}") \
        .replace("m64n128k32", f"m64n{n}k32").replace("store: tma", "store: direct")
    try:
        layout = Fp8Layout(spec_of(text))
    except CompileError:
        return  # the accumulators alone do not fit, or the tile breaks another rule
    chunk = layout.shape.n
    assert n % chunk == 0 and chunk % 8 == 0 and layout.bn % chunk == 0
    assert layout.part_registers == layout.m_repeat * chunk // 2
    assert layout.consumer_registers_needed <= layout.consumer_registers
    wider = [w for w in range(chunk + 8, n + 1, 8) if n % w == 0]
    assert all(layout.accumulators + layout.m_repeat * w // 2 + 8 > layout._consumer_share(24) for w in wider)


def test_row_col_is_not_a_spelling_of_rowcol():
    [error] = errors_of("scale: rowcol;", "scale: row_col;")
    assert "rowcol" in error.message + (error.hint or "") and at(error, TEXT.replace("rowcol", "row_col")).startswith(
        "row_col")


def test_promoted_accumulators_that_do_not_fit_suggest_fast_accumulation():
    [error] = errors_of("warpgroups: 2", "warpgroups: 1")
    assert "384 f32 accumulators" in error.message and "128 of them `part`" in error.message
    assert "accumulate: fast" in error.hint


def test_a_bk_other_than_one_swizzle_row_is_an_error():
    [error] = errors_of("128x256x128", "128x256x64")
    assert "64 bytes" in error.message and "128x256x128" in error.hint


def test_the_lowering_reads_bytes():
    layout = Fp8Layout(spec_of())
    a, b = ir.Operand.A, ir.Operand.B
    assert (layout.element_bytes, layout.k_steps, layout.tma_data_type) == (1, 4, "u8")
    assert [(box.inner, box.outer, box.element_bytes) for box in layout.boxes.values()] == [(128, 128, 1), (128, 256, 1)]
    assert (layout.stage_bytes_of(a), layout.stage_bytes_of(b)) == (16384, 32768)
    assert [layout.k_step(a), layout.row_step(a), layout.row_step(b)] == [2, 512, 1024]  # 32 bytes; 64 and 128 rows
    assert (layout.accumulators, layout.part_registers, layout.consumer_registers_needed) == (128, 64, 200)
    assert layout.consumer_registers_needed <= layout.consumer_registers
    assert layout.ld_multiple == 16  # 16 bytes of 1-byte elements
    fast = Fp8Layout(spec_of(SPECS["fp8_h100_fast"].read_text().split("\n", 2)[2]))
    assert (fast.part_registers, fast.waited_groups_per_k_tile, fast.accumulators) == (0, 0, 128)


def test_a_128_element_row_is_one_swizzle_row():
    """Every byte of a 128 x 128 FP8 tile lands once, within its 1024-byte atom (TMA's 128B swizzle)."""
    offsets = {swizzled_offset(row, k) for row in range(128) for k in range(128)}
    assert offsets == set(range(128 * 128))
    assert all(swizzled_offset(row, k) // 1024 == row // 8 for row in range(128) for k in range(128))


@settings(max_examples=12, deadline=None)
@given(a=st.sampled_from(["e4m3", "e5m2"]), b=st.sampled_from(["e4m3", "e5m2"]),
       c=st.sampled_from(["bf16", "f16", "f32"]), accumulate=st.sampled_from(["fast", "promoted"]),
       store=st.sampled_from(["direct", "tma"]))
def test_every_pairing_compiles_with_its_instruction(a, b, c, accumulate, store):
    text = (TEXT.replace("a: e4m3 row", f"a: {a} row").replace("b: e4m3 col", f"b: {b} col")
            .replace("c: bf16 row", f"c: {c} row").replace("accumulate: promoted", f"accumulate: {accumulate}")
            .replace("store: tma", f"store: {store}"))
    cuda = compile_text(text, "case.gemm").cuda
    assert f"wgmma.mma_async.sync.aligned.m64n128k32.f32.{a}.{b}" in cuda
    assert re.search(r'" %64, %65, [01], 1, 1;\\n"', cuda)  # scale-d, scale-a, scale-b: no transposes
    assert "CU_TENSOR_MAP_DATA_TYPE_UINT8" in cuda and "#include <cuda_fp8.h>" in cuda
    promoted = "acc[(mr * N_REPEAT + nr) * (WGMMA_N / 2) + i] += part[mr * (WGMMA_N / 2) + i];" in cuda
    assert promoted == (accumulate == "promoted")
    assert ("wgmma_wait<1>();" in cuda) == (accumulate == "fast")  # fast keeps one group in flight


def test_check_prices_fp8_at_its_own_peak():
    spec = spec_of()
    report = format_report(analyze(spec, (4096, 4096, 4096)))
    assert "wgmma fp8 peak 1979 TFLOP/s" in report
    assert "128 accumulators + 64 of `part`" in report and "0 groups in flight" in report
    assert "the promotion's waits and FP32 adds" in report
    fast = spec_of(SPECS["fp8_h100_fast"].read_text().split("\n", 2)[2])
    assert "1 group in flight" in format_report(analyze(fast, (4096, 4096, 4096)))


def test_metadata_names_the_unit_and_the_accumulation():
    for name, mode in (("fp8_h100", "promoted"), ("fp8_h100_fast", "fast")):
        metadata = compile_path(SPECS[name]).metadata
        assert (metadata["unit"], metadata["accumulate"]) == ("fp8", mode)
        assert metadata["dtypes"] == {"a": "e4m3", "b": "e4m3", "c": "bf16"}
        assert {m["dtype"] for op, m in metadata["tensor_maps"].items() if op != "c"} == {"u8"}


@pytest.mark.nvcc
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not on PATH")
# fp8_h100 in the quick run; the promoted (fp8_rowwise) and fast (fp8_h100_fast) kernels in the full one.
@pytest.mark.parametrize("name", [name if name == "fp8_h100" else pytest.param(name, marks=pytest.mark.slow)
                                  for name in sorted(SPECS)])
def test_the_specs_build_for_sm_90a_without_spills_into_qgmma(name, tmp_path):
    artifacts = compile_path(SPECS[name])
    result = build(artifacts.cuda, artifacts.name, "90a", emit=frozenset({"cubin"}))
    resources = result.resources
    assert resources.spill_stores == resources.spill_loads == 0 and not resources.wgmma_serialized
    if shutil.which("cuobjdump") is None or shutil.which("nvdisasm") is None:
        pytest.skip("cuobjdump/nvdisasm not on PATH: the SASS is not read")
    cubin = tmp_path / "kernel.cubin"
    cubin.write_bytes(result.outputs["cubin"])
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    n = 256 if name == "fp8_h100_fast" else 128  # the promoted specs issue m64n128k32 (fp8_rowwise in chunks)
    assert f"QGMMA.64x{n}x32.F32.E4M3.E4M3" in sass and "HGMMA" not in sass
    if n == 128:  # a promoted k-tile, unrolled: 2 chunks x 4 k-steps
        assert len(re.findall(r"QGMMA\.", sass)) == 8


def test_the_runtimes_tensor_maps_are_bytes_with_byte_strides():
    maps = compile_path(SPECS["fp8_h100"]).metadata["tensor_maps"]
    requests = tensor_map_requests(maps, {"a": 0x1000, "b": 0x2000, "c": 0x3000}, 333, 517, 144,
                                   {"a": 144, "b": 160, "c": 528})
    a, b = requests["a"], requests["b"]
    assert (a.data_type, a.dims, a.strides, a.box, a.swizzle) == (0, (144, 333), (144,), (128, 128), 3)  # UINT8
    assert (b.data_type, b.dims, b.strides, b.box) == (0, (144, 517), (160,), (128, 256))
    assert requests["c"].data_type == 9  # C is BF16


def test_verify_compares_with_scaled_mm_in_the_specs_mode_within_1_1x_its_error():
    for name, fast in (("fp8_h100", False), ("fp8_h100_fast", True)):
        compared = comparison(compile_path(SPECS[name]).metadata)
        assert (compared.unit, compared.input_dtype, compared.c_dtype, compared.fast_accumulation) == (
            "fp8", "e4m3", "bf16", fast)
        assert compared.relative_to_cublas and compared.tolerance("bf16", 4e-3) == pytest.approx(4.4e-3)
        assert compared.cublas.endswith(" fast") == fast


@given(extent=st.integers(1, 5000), dtype=st.sampled_from(["e4m3", "e5m2", "bf16", "f32"]))
def test_padded_leading_dimensions_keep_tmas_16_bytes(extent, dtype):
    align = pad_align(dtype)
    ld = leading_dimension(extent, True, align)
    assert ld > extent and ld * ITEM_SIZES[DTYPE_NAMES[dtype]] % 16 == 0
    assert ld % 8 == 0  # every type keeps the padded case's vector alignment

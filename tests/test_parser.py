"""The parser: example specs -> the expected IR, comments, spans and documented defaults."""
from __future__ import annotations

from pathlib import Path

import pytest

from gemmdsl import ir, parser
from gemmdsl.frontend import load, load_path, load_spec
from gemmdsl.source import CompileError, SourceFile, Span

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "specs"

# The smallest spec: only the required sections and keys; everything else is a default.
MINIMAL = """\
gemm minimal {
    problem { }
    block   { tile: 128x128x8; }
    threads { warps: 4x2; lanes: 4x8; micro: 4x4; repeat: 2x2; }
}
"""


def span_text(source: SourceFile, span: Span) -> str:
    assert span.line == span.end_line, span
    return source.line_text(span.line)[span.column - 1: span.end_column - 1]


def test_sgemm_v1_ir():
    spec = parser.parse_file(SPECS / "sgemm_v1.gemm")
    assert spec.name == "sgemm_v1"
    row = ir.MatrixType(ir.DType.F32, ir.MatrixLayout.ROW)
    assert (spec.problem.a, spec.problem.b, spec.problem.c) == (row, row, row)
    assert spec.problem.epilogue is ir.Epilogue.STORE
    assert spec.problem.bounds is ir.Bounds.EXACT
    assert spec.target.sm == 90
    assert (spec.block.m, spec.block.n, spec.block.k) == (128, 128, 8)
    assert spec.block.raster == ir.Raster(ir.RasterKind.ROW)
    t = spec.threads
    assert (t.warps, t.lanes, t.micro, t.repeat) == (ir.Pair(8, 1), ir.Pair(2, 16), ir.Pair(8, 8), ir.Pair(1, 1))
    assert t.lane_order is ir.LaneOrder.ROW
    assert t.repeat_level is ir.RepeatLevel.BLOCK
    assert t.threads == 256
    assert t.fragment == ir.Pair(8, 8)
    assert spec.smem_a == ir.SmemLayout(span=spec.smem_a.span, operand=ir.Operand.A, order=ir.SmemOrder.MK)
    assert spec.smem_b == ir.SmemLayout(span=spec.smem_b.span, operand=ir.Operand.B, order=ir.SmemOrder.KN)
    assert (spec.load_a.operand, spec.load_a.vector) == (ir.Operand.A, 4)
    assert (spec.load_b.operand, spec.load_b.vector) == (ir.Operand.B, 4)
    assert (spec.pipeline.stages, spec.pipeline.copy, spec.pipeline.fragments) == (
        1, ir.CopyMode.REGISTERS, ir.FragmentBuffering.SINGLE)
    assert (spec.budget.registers, spec.budget.blocks_per_sm) == (None, None)


def test_sgemm_v3_ir():
    spec = parser.parse_file(SPECS / "sgemm_v3.gemm")
    assert spec.name == "sgemm_v3"
    assert spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
    assert spec.target.sm == 90
    assert (spec.block.m, spec.block.n, spec.block.k) == (128, 128, 8)
    t = spec.threads
    assert (t.warps, t.lanes, t.micro, t.repeat) == (ir.Pair(4, 2), ir.Pair(4, 8), ir.Pair(4, 4), ir.Pair(2, 2))
    assert t.repeat_level is ir.RepeatLevel.BLOCK
    assert t.threads == 256
    assert t.fragment == ir.Pair(8, 8)
    assert (spec.smem_a.order, spec.smem_a.pad, spec.smem_a.swizzle, spec.smem_a.read_bits) == (
        ir.SmemOrder.KM, 4, None, None)
    assert (spec.smem_b.order, spec.smem_b.pad) == (ir.SmemOrder.KN, 0)
    assert (spec.load_a.vector, spec.load_b.vector) == (4, 4)
    assert (spec.pipeline.stages, spec.pipeline.copy, spec.pipeline.fragments) == (
        2, ir.CopyMode.REGISTERS, ir.FragmentBuffering.DOUBLE)


@pytest.mark.parametrize("name", ["sgemm_v1", "sgemm_v3"])
def test_example_specs_validate_cleanly(name):
    spec, warnings = load_path(SPECS / f"{name}.gemm")
    assert spec.name == name
    assert warnings == []


def test_every_spec_in_specs_dir_loads():
    for path in sorted(SPECS.glob("*.gemm")):
        spec, _ = load_path(path)
        assert spec.name == path.stem, path


def test_spans_point_at_values():
    source = SourceFile.read(SPECS / "sgemm_v3.gemm")
    spec = parser.parse(source)
    assert span_text(source, spec.at("name")) == "sgemm_v3"
    assert span_text(source, spec.block.at("tile")) == "128x128x8"
    assert span_text(source, spec.threads.at("warps")) == "4x2"
    assert span_text(source, spec.threads.at("lanes")) == "4x8 row"
    assert span_text(source, spec.threads.at("micro")) == "4x4"
    assert span_text(source, spec.threads.at("repeat")) == "2x2 block"
    assert span_text(source, spec.smem_a.at("pad")) == "4"
    assert span_text(source, spec.pipeline.at("stages")) == "2"
    assert span_text(source, spec.problem.at("epilogue")) == "alpha_beta"
    assert span_text(source, spec.target.at("target")) == "sm_90"
    assert spec.block.span.line == 5 and spec.block.span.column == 5
    # a key that was not written falls back to its section
    assert spec.smem_b.at("pad") == spec.smem_b.span


def test_defaults():
    spec = parser.parse_text(MINIMAL)
    assert spec.target.sm == 90
    assert spec.problem.epilogue is ir.Epilogue.STORE
    assert spec.problem.bounds is ir.Bounds.CHECKED and spec.problem.batch is ir.Batch.NONE
    row = ir.MatrixType(ir.DType.F32, ir.MatrixLayout.ROW)
    assert (spec.problem.a, spec.problem.b, spec.problem.c) == (row, row, row)
    assert spec.block.raster == ir.Raster(ir.RasterKind.ROW)
    assert spec.threads.lane_order is ir.LaneOrder.ROW
    assert spec.threads.repeat_level is ir.RepeatLevel.BLOCK
    assert spec.smem_a.order is ir.SmemOrder.MK
    assert spec.smem_b.order is ir.SmemOrder.KN
    assert (spec.smem_a.pad, spec.smem_a.swizzle, spec.smem_a.read_bits) == (0, None, None)
    assert (spec.load_a.vector, spec.load_b.vector) == (4, 4)
    assert spec.pipeline.stages == 1
    assert spec.pipeline.copy is ir.CopyMode.REGISTERS
    assert spec.pipeline.fragments is ir.FragmentBuffering.SINGLE
    assert spec.pipeline.unroll == 1
    assert spec.threads.fma_order is ir.FmaOrder.ROW
    assert spec.block.schedule is ir.Schedule.TILES and not spec.block.stream_k
    assert (spec.budget.registers, spec.budget.blocks_per_sm) == (None, None)
    assert load(SourceFile("minimal.gemm", MINIMAL))[1] == []


def test_repeat_defaults_to_1x1():
    spec = parser.parse_text(MINIMAL.replace(" repeat: 2x2;", "").replace("4x2;", "8x4;"))
    assert spec.threads.repeat == ir.Pair(1, 1)


@pytest.mark.parametrize("bk, bn, vector_a, vector_b", [(8, 128, 4, 4), (6, 128, 2, 4), (12, 64, 4, 4),
                                                        (4, 66, 4, 2), (3, 127, 1, 1)])
def test_default_load_vector_is_widest_dividing(bk, bn, vector_a, vector_b):
    text = MINIMAL.replace("128x128x8", f"128x{bn}x{bk}")
    spec = parser.parse_text(text)
    assert (spec.load_a.vector, spec.load_b.vector) == (vector_a, vector_b)


@pytest.mark.parametrize("a, b, vector_a, vector_b", [("col", "row", 4, 2), ("row", "col", 2, 2),
                                                      ("col", "col", 4, 2)])
def test_default_load_vector_follows_the_global_layout(a, b, vector_a, vector_b):
    # Tile 128x66x6: k-contiguous tiles (row-major A, column-major B) have runs of 6, the
    # others runs of BM = 128 (A) or BN = 66 (B).
    text = MINIMAL.replace("128x128x8", "128x66x6").replace("problem {", f"problem {{ a: f32 {a}; b: f32 {b};")
    spec = parser.parse_text(text)
    assert (spec.load_a.vector, spec.load_b.vector) == (vector_a, vector_b)


def test_layouts_bounds_and_batch():
    text = MINIMAL.replace("problem {", "problem { a: f32 col; b: f32 col; c: f32 col; bounds: exact; batch: strided;")
    problem = parser.parse_text(text).problem
    col = ir.MatrixType(ir.DType.F32, ir.MatrixLayout.COL)
    assert (problem.a, problem.b, problem.c) == (col, col, col)
    assert problem.bounds is ir.Bounds.EXACT and not problem.checked
    assert problem.batch is ir.Batch.STRIDED and problem.batched


def test_comments_both_styles():
    text = """\
// a leading line comment
# a leading hash comment
gemm commented {  // after the name
    problem { a: f32 row; # hash after an entry
              b: f32 row; // slash after an entry
    }
    # block { tile: 1x1x1; }   (a commented-out section is ignored)
    block   { tile: 128x128x8; }   # trailing
    // threads { warps: 9x9; }
    threads { warps: 4x2; lanes: 4x8; micro: 4x4; repeat: 2x2; }
    target sm_80; // short section
}
// trailing comment without newline"""
    spec = parser.parse_text(text)
    assert spec.name == "commented"
    assert spec.block.m == 128 and spec.threads.warps == ir.Pair(4, 2)
    assert spec.target.sm == 80
    assert spec.block.span.line == 8


def test_every_key():
    text = """\
gemm everything {
    problem  { a: f32 row; b: f32 row; c: f32 row; epilogue: alpha_beta; bounds: exact; }
    target   sm_80;
    block    { tile: 128x128x16; raster: group(8); schedule: stream_k; }
    threads  { warps: 2x4; lanes: 8x4 zigzag; micro: 4x4; repeat: 2x2 warp; fma_order: snake; }
    smem a   { order: km; pad: 4; read: 64; }
    smem b   { order: kn; swizzle: xor(3, 2, 3); read: 128; }
    load a   { vector: 2; }
    load b   { vector: 1; }
    pipeline { stages: 3; copy: cp_async; fragments: double; unroll: 2; }
    budget   { registers: 128; blocks_per_sm: 2; }
}
"""
    spec = parser.parse_text(text)
    assert spec.block.schedule is ir.Schedule.STREAM_K and spec.block.stream_k
    assert spec.threads.fma_order is ir.FmaOrder.SNAKE
    assert spec.pipeline.unroll == 2
    assert spec.problem.bounds is ir.Bounds.EXACT
    assert spec.target.sm == 80
    assert spec.block.raster == ir.Raster(ir.RasterKind.GROUP, 8)
    assert str(spec.block.raster) == "group(8)"
    assert spec.threads.lane_order is ir.LaneOrder.ZIGZAG
    assert spec.threads.repeat_level is ir.RepeatLevel.WARP
    assert spec.smem_a.read_bits == 64
    assert spec.smem_b.swizzle == ir.Swizzle(3, 2, 3)
    assert spec.smem_b.read_bits == 128
    assert (spec.load_a.vector, spec.load_b.vector) == (2, 1)
    assert spec.pipeline.copy is ir.CopyMode.CP_ASYNC
    assert (spec.budget.registers, spec.budget.blocks_per_sm) == (128, 2)
    _, warnings = load(SourceFile("everything.gemm", text))
    assert warnings == []


def test_sections_in_any_order_and_whitespace():
    text = "gemm   tight{threads{micro:4x4;lanes:4x8;warps:4x2;repeat:2x2;}block{tile:128x128x8;}problem{}}"
    spec = parser.parse_text(text)
    assert spec.threads.micro == ir.Pair(4, 4)


def test_parse_error_carries_source():
    with pytest.raises(CompileError) as info:
        parser.parse_text("gemm x { }", path="x.gemm")
    assert info.value.source is not None and info.value.source.path == "x.gemm"


def test_load_spec_accepts_path_and_source():
    assert load_spec(SPECS / "sgemm_v1.gemm").name == "sgemm_v1"
    assert load_spec(str(SPECS / "sgemm_v1.gemm")).name == "sgemm_v1"
    assert load_spec(SourceFile("m.gemm", MINIMAL)).name == "minimal"


# --- tensor cores ----------------------------------------------------------------------------

FIXTURES = ROOT / "tests" / "fixtures"

# The smallest mma spec: one warp, one m16n8k16, a 16x8 block tile.
MINIMAL_MMA = """\
gemm minimal_mma {
    problem { a: f16 row; b: f16 row; }
    block   { tile: 16x8x32; }
    threads { warps: 1x1; }
    mma     { shape: m16n8k16; }
}
"""


def test_dtypes():
    whole = [t for t in ir.DType if t.bits % 8 == 0]
    assert [(t.bytes, t.c_type, t.vector_widths) for t in whole] == [
        (4, "float", (1, 2, 4)), (2, "__half", (1, 2, 4, 8)), (2, "__nv_bfloat16", (1, 2, 4, 8)),
        (1, "__nv_fp8_e4m3", (1, 2, 4, 8, 16)), (1, "__nv_fp8_e5m2", (1, 2, 4, 8, 16)), (1, "int8_t", (1, 2, 4, 8, 16))]
    assert [(t.value, t.bits, t.integer, t.fp8) for t in ir.DType] == [
        ("f32", 32, False, False), ("f16", 16, False, False), ("bf16", 16, False, False), ("e4m3", 8, False, True),
        ("e5m2", 8, False, True), ("s4", 4, True, False), ("u4", 4, True, False), ("s8", 8, True, False)]


@pytest.mark.parametrize("dtype", [ir.DType.S4, ir.DType.U4])
def test_a_nibble_has_no_bytes(dtype):
    """Two 4-bit codes share a byte: `bytes` refuses rather than count a nibble as a byte."""
    assert dtype.vector_widths == (1, 2, 4, 8, 16, 32)
    with pytest.raises(TypeError, match="count it with `bits`"):
        dtype.bytes
    with pytest.raises(TypeError, match="packed in 32-bit words"):
        dtype.c_type


@pytest.mark.parametrize("group, k, scales", [(None, 4096, 1), (128, 4096, 32), (128, 4000, 32), (32, 33, 2)])
def test_scales_per_column(group, k, scales):
    quant = ir.WeightQuant(span=Span("x.gemm", 1, 1, 1, 2), group=group, zeros=False)
    assert quant.scales_per_column(k) == scales


def test_mma_shapes():
    assert [(s.m, s.n, s.k) for s in ir.MmaShape] == [(16, 8, 16), (16, 8, 8)]


def test_hgemm_mma_ir():
    spec, warnings = load_path(FIXTURES / "hgemm_mma.gemm")
    assert warnings == []
    bf16 = ir.MatrixType(ir.DType.BF16, ir.MatrixLayout.ROW)
    assert (spec.problem.a, spec.problem.b) == (bf16, bf16)
    assert spec.problem.c == ir.MatrixType(ir.DType.F32, ir.MatrixLayout.ROW)
    assert spec.mma == ir.MmaTile(span=spec.mma.span, shape=ir.MmaShape.M16N8K16, repeat=ir.Pair(4, 8),
                                  precision=ir.Precision.NATIVE)
    assert spec.mma.warp_tile == ir.Pair(64, 64)
    assert spec.threads.warps == ir.Pair(2, 2) and spec.threads.threads == 128
    assert (spec.smem_a.swizzle, spec.smem_b.swizzle) == (ir.Swizzle(2, 3, 3), ir.Swizzle(3, 3, 4))
    assert (spec.smem_a.read, spec.smem_b.read) == (ir.SmemRead.LDMATRIX, ir.SmemRead.LDMATRIX)
    assert (spec.smem_a.read_bits, spec.smem_b.read_bits) == (None, None)
    assert (spec.load_a.vector, spec.load_b.vector) == (8, 8)
    assert (spec.pipeline.stages, spec.pipeline.copy, spec.pipeline.fragments) == (
        4, ir.CopyMode.CP_ASYNC, ir.FragmentBuffering.DOUBLE)


def test_sgemm_3xtf32_ir():
    source = SourceFile.read(FIXTURES / "sgemm_3xtf32.gemm")
    spec, warnings = load(source)
    assert warnings == []
    assert spec.problem.a.dtype is ir.DType.F32
    assert (spec.mma.shape, spec.mma.repeat, spec.mma.precision) == (
        ir.MmaShape.M16N8K8, ir.Pair(4, 8), ir.Precision.TF32X3)
    assert span_text(source, spec.mma.at("precision")) == "3xtf32"
    assert span_text(source, spec.mma.at("shape")) == "m16n8k8"
    # f32 fragments are TF32 words: 32-bit shared loads; global loads default to 16 bytes
    assert (spec.smem_a.read, spec.smem_b.read) == (ir.SmemRead.LDS32, ir.SmemRead.LDS32)
    assert (spec.smem_a.pad, spec.smem_b.pad) == (4, 8)
    assert (spec.load_a.vector, spec.load_b.vector) == (4, 4)
    assert spec.pipeline.copy is ir.CopyMode.CP_ASYNC


def test_mma_defaults():
    spec, warnings = load(SourceFile("m.gemm", MINIMAL_MMA))
    assert warnings == []
    assert (spec.mma.repeat, spec.mma.precision) == (ir.Pair(1, 1), ir.Precision.NATIVE)
    assert spec.problem.c.dtype is ir.DType.F32
    assert (spec.smem_a.read, spec.smem_b.read) == (ir.SmemRead.LDMATRIX, ir.SmemRead.LDMATRIX)
    assert (spec.load_a.vector, spec.load_b.vector) == (8, 8)  # 16 bytes of f16
    assert (spec.pipeline.stages, spec.pipeline.copy) == (1, ir.CopyMode.CP_ASYNC)


def test_mma_read_32_on_16_bit():
    text = MINIMAL_MMA.replace("}\n}", "}\n    smem b  { read: 32; }\n}")
    spec = parser.parse_text(text)
    assert (spec.smem_a.read, spec.smem_b.read) == (ir.SmemRead.LDMATRIX, ir.SmemRead.LDS32)


@pytest.mark.parametrize("bk, vector", [(16, 8), (12, 4), (6, 2), (3, 1)])
def test_default_load_vector_of_16_bit_types_is_widest_dividing(bk, vector):
    # Only the default's width matters here: a parse, without the rule that BK is a multiple of k.
    spec = parser.parse_text(MINIMAL_MMA.replace("16x8x32", f"16x8x{bk}"))
    assert spec.load_a.vector == vector


def test_fma_specs_have_no_mma():
    spec = parser.parse_text(MINIMAL)
    assert spec.mma is None
    assert (spec.smem_a.read, spec.smem_b.read) == (None, None)


def test_counted_name_is_one_value():
    # `3xtf32` starts with a digit: the lexer reads it as one word, not as `3` and `xtf32`.
    text = MINIMAL.replace("problem { }", "problem { }\n    mma { shape: m16n8k8; precision: 3xtf32; }")
    spec = parser.parse_text(text.replace(" lanes: 4x8; micro: 4x4; repeat: 2x2;", ""))
    assert spec.mma.precision is ir.Precision.TF32X3


def test_the_parser_tables_are_built_once_for_threads_and_a_damaged_tables_file_is_rebuilt(tmp_path, monkeypatch):
    import threading

    import gemmdsl.parser as parser_module

    monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path))
    text = (Path(__file__).resolve().parents[1] / "specs" / "sgemm_v3.gemm").read_text()
    for damage in (None, b"not a pickle", b""):
        monkeypatch.setattr(parser_module, "_parser", None)
        if damage is not None:
            next(tmp_path.glob("grammar-*.lark")).write_bytes(damage)
        names, errors = [], []

        def parse_one():
            try:
                names.append(parser_module.parse_text(text, "sgemm_v3.gemm").name)
            except Exception as err:  # noqa: BLE001 - any error fails the test below
                errors.append(err)

        threads = [threading.Thread(target=parse_one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors and names == ["sgemm_v3"] * 8
        assert len(list(tmp_path.glob("grammar-*.lark"))) == 1 and not list(tmp_path.glob(".grammar-*"))

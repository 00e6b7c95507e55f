"""Per-tensor scales (`fuse { scale: tensor; }`, `tensor col`, `row tensor`): the values the key takes and the
operands each reads, the positioned diagnostics of the pairings it refuses, the launchers' parameters, the
header and the metadata, the Python API's checks and a call that passes the scales' addresses (no copy to the
host), the float64 reference, the cost, and what verify and bench compare with. The emulator runs the three
forms on the FMA path (tests/test_emulated_fuse.py); GPU tests are in tests/test_gpu_fp8.py."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl import ir
from gemmdsl.compiler import compile_path, compile_text
from gemmdsl.frontend import load
from gemmdsl.fuse_operands import FuseOperands, byte_span, check_no_overlap_with_c, fuse_arguments, fuse_views, moved
from gemmdsl.fuse_reference import apply_chain
from gemmdsl.source import CompileError, Severity, SourceFile
from tests.fake_gpu import FakeGpu, FakeTensor, fake_kernel, matrix
from tests.test_fuse_operands import view

ROOT = Path(__file__).resolve().parents[1]
TENSORWISE = ROOT / "specs" / "fp8_tensorwise.gemm"
TENSORWISE_FAST = ROOT / "specs" / "fp8_tensorwise_fast.gemm"
TEXT = TENSORWISE.read_text()
FMA_TEXT = (ROOT / "specs" / "sgemm_fused.gemm").read_text()
FMA_FUSE = "fuse     { bias: m; activation: relu; residual: f32 row; }"

# value -> (spec.fuse.scale, the operands in the kernels' order as (name, kind))
LEGAL = {
    "tensor": (ir.ScaleVectors.TENSOR, (("a_scale", "scalar"), ("b_scale", "scalar"))),
    "tensor col": (ir.ScaleVectors.TENSOR_COL, (("a_scale", "scalar"), ("col_scale", "vector"))),
    "row tensor": (ir.ScaleVectors.ROW_TENSOR, (("row_scale", "vector"), ("b_scale", "scalar"))),
    "rowcol": (ir.ScaleVectors.ROWCOL, (("row_scale", "vector"), ("col_scale", "vector"))),
    "row": (ir.ScaleVectors.ROW, (("row_scale", "vector"),)),
    "col": (ir.ScaleVectors.COL, (("col_scale", "vector"),)),
}


def fp8_text(value: str) -> str:
    return TEXT.replace("scale: tensor;", f"scale: {value};")


def fma_text(value: str) -> str:
    """sgemm_fused (FP32 FMA, no alpha_beta) with the scale alone in its fuse section."""
    return FMA_TEXT.replace(FMA_FUSE, f"fuse     {{ scale: {value}; }}").replace("epilogue: alpha_beta; ", "")


@pytest.mark.parametrize("text", [fp8_text, fma_text], ids=["fp8", "fma"])
@pytest.mark.parametrize("value", sorted(LEGAL))
def test_each_legal_value_reads_as_its_scales_and_operands(text, value):
    spec = load(SourceFile("case.gemm", text(value)))[0]
    scale, operands = LEGAL[value]
    assert spec.fuse.scale is scale
    assert tuple((operand.name, operand.kind.name) for operand in spec.fuse.operands) == operands
    assert (scale.a_tensor, scale.b_tensor) == (value.startswith("tensor"), value.endswith("tensor"))


def errors_of(text: str) -> list[tuple]:
    """(diagnostic, the text from its column on) of each error."""
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    return [(d, text.splitlines()[d.span.line - 1][d.span.column - 1:]) for d in caught.value.diagnostics
            if d.severity is Severity.ERROR]


# value -> (where the error points, a piece of its message, a piece of its hint)
ILLEGAL = {
    "tensor block": ("block;", "names both operands' scales", "`scale: block;`"),
    "block tensor": ("block tensor;", "names both operands' scales", "`scale: block;`"),
    "rowcol tensor": ("rowcol tensor;", "names both operands' scales", "`scale: rowcol;`"),
    "tensor tensor": ("tensor;", "`tensor` alone scales A and B", "`scale: tensor;`"),
    "row col": ("col;", "spelled `rowcol`", "`scale: rowcol;`"),
    "col tensor": ("col tensor;", "A's scale is `row` (one per row of C) or `tensor`, found `col`",
                   "`scale: tensor col;`"),
    "tensor row": ("row;", "B's scale is `col` (one per column of C) or `tensor`, found `row`",
                   "`scale: row tensor;`"),
    "row row": ("row;", "B's scale is `col`", "`scale: row tensor;`"),
    "tensor col row": ("row;", "expected at most two words: A's scale, then B's", "`scale: tensor col;`"),
    "tensr": ("tensr;", "expected row, col, rowcol, tensor or block, found 'tensr'", "did you mean 'tensor'?"),
    "tensor colum": ("colum;", "found 'colum'", "did you mean 'col'?"),
}


@pytest.mark.parametrize("value", sorted(ILLEGAL))
def test_each_illegal_value_is_refused_at_the_word_that_breaks_it(value):
    at, message, hint = ILLEGAL[value]
    [(error, text)] = errors_of(fp8_text(value))
    assert text.startswith(at) and message in error.message and hint in error.hint, (error, text)
    line = fp8_text(value).splitlines()[error.span.line - 1]
    assert line.strip().startswith("fuse") and error.span.column > line.index("scale:")


@pytest.mark.parametrize("value", ["tensor", "tensor col", "row tensor"])
def test_per_tensor_scales_take_alphas_place(value):
    text = fp8_text(value).replace("bounds: checked;", "bounds: checked; epilogue: alpha_beta;")
    [(error, at)] = errors_of(text)
    assert at.startswith(value) and "take alpha's place" in error.message
    assert "remove `epilogue: alpha_beta;`" in error.hint


def test_per_tensor_scales_are_refused_on_a_grouped_kernel():
    text = (ROOT / "specs" / "moe_grouped_fp8.gemm").read_text()
    text = re.sub(r"scale: \w+;", "scale: tensor col;", text)
    [(error, at)] = errors_of(text)
    assert at.startswith("tensor col") and "batch: grouped" in error.message and "rowcol" in error.hint


@pytest.mark.parametrize("value, parameters", [
    ("tensor", "const float* a_scale, const float* b_scale"),
    ("tensor col", "const float* a_scale, const float* col_scale"),
    ("row tensor", "const float* row_scale, const float* b_scale"),
])
def test_the_launchers_take_the_scales_pointers_a_then_b_before_alpha(value, parameters):
    artifacts = compile_text(fp8_text(value), "case.gemm")
    launchers = re.findall(r"cudaError_t \w+_launch\w*\(([^)]*)\)", artifacts.header)
    assert launchers and all(f"int K, {parameters}, float alpha, float beta" in " ".join(p.split())
                             for p in launchers), launchers
    names = [argument["name"] for argument in artifacts.metadata["arguments"]]
    expected = [name.split("* ")[1] for name in parameters.split(", ")]
    assert names[names.index("beta") + 1:][:2] == expected
    assert artifacts.metadata["fuse"]["scale"] == value
    assert FuseOperands.from_metadata(artifacts.metadata).names == tuple(expected)


def test_the_header_documents_the_per_tensor_scales_and_the_formula():
    artifacts = compile_path(TENSORWISE)
    assert "a_scale: one f32 value, A's scale (read by the kernel: no copy to the host)" in artifacts.header
    assert "b_scale: one f32 value, B's scale" in artifacts.header
    assert artifacts.metadata["fuse"]["formula"] == "acc * a_scale * b_scale"
    assert compile_path(TENSORWISE_FAST).metadata["accumulate"] == "fast"


def test_the_kernel_reads_the_scales_through_their_pointers_and_stages_no_vector():
    cuda = compile_path(TENSORWISE).cuda
    assert "fuse_m_values[mr][h] = fuse_m{a_scale[0], b_scale[0]};" in cuda
    assert "float x = acc * m.a_scale * m.b_scale;" in cuda
    assert "vectors_full" not in cuda  # no vector: the producer stages nothing
    row_tensor = compile_text(fp8_text("row tensor"), "case.gemm").cuda
    assert re.search(r"fuse_m\{tile_vectors?\[\d+ \+ [^\]]+\], b_scale\[0\]\}|fuse_m\{vectors\[0 \+ [^\]]+\], "
                     r"b_scale\[0\]\}", row_tensor)
    staged = re.findall(r"vectors\[\d+ \+ i\] = index < \w+ \? ([^;]+);", row_tensor)
    assert staged == ["row_scale[index] : 0.0f"]  # the producer stages the row scales only


def test_the_python_api_checks_a_scalar_and_passes_its_address():
    fuse = FuseOperands.from_metadata({"fuse": {"formula": "f", "scale": "tensor col"}})
    m, n = 300, 520
    good = {"a_scale": view((), (), "float32", 4, 0x1000), "col_scale": view((n,), (1,), "float32", 4, 0x2000)}
    views = fuse_views("k", fuse, good, m, n, 64)
    assert fuse_arguments(views) == (0x1000, 0x2000)
    assert byte_span(views["a_scale"], m, n) == (0x1000, 0x1004)
    assert moved(views, 64, 256)["a_scale"].pointer == 0x1000  # one value for every sub-launch
    assert fuse_views("k", fuse, {**good, "a_scale": view((1,), (1,), "float32", 4, 0x1000)}, m, n)["a_scale"].scalar
    with pytest.raises(ValueError, match=r"a_scale must be one value \(shape \(\) or \(1,\)\), got shape \(2,\)"):
        fuse_views("k", fuse, {**good, "a_scale": view((2,), (1,), "float32", 4)}, m, n)
    with pytest.raises(TypeError, match="a_scale must be float32, got bfloat16"):
        fuse_views("k", fuse, {**good, "a_scale": view((), (), "bfloat16", 2)}, m, n)
    c = 0x9000
    with pytest.raises(ValueError, match="a_scale overlaps C"):
        check_no_overlap_with_c(fuse_views("k", fuse, {**good, "a_scale": view((), (), "float32", 4, c + 8)}, m, n),
                                c, n, "row", 2, m, n)


class DeviceScalar(FakeTensor):
    """A 0-dim f32 on the GPU whose value a host copy would read: every way of reading it fails the test."""

    __module__ = "torch"  # arrays.library_of: a PyTorch tensor

    def __init__(self):
        super().__init__((), "float32")

    def _host_copy(self, *args):
        raise AssertionError("the call copied a scale to the host")

    item = cpu = tolist = get = numpy = __float__ = __array__ = __index__ = _host_copy


def test_a_call_passes_the_scales_addresses_to_the_kernel_without_reading_them(monkeypatch):
    gpu = FakeGpu().install(monkeypatch)
    kernel = fake_kernel(TENSORWISE)
    a_scale, b_scale = DeviceScalar(), DeviceScalar()
    x, w = matrix(256, 512, "float8_e4m3fn"), matrix(384, 512, "float8_e4m3fn")
    kernel(x, w.t(), a_scale=a_scale, b_scale=b_scale)
    [launch] = gpu.launched
    assert launch.args[-2:] == (a_scale.data_ptr(), b_scale.data_ptr())
    with pytest.raises(TypeError, match="pass a_scale=, b_scale="):
        kernel(x, w.t())


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 20), n=st.integers(1, 20), value=st.sampled_from(["tensor", "tensor col", "row tensor"]),
       seed=st.integers(0, 2 ** 31))
def test_the_reference_multiplies_by_each_scale(m, n, value, seed):
    rng = np.random.default_rng(seed)
    product = rng.standard_normal((m, n))
    a_scale, b_scale = np.float32(rng.uniform(0.25, 4)), np.array([rng.uniform(0.25, 4)], dtype=np.float32)
    row_scale, col_scale = rng.uniform(0.25, 4, m), rng.uniform(0.25, 4, n)
    a = a_scale if value.startswith("tensor") else row_scale[:, None]
    b = b_scale[0] if value.endswith("tensor") else col_scale[None, :]
    got = apply_chain({"scale": value, "bias": None, "activation": None, "residual": None}, product,
                      a_scale=a_scale, b_scale=b_scale, row_scale=row_scale, col_scale=col_scale)
    np.testing.assert_allclose(got, product * np.float64(a) * np.float64(b), rtol=1e-15)


def test_check_prices_a_multiply_per_scale_and_no_load():
    from gemmdsl.passes.fuse import chain_work, fuse_cost

    artifacts = compile_path(TENSORWISE)
    spec, reads = artifacts.spec, artifacts.plan.layout.chain_reads()
    work = chain_work(spec, reads)
    assert (work.alu, work.sfu, work.loads, work.smem_loads) == (2, 0, 0, 0)
    cost = fuse_cost(spec, reads, 4096, 4096, 4096)
    assert cost.staged_bytes == 0 and cost.registers == 0


def test_verify_draws_0_dim_positive_scales():
    from gemmdsl.verify import Case, chain_operands

    class HostArrays:
        rng = np.random.default_rng(3)

        def scales(self, count):
            return self.rng.uniform(0.25, 1.75, count)

    fuse = compile_path(TENSORWISE).metadata["fuse"]
    chain = chain_operands(HostArrays(), fuse, 33, 17, 64, Case("contiguous", False, 1, False))
    assert set(chain) == {"a_scale", "b_scale"}
    assert all(value.shape == () and 0.25 <= value <= 1.75 for value in chain.values())
    fuse = compile_text(fp8_text("row tensor"), "case.gemm").metadata["fuse"]
    chain = chain_operands(HostArrays(), fuse, 33, 17, 64, Case("contiguous", False, 1, False))
    assert chain["row_scale"].shape == (33,) and chain["b_scale"].shape == ()


def test_verify_and_bench_compare_with_scaled_mms_tensorwise_mode():
    from gemmdsl.precisions import comparison

    compared = comparison(compile_path(TENSORWISE).metadata)
    assert (compared.tensor_scales, compared.block_scales, compared.fast_accumulation) == (True, False, False)
    assert compared.cublas == "FP8 scaled_mm tensorwise"
    fast = comparison(compile_path(TENSORWISE_FAST).metadata)
    assert fast.cublas == "FP8 scaled_mm tensorwise fast" and fast.fast_accumulation
    rowwise = comparison(compile_path(ROOT / "specs" / "fp8_rowwise.gemm").metadata)
    assert not rowwise.tensor_scales and rowwise != compared  # timed in separate groups, each with its own call
    mixed = comparison(compile_text(fp8_text("row tensor"), "case.gemm").metadata)
    assert not mixed.tensor_scales and mixed == rowwise  # the rowwise mode, a scale repeated along its axis


class RecordingArrays:
    """verify's array calls on NumPy, recording the element type each operand was drawn in."""

    b_layout = "col"

    def __init__(self):
        self.drawn = []

    def random(self, elements, dtype, wide=False):
        self.drawn.append(dtype)
        return np.zeros(elements, dtype=np.float32)

    def cublas_out(self, rows, cols, dtype, batch=1):
        return np.zeros((rows, cols), dtype=np.float32)


@pytest.mark.parametrize("a, b", [("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e4m3")])
def test_bench_draws_a_and_b_in_the_kernels_own_types_one_group_per_pairing(a, b):
    """A mixed pairing is its own comparison (torch._scaled_mm on those types), and bench's inputs are of each
    operand's type: an e4m3 B for an e4m3 x e5m2 kernel was refused by the call (TypeError) before."""
    from gemmdsl.bench import input_set
    from gemmdsl.precisions import comparison

    text = TEXT.replace("a: e4m3 row; b: e4m3 col;", f"a: {a} row; b: {b} col;")
    compared = comparison(compile_text(text, "case.gemm").metadata)
    assert compared.input_dtypes == (a, b)
    assert (f" {a} x {b}" in compared.cublas) == (a != b)
    arrays = RecordingArrays()
    input_set(arrays, compared, (64, 48, 32))
    assert arrays.drawn == [a, b]
    same = comparison(compile_path(TENSORWISE).metadata)
    assert (compared == same) == (a == b == "e4m3")

"""`gemmdsl verify`, `bench` and `profile` on dequantizing specs, on the CPU: verify draws a weight in the spec's
format, packs it and holds the kernel to float64 within 1.1x of dequantize-then-cuBLAS's error (a wrong kernel
fails), bench assembles its rows from the timings and writes its table and JSON, profile compares the launch and
the packed bytes. The kernel is a stand-in with a shipped spec's metadata that unpacks the packed arrays and
multiplies in NumPy; the arrays are NumPy's in PyTorch's place (bf16 as float32 values rounded to bf16)."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy
import pytest
from hypothesis import given, settings, strategies as st

from gemmdsl import bench, ir, quant_bench, verify
from gemmdsl.analysis import analyze
from gemmdsl.compiler import compile_path
from gemmdsl.ncu_counters import DRAM_READ, GRID_SIZE, REGISTERS
from gemmdsl.paths.dequant.lowering import decode_config
from gemmdsl.precisions import comparison
from gemmdsl.profile import comparison_rows, format_comparison
from gemmdsl.quant_layout import QuantFormat, packed_bytes, unpack
from gemmdsl.quant_operands import draw_weight
from gemmdsl.quant_reference import dequantize, round_to
from gemmdsl.runtime import KernelRequirements

ROOT = Path(__file__).resolve().parents[1]
SPECS = ("w4a16_decode", "w4a16_zeros_decode", "w8a16_decode", "fp8w_a16_decode")
COMPILED = {name: compile_path(ROOT / "specs" / f"{name}.gemm") for name in SPECS}
SIZES = [(3, 40, 512), (17, 64, 1024)]  # N off the 16-row tile; one and two groups' worth of chunks


def rounded(values, dtype: str) -> numpy.ndarray:
    return round_to(values, ir.DType(dtype)).astype(numpy.float32)


class NumpyArrays(verify.CupyArrays):
    """TorchArrays's interface in NumPy: 16-bit values as float32 rounded to their type; cuBLAS multiplies them in
    FP32 and rounds C to the kernel's C type."""

    def __init__(self, seed: int, c_dtype: str):
        self.xp, self.rng, self.c_dtype = numpy, numpy.random.RandomState(seed), c_dtype

    def random(self, elements, dtype, wide=False):
        return rounded(self.rng.uniform(-1.0, 1.0, elements), dtype)

    def poisoned(self, elements, dtype):
        return numpy.full(elements, numpy.nan, dtype=numpy.float32)

    def device(self, x):
        return numpy.asarray(x)

    def device_as(self, x, dtype):
        return rounded(x, dtype)

    def host(self, x):
        return numpy.asarray(x)

    def cublas(self, a, b):
        return rounded(a.astype(numpy.float32) @ b.astype(numpy.float32), self.c_dtype)


@pytest.fixture(autouse=True)
def numpy_arrays(monkeypatch):
    make = lambda compared, seed: NumpyArrays(seed, compared.c_dtype)  # noqa: E731
    monkeypatch.setattr(verify, "arrays_for", make)
    monkeypatch.setattr(quant_bench, "arrays_for", make)


class DecodeKernel:
    """What verify and bench read of a QuantizedKernel; a call unpacks the packed arrays, dequantizes them in
    float64 and writes A W^T rounded to C's type, or, with a `fault`, what a broken kernel would: "zeros" ignores
    the zero points, "group" drops the last group of K, "stale" adds the previous call's C (a split-K workspace
    left non-zero), "unwritten" leaves C's last element, "outside" also writes the element after C."""

    def __init__(self, name: str = "w4a16_decode", fault: str = ""):
        self.metadata = COMPILED[name].metadata
        quant = self.metadata["quant"]
        self.name, self.fault, self.previous = name, fault, None
        self.format = QuantFormat(quant["weight"], quant["activation"], quant["group"], quant["zeros"])
        self.k_multiple = quant["k_multiple"]
        self.requirements = KernelRequirements.from_metadata(self.metadata)
        self.bound = []

    def bind(self, a, packed, c):
        k = a.shape[1]
        if k % self.k_multiple:
            raise ValueError(f"K = {k} is not a multiple of {self.k_multiple}")
        self.bound.append((a, packed, c))
        return Launch(self, (a, packed, c))

    def run(self, a, packed, c):
        (m, k), n, fmt = a.shape, c.shape[1], self.format
        bits = {name: array.view(numpy.uint32 if array.dtype == numpy.int32 else numpy.uint16)
                for name, array in packed.items()}
        q, scales, zeros = unpack(bits, n, k, fmt)
        w = dequantize(q, scales, None if self.fault == "zeros" else zeros, fmt.group)
        if self.fault == "group":
            w[:, -(fmt.group or 128):] = 0
        product = a.astype(numpy.float64) @ w.T
        if self.fault == "stale" and self.previous is not None:
            product = product + self.previous
        self.previous = product
        c[...] = rounded(product, self.metadata["dtypes"]["c"])
        if self.fault == "unwritten":
            c[-1, -1] = numpy.nan
        if self.fault == "outside":
            numpy.lib.stride_tricks.as_strided(c, shape=(m * n + 1,), strides=(c.itemsize,))[-1] = 0.0


class Launch:
    """A bound call: its entry (which verify reports) and the run."""

    def __init__(self, kernel, operands):
        self.entry, self.kernel, self.operands = f"{kernel.name}_kernel", kernel, operands

    def __call__(self):
        self.kernel.run(*self.operands)


@pytest.mark.parametrize("name", SPECS)
def test_a_right_kernel_passes_at_odd_n_with_both_calls(name):
    kernel = DecodeKernel(name)
    results = verify.verify_quantized(kernel, SIZES, seed=1)
    assert [verify.format_result(result) for result in results if not result.passed] == []
    assert [(r.m, r.n, r.k, r.case) for r in results] == [(*size, case) for size in SIZES
                                                           for case in verify.QUANTIZED_CASES]
    for result in results:  # the kernel is exact to float64 but for C's rounding: closer than cuBLAS
        assert result.vs_float64.relative < result.cublas_vs_float64.relative
        assert result.tolerance == pytest.approx(1.1 * result.cublas_vs_float64.relative + 1e-6)
    first_a, first_packed, _ = kernel.bound[0]
    second_a, second_packed, _ = kernel.bound[1]
    assert second_a is first_a and second_packed is first_packed  # the second call: the same operands


@pytest.mark.parametrize("name, fault", [("w4a16_zeros_decode", "zeros"), ("w4a16_decode", "group"),
                                         ("w8a16_decode", "group"), ("fp8w_a16_decode", "unwritten"),
                                         ("w4a16_decode", "outside")])
def test_a_wrong_kernel_fails_both_calls(name, fault):
    fmt = DecodeKernel(name).format
    size = (5, 40, 2 * (fmt.group or 512))
    results = verify.verify_quantized(DecodeKernel(name, fault), [size], seed=2)
    assert len(results) == 2 and not any(result.passed for result in results), \
        [verify.format_result(result) for result in results]


def test_a_workspace_left_dirty_fails_the_second_call():
    first, second = verify.verify_quantized(DecodeKernel("w4a16_decode", "stale"), [(4, 48, 2048)], seed=3)
    assert first.passed and not second.passed
    assert "FAIL" in verify.format_result(second) and "second call" in verify.format_result(second)


def test_a_k_the_kernel_refuses_is_reported_as_refused_before_anything_runs():
    kernel = DecodeKernel("w4a16_decode")
    (result,) = verify.verify_quantized(kernel, [(2, 64, 1000)])
    assert result.skipped == "refused: K = 1000 is not a multiple of 128 (whole groups, A's rows read 16 bytes at " \
                             "a time)"
    assert verify.format_result(result).startswith("SKIP  w4a16_decode") and kernel.bound == []
    (taken,) = {r.passed for r in verify.verify_quantized(DecodeKernel("w8a16_decode"), [(2, 64, 1000)])}
    assert taken  # per channel: K a multiple of 8


def test_verify_prints_a_line_per_case_and_writes_json(tmp_path, capsys):
    path = tmp_path / "verify.json"
    status = verify.verify_and_report([DecodeKernel("w4a16_decode")], [(3, 40, 512), (2, 64, 1000)], 0, str(path))
    out = capsys.readouterr().out.splitlines()
    assert status == 0
    assert out[0].startswith("PASS  w4a16_decode         3x40x512         packed weights") and "vs f64" in out[0]
    assert out[1].split()[3:5] == ["second", "call"]
    assert out[2].startswith("SKIP  w4a16_decode         2x64x1000        refused: K = 1000")
    assert out[-1] == "2/2 cases passed, 1 sizes skipped"
    records = json.loads(path.read_text())
    assert [record["case"] for record in records] == ["packed weights", "second call", "contiguous"]
    assert records[0]["passed"] and records[0]["cublas_tolerance"] is None and records[0]["entry"] == "w4a16_decode_kernel"


def test_verify_fails_a_wrong_kernel_with_status_1(capsys):
    assert verify.verify_and_report([DecodeKernel("w4a16_decode", "group")], [(3, 40, 512)], 0, None) == 1
    out = capsys.readouterr().out
    assert "FAIL  w4a16_decode" in out and "error vs float64" in out and out.endswith("0/2 cases passed\n")


def test_verify_without_pytorch_says_so_and_exits_2(monkeypatch, capsys):
    def no_torch(compared, seed):
        raise ModuleNotFoundError("No module named 'torch'")

    monkeypatch.setattr(verify, "arrays_for", no_torch)
    assert verify.verify_and_report([DecodeKernel()], [(3, 40, 512)], 0, None) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: w4a16_decode: PyTorch is not installed") and "Traceback" not in err


def test_a_dequantizing_kernel_is_compared_with_cublas_on_the_dequantized_weight():
    compared = comparison(COMPILED["w4a16_decode"].metadata)
    assert (compared.unit, bench.cublas_name(compared), compared.input_dtype, compared.c_dtype) == \
        ("dequant", "cuBLAS BF16 GEMM on the dequantized weight", "bf16", "bf16")
    assert compared.tolerance("bf16", 2e-3) == pytest.approx(1.1 * 2e-3 + 1e-6)


@pytest.mark.parametrize("fmt", [QuantFormat("s4", "bf16", 128), QuantFormat("u4", "f16", 64, True),
                                 QuantFormat("s8", "bf16", None, True), QuantFormat("e4m3", "bf16", 128)])
def test_the_drawn_weight_is_in_the_format_and_packs(fmt):
    weight = draw_weight(numpy.random.default_rng(0), fmt, 40, 256)
    assert weight.q.shape == (40, 256) and weight.scales.shape == (40, fmt.groups(256))
    assert (weight.zeros is not None) == fmt.zeros
    if fmt.zeros:
        assert len(numpy.unique(weight.zeros)) > 4  # zero points that differ, for the kernel to subtract
    verify.device_packed(NumpyArrays(0, "bf16"), weight, fmt)  # quant_layout.pack takes it


# --- bench ---------------------------------------------------------------------------------------------------


class FakeTimingGpu:
    """quant_bench.TorchGpu without a GPU: two copies of each weight, planted times in microseconds by contender
    (ours, cuBLAS, int4pack), the launch sets it was asked to time."""

    name, version = "Fake H200", "0.0"

    def __init__(self, times=(10.0, 20.0, 15.0), int4pack_error=None):
        self.times, self.int4pack_error, self.timed = times, int4pack_error, []

    def copies(self, nbytes):
        return 2

    def copied(self, x, nbytes):
        return [x, x.copy()]

    def matmul(self, a, w):
        return lambda: a @ w.T

    def int4pack(self, weight, fmt):
        if self.int4pack_error:
            raise RuntimeError(self.int4pack_error)
        return [quant_bench.int4pack_codes(weight, fmt)] * 2

    def int4pack_call(self, a, operands, group):
        return lambda: None

    def time(self, launch_sets, runs, warmup):
        self.timed.append((launch_sets, runs, warmup))
        return [t * 1e-6 for t in self.times[:len(launch_sets)]]


def bench_rows(names, sizes, gpu):
    progress = bench.Progress(len(names) * len(sizes), io.StringIO())
    report = quant_bench.bench_quantized([DecodeKernel(name) for name in names], sizes, 20, 5, 0, progress, gpu)
    return report


def test_bench_times_the_kernel_beside_cublas_and_int4pack_and_rates_the_packed_bytes():
    gpu = FakeTimingGpu()
    report = bench_rows(["w4a16_decode"], [(1, 1024, 2048), (16, 1024, 2048)], gpu)
    names = [row.name for row in report.rows]
    assert names == ["cuBLAS BF16 GEMM on the dequantized weight", quant_bench.INT4PACK, "w4a16_decode"] * 2
    ours = report.rows[2]
    fmt = DecodeKernel().format
    assert ours.median_us == pytest.approx(10.0) and ours.pct_of_cublas == pytest.approx(200.0)
    assert ours.pct_of_int4pack == pytest.approx(150.0) and ours.weight_copies == 2
    assert ours.gbs == pytest.approx((packed_bytes(1024, 2048, fmt) + 2 * 2048 + 2 * 1024) / 10e-6 / 1e9)
    assert ours.tflops == pytest.approx(2 * 1024 * 2048 / 10e-6 / 1e12)
    assert report.rows[0].gbs == pytest.approx((2 * 1024 * 2048 + 2 * 2048 + 2 * 1024) / 20e-6 / 1e9)
    launch_sets, runs, warmup = gpu.timed[0]
    assert [len(launches) for launches in launch_sets] == [2, 2, 2] and (runs, warmup) == (20, 5)


def test_bench_notes_why_int4pack_is_not_timed_and_skips_a_refused_k():
    report = bench_rows(["w8a16_decode", "w4a16_decode"], [(1, 256, 1000)], FakeTimingGpu())
    assert [row.name for row in report.rows] == ["cuBLAS BF16 GEMM on the dequantized weight", "w8a16_decode",
                                                 "w4a16_decode"]
    assert "takes 4-bit codes against bf16" in report.rows[1].note and report.rows[1].pct_of_int4pack is None
    assert report.rows[2].median_us is None and report.rows[2].note == "skipped: refused: K = 1000 is not a " \
                                                                       "multiple of 128"
    failed = bench_rows(["w4a16_decode"], [(1, 256, 1024)], FakeTimingGpu(int4pack_error="no kernel image\nmore"))
    assert failed.rows[-1].note == f"{quant_bench.INT4PACK}: no kernel image"


def test_bench_prints_the_table_and_writes_json(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(quant_bench, "TorchGpu", FakeTimingGpu)
    path = tmp_path / "bench.json"
    assert bench.bench_and_report([DecodeKernel()], [(1, 1024, 2048), (2, 64, 1000)], 20, 5, 0, str(path)) == 0
    out = capsys.readouterr().out
    assert out.startswith("Fake H200 | PyTorch 0.0 | dequantizing kernels")
    row = next(line for line in out.splitlines() if line.startswith("1x1024x2048      w4a16_decode"))
    moved = packed_bytes(1024, 2048, DecodeKernel().format) + 2 * 2048 + 2 * 1024
    assert row.split()[2:] == ["10.00", "0.42", f"{moved / 10e-6 / 1e9:.0f}", "200.0", "150.0", "2"]
    assert "2x64x1000        w4a16_decode" in out and "skipped: refused" in out
    assert "w4a16_decode: geometric mean 2.000x cuBLAS over 1 sizes, lowest 2.000x at 1x1024x2048 (1 skipped)" in out
    record = json.loads(path.read_text())
    assert list(record) == ["quantized"] and record["quantized"]["rows"][2]["pct_of_cublas"] == pytest.approx(200.0)


def test_bench_without_pytorch_says_so_and_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert bench.bench_and_report([DecodeKernel()], [(1, 256, 1024)], 20, 5, 0, None) == 2
    err = capsys.readouterr().err
    assert "error: PyTorch is not installed" in err and "pip install torch" in err and "Traceback" not in err


@settings(max_examples=30, deadline=None)
@given(weight=st.sampled_from(["s4", "u4"]), zeros=st.booleans(), group=st.sampled_from(quant_bench.INT4PACK_GROUPS),
       seed=st.integers(0, 2 ** 16))
def test_int4pack_s_codes_and_zeros_give_the_dequantized_weight(weight, zeros, group, seed):
    fmt = QuantFormat(weight, "bf16", group, zeros)
    assert quant_bench.int4pack_refusal(fmt) == ""
    drawn = draw_weight(numpy.random.default_rng(seed), fmt, 16, 2 * group)
    codes, zero = quant_bench.int4pack_codes(drawn, fmt)
    columns = numpy.arange(2 * group) // group
    assert codes.min() >= 0 and codes.max() <= 15
    numpy.testing.assert_allclose((codes - 8) * drawn.scales[:, columns] + zero[:, columns], drawn.dequantized(),
                                  rtol=0, atol=1e-12)


def test_int4pack_refuses_what_torch_does_not_multiply():
    for fmt in (QuantFormat("s8", "bf16", 128), QuantFormat("s4", "f16", 128), QuantFormat("s4", "bf16", None),
                QuantFormat("e4m3", "bf16", None)):
        assert quant_bench.int4pack_refusal(fmt).startswith("torch._weight_int4pack_mm takes 4-bit codes")


# --- profile -------------------------------------------------------------------------------------------------


def test_profile_compares_the_launch_and_the_packed_bytes():
    artifacts = COMPILED["w4a16_decode"]
    problem = (16, 8192, 8192)
    analysis = analyze(artifacts.spec, problem, {"registers": 80})
    config = decode_config(artifacts.spec)
    grid = config.grid(*problem)
    blocks = grid[0] * grid[1] * grid[2]
    metrics = {REGISTERS: 80.0, GRID_SIZE: float(blocks), DRAM_READ: 4.0e7}
    rows = {row.label: row for row in comparison_rows(analysis, metrics)}
    assert rows["registers per thread (nvcc ptxas)"].predicted == 80
    assert rows["registers per thread (nvcc ptxas)"].measured == 80.0
    assert grid == (1, 8192 // config.block_rows, 8192 // config.k_slice)
    assert rows[f"blocks in the grid ({grid[0]}x{grid[1]}x{grid[2]})"].predicted == blocks
    assert rows["dynamic shared memory per block"].predicted == config.smem_bytes
    dram = rows["DRAM bytes read (A, packed B)"]
    assert dram.predicted == 16 * 8192 * 2 + packed_bytes(8192, 8192, config.fmt) and dram.measured == 4.0e7
    text = format_comparison(analysis, list(rows.values()))
    assert "Shared-memory wavefronts and conflicts are not compared" in text

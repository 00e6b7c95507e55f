"""On the GPU: any shape, any layout, batches, random specs, and the host launchers.

- Checked kernels of the NN, TN, NT and TT specs and the batched one at 1x1x1, 7x13x5,
  333x517x129, 1000x1000x1000 and 4096x4096x4096, each through `verify`: packed operands
  (the scalar kernel where leading dimensions are odd), padded leading dimensions with
  alpha/beta (the vector kernel), and for the batched spec a batch of 3; against float64
  (up to 2048) and cuBLAS, C's padding and guards untouched.
- Views without copies: transposed and sliced CuPy arrays; a batch sharing one B.
- RANDOM_SPECS random valid specs (tests/spec_strategies.py) at random shapes vs float64.
- Stream-K (sgemm_h100) at shapes that split: all tiles shared, a long K over three tiles,
  ranges crossing tile boundaries, a last partial wave behind whole waves; beta = 1, which
  skips preparing C; and its C launcher.
- The C launchers (NAME_launch, _launch_ld, _launch_batched) through ctypes: right answers
  for what they take, cudaErrorInvalidValue for what they must refuse (needs nvcc).

All marked `gpu`: they skip themselves without CuPy and a GPU (tests/conftest.py).
"""
from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemmdsl import runtime
from gemmdsl.build import find_nvcc
from gemmdsl.compiler import compile_path
from gemmdsl.runtime import format_size
from gemmdsl.verify import Case, CupyArrays, check_case, format_result, random_operand, verify
from spec_strategies import spec_texts

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
SHAPES = [(1, 1, 1), (7, 13, 5), (333, 517, 129), (1000, 1000, 1000), (4096, 4096, 4096)]
CHECKED_SPECS = ["checked_v3", "layouts_tn", "layouts_nt", "layouts_tt", "batched_v3"]  # NN, TN, NT, TT, batched
# the FMA members of the tensor-core families: 16-bit operands widened to f32, and B as nn.Linear stores it
FAMILY_FMA_SPECS = ["hgemm_short_k", "hgemm_short_k_bf16c", "hgemm_short_k_f16", "sgemm_32x128_nt", "sgemm_128x32_nt",
                    "sgemm_decode_8x256", "sgemm_decode_8x256_nt"]
RANDOM_SPECS = 30
TOLERANCE = 1e-5
CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE = 0, 1

pytestmark = pytest.mark.gpu


def relative_error(actual, reference) -> float:
    import cupy

    actual, reference = actual.astype(cupy.float64), reference.astype(cupy.float64)
    return float(cupy.linalg.norm(actual - reference) / max(float(cupy.linalg.norm(reference)), 1e-30))


def product64(a, b):
    import cupy

    return cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))


@pytest.mark.parametrize("size", SHAPES, ids=format_size)
@pytest.mark.parametrize("name", CHECKED_SPECS)
def test_checked_kernels_at_every_shape_and_layout(name, size, load_kernel):
    kernel = load_kernel(SPECS / f"{name}.gemm")
    results = verify(kernel, [size], seed=sum(size))
    assert [format_result(r) for r in results if not r.passed] == []
    assert {r.case for r in results} >= {"contiguous", "padded"}
    if size in ((7, 13, 5), (333, 517, 129)):  # packed operands have odd leading dimensions
        assert [r.entry.endswith("_scalar") for r in results if r.case == "contiguous"] == [True]


@pytest.mark.parametrize("size", SHAPES + [(3766, 12361, 2), (433, 1277, 1), (12, 121, 16235), (575, 1, 18550)],
                         ids=format_size)
@pytest.mark.parametrize("name", FAMILY_FMA_SPECS)
def test_family_fma_members_at_every_shape(name, size, load_kernel):
    """16-bit operands widened to f32 in registers are checked as their own precision's GEMM (C's rounding); the
    split-K members (a few rows or columns, 1 to 8 rows) at few tiles and a long K, their shares added with atomics."""
    kernel = load_kernel(SPECS / f"{name}.gemm")
    results = verify(kernel, [size], seed=sum(size))
    assert [format_result(r) for r in results if not r.passed] == []
    assert {r.case for r in results} >= {"contiguous", "padded"}


def test_transposed_and_sliced_views_run_without_copies(load_kernel, cupy):
    kernel = load_kernel(SPECS / "layouts_tn.gemm")  # A and C column-major
    m, n, k = 300, 200, 70
    a_storage = cupy.random.uniform(-1, 1, (k, m + 6), dtype=cupy.float32)
    a = a_storage[:, :m].T  # column-major M x K, lda = m + 6, a view
    b = cupy.random.uniform(-1, 1, (k + 1, n + 4), dtype=cupy.float32)[1:, 2:n + 2]  # row-major, ldb = n + 4
    c = kernel(a, b)
    assert c.flags.f_contiguous and c.shape == (m, n)
    assert relative_error(c, product64(a, b)) < TOLERANCE
    with pytest.raises(ValueError, match="A must be col-major"):
        kernel(cupy.ascontiguousarray(a), b)


def test_a_batch_sharing_one_b(load_kernel, cupy):
    kernel = load_kernel(SPECS / "batched_v3.gemm")
    batch, m, n, k = 4, 129, 65, 33
    a = cupy.random.uniform(-1, 1, (batch, m, k), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (k, n), dtype=cupy.float32)  # one B for every GEMM (batch stride 0)
    c_storage = cupy.full((batch, m + 3, n + 8), cupy.nan, dtype=cupy.float32)
    c = c_storage[:, :m, :n]
    c_in = cupy.random.uniform(-1, 1, c.shape, dtype=cupy.float32)
    c[...] = c_in
    kernel(a, b, c, alpha=2.0, beta=0.5)
    expected = 2.0 * product64(a, b) + 0.5 * c_in.astype(cupy.float64)
    assert relative_error(c, expected) < TOLERANCE
    assert bool(cupy.isnan(c_storage[:, m:, :]).all()) and bool(cupy.isnan(c_storage[:, :, n:]).all())


# Each splits on an H100 (132 SMs, 2 blocks each): 4 tiles of 32 k-tiles over 32 blocks; 81 tiles of 64
# over 264; 3 tiles of 1000 over 264; 64 tiles of 128 over 264; 792 whole tiles then 232 shared (256
# k-tiles: at 128, 32 idle slots would save too little, schedule.LAUNCHED_MIN_SAVED_K_TILES).
STREAM_K_SHAPES = [(256, 256, 256), (1152, 1152, 512), (384, 128, 8000), (1024, 1024, 1024), (4096, 4096, 2048)]


@pytest.mark.parametrize("size", STREAM_K_SHAPES, ids=format_size)
def test_stream_k_at_shapes_that_split(size, load_kernel, cupy):
    kernel = load_kernel(SPECS / "sgemm_h100.gemm")
    m, n, k = size
    a = cupy.ones((m, k), dtype=cupy.float32)
    b = cupy.ones((k, n), dtype=cupy.float32)
    assert len(kernel.bind(a, b).launches) >= 2, "prepare C, the stream-K kernel (then the plain one)"
    results = verify(kernel, [size], seed=sum(size))
    assert [format_result(r) for r in results if not r.passed] == []


def test_short_k_does_not_split(load_kernel, cupy):
    """1152x1152x64: 81 tiles of 8 k-tiles on 264 slots; sharing them would cost two launches and
    save less than a tile's k-loop (docs/performance.md, \"Stream-K at short K\"), so the plain kernel runs them."""
    kernel = load_kernel(SPECS / "sgemm_h100.gemm")
    a = cupy.random.uniform(-1, 1, (1152, 64), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (64, 1152), dtype=cupy.float32)
    launch = kernel.bind(a, b)
    assert len(launch.launches) == 1 and launch.launches[0].grid == (81, 1, 1)
    launch()
    assert relative_error(launch.c, product64(a, b)) < TOLERANCE


def test_stream_k_can_be_turned_off_for_repeatable_results(load_kernel, cupy):
    kernel = load_kernel(SPECS / "sgemm_h100.gemm")
    a = cupy.random.uniform(-1, 1, (1024, 1024), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (1024, 1024), dtype=cupy.float32)
    launch = kernel.bind(a, b, stream_k=False)
    assert len(launch.launches) == 1 and launch.launches[0].grid == (64, 1, 1)
    launch()
    first = launch.c.copy()
    launch()
    assert bool((launch.c == first).all())
    assert relative_error(first, product64(a, b)) < TOLERANCE


def test_interior_split_can_be_turned_off_for_one_launch(load_kernel, cupy):
    """What `profile` runs: a checked spec's vector kernel over every tile, in one launch."""
    kernel = load_kernel(SPECS / "sgemm_any.gemm")
    a = cupy.random.uniform(-1, 1, (8000, 64), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (64, 8000), dtype=cupy.float32)
    # 62 x 62 interior tiles: on 132 SMs at 2 blocks, 7.3 waves per strip, so the split pays
    assert len(kernel.bind(a, b, stream_k=False).launches) == 3, "interior, right strip, bottom strip"
    launch = kernel.bind(a, b, stream_k=False, interior=False)
    assert len(launch.launches) == 1 and launch.launches[0].grid == (63 * 63, 1, 1)  # ceil(8000/128)^2 tiles
    launch()
    assert relative_error(launch.c, product64(a, b)) < TOLERANCE


def test_a_short_interior_runs_as_one_launch(load_kernel, cupy):
    """1000^3 on sgemm_any: 7 x 7 interior tiles are a fifth of a wave, and each strip would run a wave
    of its own after them (2.65x as long, docs/performance.md, \"The interior split\"), so the vector kernel takes it all."""
    kernel = load_kernel(SPECS / "sgemm_any.gemm")
    a = cupy.random.uniform(-1, 1, (1000, 1000), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (1000, 1000), dtype=cupy.float32)
    launch = kernel.bind(a, b, stream_k=False)
    assert len(launch.launches) == 1 and launch.launches[0].grid == (8 * 8, 1, 1)
    launch()
    assert relative_error(launch.c, product64(a, b)) < TOLERANCE


def test_stream_k_with_beta_one_adds_into_c(load_kernel, cupy):
    kernel = load_kernel(SPECS / "sgemm_h100.gemm")
    m, n, k = 1024, 1024, 1024
    a = cupy.random.uniform(-1, 1, (m, k), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (k, n), dtype=cupy.float32)
    c_in = cupy.random.uniform(-1, 1, (m, n), dtype=cupy.float32)
    c = c_in.copy()
    launch = kernel.bind(a, b, c, alpha=-2.0, beta=1.0)
    assert len(launch.launches) == 1, "beta = 1: C already holds beta * C, nothing to prepare"
    launch()
    assert relative_error(c, -2.0 * product64(a, b) + c_in.astype(cupy.float64)) < TOLERANCE


@st.composite
def random_cases(draw: st.DrawFn, req: runtime.KernelRequirements):
    """A size the kernel takes and how to lay the operands out."""
    if req.multiples == (1, 1, 1):
        size = tuple(draw(st.integers(1, 3 * tile + 5)) for tile in req.block_tile)
    else:
        size = tuple(tile * draw(st.integers(1, 3)) for tile in req.block_tile)
    batch = draw(st.integers(2, 3)) if req.batched and draw(st.booleans()) else 1
    case = Case("random", padded=draw(st.booleans()), batch=batch, scalars=draw(st.booleans()))
    return size, case


@settings(max_examples=RANDOM_SPECS, deadline=None, database=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                 HealthCheck.function_scoped_fixture])
@given(text=spec_texts(name="fuzzed"), data=st.data())
def test_random_specs_at_random_shapes(text, data, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path_factory.getbasetemp() / "fuzzed-cubins"))
    kernel = runtime.load("fuzzed.gemm", text=text)
    size, case = data.draw(random_cases(kernel.requirements))
    result = check_case(kernel, CupyArrays(0), size, case)
    assert result.passed, f"{format_result(result)}\n{text}"


# --- the C launchers, through ctypes --------------------------------------------------------------

LAUNCH = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_float] * 2 + [ctypes.c_void_p]
LAUNCH_LD = ([ctypes.c_void_p, ctypes.c_int] * 3 + [ctypes.c_int] * 3 + [ctypes.c_float] * 2
             + [ctypes.c_void_p])
LAUNCH_BATCHED = ([ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong] * 3 + [ctypes.c_int] * 4
                  + [ctypes.c_float] * 2 + [ctypes.c_void_p])


@pytest.fixture(scope="module")
def launchers(tmp_path_factory):
    """spec name -> the spec's .cu built as a shared library (kernels and launchers)."""
    if find_nvcc() is None:
        pytest.skip("nvcc not on PATH: the launchers are host code")
    libraries = {}

    def load(name: str) -> ctypes.CDLL:
        if name not in libraries:
            artifacts = compile_path(SPECS / f"{name}.gemm")
            directory = tmp_path_factory.mktemp(name)
            (directory / f"{name}.cu").write_text(artifacts.cuda)
            subprocess.run([find_nvcc(), f"-arch={artifacts.spec.target}", "-shared", "-Xcompiler", "-fPIC",
                            "-o", f"lib{name}.so", f"{name}.cu"], cwd=directory, check=True, capture_output=True)
            library = ctypes.CDLL(str(directory / f"lib{name}.so"))
            for suffix, argtypes in (("launch", LAUNCH), ("launch_ld", LAUNCH_LD), ("launch_batched", LAUNCH_BATCHED)):
                if hasattr(library, f"{name}_{suffix}"):
                    function = getattr(library, f"{name}_{suffix}")
                    function.argtypes, function.restype = argtypes, ctypes.c_int
            libraries[name] = library
        return libraries[name]

    return load


def run(function, *arguments) -> int:
    import cupy

    pointers = [a.data.ptr if isinstance(a, cupy.ndarray) else a for a in arguments]
    status = function(*pointers, None)
    cupy.cuda.runtime.deviceSynchronize()
    return status


def test_launch_takes_any_shape_of_a_checked_kernel(launchers, cupy):
    library = launchers("checked_v3")
    m, n, k = 333, 517, 129
    a = cupy.random.uniform(-1, 1, (m, k), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (k, n), dtype=cupy.float32)
    c = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
    assert run(library.checked_v3_launch, a, b, c, m, n, k, 1.0, 0.0) == CUDA_SUCCESS  # lda = 129: scalar kernel
    assert relative_error(c, product64(a, b)) < TOLERANCE
    wide = cupy.full((m, n + 7), cupy.nan, dtype=cupy.float32)
    assert run(library.checked_v3_launch_ld, a, k, b, n, wide, n + 7, m, n, k, 1.0, 0.0) == CUDA_SUCCESS
    assert relative_error(wide[:, :n], product64(a, b)) < TOLERANCE and bool(cupy.isnan(wide[:, n:]).all())
    assert run(library.checked_v3_launch_ld, a, k - 1, b, n, c, n, m, n, k, 1.0, 0.0) == CUDA_ERROR_INVALID_VALUE


def test_exact_launchers_refuse_what_they_cannot_take(launchers, cupy):
    library = launchers("sgemm_v3")
    a = cupy.random.uniform(-1, 1, (256, 16), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (16, 128), dtype=cupy.float32)
    c = cupy.zeros((256, 128), dtype=cupy.float32)
    assert run(library.sgemm_v3_launch, a, b, c, 256, 128, 16, 1.0, 0.0) == CUDA_SUCCESS
    assert relative_error(c, product64(a, b)) < TOLERANCE
    assert run(library.sgemm_v3_launch, a, b, c, 200, 128, 16, 1.0, 0.0) == CUDA_ERROR_INVALID_VALUE  # not whole tiles
    padded = cupy.zeros((256, 17), dtype=cupy.float32)
    assert run(library.sgemm_v3_launch_ld, padded, 17, b, 128, c, 128, 256, 128, 16, 1.0, 0.0) \
        == CUDA_ERROR_INVALID_VALUE  # lda 17: float4 loads would be misaligned
    offset = cupy.zeros(256 * 16 + 1, dtype=cupy.float32)[1:]
    assert run(library.sgemm_v3_launch, offset, b, c, 256, 128, 16, 1.0, 0.0) == CUDA_ERROR_INVALID_VALUE


@pytest.mark.parametrize("beta", [0.0, 1.0, -0.5])
def test_stream_k_launcher(launchers, cupy, beta):
    library = launchers("sgemm_h100")
    m, n, k = 1152, 1152, 64  # 81 tiles shared by 162 blocks on an H100
    a = cupy.random.uniform(-1, 1, (m, k), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (k, n), dtype=cupy.float32)
    c_in = cupy.random.uniform(-1, 1, (m, n), dtype=cupy.float32)
    c = c_in.copy()
    assert run(library.sgemm_h100_launch, a, b, c, m, n, k, 1.5, beta) == CUDA_SUCCESS
    assert relative_error(c, 1.5 * product64(a, b) + beta * c_in.astype(cupy.float64)) < TOLERANCE
    assert run(library.sgemm_h100_launch, a, b, c, m, n, 60, 1.5, beta) == CUDA_ERROR_INVALID_VALUE


def test_batched_launcher(launchers, cupy):
    library = launchers("batched_v3")
    batch, m, n, k = 3, 70, 90, 21
    a = cupy.random.uniform(-1, 1, (batch, m, k), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (batch, k, n), dtype=cupy.float32)
    c = cupy.full((batch, m, n), cupy.nan, dtype=cupy.float32)
    status = run(library.batched_v3_launch_batched, a, k, m * k, b, n, k * n, c, n, m * n, m, n, k, batch, 1.0, 0.0)
    assert status == CUDA_SUCCESS
    assert relative_error(c, product64(a, b)) < TOLERANCE
    assert run(library.batched_v3_launch_batched, a, k, m * k, b, n, k * n, c, n, m * n, m, n, k, 0, 1.0, 0.0) \
        == CUDA_ERROR_INVALID_VALUE


def test_column_major_launch_passes_natural_leading_dimensions(launchers, cupy):
    library = launchers("layouts_tt")  # A, B, C column-major: lda = M, ldb = K, ldc = M
    m, n, k = 77, 45, 19
    a = cupy.asfortranarray(cupy.random.uniform(-1, 1, (m, k), dtype=cupy.float32))
    b = cupy.asfortranarray(cupy.random.uniform(-1, 1, (k, n), dtype=cupy.float32))
    c = cupy.asfortranarray(cupy.full((m, n), cupy.nan, dtype=cupy.float32))
    assert run(library.layouts_tt_launch, a, b, c, m, n, k, 1.0, 0.0) == CUDA_SUCCESS
    assert relative_error(c, product64(a, b)) < TOLERANCE


def test_random_operands_are_laid_out_as_asked(cupy):
    column = random_operand(CupyArrays(1), "f32", "col", 5, 3, padded=True, batch=2)
    assert column.shape == (2, 5, 3) and column.strides[-2:] == (4, 4 * 16)
    assert numpy.isfinite(cupy.asnumpy(column)).all()

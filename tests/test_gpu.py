"""The runtime, verifier and benchmark.

Tests marked `gpu` run the generated kernels through CuPy and skip themselves
without a GPU (tests/conftest.py). The rest exercise the pure parts on the CPU:
argument checks on fake arrays, the binary cache with a fake compiler, size
parsing, pass/fail rules and the report formats.
"""
import argparse
import io
import itertools
import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy
import pytest

from gemmdsl import arrays, runtime
from gemmdsl.bench import (BenchReport, Progress, Row, add_bench_arguments, buffer_sets, check_runs, format_table,
                           matrix_bytes, tflops_of)
from gemmdsl.bench import write_json as write_bench_json
from gemmdsl.arrays import array_view, leading_dimension
from gemmdsl.launch_plan import Entries, LaunchPlan
from gemmdsl.launch_plan import Requirements as LaunchRequirements
from gemmdsl.runtime import (BinaryCache, GpuUnavailable, KernelRequirements, build_target, cache_key,
                             check_call, check_no_overlap, operand_view, parse_sizes, parse_target)
from fake_arrays import FakeDLPack, cuda_array
from gemmdsl.verify import Error, Result, add_verify_arguments, format_result, scalar_cases, verify_main

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.gemm"))
ROWS = {"A": "row", "B": "row", "C": "row"}


def launch_plan(multiple: int = 128, scalar_entry: str | None = None, vector: int = 4) -> LaunchPlan:
    """A 128x128x8 tile's launch plan: shape multiples of `multiple` (1: checked), `vector` elements' alignment."""
    requirements = LaunchRequirements(multiple, multiple, 8 if multiple > 1 else 1, dict.fromkeys("abc", vector),
                                      {"a": 2 ** 24 - 1, "b": 2 ** 28 - 1, "c": 2 ** 31 - 1})
    return LaunchPlan(Entries("sgemm_test_kernel", scalar_entry), (), {}, 256, 0, (128, 128, 8), ("tiles", 1, 1),
                      requirements, None)


ALPHA_BETA = KernelRequirements(kernel="sgemm_test", epilogue="alpha_beta", layouts=ROWS, batched=False,
                                launch=launch_plan())
STORE = replace(ALPHA_BETA, epilogue="store")
CHECKED = replace(ALPHA_BETA, launch=launch_plan(1, "sgemm_test_kernel_scalar"))
BATCHED = replace(CHECKED, batched=True)
TRANSPOSED_A = replace(CHECKED, layouts=ROWS | {"A": "col", "C": "col"})
M, N, K = 256, 384, 64
BASE = 0x7F0000000000
REGIONS = itertools.count(BASE, 1 << 36)  # each fake array its own allocation, so none overlap by accident


def fake_matrix(rows, cols, dtype=numpy.float32, strides=None, batch=None, offset=0):
    """The view check_call gets of a GPU array (row-major by default; byte strides as the array interface
    gives them), in an allocation of its own, `offset` bytes in."""
    shape = (rows, cols) if batch is None else (batch, rows, cols)
    return array_view("X", cuda_array(shape, numpy.dtype(dtype).str, strides, next(REGIONS) + offset))


def column_major(rows, cols, ld=None):
    """A transposed view: element (r, c) at c * ld + r."""
    return fake_matrix(rows, cols, strides=(4, (ld or rows) * 4))


def operands(**changes):
    """A valid A, B, C triple for ALPHA_BETA with some operands replaced."""
    return {"a": fake_matrix(M, K), "b": fake_matrix(K, N), "c": fake_matrix(M, N)} | changes


# ---------------------------------------------------------------------------
# Argument checks (CPU)


def test_valid_call_returns_problem_size_and_kernel():
    call = check_call(ALPHA_BETA, **operands(), alpha=1.5, beta=-0.5)
    assert (call.size, call.batch, call.entry) == ((M, N, K), 1, "sgemm_test_kernel")
    assert [call.views[name].ld for name in "ABC"] == [K, N, N]
    assert check_call(STORE, **operands(c=None), alpha=1.0, beta=0.0).size == (M, N, K)


@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_wrong_dtype_is_a_type_error_naming_the_operand(operand):
    shapes = {"a": (M, K), "b": (K, N), "c": (M, N)}
    bad = {operand: fake_matrix(*shapes[operand], dtype=numpy.float64)}
    with pytest.raises(TypeError, match=f"{operand.upper()} must be float32, got float64"):
        check_call(ALPHA_BETA, **operands(**bad), alpha=1.0, beta=0.0)


def test_matrix_must_be_2d():
    vector = array_view("A", cuda_array((M * K,), ptr=BASE))
    with pytest.raises(ValueError, match="A must be a 2-D matrix"):
        check_call(ALPHA_BETA, **operands(a=vector), alpha=1.0, beta=0.0)


def test_a_batch_needs_a_batched_kernel():
    with pytest.raises(ValueError, match="A is a batch of matrices .* not batched; compile a spec with `batch: str"):
        check_call(CHECKED, **operands(a=fake_matrix(M, K, batch=2)), alpha=1.0, beta=0.0)


def test_transposed_view_is_not_row_major():
    with pytest.raises(ValueError, match="B must be row-major: sgemm_test was compiled with `b: f32 row`"):
        check_call(ALPHA_BETA, **operands(b=column_major(K, N)), alpha=1.0, beta=0.0)


def test_column_major_kernels_take_transposed_views_and_refuse_row_major_ones():
    call = check_call(TRANSPOSED_A, a=column_major(M, K, ld=M + 4), b=fake_matrix(K, N), c=column_major(M, N),
                      alpha=1.0, beta=0.0)
    assert (call.views["A"].ld, call.views["C"].ld) == (M + 4, M)
    with pytest.raises(ValueError, match="A must be col-major.*pass a transposed view"):
        check_call(TRANSPOSED_A, **operands(c=column_major(M, N)), alpha=1.0, beta=0.0)


def test_row_pitch_wider_than_a_row_is_the_leading_dimension():
    padded = fake_matrix(M, K, strides=((K + 8) * 4, 4))
    assert check_call(ALPHA_BETA, **operands(a=padded), alpha=1.0, beta=0.0).views["A"].ld == K + 8


def test_leading_dimension_from_strides():
    assert leading_dimension((8, 8), (10, 1), "row") == 10
    assert leading_dimension((8, 8), (1, 10), "col") == 10
    assert leading_dimension((8, 8), (10, 1), "col") is None
    assert leading_dimension((8, 8), (4, 1), "row") is None  # rows would overlap
    # one row: any ld >= 7; a multiple of 16 elements keeps vectors and TMA's 16 bytes aligned for any element size
    assert leading_dimension((1, 7), (999, 1), "row") == 16
    assert leading_dimension((1, 6489), (6489, 1), "row") == 6496  # a decode call's A, read in place by TMA
    assert leading_dimension((9, 1), (1, 999), "col") == 16
    assert leading_dimension((9, 1), (1, 999), "row") == 1  # a column vector is row-major with ld 1


def test_inner_dimensions_must_agree():
    with pytest.raises(ValueError, match=f"inner dimensions disagree: A is {M}x{K} .* B is {2 * K}x{N}"):
        check_call(ALPHA_BETA, **operands(b=fake_matrix(2 * K, N)), alpha=1.0, beta=0.0)


def test_c_must_be_m_by_n():
    with pytest.raises(ValueError, match=f"C must be MxN = {M}x{N}, got {N}x{M}"):
        check_call(ALPHA_BETA, **operands(c=fake_matrix(N, M)), alpha=1.0, beta=0.0)


@pytest.mark.parametrize("m, n, k, message", [
    (200, N, K, "M=200 is not a multiple of the block tile's BM=128"),
    (M, 100, K, "N=100 is not a multiple of the block tile's BN=128"),
    (M, N, 12, "K=12 is not a multiple of the block tile's BK=8"),
])
def test_exact_kernels_take_whole_tiles_only(m, n, k, message):
    arrays = {"a": fake_matrix(m, k), "b": fake_matrix(k, n), "c": fake_matrix(m, n)}
    with pytest.raises(ValueError, match=message):
        check_call(ALPHA_BETA, **arrays, alpha=1.0, beta=0.0)


@pytest.mark.parametrize("m, n, k, entry", [
    (0, N, K, None), (M, 0, K, None), (0, 0, 0, None),  # C has no elements: nothing to launch
    (M, N, 0, "sgemm_test_scale_c"), (200, 100, 0, "sgemm_test_scale_c"),  # K = 0: C = beta * C; no multiples
    (0, 100, 12, None),
])
def test_empty_problems_launch_nothing_or_the_k0_kernel_whatever_the_multiples(m, n, k, entry):
    exact = replace(ALPHA_BETA, launch=replace(ALPHA_BETA.launch, entries=Entries("sgemm_test_kernel",
                                                                                   scale_c="sgemm_test_scale_c")))
    # Pointers one element off (no vector access is aligned) and odd leading dimensions: an empty problem runs no
    # GEMM kernel, so none of it matters.
    arrays = {"a": fake_matrix(m, k, offset=4), "b": fake_matrix(k, n, offset=4), "c": fake_matrix(m, n)}
    call = check_call(exact, **arrays, alpha=2.0, beta=0.5)
    assert (call.size, call.entry) == ((m, n, k), entry)


def test_an_empty_matrix_gets_the_contiguous_leading_dimension_whatever_its_strides():
    assert leading_dimension((0, 70), (123, 7), "row") == 70
    assert leading_dimension((300, 0), (0, 0), "row") == 1
    assert leading_dimension((0, 300), (5, 5), "col") == 1


def test_empty_problem_on_the_gpu_side(fake_gpu):
    """M = 0: the new C is empty and nothing launches (an empty array's null pointer names no GPU); K = 0: one
    launch of the K = 0 kernel on C with beta, whatever the GEMM kernels would demand of the operands."""
    kernel = runtime.load(ROOT / "specs" / "hgemm_h100_f16.gemm")  # TMA: 16-byte aligned A and B, else refused
    a, b = cuda_array((0, 70), "<f2", ptr=0), cuda_array((70, 200), "<f2", strides=(2, 140), ptr=next(REGIONS) + 2)
    c = kernel(a, b)
    assert c.__cuda_array_interface__["shape"] == (0, 200) and not fake_gpu
    a, b = cuda_array((300, 0), "<f2", ptr=0), cuda_array((0, 200), "<f2", ptr=0)
    c = cuda_array((300, 200), "<f2", strides=(2 * 203, 2), ptr=next(REGIONS) + 2)
    assert kernel(a, b, c, alpha=3.0, beta=0.5) is c
    (launch,) = fake_gpu
    assert launch.entry == "hgemm_h100_f16_scale_c"
    assert [float(x) for x in launch.args] == [c.__cuda_array_interface__["data"][0], 300, 200, 203, 0.5]
    assert launch.grid == (-(-300 * 200 // 256), 1, 1)


def test_a_fused_kernel_applies_its_chain_at_k0(fake_gpu):
    """K = 0 is a zero accumulator: the chain's operands follow beta, as in the GEMM kernels' epilogue."""
    kernel = runtime.load(ROOT / "specs" / "sgemm_fused.gemm")
    a, b, c = cuda_array((64, 0), ptr=0), cuda_array((0, 48), ptr=0), cuda_array((64, 48), ptr=next(REGIONS))
    bias, residual = vector(64), cuda_array((64, 48), ptr=next(REGIONS))
    kernel(a, b, c, 1.0, 0.0, bias=bias, residual=residual)
    (launch,) = fake_gpu
    assert launch.entry == "sgemm_fused_scale_c"
    assert [int(x) for x in launch.args[5:]] == [bias.__cuda_array_interface__["data"][0],
                                                 residual.__cuda_array_interface__["data"][0], 48]


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (7, 13, 5), (333, 517, 129)])
def test_checked_kernels_take_any_shape(m, n, k):
    arrays = {"a": fake_matrix(m, k), "b": fake_matrix(k, n), "c": fake_matrix(m, n)}
    assert check_call(CHECKED, **arrays, alpha=1.0, beta=0.0).size == (m, n, k)


@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_exact_kernels_refuse_misaligned_pointers(operand):
    shapes = {"a": (M, K), "b": (K, N), "c": (M, N)}
    bad = {operand: fake_matrix(*shapes[operand], offset=4)}
    with pytest.raises(ValueError, match=f"{operand.upper()}'s data pointer 0x[0-9a-f]*4 is not 16-byte aligned"):
        check_call(ALPHA_BETA, **operands(**bad), alpha=1.0, beta=0.0)


def test_checked_kernels_run_the_scalar_kernel_for_unaligned_operands():
    odd = {"a": fake_matrix(7, 5), "b": fake_matrix(5, 12), "c": fake_matrix(7, 12)}
    assert check_call(CHECKED, **odd, alpha=1.0, beta=0.0).entry == "sgemm_test_kernel_scalar"  # lda = 5
    shifted = operands(c=fake_matrix(M, N, offset=8))
    assert check_call(CHECKED, **shifted, alpha=1.0, beta=0.0).entry == "sgemm_test_kernel_scalar"
    assert check_call(CHECKED, **operands(), alpha=1.0, beta=0.0).entry == "sgemm_test_kernel"
    with pytest.raises(ValueError, match="A's leading dimension 5 is not a multiple of 4; .* no scalar fallback"):
        check_call(replace(ALPHA_BETA, launch=launch_plan(1)), **odd, alpha=1.0, beta=0.0)


def test_dimensions_whose_tile_coordinates_overflow_are_refused():
    big = 2 ** 31 - 100
    with pytest.raises(ValueError, match=f"M={big} is more than {2 ** 31 - 1 - 128}: the kernels' tile coordinates"):
        check_call(CHECKED, a=fake_matrix(big, 1), b=fake_matrix(1, 1), c=None, alpha=1.0, beta=0.0)


def test_leading_dimensions_beyond_32_bit_tile_offsets_are_refused():
    wide = fake_matrix(M, K, strides=(2 ** 24 * 4, 4))
    with pytest.raises(ValueError, match="A's leading dimension 16777216 is more than the 16777215"):
        check_call(ALPHA_BETA, **operands(a=wide), alpha=1.0, beta=0.0)


def test_batched_call():
    batch = {"a": fake_matrix(M, K, batch=3), "b": fake_matrix(K, N), "c": fake_matrix(M, N, batch=3)}
    call = check_call(BATCHED, **batch, alpha=1.0, beta=0.0)
    assert call.batch == 3
    assert [call.views[name].batch_stride for name in "ABC"] == [M * K, 0, M * N]  # B is shared
    assert BATCHED.launch.grid_for(M, N, K, call.batch, sms=132) == (2 * 3, 1, 3)


def test_batches_must_agree_and_not_overlap_in_c():
    with pytest.raises(ValueError, match="batch sizes disagree: A 3, B 2"):
        check_call(BATCHED, a=fake_matrix(M, K, batch=3), b=fake_matrix(K, N, batch=2), c=None, alpha=1.0, beta=0.0)
    shared_c = fake_matrix(M, N, batch=3, strides=(0, N * 4, 4))
    with pytest.raises(ValueError, match="C's 3 matrices overlap"):
        check_call(BATCHED, a=fake_matrix(M, K, batch=3), b=fake_matrix(K, N), c=shared_c, alpha=1.0, beta=0.0)


@pytest.mark.parametrize("alpha, beta", [(2.0, 0.0), (1.0, 0.5)])
def test_store_epilogue_takes_no_scalars(alpha, beta):
    with pytest.raises(ValueError, match="'store' epilogue"):
        check_call(STORE, **operands(), alpha=alpha, beta=beta)


def test_nonzero_beta_needs_c():
    with pytest.raises(ValueError, match="beta=0.5 reads C, but no C was passed"):
        check_call(ALPHA_BETA, **operands(c=None), alpha=1.0, beta=0.5)


def test_grid_has_one_block_per_c_tile_edges_included():
    assert ALPHA_BETA.launch.grid_for(1024, 512, 64, 1, sms=132) == (8 * 4, 1, 1)
    assert CHECKED.launch.grid_for(333, 517, 64, 1, sms=132) == (3 * 5, 1, 1)


def test_operands_have_the_element_type_the_metadata_names():
    half_a = replace(ALPHA_BETA, dtypes={"A": "float16", "B": "bfloat16", "C": "float32"})
    call = check_call(half_a, a=fake_matrix(M, K, dtype=numpy.float16), b=bf16_matrix(K, N), c=fake_matrix(M, N),
                      alpha=1.0, beta=0.0)
    assert (call.views["A"].itemsize, call.views["B"].itemsize, call.views["C"].itemsize) == (2, 2, 4)
    with pytest.raises(TypeError, match="B must be bfloat16, got float16"):
        check_call(half_a, a=fake_matrix(M, K, dtype=numpy.float16), b=fake_matrix(K, N, dtype=numpy.float16),
                   c=None, alpha=1.0, beta=0.0)


def test_half_precision_alignment_is_counted_in_bytes():
    half = replace(ALPHA_BETA, dtypes=dict.fromkeys("ABC", "float16"), launch=launch_plan(vector=8))
    halves = {"a": fake_matrix(M, K, dtype=numpy.float16), "b": fake_matrix(K, N, dtype=numpy.float16)}
    assert check_call(half, **halves, c=None, alpha=1.0, beta=0.0).entry == "sgemm_test_kernel"
    with pytest.raises(ValueError, match="A's data pointer .* is not 16-byte aligned"):
        check_call(half, **halves | {"a": fake_matrix(M, K, dtype=numpy.float16, offset=8)}, c=None, alpha=1.0,
                   beta=0.0)


def bf16_matrix(rows, cols):
    """A bfloat16 matrix as DLPack describes it (the array interface has no bfloat16)."""
    return array_view("B", FakeDLPack((rows, cols), arrays.DL_BFLOAT, 16, next(REGIONS)))


def test_metadata_without_dtypes_means_float32():
    metadata = {"kernel": "k", "epilogue": "store", "batch": "none", "layouts": dict.fromkeys("abc", "row"),
                "launch": launch_plan().to_json()}
    assert KernelRequirements.from_metadata(metadata).dtypes == dict.fromkeys("ABC", "float32")
    typed = KernelRequirements.from_metadata(metadata | {"dtypes": {"a": "bf16", "b": "bf16", "c": "f32"}})
    assert typed.dtypes == {"A": "bfloat16", "B": "bfloat16", "C": "float32"}


# ---------------------------------------------------------------------------
# C may not overlap A, B or itself (CPU)


def views_at(a_ptr, b_ptr, c_ptr, batch=None, c_strides=None, a_strides=None):
    """A, B, C views of ALPHA_BETA's shapes (or BATCHED's with `batch`) at these addresses."""
    shape = lambda rows, cols: (rows, cols) if batch is None else (batch, rows, cols)  # noqa: E731
    made = {name: array_view(name, cuda_array(shape(rows, cols), ptr=ptr, strides=strides))
            for name, rows, cols, ptr, strides in (("A", M, K, a_ptr, a_strides), ("B", K, N, b_ptr, None),
                                                   ("C", M, N, c_ptr, c_strides))}
    req = ALPHA_BETA if batch is None else BATCHED
    return req, {name: operand_view(req, name, view) for name, view in made.items()}


def test_c_overlapping_a_or_b_is_refused():
    for a_ptr, b_ptr, c_ptr, overlapped in ((BASE, BASE + 2 ** 30, BASE + 4 * M * K - 16, "A"),  # C's head in A's tail
                                            (BASE, BASE + 2 ** 30, BASE + 2 ** 30, "B"),  # C is B
                                            (BASE + 2 ** 30, BASE, BASE - 16, "B")):  # B's head in C's tail
        req, views = views_at(a_ptr, b_ptr, c_ptr)
        with pytest.raises(ValueError, match=f"C overlaps {overlapped}: C spans bytes"):
            check_no_overlap(req, views)


def test_adjacent_buffers_and_reads_that_overlap_are_accepted():
    req, views = views_at(BASE, BASE + 4 * M * K, BASE + 4 * (M * K + K * N))  # A, B, C back to back
    check_no_overlap(req, views)
    req, views = views_at(BASE, BASE, BASE + 2 ** 30)  # A and B the same memory: read twice
    check_no_overlap(req, views)
    req, views = views_at(BASE, BASE + 2 ** 30, BASE + 2 ** 31, batch=3, a_strides=(0, K * 4, 4))  # one A for all
    check_no_overlap(req, views)


def test_batched_c_overlapping_itself_or_a_is_refused():
    req, views = views_at(BASE, BASE + 2 ** 30, BASE + 2 ** 31, batch=3, c_strides=(N * 4 * (M - 1), N * 4, 4))
    with pytest.raises(ValueError, match="C's 3 matrices overlap"):
        check_no_overlap(req, views)
    req, views = views_at(BASE, BASE + 2 ** 30, BASE + 4 * 2 * M * K, batch=3)  # C's start in A's third matrix
    with pytest.raises(ValueError, match="C overlaps A"):
        check_no_overlap(req, views)


def test_check_call_refuses_c_that_is_a():
    a = fake_matrix(M, M)
    with pytest.raises(ValueError, match="C overlaps A"):
        check_call(replace(CHECKED, epilogue="store"), a=a, b=fake_matrix(M, M), c=a, alpha=1.0, beta=0.0)


# ---------------------------------------------------------------------------
# Targets, streams, compilers (CPU)


@pytest.mark.parametrize("target, device, built", [("sm_90", "90", "sm_90"), ("sm_80", "86", "sm_86"),
                                                    ("sm_80", "90", "sm_90"), ("sm_86", "89", "sm_89"),
                                                    ("sm_90", "100", "sm_100"), ("sm_90a", "90", "sm_90a")])
def test_a_spec_is_built_for_a_gpu_as_new_as_its_target_or_newer(target, device, built):
    assert build_target(target, device) == built


@pytest.mark.parametrize("target, device", [("sm_86", "80"), ("sm_90", "89")])
def test_a_gpu_older_than_the_target_is_refused(target, device):
    with pytest.raises(GpuUnavailable, match=f"targets {target}, but this GPU is sm_{device}, which is older"):
        build_target(target, device)


def test_arch_specific_targets_run_only_on_their_arch():
    assert parse_target("sm_90a") == (90, True) and parse_target("sm_80") == (80, False)
    with pytest.raises(GpuUnavailable, match="sm_90a, whose arch-specific code runs only on sm_90 GPUs.*sm_100"):
        build_target("sm_90a", "100")
    with pytest.raises(ValueError, match="unsupported target 'compute_90'"):
        parse_target("compute_90")


def test_compiler_follows_the_environment(monkeypatch):
    monkeypatch.setenv("GEMMDSL_COMPILER", "nvrtc")
    assert runtime.chosen_compiler() == "nvrtc"
    monkeypatch.setenv("GEMMDSL_COMPILER", "NVCC")
    assert runtime.chosen_compiler() == "nvcc"
    monkeypatch.setenv("GEMMDSL_COMPILER", "clang")
    with pytest.raises(runtime.KernelBuildError, match="GEMMDSL_COMPILER='clang': expected nvcc, nvrtc or auto"):
        runtime.chosen_compiler()
    monkeypatch.setenv("GEMMDSL_COMPILER", "")
    monkeypatch.setattr(runtime.binaries.shutil, "which", lambda name: None)
    assert runtime.chosen_compiler() == "nvrtc"


def test_requirements_come_from_the_compilers_metadata():
    compiler = pytest.importorskip("gemmdsl.compiler")
    metadata = compiler.compile_path(ROOT / "specs" / "sgemm_v1.gemm").metadata
    requirements = KernelRequirements.from_metadata(metadata)
    assert requirements.multiples == requirements.block_tile == tuple(metadata["block_tile"])
    assert requirements.launch.requirements.vector_elements == {"a": 4, "b": 4, "c": 4}
    assert requirements.epilogue == metadata["epilogue"]
    assert (requirements.launch.entries.scalar, requirements.batched) == (None, False)
    checked = KernelRequirements.from_metadata(compiler.compile_path(ROOT / "specs" / "layouts_tn.gemm").metadata)
    assert checked.multiples == (1, 1, 1) and checked.launch.entries.scalar == "layouts_tn_kernel_scalar"
    assert checked.layouts == {"A": "col", "B": "row", "C": "col"}


def test_load_rejects_what_is_not_a_spec():
    pytest.importorskip("gemmdsl.compiler")
    with pytest.raises(TypeError, match="load\\(\\) takes a .gemm path"):
        runtime.compile_spec(42)


# ---------------------------------------------------------------------------
# Kernel objects over a fake CuPy (CPU): what the launch is given, without a GPU


class FakeStream:
    """What launches and cupy.cuda.Stream.from_external deal in: a handle."""

    def __init__(self, ptr):
        self.ptr = ptr

    @classmethod
    def from_external(cls, obj):
        return cls(obj.__cuda_stream__()[1])


class FakeDevice:
    def __init__(self, state, id, compute_capability):
        self.state, self.id, self.compute_capability = state, id, compute_capability
        self.attributes = {"MultiProcessorCount": 132}

    def __enter__(self):
        self.previous, self.state.current = self.state.current, self.id
        return self

    def __exit__(self, *exc):
        self.state.current = self.previous
        return False


class FakeDriver:
    """runtime's libcuda: records each launch with the device current when it was queued."""

    def __init__(self, state, launches):
        self.state, self.launches = state, launches

    def launch(self, launch, stream):
        self.launches.append(SimpleNamespace(entry=launch.function.name, grid=launch.grid, args=launch.args,
                                             stream=stream, device=self.state.current,
                                             module_device=self.state.handles[launch.function.handle]))

    def handle_device(self, handle):
        return None


def fake_cupy(launches, compute_capability="90", current_stream=0x77, state=None):
    """A CuPy whose kernels record their launches and whose arrays are __cuda_array_interface__ fakes;
    `state.current` is the current device, `state.loads` the devices modules were loaded on, `state.handles`
    the device of each function handle."""
    state = state or SimpleNamespace(current=0, loads=[], handles={})

    class Function:
        num_regs, max_dynamic_shared_size_bytes = 128, 0

        def __init__(self, name):
            self.name, self.kernel = name, SimpleNamespace(ptr=id(self))
            state.handles[id(self)] = state.current

    def raw_module(path):
        state.loads.append(state.current)
        return SimpleNamespace(get_function=Function)

    def set_device(device):
        state.current = device

    cuda = SimpleNamespace(Device=lambda id=None: FakeDevice(state, state.current if id is None else id,
                                                             compute_capability),
                           Stream=FakeStream, get_current_stream=lambda: FakeStream(current_stream),
                           runtime=SimpleNamespace(pointerGetAttributes=lambda ptr: SimpleNamespace(type=2, device=0),
                                                   getDevice=lambda: state.current, setDevice=set_device,
                                                   getDeviceCount=lambda: 2, CUDARuntimeError=RuntimeError))
    return SimpleNamespace(__version__="14.2.0", cuda=cuda, RawModule=raw_module,
                           empty=lambda shape, dtype: cuda_array(shape, numpy.dtype(dtype).str, ptr=next(REGIONS)))


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """Install a fake CuPy for compute capability 9.0, a fake driver and a compiler that returns bytes;
    the launches, with `.state` the fake's device state."""
    pytest.importorskip("gemmdsl.compiler")
    state = SimpleNamespace(current=0, loads=[], handles={})
    launches = RecordedLaunches(state)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(launches, state=state))
    monkeypatch.setattr(runtime.driver, "cuda_driver", lambda: FakeDriver(state, launches))
    # runtime keeps the CuPy runtime module it first imported: this test's fake, not an earlier test's.
    monkeypatch.setattr(runtime.driver, "cuda_runtime", lambda: sys.modules["cupy"].cuda.runtime)
    monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path))
    monkeypatch.setattr(runtime.kernel, "compile_cubin", lambda source, target, compiler=None: f"cubin {target}".encode())
    return launches


class RecordedLaunches(list):
    """The fake driver's launches, with the fake CuPy's device state beside them."""

    def __init__(self, state):
        super().__init__()
        self.state = state


def test_kernel_launches_on_the_callers_pointers_and_stream(fake_gpu):
    kernel = runtime.load(ROOT / "specs" / "checked_v3.gemm")
    a, b, c = (cuda_array(shape, ptr=next(REGIONS)) for shape in ((300, 70), (70, 200), (300, 200)))
    assert kernel(a, b, c, alpha=2.0, beta=-1.0) is c
    (launch,) = fake_gpu
    pointers = [x.__cuda_array_interface__["data"][0] for x in (a, b, c)]
    assert [int(arg) for arg in launch.args[:9]] == pointers + [300, 200, 70, 70, 200, 200]
    assert launch.stream == 0x77 and launch.entry == "checked_v3_kernel_scalar"  # ld 70: the scalar kernel
    made = kernel.bind(a, b)
    assert int(made.launches[0].args[2]) == made.c.__cuda_array_interface__["data"][0]
    made(stream=0x99)
    assert fake_gpu[-1].stream == 0x99


def test_stream_k_launches_prepare_c_at_cs_pointer(fake_gpu):
    kernel = runtime.load(ROOT / "specs" / "sgemm_h100.gemm")
    a, b = cuda_array((256, 256), ptr=next(REGIONS)), cuda_array((256, 256), ptr=next(REGIONS))
    launch = kernel.bind(a, b)
    c_pointer = launch.c.__cuda_array_interface__["data"][0]
    assert [int(x.args[0]) for x in launch.launches[:2]] == [c_pointer, a.__cuda_array_interface__["data"][0]]
    assert launch.launches[0].function.name == "sgemm_h100_prepare_c"


def test_stream_k_splits_calls_on_the_scalar_kernel_on_its_scalar_twin(fake_gpu):
    kernel = runtime.load(ROOT / "specs" / "sgemm_any.gemm")
    a, b = cuda_array((300, 700), ptr=next(REGIONS)), cuda_array((700, 201), ptr=next(REGIONS))  # ldb 201: scalar
    launch = kernel.bind(a, b)
    assert launch.entry == "sgemm_any_kernel_scalar"
    # 6 tiles of 88 k-tiles, fewer than the GPU's slots: every tile is shared
    assert [x.function.name for x in launch.launches] == ["sgemm_any_prepare_c", "sgemm_any_kernel_stream_k_scalar"]


def test_kernel_for_an_older_target_is_built_for_this_gpu(fake_gpu, tmp_path, capsys):
    from gemmdsl.compiler import compile_path

    kernel = runtime.load(compile_path(ROOT / "specs" / "checked_v3.gemm", 80))
    assert capsys.readouterr().err == "note: checked_v3 targets sm_80; built for this GPU's sm_90\n"
    assert kernel.built_for == "sm_90" and "built for sm_90" in repr(kernel)
    (cubin,) = tmp_path.glob("*.cubin")
    assert cubin.name.startswith("checked_v3-sm_90-") and cubin.read_bytes() == b"cubin sm_90"


def test_kernel_refuses_c_that_is_read_only(fake_gpu):
    kernel = runtime.load(ROOT / "specs" / "checked_v3.gemm")
    a, b = cuda_array((64, 64), ptr=next(REGIONS)), cuda_array((64, 64), ptr=next(REGIONS))
    with pytest.raises(TypeError, match="C is read-only"):
        kernel(a, b, cuda_array((64, 64), ptr=next(REGIONS), readonly=True))


def devices_view(device, shape):
    """A fake operand whose protocol names `device` (a DLPack capsule on that CUDA device)."""
    return FakeDLPack(shape, arrays.DL_FLOAT, 32, next(REGIONS), device=(arrays.DL_CUDA, device))


def test_a_call_runs_on_its_operands_gpu_whatever_is_current(fake_gpu):
    kernel = runtime.load(ROOT / "specs" / "checked_v3.gemm")  # loaded with GPU 0 current
    a, b, c = devices_view(1, (256, 64)), devices_view(1, (64, 128)), devices_view(1, (256, 128))
    kernel(a, b, c)
    assert fake_gpu.state.loads == [0, 1]  # a module on GPU 1, loaded for the first call there
    (launch,) = fake_gpu
    assert launch.device == 1 and launch.module_device == 1
    assert fake_gpu.state.current == 0  # the caller's device, restored
    kernel(a, b, c)
    assert fake_gpu.state.loads == [0, 1] and fake_gpu[-1].device == 1  # loaded once per GPU


def test_operands_on_two_gpus_are_refused_before_anything_launches(fake_gpu):
    kernel = runtime.load(ROOT / "specs" / "checked_v3.gemm")
    with pytest.raises(ValueError, match="A is on GPU 0 but B is on GPU 1"):
        kernel(devices_view(0, (64, 64)), devices_view(1, (64, 64)))
    assert not fake_gpu and fake_gpu.state.current == 0


def test_a_stream_of_another_gpu_is_refused_before_anything_launches(fake_gpu):
    kernel = runtime.load(ROOT / "specs" / "checked_v3.gemm")
    a, b = devices_view(1, (64, 64)), devices_view(1, (64, 64))
    with pytest.raises(ValueError, match="the stream is on GPU 0 but the operands are on GPU 1"):
        kernel(a, b, stream=SimpleNamespace(cuda_stream=0x1234, device_index=0))
    assert not fake_gpu
    kernel(a, b, stream=SimpleNamespace(cuda_stream=0x1234, device_index=1))
    assert fake_gpu[-1].stream == 0x1234 and fake_gpu[-1].device == 1


def vector(length, dtype="<f4"):
    return cuda_array((length,), dtype, ptr=next(REGIONS))


def test_a_fused_kernel_takes_its_chains_operands_after_beta(fake_gpu):
    """sgemm_fused: relu(alpha * acc + beta * C + bias[m]) + R; the kernels take bias, R and ldr after beta,
    and every sub-launch of the interior split moves them with C."""
    kernel = runtime.load(ROOT / "specs" / "sgemm_fused.gemm")
    m, n, k = 8000, 7000, 1024  # enough tiles for the split to pay
    a, b, c = (cuda_array(shape, ptr=next(REGIONS)) for shape in ((m, k), (k, n), (m, n)))
    bias, residual = vector(m), cuda_array((m, n), strides=(4 * 7040, 4), ptr=next(REGIONS))
    kernel(a, b, c, 1.0, 0.5, bias=bias, residual=residual)
    bias_at, r_at = (x.__cuda_array_interface__["data"][0] for x in (bias, residual))
    c_at = c.__cuda_array_interface__["data"][0]
    assert len(fake_gpu) > 1  # the interior kernel and the edge strips
    for launch in fake_gpu:
        c_offset = int(launch.args[2]) - c_at  # bytes into C: row * ldc + col
        row, col = divmod(c_offset // 4, n)
        assert [int(x) for x in launch.args[11:14]] == [bias_at + 4 * row, r_at + 4 * (row * 7040 + col), 7040]


def test_a_fused_kernel_refuses_missing_extra_and_misshapen_operands(fake_gpu):
    kernel = runtime.load(ROOT / "specs" / "sgemm_fused.gemm")
    a, b, c = (cuda_array(shape, ptr=next(REGIONS)) for shape in ((64, 32), (32, 48), (64, 48)))
    residual = cuda_array((64, 48), ptr=next(REGIONS))
    with pytest.raises(TypeError, match=r"relu\(alpha \* acc \+ beta \* C \+ bias\[m\]\) \+ R: pass bias="):
        kernel(a, b, c, residual=residual)
    with pytest.raises(TypeError, match="takes no row_scale="):
        kernel(a, b, c, bias=vector(64), residual=residual, row_scale=vector(64))
    with pytest.raises(ValueError, match="bias must be a vector of 64 values .one per row of C"):
        kernel(a, b, c, bias=vector(48), residual=residual)
    with pytest.raises(TypeError, match="bias must be float32, got float16"):
        kernel(a, b, c, bias=vector(64, "<f2"), residual=residual)
    with pytest.raises(ValueError, match="residual must be MxN = 64x48"):
        kernel(a, b, c, bias=vector(64), residual=cuda_array((48, 64), ptr=next(REGIONS)))
    assert not fake_gpu


def test_an_unfused_kernel_takes_no_chain_operands(fake_gpu):
    kernel = runtime.load(ROOT / "specs" / "checked_v3.gemm")
    a, b = cuda_array((64, 64), ptr=next(REGIONS)), cuda_array((64, 64), ptr=next(REGIONS))
    with pytest.raises(TypeError, match="checked_v3 takes no bias=: it has no fuse section"):
        kernel(a, b, bias=vector(64))


# ---------------------------------------------------------------------------
# Binary cache (CPU, with a fake compiler)

METADATA = {"kernel": "k", "spec_hash": "abc123", "gemmdsl_version": "0.1.0", "target": "sm_90"}


def test_cache_key_is_stable_and_covers_every_input():
    inputs = (METADATA, "source", "14.0.1", "sm_90", "nvcc")
    key = cache_key(*inputs)
    assert key == cache_key(dict(METADATA), *inputs[1:])
    changes = [(METADATA | {"spec_hash": "def456"}, 0), (METADATA | {"target": "sm_80"}, 0),
               (METADATA | {"gemmdsl_version": "0.2.0"}, 0), ("source changed", 1), ("13.6.0", 2), ("sm_100", 3),
               ("nvrtc", 4)]
    variants = [cache_key(*(inputs[:at] + (value,) + inputs[at + 1:])) for value, at in changes]
    assert key not in variants and len(set(variants)) == len(variants)
    assert runtime.cubin_file_name(METADATA, "sm_100", key).startswith("k-sm_100-")


def test_a_new_compiler_version_gets_its_own_cubin(monkeypatch):
    """Upgrading NVRTC (13.0 -> 13.1 changes the registers, docs/python-api.md) must not serve the old cubins."""
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(__version__="14.2.0"))
    names = {}
    for version in ("13.0", "13.1"):
        monkeypatch.setattr(runtime.binaries, "compiler_version", lambda compiler, v=version: v)
        names[version] = runtime.cubin_cache_name(METADATA, "source", "sm_90", "nvrtc")
    assert names["13.0"] != names["13.1"] and all(name.startswith("k-sm_90-") for name in names.values())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_nvcc_version_is_its_release():
    assert re.fullmatch(r"\d+\.\d+\.\d+", runtime.compiler_version("nvcc"))


def test_cache_builds_once_and_then_reads_the_disk(tmp_path):
    builds = []

    def build():
        builds.append(1)
        return b"\x7fELF cubin"

    cache = BinaryCache(tmp_path / "cache")
    first = cache.get_or_build("k.cubin", build)
    second = BinaryCache(tmp_path / "cache").get_or_build("k.cubin", build)
    assert first == second and first.read_bytes() == b"\x7fELF cubin"
    assert len(builds) == 1
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["k.cubin"]  # no temporary files left


def test_failed_build_leaves_no_cache_entry(tmp_path):
    def build():
        raise runtime.KernelBuildError("nvrtc said no")

    with pytest.raises(runtime.KernelBuildError):
        BinaryCache(tmp_path).get_or_build("k.cubin", build)
    assert not any(tmp_path.iterdir())


def test_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path))
    assert runtime.cache_dir() == tmp_path
    monkeypatch.delenv("GEMMDSL_CACHE")
    assert runtime.cache_dir() == Path.home() / ".cache" / "gemmdsl"


# ---------------------------------------------------------------------------
# Environment and command line (CPU)


def test_importing_the_gpu_modules_does_not_import_cupy():
    code = "import sys, gemmdsl.runtime, gemmdsl.verify, gemmdsl.bench; print('cupy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_missing_cupy_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    assert "CuPy is not installed" in runtime.gpu_unavailable_reason()


def test_tf32_baseline_is_refused(monkeypatch):
    monkeypatch.setenv("CUPY_TF32", "1")
    with pytest.raises(GpuUnavailable, match="CUPY_TF32=1"):
        runtime.require_fp32_cublas()


def test_parse_sizes():
    assert parse_sizes("1024x512x256, 64") == [(1024, 512, 256), (64, 64, 64)]
    for bad in ("12x3", "axbxc", "0x8x8", ""):
        with pytest.raises(ValueError):
            parse_sizes(bad)


def verify_args(*argv):
    parser = argparse.ArgumentParser()
    add_verify_arguments(parser)
    return parser.parse_args(list(argv))


def test_verify_without_cupy_exits_2(monkeypatch, capsys):
    pytest.importorskip("gemmdsl.compiler")
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert verify_main(verify_args(str(SPECS[0]))) == 2
    assert capsys.readouterr().err.startswith("error: CuPy is not installed")


def test_verify_reports_spec_errors_first(tmp_path, capsys):
    pytest.importorskip("gemmdsl.compiler")
    broken = tmp_path / "broken.gemm"
    broken.write_text("gemm broken { block { tile: 128x128x8; } \n")
    assert verify_main(verify_args(str(broken))) == 1
    assert "broken.gemm:" in capsys.readouterr().err


def test_several_specs_go_on_past_those_that_cannot_run(tmp_path, monkeypatch, capsys):
    """A spec that does not compile, one whose build fails and one too new for the GPU are each
    reported; the others still run, and the exit status says something failed."""
    pytest.importorskip("gemmdsl.compiler")
    broken = tmp_path / "broken.gemm"
    broken.write_text("gemm broken { block { tile: 128x128x8; } \n")
    good = [str(path) for path in SPECS[:3]]
    refusals = {SPECS[1].stem: runtime.KernelBuildError("nvcc failed: out of memory"),
                SPECS[2].stem: GpuUnavailable("the kernel targets sm_90, but this GPU is sm_80, which is older")}

    def fake_kernel(artifacts):
        if artifacts.name in refusals:
            raise refusals[artifacts.name]
        return SimpleNamespace(name=artifacts.name)

    monkeypatch.setattr(runtime.commands, "require_gpu", lambda: None)
    monkeypatch.setattr(runtime.commands, "Kernel", fake_kernel)
    ran = []
    work = lambda kernels, sizes: ran.extend(kernel.name for kernel in kernels) or 0  # noqa: E731
    assert runtime.run_on_kernels([str(broken), *good], "64", work) == 1
    assert ran == [SPECS[0].stem]
    err = capsys.readouterr().err
    assert "broken.gemm:" in err and "nvcc failed: out of memory" in err and "which is older" in err
    assert runtime.run_on_kernels(good[:1], "64", lambda kernels, sizes: 0) == 0


def test_verify_rejects_bad_sizes(capsys):
    assert verify_main(verify_args("x.gemm", "--sizes", "1024x1024")) == 2
    assert "bad size '1024x1024'" in capsys.readouterr().err


def test_bench_needs_twenty_runs(capsys):
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    assert parser.parse_args(["s.gemm"]).runs == 20
    with pytest.raises(SystemExit):
        parser.parse_args(["s.gemm", "--runs", "5"])
    assert "at least 20 timed runs" in capsys.readouterr().err
    with pytest.raises(ValueError):
        check_runs(19)


# ---------------------------------------------------------------------------
# Verification verdicts and benchmark reports (CPU)


def result(**changes):
    good = Error(relative=1e-7, max_abs=1e-5)
    fields = dict(kernel="k", m=256, n=256, k=256, alpha=1.0, beta=0.0, nonfinite=0, wrote_outside_c=False,
                  vs_cublas=good, vs_float64=good, cublas_vs_float64=good)
    return Result(**fields | changes)


def test_verdicts():
    assert result().passed
    assert result(vs_float64=None).passed  # large sizes: cuBLAS only
    assert result(nonfinite=3).failures == ["3 non-finite outputs"]
    assert result(wrote_outside_c=True).failures == ["wrote outside C"]
    assert result(vs_float64=Error(2e-5, 1.0)).failures == ["error vs float64 2.00e-05 > 1.0e-05"]
    assert not result(vs_cublas=Error(float("nan"), float("nan"))).passed


def test_result_lines_name_the_case_and_the_scalar_kernel():
    line = format_result(result(case="contiguous", entry="k_kernel_scalar", m=7, n=13, k=5))
    assert line.startswith("PASS  k") and "7x13x5" in line and "contiguous (scalar kernel)" in line
    skipped = result(skipped="bounds: exact needs multiples of 128x128x8", vs_cublas=None, vs_float64=None)
    assert format_result(skipped).startswith("SKIP  k") and skipped.passed


def test_alpha_beta_kernels_are_also_checked_with_scalars():
    assert scalar_cases("store") == [(1.0, 0.0)]
    assert scalar_cases("alpha_beta") == [(1.0, 0.0), (1.5, -0.5)]


def test_buffer_sets_exceed_twice_the_l2():
    l2 = 50 * 1024 * 1024
    assert buffer_sets(matrix_bytes((1024, 1024, 1024)), l2) == 9  # 12 MiB a set
    assert buffer_sets(matrix_bytes((4096, 4096, 1024)), l2) == 2  # 96 MiB: still fits twice in 2 x L2
    assert buffer_sets(matrix_bytes((8192, 8192, 8192)), l2) == 1


def test_tflops():
    assert tflops_of((4096, 4096, 4096), 2.0) == pytest.approx(2 * 4096 ** 3 / 2e-3 / 1e12)
    assert tflops_of((1024, 512, 256), 1.0, batch=8) == pytest.approx(8 * tflops_of((1024, 512, 256), 1.0))


def test_bench_takes_a_batch_of_one_or_more(capsys):
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    assert parser.parse_args(["s.gemm"]).batch == 1
    assert parser.parse_args(["s.gemm", "--batch", "8"]).batch == 8
    with pytest.raises(SystemExit):
        parser.parse_args(["s.gemm", "--batch", "0"])
    assert "at least one GEMM" in capsys.readouterr().err


def test_a_batched_row_names_its_batch():
    report = replace(REPORT, rows=[Row("batched_v3", 1024, 1024, 1024, 2, 0.5, 34.4, 98.0, 60.0, cublas_ms=0.49,
                                       batch=8)])
    assert format_table(report).splitlines()[5].split()[:5] == ["8", "x", "1024x1024x1024", "batched_v3", "0.500"]


REPORT = BenchReport(device="NVIDIA H100 80GB HBM3", cupy_version="14.0.1", peak_tflops=59.5, runs=20, warmup=5,
                     rows=[Row("cuBLAS", 4096, 4096, 4096, 1, 2.75, 49.98, 100.0, 84.0, cublas_ms=2.75),
                           Row("sgemm_v3", 4096, 4096, 4096, 1, 3.3, 41.65, 83.3, 70.0, cublas_ms=2.75),
                           Row("odd_tile", 4096, 4096, 4096, 1, note="skipped: N=4096 is not a multiple")])


def test_table_has_a_row_per_kernel():
    lines = format_table(REPORT).splitlines()
    assert "measured FP32 FMA peak 59.5 TFLOP/s" in lines[0]
    assert lines[4].split() == ["size", "kernel", "ms", "TFLOP/s", "%", "cuBLAS", "cuBLAS", "ms", "%", "peak", "sets"]
    assert lines[6].split() == ["4096x4096x4096", "sgemm_v3", "3.300", "41.65", "83.3", "2.750", "70.0", "1"]
    assert lines[7].endswith("skipped: N=4096 is not a multiple")


def test_bench_json_round_trips(tmp_path):
    write_bench_json(REPORT, tmp_path / "bench.json")
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["peak_tflops"] == 59.5 and data["rows"][1]["name"] == "sgemm_v3"
    assert data["rows"][2]["median_ms"] is None


def test_progress_writes_lines_to_a_log():
    log = io.StringIO()
    progress = Progress(2, log)
    progress.start("cuBLAS at 1024x1024x1024")
    progress.start("sgemm_v1 at 1024x1024x1024")
    progress.finish()
    assert log.getvalue() == "[1/2] cuBLAS at 1024x1024x1024\n[2/2] sgemm_v1 at 1024x1024x1024\n"


# ---------------------------------------------------------------------------
# On the GPU


def store_spec():
    return next(path for path in SPECS if "epilogue: store" in path.read_text())


@pytest.mark.gpu
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_spec_matches_cublas_and_float64(spec, load_kernel):
    from gemmdsl.verify import format_result, verify

    results = verify(load_kernel(spec), [(1024, 1024, 1024), (2048, 1024, 512), (256, 256, 256)], seed=0)
    assert all(r.vs_float64 is not None for r in results)
    assert [format_result(r) for r in results if not r.passed] == []


@pytest.mark.gpu
def test_call_allocates_c(load_kernel, cupy):
    kernel = load_kernel(store_spec())
    a = cupy.random.uniform(-1, 1, (256, 128), dtype=cupy.float32)
    b = cupy.random.uniform(-1, 1, (128, 384), dtype=cupy.float32)
    c = kernel(a, b)
    assert c.shape == (256, 384) and c.dtype == cupy.float32
    assert float(cupy.abs(c - a @ b).max()) < 1e-4


@pytest.mark.gpu
def test_call_runs_on_the_given_stream(load_kernel, cupy):
    kernel = load_kernel(store_spec())
    a = cupy.ones((256, 256), dtype=cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    c = kernel(a, a, stream=stream)
    stream.synchronize()
    assert bool((c == 256).all())


@pytest.mark.gpu
@pytest.mark.parametrize("case, error, message", [
    ("float64", TypeError, "A must be float32"),
    ("numpy", TypeError, "A must be in GPU memory, got a numpy.ndarray in host memory"),
    ("column_major", ValueError, "B must be row-major"),
    ("inner_mismatch", ValueError, "inner dimensions disagree"),
    ("not_whole_tiles", ValueError, "M=100 is not a multiple"),
    ("misaligned", ValueError, "A's data pointer .* is not 16-byte aligned"),
    ("store_with_beta", ValueError, "'store' epilogue"),
])
def test_bad_calls_are_refused(case, error, message, load_kernel, cupy):
    kernel = load_kernel(store_spec())
    a = cupy.zeros((256, 128), dtype=cupy.float32)
    b = cupy.zeros((128, 256), dtype=cupy.float32)
    c = cupy.zeros((256, 256), dtype=cupy.float32)
    calls = {
        "float64": lambda: kernel(a.astype(cupy.float64), b),
        "numpy": lambda: kernel(cupy.asnumpy(a), b),
        "column_major": lambda: kernel(a, cupy.asfortranarray(b)),
        "inner_mismatch": lambda: kernel(a, cupy.zeros((64, 256), dtype=cupy.float32)),
        "not_whole_tiles": lambda: kernel(cupy.zeros((100, 128), dtype=cupy.float32), b),
        "misaligned": lambda: kernel(cupy.zeros(256 * 128 + 1, dtype=cupy.float32)[1:].reshape(256, 128), b),
        "store_with_beta": lambda: kernel(a, b, c, beta=0.5),
    }
    with pytest.raises(error, match=message):
        calls[case]()


@pytest.mark.gpu
def test_second_load_reads_the_disk_cache(tmp_path, monkeypatch, cupy):
    monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path))
    compiled = []
    real_compile = runtime.compile_cubin
    monkeypatch.setattr(runtime.kernel, "compile_cubin", lambda source, target: compiled.append(target)
                        or real_compile(source, target))
    runtime.load(store_spec())
    kernel = runtime.load(store_spec())
    assert len(compiled) == 1 and len(list(tmp_path.glob("*.cubin"))) == 1
    a = cupy.ones((128, 128), dtype=cupy.float32)
    assert bool((kernel(a, a) == 128).all())


@pytest.mark.gpu
def test_bench_times_kernels_beside_cublas(load_kernel):
    from gemmdsl.bench import bench

    report = bench([load_kernel(store_spec())], [(1024, 1024, 1024)], runs=20, warmup=2,
                   progress=Progress(3, io.StringIO()))
    assert report.peak_tflops > 1
    assert [row.name for row in report.rows][0] == "cuBLAS"
    assert all(row.median_ms > 0 and row.buffer_sets >= 1 for row in report.rows)


@pytest.mark.gpu
def test_bench_times_a_batch_beside_cublas_batched(load_kernel):
    from gemmdsl.bench import bench

    batched, plain = load_kernel(ROOT / "specs" / "batched_v3.gemm"), load_kernel(store_spec())
    report = bench([batched, plain], [(256, 256, 256)], runs=20, warmup=2, progress=Progress(4, io.StringIO()),
                   batch=4)
    cublas, batched_row, plain_row = report.rows
    assert cublas.batch == batched_row.batch == 4 and batched_row.median_ms > 0
    assert batched_row.tflops == pytest.approx(tflops_of((256, 256, 256), batched_row.median_ms, batch=4))
    assert plain_row.median_ms is None and "not a batched spec" in plain_row.note


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["sgemm_v3", "hgemm_mma", "hgemm_h100"])
def test_nvrtcs_ptxas_figures_are_those_of_the_kernel_nvrtc_builds(name, monkeypatch, tmp_path):
    """What `check` and `tune` print without nvcc (build.kernel_resources through NVRTC) is the register
    count of the kernel the runtime loads without nvcc, for an FP32, an mma.sync (sm_80, built for this
    GPU) and a wgmma (sm_90a) spec."""
    from gemmdsl import build
    from gemmdsl.compiler import compile_path

    monkeypatch.setenv("GEMMDSL_COMPILER", "nvrtc")
    monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path))
    path = ROOT / "specs" / f"{name}.gemm"
    kernel = runtime.load(path)
    artifacts = compile_path(path)
    figures = build.kernel_resources(artifacts.cuda, artifacts.name, kernel.built_for.removeprefix("sm_"), "nvrtc")
    assert figures.registers == kernel.registers[kernel.metadata["entry"]]

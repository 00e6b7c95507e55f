"""Which cuBLAS computation each kernel is compared with (gemmdsl/precisions.py), from its metadata."""
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl.bench import comparison_groups, cublas_name
from gemmdsl.precisions import comparison

GENERATED = Path(__file__).resolve().parent.parent / "generated"


@pytest.mark.parametrize("spec, unit, cublas, inputs, c", [
    ("sgemm_v3", "fma", "cuBLAS", "f32", "f32"),
    ("sgemm_3xtf32_h100", "3xtf32", "cuBLAS", "f32", "f32"),
    ("tf32_h100", "tf32", "cuBLAS TF32 GEMM", "f32", "f32"),
    ("hgemm_h100_bf16c", "bf16", "cuBLAS BF16 GEMM", "bf16", "bf16"),
    ("hgemm_h100_f16", "f16", "cuBLAS FP16 GEMM", "f16", "f16"),
    # 16-bit inputs with an f32 C: cuBLAS writes f32 too, not C rounded to bf16 (half the bytes)
    ("hgemm_h100", "bf16", "cuBLAS BF16 GEMM f32 C", "bf16", "f32"),
    ("hgemm_mma", "bf16", "cuBLAS BF16 GEMM f32 C", "bf16", "f32"),
    # FMA kernels of 16-bit operands (widened to f32): compared as their inputs' GEMM, not as an SGEMM
    ("hgemm_short_k", "bf16", "cuBLAS BF16 GEMM f32 C", "bf16", "f32"),
    ("hgemm_short_k_bf16c", "bf16", "cuBLAS BF16 GEMM", "bf16", "bf16"),
    ("hgemm_short_k_f16", "f16", "cuBLAS FP16 GEMM", "f16", "f16"),
])
def test_each_shipped_kernel_is_compared_with_cublas_writing_its_own_c_type(spec, unit, cublas, inputs, c):
    metadata = json.loads((GENERATED / f"{spec}.json").read_text())
    assert metadata["dtypes"]["c"] == c
    compared = comparison(metadata)
    assert (compared.unit, cublas_name(compared), compared.input_dtype, compared.c_dtype) == (unit, cublas, inputs, c)


def test_bf16_kernels_with_f32_and_bf16_c_are_timed_in_two_groups():
    class Kernel:
        def __init__(self, name):
            self.name = name
            self.metadata = json.loads((GENERATED / f"{name}.json").read_text())

    kernels = [Kernel(name) for name in ("hgemm_h100", "hgemm_h100_bf16c", "hgemm_h100_nn")]
    groups = comparison_groups(kernels)
    assert [[k.name for k in members] for members in groups.values()] == [["hgemm_h100", "hgemm_h100_nn"],
                                                                          ["hgemm_h100_bf16c"]]


class FakeTorch:
    """Records which product the arrays ask PyTorch for (no GPU): mm/bmm with out_dtype, or matmul."""

    float32, bfloat16 = "float32", "bfloat16"

    def __init__(self):
        self.calls = []
        self.backends = type("B", (), {"cuda": type("C", (), {"matmul": type("M", (), {"allow_tf32": False})()})()})()

    def mm(self, a, b, out_dtype=None, out=None):
        self.calls.append(("mm", out_dtype, out))

    def bmm(self, a, b, out_dtype=None, out=None):
        self.calls.append(("bmm", out_dtype, out))

    def matmul(self, a, b, out=None):
        self.calls.append(("matmul", None, out))


class Operand:
    def __init__(self, dims, dtype="bfloat16"):
        self.dims, self.dtype = dims, dtype

    def dim(self):
        return self.dims


@pytest.mark.parametrize("output, dims, expected", [
    ("f32", 2, ("mm", "float32")),    # bf16 in, f32 C: cuBLAS writes f32
    ("f32", 3, ("bmm", "float32")),   # batched cases
    ("", 2, ("matmul", None)),        # C of the inputs' type
])
def test_cublas_is_asked_for_the_kernel_s_c_type(output, dims, expected):
    from gemmdsl.verify import TorchArrays

    arrays = TorchArrays.__new__(TorchArrays)  # without __init__: no GPU, no torch
    arrays.xp, arrays.tf32 = FakeTorch(), False
    arrays.output = arrays.xp.float32 if output else None
    arrays.cublas_into(Operand(dims), Operand(dims), "C")
    ((function, out_dtype, out),) = arrays.xp.calls
    assert (function, out_dtype) == expected and out == "C"


def to_tf32(x):
    """Round float32 values to TF32 (10 explicit mantissa bits), to nearest, ties away from zero (cvt.rna.tf32)."""
    import numpy as np

    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


@settings(max_examples=300, deadline=None)
@given(st.floats(1e-20, 1e20), st.floats(1e-20, 1e20), st.booleans(), st.booleans())
def test_the_3xtf32_floor_bounds_one_3xtf32_products_error(a, b, negative_a, negative_b):
    """TF32X3_FLOOR: a 3xTF32 product (big x big + big x small + small x big, the small parts rounded to TF32 too)
    is within the floor of the exact product, relative, for any f32 operands in a normal range."""
    import numpy as np

    from gemmdsl.precisions import TF32X3_FLOOR

    a, b = np.float32(-a if negative_a else a), np.float32(-b if negative_b else b)
    a_big, b_big = to_tf32(a), to_tf32(b)
    a_small, b_small = to_tf32(np.float32(a - a_big)), to_tf32(np.float32(b - b_big))
    product = (float(a_big) * float(b_big) + float(a_big) * float(b_small) + float(a_small) * float(b_big))
    exact = float(a) * float(b)
    assert abs(product - exact) <= TF32X3_FLOOR * abs(exact)


def test_3xtf32_is_held_to_twice_cublas_sgemm_and_the_floor():
    compared = comparison(json.loads((GENERATED / "sgemm_3xtf32_h100.json").read_text()))
    assert compared.tolerance("f32", 4e-8) == pytest.approx(2 * 4e-8 + 3 * 2.0 ** -22)
    assert compared.tolerance("f32", 1e-5) == pytest.approx(2e-5, rel=0.04)

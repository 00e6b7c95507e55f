"""Which cuBLAS computation each kernel is compared with (gemmdsl/precisions.py), from its metadata."""
import json
from pathlib import Path

import pytest

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

"""What a kernel is compared with, and how close it must be, by the unit it multiplies on.

`verify` and `bench` read a kernel's `unit` from its metadata (fma, bf16, f16, tf32, 3xtf32, fp8) and
take from here: which cuBLAS computation is the same precision (the baseline `bench` times and
the second reference `verify` reports), which library makes the inputs and runs it (CuPy for
FP32 inputs; PyTorch where CuPy lacks the type (bf16) or the mode (TF32)), and the tolerance
against a float64 product of the very inputs the kernel read.

Tolerances (relative Frobenius error against float64; K <= 8192):
- fma: 1e-5. FP32 accumulation lands near 1e-6; a wrong index or a dropped k-tile is off by
  orders of magnitude.
- bf16 / f16 inputs with an f32 C: cuBLAS at the same precision writes f32 too (PyTorch's
  `torch.mm(..., out_dtype=torch.float32)`, cublasGemmEx with an FP32 C), not C rounded to the
  inputs' type, which would move half the bytes of C and compare a different computation.
- bf16 / f16 inputs: the reference multiplies the same 16-bit values exactly, so what is left is
  FP32 accumulation (1e-5, as above) plus rounding C to its own type: the unit roundoff of C's
  type (f32 0, f16 2^-11, bf16 2^-8) bounds that relative error element by element.
- tf32: both inputs are rounded to TF32 (unit roundoff 2^-11) first, so a product is off by up
  to 2 * 2^-11 ~ 1e-3 relative; 2e-3 leaves room for FP32 accumulation. Reported, not compared
  with cuBLAS's TF32 error (only 3xTF32 is held to it).
- 3xtf32: as accurate as FP32: at most twice cuBLAS SGEMM's own error on the same inputs, on
  uniform and on wide-range data (the `wide` case), plus 3 * 2^-22 (TF32X3_FLOOR): each 3xTF32 product
  is off by up to that much relative (the small parts rounded to TF32, 2 * 2^-22, and their own product
  dropped, 2^-22), where an FP32 product is off by at most 2^-24. At a K of a few the products' error is
  the call's: 1x1x1 measured 1.5e-7 on the H200's 3xTF32 mma.sync kernels, cuBLAS SGEMM 4e-8. The floor is
  three orders of magnitude below TF32's error: a kernel that drops one of the three products (off by about
  2^-11 relative) still fails.
- fp8: e4m3 or e5m2 inputs (random values quantized to the type, positive scales): at most 1.1x the
  error of torch._scaled_mm at the same precision (rowwise scales, a BF16 C, `use_fast_accum` as the
  spec's `accumulate`), both against float64 over the dequantized inputs, on uniform and wide-range
  data. Both results round to BF16, which dominates; the factor leaves room for the accumulation
  order, not for a lost k-tile or a mis-scaled row. With block scales (`scale: block`) the reference is
  torch._scaled_mm's blockwise 1x128 / 128x128 mode where the installed PyTorch runs it, else the f32 product
  of the dequantized operands rounded to C's type (verify.ScaledMmArrays), against float64 of the
  dequantized operands. With per-tensor scales on both operands (`scale: tensor`) it is torch._scaled_mm's
  tensorwise mode (0-dim scale_a and scale_b); one per-tensor scale beside a vector is the rowwise mode with
  that scale repeated along its axis. A and B keep their own types (e4m3 x e5m2 for gradients); for the
  pairing torch._scaled_mm does not multiply (e5m2 x e5m2) the reference is the f32 product of the FP8
  values (exact in f32) with the scales, rounded to C's type, and bench times torch._scaled_mm on the same
  bytes read as e4m3, whose cost is the same.
- dequant (a quantized B, paths/dequant): at most 1.1x the error of dequantize-then-cuBLAS (the dequantized
  weight rounded to A's type, then cuBLAS at A's precision writing C's type), both against float64 of A times
  the dequantized weight, plus 1e-6. The kernel multiplies the integer codes exactly and scales FP32 partial
  sums, so its error is C's rounding and FP32 accumulation, where cuBLAS adds each weight's rounding to 16 bits:
  the kernel is usually the closer one, and the factor leaves room for the accumulation order, not for a lost
  group, a wrong zero point or a mis-scaled row. The 1e-6 floor is FP32 accumulation-order noise (near 1e-7 at
  K <= 8192, as for fma) for an f32 C where both errors are that small. The library is PyTorch for both
  activation types, as for bf16 / f16 inputs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

FMA_TOLERANCE = 1e-5
TF32_TOLERANCE = 2e-3
TF32X3_FACTOR = 2.0  # times cuBLAS SGEMM's error
TF32X3_FLOOR = 3 * 2.0 ** -22  # added to it: the relative error of one 3xTF32 product
FP8_FACTOR = 1.1  # times torch._scaled_mm's error
DEQUANT_FACTOR = 1.1  # times dequantize-then-cuBLAS's error
DEQUANT_FLOOR = 1e-6  # added to it: FP32 accumulation-order noise
UNIT_ROUNDOFF = {"f32": 0.0, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}


@dataclass(frozen=True)
class Comparison:
    unit: str
    cublas: str  # the cuBLAS computation at the same precision, as the reports name it
    library: str  # "cupy" or "torch": makes the inputs and runs cuBLAS
    input_dtype: str  # of A and B
    relative_to_cublas: bool  # the tolerance is a factor of cuBLAS's own error vs float64
    output_dtype: str = ""  # of the C cuBLAS writes; empty: the inputs' type
    factor: float = TF32X3_FACTOR  # relative_to_cublas: the error allowed, in cuBLAS's own
    fast_accumulation: bool = False  # fp8: torch._scaled_mm's use_fast_accum
    block_scales: bool = False  # fp8 with `scale: block`: torch._scaled_mm's blockwise 1x128 / 128x128 mode
    tensor_scales: bool = False  # fp8 with `scale: tensor`: torch._scaled_mm's tensorwise mode (0-dim scales)
    b_dtype: str = ""  # of B where it is not A's (an FP8 pairing such as e4m3 x e5m2)
    scaled: bool = False  # the reference is torch._scaled_mm, its operands made with their scales
    floor: float = 0.0  # relative_to_cublas: added to the allowed error

    @property
    def c_dtype(self) -> str:
        return self.output_dtype or self.input_dtype

    @property
    def input_dtypes(self) -> tuple[str, str]:
        """A's and B's element types."""
        return self.input_dtype, self.b_dtype or self.input_dtype

    def tolerance(self, c_dtype: str, cublas_error: float | None) -> float:
        """Largest relative error vs float64 that passes."""
        if self.relative_to_cublas:
            return self.factor * (cublas_error or 0.0) + self.floor
        if self.unit == "tf32":
            return TF32_TOLERANCE
        return FMA_TOLERANCE + UNIT_ROUNDOFF[c_dtype]


COMPARISONS = {
    "fma": Comparison("fma", "SGEMM", "cupy", "f32", relative_to_cublas=False),
    "3xtf32": Comparison("3xtf32", "SGEMM", "cupy", "f32", relative_to_cublas=True, floor=TF32X3_FLOOR),
    "tf32": Comparison("tf32", "TF32 GEMM", "torch", "f32", relative_to_cublas=False),
    "bf16": Comparison("bf16", "BF16 GEMM", "torch", "bf16", relative_to_cublas=False),
    "f16": Comparison("f16", "FP16 GEMM", "torch", "f16", relative_to_cublas=False),
    "fp8": Comparison("fp8", "FP8 scaled_mm", "torch", "e4m3", relative_to_cublas=True, output_dtype="bf16",
                      factor=FP8_FACTOR, scaled=True),
    "dequant": Comparison("dequant", "GEMM on the dequantized weight", "torch", "bf16", relative_to_cublas=True,
                          factor=DEQUANT_FACTOR, floor=DEQUANT_FLOOR),
}
CUBLAS_TYPES = {"bf16": "BF16", "f16": "FP16"}


def comparison(metadata: dict) -> Comparison:
    """The comparison for a compiled kernel (metadata from before units were recorded: fma): by its
    unit, or for an FMA kernel of 16-bit operands by theirs (the inputs are what a GEMM of that precision
    reads, the accumulation f32 either way), and for 16-bit inputs with an f32 C, cuBLAS writing an f32 C as well. A dequantizing kernel (NAME.json's
    `quant`): cuBLAS at A's precision on the dequantized weight, writing C's type."""
    if "quant" in metadata:
        activation, c = metadata["quant"]["activation"], metadata["dtypes"]["c"]
        compared = COMPARISONS["dequant"]
        return replace(compared, cublas=f"{CUBLAS_TYPES[activation]} {compared.cublas}{' f32 C' if c == 'f32' else ''}",
                       input_dtype=activation, output_dtype=c if c != activation else "")
    compared = COMPARISONS[metadata.get("unit", "fma")]
    a = metadata.get("dtypes", {}).get("a")
    if compared.unit == "fma" and a in CUBLAS_TYPES:  # 16-bit operands FMAs multiply widened: their type's GEMM
        compared = COMPARISONS[a]
    if compared.unit == "fp8":  # the kernel's operand types and C, and its accumulation mode
        dtypes = metadata["dtypes"]
        fast = metadata.get("accumulate") == "fast"
        scale = (metadata.get("fuse") or {}).get("scale")
        block, tensor = scale == "block", scale == "tensor"
        mode = " blockwise" if block else " tensorwise" if tensor else ""
        pairing = f" {dtypes['a']} x {dtypes['b']}" if dtypes["b"] != dtypes["a"] else ""
        return replace(compared, cublas=f"{compared.cublas}{pairing}{mode}{' fast' if fast else ''}",
                       input_dtype=dtypes["a"], output_dtype=dtypes["c"], fast_accumulation=fast, block_scales=block,
                       tensor_scales=tensor, b_dtype=dtypes["b"] if dtypes["b"] != dtypes["a"] else "")
    if compared.input_dtype in ("bf16", "f16") and metadata.get("dtypes", {}).get("c") == "f32":
        return replace(compared, cublas=f"{compared.cublas} f32 C", output_dtype="f32")
    return compared

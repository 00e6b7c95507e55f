"""Check generated kernels against cuBLAS and a float64 reference on random inputs.

Each size runs a few cases, each one launch on fresh inputs uniform in [-1, 1]:

- `contiguous`: operands packed in the spec's layouts (row-major: ld = columns,
  column-major: ld = rows), alpha=1, beta=0. At odd sizes this makes unaligned
  leading dimensions, so checked kernels run their narrow (8- or 4-byte copies) or scalar variant.
- `padded`: every leading dimension rounded up to a multiple of 8 and 8 more (16 bytes of 16-bit
  elements: the vector kernel of every spec), with
  alpha=1.5, beta=-0.5 for alpha_beta kernels: strided views, the vector variant.
- `batch 3` (batched kernels only): three GEMMs in 3-D arrays with padded rows.

C is poisoned with NaN before the launch, so an element the kernel never writes
(or a C it reads although beta is 0) shows up as a non-finite result; C's buffer
(padding between its rows and batches included) sits between two NaN guard
regions, and every float of it that is not an element of C must still be NaN.

Precision: each kernel is compared with float64 (the exact product of the inputs it read) and
with cuBLAS at its own precision, and held to the tolerance of its unit (gemmdsl/precisions.py:
1e-5 for FP32 FMA kernels, FP32 accumulation plus C's rounding for 16-bit inputs, 2e-3 for TF32,
and twice cuBLAS SGEMM's own error for 3xTF32, which also gets a `wide` case of values spread over
2^-20..2^20). FP32 inputs and cuBLAS SGEMM come from CuPy; bf16, f16 and TF32 from PyTorch. The
float64 reference (DGEMM on the GPU) is used for problems up to 2048 in every dimension; larger
ones are compared with cuBLAS only (and 3xTF32 then with FP32 tolerance). Sizes an exact kernel
cannot take are reported as skipped.
"""
from __future__ import annotations

import math
import re

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .family_kernel import run_on_specs_and_families
from .file_kinds import inputs_help
from .fuse_operands import FuseOperands
from .fuse_reference import BLOCK_SCALES, apply_chain, dequantize_blocks
from .grouped_bench import verify_group_ends, verify_grouped
from .grouped_schedule import group_rows
from .ir import DType, ScaleVectors
from .precisions import FMA_TOLERANCE, Comparison, comparison
from .quant_layout import QuantFormat, pack
from .quant_operands import draw_weight, signed_views
from .quant_reference import rounded_weight
from .quantize import QuantizeError
from .arrays import DTYPE_NAMES, ITEM_SIZES
from .runtime.commands import format_size
from .runtime.environment import GpuUnavailable, require_fp32_cublas
from .runtime.kernel import Kernel
from .runtime.operands import Size

DEFAULT_SIZES = "1024x1024x1024,2048x1024x512"
SCALES = ("row_scale", "col_scale", "a_scale", "b_scale")  # the operands of `scale` other than block scales
TOLERANCE = FMA_TOLERANCE
WIDE_EXPONENT = 20  # the wide case: magnitudes 2^-20..2^20
FLOAT64_MAX_DIM = 2048
GUARD_ELEMENTS = 1 << 16  # a multiple of 8 elements, so C stays 16-byte aligned inside its buffer
PAD_ALIGN = 8  # elements: a padded leading dimension is a multiple of this (16 bytes of 16-bit ones), plus as many
PAD_BYTES = 16  # ... or of this many bytes of FP8 elements (TMA's rule)
BATCH = 3


@dataclass(frozen=True)
class Error:
    """Distance from a reference: ||C - ref||_F / ||ref||_F and max |C - ref|."""

    relative: float
    max_abs: float


@dataclass(frozen=True)
class Result:
    kernel: str
    m: int
    n: int
    k: int
    alpha: float
    beta: float
    nonfinite: int  # NaN or inf entries of C: poison left unwritten, or C read when it must not be
    wrote_outside_c: bool
    vs_cublas: Error | None
    vs_float64: Error | None  # None above FLOAT64_MAX_DIM
    cublas_vs_float64: Error | None  # cuBLAS's own error, the yardstick for vs_float64
    tolerance: float = TOLERANCE  # against float64
    # against cuBLAS at the kernel's precision: held where that is FP32 (SGEMM); a 16-bit or TF32
    # cuBLAS result is itself off by more than the kernel may be, so it is reported only
    cublas_tolerance: float | None = TOLERANCE
    case: str = "contiguous"
    batch: int = 1
    entry: str = ""  # the kernel the call ran (the vector or the scalar variant)
    skipped: str = ""  # why the kernel cannot take this size (bounds: exact); nothing ran

    @property
    def failures(self) -> list[str]:
        """Why the case failed; empty when it passed."""
        reasons = []
        if self.nonfinite:
            reasons.append(f"{self.nonfinite} non-finite outputs")
        if self.wrote_outside_c:
            reasons.append("wrote outside C")
        if not self.nonfinite:  # with NaNs in C every error is NaN, which says nothing more
            for label, error, tolerance in (("float64", self.vs_float64, self.tolerance),
                                            ("cuBLAS", self.vs_cublas, self.cublas_tolerance)):
                if error is not None and tolerance is not None and not error.relative <= tolerance:
                    reasons.append(f"error vs {label} {error.relative:.2e} > {tolerance:.1e}")
        return reasons

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class Case:
    """How one launch lays out its operands."""

    name: str
    padded: bool  # leading dimensions rounded up to pad_align(dtype) elements and as many more
    batch: int  # 1: 2-D operands
    scalars: bool  # alpha=1.5, beta=-0.5 (alpha_beta kernels) instead of 1, 0
    wide: bool = False  # A and B spread over 2^-20..2^20 in magnitude (3xTF32's accuracy rule)


def cases(kernel: Kernel) -> list[Case]:
    """Packed operands, padded ones with the scalars, a batch for batched kernels, wide-range data
    for kernels whose accuracy is held to cuBLAS's."""
    found = [Case("contiguous", padded=False, batch=1, scalars=False),
             Case("padded", padded=True, batch=1, scalars=True)]
    if kernel.requirements.batched:
        found.append(Case(f"batch {BATCH}", padded=True, batch=BATCH, scalars=True))
    if comparison(kernel.metadata).relative_to_cublas:
        found.append(Case("wide", padded=True, batch=1, scalars=False, wide=True))
    return found


def verify(kernel: Kernel, sizes: list[Size], seed: int = 0) -> list[Result]:
    """Run `kernel` on every size in every case of `cases(kernel)`. A `batch: grouped` kernel's offs are drawn
    from the seed at each size (grouped_bench.verify_group_ends: uneven groups, some empty), B one matrix per
    group."""
    require_fp32_cublas()
    arrays = arrays_for(comparison(kernel.metadata), seed)
    results = []
    for size in sizes:
        why = size_refused(kernel, size)
        if why:
            results.append(skipped_result(kernel, size, why))
            continue
        group_ends = verify_group_ends(size[0], seed) if kernel.requirements.grouped else None
        for case in cases(kernel):
            why = case_refused(kernel, size, case)
            if not why:
                try:
                    results.append(check_case(kernel, arrays, size, case, group_ends))
                    continue
                except ValueError as err:  # operands the kernel's launcher refuses (bind's own check)
                    why = f"refused: {err}"
            results.append(skipped_result(kernel, size, f"{case.name}: {why}"))
    return results


def case_refused(kernel: Kernel, size: Size, case: Case) -> str:
    """Why a kernel reading A and B with TMA (wgmma specs) refuses a case ('' when it takes it): TMA
    needs leading dimensions of 16 bytes, and a contiguous A (lda = K) or B (ldb = K or N) has the
    problem's own. Padded cases round them up to PAD_ALIGN elements, which always fits."""
    maps = kernel.requirements.tensor_maps
    if maps is None or case.padded:
        return ""
    m, n, k = size
    multiple = kernel.metadata.get("alignment_bytes", 16) // maps["a"]["element_bytes"]
    lds = {"A": k if kernel.requirements.layouts["A"] == "row" else m,
           "B": n if kernel.requirements.layouts["B"] == "row" else k}
    bad = [f"ld{name.lower()} = {ld}" for name, ld in lds.items() if ld % multiple]
    return f"TMA needs leading dimensions that are multiples of {multiple} elements ({', '.join(bad)})" if bad else ""


def size_refused(kernel: Kernel, size: Size) -> str:
    """Why an exact kernel cannot take `size` ('' when it can)."""
    multiples = kernel.requirements.multiples
    if all(extent % multiple == 0 for extent, multiple in zip(size, multiples)):
        return ""
    return f"bounds: exact needs multiples of {'x'.join(map(str, multiples))}"


def skipped_result(kernel: Kernel, size: Size, why: str) -> Result:
    return Result(kernel=kernel.name, m=size[0], n=size[1], k=size[2], alpha=1.0, beta=0.0, nonfinite=0,
                  wrote_outside_c=False, vs_cublas=None, vs_float64=None, cublas_vs_float64=None, skipped=why)


def scalar_cases(epilogue: str) -> list[tuple[float, float]]:
    """beta=0 must not read C (the NaN poison checks it); beta!=0 must blend it in."""
    return [(1.0, 0.0), (1.5, -0.5)] if epilogue == "alpha_beta" else [(1.0, 0.0)]


def leading_dimension(extent: int, padded: bool, align: int = PAD_ALIGN) -> int:
    return -(-extent // align) * align + align if padded else extent


def pad_align(dtype: str) -> int:
    """Elements a padded leading dimension is a multiple of (and grows by): PAD_ALIGN, or 16 bytes of FP8,
    which TMA needs."""
    return max(PAD_ALIGN, PAD_BYTES // ITEM_SIZES[DTYPE_NAMES[dtype]])


def operand_in(buffer: Any, layout: str, rows: int, cols: int, padded: bool, batch: int, align: int = PAD_ALIGN) -> Any:
    """A (batch of) rows x cols matrix view of `buffer` in `layout`, with that case's leading dimension."""
    outer, inner = (rows, cols) if layout == "row" else (cols, rows)
    shape = (outer, leading_dimension(inner, padded, align))
    if batch > 1:
        shape = (batch,) + shape
    view = buffer[:operand_elements(layout, rows, cols, padded, batch, align)].reshape(shape)[..., :inner]
    return view if layout == "row" else view.swapaxes(-1, -2)


def operand_elements(layout: str, rows: int, cols: int, padded: bool, batch: int, align: int = PAD_ALIGN) -> int:
    outer, inner = (rows, cols) if layout == "row" else (cols, rows)
    return batch * outer * leading_dimension(inner, padded, align)


class CupyArrays:
    """FP32 inputs and cuBLAS SGEMM through CuPy."""

    b_layout = "row"  # of the B that bench's cuBLAS call reads
    baseline_name = ""  # bench's name for cublas_into where it is not the comparison's (cublas_name)

    def library_call(self, a: Any, b: Any, c: Any) -> Callable[[], Any]:
        """The library's own call on the operands as they are, which scripts/family_study.py times as the reference
        (and records where it raises): cublas_into's."""
        return lambda: self.cublas_into(a, b, c)

    def __init__(self, seed: int):
        import cupy

        self.xp = cupy
        self.rng = cupy.random.RandomState(seed)

    def random(self, elements: int, dtype: str, wide: bool = False) -> Any:
        values = self.rng.uniform(-1.0, 1.0, elements, dtype=self.xp.float32)
        if wide:
            magnitude = self.xp.exp2(self.rng.uniform(-WIDE_EXPONENT, WIDE_EXPONENT, elements)).astype(values.dtype)
            values = self.xp.sign(values) * magnitude
        return values

    def poisoned(self, elements: int, dtype: str) -> Any:
        return self.xp.full(elements, self.xp.nan, dtype=self.xp.float32)

    def float64(self, x: Any) -> Any:
        return x.astype(self.xp.float64)

    def host(self, x: Any) -> Any:
        """A NumPy copy of a GPU array."""
        return self.xp.asnumpy(x)

    def device(self, x: Any) -> Any:
        """A GPU copy of a NumPy array."""
        return self.xp.asarray(x)

    def cublas(self, a: Any, b: Any) -> Any:
        return self.xp.matmul(a, b)

    def cublas_into(self, a: Any, b: Any, c: Any) -> None:
        self.xp.matmul(a, b, out=c)

    def reference(self, a: Any, b: Any, fuse: dict | None, chain: dict[str, Any], epilogue: str, c_in: Any | None,
                  alpha: float, beta: float) -> Any:
        """cuBLAS's C at the kernel's precision: its product, then the chain (or alpha and beta) in float64."""
        finish = partial(chained, self, fuse, chain, epilogue) if fuse else expected
        return finish(self.cublas(a, b), c_in, alpha, beta)

    def scales(self, count: int) -> Any:
        """A scale vector of the fuse chain."""
        return self.random(count, "f32")

    def baseline_applies(self, fuse: dict) -> bool:
        """Whether cuBLAS's call applies the whole chain itself, so that bench times the kernel against it
        alone rather than against PyTorch's chains (bench_fuse)."""
        return False

    def cublas_out(self, rows: int, cols: int, dtype: str, batch: int = 1) -> Any:
        """What cuBLAS writes: C of the inputs' type (`batch` of them in a 3-D array when above 1)."""
        shape = (rows, cols) if batch == 1 else (batch, rows, cols)
        return self.poisoned(batch * rows * cols, dtype).reshape(shape)

    def column_major(self, x: Any) -> Any:
        """A copy of each matrix (the last two dimensions) in column-major order."""
        return self.xp.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)

    def concatenate(self, parts: list[Any]) -> Any:
        """Matrices stacked along their rows."""
        return self.xp.concatenate(parts)

    def count_nonfinite(self, x: Any) -> int:
        return int((~self.xp.isfinite(x)).sum())

    def all_nan(self, x: Any) -> bool:
        return bool(self.xp.isnan(x).all())

    def error(self, actual: Any, reference: Any) -> Error:
        difference = self.float64(actual) - self.float64(reference)
        relative = self.xp.linalg.norm(difference) / self.xp.linalg.norm(self.float64(reference))
        return Error(relative=float(relative), max_abs=float(abs(difference).max()))


class TorchArrays(CupyArrays):
    """bf16, f16 and TF32 inputs and cuBLAS at that precision through PyTorch (CuPy has no bf16, and
    asks cuBLAS for TF32 only process-wide). The checks of the results (count_nonfinite, all_nan,
    error) are CuPy's: torch has the same functions under the same names."""

    DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}

    def __init__(self, seed: int, tf32: bool, output_dtype: str = ""):
        import torch

        self.xp = torch
        self.tf32 = tf32
        self.output = self._dtype(output_dtype) if output_dtype else None  # C's type where it is not the inputs'
        self.generator = torch.Generator(device="cuda").manual_seed(seed)

    def _dtype(self, name: str) -> Any:
        return getattr(self.xp, self.DTYPES[name])

    def random(self, elements: int, dtype: str, wide: bool = False) -> Any:
        values = self.xp.rand(elements, device="cuda", generator=self.generator) * 2 - 1
        return values.to(self._dtype(dtype))

    def poisoned(self, elements: int, dtype: str) -> Any:
        return self.xp.full((elements,), float("nan"), device="cuda", dtype=self._dtype(dtype))

    def float64(self, x: Any) -> Any:
        return x.to(self.xp.float64)

    def host(self, x: Any) -> Any:
        return x.cpu().numpy()

    def device(self, x: Any) -> Any:
        return self.xp.from_numpy(x).cuda()

    def device_as(self, x: Any, dtype: str) -> Any:
        """A GPU copy of a NumPy array in `dtype` (f32, f16 or bf16)."""
        return self.device(x).to(self._dtype(dtype))

    def cublas(self, a: Any, b: Any) -> Any:
        """The product at the kernel's precision: 16-bit inputs (FP32 accumulation, a result of the
        inputs' type or, for an f32 C, f32), or f32 inputs with TF32 allowed."""
        return self._matmul(a, b)

    def _matmul(self, a: Any, b: Any, out: Any = None) -> Any:
        """allow_tf32 changes only f32 products; 16-bit ones are the same either way."""
        if self.output is not None and self.output != a.dtype:
            try:
                multiply = self.xp.bmm if a.dim() == 3 else self.xp.mm  # batched cases are 3-D
                return multiply(a, b, out_dtype=self.output, out=out)
            except TypeError as err:  # PyTorch before out_dtype (2.8)
                raise RuntimeError(f"cuBLAS with a {self.output} C from {a.dtype} inputs needs torch.mm's "
                                   f"out_dtype (PyTorch 2.8 or later): {err}") from err
        matmul = self.xp.backends.cuda.matmul
        allowed = matmul.allow_tf32
        matmul.allow_tf32 = self.tf32
        try:
            return self.xp.matmul(a, b, out=out)
        finally:
            matmul.allow_tf32 = allowed

    def cublas_into(self, a: Any, b: Any, c: Any) -> None:
        self._matmul(a, b, out=c)

    def column_major(self, x: Any) -> Any:
        return x.mT.contiguous().mT

    def concatenate(self, parts: list[Any]) -> Any:
        return self.xp.cat(parts)


class ScaledMmArrays(TorchArrays):
    """FP8 inputs (random values quantized to e4m3 or e5m2, A and B each of its own type) and torch._scaled_mm,
    the cuBLASLt FP8 GEMM, at the kernel's precision: per-tensor scales inside the call (its tensorwise mode),
    rowwise ones for a BF16 C (the only C it scales rowwise; a per-tensor scale beside a vector repeated along
    its axis), else unit scales and the chain's scales in float64 after it; `use_fast_accum` as the kernel
    accumulates. A pairing it does not multiply (e5m2 x e5m2): the f32 product of the FP8 values instead
    (each product exact in f32), and bench times it on the same bytes read as e4m3 (`baseline_name`)."""

    DTYPES = {**TorchArrays.DTYPES, "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
    # The wide case's magnitudes, 2^lo..2^hi: the normal range of each type (e4m3's largest is 448).
    WIDE_EXPONENTS = {"e4m3": (-6, 8), "e5m2": (-14, 15)}
    b_layout = "col"  # torch._scaled_mm's second operand is column-major

    def __init__(self, seed: int, output_dtype: str, fast: bool, block: bool = False, tensor: bool = False,
                 pairing: tuple[str, str] = ("e4m3", "e4m3")):
        super().__init__(seed, tf32=False, output_dtype=output_dtype)
        self.fast = fast
        self.unit_scales: dict[Any, Any] = {}
        self.block = block
        self.tensor = tensor  # `scale: tensor`: bench's baseline is the tensorwise mode
        self.pairing = pairing
        self.blockwise = block and self._runs_blockwise()  # torch._scaled_mm's 1x128 / 128x128 mode, where it has one
        self.multiplies = self._multiplies_pairing()  # whether torch._scaled_mm takes A's and B's types

    def random(self, elements: int, dtype: str, wide: bool = False) -> Any:
        if dtype not in self.WIDE_EXPONENTS:
            return super().random(elements, dtype, wide)
        values = self.xp.rand(elements, device="cuda", generator=self.generator) * 2 - 1
        if wide:
            lo, hi = self.WIDE_EXPONENTS[dtype]
            exponents = self.xp.rand(elements, device="cuda", generator=self.generator) * (hi - lo) + lo
            values = self.xp.sign(values) * self.xp.exp2(exponents)
        return values.to(self._dtype(dtype))

    def scales(self, count: int) -> Any:
        """Positive, as quantization scales are: 0.25 to 1.75."""
        return self.xp.rand(count, device="cuda", generator=self.generator) * 1.5 + 0.25

    def _multiplies_pairing(self) -> bool:
        """Whether torch._scaled_mm multiplies A's type by B's (cuBLASLt has no e5m2 x e5m2)."""
        torch = self.xp
        a, b = (torch.zeros(16, 16, device="cuda").to(self._dtype(name)) for name in self.pairing)
        try:
            self._scaled_mm(a, b.T)
        except (RuntimeError, ValueError, TypeError, NotImplementedError):
            return False
        return True

    def _runs_blockwise(self) -> bool:
        """Whether torch._scaled_mm takes blockwise scales (A's 1 x 128, B's 128 x 128) here: cuBLASLt 12.9+ on
        sm_90, in the PyTorch versions that route them."""
        torch = self.xp
        a = torch.ones(128, 128, device="cuda").to(self._dtype("e4m3"))
        try:
            self._scaled_mm(a, a.T, block_scales=(torch.ones(128, 1, device="cuda"), torch.ones(1, 1, device="cuda")))
        except (RuntimeError, ValueError, TypeError, NotImplementedError):
            return False
        return True

    def _scaled_mm(self, a: Any, b: Any, row_scale: Any = None, col_scale: Any = None,
                   block_scales: tuple[Any, Any] | None = None, tensor_scales: tuple[Any, Any] | None = None) -> Any:
        """One torch._scaled_mm (2-D; a batch matrix by matrix). It takes A row-major and B column-major with
        every extent a multiple of 16: operands of other shapes or strides are copied into zero-padded ones
        (zeros add nothing to the sums, and padding to 16 adds no 128-block), and the result is cut back to
        M x N. `block_scales`: (a_scale M x ceil(K / 128), b_scale ceil(N / 128) x ceil(K / 128)), row-major,
        passed as torch asks: A's outer-dim-major, B's as b_scale.t(). `tensor_scales`: (scale_a, scale_b), one
        value each (its tensorwise mode, any C)."""
        torch = self.xp
        if a.dim() == 3:
            return torch.stack([self._scaled_mm(x, y, row_scale, col_scale, block_scales, tensor_scales)
                                for x, y in zip(a, b)])
        (m, k), n = a.shape, b.shape[1]
        ones = partial(torch.ones, device="cuda", dtype=torch.float32)
        rowwise = self.output == torch.bfloat16 and (row_scale is not None or col_scale is not None)
        if block_scales is not None:
            scale_a = _padded(torch, block_scales[0].float(), (-m % 16, 0), 1.0).t().contiguous().t()
            scale_b = block_scales[1].float().t()
        elif rowwise:
            scale_a = _padded(torch, (row_scale if row_scale is not None else ones(m)).reshape(-1, 1), (-m % 16, 0), 1.0)
            scale_b = _padded(torch, (col_scale if col_scale is not None else ones(n)).reshape(1, -1), (0, -n % 16), 1.0)
        else:
            scale_a, scale_b = (x.reshape(()) for x in tensor_scales) if tensor_scales is not None else (ones(()),) * 2
        a16 = _padded(torch, a, (-m % 16, -k % 16))
        b16 = _padded(torch, b.mT, (-n % 16, -k % 16)).mT
        result = torch._scaled_mm(a16, b16, scale_a=scale_a.float(), scale_b=scale_b.float(), out_dtype=self.output,
                                  use_fast_accum=self.fast)
        return result[:m, :n]

    def cublas(self, a: Any, b: Any) -> Any:
        return self._product(a, b)

    def _product(self, a: Any, b: Any, row_scale: Any = None, col_scale: Any = None,
                 tensor_scales: tuple[Any, Any] | None = None) -> Any:
        """torch._scaled_mm's product with these scales, or for a pairing it does not multiply the f32 product
        of the FP8 values (exact products, f32 sums) with the scales, rounded to C's type."""
        if self.multiplies:
            return self._scaled_mm(a, b, row_scale, col_scale, tensor_scales=tensor_scales)
        product = self.xp.matmul(a.float(), b.float())
        for scale, shape in ((row_scale, (-1, 1)), (col_scale, (1, -1))):
            if scale is not None:
                product = product * scale.float().reshape(shape)
        for scale in tensor_scales or ():
            product = product * scale.float().reshape(())
        return product.to(self.output)

    def cublas_into(self, a: Any, b: Any, c: Any) -> None:
        """bench's baseline: torch._scaled_mm into its own C from the caching allocator (C is not copied into
        `c`, which would add a pass over C to its time); unit scales, timed as any scales: blockwise ones where
        it has the mode, else rowwise (bench then names the row so)."""
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        if not self.multiplies:  # the same bytes as e4m3: the call a pairing of its types would make
            a, b = (x.view(self._dtype("e4m3")) for x in (a, b))
        if self.tensor:
            self._scaled_mm(a, b, tensor_scales=(self._ones(), self._ones()))
        elif self.blockwise:
            blocks = -(-k // 128)
            self._scaled_mm(a, b, block_scales=(self._ones(m, blocks), self._ones(-(-n // 128), blocks)))
        else:
            self._scaled_mm(a, b, self._ones(m), self._ones(n))

    def library_call(self, a: Any, b: Any, c: Any) -> Callable[[], Any]:
        """torch._scaled_mm on A and B as they are, with rowwise unit scales (M x 1 and 1 x N, f32): no zero-padded
        copies, so where its checks refuse the shape (K or N not a multiple of 16), the call raises."""
        if self.block:
            return super().library_call(a, b, c)
        m, n = a.shape[-2], b.shape[-1]
        scale_a, scale_b = self._ones(m, 1), self._ones(1, n)
        return lambda: self.xp._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=self.output,
                                          use_fast_accum=self.fast)

    @property
    def baseline_name(self) -> str:
        """What cublas_into runs, where it is not the comparison's own call: a block-scaled kernel's fallback, or
        a pairing torch._scaled_mm does not multiply."""
        if not self.multiplies:
            return (f"cuBLAS FP8 scaled_mm on the {' x '.join(self.pairing)} bytes read as e4m3 (no "
                    f"{' x '.join(self.pairing)} mode)")
        return "" if self.blockwise or not self.block else "cuBLAS FP8 scaled_mm rowwise (no blockwise mode here)"

    def _ones(self, *shape: int) -> Any:
        """Unit scales, made once per shape (a fill kernel per timed call would be timed too)."""
        if shape not in self.unit_scales:
            self.unit_scales[shape] = self.xp.ones(shape, device="cuda", dtype=self.xp.float32)
        return self.unit_scales[shape]

    def reference(self, a: Any, b: Any, fuse: dict | None, chain: dict[str, Any], epilogue: str, c_in: Any | None,
                  alpha: float, beta: float) -> Any:
        """torch._scaled_mm with the chain's scales inside (BF16 C), then the rest of the chain in float64. Block
        scales: its blockwise mode, or where it has none the f32 product of the dequantized operands rounded to
        C's type (each product exact, the sum in FP32: a reference at least as accurate as the kernel)."""
        if fuse is not None and fuse["scale"] == "block":
            if self.blockwise:
                product = self._scaled_mm(a, b, block_scales=(chain["a_scale"], chain["b_scale"]))
            else:
                a32, b32 = dequantize_blocks(a.float(), b.float(), chain["a_scale"].float(), chain["b_scale"].float())
                product = self.xp.mm(a32, b32).to(self.output)
            rest = {name: value for name, value in chain.items() if name not in BLOCK_SCALES}
            return chained(self, {**fuse, "scale": None}, rest, epilogue, product, c_in, alpha, beta)
        scales = ScaleVectors(fuse["scale"]) if fuse is not None and fuse["scale"] is not None else None
        if scales is ScaleVectors.TENSOR:
            product = self._product(a, b, tensor_scales=(chain["a_scale"], chain["b_scale"]))
        elif scales is not None and self.output == self.xp.bfloat16:
            m, n = a.shape[-2], b.shape[-1]
            row_scale = chain["row_scale"] if scales.rows else chain["a_scale"].reshape(1).expand(m) \
                if scales.a_tensor else None
            col_scale = chain["col_scale"] if scales.cols else chain["b_scale"].reshape(1).expand(n) \
                if scales.b_tensor else None
            product = self._product(a, b, row_scale, col_scale)
        else:
            return super().reference(a, b, fuse, chain, epilogue, c_in, alpha, beta)
        rest = {name: value for name, value in chain.items() if name not in SCALES}
        return chained(self, {**fuse, "scale": None}, rest, epilogue, product, c_in, alpha, beta)

    def baseline_applies(self, fuse: dict) -> bool:
        return fuse["bias"] is None and fuse["activation"] is None and fuse["residual"] is None


def _padded(torch: Any, x: Any, pad: tuple[int, int], fill: float = 0.0) -> Any:
    """A contiguous row-major copy of matrix `x` with `pad` more rows and columns of `fill` (x itself where
    it needs neither)."""
    if pad == (0, 0) and x.is_contiguous() and (x.shape[1] * x.element_size()) % 16 == 0:
        return x
    rows, cols = x.shape
    out = torch.full((rows + pad[0], cols + pad[1]), fill, device=x.device, dtype=torch.float32).to(x.dtype)
    out[:rows, :cols] = x
    return out


def arrays_for(comparison: Comparison, seed: int) -> CupyArrays:
    if comparison.scaled:
        return ScaledMmArrays(seed, comparison.c_dtype, comparison.fast_accumulation, comparison.block_scales,
                              comparison.tensor_scales, comparison.input_dtypes)
    if comparison.library == "torch":
        return TorchArrays(seed, tf32=comparison.unit == "tf32", output_dtype=comparison.output_dtype)
    return CupyArrays(seed)


def random_operand(arrays: CupyArrays, dtype: str, layout: str, rows: int, cols: int, padded: bool = False,
                   batch: int = 1, wide: bool = False) -> Any:
    """Random values laid out as the kernel wants them (padding random too)."""
    align = pad_align(dtype)
    elements = operand_elements(layout, rows, cols, padded, batch, align)
    return operand_in(arrays.random(elements, dtype, wide), layout, rows, cols, padded, batch, align)


def check_case(kernel: Kernel, arrays: CupyArrays, size: Size, case: Case,
               group_ends: list[int] | None = None) -> Result:
    """One launch of the case at `size`; `group_ends`: a grouped kernel's offs (B then holds one matrix per
    group, and the references are each group's rows stacked)."""
    m, n, k = size
    layouts = kernel.requirements.layouts
    dtypes = kernel.metadata.get("dtypes", {"a": "f32", "b": "f32", "c": "f32"})
    alpha, beta = scalar_cases(kernel.epilogue)[-1] if case.scalars else (1.0, 0.0)
    groups = 0 if group_ends is None else len(group_ends)
    a = random_operand(arrays, dtypes["a"], layouts["A"], m, k, case.padded, case.batch, case.wide)
    b = random_operand(arrays, dtypes["b"], layouts["B"], k, n, case.padded, groups or case.batch, case.wide)
    c_in = random_operand(arrays, dtypes["c"], layouts["C"], m, n, case.padded, case.batch) if beta else None
    elements = operand_elements(layouts["C"], m, n, case.padded, case.batch)
    buffer = arrays.poisoned(elements + 2 * GUARD_ELEMENTS, dtypes["c"])
    c_of: Callable[[Any], Any] = lambda whole: operand_in(whole[GUARD_ELEMENTS:], layouts["C"], m, n,  # noqa: E731
                                                          case.padded, case.batch)
    c = c_of(buffer)
    if c_in is not None:
        c[...] = c_in
    fuse = kernel.metadata.get("fuse")
    chain = chain_operands(arrays, fuse, m, n, k, case, groups) if fuse else {}
    offs = {} if group_ends is None else {"offs": arrays.device(np.array(group_ends, dtype=np.int32))}
    launch = kernel.bind(a, b, c, alpha, beta, **chain, **offs)
    launch()
    outside = buffer.clone() if hasattr(buffer, "clone") else buffer.copy()
    c_of(outside)[...] = float("nan")
    # (A's rows, B's group) of each reference product: all of A and B, or each group's rows and matrix
    parts = [(slice(None), None)] if group_ends is None else \
        [(slice(start, end), g) for g, (start, end) in enumerate(group_rows(group_ends, m)) if end > start]
    stacked = partial(stacked_parts, arrays, parts)
    cublas = stacked(lambda rows, g: arrays.reference(a[rows], b if g is None else b[g], fuse,
                                                      group_chain(chain, rows, g), kernel.epilogue,
                                                      None if c_in is None else c_in[rows], alpha, beta))
    float64 = None
    if max(m, n, k) <= FLOAT64_MAX_DIM:
        a64, b64 = arrays.float64(a), arrays.float64(b)
        if fuse and fuse["scale"] == "block":  # the product of the dequantized operands
            a64, b64 = dequantize_blocks(a64, b64, arrays.float64(chain["a_scale"]), arrays.float64(chain["b_scale"]))
        c64 = None if c_in is None else arrays.float64(c_in)

        def float64_part(rows: slice, g: int | None) -> Any:
            part_chain = group_chain(chain, rows, g)
            finish = partial(chained, arrays, fuse, part_chain, kernel.epilogue) if fuse else expected
            return finish(a64[rows] @ (b64 if g is None else b64[g]), None if c64 is None else c64[rows], alpha, beta)

        float64 = stacked(float64_part)
    cublas_vs_float64 = None if float64 is None else arrays.error(cublas, float64)
    tolerance = comparison(kernel.metadata).tolerance(dtypes["c"], cublas_vs_float64 and cublas_vs_float64.relative)
    return Result(kernel=kernel.name, m=m, n=n, k=k, alpha=alpha, beta=beta,
                  nonfinite=arrays.count_nonfinite(c), wrote_outside_c=not arrays.all_nan(outside),
                  vs_cublas=arrays.error(c, cublas), vs_float64=None if float64 is None else arrays.error(c, float64),
                  cublas_vs_float64=cublas_vs_float64, tolerance=tolerance or TOLERANCE,
                  cublas_tolerance=TOLERANCE if comparison(kernel.metadata).cublas == "SGEMM" else None,
                  case=case.name if group_ends is None else f"{case.name}, offs {group_ends}", batch=case.batch,
                  entry=launch.entry)


def expected(product: Any, c_in: Any | None, alpha: float, beta: float) -> Any:
    """alpha * product + beta * C, in the wider of the two types."""
    product = alpha * product
    return product if c_in is None else product + beta * c_in


def chain_operands(arrays: CupyArrays, fuse: dict, m: int, n: int, k: int, case: Case,
                   groups: int = 0) -> dict[str, Any]:
    """Fresh random operands for a fused kernel's chain (docs/fusion.md), each the array its operand's kind takes
    (gemmdsl/fuse_ops/kinds.py): a matrix (the residual) in its layout, padded as the case pads C; the others
    row-major, 0-dim for one value (as torch._scaled_mm's tensorwise scales), drawn as scales where the operand is
    one (the row and column scales, the per-tensor and block scales)."""
    operands = {}
    for operand in FuseOperands.from_metadata({"fuse": fuse}).operands:
        rule, dtype = operand.kind.array(operand, m, n, k, groups), operand.dtype.value
        if rule.layout is not None:
            operands[operand.name] = random_operand(arrays, dtype, rule.layout.value, *rule.shape, case.padded)
            continue
        count = math.prod(rule.shape)
        values = arrays.scales(count) if operand.scale else arrays.random(count, dtype)
        operands[operand.name] = values if rule.shape == (count,) else values.reshape(rule.shape)
    return operands


def group_chain(chain: dict[str, Any], rows: slice, group: int | None) -> dict[str, Any]:
    """The chain's operands of one group's rows (`group` None: the whole chain): its rows of the row scales, its
    row of the column scales (the only operands a grouped chain takes)."""
    if group is None:
        return chain
    return {name: value[group] if name == "col_scale" else value[rows] for name, value in chain.items()}


def stacked_parts(arrays: CupyArrays, parts: list[tuple[slice, int | None]],
                  compute: Callable[[slice, int | None], Any]) -> Any:
    """compute(rows, group) of each part, the parts' rows stacked into one C (one part: its own result)."""
    results = [compute(rows, group) for rows, group in parts]
    return results[0] if len(results) == 1 else arrays.concatenate(results)


def chained(arrays: CupyArrays, fuse: dict, chain: dict[str, Any], epilogue: str, product: Any, c_in: Any | None,
            alpha: float, beta: float) -> Any:
    """The fused kernel's reference: the chain (fuse_reference.apply_chain) in float64 on the host over
    `product`, C and the chain's operands, back on the GPU."""
    blocks = fuse["scale"] == "block"  # applied to the product already
    host = {name: arrays.host(arrays.float64(value)) for name, value in chain.items()
            if not (blocks and name in BLOCK_SCALES)}
    result = apply_chain(fuse, arrays.host(arrays.float64(product)), alpha=alpha, beta=beta,
                         c=None if c_in is None else arrays.host(arrays.float64(c_in)),
                         alpha_beta=epilogue == "alpha_beta", **host)
    return arrays.device(result)


QUANTIZED_CASES = ("packed weights", "second call")


def verify_quantized(kernel: Any, sizes: list[Size], seed: int = 0) -> list[Result]:
    """A dequantizing kernel (runtime.quantized.QuantizedKernel) at every size: A fresh and random in its type, a
    random weight quantized in the spec's format and packed (quant_operands.draw_weight), two calls on these operands
    (QUANTIZED_CASES: the second runs on the split-K workspace the first left, which must be zero again), each into
    a C poisoned with NaN between NaN guards. Each is held to float64 of A times the dequantized weight within the
    comparison's allowance of dequantize-then-cuBLAS's error (precisions.py: 1.1x plus 1e-6). ImportError without
    GpuUnavailable without PyTorch, which makes the 16-bit operands and the reference (as for a dense 16-bit
    kernel; CuPy has no bf16)."""
    compared = comparison(kernel.metadata)
    arrays = quantized_arrays(kernel, compared, seed)
    rng = np.random.default_rng(seed)
    results = []
    for size in sizes:
        m, n, k = size
        if k % kernel.k_multiple:  # before drawing a weight the kernel cannot take
            results.append(skipped_result(kernel, size, f"refused: K = {k} is not a multiple of {kernel.k_multiple} "
                                                        "(whole groups, A's rows read 16 bytes at a time)"))
            continue
        try:
            weight = draw_weight(rng, kernel.format, n, k)
            results += check_quantized(kernel, arrays, compared, size, weight)
        except (QuantizeError, ValueError) as err:  # a format quantize.py does not draw, or the launcher's refusal
            results.append(skipped_result(kernel, size, f"refused: {err}"))
    return results


def quantized_arrays(kernel: Any, compared: Comparison, seed: int) -> CupyArrays:
    """The arrays for a dequantizing kernel's operands; GpuUnavailable, saying so, without PyTorch."""
    try:
        return arrays_for(compared, seed)
    except ImportError as err:
        raise GpuUnavailable(f"{kernel.name}: PyTorch is not installed ({err}); a dequantizing spec's operands are "
                             "bf16 or f16, which it makes and multiplies (cuBLAS on the dequantized weight): "
                             "pip install torch") from None


def device_packed(arrays: CupyArrays, weight: Any, fmt: QuantFormat) -> dict[str, Any]:
    """`weight` (a quantize.Canonical) packed in `fmt` (quant_layout.pack) and copied to the GPU, as the kernel
    takes it."""
    return {name: arrays.device(view) for name, view in signed_views(pack(weight.q, weight.scales, weight.zeros,
                                                                          fmt)).items()}


def check_quantized(kernel: Any, arrays: CupyArrays, compared: Comparison, size: Size, weight: Any) -> list[Result]:
    """The calls of QUANTIZED_CASES at `size` on A, `weight` (a quantize.Canonical) packed, and fresh Cs."""
    m, n, k = size
    fmt, c_dtype = kernel.format, kernel.metadata["dtypes"]["c"]
    a = arrays.random(m * k, fmt.activation).reshape(m, k)
    packed = device_packed(arrays, weight, fmt)
    float64 = arrays.float64(a) @ arrays.device(weight.dequantized()).T
    rounded = rounded_weight(weight.q, weight.scales, weight.zeros, weight.group, DType(fmt.activation))
    cublas = arrays.cublas(a, arrays.device_as(rounded.astype(np.float32), fmt.activation).T)  # exact in A's type
    cublas_vs_float64 = arrays.error(cublas, float64)
    results = []
    for case in QUANTIZED_CASES:
        buffer = arrays.poisoned(m * n + 2 * GUARD_ELEMENTS, c_dtype)
        c = buffer[GUARD_ELEMENTS:GUARD_ELEMENTS + m * n].reshape(m, n)
        launch = kernel.bind(a, packed, c)
        launch()
        outside = buffer.clone() if hasattr(buffer, "clone") else buffer.copy()
        outside[GUARD_ELEMENTS:GUARD_ELEMENTS + m * n] = float("nan")
        results.append(Result(kernel=kernel.name, m=m, n=n, k=k, alpha=1.0, beta=0.0,
                              nonfinite=arrays.count_nonfinite(c), wrote_outside_c=not arrays.all_nan(outside),
                              vs_cublas=arrays.error(c, cublas), vs_float64=arrays.error(c, float64),
                              cublas_vs_float64=cublas_vs_float64,
                              tolerance=compared.tolerance(c_dtype, cublas_vs_float64.relative),
                              cublas_tolerance=None, case=case, entry=launch.entry))
    return results


def format_result(result: Result) -> str:
    """One line per case: verdict, shape, case, scalars, and the errors."""
    shape = format_size((result.m, result.n, result.k))
    if result.skipped:
        return f"SKIP  {result.kernel:<20} {shape:<16} {result.skipped}"
    verdict = "PASS" if result.passed else "FAIL"
    narrow = re.search(r"_(\d+)byte$", result.entry)
    variant = " (scalar kernel)" if result.entry.endswith("_scalar") else f" ({narrow[1]}-byte kernel)" if narrow else ""
    parts = [f"{verdict}  {result.kernel:<20} {shape:<16} {result.case + variant:<26} "
             f"alpha={result.alpha:g} beta={result.beta:g}"]
    if result.vs_float64 is not None:
        parts.append(f"vs f64 {result.vs_float64.relative:.2e} (max {result.vs_float64.max_abs:.1e}, "
                     f"cuBLAS {result.cublas_vs_float64.relative:.2e})")
    parts.append(f"vs cuBLAS {result.vs_cublas.relative:.2e}")
    if result.failures:
        parts.append("-- " + "; ".join(result.failures))
    return "  ".join(parts)


def write_json(results: list[Result], path: str | Path) -> None:
    records = [dict(asdict(result), passed=result.passed, failures=result.failures) for result in results]
    Path(path).write_text(json.dumps(records, indent=2) + "\n")


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("specs", nargs="+", metavar="SPEC", help=inputs_help("verify", "files to compile and check"))
    parser.add_argument("--sizes", help=f"comma-separated MxNxK problem sizes (default {DEFAULT_SIZES})")
    parser.add_argument("--seed", type=int, default=0, help="random seed for the inputs (default 0)")
    parser.add_argument("--json", metavar="FILE", help="also write every result to FILE as JSON")


def verify_main(args: argparse.Namespace) -> int:
    """`gemmdsl verify`: 0 when every case passes, 1 on a failure or compile error, 2 without a GPU.
    A family is verified member by member, each at the sizes it takes."""
    work = partial(verify_and_report, seed=args.seed, json_path=args.json)
    return run_on_specs_and_families(args.specs, args.sizes or DEFAULT_SIZES, work, as_members=True)


def verify_and_report(kernels: list[Kernel], sizes: list[Size], seed: int, json_path: str | None) -> int:
    results = []
    grouped = [kernel for kernel in kernels if kernel.requirements.grouped]  # their own cases (grouped_bench.py)
    grouped_passed = grouped_ran = 0
    for kernel in grouped:
        passed, ran = verify_grouped(kernel, seed)
        grouped_passed, grouped_ran = grouped_passed + passed, grouped_ran + ran
    status = 0
    for kernel in (kernel for kernel in kernels if not kernel.requirements.grouped):
        try:
            found = verify_quantized(kernel, sizes, seed) if "quant" in kernel.metadata else verify(kernel, sizes, seed)
        except GpuUnavailable as err:  # no PyTorch for a dequantizing kernel
            print(f"error: {err}", file=sys.stderr)
            status = 2
            continue
        for result in found:
            print(format_result(result), flush=True)
            results.append(result)
    if json_path:
        write_json(results, json_path)
    failed = sum(not result.passed for result in results)
    skipped = sum(bool(result.skipped) for result in results)
    ran = len(results) - skipped + grouped_ran
    failed += grouped_ran - grouped_passed
    print(f"{ran - failed}/{ran} cases passed" + (f", {skipped} sizes skipped" if skipped else ""))
    return 1 if failed else status

"""Check generated kernels against cuBLAS and a float64 reference on random inputs.

Each case uses fresh inputs uniform in [-1, 1]. The output C is poisoned with
NaN before the launch, so an element the kernel never writes (or a C it reads
although beta is 0) shows up as a non-finite result, and it sits between two
NaN guard regions, so a store outside C shows up as a changed guard.

Tolerance: an FP32 SGEMM with K <= 8192 lands near 1e-6 relative (Frobenius)
error against float64; 1e-5 leaves room for summation order, while a wrong
index or a dropped k-tile is off by orders of magnitude. The float64
reference (DGEMM on the GPU) is used for problems up to 2048 in every
dimension; larger ones are compared with FP32 cuBLAS only.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from .runtime import Kernel, Size, format_size, require_fp32_cublas, run_on_kernels

DEFAULT_SIZES = "1024x1024x1024,2048x1024x512"
TOLERANCE = 1e-5
FLOAT64_MAX_DIM = 2048
GUARD_ELEMENTS = 1 << 16  # a multiple of 4 floats, so C stays 16-byte aligned inside its buffer


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
    vs_cublas: Error
    vs_float64: Error | None  # None above FLOAT64_MAX_DIM
    cublas_vs_float64: Error | None  # cuBLAS's own error, the yardstick for vs_float64
    tolerance: float = TOLERANCE

    @property
    def failures(self) -> list[str]:
        """Why the case failed; empty when it passed."""
        reasons = []
        if self.nonfinite:
            reasons.append(f"{self.nonfinite} non-finite outputs")
        if self.wrote_outside_c:
            reasons.append("wrote outside C")
        if not self.nonfinite:  # with NaNs in C every error is NaN, which says nothing more
            for label, error in (("float64", self.vs_float64), ("cuBLAS", self.vs_cublas)):
                if error is not None and not error.relative <= self.tolerance:
                    reasons.append(f"error vs {label} {error.relative:.2e} > {self.tolerance:.0e}")
        return reasons

    @property
    def passed(self) -> bool:
        return not self.failures


def verify(kernel: Kernel, sizes: list[Size], seed: int = 0) -> list[Result]:
    """Run `kernel` on every size (and, for alpha_beta kernels, with alpha=1.5, beta=-0.5 too)."""
    import cupy

    require_fp32_cublas()
    rng = cupy.random.RandomState(seed)
    results = []
    for m, n, k in sizes:
        a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
        for alpha, beta in scalar_cases(kernel.epilogue):
            c_in = random_matrix(rng, m, n) if beta else None
            results.append(check_case(kernel, a, b, c_in, alpha, beta))
    return results


def scalar_cases(epilogue: str) -> list[tuple[float, float]]:
    """beta=0 must not read C (the NaN poison checks it); beta!=0 must blend it in."""
    return [(1.0, 0.0), (1.5, -0.5)] if epilogue == "alpha_beta" else [(1.0, 0.0)]


def random_matrix(rng: Any, rows: int, cols: int) -> Any:
    import cupy

    return rng.uniform(-1.0, 1.0, (rows, cols), dtype=cupy.float32)


def check_case(kernel: Kernel, a: Any, b: Any, c_in: Any | None, alpha: float, beta: float) -> Result:
    import cupy

    (m, k), n = a.shape, b.shape[1]
    buffer = cupy.full(m * n + 2 * GUARD_ELEMENTS, cupy.nan, dtype=cupy.float32)
    c = buffer[GUARD_ELEMENTS:GUARD_ELEMENTS + m * n].reshape(m, n)
    if c_in is not None:
        c[...] = c_in
    kernel(a, b, c, alpha, beta)
    guards = cupy.concatenate((buffer[:GUARD_ELEMENTS], buffer[GUARD_ELEMENTS + m * n:]))
    cublas = expected(a, b, c_in, alpha, beta)
    float64 = None
    if max(m, n, k) <= FLOAT64_MAX_DIM:
        float64 = expected(a.astype(cupy.float64), b.astype(cupy.float64),
                           None if c_in is None else c_in.astype(cupy.float64), alpha, beta)
    return Result(kernel=kernel.name, m=m, n=n, k=k, alpha=alpha, beta=beta,
                  nonfinite=int((~cupy.isfinite(c)).sum()), wrote_outside_c=not bool(cupy.isnan(guards).all()),
                  vs_cublas=error(c, cublas), vs_float64=None if float64 is None else error(c, float64),
                  cublas_vs_float64=None if float64 is None else error(cublas, float64))


def expected(a: Any, b: Any, c_in: Any | None, alpha: float, beta: float) -> Any:
    """alpha*A@B + beta*C through cuBLAS, in the precision of the inputs."""
    import cupy

    product = alpha * cupy.matmul(a, b)
    return product if c_in is None else product + beta * c_in


def error(actual: Any, reference: Any) -> Error:
    import cupy

    difference = actual.astype(cupy.float64) - reference.astype(cupy.float64, copy=False)
    relative = cupy.linalg.norm(difference) / cupy.linalg.norm(reference.astype(cupy.float64, copy=False))
    return Error(relative=float(relative), max_abs=float(cupy.abs(difference).max()))


def format_result(result: Result) -> str:
    """One line per case: verdict, shape, scalars, and the errors."""
    verdict = "PASS" if result.passed else "FAIL"
    shape = format_size((result.m, result.n, result.k))
    parts = [f"{verdict}  {result.kernel:<20} {shape:<16} alpha={result.alpha:g} beta={result.beta:g}"]
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
    parser.add_argument("specs", nargs="+", metavar="SPEC", help=".gemm files to compile and check")
    parser.add_argument("--sizes", help=f"comma-separated MxNxK problem sizes (default {DEFAULT_SIZES})")
    parser.add_argument("--seed", type=int, default=0, help="random seed for the inputs (default 0)")
    parser.add_argument("--json", metavar="FILE", help="also write every result to FILE as JSON")


def verify_main(args: argparse.Namespace) -> int:
    """`gemmdsl verify`: 0 when every case passes, 1 on a failure or compile error, 2 without a GPU."""
    work = partial(verify_and_report, seed=args.seed, json_path=args.json)
    return run_on_kernels(args.specs, args.sizes or DEFAULT_SIZES, work)


def verify_and_report(kernels: list[Kernel], sizes: list[Size], seed: int, json_path: str | None) -> int:
    results = []
    for kernel in kernels:
        for result in verify(kernel, sizes, seed):
            print(format_result(result), flush=True)
            results.append(result)
    if json_path:
        write_json(results, json_path)
    failed = sum(not result.passed for result in results)
    print(f"{len(results) - failed}/{len(results)} cases passed")
    return 1 if failed else 0

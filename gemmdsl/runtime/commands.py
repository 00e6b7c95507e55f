"""The shared body of the GPU commands (`gemmdsl verify`, `gemmdsl bench`): their sizes, and their specs
compiled and loaded."""
from __future__ import annotations

import sys
from typing import Callable

from ..abi import size_errors
from ..source import CompileError
from .binaries import KernelBuildError
from .environment import GpuUnavailable, require_fp32_cublas, require_gpu
from .kernel import Kernel, compile_spec
from .operands import Size
from .quantized import QuantizedKernel


def parse_sizes(text: str) -> list[Size]:
    """'1024x1024x1024,2048x1024x512' -> [(M, N, K), ...]; a single number means a cube."""
    sizes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        dims = item.lower().split("x")
        if len(dims) == 1:
            dims *= 3
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise ValueError(f"bad size {item!r}: expected MxNxK with positive integers, e.g. 2048x1024x512")
        size = (int(dims[0]), int(dims[1]), int(dims[2]))
        beyond = size_errors(size)
        if beyond:
            raise ValueError(f"bad size {item!r}: {'; '.join(beyond)}")
        sizes.append(size)
    if not sizes:
        raise ValueError("no sizes given")
    return sizes


def format_size(size: Size) -> str:
    return "x".join(map(str, size))


def run_on_kernels(spec_paths: list[str], sizes_text: str, work: Callable[[list[Kernel], list[Size]], int]) -> int:
    """Compile and load every spec, then `work(kernels, sizes)` on those that loaded.

    A spec that cannot run (it or its CUDA does not compile, or the GPU is older than its
    target) is reported and skipped, and makes the exit status 1 at the end. 2: bad sizes,
    or no GPU to run on (specs are compiled first, so their errors show even without one).
    """
    try:
        sizes = parse_sizes(sizes_text)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    compiled, failed = [], 0
    for path in spec_paths:
        try:
            artifacts = compile_spec(path)
        except CompileError as err:
            print(err.render(), file=sys.stderr)
            failed += 1
            continue
        compiled.append(artifacts)
    try:
        require_gpu()
        require_fp32_cublas()
    except GpuUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        return 1 if failed else 2
    kernels = []
    for artifacts in compiled:
        try:
            # a dequantizing spec's call takes packed weights (verify and bench draw them for it)
            kernels.append((QuantizedKernel if "quant" in artifacts.metadata else Kernel)(artifacts))
        except (KernelBuildError, GpuUnavailable) as err:
            print(f"{artifacts.spec.span.file}: error: {err}", file=sys.stderr)
            failed += 1
    # With no spec given, `work` still runs: it may bring kernels of its own (kernel families).
    status = work(kernels, sizes) if kernels or not spec_paths else 0
    return max(status, 1 if failed else 0)

"""Load a compiled spec onto the GPU and launch it from Python through CuPy.

    kernel = gemmdsl.load("specs/sgemm_v1.gemm")
    c = kernel(a, b)                      # a, b: float32 cupy arrays, row-major

CuPy is imported inside the functions that need a GPU, so the compiler, the CLI
and the CPU tests work on machines without it.

Binaries. NVRTC (through CuPy) turns the kernel part of the `.cu` into a cubin
for the spec's target; `nvcc -cubin` is tried only when NVRTC fails. The cubin
is kept on disk under `$GEMMDSL_CACHE` (default `~/.cache/gemmdsl`) and loaded
with `cupy.RawModule(path=...)`, which only needs public CuPy API. We keep our
own cache rather than relying on CuPy's kernel cache because CuPy offers no
public way to get the compiled binary back, and because a cache we own can be
tested: `compile_cubin` is called only on a miss.

Validation. The generated kernels are exact-shape and use 16-byte vector
accesses, so a bad call would read out of bounds instead of failing. Every
launch is checked first by `check_call`, a pure function over objects with
`shape`, `dtype`, `strides` and `data.ptr` (tests use plain fakes).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy

from .source import CompileError

DEFAULT_SMEM_LIMIT = 48 * 1024  # above this a kernel must opt in to more dynamic shared memory
NVRTC_OPTIONS = ("-std=c++17", "-lineinfo")  # -lineinfo lets ncu map stalls to source lines
NVCC_TIMEOUT_S = 600

Size = tuple[int, int, int]  # (M, N, K)


class KernelBuildError(RuntimeError):
    """Neither NVRTC nor nvcc could turn the generated CUDA into a cubin."""


class GpuUnavailable(RuntimeError):
    """No CuPy, no CUDA device, or no true-FP32 cuBLAS: the GPU commands cannot run (exit status 2)."""


# ---------------------------------------------------------------------------
# Launch requirements and argument checks (pure; no CuPy needed)


@dataclass(frozen=True)
class Requirements:
    """What a generated kernel demands of its arguments, read from its metadata."""

    kernel: str
    tile_m: int
    tile_n: int
    tile_k: int
    alignment_bytes: int
    epilogue: str  # "store": C = A@B; "alpha_beta": C = alpha*A@B + beta*C

    @classmethod
    def from_metadata(cls, metadata: dict) -> "Requirements":
        requires = metadata["requires"]
        return cls(kernel=metadata["kernel"], tile_m=requires["m_multiple"], tile_n=requires["n_multiple"],
                   tile_k=requires["k_multiple"], alignment_bytes=requires["alignment_bytes"],
                   epilogue=metadata["epilogue"])


def check_call(req: Requirements, a: Any, b: Any, c: Any | None, alpha: float, beta: float) -> Size:
    """Check one call's operands and scalars against `req`; return (M, N, K) or raise.

    Type problems raise TypeError, everything else ValueError; each message names
    the operand or dimension at fault.
    """
    operands = {"A": a, "B": b} if c is None else {"A": a, "B": b, "C": c}
    for name, array in operands.items():
        check_matrix(name, array)
    m, n, k = problem_size(a, b, c)
    check_divisible(req, m, n, k)
    for name, array in operands.items():
        check_alignment(name, array, req.alignment_bytes)
    check_scalars(req, alpha, beta, c_given=c is not None)
    return m, n, k


def check_matrix(name: str, array: Any) -> None:
    """A float32, 2-D, row-major (C-contiguous) matrix."""
    dtype = numpy.dtype(array.dtype)
    if dtype != numpy.float32:
        raise TypeError(f"{name} must be float32, got {dtype}")
    if len(array.shape) != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {tuple(array.shape)}")
    if not is_c_contiguous(array.shape, array.strides, dtype.itemsize):
        raise ValueError(f"{name} must be C-contiguous (row-major), got strides {tuple(array.strides)} for shape "
                         f"{tuple(array.shape)}; pass cupy.ascontiguousarray({name.lower()})")


def is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Row-major without gaps; like NumPy, the stride of an extent-1 axis does not matter."""
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def problem_size(a: Any, b: Any, c: Any | None) -> Size:
    """(M, N, K) from A (MxK) and B (KxN), checking that B and C agree with A."""
    m, k = a.shape
    k_of_b, n = b.shape
    if k_of_b != k:
        raise ValueError(f"inner dimensions disagree: A is {m}x{k} (MxK) but B is {k_of_b}x{n} (KxN)")
    if c is not None and tuple(c.shape) != (m, n):
        raise ValueError(f"C must be MxN = {m}x{n}, got {'x'.join(map(str, c.shape))}")
    return m, n, k


def check_divisible(req: Requirements, m: int, n: int, k: int) -> None:
    """The kernels handle whole block tiles only (bounds: exact)."""
    for dim, extent, tile, tile_name in (("M", m, req.tile_m, "BM"), ("N", n, req.tile_n, "BN"),
                                         ("K", k, req.tile_k, "BK")):
        if extent <= 0:
            raise ValueError(f"{dim}={extent}: every dimension must be positive")
        if extent % tile:
            raise ValueError(f"{dim}={extent} is not a multiple of the block tile's {tile_name}={tile}; "
                             f"{req.kernel} only handles exact multiples of its "
                             f"{req.tile_m}x{req.tile_n}x{req.tile_k} tile")


def check_alignment(name: str, array: Any, alignment: int) -> None:
    """The kernels use 16-byte vector loads and stores, which fault on unaligned addresses."""
    pointer = array.data.ptr
    if pointer % alignment:
        raise ValueError(f"{name}'s data pointer {pointer:#x} is not {alignment}-byte aligned "
                         f"(an offset view into a larger array is the usual cause)")


def check_scalars(req: Requirements, alpha: float, beta: float, *, c_given: bool) -> None:
    """A store epilogue computes exactly A@B; a nonzero beta needs a C to read."""
    if req.epilogue == "store" and (alpha != 1 or beta != 0):
        raise ValueError(f"{req.kernel} has a 'store' epilogue (C = A@B): alpha must be 1 and beta 0, "
                         f"got alpha={alpha}, beta={beta}")
    if beta != 0 and not c_given:
        raise ValueError(f"beta={beta} reads C, but no C was passed")


def require_device_arrays(device_array_type: type, **operands: Any) -> None:
    """Host arrays would hand the kernel host pointers; refuse them by name."""
    for name, array in operands.items():
        if array is not None and not isinstance(array, device_array_type):
            raise TypeError(f"{name} must be a cupy.ndarray in GPU memory, got {type(array).__module__}."
                            f"{type(array).__qualname__}")


def grid_size(req: Requirements, m: int, n: int) -> tuple[int, int, int]:
    """One block per BMxBN tile of C, numbered along a 1-D grid (the kernel rasterises it)."""
    return (m // req.tile_m) * (n // req.tile_n), 1, 1


def check_device_runs(target: str, compute_capability: str) -> None:
    """A cubin for sm_XY runs on devices of major X with minor >= Y; say so before CUDA fails obscurely."""
    match = re.fullmatch(r"sm_(\d+)(\d)", target)
    if match is None:
        raise ValueError(f"unsupported target {target!r}; expected sm_<major><minor>, e.g. sm_90")
    major, minor = int(match[1]), int(match[2])
    device_major, device_minor = int(compute_capability[:-1]), int(compute_capability[-1])
    if device_major != major or device_minor < minor:
        raise GpuUnavailable(f"the kernel targets {target}, but this GPU is sm_{compute_capability}; "
                             f"recompile the spec for sm_{compute_capability}")


# ---------------------------------------------------------------------------
# Binary cache


def cache_dir() -> Path:
    return Path(os.environ.get("GEMMDSL_CACHE") or Path.home() / ".cache" / "gemmdsl")


def cache_key(metadata: dict, source: str, cupy_version: str) -> str:
    """Everything that decides the cubin's bytes.

    spec_hash names the spec, target and compiler version; the source hash also
    catches code generator changes that did not bump the version.
    """
    parts = {"spec_hash": metadata["spec_hash"], "gemmdsl": metadata["gemmdsl_version"],
             "target": metadata["target"], "cupy": cupy_version, "options": NVRTC_OPTIONS,
             "source": hashlib.sha256(source.encode()).hexdigest()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def cubin_file_name(metadata: dict, key: str) -> str:
    return f"{metadata['kernel']}-{metadata['target']}-{key[:32]}.cubin"


class BinaryCache:
    """Compiled binaries on disk, one file per key; writes are atomic, so readers never see half a file."""

    def __init__(self, directory: Path):
        self.directory = directory

    def get_or_build(self, file_name: str, build: Callable[[], bytes]) -> Path:
        """Path of the cached binary, calling `build` only when it is not there yet."""
        path = self.directory / file_name
        if not path.is_file():
            self._write_atomically(path, build())
        return path

    def _write_atomically(self, path: Path, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise


# ---------------------------------------------------------------------------
# Compiling


def compile_cubin(source: str, target: str) -> bytes:
    """NVRTC first (no toolkit needed beyond CuPy's); nvcc only if NVRTC fails."""
    try:
        return compile_with_nvrtc(source, target)
    except Exception as nvrtc_error:  # CuPy's CompileException, or its private API having moved
        if shutil.which("nvcc") is None:
            raise KernelBuildError(f"NVRTC failed and nvcc is not on PATH:\n{nvrtc_error}") from nvrtc_error
        try:
            return compile_with_nvcc(source, target)
        except KernelBuildError as nvcc_error:
            raise KernelBuildError(f"NVRTC failed:\n{nvrtc_error}\n{nvcc_error}") from nvcc_error


def compile_with_nvrtc(source: str, target: str) -> bytes:
    """A cubin from CuPy's NVRTC wrapper.

    `compile_using_nvrtc` is not documented API, but it is what RawModule itself
    uses; with a numeric arch it passes `-arch=sm_XX`, so NVRTC emits a cubin
    (or PTX if CUPY_CUDA_COMPILE_WITH_PTX is set; cuModuleLoad accepts both).
    Older CuPy returns the binary, newer CuPy a (binary, name mapping) pair.
    """
    from cupy.cuda import compiler

    compiled = compiler.compile_using_nvrtc(source, NVRTC_OPTIONS, arch=target.removeprefix("sm_"))
    binary = compiled[0] if isinstance(compiled, tuple) else compiled
    return binary.encode() if isinstance(binary, str) else bytes(binary)


def compile_with_nvcc(source: str, target: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="gemmdsl-") as directory:
        cu_path, cubin_path = Path(directory, "kernel.cu"), Path(directory, "kernel.cubin")
        cu_path.write_text(source)
        command = ["nvcc", "-cubin", f"-arch={target}", *NVRTC_OPTIONS, "-o", str(cubin_path), str(cu_path)]
        try:
            subprocess.run(command, capture_output=True, text=True, check=True, timeout=NVCC_TIMEOUT_S)
        except subprocess.CalledProcessError as err:
            raise KernelBuildError(f"nvcc failed:\n{err.stderr}") from None
        except (OSError, subprocess.TimeoutExpired) as err:
            raise KernelBuildError(f"cannot run nvcc: {err}") from None
        return cubin_path.read_bytes()


# ---------------------------------------------------------------------------
# Kernels


@dataclass(frozen=True)
class BoundLaunch:
    """One validated launch, ready to repeat without re-checking (what the benchmark times)."""

    function: Any  # cupy.RawKernel
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple
    shared_mem: int
    c: Any  # the output matrix

    def __call__(self) -> None:
        self.function(self.grid, self.block, self.args, shared_mem=self.shared_mem)


class Kernel:
    """A compiled spec loaded on the current device; call it like a function."""

    def __init__(self, artifacts: Any):
        import cupy

        self.spec = artifacts.spec
        self.metadata = artifacts.metadata
        self.source = artifacts.cuda
        self.name: str = self.metadata["kernel"]
        self.requirements = Requirements.from_metadata(self.metadata)
        check_device_runs(self.metadata["target"], cupy.cuda.Device().compute_capability)
        self._module = cupy.RawModule(path=str(self._cubin_path(cupy.__version__)))  # keeps the module loaded
        self._function = self._module.get_function(self.metadata["entry"])
        if self.dynamic_smem_bytes > DEFAULT_SMEM_LIMIT:
            self._function.max_dynamic_shared_size_bytes = self.dynamic_smem_bytes

    @property
    def dynamic_smem_bytes(self) -> int:
        return self.metadata["dynamic_smem_bytes"]

    @property
    def epilogue(self) -> str:
        return self.requirements.epilogue

    def _cubin_path(self, cupy_version: str) -> Path:
        key = cache_key(self.metadata, self.source, cupy_version)
        return BinaryCache(cache_dir()).get_or_build(
            cubin_file_name(self.metadata, key), lambda: compile_cubin(self.source, self.metadata["target"]))

    def bind(self, a: Any, b: Any, c: Any | None = None, alpha: float = 1.0, beta: float = 0.0) -> BoundLaunch:
        """Validate the operands once and allocate C if needed; the result launches on call."""
        import cupy

        require_device_arrays(cupy.ndarray, A=a, B=b, C=c)
        m, n, k = check_call(self.requirements, a, b, c, alpha, beta)
        if c is None:
            c = cupy.empty((m, n), dtype=cupy.float32)
        args = (a, b, c, numpy.int32(m), numpy.int32(n), numpy.int32(k), numpy.float32(alpha), numpy.float32(beta))
        block = (self.metadata["threads"], 1, 1)
        return BoundLaunch(self._function, grid_size(self.requirements, m, n), block, args,
                           self.dynamic_smem_bytes, c)

    def __call__(self, a: Any, b: Any, c: Any | None = None, alpha: float = 1.0, beta: float = 0.0,
                 stream: Any = None) -> Any:
        """C = A@B (store) or alpha*A@B + beta*C (alpha_beta), on `stream` or the current one; returns C."""
        launch = self.bind(a, b, c, alpha, beta)
        with (stream if stream is not None else contextlib.nullcontext()):
            launch()
        return launch.c

    def __repr__(self) -> str:
        req = self.requirements
        return (f"<gemmdsl.Kernel {self.name}: {req.tile_m}x{req.tile_n}x{req.tile_k} tile, "
                f"{self.metadata['threads']} threads, {req.epilogue} epilogue, {self.metadata['target']}>")


def load(spec_or_path: Any, *, text: str | None = None) -> Kernel:
    """Compile a spec (a `.gemm` path, or `text` with spec_or_path as its display name) and load it.

    Already compiled `Artifacts` are accepted as they are.
    """
    return Kernel(compile_spec(spec_or_path, text=text))


def compile_spec(spec_or_path: Any, *, text: str | None = None) -> Any:
    from .compiler import compile_path, compile_text

    if text is not None:
        return compile_text(text, path=os.fspath(spec_or_path) if spec_or_path is not None else "<string>.gemm")
    if hasattr(spec_or_path, "cuda") and hasattr(spec_or_path, "metadata"):
        return spec_or_path
    if isinstance(spec_or_path, (str, os.PathLike)):
        return compile_path(spec_or_path)
    raise TypeError(f"load() takes a .gemm path, compiled Artifacts or text=..., got {type(spec_or_path).__name__}")


# ---------------------------------------------------------------------------
# Environment checks and the shared body of `gemmdsl verify` / `gemmdsl bench`


def gpu_unavailable_reason() -> str | None:
    """Why CuPy cannot run kernels here, or None when it can."""
    try:
        import cupy
    except ImportError as err:
        return f"CuPy is not installed ({err}); install cupy-cuda13x on a machine with an NVIDIA GPU"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as err:
        return f"no usable CUDA device: {err}"
    return None if count > 0 else "no CUDA device found"


def require_gpu() -> None:
    reason = gpu_unavailable_reason()
    if reason is not None:
        raise GpuUnavailable(reason)


def require_fp32_cublas() -> None:
    """Make sure cupy.matmul on float32 really is FP32, so it is a fair baseline and a tight reference.

    CuPy asks cuBLAS for TF32 only when CUPY_TF32 is a positive integer at its
    first float32 matmul; NVIDIA_TF32_OVERRIDE=0 additionally keeps the CUDA
    libraries themselves from choosing TF32. Both default to what we want here.
    """
    os.environ.setdefault("CUPY_TF32", "0")
    os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
    if os.environ["CUPY_TF32"].strip() not in ("", "0"):
        raise GpuUnavailable(f"CUPY_TF32={os.environ['CUPY_TF32']} makes cuBLAS use TF32; unset it to compare "
                             f"against FP32")


def parse_sizes(text: str) -> list[Size]:
    """'1024x1024x1024,2048x1024x512' -> [(M, N, K), ...]; a single number means a cube."""
    sizes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        dims = item.lower().split("x")
        if len(dims) == 1:
            dims *= 3
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise ValueError(f"bad size {item!r}: expected MxNxK with positive integers, e.g. 2048x1024x512")
        sizes.append((int(dims[0]), int(dims[1]), int(dims[2])))
    if not sizes:
        raise ValueError("no sizes given")
    return sizes


def format_size(size: Size) -> str:
    return "x".join(map(str, size))


def run_on_kernels(spec_paths: list[str], sizes_text: str, work: Callable[[list[Kernel], list[Size]], int]) -> int:
    """Compile and load every spec, then `work(kernels, sizes)`; each failure becomes its exit status.

    1: a spec or the generated CUDA does not compile. 2: bad sizes, or no GPU to
    run on (specs are compiled first, so their errors show even without one).
    """
    try:
        sizes = parse_sizes(sizes_text)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        artifacts = [compile_spec(path) for path in spec_paths]
        require_gpu()
        require_fp32_cublas()
        kernels = [Kernel(compiled) for compiled in artifacts]
    except CompileError as err:
        print(err.render(), file=sys.stderr)
        return 1
    except KernelBuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except GpuUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return work(kernels, sizes)

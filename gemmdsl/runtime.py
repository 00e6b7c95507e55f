"""Load a compiled spec onto the GPU and launch it from Python through CuPy.

    kernel = gemmdsl.load("specs/sgemm_v1.gemm")
    c = kernel(a, b)                      # a, b: float32 cupy arrays (or views) in the spec's layouts

CuPy is imported inside the functions that need a GPU, so the compiler, the CLI
and the CPU tests work on machines without it.

Binaries. `nvcc -cubin` turns the kernel part of the `.cu` into a cubin for the
spec's target when nvcc is on PATH (it is what `gemmdsl compile` reports registers
for); NVRTC, through CuPy, otherwise (see `compile_cubin`). The cubin
is kept on disk under `$GEMMDSL_CACHE` (default `~/.cache/gemmdsl`) and loaded
with `cupy.RawModule(path=...)`, which only needs public CuPy API. We keep our
own cache rather than relying on CuPy's kernel cache because CuPy offers no
public way to get the compiled binary back, and because a cache we own can be
tested: `compile_cubin` is called only on a miss.

Validation. A kernel reads its operands through raw pointers, so a bad call would
read out of bounds instead of failing. Every launch is checked first by
`check_call`, a pure function over objects with `shape`, `dtype`, `strides` and
`data.ptr` (tests use plain fakes): the layout each operand must have, the leading
dimensions and batch strides its strides imply, whole tiles for `bounds: exact`,
and the choice the host launcher makes between the vector kernel and the scalar
one (`choose_entry`).
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

from .abi import MAX_BATCH, MAX_INT
from .schedule import StreamKSplit, stream_k_split
from .targets import arch, occupancy_of
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

OPERAND_NAMES = ("A", "B", "C")


@dataclass(frozen=True)
class Requirements:
    """What a generated kernel demands of its arguments, read from its metadata."""

    kernel: str
    block_tile: tuple[int, int, int]  # BM, BN, BK: the grid has one block per BM x BN tile of C
    multiples: tuple[int, int, int]  # M, N, K must be multiples of these (all 1 for bounds: checked)
    epilogue: str  # "store": C = A@B; "alpha_beta": C = alpha*A@B + beta*C
    layouts: dict[str, str]  # "A" -> "row" | "col"
    vector_elements: dict[str, int]  # "A" -> what pointer (in floats), ld and batch stride must be multiples of
    max_leading_dimension: dict[str, int]
    vector_entry: str
    scalar_entry: str | None  # run when an operand is not vector-aligned; None: such calls are refused
    batched: bool
    stream_k_entry: str | None = None  # schedule: stream_k: the kernel that shares the last wave's tiles
    prepare_entry: str | None = None  # ... and the one that first sets those tiles of C to beta * C

    @classmethod
    def from_metadata(cls, metadata: dict) -> "Requirements":
        requires = metadata["requires"]
        per_operand = lambda table: {name: table[name.lower()] for name in OPERAND_NAMES}  # noqa: E731
        return cls(kernel=metadata["kernel"], block_tile=tuple(metadata["block_tile"]),
                   multiples=(requires["m_multiple"], requires["n_multiple"], requires["k_multiple"]),
                   epilogue=metadata["epilogue"], layouts=per_operand(metadata["layouts"]),
                   vector_elements=per_operand(requires["vector_elements"]),
                   max_leading_dimension=per_operand(requires["max_leading_dimension"]),
                   vector_entry=metadata["entries"]["vector"], scalar_entry=metadata["entries"]["scalar"],
                   batched=metadata["batch"] == "strided", stream_k_entry=metadata["entries"]["stream_k"],
                   prepare_entry=metadata["entries"]["prepare"])


@dataclass(frozen=True)
class OperandView:
    """One operand as the kernel addresses it, in elements: rows x cols of each matrix of a batch,
    the leading dimension of its layout, the distance between batch matrices, its first address."""

    name: str
    rows: int
    cols: int
    batch: int  # 1 for a 2-D array
    ld: int
    batch_stride: int  # 0 for a 2-D array: every GEMM of a batch uses the same matrix
    pointer: int


@dataclass(frozen=True)
class CheckedCall:
    """A call that passed every check: the problem, the operands' views and the kernel to run."""

    m: int
    n: int
    k: int
    batch: int
    views: dict[str, OperandView]
    entry: str

    @property
    def size(self) -> Size:
        return self.m, self.n, self.k


def check_call(req: Requirements, a: Any, b: Any, c: Any | None, alpha: float, beta: float) -> CheckedCall:
    """Check one call's operands and scalars against `req`; what to launch, or an exception.

    Type problems raise TypeError, everything else ValueError; each message names the
    operand or dimension at fault.
    """
    arrays = {"A": a, "B": b} if c is None else {"A": a, "B": b, "C": c}
    for name, array in arrays.items():
        check_matrix(req, name, array)
    views = {name: operand_view(req, name, array) for name, array in arrays.items()}
    m, n, k = problem_size(views)
    check_divisible(req, m, n, k)
    batch = check_batch(req, views)
    for view in views.values():
        check_leading_dimension(req, view)
    check_scalars(req, alpha, beta, c_given=c is not None)
    return CheckedCall(m, n, k, batch, views, choose_entry(req, views))


def check_matrix(req: Requirements, name: str, array: Any) -> None:
    """A float32 matrix: 2-D, or 3-D (a batch) for a batched kernel."""
    dtype = numpy.dtype(array.dtype)
    if dtype != numpy.float32:
        raise TypeError(f"{name} must be float32, got {dtype}")
    if len(array.shape) == 3 and not req.batched:
        raise ValueError(f"{name} is a batch of matrices (shape {tuple(array.shape)}), but {req.kernel} is not "
                         f"batched; compile a spec with `batch: strided`")
    if len(array.shape) not in (2, 3):
        what = "a 2-D matrix or a 3-D batch" if req.batched else "a 2-D matrix"
        raise ValueError(f"{name} must be {what}, got shape {tuple(array.shape)}")
    if any(stride < 0 or stride % dtype.itemsize for stride in array.strides):
        raise ValueError(f"{name} has strides {tuple(array.strides)}; the kernel needs non-negative whole-element "
                         f"strides")


def leading_dimension(shape: tuple[int, int], strides: tuple[int, int], itemsize: int, layout: str) -> int | None:
    """The leading dimension of a rows x cols matrix with these (byte) strides in a row- or
    column-major layout, or None when the strides are not that layout.

    A matrix of one row (row-major) or one column (column-major) never steps by its leading
    dimension, so any value at least its length addresses it; a multiple of 4 keeps it vector-aligned.
    """
    (rows, cols), (row_stride, col_stride) = shape, strides
    outer, inner, outer_stride, inner_stride = ((rows, cols, row_stride, col_stride) if layout == "row"
                                                else (cols, rows, col_stride, row_stride))
    if inner > 1 and inner_stride != itemsize:
        return None
    if outer == 1:
        return -(-inner // 4) * 4
    ld = outer_stride // itemsize
    return ld if ld >= inner else None


def operand_view(req: Requirements, name: str, array: Any) -> OperandView:
    """How the kernel addresses `array`, which must be laid out as the spec says (views are fine)."""
    itemsize = numpy.dtype(array.dtype).itemsize
    shape, strides = tuple(array.shape), tuple(array.strides)
    layout = req.layouts[name]
    ld = leading_dimension(shape[-2:], strides[-2:], itemsize, layout)
    if ld is None:
        convert = "cupy.ascontiguousarray" if layout == "row" else "cupy.asfortranarray"
        other = "a transposed (.T) view" if layout == "col" else "a row-major array"
        raise ValueError(f"{name} must be {layout}-major: {req.kernel} was compiled with `{name.lower()}: f32 "
                         f"{layout}`, but strides {strides} for shape {shape} are not {layout}-major with a "
                         f"leading dimension of at least its {'columns' if layout == 'row' else 'rows'}; "
                         f"pass {convert}({name.lower()}) or {other}")
    batch = shape[0] if len(shape) == 3 else 1
    batch_stride = strides[0] // itemsize if len(shape) == 3 and batch > 1 else 0
    return OperandView(name, shape[-2], shape[-1], batch, ld, batch_stride, array.data.ptr)


def problem_size(views: dict[str, OperandView]) -> Size:
    """(M, N, K) from A (MxK) and B (KxN), checking that B and C agree with A."""
    a, b, c = views["A"], views["B"], views.get("C")
    m, k, n = a.rows, a.cols, b.cols
    if b.rows != k:
        raise ValueError(f"inner dimensions disagree: A is {m}x{k} (MxK) but B is {b.rows}x{n} (KxN)")
    if c is not None and (c.rows, c.cols) != (m, n):
        raise ValueError(f"C must be MxN = {m}x{n}, got {c.rows}x{c.cols}")
    return m, n, k


def check_batch(req: Requirements, views: dict[str, OperandView]) -> int:
    """The batch count: every 3-D operand has it; a 2-D A or B is shared by all GEMMs, C may not be."""
    counts = {view.batch for view in views.values() if view.batch > 1}
    if len(counts) > 1:
        sizes = ", ".join(f"{view.name} {view.batch}" for view in views.values())
        raise ValueError(f"the operands' batch sizes disagree: {sizes}")
    batch = counts.pop() if counts else 1
    if batch > MAX_BATCH:
        raise ValueError(f"batch {batch} is more than the {MAX_BATCH} the grid's z dimension holds")
    c = views.get("C")
    if c is not None and batch > 1 and c.batch_stride < footprint(c, req.layouts["C"]):
        raise ValueError(f"C's {batch} matrices overlap (batch stride {c.batch_stride} elements, each matrix spans "
                         f"{footprint(c, req.layouts['C'])}); every GEMM of a batch needs its own C")
    return batch


def footprint(view: OperandView, layout: str) -> int:
    """Elements from the first element of one matrix to just past its last."""
    outer, inner = (view.rows, view.cols) if layout == "row" else (view.cols, view.rows)
    return (outer - 1) * view.ld + inner


def check_divisible(req: Requirements, m: int, n: int, k: int) -> None:
    """Every dimension positive; for bounds: exact, whole block tiles only."""
    for dim, extent, multiple, tile_name, tile in zip("MNK", (m, n, k), req.multiples, ("BM", "BN", "BK"),
                                                      req.block_tile):
        if extent <= 0:
            raise ValueError(f"{dim}={extent}: every dimension must be positive")
        if extent > MAX_INT - tile:
            raise ValueError(f"{dim}={extent} is too large: the kernel's tile coordinates (up to {dim} + {tile_name}) "
                             f"are 32-bit")
        if extent % multiple:
            bm, bn, bk = req.multiples
            raise ValueError(f"{dim}={extent} is not a multiple of the block tile's {tile_name}={multiple}; "
                             f"{req.kernel} has bounds: exact and only handles exact multiples of its "
                             f"{bm}x{bn}x{bk} tile")


def check_leading_dimension(req: Requirements, view: OperandView) -> None:
    limit = req.max_leading_dimension[view.name]
    if view.ld > limit:
        raise ValueError(f"{view.name}'s leading dimension {view.ld} is more than the {limit} that {req.kernel}'s "
                         f"32-bit tile offsets allow")


def misalignments(req: Requirements, views: dict[str, OperandView]) -> list[str]:
    """Why the vector kernel cannot take these operands (empty when it can)."""
    reasons = []
    for view in views.values():
        elements = req.vector_elements[view.name]
        if view.pointer % (4 * elements):
            reasons.append(f"{view.name}'s data pointer {view.pointer:#x} is not {4 * elements}-byte aligned "
                           f"(an offset view into a larger array is the usual cause)")
        for what, value in (("leading dimension", view.ld), ("batch stride", view.batch_stride)):
            if value % elements:
                reasons.append(f"{view.name}'s {what} {value} is not a multiple of {elements}")
    return reasons


def choose_entry(req: Requirements, views: dict[str, OperandView]) -> str:
    """The kernel the launcher runs: the vector one when every vector access is aligned, else the
    scalar one (checked kernels); exact kernels refuse the call, as their launcher does."""
    reasons = misalignments(req, views)
    if not reasons:
        return req.vector_entry
    if req.scalar_entry is not None:
        return req.scalar_entry
    raise ValueError("; ".join(reasons) + f"; {req.kernel} has bounds: exact and no scalar fallback")


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


def grid_size(req: Requirements, m: int, n: int, batch: int = 1) -> tuple[int, int, int]:
    """One block per BMxBN tile of C (edge tiles included), numbered along x (the kernel rasterises
    it); the batch along z."""
    bm, bn, _ = req.block_tile
    return (-(-m // bm)) * (-(-n // bn)), 1, batch


def kernel_arguments(call: CheckedCall, a: Any, b: Any, c: Any, alpha: float, beta: float,
                     batched: bool) -> tuple:
    """The kernel's parameters in order (codegen.kernel_parameters)."""
    views = call.views
    arguments = (a, b, c, numpy.int32(call.m), numpy.int32(call.n), numpy.int32(call.k),
                 numpy.int32(views["A"].ld), numpy.int32(views["B"].ld), numpy.int32(views["C"].ld),
                 numpy.float32(alpha), numpy.float32(beta))
    if batched:
        arguments += tuple(numpy.int64(views[name].batch_stride) for name in OPERAND_NAMES)
    return arguments


def stream_k_launch(req: Requirements, call: CheckedCall, sms: int, blocks_per_sm: int) -> StreamKSplit:
    """The split the emitted launcher makes for this call on a GPU with `sms` SMs."""
    bm, bn, bk = req.block_tile
    return stream_k_split((call.m // bm) * (call.n // bn), call.k // bk, sms * blocks_per_sm)


def empty_c(cupy: Any, req: Requirements, m: int, n: int, batch: int) -> Any:
    """An uninitialised C in the spec's layout (a batch of them for a batched call)."""
    leading = (batch,) if batch > 1 else ()
    if req.layouts["C"] == "row":
        return cupy.empty(leading + (m, n), dtype=cupy.float32)
    return cupy.empty(leading + (n, m), dtype=cupy.float32).swapaxes(-1, -2)


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
    """nvcc when it is on PATH, NVRTC (through CuPy) otherwise.

    nvcc first: it is the compiler `gemmdsl compile` reports registers for, and on the
    H100 (CUDA 13.0) NVRTC's build of the same source took more registers (149 vs 127
    for sgemm_v3), halving occupancy, so benchmarks would not describe the kernel the
    analysis and the .cu describe.
    """
    if shutil.which("nvcc") is not None:
        return compile_with_nvcc(source, target)
    try:
        return compile_with_nvrtc(source, target)
    except Exception as nvrtc_error:  # CuPy's CompileException, or its private API having moved
        raise KernelBuildError(f"NVRTC failed and nvcc is not on PATH:\n{nvrtc_error}") from nvrtc_error


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
class KernelLaunch:
    function: Any  # a loaded kernel (cupy Function)
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple
    shared_mem: int

    def __call__(self) -> None:
        self.function(self.grid, self.block, self.args, shared_mem=self.shared_mem)


@dataclass(frozen=True)
class BoundLaunch:
    """One validated call, ready to repeat without re-checking (what the benchmark times): one
    kernel launch, or for stream-K up to three (set the shared tiles of C to beta * C, the stream-K
    kernel on them, the plain kernel on the other tiles)."""

    entry: str  # the GEMM kernel the call runs: the vector kernel or the scalar one
    launches: tuple[KernelLaunch, ...]
    c: Any  # the output matrix

    def __call__(self) -> None:
        for launch in self.launches:
            launch()


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
        req = self.requirements
        entries = filter(None, (req.vector_entry, req.scalar_entry, req.stream_k_entry, req.prepare_entry))
        self._functions = {entry: self._module.get_function(entry) for entry in entries}
        for function in self._functions.values():
            if self.dynamic_smem_bytes > DEFAULT_SMEM_LIMIT:
                function.max_dynamic_shared_size_bytes = self.dynamic_smem_bytes

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

    def bind(self, a: Any, b: Any, c: Any | None = None, alpha: float = 1.0, beta: float = 0.0,
             stream_k: bool = True) -> BoundLaunch:
        """Validate the operands once and allocate C if needed; the result launches on call.

        stream_k=False runs a `schedule: stream_k` spec's plain kernel on every tile: no atomics,
        so bitwise-repeatable results (and the launch the analysis passes describe)."""
        import cupy

        req = self.requirements
        require_device_arrays(cupy.ndarray, A=a, B=b, C=c)
        call = check_call(req, a, b, c, alpha, beta)
        if c is None:
            c = empty_c(cupy, req, call.m, call.n, call.batch)
            call = check_call(req, a, b, c, alpha, beta)  # C's alignment takes part in choosing the kernel
        block = (self.metadata["threads"], 1, 1)
        function = self._functions[call.entry]
        args = kernel_arguments(call, a, b, c, alpha, beta, req.batched)
        smem = self.dynamic_smem_bytes
        split = None
        if req.stream_k_entry is not None and stream_k:
            split = stream_k_launch(req, call, cupy.cuda.Device().attributes["MultiProcessorCount"],
                                    self._blocks_per_sm(function))
        if split is None or not split.sk_tiles:
            grid = grid_size(req, call.m, call.n, call.batch)
            return BoundLaunch(call.entry, (KernelLaunch(function, grid, block, args, smem),), c)
        # The launcher's steps (codegen.LauncherEmitter._emit_stream_k_launch), in the same order.
        launches = []
        if not (req.epilogue == "alpha_beta" and beta == 1.0):
            beta_first = numpy.float32(beta if req.epilogue == "alpha_beta" else 0.0)
            prepare_args = (c, numpy.int32(call.m), numpy.int32(call.n), numpy.int32(call.views["C"].ld),
                            beta_first, numpy.int32(split.sk_tiles))
            launches.append(KernelLaunch(self._functions[req.prepare_entry], (split.sk_tiles, 1, 1), block,
                                         prepare_args, 0))
        launches.append(KernelLaunch(self._functions[req.stream_k_entry], (split.sk_blocks, 1, 1), block,
                                     args + (numpy.int32(split.sk_tiles),), smem))
        if split.dp_tiles:
            launches.append(KernelLaunch(function, (split.dp_tiles, 1, 1), block, args, smem))
        return BoundLaunch(call.entry, tuple(launches), c)

    def _blocks_per_sm(self, function: Any) -> int:
        """Resident blocks per SM of the loaded binary (what cudaOccupancyMaxActiveBlocksPerMultiprocessor says)."""
        sm = int(self.metadata["target"].removeprefix("sm_"))
        return max(1, occupancy_of(arch(sm), function.num_regs, self.metadata["threads"],
                                   self.dynamic_smem_bytes).blocks_per_sm)

    def __call__(self, a: Any, b: Any, c: Any | None = None, alpha: float = 1.0, beta: float = 0.0,
                 stream: Any = None, stream_k: bool = True) -> Any:
        """C = A@B (store) or alpha*A@B + beta*C (alpha_beta), on `stream` or the current one; returns C.

        A, B and C may be views (a transposed view is column-major; a slice of wider rows has a
        leading dimension larger than its width) as long as each is laid out as the spec says.
        Batched kernels take 3-D arrays (batch, rows, cols); a 2-D A or B is used by every GEMM.
        stream_k=False: see `bind`.
        """
        launch = self.bind(a, b, c, alpha, beta, stream_k)
        with (stream if stream is not None else contextlib.nullcontext()):
            launch()
        return launch.c

    def __repr__(self) -> str:
        req = self.requirements
        layouts = "".join("N" if req.layouts[name] == "row" else "T" for name in ("A", "B"))
        return (f"<gemmdsl.Kernel {self.name}: {'x'.join(map(str, req.block_tile))} tile, "
                f"{self.metadata['threads']} threads, {layouts}, {self.metadata['bounds']} bounds, "
                f"{req.epilogue} epilogue, {self.metadata['target']}>")


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
    bypass_memory_pool_if_asked()


def bypass_memory_pool_if_asked() -> None:
    """With GEMMDSL_NO_MEMORY_POOL=1, every CuPy array gets its own cudaMalloc.

    CuPy's memory pool carves arrays out of larger blocks, so an access just past an
    operand lands in memory compute-sanitizer's memcheck considers allocated;
    scripts/sanitize.sh sets this so that memcheck sees each operand's own bounds.
    """
    if os.environ.get("GEMMDSL_NO_MEMORY_POOL", "") not in ("", "0"):
        import cupy

        cupy.cuda.set_allocator(None)


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

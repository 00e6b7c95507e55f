"""Load a compiled spec onto the GPU and launch it from Python through CuPy.

    kernel = gemmdsl.load("specs/sgemm_v1.gemm")
    c = kernel(a, b)      # a, b: GPU arrays (PyTorch, CuPy, JAX, Numba) or views, in the spec's layouts

CuPy is imported inside the functions that need a GPU, so the compiler, the CLI
and the CPU tests work on machines without it.

Operands. Any GPU array that speaks `__cuda_array_interface__` or DLPack is read
without a copy (`arrays.array_view`), and the kernel gets raw device pointers, so
nothing depends on CuPy knowing the dtype (bfloat16). The launch goes on the
caller's current stream: PyTorch's for PyTorch operands, CuPy's otherwise, or
`stream=`. A C the caller leaves out is made in A's library (JAX: made by CuPy and
handed over through DLPack, since JAX arrays are immutable).

Binaries. `nvcc -cubin` turns the kernel part of the `.cu` into a cubin when nvcc is
on PATH (it is what `gemmdsl compile` reports registers for); NVRTC, through CuPy,
otherwise; GEMMDSL_COMPILER=nvcc|nvrtc forces one (see `compile_cubin`). The cubin is
built for the GPU's own architecture when that is newer than the spec's target (the
source, and so the spec's limits, stay the target's), and is kept on disk under `$GEMMDSL_CACHE` (default `~/.cache/gemmdsl`) and loaded
with `cupy.RawModule(path=...)`, which only needs public CuPy API. We keep our
own cache rather than relying on CuPy's kernel cache because CuPy offers no
public way to get the compiled binary back, and because a cache we own can be
tested: `compile_cubin` is called only on a miss.

Validation. A kernel reads its operands through raw pointers, so a bad call would
read out of bounds instead of failing. Every launch is checked first by
`check_call`, a pure function over `arrays.ArrayView`s (tests build them from
fakes): the dtype and layout each operand must have, the leading dimensions and
batch strides its strides imply, whole tiles for `bounds: exact`, a C that overlaps
A, B or itself, and the choice the host launcher makes between the vector kernel, the
narrow ones and the scalar one (`choose_entry`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import cache, partial
from pathlib import Path
from typing import Any, Callable

import numpy

from .abi import MAX_BATCH, size_errors
from .build import (COMPILER_OPTIONS, NVCC_TIMEOUT_S, BuildError, arch_flag, nvcc_release, nvrtc_compile,
                    nvrtc_version, old_nvrtc_note)
from .arrays import DTYPE_NAMES, ITEM_SIZES, ArrayView, array_view, leading_dimension, type_name
from .call_plan import (MISS, Allocation, CallPlan, Placement, Signature, address_of, call_signature, extent_bytes,
                        keep)
from .errors import GemmdslError
from .devices import Driver, ParameterBlock, check_stream_device, operands_device, stream_handle
from .fuse_operands import (FUSE_OPERANDS, FuseOperands, check_no_overlap_with_c, check_operand_names,
                            fuse_arguments, fuse_views, moved)
from .grouped_call import check_b_packed, check_grouped_operands, check_offs, check_offs_given, map_batches
from .launch_plan import (PAD_MAX_BLOCKS, PAD_MIN_REUSE, PAD_MIN_WORK, PAD_ROW_BYTES, PAD_ROWS_PER_BLOCK, PAD_THREADS,
                          SCALE_C_THREADS, SECTOR_BYTES, LaunchPlan)
from .schedule import SubLaunch
from .tensor_maps import MapInputs
from .targets import ARCHS, arch, occupancy_of
from .cache_root import cache_dir, write_atomically
from .load_cache import compiled_spec
from .source import CompileError, SourceFile

COMPILERS = ("nvcc", "nvrtc")
MEMORY_TYPE_DEVICE, MEMORY_TYPE_MANAGED = 2, 3  # cudaPointerAttributes.type

Size = tuple[int, int, int]  # (M, N, K)


class KernelBuildError(GemmdslError, RuntimeError):
    """Neither NVRTC nor nvcc could turn the generated CUDA into a cubin."""


class GpuUnavailable(GemmdslError, RuntimeError):
    """No CuPy, no CUDA device, or no true-FP32 cuBLAS: the GPU commands cannot run (exit status 2)."""


# ---------------------------------------------------------------------------
# Launch requirements and argument checks (pure; no CuPy needed)

OPERAND_NAMES = ("A", "B", "C")
# A call's operands in the order its plan's signature lists them (call_plan.py).
CALL_OPERANDS = (*OPERAND_NAMES, *FUSE_OPERANDS, "offs")
PLANS_KEPT = 256  # call signatures whose plans a kernel keeps; the oldest goes first


@dataclass(frozen=True)
class Requirements:
    """What a generated kernel demands of its arguments, read from its metadata: the operands' element
    types and layouts, and the launch plan (launch_plan.LaunchPlan) the C launchers print, which holds the
    tile, the shape multiples, the alignments and the kernels, and decides each call's launch."""

    kernel: str
    epilogue: str  # "store": C = A@B; "alpha_beta": C = alpha*A@B + beta*C
    layouts: dict[str, str]  # "A" -> "row" | "col"
    batched: bool
    launch: LaunchPlan
    grouped: bool = False  # batch: grouped (grouped_call.py): B 3-D, one matrix per group; the call takes offs
    dtypes: dict[str, str] = field(default_factory=lambda: dict.fromkeys(OPERAND_NAMES, "float32"))
    # wgmma specs (Hopper's own path): A and B (and C for `store: tma`) reach the kernel as the TMA tensor
    # maps these describe (metadata['tensor_maps']).
    tensor_maps: dict | None = None

    @property
    def block_tile(self) -> tuple[int, int, int]:
        """BM, BN, BK: the grid has one block per BM x BN tile of C."""
        return self.launch.block_tile

    @property
    def multiples(self) -> tuple[int, int, int]:
        """What M, N, K must be multiples of (all 1 for bounds: checked)."""
        return self.launch.requirements.multiples

    @classmethod
    def from_metadata(cls, metadata: dict) -> "Requirements":
        element_types = metadata.get("dtypes", dict.fromkeys("abc", "f32"))  # older metadata: all f32
        return cls(kernel=metadata["kernel"], epilogue=metadata["epilogue"],
                   layouts={name: metadata["layouts"][name.lower()] for name in OPERAND_NAMES},
                   batched=metadata["batch"] == "strided", launch=LaunchPlan.from_json(metadata["launch"]),
                   grouped=metadata["batch"] == "grouped",
                   dtypes={name: DTYPE_NAMES[element_types[name.lower()]] for name in OPERAND_NAMES},
                   tensor_maps=metadata.get("tensor_maps"))


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
    itemsize: int = 4


@dataclass(frozen=True)
class CheckedCall:
    """A call that passed every check: the problem, the operands' views and the kernel to run."""

    m: int
    n: int
    k: int
    batch: int
    views: dict[str, OperandView]
    entry: str | None  # None: nothing to launch (M or N = 0)

    @property
    def size(self) -> Size:
        return self.m, self.n, self.k


def check_call(req: Requirements, a: ArrayView, b: ArrayView, c: ArrayView | None, alpha: float,
               beta: float) -> CheckedCall:
    """Check one call's operands and scalars against `req`; what to launch, or an exception.

    Type problems raise TypeError, everything else ValueError; each message names the
    operand or dimension at fault.
    """
    arrays = {"A": a, "B": b} if c is None else {"A": a, "B": b, "C": c}
    for name, array in arrays.items():
        check_matrix(req, name, array)
    if req.grouped:
        check_grouped_operands(req.kernel, {name: array.shape for name, array in arrays.items()})
    views = {name: operand_view(req, name, array) for name, array in arrays.items()}
    m, n, k = problem_size(views)
    check_divisible(req, m, n, k)
    batch = check_batch(req, views)
    if req.grouped:
        b_view = views["B"]
        check_b_packed(b_view.batch_stride, matrix_extent(req, b_view), batch)
    check_no_overlap(req, views)
    for view in views.values():
        check_leading_dimension(req, view)
    check_scalars(req, alpha, beta, c_given=c is not None)
    return CheckedCall(m, n, k, batch, views, empty_problem_entry(req, m, n, k) if 0 in (m, n, k)
                       else choose_entry(req, views))


def check_unclustered(req: Requirements) -> None:
    """The runtime launches through cuLaunchKernel, which has no cluster dimensions: a plan with clusters
    (LaunchPlan.cluster) runs through its C launcher, which launches them with cudaLaunchKernelEx."""
    if req.launch.clustered:
        x, y, z = req.launch.cluster
        raise ValueError(f"{req.kernel} launches thread-block clusters of {x}x{y}x{z}, which the Python runtime "
                         "does not launch; call its C launcher (NAME_launch) instead")


def empty_problem_entry(req: Requirements, m: int, n: int, k: int) -> str | None:
    """The kernel of an empty problem, as the C launchers decide (emit/launcher.py's emit_empty_problem): none
    for M or N = 0 (C has no elements), the K = 0 kernel (C = beta * C and the fuse chain) for K = 0."""
    return None if m == 0 or n == 0 else req.launch.entries.scale_c


def check_matrix(req: Requirements, name: str, array: ArrayView) -> None:
    """A matrix of the spec's element type: 2-D, or 3-D (a batch) for a batched kernel."""
    if array.dtype != req.dtypes[name]:
        raise TypeError(f"{name} must be {req.dtypes[name]}, got {array.dtype}")
    if len(array.shape) == 3 and not (req.batched or req.grouped):
        raise ValueError(f"{name} is a batch of matrices (shape {tuple(array.shape)}), but {req.kernel} is not "
                         f"batched; compile a spec with `batch: strided`")
    if len(array.shape) not in (2, 3):
        what = "a 2-D matrix or a 3-D batch" if req.batched else "a 2-D matrix"
        raise ValueError(f"{name} must be {what}, got shape {tuple(array.shape)}")
    if any(stride < 0 for stride in array.strides):
        raise ValueError(f"{name} has strides {array.strides} (elements); the kernel needs non-negative strides")


# How to get an operand into each layout, for the error that says it is not.
LAYOUT_REMEDIES = {"row": "a row-major copy (x.contiguous() in PyTorch, cupy.ascontiguousarray(x))",
                   "col": "a transposed view (.T, or .mT for a batch) of a row-major array"}


def operand_view(req: Requirements, name: str, array: ArrayView) -> OperandView:
    """How the kernel addresses `array`, which must be laid out as the spec says (views are fine)."""
    shape, strides = array.shape, array.strides
    layout = req.layouts[name]
    ld = leading_dimension(shape[-2:], strides[-2:], layout)
    if ld is None:
        element = next(short for short, long in DTYPE_NAMES.items() if long == req.dtypes[name])
        raise ValueError(f"{name} must be {layout}-major: {req.kernel} was compiled with `{name.lower()}: {element} "
                         f"{layout}`, but strides {strides} (elements) for shape {shape} are not {layout}-major "
                         f"with a leading dimension of at least its {'columns' if layout == 'row' else 'rows'}; "
                         f"pass {LAYOUT_REMEDIES[layout]}")
    batch = shape[0] if len(shape) == 3 else 1
    batch_stride = strides[0] if len(shape) == 3 and batch > 1 else 0
    return OperandView(name, shape[-2], shape[-1], batch, ld, batch_stride, array.pointer, array.itemsize)


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
    return batch


def is_empty(view: OperandView) -> bool:
    """Whether the operand has no elements: the kernels address none of it."""
    return view.rows == 0 or view.cols == 0


def footprint(view: OperandView, layout: str) -> int:
    """Elements from the first element of one matrix to just past its last."""
    outer, inner = (view.rows, view.cols) if layout == "row" else (view.cols, view.rows)
    return (outer - 1) * view.ld + inner


def byte_range(req: Requirements, view: OperandView) -> tuple[int, int]:
    """[first, end) of the bytes the kernel addresses in this operand: its first element to just past
    the last element of its last matrix."""
    elements = (view.batch - 1) * view.batch_stride + footprint(view, req.layouts[view.name])
    return view.pointer, view.pointer + elements * view.itemsize


def check_no_overlap(req: Requirements, views: dict[str, OperandView]) -> None:
    """C may share no byte with A, B or (in a batch) itself: blocks write C while others still read
    what they overlap. Reading twice is fine: A and B may overlap, a batch may share one A.

    Address ranges, not elements: a C whose rows interleave with A's in one buffer is refused too.
    """
    c = views.get("C")
    if c is None or is_empty(c):
        return
    each = footprint(c, req.layouts["C"])
    if c.batch > 1 and c.batch_stride < each:
        raise ValueError(f"C's {c.batch} matrices overlap (batch stride {c.batch_stride} elements, each matrix "
                         f"spans {each}); every GEMM of a batch needs its own C")
    c_start, c_end = byte_range(req, c)
    for name in ("A", "B"):
        if is_empty(views[name]):  # read nowhere (K = 0)
            continue
        start, end = byte_range(req, views[name])
        if start < c_end and c_start < end:
            raise ValueError(f"C overlaps {name}: C spans bytes {c_start:#x}..{c_end:#x} and {name} {start:#x}.."
                             f"{end:#x}; the kernel would read {name} where it has already written C. Pass a C "
                             f"that shares no memory with A or B")


def check_divisible(req: Requirements, m: int, n: int, k: int) -> None:
    """No dimension negative; for bounds: exact, whole block tiles only, unless the problem is empty (a
    dimension 0: no GEMM kernel runs, as in the C launchers)."""
    empty = 0 in (m, n, k)
    for dim, extent in zip("MNK", (m, n, k)):
        if extent < 0:
            raise ValueError(f"{dim}={extent}: a dimension cannot be negative")
    beyond = size_errors((m, n, k), req.block_tile)
    if beyond:
        raise ValueError("; ".join(beyond))
    for dim, extent, multiple, tile_name in zip("MNK", (m, n, k), req.multiples, ("BM", "BN", "BK")):
        if extent % multiple and not empty:
            bm, bn, bk = req.multiples
            raise ValueError(f"{dim}={extent} is not a multiple of the block tile's {tile_name}={multiple}; "
                             f"{req.kernel} has bounds: exact and only handles exact multiples of its "
                             f"{bm}x{bn}x{bk} tile")


def check_leading_dimension(req: Requirements, view: OperandView) -> None:
    limit = req.launch.requirements.max_leading_dimension[view.name.lower()]
    if view.ld > limit:
        raise ValueError(f"{view.name}'s leading dimension {view.ld} is more than the {limit} that {req.kernel}'s "
                         f"32-bit tile offsets allow")


def misalignments(req: Requirements, views: dict[str, OperandView], vector_elements: dict[str, int]) -> list[str]:
    """Why a kernel whose accesses need `vector_elements` cannot take these operands (empty when it can)."""
    reasons = []
    for view in views.values():
        elements = vector_elements[view.name.lower()]
        if view.pointer % (view.itemsize * elements):
            reasons.append(f"{view.name}'s data pointer {view.pointer:#x} is not {view.itemsize * elements}-byte "
                           f"aligned (an offset view into a larger array is the usual cause)")
        for what, value in (("leading dimension", view.ld), ("batch stride", view.batch_stride)):
            if value % elements:
                reasons.append(f"{view.name}'s {what} {value} is not a multiple of {elements}")
    batch = max(view.batch for view in views.values())
    if req.launch.tma_operands and batch > 1 and not req.grouped:  # a grouped A is every group's (grouped_call.py)
        reasons += [f"{view.name} is one matrix for the whole batch (batch stride 0); TMA reads GEMM g's {view.name} "
                    f"at g times a positive stride: pass a 3-D array (a broadcast one made contiguous)"
                    for view in views.values() if view.name in ("A", "B") and view.batch_stride == 0]
    return reasons


def choose_entry(req: Requirements, views: dict[str, OperandView], which: str = "kernel") -> str:
    """The kernel the launcher runs for these operands (LaunchPlan.choose_entry; `which`: "stream_k_kernel" for its
    stream-K twin), or ValueError. An operand not given yet (a C the runtime allocates) constrains nothing:
    address, leading dimension and stride 0."""
    operands: dict[str, int] = {}
    for name in OPERAND_NAMES:
        view = views.get(name)
        op = name.lower()
        operands |= {name: view.pointer, f"ld{op}": view.ld, f"stride_{op}": view.batch_stride} if view else \
            {name: 0, f"ld{op}": 0, f"stride_{op}": 0}
    element_bytes = {name.lower(): ITEM_SIZES[req.dtypes[name]] for name in OPERAND_NAMES}
    return req.launch.choose_entry(lambda elements: misalignments(req, views, elements), req.kernel, operands,
                                   element_bytes, which)


def check_scalars(req: Requirements, alpha: float, beta: float, *, c_given: bool) -> None:
    """A store epilogue computes exactly A@B; a nonzero beta needs a C to read."""
    if req.epilogue == "store" and (alpha != 1 or beta != 0):
        raise ValueError(f"{req.kernel} has a 'store' epilogue (C = A@B): alpha must be 1 and beta 0, "
                         f"got alpha={alpha}, beta={beta}")
    if beta != 0 and not c_given:
        raise ValueError(f"beta={beta} reads C, but no C was passed")


def kernel_arguments(call: CheckedCall, alpha: float, beta: float, batched: bool, fuse: tuple = ()) -> tuple:
    """The kernel's parameters in order (abi.kernel_parameters); pointers as raw 64-bit addresses; `fuse`, the
    chain's operands (fuse_operands.fuse_arguments), after beta."""
    views = call.views
    arguments = (*(numpy.uint64(views[name].pointer) for name in OPERAND_NAMES), numpy.int32(call.m),
                 numpy.int32(call.n), numpy.int32(call.k), numpy.int32(views["A"].ld), numpy.int32(views["B"].ld),
                 numpy.int32(views["C"].ld), numpy.float32(alpha), numpy.float32(beta), *fuse)
    if batched:
        arguments += tuple(numpy.int64(views[name].batch_stride) for name in OPERAND_NAMES)
    return arguments


def tensor_map_kernel_arguments(call: CheckedCall, maps: tuple, alpha: float, beta: float, batched: bool,
                                fuse: tuple = ()) -> tuple:
    """The parameters, in order, of a kernel that reads A and B through TMA tensor maps (the launch plan's
    kernel_parameters; paths/wgmma/parameters.py): the tensor maps of A and B,
    and of C for `store: tma` (packed 128-byte scalars), C's address, M, N, K, ldc, alpha, beta, the chain's
    operands; a batched kernel's batch and C's batch stride."""
    c = call.views["C"]
    arguments = (*maps, numpy.uint64(c.pointer), numpy.int32(call.m), numpy.int32(call.n),
                 numpy.int32(call.k), numpy.int32(c.ld), numpy.float32(alpha), numpy.float32(beta), *fuse)
    if batched:
        arguments += (numpy.int32(call.batch), numpy.int64(c.batch_stride))
    return arguments


def map_batch_strides(req: Requirements, call: CheckedCall) -> dict[str, int]:
    """Each operand's stride between GEMMs, in elements, for the tensor maps' third dimension; a single GEMM's
    (never stepped) is its own matrix's extent, as the C launcher gives it."""
    return {view.name.lower(): view.batch_stride if call.batch > 1 and not req.grouped else matrix_extent(req, view)
            for view in call.views.values()}


def matrix_extent(req: Requirements, view: OperandView) -> int:
    """Elements one matrix of the operand spans in the C launcher's stepping: its leading dimension times its
    outer dimension."""
    return view.ld * (view.rows if req.layouts[view.name] == "row" else view.cols)


def stream_k_workspace(req: Requirements, call: CheckedCall, sms: int) -> tuple[tuple, tuple[Allocation, ...]]:
    """A stream-K tensor-map call's trailing kernel arguments (sk_tiles, sk_blocks, partials, flags) and the
    allocation of the workspace the launch plan sizes (LaunchPlan.workspace_for), the flags zeroed once
    (the kernel lowers every flag it raises, so the bound call can be launched again)."""
    sized = req.launch.workspace_for(call.m, call.n, call.k, sms)
    if sized is None:
        return (numpy.int32(0), numpy.int32(0), numpy.uint64(0), numpy.uint64(0)), ()
    split, (partial_bytes, flags_count) = sized
    make = partial(allocate_workspace, partial_bytes, flags_count)
    partials, flags = make()
    return ((numpy.int32(split.sk_tiles), numpy.int32(split.sk_blocks), numpy.uint64(address_of(partials)),
             numpy.uint64(address_of(flags))), (Allocation((partials, flags), make),))


def allocate_workspace(partial_bytes: int, flags_count: int) -> tuple[Any, Any]:
    """Stream-K's partial sums (uninitialised f32) and flags (zeroed), on the current GPU."""
    import cupy

    return cupy.empty(partial_bytes // 4, dtype=cupy.float32), cupy.zeros(flags_count, dtype=cupy.uint32)


def sub_call(req: Requirements, call: CheckedCall, launch: SubLaunch) -> CheckedCall:
    """The call restricted to one block of C (schedule.interior_launches): M, N of the block, and A, B,
    C offset to it in each operand's layout (A by `row` rows, B by `col` columns, C by both)."""
    def moved(view: OperandView, rows: int, cols: int) -> OperandView:
        row_major = req.layouts[view.name] == "row"
        elements = rows * view.ld + cols if row_major else cols * view.ld + rows
        return replace(view, pointer=view.pointer + elements * view.itemsize)

    views = {"A": moved(call.views["A"], launch.row, 0), "B": moved(call.views["B"], 0, launch.col),
             "C": moved(call.views["C"], launch.row, launch.col)}
    return replace(call, m=launch.m, n=launch.n, views=views)


def padded_copies(req: Requirements, views: dict[str, OperandView]) -> dict[str, tuple[int, int, int]]:
    """The operands among A and B that the padded launcher copies (paths/wgmma/pad.py): those TMA refuses, and
    those whose rows start off a 32-byte sector where the kernel uses each element at least PAD_MIN_REUSE times
    in a call of at least PAD_MIN_WORK multiply-adds; each as (rows, elements per row, leading dimension of the
    copy: rows PAD_ROW_BYTES apart). Empty for a kernel without that launcher."""
    if req.launch.entries.pad_operands is None:
        return {}
    copies = {}
    reuse = {"A": views["B"].cols, "B": views["A"].rows}  # N uses of each element of A, M of each of B
    large = views["A"].rows * views["B"].cols * views["A"].cols >= PAD_MIN_WORK
    for name in ("A", "B"):
        view = views[name]
        multiple = req.launch.requirements.vector_elements[name.lower()]
        refused = view.pointer % (multiple * view.itemsize) != 0 or view.ld % multiple != 0
        off_sector = view.pointer % SECTOR_BYTES != 0 or view.ld * view.itemsize % SECTOR_BYTES != 0
        if not (refused or off_sector and reuse[name] >= PAD_MIN_REUSE and large):
            continue
        outer, inner = (view.rows, view.cols) if req.layouts[name] == "row" else (view.cols, view.rows)
        row = PAD_ROW_BYTES // view.itemsize
        copies[name] = (outer, inner, -(-inner // row) * row)
    return copies


def padded_maker(dtype: Any, library: str, rows: int, cols: int, ld: int, transpose: bool,
                 device: int) -> Callable[[], tuple] | None:
    """A function making an uninitialised rows x cols matrix of the library's element type `dtype` with leading
    dimension `ld`, transposed for a column-major operand, in the caller's library, as a 1-tuple (an allocation's
    maker, call_plan.Allocation); None for a library other than PyTorch and CuPy."""
    if library == "torch":
        import torch

        empty = partial(torch.empty, (rows, ld), dtype=dtype, device=torch.device("cuda", device))
        return lambda: ((empty()[:, :cols].T if transpose else empty()[:, :cols]),)
    if library != "cupy":
        return None

    def make() -> tuple:
        import cupy

        with cupy.cuda.Device(device):
            copy = cupy.empty((rows, ld), dtype=dtype)[:, :cols]
        return (copy.T if transpose else copy),
    return make


def c_shape(req: Requirements, m: int, n: int, batch: int) -> tuple[tuple[int, ...], bool]:
    """The shape to allocate for an uninitialised C, and whether to transpose its last two axes
    afterwards (a column-major C is the transpose of a row-major N x M array)."""
    leading = (batch,) if batch > 1 else ()
    if req.layouts["C"] == "row":
        return leading + (m, n), False
    return leading + (n, m), True


def pointer_device(name: str, view: ArrayView) -> int:
    """The GPU that holds operand `name` (for arrays whose protocol names no device), from the driver."""
    import cupy

    attributes = cupy.cuda.runtime.pointerGetAttributes(view.pointer)
    if attributes.type not in (MEMORY_TYPE_DEVICE, MEMORY_TYPE_MANAGED):
        raise TypeError(f"{name} must be in GPU memory, but its data pointer {view.pointer:#x} ({view.library}) "
                        f"is host memory")
    return attributes.device


def c_maker(req: Requirements, library: str, m: int, n: int, batch: int, device: int) -> Callable[[], tuple]:
    """A function making an uninitialised C in the spec's layout and element type, as a 1-tuple (an
    allocation's maker, call_plan.Allocation), in the caller's library where it can make one: PyTorch and CuPy
    their own, Numba a view of a CuPy array, anything else (JAX, whose arrays are immutable) a CuPy array for
    `to_library` to hand over after the launch. For PyTorch all but the allocation is done once."""
    shape, transpose = c_shape(req, m, n, batch)
    dtype = req.dtypes["C"]
    if library == "torch":
        import torch

        empty = partial(torch.empty, shape, dtype=getattr(torch, dtype), device=torch.device("cuda", device))
        return (lambda: (empty().transpose(-1, -2),)) if transpose else (lambda: (empty(),))

    def make() -> tuple:
        import cupy

        with cupy.cuda.Device(device):
            c = cupy.empty(shape, dtype="uint16" if dtype == "bfloat16" else dtype)  # CuPy has no bfloat16: its bits
        c = c.swapaxes(-1, -2) if transpose else c
        if library == "numba":
            from numba import cuda

            return (cuda.as_cuda_array(c),)
        return (c,)
    return make


def to_library(c: Any, library: str, dtype: str, stream: Any) -> Any:
    """C as the caller's library holds it, once the launch on `stream` has been queued: JAX takes the
    CuPy array through DLPack, and CuPy orders JAX's stream after its current one, made `stream` here."""
    if library != "jax":
        return c
    import jax.dlpack
    import jax.numpy

    with stream:
        result = jax.dlpack.from_dlpack(c)
    return jax.lax.bitcast_convert_type(result, jax.numpy.bfloat16) if dtype == "bfloat16" else result


def check_writable(view: ArrayView) -> None:
    """The kernel writes C in place; refuse what the caller cannot have written."""
    if view.library == "jax":
        raise TypeError("C is a JAX array, and JAX arrays are immutable: leave C out (beta must then be 0) and "
                        "use the new array the call returns")
    if view.readonly:
        raise TypeError(f"C is read-only ({view.library} marked it so); pass a writable C")


@dataclass(frozen=True)
class StreamHandle:
    """A raw cudaStream_t speaking the CUDA stream protocol, which cupy.cuda.Stream.from_external takes."""

    handle: int

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.handle


def launch_stream(handle: int) -> Any:
    """A CuPy stream object for a cudaStream_t owned by someone else (the caller)."""
    import cupy

    return cupy.cuda.Stream.from_external(StreamHandle(handle))


def callers_stream(library: str, device: int) -> int:
    """The stream a caller of this library launches on now on `device`: PyTorch's current stream of that
    device for PyTorch operands, CuPy's current stream otherwise (JAX and Numba have no current stream to
    follow). CuPy keeps a current stream per device: this is called with `device` current."""
    return current_stream_of(library == "torch")(device)


@cache
def current_stream_of(torch_operands: bool) -> Callable[[int], int]:
    """The function giving the current stream's handle on a device, found once: PyTorch's raw handle (no Stream
    object made), else CuPy's current stream."""
    if torch_operands:
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        return raw if raw is not None else lambda device: torch.cuda.current_stream(device).cuda_stream
    import cupy

    return lambda device: cupy.cuda.get_current_stream().ptr


def parse_target(target: str) -> tuple[int, bool]:
    """'sm_90' -> (90, False); 'sm_90a' -> (90, True): arch-specific code, which runs only on that arch."""
    match = re.fullmatch(r"sm_(\d+)(a?)", target)
    if match is None:
        raise ValueError(f"unsupported target {target!r}; expected sm_<major><minor>[a], e.g. sm_90")
    return int(match[1]), bool(match[2])


def build_target(target: str, compute_capability: str) -> str:
    """The architecture to build a spec for `target` for, on a GPU of this compute capability ('90').

    A cubin runs only on its own major version, so a spec for an older GPU is built for this one:
    the source (and with it every limit the spec was checked against) stays the target's, only
    the -arch changes. A GPU older than the target cannot take the spec's limits, and `a` targets
    use features of exactly their architecture; both are refused.
    """
    sm, arch_specific = parse_target(target)
    device = int(compute_capability)
    if arch_specific and device != sm:
        raise GpuUnavailable(f"the kernel targets {target}, whose arch-specific code runs only on sm_{sm} GPUs, but "
                             f"this GPU is sm_{device}; compile the spec for sm_{device}")
    if device < sm:
        raise GpuUnavailable(f"the kernel targets {target}, but this GPU is sm_{device}, which is older; compile "
                             f"the spec for sm_{device} (if it fits that GPU's limits)")
    return target if device == sm else f"sm_{device}"


# ---------------------------------------------------------------------------
# Binary cache


def cache_key(metadata: dict, source: str, cupy_version: str, built_for: str, compiler: str) -> str:
    """Everything that decides the cubin's bytes.

    spec_hash names the spec, target and gemmdsl version; the source hash also
    catches code generator changes that did not bump the version; `built_for` is the
    architecture the cubin is for (the GPU's, for a spec of an older target), `compiler`
    nvcc or nvrtc with its version (`compiler_version`).
    """
    parts = {"spec_hash": metadata["spec_hash"], "gemmdsl": metadata["gemmdsl_version"],
             "target": metadata["target"], "built_for": built_for, "compiler": compiler, "cupy": cupy_version,
             "options": COMPILER_OPTIONS, "source": hashlib.sha256(source.encode()).hexdigest()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def cubin_file_name(metadata: dict, built_for: str, key: str) -> str:
    return f"{metadata['kernel']}-{built_for}-{key[:32]}.cubin"


def cubin_cache_name(metadata: dict, source: str, built_for: str, compiler: str | None = None) -> str:
    """The cache file of this source built for `built_for` by `compiler` (default: the one chosen
    now) at its present version, with this CuPy: so upgrading NVRTC (13.0 -> 13.1, docs/python-api.md) or nvcc
    builds anew instead of serving the old compiler's cubins."""
    import cupy

    compiler = compiler or chosen_compiler()
    key = cache_key(metadata, source, cupy.__version__, built_for, f"{compiler} {compiler_version(compiler)}")
    return cubin_file_name(metadata, built_for, key)


@cache
def compiler_version(compiler: str) -> str:
    """nvcc's release ("13.0.88", build.nvcc_release) or NVRTC's ("13.1", as CuPy loaded it)."""
    return nvrtc_version() if compiler == "nvrtc" else nvcc_release()


class BinaryCache:
    """Compiled binaries on disk, one file per key; writes are atomic, so readers never see half a file."""

    def __init__(self, directory: Path):
        self.directory = directory

    def get_or_build(self, file_name: str, build: Callable[[], bytes]) -> Path:
        """Path of the cached binary, calling `build` only when it is not there yet."""
        path = self.directory / file_name
        if not path.is_file():
            write_atomically(path, build())
        return path


# ---------------------------------------------------------------------------
# Compiling


def chosen_compiler() -> str:
    """GEMMDSL_COMPILER=nvcc|nvrtc, or by default nvcc when it is on PATH and NVRTC otherwise.

    nvcc first: it is the compiler `gemmdsl compile` reports registers for. With the same
    options, NVRTC 13.1 and later build every shipped spec with the registers nvcc 13.0
    does; NVRTC 13.0 does not (sm_90: 149 vs 127 for sgemm_v3, 223 vs 128 for cp_async3),
    and not because of options or ptxas: its PTX already differs (shared-memory addresses
    computed in 64 bits, then truncated, where nvcc's are 32-bit), and finishing that PTX
    with the toolkit's ptxas gives the same counts. scripts/nvrtc_vs_nvcc.py compares both
    paths on the GPU.
    """
    choice = os.environ.get("GEMMDSL_COMPILER", "").strip().lower()
    if choice in COMPILERS:
        return choice
    if choice not in ("", "auto"):
        raise KernelBuildError(f"GEMMDSL_COMPILER={choice!r}: expected nvcc, nvrtc or auto")
    return "nvcc" if shutil.which("nvcc") is not None else "nvrtc"


def compile_cubin(source: str, target: str, compiler: str | None = None) -> bytes:
    """A cubin for `target` (sm_XX) from `compiler`, by default the one `chosen_compiler` names."""
    if (compiler or chosen_compiler()) == "nvcc":
        return compile_with_nvcc(source, target)
    return compile_with_nvrtc(source, target)


def compile_with_nvrtc(source: str, target: str) -> bytes:
    """A cubin for `target` from NVRTC (`build.nvrtc_compile`: nvcc's options, NVRTC's own ptxas)."""
    note = old_nvrtc_note()
    if note is not None:
        print(note, file=sys.stderr)
    try:
        return nvrtc_compile(source, target)[0]
    except BuildError as err:
        raise KernelBuildError(str(err)) from None


def compile_with_nvcc(source: str, target: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="gemmdsl-") as directory:
        cu_path, cubin_path = Path(directory, "kernel.cu"), Path(directory, "kernel.cubin")
        cu_path.write_text(source)
        command = ["nvcc", "-cubin", arch_flag(target), *COMPILER_OPTIONS, "-o", str(cubin_path), str(cu_path)]
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
class LoadedFunction:
    """One kernel of a module loaded on one GPU."""

    name: str
    handle: int  # its CUfunction in that GPU's primary context
    num_regs: int  # registers per thread, as the driver reports them


@dataclass(frozen=True)
class KernelLaunch:
    function: LoadedFunction  # of the module on the call's GPU
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple
    shared_mem: int
    # What its leading tensor-map arguments were encoded from (a wgmma kernel's), for the plan of its call
    # (call_plan.py), which encodes them anew for other addresses; None for a launch without maps.
    maps: MapInputs | None = field(default=None, compare=False, repr=False)
    parameters: ParameterBlock = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:  # packed once: a repeated call launches these very bytes again
        object.__setattr__(self, "parameters", ParameterBlock(self.args))

    def __call__(self, driver: Driver, stream: int) -> None:
        driver.launch(self, stream)


@dataclass(frozen=True)
class BoundLaunch:
    """One validated call, ready to repeat without re-checking (what the benchmark times): one
    kernel launch, or for stream-K up to three (set the shared tiles of C to beta * C, the stream-K
    kernel on them, the plain kernel on the other tiles), after the padded launcher's copy where it has one."""

    entry: str | None  # the kernel the call runs: the vector or the scalar one (K = 0: scale_c; M or N = 0: none)
    launches: tuple[KernelLaunch, ...]
    c: Any  # the output matrix the kernel writes (for JAX callers, the CuPy array the call hands over)
    operands: tuple  # the arrays the caller passed: the kernels hold only their addresses, so this keeps them alive
    library: str  # A's library, whose current stream a launch follows
    device: int  # the GPU that holds the operands, where the launches run
    allocations: tuple[Allocation, ...] = ()  # what the call made: C left out, padded copies, stream-K's workspace

    @property
    def workspace(self) -> tuple:
        """Arrays the launch owns beside the operands and C (the padded copies, wgmma stream-K's partial sums
        and flags)."""
        return tuple(array for allocation in self.allocations for array in allocation.arrays if array is not self.c)

    def __call__(self, stream: Any = None) -> int:
        """Queue the launches (`queue`); returns the cudaStream_t used."""
        return queue(self.launches, self.library, self.device, stream)


def queue(launches: tuple, library: str, device: int, stream: Any = None) -> int:
    """Queue `launches` on `stream` (any stream `devices.stream_handle` takes; one of another GPU is refused),
    else on the caller's current stream of `device` in A's `library`, with that GPU current; returns the
    cudaStream_t used."""
    driver = cuda_driver()
    if stream is not None:
        check_stream_device(stream, device, driver.handle_device)
    with on_device(device):
        handle = stream_handle(stream) if stream is not None else callers_stream(library, device)
        for launch in launches:
            driver.launch(launch, handle)
    return handle


def call_operands(a: Any, b: Any, c: Any, chain: dict[str, Any]) -> tuple:
    """A call's operands in CALL_OPERANDS order, from A, B, C and the keyword arguments of the fuse chain and
    offs (TypeError for another keyword, as Python gives it)."""
    unknown = sorted(set(chain) - set(CALL_OPERANDS[3:]))
    if unknown:
        raise TypeError(f"got an unexpected keyword argument {unknown[0]!r}")
    return (a, b, c, *(chain.get(name) for name in CALL_OPERANDS[3:]))




@cache
def cuda_driver() -> Driver:
    return Driver.load()


def current_device() -> int:
    """The calling thread's current CUDA device."""
    return cuda_runtime().getDevice()


@cache
def cuda_runtime() -> Any:
    """CuPy's CUDA runtime module, imported once."""
    import cupy

    return cupy.cuda.runtime


class on_device:
    """A context manager making `device` the current CUDA device (its primary context) for the block,
    and restoring the caller's afterwards; a no-op, bar one query, when it is current already."""

    def __init__(self, device: int):
        self.device = device
        self.previous: int | None = None

    def __enter__(self) -> None:
        current = current_device()
        if current != self.device:
            cuda_runtime().setDevice(self.device)
            self.previous = current

    def __exit__(self, *exc: Any) -> None:
        if self.previous is not None:
            cuda_runtime().setDevice(self.previous)
            self.previous = None


def run_returning_c(launch: BoundLaunch, c_given: bool, c_dtype: str, stream: Any) -> Any:
    """Queue `launch` on `stream` (else the caller's current one) and return C: the caller's own, or for
    a call that left C out the new array, in A's library."""
    used = launch(stream)
    if c_given or launch.library != "jax":
        return launch.c
    with on_device(launch.device):
        return to_library(launch.c, launch.library, c_dtype, launch_stream(used))


@dataclass
class DeviceModule:
    """A kernel's cubin loaded on one GPU: its functions, that GPU's SM count, and what calls there
    remember (the tensor maps, the resident blocks). Nothing in it serves another GPU."""

    device: int
    built_for: str
    module: Any  # cupy RawModule: keeps the module loaded
    functions: dict[str, LoadedFunction]
    sms: int
    tensor_maps: Any = None  # wgmma specs: tensor_maps.TensorMapCache, made on the first call
    resident_blocks: dict[str, int] = field(default_factory=dict)  # by entry: from the driver's register count


class Kernel:
    """A compiled spec, callable like a function on any GPU: it follows its operands' device, and loads
    its module on each GPU the first time a call runs there (one cubin per architecture)."""

    def __init__(self, artifacts: Any):
        require_gpu()  # no CuPy or no usable driver: a GpuUnavailable saying so, as the commands print it
        self._artifacts = artifacts  # compiler.Artifacts, or load_cache.CompiledSpec (its IR compiled on demand)
        self.metadata = artifacts.metadata
        self.source = artifacts.cuda
        self.name: str = self.metadata["kernel"]
        self.requirements = Requirements.from_metadata(self.metadata)
        self.fuse = FuseOperands.from_metadata(self.metadata)  # what the fuse chain reads; None without one
        self._modules: dict[int, DeviceModule] = {}
        self._loading = threading.Lock()
        # The plans of the calls checked in full, by signature, scalars, options and padding (call_plan.py): a
        # call's checks and launch arguments cost several times what a launch does, and callers repeat calls.
        self._plans: OrderedDict[tuple, CallPlan] = OrderedDict()
        # Built and loaded now on the current GPU, so that build errors surface at load.
        self._home = self._module_on(current_device())

    @property
    def spec(self) -> Any:
        """The spec's IR (ir.KernelSpec)."""
        return self._artifacts.spec

    @property
    def built_for(self) -> str:
        """The architecture the cubin loaded on the GPU current at load time was built for."""
        return self._home.built_for

    def _module_on(self, device: int) -> DeviceModule:
        """The module on `device`, loaded there on first use (thread-safe)."""
        loaded = self._modules.get(device)
        if loaded is not None:
            return loaded
        with self._loading:
            if device not in self._modules:
                self._modules[device] = self._load_on(device)
            return self._modules[device]

    def _load_on(self, device: int) -> DeviceModule:
        import cupy

        target = self.metadata["target"]
        with cupy.cuda.Device(device):
            properties = cupy.cuda.Device(device)
            built_for = build_target(target, properties.compute_capability)
            if built_for != target and not any(m.built_for == built_for for m in self._modules.values()):
                print(f"note: {self.name} targets {target}; built for this GPU's {built_for}", file=sys.stderr)
            cubin = BinaryCache(cache_dir()).get_or_build(cubin_cache_name(self.metadata, self.source, built_for),
                                                          lambda: compile_cubin(self.source, built_for))
            module = cupy.RawModule(path=str(cubin))
            raw = {entry: module.get_function(entry) for entry in self.requirements.launch.entries.all()}
            if self.dynamic_smem_bytes > arch(parse_target(target)[0]).default_smem_per_block:
                for function in raw.values():
                    function.max_dynamic_shared_size_bytes = self.dynamic_smem_bytes
            # CuPy's RawKernel loads its function on the current GPU when asked for it: that is `device` here.
            functions = {entry: LoadedFunction(entry, function.kernel.ptr, function.num_regs)
                         for entry, function in raw.items()}
            sms = properties.attributes["MultiProcessorCount"]  # read once, not per call
        return DeviceModule(device, built_for, module, functions, sms)

    @property
    def dynamic_smem_bytes(self) -> int:
        return self.metadata["dynamic_smem_bytes"]

    @property
    def epilogue(self) -> str:
        return self.requirements.epilogue

    @property
    def registers(self) -> dict[str, int]:
        """Registers per thread of each kernel in the cubin loaded at load time, by entry name."""
        return {entry: function.num_regs for entry, function in self._home.functions.items()}

    def _views(self, operands: dict[str, Any]) -> tuple[dict[str, ArrayView], int]:
        """The operands as the launch sees them, and the one GPU that holds them all (asking the driver
        where an array's protocol does not say)."""
        views = {name: array_view(name, array) for name, array in operands.items()}
        device = operands_device(views, pointer_device)
        if device is None:  # empty arrays that name no GPU: the current one serves
            device = current_device()
        return views, device

    def _fused(self, bias: Any, residual: Any, row_scale: Any, col_scale: Any, a_scale: Any = None,
               b_scale: Any = None) -> dict[str, Any]:
        """The fuse chain's operands given, by name, once checked to be exactly those the chain reads."""
        values = (bias, residual, row_scale, col_scale, a_scale, b_scale)
        if self.fuse is None and all(value is None for value in values):
            return {}
        given = {name: value for name, value in zip(FUSE_OPERANDS, values) if value is not None}
        if given or self.fuse is not None:
            check_operand_names(self.name, self.fuse, given)
        return given

    def bind(self, a: Any, b: Any, c: Any | None = None, alpha: float = 1.0, beta: float = 0.0,
             stream_k: bool = True, interior: bool = True, *, bias: Any = None, residual: Any = None,
             row_scale: Any = None, col_scale: Any = None, a_scale: Any = None, b_scale: Any = None,
             offs: Any = None) -> BoundLaunch:
        """Validate the operands once and allocate C if needed; the result launches on call, on the GPU
        that holds the operands. bias, residual, row_scale, col_scale, a_scale and b_scale: the fuse chain's
        operands (docs/fusion.md, docs/fp8.md), exactly those the spec's `fuse` section reads.

        stream_k=False runs a `schedule: stream_k` spec's plain kernel on every tile: no atomics,
        so bitwise-repeatable results. interior=False runs a checked spec's vector kernel on every
        tile, inner ones too, instead of the interior kernel and the edge strips (which it runs where
        they pay: schedule.interior_split_pays). With both False a
        call is one launch over every tile, the launch the analysis passes describe (`profile`).

        offs: a `batch: grouped` kernel's groups (docs/grouped.md): G int32 cumulative row ends on the GPU, as
        torch._grouped_mm takes them, with A M x K, B G x K x N (for `b: col`: `w.mT` of G x N x K weights), C M x N."""
        return self._bind((a, b, c, bias, residual, row_scale, col_scale, a_scale, b_scale, offs),
                          (alpha, beta, stream_k, interior))

    def bind_padded(self, a: Any, b: Any, c: Any | None = None, alpha: float = 1.0, beta: float = 0.0,
                    stream_k: bool = True, interior: bool = True, **chain: Any) -> BoundLaunch | None:
        """`bind` on copies of A and B whose rows TMA reads at full speed, as the C launcher
        NAME_launch_ld_padded runs (paths/wgmma/pad.py, `padded_copies`): each launch copies those operands
        first. None where nothing is to be copied, the kernel has no such launcher or the operands' library
        cannot allocate the copies (then call `bind`)."""
        return self._bind(call_operands(a, b, c, chain), (alpha, beta, stream_k, interior), padded=True)

    def _bind(self, operands: tuple, options: tuple, padded: bool = False,
              signature: Signature | None = None) -> BoundLaunch | None:
        """`bind` (padded: `bind_padded`) of `operands` (CALL_OPERANDS) with `options` (alpha, beta, stream_k,
        interior): from the plan of their signature where there is one, else checked in full, which makes the
        plan for the next call."""
        signature = signature or call_signature(operands)
        key = None if signature is None else (signature.key, options, padded)
        plan = None if key is None else self._plans.get(key)
        if plan is not None:
            bound = self._bound_from(plan, signature.pointers, operands)
            if bound is not MISS:
                return bound
        bound = self._bind_padded_checked(operands, options) if padded else self._bind_operands(operands, options)
        if key is not None and bound is not None:
            self._remember(key, bound, operands, signature.pointers)
        return bound

    def _remember(self, key: tuple, bound: BoundLaunch, operands: tuple, pointers: tuple[int, ...]) -> None:
        """Keep the plan of a call checked in full (call_plan.py), for its signature's later calls."""
        named = [(name, operand) for name, operand in zip(CALL_OPERANDS, operands) if operand is not None]
        allocated = [array for allocation in bound.allocations for array in allocation.arrays]
        views = [array_view(name, operand) for name, operand in (*named, *(("allocated", a) for a in allocated))]
        extents = tuple(map(extent_bytes, views))
        if None in extents:
            return
        names = [name for name, _ in named]
        checked = ()
        if operands[2] is not None and extents[names.index("C")]:  # C given: it must not overlap what is read
            c = names.index("C")
            checked = tuple((c, slot) for slot, name in enumerate(names)
                            if name not in ("C", "offs") and extents[slot] and pointers[slot] != pointers[c])
        c_index = next((index for index, array in enumerate(allocated) if array is bound.c), None)
        plan = CallPlan.build(bound.launches, pointers + tuple(map(address_of, allocated)), extents, len(names),
                              checked, bound.allocations, self._module_on(bound.device).tensor_maps,
                              Placement(bound.entry, bound.library, bound.device, c_index, queue))
        if plan is None:
            return
        keep(self._plans, key, plan, PLANS_KEPT)

    def _bound_from(self, plan: CallPlan, pointers: tuple[int, ...], operands: tuple) -> BoundLaunch | object:
        """A BoundLaunch of its own for these operands, from the plan of their signature; MISS where the plan
        cannot take their addresses."""
        taken = plan.take(pointers)
        if taken is MISS:
            return MISS
        made, pointers = taken
        allocations = tuple(Allocation(arrays, make) for arrays, make in zip(made, plan.makers))
        arrays = tuple(array for allocation in allocations for array in allocation.arrays)
        args = plan.relocated(pointers)
        launches = tuple(replace(planned.launch, args=launch_args, maps=None)
                         for planned, launch_args in zip(plan.launches, args))
        where = plan.placement
        c = operands[2] if where.c_index is None else arrays[where.c_index]
        return BoundLaunch(where.entry, launches, c, tuple(operand for operand in operands if operand is not None),
                           where.library, where.device, allocations)

    def _bind_operands(self, operands: tuple, options: tuple) -> BoundLaunch:
        """`bind` checked in full."""
        a, b, c, *chain, offs = operands
        alpha, beta, stream_k, interior = options
        fused = self._fused(*chain)
        check_offs_given(self.name, self.requirements.grouped, offs is not None)
        views, device = self._views({"A": a, "B": b, **({} if c is None else {"C": c}), **fused,
                                     **({} if offs is None else {"offs": offs})})
        loaded = self._module_on(device)
        if c is not None:
            check_writable(views["C"])
        offs_view = views.pop("offs", None)
        with on_device(device):
            bound = self._bind_checked(loaded, c, views, alpha, beta, stream_k, interior, fused, offs_view)
        return replace(bound, operands=tuple(operand for operand in operands if operand is not None))

    def _bind_padded_checked(self, operands: tuple, options: tuple) -> BoundLaunch | None:
        """`bind_padded` checked in full."""
        if self.requirements.launch.entries.pad_operands is None:
            return None
        a, b = operands[:2]
        views, device = self._views({"A": a, "B": b})
        req = self.requirements
        given = {name: operand_view(req, name, views[name]) for name in ("A", "B")}
        copies = padded_copies(req, given)
        if not copies or min(given["A"].rows, given["A"].cols, given["B"].cols) == 0 \
                or max(view.batch for view in given.values()) > 1:
            return None
        padded, allocations, arguments = {"A": a, "B": b}, [], []
        for name in ("A", "B"):
            view = given[name]
            if name not in copies:
                arguments += [numpy.uint64(0), numpy.int64(0), numpy.uint64(0), numpy.int64(0), numpy.int32(0),
                              numpy.int32(0)]
                continue
            rows, cols, ld = copies[name]
            make = padded_maker(getattr(operands[name == "B"], "dtype", None), views[name].library, rows, cols, ld,
                                req.layouts[name] == "col", device)
            if make is None:  # a library the runtime cannot allocate in
                return None
            allocations.append(Allocation(make(), make))
            padded[name] = allocations[-1].arrays[0]
            arguments += [numpy.uint64(view.pointer), numpy.int64(view.ld),
                          numpy.uint64(array_view(name, padded[name]).pointer), numpy.int64(ld), numpy.int32(rows),
                          numpy.int32(cols)]
        bound = self._bind_operands((padded["A"], padded["B"], *operands[2:]), options)
        rows = sum(copy[0] for copy in copies.values())
        grid = (min(-(-rows // PAD_ROWS_PER_BLOCK), PAD_MAX_BLOCKS), 1, 1)
        pad = KernelLaunch(self._module_on(device).functions[req.launch.entries.pad_operands], grid,
                           (PAD_THREADS, 1, 1), tuple(arguments), 0)
        # The caller's operands, and the copies (the launches hold their addresses) before what the call made.
        return replace(bound, launches=(pad, *bound.launches), operands=tuple(o for o in operands if o is not None),
                       allocations=(*allocations, *bound.allocations))

    def _bind_checked(self, loaded: DeviceModule, c: Any | None, views: dict[str, ArrayView],
                      alpha: float, beta: float, stream_k: bool, interior: bool,
                      fused: dict[str, Any], offs: ArrayView | None = None) -> BoundLaunch:
        """`bind` after the operands' views, with their GPU current: check the call and the fuse chain's
        operands, allocate C if it is None, build the launches (the BoundLaunch's operands are left to the caller)."""
        req = self.requirements
        call = check_call(req, views["A"], views["B"], views.get("C"), alpha, beta)
        if call.entry not in (None, req.launch.entries.scale_c):
            check_unclustered(req)
        library = views["A"].library
        allocations: tuple[Allocation, ...] = ()
        if c is None:
            make = c_maker(req, library, call.m, call.n, 1 if req.grouped else call.batch, loaded.device)
            allocations = (Allocation(make(), make),)
            c = allocations[0].arrays[0]
            views["C"] = array_view("C", c)
            call = check_call(req, views["A"], views["B"], views["C"], alpha, beta)  # C's alignment counts too
        groups = ()  # a grouped kernel's trailing arguments: offs and G
        if offs is not None:
            check_offs(self.name, offs, call.batch, loaded.device)
            groups = (numpy.uint64(offs.pointer), numpy.int32(call.batch))
        chain = {}
        if self.fuse is not None and call.entry is not None:  # M or N = 0: C has no elements for the chain
            chain = fuse_views(self.name, self.fuse, {name: views[name] for name in fused}, call.m, call.n, call.k,
                               call.batch if req.grouped else 0)
            c_view = call.views["C"]
            check_no_overlap_with_c(chain, c_view.pointer, c_view.ld, req.layouts["C"], c_view.itemsize, call.m,
                                    call.n)
        bound = partial(BoundLaunch, call.entry, c=c, operands=(), library=library, device=loaded.device,
                        allocations=allocations)
        if call.entry in (None, req.launch.entries.scale_c):
            return bound(self._empty_problem_launches(loaded, call, beta, chain, groups))
        block = (self.metadata["threads"], 1, 1)
        function = loaded.functions[call.entry]
        if req.tensor_maps is not None:  # A and B through tensor maps: the launch its C launcher makes
            launch, workspace = self._tensor_map_launch(loaded, call, function, alpha, beta, block,
                                                        fuse_arguments(chain), groups)
            return bound((launch,), allocations=allocations + workspace)
        args = kernel_arguments(call, alpha, beta, req.batched, fuse_arguments(chain))
        smem = self.dynamic_smem_bytes
        grids = None
        if stream_k and req.launch.stream_k is not None:
            grids = req.launch.stream_k_launch(call.m, call.n, call.k, call.batch, loaded.sms,
                                               self._blocks_per_sm(loaded, call.entry), numpy.float32(beta),
                                               req.epilogue == "alpha_beta")
        if grids is None or not grids["sk_tiles"]:
            return bound(self._tile_launches(loaded, call, alpha, beta, block, smem, interior, chain))
        # The launcher's steps (emit/launcher.py's stream-K launch, LaunchPlan.stream_k_launch_rule), in the same
        # order, over the batch.
        launches = []
        sk_tiles = numpy.int32(grids["sk_tiles"])
        if grids["prepare_blocks"]:
            beta_first = numpy.float32(beta if req.epilogue == "alpha_beta" else 0.0)
            c_view = call.views["C"]
            prepare_args = (numpy.uint64(c_view.pointer), numpy.int32(call.m), numpy.int32(call.n),
                            numpy.int32(c_view.ld), beta_first)
            if req.batched:
                prepare_args += (numpy.int64(c_view.batch_stride),)
            launches.append(KernelLaunch(loaded.functions[req.launch.entries.prepare],
                                         (grids["prepare_blocks"], 1, call.batch), block, prepare_args + (sk_tiles,), 0))
        launches.append(KernelLaunch(loaded.functions[choose_entry(req, call.views, "stream_k_kernel")],
                                     (grids["sk_blocks"], 1, call.batch), block, args + (sk_tiles,), smem))
        if grids["plain_blocks"]:
            launches.append(KernelLaunch(function, (grids["plain_blocks"], 1, call.batch), block, args, smem))
        return bound(tuple(launches))

    def _empty_problem_launches(self, loaded: DeviceModule, call: CheckedCall, beta: float,
                                chain: dict, groups: tuple = ()) -> tuple[KernelLaunch, ...]:
        """An empty problem's launches, the C launcher's (empty_problem_entry): none for M or N = 0; for K = 0 the
        K = 0 kernel over C, which applies beta (0 for a store epilogue, check_scalars) and the fuse chain."""
        if call.entry is None:
            return ()
        req, c = self.requirements, call.views["C"]
        arguments = (numpy.uint64(c.pointer), numpy.int32(call.m), numpy.int32(call.n), numpy.int32(c.ld),
                     numpy.float32(beta), *fuse_arguments(chain))
        if req.batched:
            arguments += (numpy.int64(c.batch_stride),)
        arguments += groups
        return (KernelLaunch(loaded.functions[call.entry], req.launch.scale_c_grid(call.m, call.n, call.batch),
                             (SCALE_C_THREADS, 1, 1), arguments, 0),)

    def _tensor_map_launch(self, loaded: DeviceModule, call: CheckedCall, function: Any, alpha: float, beta: float,
                           block: tuple[int, int, int], fuse: tuple,
                           groups: tuple = ()) -> tuple[KernelLaunch, tuple[Allocation, ...]]:
        """The launch, and the workspace it allocated (stream-K)."""
        from .tensor_maps import TensorMapCache, driver_encoder

        if loaded.tensor_maps is None:
            loaded.tensor_maps = TensorMapCache(driver_encoder())
        views = call.views
        pointers: dict[str, int | None] = {"a": views["A"].pointer, "b": views["B"].pointer}
        lds = {"a": views["A"].ld, "b": views["B"].ld, "c": views["C"].ld}
        req = self.requirements
        strides = map_batch_strides(req, call) if req.batched or req.grouped else None
        c_map = req.tensor_maps.get("c")
        if c_map is not None:  # store: tma, where TMA can store C (the kernel tests the same condition)
            c = views["C"]
            alignment = self.metadata["alignment_bytes"]
            size = c_map["element_bytes"]
            staged = c.pointer % alignment == 0 and c.ld * size % alignment == 0 and call.n * size % alignment == 0
            if req.batched:  # and each GEMM's C as aligned as the first (check_no_overlap: stride > 0)
                staged = staged and c.batch_stride * size % alignment == 0
            pointers["c"] = c.pointer if staged else None
        batch = map_batches(call.batch) if req.grouped else call.batch
        inputs = MapInputs(req.tensor_maps, pointers, call.m, call.n, call.k, lds, strides, batch)
        maps = inputs.encode(loaded.tensor_maps)
        sms = loaded.sms
        arguments, workspace = tensor_map_kernel_arguments(call, maps, alpha, beta, req.batched, fuse) + groups, ()
        if req.launch.workspace is not None:
            stream_k, workspace = stream_k_workspace(req, call, sms)
            arguments += stream_k
        grid = req.launch.grid_for(call.m, call.n, call.k, call.batch, sms)
        return KernelLaunch(function, grid, block, arguments, self.dynamic_smem_bytes, inputs), workspace

    def _tile_launches(self, loaded: DeviceModule, call: CheckedCall, alpha: float, beta: float,
                       block: tuple[int, int, int], smem: int, interior: bool,
                       chain: dict) -> tuple[KernelLaunch, ...]:
        """Every tile, one block each: on a checked spec's vector kernel, where the split pays
        (schedule.interior_split_pays on this GPU's SMs x resident blocks), the tiles inside C on the
        interior kernel (the partial-k one when K % BK != 0) and the edge strips on the vector one
        (schedule.interior_launches), as the C launcher does; otherwise (or with interior=False) the
        chosen kernel on the whole of C. The fuse chain's operands move with C."""
        req = self.requirements
        entries = req.launch.entries
        pieces: tuple[SubLaunch, ...] = (SubLaunch(False, 0, 0, call.m, call.n),)
        if interior and call.entry == entries.vector:
            pieces = req.launch.sub_launches(call.m, call.n, call.k, call.batch, loaded.sms,
                                             self._blocks_per_sm(loaded, call.entry))
        launches = []
        for piece in pieces:
            part = sub_call(req, call, piece)
            entry = call.entry
            if piece.interior:
                entry = entries.interior_partial_k if piece.partial_k else entries.interior
            launches.append(KernelLaunch(loaded.functions[entry],
                                         req.launch.grid_for(part.m, part.n, part.k, part.batch, loaded.sms), block,
                                         kernel_arguments(part, alpha, beta, req.batched,
                                                          fuse_arguments(moved(chain, piece.row, piece.col))),
                                         smem))
        return tuple(launches)

    def _blocks_per_sm(self, loaded: DeviceModule, entry: str) -> int:
        """Resident blocks per SM of the loaded binary's `entry` (what cudaOccupancyMaxActiveBlocksPerMultiprocessor
        says), with the limits of the architecture it was built for where they are known, else the target's."""
        if entry not in loaded.resident_blocks:
            sm = parse_target(loaded.built_for)[0]
            limits = arch(sm) if sm in ARCHS else arch(parse_target(self.metadata["target"])[0])
            loaded.resident_blocks[entry] = max(1, occupancy_of(limits, loaded.functions[entry].num_regs,
                                                                self.metadata["threads"],
                                                                self.dynamic_smem_bytes).blocks_per_sm)
        return loaded.resident_blocks[entry]

    def __call__(self, a: Any, b: Any, c: Any | None = None, alpha: float = 1.0, beta: float = 0.0,
                 stream: Any = None, stream_k: bool = True, interior: bool = True, *, bias: Any = None,
                 residual: Any = None, row_scale: Any = None, col_scale: Any = None, a_scale: Any = None,
                 b_scale: Any = None, offs: Any = None) -> Any:
        """C = A@B (store) or alpha*A@B + beta*C (alpha_beta), then the spec's fuse chain (docs/fusion.md)
        with its operands bias, residual, row_scale, col_scale, or FP8's block scales a_scale and b_scale
        (docs/fp8.md); returns C.

        A, B and C: GPU arrays of any library with `__cuda_array_interface__` or DLPack (PyTorch,
        CuPy, JAX, Numba), read and written in place, never copied. They may be views (a transposed
        view is column-major; a slice of wider rows has a leading dimension larger than its width)
        as long as each is laid out as the spec says. Batched kernels take 3-D arrays (batch, rows,
        cols); a 2-D A or B is used by every GEMM. C, when left out, is a new array of A's library
        (always for JAX, whose arrays are immutable).

        The call runs on the GPU that holds the operands (all on one GPU), whatever device is current.
        The launch goes on `stream` (CuPy or PyTorch stream, or a cudaStream_t; one of another GPU is
        refused), else on that GPU's current stream of A's library: PyTorch's for tensors, CuPy's for
        the rest. stream_k=False and interior=False: see `bind`.
        """
        operands = (a, b, c, bias, residual, row_scale, col_scale, a_scale, b_scale, offs)
        options = (alpha, beta, stream_k, interior)
        signature = call_signature(operands)
        plan = None if signature is None else self._plans.get((signature.key, options, False))
        if plan is not None:  # a repeated call: its plan's launches at these addresses, nothing else
            made = plan.call(signature.pointers, stream)
            if made is not MISS:
                return c if c is not None else made
        launch = self._bind(operands, options, signature=signature)
        return run_returning_c(launch, c is not None, self.requirements.dtypes["C"], stream)

    def __repr__(self) -> str:
        req = self.requirements
        layouts = "".join("N" if req.layouts[name] == "row" else "T" for name in ("A", "B"))
        built = "" if self.built_for == self.metadata["target"] else f" built for {self.built_for}"
        return (f"<gemmdsl.Kernel {self.name}: {'x'.join(map(str, req.block_tile))} tile, "
                f"{self.metadata['threads']} threads, {layouts}, {self.metadata['bounds']} bounds, "
                f"{req.epilogue} epilogue, {self.metadata['target']}{built}>")


def load(spec_or_path: Any, *, text: str | None = None) -> Kernel:
    """Compile a spec (a `.gemm` path, or `text` with spec_or_path as its display name) and load it.

    Already compiled `Artifacts` are accepted as they are.
    """
    return Kernel(compile_spec(spec_or_path, text=text))


def compile_spec(spec_or_path: Any, *, text: str | None = None) -> Any:
    """A spec compiled, read back from the cache of compiled specs where it is there (load_cache.py)."""
    if text is not None:
        path = os.fspath(spec_or_path) if spec_or_path is not None else "<string>.gemm"
        return compiled_spec(SourceFile(path, text))
    if hasattr(spec_or_path, "cuda") and hasattr(spec_or_path, "metadata"):
        return spec_or_path
    if isinstance(spec_or_path, (str, os.PathLike)):
        return compiled_spec(SourceFile.read(spec_or_path))
    raise TypeError(f"load() takes a .gemm path, compiled Artifacts or text=..., got {type(spec_or_path).__name__}")


# ---------------------------------------------------------------------------
# Environment checks and the shared body of `gemmdsl verify` / `gemmdsl bench`


# What a CUDA runtime error at the first device query means, by its name, for the errors that say so.
CUDA_ERROR_MEANINGS = {
    "cudaErrorInsufficientDriver": "the NVIDIA driver is older than the CUDA runtime CuPy was built for; update "
                                   "the driver, or install the CuPy wheel of the CUDA version the driver supports",
    "cudaErrorNoDevice": "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and that the driver sees the GPU)",
    "cudaErrorInitializationError": "the CUDA driver failed to initialise (is the NVIDIA kernel module loaded?)",
}


def gpu_unavailable_reason() -> str | None:
    """Why CuPy cannot run kernels here, or None when it can: the words `gemmdsl.load` raises and the GPU
    commands print."""
    try:
        import cupy
    except ImportError as err:
        return (f"CuPy is not installed ({err}); the GPU side of gemmdsl needs it: pip install 'gemmdsl[gpu]' "
                f"(CuPy for CUDA 13), on a machine with an NVIDIA GPU and driver")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as err:
        meaning = next((text for name, text in CUDA_ERROR_MEANINGS.items() if name in str(err)), None)
        return f"no usable CUDA device: {err}" + (f": {meaning}" if meaning else "")
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
    first float32 matmul (otherwise it asks for FP32 compute). NVIDIA_TF32_OVERRIDE=0 is
    not set here: it would also turn off the TF32 that the comparison of TF32 kernels
    asks PyTorch's cuBLAS for, in the same process.
    """
    os.environ.setdefault("CUPY_TF32", "0")
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
            compiled.append(compile_spec(path))
        except CompileError as err:
            print(err.render(), file=sys.stderr)
            failed += 1
    try:
        require_gpu()
        require_fp32_cublas()
    except GpuUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        return 1 if failed else 2
    kernels = []
    for artifacts in compiled:
        try:
            kernels.append(Kernel(artifacts))
        except (KernelBuildError, GpuUnavailable) as err:
            print(f"{artifacts.spec.span.file}: error: {err}", file=sys.stderr)
            failed += 1
    # With no spec given, `work` still runs: it may bring kernels of its own (kernel families).
    status = work(kernels, sizes) if kernels or not spec_paths else 0
    return max(status, 1 if failed else 0)

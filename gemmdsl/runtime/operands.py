"""A call's operands checked against what the kernel demands of them (pure; no CuPy needed).

A kernel reads its operands through raw pointers, so a bad call would
read out of bounds instead of failing. Every launch is checked first by
`check_call`, a pure function over `arrays.ArrayView`s (tests build them from
fakes): the dtype and layout each operand must have, the leading dimensions and
batch strides its strides imply, whole tiles for `bounds: exact`, a C that overlaps
A, B or itself, and the choice the host launcher makes between the vector kernel, the
narrow ones and the scalar one (`choose_entry`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..abi import MAX_BATCH, size_errors
from ..arrays import DTYPE_NAMES, ITEM_SIZES, ArrayView, leading_dimension
from ..fuse_operands import FUSE_OPERANDS
from ..grouped_call import check_b_packed, check_grouped_operands
from ..launch_plan import LaunchPlan

Size = tuple[int, int, int]  # (M, N, K)
OPERAND_NAMES = ("A", "B", "C")


# A call's operands in the order its plan's signature lists them (call_plan.py).
CALL_OPERANDS = (*OPERAND_NAMES, *FUSE_OPERANDS, "offs")


@dataclass(frozen=True)
class KernelRequirements:
    """What a generated kernel demands of its arguments, read from its metadata: the operands' element
    types and layouts, and the launch plan (launch_plan.LaunchPlan) the C launchers print, which holds the
    tile, the shape multiples, the alignments and the kernels, and decides each call's launch. The plan's own
    launch_plan.Requirements (the multiples and alignments alone) is `launch.requirements`."""

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
    def from_metadata(cls, metadata: dict) -> "KernelRequirements":
        element_types = metadata.get("dtypes", dict.fromkeys("abc", "f32"))  # older metadata: all f32
        return cls(kernel=metadata["kernel"], epilogue=metadata["epilogue"],
                   layouts={name: metadata["layouts"][name.lower()] for name in OPERAND_NAMES},
                   batched=metadata["batch"] == "strided", launch=LaunchPlan.from_json(metadata["launch"]),
                   grouped=metadata["batch"] == "grouped",
                   dtypes={name: DTYPE_NAMES.get(element_types[name.lower()], element_types[name.lower()])
                           for name in OPERAND_NAMES},  # a weight type (s4, u4, s8) keeps its name
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


def check_call(req: KernelRequirements, a: ArrayView, b: ArrayView, c: ArrayView | None, alpha: float,
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


def check_unclustered(req: KernelRequirements) -> None:
    """The runtime launches through cuLaunchKernel, which has no cluster dimensions: a plan with clusters
    (LaunchPlan.cluster) runs through its C launcher, which launches them with cudaLaunchKernelEx."""
    if req.launch.clustered:
        x, y, z = req.launch.cluster
        raise ValueError(f"{req.kernel} launches thread-block clusters of {x}x{y}x{z}, which the Python runtime "
                         "does not launch; call its C launcher (NAME_launch) instead")


def empty_problem_entry(req: KernelRequirements, m: int, n: int, k: int) -> str | None:
    """The kernel of an empty problem, as the C launchers decide (emit/launcher.py's emit_empty_problem): none
    for M or N = 0 (C has no elements), the K = 0 kernel (C = beta * C and the fuse chain) for K = 0."""
    return None if m == 0 or n == 0 else req.launch.entries.scale_c


def check_matrix(req: KernelRequirements, name: str, array: ArrayView) -> None:
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


def operand_view(req: KernelRequirements, name: str, array: ArrayView) -> OperandView:
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


def check_batch(req: KernelRequirements, views: dict[str, OperandView]) -> int:
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


def byte_range(req: KernelRequirements, view: OperandView) -> tuple[int, int]:
    """[first, end) of the bytes the kernel addresses in this operand: its first element to just past
    the last element of its last matrix."""
    elements = (view.batch - 1) * view.batch_stride + footprint(view, req.layouts[view.name])
    return view.pointer, view.pointer + elements * view.itemsize


def check_no_overlap(req: KernelRequirements, views: dict[str, OperandView]) -> None:
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


def check_divisible(req: KernelRequirements, m: int, n: int, k: int) -> None:
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


def check_leading_dimension(req: KernelRequirements, view: OperandView) -> None:
    limit = req.launch.requirements.max_leading_dimension[view.name.lower()]
    if view.ld > limit:
        raise ValueError(f"{view.name}'s leading dimension {view.ld} is more than the {limit} that {req.kernel}'s "
                         f"32-bit tile offsets allow")


def misalignments(req: KernelRequirements, views: dict[str, OperandView], vector_elements: dict[str, int]) -> list[str]:
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


def choose_entry(req: KernelRequirements, views: dict[str, OperandView], which: str = "kernel") -> str:
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


def check_scalars(req: KernelRequirements, alpha: float, beta: float, *, c_given: bool) -> None:
    """A store epilogue computes exactly A@B; a nonzero beta needs a C to read."""
    if req.epilogue == "store" and (alpha != 1 or beta != 0):
        raise ValueError(f"{req.kernel} has a 'store' epilogue (C = A@B): alpha must be 1 and beta 0, "
                         f"got alpha={alpha}, beta={beta}")
    if beta != 0 and not c_given:
        raise ValueError(f"beta={beta} reads C, but no C was passed")


def matrix_extent(req: KernelRequirements, view: OperandView) -> int:
    """Elements one matrix of the operand spans in the C launcher's stepping: its leading dimension times its
    outer dimension."""
    return view.ld * (view.rows if req.layouts[view.name] == "row" else view.cols)


def check_writable(view: ArrayView) -> None:
    """The kernel writes C in place; refuse what the caller cannot have written."""
    if view.library == "jax":
        raise TypeError("C is a JAX array, and JAX arrays are immutable: leave C out (beta must then be 0) and "
                        "use the new array the call returns")
    if view.readonly:
        raise TypeError(f"C is read-only ({view.library} marked it so); pass a writable C")


def call_operands(a: Any, b: Any, c: Any, chain: dict[str, Any]) -> tuple:
    """A call's operands in CALL_OPERANDS order, from A, B, C and the keyword arguments of the fuse chain and
    offs (TypeError for another keyword, as Python gives it)."""
    unknown = sorted(set(chain) - set(CALL_OPERANDS[3:]))
    if unknown:
        raise TypeError(f"got an unexpected keyword argument {unknown[0]!r}")
    return (a, b, c, *(chain.get(name) for name in CALL_OPERANDS[3:]))

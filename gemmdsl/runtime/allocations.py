"""The arrays a call makes in the caller's library: a C left out, the padded launcher's copies of A and B
(paths/wgmma/pad.py), and C handed to JAX."""
from __future__ import annotations

from functools import partial
from typing import Any, Callable

from ..launch_plan import PAD_MIN_REUSE, PAD_MIN_WORK, PAD_ROW_BYTES
from ..targets import SECTOR_BYTES
from .operands import KernelRequirements, OperandView


def padded_copies(req: KernelRequirements, views: dict[str, OperandView]) -> dict[str, tuple[int, int, int]]:
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


def matrix_maker(library: str, dtype: str, rows: int, cols: int, device: int) -> Callable[[], tuple] | None:
    """padded_maker of a row-major rows x cols matrix of element type `dtype` (a name: "bfloat16", "float16", ...)
    in PyTorch, or in CuPy where CuPy has the type (not bfloat16); None otherwise."""
    if library == "torch":
        import torch

        return padded_maker(getattr(torch, dtype), library, rows, cols, cols, False, device)
    if library == "cupy" and dtype != "bfloat16":
        return padded_maker(dtype, library, rows, cols, cols, False, device)
    return None


def c_shape(req: KernelRequirements, m: int, n: int, batch: int) -> tuple[tuple[int, ...], bool]:
    """The shape to allocate for an uninitialised C, and whether to transpose its last two axes
    afterwards (a column-major C is the transpose of a row-major N x M array)."""
    leading = (batch,) if batch > 1 else ()
    if req.layouts["C"] == "row":
        return leading + (m, n), False
    return leading + (n, m), True


def c_maker(req: KernelRequirements, library: str, m: int, n: int, batch: int, device: int) -> Callable[[], tuple]:
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

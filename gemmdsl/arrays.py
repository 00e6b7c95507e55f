"""Operands from any CUDA array library, read without copies (pure: no CuPy, no PyTorch).

`array_view(name, obj)` reads what a kernel launch needs of `obj` -- shape, strides,
dtype, device pointer, device -- from the protocols the libraries share:

- `__cuda_array_interface__` (CuPy, PyTorch, Numba): a dict; `strides: None` means
  C-contiguous, strides are in bytes, `typestr` is NumPy's ('<f4').
- PyTorch's GPU tensors are read from their attributes (data_ptr, stride, ...), which is an
  order of magnitude faster than either protocol; the rest of them go through the protocols.
- DLPack (JAX; PyTorch's bfloat16 and float8 types, which its array interface gives as opaque or refuses):
  `__dlpack_device__()` says where the data is, `__dlpack__()` returns a capsule
  holding a DLTensor, read here through ctypes. The capsule is not consumed: its
  destructor releases the exporter's reference, and the caller's own reference keeps
  the memory alive.

Nothing here depends on CuPy understanding the dtype: bfloat16 and float8 operands are only a name
and an item size, and launches pass raw device pointers.
"""
from __future__ import annotations

import ctypes
import numbers
import sys
from dataclasses import dataclass
from functools import cache
from math import prod
from typing import Any

import numpy

# The compiler's element type names (metadata "dtypes") and the names errors use.
DTYPE_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
ITEM_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}

# DLPack's device types and dtype codes (dlpack.h).
DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED = 1, 2, 3, 13
DL_GPU_MEMORY = (DL_CUDA, DL_CUDA_MANAGED)
DL_INT, DL_UINT, DL_FLOAT, DL_BFLOAT = 0, 1, 2, 4
DL_TYPE_PREFIXES = {DL_INT: "int", DL_UINT: "uint", DL_FLOAT: "float", DL_BFLOAT: "bfloat"}
# DLPack 1.1's FP8 codes whose names are PyTorch's (kDLFloat8_e4m3fn, kDLFloat8_e5m2); the others
# (e4m3fnuz, e5m2fnuz, ...) encode other values and keep a code name, which no kernel takes.
DL_FLOAT8_NAMES = {10: "float8_e4m3fn", 12: "float8_e5m2"}

PROTOCOLS = "__cuda_array_interface__ or __dlpack__: a PyTorch, CuPy, JAX or Numba GPU array"


@dataclass(frozen=True)
class ArrayView:
    """One operand as the launch sees it, whichever library made it."""

    library: str  # "torch", "cupy", "jax", "numba", ...: where a C allocated for the caller comes from
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    dtype: str  # "float32", "float16", "bfloat16", or what else it is ("float64", "int32", ...)
    itemsize: int
    pointer: int  # device address of element (0, 0[, 0])
    device: int | None  # CUDA device ordinal; None where the protocol does not say (ask the driver)
    readonly: bool = False


def library_of(obj: Any) -> str:
    """The top-level package of `obj`'s type, with JAX's and Numba's implementation packages folded in."""
    return library_of_type(type(obj))


@cache
def library_of_type(kind: type) -> str:
    root = kind.__module__.split(".")[0]
    return {"jaxlib": "jax", "numba_cuda": "numba"}.get(root, root)


def type_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def array_view(name: str, obj: Any) -> ArrayView:
    """The view of operand `name`; TypeError for what is not a GPU array, with what to pass instead, and
    ValueError for one no kernel can address (`check_addressable`)."""
    view = read_view(name, obj)
    check_addressable(name, view)
    return view


def check_addressable(name: str, view: ArrayView) -> None:
    """A non-empty array needs a data pointer, aligned to its elements: every kernel (the scalar one too)
    reads whole elements, and a misaligned one faults."""
    if 0 in view.shape:
        return
    if view.pointer == 0:
        raise ValueError(f"{name} has a null data pointer but {prod(view.shape)} elements; pass an allocated array")
    if view.pointer % view.itemsize:
        raise ValueError(f"{name}'s data pointer {view.pointer:#x} is not {view.itemsize}-byte aligned for its "
                         f"{view.dtype} elements (a view that starts inside an element, e.g. a byte offset into a "
                         f"reinterpreted buffer); pass an aligned array or a copy")


def read_view(name: str, obj: Any) -> ArrayView:
    """`array_view` before the address checks."""
    library = library_of(obj)
    if library in ATTRIBUTE_READERS:
        view = ATTRIBUTE_READERS[library](obj)
        if view is not None:
            return view
    try:
        interface = obj.__cuda_array_interface__
    except AttributeError:  # not a CUDA array library's object, or (PyTorch) a CPU tensor
        interface = None
    except Exception as err:  # e.g. PyTorch's bfloat16 or requires_grad; DLPack may still describe it
        if not hasattr(obj, "__dlpack__"):
            raise TypeError(f"{name}: {err}") from err
        interface = None
    # An opaque typestr ('<V2': PyTorch's bfloat16, like ml_dtypes') names no element type; DLPack does.
    opaque = interface is not None and numpy.dtype(interface["typestr"]).kind == "V"
    if interface is not None and not (opaque and hasattr(obj, "__dlpack__")):
        return view_of_interface(name, interface, library_of(obj))
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        device_type, device_id = obj.__dlpack_device__()
        if device_type not in DL_GPU_MEMORY:
            where = "host memory" if device_type in (DL_CPU, DL_CUDA_HOST) else f"DLPack device type {device_type}"
            raise TypeError(f"{name} must be in GPU memory, got a {type_name(obj)} in {where}; move it to the GPU "
                            f"first (e.g. tensor.cuda(), cupy.asarray(array), jax.device_put(array, gpu))")
        try:
            capsule = obj.__dlpack__()
        except Exception as err:  # PyTorch refuses tensors that require grad, for one
            raise TypeError(f"{name}: {err}") from err
        return view_of_dlpack(name, capsule, library_of(obj), int(device_id))
    raise TypeError(f"{name} must be a GPU array ({PROTOCOLS}), got {type_name(obj)}")


def view_of_torch_tensor(tensor: Any) -> ArrayView | None:
    """A PyTorch GPU tensor read from its own attributes: the protocols build a dict or a capsule on
    every call (tens of microseconds for the three operands, more than a small GEMM takes). A tensor
    that requires grad is read as its data (as `tensor.detach()` would give it): a gemmdsl call is not
    differentiable, and what it returns does not require grad. None where the protocols should judge:
    CPU tensors, lazily conjugated or negated views, and anything that is not a plain tensor."""
    try:
        if not tensor.is_cuda or tensor.is_conj() or tensor.is_neg():
            return None
        dtype = str(tensor.dtype).removeprefix("torch.")
        return ArrayView("torch", tuple(tensor.shape), tuple(tensor.stride()), dtype, tensor.element_size(),
                         tensor.data_ptr(), tensor.device.index)
    except (AttributeError, TypeError):  # a torch object that is not a tensor
        return None


def view_of_cupy_array(array: Any) -> ArrayView | None:
    """A CuPy array read from its own attributes: its array interface is a dict built per call and
    names no device, for which the launch would then ask the driver (a pointer query per operand and
    call). None for what is not a plain `cupy.ndarray` of a numeric dtype with whole-element strides:
    the protocol path judges those, with its errors."""
    if type(array).__name__ != "ndarray":
        return None
    try:
        name, itemsize = numeric_dtype(array.dtype)
        if name is None or any(stride % itemsize for stride in array.strides):
            return None
        memory = array.data  # a MemoryPointer: its address and device, without building a Device object
        return ArrayView("cupy", tuple(array.shape), tuple(stride // itemsize for stride in array.strides), name,
                         itemsize, memory.ptr, memory.device_id)
    except AttributeError:  # a cupy object that only looks like an array
        return None


@cache
def numeric_dtype(dtype: numpy.dtype) -> tuple[str | None, int]:
    """(name, itemsize) of a numeric NumPy dtype, (None, itemsize) of another; kept per dtype, since
    reading `dtype.name` costs more than the rest of a view (1.7 us on the H100's host)."""
    return (dtype.name if dtype.kind in "biufc" else None), dtype.itemsize


# Libraries whose arrays are read from their attributes before the protocols are asked.
ATTRIBUTE_READERS = {"torch": view_of_torch_tensor, "cupy": view_of_cupy_array}


def view_of_interface(name: str, interface: dict, library: str) -> ArrayView:
    """A view from a `__cuda_array_interface__` dict (byte strides; None: C-contiguous)."""
    dtype = numpy.dtype(interface["typestr"])
    if dtype.byteorder == ">" or dtype.byteorder == "=" and sys.byteorder == "big":
        raise TypeError(f"{name} is big-endian ({interface['typestr']!r}): the kernels read little-endian "
                        f"{dtype.name}; pass a little-endian copy (x.astype('{dtype.newbyteorder('<').str}'))")
    shape = whole_numbers(name, "shape", interface["shape"])
    byte_strides = interface.get("strides")
    if byte_strides is not None:
        byte_strides = whole_numbers(name, "stride", byte_strides)
    if byte_strides is None:
        strides = contiguous_strides(shape)
    elif any(stride % dtype.itemsize for stride in byte_strides):
        raise ValueError(f"{name} has strides {tuple(byte_strides)} bytes, which are not whole {dtype.name} "
                         f"elements; the kernel needs whole-element strides")
    else:
        strides = tuple(int(stride) // dtype.itemsize for stride in byte_strides)
    pointer, readonly = interface["data"]
    return ArrayView(library, shape, strides, dtype.name, dtype.itemsize, int(pointer), None, bool(readonly))


def whole_numbers(name: str, what: str, values: Any) -> tuple[int, ...]:
    """A shape's or strides' values as ints; TypeError for any that is not an integer (2.5, "2", True), which
    int() would silently round or read."""
    if not all(isinstance(value, numbers.Integral) and not isinstance(value, bool) for value in values):
        raise TypeError(f"{name} has a non-integer {what} {tuple(values)!r}; an array interface gives integers")
    return tuple(int(value) for value in values)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous (row-major) array of this shape."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """The head of DLManagedTensor, which the "dltensor" capsule points to."""

    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


# Our own prototype, so that no global ctypes.pythonapi attribute is changed.
capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def view_of_dlpack(name: str, capsule: Any, library: str, device: int) -> ArrayView:
    """A view from an unconsumed "dltensor" capsule (element strides; NULL: C-contiguous)."""
    tensor = ctypes.cast(capsule_pointer(capsule, b"dltensor"), ctypes.POINTER(DLTensor)).contents
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    dtype = DL_FLOAT8_NAMES.get(code) if bits == 8 and code in DL_FLOAT8_NAMES else \
        f"{DL_TYPE_PREFIXES.get(code, f'dlpack-code-{code}-')}{bits}"
    dtype += f"x{lanes}" if lanes != 1 else ""
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = (tuple(tensor.strides[i] for i in range(tensor.ndim)) if tensor.strides
               else contiguous_strides(shape))
    pointer = (tensor.data or 0) + tensor.byte_offset
    return ArrayView(library, shape, strides, dtype, max(1, bits * lanes // 8), pointer, device)


def leading_dimension(shape: tuple[int, int], strides: tuple[int, int], layout: str) -> int | None:
    """The leading dimension of a rows x cols matrix with these (element) strides in a row- or
    column-major layout, or None when the strides are not that layout.

    A matrix of one row (row-major) or one column (column-major) never steps by its leading
    dimension, so any value at least its length addresses it; a multiple of 16 elements keeps it
    vector-aligned and 16-byte aligned for any element size, which TMA needs (a decode call's A of one
    row and K = 6489 is then read in place, not refused or copied).
    An empty matrix addresses nothing: its strides do not matter, and it gets the contiguous leading
    dimension (at least 1).
    """
    (rows, cols), (row_stride, col_stride) = shape, strides
    outer, inner, outer_stride, inner_stride = ((rows, cols, row_stride, col_stride) if layout == "row"
                                                else (cols, rows, col_stride, row_stride))
    if rows == 0 or cols == 0:
        return max(inner, 1)
    if inner > 1 and inner_stride != 1:
        return None
    if outer == 1:
        return -(-inner // 16) * 16
    return outer_stride if outer_stride >= inner else None

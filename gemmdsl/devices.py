"""Which GPU a call runs on, which stream it goes on, and the launch itself.

The rules (docs/python-api.md, "Devices and streams"):

- A call runs on the GPU that holds its operands, whatever device is current. A, B, C and every
  fused operand must be on one GPU; operands on different GPUs are refused before anything launches.
- Without `stream=`, the launch goes on that GPU's current stream of the caller's library
  (PyTorch's `torch.cuda.current_stream(device)` for tensors, CuPy's for the rest).
- An explicit `stream=` that belongs to another GPU is refused before anything launches. The
  special handles 0 (the legacy default stream), 1 and 2 (`cudaStreamLegacy`,
  `cudaStreamPerThread`) name the default stream of whichever GPU the call runs on.
- The launch happens with that GPU's primary context current, and the caller's current device is
  restored afterwards.

Everything here but `Driver` runs without a GPU: the resolution functions take the driver's answers
as arguments, so the CPU tests drive them with fakes.
"""
from __future__ import annotations

import math

import ctypes
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy

from .arrays import ArrayView, type_name

# Stream handles that name a default stream rather than one stream object (cuda_runtime_api.h):
# the NULL stream, cudaStreamLegacy and cudaStreamPerThread. They belong to no single device.
DEFAULT_STREAM_HANDLES = (0, 1, 2)


class DeviceMismatch(ValueError):
    """Operands, or an operand and a stream, are on different GPUs."""


def operands_device(views: dict[str, ArrayView], pointer_device: Callable[[str, ArrayView], int]) -> int | None:
    """The one GPU that holds every operand in `views` (name -> view, in argument order).

    `pointer_device(name, view)` answers for a view whose protocol names no device (the driver's pointer
    query). An empty array whose protocol names no device is left out (its pointer may be null, and nothing
    of it is read); None when every operand is such an array.
    """
    devices: dict[str, int] = {}
    for name, view in views.items():
        if view.device is not None:
            devices[name] = view.device
        elif math.prod(view.shape):
            devices[name] = pointer_device(name, view)
    if not devices:
        return None
    first_name, first = next(iter(devices.items()))
    for name, device in devices.items():
        if device != first:
            raise DeviceMismatch(f"{first_name} is on GPU {first} but {name} is on GPU {device}; every operand of "
                                 f"a call must be on one GPU (move {name}, e.g. tensor.to({first_name.lower()}.device))")
    return first


def stream_device(stream: Any, handle_device: Callable[[int], int | None]) -> int | None:
    """The GPU an explicit stream belongs to, or None for a default-stream handle (it follows the call).

    PyTorch streams say so (`.device_index`), CuPy streams too (`.device_id`); a raw handle or an object
    with only `__cuda_stream__` is asked of the driver through `handle_device`.
    """
    for attribute in ("device_index", "device_id"):
        device = getattr(stream, attribute, None)
        if isinstance(device, int):
            return device
    handle = stream_handle(stream)
    return None if handle in DEFAULT_STREAM_HANDLES else handle_device(handle)


def check_stream_device(stream: Any, device: int, handle_device: Callable[[int], int | None]) -> None:
    """Refuse an explicit stream of another GPU than the operands'."""
    owner = stream_device(stream, handle_device)
    if owner is not None and owner != device:
        raise DeviceMismatch(f"the stream is on GPU {owner} but the operands are on GPU {device}; pass a stream "
                             f"of GPU {device} (e.g. torch.cuda.current_stream({device})) or leave stream= out")


def stream_handle(stream: Any) -> int:
    """The cudaStream_t of a CuPy stream (.ptr), a PyTorch one (.cuda_stream), any object with
    __cuda_stream__, or a raw handle."""
    if isinstance(stream, int):
        return stream
    for attribute in ("ptr", "cuda_stream"):
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    raise TypeError(f"stream must be a CuPy or PyTorch stream, an object with __cuda_stream__, or a cudaStream_t "
                    f"(int), got {type_name(stream)}")


class ParameterBlock:
    """cuLaunchKernel's `kernelParams` for a launch's arguments (NumPy scalars: addresses as uint64, int32,
    float32, int64, and 128-byte tensor maps): `address` is that of an array of pointers, one to each
    argument's bytes, which lie in one buffer, each at an offset of its own size's alignment (64 bytes for a
    tensor map).

    A repeated call rewrites its addresses in place (`write_address`, `write_bytes`) instead of packing anew:
    cuLaunchKernel copies each parameter when it queues the launch, as a stream capture does when it records
    one, so a later write changes no launch already queued or captured."""

    def __init__(self, args: Iterable[Any]):
        offsets, size = [], 0
        for arg in args:
            if not isinstance(arg, numpy.generic):
                raise TypeError(f"kernel arguments must be NumPy scalars of the parameter's type, got "
                                f"{type_name(arg)}")
            alignment = min(arg.nbytes, PARAMETER_ALIGNMENT)
            size = -(-size // alignment) * alignment
            offsets.append((size, arg.tobytes()))
            size += arg.nbytes
        self._buffer = ctypes.create_string_buffer(size + PARAMETER_ALIGNMENT)
        base = -(-ctypes.addressof(self._buffer) // PARAMETER_ALIGNMENT) * PARAMETER_ALIGNMENT
        for offset, raw in offsets:
            ctypes.memmove(base + offset, raw, len(raw))
        self._addresses = tuple(base + offset for offset, _ in offsets)
        self._pointers = (ctypes.c_void_p * max(1, len(offsets)))(*self._addresses)
        self.address = ctypes.addressof(self._pointers)
        self._words: dict[int, ctypes.c_uint64] = {}  # argument index -> its 64 bits, for write_address

    def write_address(self, index: int, value: int) -> None:
        """Set argument `index`, a 64-bit address."""
        word = self._words.get(index)
        if word is None:
            word = self._words[index] = ctypes.c_uint64.from_address(self._addresses[index])
        word.value = value

    def write_bytes(self, index: int, raw: bytes) -> None:
        """Set argument `index` to `raw`, its whole value (a tensor map's 128 bytes)."""
        ctypes.memmove(self._addresses[index], raw, len(raw))


PARAMETER_ALIGNMENT = 64  # CUtensorMap's


@dataclass
class Driver:
    """The launch, and the one driver query CuPy does not wrap (GPU machines only). The launch is
    `cupy.cuda.driver.launchKernel` over parameters packed once per bound call: CuPy's kernel objects
    wrap their arguments anew on every call, which costs more host time than the launch itself."""

    launch_kernel: Callable[..., None]  # cuLaunchKernel, raising CuPy's CUDADriverError
    library: Any  # libcuda through ctypes

    @classmethod
    def load(cls) -> "Driver":
        import cupy

        return cls(cupy.cuda.driver.launchKernel, ctypes.CDLL("libcuda.so.1"))

    def launch(self, launch: Any, stream: int) -> None:
        """Queue one `runtime.KernelLaunch` (its function, grid, block, shared memory and packed
        parameters) on `stream`, in the current context."""
        self.launch_kernel(launch.function.handle, *launch.grid, *launch.block, launch.shared_mem, stream,
                           launch.parameters.address, 0)

    def handle_device(self, handle: int) -> int | None:
        """The GPU a stream handle belongs to (cuStreamGetDevice, CUDA 12.8 and newer); None where the
        driver cannot say."""
        query = getattr(self.library, "cuStreamGetDevice", None)
        if query is None:
            return None
        device = ctypes.c_int()
        return device.value if query(ctypes.c_void_p(handle), ctypes.byref(device)) == 0 else None

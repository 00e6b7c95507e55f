"""The GPU side of a launch: where operands live, the caller's stream, the current device, the loaded
kernels and their launches through the CUDA driver (devices.Driver)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable

from ..arrays import ArrayView
from ..call_plan import Allocation
from ..devices import Driver, ParameterBlock, check_stream_device, stream_handle
from ..tensor_maps import MapInputs
from .allocations import to_library

MEMORY_TYPE_DEVICE, MEMORY_TYPE_MANAGED = 2, 3  # cudaPointerAttributes.type


def pointer_device(name: str, view: ArrayView) -> int:
    """The GPU that holds operand `name` (for arrays whose protocol names no device), from the driver."""
    import cupy

    attributes = cupy.cuda.runtime.pointerGetAttributes(view.pointer)
    if attributes.type not in (MEMORY_TYPE_DEVICE, MEMORY_TYPE_MANAGED):
        raise TypeError(f"{name} must be in GPU memory, but its data pointer {view.pointer:#x} ({view.library}) "
                        f"is host memory")
    return attributes.device


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

"""A GPU for the CPU tests of the runtime's call path: PyTorch-like tensors that hold only a shape, strides, a
dtype and an address, a driver that records each launch instead of running it, a tensor-map encoder whose maps'
bytes name the request they were encoded from, and modules whose functions are names. Nothing is dereferenced.

`FakeGpu.install(monkeypatch)` swaps these in for the runtime's GPU touch points (the current device, the
caller's stream, the driver, module loading, the allocations and the tensor-map encoder); `fake_kernel(path)`
then loads a shipped spec as `gemmdsl.load` would, without CuPy, and `launched` lists every launch as
(entry, grid, block, shared memory, arguments decoded to Python numbers, maps as their requests).
"""
from __future__ import annotations

import ctypes
import itertools
import math
from dataclasses import dataclass, field

import numpy

from gemmdsl import arrays, runtime, tensor_maps
from gemmdsl.compiler import compile_path
from gemmdsl.family import compile_family_path
from gemmdsl.family_kernel import FamilyKernel

ITEM_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "int32": 4}
STREAM = 0x5EA  # the handle `callers_stream` answers
SMS = 132


class FakeDtype:
    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__


DTYPES = {name: FakeDtype(name) for name in ITEM_SIZES}


class Memory:
    """A bump allocator of fake device addresses, 512-byte aligned as PyTorch's allocator gives them."""

    def __init__(self, start: int = 0x7F0000000000):
        self.next = start

    def allocate(self, nbytes: int) -> int:
        address = self.next
        self.next += max(512, -(-nbytes // 512) * 512)
        return address


MEMORY = Memory()


class FakeTensor:
    """What the runtime reads of a PyTorch GPU tensor (arrays.view_of_torch_tensor, torch_signature), and the
    few operations its allocations use (transpose, slicing of the last dimension)."""

    __module__ = "torch"  # arrays.library_of: a PyTorch tensor

    def __init__(self, shape, dtype="bfloat16", strides=None, ptr=None, device=0):
        self.shape = tuple(shape)
        self._strides = tuple(strides) if strides is not None else arrays.contiguous_strides(self.shape)
        self.dtype = DTYPES[dtype]
        self._ptr = ptr if ptr is not None else MEMORY.allocate(math.prod(self.shape) * ITEM_SIZES[dtype])
        self.is_cuda = True
        self.device = type("device", (), {"index": device})()

    def stride(self):
        return self._strides

    def element_size(self):
        return ITEM_SIZES[self.dtype.name]

    def data_ptr(self):
        return self._ptr

    def get_device(self):
        return self.device.index

    def is_conj(self):
        return False

    def is_neg(self):
        return False

    def transpose(self, first, second):
        shape, strides = list(self.shape), list(self._strides)
        shape[first], shape[second] = shape[second], shape[first]
        strides[first], strides[second] = strides[second], strides[first]
        return FakeTensor(shape, self.dtype.name, strides, self._ptr, self.device.index)

    def t(self):
        return self.transpose(-1, -2)

    @property
    def mT(self):
        return self.transpose(-1, -2)

    def columns(self, count: int) -> "FakeTensor":
        """The first `count` columns (x[:, :count])."""
        return FakeTensor((*self.shape[:-1], count), self.dtype.name, self._strides, self._ptr, self.device.index)

    def offset(self, elements: int) -> "FakeTensor":
        """The same view, `elements` further on (an offset view into a larger array)."""
        return FakeTensor(self.shape, self.dtype.name, self._strides, self._ptr + elements * self.element_size(),
                          self.device.index)


def matrix(rows: int, cols: int, dtype: str, layout: str = "row", batch: int | None = None) -> FakeTensor:
    """A fresh rows x cols matrix (or a batch of them) in `layout`."""
    leading = (batch,) if batch is not None else ()
    if layout == "row":
        return FakeTensor((*leading, rows, cols), dtype)
    return FakeTensor((*leading, cols, rows), dtype).transpose(-1, -2)


@dataclass(frozen=True)
class Launched:
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    stream: int
    args: tuple  # Python numbers; tensor maps as their TensorMapRequest


@dataclass
class FakeDriver:
    """runtime's Driver as the launches see it: each launch is decoded from the very parameter bytes it
    would hand cuLaunchKernel."""

    launched: list[Launched] = field(default_factory=list)

    def launch(self, launch, stream: int) -> None:
        self.launched.append(Launched(launch.function.name, tuple(launch.grid), tuple(launch.block),
                                      launch.shared_mem, stream, decode(launch)))

    def handle_device(self, handle: int) -> int | None:
        return 0


def decode(launch) -> tuple:
    """Each argument's value read back from the packed parameters' pointers, typed as the launch's own
    arguments say (the bytes are what the driver would copy)."""
    pointers = ctypes.cast(launch.parameters.address, ctypes.POINTER(ctypes.c_void_p))
    values = []
    for index, arg in enumerate(launch.args):
        address = pointers[index]
        if arg.dtype.itemsize == tensor_maps.TENSOR_MAP_BYTES:
            values.append(ENCODED[ctypes.string_at(address, tensor_maps.TENSOR_MAP_BYTES)])
            continue
        raw = ctypes.string_at(address, arg.dtype.itemsize)
        values.append(numpy.frombuffer(raw, dtype=arg.dtype)[0].item())
    return tuple(values)


ENCODED: dict[bytes, tensor_maps.TensorMapRequest] = {}
ENCODE_COUNT = itertools.count()


def fake_encoder(request: tensor_maps.TensorMapRequest) -> bytes:
    """A map's bytes: a serial number, so that `decode` gives the request back."""
    raw = next(ENCODE_COUNT).to_bytes(8, "little") + bytes(tensor_maps.TENSOR_MAP_BYTES - 8)
    ENCODED[raw] = request
    return raw


class FakeFunction:
    def __init__(self, name: str, num_regs: int = 128):
        self.name, self.handle, self.num_regs = name, hash(name) & 0xFFFF, num_regs


class FakeGpu:
    """The fakes, installed with `install`; `launched` is every launch since, `encodes` the tensor maps encoded."""

    def __init__(self):
        self.driver = FakeDriver()
        self.encodes = 0
        self.memory = Memory(0x7E0000000000)  # the runtime's allocations, apart from the tests' operands

    def mark(self) -> int:
        """Where the next allocation goes; `rewind(mark)` makes the allocations after it again at the same
        addresses (so that two ways of making one call can be compared argument for argument)."""
        return self.memory.next

    def rewind(self, mark: int) -> None:
        self.memory.next = mark

    def new(self, shape, dtype, device=0) -> FakeTensor:
        """An array the runtime allocates (C left out, a padded copy, stream-K's workspace)."""
        return FakeTensor(shape, dtype, ptr=self.memory.allocate(math.prod(shape) * ITEM_SIZES[dtype]), device=device)

    @property
    def launched(self) -> list[Launched]:
        return self.driver.launched

    def install(self, monkeypatch) -> "FakeGpu":
        monkeypatch.setattr(runtime.kernel, "require_gpu", lambda: None)
        monkeypatch.setattr(runtime.driver, "cuda_driver", lambda: self.driver)
        for module in (runtime.kernel, runtime.driver):
            monkeypatch.setattr(module, "current_device", lambda: 0)
            monkeypatch.setattr(module, "on_device", NoDeviceSwitch)
        monkeypatch.setattr(runtime.driver, "callers_stream", lambda library, device: STREAM)
        monkeypatch.setattr(runtime.Kernel, "_load_on", fake_module)
        monkeypatch.setattr(runtime.kernel, "c_maker", lambda *args: lambda: (self.empty_c(*args),))
        monkeypatch.setattr(runtime.kernel, "padded_maker", lambda *args: lambda: (self.empty_padded(*args),))
        monkeypatch.setattr(runtime.launch_arguments, "allocate_workspace", self.allocate_workspace)
        monkeypatch.setattr(tensor_maps, "driver_encoder", lambda: self.counting_encoder)
        return self

    def counting_encoder(self, request):
        self.encodes += 1
        return fake_encoder(request)

    def empty_c(self, req, library, m, n, batch, device):
        shape, transpose = runtime.c_shape(req, m, n, batch)
        c = self.new(shape, req.dtypes["C"], device)
        return c.transpose(-1, -2) if transpose else c

    def empty_padded(self, dtype, library, rows, cols, ld, transpose, device):
        copy = self.new((rows, ld), dtype.name, device).columns(cols)
        return copy.transpose(-1, -2) if transpose else copy

    def allocate_workspace(self, partial_bytes, flags_count):
        return self.new((partial_bytes // 4,), "float32"), self.new((flags_count,), "int32")


class NoDeviceSwitch:
    def __init__(self, device: int):
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


def fake_module(kernel, device: int):
    """A DeviceModule whose functions are names (Kernel._load_on without CuPy)."""
    functions = {entry: FakeFunction(entry) for entry in kernel.requirements.launch.entries.all()}
    return runtime.DeviceModule(device, kernel.metadata["target"], None, functions, SMS)


def fake_kernel(path) -> runtime.Kernel:
    """A shipped spec loaded on the fake GPU (call FakeGpu.install first)."""
    return runtime.Kernel(compile_path(path))


def fake_family(path) -> FamilyKernel:
    return FamilyKernel(compile_family_path(path))

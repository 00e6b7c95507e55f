"""Repeated calls of a kernel: what a call's checks decided and the launches they built, kept per call
signature and rebound to each later call's addresses (pure: no CuPy; runtime/kernel.py and family_kernel.py use it,
the CPU tests drive it with fakes, docs/python-api.md "What a call costs on the host").

A call's signature is everything its checks and launches depend on but its operands' addresses: per operand
its type, shape, strides, dtype and device (PyTorch tensors and CuPy arrays, read from their attributes), and
the address's alignment class, its remainder modulo ALIGNMENT_CLASS_BYTES, which decides every alignment rule
(the vector kernels' widths, TMA's 16 bytes, the 32-byte sectors of the padded launcher and of the maps' L2
promotion, the alignment a TMA store of C needs); and which operands share an address. The kernel adds the
scalars and options. Two calls of one signature pass the same checks and get the same launches, but for the
addresses in them.

A `CallPlan` is made from the first call's launches. Every address among their arguments (the uint64 ones) and
in their tensor maps' inputs lies inside the memory of one operand, or of one array the call allocated (C left
out, the padded launcher's copies, stream-K's workspace): it is kept as that slot and an offset. A later call
of the signature allocates the same arrays anew and launches the plan's launches for its addresses: ready
where the plan has launched at those addresses lately, else made by writing each address (its slot's new
address plus the offset) and each tensor map (encoded once per operand and address) into the parameters of
the launches made longest ago. The one check that depends on addresses, that C shares no
memory with what the call reads, is repeated on the new addresses; a call that fails it goes the full way, and
is refused there with the full message.
"""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache
from typing import Any, Callable, NamedTuple

import numpy

from .arrays import ArrayView, library_of_type
from .tensor_maps import pack

# Every alignment a kernel, its launcher or a tensor map asks of an address divides this (tests/test_call_plan.py
# holds the metadata's to it): two addresses with one remainder pass and fail the same alignment rules.
ALIGNMENT_CLASS_BYTES = 256
SETS_KEPT = 16  # sets of addresses whose launches a plan keeps, ready to launch (a loop's buffers take turns)
MAPS_KEPT = 256  # tensor maps a plan keeps, by operand and address
MISS = object()  # a plan that cannot serve this call: go the full way


def keep(table: OrderedDict, key: Any, value: Any, limit: int) -> None:
    """Put `value` under `key`, dropping the oldest entry beyond `limit` (OrderedDict.popitem is one step, so
    threads sharing the table never see it half done)."""
    table[key] = value
    if len(table) > limit:
        table.popitem(last=False)


def alignment_class(pointer: int) -> int:
    """The address's remainder modulo ALIGNMENT_CLASS_BYTES; a null address is a class of its own (the full
    checks refuse it for an array with elements)."""
    return pointer % ALIGNMENT_CLASS_BYTES if pointer else -1


def torch_operand(tensor: Any) -> tuple[tuple, int]:
    """A PyTorch tensor's signature (everything arrays.view_of_torch_tensor reads but the address, unconverted)
    and its address."""
    pointer = tensor.data_ptr()
    return ((type(tensor), tensor.shape, tensor.stride(), tensor.dtype, tensor.get_device(), tensor.is_conj(),
             tensor.is_neg(), alignment_class(pointer)), pointer)


def cupy_operand(array: Any) -> tuple[tuple, int]:
    """A CuPy array's signature (what arrays.view_of_cupy_array reads but the address) and its address."""
    memory = array.data
    pointer = memory.ptr
    return (type(array), memory.device_id, array.shape, array.strides, array.dtype, alignment_class(pointer)), pointer


READERS = {"torch": torch_operand, "cupy": cupy_operand}


@cache
def reader_of(kind: type) -> Callable[[Any], tuple[tuple, int]] | None:
    return READERS.get(library_of_type(kind))


class Signature(NamedTuple):  # a named tuple: made on every call, it costs a third of a frozen dataclass
    key: tuple  # per operand its signature (None where it is left out), and which operands share an address
    pointers: tuple[int, ...]  # the given operands' addresses, in argument order


def call_signature(operands: tuple) -> Signature | None:
    """The signature of a call's operands (None where left out), or None where one of them has no cheap
    signature (a library other than PyTorch and CuPy: such calls are checked in full every time)."""
    keys, pointers = [], []
    for operand in operands:
        if operand is None:
            keys.append(None)
            continue
        reader = reader_of(type(operand))
        if reader is None:
            return None
        try:
            key, pointer = reader(operand)
        except (AttributeError, TypeError):  # an object of the library that is not an array
            return None
        keys.append(key)
        pointers.append(pointer)
    shared = None if len(set(pointers)) == len(pointers) else tuple(map(pointers.index, pointers))
    return Signature((*keys, shared), tuple(pointers))


def address_of(array: Any) -> int:
    """The address of an array the runtime allocated (PyTorch's or CuPy's), read alone: a call that allocates
    reads it every time."""
    return array.data_ptr() if library_of_type(type(array)) == "torch" else array.data.ptr


def extent_bytes(view: ArrayView) -> int | None:
    """Bytes from the view's first element to just past its last (0: no elements); None for negative strides."""
    if 0 in view.shape:
        return 0
    if any(stride < 0 for stride in view.strides):
        return None
    return (sum((extent - 1) * stride for extent, stride in zip(view.shape, view.strides)) + 1) * view.itemsize


@dataclass(frozen=True)
class Allocation:
    """Arrays a call made (C left out, the padded launcher's copies, stream-K's workspace) and how to make
    their like again."""

    arrays: tuple
    make: Callable[[], tuple]


class Ambiguous(Exception):
    """An address lies in the memory of two operands at different addresses: it cannot be told which it moves with."""


def locate(address: int, pointers: tuple[int, ...], extents: tuple[int, ...]) -> tuple[int, int] | None:
    """(slot, offset) of the one operand whose memory holds `address`, None where none does (a null
    address, or an empty operand's, which nothing reads); operands at one address are one (the signature
    keeps them so)."""
    holders = [slot for slot, (start, extent) in enumerate(zip(pointers, extents)) if start <= address < start + extent]
    if not holders:
        return None
    if len({pointers[slot] for slot in holders}) > 1:
        raise Ambiguous(address)
    return holders[0], address - pointers[holders[0]]


@dataclass(frozen=True)
class PlannedLaunch:
    launch: Any  # the plan's own runtime.KernelLaunch, whose parameters it rewrites
    addresses: tuple[tuple[int, int, int], ...]  # (argument index, slot, offset)
    maps: Any = None  # tensor_maps.MapInputs of its first arguments
    map_pointers: tuple[tuple[str, tuple[int, int] | None], ...] = ()  # operand -> (slot, offset)


@dataclass(frozen=True)
class Placement:
    """Where and what a plan's call runs, as its first call did."""

    entry: str | None  # the kernel it runs (runtime.BoundLaunch.entry)
    library: str  # A's library, whose current stream the launches follow
    device: int  # the GPU of the operands
    c_index: int | None  # C among the allocated arrays, where the call left it out
    queue: Callable[..., Any]  # runtime.queue(launches, library, device, stream)


class CallPlan:
    """The launches of one call signature, rebound to each call's addresses (the module's docstring).

    The plan keeps the launches of the last SETS_KEPT sets of addresses, each with parameters of its own: a call
    at addresses seen before (a loop's buffers, PyTorch's allocator handing out the blocks it got back) launches
    those as they are; one at new addresses takes the oldest set's launches and rewrites their addresses and
    tensor maps in place. Threads may share a plan: finding, rewriting and launching a set hold its lock."""

    def __init__(self, launches: tuple[PlannedLaunch, ...], pointers: tuple[int, ...], extents: tuple[int, ...],
                 given: int, checked: tuple[tuple[int, int], ...], allocations: tuple[Allocation, ...],
                 map_cache: Any, placement: Placement):
        self.placement = placement
        self.launches = launches
        self.extents = extents
        self.checked = checked  # (C's slot, another's): memory the two must not share
        self.makers = tuple(allocation.make for allocation in allocations)
        # C among the allocations (maker, array), where the call left it out.
        self.c_at = None if placement.c_index is None else \
            [(maker, index) for maker, allocation in enumerate(allocations)
             for index in range(len(allocation.arrays))][placement.c_index]
        self.classes = tuple(map(alignment_class, pointers[given:]))  # the allocations'
        self.map_cache = map_cache  # tensor_maps.TensorMapCache of the launches' GPU: its encoder
        # By launch, operand and address: the map's bytes (the first call's too), for the sets rewritten.
        self.maps: OrderedDict[tuple, bytes] = OrderedDict()
        for planned in launches:
            for index, (operand, place) in enumerate(planned.map_pointers):
                if place is not None:
                    address = pointers[place[0]] + place[1]
                    self.maps[(id(planned), operand, address)] = planned.launch.args[index].tobytes()
        self.sets: OrderedDict[tuple[int, ...], tuple] = OrderedDict(
            {pointers: tuple(planned.launch for planned in launches)})
        self.lock = threading.Lock()

    @classmethod
    def build(cls, launches: tuple, pointers: tuple[int, ...], extents: tuple[int, ...], given: int,
              checked: tuple[tuple[int, int], ...], allocations: tuple[Allocation, ...], map_cache: Any,
              placement: Placement) -> "CallPlan | None":
        """The plan of a call whose launches are `launches` (runtime.KernelLaunch), on slots at `pointers` spanning
        `extents` bytes: the `given` operands, then each allocation's arrays. None where an address cannot be
        placed (two operands overlap at different addresses)."""
        planned = []
        try:
            for launch in launches:
                addresses = tuple((index, *located) for index, arg in enumerate(launch.args)
                                  if arg.dtype == numpy.uint64
                                  and (located := locate(int(arg), pointers, extents)) is not None)
                map_pointers = () if launch.maps is None else tuple(
                    (operand, None if pointer is None else locate(pointer, pointers, extents))
                    for operand, pointer in launch.maps.pointers.items())
                planned.append(PlannedLaunch(dataclasses.replace(launch), addresses, launch.maps, map_pointers))
        except Ambiguous:
            return None
        return cls(tuple(planned), pointers, extents, given, checked, allocations, map_cache, placement)

    def take(self, pointers: tuple[int, ...]) -> tuple[tuple[tuple, ...], tuple[int, ...]] | object:
        """Whether the plan takes a call on the given operands' `pointers`: C must share no memory with what the
        call reads, at these addresses, and new arrays, made as the first call's allocations made them, must land
        in the same alignment classes. Then: each allocation's new arrays, and every slot's address; else MISS."""
        extents = self.extents
        for c, other in self.checked:
            if pointers[c] < pointers[other] + extents[other] and pointers[other] < pointers[c] + extents[c]:
                return MISS
        if not self.makers:
            return (), pointers
        made = tuple(make() for make in self.makers)
        allocated = tuple(address_of(array) for arrays in made for array in arrays)
        if any(alignment_class(pointer) != expected for pointer, expected in zip(allocated, self.classes)):
            return MISS
        return made, pointers + allocated

    def call(self, pointers: tuple[int, ...], stream: Any) -> Any:
        """Launch the plan on the given operands' `pointers` (on `stream`, as runtime.queue takes it): the C it
        allocated (None where C was given), or MISS."""
        taken = self.take(pointers)
        if taken is MISS:
            return MISS
        made, pointers = taken
        where = self.placement
        with self.lock:
            launches = self.sets.get(pointers)
            if launches is None:
                launches = self._launches_at(pointers)
            where.queue(launches, where.library, where.device, stream)
        return None if self.c_at is None else made[self.c_at[0]][self.c_at[1]]

    def _launches_at(self, pointers: tuple[int, ...]) -> tuple:
        """Launches at new addresses: the oldest set's once SETS_KEPT are kept, else copies of the first call's,
        their addresses and tensor maps rewritten."""
        if len(self.sets) >= SETS_KEPT:
            launches = self.sets.popitem(last=False)[1]
        else:
            launches = tuple(dataclasses.replace(planned.launch) for planned in self.launches)
        for planned, launch in zip(self.launches, launches):
            parameters = launch.parameters
            for index, slot, offset in planned.addresses:
                parameters.write_address(index, pointers[slot] + offset)
            for index, raw in self._maps_at(planned, pointers):
                parameters.write_bytes(index, raw)
        self.sets[pointers] = launches
        return launches

    def _maps_at(self, planned: PlannedLaunch, pointers: tuple[int, ...]) -> list[tuple[int, bytes]]:
        """(argument index, bytes) of the launch's tensor maps that follow an operand, at these addresses: each
        encoded once per address (a C that TMA cannot store keeps its all-zero map)."""
        maps = []
        for index, (operand, place) in enumerate(planned.map_pointers):
            if place is None:
                continue
            address = pointers[place[0]] + place[1]
            key = (id(planned), operand, address)
            raw = self.maps.get(key)
            if raw is None:
                raw = planned.maps.encode_operand(operand, address, self.map_cache.encoder)
                keep(self.maps, key, raw, MAPS_KEPT)
            maps.append((index, raw))
        return maps

    def relocated(self, pointers: tuple[int, ...]) -> tuple[tuple, ...]:
        """Each launch's arguments at these addresses (for a bound call that keeps its own)."""
        out = []
        for planned in self.launches:
            args = list(planned.launch.args)
            for index, slot, offset in planned.addresses:
                args[index] = numpy.uint64(pointers[slot] + offset)
            for index, raw in self._maps_at(planned, pointers):
                args[index] = pack(raw)
            out.append(tuple(args))
        return tuple(out)

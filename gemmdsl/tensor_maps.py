"""TMA tensor maps for the Python runtime: what the C launcher of a wgmma spec does on the host
(paths/wgmma/launcher.py), from its metadata.

A wgmma kernel takes A and B as two CUtensorMap parameters (128 bytes each, passed by value), so
the runtime encodes them with the driver's cuTensorMapEncodeTiled (through ctypes: CuPy does not
expose it) and hands each to CuPy as a numpy structured scalar of 128 bytes. CuPy passes a numpy
scalar argument as a pointer to its bytes, and cuLaunchKernel copies each parameter's declared size
(here 128) from that pointer to the parameter's offset, so the kernel sees the map byte for byte.
The maps of the last call are kept (`TensorMapCache`), as the C launcher keeps them.

Everything but `driver_encoder` runs without a GPU, so tests check the requests and the packing.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable

import numpy

from .targets import SECTOR_BYTES

TENSOR_MAP_BYTES = 128
# CU_TENSOR_MAP_DATA_TYPE_UINT8 (FP8 operands, copied as bytes), _FLOAT16, _BFLOAT16, _FLOAT32 and _TFLOAT32
# (TMA rounds each f32 word to TF32 on the way in), by the metadata's data type (paths/wgmma/layout.py's
# TmaBox.data_type, as the C launcher asks).
DATA_TYPES = {"u8": 0, "f16": 6, "f32": 7, "bf16": 9, "tf32": 11}
SWIZZLES = {32: 1, 64: 2, 128: 3}  # CU_TENSOR_MAP_SWIZZLE_32B, _64B, _128B
INTERLEAVE_NONE = 0
L2_PROMOTION_128B = 2  # CU_TENSOR_MAP_L2_PROMOTION_L2_128B
L2_PROMOTION_256B = 3  # CU_TENSOR_MAP_L2_PROMOTION_L2_256B
OOB_FILL_ZERO = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: elements outside the tensor read as zero
# The kernel's parameter type: `struct alignas(64) NAME_tensor_map { unsigned long long opaque[16]; }`.
TENSOR_MAP_DTYPE = numpy.dtype({"names": ["opaque"], "formats": [("<u8", (16,))], "itemsize": TENSOR_MAP_BYTES},
                               align=True)


@dataclass(frozen=True)
class TensorMapRequest:
    """The arguments of one cuTensorMapEncodeTiled call: a rank-2 view whose dimension 0 is contiguous, or
    for a batch rank 3, the GEMM its dimension 2."""

    data_type: int
    address: int
    dims: tuple[int, ...]  # elements along dimension 0 (k, or m / n for an MN-major operand), 1 (and the batch)
    strides: tuple[int, ...]  # bytes between rows (dimension 1) and between GEMMs; dimension 0's is the element
    box: tuple[int, ...]  # elements along dimension 0 and 1 (and 1 GEMM)
    swizzle: int
    promotion: int = L2_PROMOTION_256B  # l2_promotion


def l2_promotion(address: int, row_bytes: int) -> int:
    """The L2 promotion of a map whose rows start at `address` + i * `row_bytes`: 256-byte fetches where every row
    starts on a 32-byte sector, 128-byte ones where rows start 16 bytes into one. On the H100 (2026-11-27,
    docs/performance.md, "Operands TMA cannot read, or reads slowly") 256 bytes streamed decode calls' B 4%
    faster than 128, and 128 ran BF16 calls with rows off a sector 8-15% faster (1000^3: 15.0 against 13.8 us)."""
    off_sector = address % SECTOR_BYTES != 0 or row_bytes % SECTOR_BYTES != 0
    return L2_PROMOTION_128B if off_sector else L2_PROMOTION_256B


def tensor_map_requests(maps: dict, pointers: dict[str, int | None], m: int, n: int, k: int,
                        lds: dict[str, int], batch_strides: dict[str, int] | None = None,
                        batch: int | dict[str, int] = 1) -> dict[str, TensorMapRequest]:
    """The maps' requests for one call: metadata['tensor_maps'] (per operand a, b, and c for `store: tma`:
    the names of its dims, 'K' then 'M' or 'N' when k is contiguous, else the other way round, 'N' then 'M'
    for C; box [dim 0, dim 1], element_bytes, swizzle_bytes, dtype), the operands' pointers and leading
    dimensions; for a batched kernel (`batch_strides`, elements between GEMMs) a third dimension of `batch`
    GEMMs (per operand where `batch` is a dict: a grouped call's B has the groups, A and C one matrix), as the
    C launcher encodes. An operand whose pointer is None (C that TMA cannot store) gets no
    request."""
    extents = {"M": m, "N": n, "K": k}
    requests = {}
    for operand, entry in maps.items():
        if pointers.get(operand) is None:  # C where TMA cannot store it: the kernel stores directly
            continue
        inner, outer = entry["dims"]
        size = entry["element_bytes"]
        dims, strides, box = (extents[inner], extents[outer]), (lds[operand] * size,), (entry["box"][0], entry["box"][1])
        if batch_strides is not None:
            count = batch[operand] if isinstance(batch, dict) else batch
            dims, strides, box = (*dims, count), (*strides, batch_strides[operand] * size), (*box, 1)
        requests[operand] = TensorMapRequest(data_type=DATA_TYPES[entry["dtype"]], address=pointers[operand],
                                             dims=dims, strides=strides, box=box,
                                             swizzle=SWIZZLES[entry["swizzle_bytes"]],
                                             promotion=l2_promotion(pointers[operand], strides[0]))
    return requests


def pack(raw: bytes) -> numpy.void:
    """128 bytes of CUtensorMap as the by-value kernel argument CuPy passes."""
    if len(raw) != TENSOR_MAP_BYTES:
        raise ValueError(f"a tensor map is {TENSOR_MAP_BYTES} bytes, got {len(raw)}")
    holder = numpy.zeros((), dtype=TENSOR_MAP_DTYPE)
    holder["opaque"] = numpy.frombuffer(raw, dtype="<u8")
    return holder[()]


Encoder = Callable[[TensorMapRequest], bytes]


class TensorMapCache:
    """The packed maps of the last call's key (pointers, M, N, K, leading dimensions), like the C launcher's.

    One cache serves one GPU (a map holds a global address of that GPU's memory). Threads may share it:
    the key and its maps are replaced together, as one tuple, so no call reads one call's key with
    another's maps."""

    def __init__(self, encoder: Encoder):
        self.encoder = encoder
        self.last: tuple[tuple, tuple[numpy.void, ...]] | None = None
        self.encodes = 0  # how many maps were encoded (tests)

    def get(self, metadata_maps: dict, pointers: dict[str, int | None], m: int, n: int, k: int,
            lds: dict[str, int], batch_strides: dict[str, int] | None = None,
            batch: int | dict[str, int] = 1) -> tuple[numpy.void, ...]:
        """The packed maps in operand order (a, b, and c where the metadata has one). A None pointer (C
        that TMA cannot store) gets an all-zero map, which the kernel does not use."""
        operands = [operand for operand in ("a", "b", "c") if operand in metadata_maps]
        strides = batch_strides or {}
        batches = tuple(sorted(batch.items())) if isinstance(batch, dict) else batch
        key = (m, n, k, batches, *((pointers.get(operand), lds.get(operand), strides.get(operand)) for operand in operands))
        last = self.last
        if last is not None and last[0] == key:
            return last[1]
        requests = tensor_map_requests(metadata_maps, pointers, m, n, k, lds, batch_strides, batch)
        encoded = tuple(pack(self.encoder(requests[operand])) if operand in requests
                        else pack(bytes(TENSOR_MAP_BYTES)) for operand in operands)
        self.encodes += len(requests)
        self.last = (key, encoded)
        return encoded


@dataclass(frozen=True)
class MapInputs:
    """What one launch's tensor maps are encoded from (`TensorMapCache.get`'s arguments), kept with the launch
    so that a call on other addresses encodes its maps from the same inputs with only the pointers changed."""

    maps: dict  # metadata['tensor_maps']
    pointers: dict[str, int | None]  # per operand a, b (and c): its address; None for a C that TMA cannot store
    m: int
    n: int
    k: int
    lds: dict[str, int]
    batch_strides: dict[str, int] | None = None
    batch: int | dict[str, int] = 1

    def encode(self, cache: TensorMapCache) -> tuple[numpy.void, ...]:
        return cache.get(self.maps, self.pointers, self.m, self.n, self.k, self.lds, self.batch_strides, self.batch)

    def encode_operand(self, operand: str, address: int, encoder: Encoder) -> bytes:
        """The bytes of one operand's map with its data at `address`, the rest of its inputs as they are."""
        return encoder(tensor_map_requests(self.maps, {operand: address}, self.m, self.n, self.k, self.lds,
                                           self.batch_strides, self.batch)[operand])


class TensorMapError(ValueError):
    """cuTensorMapEncodeTiled refused a map (the operands break a TMA rule the checks did not catch)."""


def driver_encoder() -> Encoder:
    """An encoder calling libcuda's cuTensorMapEncodeTiled through ctypes (GPU machines only)."""
    library = ctypes.CDLL("libcuda.so.1")
    encode = library.cuTensorMapEncodeTiled
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    encode.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                       ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    encode.restype = ctypes.c_int

    def run(request: TensorMapRequest) -> bytes:
        out = (ctypes.c_uint64 * 16)()  # ctypes arrays of u64 are 8-byte aligned; the driver asks for 64
        aligned = ctypes.create_string_buffer(TENSOR_MAP_BYTES + 64)
        address = (ctypes.addressof(aligned) + 63) // 64 * 64
        rank = len(request.dims)
        dims = (ctypes.c_uint64 * rank)(*request.dims)
        strides = (ctypes.c_uint64 * (rank - 1))(*request.strides)
        box = (ctypes.c_uint32 * rank)(*request.box)
        steps = (ctypes.c_uint32 * rank)(*[1] * rank)
        result = encode(address, request.data_type, rank, request.address, dims, strides, box, steps, INTERLEAVE_NONE,
                        request.swizzle, request.promotion, OOB_FILL_ZERO)
        if result != 0:
            raise TensorMapError(f"cuTensorMapEncodeTiled failed (CUresult {result}) for {request}")
        ctypes.memmove(out, address, TENSOR_MAP_BYTES)
        return bytes(out)

    return run

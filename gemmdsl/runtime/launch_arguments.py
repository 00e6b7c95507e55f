"""A checked call's kernel parameters: the plain and the tensor-map kernels' arguments, stream-K's workspace,
and the call restricted to one block of C."""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import numpy

from ..call_plan import Allocation, address_of
from ..schedule import SubLaunch
from .operands import OPERAND_NAMES, CheckedCall, KernelRequirements, OperandView, matrix_extent


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


def map_batch_strides(req: KernelRequirements, call: CheckedCall) -> dict[str, int]:
    """Each operand's stride between GEMMs, in elements, for the tensor maps' third dimension; a single GEMM's
    (never stepped) is its own matrix's extent, as the C launcher gives it."""
    return {view.name.lower(): view.batch_stride if call.batch > 1 and not req.grouped else matrix_extent(req, view)
            for view in call.views.values()}


def stream_k_workspace(req: KernelRequirements, call: CheckedCall, sms: int) -> tuple[tuple, tuple[Allocation, ...]]:
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


def sub_call(req: KernelRequirements, call: CheckedCall, launch: SubLaunch) -> CheckedCall:
    """The call restricted to one block of C (schedule.interior_launches): M, N of the block, and A, B,
    C offset to it in each operand's layout (A by `row` rows, B by `col` columns, C by both)."""
    def moved(view: OperandView, rows: int, cols: int) -> OperandView:
        row_major = req.layouts[view.name] == "row"
        elements = rows * view.ld + cols if row_major else cols * view.ld + rows
        return replace(view, pointer=view.pointer + elements * view.itemsize)

    views = {"A": moved(call.views["A"], launch.row, 0), "B": moved(call.views["B"], 0, launch.col),
             "C": moved(call.views["C"], launch.row, launch.col)}
    return replace(call, m=launch.m, n=launch.n, views=views)


def zeroed_workspace(nbytes: int) -> Any:
    """A dequantizing decode kernel's split-K workspace (f32 sums and tile counters), zero, on the current GPU:
    the kernel leaves it zero again after each call."""
    import cupy

    return cupy.zeros(-(-nbytes // 4), dtype=cupy.uint32)

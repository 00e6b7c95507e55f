"""One `__global__` kernel, wired from the parts chosen for the plan.

Like CUTLASS 3's kernel = mainloop + epilogue + scheduler: `choose_parts` is the one place that
reads the plan to pick each part (tile or stream-K scheduler, register or cp.async copy, lds
fragments, FMA math, the pipeline that composes them, the epilogue); `emit_kernel` only declares
what every kernel has (its signature, constants, thread coordinates) and calls the parts in order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import ir
from ..abi import kernel_parameters
from ..emitter import Emitter
from ..plan import KernelPlan, Role, Variant
from .copy import AsyncCopy, DirectCopy, RegisterCopy
from .ctext import OPERANDS
from .pipeline import AsyncRing, KLoop, RegisterDoubleBuffer, SingleStage
from .scheduler import StreamKScheduler, TileScheduler, WorkTile


@dataclass(frozen=True)
class MathParts:
    """What a tile path (FMA, mma.sync) supplies to a kernel: the fragments of a k-step, their math, and the
    epilogue that turns the accumulators into C."""

    fragments: Any
    math: Any
    epilogue: Any


@dataclass(frozen=True)
class KernelParts:
    scheduler: TileScheduler | StreamKScheduler
    math: Any
    fragments: Any
    pipeline: KLoop
    epilogue: Any


def choose_parts(plan: KernelPlan, variant: Variant, out: Emitter) -> KernelParts:
    """The parts of one kernel variant; new copy engines, fragment loads or math instructions are chosen here."""
    spec, layout = variant.spec, variant.layout
    scheduler = StreamKScheduler(spec, out) if variant.stream_k else TileScheduler(spec, out)
    cp_async = spec.pipeline.copy is ir.CopyMode.CP_ASYNC
    double = spec.pipeline.fragments is ir.FragmentBuffering.DOUBLE
    copy: RegisterCopy | AsyncCopy | DirectCopy
    if not cp_async:
        copy = RegisterCopy(spec, layout, out)
    elif any(layout.store_width(op) * layout.element_bytes < 4 for op in OPERANDS):
        copy = DirectCopy(spec, layout, out)  # cp.async copies 4 bytes at least (16-bit scalar variants)
    else:
        copy = AsyncCopy(spec, layout, out)
    parts = plan.path.math_parts(spec, layout, out, double)
    if spec.pipeline.stages == 1:
        loop: type[KLoop] = SingleStage
    else:
        loop = AsyncRing if cp_async else RegisterDoubleBuffer
    pipeline = loop(spec, out, copy, parts.fragments, parts.math, partial_k=variant.role is Role.INTERIOR_PARTIAL_K)
    return KernelParts(scheduler, parts.math, parts.fragments, pipeline, parts.epilogue)


def emit_kernel(plan: KernelPlan, variant: Variant, out: Emitter) -> None:
    o, spec = out, variant.spec
    parts = choose_parts(plan, variant, out)
    bounds = f"{plan.launch.threads}"
    if plan.launch.min_blocks_per_sm:
        bounds += f", {plan.launch.min_blocks_per_sm}"
    parameters = [f"{ctype} __restrict__ {name}" if ctype.endswith("*") else f"{ctype} {name}"
                  for ctype, name in kernel_parameters(spec, variant.stream_k)]
    o.line(f'extern "C" __global__ void __launch_bounds__({bounds}) {variant.entry}(')
    o.line(f"    {', '.join(parameters[:3])},")
    o.line(f"    {', '.join(parameters[3:])})")
    with o.block(""):
        _emit_constants(parts.math, variant, o)
        o.line()
        if spec.problem.batched:
            _emit_batch_offsets(o)
            o.line()
        parts.scheduler.emit_block_tile()
        _emit_coordinates(parts.math, variant, o)
        o.line()
        parts.scheduler.emit_work(lambda work: _emit_work_tile(parts, work, o))


def _emit_work_tile(parts: KernelParts, work: WorkTile, out: Emitter) -> None:
    """Accumulate one work tile (a C tile, or a k-range of one) and hand it to the epilogue."""
    parts.math.declare()
    parts.fragments.declare()
    out.line()
    parts.pipeline.emit(work)
    out.line()
    parts.epilogue.emit(work)


def _emit_constants(math: Any, variant: Variant, o: Emitter) -> None:
    layout = variant.layout
    o.comment(math.tiling_note())
    if variant.role is Role.INTERIOR:
        o.comment("Interior variant: compiled as for bounds: exact. The launcher runs it on the tiles that lie\n"
                  "inside C when K is a multiple of BK (gemmdsl/schedule.py, interior_launches).")
    if variant.role is Role.INTERIOR_PARTIAL_K:
        o.comment("Partial-k interior variant: compiled as for bounds: exact, plus a partial last k-tile. The\n"
                  "launcher runs it on the tiles that lie inside C when K is not a multiple of BK\n"
                  "(gemmdsl/schedule.py, interior_launches).")
    if variant.role in (Role.NARROW, Role.STREAM_K_NARROW):
        o.comment(f"Narrow variant: global accesses of at most {layout.max_global_vector * layout.element_bytes} "
                  "bytes, for operands aligned to\nthat but not to the vector kernel's width.")
    if layout.max_global_vector == 1:
        o.comment("Scalar variant: every global load and store is one element wide, for operands\n"
                  "whose pointer, leading dimension or batch stride is not vector-aligned.")
    constants = [("BM", layout.bm), ("BN", layout.bn), ("BK", layout.bk), *math.constants(),
                 ("STAGES", layout.stages), ("A_STAGE", layout.smem[ir.Operand.A].stage_elems)]
    if layout.stages > 1:  # with one stage nothing indexes past B's first tile
        constants.append(("B_STAGE", layout.smem[ir.Operand.B].stage_elems))
    for name, value in constants:
        o.line(f"constexpr int {name} = {value};")
    o.line()
    element = layout.smem_dtype.c_type
    array = f"smem_{layout.smem_dtype.value}"
    o.comment("One dynamic shared array: STAGES tiles of A, then STAGES tiles of B. Named by its element type: a\n"
              "family's file holds kernels whose shared memory has other types, and extern shared arrays of one\n"
              "name must agree on it.")
    o.line(f"extern __shared__ __align__(16) {element} {array}[];")
    o.line(f"{element}* const smem = {array};")
    o.line(f"{element}* const smem_a = smem;")
    o.line(f"{element}* const smem_b = smem + STAGES * A_STAGE;")


def _emit_batch_offsets(o: Emitter) -> None:
    o.comment("Strided batch: blockIdx.z picks the GEMM; its A, B and C start stride_a, stride_b\n"
              "and stride_c elements after those of the GEMM before it.")
    for operand, stride in (("A", "stride_a"), ("B", "stride_b"), ("C", "stride_c")):
        o.line(f"{operand} += blockIdx.z * {stride};")


def _emit_coordinates(math: Any, variant: Variant, o: Emitter) -> None:
    o.comment(math.coordinates_note())
    o.line("const int tid = threadIdx.x;")
    for name, value in variant.layout.coordinates:
        o.line(f"const int {name} = {value.render()};")

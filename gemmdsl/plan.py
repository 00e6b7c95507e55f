"""The lowered plan of one compile: the file's kernels, each with the lowering it is emitted from,
and how they are launched. Built once per compile (`paths.plan_kernel`), read by the analysis passes,
the emitters and the compiler's launch metadata.

A file holds one kernel, or more: for `bounds: checked`, `NAME_kernel_scalar`, the same tiling
lowered with one-element global accesses, which the launcher runs when a pointer, leading
dimension or batch stride would misalign a vector access, and `NAME_kernel_interior`, the same
tiling compiled as for `bounds: exact`, which the launcher runs on the tiles that lie inside C
when K is a multiple of BK (the vector kernel then computes only the edge strips), and
`NAME_kernel_interior_partial_k`, the same with a partial last k-tile, zero-filled past K, which
it runs there when K is not (a kernel of its own, so that the first keeps the exact kernel's code
and registers); for
`schedule: stream_k`, `NAME_kernel_stream_k`, which shares the last wave's tiles (the vector
kernel computes the others), and with a scalar kernel also `NAME_kernel_stream_k_scalar`, the
same with one-element global accesses, so that calls on the scalar kernel are split alike.

Checked kernels that copy with cp.async also hold narrow kernels between the vector and the scalar one,
`NAME_kernel_8byte` and `NAME_kernel_4byte` (cp.async copies 16, 8 or 4 bytes): the same tiling with
global accesses of at most that many bytes, which the launcher runs when the operands are aligned to
that width but not to the vector kernel's (a K of 700 halves puts every row of a row-major A 1400 bytes
apart: 8-byte aligned), so that such a call keeps asynchronous copies instead of one-element ones. A
width whose kernel would need what the wider or the scalar one needs is left out; with stream-K each has
a twin, `NAME_kernel_stream_k_8byte`.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from . import abi, ir
from .launch_plan import Entries, GridRule, LaunchPlan, NarrowKernel, Requirements, StreamKLaunch
from .layout import TileLayout
from .targets import WARP, Arch, register_limit

if TYPE_CHECKING:
    from .paths.interface import InstructionPath  # the path is handed over, never looked up here


class Role(enum.Enum):
    VECTOR = "vector"  # the spec's global accesses; every tile not shared by stream-K
    SCALAR = "scalar"  # one-element global accesses, for operands that are not vector-aligned
    STREAM_K = "stream_k"  # k-ranges of the last wave's tiles, added into C
    STREAM_K_SCALAR = "stream_k_scalar"  # the same with one-element global accesses (calls on the scalar kernel)
    NARROW = "narrow"  # global accesses of 8 or 4 bytes at most, for operands aligned to that but not more
    STREAM_K_NARROW = "stream_k_narrow"  # the same for stream-K (calls on a narrow kernel)
    INTERIOR = "interior"  # checked bounds: the tiles inside C, compiled as for exact bounds
    INTERIOR_PARTIAL_K = "interior_partial_k"  # the same when K % BK != 0: a partial last k-tile too


@dataclass(frozen=True)
class Variant:
    """One `__global__` kernel of the file and the lowering it is emitted from."""

    entry: str
    role: Role
    layout: TileLayout  # the path's lowering: KernelLayout (FMA), MmaLayout (mma.sync), WgmmaLayout (wgmma)

    @property
    def stream_k(self) -> bool:
        return self.role in (Role.STREAM_K, Role.STREAM_K_SCALAR, Role.STREAM_K_NARROW)

    @property
    def spec(self) -> ir.KernelSpec:
        """The spec this kernel is compiled from (the interior kernel's has exact bounds)."""
        return self.layout.spec


@dataclass(frozen=True)
class KernelPlan:
    spec: ir.KernelSpec
    arch: Arch
    variants: tuple[Variant, ...]
    launch: LaunchPlan
    path: InstructionPath  # the instruction family that lowered the plan and emits it (gemmdsl/paths)

    @property
    def layout(self) -> TileLayout:
        """The vector kernel's lowering; the variants share their shared-memory layout and threads."""
        return self.variants[0].layout


def tile_plan(spec: ir.KernelSpec, lowering: type[TileLayout], path: InstructionPath) -> KernelPlan:
    """The FMA and mma.sync paths' plan: each kernel variant's layout (`lowering`), built once, and the launch."""
    layout = lowering(spec)
    variants = [Variant(abi.vector_entry(spec), Role.VECTOR, layout)]
    scalar = None
    if spec.problem.checked and any(layout.global_vector(op) > 1 for op in ir.Operand):
        scalar = lowering(spec, max_global_vector=1)
        variants.append(Variant(abi.scalar_entry(spec), Role.SCALAR, scalar))
    narrow = narrow_layouts(spec, lowering, layout, scalar)
    narrow_kernels = []
    for width_bytes, rung in narrow:
        entry = abi.narrow_entry(spec, width_bytes)
        variants.append(Variant(entry, Role.NARROW, rung))
        stream_k = abi.narrow_entry(spec, width_bytes, stream_k=True) if spec.block.stream_k else None
        narrow_kernels.append(NarrowKernel(entry, width_bytes, vector_elements(rung), stream_k))
    if spec.block.stream_k:
        variants.append(Variant(abi.stream_k_entry(spec), Role.STREAM_K, layout))
        for kernel, (_, rung) in zip(narrow_kernels, narrow):
            variants.append(Variant(kernel.stream_k, Role.STREAM_K_NARROW, rung))
        if scalar is not None:
            variants.append(Variant(abi.stream_k_scalar_entry(spec), Role.STREAM_K_SCALAR, scalar))
    if spec.problem.checked:
        exact = replace(spec, problem=replace(spec.problem, bounds=ir.Bounds.EXACT))
        interior = lowering(exact)
        variants.append(Variant(abi.interior_entry(spec), Role.INTERIOR, interior))
        variants.append(Variant(abi.interior_partial_k_entry(spec), Role.INTERIOR_PARTIAL_K, interior))
    return KernelPlan(spec, layout.arch, tuple(variants), _launch_plan(spec, layout, variants, narrow_kernels), path)


# cp.async's copy sizes below 16 bytes, widest first: the narrow kernels' widths.
NARROW_WIDTH_BYTES = (8, 4)


def vector_elements(layout: TileLayout) -> dict[str, int]:
    """What each operand's pointer, leading dimension and batch stride must be a multiple of (elements)."""
    return {op.value: layout.global_vector(op) for op in ir.Operand}


def narrow_layouts(spec: ir.KernelSpec, lowering: type[TileLayout], layout: TileLayout,
                   scalar: TileLayout | None) -> list[tuple[int, TileLayout]]:
    """(width in bytes, lowering) of each narrow kernel, widest first: checked cp.async kernels only, and
    only the widths whose alignment differs from the vector kernel's, the wider rung's and the scalar's."""
    if scalar is None or spec.pipeline.copy is not ir.CopyMode.CP_ASYNC:
        return []
    rungs: list[tuple[int, TileLayout]] = []
    taken = [vector_elements(layout), vector_elements(scalar)]
    for width_bytes in NARROW_WIDTH_BYTES:
        elements = width_bytes // layout.element_bytes
        if elements < 1:
            continue
        rung = lowering(spec, max_global_vector=elements)
        if vector_elements(rung) not in taken:
            taken.append(vector_elements(rung))
            rungs.append((width_bytes, rung))
    return rungs


def _launch_plan(spec: ir.KernelSpec, layout: TileLayout, variants: list[Variant],
                 narrow: list[NarrowKernel]) -> LaunchPlan:
    by_role = {v.role: v.entry for v in variants}
    entries = Entries(by_role[Role.VECTOR], by_role.get(Role.SCALAR), by_role.get(Role.STREAM_K),
                      by_role.get(Role.STREAM_K_SCALAR), abi.prepare_entry(spec), by_role.get(Role.INTERIOR),
                      by_role.get(Role.INTERIOR_PARTIAL_K), abi.scale_c_entry(spec), tuple(narrow))
    tiles = " * ".join(f"({abi.tile_count(spec, extent, str(size))})"
                       for extent, size in (("M", layout.bm), ("N", layout.bn)))
    checked = spec.problem.checked
    requirements = Requirements(
        m_multiple=1 if checked else layout.bm, n_multiple=1 if checked else layout.bn,
        k_multiple=1 if checked else layout.bk,
        vector_elements=vector_elements(layout),
        max_leading_dimension={op.value: abi.leading_dimension_limit(spec, op) for op in ir.Operand})
    return LaunchPlan(entries, abi.kernel_parameters(spec), abi.launcher_names(spec), layout.threads,
                      layout.smem_bytes, (layout.bm, layout.bn, layout.bk),
                      (tiles, 1, "batch" if spec.problem.batched else 1), requirements,
                      min_blocks_per_sm(spec, layout.arch), GridRule.TILES,
                      StreamKLaunch.LAUNCHED if spec.block.stream_k else None)


def min_blocks_per_sm(spec: ir.KernelSpec, target: Arch) -> int | None:
    """`__launch_bounds__`' second argument from the spec's budget, if any.

    A register budget R alone becomes the number of blocks that fit when each thread
    holds R registers, so that ptxas's cap (targets.launch_register_cap) is the least above R that
    still fits them.
    """
    budget = spec.budget
    if budget.blocks_per_sm:
        return budget.blocks_per_sm
    if budget.registers:
        return max(1, register_limit(target, budget.registers, -(-spec.threads.threads // WARP)))
    return None

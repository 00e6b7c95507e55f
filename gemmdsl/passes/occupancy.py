"""Shared memory per block and resident blocks per SM, as cudaOccupancyMaxActiveBlocksPerMultiprocessor computes them.

The rules follow CUDA's cuda_occupancy.h: registers go to warps in units of
`register_alloc_unit` (so per-thread counts round up to a multiple of 8), and each
of the SM's four sub-partitions holds a quarter of the register file, so warps are
counted per sub-partition; shared memory per block is the kernel's bytes plus the
runtime's per-block reserve, rounded up to `smem_alloc_unit`, against the SM's full
shared-memory carveout (the default preference).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..layout import WARP
from ..source import Diagnostic, Severity
from ..targets import Arch
from .framework import Context, PassResult

if TYPE_CHECKING:  # registers.py uses occupancy_of to see where ptxas has registers to spare
    from .registers import Registers

SUBPARTITIONS_PER_SM = 4  # sm_70 and later: the register file is split across four schedulers


def round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def register_limit(arch: Arch, registers_per_thread: int, warps_per_block: int) -> int:
    per_warp = round_up(registers_per_thread * WARP, arch.register_alloc_unit)
    # The hardware checks a block's registers as if its warps filled all sub-partitions evenly.
    if per_warp * round_up(warps_per_block, SUBPARTITIONS_PER_SM) > arch.registers_per_sm:
        return 0
    warps_per_subpartition = arch.registers_per_sm // SUBPARTITIONS_PER_SM // per_warp
    return warps_per_subpartition * SUBPARTITIONS_PER_SM // warps_per_block


def smem_limit(arch: Arch, smem_bytes: int) -> int:
    if smem_bytes > arch.smem_per_block:
        return 0
    per_block = round_up(smem_bytes + arch.smem_reserved_per_block, arch.smem_alloc_unit)
    return arch.smem_per_sm // per_block


@dataclass(frozen=True)
class Occupancy:
    smem_bytes: int  # per block, pads and stages included
    registers_per_thread: int  # the figure the register limit used
    limits: dict[str, int]  # blocks per SM each resource allows
    warps_per_block: int
    max_warps_per_sm: int

    @property
    def blocks_per_sm(self) -> int:
        return min(self.limits.values())

    @property
    def limited_by(self) -> list[str]:
        return [name for name, blocks in self.limits.items() if blocks == self.blocks_per_sm]

    @property
    def warps_per_sm(self) -> int:
        return self.blocks_per_sm * self.warps_per_block

    @property
    def fraction(self) -> float:
        return self.warps_per_sm / self.max_warps_per_sm


def occupancy_of(arch: Arch, registers_per_thread: int, threads: int, smem_bytes: int) -> Occupancy:
    warps = threads // WARP
    max_warps = arch.max_threads_per_sm // WARP
    limits = {
        "registers": register_limit(arch, registers_per_thread, warps),
        "shared memory": smem_limit(arch, smem_bytes),
        "threads": max_warps // warps,
        "blocks": arch.max_blocks_per_sm,
    }
    return Occupancy(smem_bytes, registers_per_thread, limits, warps, max_warps)


def occupancy_warnings(context: Context, occupancy: Occupancy) -> tuple[Diagnostic, ...]:
    spec = context.spec
    if occupancy.blocks_per_sm == 0:
        cause = " and ".join(occupancy.limited_by)
        return (Diagnostic(Severity.WARNING, spec.threads.span,
                           f"no block fits on an SM ({cause}); the launch will fail"),)
    wanted = spec.budget.blocks_per_sm
    if wanted is not None and occupancy.blocks_per_sm < wanted:
        return (Diagnostic(Severity.WARNING, spec.budget.at("blocks_per_sm"),
                           f"{occupancy.blocks_per_sm} blocks per SM fit, under the budget of {wanted} "
                           f"(limited by {' and '.join(occupancy.limited_by)})"),)
    return ()


class OccupancyPass:
    name = "occupancy"
    needs = frozenset({"registers"})
    provides = frozenset({"occupancy"})

    def run(self, context: Context) -> PassResult:
        registers: Registers = context.fact("registers")
        layout = context.layout
        occupancy = occupancy_of(layout.arch, registers.per_thread, layout.threads, layout.smem_bytes)
        source = "ptxas" if registers.ptxas is not None else "estimated"
        blocks = occupancy.blocks_per_sm
        verdict = (f"{blocks} block{'s' if blocks != 1 else ''} per SM ({occupancy.warps_per_sm} of "
                   f"{occupancy.max_warps_per_sm} warps), limited by {' and '.join(occupancy.limited_by)}; "
                   f"{occupancy.smem_bytes:,} bytes of shared memory per block, "
                   f"{registers.per_thread} {source} registers per thread")
        return PassResult({"occupancy": occupancy}, verdict, occupancy_warnings(context, occupancy))

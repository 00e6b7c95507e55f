"""Resident blocks per SM of the spec's kernel, from the registers pass's figure (targets.occupancy_of)."""
from __future__ import annotations

from ..source import Diagnostic, Severity
from ..targets import Occupancy, occupancy_of
from .framework import Context, PassResult
from .registers import Registers


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

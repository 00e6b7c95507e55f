"""Shared-memory wavefronts of one whole launch, the figures Nsight Compute counts.

Per-instruction costs (per block and k-tile, summed over the block's warps)
times k-tiles times blocks. Conflicts are the wavefronts beyond the ideal, which
is what ncu's l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st} aim to count.
"""
from __future__ import annotations

from dataclasses import dataclass

from .banks import AccessCost
from .framework import Context, PassResult
from .launch import LaunchShape


@dataclass(frozen=True)
class SmemTraffic:
    load_wavefronts: int
    store_wavefronts: int
    load_conflicts: int  # excess wavefronts
    store_conflicts: int


# What Nsight Compute counts as shared loads (op_ld): plain loads and ldmatrix.
LOADS = ("load", "ldmatrix")


def launch_total(costs: list[AccessCost], ops: tuple[str, ...], shape: LaunchShape, excess: bool = False) -> int:
    per_k_tile = sum(c.excess_wavefronts if excess else c.wavefronts for c in costs if c.access.op in ops)
    return per_k_tile * shape.k_tiles * shape.blocks


class SmemTrafficPass:
    name = "smem_traffic"
    needs = frozenset({"smem_accesses", "launch"})
    provides = frozenset({"smem_traffic"})

    def run(self, context: Context) -> PassResult:
        costs = context.fact("smem_accesses")
        shape = context.fact("launch")
        traffic = SmemTraffic(
            load_wavefronts=launch_total(costs, LOADS, shape),
            store_wavefronts=launch_total(costs, ("store",), shape),
            load_conflicts=launch_total(costs, LOADS, shape, excess=True),
            store_conflicts=launch_total(costs, ("store",), shape, excess=True),
        )
        verdict = (f"per launch: {traffic.load_wavefronts:,} shared load wavefronts "
                   f"({traffic.load_conflicts:,} from conflicts), {traffic.store_wavefronts:,} store "
                   f"({traffic.store_conflicts:,} from conflicts)")
        return PassResult({"smem_traffic": traffic}, verdict)

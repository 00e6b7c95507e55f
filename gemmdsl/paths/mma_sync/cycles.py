"""The mma.sync path's cycle model of a member (cycles.MemberModel), from the analysis passes' figures: the
family rule and the tuner's mma.sync score read it."""
from __future__ import annotations

import math

from ... import ir
from ...cycles import MemberModel, alignment_fields, launched_fields
from ...targets import ISSUE_PER_CLOCK, MMA_SYNC_MACS_PER_CLOCK, MMA_SYNC_NARROW_FACTOR, SMEM_LATENCY

VECTOR_BYTES = 16  # the widest global access of a checked mma.sync kernel: its vector kernel's

# Shared-memory instructions an SM issues per clock in an mma.sync kernel, whatever their width: fitted
# on the H100 timings of gemmdsl/templates/tf32_mma.tgemm, where TF32 fragments read with
# 32-bit loads (one instruction per mma) ran 20-40% slower than their wavefronts say and ldmatrix's
# (four wavefronts per instruction) did not. With the fragment latency unshared by resident blocks,
# 0.4-0.5 ranked that template at Spearman 0.73-0.74, 0.6 at 0.67, 1 (no term) at 0.61; hgemm_mma's
# 16-bit kernels (ldmatrix only) rank the same with any of them.
# Not a measured rate: which limit of the load/store path it stands for is not known.
MMA_SMEM_INSTRUCTIONS_PER_CLOCK = 0.5


def mma_sync_member_model(spec: ir.KernelSpec, facts: dict, sms: int, unit: str) -> MemberModel:
    """mma.sync, r resident blocks: a k-tile takes the slowest of the instructions' multiply-adds at the
    target's mma.sync rate, the shared-memory wavefronts the bank-conflict pass counts (fragment reads
    and cp.async stores, conflicts included; one per clock), the shared-memory instructions at
    MMA_SMEM_INSTRUCTIONS_PER_CLOCK, and the warps' instruction issue (the mma, the shared accesses, TF32's
    conversions and KTILE_OVERHEAD per warp, ISSUE_PER_CLOCK a clock); plus the shared-memory latency a warp waits for
    its fragments with nothing to multiply: once per k-step with single fragments, once per k-tile with
    double ones (the next stage's first fragments, after the barrier), shared by the resident blocks
    (another block issues while one waits), as in the FMA model (cost_model.clocks_per_ffma).

    On the H100 timings of every candidate of gemmdsl/templates/hgemm_mma.tgemm (216) and
    tf32_mma.tgemm (288): Spearman 0.70 and 0.75, the best kernel in the top 8 of both; on
    sgemm_3xtf32_mma.tgemm (160, held out) 0.32 and the best of the top 8 15.6% slower than the best
    (docs/tuning.md, "The mma.sync templates")."""
    from ...cost_model import KTILE_OVERHEAD

    common = launched_fields(spec, sms)
    bm, bn, bk = common["tile"]
    products = 3 if unit == "3xtf32" else 1
    macs = bm * bn * bk * products
    shape = spec.mma.shape
    tensor = -(-macs // MMA_SYNC_MACS_PER_CLOCK[spec.target.sm][unit.removeprefix("3x")])
    accesses = facts["smem_accesses"]
    wavefronts = sum(cost.wavefronts for cost in accesses)
    smem_instructions = sum(cost.instructions for cost in accesses)
    warps = facts["launch"].warps_per_block
    instructions = (macs // (shape.m * shape.n * shape.k) + smem_instructions + KTILE_OVERHEAD * warps
                    + warps * (bk // shape.k) * _conversions_per_k_step(spec))
    waits = bk // shape.k if spec.pipeline.fragments is ir.FragmentBuffering.SINGLE else 1
    exposed = waits * SMEM_LATENCY
    blocks = facts["occupancy"].blocks_per_sm

    def k_tile(resident: int) -> int:
        rates = (resident * tensor, resident * wavefronts,
                 math.ceil(resident * smem_instructions / MMA_SMEM_INSTRUCTIONS_PER_CLOCK),
                 math.ceil(resident * instructions / ISSUE_PER_CLOCK))
        return max(rates) + math.ceil(exposed / resident)  # another resident block issues while one waits

    problem = spec.problem
    narrow = dict(**alignment_fields(spec, VECTOR_BYTES),
                  narrow_factor=MMA_SYNC_NARROW_FACTOR.get(spec.target.sm, {}).get(problem.a.dtype.bytes, 1))
    return MemberModel(**common, **(narrow if problem.checked else {}), blocks_per_sm=blocks,
                       k_tile_cycles=tuple(k_tile(r) for r in range(1, blocks + 1)), tensor_cycles=tensor,
                       terms=(("mma_cycles_per_k_tile", tensor), ("smem_wavefronts_per_k_tile", wavefronts),
                              ("smem_instructions_per_k_tile", smem_instructions),
                              ("instructions_per_k_tile", instructions), ("exposed_latency_per_k_tile", exposed)))


def _conversions_per_k_step(spec: ir.KernelSpec) -> int:
    """Instructions a warp issues per k-step beyond the mma and the loads (emit/mma_sync.py): TF32 rounds
    each fragment word (two integer instructions, ctext.TF32_HELPER); 3xTF32 rounds it and subtracts
    (three), and adds each block's three-product sum to the accumulator (four FADD)."""
    mma = spec.mma
    shape, repeat = mma.shape, mma.repeat
    words = (repeat.m * shape.m * shape.k + repeat.n * shape.k * shape.n) // 32
    if mma.precision is ir.Precision.TF32:
        return 2 * words
    if mma.precision is ir.Precision.TF32X3:
        return 3 * words + 4 * repeat.m * repeat.n
    return 0

"""The mma.sync path's cycle model of a member (cycles.MemberModel), from the analysis passes' figures: the
family rule and the tuner's mma.sync score read it."""
from __future__ import annotations

import math

from ... import ir
from ...cycles import MemberModel, alignment_fields, launched_fields
from ...targets import (CP_ASYNC_L2_PERCENT, CP_ASYNC_ROUND_TRIP_CYCLES, ISSUE_PER_CLOCK, L2_BLOCK_BYTES_PER_CLOCK,
                        MMA_SYNC_MACS_PER_CLOCK, MMA_SYNC_NARROW_K_TILE_PERCENT, MMA_SYNC_SCALAR_K_TILE_CYCLES,
                        MMA_SYNC_SCALAR_K_TILE_PERCENT, SECTOR_BYTES, SMEM_LATENCY, c_store_bytes_per_clock,
                        l2_bytes_per_clock_per_sm)

VECTOR_BYTES = 16  # the widest global access of a checked mma.sync kernel: its vector kernel's
SCALAR_BYTES = 4  # the narrowest cp.async: a leading dimension off it takes the scalar kernel's one-element loads

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
    (docs/tuning.md, "The mma.sync templates").

    Beside the k-tile's issue, where the target's profile has the figures the H200's family study fitted
    (docs/performance.md, "mma.sync stream-K members"): the k-tile's bytes through L2 at the share of the cp.async
    rings' rate every streaming block leaves each (small tiles at large calls are L2-bound: a 64x64x32 BF16 k-tile is
    8 KB per 200 cycles of issue, five blocks an SM); the memory floor's Little's law over the ring's STAGES - 1
    k-tiles in flight per block (decode calls stream B at what their blocks keep in flight); per tile, its first
    k-tile's round trip, which the resident blocks overlap, and C's stores (a sector a row of 4 lanes' pairs; one
    element a store where C is off pairs); and where a packed operand's leading dimension is off 16 bytes, its
    narrower kernels' k-tiles in percent of the vector kernel's (cp.async of 8 or 4 bytes; for an odd 16-bit one the
    scalar kernel's one-element loads, at least a round trip a k-tile)."""
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

    problem, sm = spec.problem, spec.target.sm
    size = problem.a.dtype.bytes
    scalar = alignment_fields(spec, SCALAR_BYTES)  # the narrowest copy before the scalar kernel's: 4 bytes
    narrow = dict(**alignment_fields(spec, VECTOR_BYTES), a_scalar_align=scalar["a_align"],
                  b_scalar_align=scalar["b_align"],
                  narrow_percent=MMA_SYNC_NARROW_K_TILE_PERCENT.get(sm, {}).get(size, 100),
                  scalar_percent=MMA_SYNC_SCALAR_K_TILE_PERCENT.get(sm, {}).get(size, 100),
                  scalar_k_tile_cycles=MMA_SYNC_SCALAR_K_TILE_CYCLES.get(sm, {}).get(size, 0))
    k_tiles = tuple(k_tile(r) for r in range(1, blocks + 1))
    streamed = _streamed_fields(spec, blocks, k_tiles[-1], sms) if sm in CP_ASYNC_ROUND_TRIP_CYCLES else {}
    return MemberModel(**common, **(narrow if problem.checked else {}), **streamed, blocks_per_sm=blocks,
                       k_tile_cycles=k_tiles, tensor_cycles=tensor,
                       terms=(("mma_cycles_per_k_tile", tensor), ("smem_wavefronts_per_k_tile", wavefronts),
                              ("smem_instructions_per_k_tile", smem_instructions),
                              ("instructions_per_k_tile", instructions), ("exposed_latency_per_k_tile", exposed)))


def _streamed_fields(spec: ir.KernelSpec, blocks: int, k_tile_cycles: int, sms: int) -> dict:
    """The MemberModel fields of a target whose profile has the cp.async ring's round trip (the H200's study fitted
    them): the k-tile's bytes through L2, the memory floor's k-tiles in flight, and per tile its first k-tile's
    round trip and C's stores."""
    problem, sm = spec.problem, spec.target.sm
    bm, bn, bk = spec.block.m, spec.block.n, spec.block.k
    round_trip = CP_ASYNC_ROUND_TRIP_CYCLES[sm]
    fill = -(-round_trip // blocks)  # a tile's first k-tile from HBM, overlapped by the other resident blocks
    # A warp stores a pair of neighbours a lane on 8 rows, 4 lanes a row: a sector a row (all of it for f32 C, half for
    # 16-bit C); one element a store where C is off pairs, twice the sectors.
    stores = -(-(bm * bn // 8) * SECTOR_BYTES // c_store_bytes_per_clock(sm))
    return dict(stage_bytes=(bm * problem.a.dtype.bytes + bn * problem.b.dtype.bytes) * bk,
                k_tile_base_cycles=k_tile_cycles,
                l2_bytes_per_clock=l2_bytes_per_clock_per_sm(sm) * sms * CP_ASYNC_L2_PERCENT[sm] // 100,
                l2_block_bytes_per_clock=L2_BLOCK_BYTES_PER_CLOCK[sm],
                in_flight_k_tiles=max(spec.pipeline.stages - 1, 1), round_trip_cycles=round_trip,
                tile_cycles=fill + stores, narrow_tile_cycles=fill + 2 * stores, c_align=2,
                c_ld_is_n=problem.c.layout is ir.MatrixLayout.ROW)


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

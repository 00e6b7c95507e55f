"""The wgmma path's cycle model of a member (cycles.MemberModel), from the lowered layout alone, and the
fuse chain's cost against a tile's main loop: the family rule, the tuner's wgmma score and the wgmma
bound pass (`gemmdsl check`) read them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ... import ir
from ...cycles import MemberModel, alignment_fields, memory_fields
from .pad import pads_operands
from ...targets import (CALL_CYCLES, DIRECT_STORE_BYTES_PER_CLOCK, HBM_ROUND_TRIP_CYCLES, ISSUE_PER_CLOCK,
                        TMA_HBM_PERCENT,
                        PAD_BYTES_PER_CLOCK, PAD_CALL_CYCLES, L2_BLOCK_BYTES_PER_CLOCK, L2_BYTES_PER_CLOCK_PER_SM,
                        RING_ROUND_TRIP_CYCLES,
                        ROW_STORE_BYTES_PER_CLOCK,
                        SFU_PER_CLOCK_PER_SM, SPLIT_WAIT_CYCLES_PER_K_TILE, STREAM_K_FIXUP_BYTES_PER_CLOCK, WARP,
                        WGMMA_MACS_PER_CLOCK)

TMA_ALIGN_BYTES = 16  # TMA reads rows whose leading dimension is a multiple of 16 bytes
WAIT_MEASURED_CONSUMERS = 2  # consumer warpgroups of the kernel SPLIT_WAIT_CYCLES_PER_K_TILE was measured on

if TYPE_CHECKING:
    from ...passes.fuse import ChainWork
    from .layout import WgmmaLayout


def wgmma_member_model(layout: WgmmaLayout, sms: int, unit: str) -> MemberModel:
    """Hopper's own path, one block per SM: a k-tile takes the longest of wgmma's multiply-adds at the
    datasheet rate, its shared-memory traffic (wgmma's reads and 3xTF32's split; a 128-byte wavefront per
    clock), TMA's bytes from L2 at the measured rate per SM and the ring's round trip shared by the
    STAGES - 1 stages in flight, plus, for 3xTF32, the consumer's wait for each k-tile's group (measured) and
    its FP32 adds of `part` (counted);
    a tile also writes C (and reads it, for alpha_beta) through L2, and where TMA cannot store C (a packed C
    whose rows are off 16 bytes) the measured rate of the stores that write it instead floors the call's time (the
    staged row stores a consumer, or the accumulators' direct stores an SM), and a stream-K block
    writes and reads back one partial tile; the memory floor counts the ring's STAGES - 1 k-tiles in flight per block
    (`memory_cycles`). `unit`: what multiplies (the path's `unit`). The tuner (paths/wgmma/facts.py's
    prediction) and the wgmma bound pass (`check`) read it too."""
    from ...passes.banks import WAVEFRONT_BYTES

    spec = layout.spec
    sm = spec.target.sm
    memory = memory_fields(spec)
    # TMA's k-tiles read 128 bytes of each row: HBM serves such runs at a share of its rate
    memory["hbm_bytes_per_clock"] = memory["hbm_bytes_per_clock"] * TMA_HBM_PERCENT.get(sm, 100) // 100
    common = dict(name=spec.name, tile=(layout.bm, layout.bn, layout.bk), exact=not spec.problem.checked,
                  stream_k=spec.block.stream_k, aligned_split=spec.block.stream_k, sms=sms, **memory,
                  in_flight_k_tiles=max(layout.stages - 1, 1), round_trip_cycles=HBM_ROUND_TRIP_CYCLES[sm])
    macs_per_clock = WGMMA_MACS_PER_CLOCK[sm][unit.removeprefix("3x")]  # 3xTF32: three TF32 products
    l2 = L2_BYTES_PER_CLOCK_PER_SM[sm]
    problem = spec.problem
    tensor = -(-layout.bm * layout.bn * layout.bk * layout.products // macs_per_clock)
    wavefronts = -(-(layout.smem_read_bytes_per_k_tile + layout.split_lsu_bytes_per_k_tile) // WAVEFRONT_BYTES)
    tma = -(-layout.stage_bytes // l2)
    ring = -(-RING_ROUND_TRIP_CYCLES[sm] // max(layout.stages - 1, 1))
    c_passes = 2 if problem.epilogue is ir.Epilogue.ALPHA_BETA else 1
    epilogue = -(-layout.bm * layout.bn * problem.c.dtype.bytes * c_passes // l2)
    partial = -(-2 * layout.partial_bytes // l2) if layout.stream_k else 0
    fixup = -(-layout.partial_bytes // STREAM_K_FIXUP_BYTES_PER_CLOCK[sm]) if layout.stream_k else 0
    # 3xTF32 and promoted FP8: the consumer's wait for each of its groups, then `acc += part`: 4 warps a
    # warpgroup over 4 schedulers, so each scheduler issues accumulators x consumers adds per k-tile. The wait was
    # measured with two consumers, each waiting while the other's wgmma runs; a lone consumer leaves the tensor
    # cores idle for all of it, about twice as long (the 64x128 3xTF32 member on the H200: 1.36x the time the
    # two-consumer figure predicted at calls of 2^33 multiply-adds or more, 1.1x with it doubled).
    groups = layout.waited_groups_per_k_tile
    exposed_waits = max(1, WAIT_MEASURED_CONSUMERS // layout.consumers)
    wait = (groups * SPLIT_WAIT_CYCLES_PER_K_TILE[sm] * exposed_waits + layout.accumulators * layout.consumers
            if groups else 0)
    narrow_store = (ROW_STORE_BYTES_PER_CLOCK[sm] * layout.consumers if layout.tma_store
                    else DIRECT_STORE_BYTES_PER_CLOCK[sm]) * sms
    return MemberModel(**common, blocks_per_sm=1, k_tile_cycles=(max(tensor, wavefronts, tma, ring) + wait,),
                       tensor_cycles=tensor, tile_cycles=epilogue, narrow_tile_cycles=epilogue,
                       narrow_store_bytes_per_clock=narrow_store,
                       c_align=TMA_ALIGN_BYTES // problem.c.dtype.bytes,
                       c_ld_is_n=problem.c.layout is ir.MatrixLayout.ROW, partial_cycles=partial, fixup_cycles=fixup,
                       call_cycles=CALL_CYCLES.get(sm, 0), stage_bytes=layout.stage_bytes,
                       k_tile_base_cycles=max(tensor, wavefronts, ring), k_tile_wait_cycles=wait,
                       l2_bytes_per_clock=l2 * sms, l2_block_bytes_per_clock=L2_BLOCK_BYTES_PER_CLOCK[sm],
                       pads=pads_operands(spec), **alignment_fields(spec, TMA_ALIGN_BYTES),
                       pad_call_cycles=PAD_CALL_CYCLES[sm],
                       pad_bytes_per_clock=PAD_BYTES_PER_CLOCK[sm],
                       terms=(("wgmma_cycles_per_k_tile", tensor), ("smem_wavefronts_per_k_tile", wavefronts),
                              ("tma_cycles_per_k_tile", tma), ("l2_bytes_per_clock", l2),
                              ("ring_cycles_per_k_tile", ring),
                              ("split_wait_cycles_per_k_tile", wait)))


@dataclass(frozen=True)
class FusedEpilogue:
    """The fuse chain's cost in one tile's epilogue on one SM of the wgmma path, against the tile's main loop."""

    cycles: int  # the chain on the tile's elements: the slowest of its rates
    limit: str  # which rate sets them
    main_loop_cycles: int  # the tile's k-tiles, at the cycle model's k-tile
    hidden: int  # what another consumer's main loop covers meanwhile (schedule: pingpong)

    @property
    def exposed(self) -> int:
        return self.cycles - self.hidden

    @property
    def share(self) -> float:
        """The chain's cycles against the main loop's."""
        return self.cycles / self.main_loop_cycles


def fused_epilogue(layout: WgmmaLayout, work: ChainWork, l2_bytes: int, k_tiles: int, sms: int,
                   tiles: int, unit: str) -> FusedEpilogue:
    """The chain on a tile of BM x BN elements: the slowest of the instructions the consumers' warps issue
    (`work`, per element: passes/fuse.chain_work), the activation's special-function results, and the
    operands' bytes from L2 (`l2_bytes`, per tile), for a launch of `tiles` tiles.

    Under `schedule: persistent` both consumer warpgroups apply it to their rows of the same tile before
    either multiplies again, so wgmma waits for it: nothing hides it. (The producer does go on filling the
    ring with the next tile's k-tiles meanwhile; measured on the H100, that gains nothing: linear_gelu
    against its unfused twin costs about the chain's cycles, 2.3% at 4096^3 and 9% at 4096x4096x1024,
    docs/fusion.md.) One block per tile (`schedule: tiles`) hides nothing either. Under `schedule: pingpong`
    another consumer multiplies its own tile meanwhile, so the epilogue hides under up to that tile's whole
    main loop, where the block has another tile (more tiles than SMs)."""

    sm = layout.spec.target.sm
    elements = layout.bm * layout.bn
    rates = {"instruction issue": -(-elements * (work.alu + work.loads + work.smem_loads) // (WARP * ISSUE_PER_CLOCK)),
             "the SFU": -(-elements * work.sfu // SFU_PER_CLOCK_PER_SM[sm]),
             "L2": -(-l2_bytes // L2_BYTES_PER_CLOCK_PER_SM[sm])}
    limit = max(rates, key=lambda name: rates[name])
    model = wgmma_member_model(layout, sms, unit)
    k_tile = model.k_tile_cycles[0]
    cycles = rates[limit]
    hidden = min(cycles, k_tiles * k_tile) if layout.pingpong and tiles > sms else 0
    return FusedEpilogue(cycles, limit, k_tiles * k_tile, hidden)

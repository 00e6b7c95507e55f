"""What the analysis and the tools read of the GEMV path: its pass (the launch's blocks, residency and waves), its
facts for `check` and `profile`, and its cycle model: a k-tile (the block's K per step) of r resident blocks takes
the longest of the streamed rows' bytes at the SM's share of HBM, the FMAs at the SM's lanes, and one round trip
of the loads (a lane waits for its step's chunks before it loads the next)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...cycles import MemberModel, alignment_fields, memory_fields
from ...ncu_counters import DYNAMIC_SMEM, GRID_SIZE, LAUNCH_METRICS, MEASURED_BLOCKS_PER_SM, REGISTERS
from ...passes.framework import Context, PassResult
from ...passes.launch import LaunchShape
from ...prediction import Prediction
from ... import ir
from ...targets import (CALL_CYCLES, GEMV_ROUND_TRIP_CYCLES, GEMV_STEP_CYCLES, GEMV_DRAW_PERCENT,
                        GEMV_TENSOR_HBM_PERCENT, GEMV_TENSOR_WINDOW_PERCENT, HBM_BYTES_PER_CLOCK, ISSUE_PER_CLOCK, WARP)
from ..facts import Comparison, ToolFacts
from .config import CHUNK_BYTES, GemvConfig, GemvLayout


@dataclass(frozen=True)
class GemvLaunch:
    """One call's launch at the analysed problem."""

    blocks: int
    registers: int  # per thread: ptxas's count, or the main loop's estimate (GemvConfig.registers) under the cap
    blocks_per_sm: int
    waves: float  # blocks over SMs x resident blocks on the reference GPU
    streamed_bytes: int  # the streamed operand's bytes, read once per row-block of the small operand
    in_flight_bytes: int  # per block: the streamed rows' chunks its lanes keep in flight (tensor kernel: two steps')


class GemvLaunchPass:
    """The launch: a block per tile of C, each running the whole of K."""

    name = "launch"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"launch"})

    def run(self, context: Context) -> PassResult:
        layout: GemvLayout = context.layout
        m, n, k = context.problem
        blocks = -(-m // layout.bm) * -(-n // layout.bn)
        shape = LaunchShape(context.problem, blocks, -(-k // layout.bk), layout.threads // WARP)
        return PassResult({"launch": shape}, f"{blocks} blocks of {shape.warps_per_block} warps, one a tile of C, "
                                             f"each over all of K ({shape.k_tiles} steps of {layout.bk})")


def residency(layout: GemvLayout, ptxas: dict | None) -> tuple[int, int]:
    """(registers per thread, blocks per SM): ptxas's count where built, else the estimate under the cap."""
    config = layout.config
    registers = (ptxas or {}).get("registers") or min(config.registers, layout.register_cap)
    held = layout.blocks_per_sm(registers)
    return registers, max(1, min(held, config.blocks_per_sm) if config.blocks_per_sm else held)


class GemvPass:
    name = "gemv"
    needs = frozenset({"launch"})
    provides = frozenset({"gemv", "fuse"})  # fuse: None, the path takes no fuse chain (validate.py)

    def run(self, context: Context) -> PassResult:
        layout: GemvLayout = context.layout
        config = layout.config
        m, n, k = context.problem
        blocks = context.facts["launch"].blocks
        registers, resident = residency(layout, context.ptxas)
        arch = layout.arch
        small, rows = (m, n) if config.streamed is ir.Operand.B else (n, m)
        launch = GemvLaunch(blocks, registers, resident, blocks / (arch.reference_sms * resident),
                            -(-small // config.small_rows) * rows * k * config.element_bytes,
                            config.rows * layout.bk * config.element_bytes * in_flight_steps(config))
        streamed = config.streamed.value.upper()
        verdict = (f"{config.k_warps} K-warps x {config.row_warps} row-warps, {config.warp_rows} rows of {streamed} a "
                   f"warp; {launch.in_flight_bytes:,} bytes of {streamed} in flight a block; {resident} blocks per SM "
                   f"({registers} registers), {launch.waves:.2f} waves on {arch.reference_sms} SMs of an "
                   f"{arch.reference_gpu}")
        return PassResult({"gemv": launch, "fuse": None}, verdict)


class GemvFacts(ToolFacts):
    ncu_metrics = (GRID_SIZE, DYNAMIC_SMEM, *LAUNCH_METRICS)

    def headline(self, analysis) -> str:
        spec, layout = analysis.spec, analysis.layout
        config: GemvConfig = layout.config
        loads = (f"{config.stages} pieces of 32 elements of each row a step, two steps in flight" if config.tensor
                 else f"{config.stages} chunks of {CHUNK_BYTES} bytes in flight per row and lane")
        return (f"{spec.name} ({spec.target}): {layout.threads} threads, GEMV"
                f"{' on mma.sync m16n8k16' if config.tensor else ''}: {config.small_rows} row(s) of "
                f"{'A' if config.streamed.value == 'b' else 'B'} against {config.rows} streamed rows of "
                f"{config.streamed.value.upper()} a block, block tile {layout.bm}x{layout.bn}x{layout.bk}, {loads}, "
                f"problem {analysis.problem}")

    def alarms(self, analysis) -> list[str]:
        spills = (analysis.ptxas or {}).get("spill_stores", 0) + (analysis.ptxas or {}).get("spill_loads", 0)
        return [f"!!! ptxas SPILLS registers to local memory: {spills} bytes !!!"] if spills else []

    def figures(self, analysis) -> dict:
        return {"gemv": dataclasses.asdict(analysis.facts["gemv"])}

    def comparisons(self, analysis) -> list[Comparison]:
        """Registers (the estimate under the cap, and ptxas's), the reduction buffer, the grid, blocks per SM."""
        layout: GemvLayout = analysis.layout
        launch: GemvLaunch = analysis.facts["gemv"]
        return [
            Comparison("registers per thread (estimate)", min(layout.config.registers, layout.register_cap), REGISTERS),
            Comparison("registers per thread (nvcc ptxas)", (analysis.ptxas or {}).get("registers"), REGISTERS),
            Comparison("dynamic shared memory per block", 0, DYNAMIC_SMEM),
            Comparison("blocks in the grid", launch.blocks, GRID_SIZE),
            Comparison("blocks per SM", launch.blocks_per_sm, MEASURED_BLOCKS_PER_SM),
        ]

    def prediction(self, analysis, ptxas: dict | None) -> Prediction:
        launch: GemvLaunch = analysis.facts["gemv"]
        layout: GemvLayout = analysis.layout
        registers = (ptxas or {}).get("registers") or launch.registers
        return Prediction(registers=registers, register_cap=layout.register_cap, register_low=registers,
                          blocks_per_sm=launch.blocks_per_sm, warps_per_sm=launch.blocks_per_sm * layout.config.warps,
                          load_conflicts=0, store_conflicts=0, conflict_pct=0.0, smem_wavefronts_per_ffma=0.0,
                          issue_per_ffma=0.0, block_flops_per_byte=0.0, warp_flops_per_byte=0.0,
                          launch_flops_per_byte=0.0, threads=layout.threads, smem_bytes=layout.smem_bytes, ptxas=ptxas,
                          mma_model=gemv_model(analysis, layout.arch.reference_sms),
                          summary_text=f"gemv: {launch.streamed_bytes:,} streamed bytes, {launch.waves:.2f} waves")


def in_flight_steps(config: GemvConfig) -> int:
    """Steps of loads a warp has in flight: the tensor kernel issues its next step's before it multiplies, and the
    compiler unrolls a one-stage kernel's loop once more (nvcc 13's PTX of `hgemv_mma_8x16_w16` holds four steps'
    loads an iteration, the two- and four-stage members' two), so its loads run four steps ahead. Fitted on the
    H200's studies: at two the one-stage member was priced 2.2 times its measured time (median), at four 1.1, and
    three, four and five-plus gave the rule's picks within 5% of the fastest member at 76%, 78% and 76% of the
    random set's shapes, and 84%, 87% and 63% of the BF16 decode set's (docs/calibration.md)."""
    if not config.tensor:
        return 1
    return 4 if config.stages == 1 else 2


def k_tile_cycles(layout: GemvLayout, resident: int) -> int:
    """One k-tile (the block's step) of `resident` blocks on an SM: the longest of their streamed rows' bytes at the
    SM's share of HBM (`gemv_draw_percent` of its even part), their instructions, and a round trip of the loads
    shared by the steps in flight. The CUDA-core kernel's instructions are its FMAs and widening at the SM's FP32
    lanes; the tensor kernel's, its mma.sync and loads at the SM's issue rate. A call of more small rows than a
    block's reads the weight once per row-block; the blocks that share a weight tile run together, so the re-reads
    mostly come from L2, but priced at HBM's share they keep such calls on the tile members, which the study ran
    faster there (L2's share sent calls of 4-6 columns against a long A to the 8x1 candidate, 2x slower)."""
    config = layout.config
    sm = layout.spec.target.sm
    share = max(1, HBM_BYTES_PER_CLOCK.get(sm, 0)) / layout.arch.reference_sms * GEMV_DRAW_PERCENT.get(sm, 100) / 100
    streamed = resident * config.rows * layout.bk * config.element_bytes / share
    if config.tensor:
        mmas = config.rows // 16 * config.small_tiles * layout.bk // 16
        loads = config.warps * config.stages * (2 * config.tiles + config.small_tiles)
        issue = resident * (mmas + loads) / ISSUE_PER_CLOCK
    else:
        widened = config.small_rows * config.rows + config.rows + config.small_rows * config.row_warps
        issue = resident * layout.bk * widened / layout.arch.fp32_lanes_per_sm
    return int(max(streamed, issue, GEMV_STEP_CYCLES.get(sm, 0) / in_flight_steps(config)))


def gemv_model(analysis, sms: int) -> MemberModel:
    """The kernel as the cycle model reads a member (cycles.estimate_rule): a tile is a block's tile of C, a k-tile
    its step (`k_tile_cycles`, the windowed kernel's `narrow_percent` of it); a call the profile's call latency
    more; at least the memory floor, with the steps of the streamed and small rows in flight per block for the round
    trip (Little's law)."""
    spec, layout = analysis.spec, analysis.layout
    launch: GemvLaunch = analysis.facts["gemv"]
    sm = spec.target.sm
    # The tensor kernel's windowed k-tiles (rows off 16 bytes) cost more; the CUDA-core kernel's run at its aligned
    # kernel's rate (its rows share one offset a warp).
    window = GEMV_TENSOR_WINDOW_PERCENT.get(sm, 100) if layout.config.tensor else 100
    memory = memory_fields(spec)
    if layout.config.tensor:  # 64 bytes of each row a load stream below the CUDA-core kernel's 512
        memory["hbm_bytes_per_clock"] = memory["hbm_bytes_per_clock"] * GEMV_TENSOR_HBM_PERCENT.get(sm, 100) // 100
    return MemberModel(name=spec.name, tile=(layout.bm, layout.bn, layout.bk), exact=not spec.problem.checked,
                       stream_k=False, sms=sms, blocks_per_sm=launch.blocks_per_sm,
                       k_tile_cycles=tuple(k_tile_cycles(layout, r) for r in range(1, launch.blocks_per_sm + 1)),
                       call_cycles=CALL_CYCLES.get(sm, 0), in_flight_k_tiles=in_flight_steps(layout.config),
                       round_trip_cycles=GEMV_ROUND_TRIP_CYCLES.get(sm, 0), narrow_percent=window,
                       **memory, **alignment_fields(spec, CHUNK_BYTES))

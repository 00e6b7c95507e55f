"""What the analysis and the tools read of the dequantizing decode path: its pass (the launch's grid, split-K,
residency and waves), its facts for `check` (headline, ptxas's spills, the dequantization's instructions), the
launch figures `profile` compares with Nsight Compute's, and its cycle model: the k-slices side by side, each
k-step at the SM cycles fitted on the H200, at least the weights' bytes at HBM's rate."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache

from ...cycles import MemberModel
from ...expr import Var
from ...ncu_counters import DYNAMIC_SMEM, GRID_SIZE, LAUNCH_METRICS, MEASURED_BLOCKS_PER_SM, REGISTERS
from ...layout import WARP
from ...passes.framework import Context, PassResult
from ...passes.launch import LaunchShape
from ...prediction import Prediction
from ...quant_layout import TILE_N, packed_bytes
from ...rule import Let, Rule, ceil_div, minimum
from ...targets import CALL_CYCLES, DECODE_STEP_CYCLES, HBM_BYTES_PER_CLOCK, occupancy_of
from ..facts import Comparison, DequantCost, ToolFacts
from .kernel import DecodeConfig

# Per 16-row tile and 16-wide k-step (a lane's four A registers), the instructions that turn codes into A's type:
# by (weight bits, activation), (count, how). 4-bit: a shift, a lop3 (mask and the magic exponent) and a hsub2
# (the bias, or the zero point) per register; 8-bit against f16 alike with byte pairs; 8-bit against bf16 two
# byte permutes, two f32 subtractions and a pack per register; e4m3 a permute, a shift, two lop3 and a hmul2.
STEP_INSTRUCTIONS = {
    ("int4", "bf16"): (12, "1 shift + 1 lop3 + 1 hsub2 per 2 codes"),
    ("int4", "f16"): (12, "1 shift + 1 lop3 + 1 hsub2 per 2 codes"),
    ("int8", "f16"): (12, "1 shift + 1 lop3 + 1 hsub2 per 2 codes"),
    ("int8", "bf16"): (20, "2 prmt + 2 fsub + 1 cvt.bf16x2 per 2 codes"),
    ("e4m3", "bf16"): (20, "1 prmt + 1 shift + 2 lop3 + 1 hmul2 per 2 codes"),
    ("e4m3", "f16"): (20, "1 prmt + 1 shift + 2 lop3 + 1 hmul2 per 2 codes"),
    ("16bit", "bf16"): (0, "16-bit weights need no conversion"),
    ("16bit", "f16"): (0, "16-bit weights need no conversion"),
}


def weight_kind(config: DecodeConfig) -> str:
    fmt = config.fmt
    return "e4m3" if fmt.weight == "e4m3" else "16bit" if fmt.bits == 16 else f"int{fmt.bits}"


@dataclass(frozen=True)
class DecodeLaunch:
    """One call's launch at the analysed problem: the grid, the split-K workspace, residency and waves."""

    grid: tuple[int, int, int]
    workspace_bytes: int
    registers: int  # per thread: ptxas's count, or the mainloop's estimate (DecodeConfig.registers)
    blocks_per_sm: int
    waves: float  # blocks over SMs x resident blocks on the reference GPU
    weight_bytes: int  # the packed weights, scales and zero points the call streams


class DecodeLaunchPass:
    """The launch as the decode kernel makes it: its grid's blocks (rows of A, rows of W, k-slices), each running
    one k-slice, where the shared LaunchPass would count a block per tile running every k-tile."""

    name = "launch"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"launch"})

    def run(self, context: Context) -> PassResult:
        config: DecodeConfig = context.layout.config
        x, y, z = config.grid(*context.problem)
        shape = LaunchShape(context.problem, x * y * z, 1, context.layout.threads // WARP)
        verdict = (f"{shape.blocks} blocks of {shape.warps_per_block} warps ({x} x {y} x {z}: rows of A, rows of W, "
                   f"k-slices), a k-slice each, for {context.problem}")
        return PassResult({"launch": shape}, verdict)


class DecodePass:
    name = "decode"
    needs = frozenset({"launch"})
    provides = frozenset({"decode", "fuse"})  # fuse: None, the path takes no fuse chain (validate.py)

    def run(self, context: Context) -> PassResult:
        layout = context.layout
        config: DecodeConfig = layout.config
        m, n, k = context.problem
        x, y, z = grid = config.grid(m, n, k)
        registers = (context.ptxas or {}).get("registers") or min(config.registers, config.register_cap)
        arch = layout.arch
        resident = min(config.blocks_per_sm, occupancy_of(arch, registers, layout.threads,
                                                          config.smem_bytes).blocks_per_sm)
        slots = arch.reference_sms * resident
        launch = DecodeLaunch(grid, config.workspace_bytes(m, n, k), registers, resident,
                              x * y * z / slots if slots else 0.0, packed_bytes(n, k, config.fmt))
        split = (f"split-K over {z} k-slices of {config.k_slice} ({launch.workspace_bytes:,} bytes of workspace)"
                 if z > 1 else "one k-slice, no workspace")
        verdict = (f"grid {x}x{y}x{z}: {split}; {resident} blocks per SM ({registers} registers, "
                   f"{config.smem_bytes:,} bytes of staged A and scales each), {launch.waves:.2f} waves on "
                   f"{arch.reference_sms} SMs of an {arch.reference_gpu}")
        return PassResult({"decode": launch, "fuse": None}, verdict)


def dequant_cost(config: DecodeConfig) -> DequantCost:
    """Per consumer thread and k-tile (a k-slice): each tile's codes converted per k-step, and each group's
    partial sums scaled (2 conversions and 4 FMAs per 8-row tile of A), or per channel once at the end."""
    per_step, how = STEP_INSTRUCTIONS[(weight_kind(config), config.fmt.activation)]
    steps = config.k_slice // 16
    scalings = config.slice_groups if config.fmt.group else 0
    scale = config.tiles * (2 + 4 * config.m_tiles) * scalings if config.fmt.scaled else 0
    total = steps * config.tiles * per_step + scale
    where = "per group" if config.fmt.group else "once per call (per channel)"
    return DequantCost(total, f"{how}, {config.tiles} tiles x {steps} k-steps; scales {where}")


class DecodeFacts(ToolFacts):
    ncu_metrics = (GRID_SIZE, DYNAMIC_SMEM, *LAUNCH_METRICS)

    def headline(self, analysis) -> str:
        spec, layout = analysis.spec, analysis.layout
        config = layout.config
        return (f"{spec.name} ({spec.target}): {layout.threads} threads = {config.warps} warps of {config.tiles} "
                f"x {TILE_N}-row weight tiles, block tile {layout.bm}x{layout.bn}x{layout.bk}, {config.prefetch} "
                f"chunks in flight, dequantizing mma.sync m16n8k16, problem {analysis.problem}")

    def alarms(self, analysis) -> list[str]:
        spills = (analysis.ptxas or {}).get("spill_stores", 0) + (analysis.ptxas or {}).get("spill_loads", 0)
        return [f"!!! ptxas SPILLS registers to local memory: {spills} bytes !!!"] if spills else []

    def figures(self, analysis) -> dict:
        return {"decode": dataclasses.asdict(analysis.facts["decode"])}

    def comparisons(self, analysis) -> list[Comparison]:
        """The launch: registers (the mainloop's estimate under the cap, and ptxas's), the staged activations'
        shared memory, the grid with its k-slices and the blocks per SM. Its shared memory holds one copy of A's
        k-slice read by ldmatrix, which the path predicts no wavefronts or conflicts for: not compared."""
        config: DecodeConfig = analysis.layout.config
        launch: DecodeLaunch = analysis.facts["decode"]
        x, y, z = launch.grid
        return [
            Comparison("registers per thread (estimate)", min(config.registers, config.register_cap), REGISTERS),
            Comparison("registers per thread (nvcc ptxas)", (analysis.ptxas or {}).get("registers"), REGISTERS),
            Comparison("dynamic shared memory per block", config.smem_bytes, DYNAMIC_SMEM),
            Comparison(f"blocks in the grid ({x}x{y}x{z})", x * y * z, GRID_SIZE),
            Comparison("blocks per SM", launch.blocks_per_sm, MEASURED_BLOCKS_PER_SM),
        ]

    def dequantization(self, analysis) -> DequantCost:
        return dequant_cost(analysis.layout.config)

    def prediction(self, analysis, ptxas: dict | None) -> Prediction:
        launch: DecodeLaunch = analysis.facts["decode"]
        layout = analysis.layout
        registers = (ptxas or {}).get("registers") or launch.registers
        return Prediction(registers=registers, register_cap=layout.config.register_cap, register_low=registers,
                          blocks_per_sm=launch.blocks_per_sm, warps_per_sm=launch.blocks_per_sm * layout.config.warps,
                          load_conflicts=0, store_conflicts=0, conflict_pct=0.0, smem_wavefronts_per_ffma=0.0,
                          issue_per_ffma=0.0, block_flops_per_byte=0.0, warp_flops_per_byte=0.0,
                          launch_flops_per_byte=0.0, threads=layout.threads, smem_bytes=layout.smem_bytes, ptxas=ptxas,
                          mma_model=decode_model(analysis, layout.arch.reference_sms),
                          summary_text=f"decode: {launch.weight_bytes:,} weight bytes, {launch.waves:.2f} waves")


@cache
def slice_split_rule(slice_steps: int) -> Rule:
    """The decode kernel's split of K as the cycle model reads a split (schedule.stream_k_split_rule's inputs and
    outputs): every tile shared, over its k-slices of `slice_steps` k-steps, as many blocks at once as the GPU has
    slots (past that, later blocks take the slots the first free: the model spreads the k-steps evenly)."""
    tiles, k_tiles, slots = Var("tiles"), Var("k_tiles"), Var("slots")
    steps = (Let("slices", ceil_div(k_tiles, slice_steps), comment="k-slices of each tile: the grid's z"),)
    return Rule("slice_split", ("tiles", "k_tiles", "slots", "batch"), steps,
                (("sk_tiles", tiles), ("sk_blocks", minimum(tiles * Var("slices"), slots))),
                comment="gemmdsl/paths/dequant/facts.py's slice_split_rule: every tile's k-slices side by side")


def decode_model(analysis, sms: int) -> MemberModel:
    """The decode kernel as the cycle model reads a member: a tile is a block's rows of A by its rows of W, a k-tile
    one k-step (16 of K), split over the k-slices (`slice_split_rule`). A k-step of r resident blocks takes r x the
    block's warp k-steps x the SM cycles one takes (targets.DECODE_STEP_CYCLES, fitted on the H200 by the weights'
    bits and the rows of A a block takes), and a call the profile's call latency more; at least the memory floor
    (cycles.estimate_rule's `memory`): A, the weights and C over HBM's bytes per clock, counted in nibbles for 4-bit
    weights (the floor's sizes are whole units; scales and padding left out)."""
    spec, layout = analysis.spec, analysis.layout
    config: DecodeConfig = layout.config
    launch: DecodeLaunch = analysis.facts["decode"]
    unit = 8 // config.fmt.bits if config.fmt.bits < 8 else 1
    sm = spec.target.sm
    # 8, 16 or 32 rows of A a block (kernel.M_TILES); a target without fitted figures: 1, the floor decides
    step = DECODE_STEP_CYCLES.get(sm, {}).get((4 if config.fmt.bits == 4 else 8, layout.bm), 1)
    warp_steps = config.warps * config.tiles
    problem = spec.problem
    return MemberModel(name=spec.name, tile=(layout.bm, layout.bn, 16), exact=False, stream_k=False, sms=sms,
                       blocks_per_sm=launch.blocks_per_sm,
                       k_tile_cycles=tuple(r * warp_steps * step for r in range(1, launch.blocks_per_sm + 1)),
                       call_cycles=CALL_CYCLES.get(sm, 0), split=slice_split_rule(config.k_slice // 16),
                       hbm_bytes_per_clock=HBM_BYTES_PER_CLOCK.get(sm, 0) * unit,
                       element_bytes=(problem.a.dtype.bytes * unit, config.fmt.bits * unit // 8,
                                      problem.c.dtype.bytes * unit))

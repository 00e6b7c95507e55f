"""What the tools read of the wgmma path (paths/facts.py): its passes' figures for `check`, the GMMA and TMA
counters `profile` compares them with, and the prediction `tune` ranks by, whose score is the cycle model the
families pick members by (paths/wgmma/cycles.py)."""
from __future__ import annotations

import dataclasses

from ...ncu_counters import DYNAMIC_SMEM, GRID_SIZE, LAUNCH_METRICS, MEASURED_BLOCKS_PER_SM, REGISTERS
from ...prediction import Prediction
from ...targets import WARP
from ..facts import Comparison, ToolFacts

# The wgmma path's counters (listed by `ncu --query-metrics --chip gh100`).
GMMA_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_gmma.sum"
GMMA_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_gmma.sum"
GMMA_INSTRUCTIONS = "sm__inst_executed_pipe_tensor_op_gmma.sum"
TMA_REQUESTS = "l1tex__tmain_requests.sum"
TMA_BYTES = "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum"
FIGURES = ("smem", "registers", "pipeline", "traffic", "waves", "bound")  # its passes' facts, wgmma_<name>


class WgmmaFacts(ToolFacts):
    ncu_metrics = (GMMA_WAVEFRONTS, GMMA_CONFLICTS, GMMA_INSTRUCTIONS, TMA_REQUESTS, TMA_BYTES, GRID_SIZE,
                   DYNAMIC_SMEM, *LAUNCH_METRICS)

    def headline(self, analysis) -> str:
        spec, layout = analysis.spec, analysis.layout
        return (f"{spec.name} ({spec.target}): {layout.threads} threads = {layout.consumers} consumer + "
                f"{layout.producers} producer warpgroups, block tile {layout.bm}x{layout.bn}x{layout.bk}, "
                f"wgmma {layout.instruction_note}, problem {analysis.problem}")

    def alarms(self, analysis) -> list[str]:
        """ptxas's spills (registers after setmaxnreg) and its serialization of wgmma, when nvcc or NVRTC ran."""
        alarms = []
        spills = analysis.facts["wgmma_registers"].spills
        if spills:
            alarms.append(f"!!! ptxas SPILLS registers to local memory: {spills} bytes !!!")
        if analysis.ptxas and analysis.ptxas.get("wgmma_serialized"):
            alarms.append("!!! ptxas SERIALIZED the kernel's wgmma (C7515: non-wgmma instructions define accumulator "
                          "registers inside a wgmma pipeline stage); expect a large slowdown !!!")
        return alarms

    def figures(self, analysis) -> dict:
        """Shared memory, registers after setmaxnreg, the ring, a launch's traffic, waves and bound."""
        return {name: dataclasses.asdict(analysis.facts[f"wgmma_{name}"]) for name in FIGURES}

    def comparisons(self, analysis) -> list[Comparison]:
        """wgmma's shared-memory reads and their conflicts, the instructions and copies the lowering issues,
        and the launch (registers before setmaxnreg, grid, shared memory, blocks per SM)."""
        facts = analysis.facts
        traffic, registers, smem, waves = (facts[f"wgmma_{name}"] for name in ("traffic", "registers", "smem", "waves"))
        return [
            Comparison("wgmma shared wavefronts (GMMA)", traffic.smem_wavefronts, GMMA_WAVEFRONTS),
            Comparison("wgmma bank conflicts (GMMA)", traffic.bank_conflicts, GMMA_CONFLICTS),
            Comparison("wgmma warp instructions", traffic.wgmma_warp_instructions, GMMA_INSTRUCTIONS),
            Comparison("TMA copies", traffic.tma_copies, TMA_REQUESTS),
            Comparison("TMA bytes from L2", traffic.tma_bytes, TMA_BYTES),
            Comparison("registers per thread at launch", registers.entry, REGISTERS),
            Comparison("registers per thread (nvcc ptxas)", registers.ptxas, REGISTERS),
            Comparison("dynamic shared memory per block", smem.block_bytes, DYNAMIC_SMEM),
            Comparison("blocks in the grid", waves.blocks, GRID_SIZE),
            Comparison("blocks per SM", 1, MEASURED_BLOCKS_PER_SM),
        ]

    def prediction(self, analysis, ptxas: dict | None) -> Prediction:
        """Validation has already refused what does not fit (the ring, the consumers' accumulators), so
        screening sees the launch's registers and warps and the block's intensity per stage; the score is the
        share of wgmma's own cycles in the cycle model the families pick members by (per k-tile the slowest of
        wgmma's rate, its shared-memory reads, TMA's bytes from L2 and the ring's round trip over the stages in
        flight; C through L2 per tile; the grid's rounds over the SMs). So a tile that brings more bytes per
        multiply-add scores lower (128x128 below 128x256), so does a ring too shallow to cover the round trip
        (3 stages of 128x256x64 below 4). It sees neither the instruction shape, the raster nor the schedule:
        candidates that differ only there tie, and more stages rank first among them (more bytes in flight
        from L2: on the H100 every 4-stage hgemm_h100 candidate ran 3-40% faster than its 3-stage twin)."""
        layout, bound = analysis.layout, analysis.facts["wgmma_bound"]
        registers = ptxas["registers"] if ptxas is not None else layout.entry_registers
        flops_per_byte = 2 * layout.bm * layout.bn * layout.bk / layout.stage_bytes
        source = "ptxas" if ptxas is not None else "est."
        warps = layout.threads // WARP
        return Prediction(
            registers=registers, register_cap=layout.entry_registers, register_low=registers, blocks_per_sm=1,
            warps_per_sm=warps, load_conflicts=0, store_conflicts=0, conflict_pct=0.0,
            smem_wavefronts_per_ffma=0.0, issue_per_ffma=0.0, block_flops_per_byte=flops_per_byte,
            warp_flops_per_byte=flops_per_byte, launch_flops_per_byte=bound.flops / bound.dram_bytes,
            threads=layout.threads, smem_bytes=layout.smem_bytes, ptxas=ptxas,
            mma_model=analysis.path.lowered_member_model(layout, layout.arch.reference_sms),
            tie_break=-analysis.spec.pipeline.stages,
            summary_text=(f"{registers:>3} regs at launch ({source}), {warps:>2} warps/SM, "
                          f"{layout.smem_bytes // 1024} KiB smem, {flops_per_byte:.0f} flop/B"))

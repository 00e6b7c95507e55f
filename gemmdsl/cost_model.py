"""The tuner's cost model: predicted efficiency (fraction of the FMA peak) of a candidate from its analysis.

    facts = cost_facts(analysis)               # per-FFMA figures the model reads, from the passes
    score = efficiency(facts, spec, sizes)     # 0 for a predicted spill

Per warp-level FFMA of one block (all figures are per k-tile of the block, divided by its FFMAs):

  issue      FFMAs, shared-memory instructions and KTILE_OVERHEAD (or KTILE_OVERHEAD_UNROLLED)
             warp instructions per warp and k-tile, at ISSUE_PER_CLOCK per SM;
  LSU        the shared-memory wavefronts the bank-conflict pass counts (conflicts included) plus
             GLOBAL_LINE_WAVEFRONTS per 128-byte line each global load or cp.async of a warp touches:
             L1 serves shared memory and global accesses on one pipe, one wavefront per clock. A
             transposing cp.async copies 4 bytes a lane, so it touches as many lines as a float4
             load with a quarter of the bytes (what makes `copy: cp_async` slow with `order: km` A);
  global     the bytes the blocks request, at targets.L2_BYTES_PER_CLOCK_PER_SM.

The slowest of the three (or the FFMAs themselves, at the SM's FP32 lanes) is the pipe's time. On top of
it, latency the warps cannot hide: with `fragments: double` a warp loads step kk+1's fragments while step
kk multiplies, which needs a second fragment set in registers beside the demand the registers pass counts;
where the register cap leaves less room than that, every k step waits for its fragment loads, SMEM_LATENCY clocks per block and k
step, shared by the blocks resident on the SM (another block issues while one waits). A single-stage
pipeline (`stages: 1`: load, barrier, multiply, barrier) waits for its k-tile's global loads every k-tile,
SINGLE_STAGE_WAIT_CYCLES per block, shared the same way.

The pipe's rate assumes a scheduler always has a warp to issue from. Each SM has ISSUE_PER_CLOCK
schedulers, each with its share of the resident warps; a warp cannot issue a share WARP_STALL_SHARE of the
time (a barrier, a load's latency, a register-bank conflict), and a scheduler idles when all its warps do
at once: 1 - WARP_STALL_SHARE ** warps_per_scheduler of the pipe's rate is left. Eight warps per SM (one
block of 8, or two of 4) keep 84% of it, sixteen 97%.

Occupancy comes from the register estimate. Without a launch-bounds cap, ptxas lands anywhere from the
demand to HEADROOM above it (passes/registers.py), so where that band crosses an occupancy cliff the
model averages its efficiency over the band (a candidate that may lose a block per SM is expected to
lose it in proportion). With ptxas's figure the occupancy is that figure's. The wave quantization of
the grid over SMS x blocks-per-SM slots multiplies the result (geomean over the sizes; stream-K fills
the last wave, schedule.py). A predicted spill (the register rule of tune/screen.py) scores 0: measured on an
H100, such kernels ran about 10x slower than their twins, below every kernel that does not spill.

What the model does not see, and the ranking's tie-breaks take up (tune.rank): FMA order (ptxas keeps
much of it; an FFMA whose A and B operands both differ from the previous one's cannot take either from
the register reuse caches), and the slack left on the LSU pipe and in the register file.

Constants: the clock rates and SMEM_LATENCY are the SM's (targets.py, the CUDA guide); GLOBAL_LINE_WAVEFRONTS
(1 or 2; 2 ranks every template better, and leave-one-template-out picks 2 each time) and
WARP_STALL_SHARE are chosen on the measurements: scripts/tune_ranking.py and the docs/tuning.md give the study.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import ir
from .passes.registers import HEADROOM, launch_bounds_cap
from .schedule import LAUNCHED_MIN_SAVED_K_TILES, stream_k_split
from .targets import (GLOBAL_LINE_BYTES, ISSUE_PER_CLOCK, SECTOR_BYTES, SMEM_LATENCY, SMEM_WAVEFRONTS_PER_CLOCK, WARP, arch,
                      ffma_per_clock, l2_bytes_per_clock_per_sm, occupancy_of, single_stage_wait_cycles)

KTILE_OVERHEAD = 40  # warp instructions per k-tile beyond FFMA and shared memory: global loads, barrier, loop
# ... with `pipeline { unroll: 2 or more }`, where stage indices and loop tests fold into constants
# (ptxas 13.0, sgemm_v3's tiling: 39 such instructions per k-tile, 19 unrolled twice, 17 four times)
KTILE_OVERHEAD_UNROLLED = 18
GLOBAL_LINE_WAVEFRONTS = 2  # L1 wavefronts per 128-byte line a warp's global load or cp.async touches
# Share of the time one warp has no instruction ready. On the H100 (tests/fixtures/tune_h100) sgemm_space's
# 128x128x8 register-staged kernels at two blocks of 8 warps per SM ran at 94.2% of cuBLAS and its 128x256x16
# cp.async ones at one block at 88.1%, where the pipes alone predict the opposite (0.84 vs 0.90 of the peak);
# measured over predicted (issue-bound kernels, medians by kind) is mostly 0.74-0.78 at 8 warps per SM and
# 0.86-0.89 at 16, which 1 / (1 + q^2) = 0.875 makes q = 0.38. 0.4 ranks all three templates within the targets
# (rho >= 0.7, top-8 gap <= 2%; so does every q from 0.33 to 0.50), but only sgemm_space needs the term.
WARP_STALL_SHARE = 0.4


Size = tuple[int, int, int]


@dataclass(frozen=True)
class CostFacts:
    """What the cost model reads from one analysis, per warp-level FFMA unless said otherwise."""

    issue_per_ffma: float  # warp instructions issued
    smem_wavefronts_per_ffma: float
    global_wavefronts_per_ffma: float  # L1 wavefronts of the global loads / cp.async (GLOBAL_LINE_WAVEFRONTS a line)
    exposed_latency_per_ffma: float  # clocks per block FFMA that no warp of the block can hide (0 when none)
    register_demand: int  # what the main loop keeps live (passes/registers.py), or ptxas's count
    fma_switches_per_ffma: float  # FFMAs whose A and B operands both differ from the previous FFMA's

    @property
    def lsu_per_ffma(self) -> float:
        return self.smem_wavefronts_per_ffma + self.global_wavefronts_per_ffma


def global_lines(layout, spec: ir.KernelSpec) -> int:
    """128-byte lines the global loads (or cp.async copies) of one block and k-tile touch, warp by warp.

    Rows of a tile in global memory are taken to lie in different lines (leading dimensions of at least
    32 floats); within a row, a line is GLOBAL_LINE_BYTES of it."""
    env = layout.thread_env()
    cp_async = spec.pipeline.copy is ir.CopyMode.CP_ASYNC
    element_bytes = spec.problem.a.dtype.bytes  # in global memory (shared memory may hold them wider)
    total = 0
    for operand in (ir.Operand.A, ir.Operand.B):
        width = layout.store_width(operand) if cp_async else layout.load_vector(operand)
        for chunk in layout.global_chunks(operand):
            rows = np.broadcast_to(chunk.row.evaluate(env), (layout.threads,))
            cols = np.broadcast_to(chunk.col.evaluate(env), (layout.threads,))
            for element in range(0, layout.load_vector(operand), width):
                line = (cols + element) * element_bytes // GLOBAL_LINE_BYTES
                keys = (rows.astype(np.int64) << 32) + line
                total += sum(len(np.unique(warp)) for warp in keys.reshape(-1, WARP))
    return total


# A leading dimension one element past a multiple of every vector width: each row of C starts at another offset
# within its sectors, as a packed C of odd N does
MISALIGNED_LD = 8 * 1024 + 1


def c_store_align(layout) -> int:
    """The elements a packed C's leading dimension must be a multiple of for `c_store_sectors(aligned=True)`: the
    widest vector the epilogue stores, or for one-element stores a sector, so that every row starts on one."""
    width = layout.c_store_width(aligned_c=True)
    return width if width > 1 else SECTOR_BYTES // layout.spec.problem.c.dtype.bytes


def c_store_sectors(layout, spec: ir.KernelSpec, aligned: bool) -> int:
    """32-byte sectors one block's epilogue stores of C touch, instruction by instruction and warp by warp: where C
    and its leading dimension allow the thread's widest vector (`aligned`), or one element at a time with a leading
    dimension off every vector (the scalar kernel a packed C of odd N takes). Each sector an instruction touches
    crosses to L2 whole, however few of its bytes the lanes write: a micro tile of 4 columns puts a warp's
    one-element stores on 8 rows, 16 bytes apart."""
    env = layout.thread_env()
    t, c = spec.threads, spec.problem.c
    width = layout.c_store_width(aligned_c=True) if aligned else 1
    ld = MISALIGNED_LD - 1 if aligned else MISALIGNED_LD
    along_n = c.layout is ir.MatrixLayout.ROW
    thread_m = np.asarray(env["thread_m"]).reshape(-1, WARP).astype(np.int64)
    thread_n = np.asarray(env["thread_n"]).reshape(-1, WARP).astype(np.int64)
    element_bytes = c.dtype.bytes
    total = 0
    for rm in range(t.repeat.m):
        for i in range(t.micro.m):
            for rn in range(t.repeat.n):
                for j in range(0, t.micro.n, width if along_n else 1):
                    if not along_n and i % width:
                        continue
                    row = thread_m + rm * layout.repeat_stride("m") + i
                    col = thread_n + rn * layout.repeat_stride("n") + j
                    start = (row * ld + col if along_n else col * ld + row) * element_bytes
                    first, last = start // SECTOR_BYTES, (start + width * element_bytes - 1) // SECTOR_BYTES
                    total += sum(len(np.union1d(f, l)) for f, l in zip(first, last))
    return int(total)


def fma_switches(spec: ir.KernelSpec) -> float:
    """Share of a k step's FFMAs whose A and B operands both differ from the previous FFMA's."""
    if spec.mma is not None:
        return 0.0
    threads = spec.threads
    rows, cols = threads.fragment.m, threads.fragment.n
    order = threads.fma_order
    switches = {ir.FmaOrder.ROW: rows - 1, ir.FmaOrder.COL: cols - 1}.get(order, 0)
    return switches / (rows * cols)


def cost_facts(spec: ir.KernelSpec, analysis, cap: int) -> CostFacts:
    """The model's inputs from an analysis.Analysis of `spec` (facts of the launch, bank-conflict,
    smem-traffic and registers passes); `cap` is the most registers per thread ptxas may use."""
    facts = analysis.facts
    launch, traffic, registers = facts["launch"], facts["smem_traffic"], facts["registers"]
    block_ffma = spec.block.m * spec.block.n * spec.block.k / WARP  # warp FFMAs per block and k-tile
    launch_ffma = block_ffma * launch.blocks * launch.k_tiles
    smem_instructions = sum(cost.instructions for cost in facts["smem_accesses"])
    per_ktile = KTILE_OVERHEAD if spec.pipeline.unroll == 1 else KTILE_OVERHEAD_UNROLLED
    issue = (block_ffma + smem_instructions + per_ktile * launch.warps_per_block) / block_ffma
    estimate = registers.estimate
    one_set = estimate.fragments // max(1, estimate.fragment_sets)
    demand = registers.ptxas if registers.ptxas is not None else estimate.demand
    double = spec.pipeline.fragments is ir.FragmentBuffering.DOUBLE
    waits = double and registers.ptxas is None and cap - demand < one_set
    return CostFacts(
        issue_per_ffma=issue,
        smem_wavefronts_per_ffma=(traffic.load_wavefronts + traffic.store_wavefronts) / launch_ffma,
        global_wavefronts_per_ffma=GLOBAL_LINE_WAVEFRONTS * global_lines(analysis.layout, spec) / block_ffma,
        exposed_latency_per_ffma=((SMEM_LATENCY * spec.block.k if waits else 0.0)
                                  + (single_stage_wait_cycles(spec.target.sm) if spec.pipeline.stages == 1 else 0.0))
                                 / block_ffma,
        register_demand=demand,
        fma_switches_per_ffma=fma_switches(spec),
    )


def wave_efficiency(spec: ir.KernelSpec, blocks_per_sm: int, size: Size, sms: int) -> float:
    """Useful fraction of the launch's slot time: blocks / (waves * slots). With stream-K the last
    wave's tiles are spread over a whole wave (schedule.py); its atomics are not modelled."""
    m, n, k = size
    blocks = math.ceil(m / spec.block.m) * math.ceil(n / spec.block.n)
    slots = max(1, sms * max(1, blocks_per_sm))
    if spec.block.stream_k:
        split = stream_k_split(blocks, math.ceil(k / spec.block.k), slots, min_saved_k_tiles=LAUNCHED_MIN_SAVED_K_TILES)
        if split.sk_tiles:
            return (blocks / slots) / (split.dp_tiles / slots + split.sk_tiles / split.sk_blocks)
    return blocks / (math.ceil(blocks / slots) * slots)


def clocks_per_ffma(facts: CostFacts, spec: ir.KernelSpec, blocks_per_sm: int, launch_flops_per_byte: float) -> float:
    """SM clocks per warp-level FFMA with `blocks_per_sm` blocks resident: the slowest pipe, plus the latency
    no resident block hides, over the share of clocks a scheduler finds a warp ready."""
    sm = spec.target.sm
    global_clocks = (2 * WARP / launch_flops_per_byte) / l2_bytes_per_clock_per_sm(sm)
    pipe = max(facts.issue_per_ffma / ISSUE_PER_CLOCK, 1 / ffma_per_clock(arch(sm)),
               facts.lsu_per_ffma / SMEM_WAVEFRONTS_PER_CLOCK, global_clocks)
    clocks = pipe + facts.exposed_latency_per_ffma / blocks_per_sm
    return clocks / issue_share(spec.threads.threads // WARP * blocks_per_sm)


def k_tile_cycles(facts: CostFacts, spec: ir.KernelSpec, resident: int, launch_flops_per_byte: float) -> int:
    """SM clocks one k-tile of `resident` blocks takes (what the family rule sums over a launch's waves)."""
    block_ffma = spec.block.m * spec.block.n * spec.block.k // WARP
    return math.ceil(resident * block_ffma * clocks_per_ffma(facts, spec, resident, launch_flops_per_byte))


def efficiency_at(facts: CostFacts, spec: ir.KernelSpec, blocks_per_sm: int, launch_flops_per_byte: float,
                  sizes: Sequence[Size], sms: int) -> float:
    """Predicted fraction of the FMA peak with `blocks_per_sm` blocks resident."""
    if blocks_per_sm < 1:
        return 0.0
    waves = math.prod(wave_efficiency(spec, blocks_per_sm, size, sms) for size in sizes) ** (1 / len(sizes))
    return (1 / ffma_per_clock(arch(spec.target.sm))) / clocks_per_ffma(facts, spec, blocks_per_sm,
                                                                       launch_flops_per_byte) * waves


def issue_share(warps_per_sm: int) -> float:
    """Share of the clocks a scheduler finds a warp ready: it idles only when all of its warps (the SM's
    resident warps over its ISSUE_PER_CLOCK schedulers) are stalled at once, each WARP_STALL_SHARE of the time."""
    return 1 - WARP_STALL_SHARE ** (warps_per_sm / ISSUE_PER_CLOCK)


def register_cap(spec: ir.KernelSpec, threads: int) -> int:
    """The most registers per thread the spec may use without a predicted spill: ptxas's cap under the
    kernel's `__launch_bounds__`, and at most the spec's register budget."""
    cap = launch_bounds_cap(arch(spec.target.sm), spec, threads)
    return cap if spec.budget.registers is None else min(cap, spec.budget.registers)


def register_band(demand: int, cap: int) -> range:
    """The register counts ptxas may land on: from the demand to HEADROOM above it, at most the cap."""
    high = max(demand, min(cap, math.ceil(demand * (1 + HEADROOM))))
    return range(min(demand, cap), high + 1)


def efficiency(facts: CostFacts, spec: ir.KernelSpec, *, threads: int, smem_bytes: int, cap: int,
               blocks_per_sm: int, known_registers: bool, spills: bool, launch_flops_per_byte: float,
               sizes: Sequence[Size], sms: int) -> float:
    """The score: predicted efficiency, averaged over the register band where ptxas's count is not known."""
    if spills:
        return 0.0
    if known_registers:
        return efficiency_at(facts, spec, blocks_per_sm, launch_flops_per_byte, sizes, sms)
    target = arch(spec.target.sm)
    band = register_band(facts.register_demand, cap)
    blocks = [occupancy_of(target, count, threads, smem_bytes).blocks_per_sm for count in band]
    by_blocks = {b: efficiency_at(facts, spec, b, launch_flops_per_byte, sizes, sms) for b in set(blocks)}
    return sum(by_blocks[b] for b in blocks) / len(blocks)

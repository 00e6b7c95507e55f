"""Per-architecture limits, stated once; every pass and the emitter read them from here.

Figures are from the CUDA C Programming Guide's table of compute capabilities. The
occupancy arithmetic lives beside them: it is what the limits mean for a launch.

Occupancy follows CUDA's cuda_occupancy.h: registers go to warps in units of
`register_alloc_unit` (so per-thread counts round up to a multiple of 8), and each
of the SM's four sub-partitions holds a quarter of the register file, so warps are
counted per sub-partition; shared memory per block is the kernel's bytes plus the
runtime's per-block reserve, rounded up to `smem_alloc_unit`, against the SM's full
shared-memory carveout (the default preference).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from .gpu_profile import REFERENCE_PROFILES, ProfileError, profile_for

WARP = 32
WARPGROUP = 4 * WARP  # threads: four warps, one per scheduler, issue one wgmma together (sm_90a)
SUBPARTITIONS_PER_SM = 4  # sm_70 and later: the register file is split across four schedulers


@dataclass(frozen=True)
class Arch:
    sm: int
    smem_per_sm: int  # bytes of shared memory an SM can give to blocks
    smem_per_block: int  # largest dynamic shared memory a block may opt into
    smem_reserved_per_block: int  # the runtime's per-block reserve
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int = 65536
    max_registers_per_thread: int = 255
    register_alloc_unit: int = 256  # registers are handed to warps in units of this many
    smem_alloc_unit: int = 128
    max_threads_per_block: int = 1024
    has_cp_async: bool = True
    has_mma_sync: bool = True  # mma.sync with f16, bf16 and tf32 operands (sm_80+)
    # wgmma.mma_async, setmaxnreg and the TMA/mbarrier pipeline of Hopper's own path: arch-specific
    # (sm_90a), so only the `a` target has them (ARCH_SPECIFIC).
    has_wgmma: bool = False
    default_smem_per_block: int = 48 * 1024  # above this the launcher must opt in
    has_vector_atomic_add: bool = False  # atomicAdd on float2 / float4 in one instruction
    # The GPU whose SM count the wave analysis assumes (launchers read the real count at run time), and the
    # SM clock in MHz at which the cycle model's figures become times (`check --problem`'s microseconds).
    reference_gpu: str = ""
    reference_sms: int = 0
    reference_clock_mhz: int = 0
    # FP32 FMA lanes per SM: an SM issues fp32_lanes_per_sm / 32 warp FMA instructions per clock.
    fp32_lanes_per_sm: int = 128


# Reference clocks: the boost clocks of the A100 (1410 MHz), RTX 3090 (1695) and RTX 4090 (2520), at which
# MMA_SYNC_MACS_PER_CLOCK's datasheet rates hold; for the H100, 1755 MHz, the clock its measured cycle
# figures were taken at (L2_BYTES_PER_CLOCK_PER_SM, HBM_BYTES_PER_CLOCK, the launch cost).
ARCHS: dict[int, Arch] = {
    80: Arch(80, smem_per_sm=164 * 1024, smem_per_block=163 * 1024, smem_reserved_per_block=1024,
             max_threads_per_sm=2048, max_blocks_per_sm=32, reference_gpu="A100", reference_sms=108,
             reference_clock_mhz=1410, fp32_lanes_per_sm=64),
    86: Arch(86, smem_per_sm=100 * 1024, smem_per_block=99 * 1024, smem_reserved_per_block=1024,
             max_threads_per_sm=1536, max_blocks_per_sm=16, reference_gpu="RTX 3090", reference_sms=82,
             reference_clock_mhz=1695),
    89: Arch(89, smem_per_sm=100 * 1024, smem_per_block=99 * 1024, smem_reserved_per_block=1024,
             max_threads_per_sm=1536, max_blocks_per_sm=24, reference_gpu="RTX 4090", reference_sms=128,
             reference_clock_mhz=2520),
    90: Arch(90, smem_per_sm=228 * 1024, smem_per_block=227 * 1024, smem_reserved_per_block=1024,
             max_threads_per_sm=2048, max_blocks_per_sm=32, has_vector_atomic_add=True),
}
# The most registers a thread may have on any target: what a spec may ask for, and the limit where none is known.
MAX_REGISTERS_PER_THREAD = max(arch.max_registers_per_thread for arch in ARCHS.values())
# sm_90's reference GPU, its SMs and clock, and the rates below come from its profile (gpu_profile.py: the H200's,
# measured by `gemmdsl calibrate`, unless $GEMMDSL_GPU names another).
try:
    HOPPER = profile_for(90)
    PROFILE_ERROR: ProfileError | None = None
except ProfileError as err:  # a bad $GEMMDSL_GPU: the CLI reports it (cli.main); the reference GPU meanwhile
    HOPPER = profile_for(90, REFERENCE_PROFILES[90])
    PROFILE_ERROR = err
ARCHS[90] = replace(ARCHS[90], reference_gpu=HOPPER.gpu.removeprefix("NVIDIA "), reference_sms=HOPPER.sms,
                    reference_clock_mhz=HOPPER.clock_mhz)

# Arch-specific targets (`target sm_90a;`): the same limits as the plain target, plus the instructions
# that exist on exactly that architecture. Code for them runs only there (runtime.build_target).
ARCH_SPECIFIC: dict[int, Arch] = {90: replace(ARCHS[90], has_wgmma=True)}


class TargetName(NamedTuple):
    """A target as the language and `--arch` name it: `sm_90` is (90, False), `sm_90a` (90, True)."""

    sm: int
    arch_specific: bool = False

    def __str__(self) -> str:
        return f"sm_{self.sm}{'a' if self.arch_specific else ''}"


TARGETS: tuple[TargetName, ...] = (tuple(TargetName(sm) for sm in ARCHS)
                                   + tuple(TargetName(sm, True) for sm in ARCH_SPECIFIC))


# The oldest target each instruction (or group) the emitted kernels may use runs on, from the PTX ISA's
# requirements; an `a` target's run on exactly that architecture. A .cu stops any device pass for a target
# older than its kernels' instructions need (emit.arch_guard), where nvcc would otherwise compile a wgmma
# file for sm_80 without a word into kernels that trap.
INSTRUCTION_TARGETS: dict[str, TargetName] = {
    "ldmatrix": TargetName(75),
    "cp.async": TargetName(80),
    "mma.sync": TargetName(80),  # its bf16 and tf32 shapes, and f16's m16n8k16
    "float2 and float4 atomicAdd": TargetName(90),
    "wgmma, setmaxnreg and TMA": TargetName(90, True),
}


def parse_target(text: str) -> TargetName | None:
    """The target `text` names (`sm_80`, `sm_90a`), or None when the language has no such target."""
    return next((target for target in TARGETS if str(target) == text), None)


# Dense peak rates of each target's reference GPU in TFLOP/s, by the unit a kernel multiplies on
# (FP32 accumulation throughout), and its memory bandwidth in TB/s. Datasheet figures, except the
# H100's, measured here (docs/performance.md): FMA 65.3, mma.sync 640 (bf16/f16) and 320 (tf32) in a
# register-only loop, a device copy at 3.0 TB/s. 3xTF32 runs three TF32 products per multiply.
PEAK_TFLOPS: dict[int, dict[str, float]] = {
    80: {"fma": 19.5, "f16": 312.0, "bf16": 312.0, "tf32": 156.0},
    86: {"fma": 35.6, "f16": 71.0, "bf16": 71.0, "tf32": 35.6},
    89: {"fma": 82.6, "f16": 165.2, "bf16": 165.2, "tf32": 82.6},
    90: {"fma": 65.3, "f16": 640.0, "bf16": 640.0, "tf32": 320.0},
}
# mma.sync's rate in multiply-adds per SM and clock, by unit: the peaks above over the reference GPU's
# SMs at its boost clock (A100 1410 MHz, RTX 3090 1695, RTX 4090 2520: the datasheets' tensor rates; the
# H100's 640 / 320 TFLOP/s measured in a register-only loop, taken at its 1830 MHz). An m16n8k16 BF16
# instruction (2,048 multiply-adds) so takes 2 clocks of an A100's SM and 1.55 of an H100's.
MMA_SYNC_MACS_PER_CLOCK: dict[int, dict[str, int]] = {
    80: {"f16": 1024, "bf16": 1024, "tf32": 512},
    86: {"f16": 256, "bf16": 256, "tf32": 128},
    89: {"f16": 256, "bf16": 256, "tf32": 128},
    90: dict(HOPPER.mma_sync_macs_per_clock),
}
# wgmma's dense peak, which Hopper's own path (sm_90a) multiplies on, by unit. The H100 SXM datasheet
# figures (989.4 TFLOP/s BF16/FP16 and 494.7 TF32 dense, at the 1830 MHz boost clock): no register-only
# wgmma loop has been measured here yet, unlike mma.sync's rates above. Under load the clock drops, so
# the best measured GEMMs stay well below them: cuBLAS BF16 756-790 TFLOP/s at 8192^3 and TF32 404 at
# 4096^3 (docs/performance.md); sustained BF16 GEMMs at 8192^3 hold the board at its 700 W cap and the
# SM clock near 1,420 MHz, where cuBLAS runs at 710 (docs/performance.md, "The clock under sustained load"). The analysis compares against the datasheet figure and prints the
# measured cuBLAS one beside it where there is one (WGMMA_MEASURED_TFLOPS).
# FP8 (e4m3 and e5m2, any pairing) runs at twice the 16-bit rate: 1978.9 TFLOP/s dense.
WGMMA_PEAK_TFLOPS: dict[int, dict[str, float]] = {90: {"f16": 989.4, "bf16": 989.4, "tf32": 494.7, "fp8": 1978.9}}
WGMMA_MEASURED_TFLOPS: dict[int, dict[str, float]] = {90: {"bf16": 790.0, "tf32": 404.2}}  # cuBLAS, 2026-11-23
MEMORY_TBPS: dict[int, float] = {80: 2.0, 86: 0.94, 89: 1.01, 90: HOPPER.hbm_tbps}
# HBM's bandwidth in bytes per SM clock, the memory floor of the cycle model (cycles.memory_cycles): the
# H100 SXM datasheet's 3.35 TB/s (HBM3) at 1755 MHz, the clock L2_BYTES_PER_CLOCK_PER_SM was measured at
# (3.35e12 / 1.755e9 = 1909). The datasheet's figure, not the 3.0 TB/s a device copy reached (MEMORY_TBPS):
# the floor is a bound no kernel passes. Only the H100 has one; elsewhere the model has no memory floor.
HBM_BYTES_PER_CLOCK: dict[int, int] = {90: HOPPER.hbm_bytes_per_clock}
# The same peaks per SM and clock, in multiply-adds: 989.4 TFLOP/s = 132 SMs x 2048 x 2 at 1830 MHz.
WGMMA_MACS_PER_CLOCK: dict[int, dict[str, int]] = {90: dict(HOPPER.wgmma_macs_per_clock)}
# Bytes per clock that one SM's TMA copies bring from L2 when every SM streams: measured on the H100
# (2026-11-23, docs/families.md), where wgmma tilings of 128x256x64 and 128x64x64 bf16 both
# ran at the rate their k-tiles arrive at 38 bytes per clock (at 1755 MHz), not at wgmma's peak. The FMA
# cost model's global term reads it too (l2_bytes_per_clock_per_sm), on every target: no other GPU's
# figure has been measured. (That model had 32 of its own; the H100's FMA templates rank the same with 38.)
L2_BYTES_PER_CLOCK_PER_SM: dict[int, int] = {90: HOPPER.l2_bytes_per_clock_per_sm}
# Cycles a 3xTF32 wgmma k-tile takes beyond its slowest rate: each consumer waits for its k-tile's group
# before it reloads A's fragments and adds `part` (paths/wgmma/split.py). paths/wgmma/cycles.py counts
# the adds (one FADD per accumulator and thread, one issue slot each: accumulators x the consumer warps a
# scheduler holds); this is the rest, measured on the H100 at 8192^3 at 1755 MHz: 130.8 TFLOP/s for
# sgemm_3xtf32_h100_sk with the two-loop stream-K kernel (T18) (1,857 cycles per k-tile and SM against
# wgmma's 1,536, less 2 x 64 cycles of adds = 193). The 128x192 spec then comes out at 2,686 cycles per
# k-tile, where it measured 2,709 (134.5 TFLOP/s). Before: one wait for both tilings, 400 cycles (385 and 416
# measured on the persistent kernels after T15-T16), 724 and 767 before them.
SPLIT_WAIT_CYCLES_PER_K_TILE: dict[int, int] = {90: HOPPER.split_wait_cycles_per_k_tile}
# Special-function results (ex2, rcp, tanh.approx) an SM returns per clock: 16 on 8.x and 9.0 (the CUDA C++
# Programming Guide's throughput table; four units per SM sub-partition). The fuse chain's activations
# use them (fuse_ops/activation.py, ACTIVATION_OPS).
SFU_PER_CLOCK_PER_SM: dict[int, int] = {80: 16, 86: 16, 89: 16, 90: 16}
# Cycles from the moment a consumer frees a stage of the TMA ring to the moment that stage's next k-tile
# has landed, under the load of every SM streaming (Little's law: with STAGES - 1 stages in flight a ring
# delivers at most one k-tile per ROUND_TRIP / (STAGES - 1) cycles, however fast L2 is). Calibrated on
# the H100 (2026-11-25) on one template, gemmdsl/templates/tf32_h100.tgemm timed exhaustively at 4096^3
# and 2048^3 (2 to 6 stages): the rank correlation peaks at 3,000 (1.7 us at 1755 MHz); the bf16
# templates, timed apart, were the held-out check (docs/tuning.md).
RING_ROUND_TRIP_CYCLES: dict[int, int] = {90: HOPPER.ring_round_trip_cycles}
# What one more kernel launch adds to a call, in SM clock cycles (the FMA and mma.sync paths' stream-K launches
# a kernel that sets the shared tiles of C before it): the GPU time of a kernel boundary, measured as a CUDA
# graph of empty kernels (`gemmdsl calibrate`). Taken for every target (unmeasured elsewhere).
EXTRA_LAUNCH_CYCLES = HOPPER.launch_cycles
# The stream-K fixup's rate: bytes of partial sums per clock that a tile's last block waits for and adds, one
# contributor after another (fitted on the wgmma members' stream-K calls, scripts/fit_cost_model.py).
STREAM_K_FIXUP_BYTES_PER_CLOCK: dict[int, int] = {90: HOPPER.stream_k_fixup_bytes_per_clock}
# A call's time beyond its cycles at any size: the launch as a caller's stream sees it, the first k-tile's trip
# and the last tile's stores (fitted on the same calls; the wgmma path: the family rule's members).
CALL_CYCLES: dict[int, int] = {90: HOPPER.call_cycles}
# The most bytes per clock one block's TMA copies draw from L2 when few blocks stream (a small call, a few stream-K
# blocks): L2_BYTES_PER_CLOCK_PER_SM is each SM's share with every SM streaming. Fitted on the family study (the
# rule's regret is flat from 64 up: the ring's round trip bounds a lone block first).
L2_BLOCK_BYTES_PER_CLOCK: dict[int, int] = {90: HOPPER.l2_block_bytes_per_clock}
# The round trip of a k-tile from HBM, not L2, with every SM streaming: the memory floor's Little's law (a decode
# call's blocks each keep STAGES - 1 k-tiles of B in flight). Fitted on the family study's decode calls (M <= 16;
# docs/calibration.md); the H100's profile keeps the ring's 3,000.
HBM_ROUND_TRIP_CYCLES: dict[int, int] = {90: HOPPER.hbm_round_trip_cycles}
# A call whose packed operands TMA refuses runs the padded launcher (paths/wgmma/pad.py): the copy's launch and pass
# beyond the call's own, and the copy's rate (its bytes read and written). Fitted on the family study's calls whose
# K misaligns the rows (docs/calibration.md).
PAD_CALL_CYCLES: dict[int, int] = {90: HOPPER.pad_call_cycles}
PAD_BYTES_PER_CLOCK: dict[int, int] = {90: HOPPER.pad_bytes_per_clock}
# A checked mma.sync member's k-tile cycles, in percent of its vector kernel's, where a packed operand's leading
# dimension is off 16 bytes and it runs its narrower kernels (cp.async of 8 or 4 bytes), by element bytes; and where
# a 16-bit operand's is odd, so that its scalar kernel loads one element at a time. Fitted on the family study
# (docs/calibration.md).
MMA_SYNC_NARROW_K_TILE_PERCENT: dict[int, dict[int, int]] = {
    90: {2: HOPPER.narrow_k_tile_percent_16bit, 4: HOPPER.narrow_k_tile_percent_32bit}}
MMA_SYNC_SCALAR_K_TILE_PERCENT: dict[int, dict[int, int]] = {90: {2: HOPPER.scalar_k_tile_percent_16bit}}
# ... and the scalar kernel's least k-tile however few blocks share an SM: its loads wait out a round trip before
# the k-tile's multiplies (fitted with them).
MMA_SYNC_SCALAR_K_TILE_CYCLES: dict[int, dict[int, int]] = {90: {2: HOPPER.scalar_k_tile_cycles_16bit}}
# HBM_ROUND_TRIP_CYCLES for the mma.sync members' cp.async rings (their STAGES - 1 k-tiles in flight per block, the
# whole tile issued however few of its rows the call has): fitted on the H200's family study, where their decode
# calls streamed 1.6-2.3 TB/s of BF16 weights and 1.4-3.9 of TF32 (docs/calibration.md).
CP_ASYNC_ROUND_TRIP_CYCLES: dict[int, int] = {90: HOPPER.cp_async_round_trip_cycles}
# ... and the share of L2's rate (L2_BYTES_PER_CLOCK_PER_SM, which TMA's copies reach) their 16-byte copies draw with
# every SM streaming: fitted on the same study (a long K over a few tiles, 256x256x65536, ran 1.7x the time the
# full rate predicts).
CP_ASYNC_L2_PERCENT: dict[int, int] = {90: HOPPER.cp_async_l2_percent}
# The GEMV path's (paths/gemv/model.py): a block's step takes at least one round trip of its lanes' loads (it waits
# for them before it issues the next step's), and the memory floor's Little's law over the bytes its blocks keep in
# flight runs at the round trip below. Fitted on the family study's calls with a few rows or columns
# (docs/calibration.md).
GEMV_STEP_CYCLES: dict[int, int] = {90: HOPPER.gemv_step_cycles}
# The share of HBM's rate, in percent, that the wgmma members' memory floor counts: their TMA k-tiles read 128 bytes
# of each row a k-tile, which scripts/hbm_runs.cu streamed at 77-83% of the datasheet rate (docs/performance.md,
# "HBM's rate by the length of a k-tile's rows"; docs/calibration.md).
TMA_HBM_PERCENT: dict[int, int] = {90: HOPPER.tma_hbm_percent}
GEMV_ROUND_TRIP_CYCLES: dict[int, int] = {90: HOPPER.gemv_round_trip_cycles}
# The GEMV path: an SM's blocks draw this share of the SM's even part of HBM's rate (in percent; the memory floor
# bounds the whole call), and the tensor kernel's windowed k-tile costs this percent of its aligned kernel's (every
# chunk read as two, the lanes' rows at different offsets). Fitted on the family studies (docs/calibration.md).
GEMV_DRAW_PERCENT: dict[int, int] = {90: HOPPER.gemv_draw_percent}
GEMV_TENSOR_WINDOW_PERCENT: dict[int, int] = {90: HOPPER.gemv_tensor_window_percent}
# ... and the share of HBM's rate, in percent, its memory floor counts: its lanes read 64 bytes of each row a load.
GEMV_TENSOR_HBM_PERCENT: dict[int, int] = {90: HOPPER.gemv_tensor_hbm_percent}
# The dequantizing decode kernel's SM cycles per warp k-step (16 rows of W by 16 of K, with 2 blocks of 8 warps
# resident), by (the weights' bits: 4, or 8 for int8 and e4m3; the rows of A a block takes: 8, 16, 32): fitted on
# its H200 run (docs/quantized-kernel.md, "The time model"), the rates its conversions and mma.sync reach.
# The bytes of C's stores an SM moves through L2 a clock, each 32-byte sector an instruction touches counted whole:
# the FMA path's epilogue, whose one-element stores of a thread's micro tile touch several sectors a row. Fitted on
# the FP32 members' short-K calls on the H200 (docs/calibration.md).
C_STORE_BYTES_PER_CLOCK: dict[int, int] = {90: HOPPER.c_store_bytes_per_clock}
# The bytes of C a wgmma block's consumer warpgroup writes a clock where TMA cannot store C (odd N: the rows go out
# one at a time from shared memory), whatever C's type: fitted on the H200's short-K calls of odd N
# (docs/calibration.md).
ROW_STORE_BYTES_PER_CLOCK: dict[int, int] = {90: HOPPER.row_store_bytes_per_clock}
# The bytes of C a wgmma block writes a clock from its accumulators (no `store: tma`: pairs of elements, 8 rows a
# warp) where C's rows are off 16 bytes, per SM: its consumers do not add up. Fitted on the H200's 3xTF32 members
# at short K (docs/calibration.md).
DIRECT_STORE_BYTES_PER_CLOCK: dict[int, int] = {90: HOPPER.direct_store_bytes_per_clock}
# An FMA block's wait for its k-tile's global loads where the pipeline has one stage (load, barrier, multiply,
# barrier), per k-tile, which other resident blocks' work covers: fitted on the H200's short-K member
# (docs/calibration.md).
SINGLE_STAGE_WAIT_CYCLES: dict[int, int] = {90: HOPPER.single_stage_wait_cycles}
DECODE_STEP_CYCLES: dict[int, dict[tuple[int, int], int]] = {90: {
    (bits, rows): getattr(HOPPER, f"decode_step_cycles_{bits}bit_{rows}rows") for bits in (4, 8) for rows in (8, 16, 32)}}


# The SM's issue and load/store rates the cost models count in (sm_70 and later), and the latency of a
# shared-memory load: ISSUE_PER_CLOCK warp instructions a clock (one per scheduler); the L1 data pipe,
# which serves shared memory and global accesses alike, moves one wavefront a clock; a global access
# touches 128-byte lines. SMEM_LATENCY is the H100's, in clocks from a shared-memory load to its use
# (microbenchmarks put it at 29-33 on Hopper), taken for every target.
ISSUE_PER_CLOCK = SUBPARTITIONS_PER_SM
SMEM_WAVEFRONTS_PER_CLOCK = 1
GLOBAL_LINE_BYTES = 128
# L2's unit of access: a store that writes part of a sector costs the whole sector, and TMA reads rows that start 16
# bytes into one at about 1.6x the time (paths/wgmma/pad.py)
SECTOR_BYTES = 32
SMEM_LATENCY = 33


def c_store_bytes_per_clock(sm: int) -> int:
    """C_STORE_BYTES_PER_CLOCK of the target, the reference Hopper's where the target has none."""
    return C_STORE_BYTES_PER_CLOCK.get(sm, C_STORE_BYTES_PER_CLOCK[90])


def single_stage_wait_cycles(sm: int) -> int:
    """SINGLE_STAGE_WAIT_CYCLES of the target, the reference Hopper's where the target has none."""
    return SINGLE_STAGE_WAIT_CYCLES.get(sm, SINGLE_STAGE_WAIT_CYCLES[90])


def l2_bytes_per_clock_per_sm(sm: int) -> int:
    """L2_BYTES_PER_CLOCK_PER_SM of the target, the H100's where the target has none."""
    return L2_BYTES_PER_CLOCK_PER_SM.get(sm, L2_BYTES_PER_CLOCK_PER_SM[90])


def ffma_per_clock(arch: Arch) -> int:
    """Warp-level FFMA instructions an SM executes per clock."""
    return arch.fp32_lanes_per_sm // WARP


def arch(sm: int) -> Arch:
    return ARCHS[sm]


def arch_of(sm: int, arch_specific: bool = False) -> Arch:
    """The limits of a spec's target: `sm_90a` has those of sm_90 and wgmma."""
    return ARCH_SPECIFIC[sm] if arch_specific else ARCHS[sm]


def round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


# --- the register cap, and occupancy: resident blocks per SM, as cudaOccupancyMaxActiveBlocksPerMultiprocessor
# computes them


def launch_register_cap(arch: Arch, threads: int, blocks: int = 1) -> int:
    """The most registers per thread at which `blocks` blocks of `threads` threads are resident on an SM at
    once (the inverse of `register_limit`): what ptxas caps a kernel at under `__launch_bounds__(threads,
    blocks)`, what a block of Hopper's warp-specialized kernels holds at launch before setmaxnreg moves
    registers, and the most a register budget may ask for.

    The warps spread over the SM's sub-partitions, each holding a quarter of the register file; the fullest
    holds ceil(warps / 4) of them, and each warp is given registers in units of `register_alloc_unit`. So
    the figure is a multiple of 8 below the per-thread maximum: ptxas -v (nvcc 13.0, sm_90) reports 96 for
    `__launch_bounds__(192, 3)`, where 65,536 registers / 576 threads would allow 112, and 255 for 256
    threads."""
    warps = -(-threads // WARP) * blocks
    fullest = -(-warps // SUBPARTITIONS_PER_SM)
    per_warp = arch.registers_per_sm // SUBPARTITIONS_PER_SM // fullest
    return min(arch.max_registers_per_thread, per_warp // arch.register_alloc_unit * arch.register_alloc_unit // WARP)


def register_limit(arch: Arch, registers_per_thread: int, warps_per_block: int) -> int:
    """Blocks of `warps_per_block` warps the register file holds at `registers_per_thread` each (0 if none)."""
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


def unit_peak_tflops(unit: str, sm: int) -> float:
    """A unit's peak on the target's reference GPU, whichever instruction reaches it: the mma.sync or FMA
    table's, FP8's from wgmma (the only instruction that runs it); 3xTF32 a third of TF32's."""
    peaks = {**WGMMA_PEAK_TFLOPS.get(sm, {}), **PEAK_TFLOPS[sm]}
    return peaks["tf32"] / 3 if unit == "3xtf32" else peaks[unit]

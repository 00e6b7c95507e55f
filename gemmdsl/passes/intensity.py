"""Arithmetic intensity at the two levels the tiling controls.

Block level: each k-tile brings (BM + BN) * BK floats from global memory and does
2 * BM * BN * BK flops, so bigger (and squarer) blocks do more work per byte.
Warp level: per step of k a warp reads its tile's rows of A and columns of B from
shared memory once (lanes that share a row get it by broadcast) and does
2 * rows * cols flops; 4x8 lanes of 8x8 micro tiles cover 32x64 and beat 2x16
lanes, which cover 16x128 with the same flops but more bytes.

The bound is a roofline that holds: the unit's peak, or what DRAM sustains for the bytes every
launch must move (A and B read once, C written and, for alpha_beta, read, a fuse chain's operands read
once), whichever is lower.
The blocks request far more (each column of blocks re-reads A), but L2 serves the repeats: on the
H100 tf32_ldmatrix's 256x128 tile requests 42.7 flop/B, which DRAM alone would hold to 128 TFLOP/s,
and it ran at 196 (docs/performance.md, T13).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import ir
from ..grouped_schedule import ASSUMED_GROUPS
from ..targets import MEMORY_TBPS
from .framework import Context, PassResult
from .fuse import chain_dram_bytes
from .launch import tiles

if TYPE_CHECKING:
    from ..paths import InstructionPath


@dataclass(frozen=True)
class Intensity:
    block_flops_per_byte: float  # per k-tile, against global bytes
    warp_tile: ir.Pair  # C elements one warp computes
    warp_flops_per_byte: float  # per k step, against the distinct shared bytes the warp reads
    flops: int  # per launch
    global_bytes: dict[str, int]  # per launch: a, b, c as requested by the blocks (no cache reuse)
    dram_bytes: int  # per launch, what must cross DRAM: A and B once, C once or twice (perfect L2 reuse)
    unit: str  # what multiplies: fma, or the tensor cores' input type (bf16, f16, tf32, 3xtf32)
    peak_tflops: float  # of that unit on the target's reference GPU
    memory_tflops: float  # what DRAM's bandwidth sustains for dram_bytes
    bound_tflops: float  # the lower of the peak and memory_tflops

    @property
    def limit(self) -> str:
        return "memory" if self.memory_tflops < self.peak_tflops else self.unit

    @property
    def launch_flops_per_byte(self) -> float:
        return self.flops / sum(self.global_bytes.values())


def tile_intensity(rows: int, cols: int, element_bytes: int = 4) -> float:
    """Flops per byte of a rows x cols outer product per step of k."""
    return 2 * rows * cols / ((rows + cols) * element_bytes)


def launch_global_bytes(spec: ir.KernelSpec, m: int, n: int, k: int) -> dict[str, int]:
    """Each column of blocks reads all of A and each row all of B; C is written once (and read for beta)."""
    once = compulsory_bytes(spec, m, n, k)
    return {"a": once["a"] * tiles(n, spec.block.n), "b": once["b"] * tiles(m, spec.block.m), "c": once["c"]}


def compulsory_bytes(spec: ir.KernelSpec, m: int, n: int, k: int) -> dict[str, int]:
    """What any launch moves through DRAM at least: A and B read once (a grouped launch's B once per group, for
    the groups `check` assumes), C written once (and read for beta), the fuse chain's vectors and residual
    read once."""
    c_passes = 2 if spec.problem.epilogue is ir.Epilogue.ALPHA_BETA else 1
    size = {op: spec.problem.matrix(op).dtype.bytes for op in ir.Operand}
    b_matrices = ASSUMED_GROUPS if spec.problem.grouped else 1
    return {"a": m * k * size[ir.Operand.A], "b": b_matrices * k * n * size[ir.Operand.B],
            "c": m * n * c_passes * size[ir.Operand.C], **chain_dram_bytes(spec, m, n, k)}


def math_unit(spec: ir.KernelSpec, path: InstructionPath) -> tuple[str, float]:
    """What multiplies (the path's `unit`: fma, bf16, f16, tf32, 3xtf32, fp8), and its peak on the target's
    reference GPU in TFLOP/s by the spec's path (`peak_tflops`: wgmma's for Hopper's own path, else the FMA
    pipe's or mma.sync's)."""
    peaks = path.peak_tflops(spec.target.sm)
    unit = path.unit(spec)
    if unit == "3xtf32":  # three TF32 products
        return unit, peaks["tf32"] / 3
    return unit, peaks[unit]


class IntensityPass:
    name = "intensity"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"intensity"})

    def run(self, context: Context) -> PassResult:
        spec = context.spec
        tile = context.plan.path.warp_tile(spec)
        element_bytes = spec.problem.a.dtype.bytes
        m, n, k = context.problem
        unit, peak = math_unit(spec, context.plan.path)
        flops = 2 * m * n * k
        dram = sum(compulsory_bytes(spec, m, n, k).values())
        memory = flops / dram * MEMORY_TBPS[spec.target.sm]
        intensity = Intensity(
            block_flops_per_byte=tile_intensity(spec.block.m, spec.block.n, element_bytes),
            warp_tile=tile,
            warp_flops_per_byte=tile_intensity(tile.m, tile.n, element_bytes),
            flops=flops,
            global_bytes=launch_global_bytes(spec, m, n, k),
            dram_bytes=dram,
            unit=unit,
            peak_tflops=peak,
            memory_tflops=memory,
            bound_tflops=min(peak, memory),
        )
        arch = context.layout.arch
        verdict = (f"{intensity.block_flops_per_byte:.1f} flop/B from global memory per block, "
                   f"{intensity.warp_flops_per_byte:.1f} flop/B from shared memory per {tile} warp tile; "
                   f"{sum(intensity.global_bytes.values()) / 1e6:,.0f} MB requested per launch, {dram / 1e6:,.0f} MB "
                   f"through DRAM at least; {unit} peak {peak:.0f} TFLOP/s on the {arch.reference_gpu}, DRAM at "
                   f"{MEMORY_TBPS[spec.target.sm]} TB/s sustains {memory:.0f}; bound {intensity.bound_tflops:.0f} "
                   f"({intensity.limit})")
        return PassResult({"intensity": intensity}, verdict)

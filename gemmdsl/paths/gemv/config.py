"""The GEMV path's configuration: what a spec's keys mean for its kernel, and the lowering the shared stages read.

    mma      { shape: gemv; }             CUDA-core dot products along K, a lane 16 bytes of a row at a time
    block    { tile: 1x16x1024; }         BM x BN x BK: the tile's shorter side is the few rows of the small operand
                                          (here 1 row of A), its longer side the rows of the streamed operand (the
                                          weight: 16 rows of B, N x K as nn.Linear stores it); BK is the K a block
                                          covers per step: its K-warps x 32 lanes x the elements of 16 bytes x stages
    threads  { warps: 1x8; }              the block's warps: 1xW where B streams, Wx1 where A does
    pipeline { stages: 2; }               16-byte chunks of each row a lane keeps in flight per step

A block's warps split into K-warps (BK / (32 x 16 bytes' elements x stages) of them), which take interleaved
shares of K, by row-warps (the rest), which take the streamed rows in equal parts; every warp multiplies its rows
by all of the small operand's rows. Both operands are read along K, so the streamed one must be K-contiguous
(B column-major, or A row-major) and so must the small one.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ... import ir
from ...targets import ARCHS, WARP, Arch, launch_register_cap, occupancy_of

CHUNK_BYTES = 16  # a lane's load: one 16-byte vector
DEFAULT_STAGES = 2
MAX_SMALL_ROWS = 16  # rows of the small operand a block multiplies at once (registers: one sum per row pair)
REGISTER_OVERHEAD = 32  # pointers, offsets, loop counters and the window's selects beside the chunks and sums


@dataclass(frozen=True)
class GemvShape:
    """`mma { shape: gemv; }`: the path's instruction, CUDA-core FMAs over 16-byte chunks of rows."""

    @property
    def value(self) -> str:
        return "gemv"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class GemvConfig:
    """The kernel's compile-time shape."""

    streamed: ir.Operand  # the operand whose rows the tile's longer side counts (the weight)
    small_rows: int  # S: rows of the other operand per block
    rows: int  # R: rows of the streamed operand per block
    block_k: int  # K per block step
    warps: int
    stages: int  # chunks of each row in flight per lane
    element_bytes: int
    blocks_per_sm: int | None  # the spec's budget, for __launch_bounds__

    @property
    def vector(self) -> int:
        """Elements in a lane's 16-byte chunk."""
        return CHUNK_BYTES // self.element_bytes

    @property
    def warp_k(self) -> int:
        """K a warp covers per step: 32 lanes x a chunk x stages."""
        return WARP * self.vector * self.stages

    @property
    def k_warps(self) -> int:
        return max(1, self.block_k // self.warp_k)

    @property
    def row_warps(self) -> int:
        return max(1, self.warps // self.k_warps)

    @property
    def warp_rows(self) -> int:
        """Rows of the streamed operand each warp multiplies."""
        return max(1, self.rows // self.row_warps)

    @property
    def threads(self) -> int:
        return self.warps * WARP

    @property
    def smem_bytes(self) -> int:
        """The block's reduction buffer: each warp's sums, one f32 per (small row, streamed row)."""
        return self.k_warps * self.rows * self.small_rows * 4

    @property
    def registers(self) -> int:
        """The vector kernel's live registers per thread in its main loop: the chunks in flight of the warp's rows
        and the small rows, and the sums (the kernel for misaligned rows holds two chunks a window: more)."""
        words = CHUNK_BYTES // 4
        return self.stages * (self.warp_rows + self.small_rows) * words + self.small_rows * self.warp_rows \
            + REGISTER_OVERHEAD

    def problems(self) -> list[tuple[str, str, str]]:
        """What this configuration cannot be: (the key at fault, the message, a hint); empty where it can."""
        out = []
        if self.block_k % self.warp_k or self.block_k < self.warp_k:
            out.append(("tile", f"the block tile's K ({self.block_k}) must be a multiple of a warp's step, "
                                f"{self.warp_k} (32 lanes x {self.vector} elements of 16 bytes x {self.stages} "
                                "stages): K-warps share K in whole steps",
                        f"write K = {self.warp_k * max(1, self.warps // 2)}"))
        elif self.warps % self.k_warps:
            out.append(("tile", f"{self.k_warps} K-warps ({self.block_k} / {self.warp_k}) do not divide the "
                                f"{self.warps} warps", f"write K = {self.warp_k} x a divisor of {self.warps}"))
        elif self.rows % self.row_warps:
            out.append(("tile", f"the {self.rows} streamed rows per block do not split over {self.row_warps} "
                                "row-warps (the warps beside the K-warps)",
                        f"make the tile's longer side a multiple of {self.row_warps}"))
        return out


def gemv_config(spec: ir.KernelSpec) -> GemvConfig:
    """The configuration a validated spec's keys give (validate.py has checked them)."""
    block = spec.block
    streamed = ir.Operand.B if block.m < block.n else ir.Operand.A
    small, rows = (block.m, block.n) if streamed is ir.Operand.B else (block.n, block.m)
    return GemvConfig(streamed=streamed, small_rows=small, rows=rows, block_k=block.k,
                      warps=spec.threads.warps.m * spec.threads.warps.n, stages=spec.pipeline.stages,
                      element_bytes=spec.problem.a.dtype.bytes, blocks_per_sm=spec.budget.blocks_per_sm)


@dataclass(frozen=True)
class GemvLayout:
    """The plan's lowering (plan.Variant.layout): what the shared passes and tools read of a kernel (threads, block
    tile, shared memory, architecture, vector widths) and its configuration."""

    spec: ir.KernelSpec
    config: GemvConfig

    @property
    def arch(self) -> Arch:
        return ARCHS[self.spec.target.sm]

    @property
    def threads(self) -> int:
        return self.config.threads

    @property
    def bm(self) -> int:
        return self.spec.block.m

    @property
    def bn(self) -> int:
        return self.spec.block.n

    @property
    def bk(self) -> int:
        return self.spec.block.k

    @property
    def smem_bytes(self) -> int:
        return self.config.smem_bytes

    @property
    def element_bytes(self) -> int:
        return self.config.element_bytes

    def global_vector(self, operand: ir.Operand) -> int:
        """Elements per global access of the vector kernel: 16-byte chunks of A and B; C a scalar a thread."""
        return 1 if operand is ir.Operand.C else self.config.vector

    @cached_property
    def register_cap(self) -> int:
        """What __launch_bounds__ leaves a thread: the budget's blocks per SM resident, or one block."""
        return launch_register_cap(self.arch, self.threads, self.config.blocks_per_sm or 1)

    def blocks_per_sm(self, registers: int) -> int:
        """Blocks an SM holds at `registers` per thread, its threads and its reduction buffer."""
        return occupancy_of(self.arch, registers, self.threads, self.smem_bytes).blocks_per_sm

"""The GEMV path's configuration: what a spec's keys mean for its kernel, and the lowering the shared stages read.

    mma      { shape: gemv; }             CUDA-core dot products along K, a lane 16 bytes of a row at a time;
                                          `gemv_m16n8k16`: the same loads multiplied on the tensor cores (below)
    block    { tile: 1x16x1024; }         BM x BN x BK: the tile's shorter side is the few rows of the small operand
                                          (here 1 row of A), its longer side the rows of the streamed operand (the
                                          weight: 16 rows of B, N x K as nn.Linear stores it); BK is the K a block
                                          covers per step: its K-warps x 32 lanes x the elements of 16 bytes x stages
    threads  { warps: 1x8; }              the block's warps: 1xW where B streams, Wx1 where A does (which says
                                          which operand streams where the tile is square)
    pipeline { stages: 2; }               16-byte chunks of each row a lane keeps in flight per step

A block's warps split into K-warps (BK / (a warp's K per step) of them), which take interleaved shares of K, by
row-warps (the rest), which take the streamed rows in equal parts; every warp multiplies its rows by all of the
small operand's rows. Both operands are read along K, so the streamed one must be K-contiguous (B column-major, or
A row-major) and so must the small one.

With `gemv_m16n8k16` a warp multiplies 16-row tiles of the streamed operand (mma.sync's A operand) by 8-row tiles
of the small one (its B operand): the four lanes of a fragment row each load 16 bytes of that row, so a warp step
reads 64 contiguous bytes of each of its rows per stage, and both operands' fragments take the same permutation
of those 32 elements of K, which the dot product does not see. The small side is then 8 or 16 rows, each 16-row
tile of the streamed side a warp's, and the loads are double-buffered: a warp issues its next step's chunks
before it multiplies this step's.
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
# ... of the tensor kernel, whose lanes hold pointers to a few rows each: ptxas 13.0 (sm_90) fits
# hgemv_mma_8x16's 96 registers of chunks and 4 of sums in its 128 without spilling.
TENSOR_REGISTER_OVERHEAD = 24


MMA_TILE_ROWS = 16  # mma.sync m16n8k16: a tile of the streamed operand is its A operand's 16 rows ...
MMA_SMALL_ROWS = 8  # ... and the small operand's 8 rows its B operand's N
QUAD = 4  # the lanes that share a fragment row: each loads 16 bytes of it a stage


@dataclass(frozen=True)
class GemvShape:
    """`mma { shape: gemv; }`: the path's instruction, CUDA-core FMAs over 16-byte chunks of rows;
    `gemv_m16n8k16` (mma_k = 16): the same dot products on the tensor cores, mma.sync m16n8k16."""

    mma_k: int | None = None

    @property
    def tensor(self) -> bool:
        return self.mma_k is not None

    @property
    def value(self) -> str:
        return f"gemv_m16n8k{self.mma_k}" if self.tensor else "gemv"

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
    tensor: bool = False  # mma.sync m16n8k16 multiplies (`gemv_m16n8k16`), not CUDA-core FMAs

    @property
    def vector(self) -> int:
        """Elements in a lane's 16-byte chunk."""
        return CHUNK_BYTES // self.element_bytes

    @property
    def warp_k(self) -> int:
        """K a warp covers per step: 32 lanes x a chunk x stages (CUDA cores: every lane on each row), or a quad of
        lanes x a chunk x stages (tensor cores: the quads on different rows)."""
        return (QUAD if self.tensor else WARP) * self.vector * self.stages

    @property
    def tiles(self) -> int:
        """The tensor kernel's 16-row tiles of the streamed operand a warp multiplies."""
        return self.warp_rows // MMA_TILE_ROWS

    @property
    def small_tiles(self) -> int:
        """The tensor kernel's 8-row tiles of the small operand."""
        return self.small_rows // MMA_SMALL_ROWS

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
        if self.tensor:  # two buffers of a lane's chunks (two rows of each tile, one of each small tile), and the
            # accumulator fragments (4 a tile pair)
            return 2 * self.stages * (2 * self.tiles + self.small_tiles) * words \
                + 4 * self.tiles * self.small_tiles + TENSOR_REGISTER_OVERHEAD
        return self.stages * (self.warp_rows + self.small_rows) * words + self.small_rows * self.warp_rows \
            + REGISTER_OVERHEAD

    @property
    def register_parts(self) -> str:
        """What `registers` counts, for a diagnostic."""
        if self.tensor:
            return (f"two buffers of {self.stages} stages of {self.tiles} tile(s)' and {self.small_tiles} small "
                    "tile(s)' chunks, and the accumulators")
        return (f"{self.stages} stages of {self.warp_rows} streamed and {self.small_rows} small rows' chunks, and "
                "their sums")

    def problems(self) -> list[tuple[str, str, str]]:
        """What this configuration cannot be: (the key at fault, the message, a hint); empty where it can."""
        out = []
        lanes = f"{QUAD} lanes a row" if self.tensor else "32 lanes"
        if self.block_k % self.warp_k or self.block_k < self.warp_k:
            out.append(("tile", f"the block tile's K ({self.block_k}) must be a multiple of a warp's step, "
                                f"{self.warp_k} ({lanes} x {self.vector} elements of 16 bytes x {self.stages} "
                                "stages): K-warps share K in whole steps",
                        f"write K = {self.warp_k * max(1, self.warps // 2)}"))
        elif self.warps % self.k_warps:
            out.append(("tile", f"{self.k_warps} K-warps ({self.block_k} / {self.warp_k}) do not divide the "
                                f"{self.warps} warps", f"write K = {self.warp_k} x a divisor of {self.warps}"))
        elif self.rows % self.row_warps:
            out.append(("tile", f"the {self.rows} streamed rows per block do not split over {self.row_warps} "
                                "row-warps (the warps beside the K-warps)",
                        f"make the tile's longer side a multiple of {self.row_warps}"))
        elif self.tensor and self.warp_rows % MMA_TILE_ROWS:
            out.append(("tile", f"each row-warp takes {self.warp_rows} streamed rows: mma.sync m16n8k16 multiplies "
                                f"whole tiles of {MMA_TILE_ROWS}", f"make the tile's longer side "
                                f"{MMA_TILE_ROWS * self.row_warps} or a multiple of it"))
        if self.tensor and self.small_rows % MMA_SMALL_ROWS:
            out.append(("tile", f"the tile's shorter side ({self.small_rows}) is rows of the small operand: "
                                f"mma.sync m16n8k16 takes them {MMA_SMALL_ROWS} at a time", "write 8 or 16"))
        return out


def streamed_operand(spec: ir.KernelSpec) -> ir.Operand | None:
    """The operand on the block tile's longer side; for a square tile (the tensor kernel's 16x16), the one the warps
    lie along (`warps: 1xW`: B, `Wx1`: A); None where neither tells."""
    block, warps = spec.block, spec.threads.warps
    if block.m != block.n:
        return ir.Operand.B if block.m < block.n else ir.Operand.A
    if warps.m == warps.n:
        return None
    return ir.Operand.B if warps.m < warps.n else ir.Operand.A


def gemv_config(spec: ir.KernelSpec) -> GemvConfig:
    """The configuration a validated spec's keys give (validate.py has checked them)."""
    block = spec.block
    streamed = streamed_operand(spec)
    small, rows = (block.m, block.n) if streamed is ir.Operand.B else (block.n, block.m)
    return GemvConfig(streamed=streamed, small_rows=small, rows=rows, block_k=block.k,
                      warps=spec.threads.warps.m * spec.threads.warps.n, stages=spec.pipeline.stages,
                      element_bytes=spec.problem.a.dtype.bytes, blocks_per_sm=spec.budget.blocks_per_sm,
                      tensor=spec.mma.shape.tensor)


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

"""The lowering of a wgmma spec (Hopper's own path, `target sm_90a;`): one object that validation,
the analysis passes, the emitters and the launch metadata all read, so they cannot disagree.

The kernel it describes (gemmdsl/paths/wgmma/kernel.py):

- a block of `warpgroups` consumer warpgroups and `producers` producer warpgroups (128 threads each);
- a ring of `stages` shared-memory stages, each one k-tile of A (BM x BK) and of B (BN x BK), written
  by TMA in the 128-byte swizzle as they lie in global memory and read by wgmma through matrix
  descriptors: a k-major operand (A row-major, B column-major) as rows of BK elements (128 bytes), an
  MN-major one (A column-major, B row-major) as 64-wide panels of m or n, BK rows of k each, read
  through the transposed descriptor; every stage has a `full` mbarrier (TMA's bytes arrived) and an
  `empty` one (every consumer warpgroup is done with it);
- one producer thread issues the bulk tensor copies of each k-tile (one box per k-major operand, one
  per panel of an MN-major one); each consumer warpgroup
  multiplies its BM / warpgroups rows by all BN columns with wgmma m64nNk16 (m64nNk8 for TF32),
  m_repeat x n_repeat instructions per 32-byte k-step;
- 3xTF32 only: the producer warpgroup's other three warps split each landed stage of B: its words are
  the big parts as they are (wgmma reads them truncated to TF32), and they write the small parts to a
  buffer beside the ring, behind a third `ready` mbarrier per stage; the consumers load A's fragments into registers and split them there (paths/wgmma/split.py);
- registers move from the producers to the consumers with setmaxnreg after the launch;
- blocks walk C tiles `tile = blockIdx.x; tile += gridDim.x` (schedule: persistent launches
  min(tiles, SMs) blocks; schedule: tiles one block per tile) through the spec's raster;
  schedule: pingpong is persistent, and deals the block's tiles out to its consumer warpgroups in
  turn, each multiplying a whole tile (paths/wgmma/pingpong.py);
  schedule: stream_k is persistent too, and its blocks first share the last wave's tiles' k-tiles
  (schedule.py; paths/wgmma/stream_k.py), leaving partial sums in a workspace for the block that
  finishes each shared tile.

Scope (paths/wgmma/validate.py rejects the rest with a diagnostic): bf16 or f16 A and B in any of the four
layouts, or f32 A and B multiplied as TF32 with k contiguous (`a: f32 row; b: f32 col`: TF32 wgmma
has no transpose); the 128-byte swizzle; BK * element bytes = 128 when an operand is k-major; C in
f32, bf16 or f16, row-major.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ... import ir
from ...layout import ChainReads
from ...targets import WARP, WARPGROUP, Arch, arch_of, launch_register_cap

WGMMA_M = 64  # rows of C one wgmma produces
SWIZZLE_SPAN = 128  # bytes: the 128-byte swizzle's row, one k-tile row (BK = 64 16-bit or 32 f32 elements)
SWIZZLE_ATOM = 1024  # bytes: 8 rows of 128 bytes, the pattern's period; stages start on this boundary
CHUNK = 16  # bytes: the unit the swizzle permutes
STORE_BUFFERS = 2  # staged C boxes per warp (`store: tma`): one filling while the other is stored
WARPS_PER_WARPGROUP = WARPGROUP // WARP
WARP_ROWS = WGMMA_M // WARPS_PER_WARPGROUP  # rows of a wgmma tile's accumulators one warp holds
MAX_BOX = 256  # elements: the most a TMA box may span in any dimension
MBARRIER_BYTES = 8
# setmaxnreg.dec's choices for the producer warpgroup, most first. Its TMA thread keeps a loop, two
# coordinates and a barrier address; 40 (CUTLASS's figure) is kept unless the consumers need more, as
# three consumers of 128 accumulators do (24 is setmaxnreg's least). 3xTF32's splitting warps keep 40.
PRODUCER_REGISTERS = (40, 32, 24)
MAX_SETMAXNREG = 240  # the most setmaxnreg.inc asks for (it takes multiples of 8 up to 256; ptxas caps at 255)
# What a consumer thread needs besides its accumulators: descriptors, stage and barrier addresses, tile
# coordinates, loop counters, alpha/beta and the epilogue's temporaries. The hand prototype (128
# accumulators) compiled without spills under a 168-register cap, so 32 leaves some margin.
CONSUMER_RESERVE = 32
# 3xTF32's main loop holds two sets of accumulators and A's fragments at once; besides them it keeps
# only a stage address, two descriptors, the loop's counters and the fragments' row address (the
# epilogue's temporaries come after `part` and the fragments are dead); promoted FP8's loop keeps the same few. ptxas compiled
# sgemm_3xtf32_h100 (160 such registers, 168 with this) and sgemm_3xtf32_h100_128x192 (224, 232: all
# that setmaxnreg gives) without spilling (nvcc 13.0, 2026-11-23).
SPLIT_LOOP_RESERVE = 8
# ptxas compiles each wgmma within the launch's register cap, before setmaxnreg raises the consumers: one
# instruction's accumulators (and A's fragment words when they come from registers) plus this many must fit,
# or it stops with C7602 ("Insufficient registers (128) to compile instruction ... Try ... 154"). Measured
# with nvcc 13.0 for sm_90a (2026-11-26): m64n256k16 (128 accumulators) asked for 154 under 3 consumer
# warpgroups' cap of 128; m64n192k16 (96) compiled there, m64n128k16 (64) under 4 consumers' cap of 96.
WGMMA_INSTRUCTION_RESERVE = 26
# wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address >> 4 in
# bits 0-13, leading-dimension byte offset >> 4 in 16-29, stride-dimension byte offset >> 4 in 32-45,
# the swizzle mode in 62-63 (1 = 128-byte swizzle). In the 128-byte swizzle a k-major operand's rows
# are k-tile rows of 128 bytes: the leading offset is unused (1 by convention) and the stride offset is
# one 8-row atom, 1024 bytes. An MN-major operand's rows are k, each 64 elements of m or n (128 bytes)
# wide: the stride offset is again 1024 bytes (8 k rows), the leading offset the distance between two
# such 64-wide column panels (one TMA box each). The hand prototype of an MN-major B (docs/performance.md, Hopper)
# checked this assignment against cuBLAS; swapped, the results were wrong.
K_MAJOR_LBO = 1
ATOM_SBO = SWIZZLE_ATOM >> 4
DESCRIPTOR_SWIZZLE_128B = 1


def swizzled_offset(row: int, byte: int) -> int:
    """Where TMA's 128-byte swizzle puts byte `byte` (< 128) of row `row` of a tile whose rows
    are 128 bytes, relative to a 1024-byte aligned start: the 16-byte chunk index within the row is
    xor-ed with row % 8. This is CuTe's Swizzle<3, 4, 3> on byte offsets, and what the descriptor's
    128B mode reads back."""
    assert 0 <= byte < SWIZZLE_SPAN
    chunk = (byte // CHUNK) ^ (row % 8)
    return row * SWIZZLE_SPAN + chunk * CHUNK + byte % CHUNK


def descriptor(address: int, leading: int = K_MAJOR_LBO, stride: int = ATOM_SBO) -> int:
    """The 64-bit wgmma descriptor of a 128B-swizzled tile at shared address `address`; `leading` and
    `stride` are the byte offsets >> 4 (a k-major tile's by default)."""
    return (((address & 0x3FFFF) >> 4) | leading << 16 | stride << 32 | DESCRIPTOR_SWIZZLE_128B << 62)


@dataclass(frozen=True)
class TmaBox:
    """One operand's tensor map: a 2-D view of the operand as it lies in global memory (dimension 0
    contiguous) and the box one copy brings. A k-major operand (A row-major, B column-major) is one box
    per stage, BK x rows; an MN-major one (A column-major, B row-major) is `count` boxes of 64 elements
    of m or n (the 128-byte span) by BK rows of k, side by side in the stage."""

    operand: ir.Operand
    k_major: bool
    inner: int  # box elements along dimension 0 (k, or m / n)
    outer: int  # box elements along dimension 1
    count: int  # boxes per stage
    element_bytes: int
    swizzle_bytes: int
    data_type: str  # what TMA reads the elements as: bf16, f16, f32 (as they are) or tf32 (rounded to TF32)

    @property
    def dims(self) -> tuple[str, str]:
        """The global extents of dimension 0 and 1, by name."""
        if self.operand is ir.Operand.C:  # row-major M x N
            return "N", "M"
        rows = "M" if self.operand is ir.Operand.A else "N"
        return ("K", rows) if self.k_major else (rows, "K")

    @property
    def bytes(self) -> int:
        """Of one box; a stage holds `count` of them."""
        return self.inner * self.outer * self.element_bytes


class WgmmaLayout:
    """Sizes, counts and byte offsets of one wgmma kernel; cheap to build, read by everything."""

    def __init__(self, spec: ir.KernelSpec):
        assert spec.mma is not None and isinstance(spec.mma.shape, ir.WgmmaShape)
        self.spec = spec
        self.arch: Arch = arch_of(spec.target.sm, spec.target.arch_specific)
        self.shape: ir.WgmmaShape = spec.mma.shape
        self.bm, self.bn, self.bk = spec.block.m, spec.block.n, spec.block.k
        self.stages = spec.pipeline.stages
        self.consumers = spec.threads.warpgroups
        self.producers = spec.threads.producers
        self.threads = (self.consumers + self.producers) * WARPGROUP
        self.element_bytes = spec.problem.a.dtype.bytes
        self.swizzle_bytes = spec.smem_a.swizzle_bytes or SWIZZLE_SPAN
        # Stream-K, batches and scalar variants do not exist on this path (validate rejects them).
        self.max_global_vector = 0
        # 3xTF32: every f32 is split into a TF32 big part and a TF32 small part, and three products
        # (big x big, big x small, small x big) are summed (paths/wgmma/split.py).
        self.split = spec.mma.precision is ir.Precision.TF32X3
        self.products = 3 if self.split else 1
        self.tma_store = spec.pipeline.store is ir.StoreMode.TMA

    # --- the consumers' tiles ------------------------------------------------------------------

    @property
    def pingpong(self) -> bool:
        """`schedule: pingpong`: each consumer warpgroup multiplies tiles of its own, their main loops in turn,
        so one consumer's epilogue runs while another's main loop keeps the tensor cores busy."""
        return self.spec.block.schedule is ir.Schedule.PINGPONG

    @property
    def tile_consumers(self) -> int:
        """Consumer warpgroups that share one tile (and read each stage of the ring): all, or one (pingpong)."""
        return 1 if self.pingpong else self.consumers

    @property
    def consumer_rows(self) -> int:
        """Rows of the block tile each consumer warpgroup multiplies (all BN columns)."""
        return self.bm // self.tile_consumers

    @property
    def consumer_row(self) -> str:
        """C: a consumer's first row within its tile, followed by ` + `; nothing where each has a whole tile."""
        return "" if self.pingpong else "consumer * CONSUMER_ROWS + "

    def consumer_a(self, stage: str) -> str:
        """C: where a consumer's rows of A begin in the stage at `stage`."""
        return stage if self.pingpong else f"{stage} + consumer * CONSUMER_ROWS * BK * {self.element_bytes}"

    @property
    def m_repeat(self) -> int:
        return self.consumer_rows // WGMMA_M

    @property
    def n_repeat(self) -> int:
        return self.bn // self.shape.n

    @property
    def k_steps(self) -> int:
        """wgmma instructions along k per k-tile (per m and n repeat)."""
        return self.bk // self.shape.k

    @property
    def instruction_note(self) -> str:
        """The instruction the consumers issue, for check's report."""
        return str(self.shape)

    @property
    def accumulators(self) -> int:
        """f32 accumulators per consumer thread: each m64nN instruction spreads 64 x N over 128 threads."""
        return self.m_repeat * self.n_repeat * WGMMA_M * self.shape.n // WARPGROUP

    def chain_reads(self) -> ChainReads:
        """The consumers keep their rows' values (two rows per 64-row instruction tile) and read each pair's
        columns again (paths/wgmma/epilogue.py: too many columns per thread to keep), all from the tile's
        vectors the producer staged in shared memory."""
        return ChainReads(self.tile_consumers * WARPGROUP, 2 * self.m_repeat, 0, cols_per_element=True,
                          staged_bytes=self.tile_vector_bytes, residual_ahead=self.residual_ahead,
                          residual_copied=self.staged_residual)

    @property
    def staged_residual(self) -> bool:
        """16-bit C stored by stmatrix boxes with a row-major 16-bit residual: R comes through the boxes' buffers
        (paths/wgmma/stmatrix.py), where its 16-byte rows land as C's will leave."""
        residual = self.spec.fuse.residual if self.spec.fuse is not None else None
        return (self.stmatrix_store and residual is not None and residual.layout is ir.MatrixLayout.ROW
                and residual.dtype.bytes == 2)

    @property
    def residual_ahead(self) -> float:
        """The share of R's tile copied before the epilogue: each warp's first STORE_BUFFERS boxes, started with
        the tile's main loop (the others follow in the epilogue, as buffers free up)."""
        if not self.staged_residual:
            return 0.0
        return min(STORE_BUFFERS, self.c_box.count) / self.c_box.count

    @property
    def wgmma_per_k_tile(self) -> int:
        return self.m_repeat * self.n_repeat * self.k_steps * self.products

    @property
    def a_in_registers(self) -> bool:
        """3xTF32 reads A's fragments into registers and splits them there (wgmma takes A from registers,
        B only from shared memory); the other paths leave both operands in shared memory."""
        return self.split

    @property
    def a_fragment_registers(self) -> int:
        """Per consumer thread, with A in registers: a k-tile's fragments (4 words per m64 x k8 step and
        m repeat), twice over for 3xTF32's big and small parts. They stay live until the k-tile's group
        has finished, since wgmma reads them asynchronously."""
        if not self.a_in_registers:
            return 0
        return 2 * self.m_repeat * self.k_steps * WGMMA_M * self.shape.k // WARPGROUP

    @property
    def smem_read_bytes_per_k_tile(self) -> int:
        """What wgmma reads from shared memory per block and k-tile: each instruction reads its N x k
        slice of B, and its 64 x k slice of A unless A comes from registers."""
        step = self.shape.k * self.element_bytes
        a_rows = 0 if self.a_in_registers else WGMMA_M
        return self.tile_consumers * self.wgmma_per_k_tile * (a_rows + self.shape.n) * step

    @property
    def split_lsu_bytes_per_k_tile(self) -> int:
        """3xTF32's ordinary shared-memory traffic per block and k-tile (paths/wgmma/split.py): the
        splitter warps read B's stage and write its small parts beside it; the consumers load A's stage
        into registers. None on the other paths."""
        if not self.split:
            return 0
        return self.stage_bytes_of(ir.Operand.A) + 2 * self.stage_bytes_of(ir.Operand.B)

    @property
    def splitter_threads(self) -> int:
        """3xTF32: the producer warpgroup's warps 1-3, which split each landed stage of B (warp 0 issues
        TMA); 0 on the other paths."""
        return WARPGROUP - WARP if self.split else 0

    # --- shared memory ------------------------------------------------------------------------

    def stage_bytes_of(self, operand: ir.Operand) -> int:
        rows = self.bm if operand is ir.Operand.A else self.bn
        return rows * self.bk * self.element_bytes

    @property
    def stage_bytes(self) -> int:
        """One k-tile of A and of B: what TMA writes and one `full` barrier waits for."""
        return self.stage_bytes_of(ir.Operand.A) + self.stage_bytes_of(ir.Operand.B)

    @property
    def ring_bytes(self) -> int:
        return self.stages * self.stage_bytes

    @property
    def mbarriers(self) -> int:
        """A `full` and an `empty` barrier per stage, and for 3xTF32 a `ready` one (B's stage is split); a
        `vectors_full` and a `vectors_empty` one per buffer of the staged vectors of a fuse chain; under pingpong a
        `turn` one per consumer (paths/wgmma/pingpong.py)."""
        return ((3 if self.split else 2) * self.stages + 2 * self.vector_buffers * self.staged_vectors
                + self.consumers * self.pingpong)

    @property
    def vector_buffers(self) -> int:
        """Tiles whose vectors are staged at once: the block's one, or under pingpong one per consumer."""
        return self.consumers if self.pingpong else 1

    @cached_property
    def vector_offsets(self) -> dict[str, int]:
        """The fuse chain's vectors of one tile as the producer stages them (paths/wgmma/epilogue.py): each
        vector's first float in the buffer; BM floats of a vector along m, BN of one along n."""
        offsets, at = {}, 0
        for name, extent in self._vector_extents:
            offsets[name] = at
            at += extent
        return offsets

    @property
    def _vector_extents(self) -> list[tuple[str, int]]:
        return [(name, self.bm if axis is ir.Broadcast.M else self.bn)
                for name, axis, _ in (self.spec.fuse.vectors if self.spec.fuse is not None else ())]

    @property
    def staged_vectors(self) -> bool:
        """The chain has vectors (a bias, scales), so the producer stages each tile's in shared memory."""
        return bool(self.vector_offsets)

    @property
    def vector_bytes(self) -> int:
        """The staged vectors' buffers: `vector_buffers` tiles' values."""
        return self.vector_buffers * self.tile_vector_bytes

    @property
    def tile_vector_bytes(self) -> int:
        """One tile's staged vectors as f32 (BM and BN are multiples of 64, so whole 16-byte units and the
        barriers after them stay aligned)."""
        return 4 * sum(extent for _, extent in self._vector_extents)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per block: the ring, the split buffer (3xTF32), C's staging (store: tma), the
        fuse chain's staged vectors, the barriers, and the
        slack that lets the kernel align the ring to the swizzle's 1024-byte period (the runtime
        guarantees only 16 bytes)."""
        return (self.ring_bytes + self.split_bytes + self.staging_bytes + self.vector_bytes
                + self.mbarriers * MBARRIER_BYTES + SWIZZLE_ATOM)

    @property
    def staging_bytes(self) -> int:
        """`store: tma`: STORE_BUFFERS boxes of C per warp or per consumer warpgroup, whichever fills a box
        (paths/wgmma/store.py)."""
        if self.c_box is None:
            return 0
        return self.consumers * (WGMMA_M // self.c_box.outer) * STORE_BUFFERS * self.c_box.bytes

    @property
    def split_bytes(self) -> int:
        """3xTF32: B's small parts, one k-tile per stage in B's own layout (the split is elementwise), so
        that the splitter warps run as far ahead as TMA does: stage s's small parts are rewritten only
        after `empty[s]`, when no wgmma reads them any more."""
        return self.stages * self.stage_bytes_of(ir.Operand.B) if self.split else 0

    # --- TMA -----------------------------------------------------------------------------------

    def k_major(self, operand: ir.Operand) -> bool:
        """k contiguous in shared memory (and, as validated, in global memory)."""
        return self.spec.smem(operand).order in (ir.SmemOrder.MK, ir.SmemOrder.NK)

    @property
    def tma_data_type(self) -> str:
        """f32 operands reach shared memory rounded to TF32 by TMA itself (one TF32 product), or as they
        are for 3xTF32, which splits each word into two TF32 parts (paths/wgmma/split.py)."""
        dtype = self.spec.problem.a.dtype
        if dtype is ir.DType.F32:
            return "f32" if self.split else "tf32"
        return dtype.value

    @cached_property
    def boxes(self) -> dict[ir.Operand, TmaBox]:
        boxes = {}
        for op in (ir.Operand.A, ir.Operand.B):
            rows = self.bm if op is ir.Operand.A else self.bn
            if self.k_major(op):
                boxes[op] = TmaBox(op, True, self.bk, rows, 1, self.element_bytes, self.swizzle_bytes,
                                   self.tma_data_type)
            else:
                wide = self.swizzle_bytes // self.element_bytes
                boxes[op] = TmaBox(op, False, wide, self.bk, rows // wide, self.element_bytes, self.swizzle_bytes,
                                   self.tma_data_type)
        return boxes

    @property
    def stmatrix_store(self) -> bool:
        """`store: tma` with 16-bit C: each warp stages its own boxes by stmatrix (paths/wgmma/stmatrix.py)."""
        return self.tma_store and self.spec.problem.c.dtype.bytes == 2

    @cached_property
    def c_box(self) -> TmaBox | None:
        """`store: tma`: the box one bulk tensor store writes, one 128-byte swizzle span of C by the rows
        of a wgmma tile that fill it: a warp's 16 for 16-bit C (`stmatrix_store`), the warpgroup's 64 for
        f32; `count` boxes cover those rows of the consumer's tile. None for direct stores."""
        if not self.tma_store:
            return None
        c = self.spec.problem.c.dtype
        wide = SWIZZLE_SPAN // c.bytes
        rows = WARP_ROWS if self.stmatrix_store else WGMMA_M
        return TmaBox(ir.Operand.C, False, wide, rows, self.m_repeat * self.bn // wide, c.bytes, SWIZZLE_SPAN,
                      c.value)

    @property
    def global_alignment_bytes(self) -> int:
        """TMA's rule for the tensor in global memory: base address and row stride multiples of 16 bytes."""
        return 16

    @property
    def ld_multiple(self) -> int:
        """What lda and ldb must be multiples of, in elements."""
        return self.global_alignment_bytes // self.element_bytes

    # --- registers -----------------------------------------------------------------------------

    @property
    def entry_registers(self) -> int:
        """Registers per thread at launch (the cap ptxas compiles the whole kernel under)."""
        return launch_register_cap(self.arch, self.threads)

    @cached_property
    def producer_registers(self) -> int:
        """What setmaxnreg.dec leaves each producer thread: the most of PRODUCER_REGISTERS that still
        gives the consumers what they need (the first when none does, for validation to report)."""
        if self.split:
            return PRODUCER_REGISTERS[0]
        fitting = [r for r in PRODUCER_REGISTERS if self._consumer_share(r) >= self.consumer_registers_needed]
        return fitting[0] if fitting else PRODUCER_REGISTERS[0]

    def instruction_registers(self, n: int | None = None) -> int:
        """What ptxas needs to compile one wgmma (of N = `n`, default the spec's) under the launch cap:
        its accumulators, A's fragment words when they come from registers, WGMMA_INSTRUCTION_RESERVE."""
        a_words = WGMMA_M * self.shape.k * self.element_bytes // 4 // WARPGROUP if self.a_in_registers else 0
        return WGMMA_M * (n or self.shape.n) // WARPGROUP + a_words + WGMMA_INSTRUCTION_RESERVE

    @property
    def consumer_registers(self) -> int:
        """What setmaxnreg.inc gives each consumer thread."""
        return self._consumer_share(self.producer_registers)

    def _consumer_share(self, producer_registers: int) -> int:
        """The block's registers at launch, less what the producers keep, shared by the consumers
        (multiples of 8, at most MAX_SETMAXNREG)."""
        pool = self.entry_registers * (self.consumers + self.producers) - self.producers * producer_registers
        return min(MAX_SETMAXNREG, pool // self.consumers // 8 * 8)

    @property
    def consumer_registers_needed(self) -> int:
        """The accumulators and the reserve; for 3xTF32, whose k-tile sums its products in a second set
        of accumulators before adding them to the first in FP32, at least both sets, A's fragments and
        the main loop's few addresses."""
        epilogue = self.accumulators + CONSUMER_RESERVE
        if not self.part_registers:
            return epilogue
        return max(epilogue, self.main_loop_registers + SPLIT_LOOP_RESERVE)

    @property
    def part_registers(self) -> int:
        """Per consumer thread, the second set of accumulators a k-tile sums into before adding it to the
        first in FP32 (3xTF32's `part`); 0 where wgmma accumulates the whole K."""
        return self.accumulators if self.split else 0

    # What a k-tile's waits for its groups and its FP32 adds of `part` are, for check's cycle model.
    part_note = "3xTF32's wait and FP32 adds"

    @property
    def register_summary(self) -> str:
        """What a consumer's registers hold, for check's report."""
        fragments = f", {self.a_fragment_registers} of A's fragment words" if self.a_in_registers else ""
        return f"{'2 x ' if self.split else ''}{self.accumulators} accumulators{fragments}"

    @property
    def waited_groups_per_k_tile(self) -> int:
        """wgmma groups a consumer waits for within each k-tile before adding a second set of accumulators
        into the first (3xTF32's one); 0 where one group stays in flight across k-tiles."""
        return 1 if self.split else 0

    @property
    def accumulator_sets(self) -> str:
        """What the register diagnostic says of accumulators held twice over."""
        return " (two sets: 3xTF32 sums each k-tile's products apart)" if self.split else ""

    def fewer_registers_hint(self, have: int) -> str:
        """How to fit the accumulators into the `have` registers setmaxnreg gives a consumer."""
        return (f"use more consumer warpgroups or a smaller block tile (at most "
                f"{(have - CONSUMER_RESERVE) * WARPGROUP // WGMMA_M} columns x 64 rows per warpgroup)")

    @property
    def main_loop_registers(self) -> int:
        """What a consumer's main loop holds across a k-tile's wgmma: the accumulators (twice over for
        3xTF32) and A's fragments when they are in registers."""
        return self.accumulators + self.part_registers + self.a_fragment_registers

    # --- descriptors ---------------------------------------------------------------------------

    def descriptor_offsets(self, operand: ir.Operand) -> tuple[int, int]:
        """(leading, stride) byte offsets >> 4 of the operand's descriptors."""
        if self.k_major(operand):
            return K_MAJOR_LBO, ATOM_SBO
        return self.boxes[operand].bytes >> 4, ATOM_SBO

    def k_step(self, operand: ir.Operand) -> int:
        """What to add to a descriptor (start address >> 4) to move by one k-step: 32 bytes along a
        k-major row, or shape.k rows of 128 bytes down an MN-major panel."""
        if self.k_major(operand):
            return self.shape.k * self.element_bytes >> 4
        return self.shape.k * SWIZZLE_SPAN >> 4

    def row_step(self, operand: ir.Operand) -> int:
        """What to add to a descriptor to move to the next instruction's rows: 64 rows of A or N of B.
        Either way these rows take rows x BK elements of the stage (whole rows of a k-major tile, whole
        64-wide panels of an MN-major one)."""
        rows = WGMMA_M if operand is ir.Operand.A else self.shape.n
        return rows * self.bk * self.element_bytes >> 4

    # --- the launch ----------------------------------------------------------------------------

    @property
    def persistent(self) -> bool:
        """One wave of blocks walks the tiles (schedule: persistent, and stream_k and pingpong, which are persistent)."""
        return self.spec.block.schedule in (ir.Schedule.PERSISTENT, ir.Schedule.STREAM_K, ir.Schedule.PINGPONG)

    @property
    def stream_k(self) -> bool:
        return self.spec.block.stream_k

    @property
    def batched(self) -> bool:
        """`batch: strided`: every tensor map has a third dimension, the GEMM, and the blocks walk the tiles of
        every GEMM of the batch."""
        return self.spec.problem.batched

    @property
    def grouped(self) -> bool:
        """`batch: grouped` (paths/wgmma/grouped.py): the groups' tiles in one persistent walk; B's map has a third
        dimension, the group, and A's and C's maps (all tokens' rows) a third dimension of one."""
        return self.spec.problem.grouped

    @property
    def three_d_maps(self) -> bool:
        """Whether the tensor maps are 3-D (the kernel loads and stores with a third coordinate)."""
        return self.batched or self.grouped

    def map_index(self, operand: ir.Operand) -> str:
        """The third coordinate of `operand`'s map in a tile's copies and stores, as C: the tile's GEMM of a batch;
        the tile's group for a grouped B, and 0 for a grouped A and C (all groups' rows lie in one matrix)."""
        if self.batched:
            return "gemm"
        return "group" if operand is ir.Operand.B else "0"

    @property
    def partial_bytes(self) -> int:
        """A stream-K block's slot of the workspace: the tile's accumulators, BM x BN floats."""
        return self.bm * self.bn * 4

    # Shared with the other lowerings' interface (plan.py, compiler.py read these).
    def global_vector(self, operand: ir.Operand) -> int:
        """Elements an operand's pointer and leading dimension must be multiples of: TMA's 16 bytes
        for A and B; C's stores test their alignment in the kernel and take any."""
        return 1 if operand is ir.Operand.C else self.ld_multiple

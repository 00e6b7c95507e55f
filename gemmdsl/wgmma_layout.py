"""The lowering of a wgmma spec (Hopper's own path, `target sm_90a;`): one object that validation,
the analysis passes, the emitters and the launch metadata all read, so they cannot disagree.

The kernel it describes (gemmdsl/emit/wgmma_kernel.py):

- a block of `warpgroups` consumer warpgroups and `producers` producer warpgroups (128 threads each);
- a ring of `stages` shared-memory stages, each one k-tile of A (BM x BK) and of B (BN x BK), both
  k-major (k contiguous), written by TMA in the 128-byte swizzle and read by wgmma through matrix
  descriptors; every stage has a `full` mbarrier (TMA's bytes arrived) and an `empty` one (every
  consumer warpgroup is done with it);
- one producer thread issues the two bulk tensor copies of each k-tile; each consumer warpgroup
  multiplies its BM / warpgroups rows by all BN columns with wgmma m64nNk16 (m64nNk8 for TF32),
  m_repeat x n_repeat instructions per 32-byte k-step;
- registers move from the producers to the consumers with setmaxnreg after the launch;
- blocks walk C tiles `tile = blockIdx.x; tile += gridDim.x` (schedule: persistent launches
  min(tiles, SMs) blocks; schedule: tiles one block per tile) through the spec's raster.

Scope (validate_wgmma.py rejects the rest with a diagnostic): bf16 or f16 A and B, or f32 A and B
multiplied as TF32, with k contiguous in global and shared memory (`a: T row`, `b: T col`), the
128-byte swizzle with BK * element bytes = 128, C in f32, bf16 or f16, row-major.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from . import ir
from .targets import Arch, arch_of

WARPGROUP = 128  # threads: 4 warps issue one wgmma together
WGMMA_M = 64  # rows of C one wgmma produces
SWIZZLE_SPAN = 128  # bytes: the 128-byte swizzle's row, one k-tile row (BK = 64 16-bit or 32 f32 elements)
SWIZZLE_ATOM = 1024  # bytes: 8 rows of 128 bytes, the pattern's period; stages start on this boundary
CHUNK = 16  # bytes: the unit the swizzle permutes
MAX_BOX = 256  # elements: the most a TMA box may span in any dimension
MBARRIER_BYTES = 8
PRODUCER_REGISTERS = 40  # setmaxnreg.dec: the producer keeps a loop, two coordinates and a barrier address
MAX_SETMAXNREG = 240  # the most setmaxnreg.inc asks for (it takes multiples of 8 up to 256; ptxas caps at 255)
# What a consumer thread needs besides its accumulators: descriptors, stage and barrier addresses, tile
# coordinates, loop counters, alpha/beta and the epilogue's temporaries. The hand prototype (128
# accumulators) compiled without spills under a 168-register cap, so 32 leaves some margin.
CONSUMER_RESERVE = 32
# wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address >> 4 in
# bits 0-13, leading-dimension byte offset >> 4 in 16-29, stride-dimension byte offset >> 4 in 32-45,
# the swizzle mode in 62-63 (1 = 128-byte swizzle). K-major with the 128-byte swizzle: the leading
# offset is unused (1 by convention), the stride offset is one 8-row atom, 1024 bytes.
DESCRIPTOR_LBO = 1
DESCRIPTOR_SBO = SWIZZLE_ATOM >> 4
DESCRIPTOR_SWIZZLE_128B = 1


def swizzled_offset(row: int, byte: int) -> int:
    """Where TMA's 128-byte swizzle puts byte `byte` (< 128) of row `row` of a k-major tile whose rows
    are 128 bytes, relative to a 1024-byte aligned start: the 16-byte chunk index within the row is
    xor-ed with row % 8. This is CuTe's Swizzle<3, 4, 3> on byte offsets, and what the descriptor's
    128B mode reads back."""
    assert 0 <= byte < SWIZZLE_SPAN
    chunk = (byte // CHUNK) ^ (row % 8)
    return row * SWIZZLE_SPAN + chunk * CHUNK + byte % CHUNK


def descriptor(address: int) -> int:
    """The 64-bit wgmma descriptor of a k-major, 128B-swizzled tile starting at shared address `address`."""
    return (((address & 0x3FFFF) >> 4) | DESCRIPTOR_LBO << 16 | DESCRIPTOR_SBO << 32
            | DESCRIPTOR_SWIZZLE_128B << 62)


def registers_at_entry(arch: Arch, threads: int) -> int:
    """The cap `__launch_bounds__(threads, 1)` gives ptxas: the register file shared by one block."""
    per_thread = arch.registers_per_sm // threads
    return min(per_thread, arch.max_registers_per_thread) // 8 * 8


@dataclass(frozen=True)
class TmaBox:
    """One operand's tensor map: a 2-D view (inner = k, contiguous; outer = m or n rows) and its box."""

    operand: ir.Operand
    inner: int  # box elements along k
    outer: int  # box rows
    element_bytes: int
    swizzle_bytes: int

    @property
    def inner_bytes(self) -> int:
        return self.inner * self.element_bytes

    @property
    def bytes(self) -> int:
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

    # --- the consumers' tiles ------------------------------------------------------------------

    @property
    def consumer_rows(self) -> int:
        """Rows of the block tile each consumer warpgroup multiplies (all BN columns)."""
        return self.bm // self.consumers

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
    def accumulators(self) -> int:
        """f32 accumulators per consumer thread: each m64nN instruction spreads 64 x N over 128 threads."""
        return self.m_repeat * self.n_repeat * WGMMA_M * self.shape.n // WARPGROUP

    @property
    def wgmma_per_k_tile(self) -> int:
        return self.m_repeat * self.n_repeat * self.k_steps

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
        """A `full` and an `empty` barrier per stage."""
        return 2 * self.stages

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per block: the ring, the barriers, and the slack that lets the kernel
        align the ring to the swizzle's 1024-byte period (the runtime guarantees only 16 bytes)."""
        return self.ring_bytes + self.mbarriers * MBARRIER_BYTES + SWIZZLE_ATOM

    # --- TMA -----------------------------------------------------------------------------------

    @cached_property
    def boxes(self) -> dict[ir.Operand, TmaBox]:
        return {op: TmaBox(op, self.bk, self.bm if op is ir.Operand.A else self.bn, self.element_bytes,
                           self.swizzle_bytes) for op in (ir.Operand.A, ir.Operand.B)}

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
        return registers_at_entry(self.arch, self.threads)

    @property
    def producer_registers(self) -> int:
        return PRODUCER_REGISTERS

    @property
    def consumer_registers(self) -> int:
        """What setmaxnreg.inc gives each consumer thread: the block's registers at launch, less what the
        producers keep, shared by the consumers (multiples of 8, at most MAX_SETMAXNREG)."""
        pool = self.entry_registers * (self.consumers + self.producers) - self.producers * PRODUCER_REGISTERS
        return min(MAX_SETMAXNREG, pool // self.consumers // 8 * 8)

    @property
    def consumer_registers_needed(self) -> int:
        return self.accumulators + CONSUMER_RESERVE

    # --- descriptors ---------------------------------------------------------------------------

    def descriptor_step(self, what: str) -> int:
        """What to add to a descriptor (start address >> 4) to move by one k-step (32 bytes), one 64-row
        m block of A, or one N-column n block of B."""
        rows = {"m": WGMMA_M, "n": self.shape.n}
        if what == "k":
            return self.shape.k * self.element_bytes >> 4
        return rows[what] * SWIZZLE_SPAN >> 4

    # --- the launch ----------------------------------------------------------------------------

    @property
    def persistent(self) -> bool:
        return self.spec.block.schedule is ir.Schedule.PERSISTENT

    def tiles(self, m: int, n: int) -> int:
        return -(-m // self.bm) * -(-n // self.bn)

    def grid(self, m: int, n: int, sms: int) -> int:
        """Blocks of a launch: one wave (min(tiles, SMs)) when persistent, else one per tile."""
        tiles = self.tiles(m, n)
        return min(tiles, sms) if self.persistent else tiles

    # Shared with the other lowerings' interface (plan.py, compiler.py read these).
    def global_vector(self, operand: ir.Operand) -> int:
        """Elements an operand's pointer and leading dimension must be multiples of: TMA's 16 bytes
        for A and B; C's stores test their alignment in the kernel and take any."""
        return 1 if operand is ir.Operand.C else self.ld_multiple

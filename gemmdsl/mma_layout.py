"""Lowering of tensor-core (mma.sync) specs: every index the kernel computes, as `Expr`s.

A warp multiplies its tile with `repeat` copies of one mma.sync instruction (m16n8k16 or
m16n8k8); the instruction fixes which elements of A, B and C each lane holds (the PTX ISA's
fragment layouts), so there is no per-thread tiling to choose. What stays the spec's: the block
and warp tiles, the shared-memory layouts, the global copies and the pipeline.

Fragments. A and B fragments are 8x8 matrices of 16-bit elements (8 rows of 4 f32 for TF32).
In every fragment register a lane holds elements that run along k: lane l holds row l/4 (the
m or n index within the matrix) and k = 2*(l%4), 2*(l%4)+1 (16-bit) or k = l%4 (TF32).
`ldmatrix` gives exactly this from a matrix stored with k contiguous, and `ldmatrix.trans`
from one stored with m or n contiguous: so the instruction is chosen by the shared-memory
order, and each lane supplies the address of one stored row. ldmatrix sees only 32-bit words
(lane l receives word l%4 of row l/4), so it serves TF32 too: a 16-byte row is 4 f32 along k,
which is the TF32 layout. `.trans` swaps 16-bit halves and has no 32-bit form, so TF32 reads
by ldmatrix need k contiguous (validate.py). TF32 fragments by default, and 16-bit ones with
`read: 32`, are loaded with one 32-bit load per register.

The C fragment: register e of block (i, j) holds C row i*16 + l/4 + 8*(e/2), column
j*8 + 2*(l%4) + e%2 of the warp tile.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from . import ir
from .expr import Expr, Var
from .layout import TID, ChainReads, SmemAccess, TileLayout
from .targets import WARP

LANE = Var("lane")
GROUP = Var("group_id")  # lane / 4: the row of a fragment matrix this lane holds
QUAD = Var("thread_in_group")  # lane % 4: where along k (or n, for C) its elements sit
MATRIX_ROWS = 8  # an ldmatrix matrix: 8 rows of 16 bytes


@dataclass(frozen=True)
class FragmentMatrix:
    """One 8x8 matrix of a thread's A or B fragment: register `register` of block `block`
    (an m block i of A, an n block j of B), with its origin (mn, k) in the warp's k-step tile."""

    block: int
    register: int
    mn: int
    k: int


@dataclass(frozen=True)
class MatrixLoad:
    """One ldmatrix (x1, x2 or x4): the matrices it fills, in the order of its result registers,
    and the row address that this lane supplies (lanes 8q..8q+7 address matrix q's rows)."""

    operand: ir.Operand
    matrices: tuple[FragmentMatrix, ...]
    transpose: bool
    offset: Expr  # element offset within the operand's stage of this lane's row

    @property
    def count(self) -> int:
        return len(self.matrices)


@dataclass(frozen=True)
class WordLoad:
    """One 32-bit shared load of a fragment register."""

    operand: ir.Operand
    block: int
    register: int
    offset: Expr


class MmaLayout(TileLayout):
    """All index arithmetic of one mma spec. Construct only from a validated spec."""

    def __init__(self, spec: ir.KernelSpec, max_global_vector: int | None = None):
        super().__init__(spec, max_global_vector)
        assert spec.mma is not None
        self.mma = spec.mma
        self.element = spec.problem.a.dtype
        self.warp_tile = self.mma.warp_tile
        self.k_step = self.mma.shape.k
        self.k_steps = self.bk // self.k_step

    # --- thread coordinates -------------------------------------------------------------

    @cached_property
    def coordinates(self) -> tuple[tuple[str, Expr], ...]:
        warps = self.spec.threads.warps
        warp_id = Var("warp_id")
        return (
            ("warp_id", TID // WARP),
            ("lane", TID % WARP),
            ("warp_m", warp_id // warps.n),
            ("warp_n", warp_id % warps.n),
            ("group_id", LANE // 4),
            ("thread_in_group", LANE % 4),
        )

    def warp_origin(self, operand: ir.Operand) -> Expr:
        """The warp tile's first row (A: m) or column (B: n) within the block tile."""
        if operand is ir.Operand.A:
            return Var("warp_m") * self.warp_tile.m
        return Var("warp_n") * self.warp_tile.n

    # --- fragments -----------------------------------------------------------------------

    @property
    def blocks(self) -> dict[ir.Operand, int]:
        """Instruction blocks per warp tile: m blocks of A, n blocks of B."""
        return {ir.Operand.A: self.mma.repeat.m, ir.Operand.B: self.mma.repeat.n}

    def chain_reads(self) -> ChainReads:
        """Every thread keeps the values of its fragments' rows (two per block row) and columns (a pair per
        block column; emit/fragment_epilogue.py)."""
        return ChainReads(self.threads, 2 * self.mma.repeat.m, 2 * self.mma.repeat.n)

    @property
    def registers(self) -> dict[ir.Operand, int]:
        """32-bit fragment registers per instruction block: (16 x k) of A, (k x 8) of B."""
        words = self.mma.shape.m * self.k_step * self.element_bytes // 4 // WARP
        return {ir.Operand.A: words, ir.Operand.B: words // 2}

    def fragment_matrices(self, operand: ir.Operand) -> list[FragmentMatrix]:
        """Every 8x8 matrix of a warp's fragments of one operand in one k-step, register order.

        A block i is 16 rows: its registers go rows 0-7, rows 8-15, then the same for the next
        k half (m16n8k16). A block j of B is 8 columns: one register per k half."""
        k_span = 16 // self.element_bytes  # k per matrix: 16 bytes of a row
        matrices = []
        for block in range(self.blocks[operand]):
            for register in range(self.registers[operand]):
                if operand is ir.Operand.A:
                    mn, k = block * 16 + (register % 2) * 8, (register // 2) * k_span
                else:
                    mn, k = block * 8, register * k_span
                matrices.append(FragmentMatrix(block, register, mn, k))
        return matrices

    @property
    def read(self) -> dict[ir.Operand, ir.SmemRead]:
        return {op: self.spec.smem(op).read for op in (ir.Operand.A, ir.Operand.B)}

    def transposed(self, operand: ir.Operand) -> bool:
        """ldmatrix.trans where m or n (not k) is contiguous in shared memory (16-bit elements only)."""
        transposed = self.smem[operand].order.k_major
        assert not (transposed and self.element_bytes == 4), "ldmatrix.trans has no 32-bit form"
        return transposed

    def matrix_loads(self, operand: ir.Operand, k_step: Expr | int) -> list[MatrixLoad]:
        """The ldmatrix instructions of one k-step: the operand's matrices four at a time
        (a remainder of three goes as x2 + x1). An A block is four matrices (one x4), a B block
        two, for 16-bit and TF32 alike: a matrix is 8 rows of 16 bytes either way."""
        matrices = self.fragment_matrices(operand)
        sizes = [4] * (len(matrices) // 4) + {0: [], 1: [1], 2: [2], 3: [2, 1]}[len(matrices) % 4]
        loads, first = [], 0
        for size in sizes:
            loads.append(self._matrix_load(operand, tuple(matrices[first:first + size]), k_step))
            first += size
        return loads

    def _matrix_load(self, operand: ir.Operand, group: tuple[FragmentMatrix, ...],
                     k_step: Expr | int) -> MatrixLoad:
        """Lane l supplies row l % 8 of matrix q = l / 8 (lanes past the last matrix repeat valid
        addresses, which ldmatrix x1 and x2 ignore). The matrices of a group sit on a 2 x 2 grid
        (q % 2, q / 2) in (mn, k), so the origin is affine in q."""
        q = LANE // MATRIX_ROWS
        origin = {"mn": self.warp_origin(operand) + group[0].mn, "k": k_step * self.k_step + group[0].k}
        for axis in ("mn", "k"):
            values = [getattr(m, axis) for m in group]
            if len(values) > 1:
                origin[axis] = origin[axis] + (q % 2) * (values[1] - values[0])
            if len(values) == 4:
                step = values[2] - values[0]
                assert values[3] == values[0] + (values[1] - values[0]) + step, "matrices off the 2x2 grid"
                origin[axis] = origin[axis] + (q // 2) * step
        row = LANE % MATRIX_ROWS
        geometry = self.smem[operand]
        if self.transposed(operand):
            offset = geometry.offset(origin["mn"], origin["k"] + row)
        else:
            offset = geometry.offset(origin["mn"] + row, origin["k"])
        return MatrixLoad(operand, group, self.transposed(operand), offset)

    def word_loads(self, operand: ir.Operand, k_step: Expr | int) -> list[WordLoad]:
        """One 32-bit load per fragment register: lane l's word at row l/4 and k position l%4
        (TF32: one element; 16-bit: two along k, so k must be contiguous)."""
        geometry = self.smem[operand]
        per_word = 4 // self.element_bytes
        loads = []
        for m in self.fragment_matrices(operand):
            mn = self.warp_origin(operand) + m.mn + GROUP
            k = k_step * self.k_step + m.k + QUAD * per_word
            loads.append(WordLoad(operand, m.block, m.register, geometry.offset(mn, k)))
        return loads

    # --- the C fragment and what the analysis walks --------------------------------------------

    def c_pair(self, block_m: Expr | int, block_n: Expr | int, half: Expr | int) -> tuple[Expr, Expr]:
        """(m, n) within the block tile of accumulator registers 2*half and 2*half + 1 of blocks
        (block_m, block_n): one row, two neighbouring columns from n on."""
        m = self.warp_origin(ir.Operand.A) + block_m * 16 + half * 8 + GROUP
        n = self.warp_origin(ir.Operand.B) + block_n * 8 + QUAD * 2
        return m, n

    def c_store_width(self) -> int:
        """A pair of neighbours along n: one store where C is row-major."""
        row_major = self.spec.problem.c.layout is ir.MatrixLayout.ROW
        return 2 if row_major and self.max_global_vector >= 2 else 1

    def fragment_accesses(self, k_step: int) -> list[SmemAccess]:
        """The shared-memory loads of one k-step, as the analysis counts them."""
        accesses = []
        for operand in (ir.Operand.A, ir.Operand.B):
            if self.read[operand] is ir.SmemRead.LDMATRIX:
                accesses += [SmemAccess(operand, "ldmatrix", 16 // self.element_bytes, load.offset, k_step,
                                        self.element_bytes, MATRIX_ROWS * load.count)
                             for load in self.matrix_loads(operand, k_step)]
            else:
                accesses += [SmemAccess(operand, "load", 4 // self.element_bytes, word.offset, k_step,
                                        self.element_bytes) for word in self.word_loads(operand, k_step)]
        return accesses

    def smem_accesses(self) -> list[SmemAccess]:
        stores = [SmemAccess(s.operand, "store", s.width, s.offset, element_bytes=self.element_bytes)
                  for op in (ir.Operand.A, ir.Operand.B) for s in self.copy_stores(op)]
        return stores + [a for k_step in range(self.k_steps) for a in self.fragment_accesses(k_step)]

"""Lowering: the spec's declarative tiling -> the index expressions of the kernel.

`TileLayout` holds what every kernel shares: the block tile, the shared-memory stages and the
global -> shared copies. `KernelLayout` (here) lowers the FMA path's per-thread tiling;
`MmaLayout` (mma_layout.py) the tensor-core path. Each answers "which element does thread
`tid` touch in instruction X" as `Expr`s. The emitter renders these expressions into CUDA; the analysis
passes evaluate the very same expressions for every thread. Nothing here knows
C syntax beyond what `Expr.render` prints.

Coordinates: A is M x K, B is K x N, C is M x N, each row- or column-major. Within a
block, `m`/`n` index the BM x BN tile and `k` the BK slice of the current k-tile.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from . import ir
from .expr import Expr, Func, Var
from .ir import MAX_VECTOR_BYTES
from .targets import WARP, Arch, arch

TID = Var("tid")
KK = Var("kk")  # the k index inside a k-tile (an unrolled loop variable)
MAX_VECTOR = MAX_VECTOR_BYTES // 4  # the widest load/store in f32 elements
STAGE_ALIGN_BYTES = 128  # each stage starts on a 128-byte boundary


def widest_dividing(n: int, limit: int = MAX_VECTOR) -> int:
    return next(w for w in (8, 4, 2, 1) if w <= limit and n % w == 0)


@dataclass(frozen=True)
class SmemGeometry:
    """Where one operand's tile lives in shared memory."""

    operand: ir.Operand
    order: ir.SmemOrder
    outer: int  # extent of the slow index
    inner: int  # extent of the contiguous index
    ld: int  # leading dimension in elements (inner + pad)
    swizzle: ir.Swizzle | None
    stage_elems: int  # elements per pipeline stage, padded to keep stages aligned
    base_elems: int  # offset of this operand's region in the kernel's shared array
    element_bytes: int = 4

    @property
    def name(self) -> str:
        return f"smem_{self.operand.value}_offset"

    @cached_property
    def offset_func(self) -> Func:
        """(mn, k) -> element offset within a stage, swizzle applied."""
        mn, k = Var("mn"), Var("k")
        outer, inner = (k, mn) if self.order.k_major else (mn, k)
        linear = outer * self.ld + inner
        if self.swizzle is not None:
            s = self.swizzle
            mask = ((1 << s.bits) - 1) << s.base
            linear = linear ^ ((linear >> s.shift) & mask)
        return Func(f"{self.operand.value}_smem_offset", ("mn", "k"), linear)

    def offset(self, mn: Expr | int, k: Expr | int) -> Expr:
        return self.offset_func(mn, k)

    def contiguous_run(self) -> int:
        """Elements that stay adjacent after padding and swizzle, counted from an aligned start."""
        run = widest_dividing(self.ld, MAX_VECTOR_BYTES // self.element_bytes)
        if self.swizzle is not None:
            run = min(run, 1 << self.swizzle.base)
        return run


@dataclass(frozen=True)
class GlobalChunk:
    """One vector global load of a thread: tile coordinates of its first element."""

    index: int
    row: Expr  # m for A, k for B
    col: Expr  # k for A, n for B


@dataclass(frozen=True)
class CopyStore:
    """One shared-memory store (or cp.async) of one thread per k-tile: `width` elements of a global
    chunk from element `element` on, landing at (mn, k) of the operand's stage."""

    operand: ir.Operand
    chunk: GlobalChunk
    element: int
    width: int
    mn: Expr
    k: Expr
    offset: Expr  # element offset within the operand's stage


@dataclass(frozen=True)
class FragmentLoad:
    """One shared-memory load of one thread at one k index: fragment elements index.. index + width - 1."""

    operand: ir.Operand
    index: int
    width: int
    offset: Expr  # element offset within the operand's stage


@dataclass(frozen=True)
class ChainReads:
    """How a kernel's epilogue reads the fuse chain's per-row and per-column values (emit/fuse.py): the
    threads that run it, the rows and the columns whose values each loads once and keeps in registers
    (`fuse_m`, `fuse_n`), or, where `cols_per_element`, columns read again for every element instead; where
    `staged`, from a tile's copy of the vectors in shared memory (the wgmma path's producer loads it during
    the main loop), so the epilogue's own global loads are R's and C's only."""

    threads: int
    rows_per_thread: int
    cols_per_thread: int
    cols_per_element: bool = False
    staged_bytes: int = 0  # shared memory of a tile's vectors, loaded ahead of the epilogue (0: read from global)
    residual_ahead: float = 0.0  # the share of R's tile copied to shared memory before the epilogue (0: R read there)
    residual_copied: bool = False  # R comes by 16-byte copies into shared memory, not per element

    @property
    def staged(self) -> bool:
        return self.staged_bytes > 0


@dataclass(frozen=True)
class SmemAccess:
    """One shared-memory instruction of one thread, as the analysis sees it."""

    operand: ir.Operand
    op: str  # "load", "store", or "ldmatrix" (each lane supplies one 16-byte row address)
    width: int  # elements per lane (16 bytes at most)
    offset: Expr  # element offset within the operand's stage
    kk: int | None = None  # k index (mma: k-step) of a fragment load
    element_bytes: int = 4
    lanes: int = WARP  # lanes whose addresses the instruction uses (ldmatrix x1: 8, x2: 16)

    @property
    def width_bytes(self) -> int:
        return self.width * self.element_bytes


class TileLayout:
    """What the lowering of every kernel shares: the block tile and its threads, the shared-memory
    stages, and the global -> shared copies of A and B. Construct only from a validated spec."""

    def __init__(self, spec: ir.KernelSpec, max_global_vector: int | None = None):
        self.spec = spec
        self.smem_dtype = self.shared_element(spec)
        self.element_bytes = self.smem_dtype.bytes
        # 1 lowers the scalar variant of a checked kernel: the same tiling with every global
        # load and store one element wide, for operands whose alignment the launcher cannot prove.
        self.max_global_vector = max_global_vector or MAX_VECTOR_BYTES // self.element_bytes
        self.arch: Arch = arch(spec.target.sm)
        self.bm, self.bn, self.bk = spec.block.m, spec.block.n, spec.block.k
        self.threads = spec.threads.threads
        self.stages = spec.pipeline.stages
        a = self._geometry(spec.smem_a, base=0)
        b = self._geometry(spec.smem_b, base=a.stage_elems * self.stages)
        self.smem = {ir.Operand.A: a, ir.Operand.B: b}

    @staticmethod
    def shared_element(spec: ir.KernelSpec) -> ir.DType:
        """The element type shared memory holds: the operands' own, as the tensor cores read them."""
        return spec.problem.a.dtype

    # --- shared memory -----------------------------------------------------------------

    def _geometry(self, layout: ir.SmemLayout, base: int) -> SmemGeometry:
        mn_extent = self.bm if layout.operand is ir.Operand.A else self.bn
        outer, inner = (self.bk, mn_extent) if layout.order.k_major else (mn_extent, self.bk)
        ld = inner + layout.pad
        align = STAGE_ALIGN_BYTES // self.element_bytes
        if layout.swizzle is not None:
            align = max(align, 1 << (layout.swizzle.base + layout.swizzle.bits + layout.swizzle.shift))
        stage = -(-outer * ld // align) * align
        return SmemGeometry(layout.operand, layout.order, outer, inner, ld, layout.swizzle, stage, base,
                            self.element_bytes)

    @property
    def smem_elems(self) -> int:
        b = self.smem[ir.Operand.B]
        return b.base_elems + b.stage_elems * self.stages

    @property
    def smem_bytes(self) -> int:
        return self.smem_elems * self.element_bytes

    @property
    def coordinates(self) -> tuple[tuple[str, Expr], ...]:
        """Named per-thread values, in definition order; the kernel declares each as a const int."""
        raise NotImplementedError

    def thread_env(self) -> dict[str, object]:
        """Every coordinate evaluated for all threads of a block (numpy arrays indexed by tid)."""
        import numpy as np

        env: dict[str, object] = {"tid": np.arange(self.threads)}
        for name, value in self.coordinates:
            env[name] = value.evaluate(env)
        return env

    # --- global -> shared copies --------------------------------------------------------

    def load_vector(self, operand: ir.Operand) -> int:
        """Elements per global load of A or B: the spec's vector, capped by `max_global_vector`."""
        return min(self.spec.load(operand).vector, self.max_global_vector)

    def global_chunks(self, operand: ir.Operand) -> list[GlobalChunk]:
        """The vector loads one thread issues per k-tile for an operand.

        Rows and columns are those of the tile as it lies in global memory: a row is a run
        of contiguous elements (along k for row-major A and column-major B, along m or n
        otherwise), so a vector never crosses rows.
        """
        vector = self.load_vector(operand)
        rows, cols = self.spec.global_tile(operand)
        per_row = cols // vector
        count = rows * per_row // self.threads
        chunks = []
        for c in range(count):
            if self.threads % per_row == 0:
                row = TID // per_row + c * (self.threads // per_row)
                col = (TID % per_row) * vector
            else:
                linear = TID + c * self.threads
                row, col = linear // per_row, (linear % per_row) * vector
            chunks.append(GlobalChunk(c, row, col))
        return chunks

    def chunk_tile_coords(self, operand: ir.Operand, chunk: GlobalChunk, element: int) -> tuple[Expr, Expr]:
        """(mn, k) of element `element` of a chunk, as shared-memory coordinates."""
        if self.spec.k_contiguous(operand):
            return chunk.row, chunk.col + element
        return chunk.col + element, chunk.row

    def copy_stores(self, operand: ir.Operand) -> tuple[CopyStore, ...]:
        """The shared-memory stores of one k-tile of an operand, chunk by chunk: what the copy emitters
        print and what the analysis counts."""
        geometry = self.smem[operand]
        width = self.store_width(operand)
        stores = []
        for chunk in self.global_chunks(operand):
            for element in range(0, self.load_vector(operand), width):
                mn, k = self.chunk_tile_coords(operand, chunk, element)
                stores.append(CopyStore(operand, chunk, element, width, mn, k, geometry.offset(mn, k)))
        return tuple(stores)

    def stays_contiguous(self, operand: ir.Operand) -> bool:
        """Whether a global row of the tile is also contiguous in shared memory.

        Global rows run along k (row-major A, column-major B) or along m / n; k-major
        shared layouts (km, kn) keep m / n contiguous, the others k.
        """
        return self.spec.k_contiguous(operand) != self.smem[operand].order.k_major

    def store_width(self, operand: ir.Operand) -> int:
        """Elements per shared-memory store (or cp.async) of one global chunk."""
        if not self.stays_contiguous(operand):
            return 1
        return min(self.load_vector(operand), self.smem[operand].contiguous_run())

    def global_vector(self, operand: ir.Operand) -> int:
        """Widest global access to A, B or C, in elements: the multiple of elements that the
        operand's pointer, leading dimension and batch stride must be for it to be aligned.

        Register-staged copies read whole load vectors; cp.async reads what it writes to shared
        memory (a 4-byte copy per element where the tile is transposed on the way).
        """
        if operand is ir.Operand.C:
            return self.c_store_width()
        if self.spec.pipeline.copy is ir.CopyMode.CP_ASYNC:
            return self.store_width(operand)
        return self.load_vector(operand)

    def c_store_width(self) -> int:
        """Elements per epilogue store along C's contiguous index."""
        raise NotImplementedError

    def smem_accesses(self) -> list[SmemAccess]:
        """Every shared-memory instruction one thread executes per k-tile, in program order."""
        raise NotImplementedError


class KernelLayout(TileLayout):
    """The FMA path: each thread accumulates a (repeat x micro) register tile of C from fragments
    it loads itself (warps x lanes x micro x repeat cover the block tile)."""

    @staticmethod
    def shared_element(spec: ir.KernelSpec) -> ir.DType:
        """f32, whatever the operands: bf16 and f16 ones are widened in registers on their way in."""
        return ir.DType.F32

    def __init__(self, spec: ir.KernelSpec, max_global_vector: int | None = None):
        super().__init__(spec, max_global_vector)
        self.frag_m = spec.threads.fragment.m
        self.frag_n = spec.threads.fragment.n

    def chain_reads(self) -> ChainReads:
        """Every thread keeps the values of its micro tiles' rows and columns (emit/epilogue.py)."""
        return ChainReads(self.threads, self.frag_m, self.frag_n)

    # --- thread coordinates -------------------------------------------------------------

    @cached_property
    def coordinates(self) -> tuple[tuple[str, Expr], ...]:
        """Named per-thread values, in definition order; the kernel declares each as a const int."""
        t = self.spec.threads
        lanes = t.lanes
        warp_id, lane = Var("warp_id"), Var("lane")
        if t.lane_order is ir.LaneOrder.ROW:
            lane_m, lane_n = lane // lanes.n, lane % lanes.n
        elif t.lane_order is ir.LaneOrder.COL:
            lane_m, lane_n = lane % lanes.m, lane // lanes.m
        else:  # zigzag (maxas): bit 0 of the lane picks n, the next bits m, the rest n again
            lane_m = (lane // 2) % lanes.m
            lane_n = (lane // (2 * lanes.m)) * 2 + lane % 2
        warp_m = Var("warp_m")
        warp_n = Var("warp_n")
        thread_m = warp_m * self.warp_stride("m") + Var("lane_m") * t.micro.m
        thread_n = warp_n * self.warp_stride("n") + Var("lane_n") * t.micro.n
        return (
            ("warp_id", TID // WARP),
            ("lane", TID % WARP),
            ("warp_m", warp_id // t.warps.n),
            ("warp_n", warp_id % t.warps.n),
            ("lane_m", lane_m),
            ("lane_n", lane_n),
            ("thread_m", thread_m),
            ("thread_n", thread_n),
        )

    def warp_stride(self, axis: str) -> int:
        """Distance between neighbouring warps' tiles along m or n."""
        t = self.spec.threads
        lanes, micro, repeat = (t.lanes.m, t.micro.m, t.repeat.m) if axis == "m" else (t.lanes.n, t.micro.n, t.repeat.n)
        span = lanes * micro
        return span * repeat if t.repeat_level is ir.RepeatLevel.WARP else span

    def repeat_stride(self, axis: str) -> int:
        t = self.spec.threads
        if t.repeat_level is ir.RepeatLevel.BLOCK:
            return (self.bm // t.repeat.m) if axis == "m" else (self.bn // t.repeat.n)
        return t.lanes.m * t.micro.m if axis == "m" else t.lanes.n * t.micro.n

    def fragment_rows(self, axis: str) -> list[tuple[int, Expr]]:
        """(fragment index, block coordinate) of each element of a thread's A (m) or B (n) fragment."""
        t = self.spec.threads
        micro, repeat = (t.micro.m, t.repeat.m) if axis == "m" else (t.micro.n, t.repeat.n)
        base = Var("thread_m" if axis == "m" else "thread_n")
        stride = self.repeat_stride(axis)
        return [(r * micro + i, base + (r * stride + i)) for r in range(repeat) for i in range(micro)]

    def c_store_width(self, aligned_c: bool = False) -> int:
        """A thread's micro tile is contiguous along C's contiguous index. `aligned_c`: the width
        when C itself is vector-aligned, whatever this kernel's cap on global accesses (the scalar
        kernel serves calls where only A or B is not). 16-bit C is written an element at a time, each
        rounded from its f32 accumulator."""
        if self.spec.problem.c.dtype is not ir.DType.F32:
            return 1
        t = self.spec.threads
        micro = t.micro.n if self.spec.problem.c.layout is ir.MatrixLayout.ROW else t.micro.m
        return widest_dividing(micro, MAX_VECTOR_BYTES // self.element_bytes if aligned_c else self.max_global_vector)

    # --- shared -> register fragments ---------------------------------------------------

    def max_read_width(self, operand: ir.Operand) -> int:
        """Widest fragment read the layout allows, in elements."""
        geometry = self.smem[operand]
        if not geometry.order.k_major:
            return 1  # a thread's rows (or columns) are ld apart: one element per load
        t = self.spec.threads
        micro = t.micro.m if operand is ir.Operand.A else t.micro.n
        return min(widest_dividing(micro), geometry.contiguous_run())

    def read_width(self, operand: ir.Operand) -> int:
        forced = self.spec.smem(operand).read_bits
        return forced // 32 if forced is not None else self.max_read_width(operand)

    def fragment_loads(self, operand: ir.Operand, kk: Expr | int = KK) -> tuple[FragmentLoad, ...]:
        """The shared-memory loads of a thread's A or B fragment at k index `kk`."""
        axis = "m" if operand is ir.Operand.A else "n"
        width = self.read_width(operand)
        geometry = self.smem[operand]
        return tuple(FragmentLoad(operand, index, width, geometry.offset(coord, kk))
                     for index, coord in self.fragment_rows(axis) if index % width == 0)

    # --- what the analysis walks ---------------------------------------------------------

    def smem_accesses(self) -> list[SmemAccess]:
        """Every shared-memory instruction one thread executes per k-tile, in program order."""
        operands = (ir.Operand.A, ir.Operand.B)
        stores = [SmemAccess(s.operand, "store", s.width, s.offset) for op in operands for s in self.copy_stores(op)]
        loads = [SmemAccess(f.operand, "load", f.width, f.offset, kk)
                 for kk in range(self.bk) for op in operands for f in self.fragment_loads(op, kk)]
        return stores + loads

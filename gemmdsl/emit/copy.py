"""Global -> shared copies of one k-tile of A and B into a pipeline stage.

Three engines behind one interface: `declare()` (once, before the k-loop), `fetch(work, tile, stage)`
(start copying k-tile `tile` of the work tile's range into stage `stage`) and `land(stage)` (make
what was fetched visible in `stage` to this thread; a barrier then makes it visible to all).
`RegisterCopy` stages through registers (fetch: global loads; land: shared stores); `AsyncCopy`
uses cp.async (fetch: the copies; land: commit and wait), and also offers `commit` and `wait` to
pipelines that keep several k-tiles in flight. `DirectCopy` loads and stores each element in
`fetch` (its commit and wait are empty, so it runs in the same rings): the scalar variant of 16-bit
kernels, whose 2-byte elements cp.async (4 bytes at least) cannot move one by one.

Every shared-memory store comes from `KernelLayout.copy_stores`, the list the analysis counts.
For checked bounds a fetch is unguarded when the block and the k-tile lie inside the matrices, and
guarded (`Guard.EDGES`, zero outside the matrices) otherwise. The register copy, whose guarded loads
go one element at a time, fetches an edge block's full k-tiles testing each vector once, against M or
N only (`Guard.MN`): the test does not change along k, so the loads keep the interior's width and
addressing (an edge block runs at an interior block's speed). Vectors that run along M or N take
that path only when M or N is a multiple of the vector width (one would straddle the edge
otherwise). cp.async's guarded copies test a whole 16-byte copy at once already, and the
tensor-core kernels that use them run at the register ceiling, where the extra path spilled.
The partial-k interior kernel's partial k-tile (`fetch_partial_k`) is guarded in k only
(`Guard.K`): its rows and columns lie inside C by construction.
"""
from __future__ import annotations

import enum
from contextlib import contextmanager, nullcontext
from itertools import groupby
from typing import Iterator

from .. import ir
from ..abi import leading_name
from ..emitter import Emitter
from ..expr import Expr, Var
from ..layout import GlobalChunk, TileLayout
from .ctext import OPERANDS, VECTOR_TYPES, as_vector, component, make_vector, paren, stage_base, vector_of
from .fuse import to_float
from .scheduler import WorkTile


class Guard(enum.Enum):
    """Which bounds a fetch tests: none (a tile and k-tile inside the matrices), M or N once per
    vector (the register copy's full k-tiles of checked bounds), every one element by element (edge vectors and partial
    k-tiles), or only K (the partial-k interior kernel's partial k-tile)."""

    NONE = "none"
    MN = "mn"
    EDGES = "edges"
    K = "k"


class GlobalTileCopy:
    """What both engines share: where a k-tile starts in global memory, its limits, the guards."""

    # How an edge block's full k-tiles are fetched: every bound tested, or (`Guard.MN`) each
    # vector once against M or N, which `_emit_fetch` must then implement.
    edge_full_k_tiles = Guard.EDGES

    def __init__(self, spec: ir.KernelSpec, layout: TileLayout, out: Emitter):
        self.spec = spec
        self.layout = layout
        self.out = out
        self.source = spec.problem.a.dtype.c_type  # the operands' type in global memory
        self.element = layout.smem_dtype.c_type  # the type shared memory holds
        # FMA kernels of bf16 or f16 operands widen them to the f32 shared memory holds (`widen2`, `widen4`:
        # paths/fma/widen.py)
        self.widen = layout.smem_dtype is not spec.problem.a.dtype

    def _tile_origin(self, operand: ir.Operand, k_tile: str) -> tuple[str, str, str, str]:
        """(row origin, column origin, row bound, column bound) of k-tile `k_tile` of A or B in global memory.

        Rows and columns are those of the tile as it lies in memory (see KernelLayout.global_chunks);
        a bound is the matrix dimension that limits the index.
        """
        mn_origin, mn_bound = ("block_m", "M") if operand is ir.Operand.A else ("block_n", "N")
        k_origin = "0" if k_tile == "0" else f"{paren(k_tile)} * BK"
        if self.spec.k_contiguous(operand):
            return mn_origin, k_origin, mn_bound, "K"
        return k_origin, mn_origin, "K", mn_bound

    def _emit_source_pointer(self, operand: ir.Operand, k_tile: str) -> str:
        """Declare `a_src` / `b_src`, the start of k-tile `k_tile` of A or B in global memory."""
        row, col, _, _ = self._tile_origin(operand, k_tile)
        src = f"{operand.value}_src"
        terms = [operand.value.upper()]
        if row != "0":
            terms.append(f"(size_t){paren(row)} * {leading_name(operand)}")
        if col != "0":
            terms.append(col)
        self.out.line(f"const {self.source}* {src} = {' + '.join(terms)};")
        return src

    def _emit_tile_limits(self, operand: ir.Operand, k_tile: str, guard: Guard) -> None:
        """Declare `a_rows` / `a_cols`: how many of the tile's rows and columns lie inside the matrix
        (with `Guard.K`, only the one along k; with `Guard.MN`, only the one along M or N)."""
        row, col, row_bound, col_bound = self._tile_origin(operand, k_tile)
        for name, origin, bound in (("rows", row, row_bound), ("cols", col, col_bound)):
            if (guard is Guard.K and bound != "K") or (guard is Guard.MN and bound == "K"):
                continue
            left = bound if origin == "0" else f"{bound} - {origin}"
            self.out.line(f"const int {operand.value}_{name} = {left};")

    def _inside(self, operand: ir.Operand, row: str, col: str, guard: Guard) -> str:
        """C test that element (row, col) of the tile lies inside the matrix (the dimensions `guard` tests)."""
        p = operand.value
        tests = {"rows": f"{row} < {p}_rows", "cols": f"{col} < {p}_cols"}
        along_k = "cols" if self.spec.k_contiguous(operand) else "rows"
        if guard is Guard.K:
            tests = {along_k: tests[along_k]}
        elif guard is Guard.MN:
            del tests[along_k]
        return " && ".join(tests.values())

    def _bytes_inside(self, operand: ir.Operand, row: str, col: str, width: int, guard: Guard) -> str:
        """C expression: the bytes of a `width`-element copy at (row, col) of the tile inside the matrix."""
        p = operand.value
        if guard is Guard.EDGES:
            return f"bytes_inside(row, {p}_rows, {col}, {p}_cols, {width})"
        size = self.layout.element_bytes
        if self.spec.k_contiguous(operand):  # k runs along the copy: part of it may lie past K
            return f"{size} * max(0, min({width}, {p}_cols - {paren(col)}))"
        return f"{row} < {p}_rows ? {size * width} : 0"

    @staticmethod
    def _global_offset(operand: ir.Operand, row: Expr, col: Expr) -> str:
        return (row * Var(leading_name(operand)) + col).render()

    def _mn_test(self) -> str:
        """C test (block-uniform) that no vector along M or N straddles the edge (M or N a multiple of
        its width), as `Guard.MN` needs; empty when nothing needs testing."""
        tests = []
        for operand in OPERANDS:
            vector = self.layout.load_vector(operand)
            if vector > 1 and not self.spec.k_contiguous(operand):
                tests.append(f"{'M' if operand is ir.Operand.A else 'N'} % {vector} == 0")
        return f" && (block_inside || {' && '.join(tests)})" if tests else ""

    def fetch(self, work: WorkTile, tile: str, stage: str) -> None:
        """Start copying k-tile `tile` of the work tile's range into stage `stage`: unguarded for exact
        bounds; for checked bounds behind a branch that is uniform across the block, so tiles inside C
        run the exact code for their full k-tiles (the register copy: with a test per vector that
        does not change along k, shared with edge blocks)."""
        k_tile = work.k_tile(tile)
        if not self.spec.problem.checked:
            self._emit_fetch(k_tile, stage, Guard.NONE)
            return
        if self.edge_full_k_tiles is Guard.MN:
            with self.out.block(f"if ({k_tile} < full_k_tiles{self._mn_test()})"):
                self._emit_fetch(k_tile, stage, Guard.MN)
        else:
            with self.out.block(f"if (block_inside && {k_tile} < full_k_tiles)"):
                self._emit_fetch(k_tile, stage, Guard.NONE)
        with self.out.block("else"):
            self._emit_fetch(k_tile, stage, Guard.EDGES)

    def fetch_partial_k(self, k_tile: str, stage: str) -> None:
        """Start copying k-tile `k_tile` of the matrices, the last and partial one, into stage `stage` for a
        tile that lies inside C: only the k bound is tested, and the copy is zero past K."""
        self._emit_fetch(k_tile, stage, Guard.K)

    def _emit_fetch(self, k_tile: str, stage: str, guard: Guard) -> None:
        raise NotImplementedError

    @contextmanager
    def _chunk_block(self, chunk: GlobalChunk) -> Iterator[None]:
        """A scope declaring `row` and `col`, a chunk's first element in its global tile (guarded copies)."""
        with self.out.block(""):
            self.out.line(f"const int row = {chunk.row.render()};")
            self.out.line(f"const int col = {chunk.col.render()};")
            yield


class RegisterCopy(GlobalTileCopy):
    """Global -> registers (`fetch`), registers -> shared memory (`land`)."""

    edge_full_k_tiles = Guard.MN

    single_stage_note = ("Single buffer: load a k-tile, wait for all threads, multiply, wait again before\n"
                         "the next tile overwrites shared memory (two barriers per k-tile).")

    def declare(self) -> None:
        for operand in OPERANDS:
            vector = self.layout.load_vector(operand)
            count = len(self.layout.global_chunks(operand))
            self.out.line(f"{VECTOR_TYPES[vector]} {self._registers(operand)}[{count}];")

    def land(self, stage: str) -> None:
        """Registers -> shared memory stage `stage`."""
        o = self.out
        for operand in OPERANDS:
            vector = self.layout.load_vector(operand)
            o.line(f"{self.element}* const {operand.value}_dst = {stage_base(operand, stage)};")
            for store in self.layout.copy_stores(operand):
                register = f"{self._registers(operand)}[{store.chunk.index}]"
                target = f"{operand.value}_dst + {store.offset.render()}"
                o.line(f"sts{32 * store.width}({target}, {vector_of(register, vector, store.element, store.width)});")

    @staticmethod
    def _registers(operand: ir.Operand) -> str:
        return f"{operand.value}_stage"

    def _load(self, address: str, vector: int) -> str:
        """`vector` elements from global memory at `address` (an element lvalue) as the registers hold them."""
        if not self.widen:
            return as_vector(address, vector, const=True)
        return to_float(self.spec.problem.a.dtype, address) if vector == 1 else f"widen{vector}(&{address})"

    def _emit_fetch(self, k_tile: str, stage: str, guard: Guard) -> None:
        """Global -> registers for k-tile `k_tile` (the stage is chosen when it lands)."""
        o = self.out
        for operand in OPERANDS:
            vector = self.layout.load_vector(operand)
            src = self._emit_source_pointer(operand, k_tile)
            if guard is not Guard.NONE:
                self._emit_tile_limits(operand, k_tile, guard)
            for chunk in self.layout.global_chunks(operand):
                register = f"{self._registers(operand)}[{chunk.index}]"
                if guard is Guard.NONE:
                    address = f"{src}[{self._global_offset(operand, chunk.row, chunk.col)}]"
                    o.line(f"{register} = {self._load(address, vector)};")
                    continue
                if guard is Guard.MN:
                    inside = self._inside(operand, chunk.row.render(), chunk.col.render(), guard)
                    address = f"{src}[{self._global_offset(operand, chunk.row, chunk.col)}]"
                    zero = make_vector(vector, ["0.0f"] * vector)
                    o.line(f"{register} = {inside} ? {self._load(address, vector)} : {zero};")
                    continue
                with self._chunk_block(chunk):
                    for element in range(vector):
                        col = Var("col") + element
                        inside = self._inside(operand, "row", col.render(), guard)
                        address = f"{src}[{self._global_offset(operand, Var('row'), col)}]"
                        o.line(f"{component(register, vector, element)} = {inside} ? {self._load(address, 1)} : 0.0f;")


class AsyncCopy(GlobalTileCopy):
    """cp.async global -> shared memory (`fetch`), committed and awaited as groups."""

    single_stage_note = "Single buffer filled by cp.async: copy, wait, multiply, wait (two barriers per k-tile)."

    def declare(self) -> None:
        """cp.async needs no registers."""

    def land(self, stage: str) -> None:
        self.commit()
        self.wait("0")

    def commit(self) -> None:
        self.out.line("cp_async_commit();")

    def wait(self, pending: str) -> None:
        """Wait until at most `pending` committed groups are still in flight."""
        self.out.line(f"cp_async_wait<{pending}>();")

    def _emit_fetch(self, k_tile: str, stage: str, guard: Guard) -> None:
        """cp.async for k-tile `k_tile` into stage `stage`."""
        o = self.out
        guarded = guard is not Guard.NONE
        for operand in OPERANDS:
            src = self._emit_source_pointer(operand, k_tile)
            dst = f"{operand.value}_dst"
            o.line(f"{self.element}* const {dst} = {stage_base(operand, stage)};")
            if guarded:
                self._emit_tile_limits(operand, k_tile, guard)
            for chunk, stores in groupby(self.layout.copy_stores(operand), key=lambda store: store.chunk):
                with self._chunk_block(chunk) if guarded else nullcontext():
                    row, first = (Var("row"), Var("col")) if guarded else (chunk.row, chunk.col)
                    for store in stores:
                        size = self.layout.element_bytes * store.width
                        target = f"{dst} + {store.offset.render()}"
                        col = first + store.element
                        source = f"{src} + {self._global_offset(operand, row, col)}"
                        if not guarded:
                            o.line(f"cp_async_{size}({target}, {source});")
                            continue
                        inside = self._bytes_inside(operand, "row", col.render(), store.width, guard)
                        o.line(f"cp_async_{size}_zfill({target}, {source}, {inside}, {src});")


class DirectCopy(AsyncCopy):
    """Each element loaded from global memory and stored to shared memory in `fetch`; zero outside
    the matrix. The rings' commit and wait have nothing to wait for."""

    single_stage_note = "Single buffer: load and store a k-tile, wait, multiply, wait (two barriers per k-tile)."

    def commit(self) -> None:
        """Nothing is in flight."""

    def wait(self, pending: str) -> None:
        """Nothing is in flight."""

    def _emit_fetch(self, k_tile: str, stage: str, guard: Guard) -> None:
        o = self.out
        zero = f"{self.element}(0.0f)"
        for operand in OPERANDS:
            p = operand.value
            src = self._emit_source_pointer(operand, k_tile)
            o.line(f"{self.element}* const {p}_dst = {stage_base(operand, stage)};")
            if guard is not Guard.NONE:
                self._emit_tile_limits(operand, k_tile, guard)
            for store in self.layout.copy_stores(operand):
                assert store.width == 1, "the direct copy moves one element per store"
                row, col = store.chunk.row, store.chunk.col + store.element
                value = f"{src}[{self._global_offset(operand, row, col)}]"
                if guard is not Guard.NONE:
                    value = f"{self._inside(operand, row.render(), col.render(), guard)} ? {value} : {zero}"
                o.line(f"{p}_dst[{store.offset.render()}] = {value};")

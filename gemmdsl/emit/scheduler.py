"""Which C tile, and which k-tiles of it, a block works on.

A scheduler declares `block_m` / `block_n` (through the raster) and hands the kernel's other parts
a `WorkTile`: where its k-tiles start and how many there are, as C, and whether the epilogue adds
into C. `TileScheduler`: one whole tile per block. `StreamKScheduler`: the blocks share the k-tiles
of the last wave's tiles in contiguous ranges (schedule: stream_k).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import ir
from ..abi import prepare_parameters, tile_count
from ..emitter import Emitter
from ..plan import KernelPlan
from .ctext import paren


@dataclass(frozen=True)
class WorkTile:
    """The k-range of one C tile that a block accumulates, as C text."""

    first_k_tile: str  # "0", or the name of the range's first k-tile
    k_tiles: str  # how many k-tiles the range holds
    atomic: bool  # the result is added into C (which holds beta * C), not stored
    # The partial-k interior kernel (pipeline.py): its partial k-tile comes first, and k-tile `tile` of
    # the range, after the first, is k-tile tile - k_shift of the matrices.
    k_shift: str | None = None

    def k_tile(self, tile: str) -> str:
        """The k-tile of the matrix that is k-tile `tile` of this range."""
        if self.k_shift is not None:
            return f"{tile} - {self.k_shift}"
        if self.first_k_tile == "0":
            return tile
        return self.first_k_tile if tile == "0" else f"{self.first_k_tile} + {tile}"


def tiles(spec: ir.KernelSpec) -> str:
    """The number of C tiles of the launch, as C."""
    return f"{paren(tile_count(spec, 'M', 'BM'))} * {paren(tile_count(spec, 'N', 'BN'))}"


RASTER_GROUP = r'''
// Rasterization group(n): (tile_m, tile_n) of C tile number `tile` of tiles_m x tiles_n. Groups of `group_size`
// tile rows are walked column by column, so blocks that run together share rows of A and columns of B in L2.
// `tile` keeps its type (blockIdx.x divides unsigned, in fewer instructions than an int) and comes last, so that
// a kernel reads blockIdx.x after the grid's sizes, next to its first use.
template <typename Tile>
static __device__ __forceinline__ int2 raster_group(int tiles_m, int tiles_n, int group_size, Tile tile)
{
    const int blocks_per_group = group_size * tiles_n;
    const int first_tile_m = (tile / blocks_per_group) * group_size;
    const int group_rows = min(tiles_m - first_tile_m, group_size);
    return make_int2(first_tile_m + (tile % blocks_per_group) % group_rows, (tile % blocks_per_group) / group_rows);
}'''


def emit_raster(spec: ir.KernelSpec, out: Emitter, tile: str, rows: str = "M", first_row: str = "") -> None:
    """block_m and block_n of C tile number `tile` (the block index, or a stream-K segment's tile) of a GEMM of
    `rows` rows whose first row is `first_row` (a group's, in a grouped launch; "" for row 0). A group raster
    calls `raster_group`, a helper of the file's prelude."""
    o = out
    raster = spec.block.raster
    what = "which C tile this block computes" if tile == "blockIdx.x" else f"where C tile `{tile}` lies"
    o.comment(f"Rasterization ({raster}): {what}.")
    if raster.kind is ir.RasterKind.ROW:
        o.line(f"const int tiles_n = {tile_count(spec, 'N', 'BN')};")
        o.line(f"const int tile_m = {tile} / tiles_n;")
        o.line(f"const int tile_n = {tile} % tiles_n;")
    elif raster.kind is ir.RasterKind.COL:
        o.line(f"const int tiles_m = {tile_count(spec, rows, 'BM')};")
        o.line(f"const int tile_m = {tile} % tiles_m;")
        o.line(f"const int tile_n = {tile} / tiles_m;")
    else:
        with o.helpers():
            o.lines(RASTER_GROUP)
        o.line(f"const int2 tile_mn = raster_group({tile_count(spec, rows, 'BM')}, {tile_count(spec, 'N', 'BN')}, "
               f"{raster.group}, {tile});")
        o.line(f"const int block_m = {first_row + ' + ' if first_row else ''}tile_mn.x * BM;")
        o.line("const int block_n = tile_mn.y * BN;")
        return
    o.line(f"const int block_m = {first_row + ' + ' if first_row else ''}tile_m * BM;")
    o.line("const int block_n = tile_n * BN;")


def emit_bounds(spec: ir.KernelSpec, out: Emitter) -> None:
    """block_inside and full_k_tiles, which the copies and the epilogue test (checked bounds)."""
    o = out
    if spec.problem.checked:
        o.comment("Bounds (checked): a block whose tile lies inside C runs the unguarded code for every\n"
                  "full k-tile; edge blocks and the last, partial k-tile load zero-filled tiles and\n"
                  "store only inside C. Both tests are the same for the whole block.")
        o.line("const bool block_inside = block_m + BM <= M && block_n + BN <= N;")
        o.line("const int full_k_tiles = K / BK;")


class TileScheduler:
    """One block per C tile, numbered by blockIdx.x through the raster; all of its k-tiles."""

    def __init__(self, spec: ir.KernelSpec, out: Emitter):
        self.spec = spec
        self.out = out

    def emit_block_tile(self) -> None:
        emit_raster(self.spec, self.out, "blockIdx.x")
        emit_bounds(self.spec, self.out)
        self.out.line()

    def emit_work(self, body: Callable[[WorkTile], None]) -> None:
        body(WorkTile("0", tile_count(self.spec, "K", "BK"), atomic=False))


class StreamKScheduler:
    """The last sk_tiles C tiles' k-tiles, shared by the blocks in equal contiguous ranges."""

    def __init__(self, spec: ir.KernelSpec, out: Emitter):
        self.spec = spec
        self.out = out

    def emit_block_tile(self) -> None:
        """A block's tiles are known only segment by segment (emit_work)."""

    def emit_work(self, body: Callable[[WorkTile], None]) -> None:
        o = self.out
        o.comment("Stream-K: the last sk_tiles C tiles (what would be the launch's last, partial wave;\n"
                  "the plain kernel computes the others) are sk_tiles * K / BK k-tiles of work that this\n"
                  "kernel's blocks share in equal, contiguous ranges; a range may end in one tile and go on\n"
                  "in the next.")
        o.line(f"const int first_tile = {tiles(self.spec)} - sk_tiles;")
        o.line(f"const int k_tiles_total = {tile_count(self.spec, 'K', 'BK')};")
        o.line("const long long sk_work = (long long)sk_tiles * k_tiles_total;")
        o.line("const int work_begin = (int)(sk_work * blockIdx.x / gridDim.x);")
        o.line("const int work_end = (int)(sk_work * (blockIdx.x + 1) / gridDim.x);")
        o.comment("Segments are taken from the end of the range: the first then starts at k = 0 of its\n"
                  "tile and the last ends at k = K, so all blocks stream through the same k-tiles of A\n"
                  "and B at about the same time, as plain blocks do, and L2 serves them.")
        with o.block("for (int work = work_end; work > work_begin;)"):
            self._emit_segment()
            o.line()
            emit_raster(self.spec, o, "tile")
            emit_bounds(self.spec, o)
            o.line()
            body(WorkTile("kt_begin", "kt_end - kt_begin", atomic=True))
            o.line("__syncthreads();  // the next segment's prologue refills stages this one may still read")

    def _emit_segment(self) -> None:
        o = self.out
        o.comment("This segment: k-tiles [kt_begin, kt_end) of C tile `tile`.")
        o.line("const int tile = first_tile + (work - 1) / k_tiles_total;")
        o.line("const int kt_end = (work - 1) % k_tiles_total + 1;")
        o.line("const int kt_begin = max(0, kt_end - (work - work_begin));")
        o.line("work -= kt_end - kt_begin;")


def emit_prepare_kernel(plan: KernelPlan, out: Emitter) -> None:
    """Stream-K tiles receive atomic adds, so they must hold beta * C (0 for epilogue: store) first."""
    o, spec, launch = out, plan.spec, plan.launch
    parameters = ", ".join(f"{ctype} {name}" for ctype, name in prepare_parameters(spec))
    o.comment("Before a stream-K launch: C = beta * C on the last sk_tiles tiles (C = 0 when beta == 0),\n"
              "one block per tile" + (" of each GEMM of the batch (blockIdx.z)." if spec.problem.batched else "."))
    o.line(f'extern "C" __global__ void __launch_bounds__({launch.threads}) {launch.entries.prepare}({parameters})')
    with o.block(""):
        o.line(f"constexpr int BM = {plan.layout.bm};")
        o.line(f"constexpr int BN = {plan.layout.bn};")
        if spec.problem.batched:
            o.line("C += blockIdx.z * stride_c;")
        o.line(f"const int tile = {tiles(spec)} - sk_tiles + blockIdx.x;")
        emit_raster(spec, o, "tile")
        # Consecutive threads walk C's contiguous dimension, so the accesses coalesce.
        inner, outer = ("n", "m") if spec.problem.c.layout is ir.MatrixLayout.ROW else ("m", "n")
        with o.block(f"for (int e = threadIdx.x; e < BM * BN; e += {launch.threads})"):
            o.line(f"const int {outer} = e / B{inner.upper()};")
            o.line(f"const int {inner} = e % B{inner.upper()};")
            if spec.problem.checked:
                o.line("if (block_m + m >= M || block_n + n >= N) continue;  // an edge tile's part outside C")
            o.line(f"float* const c = C + (size_t)(block_{outer} + {outer}) * ldc + block_{inner} + {inner};")
            o.line("*c = beta == 0.0f ? 0.0f : beta * *c;")

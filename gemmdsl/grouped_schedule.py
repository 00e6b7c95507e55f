"""How a `batch: grouped` launch walks its groups' tiles, stated once (paths/wgmma/grouped.py prints it as C).

G GEMMs share N and K and each has its own M: group g owns rows offs[g - 1] .. offs[g] - 1 of A and C
(offs[-1] = 0) and multiplies them by its own B. The tiles are numbered group by group; within a group,
tile_m x tile_n through the spec's raster (a group of raster(8) rows is walked column by column, as in
one GEMM). A group of m rows has ceil(m / BM) x ceil(N / BN) tiles; an empty group has none.

One persistent launch of `blocks` blocks: block b takes tiles b, b + blocks, ...; since its tile numbers
only grow, it keeps a cursor (the group it is in, that group's first tile and rows) and moves it forward
past the groups its next tile lies beyond, reading offs once per group, never the whole array per tile.

Group ends are clamped the way the kernel clamps them, to [the previous end, rows] (`group_rows`), so an
offs that decreases or runs past A's rows never sends a tile outside A and C.

The host cannot know the tile count without reading offs from the GPU, so the launch takes the
bound min(SMs, (ceil(rows / BM) + G) x ceil(N / BN)) (`grid_blocks`); blocks with no tile exit at once.

`gemmdsl check` has no offs: it assumes ASSUMED_GROUPS groups sharing the problem's M rows evenly
(`even_offs`), each rounded up to whole tiles, and says so in its verdict.

Pure Python: the launch plan, `check`, the runtime and the tests read it without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence


@dataclass(frozen=True)
class GroupedTile:
    """One tile of a grouped launch: its group, first row (of A and C), the group's end row (the tile's rows are
    row .. min(row + BM, end) - 1), and its first column."""

    group: int
    row: int
    end: int
    col: int


ASSUMED_GROUPS = 8  # `check`'s group count: a common expert count per launch (Mixtral's 8)


def even_offs(rows: int, groups: int) -> list[int]:
    """The ends of `groups` groups sharing `rows` rows as evenly as whole rows allow."""
    return [rows * (g + 1) // groups for g in range(groups)]


def group_rows(offs: Sequence[int], rows: int) -> list[tuple[int, int]]:
    """(first row, end row) of each group, ends clamped to [previous end, rows] as the kernel clamps them."""
    spans, start = [], 0
    for off in offs:
        end = min(max(off, start), rows)
        spans.append((start, end))
        start = end
    return spans


def raster_tile(local: int, tiles_m: int, tiles_n: int, raster: str, group_size: int) -> tuple[int, int]:
    """(tile_m, tile_n) of tile `local` of one GEMM of tiles_m x tiles_n tiles through the raster ('row', 'col' or
    'group' with `group_size` tile rows), as emit/scheduler.emit_raster prints it."""
    if raster == "row":
        return local // tiles_n, local % tiles_n
    if raster == "col":
        return local % tiles_m, local // tiles_m
    per_group = group_size * tiles_n
    first = local // per_group * group_size
    rows_here = min(tiles_m - first, group_size)
    return first + local % per_group % rows_here, local % per_group // rows_here


def tile_count(offs: Sequence[int], rows: int, n: int, bm: int, bn: int) -> int:
    """Tiles of the whole launch: the sum over groups of ceil(m_g / BM) x ceil(N / BN)."""
    tiles_n = -(-n // bn)
    return sum(-(-(end - start) // bm) * tiles_n for start, end in group_rows(offs, rows))


def grid_blocks(rows: int, n: int, groups: int, bm: int, bn: int, sms: int) -> int:
    """The blocks the launcher starts: one per SM, or fewer where the tiles' bound is smaller (at least 1)."""
    bound = (-(-rows // bm) + groups) * -(-n // bn)
    return max(1, min(sms, bound))


def block_tiles(offs: Sequence[int], rows: int, n: int, bm: int, bn: int, raster: str, group_size: int,
                blocks: int, block: int) -> Iterator[GroupedTile]:
    """The tiles block `block` of `blocks` computes, in order, by the cursor walk the kernel runs."""
    tiles_n = -(-n // bn)
    spans = group_rows(offs, rows)
    group, first = 0, 0  # the cursor: the group of the next tile and its first tile number
    tile = block
    while True:
        while group < len(spans) and tile >= first + -(-(spans[group][1] - spans[group][0]) // bm) * tiles_n:
            first += -(-(spans[group][1] - spans[group][0]) // bm) * tiles_n
            group += 1
        if group == len(spans):
            return
        start, end = spans[group]
        tile_m, tile_n = raster_tile(tile - first, -(-(end - start) // bm), tiles_n, raster, group_size)
        yield GroupedTile(group, start + tile_m * bm, end, tile_n * bn)
        tile += blocks

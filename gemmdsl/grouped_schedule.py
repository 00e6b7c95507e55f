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
bound min(SMs, (ceil(rows / BM) + G) x ceil(N / BN)) (`grid_rule`); blocks with no tile exit at once.

`gemmdsl check` has no offs: it assumes ASSUMED_GROUPS groups sharing the problem's M rows evenly
(`even_offs`), each rounded up to whole tiles, and says so in its verdict.

The group's end, its tile count and the launch's grid are written once as expressions (rule.py): the
kernel and the launcher print them, the functions here evaluate them. Pure Python: the launch plan, `check`,
the runtime and the tests read it without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Iterator, Sequence

from .expr import Expr, Var, lift
from .rule import Let, Operand, Rule, call_max, call_min, cast, ceil_div, maximum, minimum


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


def group_end(off: Operand, start: Operand, rows: Operand = Var("rows")) -> Expr:
    """A group's end row: its offs entry `off` clamped to [its first row `start`, `rows`]. The kernel's cursor
    prints it (paths/wgmma/grouped.py); `group_rows` evaluates it."""
    return call_min(call_max(off, start), rows)


def group_tiles(start: Operand, end: Operand, bm: Operand = Var("BM"), tiles_n: Operand = Var("n_tiles")) -> Expr:
    """Tiles of the group of rows start .. end - 1: ceil((end - start) / BM) x the tiles across N."""
    return ceil_div(lift(end) - start, bm) * tiles_n


_END = group_end(Var("off"), Var("start"))


def group_rows(offs: Sequence[int], rows: int) -> list[tuple[int, int]]:
    """(first row, end row) of each group, ends clamped to [previous end, rows] as the kernel clamps them."""
    spans, start = [], 0
    for off in offs:
        end = _END.evaluate({"off": off, "start": start, "rows": rows})
        spans.append((start, end))
        start = end
    return spans


@cache
def grid_rule(bm: int, bn: int) -> Rule:
    """The blocks a grouped launch starts (`blocks`): the bound on the tiles, (ceil(M / BM) + groups) x
    ceil(N / BN), at most one block per SM (`sms`) and at least one. The launcher prints it; `grid_blocks`
    evaluates it."""
    bound = Var("bound")
    return Rule("grouped_grid", ("M", "N", "groups", "sms"), (
        Let("bound", (ceil_div(cast("long long", Var("M")), bm) + Var("groups")) * ceil_div(Var("N"), bn),
            comment="Persistent: the tiles are counted on the GPU (offs lives there); the bound on them is\n"
                    "(ceil(M / BM) + groups) x ceil(N / BN) (grouped_schedule.grid_rule), at most one block per SM."),
        Let("one_wave", minimum(Var("sms"), bound)),
        Let("blocks", maximum(Var("one_wave"), 1), comment="at least one block")))


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


_TILES = group_tiles(Var("start"), Var("end"))


def _tiles_of(span: tuple[int, int], bm: int, tiles_n: int) -> int:
    return _TILES.evaluate({"start": span[0], "end": span[1], "BM": bm, "n_tiles": tiles_n})


def tile_count(offs: Sequence[int], rows: int, n: int, bm: int, bn: int) -> int:
    """Tiles of the whole launch: the sum over groups of ceil(m_g / BM) x ceil(N / BN)."""
    tiles_n = -(-n // bn)
    return sum(_tiles_of(span, bm, tiles_n) for span in group_rows(offs, rows))


def grid_blocks(rows: int, n: int, groups: int, bm: int, bn: int, sms: int) -> int:
    """The blocks the launcher starts (grid_rule): one per SM, or fewer where the tiles' bound is smaller (at
    least 1)."""
    return grid_rule(bm, bn).evaluate({"M": rows, "N": n, "groups": groups, "sms": sms})["blocks"]


def block_tiles(offs: Sequence[int], rows: int, n: int, bm: int, bn: int, raster: str, group_size: int,
                blocks: int, block: int) -> Iterator[GroupedTile]:
    """The tiles block `block` of `blocks` computes, in order, by the cursor walk the kernel runs."""
    tiles_n = -(-n // bn)
    spans = group_rows(offs, rows)
    group, first = 0, 0  # the cursor: the group of the next tile and its first tile number
    tile = block
    while True:
        while group < len(spans) and tile >= first + _tiles_of(spans[group], bm, tiles_n):
            first += _tiles_of(spans[group], bm, tiles_n)
            group += 1
        if group == len(spans):
            return
        start, end = spans[group]
        tile_m, tile_n = raster_tile(tile - first, -(-(end - start) // bm), tiles_n, raster, group_size)
        yield GroupedTile(group, start + tile_m * bm, end, tile_n * bn)
        tile += blocks

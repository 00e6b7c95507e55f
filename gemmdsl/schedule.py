"""How a `schedule: stream_k` launch divides its work, stated once.

A launch of T tiles on a GPU that holds S blocks at a time (SMs x blocks per SM) runs
in ceil(T / S) waves; when T % S tiles are left for the last wave, the rest of that
wave's slots idle (4096^3 in 128x128 tiles on a 132-SM H100 at 2 blocks per SM: 1024
tiles, 3.88 waves, 3% of the launch lost; 1024^3: 64 tiles, 76% of the only wave idle).

Stream-K gives those last T % S tiles' k-tiles to one whole wave of blocks in equal,
contiguous ranges. When T < S that is every tile, and stream-K is split-K with ranges that
may cross tiles: 256x256x65536 (4 tiles of 8192 k-tiles) runs on all 264 slots, 124 k-tiles
each, instead of on 4 blocks; 16x4096x4096 (32 tiles of 512) on 264 blocks of 62 k-tiles. A range may cover the end of one tile and the start of the next;
the blocks add their partial sums into C with atomics, so those tiles of C are first set
to beta * C by a small kernel. The stream-K blocks run first, then the plain kernel
computes the other tiles, one block each, in whole waves.

Edge tiles and a partial last k-tile (bounds: checked) count as whole ones: the kernels guard
them. A call whose operands need the scalar kernel (a pointer or leading dimension that breaks
vector alignment) is split the same way, its shared tiles on `NAME_kernel_stream_k_scalar`. A strided batch is split per GEMM: each of its B GEMMs gets S // B slots and is split
the same way (the grid's z stays the GEMM in every kernel, so a block's range never crosses
GEMMs); a batch of S or more GEMMs fills the GPU by itself and is not split.

Checked bounds without stream-K (`interior_launches`): the tiles that lie wholly inside C run
`NAME_kernel_interior`, compiled as for exact bounds, and the vector kernel runs the two edge
strips as GEMMs of their own (operands offset to the strip). When K is not a multiple of BK the
tiles inside C run `NAME_kernel_interior_partial_k` instead: the same code, plus the partial last
k-tile, zero-filled past K (a kernel of its own, so that the interior kernel keeps the exact
kernel's code and registers). Carrying the guarded path beside the unguarded one in one kernel costs the
interior blocks instruction scheduling, and ptxas allocates registers for the heavier path. The strips
run after the interior, each a partial wave of the whole k-loop, so the split pays only where the
interior is long enough (`interior_split_pays`); otherwise the vector kernel runs every tile.

On the wgmma path (Hopper) stream-K lives in the persistent kernel itself: one wave of blocks first
walks its stream-K range, then the plain tiles, and instead of atomics the blocks that meet a
shared tile before its last k-tile leave their partial sums in a workspace for the block that
does that last k-tile (`contributors`), which adds them before the epilogue: any C type, beta
applied once, and the same sums in the same order on every run.

The emitted host launcher (C++), the CuPy runtime, the CPU emulation tests and the
analysis all follow this module; `stream_k_split_rule` is the rule (rule.py: the launchers print it as C,
`stream_k_split` evaluates it, `call_split` applies it to a call's shape).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from .expr import Const, Var
from .rule import Let, Rule, all_of, cast, ceil_div, eq, ge, gt, le, lt, maximum, minimum, select

# A stream-K block's range must be long enough to pay for its prologue, epilogue and
# atomics; with fewer k-tiles of work than this per block, fewer blocks share it.
MIN_K_TILES_PER_BLOCK = 4
# Stream-K costs atomics and a pass over the shared tiles of C: it is used only when at
# least this percentage of the last wave's slots would otherwise idle. Measured on the
# H100 (docs/performance.md, notes): at 3% idle (2048^3) it did not pay, at 12% it did.
MIN_IDLE_PERCENT = 10
# The FMA and mma.sync launchers' stream-K costs two launches more (the kernel that sets the shared tiles
# of C to beta * C, and the plain tiles' kernel after the stream-K one) and atomics; it shortens the last
# wave by about its idle share of the tile's k-tiles. So there it splits only when that share times the
# k-tiles is at least this many. Measured on the H100 (docs/performance.md, \"Stream-K at short K\"; sgemm_any and
# checked_128x32, 52-76% of the slots idle): it lost 24-48% at 8 and 16 k-tiles, broke even at 32 and won
# 11-46% from 64 up; 24 is about where the break-even products (17 and 24) lie. The wgmma path's
# stream-K lives in its one persistent launch and takes no such floor (0).
LAUNCHED_MIN_SAVED_K_TILES = 24
MAX_WORK = 2**31 - 1  # the kernel counts stream-K work in int
# Where every shared tile can get the same whole number of stream-K blocks with at most this percentage of the
# slots idle, the split takes that many blocks: the blocks of each tile then start at the same k-tiles and walk
# them in step, so tiles that share rows of A or columns of B read them from L2 while the other tile's blocks
# have just brought them in, and each tile's partial sums come from the same number of blocks.
ALIGN_IDLE_PERCENT = 5
# The wgmma path's stream-K sums a tile's partial sums in its last block, one contributor after another (each a
# flag wait and a BM x BN read through L2, about 1.1 us for 64x128 f32 on the H200), so a tile shared by every SM
# spent more time in that chain than in its k-tiles: 44x33x26964 ran 154 us on 132 blocks where cuBLAS took 22.
# With c blocks on a tile of k k-tiles the time is about k / c k-tiles plus c - 1 such reads; at the measured
# costs (a k-tile about a quarter of a read) that is least near c = sqrt(k / 4), and flat around it: the split
# gives a tile at most max(2, k_tiles / FIXUP_K_TILES_PER_SHARER) blocks (k = 422: 13).
FIXUP_K_TILES_PER_SHARER = 32
# Waves of interior tiles per edge strip below which a checked call runs as one launch of the vector
# kernel rather than as the interior kernel and its strips. Measured on the H100 (docs/performance.md, "The
# interior split"; sgemm_any, checked_64x64 and checked_v3 at 27 shapes): with no strip the interior kernel ran 7-8%
# faster than the vector kernel, but each strip, launched after the interior, adds a partial wave of the
# whole k-loop; the split lost 3% to 2.7x at 4 waves per strip or fewer (8000x4000x4000, 3.6, won 1%),
# was within 0.5% at 5.5-5.6 and won 1.6-8.5% from 6.5 up.
INTERIOR_MIN_WAVES_PER_STRIP = 6
# A kernel family's rule (family.py) predicts cycles that saturate here, so that the rule, printed as C, stays
# inside long long (twice this fits) at any shape it accepts; no shape that fits in memory comes near it.
CYCLE_CAP = 2**61


@dataclass(frozen=True)
class StreamKSplit:
    tiles: int  # C tiles of the launch (of one GEMM of a batch)
    k_tiles: int  # k-tiles per C tile
    slots: int  # blocks the GPU holds at once, per GEMM of a batch
    sk_tiles: int  # the last tiles, whose k-tiles the stream-K blocks share (0: no stream-K)
    sk_blocks: int  # blocks of the stream-K kernel (per GEMM: the grid's x; z is the GEMM)

    @property
    def dp_tiles(self) -> int:
        """Tiles the plain kernel computes, one block each."""
        return self.tiles - self.sk_tiles

    @property
    def first_sk_tile(self) -> int:
        return self.tiles - self.sk_tiles

    @property
    def sk_work(self) -> int:
        """The shared k-tiles, numbered tile by tile from the first shared tile's k-tile 0."""
        return self.sk_tiles * self.k_tiles

    def range_begin(self, block: int) -> int:
        """Where stream-K block `block`'s range of shared k-tiles begins: sk_work * block // sk_blocks,
        written as the wgmma kernel computes it in 32-bit arithmetic (no product over sk_work)."""
        quotient, remainder = divmod(self.sk_work, self.sk_blocks)
        return quotient * block + remainder * block // self.sk_blocks

    def block_of(self, unit: int) -> int:
        """The stream-K block whose range holds shared k-tile `unit`: the last block whose range begins
        at or before it (block b's begins at floor(work b / blocks))."""
        return ((unit + 1) * self.sk_blocks + self.sk_work - 1) // self.sk_work - 1

    def contributors(self, tile: int) -> range:
        """The blocks that leave partial sums of shared tile `tile` for the block that finishes it (the
        one that does its last k-tile, as its last piece): every block whose range meets the tile before
        that one. Each of them meets the tile at the end of its range, its first piece, so each leaves one
        partial sum per launch (the wgmma path's fixup, paths/wgmma/stream_k.py)."""
        first = (tile - self.first_sk_tile) * self.k_tiles
        return range(self.block_of(first), self.block_of(first + self.k_tiles - 1))

    def segments(self, block: int) -> list[tuple[int, int, int]]:
        """(tile, first k-tile, end k-tile) of each piece of work stream-K block `block` does, in the
        order it does them: the kernel's loop, written out. The range is walked from its end, so the
        first piece starts at k-tile 0 of its tile and the last ends at the tile's last k-tile."""
        begin, end = self.range_begin(block), self.range_begin(block + 1)
        pieces = []
        while end > begin:
            tile, last = divmod(end - 1, self.k_tiles)
            first = max(0, last + 1 - (end - begin))
            pieces.append((self.first_sk_tile + tile, first, last + 1))
            end -= last + 1 - first
        return pieces


@cache
def stream_k_split_rule(min_saved_k_tiles: int = 0, aligned: bool = False) -> Rule:
    """`stream_k_split` as a rule (rule.py): the launchers print it as `NAME_stream_k_split`, Python evaluates it.
    Inputs: the tiles and k-tiles of one GEMM, the slots of the GPU, the batch; outputs: sk_tiles and
    sk_blocks (both 0: no stream-K)."""
    tiles, k_tiles, slots, batch = Var("tiles"), Var("k_tiles"), Var("slots"), Var("batch")
    gemm_slots, shared, work, blocks = Var("gemm_slots"), Var("shared"), Var("work"), Var("blocks")
    steps: list = [
        Let("gemm_slots", slots // batch, comment="Each GEMM of the batch gets slots / batch slots;"),
        Let("shared", select(lt(gemm_slots, 1), 0, tiles % gemm_slots), comment="its last wave's tiles are shared"),
        Let("work", shared * k_tiles),
        Let("fewest", ceil_div(work, MIN_K_TILES_PER_BLOCK),
            comment=f"by blocks of at least {MIN_K_TILES_PER_BLOCK} k-tiles, one wave at most"),
        Let("blocks", minimum(Var("fewest"), gemm_slots)),
    ]
    if aligned:
        spare = Var("spare")
        steps += [Let("spare", select(gt(shared, 0), gemm_slots % shared, 0),
                      comment=f"as many blocks for every shared tile, where that idles at most {ALIGN_IDLE_PERCENT}% "
                              "of the slots"),
                  Let("even_blocks", select(all_of(eq(blocks, gemm_slots), gt(shared, 0),
                                                   le(spare * 100, ALIGN_IDLE_PERCENT * gemm_slots)),
                                            blocks - spare, blocks)),
                  Let("sharers", maximum(k_tiles // FIXUP_K_TILES_PER_SHARER, 2),
                      comment="and at most this many blocks a tile: its partial sums are added one after another"),
                  Let("capped_blocks", minimum(Var("even_blocks"), shared * Var("sharers")))]
        blocks = Var("capped_blocks")
    steps.append(Let("idle_enough", ge((gemm_slots - shared) * 100, MIN_IDLE_PERCENT * gemm_slots), ctype="bool"))
    pays = [gt(blocks, shared), le(work, MAX_WORK), Var("idle_enough")]
    if min_saved_k_tiles:
        steps.append(Let("saves_enough", ge((gemm_slots - shared) * k_tiles, min_saved_k_tiles * gemm_slots),
                         ctype="bool"))
        pays.append(Var("saves_enough"))
    steps.append(Let("pays", all_of(*pays), ctype="bool",
                     comment="unless stream-K would not shorten the launch"))
    return Rule("stream_k_split", ("tiles", "k_tiles", "slots", "batch"), tuple(steps),
                (("sk_tiles", select(Var("pays"), shared, 0)), ("sk_blocks", select(Var("pays"), blocks, 0))),
                comment="gemmdsl/schedule.py's stream_k_split_rule: the last wave's tiles % slots tiles of each GEMM go "
                        "to\nstream-K blocks, unless that would not shorten the launch.")


def stream_k_split(tiles: int, k_tiles: int, slots: int, batch: int = 1, min_saved_k_tiles: int = 0,
                   aligned: bool = False) -> StreamKSplit:
    """The split the launcher makes for one GEMM of `batch`: the last wave's T % S tiles go to
    stream-K blocks, unless stream-K would not shorten the launch (a whole tile of work per block
    or more, too few idle slots to pay for it, or, with `min_saved_k_tiles`, the idle share of the
    k-tiles below it: LAUNCHED_MIN_SAVED_K_TILES for the launchers that pay launches for it). Blocks
    get at least MIN_K_TILES_PER_BLOCK k-tiles, so a long K (or few tiles) takes every slot and a short
    one fewer; with `aligned` (the wgmma path's persistent stream-K), a long K takes a multiple of the shared
    tiles where that idles few slots (ALIGN_IDLE_PERCENT), and a tile takes at most max(2, k_tiles /
    FIXUP_K_TILES_PER_SHARER) blocks (its partial sums are added one after another). The rule is
    `stream_k_split_rule`."""
    split = stream_k_split_rule(min_saved_k_tiles, aligned).evaluate(
        {"tiles": tiles, "k_tiles": k_tiles, "slots": slots, "batch": batch})
    return StreamKSplit(tiles, k_tiles, split["gemm_slots"], split["sk_tiles"], split["sk_blocks"])


def call_split(block_tile: tuple[int, int, int], m: int, n: int, k: int, slots: int, batch: int = 1,
               min_saved_k_tiles: int = 0, aligned: bool = False) -> StreamKSplit:
    """The split of one call (M, N, K, batch) on a GPU of `slots` resident blocks, for a kernel of
    `block_tile` (BM, BN, BK): edge tiles and a partial last k-tile count as whole ones. Calls on the
    scalar kernel split alike, on the scalar stream-K kernel."""
    bm, bn, bk = block_tile
    tiles = _ceil_div(m, bm) * _ceil_div(n, bn)
    return stream_k_split(tiles, _ceil_div(k, bk), slots, batch, min_saved_k_tiles, aligned)


def _ceil_div(extent: int, tile: int) -> int:
    return -(-extent // tile)


@dataclass(frozen=True)
class SubLaunch:
    """One launch over the block of C at rows [row, row + m), columns [col, col + n), all of K: the
    kernel gets M = m, N = n and A, B, C offset to that block (A by `row` rows, B by `col` columns)."""

    interior: bool  # the interior kernel (exact-bounds code); else the vector kernel
    row: int
    col: int
    m: int
    n: int
    partial_k: bool = False  # an interior launch whose K is not a multiple of BK: the partial-k interior kernel


@cache
def interior_rules(block_tile: tuple[int, int, int], batched: bool) -> tuple[Rule, Rule]:
    """`interior_split_pays` as two rules, which the launcher prints around its query of the GPU's slots: whether
    C has a whole tile and K a whole k-tile (`has_interior`; inputs M, N, K), then whether the split pays on
    `sms` x `per_sm` slots (`interior_pays`; inputs M, N, `batch` where `batched`, `sms`, `per_sm`), with the
    interior's extent (`inner_m`, `inner_n`) the launches take."""
    bm, bn, bk = block_tile
    M, N = Var("M"), Var("N")
    inner_m, inner_n = Var("inner_m"), Var("inner_n")
    batch = Var("batch") if batched else Const(1)
    has_interior = Rule("has_interior", ("M", "N", "K"),
                        (Let("has_interior", all_of(ge(M, bm), ge(N, bn), ge(Var("K"), bk)), "bool"),))
    slots = cast("long long", Var("sms")) * Var("per_sm")
    pays = Rule("interior_pays", ("M", "N", *(("batch",) if batched else ()), "sms", "per_sm"), (
        Let("inner_m", M - M % bm, "int"),
        Let("inner_n", N - N % bn, "int"),
        Let("strips", gt(M, inner_m) + gt(N, inner_n)),
        *((Let("plane_tiles", cast("long long", inner_m // bm) * (inner_n // bn)),
           Let("inner_tiles", select(gt(Var("plane_tiles"), Const(CYCLE_CAP) // batch), CYCLE_CAP,
                                     Var("plane_tiles") * batch),
               comment="saturating: a batch of the largest planes passes long long"))
          if batched else (Let("inner_tiles", cast("long long", inner_m // bm) * (inner_n // bn)),)),
        Let("interior_pays", ge(Var("inner_tiles"), INTERIOR_MIN_WAVES_PER_STRIP * Var("strips") * slots), "bool")))
    return has_interior, pays


def interior_split_pays(block_tile: tuple[int, int, int], m: int, n: int, k: int, slots: int, batch: int = 1) -> bool:
    """Whether a checked call on a GPU of `slots` resident blocks (SMs x blocks per SM) runs as
    `interior_launches` says rather than as one launch of the vector kernel: when it has an interior
    of at least INTERIOR_MIN_WAVES_PER_STRIP waves per edge strip (with no strip, whenever it has one).
    The rule is `interior_rules`."""
    has_interior, pays = interior_rules(block_tile, batched=True)
    if not has_interior.evaluate({"M": m, "N": n, "K": k})["has_interior"]:
        return False
    return bool(pays.evaluate({"M": m, "N": n, "batch": batch, "sms": slots, "per_sm": 1})["interior_pays"])


def interior_launches(block_tile: tuple[int, int, int], m: int, n: int, k: int) -> tuple[SubLaunch, ...]:
    """How a checked spec's unsplit call on the vector kernel is launched: the tiles inside C on the
    interior kernel (when K is not a multiple of BK, the partial-k one), then the right strip (every
    row) and the bottom strip (the interior's columns) on the vector kernel. Without a whole tile
    along M or N, or a whole k-tile (K < BK), there is no interior: the vector kernel then runs the
    whole of C."""
    bm, bn, bk = block_tile
    inner_m, inner_n = m - m % bm, n - n % bn
    if k < bk or not inner_m or not inner_n:
        return (SubLaunch(False, 0, 0, m, n),)
    launches = [SubLaunch(True, 0, 0, inner_m, inner_n, partial_k=k % bk != 0)]
    if n > inner_n:
        launches.append(SubLaunch(False, 0, inner_n, m, n - inner_n))
    if m > inner_m:
        launches.append(SubLaunch(False, inner_m, 0, m - inner_m, inner_n))
    return tuple(launches)

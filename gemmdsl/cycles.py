"""The cycle model: SM clock cycles a tiling takes for a problem size on the target's reference GPU.

A `MemberModel` holds what the model knows of one kernel (its tile, blocks per SM, the cycles of one
k-tile for each number of resident blocks, per-tile and stream-K costs); `estimate` turns it into
cycles for M x N x K over the grid's waves (the formula is family.py's module docstring). The family
rule picks members by it. Each instruction path builds its own members' models
(`InstructionPath.member_model`): the FMA path from the tuner's cost model (cost_model.py), mma.sync
from the analysis passes' figures (paths/mma_sync/cycles.py) and Hopper's own path from the lowered
layout alone (paths/wgmma/cycles.py), so for tensor-core kernels the tuner's score (`tensor_share`),
the families and, for wgmma, the bound pass (`gemmdsl check`) all read one model.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache, partial

from . import ir
from .expr import Const, Func, Var
from .rule import (Apply, Field, Function, Index, Let, Literal, Loop, Refuse, Refused, Rule, Skip, all_of, any_of,
                   ceil_div, eq, ge, gt, lt, maximum, minimum, ne, not_, select)
from .schedule import CYCLE_CAP, LAUNCHED_MIN_SAVED_K_TILES, stream_k_split_rule
from .targets import CALL_CYCLES, EXTRA_LAUNCH_CYCLES, HBM_BYTES_PER_CLOCK




@dataclass(frozen=True)
class MemberModel:
    """What the rule knows of a member: its tiling and the analysis' cycle figures. The figures come
    from the member's own path (`family.member_model`): the tuner's cost model for FMA, the issue and
    wavefront model for mma.sync, or the wgmma path's tensor, shared-memory and L2 rates; the rule
    itself is the same."""

    name: str
    tile: tuple[int, int, int]  # BM, BN, BK
    exact: bool  # bounds: exact: only shapes that the tile divides
    stream_k: bool
    sms: int  # the target's reference GPU
    blocks_per_sm: int
    k_tile_cycles: tuple[int, ...]  # [r - 1]: SM cycles for one k-tile of r resident blocks, r = 1..blocks_per_sm
    tensor_cycles: int = 0  # tensor-core kernels: one block's k-tile of multiply-adds at the instruction's peak
    tile_cycles: int = 0  # per resident block and tile, beyond its k-tiles (the wgmma path: C through L2)
    # ... where a packed C's leading dimension (N for row-major C, M for column-major: `c_ld_is_n`) is off `c_align`
    # elements, the tile's stores narrower (the FMA path: one element a lane, several sectors a row)
    narrow_tile_cycles: int = 0
    c_align: int = 1
    c_ld_is_n: bool = True
    # ... and there, a floor beside the memory floor: C's bytes at the rate all SMs write C that way (0: none; the
    # wgmma path's row stores, a rate per byte of C whatever the tile, so it leaves the members' ranking to their
    # cycles before the floors)
    narrow_store_bytes_per_clock: int = 0
    partial_cycles: int = 0  # per stream-K block: its partial sums written and read back through L2
    # per contributor to a shared tile beyond the first: the tile's last block waits for each and adds its partial
    # sums, one after another (the wgmma path's stream-K)
    fixup_cycles: int = 0
    # per call, whatever its size: the launch and the pipeline's fill and drain (`call_latency_ns` of the profile)
    call_cycles: int = 0
    # per launch a call makes beyond its first: the FMA and mma.sync paths' stream-K launches a kernel that
    # sets the shared tiles of C to beta * C before the stream-K kernel, and the plain tiles' after it
    launch_cycles: int = 0
    min_saved_k_tiles: int = 0  # the launcher's stream-K floor (schedule.stream_k_split)
    aligned_split: bool = False  # the launcher's stream-K gives every shared tile as many blocks (the wgmma path)
    # whether it runs operands of any alignment (a kernel with one-element accesses), where TMA members and
    # exact ones refuse misaligned pointers and leading dimensions: a family's fallback (family.choose)
    any_alignment: bool = True
    fallback: bool = False  # the family's `fallback` member: chosen only among those that run any alignment
    # The memory floor (estimate_rule's `memory`): HBM's bytes per clock on the reference GPU (0: no floor); the bytes
    # per element of A, B and C (C counted once, written: it is read only when beta is not 0, which the rule
    # does not know, and a floor counts what every call moves); and, where the path's
    # blocks keep a ring of k-tiles in flight (wgmma), how many (0: no per-block limit) and their round trip.
    hbm_bytes_per_clock: int = 0
    element_bytes: tuple[int, int, int] = (0, 0, 0)
    in_flight_k_tiles: int = 0
    round_trip_cycles: int = 0
    # Where a block's k-tiles come through L2 at a rate the streaming blocks share (wgmma's TMA): its bytes per
    # k-tile (0: k_tile_cycles are fixed), the k-tile's cycles without them and its wait beyond them, L2's bytes per
    # clock for all SMs together, and the most one block draws alone. With every SM streaming a block gets L2's
    # rate over the SMs; with a few (a small call, a few stream-K blocks) each draws up to that most.
    stage_bytes: int = 0
    k_tile_base_cycles: int = 0
    k_tile_wait_cycles: int = 0
    l2_bytes_per_clock: int = 0
    l2_block_bytes_per_clock: int = 0
    # A member whose launcher copies the operands TMA refuses (paths/wgmma/pad.py): a call of packed operands whose
    # leading dimension (K, or M or N by the layout: `a_ld_is_k`, `b_ld_is_k`) is not a multiple of `a_align` or
    # `b_align` elements pays the copy's launch and pass (`pad_call_cycles`, and the copy's bytes read and written at
    # `pad_bytes_per_clock`).
    pads: bool = False
    a_ld_is_k: bool = True
    b_ld_is_k: bool = True
    a_align: int = 1
    b_align: int = 1
    pad_call_cycles: int = 0
    pad_bytes_per_clock: int = 0
    # A member that reads operands of any alignment itself (the mma.sync members) runs narrower kernels where a
    # packed operand's leading dimension is off a_align or b_align elements: its k-tiles' cycles there, in percent;
    # and where it is off a_scalar_align or b_scalar_align too, its scalar kernel's (one element a load).
    narrow_percent: int = 100
    scalar_percent: int = 100
    scalar_k_tile_cycles: int = 0  # ... and at least this per k-tile there (its loads' round trip)
    a_scalar_align: int = 1
    b_scalar_align: int = 1
    # A member that splits K its own way (the dequantizing decode kernel's k-slices: paths/dequant/facts.py), as a
    # rule of stream_k_split_rule's inputs and outputs; None: the launcher's stream-K split where `stream_k`.
    split: Rule | None = None
    terms: tuple[tuple[str, float], ...] = ()  # the figures the cycles come from, for metadata and `check`

    @property
    def slots(self) -> int:
        return self.sms * self.blocks_per_sm

    def accepts(self, m: int, n: int, k: int) -> bool:
        bm, bn, bk = self.tile
        return not self.exact or (m % bm == 0 and n % bn == 0 and k % bk == 0)

    def cycles_per_k_tile(self, resident: int) -> int:
        return self.k_tile_cycles[resident - 1]


@dataclass(frozen=True)
class Estimate:
    """The rule's figures for one member at one problem size."""

    member: MemberModel
    accepted: bool
    tiles: int = 0
    k_tiles: int = 0
    waves: int = 0  # waves of plain tiles, the last one possibly partial
    sk_tiles: int = 0  # tiles whose k-tiles stream-K blocks share (0: none)
    useful: float = 0.0  # useful multiply-adds over launched ones (edge tiles waste the rest)
    cycles: int = 0  # the larger of the two below
    compute_cycles: int = 0  # the waves of k-tiles at the member's per-SM rates
    memory_cycles: int = 0  # the memory floor: the bytes that must cross HBM at the rate the launch can draw
    streaming_blocks: int = 0  # blocks that stream k-tiles at once


def saturating(prefix: str = "") -> tuple[Func, Func]:
    """The rule's product and sum, saturating at CYCLE_CAP (so that the C launcher's rule stays inside long
    long at any shape it accepts): C's `{prefix}product` and `{prefix}sum`, which read `{prefix}CYCLE_CAP`."""
    cap, a, b = Literal(f"{prefix}CYCLE_CAP", CYCLE_CAP), Var("a"), Var("b")
    return (Func(f"{prefix}product", ("a", "b"), select(all_of(ne(b, 0), gt(a, cap // b)), cap, a * b)),
            Func(f"{prefix}sum", ("a", "b"), select(gt(a + b, cap), cap, a + b)))


# The C launcher's table of a family's members (emit/family.py prints the struct from this, and each member's row
# from `member_fields` in this order): (C type, with `{}` where the names go; the fields; what they hold).
MEMBER_STRUCT = (
    ("long long {}", ("bm", "bn", "bk"), ""),
    ("bool {}", ("exact",), "bounds: exact: only the shapes the tile divides"),
    ("bool {}", ("any_alignment",), "runs operands of any alignment: the fallback of a call another refused"),
    ("bool {}", ("fallback",), "the family's `fallback`: runs only what the others refuse"),
    ("void (*{})(long long, long long, long long, long long, int*, int*)", ("stream_k_split",), "null: tiles only"),
    ("long long {}", ("sms", "blocks_per_sm"), ""),
    ("const long long* {}", ("k_tile_cycles",), "[r - 1]: one k-tile of r blocks resident on one SM"),
    ("long long {}", ("tile_cycles",), "per resident block and tile, beyond its k-tiles"),
    ("long long {}", ("narrow_tile_cycles", "c_align"), "... where C's leading dimension is off c_align elements"),
    ("bool {}", ("c_ld_is_n",), "C's leading dimension is N (row-major C)"),
    ("long long {}", ("narrow_store_bytes_per_clock",), "... and C's bytes a clock there, a floor (0: none)"),
    ("long long {}", ("partial_cycles",), "per stream-K block: its partial sums through L2"),
    ("long long {}", ("fixup_cycles",), "per contributor to a shared tile beyond the first, one after another"),
    ("long long {}", ("call_cycles",), "per call: the launch, the pipeline's fill and drain"),
    ("long long {}", ("launch_cycles",), "per launch beyond a call's first (stream-K's prepare and plain kernels)"),
    ("long long {}", ("hbm_bytes_per_clock",), "the memory floor: HBM's rate (0: none)"),
    ("long long {}", ("a_bytes", "b_bytes", "c_bytes"), "per element: A and B read, C written once"),
    ("long long {}", ("in_flight_k_tiles", "round_trip_cycles"), "per streaming block (0: no per-block limit)"),
    ("long long {}", ("stage_bytes",), "a block's k-tile through L2 (0: k_tile_cycles are fixed)"),
    ("long long {}", ("k_tile_base_cycles", "k_tile_wait_cycles"), "the k-tile without those bytes, and after them"),
    ("long long {}", ("l2_bytes_per_clock", "l2_block_bytes_per_clock"), "L2 for all SMs, and the most one block draws"),
    ("bool {}", ("pads", "a_ld_is_k", "b_ld_is_k"),
     "copies the operands TMA refuses; A's and B's leading dimension is K"),
    ("long long {}", ("a_align", "b_align"), "elements a leading dimension TMA reads is a multiple of"),
    ("long long {}", ("pad_call_cycles", "pad_bytes_per_clock"), "the copy's launch and pass, and its rate"),
    ("long long {}", ("narrow_percent", "scalar_percent"),
     "its k-tiles' cycles in percent where it reads misaligned operands itself, and one element at a time"),
    ("long long {}", ("scalar_k_tile_cycles",), "... and the scalar kernel's least k-tile"),
    ("long long {}", ("a_scalar_align", "b_scalar_align"), "elements a leading dimension its wider copies need"),
)


def member_fields(member: MemberModel) -> dict:
    """A member's figures under the names `estimate_rule` reads: MEMBER_STRUCT's fields, the C table's."""
    return _member_fields(member)


@lru_cache(maxsize=4096)
def _member_fields(member: MemberModel) -> dict:
    bm, bn, bk = member.tile
    a, b, c = member.element_bytes
    split = member.split or (stream_k_split_rule(member.min_saved_k_tiles, member.aligned_split) if member.stream_k
                             else None)
    return dict(bm=bm, bn=bn, bk=bk, exact=int(member.exact), any_alignment=int(member.any_alignment),
                fallback=int(member.fallback), stream_k_split=split, sms=member.sms,
                blocks_per_sm=member.blocks_per_sm, k_tile_cycles=member.k_tile_cycles, tile_cycles=member.tile_cycles,
                narrow_tile_cycles=member.narrow_tile_cycles, c_align=member.c_align, c_ld_is_n=int(member.c_ld_is_n),
                narrow_store_bytes_per_clock=member.narrow_store_bytes_per_clock,
                partial_cycles=member.partial_cycles, fixup_cycles=member.fixup_cycles, call_cycles=member.call_cycles,
                launch_cycles=member.launch_cycles,
                hbm_bytes_per_clock=member.hbm_bytes_per_clock, a_bytes=a, b_bytes=b, c_bytes=c,
                in_flight_k_tiles=member.in_flight_k_tiles, round_trip_cycles=member.round_trip_cycles,
                stage_bytes=member.stage_bytes, k_tile_base_cycles=member.k_tile_base_cycles,
                k_tile_wait_cycles=member.k_tile_wait_cycles, l2_bytes_per_clock=member.l2_bytes_per_clock,
                l2_block_bytes_per_clock=member.l2_block_bytes_per_clock, pads=int(member.pads),
                a_ld_is_k=int(member.a_ld_is_k), b_ld_is_k=int(member.b_ld_is_k), a_align=member.a_align,
                b_align=member.b_align, pad_call_cycles=member.pad_call_cycles,
                pad_bytes_per_clock=member.pad_bytes_per_clock, narrow_percent=member.narrow_percent,
                scalar_percent=member.scalar_percent,
                scalar_k_tile_cycles=member.scalar_k_tile_cycles, a_scalar_align=member.a_scalar_align,
                b_scalar_align=member.b_scalar_align)


@cache
def estimate_rule(prefix: str = "") -> Rule:
    """The cycles of member `m` (its figures: `member_fields`) at M x N x K, the formula of family.py's
    docstring: the stream-K blocks' share (the launcher's split), the plain tiles' whole waves and the last
    partial one at its residency, each step saturating (`saturating`); at least the memory floor (`memory`: A, B
    and C's bytes at HBM's rate, and where the member keeps k-tiles in flight what its `streaming` blocks draw by
    Little's law); plus the call's own cycles. Refused where an exact member cannot take the shape. C:
    `{prefix}cycles` (emit/family.py)."""
    product, total = saturating(prefix)
    m = partial(Field, Var("m"))
    M, N, K = Var("M"), Var("N"), Var("K")
    tiles, k_tiles, slots, full = Var("tiles"), Var("k_tiles"), Var("slots"), Var("full")
    sk_tiles, sk_blocks, plain, left = Var("sk_tiles"), Var("sk_blocks"), Var("plain"), Var("left")
    shares, streaming, traffic, in_flight = Var("shares"), Var("streaming"), Var("traffic"), Var("in_flight")
    rate = m("hbm_bytes_per_clock")
    k_tile_cycles = m("k_tile_cycles")

    def narrowed(k_tile):
        """A k-tile's cycles in the kernel the call's alignment runs: `k_tile_percent` of them, at least the floor."""
        return maximum(ceil_div(k_tile * Var("k_tile_percent"), 100), Var("k_tile_floor"))

    steps = (
        Refuse(all_of(m("exact"), any_of(ne(M % m("bm"), 0), ne(N % m("bn"), 0), ne(K % m("bk"), 0))),
               comment="bounds: exact: only the shapes the tile divides"),
        Let("tiles", ceil_div(M, m("bm")) * ceil_div(N, m("bn"))),
        Let("k_tiles", ceil_div(K, m("bk"))),
        Let("slots", m("sms") * m("blocks_per_sm")),
        Apply(m("stream_k_split"), (tiles, k_tiles, slots, 1), ("sk_tiles", "sk_blocks"),
              when=ne(m("stream_k_split"), Literal("nullptr", None)), comment="the launcher's split of one GEMM"),
        Let("shares", gt(sk_tiles, 0), "bool"),
        Let("plain", tiles - sk_tiles),
        Let("plain_wave", minimum(plain, slots), comment="blocks that stream k-tiles at once"),
        Let("streaming", select(shares, maximum(sk_blocks, Var("plain_wave")), minimum(tiles, slots))),
        Let("drawn_k_tile", select(gt(m("stage_bytes"), 0),
                                   maximum(ceil_div(m("stage_bytes"), maximum(m("l2_block_bytes_per_clock"), 1)),
                                           ceil_div(m("stage_bytes") * streaming, maximum(m("l2_bytes_per_clock"), 1))),
                                   0),
            comment="a k-tile's bytes through L2, at the share of its rate the streaming blocks leave each"),
        Let("a_misaligned", ne(select(m("a_ld_is_k"), K, M) % maximum(m("a_align"), 1), 0), "bool",
            comment="packed operands whose leading dimension is off the member's widest access"),
        Let("b_misaligned", ne(select(m("b_ld_is_k"), K, N) % maximum(m("b_align"), 1), 0), "bool"),
        Let("scalar", any_of(ne(select(m("a_ld_is_k"), K, M) % maximum(m("a_scalar_align"), 1), 0),
                             ne(select(m("b_ld_is_k"), K, N) % maximum(m("b_scalar_align"), 1), 0)), "bool",
            comment="... and off every copy wider than one element"),
        Let("k_tile_percent", select(Var("scalar"), m("scalar_percent"),
                                     select(any_of(Var("a_misaligned"), Var("b_misaligned")),
                                            m("narrow_percent"), 100)),
            comment="a member that reads misaligned operands itself runs its narrower kernels' k-tiles there"),
        Let("k_tile_floor", select(Var("scalar"), m("scalar_k_tile_cycles"), 0),
            comment="... the scalar kernel's at least its loads' round trip, however few blocks share an SM"),
        Let("full", narrowed(select(gt(m("stage_bytes"), 0),
                                    maximum(m("k_tile_base_cycles"), Var("drawn_k_tile")) + m("k_tile_wait_cycles"),
                                    Index(k_tile_cycles, m("blocks_per_sm") - 1))),
            comment="a k-tile with every slot resident"),
        Let("c_misaligned", ne(select(m("c_ld_is_n"), N, M) % maximum(m("c_align"), 1), 0), "bool",
            comment="a packed C whose leading dimension is off the member's widest stores"),
        Let("per_tile", select(Var("c_misaligned"), m("narrow_tile_cycles"), m("tile_cycles")),
            comment="a tile's own cycles beyond its k-tiles"),
        Let("per_block", select(shares, ceil_div(sk_tiles * k_tiles, sk_blocks), 0)),
        Let("contributors", select(shares, ceil_div(sk_blocks, sk_tiles), 1),
            comment="blocks on a shared tile, whose partial sums are added one after another"),
        Let("stream_k_cycles",
            select(shares, total(total(total(product(Var("per_block"), full),
                                             m("blocks_per_sm") * (Var("per_tile") + m("partial_cycles"))),
                                       product(Var("contributors") - 1, m("fixup_cycles"))),
                                 product(m("launch_cycles"), select(gt(plain, 0), 2, 1))), 0),
            comment="the stream-K blocks' ranges, their partial sums and their fixup, and the launches beyond the "
                    "first"),
        Let("left", plain % slots),
        Let("wave", total(product(k_tiles, full), m("blocks_per_sm") * Var("per_tile")), comment="a whole wave"),
        Let("last", ceil_div(left, m("sms")), comment="the last wave's blocks per SM"),
        Let("last_k_tile", narrowed(select(gt(m("stage_bytes"), 0),
                                           maximum(ceil_div(m("k_tile_base_cycles") * Var("last"), m("blocks_per_sm")),
                                                   Var("drawn_k_tile")) + m("k_tile_wait_cycles"),
                                           Index(k_tile_cycles, Var("last") - 1))),
            comment="the last wave's k-tile at its blocks per SM"),
        Let("last_wave", select(gt(left, 0), total(product(k_tiles, Var("last_k_tile")),
                                                    Var("last") * Var("per_tile")), 0)),
        Let("compute_cycles", total(total(Var("stream_k_cycles"), product(plain // slots, Var("wave"))),
                                    Var("last_wave"))),
        Let("traffic", total(total(product(product(M, K), m("a_bytes")), product(product(N, K), m("b_bytes"))),
                             product(product(M, N), m("c_bytes"))),
            comment="The memory floor: A and B read and C written once, at HBM's rate (0: no floor)"),
        Let("hbm_cycles", select(gt(rate, 0), ceil_div(traffic, rate), 0)),
        Let("in_flight", streaming * m("in_flight_k_tiles") * m("bk") * (minimum(M, m("bm")) * m("a_bytes")
                                                                         + minimum(N, m("bn")) * m("b_bytes")),
            comment="and, where blocks keep k-tiles in flight, what they draw in a round trip"),
        Let("drawn", select(all_of(gt(rate, 0), gt(in_flight, 0)),
                            ceil_div(product(traffic, m("round_trip_cycles")), in_flight), 0)),
        Let("stored", select(all_of(Var("c_misaligned"), gt(m("narrow_store_bytes_per_clock"), 0)),
                             ceil_div(product(product(M, N), m("c_bytes")),
                                      maximum(m("narrow_store_bytes_per_clock"), 1)), 0),
            comment="and C's bytes at the rate narrower stores reach, where C takes them"),
        Let("memory", maximum(maximum(Var("hbm_cycles"), Var("drawn")), Var("stored"))),
        Let("a_copied", all_of(m("pads"), Var("a_misaligned")), "bool",
            comment="packed operands TMA refuses, which the padded launcher copies first"),
        Let("b_copied", all_of(m("pads"), Var("b_misaligned")), "bool"),
        Let("copied_bytes", total(select(Var("a_copied"), product(product(M, K), m("a_bytes")), 0),
                                  select(Var("b_copied"), product(product(N, K), m("b_bytes")), 0))),
        Let("pad_cycles", select(any_of(Var("a_copied"), Var("b_copied")),
                                 total(m("pad_call_cycles"),
                                       ceil_div(product(Var("copied_bytes"), 2), maximum(m("pad_bytes_per_clock"), 1))),
                                 0),
            comment="the copy's launch and its bytes read and written"),
    )
    return Rule("cycles", ("m", "M", "N", "K"), steps,
                (("cycles", total(total(maximum(Var("memory"), Var("compute_cycles")), m("call_cycles")),
                                  Var("pad_cycles"))),
                 ("compute", Var("compute_cycles"))))


def estimate(member: MemberModel, m: int, n: int, k: int) -> Estimate:
    """`estimate_rule` for one member at M x N x K, with the figures `check --problem` reports."""
    try:
        values = estimate_rule().evaluate({"m": member_fields(member), "M": m, "N": n, "K": k})
    except Refused:
        return Estimate(member, accepted=False)
    bm, bn, bk = member.tile
    tiles, k_tiles = values["tiles"], values["k_tiles"]
    useful = (m * n * k) / (tiles * bm * bn * k_tiles * bk)
    waves = values["plain"] // values["slots"] + (values["left"] > 0)
    return Estimate(member, True, tiles, k_tiles, waves, values["sk_tiles"], useful, values["cycles"],
                    values["compute_cycles"], values["memory"], values["streaming"])


@cache
def choose_rule(prefix: str = "", measured: bool = False) -> Rule:
    """A kernel family's rule (family.py states it): `chosen`, the index of the member of `{prefix}members` (their
    figures, `member_fields`; `{prefix}member_count` of them) that runs M x N x K. With `measured`, the
    `{prefix}measured` table's entry for the shape ({M, N, K, member}, `{prefix}measured_count` of them)
    where it names one; else the fewest cycles (`estimate_rule`, C's `{prefix}cycles`) among the members that
    accept the shape, on a tie the fewest compute cycles, then the first listed. `fallback` members (declared so in
    the family) only where `aligned` is false: then among the members that run operands of any alignment
    (`any_alignment`), for a call the chosen member refused for its operands' alignment (an exact member, or a TMA
    one); -1 when none does. C: `{prefix}choose` (emit/family.py)."""
    members, M, N, K, aligned = Var(f"{prefix}members"), Var("M"), Var("N"), Var("K"), Var("aligned")
    member = partial(lambda index, name: Field(Index(members, index), name))
    best, found = Var("best"), Var("found")
    cycles, compute = Var("cycles"), Var("compute")
    steps: list = []
    if measured:
        entry = partial(Index, Var("entry"))
        steps.append(Loop(
            "e", Var(f"{prefix}measured_count"), (("found", "int", Const(-1)),),
            (Let("entry", Index(Var(f"{prefix}measured"), Var("e")), "long long* const"),),
            all_of(eq(M, entry(0)), eq(N, entry(1)), eq(K, entry(2)), any_of(aligned, member(entry(3), "any_alignment"))),
            (("found", entry(3)),), stop=ge(found, 0),
            comment="The measured table: {M, N, K, member} where a member timed fastest and the model picks another."))
    count = Var(f"{prefix}member_count")
    steps.append(Loop(
        "i", select(ge(found, 0), 0, count) if measured else count,
        (("best", "int", Const(-1)), ("best_cycles", "long long", Const(0)), ("best_compute", "long long", Const(0))),
        (Skip(select(aligned, member(Var("i"), "fallback"), not_(member(Var("i"), "any_alignment")))),
         Apply(Function(f"{prefix}cycles", estimate_rule(prefix)), (Index(members, Var("i")), M, N, K),
               ("cycles", "compute"), "long long", returns="cycles")),
        all_of(ge(cycles, 0), any_of(lt(best, 0), lt(cycles, Var("best_cycles")),
                                     all_of(eq(cycles, Var("best_cycles")), lt(compute, Var("best_compute"))))),
        (("best", Var("i")), ("best_cycles", cycles), ("best_compute", compute))))
    return Rule("choose", ("M", "N", "K", "aligned", f"{prefix}members", f"{prefix}member_count",
                           *((f"{prefix}measured", f"{prefix}measured_count") if measured else ())),
                tuple(steps), (("chosen", select(ge(found, 0), found, best) if measured else best),))


def choose(members: list[MemberModel], m: int, n: int, k: int, aligned: bool = True,
           measured: tuple[tuple[tuple[int, int, int], int], ...] = ()) -> int | None:
    """`choose_rule` for M x N x K: the index of the member that runs it, None where no member runs operands of
    any alignment (aligned=False). An empty problem (M, N or K = 0) has no products to spread: the first member,
    as in the C launcher."""
    if 0 in (m, n, k):
        return 0
    table = [(*shape, index) for shape, index in measured]
    chosen = choose_rule(measured=bool(table)).evaluate({
        "M": m, "N": n, "K": k, "aligned": int(aligned), "members": [member_fields(x) for x in members],
        "member_count": len(members), "measured": table, "measured_count": len(table)})["chosen"]
    assert chosen >= 0 or not aligned, "a family has a checked member, which accepts every shape"
    return None if chosen < 0 else chosen


def memory_fields(spec: ir.KernelSpec) -> dict:
    """The MemberModel fields of the memory floor every path shares: HBM's rate and the operands' bytes."""
    problem = spec.problem
    return dict(hbm_bytes_per_clock=HBM_BYTES_PER_CLOCK.get(spec.target.sm, 0),
                element_bytes=(problem.a.dtype.bytes, problem.b.dtype.bytes, problem.c.dtype.bytes))


def alignment_fields(spec: ir.KernelSpec, align_bytes: int) -> dict:
    """The MemberModel fields that say when a call's packed operands misalign a member's widest reads of A and B
    (`align_bytes`): which extent is each one's leading dimension, and the elements it must be a multiple of."""
    problem = spec.problem
    return dict(a_ld_is_k=problem.a.layout is ir.MatrixLayout.ROW, b_ld_is_k=problem.b.layout is ir.MatrixLayout.COL,
                a_align=align_bytes // problem.a.dtype.bytes, b_align=align_bytes // problem.b.dtype.bytes)


def launched_fields(spec: ir.KernelSpec, sms: int) -> dict:
    """The MemberModel fields of an FMA or mma.sync spec beside its path's cycles: its tile, bounds and
    schedule, and what its launcher's stream-K costs (two more launches, its floor of saved k-tiles)."""
    return dict(name=spec.name, tile=(spec.block.m, spec.block.n, spec.block.k), exact=not spec.problem.checked,
                stream_k=spec.block.stream_k, sms=sms, launch_cycles=EXTRA_LAUNCH_CYCLES,
                call_cycles=CALL_CYCLES.get(spec.target.sm, 0),
                min_saved_k_tiles=LAUNCHED_MIN_SAVED_K_TILES, **memory_fields(spec))


def tensor_share(model: MemberModel, m: int, n: int, k: int) -> float:
    """The share of a tensor-core kernel's predicted cycles for M x N x K that its useful multiply-adds
    alone would take on every SM at the instruction's peak: its predicted fraction of that peak."""
    figures = estimate(model, m, n, k)
    return figures.useful * figures.tiles * figures.k_tiles * model.tensor_cycles / model.sms / figures.cycles

"""The cycle model: SM clock cycles a tiling takes for a problem size on the target's reference GPU.

A `MemberModel` holds what the model knows of one kernel (its tile, blocks per SM, the cycles of one
k-tile for each number of resident blocks, per-tile and stream-K costs); `estimate` turns it into
cycles for M x N x K over the grid's waves (the formula is family.py's module docstring). The family
rule picks members by it (family.py builds FMA models from the tuner's cost model, cost_model.py);
`mma_sync_member_model` builds it for mma.sync from the analysis passes' figures and
`wgmma_member_model` for Hopper's own path from the lowered layout alone, so for tensor-core kernels
the tuner's score (`tensor_share`), the families and, for wgmma, the bound pass (`gemmdsl check`) all
read one model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache, partial
from typing import TYPE_CHECKING

from . import ir
from .expr import Const, Func, Var
from .rule import (Apply, Field, Function, Index, Let, Literal, Loop, Refuse, Refused, Rule, Skip, all_of, any_of,
                   ceil_div, eq, ge, gt, lt, maximum, minimum, ne, not_, select)
# The model builders below import the analysis (cost_model, passes) where they run: the rule (`choose`, `estimate`)
# is all a family loaded from the cache (load_cache.py) needs, and importing the analysis would double its time.
from .schedule import CYCLE_CAP, LAUNCHED_MIN_SAVED_K_TILES, stream_k_split_rule
from .targets import (HBM_BYTES_PER_CLOCK, ISSUE_PER_CLOCK, L2_BYTES_PER_CLOCK_PER_SM, MMA_SYNC_MACS_PER_CLOCK,
                      RING_ROUND_TRIP_CYCLES, SFU_PER_CLOCK_PER_SM, SMEM_LATENCY, SPLIT_WAIT_CYCLES_PER_K_TILE, WARP,
                      WGMMA_MACS_PER_CLOCK)

if TYPE_CHECKING:
    from .passes.fuse import ChainWork
    from .paths.wgmma.layout import WgmmaLayout


# Shared-memory instructions an SM issues per clock in an mma.sync kernel, whatever their width: fitted
# on the H100 timings of gemmdsl/templates/tf32_mma.tgemm, where TF32 fragments read with
# 32-bit loads (one instruction per mma) ran 20-40% slower than their wavefronts say and ldmatrix's
# (four wavefronts per instruction) did not. With the fragment latency unshared by resident blocks,
# 0.4-0.5 ranked that template at Spearman 0.73-0.74, 0.6 at 0.67, 1 (no term) at 0.61; hgemm_mma's
# 16-bit kernels (ldmatrix only) rank the same with any of them.
# Not a measured rate: which limit of the load/store path it stands for is not known.
MMA_SMEM_INSTRUCTIONS_PER_CLOCK = 0.5

# What one more kernel launch adds to a call, in SM clock cycles: on the H100 (`gemmdsl
# bench`, whose spin kernel keeps the host's enqueueing out of the timing, checked_64x64 at K = 64) a
# call took 6.1 us more per launch (10.4 us for 1024x1024x64 in one launch; 16.6 for 1000x1024x64 in
# two, 22.5 for 1000x1000x64 in three, before the interior split was limited to long interiors):
# the GPU's time at a kernel boundary, 10,700 cycles at 1,755 MHz. Taken for every target (unmeasured
# elsewhere).
EXTRA_LAUNCH_CYCLES = 10_700


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
    partial_cycles: int = 0  # per stream-K block: its partial sums written and read back through L2
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


def member_fields(member: MemberModel) -> dict:
    """A member's figures under the names `estimate_rule` reads (the C table's fields, emit/family.py)."""
    return _member_fields(member)


@lru_cache(maxsize=4096)
def _member_fields(member: MemberModel) -> dict:
    bm, bn, bk = member.tile
    a, b, c = member.element_bytes
    split = stream_k_split_rule(member.min_saved_k_tiles, member.aligned_split) if member.stream_k else None
    return dict(bm=bm, bn=bn, bk=bk, exact=int(member.exact), any_alignment=int(member.any_alignment),
                fallback=int(member.fallback), stream_k_split=split, sms=member.sms,
                blocks_per_sm=member.blocks_per_sm, k_tile_cycles=member.k_tile_cycles, tile_cycles=member.tile_cycles,
                partial_cycles=member.partial_cycles, launch_cycles=member.launch_cycles,
                hbm_bytes_per_clock=member.hbm_bytes_per_clock, a_bytes=a, b_bytes=b, c_bytes=c,
                in_flight_k_tiles=member.in_flight_k_tiles, round_trip_cycles=member.round_trip_cycles)


@cache
def estimate_rule(prefix: str = "") -> Rule:
    """The cycles of member `m` (its figures: `member_fields`) at M x N x K, the formula of family.py's
    docstring: the stream-K blocks' share (the launcher's split), the plain tiles' whole waves and the last
    partial one at its residency, each step saturating (`saturating`); at least the memory floor (`memory`: A, B
    and C's bytes at HBM's rate, and where the member keeps k-tiles in flight what its `streaming` blocks draw by
    Little's law). Refused where an exact member cannot take the shape. C: `{prefix}cycles` (emit/family.py)."""
    product, total = saturating(prefix)
    m = partial(Field, Var("m"))
    M, N, K = Var("M"), Var("N"), Var("K")
    tiles, k_tiles, slots, full = Var("tiles"), Var("k_tiles"), Var("slots"), Var("full")
    sk_tiles, sk_blocks, plain, left = Var("sk_tiles"), Var("sk_blocks"), Var("plain"), Var("left")
    shares, streaming, traffic, in_flight = Var("shares"), Var("streaming"), Var("traffic"), Var("in_flight")
    rate = m("hbm_bytes_per_clock")
    k_tile_cycles = m("k_tile_cycles")
    steps = (
        Refuse(all_of(m("exact"), any_of(ne(M % m("bm"), 0), ne(N % m("bn"), 0), ne(K % m("bk"), 0))),
               comment="bounds: exact: only the shapes the tile divides"),
        Let("tiles", ceil_div(M, m("bm")) * ceil_div(N, m("bn"))),
        Let("k_tiles", ceil_div(K, m("bk"))),
        Let("slots", m("sms") * m("blocks_per_sm")),
        Let("full", Index(k_tile_cycles, m("blocks_per_sm") - 1), comment="a k-tile with every slot resident"),
        Apply(m("stream_k_split"), (tiles, k_tiles, slots, 1), ("sk_tiles", "sk_blocks"),
              when=ne(m("stream_k_split"), Literal("nullptr", None)), comment="the launcher's split of one GEMM"),
        Let("shares", gt(sk_tiles, 0), "bool"),
        Let("plain", tiles - sk_tiles),
        Let("plain_wave", minimum(plain, slots), comment="blocks that stream k-tiles at once"),
        Let("streaming", select(shares, maximum(sk_blocks, Var("plain_wave")), minimum(tiles, slots))),
        Let("per_block", select(shares, ceil_div(sk_tiles * k_tiles, sk_blocks), 0)),
        Let("stream_k_cycles",
            select(shares, total(total(product(Var("per_block"), full),
                                       m("blocks_per_sm") * (m("tile_cycles") + m("partial_cycles"))),
                                 product(m("launch_cycles"), select(gt(plain, 0), 2, 1))), 0),
            comment="the stream-K blocks' ranges, their partial sums, and the launches beyond the first"),
        Let("left", plain % slots),
        Let("wave", total(product(k_tiles, full), m("blocks_per_sm") * m("tile_cycles")), comment="a whole wave"),
        Let("last", ceil_div(left, m("sms")), comment="the last wave's blocks per SM"),
        Let("last_wave", select(gt(left, 0), total(product(k_tiles, Index(k_tile_cycles, Var("last") - 1)),
                                                    Var("last") * m("tile_cycles")), 0)),
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
        Let("memory", maximum(Var("hbm_cycles"), Var("drawn"))),
    )
    return Rule("cycles", ("m", "M", "N", "K"), steps,
                (("cycles", maximum(Var("memory"), Var("compute_cycles"))), ("compute", Var("compute_cycles"))))


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


def launched_fields(spec: ir.KernelSpec, sms: int) -> dict:
    """The MemberModel fields of an FMA or mma.sync spec beside its path's cycles: its tile, bounds and
    schedule, and what its launcher's stream-K costs (two more launches, its floor of saved k-tiles)."""
    return dict(name=spec.name, tile=(spec.block.m, spec.block.n, spec.block.k), exact=not spec.problem.checked,
                stream_k=spec.block.stream_k, sms=sms, launch_cycles=EXTRA_LAUNCH_CYCLES,
                min_saved_k_tiles=LAUNCHED_MIN_SAVED_K_TILES, **memory_fields(spec))


def mma_sync_member_model(spec: ir.KernelSpec, facts: dict, sms: int) -> MemberModel:
    """mma.sync, r resident blocks: a k-tile takes the slowest of the instructions' multiply-adds at the
    target's mma.sync rate, the shared-memory wavefronts the bank-conflict pass counts (fragment reads
    and cp.async stores, conflicts included; one per clock), the shared-memory instructions at
    MMA_SMEM_INSTRUCTIONS_PER_CLOCK, and the warps' instruction issue (the mma, the shared accesses, TF32's
    conversions and KTILE_OVERHEAD per warp, ISSUE_PER_CLOCK a clock); plus the shared-memory latency a warp waits for
    its fragments with nothing to multiply: once per k-step with single fragments, once per k-tile with
    double ones (the next stage's first fragments, after the barrier), shared by the resident blocks
    (another block issues while one waits), as in the FMA model (cost_model.clocks_per_ffma).

    On the H100 timings of every candidate of gemmdsl/templates/hgemm_mma.tgemm (216) and
    tf32_mma.tgemm (288): Spearman 0.70 and 0.75, the best kernel in the top 8 of both; on
    sgemm_3xtf32_mma.tgemm (160, held out) 0.32 and the best of the top 8 15.6% slower than the best
    (docs/tuning.md, "The mma.sync templates")."""
    from .cost_model import KTILE_OVERHEAD
    from .passes.intensity import math_unit

    unit, _ = math_unit(spec)
    common = launched_fields(spec, sms)
    bm, bn, bk = common["tile"]
    products = 3 if unit == "3xtf32" else 1
    macs = bm * bn * bk * products
    shape = spec.mma.shape
    tensor = -(-macs // MMA_SYNC_MACS_PER_CLOCK[spec.target.sm][unit.removeprefix("3x")])
    accesses = facts["smem_accesses"]
    wavefronts = sum(cost.wavefronts for cost in accesses)
    smem_instructions = sum(cost.instructions for cost in accesses)
    warps = facts["launch"].warps_per_block
    instructions = (macs // (shape.m * shape.n * shape.k) + smem_instructions + KTILE_OVERHEAD * warps
                    + warps * (bk // shape.k) * _conversions_per_k_step(spec))
    waits = bk // shape.k if spec.pipeline.fragments is ir.FragmentBuffering.SINGLE else 1
    exposed = waits * SMEM_LATENCY
    blocks = facts["occupancy"].blocks_per_sm

    def k_tile(resident: int) -> int:
        rates = (resident * tensor, resident * wavefronts,
                 math.ceil(resident * smem_instructions / MMA_SMEM_INSTRUCTIONS_PER_CLOCK),
                 math.ceil(resident * instructions / ISSUE_PER_CLOCK))
        return max(rates) + math.ceil(exposed / resident)  # another resident block issues while one waits

    return MemberModel(**common, blocks_per_sm=blocks, k_tile_cycles=tuple(k_tile(r) for r in range(1, blocks + 1)),
                       tensor_cycles=tensor,
                       terms=(("mma_cycles_per_k_tile", tensor), ("smem_wavefronts_per_k_tile", wavefronts),
                              ("smem_instructions_per_k_tile", smem_instructions),
                              ("instructions_per_k_tile", instructions), ("exposed_latency_per_k_tile", exposed)))


def _conversions_per_k_step(spec: ir.KernelSpec) -> int:
    """Instructions a warp issues per k-step beyond the mma and the loads (emit/mma_sync.py): TF32 rounds
    each fragment word (two integer instructions, ctext.TF32_HELPER); 3xTF32 rounds it and subtracts
    (three), and adds each block's three-product sum to the accumulator (four FADD)."""
    mma = spec.mma
    shape, repeat = mma.shape, mma.repeat
    words = (repeat.m * shape.m * shape.k + repeat.n * shape.k * shape.n) // 32
    if mma.precision is ir.Precision.TF32:
        return 2 * words
    if mma.precision is ir.Precision.TF32X3:
        return 3 * words + 4 * repeat.m * repeat.n
    return 0


def wgmma_member_model(layout: WgmmaLayout, sms: int) -> MemberModel:
    """Hopper's own path, one block per SM: a k-tile takes the longest of wgmma's multiply-adds at the
    datasheet rate, its shared-memory traffic (wgmma's reads and 3xTF32's split; a 128-byte wavefront per
    clock), TMA's bytes from L2 at the measured rate per SM and the ring's round trip shared by the
    STAGES - 1 stages in flight, plus, for 3xTF32, the consumer's wait for each k-tile's group (measured) and
    its FP32 adds of `part` (counted);
    a tile also writes C (and reads it, for alpha_beta) through L2, and a stream-K block writes and reads
    back one partial tile; the memory floor counts the ring's STAGES - 1 k-tiles in flight per block
    (estimate_rule's `memory`). The tuner (tune.wgmma_efficiency) and the wgmma bound pass (`check`) read it
    too."""
    from .passes.banks import WAVEFRONT_BYTES
    from .passes.intensity import math_unit

    spec = layout.spec
    sm = spec.target.sm
    common = dict(name=spec.name, tile=(layout.bm, layout.bn, layout.bk), exact=not spec.problem.checked,
                  stream_k=spec.block.stream_k, aligned_split=spec.block.stream_k, sms=sms, **memory_fields(spec),
                  in_flight_k_tiles=max(layout.stages - 1, 1), round_trip_cycles=RING_ROUND_TRIP_CYCLES[sm])
    unit, _ = math_unit(spec)
    macs_per_clock = WGMMA_MACS_PER_CLOCK[sm][unit.removeprefix("3x")]  # 3xTF32: three TF32 products
    l2 = L2_BYTES_PER_CLOCK_PER_SM[sm]
    problem = spec.problem
    tensor = -(-layout.bm * layout.bn * layout.bk * layout.products // macs_per_clock)
    wavefronts = -(-(layout.smem_read_bytes_per_k_tile + layout.split_lsu_bytes_per_k_tile) // WAVEFRONT_BYTES)
    tma = -(-layout.stage_bytes // l2)
    ring = -(-RING_ROUND_TRIP_CYCLES[sm] // max(layout.stages - 1, 1))
    c_passes = 2 if problem.epilogue is ir.Epilogue.ALPHA_BETA else 1
    epilogue = -(-layout.bm * layout.bn * problem.c.dtype.bytes * c_passes // l2)
    partial = -(-2 * layout.partial_bytes // l2) if layout.stream_k else 0
    # 3xTF32 and promoted FP8: the consumer's wait for each of its groups, then `acc += part`: 4 warps a
    # warpgroup over 4 schedulers, so each scheduler issues accumulators x consumers adds per k-tile.
    groups = layout.waited_groups_per_k_tile
    wait = groups * SPLIT_WAIT_CYCLES_PER_K_TILE[sm] + layout.accumulators * layout.consumers if groups else 0
    return MemberModel(**common, blocks_per_sm=1, k_tile_cycles=(max(tensor, wavefronts, tma, ring) + wait,),
                       tensor_cycles=tensor, tile_cycles=epilogue, partial_cycles=partial,
                       terms=(("wgmma_cycles_per_k_tile", tensor), ("smem_wavefronts_per_k_tile", wavefronts),
                              ("tma_cycles_per_k_tile", tma), ("l2_bytes_per_clock", l2),
                              ("ring_cycles_per_k_tile", ring),
                              ("split_wait_cycles_per_k_tile", wait)))


@dataclass(frozen=True)
class FusedEpilogue:
    """The fuse chain's cost in one tile's epilogue on one SM of the wgmma path, against the tile's main loop."""

    cycles: int  # the chain on the tile's elements: the slowest of its rates
    limit: str  # which rate sets them
    main_loop_cycles: int  # the tile's k-tiles, at the cycle model's k-tile
    hidden: int  # what another consumer's main loop covers meanwhile (schedule: pingpong)

    @property
    def exposed(self) -> int:
        return self.cycles - self.hidden

    @property
    def share(self) -> float:
        """The chain's cycles against the main loop's."""
        return self.cycles / self.main_loop_cycles


def fused_epilogue(layout: WgmmaLayout, work: ChainWork, l2_bytes: int, k_tiles: int, sms: int,
                   tiles: int) -> FusedEpilogue:
    """The chain on a tile of BM x BN elements: the slowest of the instructions the consumers' warps issue
    (`work`, per element: passes/fuse.chain_work), the activation's special-function results, and the
    operands' bytes from L2 (`l2_bytes`, per tile), for a launch of `tiles` tiles.

    Under `schedule: persistent` both consumer warpgroups apply it to their rows of the same tile before
    either multiplies again, so wgmma waits for it: nothing hides it. (The producer does go on filling the
    ring with the next tile's k-tiles meanwhile; measured on the H100, that gains nothing: linear_gelu
    against its unfused twin costs about the chain's cycles, 2.3% at 4096^3 and 9% at 4096x4096x1024,
    docs/fusion.md.) One block per tile (`schedule: tiles`) hides nothing either. Under `schedule: pingpong`
    another consumer multiplies its own tile meanwhile, so the epilogue hides under up to that tile's whole
    main loop, where the block has another tile (more tiles than SMs)."""

    sm = layout.spec.target.sm
    elements = layout.bm * layout.bn
    rates = {"instruction issue": -(-elements * (work.alu + work.loads + work.smem_loads) // (WARP * ISSUE_PER_CLOCK)),
             "the SFU": -(-elements * work.sfu // SFU_PER_CLOCK_PER_SM[sm]),
             "L2": -(-l2_bytes // L2_BYTES_PER_CLOCK_PER_SM[sm])}
    limit = max(rates, key=lambda name: rates[name])
    model = wgmma_member_model(layout, sms)
    k_tile = model.k_tile_cycles[0]
    cycles = rates[limit]
    hidden = min(cycles, k_tiles * k_tile) if layout.pingpong and tiles > sms else 0
    return FusedEpilogue(cycles, limit, k_tiles * k_tile, hidden)


def tensor_share(model: MemberModel, m: int, n: int, k: int) -> float:
    """The share of a tensor-core kernel's predicted cycles for M x N x K that its useful multiply-adds
    alone would take on every SM at the instruction's peak: its predicted fraction of that peak."""
    figures = estimate(model, m, n, k)
    return figures.useful * figures.tiles * figures.k_tiles * model.tensor_cycles / model.sms / figures.cycles

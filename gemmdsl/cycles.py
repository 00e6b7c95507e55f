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

from . import ir
from .schedule import CYCLE_CAP, LAUNCHED_MIN_SAVED_K_TILES, stream_k_split
from .targets import EXTRA_LAUNCH_CYCLES, HBM_BYTES_PER_CLOCK




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
    # The memory floor (`memory_cycles`): HBM's bytes per clock on the reference GPU (0: no floor); the bytes
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


def _product(a: int, b: int) -> int:
    return min(a * b, CYCLE_CAP)


def _sum(a: int, b: int) -> int:
    return min(a + b, CYCLE_CAP)


def estimate(member: MemberModel, m: int, n: int, k: int) -> Estimate:
    if not member.accepts(m, n, k):
        return Estimate(member, accepted=False)
    bm, bn, bk = member.tile
    tiles = -(-m // bm) * -(-n // bn)
    k_tiles = -(-k // bk)
    useful = (m * n * k) / (tiles * bm * bn * k_tiles * bk)
    resident = member.blocks_per_sm
    full = member.cycles_per_k_tile(resident)
    plain, sk_tiles, cycles = tiles, 0, 0
    streaming = min(tiles, member.slots)
    if member.stream_k:
        split = stream_k_split(tiles, k_tiles, member.slots, min_saved_k_tiles=member.min_saved_k_tiles,
                               aligned=member.aligned_split)
        if split.sk_tiles:
            plain, sk_tiles = tiles - split.sk_tiles, split.sk_tiles
            streaming = max(split.sk_blocks, min(plain, member.slots))
            per_block = -(-split.sk_tiles * k_tiles // split.sk_blocks)
            cycles = _sum(_product(per_block, full), resident * (member.tile_cycles + member.partial_cycles))
            contributors = -(-split.sk_blocks // split.sk_tiles)
            cycles = _sum(cycles, _product(contributors - 1, member.fixup_cycles))
            cycles = _sum(cycles, _product(member.launch_cycles, 2 if plain else 1))
    full_waves, left = divmod(plain, member.slots)
    wave = _sum(_product(k_tiles, full), resident * member.tile_cycles)
    cycles = _sum(cycles, _product(full_waves, wave))
    if left:
        last = -(-left // member.sms)
        cycles = _sum(cycles, _sum(_product(k_tiles, member.cycles_per_k_tile(last)), last * member.tile_cycles))
    memory = memory_cycles(member, m, n, k, streaming)
    return Estimate(member, True, tiles, k_tiles, full_waves + (left > 0), sk_tiles, useful,
                    _sum(max(cycles, memory), member.call_cycles), cycles, memory, streaming)


def choose(members: list[MemberModel], m: int, n: int, k: int, aligned: bool = True,
           measured: tuple[tuple[tuple[int, int, int], int], ...] = ()) -> int | None:
    """A kernel family's rule (family.py states it): the index of the member that runs M x N x K: the one the measured table names for the shape, else the
    fewest predicted cycles among those that accept the shape; on a tie (members held to the same memory
    floor) the fewest compute cycles, then the first listed.
    `fallback` members (declared so in the family) only where aligned=False: among the members that run
    operands of any alignment (`any_alignment`), for a call the chosen member refused for its operands'
    alignment (an exact member, or a TMA one); None when no member does. An empty problem (M, N or K = 0) has no products to spread: the first member, as in the C
    launcher."""
    if 0 in (m, n, k):
        return 0
    for shape, index in measured:
        if shape == (m, n, k) and (aligned or members[index].any_alignment):
            return index
    best = None
    for index, member in enumerate(members):
        if not (member.any_alignment if not aligned else not member.fallback):
            continue
        figures = estimate(member, m, n, k)
        key = (figures.cycles, figures.compute_cycles)
        if figures.accepted and (best is None or key < best[1]):
            best = (index, key)
    assert best is not None or not aligned, "a family has a checked member, which accepts every shape"
    return None if best is None else best[0]


def memory_cycles(member: MemberModel, m: int, n: int, k: int, streaming: int) -> int:
    """The memory floor of M x N x K: A and B are read and C written at least once, at no more than HBM's rate, nor
    (where the member keeps a ring of k-tiles in flight) than `streaming` blocks draw by Little's law: each
    has its in-flight k-tiles' bytes of A and B (the rows and columns inside the problem: TMA fills the
    rest of a box with zeros, fetching nothing) on the way for a round trip. A decode call (M of 1 to 128,
    a large N x K) streams B once and multiplies little: the floor, not the multiply-adds, sets its time,
    and a member whose blocks keep loads in flight on every SM comes closest to it. 0 without a floor."""
    if not member.hbm_bytes_per_clock:
        return 0
    a, b, c = member.element_bytes
    traffic = _sum(_sum(_product(_product(m, k), a), _product(_product(n, k), b)), _product(_product(m, n), c))
    cycles = -(-traffic // member.hbm_bytes_per_clock)
    if member.in_flight_k_tiles and streaming:
        bm, bn, bk = member.tile
        in_flight = streaming * member.in_flight_k_tiles * bk * (min(m, bm) * a + min(n, bn) * b)
        cycles = max(cycles, -(-_product(traffic, member.round_trip_cycles) // in_flight))
    return cycles


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


def tensor_share(model: MemberModel, m: int, n: int, k: int) -> float:
    """The share of a tensor-core kernel's predicted cycles for M x N x K that its useful multiply-adds
    alone would take on every SM at the instruction's peak: its predicted fraction of that peak."""
    figures = estimate(model, m, n, k)
    return figures.useful * figures.tiles * figures.k_tiles * model.tensor_cycles / model.sms / figures.cycles

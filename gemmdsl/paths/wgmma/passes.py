"""The analysis passes of the wgmma path (Hopper's own path), over its WgmmaLayout.

Shared memory per stage and per block, the registers each warpgroup has after setmaxnreg against
what a consumer needs, the barriers of the ring, the waves of the (persistent) grid, and the bound:
wgmma's peak, the last wave's idle SMs and the memory traffic. `analysis.analyze` runs these instead
of the mma.sync/FMA passes, whose lane-level models (bank maps, fragment registers) do not apply:
wgmma reads shared memory itself, and the 128-byte swizzle that TMA writes is conflict-free by
construction.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ... import ir
from ...cycles import estimate, tensor_share
from .cycles import FusedEpilogue, fused_epilogue, wgmma_member_model
from ...grouped_schedule import ASSUMED_GROUPS, even_offs, tile_count as grouped_tile_count
from ...targets import MEMORY_TBPS, WARP, WARPGROUP, WGMMA_MEASURED_TFLOPS
from .layout import WgmmaLayout
from ...passes.banks import WAVEFRONT_BYTES  # ncu counts shared-memory traffic in these 128-byte wavefronts
from ...passes.framework import Context, PassResult
from ...passes.fuse import FuseCost, FusePass, kept_registers
from ...passes.intensity import compulsory_bytes, math_unit


def _layout(context: Context) -> WgmmaLayout:
    layout = context.layout
    assert isinstance(layout, WgmmaLayout)
    return layout


@dataclass(frozen=True)
class WgmmaSmem:
    stage_bytes: dict[str, int]  # a, b: one k-tile each
    stages: int
    ring_bytes: int
    barrier_bytes: int
    block_bytes: int  # dynamic shared memory per block (ring, barriers, alignment slack)
    limit: int


class WgmmaSmemPass:
    name = "smem"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"wgmma_smem"})

    def run(self, context: Context) -> PassResult:
        layout = _layout(context)
        smem = WgmmaSmem({op.value: layout.stage_bytes_of(op) for op in (ir.Operand.A, ir.Operand.B)},
                         layout.stages, layout.ring_bytes, layout.mbarriers * 8, layout.smem_bytes,
                         layout.arch.smem_per_block)
        split = f" + a {layout.split_bytes}-byte split buffer (3xTF32: B's small parts)" if layout.split else ""
        if layout.staged_vectors:
            tiles = "one tile's" if layout.vector_buffers == 1 else f"{layout.vector_buffers} tiles', one per consumer"
            split += f" + {layout.vector_bytes} bytes of the fuse chain's vectors ({tiles}, as f32)"
        verdict = (f"{layout.stage_bytes} bytes per stage (A {smem.stage_bytes['a']} + B {smem.stage_bytes['b']}), "
                   f"{smem.stages} stages = {smem.ring_bytes}{split}; {smem.block_bytes} bytes per block with barriers and "
                   f"1024-byte alignment, of {smem.limit} ({100 * smem.block_bytes / smem.limit:.0f}%): 1 block per SM")
        return PassResult({"wgmma_smem": smem}, verdict)


@dataclass(frozen=True)
class WgmmaRegisters:
    entry: int  # per thread at launch: the cap ptxas compiles under
    producer: int  # after setmaxnreg.dec
    consumer: int  # after setmaxnreg.inc
    accumulators: int  # f32 per consumer thread
    consumer_needed: int  # accumulators and the reserve
    ptxas: int | None
    spills: int | None  # bytes stored and loaded
    chain: int = 0  # the fuse chain's row values a consumer keeps in its epilogue (passes/fuse.py)

    @property
    def fits(self) -> bool:
        return self.consumer_needed <= self.consumer


class WgmmaRegisterPass:
    name = "registers"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"wgmma_registers"})

    def run(self, context: Context) -> PassResult:
        layout = _layout(context)
        ptxas = context.ptxas
        registers = WgmmaRegisters(layout.entry_registers, layout.producer_registers, layout.consumer_registers,
                                   layout.accumulators, layout.consumer_registers_needed,
                                   None if ptxas is None else ptxas["registers"],
                                   None if ptxas is None else ptxas["spill_stores"] + ptxas["spill_loads"],
                                   kept_registers(context.spec, layout.chain_reads()))
        verdict = (f"{layout.entry_registers} per thread at launch ({layout.threads} threads, 1 block); setmaxnreg: "
                   f"producer {layout.producer_registers}, consumers {layout.consumer_registers}; a consumer needs "
                   f"about {registers.consumer_needed} ({layout.register_summary})")
        if registers.chain:
            verdict += f", and {registers.chain} more in the epilogue for the fuse chain's row values"
        if registers.ptxas is not None:
            verdict += f"; ptxas {registers.ptxas}, {registers.spills} bytes spilled"
        return PassResult({"wgmma_registers": registers}, verdict)


@dataclass(frozen=True)
class WgmmaPipeline:
    stages: int
    mbarriers: int
    tma_copies_per_stage: int
    bytes_per_stage: int
    wgmma_per_k_tile: int  # per consumer warpgroup
    groups_in_flight: int  # wgmma groups a consumer leaves running


class WgmmaPipelinePass:
    name = "pipeline"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"wgmma_pipeline"})

    def run(self, context: Context) -> PassResult:
        layout = _layout(context)
        boxes = layout.boxes.values()
        count = sum(box.count for box in boxes)
        # A k-tile's group stays in flight while the next is issued, and its stage is released then; 3xTF32
        # and promoted FP8 wait for each k-tile's groups (their sums are added to the FP32 accumulators) and
        # release at once.
        in_flight = 0 if layout.waited_groups_per_k_tile else 1
        pipeline = WgmmaPipeline(layout.stages, layout.mbarriers, count, layout.stage_bytes, layout.wgmma_per_k_tile,
                                 in_flight)
        shapes = ", ".join(f"{box.count} x " * (box.count > 1) + f"{box.inner}x{box.outer}" for box in boxes)
        barriers = "full + empty + ready" if layout.split else "full + empty"
        verdict = (f"{layout.stages} stages, {layout.mbarriers} mbarriers ({barriers} per stage); {count} TMA boxes "
                   f"({shapes}) = {layout.stage_bytes} bytes per k-tile; "
                   f"{layout.wgmma_per_k_tile} wgmma {layout.shape} per consumer per k-tile, {in_flight} "
                   f"group{'s' * (in_flight != 1)} in flight, {layout.stages - 1 - in_flight} stages of lookahead for TMA")
        return PassResult({"wgmma_pipeline": pipeline}, verdict)


@dataclass(frozen=True)
class WgmmaWaves:
    sms: int
    tiles: int
    blocks: int
    persistent: bool
    k_tiles: int = 1  # per tile
    sk_tiles: int = 0  # schedule: stream_k: the last tiles, whose k-tiles the stream-K blocks share
    sk_blocks: int = 0
    partial_bytes: int = 0  # ... and the partial sums they leave in the workspace (each written once, read once)

    @property
    def waves(self) -> float:
        return self.tiles / self.sms

    @property
    def efficiency(self) -> float:
        """Busy fraction of the SMs over the launch: the k-tiles of work over the SM-k-tile slots that the
        busiest SM's share takes (whole tiles in rounds; with stream-K, block 0's plain tiles and its
        range of the shared k-tiles)."""
        if not self.sk_tiles:
            rounds = -(-self.tiles // self.sms)
            return self.tiles / (rounds * self.sms)
        plain = -(-(self.tiles - self.sk_tiles) // self.blocks) * self.k_tiles
        shared = -(-self.sk_tiles * self.k_tiles // self.sk_blocks)
        return self.tiles * self.k_tiles / ((plain + shared) * self.sms)


class WgmmaWavesPass:
    name = "waves"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"wgmma_waves"})

    def run(self, context: Context) -> PassResult:
        layout = _layout(context)
        m, n, k = context.problem
        sms = layout.arch.reference_sms
        launch = context.plan.launch
        split = launch.split_for(m, n, k, 1, sms)
        partials = sum(len(split.contributors(tile)) for tile in range(split.first_sk_tile, split.tiles)) \
            if split.sk_tiles else 0
        waves = WgmmaWaves(sms, split.tiles, launch.grid_for(m, n, k, 1, sms)[0], layout.persistent, split.k_tiles,
                           split.sk_tiles, split.sk_blocks, partials * layout.partial_bytes)
        assumed = ""
        if layout.grouped:  # no offs here: an assumed even split over ASSUMED_GROUPS groups (grouped_schedule.py)
            tiles = grouped_tile_count(even_offs(m, ASSUMED_GROUPS), m, n, layout.bm, layout.bn)
            waves = replace(waves, tiles=tiles, blocks=launch.grid_for(m, n, k, ASSUMED_GROUPS, sms)[0])
            assumed = (f"grouped, assuming M split evenly over {ASSUMED_GROUPS} groups (each rounded up to whole "
                       "tiles; a skewed split adds partial tiles): ")
        kind = assumed + ("persistent: one wave of" if waves.persistent else "one block per tile:")
        verdict = (f"{waves.tiles} tiles, {kind} {waves.blocks} blocks on the {layout.arch.reference_gpu}'s {sms} SMs: "
                   f"{waves.waves:.2f} tiles per SM")
        if layout.stream_k:
            verdict += (f"; stream-K: the last {waves.sk_tiles} tiles' {waves.sk_tiles * waves.k_tiles:,} k-tiles shared "
                        f"by {waves.sk_blocks} blocks, whose partial sums move {waves.partial_bytes / 1e6:.1f} MB through "
                        "L2 each way (not in the bound)" if waves.sk_tiles else "; stream-K: no tiles shared (a whole "
                        "last wave, or too few idle SMs to pay)")
        verdict += f", {100 * waves.efficiency:.0f}% of SM time busy"
        return PassResult({"wgmma_waves": waves}, verdict)


@dataclass(frozen=True)
class WgmmaTraffic:
    """What one launch over the problem issues and moves, counted from the lowering: the figures
    `gemmdsl profile` puts beside ncu's counters."""

    tiles: int
    k_tiles: int  # per tile
    wgmma_warp_instructions: int  # each wgmma.mma_async is one instruction in each of a warpgroup's 4 warps
    tma_copies: int  # bulk tensor copies (boxes)
    tma_bytes: int  # what the boxes bring from L2 (whole boxes: an edge box's zero fill counts too)
    smem_read_bytes: int  # what wgmma reads from shared memory: B's tile of every instruction, and A's unless in registers
    bank_conflicts: int  # of wgmma's reads: none, in the 128-byte swizzle TMA writes
    split_bytes: int = 0  # 3xTF32: the splitter's and the A fragments' ordinary shared loads and stores

    @property
    def smem_wavefronts(self) -> int:
        return self.smem_read_bytes // WAVEFRONT_BYTES


class WgmmaTrafficPass:
    name = "traffic"
    needs: frozenset[str] = frozenset()
    provides = frozenset({"wgmma_traffic"})

    def run(self, context: Context) -> PassResult:
        layout = _layout(context)
        m, n, k = context.problem
        tiles, k_tiles = context.plan.launch.tiles(m, n), -(-k // layout.bk)
        instructions = tiles * k_tiles * layout.tile_consumers * layout.wgmma_per_k_tile
        read = tiles * k_tiles * layout.smem_read_bytes_per_k_tile
        copies = tiles * k_tiles * sum(box.count for box in layout.boxes.values())
        split = tiles * k_tiles * layout.split_lsu_bytes_per_k_tile
        traffic = WgmmaTraffic(tiles, k_tiles, instructions * WARPGROUP // WARP, copies,
                               tiles * k_tiles * layout.stage_bytes, read, 0, split)
        operands = "B (A from registers)" if layout.a_in_registers else "A and B"
        verdict = (f"{traffic.wgmma_warp_instructions:,} wgmma warp instructions; {copies:,} TMA copies bring "
                   f"{traffic.tma_bytes / 1e6:,.0f} MB from L2; wgmma reads {read / 1e6:,.0f} MB of {operands} from "
                   f"shared memory ({traffic.smem_wavefronts:,} wavefronts of {WAVEFRONT_BYTES} bytes, no bank conflicts)")
        if split:
            verdict += (f"; the 3xTF32 split loads and stores {split / 1e6:,.0f} MB more (B's stages split, A's "
                        "fragments loaded)")
        return PassResult({"wgmma_traffic": traffic}, verdict)


@dataclass(frozen=True)
class WgmmaBound:
    peak_tflops: float  # wgmma's dense peak (datasheet)
    measured_tflops: float | None  # the best measured GEMM of the unit on the reference GPU (cuBLAS)
    flops: int
    dram_bytes: int  # A, B read once, C written (and read for alpha_beta): perfect L2 reuse
    memory_tflops: float
    bound_tflops: float
    # The cycle model the families and the tuner rank by (paths/wgmma/cycles.py): one k-tile's
    # cycles on an SM, the rate that sets them, and the share of the peak it predicts for the problem.
    k_tile_cycles: int = 0
    k_tile_limit: str = ""
    predicted_share: float = 0.0

    @property
    def limit(self) -> str:
        return "memory" if self.memory_tflops < self.peak_tflops else "wgmma"

    @property
    def predicted_tflops(self) -> float:
        return self.peak_tflops * self.predicted_share


class WgmmaBoundPass:
    name = "bound"
    needs = frozenset({"wgmma_waves"})
    provides = frozenset({"wgmma_bound"})

    def run(self, context: Context) -> PassResult:
        layout, spec = _layout(context), context.spec
        m, n, k = context.problem
        waves = context.fact("wgmma_waves")
        assert isinstance(waves, WgmmaWaves)
        sm = spec.target.sm
        unit, peak = math_unit(spec, context.plan.path)
        dram = sum(compulsory_bytes(spec, m, n, k).values())
        flops = 2 * m * n * k
        memory = flops / dram * MEMORY_TBPS[sm]
        bound = min(peak * waves.efficiency, memory)
        model = wgmma_member_model(layout, waves.sms, unit)
        terms = dict(model.terms)
        rates = {name: terms[f"{name}_per_k_tile"] for name in K_TILE_RATES}
        limit = max(rates, key=lambda name: rates[name])
        result = WgmmaBound(peak, WGMMA_MEASURED_TFLOPS[sm].get(unit), flops, dram, memory, bound,
                            model.k_tile_cycles[0], K_TILE_RATES[limit], tensor_share(model, m, n, k))
        measured = "" if result.measured_tflops is None else f"; cuBLAS measured {result.measured_tflops:.0f}"
        wait = terms["split_wait_cycles_per_k_tile"]
        others = ", ".join(f"{K_TILE_RATES[name]} {cycles:,}" for name, cycles in rates.items() if name != limit)
        verdict = (f"wgmma {unit} peak {peak:.0f} TFLOP/s (datasheet{measured}); DRAM {dram / 1e6:.0f} MB at {MEMORY_TBPS[sm]} TB/s sustains "
                   f"{memory:.0f}; bound {bound:.0f} TFLOP/s ({result.limit}, x {waves.efficiency:.2f} for the waves); "
                   f"cycle model: a k-tile takes {result.k_tile_cycles:,} cycles per SM, "
                   + (f"{rates[limit]:,} set by {result.k_tile_limit} ({others}) and {wait:,} of {layout.part_note}" if wait
                      else f"set by {result.k_tile_limit} ({others})")
                   + f", so about {result.predicted_tflops:.0f} TFLOP/s ({100 * result.predicted_share:.0f}% of the peak; "
                     "both at the datasheet's clock, which long runs under the power cap do not hold)"
                   + _memory_floor(model, m, n, k))
        return PassResult({"wgmma_bound": result}, verdict)


def _memory_floor(model, m: int, n: int, k: int) -> str:
    """The cycle model's memory floor at M x N x K (cycles.memory_cycles) against its k-tiles' cycles."""
    figures = estimate(model, m, n, k)
    if not figures.memory_cycles:
        return ""
    a, b, c = model.element_bytes
    traffic = (m * k * a + n * k * b + m * n * c) / 1e6
    side = "sets the time" if figures.memory_cycles > figures.compute_cycles else "below them"
    return (f"; memory floor {figures.memory_cycles:,} cycles: {traffic:,.1f} MB of A, B and C at HBM's "
            f"{model.hbm_bytes_per_clock:,} bytes per clock, or {figures.streaming_blocks} blocks streaming "
            f"{model.in_flight_k_tiles} k-tiles each in flight for {model.round_trip_cycles:,} cycles, whichever is "
            f"slower ({side}: the k-tiles take {figures.compute_cycles:,})")


class WgmmaFuseEpiloguePass:
    """Whether the fuse chain's epilogue hides under the next tile's main loop (paths/wgmma/cycles.py)."""

    name = "epilogue"
    needs = frozenset({"fuse", "wgmma_waves"})
    provides = frozenset({"epilogue_cycles"})

    def run(self, context: Context) -> PassResult:
        cost = context.fact("fuse")
        if cost is None:
            return PassResult({"epilogue_cycles": None}, "")
        assert isinstance(cost, FuseCost)
        layout = _layout(context)
        waves = context.fact("wgmma_waves")
        assert isinstance(waves, WgmmaWaves)
        # Per tile from L2 in the epilogue: R's tile but the share copied ahead, and each vector's values of the
        # tile's rows or columns unless a producer warp staged them during the main loop.
        tile_bytes = (cost.epilogue_block_bytes // waves.tiles) if waves.tiles else 0
        epilogue = fused_epilogue(layout, cost.work, tile_bytes, waves.k_tiles, waves.sms, waves.tiles,
                                  context.plan.path.unit(context.spec))
        return PassResult({"epilogue_cycles": epilogue}, epilogue_verdict(epilogue, layout))


def epilogue_verdict(epilogue: FusedEpilogue, layout: WgmmaLayout) -> str:
    head = (f"the fused epilogue costs ~{epilogue.cycles:,} cycles per tile (set by {epilogue.limit}), "
            f"{100 * epilogue.share:.1f}% of a tile's main loop")
    if not layout.persistent:
        return head + "; not hidden: one block per tile, the next starts when this one ends"
    if layout.pingpong:
        if epilogue.hidden == 0:
            return head + "; not hidden: no block has a second tile for the other consumer to multiply meanwhile"
        turn = "another consumer's main loop runs meanwhile (schedule: pingpong)"
        if epilogue.exposed == 0:
            return head + f"; hidden: {turn}"
        return head + f"; {100 * epilogue.hidden / epilogue.cycles:.0f}% hidden ({turn}), ~{epilogue.exposed:,} exposed"
    return head + ("; not hidden: both consumers share the tile, and wgmma waits for them (`schedule: pingpong` "
                   "overlaps it with another tile's main loop)")


# The rates a wgmma k-tile is the slowest of (wgmma_member_model's terms), as `check` names them.
K_TILE_RATES = {"wgmma_cycles": "wgmma's multiply-adds", "smem_wavefronts": "shared-memory reads",
                "tma_cycles": "TMA's bytes from L2", "ring_cycles": "the ring's round trip"}


WGMMA_PASSES = (WgmmaSmemPass(), WgmmaRegisterPass(), WgmmaPipelinePass(), WgmmaTrafficPass(), WgmmaWavesPass(),
                WgmmaBoundPass(), FusePass(), WgmmaFuseEpiloguePass())

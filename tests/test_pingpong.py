"""`schedule: pingpong` (paths/wgmma/pingpong.py): the consumer warpgroups of a persistent wgmma block take its
tiles in turn, each multiplying a whole tile, their main loops ordered by `turn` mbarriers.

Checked three ways: the lowering (each consumer a whole tile, one reader per stage, a buffer of vectors per
consumer, the barriers counted in shared memory), the emitted kernel (the ring position of a consumer's tile,
the turn waits and arrivals, `empty` counting one arrival), and the protocol itself, run as a model of the
mbarriers under interleavings hypothesis picks: every k-tile is multiplied by its tile's consumer, no parity
wait passes on the wrong phase, and nothing deadlocks. Without the turns the model finds the wrong-phase
wait that the turns exist to prevent.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl.analysis import analyze
from gemmdsl.check import format_report
from gemmdsl.compiler import compile_source
from gemmdsl.frontend import load
from gemmdsl.paths.wgmma.layout import WgmmaLayout
from gemmdsl.source import CompileError, SourceFile

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
PINGPONG = ["linear_gelu_pingpong", "linear_bf16_pingpong"]


def layout_of(name: str) -> WgmmaLayout:
    return WgmmaLayout(load(SourceFile.read(SPECS / f"{name}.gemm"))[0])


def consumers_code(name: str) -> str:
    cuda = compile_source(SourceFile.read(SPECS / f"{name}.gemm")).cuda
    kernel = cuda[cuda.index("__launch_bounds__("):]
    return kernel[kernel.index("// Consumers."):kernel.index("#else")]


def errors_of(text: str) -> list[str]:
    try:
        compile_source(SourceFile("pingpong.gemm", text))
    except CompileError as error:
        return [diagnostic.message for diagnostic in error.diagnostics]
    return []


def variant(**changes: str) -> str:
    text = (SPECS / "linear_gelu_pingpong.gemm").read_text()
    for old, new in changes.items():
        assert old in text
        text = text.replace(old, new)
    return text


# --- the lowering ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PINGPONG)
def test_each_consumer_multiplies_a_whole_tile(name):
    layout = layout_of(name)
    assert layout.pingpong and layout.tile_consumers == 1 and layout.consumers == 2
    assert layout.consumer_rows == layout.bm and layout.m_repeat == layout.bm // 64
    assert layout.accumulators == layout.bm * layout.bn // 128  # one warpgroup holds the tile


def test_pingpong_counts_a_turn_barrier_per_consumer_and_a_vector_buffer_each():
    persistent = WgmmaLayout(load(SourceFile("p.gemm", variant(**{"pingpong": "persistent"})))[0])
    pingpong = layout_of("linear_gelu_pingpong")
    assert pingpong.mbarriers == persistent.mbarriers + 2 + 2  # a second vectors pair, two turns
    assert pingpong.vector_bytes == 2 * persistent.vector_bytes
    assert pingpong.smem_bytes - persistent.smem_bytes == persistent.vector_bytes + 4 * 8
    # One consumer reads each stage with twice the instructions: wgmma's shared-memory reads per k-tile are the same.
    assert pingpong.wgmma_per_k_tile == 2 * persistent.wgmma_per_k_tile
    assert pingpong.smem_read_bytes_per_k_tile == persistent.smem_read_bytes_per_k_tile


# --- the emitted kernel ------------------------------------------------------------------------

@pytest.mark.parametrize("name", PINGPONG)
def test_a_consumer_takes_every_other_tile_at_its_place_in_the_ring(name):
    code = consumers_code(name)
    assert re.search(r"for \(int tile = blockIdx\.x \+ consumer \* gridDim\.x, nth = consumer; tile < tile_count; "
                     r"tile \+= CONSUMERS \* gridDim\.x, nth \+= CONSUMERS\)", code)
    assert "it = nth * k_tiles;" in code
    wait = code.index("mbarrier_wait(smem_u32(turn + consumer), turn_phase)")
    k_loop = code.index("for (int kt = 0; kt < k_tiles; ++kt, ++it)")
    arrive = code.index("mbarrier_arrive(smem_u32(turn + (consumer + 1) % CONSUMERS))")
    drain = code.index("wgmma_wait<0>()")
    assert code.index("it = nth * k_tiles;") < wait < k_loop < arrive < drain
    assert "consumer * CONSUMER_ROWS" not in code  # no consumer owns a slice of the tile


def test_a_stage_is_released_by_its_one_reader():
    cuda = compile_source(SourceFile.read(SPECS / "linear_gelu_pingpong.gemm")).cuda
    assert "mbarrier_init(smem_u32(empty + s), 1);" in cuda
    assert "mbarrier_init(smem_u32(turn + c), 128);" in cuda and "mbarrier_init(smem_u32(vectors_empty + c), 128);" in cuda
    persistent = compile_source(SourceFile("p.gemm", variant(**{"pingpong": "persistent"}))).cuda
    assert "mbarrier_init(smem_u32(empty + s), CONSUMERS);" in persistent and "smem_u32(turn" not in persistent


def test_each_consumer_reads_its_own_vector_buffer_and_the_warp_fills_them_in_turn():
    cuda = compile_source(SourceFile.read(SPECS / "linear_gelu_pingpong.gemm")).cuda
    floats = layout_of("linear_gelu_pingpong").tile_vector_bytes // 4
    assert f"float* const tile_vectors = vectors + slot * {floats};" in cuda
    assert "if (++slot == CONSUMERS) { slot = 0; vectors_phase ^= 1; }" in cuda
    code = consumers_code("linear_gelu_pingpong")
    assert "mbarrier_wait(smem_u32(vectors_full + consumer), vectors_phase)" in code
    assert f"const float* const tile_vectors = vectors + consumer * {floats};" in code
    assert "mbarrier_arrive(smem_u32(vectors_empty + consumer))" in code


def test_check_says_the_epilogue_hides_under_the_other_consumers_main_loop():
    report = format_report(analyze(load(SourceFile.read(SPECS / "linear_gelu_pingpong.gemm"))[0], (4096, 4096, 4096)))
    assert "another consumer's main loop runs meanwhile (schedule: pingpong)" in report


# --- diagnostics -------------------------------------------------------------------------------

def test_pingpong_needs_two_consumers():
    errors = errors_of(variant(**{"warpgroups: 2": "warpgroups: 1", "128x128x64": "64x128x64"}))
    assert any("schedule: pingpong alternates consumer warpgroups" in error for error in errors), errors


def test_pingpong_takes_a_64_row_tile_that_two_persistent_consumers_could_not_split():
    text = variant(**{"128x128x64": "64x256x64", "m64n128k16": "m64n256k16", "stages: 5": "stages: 4"})
    assert errors_of(text) == []
    assert any("does not split into 2 consumer warpgroups" in error
               for error in errors_of(text.replace("pingpong", "persistent")))


def test_pingpong_is_refused_where_it_is_not_generated():
    assert any("batch: strided with schedule: pingpong" in error
               for error in errors_of(variant(**{"bounds: checked;": "bounds: checked; batch: strided;"})))
    sgemm = (SPECS / "sgemm_v3.gemm").read_text()
    sgemm = re.sub(r"block\s*\{([^}]*)\}", lambda m: "block {" + m.group(1) + " schedule: pingpong; }", sgemm, count=1)
    assert any("schedule: pingpong is generated for wgmma specs only" in error for error in errors_of(sgemm))


# --- the protocol, as a model of its mbarriers ----------------------------------------------------

@dataclass
class Barrier:
    """An mbarrier as the parity waits see it: its completed phases."""
    completed: int = 0

    def passes(self, parity: int) -> bool:
        """try_wait.parity: the phase with this parity is complete, i.e. the current phase has the other."""
        return (self.completed & 1) != parity


@dataclass
class Consumer:
    index: int
    tiles: list[int]
    position: int = 0  # which of its tiles
    kt: int = -1  # -1: before the tile's turn; k_tiles: issued the last k-tile
    turn_phase: int = 0
    turn_waits: int = 0
    done: bool = False


@dataclass
class Model:
    stages: int
    k_tiles: int
    tiles: int
    consumers: int
    turns: bool = True
    full: list[Barrier] = field(default_factory=list)
    empty: list[Barrier] = field(default_factory=list)
    turn: list[Barrier] = field(default_factory=list)
    issued: int = 0  # the producer's next use of the ring
    multiplied: list[tuple[int, int, int]] = field(default_factory=list)  # (consumer, tile, k-tile)
    wrong_phase: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.full = [Barrier() for _ in range(self.stages)]
        self.empty = [Barrier() for _ in range(self.stages)]
        self.turn = [Barrier() for _ in range(self.consumers)]
        self.workers = [Consumer(c, list(range(c, self.tiles, self.consumers))) for c in range(self.consumers)]

    def step_producer(self) -> bool:
        """Use `issued` of the ring: wait for its stage to be empty, then TMA completes `full`."""
        if self.issued == self.tiles * self.k_tiles:
            return False
        stage, lap = self.issued % self.stages, self.issued // self.stages
        if not self.empty[stage].passes((lap & 1) ^ 1):
            return False
        self.full[stage].completed += 1
        self.issued += 1
        return True

    def step_consumer(self, worker: Consumer) -> bool:
        if worker.done:
            return False
        if worker.position == len(worker.tiles):
            worker.done = True
            return True
        nth = worker.tiles[worker.position]
        if worker.kt == -1:  # the tile's turn
            if nth > 0 and self.turns:
                barrier = self.turn[worker.index]
                if not barrier.passes(worker.turn_phase):
                    return False
                worker.turn_waits += 1
                if barrier.completed != worker.turn_waits:
                    self.wrong_phase.append(f"consumer {worker.index} passed turn wait {worker.turn_waits} at "
                                            f"{barrier.completed} completed phases")
                worker.turn_phase ^= 1
            worker.kt = 0
            return True
        if worker.kt < self.k_tiles:
            use = nth * self.k_tiles + worker.kt
            stage, lap = use % self.stages, use // self.stages
            if not self.full[stage].passes(lap & 1):
                return False
            if self.full[stage].completed != lap + 1:
                self.wrong_phase.append(f"consumer {worker.index} read use {use} (lap {lap}) of stage {stage} at "
                                        f"{self.full[stage].completed} completed phases")
            self.multiplied.append((worker.index, nth, worker.kt))
            self.empty[stage].completed += 1  # released (the kernel frees it one k-tile later: same order)
            worker.kt += 1
            if worker.kt == self.k_tiles and self.turns:
                self.turn[(worker.index + 1) % self.consumers].completed += 1
            return True
        worker.position += 1
        worker.kt = -1
        return True

    def run(self, choices: list[int]) -> bool:
        """Step the actor each choice names (0: the producer, c + 1: consumer c), or the next one that can move;
        False on a deadlock."""
        actors = [self.step_producer] + [lambda worker=worker: self.step_consumer(worker) for worker in self.workers]
        choices = iter(choices)
        while not (self.issued == self.tiles * self.k_tiles and all(worker.done for worker in self.workers)):
            first = next(choices, 0) % len(actors)
            if not any(actors[(first + offset) % len(actors)]() for offset in range(len(actors))):
                return False
        return True


protocol = dict(stages=st.integers(2, 6), k_tiles=st.integers(1, 13), tiles=st.integers(1, 9),
                consumers=st.integers(2, 3), choices=st.lists(st.integers(0, 3), max_size=400))


@settings(max_examples=200, deadline=None)
@given(**protocol)
def test_the_turns_keep_every_wait_on_its_own_phase(stages, k_tiles, tiles, consumers, choices):
    model = Model(stages, k_tiles, tiles, consumers)
    assert model.run(choices), "deadlock"
    assert model.wrong_phase == []
    expected = sorted((nth % consumers, nth, kt) for nth in range(tiles) for kt in range(k_tiles))
    assert sorted(model.multiplied) == expected  # each k-tile once, by the consumer whose tile it is


def test_without_the_turns_a_consumer_reads_a_stage_a_lap_early():
    """Consumer 1 starts at its tile's place in the ring while the producer is still in consumer 0's tile: with
    k_tiles >= 2 x STAGES its parity wait on `full` passes two phases early: consumer 1 reaches its first k-tile
    (use 4, stage 0, lap 2), the producer lands use 0 (lap 0) in stage 0, and consumer 1's wait for an even phase
    passes on it."""
    model = Model(stages=2, k_tiles=4, tiles=2, consumers=2, turns=False)
    model.run([2, 0, 2] + [0, 1, 2] * 40)  # what follows the wrong read may deadlock: the ring is corrupt
    assert model.wrong_phase and model.wrong_phase[0].startswith("consumer 1 read use 4 (lap 2) of stage 0 at 1 ")

"""The launch rules of gemmdsl/schedule.py: stream-K's work split (and the launcher's C++ copy of it),
checked bounds' interior and edge launches."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gemmdsl.compiler import compile_path
from gemmdsl.schedule import (ALIGN_IDLE_PERCENT, FIXUP_K_TILES_PER_SHARER, INTERIOR_MIN_WAVES_PER_STRIP,
                              LAUNCHED_MIN_SAVED_K_TILES, MAX_WORK, MIN_IDLE_PERCENT, MIN_K_TILES_PER_BLOCK, StreamKSplit, SubLaunch, call_split, interior_launches,
                              interior_split_pays, stream_k_split)

ROOT = Path(__file__).resolve().parent.parent
H100_SLOTS = 132 * 2  # sgemm_h100: 2 blocks per SM


@settings(max_examples=300, deadline=None)
@given(tiles=st.integers(1, 3000), k_tiles=st.integers(1, 600), slots=st.integers(1, 600),
       batch=st.sampled_from((1, 1, 2, 3, 7, 600)))
def test_stream_k_blocks_share_the_last_tiles_exactly_once(tiles, k_tiles, slots, batch):
    split = stream_k_split(tiles, k_tiles, slots, batch)
    assert split.dp_tiles + split.sk_tiles == tiles
    if not split.sk_tiles:
        assert split.sk_blocks == 0
        return
    slots //= batch  # per GEMM: the batch's stream-K blocks fit on the GPU together
    assert split.sk_tiles == tiles % slots and split.sk_tiles < split.sk_blocks <= slots
    assert (slots - split.sk_tiles) * 100 >= MIN_IDLE_PERCENT * slots
    covered = []
    lengths = []
    for block in range(split.sk_blocks):
        pieces = split.segments(block)
        lengths.append(sum(end - first for _, first, end in pieces))
        for index, (tile, first, end) in enumerate(pieces):
            assert split.first_sk_tile <= tile < tiles and 0 <= first < end <= k_tiles
            # walked from the range's end: the first piece starts a tile unless it is the only one,
            # every later piece ends one
            if index > 0:
                assert end == k_tiles
            if len(pieces) > 1 and index == 0:
                assert first == 0
            covered += [(tile, k) for k in range(first, end)]
    assert sorted(covered) == [(t, k) for t in range(split.first_sk_tile, tiles) for k in range(k_tiles)]
    assert max(lengths) - min(lengths) <= 1  # equal shares
    assert min(lengths) >= min(MIN_K_TILES_PER_BLOCK - 1, split.sk_tiles * k_tiles // split.sk_blocks)


def launched_work(block_tile: tuple[int, int, int], m: int, n: int, k: int, slots: int, batch: int,
                  interior_kernel: bool) -> list[tuple[int, int]]:
    """(C tile, k-tile) of every piece of work one GEMM of a call launches, as the launcher launches it:
    split (vector or scalar call alike), the plain tiles whole and the stream-K blocks' segments; else,
    when the call runs the interior kernel (checked bounds, vector-aligned), its launches' tiles, each
    strip's tiles numbered on C's grid; else every tile whole."""
    bm, bn, _ = block_tile
    split = call_split(block_tile, m, n, k, slots, batch)
    tiles_n = -(-n // bn)

    def whole(tile: int) -> list[tuple[int, int]]:
        return [(tile, kt) for kt in range(split.k_tiles)]

    if split.sk_tiles:
        work = [piece for tile in range(split.dp_tiles) for piece in whole(tile)]
        for block in range(split.sk_blocks):
            work += [(tile, kt) for tile, first, end in split.segments(block) for kt in range(first, end)]
        return work
    if not interior_kernel:
        return [piece for tile in range(split.tiles) for piece in whole(tile)]
    work = []
    for launch in interior_launches(block_tile, m, n, k):
        assert launch.row % bm == 0 and launch.col % bn == 0  # the strips lie on C's tile grid
        for i in range(-(-launch.m // bm)):
            for j in range(-(-launch.n // bn)):
                work += whole((launch.row // bm + i) * tiles_n + launch.col // bn + j)
    return work


@settings(max_examples=300, deadline=None)
@given(tile=st.sampled_from(((128, 128, 8), (64, 64, 8), (32, 128, 8), (128, 32, 8), (16, 64, 16))),
       m=st.integers(1, 700), n=st.integers(1, 700), k=st.integers(1, 400), slots=st.integers(1, 300),
       batch=st.sampled_from((1, 1, 2, 5)), aligned=st.booleans())
def test_every_tile_and_k_tile_of_a_call_is_launched_exactly_once(tile, m, n, k, slots, batch, aligned):
    """On the vector kernel (with the interior kernel beside it) or the scalar one, split or not: each
    (C tile, k-tile) of each GEMM is computed by exactly one block."""
    bm, bn, bk = tile
    work = launched_work(tile, m, n, k, slots, batch, interior_kernel=aligned)
    tiles, k_tiles = -(-m // bm) * -(-n // bn), -(-k // bk)
    assert sorted(work) == [(t, kt) for t in range(tiles) for kt in range(k_tiles)]


@pytest.mark.parametrize("size, shared", [((1024, 1024, 1024), 64), ((2048, 2048, 2048), 0),
                                          ((4096, 4096, 4096), 232), ((8192, 8192, 8192), 136),
                                          ((4096, 4096, 1024), 232)])
def test_the_benchmarked_sizes_on_the_h100(size, shared):
    """What the Performance section's sgemm_h100 figures ran: 2048^3 (256 tiles, 3% of the wave
    idle) runs tiles only; the others share their last wave with a full wave of blocks."""
    m, n, k = size
    split = stream_k_split((m // 128) * (n // 128), k // 8, H100_SLOTS)
    assert split.sk_tiles == shared
    assert split.sk_blocks == (H100_SLOTS if shared else 0)


@pytest.mark.parametrize("size, tiles, blocks, k_tiles_per_block", [
    ((256, 256, 65536), 4, 264, 124), ((16, 4096, 4096), 32, 264, 62), ((127, 4096, 4096), 32, 264, 62),
    ((4096, 127, 4096), 32, 264, 62), ((1000, 1000, 1000), 64, 264, 30), ((6000, 6000, 6000), 97, 264, 275)])
def test_shapes_that_cannot_fill_the_gpu_split_k_over_every_slot(size, tiles, blocks, k_tiles_per_block):
    """The awkward shapes on an H100 in 128x128x8 tiles with checked bounds (edge tiles and a partial
    last k-tile count whole): with fewer tiles than slots every tile is shared, split-K across
    all 264 slots, each block a contiguous range of about k_tiles_per_block k-tiles."""
    split = call_split((128, 128, 8), *size, H100_SLOTS)
    assert (split.sk_tiles, split.sk_blocks) == (tiles, blocks)
    assert split.sk_tiles * split.k_tiles // split.sk_blocks == k_tiles_per_block


def test_a_batch_is_split_per_gemm():
    assert stream_k_split(4, 8192, H100_SLOTS, batch=2) == stream_k_split(4, 8192, H100_SLOTS // 2)
    assert stream_k_split(4, 8192, H100_SLOTS, batch=H100_SLOTS + 1).sk_tiles == 0  # the batch fills the GPU


@pytest.mark.parametrize("tiles, slots, k_tiles, splits", [
    (64, 264, 8, False), (64, 264, 16, False), (64, 264, 32, True), (64, 264, 64, True),  # sgemm_any
    (256, 528, 32, False), (256, 528, 64, True)])  # checked_128x32
def test_the_launchers_stream_k_needs_enough_idle_k_tiles(tiles, slots, k_tiles, splits):
    """Where the FMA launchers' stream-K was timed against tiles only (docs/performance.md, \"Stream-K at short K\"):
    it lost at 8 and 16 k-tiles and won from 64; at 32 it broke even (the floor lets sgemm_any's 76%
    idle slots through, not checked_128x32's 52%). The wgmma path has no floor."""
    split = stream_k_split(tiles, k_tiles, slots, min_saved_k_tiles=LAUNCHED_MIN_SAVED_K_TILES)
    assert bool(split.sk_tiles) == splits
    assert stream_k_split(tiles, k_tiles, slots).sk_tiles == tiles


@settings(max_examples=300, deadline=None)
@given(tiles=st.integers(1, 5000), k_tiles=st.integers(1, 5000), slots=st.integers(1, 1000),
       floor=st.integers(0, 100))
def test_a_stream_k_floor_only_removes_splits(tiles, k_tiles, slots, floor):
    """A floor never changes a split, only drops it; and a longer K never drops one a shorter K kept."""
    free = stream_k_split(tiles, k_tiles, slots)
    kept = stream_k_split(tiles, k_tiles, slots, min_saved_k_tiles=floor)
    assert kept.sk_tiles == 0 or kept == free
    if kept.sk_tiles:
        longer = stream_k_split(tiles, k_tiles + 1, slots, min_saved_k_tiles=floor)
        assert longer.sk_tiles or stream_k_split(tiles, k_tiles + 1, slots).sk_tiles == 0


def test_small_problems_do_not_split():
    assert stream_k_split(1, 1, 264).sk_tiles == 0  # one k-tile: nothing to share
    assert stream_k_split(4, 2, 264).sk_tiles == 0  # 8 k-tiles: two blocks of 4 for four tiles
    assert stream_k_split(4, 3, 264).sk_tiles == 0
    split = stream_k_split(4, 32, 264)
    assert (split.sk_tiles, split.sk_blocks) == (4, 32)


@settings(max_examples=300, deadline=None)
@given(tiles=st.integers(1, 3000), k_tiles=st.integers(1, 2**16), slots=st.integers(1, 300))
def test_an_aligned_split_gives_every_shared_tile_as_many_blocks_with_few_slots_idle(tiles, k_tiles, slots):
    """The wgmma path's split (`aligned`): where the unaligned one takes every slot, it takes the most
    blocks that are a multiple of the shared tiles if that leaves at most ALIGN_IDLE_PERCENT of the slots
    idle (then each tile's blocks start at the same k-tiles), and otherwise the unaligned split; either way no
    tile takes more than max(2, k_tiles / FIXUP_K_TILES_PER_SHARER) blocks (its partial sums are added one after
    another), a multiple of the shared tiles too."""
    plain = stream_k_split(tiles, k_tiles, slots)
    split = stream_k_split(tiles, k_tiles, slots, aligned=True)
    assert split.sk_tiles == plain.sk_tiles
    if not split.sk_tiles:
        assert split == plain
        return
    cap = split.sk_tiles * max(2, k_tiles // FIXUP_K_TILES_PER_SHARER)
    if plain.sk_blocks == slots and (slots % split.sk_tiles) * 100 <= ALIGN_IDLE_PERCENT * slots:
        assert split.sk_blocks == min(slots - slots % split.sk_tiles, cap)
        assert all(split.range_begin(b * split.sk_blocks // split.sk_tiles) % k_tiles == 0
                   for b in range(split.sk_tiles))
    else:
        assert split.sk_blocks == min(plain.sk_blocks, cap)


def test_long_k_over_few_tiles_splits_into_equal_shares_per_tile():
    """256x256x65536 in 64x128 tiles: 8 tiles of 1024 k-tiles on 128 of the H100's 132 SMs, 16 blocks of 64
    k-tiles each; decode's 64 tiles of 1x8192x8192 on 128 blocks, two a tile."""
    assert stream_k_split(8, 1024, 132, aligned=True).sk_blocks == 128
    assert stream_k_split(64, 128, 132, aligned=True).sk_blocks == 128
    assert stream_k_split(8, 1024, 132).sk_blocks == 132


@settings(max_examples=300, deadline=None)
@given(tiles=st.integers(1, 3000), k_tiles=st.integers(1, 300), slots=st.integers(1, 300))
def test_each_shared_tile_is_finished_by_the_block_that_does_its_last_k_tile(tiles, k_tiles, slots):
    """The wgmma path's fixup (paths/wgmma/stream_k.py): the block whose range holds a shared tile's last
    k-tile does it as its last piece; every other block that meets the tile (`contributors`) does so in
    its first piece, without the tile's last k-tile, and meets no other tile so; so each leaves one partial
    sum per launch, and none waits before it has left its own."""
    split = stream_k_split(tiles, k_tiles, slots)
    assume(split.sk_tiles)
    pieces = {block: split.segments(block) for block in range(split.sk_blocks)}
    for block, walk in pieces.items():
        partial = [piece for piece in walk if piece[2] < k_tiles]
        assert partial in ([], [walk[0]]), walk
        assert all(piece == walk[-1] for piece in walk if piece[1] > 0 and piece[2] == k_tiles)
    for tile in range(split.first_sk_tile, tiles):
        meeting = sorted(block for block, walk in pieces.items() if any(piece[0] == tile for piece in walk))
        finisher = split.block_of((tile - split.first_sk_tile + 1) * k_tiles - 1)
        assert any(piece[0] == tile and piece[2] == k_tiles for piece in pieces[finisher])
        assert list(split.contributors(tile)) == [block for block in meeting if block != finisher]
        assert all(block < finisher for block in split.contributors(tile))


@settings(max_examples=300, deadline=None)
@given(sk_tiles=st.integers(1, 4096), k_tiles=st.integers(1, 2**20), sk_blocks=st.integers(1, 1024),
       block=st.integers(0, 1024), data=st.data())
def test_the_wgmma_kernels_32_bit_range_arithmetic_is_exact(sk_tiles, k_tiles, sk_blocks, block, data):
    """The wgmma stream-K kernel never forms sk_work * block (which overflows int): a range's start as
    quotient * block + remainder * block / sk_blocks is the exact one, and the fixup's search for a
    shared tile's first contributor (down from the finisher while the range starts past the tile's first
    k-tile) finds block_of's block; every intermediate fits in int where the launcher shares tiles."""
    assume(sk_tiles * k_tiles <= MAX_WORK and sk_blocks <= sk_tiles * k_tiles)
    split = StreamKSplit(tiles=sk_tiles, k_tiles=k_tiles, slots=sk_blocks, sk_tiles=sk_tiles, sk_blocks=sk_blocks)
    block = min(block, sk_blocks)
    assert split.range_begin(block) == split.sk_work * block // sk_blocks
    quotient, remainder = divmod(split.sk_work, sk_blocks)
    assert quotient * sk_blocks <= MAX_WORK and remainder * sk_blocks <= MAX_WORK
    unit = data.draw(st.integers(0, split.sk_work - 1))
    first = split.block_of(unit + (k_tiles - 1 - unit % k_tiles))  # the tile's finisher
    unit -= unit % k_tiles  # the tile's first k-tile
    while split.range_begin(first) > unit:
        first -= 1
    assert first == split.block_of(unit)


@settings(max_examples=300, deadline=None)
@given(tile=st.tuples(st.sampled_from((16, 64, 128, 256)), st.sampled_from((16, 64, 128, 256)),
                      st.sampled_from((4, 8, 16))),
       m=st.integers(1, 1000), n=st.integers(1, 1000), k=st.integers(1, 100))
def test_interior_and_edge_launches_cover_c_once_on_kernels_that_take_them(tile, m, n, k):
    """Each element of C in exactly one launch; the interior kernels (exact-bounds code) only get
    whole tiles and at least one whole k-tile, the plain one whole k-tiles only and the partial-k one
    a partial last k-tile; the checked kernel takes anything."""
    bm, bn, bk = tile
    launches = interior_launches(tile, m, n, k)
    covered = numpy.zeros((m, n), dtype=int)
    for launch in launches:
        assert launch.m >= 1 and launch.n >= 1
        covered[launch.row:launch.row + launch.m, launch.col:launch.col + launch.n] += 1
        if launch.interior:
            assert launch.m % bm == 0 and launch.n % bn == 0 and k >= bk
            assert launch.partial_k == (k % bk != 0)
        else:
            assert not launch.partial_k
    assert (covered == 1).all()
    assert any(launch.interior for launch in launches) == (k >= bk and m >= bm and n >= bn)


@settings(max_examples=300, deadline=None)
@given(tile=st.tuples(st.sampled_from((32, 64, 128)), st.sampled_from((32, 64, 128)), st.sampled_from((8, 16))),
       m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 64), slots=st.integers(1, 1000),
       batch=st.integers(1, 8))
def test_the_interior_split_pays_with_enough_waves_per_strip(tile, m, n, k, slots, batch):
    """Split only where there is an interior; always when it is all of C (no strip to run after it);
    otherwise exactly when its tiles fill INTERIOR_MIN_WAVES_PER_STRIP waves per strip, so a GPU that holds
    more blocks at once never splits a call that a smaller one would not."""
    bm, bn, bk = tile
    pays = interior_split_pays(tile, m, n, k, slots, batch)
    has_interior = k >= bk and m >= bm and n >= bn
    strips = (m % bm != 0) + (n % bn != 0)
    if not has_interior:
        assert not pays
    elif not strips:
        assert pays
    else:
        assert pays == ((m // bm) * (n // bn) * batch >= INTERIOR_MIN_WAVES_PER_STRIP * strips * slots)
    assert not (interior_split_pays(tile, m, n, k, slots + 1, batch) and not pays)


def test_the_interior_split_where_it_was_measured():
    """sgemm_any's 128x128x8 tiles at 2 blocks on the H100's 132 SMs (docs/performance.md, \"The interior split\"):
    one launch at 1000^3 (0.2 waves of interior per strip; the split took 2.65x as long) and 6000^3
    (4.0; 1.037x), the split at 8000x8000x1000 (7.3; 0.955x) and 16000x8192x512 (no strip; 0.919x)."""
    tile, slots = (128, 128, 8), 132 * 2
    assert not interior_split_pays(tile, 1000, 1000, 1000, slots)
    assert not interior_split_pays(tile, 6000, 6000, 6000, slots)
    assert interior_split_pays(tile, 8000, 8000, 1000, slots)
    assert interior_split_pays(tile, 16000, 8192, 512, slots)


# What a launcher calls of the CUDA runtime, for the host: a GPU of `sms` SMs holding `per_sm` blocks each.
HOST_RUNTIME = r"""
using cudaError_t = int;
using cudaStream_t = void*;
constexpr int cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidConfiguration = 9;
constexpr int cudaFuncAttributeMaxDynamicSharedMemorySize = 0, cudaDevAttrMultiProcessorCount = 0;
struct dim3 { unsigned x, y, z; dim3(unsigned x, unsigned y = 1, unsigned z = 1) : x(x), y(y), z(z) {} };
static int sms, per_sm;
template <typename F> cudaError_t cudaFuncSetAttribute(F, int, int) { return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaGetDevice(int* device) { *device = 0; return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int* value, int, int) { *value = sms; return cudaSuccess; }
template <typename F> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, F, int, size_t) {
    *blocks = per_sm;
    return cudaSuccess;
}
"""


# The launcher, compiled for the host: every `kernel<<<grid, block, smem, stream>>>(args)` records its
# kernel, blocks, M, N and the offsets of A, B and C instead of launching.
LAUNCHES_TEST = r"""
#include <cstdint>
#include <cstdio>
%(runtime)s
using Kernel = void (*)(const float*, const float*, float*, int, int, int, int, int, int, float, float);
%(kernels)s
alignas(16) static float operands[4];
static void launched(Kernel kernel, dim3 grid, const float* A, const float* B, float* C, int M, int N) {
    const int which = kernel == %(interior)s ? 1 : kernel == %(interior_partial_k)s ? 2 : 0;
    std::printf("%%d %%u %%d %%d %%td %%td %%td\n", which, grid.x, M, N, A - operands, B - operands, C - operands);
}
%(launcher)s
int main() {
    int m, n, k, lda, ldb, ldc;
    while (std::scanf("%%d %%d %%d %%d %%d %%d %%d %%d", &m, &n, &k, &lda, &ldb, &ldc, &sms, &per_sm) == 8) {
        %(name)s_launch_ld(operands, lda, operands, ldb, operands, ldc, m, n, k, 1.0f, 0.0f, nullptr);
        std::printf("end\n");
    }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH")
@pytest.mark.parametrize("name", ["checked_v3", "layouts_tt"])
def test_the_launcher_launches_interior_and_edges_as_schedule_py_does(name, tmp_path):
    """Row-major and column-major operands: the launcher's kernels (vector, interior, partial-k interior),
    strips and pointer offsets, against interior_launches and the operands' layouts, on a GPU of one slot
    (where the split pays for the larger shapes) and of 132 x 2 (where it pays for none of them)."""
    artifacts = compile_path(ROOT / "specs" / f"{name}.gemm")
    cuda, entries, layouts = artifacts.cuda, artifacts.metadata["entries"], artifacts.metadata["layouts"]
    launcher = cuda[cuda.index(f"static bool {name}_aligned"):cuda.index(f'extern "C" cudaError_t {name}_launch(')]
    # K = 0's launch (these shapes have K >= 1) is left out: its kernel takes other parameters.
    launcher = re.sub(rf"{entries['scale_c']}<<<.*?>>>\(.*?\);", "(void)scale_blocks;", launcher)
    launcher = re.sub(r"(\w+)<<<(dim3\(.*?\)), dim3\(\d+\), smem_bytes, stream>>>\(([^;]*)\);",
                      lambda match: f"launched({match[1]}, {match[2]}, {', '.join(match[3].split(', ')[:5])});",
                      launcher)
    kernels = "".join(f"void {entry}(const float*, const float*, float*, int, int, int, int, int, int, float, float) "
                      "{}\n" for entry in (entries["vector"], entries["scalar"], entries["interior"],
                                            entries["interior_partial_k"]))
    (tmp_path / "launches.cpp").write_text(LAUNCHES_TEST % {
        "runtime": HOST_RUNTIME, "kernels": kernels, "interior": entries["interior"],
        "interior_partial_k": entries["interior_partial_k"], "launcher": launcher, "name": name})
    subprocess.run(["g++", "-O1", "-o", "launches", "launches.cpp"], cwd=tmp_path, check=True)
    bm, bn, bk = artifacts.metadata["block_tile"]
    shapes = [(m, n, k, sms, per_sm) for m in (1, bm, 2 * bm + 5, 13 * bm + 1) for n in (3, bn, 3 * bn + 1)
              for k in (1, bk - 1, bk, bk + 1, 3 * bk, 3 * bk + 1) for sms, per_sm in ((1, 1), (132, 2))]
    def aligned(extent: int) -> int:  # vector-aligned leading dimensions: the vector kernel runs
        return -(-extent // 4) * 4

    lds = {shape: (aligned(k if layouts["a"] == "row" else m), aligned(n if layouts["b"] == "row" else k),
                   aligned(n if layouts["c"] == "row" else m)) for shape in shapes for m, n, k, *_ in [shape]}
    stdin = "".join(" ".join(map(str, (*shape[:3], *lds[shape], *shape[3:]))) + "\n" for shape in shapes)
    done = subprocess.run([str(tmp_path / "launches")], input=stdin, capture_output=True, text=True, check=True)
    got = [[tuple(map(int, line.split())) for line in call.strip().splitlines()]
           for call in done.stdout.split("end\n")[:-1]]

    def offset(operand: str, row: int, col: int, ld: int) -> int:
        return row * ld + col if layouts[operand.lower()] == "row" else col * ld + row

    expected = []
    for shape in shapes:
        m, n, k, sms, per_sm = shape
        lda, ldb, ldc = lds[shape]
        pieces = [SubLaunch(False, 0, 0, m, n)]
        if interior_split_pays((bm, bn, bk), m, n, k, sms * per_sm):
            pieces = interior_launches((bm, bn, bk), m, n, k)
        expected.append([(2 if s.partial_k else int(s.interior), -(-s.m // bm) * -(-s.n // bn), s.m, s.n,
                          offset("A", s.row, 0, lda),
                          offset("B", 0, s.col, ldb), offset("C", s.row, s.col, ldc))
                         for s in pieces])
    assert got == expected
    assert any(len(launches) == 3 for launches in expected) and any(
        len(launches) == 1 and launches[0][0] == 0 for launches in expected)


# A stream-K launcher, compiled for the host on a GPU of `sms` SMs holding `per_sm` blocks each: every
# launch prints its kernel and its grid's x instead of launching.
STREAM_K_LAUNCHES_TEST = r"""
#include <cstddef>
#include <cstdint>
#include <cstdio>
%(runtime)s
%(kernels)s
static void launched(void (*kernel)(...), dim3 grid) { std::printf("%%s %%u\n", name_of(kernel), grid.x); }
%(launcher)s
alignas(16) static float operands[1 << 20];
int main() {
    int m, n, k, lda, ldb, ldc, offset_b;
    while (std::scanf("%%d %%d %%d %%d %%d %%d %%d %%d %%d", &m, &n, &k, &lda, &ldb, &ldc, &offset_b, &sms, &per_sm) == 9) {
        %(name)s_launch_ld(operands, lda, operands + offset_b, ldb, operands, ldc, m, n, k, 1.0f, 0.0f, nullptr);
        std::printf("end\n");
    }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH")
def test_the_launcher_splits_scalar_calls_on_the_scalar_stream_k_kernel(tmp_path):
    """sgemm_any's launcher: a call whose B is not vector-aligned (an odd ldb, a shifted pointer) is
    split as schedule.py splits it, its shared tiles on the scalar stream-K kernel and the others on
    the scalar kernel; an aligned call on the vector kernels, or on the interior kernel (the partial-k
    one for 2048x2048x77) and the edge strips when nothing is shared and the split pays."""
    name = "sgemm_any"
    artifacts = compile_path(ROOT / "specs" / f"{name}.gemm")
    cuda, entries = artifacts.cuda, artifacts.metadata["entries"]
    launcher = cuda[cuda.index(f"static bool {name}_aligned"):cuda.index(f'extern "C" cudaError_t {name}_launch(')]
    launcher = re.sub(r"(\w+)<<<(dim3\(.*?\)), dim3\(\d+\), \w+, stream>>>\([^;]*\);",
                      lambda match: f"launched({match[1]}, {match[2]});", launcher)
    kernels = [entry for entry in entries.values() if entry is not None]
    names = "".join(f'    if (kernel == {entry}) return "{entry}";\n' for entry in kernels)
    declarations = "".join(f"void {entry}(...) {{}}\n" for entry in kernels)
    declarations += f"static const char* name_of(void (*kernel)(...)) {{\n{names}    return \"?\";\n}}\n"
    (tmp_path / "launches.cpp").write_text(STREAM_K_LAUNCHES_TEST % {
        "runtime": HOST_RUNTIME, "kernels": declarations, "launcher": launcher, "name": name})
    subprocess.run(["g++", "-O1", "-o", "launches", "launches.cpp"], cwd=tmp_path, check=True)
    bm, bn, bk = artifacts.metadata["block_tile"]
    calls = []  # m, n, k, lda, ldb, ldc, offset_b, sms, per_sm
    for m, n, k in [(4096, 127, 4096), (127, 4096, 4096), (2048, 2048, 77), (300, 260, 1000), (256, 256, 256)]:
        for ldb, offset_b in ((-(-n // 4) * 4, 0), (n, 0), (-(-n // 4) * 4, 1)):
            for sms, per_sm in ((132, 2), (7, 1)):
                calls.append((m, n, k, k, ldb, ldb, offset_b, sms, per_sm))
    stdin = "".join(" ".join(map(str, call)) + "\n" for call in calls)
    done = subprocess.run([str(tmp_path / "launches")], input=stdin, capture_output=True, text=True, check=True)
    got = [[tuple(line.split()) for line in call.strip().splitlines()] for call in done.stdout.split("end\n")[:-1]]

    expected = []
    for m, n, k, lda, ldb, ldc, offset_b, sms, per_sm in calls:
        aligned = all(value % 4 == 0 for value in (lda, ldb, ldc, offset_b))
        kernel = entries["vector"] if aligned else entries["scalar"]
        split = call_split((bm, bn, bk), m, n, k, sms * per_sm, min_saved_k_tiles=LAUNCHED_MIN_SAVED_K_TILES)
        if split.sk_tiles:
            launches = [(entries["prepare"], split.sk_tiles),
                        (entries["stream_k"] if aligned else entries["stream_k_scalar"], split.sk_blocks)]
            launches += [(kernel, split.dp_tiles)] if split.dp_tiles else []
        elif aligned and interior_split_pays((bm, bn, bk), m, n, k, sms * per_sm):
            interior = {False: entries["interior"], True: entries["interior_partial_k"]}
            launches = [(interior[s.partial_k] if s.interior else kernel, -(-s.m // bm) * -(-s.n // bn))
                        for s in interior_launches((bm, bn, bk), m, n, k)]
        else:
            launches = [(kernel, split.tiles)]
        expected.append([(entry, str(blocks)) for entry, blocks in launches])
    assert got == expected
    assert any(launch[0] == entries["stream_k_scalar"] for call in got for launch in call)

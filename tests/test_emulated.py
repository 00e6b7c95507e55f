"""Every spec's kernels, run on the CPU (tests/host_emulation.py) and checked element by element.

Checked kernels get the shapes that break tile arithmetic (1x1x1, 7x13x5, edge blocks on both
axes with a partial last k-tile), packed and padded leading dimensions, a shifted pointer, and
batches; exact kernels a whole-tile shape. Which kernel a call runs (vector or scalar) is what
`runtime.check_call` decides for the same operands, so this also tests that choice: a vector
access it lets through misaligned would stop the run (UBSan), as would any access outside an
operand (AddressSanitizer). Skipped without g++.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import host_emulation
from budget import examples
from gemmdsl.compiler import compile_path, compile_text
from gemmdsl.frontend import load_spec
from gemmdsl.paths import path_of
from gemmdsl.arrays import ITEM_SIZES, ArrayView
from gemmdsl.runtime import KernelRequirements, check_call
from gemmdsl.schedule import call_split, interior_launches
from host_emulation import Call
from spec_sets import spec_params
from spec_strategies import spec_texts

ROOT = Path(__file__).resolve().parent.parent
# The specs whose kernels the emulator can run (host_emulation.emulates): not the tensor-core paths' (wgmma,
# mma.sync), whose fragment layouts tests/test_mma_layout.py checks on the CPU and the GPU tests run. Fused specs
# (a `fuse` section) run in tests/test_emulated_fuse.py, against the chain's float64 reference; the dequantizing
# path's (quantized weights) in tests/test_emulated_dequant.py, on their packed weights.
SPECS = [path for path, spec in ((path, load_spec(path)) for path in sorted((ROOT / "specs").glob("*.gemm")))
         if spec.fuse is None and not spec.problem.weights and host_emulation.emulates(spec)
         and path_of(spec).name != "gemv"]
# The GEMV specs' tiles are a few rows by a few: the tile specs' calls (133x261x37, ...) make thousands of blocks of
# 256 emulated threads each, so they have calls of their own (gemv_calls).
GEMV_SPECS = [path for path in sorted((ROOT / "specs").glob("*.gemm")) if path_of(load_spec(path)).name == "gemv"]
BASE = 0x7F0000000000  # allocations are 16-byte aligned; offsets in a Call shift from there
OPERAND_SPACING = 1 << 40  # A, B and C far apart: separate allocations never overlap
pytestmark = pytest.mark.skipif(host_emulation.find_cxx() is None, reason="g++ not on PATH")


@pytest.fixture(scope="module")
def runners():
    """A spec's runner, built when a test first asks for it (host_emulation.shared_build): spec stem ->
    (binary, requirements)."""
    built = {}

    def runner(stem: str):
        if stem not in built:
            artifacts = compile_path(ROOT / "specs" / f"{stem}.gemm")
            built[stem] = (host_emulation.shared_build(artifacts.cuda, artifacts.metadata),
                           KernelRequirements.from_metadata(artifacts.metadata))
        return built[stem]

    return runner


def fake_operand(name: str, dtype: str, layout: str, rows: int, cols: int, ld: int, batch: int, stride: int,
                 offset: int):
    """What runtime.check_call reads of an array laid out as the emulator lays it out (each operand in
    an allocation of its own, as the emulator's are)."""
    inner = (ld, 1) if layout == "row" else (1, ld)
    shape, strides = ((rows, cols), inner) if batch == 1 else ((batch, rows, cols), (stride,) + inner)
    size = ITEM_SIZES[dtype]
    return ArrayView("emulator", shape, strides, dtype, size,
                     BASE + OPERAND_SPACING * "ABC".index(name) + size * offset, 0)


def entry_index(req: KernelRequirements, call: Call) -> int:
    """The kernel check_call picks for these operands: 0 = vector, 1 = scalar, NARROW_FIRST_ENTRY + 2 * i =
    narrow kernel i; for an empty problem SCALE_C_ENTRY (K = 0) or NO_LAUNCH (M or N = 0)."""
    operands = {}
    for name, rows, cols in (("A", call.m, call.k), ("B", call.k, call.n), ("C", call.m, call.n)):
        p = name.lower()
        stride = getattr(call, f"stride_{p}")
        batch = call.batch if stride or name == "C" else 1  # a zero stride: one matrix for the whole batch
        operands[p] = fake_operand(name, req.dtypes[name], req.layouts[name], rows, cols, getattr(call, f"ld{p}"),
                                   batch, stride, getattr(call, f"offset_{p}"))
    entry = check_call(req, **operands, alpha=call.alpha, beta=call.beta).entry
    if entry is None:
        return host_emulation.NO_LAUNCH
    if entry == req.launch.entries.scale_c:
        return host_emulation.SCALE_C_ENTRY
    narrow = [kernel.entry for kernel in req.launch.entries.narrow]
    if entry in narrow:
        return host_emulation.NARROW_FIRST_ENTRY + 2 * narrow.index(entry)
    return 0 if entry == req.launch.entries.vector else 1


def narrow_entries(req: KernelRequirements) -> set[int]:
    """The runner's numbers of the narrow kernels."""
    return {host_emulation.NARROW_FIRST_ENTRY + 2 * i for i in range(len(req.launch.entries.narrow))}


def narrow_calls(req: KernelRequirements, size: tuple[int, int, int]) -> list[Call]:
    """One call per narrow kernel: leading dimensions that are multiples of its widest operand's elements
    but not of twice that, pointers aligned (and the same with B's pointer that many elements off)."""
    calls = []
    for kernel in req.launch.entries.narrow:
        elements = max(kernel.vector_elements.values())
        lds = {name: ld + elements for name, ld in natural(req, *size, pad=2 * elements).items()}
        calls += [Call(*size, **lds, **scalars(req)), Call(*size, **lds, **scalars(req), offset_b=elements)]
    return calls


def natural(req: KernelRequirements, m: int, n: int, k: int, pad: int = 0) -> dict[str, int]:
    """Leading dimensions of packed operands in the kernel's layouts, plus `pad` (then rounded to 4)."""
    extents = {"A": (m, k), "B": (k, n), "C": (m, n)}
    lds = {}
    for name, (rows, cols) in extents.items():
        ld = cols if req.layouts[name] == "row" else rows
        lds[f"ld{name.lower()}"] = -(-ld // 4) * 4 + pad if pad else ld
    return lds


def footprint(req: KernelRequirements, name: str, rows: int, cols: int, ld: int) -> int:
    outer, inner = (rows, cols) if req.layouts[name] == "row" else (cols, rows)
    return (outer - 1) * ld + inner


def scalars(req: KernelRequirements) -> dict[str, float]:
    return {"alpha": 1.5, "beta": -0.5} if req.epilogue == "alpha_beta" else {}


def checked_calls(req: KernelRequirements) -> list[Call]:
    odd = (133, 261, 37)  # edge blocks along m and n, interior blocks too, a partial last k-tile
    bm, bn, bk = req.block_tile
    whole = (2 * bm, bn, 3 * bk)
    strips = (2 * bm + 5, bn + 3, 4 * bk)  # whole k-tiles: the interior kernel and both edge strips
    # 5 full k-tiles and a partial one (more than any ring's stages): the partial-k interior kernel, both strips
    strips_partial_k = (2 * bm + 5, bn + 3, 5 * bk + 3)
    # N a multiple of 4 with edge tiles on both axes: edge blocks load and store whole vectors (on the
    # scalar kernel too, where only A is shifted and C stays aligned)
    whole_vectors = (2 * bm + 5, 2 * bn + 4, 5 * bk + 3)
    calls = [Call(1, 1, 1, **natural(req, 1, 1, 1)),
             Call(7, 13, 5, **natural(req, 7, 13, 5), **scalars(req)),
             Call(*odd, **natural(req, *odd)),
             Call(*odd, **natural(req, *odd, pad=4), **scalars(req)),
             Call(*odd, **natural(req, *odd, pad=4), offset_a=1),
             Call(*whole, **natural(req, *whole), **scalars(req)),
             Call(*strips, **natural(req, *strips, pad=4), **scalars(req)),
             Call(*strips_partial_k, **natural(req, *strips_partial_k, pad=4), **scalars(req)),
             Call(*whole_vectors, **natural(req, *whole_vectors, pad=4), **scalars(req)),
             Call(*whole_vectors, **natural(req, *whole_vectors, pad=4), **scalars(req), offset_a=1),
             *narrow_calls(req, odd), *narrow_calls(req, strips_partial_k)]
    if req.batched:
        for m, n, k in (odd, strips):
            lds = natural(req, m, n, k, pad=4)
            strides = {"stride_a": -(-footprint(req, "A", m, k, lds["lda"]) // 4) * 4 + 4, "stride_b": 0,
                       "stride_c": -(-footprint(req, "C", m, n, lds["ldc"]) // 4) * 4}
            calls.append(Call(m, n, k, **lds, batch=3, **strides, **scalars(req)))
    return calls


def exact_calls(req: KernelRequirements) -> list[Call]:
    bm, bn, bk = req.block_tile
    size = (2 * bm, 2 * bn, 3 * bk)
    return [Call(*size, **natural(req, *size, pad=4), **scalars(req))]


def stream_k_calls(req: KernelRequirements) -> list[Call]:
    """Stream-K as GPUs of a few slots split each shape (ranges crossing tile boundaries, a block
    sharing one tile, ...). Exact kernels: 4 tiles of 16 k-tiles on 3, 5 and 7 slots, then
    alpha_beta's beta = 1, which leaves C as it is instead of preparing it. Checked kernels also:
    a tile smaller than the block tile, a partial last k-tile, edge tiles along m and n; where
    the rule would not split a tiny shape, its one tile is split by 2 blocks anyway; and the
    calls on the scalar kernel (packed odd leading dimensions, a shifted pointer), which split alike."""
    bm, bn, bk = req.block_tile
    shapes = [((2 * bm, 2 * bn, 16 * bk), slots, 4, 0) for slots in (3, 5, 7)]  # (size, slots, pad, offset_b)
    if req.multiples == (1, 1, 1):
        shapes += [((7, 13, 5), 1, 4, 0), ((33, 33, 33), 1, 4, 0), ((16, 300, 1000), 5, 4, 0),
                   ((bm + 5, 2 * bn + 3, 61), 7, 4, 0), ((2 * bm, 2 * bn, 4096), 7, 4, 0),
                   ((bm + 5, 2 * bn + 3, 61), 7, 0, 0), ((16, 2 * bn + 1, 999), 5, 0, 0),
                   ((2 * bm, 2 * bn, 16 * bk), 5, 4, 1)]
    calls = []
    for (m, n, k), slots, pad, offset_b in shapes:
        split = call_split(req.block_tile, m, n, k, slots)
        sk_tiles, sk_blocks = (split.sk_tiles, split.sk_blocks) if split.sk_tiles else (split.tiles, 2)
        calls.append(Call(m, n, k, **natural(req, m, n, k, pad=pad), **scalars(req), offset_b=offset_b,
                          sk_tiles=sk_tiles, sk_blocks=sk_blocks))
    if req.epilogue == "alpha_beta":
        calls.append(replace(calls[2], beta=1.0))
    return calls


@pytest.mark.parametrize("spec", spec_params(SPECS))
def test_kernels_compute_the_product_and_touch_nothing_else(spec, runners):
    binary, req = runners(spec.stem)
    calls = checked_calls(req) if req.multiples == (1, 1, 1) else exact_calls(req)
    if req.launch.entries.stream_k is not None:
        calls += stream_k_calls(req)
    assert run_all(binary, req, calls) == []
    if req.launch.entries.scalar is not None:
        ran = {entry_index(req, call) for call in calls}
        assert ran == {0, 1} | narrow_entries(req), "the vector, every narrow and the scalar kernel ran"
    if req.launch.entries.stream_k_scalar is not None:
        assert any(call.sk_tiles and entry_index(req, call) == 1 for call in calls), "a scalar call was split"
    if req.multiples == (1, 1, 1) and req.launch.entries.interior is not None:
        launched = [as_launched(req, call).sub_launches for call in calls]
        kernels = [[(interior, partial_k) for interior, *_, partial_k in launches] for launches in launched]
        for partial_k in (False, True):  # each interior kernel with both strips
            assert [(True, partial_k), (False, False), (False, False)] in kernels


def gemv_calls(req: KernelRequirements) -> list[Call]:
    """A GEMV spec's calls: one row or column and a few, against a few rows with K below a chunk, odd (every row of
    the packed operands off 16 bytes: the windowed kernel, its last elements one at a time) and past two steps;
    each packed, with leading dimensions of whole 16-byte chunks (the aligned kernel), and with B shifted by an
    element (the windowed kernel, its rows' first window reaching before the row)."""
    vector = 16 // ITEM_SIZES[req.dtypes["A"]]
    calls = []
    for m, n, k in ((1, 9, 5), (1, 7, 301), (3, 5, 1003), (9, 2, 4100), (2, 3, 8200)):
        chunks = -(-k // vector) * vector + vector
        aligned = {"lda": chunks, "ldb": chunks, "ldc": natural(req, m, n, k)["ldc"]}
        calls += [Call(m, n, k, **natural(req, m, n, k)), Call(m, n, k, **aligned, **scalars(req)),
                  Call(m, n, k, **aligned, **scalars(req), offset_b=1)]
    return calls


@pytest.mark.parametrize("spec", spec_params(GEMV_SPECS))
def test_gemv_kernels_compute_the_product_and_touch_nothing_else(spec, runners):
    binary, req = runners(spec.stem)
    calls = gemv_calls(req)
    assert run_all(binary, req, calls) == []
    assert {entry_index(req, call) for call in calls} == {0, 1}, "the aligned and the windowed kernel ran"


# What the shipped GEMV specs leave out, each a variant of one: a strided batch, C column-major, the store epilogue
# and a 4-row tile on both sides (a block's sums of 4 small rows by 2 streamed rows a warp).
GEMV_VARIANTS = {
    "batched": ("hgemv_1x4", "bounds: checked; }", "bounds: checked; batch: strided; }"),
    "c_col": ("hgemv_4x1", "c: f32 row;", "c: f32 col;"),
    "store": ("sgemv_1x4", "epilogue: alpha_beta;", "epilogue: store;"),
    "four_rows": ("hgemv_f16_1x4", "tile: 1x4x2048;", "tile: 4x8x2048;"),
    "four_columns": ("hgemv_bf16c_4x1", "tile: 4x1x2048;", "tile: 8x4x2048;"),
}


@pytest.mark.parametrize("variant", sorted(GEMV_VARIANTS))
def test_gemv_variants_compute_the_product(variant, tmp_path):
    stem, old, new = GEMV_VARIANTS[variant]
    text = (ROOT / "specs" / f"{stem}.gemm").read_text()
    assert old in text
    artifacts = compile_text(text.replace(old, new, 1), f"{stem}.gemm")
    binary = host_emulation.build(artifacts.cuda, artifacts.metadata, tmp_path)
    req = KernelRequirements.from_metadata(artifacts.metadata)
    calls = gemv_calls(req)
    if req.batched:  # three GEMMs, A's matrices 4 elements apart past their footprint (the windowed kernel), B shared
        m, n, k = 3, 5, 1003
        lds = natural(req, m, n, k, pad=4)
        strides = {"stride_a": -(-footprint(req, "A", m, k, lds["lda"]) // 8) * 8 + 4, "stride_b": 0,
                   "stride_c": -(-footprint(req, "C", m, n, lds["ldc"]) // 4) * 4}
        calls.append(Call(m, n, k, **lds, batch=3, **strides, **scalars(req)))
    assert run_all(binary, req, calls) == []


def empty_calls(req: KernelRequirements) -> list[Call]:
    """The launchers' empty problems, off the tile's multiples: K = 0 (C = beta * C, padded and shifted C,
    beta 0 and not, a batch), M = 0 and N = 0 (nothing runs, nothing is written)."""
    bm, bn, _ = req.block_tile
    m, n = bm + 3, 2 * bn + 1
    calls = [Call(m, n, 0, **natural(req, m, n, 0, pad=4), **scalars(req), offset_c=1),
             Call(m, n, 0, **natural(req, m, n, 0)),
             Call(0, n, 5, **natural(req, 0, n, 5), **scalars(req)), Call(m, 0, 5, **natural(req, m, 0, 5))]
    if req.batched:
        lds = natural(req, m, n, 0, pad=4)
        calls.append(Call(m, n, 0, **lds, batch=2, stride_c=-(-footprint(req, "C", m, n, lds["ldc"]) // 4) * 4,
                          **scalars(req)))
    return calls


@pytest.mark.parametrize("spec", spec_params(SPECS))
def test_empty_problems_run_the_k0_kernel_or_nothing(spec, runners):
    """What the launchers do with empty problems, run on the real kernels: K = 0 leaves beta * C (0 where beta
    is 0) in C and writes nothing outside it; M or N = 0 runs nothing."""
    binary, req = runners(spec.stem)
    calls = empty_calls(req)
    assert [entry_index(req, call) for call in calls[:4]] == [host_emulation.SCALE_C_ENTRY] * 2 + [
        host_emulation.NO_LAUNCH] * 2
    assert run_all(binary, req, calls) == []


def test_batched_stream_k_splits_each_gemm(tmp_path):
    """batched_v3 with stream-K: each GEMM of a batch of 3 gets a third of 21 slots; its 6 edge-heavy
    tiles of 7 k-tiles (the last partial) are shared by 7 blocks, per GEMM on the grid's z."""
    text = (ROOT / "specs" / "batched_v3.gemm").read_text()
    artifacts = compile_text(text.replace("raster: group(4);", "raster: group(4); schedule: stream_k;"),
                             "batched_v3.gemm")
    binary = host_emulation.build(artifacts.cuda, artifacts.metadata, tmp_path)
    req = KernelRequirements.from_metadata(artifacts.metadata)
    m, n, k = 133, 261, 100
    split = call_split(req.block_tile, m, n, k, slots=21, batch=3)
    assert (split.sk_tiles, split.sk_blocks) == (6, 7)
    lds = natural(req, m, n, k, pad=4)
    strides = {"stride_a": -(-footprint(req, "A", m, k, lds["lda"]) // 4) * 4 + 4, "stride_b": 0,
               "stride_c": -(-footprint(req, "C", m, n, lds["ldc"]) // 4) * 4}
    call = Call(m, n, k, **lds, batch=3, **strides, **scalars(req), sk_tiles=split.sk_tiles,
                sk_blocks=split.sk_blocks)
    # leading dimensions and strides 8 bytes off: the 8-byte kernel and its stream-K twin
    narrow = replace(call, lda=call.lda + 2, ldb=call.ldb + 2, ldc=call.ldc + 2, stride_a=call.stride_a + 2 * m,
                     stride_c=call.stride_c + 2 * m)
    assert entry_index(req, narrow) == host_emulation.NARROW_FIRST_ENTRY
    assert run_all(binary, req, [call, replace(call, beta=1.0), narrow]) == []


def as_launched(req: KernelRequirements, call: Call) -> Call:
    """The call on the kernel check_call picks for it, and for checked bounds on the vector kernel
    without stream-K (of a spec with an interior kernel: not the GEMV path's), split into the interior kernel and the edge strips as the launcher splits it where
    the split pays (on a GPU that holds few blocks at once: these calls are small, and the point is to
    run every kernel)."""
    call = replace(call, entry=entry_index(req, call))
    if call.entry == host_emulation.SCALE_C_ENTRY:
        return replace(call, sk_tiles=0, sk_blocks=req.launch.scale_c_grid(call.m, call.n, call.batch)[0])
    if req.multiples != (1, 1, 1) or call.entry != 0 or call.sk_tiles or req.launch.entries.interior is None:
        return call
    launches = interior_launches(req.block_tile, call.m, call.n, call.k)
    return replace(call, sub_launches=tuple((s.interior, s.row, s.col, s.m, s.n, s.partial_k) for s in launches))


def run_all(binary: Path, req: KernelRequirements, calls: list[Call]) -> list[str]:
    """Run each call as the launcher would (as_launched); the failures' outputs."""
    failures = []
    for call in calls:
        call = as_launched(req, call)
        passed, output = host_emulation.run(binary, call)
        if not passed:
            failures.append(f"{call}: {output[:2000]}")
    return failures


@st.composite
def random_calls(draw: st.DrawFn, req: KernelRequirements) -> Call:
    """A shape the kernel takes (any, or whole tiles for exact bounds), packed or padded, maybe batched."""
    bm, bn, bk = req.block_tile
    if req.multiples == (1, 1, 1):
        m, n, k = draw(st.integers(1, 2 * bm + 3)), draw(st.integers(1, 2 * bn + 3)), draw(st.integers(1, 3 * bk + 3))
    else:
        m, n = (tile * draw(st.integers(1, 2)) for tile in req.block_tile[:2])
        k = bk * draw(st.integers(1, 16 if req.launch.entries.stream_k else 2))
    lds = natural(req, m, n, k, pad=draw(st.sampled_from((0, 4))))
    call = Call(m, n, k, **lds, **(scalars(req) if draw(st.booleans()) else {}))
    if req.batched and draw(st.booleans()):
        strides = {f"stride_{p}": -(-footprint(req, p.upper(), rows, cols, lds[f"ld{p}"]) // 4) * 4
                   for p, rows, cols in (("a", m, k), ("b", k, n), ("c", m, n))}
        call = replace(call, batch=draw(st.integers(2, 3)), **strides)
    if req.launch.entries.stream_k is not None:  # as a GPU of a few slots would split it (often: not at all)
        split = call_split(req.block_tile, m, n, k, draw(st.integers(1, 7)) * call.batch, call.batch)
        call = replace(call, sk_tiles=split.sk_tiles, sk_blocks=split.sk_blocks)
    return call


@settings(max_examples=examples(1, 3), deadline=None, database=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(text=spec_texts(name="fuzzed"), data=st.data())
def test_random_specs_compute_the_product(text, data, tmp_path_factory):
    """A random valid spec per run (3 in the full run), each at two random shapes."""
    artifacts = compile_text(text, "fuzzed.gemm")
    binary = host_emulation.build(artifacts.cuda, artifacts.metadata, tmp_path_factory.mktemp("fuzzed"))
    req = KernelRequirements.from_metadata(artifacts.metadata)
    calls = [data.draw(random_calls(req)) for _ in range(2)]
    assert run_all(binary, req, calls) == [], text


@settings(max_examples=examples(1, 3), deadline=None, database=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(text=spec_texts(name="fuzzed16", operands=("bf16", "f16")), data=st.data())
def test_random_specs_of_16_bit_operands_compute_the_product(text, data, tmp_path_factory):
    """A random valid FMA spec of bf16 or f16 operands (widened to f32 by the register copy) and f32 or 16-bit C,
    at two random shapes: the product of the stored operands, C within its own rounding."""
    artifacts = compile_text(text, "fuzzed16.gemm")
    binary = host_emulation.build(artifacts.cuda, artifacts.metadata, tmp_path_factory.mktemp("fuzzed16"))
    req = KernelRequirements.from_metadata(artifacts.metadata)
    calls = [data.draw(random_calls(req)) for _ in range(2)]
    assert run_all(binary, req, calls) == [], text


def test_the_emulator_catches_a_misaligned_vector_load(runners):
    binary, req = runners("layouts_tn")  # A column-major, read 4 floats at a time along m
    size = (256, 128, 16)
    lds = natural(req, *size)
    lds["lda"] += 1  # the launcher would pick the scalar kernel here
    passed, output = host_emulation.run(binary, Call(*size, **lds, entry=0))
    assert not passed and host_emulation.sanitizer_reported(output)


def test_inline_ptx_helpers_are_replaced():
    source = compile_path(ROOT / "specs" / "cp_async3.gemm").cuda
    host = host_emulation.host_source(source)
    assert "asm volatile(" in source and "asm volatile(" not in host
    assert "template <int PENDING>" not in host and "cp_async3_kernel(" in host

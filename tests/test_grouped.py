"""batch: grouped (docs/grouped.md): the tile walk's model against the rule that every row and column of every
group is computed exactly once and nothing outside; the emitted walk follows the model; the diagnostics for
unsupported combinations; the interfaces (launch plan, header, runtime checks) without a GPU."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl import grouped_call
from gemmdsl.arrays import ArrayView
from gemmdsl.compiler import compile_source
from gemmdsl.grouped_bench import cumulative
from gemmdsl.frontend import load
from gemmdsl.grouped_schedule import block_tiles, grid_blocks, group_rows, tile_count
from gemmdsl.launch_plan import GridRule, LaunchPlan
from gemmdsl.source import CompileError, SourceFile

ROOT = Path(__file__).resolve().parents[1]
SPEC = (ROOT / "specs" / "moe_grouped.gemm").read_text()
BM, BN = 128, 256

sizes_strategy = st.lists(st.one_of(st.just(0), st.integers(1, 700)), min_size=1, max_size=9)


def covered(offs: list[int], rows: int, n: int, blocks: int, raster: str = "group", group_size: int = 8):
    """Every (row, col-tile) the blocks compute, with repeats: a tile's rows stop at its group's end."""
    seen = []
    for block in range(blocks):
        for tile in block_tiles(offs, rows, n, BM, BN, raster, group_size, blocks, block):
            for row in range(tile.row, min(tile.row + BM, tile.end)):
                seen.append((tile.group, row, tile.col))
    return seen


@settings(max_examples=60, deadline=None)
@given(sizes=sizes_strategy, spare=st.integers(0, 200), n=st.integers(1, 700), blocks=st.integers(1, 140),
       raster=st.sampled_from(["row", "col", "group"]))
def test_every_row_of_every_group_is_computed_once_and_nothing_else(sizes, spare, n, blocks, raster):
    offs = cumulative(sizes)
    rows = offs[-1] + spare
    seen = covered(offs, rows, n, blocks, raster)
    expected = [(g, row, col) for g, (start, end) in enumerate(group_rows(offs, rows))
                for row in range(start, end) for col in range(0, n, BN)]
    assert sorted(seen) == sorted(expected)
    assert len(seen) == len(set(seen))


@settings(max_examples=40, deadline=None)
@given(sizes=sizes_strategy, n=st.integers(1, 700), sms=st.integers(1, 140))
def test_the_launch_bound_covers_the_tiles(sizes, n, sms):
    offs = cumulative(sizes)
    blocks = grid_blocks(offs[-1], n, len(offs), BM, BN, sms)
    assert 1 <= blocks <= sms
    assert blocks >= min(sms, tile_count(offs, offs[-1], n, BM, BN))


def test_a_block_visits_its_tiles_in_increasing_order_across_groups():
    offs = [0, 300, 300, 1000]  # an empty group first and in the middle
    tiles = list(block_tiles(offs, 1000, 512, BM, BN, "group", 8, 3, 1))
    assert [t.group for t in tiles] == sorted(t.group for t in tiles)
    assert {t.group for t in tiles} <= {1, 3}


def test_ends_are_clamped_to_the_previous_end_and_the_rows():
    assert group_rows([5, 3, 900, 10], 100) == [(0, 5), (5, 5), (5, 100), (100, 100)]


def test_spec_compiles_and_matches_the_golden_files():
    artifacts = compile_source(SourceFile("moe_grouped.gemm", SPEC))
    for suffix, text in (("cu", artifacts.cuda), ("h", artifacts.header)):
        assert text == (ROOT / "generated" / f"moe_grouped.{suffix}").read_text()


def test_emitted_walk_follows_the_model():
    """The kernel's cursor: both roles walk with offs clamped as group_rows clamps, and per tile the raster runs
    over the group's own tiles, from its first row; B's copies take the group, A's and C's the single matrix."""
    cuda = compile_source(SourceFile("moe_grouped.gemm", SPEC)).cuda
    assert cuda.count("group_end = min(max(offs[group], group_row), rows);") == 2
    assert cuda.count("const int group_local = tile - group_tile;") == 2
    # the prelude's raster over the group's own tiles
    assert cuda.count("raster_group(((group_end - group_row) + BM - 1) / BM, (N + BN - 1) / BN, 8, group_local);") == 2
    assert cuda.count("const int block_m = group_row + tile_mn.x * BM;") == 2
    assert "&map_b, kt * BK, block_n, group, barrier);" in cuda
    assert "&map_a, kt * BK, block_m, 0, barrier);" in cuda
    assert "if (staged && block_m + BM <= M) {" in cuda  # partial tiles leave by guarded stores
    assert re.search(r"const int M = group_end;", cuda)
    assert "M = min(M, max(offs[groups - 1], 0));" in cuda  # K = 0 leaves the rows after the groups alone


def test_launch_plan_round_trips_and_bounds_the_grid():
    plan = compile_source(SourceFile("moe_grouped.gemm", SPEC)).plan.launch
    again = LaunchPlan.from_json(plan.to_json())
    assert again == plan and again.grid_rule is GridRule.PERSISTENT_GROUPED
    assert plan.grid_for(16384, 4096, 4096, 8, 132) == (132, 1, 1)
    assert plan.grid_for(100, 256, 64, 2, 132) == (3, 1, 1)  # (1 + 2) x 1 tiles at most
    assert plan.scale_c_grid(100, 256, 5)[2] == 1  # the groups share one C


def test_header_declares_offs_and_groups():
    header = compile_source(SourceFile("moe_grouped.gemm", SPEC)).header
    assert "int M, int N, int K, const int* offs,\n" in header or "const int* offs" in header
    assert "Rows of C from offs[groups - 1] on are never written" in header


def _error(spec: str) -> str:
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", spec))
    return caught.value.render()


@pytest.mark.parametrize("edit, message, column_text", [
    (("schedule: persistent", "schedule: stream_k"), "schedule: stream_k is not supported with it", "schedule"),
    (("bounds: checked", "bounds: exact"), "batch: grouped needs bounds: checked", "bounds"),
])
def test_unsupported_wgmma_combinations_are_positioned_errors(edit, message, column_text):
    rendered = _error(SPEC.replace(*edit))
    assert message in rendered
    line = next(number for number, text in enumerate(SPEC.replace(*edit).splitlines(), 1) if column_text + ":" in text)
    assert f"case.gemm:{line}:" in rendered and "^" in rendered and "hint:" in rendered


def test_grouped_on_the_mma_sync_path_is_an_error_at_the_batch_key():
    spec = (ROOT / "specs" / "hgemm_mma.gemm").read_text()
    spec = re.sub(r"problem\s*\{", "problem { batch: grouped;", spec, count=1)
    rendered = _error(spec)
    assert "batch: grouped is generated for wgmma specs only" in rendered
    assert "^" in rendered


FP8_SPEC = (ROOT / "specs" / "moe_grouped_fp8.gemm").read_text()


@pytest.mark.parametrize("section, message, key", [
    ("scale: rowcol; bias: n f32;", "a bias is not supported with batch: grouped", "bias"),
    ("scale: rowcol; residual: bf16 row;", "a residual is not supported with batch: grouped", "residual"),
    ("scale: block;", "block scales are not supported with batch: grouped", "scale"),
])
def test_what_grouped_fp8_leaves_unsupported_is_an_error_at_its_key(section, message, key):
    spec = FP8_SPEC.replace("scale: rowcol;", section)
    rendered = _error(spec)
    assert message in rendered and "hint:" in rendered
    line = next(number for number, text in enumerate(spec.splitlines(), 1) if "fuse " in text)
    column = spec.splitlines()[line - 1].index(f"{key}: ") + len(key) + 3  # at the key's value
    assert f"case.gemm:{line}:{column}:" in rendered


def test_grouped_fp8_offsets_col_scale_by_the_tiles_group_and_documents_its_shape():
    """col_scale is G x N (torch._scaled_grouped_mm's scale_b): the producer warp that stages a tile's vectors reads
    its group's row of col_scale, and row_scale per row of A up to the group's end; the epilogue reads only the
    staged copy; the launch passes both before offs and groups."""
    from gemmdsl.emit.header import emit_header

    result = compile_source(SourceFile("moe_grouped_fp8.gemm", FP8_SPEC))
    source = result.cuda
    loader = source.split("else if (tid / 32 == 1) {", 1)[1].split("// Consumers.", 1)[0]
    assert "int group = 0" in loader  # the loader walks the grouped scheduler's tiles itself
    [col_read] = re.findall(r"= index < N \? (col_scale\[[^\]]*\]) : 0\.0f;", loader)
    assert col_read == "col_scale[(long long)group * N + index]"
    assert re.findall(r"= index < (\w+) \? row_scale\[index\] : 0\.0f;", loader) == ["group_end"]
    consumers = re.sub(r"//[^\n]*", "", source.split("// Consumers.", 1)[1].split("extern \"C\"", 1)[0])
    assert "fuse_pair(" in consumers and not re.search(r"(row|col)_scale *[\[+,]", consumers)
    calls = re.findall(r"fuse_pair\(C, ldc, M, N, row(?: \+ 8)?, col, [^;]*fuse_n\{vectors\[", source)
    assert len(calls) == 2
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in source
    assert re.search(r"kernel<<<.*alpha, beta, row_scale, col_scale, offs, groups\);", source)
    assert "col_scale: groups x N f32 values" in emit_header(result.plan)
    assert "group g's N at col_scale + g * N" in source


def test_a_16_bit_grouped_chain_offsets_col_scale_too():
    spec = SPEC.replace("pipeline {", "fuse     { scale: col; activation: relu; }\n    pipeline {")
    source = compile_source(SourceFile("moe_grouped.gemm", spec)).cuda
    assert "? col_scale[(long long)group * N + index] : 0.0f;" in source
    assert "fuse_pair(C, ldc, M, N, row, col, fuse_m_values[mr][0], fuse_n{vectors[" in source


def _view(shape, dtype="int32", strides=None, device=0):
    return ArrayView("torch", tuple(shape), tuple(strides or (1,) * len(shape)), dtype, 4, 1 << 20, device)


def test_runtime_checks_offs_and_the_operands():
    grouped_call.check_offs("k", _view((4,)), 4, 0)
    with pytest.raises(TypeError, match="int32"):
        grouped_call.check_offs("k", _view((4,), dtype="int64"), 4, 0)
    with pytest.raises(ValueError, match="vector of 4 values"):
        grouped_call.check_offs("k", _view((3,)), 4, 0)
    with pytest.raises(ValueError, match="GPU 1"):
        grouped_call.check_offs("k", _view((4,), device=1), 4, 0)
    with pytest.raises(ValueError, match="pass offs="):
        grouped_call.check_offs_given("k", True, False)
    with pytest.raises(ValueError, match="not grouped"):
        grouped_call.check_offs_given("k", False, True)
    with pytest.raises(ValueError, match="B must be 3-D"):
        grouped_call.check_grouped_operands("k", {"A": (8, 4), "B": (4, 4), "C": (8, 4)})
    with pytest.raises(ValueError, match="back to back"):
        grouped_call.check_b_packed(100, 64, 3)
    assert grouped_call.map_batches(5) == {"a": 1, "b": 5, "c": 1}


def test_check_reports_the_assumed_grouped_schedule():
    from gemmdsl.cli import main

    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", str(ROOT / "specs" / "moe_grouped.gemm")])
    text = " ".join(out.getvalue().split())
    assert "assuming M split evenly over 8 groups" in text
    assert "512 tiles" in text  # 4096 rows in 8 groups of 512: 4 x 16 tiles each


@settings(max_examples=40, deadline=None)
@given(groups=st.integers(1, 70), n=st.integers(1, 5000), wrong_rows=st.integers(-1, 1), flat=st.booleans())
def test_a_grouped_col_scale_must_be_g_by_n(groups, n, wrong_rows, flat):
    """The Python API takes a grouped kernel's col_scale as G x N f32, contiguous: any other shape is refused
    saying so; a vector of N (the single GEMM's shape) included."""
    from gemmdsl.fuse_operands import FuseOperands, byte_span, fuse_views

    import json

    fuse = FuseOperands.from_metadata(json.loads((ROOT / "generated" / "moe_grouped_fp8.json").read_text()))
    row = ArrayView("torch", (9,), (1,), "float32", 4, 1 << 20, 0)
    shape = (n,) if flat else (groups + wrong_rows, n)
    col = ArrayView("torch", shape, (1,) if flat else (n, 1), "float32", 4, 1 << 24, 0)
    given_ = {"row_scale": row, "col_scale": col}
    if shape == (groups, n):
        views = fuse_views("k", fuse, given_, 9, n, 64, groups)
        assert views["col_scale"].groups == groups and views["col_scale"].pointer == 1 << 24
        assert byte_span(views["col_scale"], 9, n) == (1 << 24, (1 << 24) + 4 * groups * n)
    else:
        with pytest.raises(ValueError, match=f"col_scale must be {groups} x {n} for a grouped kernel"):
            fuse_views("k", fuse, given_, 9, n, 64, groups)


def test_a_grouped_col_scale_beside_c_is_not_taken_for_an_overlap():
    """The G x N scales end where C begins: no overlap (each scale vector is N values, not N rows of N); one more
    value of C's first row under them is."""
    from gemmdsl.fuse_operands import FuseView, check_no_overlap_with_c

    groups, m, n = 8, 100, 264
    scales = FuseView("col_scale", 4096, 4, along="n", groups=groups)
    c_start = 4096 + 4 * groups * n
    check_no_overlap_with_c({"col_scale": scales}, c_start, n, "row", 2, m, n)
    with pytest.raises(ValueError, match="col_scale overlaps C"):
        check_no_overlap_with_c({"col_scale": scales}, c_start - 4, n, "row", 2, m, n)


# verify and bench of grouped kernels (grouped_bench.py): what holds without a GPU.

def _grouped_kernel(name: str):
    """A stand-in for a loaded grouped kernel with only what a FamilyKernel has too: name, metadata and
    requirements (grouped_bench reads nothing else, so families bench as kernels do)."""
    import json
    from types import SimpleNamespace

    from gemmdsl.runtime import KernelRequirements

    metadata = json.loads((ROOT / "generated" / f"{name}.json").read_text())
    return SimpleNamespace(name=name, metadata=metadata, requirements=KernelRequirements.from_metadata(metadata))


@pytest.mark.parametrize("itemsize, ks", [(2, (200, 136, 64, 0)), (1, (208, 144, 64, 0))])
def test_verify_cases_keep_tma_16_byte_rows_of_a_and_b(itemsize, ks):
    """The FP8 cases are the 16-bit ones with K rounded up to 16 elements (TMA's 16-byte rows; torch's FP8
    GEMMs ask the same); nothing else changes."""
    from gemmdsl.grouped_bench import VERIFY_CASES, cases_for

    cases = cases_for(itemsize)
    assert tuple(case.k for case in cases) == ks
    assert all(case.k * itemsize % 16 == 0 for case in cases)
    assert [(c.name, c.sizes, c.n, c.spare_rows) for c in cases] == [
        (c.name, c.sizes, c.n, c.spare_rows) for c in VERIFY_CASES]
    assert any(not case.k for case in cases) and any(not sum(case.sizes) for case in cases)


def test_grouped_types_follow_the_kernel():
    from gemmdsl.grouped_bench import GroupedTypes, scale_shapes

    fp8 = GroupedTypes.of(_grouped_kernel("moe_grouped_fp8"))
    assert (fp8.a, fp8.b, fp8.c, fp8.b_col, fp8.scaled) == ("float8_e4m3fn", "float8_e4m3fn", "bfloat16", True, True)
    assert fp8.scales == ("row_scale", "col_scale") and not fp8.fast_accumulation  # accumulate: promoted
    assert (fp8.grouped_name, fp8.loop_name) == ("torch._scaled_grouped_mm", "torch._scaled_mm per group")
    bf16 = GroupedTypes.of(_grouped_kernel("moe_grouped"))
    assert (bf16.a, bf16.c, bf16.scales, bf16.scaled) == ("bfloat16", "bfloat16", (), False)
    assert (bf16.grouped_name, bf16.loop_name) == ("torch._grouped_mm", "torch.mm per group")
    assert scale_shapes(fp8.scales, 40, 3, 24) == {"row_scale": (40,), "col_scale": (3, 24)}
    assert scale_shapes(("col_scale",), 40, 3, 24) == {"col_scale": (3, 24)}


CHAIN = {"scale": "rowcol", "bias": None, "activation": None, "residual": None}


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 9), min_size=1, max_size=5), spare=st.integers(0, 4), n=st.integers(1, 6),
       k=st.integers(0, 5), seed=st.integers(0, 1000), activation=st.sampled_from([None, "relu"]))
def test_reference_is_the_product_of_each_groups_dequantized_operands(sizes, spare, n, k, seed, activation):
    """Row r of group g: (A[r] * row_scale[r]) @ (W[g] * col_scale[g][:, None]).T, then the activation; the
    rows after the last group NaN."""
    import numpy as np

    from gemmdsl.grouped_bench import reference

    rng = np.random.default_rng(seed)
    rows, groups = sum(sizes) + spare, len(sizes)
    a, w = rng.standard_normal((rows, k)), rng.standard_normal((groups, n, k))
    row_scale, col_scale = rng.uniform(0.25, 1.75, rows), rng.uniform(0.25, 1.75, (groups, n))
    c = reference(a, w.transpose(0, 2, 1), cumulative(sizes), rows, {**CHAIN, "activation": activation},
                  row_scale=row_scale, col_scale=col_scale)
    assert c.shape == (rows, n)
    group_of_row = [g for g, size in enumerate(sizes) for _ in range(size)]
    for r, g in enumerate(group_of_row):
        expected = (a[r] * row_scale[r]) @ (w[g] * col_scale[g][:, None]).T
        assert np.allclose(c[r], np.maximum(expected, 0) if activation else expected, rtol=1e-12, atol=1e-12)
    assert np.isnan(c[sum(sizes):]).all()
    plain = reference(a, w.transpose(0, 2, 1), cumulative(sizes), rows)
    for r, g in enumerate(group_of_row):
        assert np.allclose(plain[r], a[r] @ w[g].T, rtol=1e-12, atol=1e-12)


def _bf16(x):
    """x rounded to the nearest BF16 (ties to even), as float64."""
    import numpy as np

    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    return rounded.view(np.float32).astype(np.float64)


def test_allowed_error_is_scaled_grouped_mms_or_cs_rounding():
    from gemmdsl.grouped_bench import allowed_error
    from gemmdsl.precisions import FMA_TOLERANCE, FP8_FACTOR, comparison

    fp8 = comparison(_grouped_kernel("moe_grouped_fp8").metadata)
    bf16 = comparison(_grouped_kernel("moe_grouped").metadata)
    rounding = FMA_TOLERANCE + 2.0 ** -8
    assert allowed_error(fp8, 1.2e-3) == pytest.approx(FP8_FACTOR * 1.2e-3)
    assert allowed_error(fp8, None) == rounding  # no FP8 grouped GEMM here, or nothing to compare (K = 0)
    assert allowed_error(bf16, 1.2e-3) == allowed_error(bf16, None) == rounding


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=4).filter(sum), spare=st.integers(1, 5),
       n=st.integers(1, 40), k=st.integers(1, 64), seed=st.integers(0, 1000))
def test_check_case_passes_c_rounded_to_bf16_and_fails_what_a_kernel_gets_wrong(sizes, spare, n, k, seed):
    """The fallback tolerance holds for the exact result rounded to BF16 on any data (its justification: C's
    rounding is at most 2^-8 of each value); a lost group, a written spare row, a NaN left in a group fail."""
    import numpy as np

    from gemmdsl.grouped_bench import allowed_error, check_case, reference
    from gemmdsl.precisions import comparison

    rng = np.random.default_rng(seed)
    rows, used = sum(sizes) + spare, sum(sizes)
    a, w = rng.standard_normal((rows, k)), rng.standard_normal((len(sizes), k, n))
    expected = reference(a, w, cumulative(sizes), rows)
    tolerance = allowed_error(comparison(_grouped_kernel("moe_grouped_fp8").metadata), None)
    got = _bf16(expected)
    assert check_case(got, expected, used, tolerance).passed
    spare_written = got.copy()
    spare_written[used] = 0.0
    assert check_case(spare_written, expected, used, tolerance).failures == ["rows after the last group were written"]
    unwritten = got.copy()
    unwritten[rng.integers(used), rng.integers(n)] = np.nan
    assert check_case(unwritten, expected, used, tolerance).failures == ["non-finite values in the groups' rows"]
    biggest = max(range(len(sizes)), key=lambda g: np.abs(expected[cumulative(sizes)[g] - sizes[g]:
                                                                   cumulative(sizes)[g]]).sum())
    lost = got.copy()
    lost[cumulative(sizes)[biggest] - sizes[biggest]:cumulative(sizes)[biggest]] = 0.0
    assert not check_case(lost, expected, used, tolerance).passed


def test_check_case_of_a_zero_product_wants_zeros():
    """K = 0 (or every group empty): nothing to scale the error by; C's rows must be exactly what was asked."""
    import numpy as np

    from gemmdsl.grouped_bench import check_case, reference

    expected = reference(np.zeros((6, 0)), np.zeros((2, 0, 8)), [2, 5], 6)
    got = np.where(np.isnan(expected), np.nan, 0.0)
    assert check_case(got, expected, 5, 4e-3).passed
    got[1, 3] = 0.01
    assert check_case(got, expected, 5, 4e-3).failures == ["error 1.00e-02 over 4.0e-03"]
    assert check_case(np.full((4, 8), np.nan), reference(np.zeros((4, 3)), np.zeros((3, 3, 8)), [0, 0, 0], 4),
                      0, 4e-3).passed


def test_the_loop_contender_calls_one_gemm_per_nonempty_group_at_the_kernels_precision():
    """FP8: torch._scaled_mm on the group's rows of A and its column-major B, rowwise scales (m_g, 1) and (1, N)
    from the group's rows of row_scale and its row of col_scale; 16-bit: torch.mm into the group's rows of C."""
    import numpy as np
    from types import SimpleNamespace

    from gemmdsl.grouped_bench import GroupedOperands, GroupedTypes, per_group_calls

    class Tensor(np.ndarray):
        def clone(self):
            return self.copy()

    calls = []
    fake_torch = SimpleNamespace(_scaled_mm=lambda *args, **kwargs: calls.append(("_scaled_mm", args, kwargs)),
                                 mm=lambda *args, **kwargs: calls.append(("mm", args, kwargs)))
    sizes, n, k = [3, 0, 5], 4, 16
    rows = sum(sizes) + 2
    a = np.arange(rows * k, dtype=float).reshape(rows, k).view(Tensor)
    mat_b = np.arange(3 * k * n, dtype=float).reshape(3, k, n).view(Tensor)
    row_scale = np.arange(rows, dtype=float).view(Tensor)
    col_scale = np.arange(3 * n, dtype=float).reshape(3, n).view(Tensor)
    operands = GroupedOperands(a, mat_b, np.array(cumulative(sizes)), {}, row_scale, col_scale)
    out = SimpleNamespace(dtype="bfloat16")
    fp8 = GroupedTypes(*("float8_e4m3fn",) * 2, "bfloat16", ("row_scale", "col_scale"), True, fast_accumulation=True)
    for call in per_group_calls(fake_torch, fp8, operands, out):
        call()
    assert [name for name, _, _ in calls] == ["_scaled_mm", "_scaled_mm"]
    for (_, (a_g, b_g), kwargs), start, end, g in zip(calls, (0, 3), (3, 8), (0, 2)):
        assert (a_g == a[start:end]).all() and (b_g == mat_b[g]).all()
        assert kwargs["scale_a"].shape == (end - start, 1) and (kwargs["scale_a"][:, 0] == row_scale[start:end]).all()
        assert kwargs["scale_b"].shape == (1, n) and (kwargs["scale_b"][0] == col_scale[g]).all()
        assert kwargs["out_dtype"] == "bfloat16" and kwargs["use_fast_accum"]
    calls.clear()
    c = np.zeros((rows, n)).view(Tensor)
    bf16 = GroupedTypes("bfloat16", "bfloat16", "bfloat16", (), True)
    for call in per_group_calls(fake_torch, bf16, operands, c):
        call()
    assert [(name, args[0].shape, kwargs["out"].shape) for name, args, kwargs in calls] == [
        ("mm", (3, k), (3, n)), ("mm", (5, k), (5, n))]


# --- verify's own offs (gemmdsl.verify on a grouped spec: no offs given) -------------------------------------


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(0, 100_000), seed=st.integers(0, 2**32))
def test_verify_draws_offs_the_kernel_takes_with_empty_groups(rows, seed):
    from gemmdsl.grouped_bench import verify_group_ends

    ends = verify_group_ends(rows, seed)
    assert ends == verify_group_ends(rows, seed)  # a seed gives one offs
    sizes = [end - start for start, end in zip([0] + ends, ends)]
    assert min(sizes) >= 0 and ends[-1] == rows  # cumulative row ends, nondecreasing, every row in a group
    assert 0 in sizes[1:-1]  # an empty group between others; the first or last may be empty too
    assert group_rows(ends, rows) == list(zip([0] + ends, ends))  # the kernel's clamping changes nothing
    # What the runtime asks of offs: G int32 values, one per group of B, within the groups the launcher takes.
    assert 4 <= len(ends) <= grouped_call.MAX_GROUPS and max(ends) < 2**31
    grouped_call.check_offs("moe_grouped", ArrayView("torch", (len(ends),), (1,), "int32", 4, 0x1000, 0),
                            len(ends), 0)


def test_verify_draws_uneven_groups_off_the_tile():
    """Over seeds, group sizes that are not multiples of a 128-row tile (partial tiles' guarded stores) and empty
    first and last groups all occur."""
    from gemmdsl.grouped_bench import verify_group_ends

    drawn = [verify_group_ends(4095, seed) for seed in range(40)]
    sizes = [[end - start for start, end in zip([0] + ends, ends)] for ends in drawn]
    assert all(any(size % 128 for size in group) for group in sizes)
    assert any(group[0] == 0 for group in sizes) and any(group[-1] == 0 for group in sizes)

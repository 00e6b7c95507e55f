"""`gemmdsl tune`: template expansion, screening, ranking, the winner file and the command without a GPU."""
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gemmdsl import bench, tune
from gemmdsl.cli import main
from gemmdsl.frontend import load, load_spec
from gemmdsl.paths.mma_sync.facts import MMA_SYNC_TOLERATED_SPILL_BYTES
from gemmdsl.prediction import spill_prunes
from gemmdsl.source import CompileError, SourceFile
from gemmdsl.tune.timing import _cubin_or_none

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.gemm"))
TEMPLATES = ROOT / "gemmdsl" / "templates"
SIZE = (4096, 4096, 4096)

# 8 candidates: 4x3 warps do not tile BN = 128 (4 rejected); of the 4 valid, pad 0 makes the transposed
# A stores conflict (2 pruned with a conflict tolerance of 0; by default conflicts are priced, not pruned), a
# 64-register budget is under the 80 registers the accumulators and one
# fragment set need (1 pruned), 1 is left.
SMALL = """\
// A small template for the tests.
gemm small {
    problem  { a: f32 row; b: f32 row; c: f32 row; bounds: exact; }
    block    { tile: 128x128x8; }
    threads  { warps: {4x2,4x3}; lanes: 4x8 row; micro: 4x4; repeat: 2x2 block; }
    smem a   { order: km; pad: {0,4}; }
    pipeline { stages: 2; copy: registers; fragments: double; }
    budget   { registers: {64,128}; }
}
"""

V3_BODY = """\
    problem  { a: f32 row; b: f32 row; c: f32 row; epilogue: alpha_beta; bounds: exact; }
    block    { tile: 128x128x8; raster: %s; }
    threads  { warps: 4x2; lanes: %s; micro: 4x4; repeat: 2x2 block; }
    smem a   { order: km; pad: 4; }
    pipeline { stages: %s; copy: %s; fragments: double; }
"""


def template(raster="row", lanes="4x8 row", stages="2", copy="registers", name="v3"):
    return f"gemm {name} {{\n" + V3_BODY % (raster, lanes, stages, copy) + "}\n"


def error_of(text, **kwargs):
    with pytest.raises(CompileError) as info:
        tune.expand(text, "t.tgemm", **kwargs)
    (diagnostic,) = info.value.diagnostics
    return diagnostic, info.value.render()


# --- expansion ---------------------------------------------------------------------------------


def test_choice_groups_expand_in_source_order_last_fastest():
    text = "gemm k {\n    block { tile: {64,128}x128x{8,16}; }\n}\n"
    candidates = tune.expand(text)
    assert [c.name for c in candidates] == ["k_t0", "k_t1", "k_t2", "k_t3"]
    assert [c.choices for c in candidates] == [("64", "8"), ("64", "16"), ("128", "8"), ("128", "16")]
    assert candidates[1].text == "gemm k_t1 {\n    block { tile: 64x128x16; }\n}\n"
    assert candidates[3].summary == "tile: 128x128x16"


def test_a_candidate_costs_the_same_memory_whatever_the_size_of_its_template():
    import tracemalloc

    groups = "gemm k {\n    block { tile: {64,128,256}x{64,128}x{8,16}; raster: {row,group(8)}; }\n" \
             "    pipeline { stages: {2,3}; }\n}\n"
    text = "// a long note\n" * 20000 + groups  # 300 KB, 48 candidates
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        candidates = tune.expand(text)
        retained, peak = (figure - before for figure in tracemalloc.get_traced_memory())
    finally:
        tracemalloc.stop()
    assert len(candidates) == 48
    assert retained < 2000 * len(candidates)  # a copy of the text each would be 300 KB a candidate
    assert peak < 10 * len(text)  # passes over the text (masking its comments), never a copy per candidate (48x)
    assert candidates[-1].text == text.replace("gemm k ", "gemm k_t47 ").replace(
        "{64,128,256}x{64,128}x{8,16}", "256x128x16").replace("{row,group(8)}", "group(8)").replace("{2,3}", "3")


def test_alternatives_are_trimmed_words_and_may_hold_calls_with_commas():
    text = template(raster="{row, group(8)}", lanes="{ 4x8 row , 8x4 col }", stages="{2,3}",
                    copy="{registers,cp_async}")
    text = text.replace("pad: 4;", "pad: 4; swizzle: {xor(2, 2, 3),xor(1,2,3)};")
    candidates = tune.expand(text)
    assert len(candidates) == 2 * 2 * 2 * 2 * 2
    assert candidates[0].choices == ("row", "4x8 row", "xor(2, 2, 3)", "2", "registers")
    assert "lanes: 8x4 col;" in candidates[-1].text and "raster: group(8);" in candidates[-1].text
    assert "swizzle: xor(1,2,3);" in candidates[-1].text


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_a_plain_spec_is_one_candidate_with_its_section_braces_untouched(path):
    text = path.read_text()
    (candidate,) = tune.expand(text, str(path))
    name = load(SourceFile(str(path), text))[0].name
    assert candidate.text == text.replace(f"gemm {name} ", f"gemm {name}_t0 ", 1)


def test_one_line_specs_and_empty_sections_are_not_choice_groups():
    text = "gemm k { target sm_90; block { tile: 128x128x8; } smem b { } problem\n{ a: f32 row; } }"
    (candidate,) = tune.expand(text)
    assert candidate.text == text.replace("gemm k ", "gemm k_t0 ")


def test_braces_in_comments_are_never_expanded():
    text = ("// tile: {64,128}x128x8\n"
            "gemm k {  # {a,b}\n"
            "    block { tile: {64,128}x128x8; }  // {c,d,e}\n"
            "}\n")
    candidates = tune.expand(text)
    assert len(candidates) == 2
    assert candidates[0].text.startswith("// tile: {64,128}x128x8\ngemm k_t0 {  # {a,b}\n")
    assert "// {c,d,e}" in candidates[1].text


@pytest.mark.parametrize("text, message, line, column", [
    ("gemm k {\n  block { tile: {64,{128,256}}x8; }\n}\n", "cannot contain another choice group", 2, 21),
    ("gemm k {\n  block { tile: {{64,128}}x8; }\n}\n", "cannot contain another choice group", 2, 18),
    ("gemm k {\n  block { tile: {64,128x8; }\n}\n", "is not closed", 2, 17),
    ("gemm k {\n  block { tile: {64,128\n  x8}; }\n}\n", "is not closed", 2, 17),
    ("gemm k {\n  block { tile: {64, // x\n }x8; }\n}\n", "is not closed", 2, 17),
    ("gemm k {\n  block { tile: {64,,128}x8; }\n}\n", "empty alternative", 2, 20),
    ("gemm k {\n  block { tile: {64,}x8; }\n}\n", "empty alternative", 2, 20),
    ("gemm k {\n  block { tile: {64,128,64}x8; }\n}\n", "appears twice", 2, 25),
    ("gemm k {\n  block { raster: {row,group(8}; }\n}\n", "unbalanced parentheses", 2, 24),
    ("{a,b}\ngemm k {\n}\n", "belong in the values", 1, 1),
    ("// gemm nothing {}\n", "holds no `gemm NAME {` block", 1, 1),
])
def test_malformed_choice_groups_are_diagnosed_with_a_position(text, message, line, column):
    diagnostic, rendered = error_of(text)
    assert message in diagnostic.message
    assert (diagnostic.span.line, diagnostic.span.column) == (line, column)
    assert rendered.startswith(f"t.tgemm:{line}:{column}: error: ")
    assert "^" in rendered or line == 1


def test_too_many_candidates_is_a_clear_error():
    text = "gemm k {\n  block { tile: {64,128,256}x{64,128}x{8,16}; }\n}\n"
    assert len(tune.expand(text, max_candidates=12)) == 12
    diagnostic, _ = error_of(text, max_candidates=11)
    assert "12 candidates (3 x 2 x 2), more than the limit of 11" in diagnostic.message
    assert "--max-candidates" in diagnostic.hint


def test_shipped_templates_expand_to_bounded_spaces():
    space = tune.expand((TEMPLATES / "sgemm_space.tgemm").read_text())
    assert len(space) == 3456 <= tune.DEFAULT_MAX_CANDIDATES
    assert len(tune.expand((TEMPLATES / "sgemm_warp.tgemm").read_text())) == 216


@pytest.mark.parametrize("template, valid, tuned", [("fp8_h100", 21, "fp8_h100_tuned"),
                                                    ("linear_gelu_h100", 20, "linear_gelu_tuned")])
def test_a_wgmma_template_offers_both_schedules_and_holds_its_tuned_winner(template, valid, tuned):
    """fp8_h100.tgemm and linear_gelu_h100.tgemm: what passes the front end (accumulators over a consumer's
    registers, a ring over 227 KiB, 64-row tiles for two persistent consumers are refused) includes ping-pong
    candidates, and the spec each produced on the H100 (specs/*_tuned.gemm) is one of them."""
    text = (TEMPLATES / f"{template}.tgemm").read_text()
    report = tune.screen(tune.expand(text, f"{template}.tgemm"), [(8192, 8192, 8192)], path=f"{template}.tgemm",
                         conflict_pct=0.0)
    assert report.valid == valid
    schedules = {survivor.spec.block.schedule.value for survivor in report.survivors}
    assert schedules == {"persistent", "pingpong"}
    winner = load_spec(ROOT / "specs" / f"{tuned}.gemm")
    shape = lambda spec: (spec.block.m, spec.block.n, spec.block.k, spec.block.schedule, spec.mma.shape,
                          spec.pipeline.stages, spec.fuse.describe(False))
    assert shape(winner) in {shape(survivor.spec) for survivor in report.survivors}


def test_template_stem():
    assert tune.template_stem("a/sgemm_space.tgemm") == "sgemm_space"
    assert tune.template_stem("x-y.gemm.tmpl") == "x_y"
    assert tune.template_stem("9lives.tgemm") == "k_9lives"


# --- screening and ranking ---------------------------------------------------------------------


def test_screen_counts_rejected_and_pruned_by_reason():
    report = tune.screen(tune.expand(SMALL, "small.tgemm"), [SIZE], path="small.tgemm", conflict_pct=0.0)
    assert report.generated == 8 and len(report.rejected) == 4 and report.valid == 4
    ((reason, count, first),) = report.rejected_by_reason()
    assert count == 4 and "along n is 3*8*4*2 = 192" in reason and first.span.file.startswith("small.tgemm[t")
    assert {r: [c.name for c, _ in items] for r, items in report.pruned.items()} == {
        "conflicts": ["small_t0", "small_t1"], "registers": ["small_t2"]}
    assert "> cap 64" in report.pruned["registers"][0][1]
    assert [s.candidate.name for s in report.survivors] == ["small_t3"]
    assert report.pruned_count + len(report.survivors) + len(report.rejected) == report.generated
    by_default = tune.screen(tune.expand(SMALL, "small.tgemm"), [SIZE], path="small.tgemm")
    assert {r: [c.name for c, _ in items] for r, items in by_default.pruned.items()} == {
        "registers": ["small_t0", "small_t2"]}
    assert [s.candidate.name for s in by_default.survivors] == ["small_t1", "small_t3"]


def test_occupancy_tile_and_conflict_tolerance_rules():
    candidates = tune.expand(SMALL)
    by_warps = tune.screen(candidates, [SIZE], min_warps=17)
    assert [c.name for c, _ in by_warps.pruned["occupancy"]] == ["small_t1", "small_t3"] and not by_warps.survivors
    by_size = tune.screen(candidates, [SIZE, (4096, 4096, 4100)])
    assert len(by_size.pruned["tile"]) == 4 and not by_size.timeable
    checked = tune.screen(tune.expand(SMALL.replace(" bounds: exact;", "")), [(4000, 4000, 4000)])
    assert "tile" not in checked.pruned and len(checked.timeable) == 4
    assert checked.timeable[0].prediction.load_conflicts + checked.timeable[0].prediction.store_conflicts > 0
    tolerant = tune.screen(candidates, [SIZE], conflict_pct=5.0)
    assert "conflicts" not in tolerant.pruned
    assert [s.candidate.name for s in tolerant.survivors] == ["small_t1", "small_t3"]


def test_rejections_of_different_numbers_group_under_one_reason():
    text = "gemm k {\n    problem { a: f32 row; b: f32 row; c: f32 row; }\n    block { tile: 128x128x8; }\n" \
           "    threads { warps: {4x3,4x5}; lanes: 4x8 row; micro: 4x4; repeat: 2x2 block; }\n}\n"
    report = tune.screen(tune.expand(text), [SIZE])
    ((reason, count, _),) = report.rejected_by_reason()
    assert count == 2 and "N*N*N*N = N" in reason


def test_ranking_is_deterministic_and_prefers_the_better_tiling():
    text = template(lanes="{4x8 row,4x8 zigzag}", stages="{2,3}", copy="{registers,cp_async}")
    text = text.replace("tile: 128x128x8", "tile: 128x{128,256}x8").replace("repeat: 2x2", "repeat: 2x{2,4}")
    first = tune.rank(tune.screen(tune.expand(text), [SIZE]).survivors, [SIZE])
    second = tune.rank(tune.screen(tune.expand(text), [SIZE]).survivors, [SIZE])
    assert [s.candidate.name for s in first] == [s.candidate.name for s in second]
    keys = [tune.rank_key(s) for s in first]
    assert keys == sorted(keys)
    assert all(0 < s.prediction.score <= 1 for s in first)
    by_name = {s.candidate.summary: s.prediction for s in first}
    registers = by_name["tile: 128x128x8; lanes: 4x8 row; repeat: 2x2 block; stages: 2; copy: registers"]
    cp_async = by_name["tile: 128x128x8; lanes: 4x8 row; repeat: 2x2 block; stages: 2; copy: cp_async"]
    # a transposing cp.async touches as many L1 lines as a float4 load with a quarter of the bytes: on an
    # H100 these measured 79% of cuBLAS against 91-94% for the register-staged twin (sgemm_space.tgemm)
    assert cp_async.global_wavefronts_per_ffma > 3 * registers.global_wavefronts_per_ffma  # 544 lines vs 160
    assert cp_async.score < registers.score


OCCUPANCY = """\
gemm occ {
    problem  { a: f32 row; b: f32 row; c: f32 row; epilogue: alpha_beta; bounds: exact; }
    block    { tile: {128x128x8,128x256x16}; }
    threads  { warps: 4x2; lanes: 4x8 row; micro: 4x4; repeat: 2x{2,4} block; }
    smem a   { order: km; pad: 4; }
    pipeline { stages: 2; copy: registers; fragments: double; }
    budget   { blocks_per_sm: {1,2}; }
}
"""


def test_sixteen_warps_per_sm_outrank_eight_with_cheaper_pipes():
    """A scheduler idles when all its warps stall at once (cost_model.issue_share): on an H100 sgemm_space's
    128x128x8 kernels at two blocks of 8 warps per SM ran at 94.2% of cuBLAS, its 128x256x16 ones at one
    block at most 88.1%, though the pipes alone favour the big tile (fewer k-tile overheads per FFMA)."""
    from gemmdsl import cost_model

    assert cost_model.issue_share(8) == pytest.approx(1 - cost_model.WARP_STALL_SHARE ** 2)
    assert cost_model.issue_share(8) < cost_model.issue_share(16) < 1
    ranked = tune.rank(tune.screen(tune.expand(OCCUPANCY), [SIZE], min_warps=0).timeable, [SIZE])
    small = next(s for s in ranked if s.spec.block.n == 128 and s.spec.budget.blocks_per_sm == 2)
    big = next(s for s in ranked if s.spec.block.n == 256 and s.spec.budget.blocks_per_sm == 1)
    assert small.prediction.warps_per_sm == 16 and big.prediction.warps_per_sm == 8
    assert big.prediction.issue_per_ffma < small.prediction.issue_per_ffma
    pipes_only = {s: s.prediction.score / cost_model.issue_share(s.prediction.warps_per_sm) for s in (small, big)}
    assert pipes_only[big] > pipes_only[small]
    assert ranked[0] is small and small.prediction.score > big.prediction.score


def _survivors(text=SMALL.replace("registers: {64,128}", "registers: {128,255}")):
    return tune.rank(tune.screen(tune.expand(text), [SIZE], min_warps=0, conflict_pct=100).survivors, [SIZE])


def test_select_drops_spilling_and_failing_builds_and_takes_the_next_in_rank():
    ranked = _survivors()
    assert len(ranked) == 4

    def fake_build(survivor):
        if survivor is ranked[0]:
            return {"registers": 128, "spill_stores": 16, "spill_loads": 8, "stack": 0, "static_smem": 0}
        if survivor is ranked[1]:
            raise RuntimeError("nvcc failed (exit 1): oops\nmore")
        return {"registers": 96, "spill_stores": 0, "spill_loads": 0, "stack": 0, "static_smem": 0}

    kept, dropped = tune.select(ranked, 1, [SIZE], min_warps=8, build_fn=fake_build, jobs=2)
    assert [s.candidate.name for s in kept] == [ranked[2].candidate.name]
    assert kept[0].prediction.registers == 96 and kept[0].prediction.ptxas["registers"] == 96
    assert [c.name for c, _ in dropped["ptxas spills"]] == [ranked[0].candidate.name]
    assert dropped["build"][0][1] == "nvcc failed (exit 1): oops"
    assert tune.select(ranked, 2, [SIZE]) == (ranked[:2], {})


MMA_SYNC_TEMPLATE = """\
gemm hm {
    problem  { a: bf16 row; b: bf16 row; c: f32 row; epilogue: alpha_beta; bounds: exact; }
    target   sm_80;
    block    { tile: 128x128x32; }
    threads  { warps: {2x2,2x4}; }
    mma      { shape: m16n8k16; repeat: {4x8,4x4}; }
    smem a   { order: mk; swizzle: xor(2,3,3); }
    smem b   { order: kn; swizzle: xor(3,3,4); }
    load a   { vector: 8; }
    load b   { vector: 8; }
    pipeline { stages: {3,4}; copy: cp_async; fragments: double; }
}
"""


def test_with_ptxas_predicts_mma_sync_survivors_again_and_takes_out_what_does_not_build():
    report = tune.screen(tune.expand(MMA_SYNC_TEMPLATE), [SIZE], min_warps=0)
    first, second = report.survivors[:2]
    assert len(report.survivors) == 4

    def fake_build(survivor):
        if survivor is second:
            raise RuntimeError("nvcc failed (exit 1): ptxas error\nmore")
        return {"registers": 96, "spill_stores": 0, "spill_loads": 0, "stack": 0, "static_smem": 0}

    built, failed = tune.with_ptxas(report, [SIZE], fake_build, jobs=2)
    assert [(c.name, why) for c, why in failed] == [(second.candidate.name, "nvcc failed (exit 1): ptxas error")]
    assert [s.candidate.name for s in built.survivors] == [s.candidate.name for s in report.survivors if s is not second]
    assert all(s.prediction.ptxas is not None and s.prediction.registers == 96 for s in built.survivors)
    timeable = {s.candidate.name: s for s in built.timeable}
    assert timeable[first.candidate.name] is built.survivors[0]
    assert timeable[second.candidate.name].prediction == second.prediction  # kept for the record, estimated
    assert len(built.timeable) == len(report.timeable)


def test_with_ptxas_leaves_fma_survivors_on_the_estimate():
    report = tune.screen(tune.expand(SMALL), [SIZE], min_warps=0, conflict_pct=100)
    built, failed = tune.with_ptxas(report, [SIZE], lambda survivor: pytest.fail("an FMA candidate was built"))
    assert (built, failed) == (report, [])


# --- timing results and the winner -------------------------------------------------------------


def fake_report(times, sizes=((4096, 4096, 4096), (2048, 2048, 2048)), skipped=()):
    rows = []
    for size in sizes:
        cublas_ms = 2.0 * size[0] / 4096
        rows.append(bench.measured_row("cuBLAS", size, 1, cublas_ms, cublas_ms, 60.0))
        for name, ms in times.items():
            if name in skipped and size == sizes[-1]:
                rows.append(bench.Row(name, *size, buffer_sets=1, note="skipped: not a multiple"))
            else:
                rows.append(bench.measured_row(name, size, 1, ms * size[0] / 4096, cublas_ms, 60.0))
    return bench.BenchReport("Fake H100", "14.0", 60.0, 20, 5, rows), list(sizes)


def test_timing_from_a_bench_report_ranks_by_geomean_and_drops_skipped_kernels():
    report, sizes = fake_report({"k_t2": 2.5, "k_t1": 2.2, "k_t0": 2.2, "k_t3": 1.0}, skipped={"k_t3"})
    timing = tune.timing_from_report(report, sizes)
    assert set(timing.measurements) == {"k_t0", "k_t1", "k_t2"}
    assert [m.name for m in timing.ranking()] == ["k_t0", "k_t1", "k_t2"]
    assert [m.name for m in timing.ranking(["k_t2", "k_t1"])] == ["k_t1", "k_t2"]
    best = timing.measurements["k_t0"]
    assert best.geomean_pct_cublas == pytest.approx(100 * 2.0 / 2.2)
    assert timing.cublas_ms[(4096, 4096, 4096)] == 2.0


def test_ranking_compares_each_candidate_with_the_cublas_launches_beside_it():
    size = (4096, 4096, 4096)
    rows = [bench.measured_row("cuBLAS", size, 1, 2.0, 2.0, 60.0),
            bench.measured_row("k_t0", size, 1, 2.1, 1.9, 60.0),  # faster in ms, but its clocks were higher
            bench.measured_row("k_t1", size, 1, 2.2, 2.2, 60.0)]  # as fast as the cuBLAS beside it
    timing = tune.timing_from_report(bench.BenchReport("Fake H100", "14.0", 60.0, 20, 5, rows), [size])
    assert [m.name for m in timing.ranking()] == ["k_t1", "k_t0"]


def test_a_tensor_core_baseline_row_is_cublas_not_a_candidate():
    size = (4096, 4096, 4096)
    rows = [bench.measured_row("cuBLAS BF16 GEMM", size, 1, 0.17, 0.17, 989.0),
            bench.measured_row("hgemm_h100_t0", size, 1, 0.19, 0.17, 989.0)]
    timing = tune.timing_from_report(bench.BenchReport("Fake H100", "14.0", 60.0, 20, 5, rows), [size])
    assert set(timing.measurements) == {"hgemm_h100_t0"} and timing.cublas_ms[size] == 0.17


def test_exhaustive_comparison_states_the_gap():
    ranked = _survivors()
    names = [s.candidate.name for s in ranked]
    report, sizes = fake_report({names[0]: 2.2, names[1]: 2.0, names[2]: 2.4})
    timing = tune.timing_from_report(report, sizes)
    line, pruned_best, best = tune.exhaustive_comparison(timing, ranked[:1])
    assert (pruned_best.name, best.name) == (names[0], names[1])
    assert "is 10.0% slower" in line
    line, pruned_best, best = tune.exhaustive_comparison(timing, ranked[:2])
    assert pruned_best == best and "found the same winner" in line


def test_write_winner_writes_a_plain_spec_with_the_figures_in_its_header(tmp_path):
    candidates = tune.expand(SMALL, "small.tgemm")
    winner = candidates[3]
    report, sizes = fake_report({winner.name: 2.5})
    timing = tune.timing_from_report(report, sizes)
    output = tmp_path / "small_best.gemm"
    text = tune.write_winner(output, "small_best", "small.tgemm", winner, timing.measurements[winner.name], timing,
                             ["search: 8 generated, 4 rejected", "  1 kept, 1 timed"], date="2026-01-02")
    assert output.read_text() == text
    spec, _ = load(SourceFile(str(output), text))
    assert spec.name == "small_best" and spec.smem_a.pad == 4 and spec.budget.registers == 128
    header = text[:text.index("gemm small_best {")]
    assert all(line.startswith("//") for line in header.splitlines())
    assert "A small template for the tests" not in text and "{" not in header.replace("{a,b}", "")
    assert "small_best: tuned by `gemmdsl tune small.tgemm` on 2026-01-02" in header
    assert "device: Fake H100" in header
    assert "4096x4096x4096: 2.500 ms, 54.98 TFLOP/s, 80.0% of cuBLAS timed beside it (2.000 ms)" in header
    assert "geomean:" in header and "search: 8 generated, 4 rejected" in header
    assert "choices warps: 4x2; pad: 4; registers: 128" in header
    assert text.endswith(winner.text[winner.body_start:].replace("small_t3", "small_best"))


def test_results_json_records_every_candidate():
    candidates = tune.expand(SMALL)
    report = tune.screen(candidates, [SIZE], conflict_pct=0.0)
    ranked = tune.rank(report.survivors, [SIZE])
    data = tune.results_json(report, ranked, ranked[:1], {}, [SIZE], template="small.tgemm",
                             scored=tune.rank(report.timeable, [SIZE]))
    assert [c["status"] for c in data["candidates"]] == ["pruned", "pruned", "pruned", "kept"] + ["rejected"] * 4
    assert data["generated"] == 8 and data["pruned"] == {"conflicts": 2, "registers": 1}
    assert data["candidates"][3]["prediction"]["registers"] == 128 and data["template"] == "small.tgemm"
    # every timeable candidate carries its score, pruned ones included (0 for a predicted spill)
    assert data["candidates"][0]["prediction"]["score"] == 0.0 < data["candidates"][1]["prediction"]["score"]


# --- the command -------------------------------------------------------------------------------


@pytest.fixture
def no_gpu(monkeypatch):
    import gemmdsl.runtime.environment

    monkeypatch.setattr(gemmdsl.runtime.environment, "gpu_unavailable_reason", lambda: "no GPU in this test")


def test_tune_without_a_gpu_screens_reports_and_exits_2(tmp_path, capsys, no_gpu, monkeypatch):
    path = tmp_path / "small.tgemm"
    path.write_text(SMALL)
    monkeypatch.chdir(tmp_path)
    assert main(["tune", str(path), "--no-nvcc", "--json", "r.json", "--conflict-tolerance", "0"]) == 2
    out, err = capsys.readouterr()
    assert "generated 8 candidates: 4 rejected by the front end, 4 valid" in out
    assert "pruned 3 of the valid by the analysis, 1 left" in out
    assert "pruned       2  predicted bank conflicts" in out
    assert "pruned       1  register estimate over the cap" in out
    assert "kept 1 for timing (budget 8)" in out and "small_t3" in out
    assert "timing needs a GPU (no GPU in this test)" in err
    assert (tmp_path / "r.json").exists() and not (tmp_path / "small_best.gemm").exists()


def test_screen_only_exits_0_and_a_bad_template_exits_1(tmp_path, capsys, no_gpu):
    path = tmp_path / "small.tgemm"
    path.write_text(SMALL)
    assert main(["tune", str(path), "--no-nvcc", "--screen-only", "--budget", "1"]) == 0
    bad = tmp_path / "bad.tgemm"
    bad.write_text(SMALL.replace("pad: {0,4}", "pad: {0,{4,8}}"))
    assert main(["tune", str(bad)]) == 1
    assert f"{bad}:6:" in capsys.readouterr().err
    assert main(["tune", str(path), "--sizes", "4096x0"]) == 2
    assert main(["tune", str(path), "--max-candidates", "7"]) == 1
    assert main(["tune", str(tmp_path / "missing.tgemm")]) == 1


def test_nothing_surviving_exits_1(tmp_path, capsys, no_gpu):
    path = tmp_path / "small.tgemm"
    path.write_text(SMALL)
    assert main(["tune", str(path), "--no-nvcc", "--min-warps", "64"]) == 1
    err = capsys.readouterr().err
    assert f"{path}:2:6: error: no candidate survived the screening" in err
    assert "4 of 8 candidates were rejected by the front end" in err and f"{path}[t4]:5:" in err  # 4x3 warps


def test_nothing_surviving_the_front_end_shows_why_in_a_candidate(tmp_path, capsys):
    path = tmp_path / "small.tgemm"
    path.write_text(SMALL.replace("copy: registers", "colour: registers"))
    assert main(["tune", str(path), "--no-nvcc", "--screen-only"]) == 1
    err = capsys.readouterr().err
    assert f"{path}:2:6: error: no candidate survived the screening; nothing to time\n    2 | gemm small {{" in err
    assert "8 of 8 candidates were rejected by the front end; the most common reason (8) follows" in err
    assert f"{path}[t0]:7:27: error: unknown key 'colour' in section 'pipeline'" in err


def test_an_unreadable_template_is_an_error_at_the_byte(tmp_path, capsys):
    path = tmp_path / "bad.tgemm"
    path.write_bytes(SMALL.encode().replace(b"bounds", b"bou\xffnds"))
    assert main(["tune", str(path), "--no-nvcc", "--screen-only"]) == 1
    assert f"{path}:3:55: error: file is not valid UTF-8" in capsys.readouterr().err


def test_tune_subprocess_without_gpu_has_no_traceback(tmp_path):
    from gemmdsl.runtime import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present: the command would time the candidates")
    path = tmp_path / "small.tgemm"
    path.write_text(SMALL)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "gemmdsl.cli", "tune", str(path), "--no-nvcc"],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stderr
    assert "timing needs a GPU" in done.stderr and "Traceback" not in done.stderr
    assert "generated 8 candidates" in done.stdout


def test_the_hopper_template_is_screened_and_ranked_by_the_families_cycle_model():
    from gemmdsl import cycles
    from gemmdsl.analysis import analyze

    text = (ROOT / "gemmdsl" / "templates" / "hgemm_h100.tgemm").read_text()
    candidates = tune.expand(text, "hgemm_h100.tgemm")
    report = tune.screen(candidates, [(4096, 4096, 4096), (1024, 1024, 1024)])
    assert (report.generated, len(report.rejected), len(report.survivors)) == (48, 16, 32)
    assert all("is not a multiple of the N of m64n256k16" in d.message for _, d in report.rejected)
    # At 4096^3 every tile keeps the 132 SMs 97% busy, and a 128x128 k-tile brings 32 KiB from L2 for half
    # the multiply-adds of a 128x256 one's 48 KiB: the big tiles first, 4 stages before 3 (bytes in flight).
    size = (4096, 4096, 4096)
    ranked = tune.rank(report.survivors, [size])
    best, small = ranked[0], next(s for s in ranked if s.spec.block.n == s.spec.block.m == 128)
    assert (best.spec.block.m * best.spec.block.n, best.spec.pipeline.stages) == (128 * 256, 4)
    assert best.prediction.score > small.prediction.score
    assert [s.spec.pipeline.stages for s in ranked[:4]] == [4, 4, 4, 4]
    # The score is the family rule's: wgmma's own cycles over the cycles the rule predicts.
    sms = tune.reference_sms(best.spec)
    analysis = analyze(best.spec, size)
    model = analysis.path.member_model(analysis, sms)
    figures = cycles.estimate(model, *size)
    wgmma_cycles = figures.tiles * figures.k_tiles * dict(model.terms)["wgmma_cycles_per_k_tile"] / sms
    assert best.prediction.score == pytest.approx(wgmma_cycles / figures.cycles)
    # At 1024^3, 128x256 tiles give 32 tiles for 132 SMs and 128x128 ones 64: the smaller tile ranks first.
    ranked = tune.rank(report.survivors, [(1024, 1024, 1024)])
    assert (ranked[0].spec.block.m, ranked[0].spec.block.n) == (128, 128)


def test_mma_sync_candidates_are_scored_by_the_cycle_model_that_ranks_double_fragments_first():
    """On the H100, hgemm_h100_mma's tiling with single fragments ran 18% slower than with double
    (tests/fixtures/tune_h100/tune_hgemm_mma.json): the score is paths.mma_sync.cycles.mma_sync_member_model's share of
    mma.sync's peak, which charges a fragment wait per k-step, not the FMA path's per-FFMA model."""
    text = (ROOT / "specs" / "hgemm_h100_mma.gemm").read_text().replace("fragments: double",
                                                                         "fragments: {single,double}")
    sizes = [(4096, 4096, 4096)]
    report = tune.screen(tune.expand(text, "t.tgemm"), sizes, min_warps=0, path="t.tgemm")
    ranked = tune.rank(report.timeable, sizes)
    assert [s.spec.pipeline.fragments.value for s in ranked] == ["double", "single"]
    assert all(s.prediction.mma_model is not None for s in ranked)
    assert 0 < ranked[1].prediction.score < ranked[0].prediction.score <= 1


@pytest.mark.parametrize("stores, loads, mma_sync, prunes", [
    (0, 0, False, False), (4, 0, False, True), (0, 0, True, False), (72, 72, True, False),
    (148, 160, True, False), (248, 260, True, True)])
def test_ptxas_spills_drop_fma_candidates_but_only_large_ones_of_mma_sync(stores, loads, mma_sync, prunes):
    """tf32_ldmatrix's double-buffered fragments spill 72 bytes and ran 12.5% faster on the H100 (docs/performance.md,
    T13); tf32_mma_t1053 spills 248 and is slow; FMA kernels that spill ran about 10x slower."""
    ptxas = {"registers": 255, "spill_stores": stores, "spill_loads": loads}
    assert spill_prunes(ptxas, MMA_SYNC_TOLERATED_SPILL_BYTES if mma_sync else 0) is prunes


def test_an_mma_sync_estimate_just_over_the_cap_is_not_a_predicted_spill():
    """3xTF32 at 128x128x16 with double fragments needs 128 accumulators and 128 fragment words, one register
    over the cap: ptxas spilled 8 bytes and it ran fastest of its template on the H100 (126.6% of cuBLAS
    SGEMM; docs/tuning.md). An FMA estimate over the cap stays a predicted spill."""
    text = (ROOT / "specs" / "sgemm_3xtf32_ldmatrix.gemm").read_text().replace(
        "pipeline { stages: 3; copy: cp_async; }", "pipeline { stages: 3; copy: cp_async; fragments: double; }")
    report = tune.screen(tune.expand(text, "t.tgemm"), [(4096, 4096, 4096)], min_warps=0, path="t.tgemm")
    prediction = report.timeable[0].prediction
    assert prediction.register_low > prediction.register_cap and not prediction.predicted_spill
    assert report.survivors and not report.pruned
    fma = dataclasses.replace(prediction, tolerated_spill_bytes=0)
    assert fma.predicted_spill


def test_an_mma_sync_predicted_spill_is_reported_with_the_tensor_core_band():
    text = (ROOT / "specs" / "hgemm_h100_mma.gemm").read_text().replace(
        "tile: 128x256x64", "tile: 256x256x32").replace("repeat: 4x8", "repeat: 8x8")
    report = tune.screen(tune.expand(text, "t.tgemm"), [(4096, 4096, 4096)], min_warps=0, path="t.tgemm")
    [(_, detail)] = report.pruned["registers"]
    assert "(its 75% band, accumulators and fragments) > cap 255" in detail


def test_a_candidate_that_does_not_build_is_left_out_with_the_compilers_reason(monkeypatch):
    """With --no-nvcc nothing drops an unbuildable candidate before timing (ptxas's C7602 on a 3-consumer
    m64n256k16 did, before validation caught it): the prebuild keeps going and the reason is ptxas's line."""
    from gemmdsl import runtime

    log = ("nvcc failed:\nkernel.cu(217): warning #177-D: unused\n"
           "ptxas fatal   : (C7602) Insufficient registers (128) to compile instruction\n"
           "ptxas fatal   : Ptx assembly aborted due to errors")

    def fails(source, target):
        raise runtime.KernelBuildError(log)

    monkeypatch.setattr(runtime.binaries, "compile_cubin", fails)
    assert _cubin_or_none("", "sm_90a") is None
    assert tune.build_failure(log) == "ptxas fatal   : (C7602) Insufficient registers (128) to compile instruction"
    assert tune.build_failure("nvcc failed") == "nvcc failed"


def test_ray_tasks_carry_the_whole_gemmdsl_package(monkeypatch):
    """Ray ships `py_modules` to nodes without gemmdsl installed: the package's folder, not the tuner's own."""
    import argparse

    import gemmdsl
    from gemmdsl import tune_workers

    monkeypatch.setattr(tune_workers, "import_ray", lambda: None)
    pool = tune.timing_pool(argparse.Namespace(ray="", backend="fake_timing:FakeBackend", timeout=1, gpus=None))
    assert pool.runtime_env["py_modules"] == [str(Path(gemmdsl.__file__).resolve().parent)]

"""Kernel families (gemmdsl/family.py, emit/family.py): the front end's diagnostics, the rule, the C
launcher's copy of the rule, the family's .cu, `check --problem` and `bench --shapes`."""
from __future__ import annotations

import dataclasses
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl import cost_model
from gemmdsl.bench import BenchReport, Row, geomean_lines
from gemmdsl.build import build, find_nvcc
from gemmdsl.targets import EXTRA_LAUNCH_CYCLES
from gemmdsl.family import choose, compile_family, compile_family_path, estimate
from gemmdsl.paths.mma_sync.cycles import MMA_SMEM_INSTRUCTIONS_PER_CLOCK
from gemmdsl.schedule import ALIGN_IDLE_PERCENT
from gemmdsl.family_kernel import FamilyKernel, read_shapes
from gemmdsl.schedule import CYCLE_CAP
from gemmdsl.shape_sets import DEFAULT_SHAPES
from gemmdsl.source import CompileError, SourceFile
from gemmdsl.targets import ARCHS, HBM_BYTES_PER_CLOCK, L2_BYTES_PER_CLOCK_PER_SM, SMEM_LATENCY, WGMMA_MACS_PER_CLOCK, ffma_per_clock

ROOT = Path(__file__).resolve().parent.parent
FAMILY = ROOT / "specs" / "sgemm_family.gemmf"
HOPPER_FAMILY = ROOT / "specs" / "hgemm_h100_family.gemmf"
MEASURED_FAMILY = ROOT / "specs" / "hgemm_h100_measured_family.gemmf"
HOPPER_FAMILIES = ["hgemm_h100_family", "hgemm_h100_bf16c_family", "hgemm_h100_f16_family", "tf32_h100_family"]
MEMBERS = ["sgemm_h100", "sgemm_any", "checked_64x64", "checked_32x128", "checked_128x32", "sgemm_short_k",
           "sgemm_decode_8x256"]
ISSUE_SHAPES = [(1000, 1000, 1000), (3000, 5000, 700), (5000, 3000, 4000), (4095, 4097, 4096), (2048, 2048, 77),
                (127, 4096, 4096), (4096, 127, 4096), (16, 4096, 4096), (256, 256, 65536), (8192, 8192, 128),
                (6000, 6000, 6000), (33, 33, 33), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
                (8192, 8192, 8192), (4096, 4096, 1024)]
DECODE_SHAPES = read_shapes(DEFAULT_SHAPES.with_name("decode.txt"))


@pytest.fixture(scope="module")
def family():
    return compile_family_path(FAMILY)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "gemmdsl.cli", *args], capture_output=True, text=True)


# --- the rule ----------------------------------------------------------------------------------

sizes = st.integers(1, 20000) | st.integers(1, 160).map(lambda t: 128 * t)


@settings(max_examples=400, deadline=None)
@given(m=sizes, n=sizes, k=sizes | st.integers(1, 2**20))
def test_every_shape_goes_to_a_member_that_accepts_it_and_costs_least(family, m, n, k):
    models = family.models
    chosen = choose(models, m, n, k)
    cycles = {i: estimate(model, m, n, k) for i, model in enumerate(models)}
    assert cycles[chosen].accepted
    assert all(cycles[chosen].cycles <= figures.cycles for figures in cycles.values() if figures.accepted)
    bm, bn, bk = models[chosen].tile
    if models[chosen].exact:
        assert m % bm == 0 and n % bn == 0 and k % bk == 0
    fallback = choose(models, m, n, k, aligned=False)
    assert not models[fallback].exact and models[fallback].any_alignment


@settings(max_examples=200, deadline=None)
@given(m=sizes, n=sizes, k=sizes)
def test_predicted_cycles_cover_the_launched_work(family, m, n, k):
    """Every accepted member's prediction is at least its tiles' warp FFMAs at the FMA pipe's rate
    spread over every SM, and the useful fraction is the problem over what the tiles launch."""
    for model in family.models:
        figures = estimate(model, m, n, k)
        if not figures.accepted:
            continue
        bm, bn, bk = model.tile
        ffma_cycles = figures.tiles * figures.k_tiles * (bm * bn * bk // 32) // ffma_per_clock(ARCHS[90])
        assert figures.cycles * model.sms >= ffma_cycles
        assert figures.useful == pytest.approx(m * n * k / (figures.tiles * bm * bn * figures.k_tiles * bk))


def test_the_issue_shapes_pick_as_the_analysis_says(family):
    names = [model.name for model in family.models]
    picked = {shape: names[choose(family.models, *shape)] for shape in ISSUE_SHAPES}
    # 33^3: one or two tiles of five k-tiles each, a call of its launch's latency: one of the small tiles, not the
    # 128x128 ones. The H100 timed checked_32x128 and checked_64x64 alike (7.0 and 7.1 us, docs/performance.md,
    # \"Stream-K at short K\"); the H200 6.9, 6.8 and sgemm_short_k, which the model prices lowest, 7.6 (\"Short K\")
    # sgemm_decode_8x256 (five 8-row tiles, split over more SMs) is the model's pick there; not timed at 33^3
    assert picked[(33, 33, 33)] in {"checked_32x128", "checked_64x64", "sgemm_short_k", "sgemm_decode_8x256"}
    # 16 rows: a 128-row tile computes 8 times the useful work, a 32-row one twice; split-K either way
    assert picked[(16, 4096, 4096)] == "checked_32x128"
    assert names[choose(family.models, 4096, 16, 4096)] == "checked_128x32"  # the same on its side
    assert picked[(127, 4096, 4096)] == "sgemm_any"  # 127 of 128 rows: the big tile's efficiency wins
    assert picked[(4096, 4096, 4096)] == "sgemm_h100"  # stream-K recovers the last wave
    assert picked[(2048, 2048, 77)] == "sgemm_any"  # K = 77 is not a multiple of 8: no exact member
    assert picked[(4095, 4097, 4096)] != "sgemm_h100"



def test_stream_k_launches_are_charged_per_launch(family):
    """An FMA stream-K member that shares tiles makes one launch more (the prepare kernel), two more
    when plain tiles follow; each costs EXTRA_LAUNCH_CYCLES in the prediction."""
    model = next(m for m in family.models if m.name == "checked_32x128")
    assert model.launch_cycles == EXTRA_LAUNCH_CYCLES
    free = dataclasses.replace(model, launch_cycles=0)
    # every tile shared; the last wave's shared and the others plain; 660 tiles on 660 slots, none shared
    for shape, launches in (((16, 4096, 4096), 1), ((4096, 4096, 4096), 2), ((21120, 128, 64), 0)):
        figures = estimate(model, *shape)
        assert bool(figures.sk_tiles) == (launches > 0) and (figures.sk_tiles == figures.tiles) == (launches == 1)
        assert figures.cycles - estimate(free, *shape).cycles == launches * EXTRA_LAUNCH_CYCLES


def test_the_rule_picks_the_member_measured_fastest_at_k_64(family):
    """K = 64 calls where an earlier form of the rule picked a member 0.6-0.8x as fast as the fastest: the H100
    (2026-11-25, docs/tuning.md) timed checked_32x128 fastest at 1024x1024x64 (9.3 us against
    10.6 for checked_64x64) and 8192x128x64 (10.1 against 10.9), and, with stream-K, at 64x8192x512
    (26.2 against 46.9)."""
    names = [model.name for model in family.models]
    for shape in ((1024, 1024, 64), (8192, 128, 64), (64, 8192, 512)):
        assert names[choose(family.models, *shape)] == "checked_32x128", shape


def test_the_fma_epilogue_is_priced_by_the_sectors_its_stores_touch():
    """C's stores of one block: with 4x4 micro tiles a warp's one-element stores (a packed C of odd N) land on 8 rows
    16 bytes apart, 20 sectors for 4 of data; 1x32 row lanes keep a warp on one row, 4 or 5 sectors. Vector stores
    at an aligned C touch only the data's sectors."""
    from gemmdsl.cost_model import c_store_align, c_store_sectors
    from gemmdsl.frontend import load_spec
    from gemmdsl.layout import KernelLayout

    figures = {}
    for name in ("checked_64x64", "sgemm_short_k", "hgemm_short_k_bf16c"):
        spec = load_spec(ROOT / "specs" / f"{name}.gemm")
        layout = KernelLayout(spec)
        data = spec.block.m * spec.block.n * spec.problem.c.dtype.bytes // 32
        figures[name] = (c_store_sectors(layout, spec, True) / data, c_store_sectors(layout, spec, False) / data,
                         c_store_align(layout))
    assert figures["checked_64x64"] == (1.0, 5.0, 4)  # float4 stores where C allows them
    assert figures["sgemm_short_k"][0] == 1.0 and 1.0 < figures["sgemm_short_k"][1] < 1.5
    assert figures["sgemm_short_k"][2] == 8  # one-element stores: a row starts on a sector where N is a multiple of 8
    assert figures["hgemm_short_k_bf16c"][2] == 16 and figures["hgemm_short_k_bf16c"][1] < 1.5


@pytest.mark.parametrize("family, shapes", [
    ("tf32_h100_family", [(433, 12761, 1), (1462, 22251, 1), (3766, 12361, 2), (27186, 110, 2)]),
    # 143x24791x12 and 695x3275x16: C of odd N, which 3xTF32's members write from their accumulators at the
    # direct-store rate (2.7x and 2.4x the short-K member's time there)
    ("sgemm_3xtf32_h100_family", [(433, 12761, 1), (1462, 22251, 1), (3766, 12361, 2), (16260, 1827, 3),
                                  (143, 24791, 12), (695, 3275, 16)]),
    ("sgemm_family", [(21183, 6698, 1), (3766, 12361, 2), (16260, 1827, 3), (616, 15066, 3)]),
    ("hgemm_h100_family", [(433, 12761, 1), (3766, 12361, 2), (21183, 6698, 1), (1462, 22251, 1)]),
    ("hgemm_h100_bf16c_family", [(433, 12761, 1), (3766, 12361, 2), (1462, 22251, 1)]),
    ("hgemm_h100_f16_family", [(27186, 110, 2), (3766, 12361, 2)]),
])
def test_the_families_run_the_short_k_member_where_the_h200_ran_it_fastest(family, shapes):
    """The H200's family studies (2026-11-29, docs/performance.md, "Short K"): at these shapes the short-K member ran
    2.4-5.0x faster than every other member of the family (in the 16-bit ones 1.6-2.6x); at 4096^3 and 8192x8192x128
    it is not picked."""
    compiled = compile_family_path(ROOT / "specs" / f"{family}.gemmf")
    names = [model.name for model in compiled.models]
    for shape in shapes:
        assert "short_k" in names[choose(compiled.models, *shape)], shape
    for shape in ((4096, 4096, 4096), (8192, 8192, 128)):
        assert "short_k" not in names[choose(compiled.models, *shape)], shape


@pytest.mark.parametrize("family", ["tf32_h100_family", "sgemm_3xtf32_h100_family"])
def test_the_nt_families_split_few_rows_or_columns_over_every_sm(family):
    """The H200's study (2026-11-29, docs/performance.md, "Few rows or columns against a long K"): at these shapes
    the 32x128 or 128x32 FMA split-K member ran 1.3-3.5x faster than every wgmma member of the family; TF32's
    mma.sync stream-K members, where it has them, ran faster still at some (12x121x16235: 18.1 us against the FMA
    member's 21.5; docs/performance.md, "mma.sync stream-K members")."""
    compiled = compile_family_path(ROOT / "specs" / f"{family}.gemmf")
    names = [model.name for model in compiled.models]
    # 3xTF32's rule gives three of these to its 8-row member, which ran 8-11% behind the 32-row one there; 8x8x4096
    # goes to the GEMV member, which ran it in 7.6 us against the split members' 10.5-10.8 (TF32, docs/performance.md,
    # "One row against a weight")
    split_rows = {"sgemm_32x128_nt", "sgemm_decode_8x256_nt", "tf32_mma_32x128_sk", "tf32_mma_64x64_sk", "sgemv_1x4"}
    for shape in ((12, 121, 16235), (8, 8, 4096), (8, 512, 3584), (3, 843, 3189), (15, 59, 14801)):
        assert names[choose(compiled.models, *shape)] in split_rows, shape
    for shape in ((873, 8, 1819), (512, 8, 4096)):
        assert names[choose(compiled.models, *shape)] == "sgemm_128x32_nt", shape
    for shape in ((4096, 4096, 4096), (1024, 1024, 1024), (8192, 8192, 128)):
        assert "x32" not in names[choose(compiled.models, *shape)], shape


@pytest.mark.parametrize("family, member", [("sgemm_family", "sgemm_decode_8x256"),
                                            ("sgemm_3xtf32_h100_family", "sgemm_decode_8x256_nt")])
def test_the_f32_families_run_the_decode_member_at_a_few_rows_where_the_h200_ran_it_fastest(family, member):
    """The H200's study (2026-11-29, docs/performance.md, "Decode: a few rows"): at these shapes the 8x256 split-K
    member ran 1.2-1.6x as fast as every other member of the FP32 family (3xTF32's: 1.1-1.4x); at 16 rows and
    above, and at 4096^3, other members run."""
    compiled = compile_family_path(ROOT / "specs" / f"{family}.gemmf")
    names = [model.name for model in compiled.models]
    # one row: the 3xTF32 family's GEMV member, which streamed 1x28672x8192 in 211.9 us against SGEMM's 225.3
    # (docs/performance.md, "One row against a weight"); the FP32 family has none (its B is row-major)
    one_row = "sgemv_1x4" if any(name == "sgemv_1x4" for name in names) else member
    for shape in ((1, 4096, 14336), (1, 28672, 8192), (1, 3584, 3584)):
        assert names[choose(compiled.models, *shape)] == one_row, shape
    for shape in ((8, 4096, 4096), (7, 19512, 9627)):
        assert names[choose(compiled.models, *shape)] == member, shape
    for shape in ((16, 4096, 4096), (4096, 4096, 4096), (64, 8192, 8192)):
        assert names[choose(compiled.models, *shape)] != member, shape


def test_c_off_16_bytes_is_floored_at_the_rate_of_the_stores_that_write_it():
    """Where TMA cannot store C, a wgmma member with `store: tma` writes it a row at a time from shared memory, at a
    rate per consumer warpgroup; one without writes it from its accumulators, at a rate per SM whatever its
    consumers (3xTF32's members on the H200: 2.45-2.8 bytes a clock an SM with one or two consumers)."""
    from gemmdsl.targets import DIRECT_STORE_BYTES_PER_CLOCK, ROW_STORE_BYTES_PER_CLOCK

    consumers = {"tf32_h100": 2, "tf32_h100_128x192": 2, "tf32_h100_128x64": 2, "tf32_h100_64x128_sk": 1,
                 "sgemm_3xtf32_h100_sk": 2, "sgemm_3xtf32_h100_128x192_sk": 2, "sgemm_3xtf32_h100_64x128_sk": 1}
    for name in ("tf32_h100_family", "sgemm_3xtf32_h100_family"):
        for model in compile_family_path(ROOT / "specs" / f"{name}.gemmf").models:
            if "wgmma_cycles_per_k_tile" not in dict(model.terms):
                continue
            text = (ROOT / "specs" / f"{model.name}.gemm").read_text()
            staged = re.search(r"^\s*pipeline\s*{[^}]*store: tma", text, re.M) is not None
            per_sm = ROW_STORE_BYTES_PER_CLOCK[90] * consumers[model.name] if staged else DIRECT_STORE_BYTES_PER_CLOCK[90]
            assert model.narrow_store_bytes_per_clock == per_sm * model.sms, model.name
    assert DIRECT_STORE_BYTES_PER_CLOCK[90] < 2 * ROW_STORE_BYTES_PER_CLOCK[90]  # two staged consumers outrun it


def test_a_family_needs_a_checked_member(tmp_path):
    (tmp_path / "f.gemmf").write_text("family f {\n    use h100.gemm;\n}\n")
    (tmp_path / "h100.gemm").write_text((ROOT / "specs" / "sgemm_h100.gemm").read_text())
    with pytest.raises(CompileError) as caught:
        compile_family_path(tmp_path / "f.gemmf")
    assert "f.gemmf:1:8: error: family f has no `bounds: checked` member" in caught.value.render()


# --- the rule as the C launcher prints it -----------------------------------------------------------

RULE_TEST = r"""
#include <cstdio>
%s
int main() {
    long long m, n, k;
    while (std::scanf("%%lld %%lld %%lld", &m, &n, &k) == 3) {
        std::printf("%%d %%d\n", %s_choose(m, n, k, true), %s_choose(m, n, k, false));
    }
}
"""


def rule_source(cuda: str, name: str) -> str:
    """The rule's C text and what it calls: each stream-K member's split, in the member's namespace."""
    splits = [f"namespace {match.group(1)} {{\n{match.group(0)}}}\n" for match in
              re.finditer(r"^static void (\w+)_stream_k_split\(.*?^}\n", cuda, re.M | re.S)]
    rule = re.search(rf"^struct {name}_member .*?^static int {name}_choose\(.*?^}}\n", cuda, re.M | re.S).group(0)
    return "".join(splits) + rule


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH")
@pytest.mark.parametrize("path", [FAMILY, HOPPER_FAMILY, MEASURED_FAMILY, ROOT / "specs" / "tf32_h100_family.gemmf"],
                         ids=lambda path: path.stem)
def test_the_launcher_chooses_as_family_py_does(path, tmp_path):
    family = compile_family_path(path)
    (tmp_path / "rule.cpp").write_text(RULE_TEST % (rule_source(family.cuda, family.name), family.name, family.name))
    subprocess.run(["g++", "-O1", "-o", "rule", "rule.cpp"], cwd=tmp_path, check=True)
    extents = [1, 2, 7, 16, 33, 64, 65, 127, 128, 129, 255, 256, 1000, 1024, 2048, 4095, 4096, 4097, 8192, 33792,
               2**31 - 129]
    cases = [(m, n, k) for m in extents for n in extents for k in (1, 8, 77, 128, 700, 4096, 65536, 2**31 - 9)]
    cases += ISSUE_SHAPES + DECODE_SHAPES + [(64, 64, 100000)] + [shape for shape, _ in family.measured]
    stdin = "".join(f"{m} {n} {k}\n" for m, n, k in cases)
    done = subprocess.run([str(tmp_path / "rule")], input=stdin, capture_output=True, text=True, check=True)
    got = [tuple(map(int, line.split())) for line in done.stdout.splitlines()]
    expected = [(choose(family.models, *case, measured=family.measured),
                 choose(family.models, *case, aligned=False, measured=family.measured)) for case in cases]
    expected = [(chosen, -1 if fallback is None else fallback) for chosen, fallback in expected]  # -1: none
    assert got == expected
    assert any(estimate(model, *case).cycles == CYCLE_CAP for case in cases for model in family.models)


# --- the family's .cu --------------------------------------------------------------------------


def test_the_file_holds_every_member_and_dispatching_launchers(family):
    cuda = family.cuda
    for member in MEMBERS:
        assert f"namespace {member} {{" in cuda
        assert re.search(rf'^extern "C" __global__ void (__launch_bounds__\(.*\) )?{member}_kernel\($', cuda, re.M)
    assert 'extern "C" cudaError_t sgemm_family_launch(const float* A, const float* B, float* C, int M, int N, ' \
           'int K, float alpha, float beta, cudaStream_t stream)' in cuda
    assert 'extern "C" cudaError_t sgemm_family_launch_ld(' in cuda
    assert "sgemm_family_launch_batched" not in cuda  # the members are not batched
    assert [m["kernel"] for m in family.metadata["members"]] == MEMBERS


def test_a_batched_family_dispatches_the_batched_launcher_too(tmp_path):
    batched = (ROOT / "specs" / "batched_v3.gemm").read_text()
    (tmp_path / "wide.gemm").write_text(batched.replace("gemm batched_v3", "gemm batched_wide"))
    (tmp_path / "small.gemm").write_text(batched.replace("gemm batched_v3", "gemm batched_small"))
    family = compile_family(SourceFile(str(tmp_path / "f.gemmf"), "family fb { use wide.gemm; use small.gemm; }"))
    assert family.metadata["launcher_batched"] == "fb_launch_batched"
    assert re.search(r'^extern "C" cudaError_t fb_launch_batched\(const float\* A, int lda, long long stride_a, '
                     r'.*int batch, float alpha, float beta, cudaStream_t stream\) \{\n(?:.*\n){4}'
                     r'.*fb_launch_batched_members\[member\]\(A, lda, stride_a, B, ldb, stride_b, C, ldc, stride_c, '
                     r'M, N, K, batch, alpha, beta, stream\);', family.cuda, re.M)


# A family's whole .cu through ptxas is in the full run; the quick run compiles the quick set's families with their
# headers (tests/test_header.py: the host code and PTX) and builds the quick set's specs (tests/test_nvcc.py).
@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not on PATH")
def test_the_family_builds_with_nvcc(family):
    result = build(family.cuda, family.name, family.spec.target.sm, entry="checked_64x64_kernel")
    assert result.resources.registers > 0 and not result.resources.spills


# --- diagnostics -------------------------------------------------------------------------------


def family_error(tmp_path, text: str, members: dict[str, str] | None = None) -> str:
    for name, spec in (members or {}).items():
        (tmp_path / name).write_text(spec)
    source = SourceFile(str(tmp_path / "f.gemmf"), text)
    with pytest.raises(CompileError) as caught:
        compile_family(source)
    return caught.value.render()


CHECKED = (ROOT / "specs" / "checked_v3.gemm").read_text()


@pytest.mark.parametrize("text, expected", [
    ("family f {\n    use a.gemm\n}\n", ["f.gemmf:3:1: error: expected ';' after the path, found '}'",
                                         "    3 | }", "      | ^", "hint: a family file reads"]),
    ("family f {\n    use a.txt;\n}\n", ["f.gemmf:2:9: error: expected a member's .gemm path, found 'a.txt'",
                                         "      |         ^~~~~"]),
    ("family f {\n}\n", ["f.gemmf:1:8: error: family f has no members"]),
    ("gemm f {\n}\n", ["f.gemmf:1:1: error: expected 'family', found 'gemm'"]),
    ("family f {\n    use a.gemm;\n", ["f.gemmf:3:1: error: expected 'use', 'fallback', 'measured' or '}', found the end of the file"]),
    ("family f { use a.gemm; }\nfamily g { }\n", ["f.gemmf:2:1: error: unexpected 'family' after the family"]),
    ("family f {\n    use missing.gemm;\n}\n",
     ["f.gemmf:2:9: error: member missing.gemm cannot be read: No such file or directory"]),
])
def test_syntax_and_missing_members_point_at_the_text(tmp_path, text, expected):
    rendered = family_error(tmp_path, text, {"a.gemm": CHECKED})
    for piece in expected:
        assert piece in rendered


def test_members_must_compute_the_same_problem(tmp_path):
    text = "family f {\n    use a.gemm;\n    // the other layout\n    use b.gemm;\n}\n"
    rendered = family_error(tmp_path, text, {"a.gemm": CHECKED,
                                             "b.gemm": CHECKED.replace("checked_v3", "other")
                                             .replace("a: f32 row", "a: f32 col")})
    assert "f.gemmf:4:9: error: member other computes a f32 col, b f32 row, c f32 row" in rendered
    assert "but checked_v3 computes a f32 row" in rendered
    assert "    4 |     use b.gemm;\n      |         ^~~~~~" in rendered
    assert "hint: members share the problem section" in rendered


FUSED = (ROOT / "specs" / "linear_gelu.gemm").read_text()


@pytest.mark.parametrize("other, says", [
    (FUSED.replace("linear_gelu", "plain").replace("    fuse     { bias: n; activation: gelu_tanh; }\n", ""),
     "member plain has no fuse section, but linear_gelu fuses C = gelu_tanh(acc + bias[n]) (bias bf16)"),
    (FUSED.replace("linear_gelu", "silu").replace("gelu_tanh;", "silu;"),
     "member silu fuses C = silu(acc + bias[n]) (bias bf16), but linear_gelu fuses C = gelu_tanh(acc + bias[n])"),
    (FUSED.replace("linear_gelu", "f32_bias").replace("bias: n;", "bias: n f32;"),
     "member f32_bias fuses C = gelu_tanh(acc + bias[n]) (bias f32), but linear_gelu"),
])
def test_members_must_fuse_the_same_chain(tmp_path, other, says):
    rendered = family_error(tmp_path, "family f {\n    use a.gemm;\n    use b.gemm;\n}\n",
                            {"a.gemm": FUSED, "b.gemm": other})
    assert f"f.gemmf:3:9: error: {says}" in rendered
    assert "    3 |     use b.gemm;\n      |         ^~~~~~" in rendered
    assert "hint: members share the fuse section" in rendered


def test_members_must_accumulate_alike(tmp_path):
    """A promoted FP8 member beside a fast one: a call's accuracy would depend on the shape."""
    promoted, fast = ((ROOT / "specs" / f"{name}.gemm").read_text() for name in ("fp8_rowwise", "fp8_h100_fast"))
    rendered = family_error(tmp_path, "family f {\n    use a.gemm;\n    use b.gemm;\n}\n",
                            {"a.gemm": promoted, "b.gemm": fast})
    assert "f.gemmf:3:9: error: member fp8_h100_fast accumulates fast, but fp8_rowwise accumulates promoted" in rendered
    assert "hint: members share `mma { accumulate: ...; }`" in rendered


@pytest.mark.parametrize("name, fast", [("fp8_rowwise_family", False), ("fp8_fast_family", True)])
def test_an_fp8_family_is_compared_with_scaled_mm_in_its_accumulation_mode(name, fast, monkeypatch):
    """verify, bench and scripts/family_study.py read a family's comparison from its metadata, the members'."""
    from fake_gpu import FakeGpu, fake_family
    from gemmdsl.precisions import comparison

    FakeGpu().install(monkeypatch)
    compared = comparison(fake_family(ROOT / "specs" / f"{name}.gemmf").metadata)
    assert (compared.unit, compared.fast_accumulation, compared.output_dtype) == ("fp8", fast, "bf16")


def test_a_fused_family_passes_its_chain_through():
    """linear_gelu_family: the launchers take the members' bias and pass it on; NAME.json records the chain
    for the Python family (FamilyKernel) and verify; the rule takes 128x128 tiles where 128x256 leave SMs idle."""
    family = compile_family_path(ROOT / "specs" / "linear_gelu_family.gemmf")
    for key, parameters in family.metadata["parameters"].items():
        assert "const __nv_bfloat16* bias, float alpha" in parameters, key
    assert "_launch_members[member](A, B, C, M, N, K, bias, alpha, beta, stream);" in family.cuda
    assert family.metadata["fuse"] == {"formula": "gelu_tanh(acc + bias[n])", "scale": None, "activation": "gelu_tanh",
                                       "bias": {"along": "n", "dtype": "bf16"}, "residual": None}
    names = [model.name for model in family.models]
    assert names[choose(family.models, 1024, 1024, 1024)] == "linear_gelu_128x128"
    assert names[choose(family.models, 4096, 4096, 4096)] == "linear_gelu"


def test_member_names_must_differ_from_each_other_and_the_family(tmp_path):
    rendered = family_error(tmp_path, "family checked_v3 {\n    use a.gemm;\n    use b.gemm;\n}\n",
                            {"a.gemm": CHECKED, "b.gemm": CHECKED})
    assert "f.gemmf:3:9: error: two members are named checked_v3" in rendered
    assert "f.gemmf:2:9: error: member checked_v3 has the family's name" in rendered


def test_a_member_with_errors_reports_them_in_its_own_file(tmp_path):
    rendered = family_error(tmp_path, "family f {\n    use a.gemm;\n}\n",
                            {"a.gemm": CHECKED.replace("warps: 4x2", "warps: 4x3")})
    assert "f.gemmf:2:9: error: member a.gemm does not compile" in rendered
    assert re.search(r"a\.gemm:\d+:\d+: error: .*\n +\d+ \|.*warps: 4x3", rendered)


def test_the_cli_reports_family_errors_without_a_traceback(tmp_path):
    (tmp_path / "f.gemmf").write_text("family f {\n    use nothing.gemm;\n}\n")
    for tool in ("compile", "check", "bench"):
        done = run_cli(tool, str(tmp_path / "f.gemmf"))
        assert done.returncode == 1, tool
        assert "f.gemmf:2:9: error: member nothing.gemm cannot be read" in done.stderr, tool
        assert "Traceback" not in done.stderr, tool


# --- check --problem ---------------------------------------------------------------------------


def test_check_says_which_member_runs_and_why():
    done = run_cli("check", str(FAMILY), "--problem", "33x33x33")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sgemm_family (family) at 33x33x33: sgemm_decode_8x256 runs\n")
    assert "sgemm_h100 (bounds: exact) cannot take 33x33x33" in done.stdout
    assert re.search(r"^\* sgemm_decode_8x256 +8x256x32 +5 +2 +264 +1 +0 +5\.5% +5 +12,127$", done.stdout, re.M)
    assert re.search(r"^  sgemm_short_k +64x128x8 +1 +5 +396 +1 +0 +11\.0% +5 +13,525$", done.stdout, re.M)
    assert re.search(r"^  checked_32x128 +32x128x8 +2 +5 +660 +1 +0 +11\.0% +5 +14,669$", done.stdout, re.M)
    assert re.search(r"^  checked_64x64 +64x64x8 +1 +5 +792 +1 +0 +21\.9% +5 +14,869$", done.stdout, re.M)
    done = run_cli("check", str(FAMILY), "--problem", "4096x4096x4096", "--json")
    assert '"member": "sgemm_h100"' in done.stdout


# --- bench --shapes ----------------------------------------------------------------------------


def test_the_shape_lists_hold_the_awkward_and_the_decode_shapes(tmp_path):
    assert read_shapes(DEFAULT_SHAPES) == ISSUE_SHAPES
    decode = read_shapes(DEFAULT_SHAPES.with_name("decode.txt"))
    assert decode == [(m, n, k) for n, k in ((8192, 8192), (28672, 8192), (8192, 28672))
                      for m in (1, 8, 16, 32, 64, 128)]
    bad = tmp_path / "shapes.txt"
    bad.write_text("# fine\n128\n12x12\n")
    with pytest.raises(ValueError, match=r"shapes\.txt:3: bad size '12x12'"):
        read_shapes(bad)


def test_bench_prints_the_geometric_mean_and_the_lowest_ratio():
    def row(name, size, pct):
        return Row(name, *size, buffer_sets=1, median_ms=1.0, tflops=1.0, pct_of_cublas=pct, pct_of_peak=1.0,
                   cublas_ms=1.0)

    rows = [row("cuBLAS", (8, 8, 8), 100.0), row("fam", (8, 8, 8), 200.0), row("cuBLAS", (9, 9, 9), 100.0),
            row("fam", (9, 9, 9), 50.0), Row("exact", 9, 9, 9, buffer_sets=1, note="skipped: not whole tiles"),
            row("exact", (8, 8, 8), 110.0)]
    report = BenchReport("GPU", "14", 60.0, 20, 5, rows)
    assert geomean_lines(report) == [
        "fam: geometric mean 1.000x cuBLAS over 2 sizes, lowest 0.500x at 9x9x9",
        "exact: geometric mean 1.100x cuBLAS over 1 sizes, lowest 1.100x at 8x8x8 (1 skipped)"]


class FakeKernel:
    """A member as the runtime's Kernel looks to FamilyKernel: exact ones refuse unaligned operands."""

    def __init__(self, name, multiples):
        self.name, self.calls = name, []
        self.requirements = type("Requirements", (), {"multiples": multiples, "dtypes": {"C": "float32"}})
        self.metadata = {"unit": "fma", "dtypes": {"a": "f32", "b": "f32", "c": "f32"}}

    def bind(self, a, b, c, alpha, beta, stream_k=True, interior=True):
        if self.requirements.multiples != (1, 1, 1) and a.aligned is False:
            raise ValueError("A is not aligned to 4 elements")
        self.calls.append((a.shape, stream_k, interior))
        return self.name

    def bind_padded(self, a, b, c, alpha, beta, stream_k=True, interior=True):
        return None  # not a TMA member: nothing to copy


class FakeArray:
    def __init__(self, *shape, aligned=True):
        self.shape, self.aligned = shape, aligned


@pytest.fixture
def fake_loaded(family, monkeypatch):
    """`family` as FamilyKernel loads it, its members FakeKernels."""
    from gemmdsl import family_kernel as family_module

    multiples = {model.name: model.tile if model.exact else (1, 1, 1) for model in family.models}
    monkeypatch.setattr(family_module, "Kernel", lambda artifacts: FakeKernel(artifacts.name,
                                                                              multiples[artifacts.name]))
    return FamilyKernel(family)


def test_the_python_family_runs_what_the_launcher_runs(family, fake_loaded):
    assert fake_loaded.bind(FakeArray(4096, 4096), FakeArray(4096, 4096)) == "sgemm_h100"
    assert fake_loaded.bind(FakeArray(33, 33), FakeArray(33, 33)) == family.models[choose(family.models, 33, 33, 33)].name
    # the exact member refuses an unaligned A: the checked member the rule picks runs it
    fallback = family.models[choose(family.models, 4096, 4096, 4096, aligned=False)].name
    assert fake_loaded.bind(FakeArray(4096, 4096, aligned=False), FakeArray(4096, 4096)) == fallback


@pytest.fixture
def fake_hopper(monkeypatch):
    """hgemm_h100_bf16c_family as FamilyKernel loads it: its wgmma members refuse misaligned operands (TMA), its
    `fallback` member (mma.sync) takes any."""
    from gemmdsl import family_kernel as family_module

    family = compile_family_path(ROOT / "specs" / "hgemm_h100_bf16c_family.gemmf")
    refusing = {model.name for model in family.models if not model.any_alignment}
    monkeypatch.setattr(family_module, "Kernel", lambda artifacts: TmaKernel(artifacts.name, artifacts.name in refusing))
    return family, FamilyKernel(family)


class TmaKernel(FakeKernel):
    """A wgmma member refuses misaligned operands and takes them on padded copies (Kernel.bind_padded), unless its
    caller's library cannot allocate them (`copies` False: bind_padded returns None)."""

    copies = True

    def __init__(self, name, refuses_misaligned):
        super().__init__(name, (1, 1, 1))
        self.refuses_misaligned = refuses_misaligned

    def bind(self, a, b, c, alpha, beta, stream_k=True, interior=True):
        if self.refuses_misaligned and a.aligned is False:
            raise ValueError("A's data pointer is not 16-byte aligned; it reads A and B with TMA, no fallback kernel")
        if a.shape[-1] != b.shape[0]:
            raise ValueError("inner dimensions disagree")
        return self.name

    def bind_padded(self, a, b, c, alpha, beta, stream_k=True, interior=True):
        if not (self.refuses_misaligned and a.aligned is False and TmaKernel.copies):
            return None  # nothing TMA refuses, or no copies
        return f"{self.bind(FakeArray(*a.shape), b, c, alpha, beta)} on padded copies"


@pytest.mark.parametrize("shape", ISSUE_SHAPES[:12] + [(1, 8192, 8192), (555, 1001, 555)])
def test_a_tma_family_runs_its_fast_member_on_padded_copies_where_tma_refuses_the_operands(fake_hopper, shape,
                                                                                         monkeypatch):
    family, loaded = fake_hopper
    m, n, k = shape
    chosen = loaded.bind(FakeArray(m, k), FakeArray(k, n))
    assert chosen == family.models[choose(family.models, m, n, k)].name != "hgemm_h100_bf16c_any"
    reads_any = next(model.any_alignment for model in family.models if model.name == chosen)
    # a member that reads any alignment itself (the FMA short-K member at 33^3) runs on the operands as they are
    expected = chosen if reads_any else f"{chosen} on padded copies"
    assert loaded.bind(FakeArray(m, k, aligned=False), FakeArray(k, n)) == expected
    with pytest.raises(ValueError, match="inner dimensions disagree"):  # not alignment: no copies, no fallback
        loaded.bind(FakeArray(m, k), FakeArray(k + 1, n))
    monkeypatch.setattr(TmaKernel, "copies", False)  # a library the runtime cannot allocate in: the fallback
    # the rule's pick among the members that read any alignment (the `fallback`, or a GEMV member at a few rows)
    refused = family.models[choose(family.models, m, n, k, aligned=False)].name
    assert refused == "hgemm_h100_bf16c_any" or refused.startswith("hgemv_bf16c_")
    assert loaded.bind(FakeArray(m, k, aligned=False), FakeArray(k, n)) == (chosen if reads_any else refused)


def test_a_fallback_member_must_take_any_alignment_and_a_family_needs_a_checked_use(tmp_path):
    (tmp_path / "tma.gemm").write_text((ROOT / "specs" / "hgemm_h100_bf16c.gemm").read_text())
    (tmp_path / "tma64.gemm").write_text((ROOT / "specs" / "hgemm_h100_bf16c_128x64.gemm").read_text())
    (tmp_path / "f.gemmf").write_text("family f {\n    use tma.gemm;\n    fallback tma64.gemm;\n}\n")
    with pytest.raises(CompileError) as caught:
        compile_family_path(tmp_path / "f.gemmf")
    assert "f.gemmf:3:14: error: fallback member hgemm_h100_bf16c_128x64 refuses misaligned operands" in (
        caught.value.render())
    (tmp_path / "any.gemm").write_text((ROOT / "specs" / "hgemm_h100_bf16c_any.gemm").read_text())
    (tmp_path / "f.gemmf").write_text("family f {\n    fallback any.gemm;\n}\n")
    with pytest.raises(CompileError, match="has no `bounds: checked` member .besides its fallbacks."):
        compile_family_path(tmp_path / "f.gemmf")


def test_the_family_picks_once_per_shape(fake_loaded, monkeypatch):
    from gemmdsl import cycles

    runs = []
    fields = cycles.member_fields  # read once per member each time the rule runs (cycles.choose)
    monkeypatch.setattr(cycles, "member_fields", lambda model: runs.append(model) or fields(model))
    for _ in range(3):
        fake_loaded.bind(FakeArray(1000, 1000), FakeArray(1000, 1000))
    assert len(runs) == len(fake_loaded.models)  # one run of the rule, not three
    fake_loaded.bind(FakeArray(1000, 999), FakeArray(999, 1000))
    assert len(runs) == 2 * len(fake_loaded.models)


def test_a_family_call_passes_its_options_and_returns_c_as_a_kernel_does(fake_loaded, monkeypatch):
    from gemmdsl import family_kernel as family_module

    returned = []
    monkeypatch.setattr(family_module, "run_returning_c",
                        lambda launch, c_given, dtype, stream: returned.append((launch, c_given, dtype, stream)))
    stream = object()
    fake_loaded(FakeArray(33, 33), FakeArray(33, 33), stream=stream, stream_k=False, interior=False)
    fake_loaded(FakeArray(33, 33), FakeArray(33, 33), FakeArray(33, 33))
    c_dtype = fake_loaded.requirements.dtypes["C"]
    assert returned == [("sgemm_decode_8x256", False, c_dtype, stream), ("sgemm_decode_8x256", True, c_dtype, None)]
    member = fake_loaded.member_for(33, 33, 33)
    assert member.calls == [((33, 33), False, False), ((33, 33), True, True)]


# --- on the GPU: every member at every shape it takes, the Python family and the C launchers -------

TOLERANCE = 1e-4  # float32 sums of up to 65,536 products against float64; a wrong index is off by O(1)
CUDA_SUCCESS = 0


@pytest.fixture(scope="module")
def gpu_family(tmp_path_factory):
    from gemmdsl.family_kernel import load_family

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GEMMDSL_CACHE", str(tmp_path_factory.mktemp("cubins")))
        yield load_family(FAMILY)


def relative_error(cupy, actual, a, b) -> float:
    reference = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
    difference = cupy.linalg.norm(actual.astype(cupy.float64) - reference)
    return float(difference / max(float(cupy.linalg.norm(reference)), 1e-30))


def operands(cupy, m, n, k):
    rng = cupy.random.RandomState(m + n + k)
    return (rng.uniform(-1, 1, (m, k)).astype(cupy.float32), rng.uniform(-1, 1, (k, n)).astype(cupy.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ISSUE_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_member_and_the_family_at_the_issue_shapes(gpu_family, cupy, shape):
    a, b = operands(cupy, *shape)
    for model, kernel in zip(gpu_family.models, gpu_family.kernels):
        if model.accepts(*shape):
            assert relative_error(cupy, kernel(a, b), a, b) < TOLERANCE, model.name
    assert relative_error(cupy, gpu_family(a, b), a, b) < TOLERANCE


@pytest.mark.gpu
def test_the_family_takes_torch_tensors_on_the_callers_stream(gpu_family):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    side, other = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(side):
        a = torch.rand(1000, 700, device="cuda") * 2 - 1  # made on `side`: only that stream orders them
        b = torch.rand(700, 900, device="cuda") * 2 - 1
        assert gpu_family.bind(a, b)() == side.cuda_stream
        c = gpu_family(a, b)
        done = torch.cuda.Event()
        done.record(side)
        poisoned = torch.full_like(c, float("nan"))
        other.wait_stream(side)
        gpu_family(a, b, poisoned, stream=other)  # an explicit stream wins
    assert isinstance(c, torch.Tensor) and c.shape == (1000, 900)
    done.synchronize()
    reference = a.double() @ b.double()
    assert float((c.double() - reference).norm() / reference.norm()) < TOLERANCE
    other.synchronize()
    assert float((poisoned.double() - reference).norm() / reference.norm()) < TOLERANCE


@pytest.mark.gpu
@pytest.mark.nvcc
def test_the_c_launchers_dispatch_and_fall_back(family, cupy, tmp_path):
    import ctypes

    if find_nvcc() is None:
        pytest.skip("nvcc not on PATH: the launchers are host code")
    (tmp_path / "family.cu").write_text(family.cuda)
    subprocess.run([find_nvcc(), f"-arch={family.spec.target}", "-shared", "-Xcompiler", "-fPIC", "-o",
                    "libfamily.so", "family.cu"], cwd=tmp_path, check=True, capture_output=True)
    library = ctypes.CDLL(str(tmp_path / "libfamily.so"))
    launch, launch_ld = library.sgemm_family_launch, library.sgemm_family_launch_ld
    launch.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_float] * 2 + [ctypes.c_void_p]
    launch_ld.argtypes = ([ctypes.c_void_p, ctypes.c_int] * 3 + [ctypes.c_int] * 3 + [ctypes.c_float] * 2
                          + [ctypes.c_void_p])
    launch.restype = launch_ld.restype = ctypes.c_int
    for m, n, k in [(33, 33, 33), (1000, 1000, 1000), (16, 4096, 4096), (1024, 1024, 1024), (2048, 2048, 77)]:
        a, b = operands(cupy, m, n, k)
        c = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
        assert launch(a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, 1.0, 0.0, None) == CUDA_SUCCESS
        cupy.cuda.runtime.deviceSynchronize()
        assert relative_error(cupy, c, a, b) < TOLERANCE, (m, n, k)
    # lda = 1025: the exact member refuses the misaligned rows, a checked member runs the call
    m = n = k = 1024
    wide = cupy.zeros((m, k + 1), dtype=cupy.float32)
    wide[:, :k], b = operands(cupy, m, n, k)
    c = cupy.zeros((m, n), dtype=cupy.float32)
    assert launch_ld(wide.data.ptr, k + 1, b.data.ptr, n, c.data.ptr, n, m, n, k, 1.0, 0.0, None) == CUDA_SUCCESS
    cupy.cuda.runtime.deviceSynchronize()
    assert relative_error(cupy, c, wide[:, :k], b) < TOLERANCE
    before = c.copy()
    assert launch(wide.data.ptr, b.data.ptr, c.data.ptr, 0, n, k, 1.0, 0.0, None) == CUDA_SUCCESS  # M = 0: nothing
    assert launch(wide.data.ptr, b.data.ptr, c.data.ptr, -1, n, k, 1.0, 0.0, None) == 1  # cudaErrorInvalidValue
    cupy.cuda.runtime.deviceSynchronize()
    assert bool((c == before).all())


def test_verify_takes_a_family_member_by_member_and_bench_as_one(monkeypatch):
    from gemmdsl import family_kernel as family_module

    monkeypatch.setattr(family_module, "run_on_kernels", lambda paths, sizes, work: work([], [(8, 8, 8)]))
    monkeypatch.setattr(family_module, "Kernel", lambda artifacts: FakeKernel(artifacts.name, (1, 1, 1)))
    seen = []
    family_module.run_on_specs_and_families([str(FAMILY)], "8", lambda kernels, sizes: seen.append(kernels),
                                            as_members=True)
    family_module.run_on_specs_and_families([str(FAMILY)], "8", lambda kernels, sizes: seen.append(kernels))
    assert [kernel.name for kernel in seen[0]] == MEMBERS
    assert [(type(k).__name__, k.name) for k in seen[1]] == [("FamilyKernel", "sgemm_family")]


def test_a_family_alone_on_the_command_line_runs(monkeypatch):
    """With no plain spec beside it, a family's kernels still reach `work` (they used not to)."""
    from gemmdsl import family_kernel, runtime

    monkeypatch.setattr(runtime.commands, "require_gpu", lambda: None)
    monkeypatch.setattr(runtime.commands, "require_fp32_cublas", lambda: None)
    monkeypatch.setattr(family_kernel, "FamilyKernel", lambda compiled: compiled.name)
    seen = []
    status = family_kernel.run_on_specs_and_families([str(FAMILY)], "64x64x64", lambda kernels, sizes: seen.append(kernels) or 0)
    assert status == 0 and seen == [["sgemm_family"]]


# --- families of wgmma specs (Hopper's own path) ---------------------------------------------------


@pytest.mark.parametrize("name", HOPPER_FAMILIES)
def test_hopper_families_choose_the_tiles_the_h100_ran_fastest(name):
    """The choices the H100 measured on 2026-11-23 (docs/families.md, "Families of wgmma specs"): at 1024^3 the
    128x64 tiles ran at 0.93-0.98x cuBLAS against 0.53x for 128x256; at 3072x3072x1024 and 3072^3 the
    128x192 ones at 0.95-0.97x (bf16 C) against 0.76-0.78x; at the four other standard sizes 128x256."""
    family = compile_family_path(ROOT / "specs" / f"{name}.gemmf")
    names = [model.name for model in family.models]
    assert names[choose(family.models, 1024, 1024, 1024)].endswith("_128x64")
    for shape in [(3072, 3072, 1024), (3072, 3072, 3072)]:
        assert names[choose(family.models, *shape)].endswith("_128x192"), shape
    for shape in [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 1024)]:
        assert names[choose(family.models, *shape)] == names[0], shape


def test_the_3xtf32_family_chooses_the_tiles_the_h200_ran_fastest():
    """The H200's measurements of 2026-11-29 (scripts/family_study.py, docs/performance.md, "Families at shapes
    nobody tuned for"), where one member ran at least 2% faster than the other and the model agrees: the 128x192
    stream-K spec at 4096x8192x8192 (4.13 against 4.25 ms), 4096x18944x3584 (4.19 / 4.33), 16384x28672x8192
    (65.1 / 68.3) and 16384x8192x28672 (65.1 / 70.1); the 128x128 one at 4096x4096x1024 (0.273 / 0.287). The model
    takes the 128x192 tiles at four shapes where the 128x128 ones ran 3.6-6.3% faster (4096x8192x28672,
    16384x4096x14336, 16384x14336x4096, 16384x8192x8192): the rule's regret there, in the same table. The rule's
    3xTF32 terms: the consumer's wait measured once (128x128 at 8192^3, H100) and its FP32 adds counted (64 or 96
    accumulators, two consumer warps per scheduler)."""
    family = compile_family_path(ROOT / "specs" / "sgemm_3xtf32_h100_family.gemmf")
    names = [model.name for model in family.models]
    for shape in [(4096, 8192, 8192), (4096, 18944, 3584), (16384, 28672, 8192), (16384, 8192, 28672)]:
        assert names[choose(family.models, *shape)] == "sgemm_3xtf32_h100_128x192_sk", shape
    assert names[choose(family.models, 4096, 4096, 1024)] == "sgemm_3xtf32_h100_sk"
    waits = [dict(model.terms)["split_wait_cycles_per_k_tile"] for model in family.models
             if "split_wait_cycles_per_k_tile" in dict(model.terms)]  # the wgmma members
    # 64x128: one consumer, whose wait nothing overlaps (twice the two-consumer figure), one warp per scheduler
    assert waits == [190 + 2 * 64, 190 + 2 * 96, 2 * 190 + 1 * 64]


hopper_sizes = st.integers(1, 20000) | st.integers(1, 100).map(lambda t: 64 * t)


@settings(max_examples=200, deadline=None)
@given(m=hopper_sizes, n=hopper_sizes, k=hopper_sizes)
def test_a_wgmma_member_s_cycles_cover_its_multiply_adds_spread_over_every_sm(hopper_families, m, n, k):
    for model in hopper_families[HOPPER_FAMILY.stem].models:
        if model.fallback or "wgmma_cycles_per_k_tile" not in dict(model.terms):  # the mma.sync and FMA members
            continue
        figures = estimate(model, m, n, k)
        tensor = dict(model.terms)["wgmma_cycles_per_k_tile"]
        assert figures.cycles * model.sms >= figures.tiles * figures.k_tiles * tensor
        assert model.k_tile_cycles[0] >= tensor and model.tile_cycles > 0


def test_a_wgmma_family_reports_its_terms_in_check_and_metadata():
    family = compile_family_path(HOPPER_FAMILY)
    small = family.metadata["members"][2]["rule"]
    # 128x64x64 bf16: its multiply-adds at wgmma's rate (2,047 per clock on the H200), fewer cycles than TMA's 24 KiB
    # take at L2's rate per SM (40 bytes per clock there)
    macs, l2 = WGMMA_MACS_PER_CLOCK[90]["bf16"], L2_BYTES_PER_CLOCK_PER_SM[90]
    assert small["wgmma_cycles_per_k_tile"] == -(-128 * 64 * 64 // macs)
    assert small["tma_cycles_per_k_tile"] == -(-24576 // l2) > small["wgmma_cycles_per_k_tile"]
    assert small["k_tile_cycles"] == [small["tma_cycles_per_k_tile"]] and small["blocks_per_sm"] == 1
    done = run_cli("check", str(HOPPER_FAMILY), "--problem", "1024x1024x1024")
    assert done.returncode == 0 and "hgemm_h100_128x64 runs" in done.stdout


TMA_CYCLES_128X256 = -(-49152 // L2_BYTES_PER_CLOCK_PER_SM[90])  # 48 KiB per k-tile at L2's rate per SM


@pytest.mark.parametrize("stages, ring, k_tile", [(2, 3000, 3000), (3, 1500, 1500), (4, 1000, TMA_CYCLES_128X256)])
def test_a_wgmma_ring_too_shallow_for_its_round_trip_bounds_the_k_tile(stages, ring, k_tile):
    from gemmdsl.compiler import compile_source
    text = (ROOT / "specs" / "hgemm_h100_bf16c.gemm").read_text().replace("stages: 4;", f"stages: {stages};")
    plan = compile_source(SourceFile("ring.gemm", text)).plan
    model = plan.path.lowered_member_model(plan.layout, 132)
    terms = dict(model.terms)
    # 128x256x64 bf16: 48 KiB per k-tile at L2's rate (1,229 cycles on the H200); 3000 over stages - 1 in flight
    assert terms["tma_cycles_per_k_tile"] == TMA_CYCLES_128X256 and terms["ring_cycles_per_k_tile"] == ring
    assert model.k_tile_cycles == (k_tile,)


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not on PATH")
def test_a_hopper_family_builds_with_nvcc_for_sm_90a():
    family = compile_family_path(HOPPER_FAMILY)
    result = build(family.cuda, family.name, family.spec.target.code, entry="hgemm_h100_128x64_kernel")
    assert result.resources.registers > 0 and not result.resources.spills and not result.resources.wgmma_serialized


@pytest.mark.parametrize("fragments, waits", [("single", 2), ("double", 1)])
def test_an_mma_sync_k_tile_takes_its_slowest_rate_plus_the_fragment_loads_no_multiply_covers(fragments, waits):
    """paths/mma_sync/cycles.py's model, which the family rule and the tuner read: hgemm_mma (sm_80) multiplies
    128x128x32 bf16 per k-tile, 524,288 multiply-adds at an A100 SM's 1,024 a clock; its two k-steps each wait
    for their fragments with single buffering, only the first with double."""
    from gemmdsl.compiler import compile_source
    from gemmdsl.family import member_model

    text = (ROOT / "specs" / "hgemm_mma.gemm").read_text().replace("fragments: double", f"fragments: {fragments}")
    model = member_model(compile_source(SourceFile("mma.gemm", text)))
    terms = dict(model.terms)
    assert model.tensor_cycles == terms["mma_cycles_per_k_tile"] == 512
    assert terms["exposed_latency_per_k_tile"] == waits * SMEM_LATENCY
    for resident, cycles in enumerate(model.k_tile_cycles, 1):
        rates = (512, terms["smem_wavefronts_per_k_tile"], terms["instructions_per_k_tile"] / 4,
                 terms["smem_instructions_per_k_tile"] / MMA_SMEM_INSTRUCTIONS_PER_CLOCK)
        exposed = math.ceil(waits * SMEM_LATENCY / resident)  # another resident block issues meanwhile
        assert cycles == math.ceil(max(resident * rate for rate in rates)) + exposed


@pytest.mark.parametrize("precision, per_word, per_block", [("tf32", 2, 0), ("3xtf32", 3, 4)])
def test_an_mma_sync_k_tile_issues_what_tf32_adds_beside_the_mma(precision, per_word, per_block):
    """What emit/mma_sync.py adds to a TF32 k-step, a warp's instructions beside the mma and the loads: each
    fragment word rounded (2), or for 3xTF32 split (3), and 3xTF32's sum of three products added to each
    accumulator block (4 FP32 adds). sgemm_3xtf32: 4 warps of 4x8 m16n8k8 blocks, 2 k-steps per k-tile, 16 A
    and 16 B fragment words per k-step."""
    from gemmdsl.compiler import compile_source
    from gemmdsl.family import member_model

    text = (ROOT / "specs" / "sgemm_3xtf32.gemm").read_text()
    model = member_model(compile_source(SourceFile("mma.gemm", text.replace("precision: 3xtf32",
                                                                           f"precision: {precision}"))))
    mma = {"tf32": 1, "3xtf32": 3}[precision] * 4 * 2 * 32  # warps x k-steps x blocks
    warp_steps = 4 * 2
    terms = dict(model.terms)
    overhead = terms["instructions_per_k_tile"] - mma - terms["smem_instructions_per_k_tile"]
    assert overhead - warp_steps * (per_word * 32 + per_block * 32) == cost_model.KTILE_OVERHEAD * 4


# --- the measured table ----------------------------------------------------------------------------


def test_the_measured_table_overrides_the_model_at_its_shapes_only():
    family = compile_family_path(MEASURED_FAMILY)
    names = [model.name for model in family.models]
    assert [(shape, names[index]) for shape, index in family.measured] == [
        ((128, 4096, 4096), "hgemm_h100_128x192"), ((1, 12288, 4096), "hgemm_h100_128x64")]
    for shape, index in family.measured:
        assert choose(family.models, *shape, measured=family.measured) == index
    (shape, index), _ = family.measured
    assert choose(family.models, *shape) != index  # where the model picks another member, the table overrides it
    assert choose(family.models, 256, 4096, 4096, measured=family.measured) == choose(family.models, 256, 4096, 4096)
    assert family.metadata["measured"] == [{"shape": [128, 4096, 4096], "member": "hgemm_h100_128x192"},
                                           {"shape": [1, 12288, 4096], "member": "hgemm_h100_128x64"}]
    assert "measured" not in compile_family_path(HOPPER_FAMILY).metadata
    from gemmdsl.family import explain

    assert "timed fastest at this shape" in explain(family, (128, 4096, 4096))["reason"]


@pytest.mark.parametrize("table, message", [
    ("4x4x4: nope.gemm;", "nope.gemm is not a member of the family"),
    ("4x4x4: h100.gemm; 4x4x4: checked.gemm;", "shape 4x4x4 is listed twice"),
    ("4x4: h100.gemm;", "expected a shape MxNxK, found '4x4'"),
    ("4x4x4 h100.gemm;", "expected ':' after the shape"),
    ("4x4x4: h100.gemm;", "h100.gemm (bounds: exact, tile 128x128x8) cannot take 4x4x4"),
])
def test_a_bad_measured_table_is_a_positioned_error(table, message, tmp_path):
    (tmp_path / "h100.gemm").write_text((ROOT / "specs" / "sgemm_h100.gemm").read_text())
    (tmp_path / "checked.gemm").write_text((ROOT / "specs" / "checked_v3.gemm").read_text())
    (tmp_path / "f.gemmf").write_text(f"family f {{\n    use h100.gemm;\n    use checked.gemm;\n"
                                      f"    measured {{ {table} }}\n}}\n")
    with pytest.raises(CompileError) as caught:
        compile_family_path(tmp_path / "f.gemmf")
    rendered = caught.value.render()
    assert re.search(r"f\.gemmf:4:\d+: error: " + re.escape(message), rendered), rendered


def test_gemmdsl_load_takes_a_family_as_it_takes_a_spec(monkeypatch):
    """`gemmdsl.load` hands a .gemmf to the family loader and a .gemm to the spec loader, `runtime.load`, which
    makes a dequantizing spec a QuantizedKernel (the device side replaced by recorders, in the modules that call
    them: what each would load is what is checked)."""
    import gemmdsl
    import gemmdsl.family_kernel
    import gemmdsl.runtime.quantized

    monkeypatch.setattr(gemmdsl.family_kernel, "FamilyKernel", lambda artifacts: ("family", artifacts))
    monkeypatch.setattr(gemmdsl.runtime.quantized, "Kernel", lambda artifacts: ("spec", artifacts))
    monkeypatch.setattr(gemmdsl.runtime.quantized, "QuantizedKernel", lambda artifacts: ("quantized", artifacts))
    kind, artifacts = gemmdsl.load(ROOT / "specs" / "sgemm_family.gemmf")
    assert kind == "family" and artifacts.name == "sgemm_family" and len(artifacts.members) > 1
    kind, artifacts = gemmdsl.load(str(ROOT / "specs" / "sgemm_v3.gemm"))
    assert (kind, artifacts.name) == ("spec", "sgemm_v3")
    kind, artifacts = gemmdsl.load("inline.gemmf", text=(ROOT / "specs" / "sgemm_v3.gemm").read_text())
    assert (kind, artifacts.name) == ("spec", "sgemm_v3")  # text is a spec's, whatever its display name
    for load in (gemmdsl.load, gemmdsl.runtime.load):
        kind, artifacts = load(ROOT / "specs" / "w4a16_decode.gemm")
        assert (kind, artifacts.name) == ("quantized", "w4a16_decode")


# --- the stream-K members of the wgmma families: decode, long K, few tiles --------------------------

AWKWARD_SHAPES = read_shapes(DEFAULT_SHAPES)[:12]
BIG, WIDE, SMALL, STREAM_K = "", "_128x192", "_128x64", "_64x128_sk"
# The member each wgmma family runs, by its name's suffix after the family's first member's name: the
# awkward shapes, then the decode ones by (N, K) and M.
INTENDED_AWKWARD = {(1000, 1000, 1000): SMALL, (3000, 5000, 700): BIG, (5000, 3000, 4000): BIG,
                    (4095, 4097, 4096): WIDE, (2048, 2048, 77): BIG, (127, 4096, 4096): STREAM_K,
                    (4096, 127, 4096): STREAM_K, (16, 4096, 4096): STREAM_K, (256, 256, 65536): STREAM_K,
                    (8192, 8192, 128): BIG, (6000, 6000, 6000): BIG, (33, 33, 33): SMALL}
# M = 128: the 128-row tiles are as many as the 64x128 ones (too few SMs idle for stream-K to split), or,
# at N = 28672, 112 blocks of 128x256 hold enough k-tiles in flight to draw HBM's rate
INTENDED_AT_M_128 = {(8192, 8192): SMALL, (28672, 8192): BIG, (8192, 28672): SMALL}


@pytest.fixture(scope="module")
def hopper_families():
    return {name: compile_family_path(ROOT / "specs" / f"{name}.gemmf") for name in HOPPER_FAMILIES}


def picked_suffix(family, shape) -> str:
    return family.models[choose(family.models, *shape)].name.removeprefix(family.models[0].name)


@pytest.mark.parametrize("name", HOPPER_FAMILIES)
def test_the_wgmma_families_pick_the_intended_member_at_the_awkward_and_decode_shapes(hopper_families, name):
    family = hopper_families[name]
    # the f32 FMA short-K member (a 64x128 tile, one of five k-tiles) takes the call of its launch's latency; the H200
    # ran it there within 1% of the fastest member in the 16-bit families, 7-10% behind it in TF32's
    # (docs/performance.md, "Short K")
    # (the families with mma.sync stream-K members run 33^3 on the 64x64 one: 6.1 us for BF16 against the short-K
    # member's 8.4, 7.1 for TF32 against 7.8; docs/performance.md, "mma.sync stream-K members")
    # (33^3 goes to the GEMV member, one row of A against 4 rows of B a block: 5.6 us for BF16 (f32 C) against the
    # mma.sync 64x64 member's 6.1 and cuBLAS's 8.2, 5.4 for TF32 against 6.8; docs/performance.md, "One row against a
    # weight")
    small = next((model.name for model in family.models if "mma_64x64_sk" in model.name), None)
    at_33 = next(model.name for model in family.models if "gemv" in model.name and model.name.endswith("_1x4"))
    # 16 rows against a 4096 x 4096 weight: the GEMV path's tensor member where the family has one (15.6 us against
    # the 64x128 stream-K member's 20.6 for BF16 (bf16 C); docs/performance.md, "Several rows against a weight")
    tensor = any("gemv" in model.name and "_mma_" in model.name for model in family.models)
    named = {(33, 33, 33)} | ({(16, 4096, 4096)} if tensor else set())
    picked = {shape: (family.models[choose(family.models, *shape)].name if shape in named
                      else picked_suffix(family, shape)) for shape in AWKWARD_SHAPES}
    if tensor:
        sixteen_rows = picked.pop((16, 4096, 4096))
        assert "gemv" in sixteen_rows and "_mma_16x16" in sixteen_rows, sixteen_rows
    assert picked == {shape: member for shape, member in (INTENDED_AWKWARD | {(33, 33, 33): at_33}).items()
                      if shape in picked}
    gemv = next(model.name for model in family.models if "gemv" in model.name and model.name.endswith("_1x4"))
    for m, n, k in DECODE_SHAPES:
        if m == 1:  # the GEMV member: 1x8192x8192 in 35.4 us against the 64x128 stream-K member's 48.2 (BF16, f32 C)
            assert family.models[choose(family.models, m, n, k)].name == gemv, (m, n, k)
        elif m <= 16 and tensor:  # the tensor GEMV members, 8 rows of A a block to M = 8, 16 above
            name = family.models[choose(family.models, m, n, k)].name
            assert "gemv" in name and f"_mma_{8 if m <= 8 else 16}x16" in name, (m, n, k, name)
        elif (m, n, k) == (64, 28672, 8192):
            # the big tiles, which ran 4-5% behind the 64x128 stream-K member (BF16, f32 C: 128.0 us against 122.3;
            # TF32: 241.3 against 231.2): the model prices both at the memory floor, and the tie goes to the big
            # tiles' fewer cycles before it (docs/performance.md, "One row against a weight")
            assert picked_suffix(family, (m, n, k)) == "", (m, n, k)
        else:
            assert picked_suffix(family, (m, n, k)) == (STREAM_K if m <= 64 else INTENDED_AT_M_128[n, k]), (m, n, k)
    # one tile of 1,563 k-tiles: the mma.sync stream-K member spreads it over every slot with atomic adds where the
    # family has one, the others' 64x128 stream-K member over the blocks its fixup affords (the model's pick; not
    # timed at this shape)
    long_k = small or STREAM_K
    assert picked_suffix(family, (64, 64, 100000)) == long_k


FP8_FAMILIES = {"fp8_rowwise_family": "fp8_rowwise", "fp8_fast_family": "fp8_fast"}  # the smaller members' prefix


@pytest.mark.parametrize("name", sorted(FP8_FAMILIES))
def test_the_fp8_families_pick_stream_k_for_decode_and_the_big_tiles_for_big_calls(name):
    """Decode (M of 1 to 16 through 8192 x 8192 weights): the 64x128 stream-K member; 1024^3 the 128x64 one (128
    tiles where 128x256 makes 32), 3072x3072x1024 the 128x192 one (384 tiles in 2.9 waves, not 288 in 2.2), 4096^3
    and 16384x11008x4096 the 128x256 one (the family's first). At 8192^3 the fast family keeps 128x256 tiles; the
    promoted one predicts 1.1% less for 128x192 (20.8 waves where 128x256 fills 15.5, and one promotion wait per
    k-tile where 128x256's m64n128k32 chunks wait twice). 2048x2048x77 runs the 128x256 member on padded copies."""
    family = compile_family_path(ROOT / "specs" / f"{name}.gemmf")
    big, prefix = family.models[0].name, FP8_FAMILIES[name]

    def picked(shape) -> str:
        chosen = family.models[choose(family.models, *shape)].name
        return BIG if chosen == big else chosen.removeprefix(prefix)

    assert {m: picked((m, 8192, 8192)) for m in range(1, 17)} == {m: STREAM_K for m in range(1, 17)}
    assert picked((1024, 1024, 1024)) == SMALL and picked((3072, 3072, 1024)) == WIDE
    assert picked((4096, 4096, 4096)) == picked((16384, 11008, 4096)) == picked((2048, 2048, 77)) == BIG
    assert picked((8192, 8192, 8192)) == (BIG if name == "fp8_fast_family" else WIDE)


@pytest.mark.parametrize("name", HOPPER_FAMILIES)
@pytest.mark.parametrize("shape", [shape for shape in DECODE_SHAPES if shape[0] <= 16], ids=lambda s: "x".join(map(str, s)))
def test_a_decode_call_is_memory_bound_and_the_stream_k_member_streams_on_every_sm(hopper_families, name, shape):
    """M <= 16: B's N x K elements dominate the bytes; the memory floor sets the chosen member's cycles (HBM's rate,
    or what its k-tiles in flight draw over HBM's round trip), and no member is predicted below it. At M = 1 the GEMV
    member runs, within a wave's rounding of its floor."""
    family = hopper_families[name]
    m, n, k = shape
    chosen = family.models[choose(family.models, m, n, k)]
    figures = estimate(chosen, m, n, k)
    tensor = any("gemv" in model.name and "_mma_" in model.name for model in family.models)
    if m == 1 or tensor:  # the GEMV members (one row: the CUDA-core one; 2-16 rows: the tensor ones where the family
        # has them): their blocks stream the weight's rows at the floor's rate, a wave's rounding above
        assert "gemv" in chosen.name and (chosen.name.endswith("_1x4") if m == 1 else "_mma_" in chosen.name)
        assert figures.memory_cycles <= figures.cycles - chosen.call_cycles <= 1.05 * figures.memory_cycles
        assert all(estimate(model, m, n, k).cycles >= figures.cycles for model in family.models)
        return
    a, b, c = chosen.element_bytes
    # every SM, or all but the few an equal share of blocks per tile leaves idle (schedule.ALIGN_IDLE_PERCENT)
    assert chosen.stream_k and figures.sk_tiles
    assert chosen.sms * (100 - ALIGN_IDLE_PERCENT) <= figures.streaming_blocks * 100 <= chosen.sms * 100
    traffic = m * k * a + n * k * b + m * n * c
    bm, bn, bk = chosen.tile
    in_flight = figures.streaming_blocks * chosen.in_flight_k_tiles * bk * (min(m, bm) * a + min(n, bn) * b)
    # HBM's rate, or what the blocks' k-tiles in flight draw over HBM's round trip, whichever is slower
    floor = max(-(-traffic // chosen.hbm_bytes_per_clock), -(-traffic * chosen.round_trip_cycles // in_flight))
    assert figures.cycles - chosen.call_cycles == figures.memory_cycles == floor
    assert figures.memory_cycles > figures.compute_cycles
    assert all(estimate(model, m, n, k).cycles >= figures.cycles for model in family.models)


@settings(max_examples=150, deadline=None)
@given(m=hopper_sizes, n=hopper_sizes, k=hopper_sizes | st.integers(1, 2**20))
def test_the_rule_splits_with_stream_k_only_where_the_big_tiles_fill_less_than_two_waves(hopper_families, m, n, k):
    """Stream-K pays where tiles are few: where the family's 128-row tiles fill two waves or more, a stream-K
    member is not picked to share k-tiles (at K of one k-tile it may run as plain persistent tiles)."""
    for family in hopper_families.values():
        chosen = family.models[choose(family.models, m, n, k)]
        if chosen.stream_k and estimate(chosen, m, n, k).sk_tiles:
            assert estimate(family.models[0], m, n, k).tiles < 2 * family.models[0].slots


@settings(max_examples=150, deadline=None)
@given(m=hopper_sizes, n=hopper_sizes, k=hopper_sizes | st.integers(1, 2**20))
def test_the_memory_floor_bounds_every_prediction(hopper_families, m, n, k):
    """Every member's cycles are the larger of its k-tiles' and the floor, plus the call's own and, where its
    launcher copies packed operands TMA refuses (K off 8 bf16 elements), the copy's; the floor is at least the
    bytes of A, B and C at HBM's rate, and, for a wgmma member, what its streaming blocks draw by Little's law."""
    for model in hopper_families["hgemm_h100_bf16c_family"].models:
        figures = estimate(model, m, n, k)
        a, b, c = model.element_bytes
        traffic = m * k * a + n * k * b + m * n * c
        copy = (model.pad_call_cycles + -(-2 * (m * k * a + n * k * b) // model.pad_bytes_per_clock)
                if model.pads and k % model.a_align else 0)
        assert figures.cycles == max(figures.compute_cycles, figures.memory_cycles) + model.call_cycles + copy
        assert figures.memory_cycles * model.hbm_bytes_per_clock >= traffic
        if model.in_flight_k_tiles:
            bm, bn, bk = model.tile
            in_flight = figures.streaming_blocks * model.in_flight_k_tiles * bk * (min(m, bm) * a + min(n, bn) * b)
            assert figures.memory_cycles * in_flight >= traffic * model.round_trip_cycles
            assert 1 <= figures.streaming_blocks <= model.slots


@settings(max_examples=150, deadline=None)
@given(m=hopper_sizes, n=hopper_sizes, k=hopper_sizes | st.integers(1, 2**20))
def test_the_chosen_member_s_launch_plan_holds_for_any_shape(hopper_families, m, n, k):
    """The chosen member's LaunchPlan, read back from NAME.json as the runtime reads it: one block per SM at
    most, room for every stream-K block, a workspace slot of f32 partial sums per block (whatever C's type) and
    a split whose ranges cover the shared k-tiles once."""
    from gemmdsl.launch_plan import LaunchPlan

    sms = 132
    for family in hopper_families.values():
        member = family.members[choose(family.models, m, n, k)]
        plan = LaunchPlan.from_json(member.artifacts.plan.launch.to_json())
        assert plan == member.artifacts.plan.launch
        if member.artifacts.plan.path.name != "wgmma":  # TF32's FMA member: a block per tile
            continue
        grid = plan.grid_for(m, n, k, 1, sms)
        split = plan.split_for(m, n, k, 1, sms)
        assert 1 <= grid[0] <= sms and grid[0] >= split.sk_blocks and grid[1:] == (1, 1)
        sized = plan.workspace_for(m, n, k, sms)
        if not member.model.stream_k:
            assert sized is None and not split.sk_tiles
            continue
        bm, bn, _ = plan.block_tile
        assert plan.workspace.partial_bytes == bm * bn * 4
        assert (sized is None) == (split.sk_tiles == 0)
        if sized:
            assert sized[1] == (sms * bm * bn * 4, sms * plan.workspace.consumers)
            covered = sum(end - first for block in range(split.sk_blocks) for _, first, end in split.segments(block))
            assert covered == split.sk_work


def test_the_16_bit_c_members_keep_f32_partial_sums_and_convert_once():
    """bf16 and f16 C: a stream-K block leaves its f32 accumulators in its slot (float4 stores), the block that
    finishes the tile adds them in f32 and only its epilogue converts to the 16-bit C."""
    from gemmdsl.compiler import compile_source

    for name, convert in (("hgemm_h100_bf16c_64x128_sk", "__floats2bfloat162_rn"),
                          ("hgemm_h100_f16_64x128_sk", "__floats2half2_rn")):
        artifacts = compile_source(SourceFile.read(ROOT / "specs" / f"{name}.gemm"))
        cuda = artifacts.cuda
        leave = cuda.index("slot[i * 128] = make_float4(acc[4 * i]")
        add = cuda.index("acc[4 * i] += p.x;", leave)
        # the conversion lives in the store helpers (store_pair, packed_pair), which the epilogue calls after the add
        store = min(at for at in (cuda.find("packed_pair(", add), cuda.find("store_pair(", add)) if at >= 0)
        assert leave < add < store and convert in cuda[:leave] and convert not in cuda[leave:store]
        assert artifacts.plan.launch.workspace.partial_bytes == 64 * 128 * 4


def test_check_reports_the_stream_k_split_and_the_memory_floor():
    done = run_cli("check", str(ROOT / "specs" / "hgemm_h100_bf16c_64x128_sk.gemm"), "--problem", "1x8192x8192")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "stream-K: the last 64 tiles' 8,192 k-tiles shared by 128 blocks" in text
    family = compile_family_path(ROOT / "specs" / "hgemm_h100_bf16c_family.gemmf")
    floor = estimate(next(m for m in family.models if m.name.endswith("_64x128_sk")), 1, 8192, 8192).memory_cycles
    assert floor >= -(-(8192 * 2 + 8192 * 8192 * 2 + 8192 * 2) // HBM_BYTES_PER_CLOCK[90])
    assert f"memory floor {floor:,} cycles" in text and "128 blocks streaming 7 k-tiles each in flight" in text
    assert "(sets the time" in text
    done = run_cli("check", str(ROOT / "specs" / "hgemm_h100_bf16c_family.gemmf"), "--problem", "1x8192x8192")
    assert done.returncode == 0 and "hgemv_bf16c_1x4 runs" in done.stdout  # the GEMV member at one row
    assert "memory floor" in done.stdout and f"{floor:,}" in done.stdout



def test_the_candidate_64x64_stream_k_spec_keeps_more_bytes_in_flight_than_the_member_only_at_full_rows():
    """docs/performance.md, "Long K over few tiles": the 64x64 stream-K spec (12 stages) measured faster than the
    64x128 member at 64x8192x8192 and slower at 1x and 16x8192x8192, where the rule holds both to the same memory
    floor. At all three it runs 128 whole tiles and the member shares its 64 between 128 blocks; what differs
    with M is the bytes a block keeps in flight: 11 k-tiles of 64 rows of B against 7 of 128, and A's rows
    inside the problem: more than the member at M = 64, fewer at M <= 16."""
    from gemmdsl.compiler import compile_source
    from gemmdsl.family import member_model

    small, member = (member_model(compile_source(SourceFile.read(ROOT / "specs" / f"{name}.gemm")))
                     for name in ("hgemm_h100_bf16c_64x64_sk", "hgemm_h100_bf16c_64x128_sk"))

    def in_flight(model, m):
        bm, bn, bk = model.tile
        a, b, _ = model.element_bytes
        return model.in_flight_k_tiles * bk * (min(m, bm) * a + bn * b)

    assert in_flight(small, 64) == 180_224 > in_flight(member, 64) == 172_032
    for m in (1, 8, 16, 64):
        assert estimate(small, m, 8192, 8192).sk_tiles == 0 and estimate(member, m, 8192, 8192).sk_tiles == 64
        if m < 64:
            assert in_flight(small, m) < in_flight(member, m), m


@pytest.mark.parametrize("name, message", [
    ("f" * 65, "family name is 65 characters long; at most 64 are allowed"),
    ("int", "family name 'int' is a C/C++ keyword or CUDA built-in"),
])
def test_a_family_name_that_cannot_name_its_files_and_functions_is_an_error_at_the_name(name, message, tmp_path):
    from gemmdsl.source import CompileError, SourceFile

    shutil.copy(Path(__file__).resolve().parents[1] / "specs" / "sgemm_v3.gemm", tmp_path)
    path = tmp_path / "named.gemmf"
    path.write_text(f"family {name} {{\n    use sgemm_v3.gemm;\n}}\n")
    with pytest.raises(CompileError) as raised:
        compile_family(SourceFile.read(path, suffix=".gemmf"))
    assert raised.value.diagnostics[0].message == message
    assert (raised.value.diagnostics[0].span.line, raised.value.diagnostics[0].span.column) == (1, 8)


def test_a_family_whose_first_member_runs_anywhere_is_built_for_sm_90a_when_another_member_needs_it(tmp_path):
    """The family's .cu, header and metadata state the build its most demanding member needs (a family's
    members may be listed in any order; the arch guard stops a build for sm_90 of a wgmma member)."""
    specs = Path(__file__).resolve().parents[1] / "specs"
    for name in ("hgemm_h100_bf16c_any", "hgemm_h100_bf16c"):
        shutil.copy(specs / f"{name}.gemm", tmp_path)
    path = tmp_path / "any_first.gemmf"
    path.write_text("family any_first {\n    use hgemm_h100_bf16c_any.gemm;\n    use hgemm_h100_bf16c.gemm;\n}\n")
    family = compile_family_path(path)
    assert not family.members[0].artifacts.spec.target.arch_specific
    assert str(family.spec.target) == "sm_90a" and family.metadata["target"] == "sm_90a"
    command = "nvcc -gencode=arch=compute_90a,code=sm_90a -c any_first.cu"
    assert f"// Build: {command}" in family.cuda and command in family.header


SHIPPED_FAMILIES = sorted((ROOT / "specs").glob("*.gemmf"))
sampled_shapes = st.tuples(*(st.integers(0, 32768) for _ in range(3))).filter(
    lambda shape: shape[0] * shape[1] * shape[2] <= 2**37)


@pytest.fixture(scope="module")
def shipped_families():
    return [compile_family_path(path) for path in SHIPPED_FAMILIES]


@settings(max_examples=200, deadline=None)
@given(shape=sampled_shapes)
def test_every_shipped_family_runs_any_shape_the_sampler_draws(shipped_families, shape):
    """The rule never refuses a shape: an empty one goes to the first member, any other to a member that takes it
    (its bounds), and a call whose operands that
    member refuses goes to a member that runs any alignment, where the family has one (the grouped families have
    none: their launchers refuse such calls themselves)."""
    m, n, k = shape
    for family in shipped_families:
        models = family.models
        picked = choose(models, m, n, k)
        if 0 in shape:  # an empty problem: the first member's launcher returns at once, or scales C for K = 0
            assert picked == 0, (family.name, shape)
            continue
        assert picked is not None and estimate(models[picked], m, n, k).accepted, (family.name, shape)
        assert not models[picked].fallback
        fallback = choose(models, m, n, k, aligned=False)
        if any(model.any_alignment for model in models):
            assert fallback is not None and models[fallback].any_alignment, (family.name, shape)
            assert estimate(models[fallback], m, n, k).accepted
        else:
            assert fallback is None


def test_check_compares_the_pick_with_the_members_that_could_run_instead():
    """At 2048x2048x77 (K off 8 bf16 elements) every TMA member pays the padded copy and the fallback, which runs
    only what the others refuse, pays none: the explanation's runner-up is a TMA member, never the fallback."""
    from gemmdsl.family import explain

    reason = explain(compile_family_path(HOPPER_FAMILY), (2048, 2048, 77))["reason"]
    ratio = float(re.search(r"the next member predicts ([0-9.]+)x as many", reason)[1])
    assert ratio >= 1.0, reason


def test_the_c_members_table_holds_every_figure_the_rule_reads_in_order():
    """emit/family.py prints the struct and each row from cycles.MEMBER_STRUCT; the Python rule reads
    cycles.member_fields: a figure added to one and not the other would price members differently in C."""
    from gemmdsl.cycles import MEMBER_STRUCT, member_fields

    family = compile_family_path(ROOT / "specs" / "hgemm_h100_bf16c_family.gemmf")
    struct = [field for _, names, _ in MEMBER_STRUCT for field in names]
    for member in family.members:
        assert list(member_fields(member.model)) == struct
    cuda = family.cuda
    rows = re.findall(r"^    \{(.*)\},  // (\w+)$", cuda, re.M)
    assert [row.count(",") + 1 for row, _ in rows] == [len(struct)] * len(family.members)

"""Launch rules (gemmdsl/rule.py): what a rule renders as C computes what it evaluates to in Python.

Each rule is compiled with the host compiler in a harness that reads inputs and prints every binding, and
run on inputs hypothesis draws; the launchers print these very rules, so the C launcher and the runtime
decide alike. Random expressions test the renderer itself (precedence, short-circuit, ?:, casts)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from gemmdsl import ir
from gemmdsl.compiler import compile_path
from gemmdsl.emitter import Emitter
from gemmdsl.expr import Const, Expr, Var
from gemmdsl.rule import (Apply, Let, Refuse, Refused, Rule, all_of, any_of, cast, ceil_div, eq, ge, gt, le, lt,
                          maximum, minimum, ne, not_, select)
from gemmdsl.grouped_schedule import grid_rule, group_end, group_tiles
from gemmdsl.launch_plan import SCALE_C_GRID, SCALE_C_MAX_BLOCKS, SCALE_C_THREADS
from gemmdsl.schedule import (LAUNCHED_MIN_SAVED_K_TILES, interior_rules, interior_split_pays, stream_k_split,
                              stream_k_split_rule)

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH")

HARNESS = r"""
#include <algorithm>
#include <cstdint>
#include <cstdio>
using std::max;  // CUDA's device min and max (rule.call_min, call_max), on the host
using std::min;
%(symbols)s
%(helpers)s
%(function)s
int main() {
    long long in[%(count)d];
    for (;;) {
        for (int i = 0; i < %(count)d; ++i)
            if (std::scanf("%%lld", &in[i]) != 1) return 0;
%(declarations)s
%(body)s
        std::printf("\n");
    }
}
"""


def harness(rule: Rule, pointers: tuple[str, ...] = (), helpers: Emitter | None = None,
            function: tuple[str, str] | None = None, symbols: tuple[str, ...] = ()) -> str:
    """A C++ program that reads the rule's inputs (one line each call) and prints its bindings, `refused`
    for a refused call; with `function` (C name, output type), the rule as a function and its outputs."""
    declarations = "\n".join(
        f"        const void* {name} = (const void*)(uintptr_t)in[{i}];" if name in pointers
        else f"        const long long {name} = in[{i}];" for i, name in enumerate(rule.inputs))
    body = Emitter()
    body._depth = 2
    printed: list[tuple[str, str]] = []
    source = Emitter()
    if function is None:
        rule.render_inline(body, refuse='{ std::printf("refused\\n"); continue; }')
        printed = bindings(rule)
    else:
        c_name, output_type = function
        rule.render_function(source, c_name, [f"long long {name}" for name in rule.inputs], output_type)
        body.line(f"{output_type} " + ", ".join(f"{name} = 0" for name, _ in rule.outputs) + ";")
        body.line(f"{c_name}({', '.join([*rule.inputs, *(f'&{name}' for name, _ in rule.outputs)])});")
        printed = [(name, output_type) for name, _ in rule.outputs]
    for name, ctype in printed:
        body.line(f'std::printf("%s ", {name});' if ctype == "auto" else f'std::printf("%lld ", (long long){name});')
    return HARNESS % {"symbols": "\n".join(f'static const char* const {s} = "{s}";' for s in symbols),
                      "helpers": helpers.text() if helpers else "", "function": source.text(),
                      "count": len(rule.inputs), "declarations": declarations, "body": body.text()}


def bindings(rule: Rule) -> list[tuple[str, str]]:
    """(name, C type) of every binding of the rule, in order."""
    return [pair for step in rule.steps
            for pair in ([(step.name, step.ctype)] if isinstance(step, Let) else
                         [(name, step.output_type) for name in step.names] if isinstance(step, Apply) else [])]


def build(source: str, directory: Path, strict: bool = True) -> Path:
    """The harness, compiled; `strict`: warnings fail it (random expressions compare a name with itself)."""
    (directory / "rule.cpp").write_text(source)
    warnings = ["-Wall", "-Werror", "-Wno-unused-variable", "-Wno-unused-function"] if strict else []
    subprocess.run(["g++", "-std=c++17", "-O1", *warnings, "-o", "rule", "rule.cpp"], cwd=directory, check=True)
    return directory / "rule"


def run(binary: Path, cases: list[tuple[int, ...]]) -> list[str]:
    stdin = "".join(" ".join(map(str, case)) + "\n" for case in cases)
    return subprocess.run([str(binary)], input=stdin, capture_output=True, text=True, check=True).stdout.splitlines()


def expected(rule: Rule, case: tuple[int, ...], names: list[str]) -> str:
    try:
        values = rule.evaluate(dict(zip(rule.inputs, case)))
    except Refused:
        return "refused"
    return "".join(f"{int(values[n]) if not isinstance(values[n], str) else values[n]} " for n in names)


# --- the renderer on random expressions -------------------------------------------------------------

LEAVES = st.one_of(st.sampled_from([Var("x"), Var("y"), Var("z")]), st.integers(0, 100).map(Const))


def _grow(children: st.SearchStrategy) -> st.SearchStrategy:
    small = st.integers(1, 100)
    nonnegative = children.map(lambda e: maximum(e, 0))  # C's / and % equal Python's on non-negative values
    return st.one_of(
        st.tuples(children, children).map(lambda p: p[0] + p[1]),
        st.tuples(children, children).map(lambda p: p[0] - p[1]),
        st.tuples(children, small).map(lambda p: p[0] * p[1]),
        st.tuples(children, children).map(lambda p: _bounded(p[0]) * _bounded(p[1])),
        st.tuples(nonnegative, small).map(lambda p: p[0] // p[1]),
        st.tuples(nonnegative, small).map(lambda p: p[0] % p[1]),
        st.tuples(nonnegative, small).map(lambda p: ceil_div(*p)),
        st.tuples(children, children).map(lambda p: minimum(*p)),
        st.tuples(children, children).map(lambda p: maximum(*p)),
        st.tuples(st.sampled_from([lt, le, gt, ge, eq, ne]), children, children).map(lambda p: p[0](p[1], p[2])),
        st.lists(children, min_size=2, max_size=3).map(lambda terms: all_of(*terms)),
        st.lists(children, min_size=2, max_size=3).map(lambda terms: any_of(*terms)),
        children.map(not_),
        st.tuples(children, children, children).map(lambda p: select(*p)),
        children.map(lambda e: cast("long long", e)),
    )


def _bounded(e: Expr) -> Expr:
    """`e` clamped to [-1000, 1000], so that products of expressions stay inside long long."""
    return maximum(minimum(e, 1000), -1000)


EXPRESSIONS = st.recursive(LEAVES, _grow, max_leaves=6)


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # min and max repeat their operands
@settings(max_examples=8, deadline=None)
@given(expressions=st.lists(EXPRESSIONS, min_size=6, max_size=10),
       cases=st.lists(st.tuples(*[st.integers(0, 1 << 16)] * 3), min_size=1, max_size=60))
def test_a_rendered_expression_computes_what_python_evaluates(tmp_path_factory, expressions, cases):
    """Products of leaves with constants stay far inside long long; divisors are positive constants."""
    rule = Rule("random", ("x", "y", "z"), tuple(Let(f"e{i}", e) for i, e in enumerate(expressions)))
    binary = build(harness(rule), tmp_path_factory.mktemp("random"), strict=False)
    names = [f"e{i}" for i in range(len(expressions))]
    assert run(binary, cases) == [expected(rule, case, names) for case in cases]


def test_the_renderer_keeps_c_precedence_and_folds_constants():
    x, y = Var("x"), Var("y")
    assert select(lt(x, y), x - y, y - x).render() == "x < y ? x - y : y - x"
    assert (x - (y - 1)).render() == "x - (y - 1)"
    assert (x * (y // 2)).render() == "x * (y / 2)" and (x * (y % 3)).render() == "x * (y % 3)"
    assert (x * (y * 2)).render() == "x * y * 2" and (x + (y - 1)).render() == "x + (y - 1)"
    assert all_of(any_of(lt(x, 1), gt(y, 2)), not_(eq(x, y))).render() == "(x < 1 || y > 2) && !(x == y)"
    assert (select(gt(x, 0), 1, 2) + 3).render() == "(x > 0 ? 1 : 2) + 3"
    assert all_of(1, lt(x, y), Const(1)).render() == "x < y"
    assert any_of(0, Const(1), lt(x, y)) == Const(1)
    assert select(lt(x, y), 1, select(gt(x, y), 2, 3)).render() == "x < y ? 1 : x > y ? 2 : 3"


def test_a_refusal_stops_the_rule():
    rule = Rule("refusing", ("x",),
                (Let("half", Var("x") // 2), Refuse(gt(Var("half"), 3)), Let("twice", Var("x") * 2)))
    assert rule.evaluate({"x": 6})["twice"] == 12
    with pytest.raises(Exception, match="refusing"):
        rule.evaluate({"x": 8})


def test_a_binding_must_come_after_what_it_reads():
    with pytest.raises(AssertionError, match="before bound"):
        Rule("unordered", ("x",), (Let("a", Var("b") + 1), Let("b", Var("x"))))


# --- the launchers' rules ---------------------------------------------------------------------------

SPLIT_CASES = st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 2**23), st.integers(1, 600),
                                 st.integers(1, 70000)), min_size=1, max_size=200)


@pytest.mark.parametrize("floor, aligned", [(0, False), (LAUNCHED_MIN_SAVED_K_TILES, False), (0, True)],
                         ids=["tiles", "launched", "persistent"])
def test_the_stream_k_split_the_launchers_print_splits_as_python_does(tmp_path_factory, floor, aligned):
    """schedule.stream_k_split_rule as NAME_stream_k_split (the FMA and mma.sync launchers' floor, the wgmma
    path's aligned split), against `stream_k_split` on inputs up to a million tiles of 2^23 k-tiles."""
    rule = stream_k_split_rule(floor, aligned)
    binary = build(harness(rule, function=("split", "int")), tmp_path_factory.mktemp("split"))

    @settings(max_examples=30, deadline=None)
    @given(cases=SPLIT_CASES)
    def check(cases):
        got = [tuple(map(int, line.split())) for line in run(binary, cases)]
        splits = [stream_k_split(*case, min_saved_k_tiles=floor, aligned=aligned) for case in cases]
        assert got == [(split.sk_tiles, split.sk_blocks) for split in splits]

    check()


def test_the_launchers_print_the_stream_k_split_rule():
    """The FMA path's launcher and the wgmma path's each print the rule with their own floor and alignment."""
    for name, floor, aligned in (("sgemm_h100", LAUNCHED_MIN_SAVED_K_TILES, False), ("sgemm_3xtf32_h100_sk", 0, True)):
        o = Emitter()
        stream_k_split_rule(floor, aligned).render_function(
            o, f"{name}_stream_k_split", [f"long long {n}" for n in ("tiles", "k_tiles", "slots", "batch")], "int")
        assert o.text() in compile_path(ROOT / "specs" / f"{name}.gemm").cuda


CHOICE_SPECS = ["hgemm_h100_f16_any", "checked_64x64", "sgemm_v1", "batched_v3", "sgemm_any"]


@pytest.mark.parametrize("name", CHOICE_SPECS)
def test_the_kernel_choice_the_launcher_prints_chooses_as_python_does(tmp_path_factory, name):
    """LaunchPlan.kernel_choice_rule as the launcher prints it (with its alignment helper), on addresses and
    leading dimensions of every residue: narrow rungs (hgemm_h100_f16_any), a scalar fallback (checked), a
    refusal (sgemm_v1: bounds exact), batch strides (batched_v3), a stream-K twin (sgemm_any)."""
    artifacts = compile_path(ROOT / "specs" / f"{name}.gemm")
    launch, spec = artifacts.plan.launch, artifacts.spec
    element_bytes = {op.value: spec.problem.matrix(op).dtype.bytes for op in ir.Operand}
    rule = launch.kernel_choice_rule(element_bytes, f"{name}_aligned")
    rendered = Emitter()
    rule.render_inline(rendered)
    assert _dedented(rendered.text()) in _dedented(artifacts.cuda)
    helper = artifacts.cuda[artifacts.cuda.index(f"static bool {name}_aligned("):]
    helper = helper[:helper.index("\n}\n") + 3]
    binary = build(harness(rule, pointers=("A", "B", "C"), helpers=_text(helper), symbols=launch.entries.all()),
                   tmp_path_factory.mktemp("choice"))
    names = [name for name, _ in bindings(rule)]
    operand = st.tuples(st.integers(0, 1 << 20).map(lambda a: (1 << 40) + a), st.integers(0, 4096),
                        st.integers(0, 1 << 20))

    @settings(max_examples=20, deadline=None)
    @given(operands=st.lists(st.tuples(operand, operand, operand), min_size=1, max_size=100))
    def check(operands):
        cases = [tuple(value for pointer, ld, stride in triple
                       for value in (pointer, ld, *((stride,) if launch.batched else ()))) for triple in operands]
        assert run(binary, cases) == [expected(rule, case, names) for case in cases]

    check()


def _text(text: str) -> Emitter:
    o = Emitter()
    o.lines(text)
    return o


def _dedented(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines())


@pytest.mark.parametrize("name", ["sgemm_h100", "sgemm_any", "checked_128x32"])
def test_the_stream_k_launch_the_launcher_prints_launches_as_python_does(tmp_path_factory, name):
    """LaunchPlan.stream_k_launch_rule (the split on SMs x resident blocks, then the prepare, stream-K and plain
    kernels' grids) as the launcher prints it, with the split's function it calls, against its evaluation."""
    artifacts = compile_path(ROOT / "specs" / f"{name}.gemm")
    launch, spec = artifacts.plan.launch, artifacts.spec
    alpha_beta = spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
    rule = launch.stream_k_launch_rule(alpha_beta, f"{name}_stream_k_split")
    rendered = Emitter()
    rule.render_inline(rendered)
    assert _dedented(rendered.text()) in _dedented(artifacts.cuda)
    split = Emitter()
    stream_k_split_rule(LAUNCHED_MIN_SAVED_K_TILES).render_function(
        split, f"{name}_stream_k_split", [f"long long {n}" for n in ("tiles", "k_tiles", "slots", "batch")], "int")
    # beta arrives as a float: the harness reads it as a whole number of 64ths
    beta = f"const long long beta = in[{len(rule.inputs) - 1}];"
    source = harness(rule, helpers=split)
    assert beta in source
    source = source.replace(beta, f"const float beta = (float)in[{len(rule.inputs) - 1}] / 64;")
    binary = build(source, tmp_path_factory.mktemp("launch"))
    names = [name for name, _ in bindings(rule)]

    @settings(max_examples=20, deadline=None)
    @given(cases=st.lists(st.tuples(st.integers(1, 10**5), st.integers(1, 2**20), st.integers(1, 200),
                                    st.integers(1, 8), *((st.integers(1, 300),) if launch.batched else ()),
                                    st.sampled_from([0, 32, 64, 96])), min_size=1, max_size=100))
    def check(cases):
        as_python = [case[:-1] + (case[-1] / 64,) for case in cases]
        assert run(binary, cases) == [expected(rule, case, names) for case in as_python]

    check()


ESTIMATE_HARNESS = r"""
#include <cstdio>
%(split)s
%(rule)s
int main() {
    long long v[48];
    for (;;) {
        for (int i = 0; i < 48; ++i)
            if (std::scanf("%%lld", &v[i]) != 1) return 0;
        const long long k_tile_cycles[4] = {v[8], v[9], v[10], v[11]};
        void (*const splits[3])(long long, long long, long long, long long, int*, int*) = {nullptr, launched, aligned};
        const %(name)s_member m = {v[0], v[1], v[2], v[3] != 0, true, false, splits[v[4]], v[5], v[6], k_tile_cycles,
                                   v[12], v[27], v[28], v[29] != 0, v[30], v[13], v[24], v[25], v[14], v[15], v[16],
                                   v[17], v[18], v[19], v[20], v[31], v[32], v[33], v[34], v[35], v[36] != 0,
                                   v[37] != 0, v[38] != 0, v[39], v[40], v[41], v[42], v[43], v[44], v[45], v[46],
                                   v[47]};
        long long compute = 0;
        const long long cycles = %(name)s_cycles(m, v[21], v[22], v[23], &compute);
        std::printf("%%lld %%lld\n", cycles, cycles < 0 ? -1 : compute);
    }
}
"""

MEMBERS = st.fixed_dictionaries({
    "tile": st.tuples(st.sampled_from([16, 32, 64, 128, 192, 256]), st.sampled_from([32, 64, 128, 256]),
                      st.sampled_from([8, 16, 32, 64])),
    "exact": st.booleans(), "split": st.sampled_from([0, 1, 2]), "sms": st.integers(1, 200),
    "k_tile_cycles": st.lists(st.integers(1, 10**6), min_size=1, max_size=4), "tile_cycles": st.integers(0, 10**5),
    "partial_cycles": st.integers(0, 10**5), "fixup_cycles": st.integers(0, 10**4), "call_cycles": st.integers(0, 10**5),
    "launch_cycles": st.integers(0, 20000), "hbm": st.integers(0, 40),
    "bytes": st.tuples(*[st.integers(1, 4)] * 3), "in_flight": st.integers(0, 8), "round_trip": st.integers(0, 2000),
    "narrow_tile_cycles": st.integers(0, 10**5), "c_align": st.sampled_from([1, 2, 4, 8]), "c_ld_is_n": st.booleans(),
    "narrow_store": st.sampled_from([0, 1, 6, 792]),
    # the L2 draw of a k-tile's bytes (0: fixed k-tile cycles), the padded copies, and the narrower kernels of a member
    # that reads misaligned operands itself
    "stage_bytes": st.sampled_from([0, 8192, 49152]), "k_tile_base": st.integers(0, 10**4),
    "k_tile_wait": st.integers(0, 500), "l2": st.integers(1, 6000), "l2_block": st.integers(0, 128),
    "pads": st.booleans(), "a_ld_is_k": st.booleans(), "b_ld_is_k": st.booleans(),
    "align": st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8])),
    "pad_call": st.integers(0, 20000), "pad_bytes": st.integers(1, 3000), "narrow_percent": st.integers(100, 900),
    "scalar_percent": st.integers(100, 900), "scalar_k_tile": st.integers(0, 5000),
    "scalar_align": st.tuples(st.sampled_from([1, 2]), st.sampled_from([1, 2]))})
EXTENTS = st.one_of(st.integers(1, 5000), st.integers(1, 2**31 - 257), st.sampled_from([64, 128, 4096, 65536]))


def test_a_familys_cycles_in_c_are_the_cycle_models(tmp_path):
    """cycles.estimate_rule as a family's .cu prints it (NAME_cycles, with the saturating helpers and the member
    table's struct), on members of random figures, against `estimate`, up to shapes that saturate at CYCLE_CAP."""
    from gemmdsl.cycles import MemberModel, estimate
    from gemmdsl.family import compile_family_path

    family = compile_family_path(ROOT / "specs" / "sgemm_family.gemmf")
    name = family.name
    rule = "".join(re.search(pattern, family.cuda, re.M | re.S).group(0) for pattern in (
        rf"^struct {name}_member .*?^}};\n",
        rf"^static const long long {name}_CYCLE_CAP.*?^static long long {name}_cycles\(.*?^}}\n"))
    split = Emitter()
    for c_name, floor, aligned in (("launched", LAUNCHED_MIN_SAVED_K_TILES, False), ("aligned", 0, True)):
        stream_k_split_rule(floor, aligned).render_function(
            split, c_name, [f"long long {n}" for n in ("tiles", "k_tiles", "slots", "batch")], "int")
    binary = build(ESTIMATE_HARNESS % {"split": split.text(), "rule": rule, "name": name}, tmp_path)

    @settings(max_examples=25, deadline=None)
    @given(cases=st.lists(st.tuples(MEMBERS, EXTENTS, EXTENTS, EXTENTS), min_size=1, max_size=60))
    def check(cases):
        rows, want = [], []
        for member, m, n, k in cases:
            cycles = (member["k_tile_cycles"] * 4)[:4]
            rows.append((*member["tile"], int(member["exact"]), member["split"], member["sms"],
                         len(member["k_tile_cycles"]), 0, *cycles, member["tile_cycles"], member["partial_cycles"],
                         member["launch_cycles"], member["hbm"], *member["bytes"], member["in_flight"],
                         member["round_trip"], m, n, k, member["fixup_cycles"], member["call_cycles"], 0,
                         member["narrow_tile_cycles"], member["c_align"], int(member["c_ld_is_n"]),
                         member["narrow_store"], member["stage_bytes"], member["k_tile_base"],
                         member["k_tile_wait"], member["l2"], member["l2_block"], int(member["pads"]),
                         int(member["a_ld_is_k"]), int(member["b_ld_is_k"]), *member["align"], member["pad_call"],
                         member["pad_bytes"], member["narrow_percent"], member["scalar_percent"],
                         member["scalar_k_tile"], *member["scalar_align"]))
            model = MemberModel("m", member["tile"], member["exact"], member["split"] > 0, member["sms"],
                                len(member["k_tile_cycles"]), tuple(member["k_tile_cycles"]),
                                tile_cycles=member["tile_cycles"], partial_cycles=member["partial_cycles"],
                                fixup_cycles=member["fixup_cycles"], call_cycles=member["call_cycles"],
                                launch_cycles=member["launch_cycles"],
                                min_saved_k_tiles=LAUNCHED_MIN_SAVED_K_TILES if member["split"] == 1 else 0,
                                aligned_split=member["split"] == 2, hbm_bytes_per_clock=member["hbm"],
                                element_bytes=member["bytes"], in_flight_k_tiles=member["in_flight"],
                                round_trip_cycles=member["round_trip"],
                                narrow_tile_cycles=member["narrow_tile_cycles"], c_align=member["c_align"],
                                c_ld_is_n=member["c_ld_is_n"], narrow_store_bytes_per_clock=member["narrow_store"],
                                stage_bytes=member["stage_bytes"], k_tile_base_cycles=member["k_tile_base"],
                                k_tile_wait_cycles=member["k_tile_wait"], l2_bytes_per_clock=member["l2"],
                                l2_block_bytes_per_clock=member["l2_block"], pads=member["pads"],
                                a_ld_is_k=member["a_ld_is_k"], b_ld_is_k=member["b_ld_is_k"],
                                a_align=member["align"][0], b_align=member["align"][1],
                                pad_call_cycles=member["pad_call"], pad_bytes_per_clock=member["pad_bytes"],
                                narrow_percent=member["narrow_percent"], scalar_percent=member["scalar_percent"],
                                scalar_k_tile_cycles=member["scalar_k_tile"],
                                a_scalar_align=member["scalar_align"][0], b_scalar_align=member["scalar_align"][1])
            figures = estimate(model, m, n, k)
            want.append(f"{figures.cycles} {figures.compute_cycles}" if figures.accepted else "-1 -1")
        assert run(binary, rows) == want

    check()


@pytest.mark.parametrize("tile", [(128, 256), (64, 128)])
def test_the_grouped_launch_and_walk_the_kernel_prints_are_grouped_schedules(tmp_path_factory, tile):
    """grouped_schedule's grid rule (the launcher's blocks) and the cursor's group end and tile count (the
    kernel's), printed as paths/wgmma/grouped.py prints them, against their evaluation: offs that decrease or
    run past the rows included."""
    bm, bn = tile
    grid = grid_rule(bm, bn)
    grid_binary = build(harness(grid), tmp_path_factory.mktemp("grid"))
    walk = Rule("walk", ("off", "group_row", "rows", "BM", "n_tiles"),
                (Let("group_end", group_end(Var("off"), Var("group_row"))),
                 Let("group_tiles", group_tiles(Var("group_row"), Var("group_end")))))
    walk_binary = build(harness(walk), tmp_path_factory.mktemp("walk"))
    extent = st.integers(1, 2**31 - 257)

    @settings(max_examples=20, deadline=None)
    @given(grids=st.lists(st.tuples(extent, extent, st.integers(1, 65535), st.integers(1, 200)), min_size=1,
                          max_size=50),
           walks=st.lists(st.tuples(st.integers(-5, 10**6), st.integers(0, 10**6), st.integers(0, 10**6),
                                    st.sampled_from([64, 128, 256]), st.integers(1, 64)), min_size=1, max_size=50))
    def check(grids, walks):
        walks = [(off, min(row, rows), rows, b, n) for off, row, rows, b, n in walks]  # a cursor's row <= rows
        assert run(grid_binary, grids) == [expected(grid, case, ["bound", "one_wave", "blocks"]) for case in grids]
        assert run(walk_binary, walks) == [expected(walk, case, ["group_end", "group_tiles"]) for case in walks]
        assert [grid.evaluate(dict(zip(grid.inputs, case)))["blocks"] for case in grids] == \
            [max(1, min(sms, (-(-m // bm) + g) * -(-n // bn))) for m, n, g, sms in grids]

    check()


@pytest.mark.parametrize("name", ["hgemm_h100", "sgemm_3xtf32_h100_sk", "hgemm_h100_batched"])
def test_the_tma_launchers_grid_is_the_launch_plans(tmp_path_factory, name):
    """LaunchPlan.persistent_grid_rule as the TMA launcher prints it (one wave; stream-K's split and its blocks;
    a batch's tiles), with the split it calls, against grid_for's evaluation of it."""
    path = ROOT / "specs" / f"{name}.gemm"
    if not path.exists():
        pytest.skip(f"no {name}.gemm")
    artifacts = compile_path(path)
    launch = artifacts.plan.launch
    rule = launch.persistent_grid_rule(f"{name}_stream_k_split")
    rendered = Emitter()
    rule.render_inline(rendered)
    assert _dedented(rendered.text()) in _dedented(artifacts.cuda)
    split = Emitter()
    stream_k_split_rule(0, aligned=True).render_function(
        split, f"{name}_stream_k_split", [f"long long {n}" for n in ("tiles", "k_tiles", "slots", "batch")], "int")
    binary = build(harness(rule, helpers=split), tmp_path_factory.mktemp("grid"))
    names = [name for name, _ in bindings(rule)]

    @settings(max_examples=20, deadline=None)
    @given(cases=st.lists(st.tuples(st.integers(1, 2**31 - 1), st.integers(1, 2**31 - 257), st.integers(0, 300)),
                          min_size=1, max_size=100))
    def check(cases):
        assert run(binary, cases) == [expected(rule, case, names) for case in cases]

    check()


def test_the_k_0_kernels_grid_is_scale_c_grid(tmp_path):
    """launch_plan.SCALE_C_GRID (the K = 0 kernel's blocks, at most SCALE_C_MAX_BLOCKS) as the launchers print
    it, against its evaluation, up to the largest M x N."""
    binary = build(harness(SCALE_C_GRID), tmp_path)
    names = [name for name, _ in bindings(SCALE_C_GRID)]
    cases = [(m, n) for m in (1, 2, 255, 256, 257, 4096, 2**31 - 1) for n in (1, 3, 1000, 2**20, 2**31 - 1)]
    assert run(binary, cases) == [expected(SCALE_C_GRID, case, names) for case in cases]
    assert [SCALE_C_GRID.evaluate({"M": m, "N": n})["scale_blocks"] for m, n in cases] == \
        [min(-(-(m * n) // SCALE_C_THREADS), SCALE_C_MAX_BLOCKS) for m, n in cases]
    assert _dedented(_rendered(SCALE_C_GRID)) in _dedented(compile_path(ROOT / "specs" / "sgemm_v1.gemm").cuda)


def _rendered(rule: Rule) -> str:
    o = Emitter()
    rule.render_inline(o)
    return o.text()


@pytest.mark.parametrize("block_tile, batched", [((64, 64, 8), False), ((128, 32, 16), True)])
def test_the_interior_split_the_launcher_prints_pays_where_python_says(tmp_path_factory, block_tile, batched):
    """schedule.interior_rules (a whole tile and k-tile; then enough interior waves per edge strip) as the checked
    launchers print them, against their evaluation and interior_split_pays."""
    has_interior, pays = interior_rules(block_tile, batched)
    whole = Rule("interior", ("M", "N", "K", *pays.inputs[2:]), has_interior.steps + pays.steps)
    binary = build(harness(whole), tmp_path_factory.mktemp("interior"))
    names = [name for name, _ in bindings(whole)]
    extent = st.one_of(st.integers(1, 5000), st.integers(1, 2**31 - 257))

    @settings(max_examples=20, deadline=None)
    @given(cases=st.lists(st.tuples(extent, extent, extent, *((st.integers(1, 65535),) if batched else ()),
                                    st.integers(1, 200), st.integers(1, 8)), min_size=1, max_size=100))
    def check(cases):
        assert run(binary, cases) == [expected(whole, case, names) for case in cases]
        for case in cases:
            m, n, k, *rest = case
            batch = rest[0] if batched else 1
            values = whole.evaluate(dict(zip(whole.inputs, case)))
            assert interior_split_pays(block_tile, m, n, k, rest[-2] * rest[-1], batch) == \
                bool(values["has_interior"] and values["interior_pays"])

    check()

"""The prelude of a .cu (gemmdsl/emit/prelude.py): each device helper defined once, and only where the file calls it."""
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl.emit.prelude import plan_prelude, split_helpers
from gemmdsl.emitter import Emitter

ROOT = Path(__file__).resolve().parent.parent
GENERATED = sorted((ROOT / "generated").glob("*.cu"))
FAMILIES = [path for path in GENERATED if (ROOT / "specs" / f"{path.stem}.gemmf").exists()]
HELPER = re.compile(r"^\s*static __device__ __forceinline__ [^(]*?\b(\w+)\(", re.M)


def code_of(cuda: str) -> str:
    """C text without its comments and string literals (the inline PTX)."""
    return re.sub(r'"(?:\\.|[^"\\\n])*"|//[^\n]*', " ", cuda)


def body(text: str, helpers: list[str], guard=None) -> Emitter:
    """An emitter whose text is `text` and whose parts offered `helpers`."""
    o = Emitter()
    o.helper_guard = guard
    with o.helpers():
        for helper in helpers:
            o.lines(helper)
            o.line()
    o.lines(text)
    return o


def test_a_helper_block_splits_into_definitions_with_their_comments():
    text = '''
// Spin until the phase completes.
static __device__ __forceinline__ void wait(unsigned barrier)
{
    asm volatile("{\\n" "WAIT_%=:\\n" "}\\n" :: "r"(barrier));
}
struct fuse_m { float bias; };
template <int N>
static __device__ __forceinline__ void drain() { asm volatile("x %0;" :: "n"(N)); }'''
    helpers = split_helpers(text.strip("\n").split("\n"), None)
    assert [h.name for h in helpers] == ["wait", "fuse_m", "drain"]
    assert helpers[0].text.startswith("// Spin") and helpers[0].text.endswith("}")
    assert helpers[2].text.startswith("template <int N>")


def test_text_that_is_no_definition_is_refused():
    with pytest.raises(ValueError, match="no whole definition"):
        split_helpers(["static __device__ int f()", "{", "    return 0;"], None)


def test_members_share_what_they_write_alike_and_keep_what_they_write_differently():
    first = body("kernel() { shared(); tile(); }", ["static __device__ int shared() { return 1; }",
                                                    "static __device__ int layout() { return 8; }",
                                                    "static __device__ int tile() { return layout(); }",
                                                    "static __device__ int dead() { return 0; }"])
    second = body("kernel() { shared(); tile(); }", ["static __device__ int shared() { return 1; }",
                                                     "static __device__ int layout() { return 16; }",
                                                     "static __device__ int tile() { return layout(); }"])
    prelude = plan_prelude([first, second])
    assert [h.name for h in prelude.shared] == ["shared"]
    assert [[h.name for h in own] for own in prelude.local] == [["layout", "tile"], ["layout", "tile"]]
    assert "8" in prelude.local[0][0].text and "16" in prelude.local[1][0].text


def test_a_helper_written_alike_under_two_guards_is_for_every_pass():
    helper = "static __device__ int to_tf32(float x) { return 0; }"
    prelude = plan_prelude([body("k() { to_tf32(1); }", [helper]),
                            body("k() { to_tf32(1); }", [helper], guard=("#if defined(X)", "X only"))])
    assert [(h.name, h.guard) for h in prelude.shared] == [("to_tf32", None)]


NAMES = [f"h{i}" for i in range(6)]


@st.composite
def families(draw):
    """Bodies whose helpers come in two versions per name; a version's calls (helpers of higher numbers) are fixed,
    as a text fixes what it calls, and a body offers every helper its helpers call, as a member does."""
    calls = {(name, version): draw(st.sets(st.sampled_from(NAMES[index + 1:]))) if index + 1 < len(NAMES) else set()
             for index, name in enumerate(NAMES) for version in (0, 1)}
    bodies = []
    for _ in range(draw(st.integers(1, 4))):
        chosen = {name: draw(st.sampled_from((0, 1))) for name in NAMES}
        offered, waiting = set(), list(draw(st.sets(st.sampled_from(NAMES))))
        while waiting:
            name = waiting.pop()
            if name not in offered:
                offered.add(name)
                waiting += calls[name, chosen[name]]
        texts = {}
        for name in offered:
            sum_of_calls = " + ".join(f"{callee}()" for callee in sorted(calls[name, chosen[name]])) or "0"
            texts[name] = f"static __device__ int {name}() {{ return {sum_of_calls}; }}  // v{chosen[name]}"
        called = draw(st.sets(st.sampled_from(sorted(offered)))) if offered else set()
        bodies.append((texts, called))
    return bodies


@settings(max_examples=200, deadline=None)
@given(families())
def test_each_body_sees_its_own_version_of_what_it_calls_and_nothing_else_is_defined(bodies):
    emitters = [body(f"kernel() {{ {' '.join(f'{name}();' for name in sorted(called))} }}", list(texts.values()))
                for texts, called in bodies]
    prelude = plan_prelude(emitters)
    shared = {h.name: h.text for h in prelude.shared}
    assert len(shared) == len(prelude.shared)
    reachable_anywhere = set()
    for (texts, called), own in zip(bodies, prelude.local):
        mine = {h.name: h.text for h in own}
        assert len(mine) == len(own) and not mine.keys() & shared.keys()
        reachable, waiting = set(), list(called)
        while waiting:
            name = waiting.pop()
            if name not in reachable:
                reachable.add(name)
                waiting += re.findall(r"(h\d)\(\)", texts[name].split("{", 1)[1])
        seen = {name: mine.get(name, shared.get(name)) for name in reachable}
        assert seen == {name: texts[name] for name in reachable}
        assert mine.keys() <= reachable
        reachable_anywhere |= reachable
    assert shared.keys() <= reachable_anywhere
    for helper in prelude.shared:  # a shared helper calls only shared ones
        assert set(re.findall(r"(h\d)\(\)", helper.text)) <= shared.keys()


@pytest.mark.parametrize("path", GENERATED, ids=lambda p: p.stem)
def test_every_helper_a_generated_file_defines_is_called_there(path):
    code = code_of(path.read_text())
    definitions = HELPER.findall(code)
    for name in set(definitions):
        assert len(re.findall(rf"\b{name}\b", code)) > definitions.count(name), \
            f"{path.name}: {name} is defined but never called (nvcc warns)"


@pytest.mark.parametrize("path", FAMILIES, ids=lambda p: p.stem)
def test_a_family_file_defines_a_helper_its_members_write_alike_once(path):
    cuda = path.read_text()
    assert cuda.count("void mbarrier_init(") <= 1
    definitions = HELPER.findall(code_of(cuda))
    repeated = {name for name in definitions if definitions.count(name) > 1}
    assert repeated <= {"a_smem_offset", "b_smem_offset"}  # the members' own tilings


@pytest.mark.parametrize("path", GENERATED, ids=lambda p: p.stem)
def test_the_group_raster_is_one_function(path):
    assert code_of(path.read_text()).count("const int blocks_per_group =") <= 1

"""Fuzzing the front end: whatever the input, the result is a KernelSpec or a CompileError.

A CompileError's diagnostics must all have a position (line and column >= 1) and render;
any other exception is a bug. Budget: a few seconds per test, ~20 s in all.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemmdsl import ir
from gemmdsl.frontend import load
from gemmdsl.source import CompileError, Severity, SourceFile

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {path.stem: path.read_text() for path in (ROOT / "specs" / "sgemm_v1.gemm", ROOT / "specs" / "sgemm_v3.gemm",
                                                     ROOT / "tests" / "fixtures" / "hgemm_mma.gemm")}
FUZZ = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])

# Lexical pieces of the language, to build inputs that get past the lexer more often than noise.
TOKENS = re.compile(r"//[^\n]*|#[^\n]*|\s+|[0-9]+(?:x[0-9]+)+|[0-9]+|[A-Za-z_][A-Za-z0-9_]*|.", re.S)
WORDS = ["gemm", "problem", "target", "block", "threads", "smem", "load", "pipeline", "budget", "a", "b", "c",
         "tile", "raster", "warps", "lanes", "micro", "repeat", "order", "pad", "swizzle", "read", "vector",
         "stages", "copy", "fragments", "registers", "blocks_per_sm", "f32", "row", "col", "mk", "km", "kn",
         "nk", "xor", "group", "zigzag", "block", "warp", "cp_async", "single", "double", "sm_80", "sm_90",
         "{", "}", ";", ":", "(", ")", ",", "0", "1", "4", "128x128x8", "4x8", " ", "\n", "//", "#",
         "mma", "shape", "precision", "m16n8k16", "m16n8k8", "tf32", "3xtf32", "ldmatrix", "f16", "bf16"]


def check(text: str, path: str = "fuzz.gemm") -> ir.KernelSpec | CompileError:
    """Run the front end; fail on anything but a spec or a well-formed CompileError."""
    return check_source(SourceFile(path, text))


def check_source(source: SourceFile) -> ir.KernelSpec | CompileError:
    try:
        spec, warnings = load(source)
    except CompileError as error:
        assert error.diagnostics, "a CompileError without diagnostics"
        assert any(d.severity is Severity.ERROR for d in error.diagnostics)
        for d in error.diagnostics:
            assert d.span.line >= 1 and d.span.column >= 1, d
            assert isinstance(d.message, str) and d.message
        error.render()
        return error
    assert isinstance(spec, ir.KernelSpec)
    for d in warnings:
        assert d.severity is not Severity.ERROR
        assert d.span.line >= 1 and d.span.column >= 1, d
        d.render(source)
    return spec


def tokens(text: str) -> list[str]:
    return TOKENS.findall(text)


# --- the examples, cut and shuffled -----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_truncation(name):
    text = EXAMPLES[name]
    assert isinstance(check(text), ir.KernelSpec)
    for end in range(len(text)):
        result = check(text[:end])
        if text[:end].rstrip() != text.rstrip():
            assert isinstance(result, CompileError), repr(text[:end])


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_suffix(name):
    text = EXAMPLES[name]
    for start in range(1, len(text), 3):
        check(text[start:])


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_single_token_deletion_and_duplication(name):
    parts = tokens(EXAMPLES[name])
    assert "".join(parts) == EXAMPLES[name]
    for index in range(len(parts)):
        check("".join(parts[:index] + parts[index + 1:]))
        check("".join(parts[:index + 1] + parts[index:]))


@st.composite
def mutated(draw, name_strategy=st.sampled_from(sorted(EXAMPLES))):
    parts = tokens(EXAMPLES[draw(name_strategy)])
    for _ in range(draw(st.integers(1, 6))):
        if not parts:
            break
        i = draw(st.integers(0, len(parts) - 1))
        op = draw(st.sampled_from(["swap", "delete", "duplicate", "replace", "insert"]))
        if op == "swap":
            j = draw(st.integers(0, len(parts) - 1))
            parts[i], parts[j] = parts[j], parts[i]
        elif op == "delete":
            del parts[i]
        elif op == "duplicate":
            parts.insert(i, parts[i])
        elif op == "replace":
            parts[i] = draw(st.sampled_from(WORDS))
        else:
            parts.insert(i, draw(st.sampled_from(WORDS)))
    return "".join(parts)


@FUZZ
@given(mutated())
def test_token_mutations(text):
    check(text)


# --- noise ------------------------------------------------------------------------------------


@settings(deadline=None, max_examples=150)
@given(st.text(max_size=300))
def test_random_text(text):
    check(text)


@settings(deadline=None, max_examples=150)
@given(st.lists(st.sampled_from(WORDS), max_size=80).map(" ".join))
def test_random_token_soup(text):
    check(text)


@settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300) | st.sampled_from(list(EXAMPLES.values())).map(str.encode).flatmap(
    lambda data: st.integers(0, len(data)).flatmap(
        lambda i: st.binary(min_size=1, max_size=4).map(lambda junk: data[:i] + junk + data[i:]))))
def test_random_bytes_from_a_file(tmp_path, data):
    path = tmp_path / "fuzz.gemm"
    path.write_bytes(data)
    try:
        source = SourceFile.read(path)
    except CompileError as error:
        for d in error.diagnostics:
            assert d.span.line >= 1 and d.span.column >= 1
        error.render()
        return
    check_source(source)


# --- huge numbers and deep nesting ------------------------------------------------------------


NUMBERED = re.compile(r"[0-9]+")


@FUZZ
@given(st.sampled_from(sorted(EXAMPLES)), st.data())
def test_huge_numbers(name, data):
    text = EXAMPLES[name]
    numbers = list(NUMBERED.finditer(text))
    match = numbers[data.draw(st.integers(0, len(numbers) - 1))]
    value = data.draw(st.integers(0, 10 ** 30).map(str) | st.integers(1, 6000).map(lambda n: "9" * n)
                      | st.sampled_from(["0", "00000000000000000000000000001", "4294967296", "1048577"]))
    result = check(text[:match.start()] + value + text[match.end():])
    assert isinstance(result, (ir.KernelSpec, CompileError))


def test_huge_numbers_everywhere():
    for text in EXAMPLES.values():
        for value in ("99999999999999999999", "9" * 5000, "0", "18446744073709551617"):
            check(NUMBERED.sub(value, text))
    error = check(EXAMPLES["sgemm_v1"].replace("128x128x8", "99999999999999999999x8x8"))
    assert isinstance(error, CompileError)
    assert "must be between 1 and" in error.diagnostics[0].message


@pytest.mark.parametrize("depth", [1, 10, 1000, 20000])
def test_deep_nesting(depth):
    base = EXAMPLES["sgemm_v3"]
    for text in ("{" * depth, "}" * depth, "(" * depth, ")" * depth,
                 "gemm x " + "{" * depth + "}" * depth,
                 base.replace("pad: 4;", "pad: " + "f(" * depth + "1" + ")" * depth + ";"),
                 base.replace("pad: 4;", "swizzle: " + "xor(" * depth + "1" + ", 2, 3)" * depth + ";"),
                 base.replace("pad: 4;", "pad: " + "(" * depth + ";"),
                 base.replace("smem b", "smem b " + "{ " * depth),
                 base.replace("}\n", "}\n" * depth, 1)):
        result = check(text)
        if depth > 1:
            assert isinstance(result, CompileError)


# --- structurally valid specs with random values: the validator and the layout -------------------


def _mostly(draw, good, anything):
    """Usually a sensible value, so that most specs get through to the deeper checks."""
    return draw(anything) if draw(st.integers(0, 15)) == 7 else draw(good)


@st.composite
def random_specs(draw):
    """Specs that always parse, with values that are usually sensible and sometimes not."""
    small = st.sampled_from([1, 2, 3, 4, 8, 16, 32, 64])
    any_pair = st.tuples(small, small)
    warps = _mostly(draw, st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 2), (2, 4), (8, 1), (4, 4), (8, 4)]), any_pair)
    lanes = _mostly(draw, st.sampled_from([(1, 32), (2, 16), (4, 8), (8, 4), (16, 2), (32, 1)]), any_pair)
    micro = _mostly(draw, st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8])), any_pair)
    repeat = _mostly(draw, st.sampled_from([(1, 1), (2, 2), (1, 2), (2, 1)]), any_pair)
    bm = warps[0] * lanes[0] * micro[0] * repeat[0]
    bn = warps[1] * lanes[1] * micro[1] * repeat[1]
    bm, bn = _mostly(draw, st.just((bm, bn)), st.tuples(st.integers(1, 512), st.integers(1, 512)))
    bk = draw(st.sampled_from([1, 2, 4, 6, 8, 16, 32, 64]))
    stages = _mostly(draw, st.integers(1, 4), st.integers(0, 8))
    copy = "registers" if stages <= 2 and draw(st.booleans()) else "cp_async"
    copy = _mostly(draw, st.just(copy), st.sampled_from(["registers", "cp_async"]))
    dims = "{0[0]}x{0[1]}".format
    lines = [
        "gemm " + _mostly(draw, st.just("k"), st.sampled_from(["int", "x" * 70, "threadIdx"])) + " {",
        "  problem { a: f32 " + _mostly(draw, st.just("row"), st.just("col")) + "; epilogue: "
        + draw(st.sampled_from(["store", "alpha_beta"])) + "; }",
        "  target " + draw(st.sampled_from(["sm_80", "sm_86", "sm_89", "sm_90"])) + ";",
        f"  block {{ tile: {bm}x{bn}x{bk}; raster: "
        + _mostly(draw, st.sampled_from(["row", "col", "group(4)"]), st.just("group(0)")) + "; }",
        f"  threads {{ warps: {dims(warps)}; lanes: {dims(lanes)} "
        + _mostly(draw, st.sampled_from(["row", "col"]), st.just("zigzag")) + f"; micro: {dims(micro)}; "
        f"repeat: {dims(repeat)} " + draw(st.sampled_from(["block", "warp"])) + "; }",
    ]
    for operand, orders, wrong in (("a", ["mk", "km"], "kn"), ("b", ["kn", "nk"], "mk")):
        entries = ["order: " + _mostly(draw, st.sampled_from(orders), st.just(wrong)) + ";"]
        if draw(st.booleans()):
            entries.append(f"pad: {draw(st.integers(0, 9))};")
        if draw(st.integers(0, 3)) == 0:
            good = st.integers(1, 3).flatmap(lambda b: st.tuples(st.just(b), st.integers(0, 4), st.integers(b, 6)))
            bad = st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9))
            entries.append("swizzle: xor({}, {}, {});".format(*_mostly(draw, good, bad)))
        if draw(st.integers(0, 3)) == 0:
            entries.append(f"read: {draw(st.sampled_from([32, 64, 128]))};")
        lines.append(f"  smem {operand} {{ {' '.join(entries)} }}")
        if draw(st.booleans()):
            lines.append(f"  load {operand} {{ vector: {draw(st.sampled_from([1, 2, 4]))}; }}")
    lines.append(f"  pipeline {{ stages: {stages}; copy: {copy}; "
                 f"fragments: {draw(st.sampled_from(['single', 'double']))}; }}")
    if draw(st.integers(0, 3)) == 0:
        registers = _mostly(draw, st.integers(32, 255), st.integers(1, 300))
        blocks = _mostly(draw, st.integers(1, 4), st.integers(1, 40))
        lines.append(f"  budget {{ registers: {registers}; blocks_per_sm: {blocks}; }}")
    lines.append("}")
    return "\n".join(lines) + "\n"


@settings(deadline=None, max_examples=300)
@given(random_specs())
def test_random_valid_syntax_specs(text):
    result = check(text)
    if isinstance(result, CompileError):
        # Every semantic error points into the text, at a line that exists.
        lines = text.count("\n") + 1
        for d in result.diagnostics:
            assert d.span.line <= lines

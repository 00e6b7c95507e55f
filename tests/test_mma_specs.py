"""Random valid tensor-core specs (tests/spec_strategies.py): the front end accepts every one, and
breaking the tile hierarchy of one gives exactly the tile-product error, at the mma repeat."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spec_strategies import mma_spec_texts

from gemmdsl import ir
from gemmdsl.frontend import load
from gemmdsl.source import CompileError, Severity, SourceFile

FILE = "random_mma.gemm"
REPEAT = re.compile(r"(mma +\{ shape: \w+; repeat: )(\d+)x(\d+)")


@settings(deadline=None, max_examples=200)
@given(mma_spec_texts())
def test_every_drawn_mma_spec_validates(text):
    spec, diagnostics = load(SourceFile(FILE, text))
    assert spec.mma is not None
    assert not [d for d in diagnostics if d.severity is Severity.ERROR]
    for operand in (ir.Operand.A, ir.Operand.B):
        assert spec.smem(operand).read is not None and spec.smem(operand).read_bits is None


@settings(deadline=None, max_examples=100)
@given(mma_spec_texts(), st.sampled_from(("m", "n")))
def test_a_broken_tile_product_is_reported_at_the_repeat(text, axis):
    spec, _ = load(SourceFile(FILE, text))
    match = REPEAT.search(text)
    repeat = ir.Pair(int(match.group(2)), int(match.group(3)))
    broken = ir.Pair(repeat.m + 1, repeat.n) if axis == "m" else ir.Pair(repeat.m, repeat.n + 1)
    text = text[:match.start(2)] + str(broken) + text[match.end(3):]
    with pytest.raises(CompileError) as info:
        load(SourceFile(FILE, text))
    (error,) = [d for d in info.value.diagnostics if d.severity is Severity.ERROR]
    warps, shape = getattr(spec.threads.warps, axis), getattr(spec.mma.shape, axis)
    extent = spec.block.m if axis == "m" else spec.block.n
    product = warps * getattr(broken, axis) * shape
    assert error.message == (f"warps x repeat x shape along {axis} is {warps}*{getattr(broken, axis)}*{shape} = "
                             f"{product}, but the block tile's {'BM' if axis == 'm' else 'BN'} is {extent}")
    line = text.count("\n", 0, match.start(2)) + 1
    column = match.start(2) - text.rfind("\n", 0, match.start(2))
    assert (error.span.line, error.span.column) == (line, column)
    assert error.hint.startswith(f"use `repeat: {repeat}` to cover")

"""The shape sets of `bench --shapes` (gemmdsl/shape_sets.py): the random draw and the shipped lists by name."""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl.shape_sets import (MAX_OPERAND, MAX_PRODUCT, MAX_RANDOM_COUNT, MAX_SIZE, MIN_PRODUCT, SHAPES_DIR,
                                RandomShapes, in_bounds, named_lists, parse_random, sample_shapes, shape_source)

ROOT = Path(__file__).resolve().parent.parent
seeds = st.integers(0, 2 ** 64)


# --- the random draw ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 40), seed=seeds)
def test_every_drawn_shape_is_within_the_bounds_and_the_draw_is_count_distinct_shapes(count, seed):
    shapes = sample_shapes(count, seed)
    assert len(shapes) == count == len(set(shapes))
    for m, n, k in shapes:
        assert all(isinstance(size, int) and 1 <= size <= MAX_SIZE for size in (m, n, k))
        assert MIN_PRODUCT <= m * n * k <= MAX_PRODUCT
        assert max(m * k, k * n, m * n) <= MAX_OPERAND


@settings(max_examples=30, deadline=None)
@given(count=st.integers(1, 40), seed=seeds)
def test_a_seed_gives_the_same_shapes_every_time_and_a_longer_draw_extends_a_shorter(count, seed):
    shapes = sample_shapes(count, seed)
    assert sample_shapes(count, seed) == shapes
    assert sample_shapes(count + 5, seed)[:count] == shapes


@settings(max_examples=30, deadline=None)
@given(seeds=st.lists(seeds, min_size=2, max_size=2, unique=True))
def test_different_seeds_draw_different_shapes(seeds):
    first, second = (sample_shapes(10, seed) for seed in seeds)
    assert first != second


def test_a_draw_spans_the_sizes_log_uniformly():
    """Of 2,000 shapes, every dimension reaches both ends of the range, and every octave from 4 to 8191 holds
    some of them (log-uniform would give each 1/15; the bounds on M x N x K thin out the small sizes)."""
    shapes = sample_shapes(2000, 1)
    for dim in range(3):
        sizes = [shape[dim] for shape in shapes]
        assert min(sizes) == 1 and max(sizes) > MAX_SIZE // 2
        octaves = [0] * 16
        for size in sizes:
            octaves[int(math.log2(size))] += 1
        assert min(octaves[2:13]) > 0.03 * len(sizes)  # uniform would be 1/15.0 = 6.7%
    assert all(in_bounds(shape) for shape in shapes)


@pytest.mark.parametrize("text, message", [
    ("random:", "expected random:COUNT:SEED"),
    ("random:10", "expected random:COUNT:SEED"),
    ("random:10:1:2", "expected random:COUNT:SEED"),
    ("random:ten:1", "COUNT must be a whole number from 1 to 100,000"),
    ("random:0:1", "COUNT must be a whole number from 1 to 100,000"),
    (f"random:{MAX_RANDOM_COUNT + 1}:1", "COUNT must be"),
    ("random:1.5:1", "COUNT must be"),
    ("random:10:-1", "SEED must be a whole number of 0 or more"),
    ("random:10:", "SEED must be"),
    ("random:10:x", "SEED must be"),
])
def test_a_malformed_random_source_says_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=re.escape(f"bad shape source {text!r}: {message}")):
        shape_source(text)


def test_random_sources_parse():
    assert parse_random("random:200:7") == RandomShapes(200, 7)
    assert shape_source("RANDOM:3:0") == RandomShapes(3, 0)
    assert RandomShapes(3, 0).shapes() == sample_shapes(3, 0)


# --- named lists and files -------------------------------------------------------------------


def test_a_shipped_list_is_named_by_its_stem_and_a_file_that_exists_wins(tmp_path, monkeypatch):
    assert {"default", "decode"} <= set(named_lists())
    assert shape_source("default") == SHAPES_DIR / "default.txt"
    assert shape_source(str(SHAPES_DIR / "default.txt")) == SHAPES_DIR / "default.txt"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "default").write_text("64\n")
    assert shape_source("default") == Path("default")


def test_an_unknown_source_names_the_choices():
    choices = r"nowhere\.txt: no such shape list: .*a shipped list \(decode, default.*\) or random:COUNT:SEED"
    with pytest.raises(ValueError, match=choices):
        shape_source("nowhere.txt")


def test_bench_refuses_a_malformed_source_before_it_compiles_anything():
    done = subprocess.run([sys.executable, "-m", "gemmdsl.cli", "bench", str(ROOT / "specs" / "sgemm_v3.gemm"),
                           "--shapes", "random:5"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "error: bad shape source 'random:5': expected random:COUNT:SEED" in done.stderr

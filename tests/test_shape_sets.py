"""The shape sets of `bench --shapes` (gemmdsl/shape_sets.py): the random draw, the shipped lists by name, and
gemmdsl/shapes/models.txt against the model configurations it states."""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl.family_kernel import read_shapes
from gemmdsl.runtime import parse_sizes
from gemmdsl.shape_sets import (MAX_OPERAND, MAX_PRODUCT, MAX_RANDOM_COUNT, MAX_SIZE, MIN_PRODUCT, SHAPES_DIR,
                                RandomShapes, in_bounds, named_lists, parse_random, sample_shapes, shape_source)

ROOT = Path(__file__).resolve().parent.parent
MODELS = SHAPES_DIR / "models.txt"
TOKENS = (1, 8, 64, 512, 4096, 16384)
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
    assert {"default", "decode", "models"} <= set(named_lists())
    assert shape_source("models") == MODELS
    assert shape_source(str(MODELS)) == MODELS
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").write_text("64\n")
    assert shape_source("models") == Path("models")


def test_an_unknown_source_names_the_choices():
    choices = r"nowhere\.txt: no such shape list: .*a shipped list \(decode, decode_models, default.*\) or random:COUNT:SEED"
    with pytest.raises(ValueError, match=choices):
        shape_source("nowhere.txt")


def test_bench_refuses_a_malformed_source_before_it_compiles_anything():
    done = subprocess.run([sys.executable, "-m", "gemmdsl.cli", "bench", str(ROOT / "specs" / "sgemm_v3.gemm"),
                           "--shapes", "random:5"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "error: bad shape source 'random:5': expected random:COUNT:SEED" in done.stderr


# --- models.txt --------------------------------------------------------------------------------


def decoder_layers(hidden: int, mlp: int, heads: int, kv_heads: int, head_dim: int) -> set[tuple[int, int]]:
    """(out_features, in_features) of a Llama-style block: q, k, v, o, gate, up, down."""
    return {(heads * head_dim, hidden), (kv_heads * head_dim, hidden), (hidden, heads * head_dim),
            (mlp, hidden), (hidden, mlp)}


def encoder_layers(hidden: int, mlp: int) -> set[tuple[int, int]]:
    """BERT's and ViT's: query, key, value and the attention output, then the MLP."""
    return {(hidden, hidden), (mlp, hidden), (hidden, mlp)}


# The configurations the file's header states, as (out_features, in_features) of each linear layer.
MODEL_LAYERS = {
    "Llama 3 8B": decoder_layers(4096, 14336, 32, 8, 128),
    "Llama 3 70B": decoder_layers(8192, 28672, 64, 8, 128),
    "Mixtral 8x7B": decoder_layers(4096, 14336, 32, 8, 128) | {(8, 4096)},  # and the router
    "Qwen2.5 7B": decoder_layers(3584, 18944, 28, 4, 128),
    "GPT-2": {(3 * 768, 768), (768, 768), (3072, 768), (768, 3072), (50257, 768)},
    "BERT-large": encoder_layers(1024, 4096),
    "ViT-L/16": encoder_layers(1024, 4096),
}


def test_the_models_list_holds_every_layer_of_the_stated_configurations_at_every_token_count():
    shapes = read_shapes(MODELS)
    assert len(shapes) == len(set(shapes))  # equal N x K pairs once per token count
    expected = set().union(*MODEL_LAYERS.values())
    assert {m for m, _, _ in shapes} == set(TOKENS)
    for tokens in TOKENS:
        assert {(n, k) for m, n, k in shapes if m == tokens} == expected


def test_every_line_of_the_models_list_names_its_layers():
    text = MODELS.read_text()
    for model in MODEL_LAYERS:
        assert f"# - {model}" in text  # the configuration in the header
    for line in text.splitlines():
        if line and not line.startswith("#"):
            shape, comment = line.split("#", 1)
            [(m, n, k)] = parse_sizes(shape)
            named = [model for model in MODEL_LAYERS if model in comment]
            assert named and all((n, k) in MODEL_LAYERS[model] for model in named), line


def test_the_few_token_decode_list_is_every_model_weight_at_2_to_16_tokens():
    """decode_models.txt: each N x K of models.txt at 2, 4, 8, 12 and 16 tokens, and nothing else."""
    weights = {(n, k) for m, n, k in read_shapes(MODELS)}
    assert sorted(read_shapes(SHAPES_DIR / "decode_models.txt")) == sorted(
        (m, n, k) for m in (2, 4, 8, 12, 16) for n, k in weights)

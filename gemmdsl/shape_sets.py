"""The shape sets `gemmdsl bench --shapes` reads: the lists shipped in gemmdsl/shapes/, any file of the same
format, and shapes drawn at random.

    shape_source("models")          # gemmdsl/shapes/models.txt (a list's name without .txt)
    shape_source("my_shapes.txt")   # a file, one MxNxK a line
    shape_source("random:200:7")    # RandomShapes(200, 7): sample_shapes(200, 7)

The random draw stands for shapes no list anticipated: M, N and K each log-uniform from 1 to MAX_SIZE (each
octave of sizes as likely as another), kept (rejection sampling) where the problem has between MIN_PRODUCT
and MAX_PRODUCT multiply-adds (8 MFLOP, a launch's few microseconds, to 275 GFLOP, some milliseconds on an
H100) and no operand holds more than MAX_OPERAND elements (a GiB of f32 each). The shapes of one draw are
distinct, and a seed gives the same list on every run.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

Size = tuple[int, int, int]

SHAPES_DIR = Path(__file__).with_name("shapes")
DEFAULT_SHAPES = SHAPES_DIR / "default.txt"

RANDOM_PREFIX = "random:"
MIN_SIZE, MAX_SIZE = 1, 32768
MIN_PRODUCT, MAX_PRODUCT = 2 ** 22, 2 ** 37  # M x N x K
MAX_OPERAND = 2 ** 28  # elements of A (M x K), B (K x N) and C (M x N) each
MAX_RANDOM_COUNT = 100_000  # far more than any benchmark times; bounds the draw's time and memory
_WHOLE = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class RandomShapes:
    """`random:COUNT:SEED`."""

    count: int
    seed: int

    def shapes(self) -> list[Size]:
        return sample_shapes(self.count, self.seed)


def in_bounds(shape: Size) -> bool:
    """Whether the sampler keeps `shape`: its sizes, its multiply-adds and its operands within the bounds."""
    m, n, k = shape
    return (all(MIN_SIZE <= size <= MAX_SIZE for size in shape) and MIN_PRODUCT <= m * n * k <= MAX_PRODUCT
            and max(m * k, k * n, m * n) <= MAX_OPERAND)


def sample_shapes(count: int, seed: int) -> list[Size]:
    """`count` distinct shapes within the bounds, each size log-uniform from MIN_SIZE to MAX_SIZE."""
    rng = random.Random(seed)
    span = math.log(MAX_SIZE + 1)  # a size is floor(e^u), u uniform below log(MAX_SIZE + 1): each integer its share

    def size() -> int:
        return min(MAX_SIZE, int(math.exp(rng.uniform(0.0, span))))

    shapes: list[Size] = []
    seen: set[Size] = set()
    while len(shapes) < count:
        shape = (size(), size(), size())
        if in_bounds(shape) and shape not in seen:
            seen.add(shape)
            shapes.append(shape)
    return shapes


def parse_random(text: str) -> RandomShapes:
    """`random:COUNT:SEED` -> RandomShapes; ValueError saying what is wrong otherwise."""
    usage = f"expected {RANDOM_PREFIX}COUNT:SEED, such as {RANDOM_PREFIX}200:1"
    fields = text[len(RANDOM_PREFIX):].split(":")
    if len(fields) != 2:
        raise ValueError(f"bad shape source {text!r}: {usage}")
    count, seed = (field.strip() for field in fields)
    if not _WHOLE.fullmatch(count) or not 1 <= int(count) <= MAX_RANDOM_COUNT:
        raise ValueError(f"bad shape source {text!r}: COUNT must be a whole number from 1 to {MAX_RANDOM_COUNT:,}")
    if not _WHOLE.fullmatch(seed):
        raise ValueError(f"bad shape source {text!r}: SEED must be a whole number of 0 or more")
    return RandomShapes(int(count), int(seed))


def named_lists() -> list[str]:
    """The shipped lists, by the names `--shapes` takes: the files of gemmdsl/shapes/ without `.txt`."""
    return sorted(path.stem for path in SHAPES_DIR.glob("*.txt"))


def shape_source(text: str) -> RandomShapes | Path:
    """What `--shapes TEXT` names: a random draw, a file that exists, or a shipped list by name (a file of
    that name wins). ValueError where it is none of them."""
    if text.lower().startswith(RANDOM_PREFIX):
        return parse_random(text)
    path = Path(text)
    if path.exists():
        return path
    if text in named_lists():
        return SHAPES_DIR / f"{text}.txt"
    raise ValueError(f"{text}: no such shape list: give a file (one MxNxK a line), a shipped list "
                     f"({', '.join(named_lists())}) or {RANDOM_PREFIX}COUNT:SEED")

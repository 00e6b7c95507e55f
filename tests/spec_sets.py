"""The quick set of shipped specs: the tests that build or run each spec (nvcc, g++) take these by default and
every other spec only in the full run (`pytest --full`, or `pytest -m slow` for the rest alone).

Every feature that chooses what a kernel's code looks like is in the quick set at least once, per element
type and with or without a fuse chain: the element types, layouts, bounds, schedule, batch, epilogue, target
and narrow kernels of the spec's metadata (generated/NAME.json), and each `key: value` of its sections, sizes
aside (tile, warps, lanes, stages...: the value's numbers do not count). A family's features are its target,
batch, epilogue, layouts, fuse chain, measured table and its members' schedules. The set is a greedy cover of
those features, the smallest generated files first, so that a new spec with a new feature joins it.
"""
from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
GENERATED = ROOT / "generated"
# Keys whose values are sizes: their numbers are replaced by '#', which keeps `lanes: 4x8 row` apart from
# `lanes: 4x8 zigzag` and `swizzle: 128B` from `swizzle: xor(1, 4, 5)`.
SIZE_KEYS = frozenset({"tile", "warps", "lanes", "micro", "repeat", "shape", "pad", "unroll", "blocks_per_sm",
                       "raster", "swizzle", "stages", "vector", "warpgroups", "producer"})
SECTION = re.compile(r"^\s*(\w+(?: [ab])?)\s*\{([^{}]*)\}", re.MULTILINE)


def section_features(text: str) -> set[tuple[str, ...]]:
    """(section, key, value) of every `key: value;` of the spec's sections, sizes as '#'."""
    features = set()
    for section, body in SECTION.findall(re.sub(r"//[^\n]*", "", text)):
        if section == "problem":  # its features come from the metadata, as the compiler read them
            continue
        for item in filter(None, (" ".join(part.split()) for part in body.split(";"))):
            key, _, value = (part.strip() for part in item.partition(":"))
            value = value.replace(", ", ",")
            features.add((section, key, re.sub(r"\d+", "#", value) if key in SIZE_KEYS else value))
    return features


def spec_features(name: str) -> set[tuple]:
    metadata = json.loads((GENERATED / f"{name}.json").read_text())
    if "members" in metadata:
        fused = bool(metadata.get("fuse"))
        features = {("target", metadata["target"]), ("batch", metadata["batch"]), ("fuse", fused),
                    ("epilogue", metadata["epilogue"]), ("layouts", *metadata["layouts"].values()),
                    ("measured", "measured" in metadata)}
        features |= {("member schedule", member["schedule"]) for member in metadata["members"]}
        return {("family", feature) for feature in features}
    entries = metadata["entries"]
    features = {("dtypes", *metadata["dtypes"].values()), ("layouts", *metadata["layouts"].values()),
                ("bounds", metadata["bounds"]), ("schedule", metadata["schedule"]), ("batch", metadata["batch"]),
                ("epilogue", metadata["epilogue"]), ("target", metadata["target"]),
                ("narrow", bool(entries.get("narrow")))}
    features |= section_features((SPECS / f"{name}.gemm").read_text())
    group = (metadata["unit"], bool(metadata.get("fuse")))
    return {(group, feature) for feature in features}


@cache
def quick_set() -> frozenset[str]:
    """The names of the quick set's specs and families (see the module's docstring)."""
    paths = sorted(SPECS.glob("*.gemm")) + sorted(SPECS.glob("*.gemmf"))
    features = {path.stem: spec_features(path.stem) for path in paths}
    size = {path.stem: (GENERATED / f"{path.stem}.cu").stat().st_size for path in paths}
    uncovered = set().union(*features.values())
    chosen = set()
    while uncovered:
        best = min(features, key=lambda name: (-len(features[name] & uncovered), size[name], name))
        chosen.add(best)
        uncovered -= features[best]
    return frozenset(chosen)


def spec_params(paths: list[Path]) -> list:
    """`paths` as parameters named by their stems, those outside the quick set marked `slow`."""
    return [pytest.param(path, id=path.stem, marks=() if path.stem in quick_set() else pytest.mark.slow)
            for path in paths]


def spec_set_params(paths: list[Path]) -> list:
    """`paths` as two parameters for a test that takes a list of specs: the quick set's, and the others
    marked `slow`."""
    quick = [path for path in paths if path.stem in quick_set()]
    return [pytest.param(quick, id="quick"),
            pytest.param([path for path in paths if path not in quick], id="others", marks=pytest.mark.slow)]

"""The quick set of shipped specs: the tests that build or run each spec (nvcc, g++) take these by default and
every other spec only in the full run (`pytest --full`, or `pytest -m slow` for the rest alone).

For each instruction path (FMA, mma.sync, wgmma, dequant), every feature that the compiler reads from a spec's
problem and schedule is in the quick set at least once: the unit, element types, layouts, bounds,
schedule, batch, epilogue, target, fuse chain and narrow kernels (from generated/NAME.json). A family's
features are its target, batch, epilogue, layouts, fuse chain, measured table and its members'
schedules. The set is a greedy cover of those features, the smallest generated files first, so that a
new spec with a new feature joins it. What the quick set leaves out are the tilings (tile, warp and
lane shapes, staging, swizzles): golden files, the analysis tests and the random specs of the fuzz and
emulator tests cover those in every run, and the full run builds each shipped one.
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


def instruction_path(text: str) -> str:
    """wgmma (a spec with warpgroups), gemv (`mma { shape: gemv; }` or `gemv_m16n8k16`), mma.sync (another `mma`
    section), dequant (a `quant` section, quantized weights, without an `mma` section) or FMA."""
    code = re.sub(r"//[^\n]*", "", text)
    if re.search(r"\bwarpgroups\s*:", code):
        return "wgmma"
    if re.search(r"^\s*mma\s*\{\s*shape\s*:\s*gemv(_m16n8k16)?\s*;", code, re.MULTILINE):
        return "gemv"
    if re.search(r"^\s*mma\s*\{", code, re.MULTILINE):
        return "mma.sync"
    return "dequant" if re.search(r"^\s*quant\s+b\s*\{", code, re.MULTILINE) else "fma"


def spec_features(name: str) -> set[tuple]:
    if not (GENERATED / f"{name}.cu").exists():  # a new spec before its golden files: quick, and test_golden says why
        return {("no golden files", name)}
    metadata = json.loads((GENERATED / f"{name}.json").read_text())
    features = {("target", metadata["target"]), ("batch", metadata["batch"]), ("fuse", bool(metadata.get("fuse"))),
                ("epilogue", metadata["epilogue"]), ("layouts", *metadata["layouts"].values())}
    if "members" in metadata:
        features |= {("measured", "measured" in metadata)}
        features |= {("member schedule", member["schedule"]) for member in metadata["members"]}
        return {("family", feature) for feature in features}
    features |= {("unit", metadata["unit"]), ("dtypes", *metadata["dtypes"].values()), ("bounds", metadata["bounds"]),
                 ("schedule", metadata["schedule"]), ("narrow", bool(metadata["entries"].get("narrow")))}
    if "gemv" in metadata:  # the GEMV path's kernels: its instruction, small rows (the tensor kernel's one or two
        # 8-row tiles) and streamed operand
        features.add(("gemv", metadata["gemv"]["instruction"], metadata["gemv"]["small_rows"],
                      metadata["gemv"]["streamed"]))
    path = instruction_path((SPECS / f"{name}.gemm").read_text())
    return {(path, feature) for feature in features}


@cache
def quick_set() -> frozenset[str]:
    """The names of the quick set's specs and families (see the module's docstring)."""
    paths = sorted(SPECS.glob("*.gemm")) + sorted(SPECS.glob("*.gemmf"))
    features = {path.stem: spec_features(path.stem) for path in paths}
    generated = {path.stem: GENERATED / f"{path.stem}.cu" for path in paths}
    size = {name: cu.stat().st_size if cu.exists() else 0 for name, cu in generated.items()}
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

"""Golden tests: generated/ holds the reference output of every spec and kernel family in specs/.

After an intended change to the output, refresh them with

    gemmdsl compile specs/*.gemm specs/*.gemmf -o generated --no-nvcc

and review the diff of generated/ like code.
"""
from pathlib import Path

import pytest

from gemmdsl.cli import main

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.gemm")) + sorted((ROOT / "specs").glob("*.gemmf"))
GOLDEN = ROOT / "generated"


# Everything `compile --no-nvcc` writes for a spec or a family.
GOLDEN_EXTENSIONS = (".cu", ".h", ".json")


def test_every_spec_has_golden_files_and_nothing_else_is_there():
    expected = {f"{s.stem}{ext}" for s in SPECS for ext in GOLDEN_EXTENSIONS}
    present = {p.name for p in GOLDEN.iterdir() if not p.name.startswith(".")}
    assert present == expected


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_output_matches_golden_byte_for_byte(spec, tmp_path):
    assert main(["compile", str(spec), "-o", str(tmp_path), "--no-nvcc"]) == 0
    for ext in GOLDEN_EXTENSIONS:
        produced = (tmp_path / f"{spec.stem}{ext}").read_bytes()
        golden = (GOLDEN / f"{spec.stem}{ext}").read_bytes()
        assert produced == golden, f"{spec.stem}{ext} differs from generated/; see tests/test_golden.py"

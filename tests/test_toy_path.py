"""A path is new files plus one registration: a toy FMA variant with an atom of its own (fused multiply-adds
rounded toward zero, `__fmaf_rz`), defined in a module outside gemmdsl and registered with
`paths.register`, compiles a spec without a change to any shared module."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gemmdsl import compiler, paths
from gemmdsl.frontend import load_spec
from gemmdsl.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
MODULE = "toy_rz_path"

TOY_PATH = '''
"""A toy instruction path: the FMA path's kernels with its atom, fmaf rounded toward zero."""
from gemmdsl.emit.kernel import MathParts
from gemmdsl.emit.math import FmaOuterProduct
from gemmdsl.paths.fma.path import FmaPath


class RoundTowardZero(FmaOuterProduct):
    def step(self, buffer):
        with self.out.unrolled("i", "FRAG_M"), self.out.unrolled("j", "FRAG_N"):
            self.out.line(f"acc[i][j] = __fmaf_rz(a_frag{buffer}[i], b_frag{buffer}[j], acc[i][j]);")


class ToyPath(FmaPath):
    name = "fma_rz"

    def selects(self, spec):
        return super().selects(spec) and spec.name.startswith("toy_")

    def math_parts(self, spec, layout, out, double):
        parts = super().math_parts(spec, layout, out, double)
        return MathParts(parts.fragments, RoundTowardZero(spec, layout, out), parts.epilogue)


PATH = ToyPath()
'''


@pytest.fixture
def toy_path(tmp_path, monkeypatch):
    (tmp_path / f"{MODULE}.py").write_text(TOY_PATH)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = paths.register(MODULE)
    yield path
    paths.unregister(MODULE)
    sys.modules.pop(MODULE, None)


def spec_text(name: str) -> str:
    text = (ROOT / "specs" / "sgemm_v3.gemm").read_text()
    assert "gemm sgemm_v3 {" in text
    return text.replace("gemm sgemm_v3 {", f"gemm {name} {{", 1)


def test_a_path_registered_from_outside_the_package_compiles_a_spec(toy_path, tmp_path):
    assert Path(sys.modules[MODULE].__file__).parent == tmp_path
    artifacts = compiler.compile_source(SourceFile("toy.gemm", spec_text("toy_rz")))
    assert artifacts.plan.path is toy_path and toy_path.name == "fma_rz"
    assert "__fmaf_rz(a_frag" in artifacts.cuda and "= fmaf(a_frag" not in artifacts.cuda
    # The rest, its launchers, analysis and metadata, is the FMA path's: only the k-step's line differs.
    fma = compiler.compile_source(SourceFile("toy.gemm", spec_text("toy_rz").replace("gemm toy_rz", "gemm fma_rz")))
    assert artifacts.cuda.replace("__fmaf_rz(", "fmaf(").replace("toy_rz", "fma_rz") == fma.cuda
    assert artifacts.analysis.facts["registers"].estimate == fma.analysis.facts["registers"].estimate


def test_the_registration_claims_only_what_the_path_selects(toy_path):
    plain = compiler.compile_source(SourceFile("plain.gemm", spec_text("plain_fma")))
    assert plain.plan.path.name == "fma" and "__fmaf_rz" not in plain.cuda
    assert paths.path_of(load_spec(ROOT / "specs" / "hgemm_h100.gemm")).name == "wgmma"


def test_unregistering_gives_the_specs_back(toy_path):
    paths.unregister(MODULE)
    try:
        artifacts = compiler.compile_source(SourceFile("toy.gemm", spec_text("toy_rz")))
        assert artifacts.plan.path.name == "fma" and "__fmaf_rz" not in artifacts.cuda
    finally:
        paths.register(MODULE)

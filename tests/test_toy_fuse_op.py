"""A fuse op is one module and one registration: a toy `clamp: LO HI;` op, written into a temporary folder and
registered from there, with nothing in gemmdsl/ edited, compiles, checks its own rule with a position, runs on
the CPU emulator against its float64 reference, and is priced by check's analysis.

The language's numbers are integers without a sign, and a value's atoms are separated by blanks, so the toy
reads its bounds as `clamp: 0 1;`.
"""
from __future__ import annotations

import pytest

import host_emulation
from gemmdsl import fuse_ops, ir
from gemmdsl.analysis import analyze
from gemmdsl.compiler import compile_text
from gemmdsl.frontend import load
from gemmdsl.runtime import KernelRequirements
from gemmdsl.source import CompileError, SourceFile
from test_emulated_fuse import ODD_CALLS, ROOT, TOLERANCE, run_fused, spec_text
from toy_modules import module_from_folder

CLAMP_MODULE = '''
from dataclasses import dataclass

import numpy as np

from gemmdsl.fuse_ops import FuseStep, Work, register
from gemmdsl.value_readers import BadValue


def read_bounds(reader, value):
    if len(value.atoms) != 2:
        raise BadValue(value.span, "expected two bounds, as in `clamp: 0 6;`")
    return tuple(reader.integer(atom, "a bound") for atom in value.atoms)


@register
@dataclass(frozen=True, kw_only=True)
class Clamp(FuseStep):
    key = "clamp"
    syntax = staticmethod(read_bounds)
    order = 45  # after the activation, before the residual

    lo: int
    hi: int

    @classmethod
    def from_value(cls, value, span):
        return cls(span=span, lo=value[0], hi=value[1])

    @property
    def value(self):
        return (self.lo, self.hi)

    def metadata(self):
        return [self.lo, self.hi]

    def check(self, spec, error):
        if self.lo > self.hi:
            error(self.span, f"clamp's lower bound {self.lo} is above its upper bound {self.hi}",
                  "write `clamp: LO HI;` with LO <= HI")

    def describe(self, x):
        return f"clamp({x}, {self.lo}, {self.hi})"

    def c_statement(self, spec):
        return f"x = fminf(fmaxf(x, {self.lo}.0f), {self.hi}.0f);"

    @staticmethod
    def reference(entry, x, operands):
        return np.clip(x, entry[0], entry[1])

    def work(self, spec, reads):
        return Work(alu=2)
'''
SIZE = 4096
CHAIN = "bias: m; activation: silu; clamp: 0 1; residual: f32 col;"

pytestmark = pytest.mark.skipif(host_emulation.find_cxx() is None, reason="g++ not on PATH")


@pytest.fixture(scope="module")
def clamp(tmp_path_factory):
    """The toy op, imported from a module in a temporary folder; unregistered afterwards."""
    with module_from_folder(tmp_path_factory.mktemp("toy_op"), "toy_clamp", CLAMP_MODULE) as module:
        try:
            yield module.Clamp
        finally:
            fuse_ops.unregister(module.Clamp)


def test_the_op_compiles_in_its_place_in_the_chain(clamp):
    artifacts = compile_text(spec_text(CHAIN, alpha_beta=True), "sgemm_fused.gemm")
    assert artifacts.spec.fuse.clamp == (0, 1)
    fuse = artifacts.metadata["fuse"]
    assert fuse["clamp"] == [0, 1]
    assert fuse["formula"] == "clamp(silu(alpha * acc + beta * C + bias[m]), 0, 1) + R"
    body = artifacts.cuda[artifacts.cuda.index("fuse_chain(float acc"):]
    assert body.index("x = silu(x);") < body.index("x = fminf(fmaxf(x, 0.0f), 1.0f);") < body.index("x += r;")


@pytest.mark.parametrize("m, n, k, pad, offset_a", ODD_CALLS[1:5])
def test_the_op_matches_its_float64_reference_on_the_emulator(clamp, tmp_path, m, n, k, pad, offset_a):
    artifacts = compile_text(spec_text(CHAIN, alpha_beta=True), "sgemm_fused.gemm")
    binary = host_emulation.shared_build(artifacts.cuda, artifacts.metadata)
    req = KernelRequirements.from_metadata(artifacts.metadata)
    error, outside = run_fused(binary, artifacts.metadata, req, tmp_path, m, n, k, pad, offset_a, alpha=1.5,
                               beta=-0.5, seed=m * n + k)
    assert outside == 0
    assert error <= TOLERANCE, error


def test_the_reference_clamps(clamp):
    """The emulator test above compares against the op's reference: it must clamp, or a kernel without the
    clamp would pass too."""
    import numpy as np
    from gemmdsl.fuse_reference import apply_chain
    fuse = {"formula": "", "scale": None, "bias": None, "activation": None, "residual": None, "clamp": [0, 1]}
    assert apply_chain(fuse, np.array([[-2.0, 0.5, 3.0]])).tolist() == [[0.0, 0.5, 1.0]]


def test_the_op_checks_its_rule_at_its_value(clamp):
    text = spec_text("bias: m; clamp: 3 1;", alpha_beta=True)
    with pytest.raises(CompileError) as raised:
        load(SourceFile("sgemm_fused.gemm", text))
    diagnostics = raised.value.diagnostics
    line = next(number for number, row in enumerate(text.splitlines(), 1) if "clamp:" in row)
    (error,) = [d for d in diagnostics if "clamp" in d.message]
    assert error.message == "clamp's lower bound 3 is above its upper bound 1"
    assert (error.span.line, error.span.column) == (line, text.splitlines()[line - 1].index("3 1") + 1)


def test_a_misspelt_key_is_offered_the_op(clamp):
    with pytest.raises(CompileError) as raised:
        compile_text(spec_text("clampp: 0 1;", alpha_beta=True), "sgemm_fused.gemm")
    (error,) = raised.value.diagnostics
    assert error.message == "unknown key 'clampp' in section 'fuse'" and error.hint == "did you mean 'clamp'?"


@pytest.mark.parametrize("spec", ["sgemm_fused", "linear_gelu"])
def test_the_op_is_priced(clamp, spec):
    """check's analysis counts the op's instructions per element, on the FMA path and in the wgmma epilogue's
    cycle model."""
    text = (ROOT / "specs" / f"{spec}.gemm").read_text()
    plain, _ = load(SourceFile(f"{spec}.gemm", text))
    clamped, diagnostics = load(SourceFile(f"{spec}.gemm", text.replace("fuse     {", "fuse     { clamp: 0 1;")))
    assert not diagnostics and clamped.fuse.clamp == (0, 1)
    before, after = (analyze(s, (SIZE, SIZE, SIZE)) for s in (plain, clamped))
    assert after.facts["fuse"].work.alu == before.facts["fuse"].work.alu + 2
    assert "clamp(" in after.facts["fuse"].formula
    if "epilogue_cycles" in after.facts:
        assert after.facts["epilogue_cycles"].cycles > before.facts["epilogue_cycles"].cycles


def test_the_op_is_a_key_of_the_chain(clamp):
    assert ir.FUSE_KEYS >= {"scale", "bias", "activation", "residual", "clamp"}


@pytest.mark.parametrize("key", ["bias", "steps", "describe"])
def test_a_key_taken_by_an_op_or_the_chain_is_refused(clamp, key):
    with pytest.raises(ValueError, match=repr(key)):
        fuse_ops.register(type("Taken", (clamp,), {"key": key}))

"""Quantized weights in the language (docs/quantized.md): the `quant b` section's IR, and validation's hand-over
to a path that dequantizes. The refusals' positions and hints are cases of tests/test_diagnostics.py."""
from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl import ir, paths
from gemmdsl.frontend import load
from gemmdsl.source import CompileError, SourceFile

from test_diagnostics import QUANT_BASE

MODULE = "toy_dequant_path"
# A path that claims quantized wgmma specs and checks nothing of its own: what validation leaves to a
# dequantizing path, and what it hands over.
TOY_PATH = '''
from gemmdsl import ir
from gemmdsl.paths.wgmma.path import WgmmaPath


class ToyDequantPath(WgmmaPath):
    name = "toy_dequant"
    weight_types = frozenset({ir.DType.S4, ir.DType.U4, ir.DType.S8})

    def takes(self, shape, a, b):
        return shape is ir.WgmmaShape and b is not None and b in self.weight_types

    def validate(self, checker):
        pass


PATH = ToyDequantPath()
'''


@pytest.fixture(scope="module")
def dequantizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("paths")
    (folder / f"{MODULE}.py").write_text(TOY_PATH)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        path = paths.register(MODULE)
        yield path
        paths.unregister(MODULE)
        sys.modules.pop(MODULE, None)


def load_text(text: str) -> ir.KernelSpec:
    return load(SourceFile("q.gemm", text))[0]


def test_the_quant_section_reads_into_the_ir(dequantizer):
    spec = load_text(QUANT_BASE)
    assert spec.quant == ir.WeightQuant(span=spec.quant.span, group=128, zeros=True)
    assert spec.problem.b == ir.MatrixType(ir.DType.S4, ir.MatrixLayout.COL) and spec.problem.weights
    assert (spec.quant.span.line, spec.quant.at("group").line, spec.quant.at("group").column) == (3, 3, 23)
    assert paths.path_of(spec) is dequantizer


def test_channel_scales_and_no_zeros_by_default(dequantizer):
    spec = load_text(QUANT_BASE.replace("group: 128; zeros: yes;", "group: channel;"))
    assert (spec.quant.group, spec.quant.zeros, spec.quant.scales_per_column(4096)) == (None, False, 1)


def test_an_ordinary_spec_has_no_quant():
    text = QUANT_BASE.replace("b: s4 col", "b: bf16 col").replace("    quant b  { group: 128; zeros: yes; }\n", "")
    spec = load_text(text)
    assert spec.quant is None and not spec.problem.weights


def test_e4m3_is_a_weight_against_16_bit_a_only():
    problem = ir.Problem(span=None, a=ir.MatrixType(ir.DType.BF16, ir.MatrixLayout.ROW),
                         b=ir.MatrixType(ir.DType.E4M3, ir.MatrixLayout.COL))
    assert problem.weights
    assert not ir.Problem(span=None, a=ir.MatrixType(ir.DType.E4M3, ir.MatrixLayout.ROW),
                          b=ir.MatrixType(ir.DType.E4M3, ir.MatrixLayout.COL)).weights


def test_a_refusal_names_the_path_that_dequantizes(dequantizer):
    """A quantized B on a shape the dequantizing path does not take: the refusal says which path would."""
    text = (QUANT_BASE.replace("warpgroups: 1;", "warps: 1x4;").replace("m64n128k16;", "m16n8k16; repeat: 4x4;")
            .replace("copy: tma;", "copy: cp_async;").replace("sm_90a", "sm_80"))
    with pytest.raises(CompileError) as info:
        load_text(text)
    (error,) = info.value.diagnostics
    assert error.message == "the mma_sync path cannot dequantize s4 weights"
    assert error.hint == "the toy_dequant or dequant path takes them: see docs/quantized.md for its spec"


def test_the_shared_rules_still_hold_on_a_dequantizing_path(dequantizer):
    with pytest.raises(CompileError) as info:
        load_text(QUANT_BASE.replace("b: s4 col", "b: s4 row"))
    assert [d.message.split(":")[0] for d in info.value.diagnostics] == ["quantized B must be `col`"]


@settings(max_examples=40, deadline=None)
@given(group=st.sampled_from([32, 64, 128, 256, 512, 1024]), bk=st.sampled_from([16, 32, 64, 128, 256, 48, 96, 192]),
       zeros=st.booleans())
def test_groups_and_block_k_that_divide_one_another_are_taken(dequantizer, group, bk, zeros):
    """Every power-of-two group of at least 32 that BK divides or that divides BK is taken; any other is
    refused at the group, with that error alone."""
    text = (QUANT_BASE.replace("64x128x64", f"64x128x{bk}")
            .replace("group: 128; zeros: yes;", f"group: {group}; zeros: {'yes' if zeros else 'no'};"))
    if group % bk == 0 or bk % group == 0:
        spec = load_text(text)
        assert spec.quant == ir.WeightQuant(span=spec.quant.span, group=group, zeros=zeros)
        return
    with pytest.raises(CompileError) as info:
        load_text(text)
    (error,) = info.value.diagnostics
    assert error.message.startswith(f"group {group} and the block tile's K ({bk}) do not divide one another")
    assert error.span.line == 3


def test_check_states_bytes_per_weight_the_hbm_bound_and_the_dequantization(dequantizer):
    """s4 codes in groups of 128 with zero points: half a byte per code, and a 16-bit scale and zero point per
    128 weights; at 1x4096x4096 A and C are 8 KiB each."""
    from gemmdsl.gpu_profile import profile_for
    from gemmdsl.paths.facts import DequantCost
    from gemmdsl.quant_check import quant_facts, quant_json, quant_lines

    spec = load_text(QUANT_BASE)
    problem = (1, 4096, 4096)
    facts = quant_facts(spec, problem, None)
    assert (facts.a_bytes, facts.weight_bytes, facts.c_bytes) == (8192, 4096 * 4096 * (0.5 + 4 / 128), 8192)
    tbps = profile_for(90).hbm_tbps
    assert facts.hbm_seconds == pytest.approx(facts.total_bytes / (tbps * 1e12))
    lines = quant_lines(spec, problem, facts)
    assert lines[0] == ("Quantized B: s4, group 128, zero points: 0.5312 bytes per weight (0.5 codes + 0.03125 "
                        "scales, zero points and padding)")
    assert lines[1].startswith(f"HBM bound at 1x4096x4096: 8,929,280 bytes (A 8,192, B 8,912,896, C 8,192) take "
                               f"{8929280 / (tbps * 1e6):.3g} us at {tbps:g} TB/s")
    assert lines[2] == "Dequantization: no dequantizing path states its cost"
    cost = DequantCost(48, "16 lop3 + 16 hsub2 + 16 hmul2")
    priced = quant_facts(spec, problem, cost)
    assert quant_lines(spec, problem, priced)[2] == ("Dequantization: 48 instructions per consumer thread per k-tile "
                                                     "(16 lop3 + 16 hsub2 + 16 hmul2)")
    assert quant_json(spec, problem, priced)["dequantization"] == {"instructions_per_k_tile": 48,
                                                                  "detail": "16 lop3 + 16 hsub2 + 16 hmul2"}
    assert quant_json(spec, problem, priced)["bytes_per_weight"] == 0.53125
    # The prefill route: the packed B read and W (4096 x 4096 bf16) written once.
    written = 4096 * 4096 * 2
    assert facts.dequantize_bytes == 8912896 + written
    assert lines[3] == (f"Prefill route (runtime.QuantizedLinear): W dequantized into memory first, "
                        f"{8912896 + written:,} bytes (B read, {written:,} of bf16 written), at least "
                        f"{(8912896 + written) / (tbps * 1e6):.3g} us before the dense GEMM")
    assert quant_json(spec, problem, priced)["prefill_dequantize_bytes"] == 8912896 + written

"""The bank-conflict warning's hint: computed by costing the candidate pads and swizzles of the operand's tile
through the same bank model, so it names a change that removes (or most reduces) the conflicts, and says so
where none does, never the pad a spec already has."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from gemmdsl import ir
from gemmdsl.analysis import analyze
from gemmdsl.frontend import load_spec
from gemmdsl.parser import parse_text
from gemmdsl.passes.banks import RelaidAddresses, cost_access
from gemmdsl.paths import path_of, plan_kernel
from gemmdsl.source import Severity
from gemmdsl.validate import validate
from test_analysis import spec_text

SPECS = Path(__file__).resolve().parent.parent / "specs"
CHANGE = re.compile(r"^`(pad: (\d+)|swizzle: xor\((\d+), (\d+), (\d+)\));`")


def conflict_warnings(spec: ir.KernelSpec):
    return [w for w in analyze(spec).warnings if "bank conflict" in w.message]


def excess(spec: ir.KernelSpec, operand: ir.Operand) -> int:
    """The operand's wavefronts beyond ideal, per block and k-tile, as the bank pass costs them."""
    layout = plan_kernel(spec).layout
    env = layout.thread_env()
    return sum(cost_access(layout, access, env).excess_wavefronts for access in layout.smem_accesses()
               if access.operand is operand)


def applied(spec: ir.KernelSpec, operand: ir.Operand, hint: str) -> ir.KernelSpec:
    """The spec with the change the hint names made to the operand's `smem` section."""
    match = CHANGE.match(hint)
    smem = spec.smem(operand)
    if match[2] is not None:
        changed = replace(smem, pad=int(match[2]), swizzle=None)
    else:
        changed = replace(smem, pad=0, swizzle=ir.Swizzle(int(match[3]), int(match[4]), int(match[5])))
    return replace(spec, **{f"smem_{operand.value}": changed})


def test_a_spec_that_has_pad_4_is_not_told_to_pad_by_4():
    """cp_async3 stores A transposed with `pad: 4`, which leaves a 2-way conflict: the hint names the change that
    removes it (a swizzle), not `pad: 4` again."""
    spec = load_spec(SPECS / "cp_async3.gemm")
    assert spec.smem_a.pad == 4
    (warning,) = [w for w in conflict_warnings(spec) if "on A stores" in w.message]
    assert "pad: 4;" not in warning.hint
    assert warning.hint.endswith("removes every bank conflict of A's shared-memory accesses")
    assert excess(applied(spec, ir.Operand.A, warning.hint), ir.Operand.A) == 0


def test_where_no_pad_or_swizzle_does_better_the_hint_says_so():
    """B stored n-major by 2x16 lanes with `pad: 1`: 4-way store conflicts that no other pad or swizzle reduces."""
    spec = parse_text(spec_text(warps="8x1", lanes="2x16 row", smem_b="order: nk; pad: 1;"))
    (warning,) = [w for w in conflict_warnings(spec) if "on B stores" in w.message]
    assert warning.hint.startswith("no pad or swizzle xor(B, 0, S) that keeps B's accesses as wide does better than "
                                   "its pad 1; the copy's stores")
    for pad in (0, 2, 3):
        assert excess(replace(spec, smem_b=replace(spec.smem_b, pad=pad)), ir.Operand.B) >= excess(spec, ir.Operand.B)


@pytest.mark.parametrize("text", [spec_text(smem_a="order: km;"), spec_text(warps="8x1", lanes="2x16 row",
                                                                            smem_b="order: nk;"),
                                  (SPECS / "hgemm_mma.gemm").read_text(), (SPECS / "sgemm_3xtf32.gemm").read_text()])
@pytest.mark.parametrize("operand", list(ir.Operand)[:2])
def test_relaid_addresses_cost_what_the_analysis_of_the_changed_spec_costs(text, operand):
    spec = parse_text(text)
    addresses = RelaidAddresses(plan_kernel(spec).layout, operand)
    widest = addresses.widest
    smem = spec.smem(operand)
    for pad, swizzle in [(0, None), (widest, None), (3 * widest, None),
                         (0, ir.Swizzle(1, widest.bit_length() - 1, 3)), (0, ir.Swizzle(3, widest.bit_length() - 1, 5))]:
        changed = replace(spec, **{f"smem_{operand.value}": replace(smem, pad=pad, swizzle=swizzle)})
        assert addresses.excess(pad, swizzle) == excess(changed, operand)


def test_a_spec_without_padding_is_told_the_pad_that_removes_its_store_conflict():
    spec = load_spec(SPECS / "transpose_nopad.gemm")
    (warning,) = conflict_warnings(spec)
    assert warning.hint.startswith("`pad: 4;` removes every bank conflict of A's shared-memory accesses")
    assert excess(applied(spec, ir.Operand.A, warning.hint), ir.Operand.A) == 0


# The shipped specs whose banks conflict.
CONFLICTING = ("batched_v3", "cp_async3", "cp_async4", "lanes_2x16_km", "large_128x256", "layouts_nt",
               "sgemm_3xtf32", "sgemm_v1", "transpose_nopad")


@pytest.mark.parametrize("name", CONFLICTING)
def test_every_named_change_validates_and_leaves_fewer_excess_wavefronts(name):
    spec = load_spec(SPECS / f"{name}.gemm")
    warnings = conflict_warnings(spec)
    assert warnings
    for warning in warnings:
        operand = ir.Operand(re.search(r"conflict on (\w) ", warning.message)[1].lower())
        if CHANGE.match(warning.hint) is None:
            assert warning.hint.startswith("no pad")
            continue
        changed = applied(spec, operand, warning.hint)
        assert not [d for d in validate(changed, path_of(changed)) if d.severity is Severity.ERROR]
        before, after = excess(spec, operand), excess(changed, operand)
        assert after < before
        assert ("removes every bank conflict" in warning.hint) == (after == 0)
        if after:
            assert f"from {before} to {after}" in warning.hint


def test_the_tuners_analysis_leaves_the_search_out_and_keeps_the_warnings():
    spec = load_spec(SPECS / "transpose_nopad.gemm")
    with_hints, without = analyze(spec).warnings, analyze(spec, hints=False).warnings
    assert [w.message for w in without] == [w.message for w in with_hints]
    assert all(w.hint is None for w in without) and all(w.hint for w in with_hints)

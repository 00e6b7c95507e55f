"""Tensor-core specs in the front end: random valid ones (tests/spec_strategies.py) are accepted,
breaking the tile hierarchy of one gives exactly the tile-product error at the mma repeat, and the
shared-memory size that validate checks agrees with the layout's rounding."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spec_strategies import mma_spec_texts

from gemmdsl import ir
from gemmdsl.frontend import load, load_spec
from gemmdsl.mma_layout import MmaLayout
from gemmdsl.source import CompileError, Severity, SourceFile

ROOT = Path(__file__).resolve().parents[1]
FILE = "random_mma.gemm"
REPEAT = re.compile(r"(mma +\{ shape: \w+; repeat: )(\d+)x(\d+)")


@settings(deadline=None, max_examples=200)
@given(mma_spec_texts())
def test_every_drawn_mma_spec_validates(text):
    spec, diagnostics = load(SourceFile(FILE, text))
    assert spec.mma is not None
    assert not [d for d in diagnostics if d.severity is Severity.ERROR]
    for operand in (ir.Operand.A, ir.Operand.B):
        assert spec.smem(operand).read is not None and spec.smem(operand).read_bits is None


@settings(deadline=None, max_examples=100)
@given(mma_spec_texts(), st.sampled_from(("m", "n")))
def test_a_broken_tile_product_is_reported_at_the_repeat(text, axis):
    spec, _ = load(SourceFile(FILE, text))
    match = REPEAT.search(text)
    repeat = ir.Pair(int(match.group(2)), int(match.group(3)))
    broken = ir.Pair(repeat.m + 1, repeat.n) if axis == "m" else ir.Pair(repeat.m, repeat.n + 1)
    text = text[:match.start(2)] + str(broken) + text[match.end(3):]
    with pytest.raises(CompileError) as info:
        load(SourceFile(FILE, text))
    (error,) = [d for d in info.value.diagnostics if d.severity is Severity.ERROR]
    warps, shape = getattr(spec.threads.warps, axis), getattr(spec.mma.shape, axis)
    extent = spec.block.m if axis == "m" else spec.block.n
    product = warps * getattr(broken, axis) * shape
    assert error.message == (f"warps x repeat x shape along {axis} is {warps}*{getattr(broken, axis)}*{shape} = "
                             f"{product}, but the block tile's {'BM' if axis == 'm' else 'BN'} is {extent}")
    line = text.count("\n", 0, match.start(2)) + 1
    column = match.start(2) - text.rfind("\n", 0, match.start(2))
    assert (error.span.line, error.span.column) == (line, column)
    assert error.hint.startswith(f"use `repeat: {repeat}` to cover")


def test_mma_shared_memory_size():
    from gemmdsl.layout import KernelLayout
    from gemmdsl.paths.mma_sync.validate import mma_smem_bytes

    fixtures = ROOT / "tests" / "fixtures"
    # bf16: A 128x32 and B 32x128, 8 KiB each per stage (whole swizzle periods), 4 stages
    assert mma_smem_bytes(load_spec(fixtures / "hgemm_mma.gemm")) == 4 * (8192 + 8192)
    # f32: the same figure as the FMA path's layout, which rounds stages the same way
    tf32 = load_spec(fixtures / "sgemm_3xtf32.gemm")
    for spec in (tf32, replace(tf32, smem_a=replace(tf32.smem_a, pad=0, swizzle=ir.Swizzle(3, 2, 5)))):
        assert mma_smem_bytes(spec) == KernelLayout(spec).smem_bytes


@pytest.mark.parametrize("name, ldmatrix, words", [
    ("tf32_ldmatrix", 4, 16), ("tf32_ldmatrix_nt", 8, 0),
    ("sgemm_3xtf32_ldmatrix", 4, 16), ("sgemm_3xtf32_ldmatrix_nt", 8, 0),
])
def test_f32_ldmatrix_specs_load_fragments_in_fewer_instructions(name, ldmatrix, words):
    """Per k-step of a 64x64 warp tile: 32 32-bit loads (tf32_mma); A by ldmatrix takes 4 x4 for its
    16 words; B by ldmatrix (k contiguous: column-major B stored nk) 4 more for its 16."""
    spec = load_spec(ROOT / "specs" / f"{name}.gemm")
    assert spec.problem.a.dtype is ir.DType.F32 and spec.smem_a.read is ir.SmemRead.LDMATRIX
    layout = MmaLayout(spec)
    accesses = layout.fragment_accesses(0)
    assert [a.op for a in accesses].count("ldmatrix") == ldmatrix
    assert [a.op for a in accesses].count("load") == words
    by_ldmatrix = [op for op in (ir.Operand.A, ir.Operand.B) if layout.read[op] is ir.SmemRead.LDMATRIX]
    assert not any(layout.transposed(op) for op in by_ldmatrix)
    assert all(a.width_bytes == 16 for a in accesses if a.op == "ldmatrix")


@pytest.mark.parametrize("name, addressed", [("hgemm_h100_mma", True), ("hgemm_f16_nt", True),
                                              ("tf32_ldmatrix", False), ("sgemm_3xtf32_ldmatrix_nt", False)])
def test_16_bit_ldmatrix_reads_from_shared_addresses_and_f32_from_pointers(name, addressed):
    # docs/performance.md, tensor-core notes T9: 16-bit ldmatrix from a 32-bit stage address plus a byte offset ran
    # 10% faster; f32 (TF32) ldmatrix keeps the pointer, where the address form only added spills.
    from gemmdsl.compiler import compile_path

    cuda = compile_path(ROOT / "specs" / f"{name}.gemm").cuda
    helper = re.search(r"void ldmatrix_x4\(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, ([^)]*)\)", cuda)
    assert helper and (helper.group(1) == "unsigned address") == addressed
    assert ("const unsigned a_read = smem_address(smem_a + " in cuda) == addressed
    element_bytes = 2 if addressed else 4
    offsets = re.findall(r"ldmatrix_x4(?:_trans)?\([^;]*a_read \+ a_smem_offset\((?:[^()]|\([^()]*\))*\)( \* \d+)?\);", cuda)
    assert offsets and all(o == (f" * {element_bytes}" if addressed else "") for o in offsets)


def test_an_mma_register_overflow_warning_says_a_small_spill_can_pay():
    """tf32_ldmatrix's double fragments spill and ran 12.5% faster for it (docs/performance.md, T13): the warning says so
    beside the usual hint, rather than only urging a smaller repeat."""
    from gemmdsl.compiler import compile_path

    warnings = compile_path(ROOT / "specs" / "tf32_ldmatrix.gemm").warnings
    [warning] = [w for w in warnings if "exceed the limit" in w.message]
    assert "smaller mma repeat" in warning.hint and "small spill can cost less" in warning.hint


NATURAL = """gemm natural {
    problem  { a: bf16 LAYOUT_A; b: bf16 LAYOUT_B; c: f32 row; bounds: checked; }
    target   sm_80;
    block    { tile: 128x128x32; }
    threads  { warps: 2x2; }
    mma      { shape: m16n8k16; repeat: 4x8; }
    pipeline { stages: 3; copy: cp_async; }
}
"""


@pytest.mark.parametrize("a", ["row", "col"])
@pytest.mark.parametrize("b", ["row", "col"])
def test_16_bit_mma_specs_without_smem_sections_keep_each_operand_as_it_lies(a, b):
    """cp.async cannot transpose 16-bit elements, so the default shared-memory order is the one that keeps the
    global layout's contiguous dimension contiguous (ldmatrix transposes where the instruction needs it)."""
    text = NATURAL.replace("LAYOUT_A", a).replace("LAYOUT_B", b)
    spec, diagnostics = load(SourceFile("natural.gemm", text))
    assert not [d for d in diagnostics if d.severity is Severity.ERROR]
    assert spec.smem_a.order is (ir.SmemOrder.MK if a == "row" else ir.SmemOrder.KM)
    assert spec.smem_b.order is (ir.SmemOrder.KN if b == "row" else ir.SmemOrder.NK)


def test_an_order_the_copy_cannot_make_is_reported_at_the_order_with_the_one_that_works():
    text = NATURAL.replace("LAYOUT_A", "row").replace("LAYOUT_B", "col").replace(
        "    pipeline", "    smem b   { order: kn; }\n    pipeline")
    with pytest.raises(CompileError) as caught:
        load(SourceFile("natural.gemm", text))
    (error,) = caught.value.diagnostics
    assert (error.span.line, error.span.column) == (7, 23) and "use `order: nk;`" in error.hint


def test_tf32_mma_specs_keep_their_default_order():
    """4-byte elements: cp.async copies them one by one into either order, and 32-bit fragment reads take kn."""
    text = NATURAL.replace("bf16 LAYOUT_A", "f32 row").replace("bf16 LAYOUT_B", "f32 col").replace(
        "m16n8k16; repeat", "m16n8k8; precision: tf32; repeat")
    assert load_spec(SourceFile("natural.gemm", text)).smem_b.order is ir.SmemOrder.KN


STREAM_K_MMA_SPECS = sorted(path.stem for path in (ROOT / "specs").glob("*_mma_*_sk.gemm"))


@pytest.mark.parametrize("name", STREAM_K_MMA_SPECS)
def test_a_checked_stream_k_share_adds_only_inside_c_and_pairs_only_where_c_takes_them(name):
    """A stream-K share adds its pairs into C with atomics: an edge tile only the elements inside C (one at a time),
    and the scalar kernel (C's leading dimension odd, or C one element off) never as a float2, whose 8-byte atomic
    faults on an address off 8 bytes."""
    from gemmdsl.compiler import compile_path

    cuda = compile_path(ROOT / "specs" / f"{name}.gemm").cuda
    kernels = {match[1]: match[2] for match in re.finditer(
        r'__global__ void __launch_bounds__\(\d+\) (\w+)\((.*?)\n}\n', cuda, re.S)}
    shares = {kernel: body for kernel, body in kernels.items() if "_stream_k" in kernel}
    assert shares and all(kernel.endswith(("_stream_k", "_stream_k_8byte", "_stream_k_4byte", "_stream_k_scalar"))
                          for kernel in shares)
    for kernel, body in shares.items():
        adds = [line.strip() for line in body.splitlines() if "atomicAdd(" in line]
        inside, _, edge = body.partition("// Edge tile: one element at a time, only inside C.")
        assert edge and "if (block_inside)" in inside, kernel
        edge_adds = [line.strip() for line in edge.splitlines() if "atomicAdd(" in line]
        assert edge_adds and all(line.startswith("if (row < M && col") for line in edge_adds), kernel
        assert ("float2" in " ".join(adds)) == (not kernel.endswith("_scalar")), kernel

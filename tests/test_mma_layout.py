"""The tensor-core lowering (gemmdsl/mma_layout.py) against an independent model of the hardware.

A warp's shared-memory tiles are filled through the layout's own offset functions (padding and
swizzle included); every lane's ldmatrix or 32-bit load address is evaluated from the lowering's
expressions; ldmatrix (plain and .trans) is emulated as the PTX ISA defines it; the fragment
registers are then read with the ISA's mma fragment layouts (written out here, not taken from the
lowering), multiplied, and each accumulator is checked against A @ B at the (m, n) that
`MmaLayout.c_pair` says the epilogue stores it to. So this covers ldmatrix addressing, the choice
of .trans, which register each matrix fills, 32-bit fragment loads and the C map, for random specs.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from spec_strategies import mma_spec_texts

from gemmdsl import ir
from gemmdsl.expr import Var
from gemmdsl.frontend import load
from gemmdsl.mma_layout import MmaLayout
from gemmdsl.source import SourceFile

WARP = 32
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fragment_element(operand: ir.Operand, element_bytes: int, k_step: int, register: int, half: int,
                     lane: int) -> tuple[int, int]:
    """(mn, k), within one instruction block, of 16-bit half `half` (0 for TF32) of fragment register
    `register` of `lane`: the PTX ISA's mma.m16n8k16 / m16n8k8 fragment layouts."""
    group, quad = lane // 4, lane % 4
    if element_bytes == 4:  # .tf32: one element per register
        if operand is ir.Operand.A:
            return group + 8 * (register % 2), quad + 4 * (register // 2)
        return group, quad + 4 * register
    if operand is ir.Operand.A:
        return group + 8 * (register % 2), 2 * quad + half + 8 * (register // 2)
    return group, 2 * quad + half + 8 * register


def emulate_ldmatrix(smem: np.ndarray, row_addresses: np.ndarray, count: int, transpose: bool,
                     element_bytes: int) -> np.ndarray:
    """Registers (count, 32 lanes, elements per register) of one ldmatrix, from the 32 lanes' row
    addresses (element offsets). Matrix q's rows are those of lanes 8q..8q+7; each row is 16 bytes.
    The instruction moves 32-bit words: lane l gets word l%4 of row l/4, which is elements 2(l%4),
    +1 of 16-bit rows and element l%4 of f32 rows (4 per row). Trans (16-bit only): row 2(l%4) (+1),
    element l/4."""
    assert not (transpose and element_bytes == 4), "ldmatrix.trans swaps 16-bit halves; it has no 32-bit form"
    per_row = 16 // element_bytes
    words = np.zeros((count, WARP, 2 if element_bytes == 2 else 1))
    for q in range(count):
        rows = np.stack([smem[row_addresses[8 * q + r]: row_addresses[8 * q + r] + per_row] for r in range(8)])
        for lane in range(WARP):
            if element_bytes == 4:
                words[q, lane, 0] = rows[lane // 4, lane % 4]
            elif transpose:
                words[q, lane] = rows[2 * (lane % 4): 2 * (lane % 4) + 2, lane // 4]
            else:
                words[q, lane] = rows[lane // 4, 2 * (lane % 4): 2 * (lane % 4) + 2]
    return words


def fill_stage(layout: MmaLayout, operand: ir.Operand, tile: np.ndarray) -> np.ndarray:
    """One shared-memory stage holding `tile` ((BM x BK) of A or (BK x BN) of B), placed by the
    layout's offset function."""
    geometry = layout.smem[operand]
    stage = np.full(geometry.stage_elems + 64, np.nan)
    mn_extent = tile.shape[0] if operand is ir.Operand.A else tile.shape[1]
    mn, k = np.meshgrid(np.arange(mn_extent), np.arange(layout.bk), indexing="ij")
    offsets = geometry.offset(Var("mn"), Var("k")).evaluate({"mn": mn, "k": k})
    stage[offsets] = tile if operand is ir.Operand.A else tile.T
    return stage


def warp_fragments(layout: MmaLayout, operand: ir.Operand, stage: np.ndarray, env: dict, warp: int,
                   k_step: int) -> dict[tuple[int, int], np.ndarray]:
    """(block, register) -> (32 lanes, halves) values the warp's fragment loads deliver."""
    lanes = slice(warp * WARP, (warp + 1) * WARP)
    values = {}
    if layout.read[operand] is ir.SmemRead.LDMATRIX:
        for matrix_load in layout.matrix_loads(operand, k_step):
            addresses = np.broadcast_to(matrix_load.offset.evaluate(env), (layout.threads,))[lanes]
            words = emulate_ldmatrix(stage, addresses, matrix_load.count, matrix_load.transpose,
                                     layout.element_bytes)
            for q, matrix in enumerate(matrix_load.matrices):
                values[matrix.block, matrix.register] = words[q]
        return values
    per_word = 4 // layout.element_bytes
    for word in layout.word_loads(operand, k_step):
        addresses = np.broadcast_to(word.offset.evaluate(env), (layout.threads,))[lanes]
        values[word.block, word.register] = np.stack([stage[addresses + e] for e in range(per_word)], axis=1)
    return values


def check_layout(layout: MmaLayout, rng: np.random.Generator) -> None:
    a = rng.standard_normal((layout.bm, layout.bk))
    b = rng.standard_normal((layout.bk, layout.bn))
    stages = {ir.Operand.A: fill_stage(layout, ir.Operand.A, a), ir.Operand.B: fill_stage(layout, ir.Operand.B, b)}
    env = layout.thread_env()
    blocks_m, blocks_n = layout.blocks[ir.Operand.A], layout.blocks[ir.Operand.B]
    halves = 2 if layout.element_bytes == 2 else 1
    for warp in range(layout.threads // WARP):
        acc = np.zeros((blocks_m, blocks_n, WARP, 4))
        for k_step in range(layout.k_steps):
            frags = {op: warp_fragments(layout, op, stages[op], env, warp, k_step) for op in stages}
            # Rebuild each instruction block's operands from the registers, as the ISA places them.
            for i in range(blocks_m):
                a_block = np.full((16, layout.k_step), np.nan)
                for register in range(layout.registers[ir.Operand.A]):
                    for lane in range(WARP):
                        for half in range(halves):
                            m, k = fragment_element(ir.Operand.A, layout.element_bytes, k_step, register, half, lane)
                            a_block[m, k] = frags[ir.Operand.A][i, register][lane, half]
                for j in range(blocks_n):
                    b_block = np.full((layout.k_step, 8), np.nan)
                    for register in range(layout.registers[ir.Operand.B]):
                        for lane in range(WARP):
                            for half in range(halves):
                                n, k = fragment_element(ir.Operand.B, layout.element_bytes, k_step, register, half,
                                                        lane)
                                b_block[k, n] = frags[ir.Operand.B][j, register][lane, half]
                    product = a_block @ b_block
                    for lane in range(WARP):
                        for e in range(4):
                            acc[i, j, lane, e] += product[lane // 4 + 8 * (e // 2), 2 * (lane % 4) + e % 2]
        expected = a @ b
        for i in range(blocks_m):
            for j in range(blocks_n):
                for half in range(2):
                    m, n = layout.c_pair(i, j, half)
                    rows = np.broadcast_to(m.evaluate(env), (layout.threads,))[warp * WARP:(warp + 1) * WARP]
                    cols = np.broadcast_to(n.evaluate(env), (layout.threads,))[warp * WARP:(warp + 1) * WARP]
                    for e in range(2):
                        np.testing.assert_allclose(acc[i, j, :, 2 * half + e], expected[rows, cols + e],
                                                   rtol=1e-12, atol=1e-12)


def lowered(text: str) -> MmaLayout:
    spec, _ = load(SourceFile("random_mma.gemm", text))
    return MmaLayout(spec)


def test_the_issue_specs_compute_a_times_b():
    rng = np.random.default_rng(0)
    for name in ("hgemm_mma", "sgemm_3xtf32"):
        text = (FIXTURES / f"{name}.gemm").read_text()
        check_layout(lowered(text), rng)


def f32_ldmatrix_spec(b_layout: str, b_order: str, b_read: str, a_smem: str = "swizzle: xor(3,2,3);",
                      precision: str = "tf32") -> str:
    return f"""gemm f32_ldmatrix {{
    problem  {{ a: f32 row; b: f32 {b_layout}; c: f32 row; }}
    target   sm_90;
    block    {{ tile: 128x128x32; }}
    threads  {{ warps: 2x2; }}
    mma      {{ shape: m16n8k8; repeat: 4x8; precision: {precision}; }}
    smem a   {{ order: mk; {a_smem} read: ldmatrix; }}
    smem b   {{ order: {b_order}; pad: 4; read: {b_read}; }}
    pipeline {{ stages: 2; copy: cp_async; }}
}}
"""


@pytest.mark.parametrize("b_layout, b_order, b_read, a_smem, precision", [
    ("col", "nk", "ldmatrix", "swizzle: xor(3,2,3);", "tf32"),  # both by ldmatrix, no transposing copy
    ("row", "nk", "ldmatrix", "pad: 4;", "3xtf32"),  # B transposed on its way to shared memory
    ("row", "kn", "32", "pad: 12;", "tf32"),  # A by ldmatrix, B (n contiguous) by 32-bit loads
])
def test_f32_ldmatrix_computes_a_times_b(b_layout, b_order, b_read, a_smem, precision):
    layout = lowered(f32_ldmatrix_spec(b_layout, b_order, b_read, a_smem, precision))
    assert layout.read[ir.Operand.A] is ir.SmemRead.LDMATRIX and not layout.transposed(ir.Operand.A)
    check_layout(layout, np.random.default_rng(2))


def test_f32_ldmatrix_groups_matrices_four_at_a_time():
    """A 64x64 warp tile per k-step: each A block (16 rows x 8 k) is one x4 (rows 0-7 and 8-15, k 0-3
    and 4-7), each x4 of B covers two n blocks; 8 instructions instead of 32 32-bit loads."""
    layout = lowered(f32_ldmatrix_spec("col", "nk", "ldmatrix"))
    a, b = layout.matrix_loads(ir.Operand.A, 0), layout.matrix_loads(ir.Operand.B, 0)
    assert [load.count for load in a + b] == [4] * 8
    assert [(m.block, m.register, m.mn, m.k) for m in a[1].matrices] == [
        (1, 0, 16, 0), (1, 1, 24, 0), (1, 2, 16, 4), (1, 3, 24, 4)]
    assert [(m.block, m.register, m.mn, m.k) for m in b[1].matrices] == [
        (2, 0, 16, 0), (2, 1, 16, 4), (3, 0, 24, 0), (3, 1, 24, 4)]
    accesses = layout.fragment_accesses(0)
    assert len(accesses) == 8 and {(a.op, a.width_bytes, a.lanes) for a in accesses} == {("ldmatrix", 16, WARP)}


@settings(deadline=None, max_examples=60)
@given(mma_spec_texts())
def test_every_drawn_mma_spec_computes_a_times_b(text):
    check_layout(lowered(text), np.random.default_rng(1))


@settings(deadline=None, max_examples=30)
@given(mma_spec_texts(dtypes=("f32",), reads=("ldmatrix",)))
def test_every_drawn_f32_ldmatrix_spec_computes_a_times_b(text):
    check_layout(lowered(text), np.random.default_rng(4))

"""The shared-memory instructions the analysis counts are the ones the .cu prints.

For every spec and every kernel of its file: each copy site prints exactly the plan's copy stores
(operand, width, offset as rendered), in order, and each fragment-load site prints exactly the
plan's fragment loads of one k index (`0`, `kk` or `kk + 1`; for tensor-core kernels the ldmatrix
and 32-bit loads of one k-step); the analysis counts the same stores once and the same loads once
per k index (k-step) of the k-tile.
"""
import re
from pathlib import Path

import pytest

from gemmdsl import ir
from gemmdsl.compiler import compile_path
from gemmdsl.emit.ldmatrix import addresses_ldmatrix
from gemmdsl.layout import KK, KernelLayout, TileLayout
from gemmdsl.mma_layout import MmaLayout
from gemmdsl.paths import path_of
from gemmdsl.frontend import load_spec

# The lane-level shared-memory model covers the FMA and mma.sync paths; wgmma reads shared memory itself, and the
# GEMV and dequantizing paths stage none of their operands there.
SPECS = [path for path in sorted((Path(__file__).resolve().parent.parent / "specs").glob("*.gemm"))
         if path_of(load_spec(path)).name in ("fma", "mma_sync")]
OPERANDS = (ir.Operand.A, ir.Operand.B)
# Each instruction names its width: sts/lds bits, cp.async bytes, ldmatrix 16-byte rows, a 32-bit
# word load; a direct copy (`a_dst[...] = `) stores one element.
STORE = re.compile(r"\b(?:sts(?P<bits>\d+)\(|cp_async_(?P<bytes>\d+)(?:_zfill)?\(|)(?P<operand>[ab])_dst(?: \+ |\[)")
LOAD = re.compile(r"\b(?:lds(?P<bits>\d+)\(|(?P<word>lds_word)\(|(?P<rows>ldmatrix)_x\d(?:_trans)?\([^;]*?)"
                  r"(?P<operand>[ab])_(?:read|next|first) \+ ")


def argument(text: str, start: int) -> str:
    """The whole expression that starts at `start` and ends at the ',', ')' or ']' closing it: an
    address's offset, every term of it (a call, and anything added or scaled after the call)."""
    depth = 0
    for i in range(start, len(text)):
        char = text[i]
        if char in "([{":
            depth += 1
        elif depth == 0 and char in ",)];":
            return text[start:i].strip()
        elif char in ")]}":
            depth -= 1
    raise AssertionError(f"unterminated expression at {text[start:start + 80]!r}")


def width_bytes(groups: dict) -> int:
    if groups.get("bits"):
        return int(groups["bits"]) // 8
    if groups.get("bytes"):
        return int(groups["bytes"])
    return 16 if groups.get("rows") else 4 if groups.get("word") else 0  # 0: one element


def printed(pattern: re.Pattern, body: str, element_bytes: int) -> list[tuple[str, int, str]]:
    """(operand, width in elements, offset as printed) of each matching instruction, in program order."""
    return [(match["operand"], max(1, width_bytes(match.groupdict()) // element_bytes),
             argument(body, match.end())) for match in pattern.finditer(body)]


def kernel_bodies(cuda: str) -> dict[str, str]:
    parts = re.split(r'extern "C" __global__ void __launch_bounds__\([^)]*\) (\w+)\(', cuda)
    return dict(zip(parts[1::2], parts[2::2]))


def as_rows(instructions) -> list[tuple[str, int, str]]:
    return [(i.operand.value, i.width, i.offset.render()) for i in instructions]


def split_into(sequence: list, blocks: list[list]) -> bool:
    """Whether `sequence` is a concatenation of the given blocks (each any number of times)."""
    if not sequence:
        return True
    return any(sequence[:len(b)] == b and split_into(sequence[len(b):], blocks) for b in blocks if b)


def stores_of(layout: TileLayout) -> list[tuple[str, int, str]]:
    return as_rows(s for op in OPERANDS for s in layout.copy_stores(op))


def loads_of(layout: TileLayout, kk) -> list[tuple[str, int, str]]:
    """The fragment loads of one k index (FMA) or one k-step (tensor cores), in elements."""
    if isinstance(layout, MmaLayout):
        return as_rows(layout.fragment_accesses(kk))
    assert isinstance(layout, KernelLayout)
    return as_rows(f for op in OPERANDS for f in layout.fragment_loads(op, kk))


def printed_loads_of(layout: TileLayout, kk) -> list[tuple[str, int, str]]:
    """`loads_of` as the emitters print the offsets: 16-bit ldmatrix takes a 32-bit shared address, so
    its offset is scaled to bytes there."""
    if not (isinstance(layout, MmaLayout) and addresses_ldmatrix(layout)):
        return loads_of(layout, kk)
    return [(a.operand.value, a.width, (a.offset * layout.element_bytes if a.op == "ldmatrix" else a.offset).render())
            for a in layout.fragment_accesses(kk)]


def k_indices(layout: TileLayout) -> int:
    return layout.k_steps if isinstance(layout, MmaLayout) else layout.bk


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_printed_shared_memory_instructions_are_the_analysed_ones(path):
    artifacts = compile_path(path)
    bodies = kernel_bodies(artifacts.cuda)
    for variant in artifacts.plan.variants:
        layout, body = variant.layout, bodies[variant.entry]
        stores = printed(STORE, body, layout.element_bytes)
        expected = stores_of(layout)
        assert stores and len(stores) % len(expected) == 0
        assert all(stores[i:i + len(expected)] == expected for i in range(0, len(stores), len(expected)))
        per_k = {str(kk): printed_loads_of(layout, kk) for kk in (0, KK, KK + 1)}
        loads = printed(LOAD, body, layout.element_bytes)
        assert loads and split_into(loads, list(per_k.values()))

    analysed = artifacts.analysis.layout.smem_accesses()
    layout = artifacts.plan.layout
    assert as_rows(a for a in analysed if a.op == "store") == stores_of(layout)
    analysed_loads = [a for a in analysed if a.op in ("load", "ldmatrix")]
    assert len(analysed_loads) == k_indices(layout) * len(loads_of(layout, KK))
    assert all(as_rows(a for a in analysed_loads if a.kk == kk) == loads_of(layout, kk)
               for kk in range(k_indices(layout)))


def test_a_printed_offset_is_the_whole_argument():
    """A term after the offset's call (`+ 1`, `* 2`) is part of what is compared, so it cannot slip by."""
    body = ("sts32(a_dst + a_smem_offset(tid / 2, 0) + 1, a_stage[0].x);\n"
            "b_dst[b_smem_offset(tid, (tid + 1) % 4) + 1] = b_src[tid];\n"
            "cp_async_16(a_dst + a_smem_offset(tid, 4) * 2, a_src + tid);\n")
    assert printed(STORE, body, 4) == [("a", 1, "a_smem_offset(tid / 2, 0) + 1"),
                                       ("b", 1, "b_smem_offset(tid, (tid + 1) % 4) + 1"),
                                       ("a", 4, "a_smem_offset(tid, 4) * 2")]
    loads = "ldmatrix_x4(r[0], r[1], r[2], r[3], a_first + a_smem_offset(lane, 8) * 2);\nx = lds128(b_read + 4);\n"
    assert printed(LOAD, loads, 2) == [("a", 8, "a_smem_offset(lane, 8) * 2"), ("b", 8, "4")]

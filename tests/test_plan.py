"""The shared-memory instructions the analysis counts are the ones the .cu prints.

For every spec and every kernel of its file: each copy site prints exactly the plan's copy stores
(operand, width, offset as rendered), in order, and each fragment-load site prints exactly the
plan's fragment loads of one k index (`0`, `kk` or `kk + 1`); the analysis counts the same
stores once and the same loads once per k index of the k-tile.
"""
import re
from pathlib import Path

import pytest

from gemmdsl import ir
from gemmdsl.compiler import compile_path
from gemmdsl.layout import KK, KernelLayout

SPECS = sorted((Path(__file__).resolve().parent.parent / "specs").glob("*.gemm"))
OPERANDS = (ir.Operand.A, ir.Operand.B)
STORE = re.compile(r"\b(?:sts(?P<bits>\d+)|cp_async_(?P<bytes>\d+)(?:_zfill)?)\((?P<operand>[ab])_dst \+ ")
LOAD = re.compile(r"\blds(?P<bits>\d+)\((?P<operand>[ab])_(?:read|next|first) \+ ")


def balanced(text: str, start: int) -> str:
    """The call expression `name(...)` that starts at `start`."""
    depth, i = 0, text.index("(", start)
    while True:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            return text[start:i]


def printed(pattern: re.Pattern, body: str) -> list[tuple[str, int, str]]:
    """(operand, width in elements, offset) of each matching instruction, in program order."""
    found = []
    for match in pattern.finditer(body):
        groups = match.groupdict()
        width = int(groups["bits"]) // 32 if groups["bits"] else int(groups["bytes"]) // 4
        found.append((groups["operand"], width, balanced(body, match.end())))
    return found


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


def stores_of(layout: KernelLayout) -> list[tuple[str, int, str]]:
    return as_rows(s for op in OPERANDS for s in layout.copy_stores(op))


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_printed_shared_memory_instructions_are_the_analysed_ones(path):
    artifacts = compile_path(path)
    bodies = kernel_bodies(artifacts.cuda)
    for variant in artifacts.plan.variants:
        layout, body = variant.layout, bodies[variant.entry]
        stores = printed(STORE, body)
        expected = stores_of(layout)
        assert stores and len(stores) % len(expected) == 0
        assert all(stores[i:i + len(expected)] == expected for i in range(0, len(stores), len(expected)))
        per_k = {str(kk): as_rows(f for op in OPERANDS for f in layout.fragment_loads(op, kk))
                 for kk in (0, KK, KK + 1)}
        loads = printed(LOAD, body)
        assert loads and split_into(loads, list(per_k.values()))

    analysed = artifacts.analysis.layout.smem_accesses()
    layout = artifacts.plan.layout
    assert as_rows(a for a in analysed if a.op == "store") == stores_of(layout)
    analysed_loads = [a for a in analysed if a.op == "load"]
    assert len(analysed_loads) == layout.bk * len(per_k["kk"])
    assert all(as_rows(a for a in analysed_loads if a.kk == kk)
               == as_rows(f for op in OPERANDS for f in layout.fragment_loads(op, kk)) for kk in range(layout.bk))

"""Narrow kernels (gemmdsl/plan.py): checked cp.async files run operands aligned to less than the vector
kernel needs on 8- or 4-byte copies. The rule picks, for every alignment, a kernel whose every global
access the operands align; the C launcher picks as the runtime does; the emitted kernels copy at their width."""
import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl import ir
from gemmdsl.arrays import ArrayView
from gemmdsl.compiler import compile_path
from gemmdsl.plan import Role
from gemmdsl.runtime import KernelRequirements, check_call

ROOT = Path(__file__).resolve().parent.parent
FALLBACKS = [ROOT / "specs" / f"{name}.gemm" for name in ("hgemm_h100_bf16c_any", "hgemm_h100_any",
                                                           "tf32_h100_any", "batched_v3")]
BASE = 0x7F0000000000  # 256-byte aligned


@cache
def compiled(path: Path):
    return compile_path(path)


ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


def view(req: KernelRequirements, name: str, rows: int, cols: int, ld: int, offset_bytes: int) -> ArrayView:
    strides = (ld, 1) if req.layouts[name] == "row" else (1, ld)
    dtype = req.dtypes[name]
    return ArrayView("fake", (rows, cols), strides, dtype, ITEMSIZE[dtype], BASE + (1 << 40) * "ABC".index(name)
                     + offset_bytes, 0)


def chosen(req: KernelRequirements, m: int, n: int, k: int, lds: dict[str, int], offsets: dict[str, int]) -> str:
    """The kernel the runtime picks for operands `offsets` bytes past BASE with these leading dimensions."""
    extents = {"A": (m, k), "B": (k, n), "C": (m, n)}
    views = {name.lower(): view(req, name, *extents[name], lds[name], offsets[name]) for name in "ABC"}
    return check_call(req, views["a"], views["b"], views["c"], alpha=1.0, beta=0.0).entry


def test_the_16_bit_fallbacks_have_8_and_4_byte_kernels_the_f32_ones_8():
    bf16 = compiled(FALLBACKS[0]).plan.launch.entries
    assert [(k.entry, k.width_bytes, k.vector_elements) for k in bf16.narrow] == [
        ("hgemm_h100_bf16c_any_kernel_8byte", 8, {"a": 4, "b": 4, "c": 2}),
        ("hgemm_h100_bf16c_any_kernel_4byte", 4, {"a": 2, "b": 2, "c": 2})]
    tf32 = compiled(FALLBACKS[2]).plan.launch.entries
    assert [(k.width_bytes, k.vector_elements) for k in tf32.narrow] == [(8, {"a": 2, "b": 2, "c": 2})]
    exact = compiled(ROOT / "specs" / "hgemm_h100_bf16c.gemm").plan.launch.entries  # TMA: no fallback at all
    assert exact.narrow == () and exact.scalar is None


def test_k_700_bf16_runs_the_8_byte_kernel_and_k_77_the_scalar_one():
    req = KernelRequirements.from_metadata(compiled(FALLBACKS[0]).metadata)
    aligned = {"A": 0, "B": 0, "C": 0}
    assert chosen(req, 3000, 5000, 704, {"A": 704, "B": 704, "C": 5000}, aligned) == "hgemm_h100_bf16c_any_kernel"
    assert chosen(req, 3000, 5000, 700, {"A": 700, "B": 700, "C": 5000}, aligned).endswith("_8byte")
    assert chosen(req, 3000, 5000, 702, {"A": 702, "B": 702, "C": 5000}, aligned).endswith("_4byte")
    assert chosen(req, 2048, 2048, 77, {"A": 77, "B": 77, "C": 2048}, aligned).endswith("_scalar")
    shifted = {"A": 0, "B": 2, "C": 0}  # B one element off: 2-byte aligned
    assert chosen(req, 512, 512, 512, {"A": 512, "B": 512, "C": 512}, shifted).endswith("_scalar")
    shifted = {"A": 8, "B": 0, "C": 0}  # A four elements off: 8-byte aligned
    assert chosen(req, 512, 512, 512, {"A": 512, "B": 512, "C": 512}, shifted).endswith("_8byte")


def global_addresses(layout, operand: ir.Operand, pointer: int, ld: int, origin: tuple[int, int]):
    """(byte address, copy bytes) of every cp.async one block issues for one k-tile of `operand`, the tile at
    `origin` (row, column) of the matrix as it lies in memory."""
    env = layout.thread_env()
    size = layout.element_bytes
    for store in layout.copy_stores(operand):
        rows = np.broadcast_to(store.chunk.row.evaluate(env), (layout.threads,)) + origin[0]
        cols = np.broadcast_to(store.chunk.col.evaluate(env), (layout.threads,)) + store.element + origin[1]
        for row, col in zip(rows.tolist(), cols.tolist()):
            yield pointer + (row * ld + col) * size, store.width * size


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(FALLBACKS[:3]), st.integers(0, 15), st.integers(0, 15), st.integers(1, 64),
       st.integers(1, 64), st.integers(0, 3), st.integers(0, 3))
def test_the_chosen_kernel_aligns_every_copy_it_issues(path, offset_a, offset_b, k_extra_a, k_extra_b, tile_m,
                                                       k_tile):
    """Whatever the pointers' byte offsets and the leading dimensions, the kernel the rule picks issues only
    copies whose source address its copy width divides (cp.async faults otherwise), and its C pairs too."""
    artifacts = compiled(path)
    req = KernelRequirements.from_metadata(artifacts.metadata)
    size = artifacts.spec.problem.a.dtype.bytes
    offsets = {"A": offset_a - offset_a % size, "B": offset_b - offset_b % size, "C": 0}
    m, n, k = 300, 300, 200
    lds = {"A": k + k_extra_a, "B": k + k_extra_b, "C": n}
    entry = chosen(req, m, n, k, lds, offsets)
    variant = next(v for v in artifacts.plan.variants if v.entry == entry)
    bm, bn, bk = req.launch.block_tile
    for operand, origin_mn in ((ir.Operand.A, tile_m * bm), (ir.Operand.B, tile_m * bn)):
        name = operand.value.upper()
        pointer = BASE + (1 << 40) * "ABC".index(name) + offsets[name]
        assert artifacts.spec.k_contiguous(operand)  # the fallbacks' A is row-major, B column-major
        for address, width in global_addresses(variant.layout, operand, pointer, lds[name], (origin_mn, k_tile * bk)):
            assert address % width == 0, (entry, operand, address, width)
    assert variant.layout.c_store_width() == 1 or lds["C"] % 2 == 0


@pytest.mark.parametrize("path", FALLBACKS[:3], ids=lambda p: p.stem)
def test_each_narrow_kernel_copies_at_its_width(path):
    artifacts = compiled(path)
    kernels = re.split(r'^extern "C" __global__ ', artifacts.cuda, flags=re.M)
    for narrow in artifacts.plan.launch.entries.narrow:
        body = next(text for text in kernels if re.match(rf"void __launch_bounds__\(\d+\) {narrow.entry}\(", text))
        copies = set(re.findall(r"cp_async_(\d+)(?:_zfill)?\(", body))
        assert copies == {str(narrow.width_bytes)}, (narrow.entry, copies)
        assert f"Narrow variant: global accesses of at most {narrow.width_bytes} bytes" in body
    variants = {v.role for v in artifacts.plan.variants}
    assert Role.NARROW in variants and Role.STREAM_K_NARROW not in variants  # no stream-K in these files

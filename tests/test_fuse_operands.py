"""The fuse chain's operands in the Python API (gemmdsl/fuse_operands.py): which a kernel reads, their
checks, their launch arguments; pure, with views made here."""
import pytest
from hypothesis import given, strategies as st

from gemmdsl import ir
from gemmdsl.arrays import ArrayView
from gemmdsl.fuse_operands import (FuseOperands, check_no_overlap_with_c, check_operand_names, fuse_arguments,
                                   fuse_views, moved)

BASE = 0x7F0000000000
CHAIN = {"formula": "silu(acc + bias[n]) + R", "scale": "rowcol", "activation": "silu",
         "bias": {"along": "n", "dtype": "bf16"}, "residual": {"dtype": "bf16", "layout": "col"}}


def chain(**steps) -> FuseOperands:
    return FuseOperands.from_metadata({"fuse": {"formula": "f", **steps}})


def view(shape, strides, dtype="bfloat16", itemsize=2, pointer=BASE):
    return ArrayView("torch", shape, strides, dtype, itemsize, pointer, 0)


def test_the_operands_come_from_the_metadata_in_the_kernels_order():
    fuse = FuseOperands.from_metadata({"fuse": CHAIN})
    assert fuse.names == ("bias", "residual", "row_scale", "col_scale")
    bias, residual = fuse.operands[:2]
    assert (bias.kind.name, bias.along, bias.dtype) == ("vector", ir.Broadcast.N, ir.DType.BF16)
    assert (residual.kind.name, residual.layout, residual.dtype) == ("matrix", ir.MatrixLayout.COL, ir.DType.BF16)
    assert FuseOperands.from_metadata({}) is None


def test_names_must_be_exactly_the_chains():
    fuse = FuseOperands.from_metadata({"fuse": dict(CHAIN, scale=None)})
    check_operand_names("k", fuse, {"bias": 1, "residual": 2})
    with pytest.raises(TypeError, match="pass residual="):
        check_operand_names("k", fuse, {"bias": 1})
    with pytest.raises(TypeError, match="k takes no col_scale="):
        check_operand_names("k", fuse, {"bias": 1, "residual": 2, "col_scale": 3})


def test_views_and_arguments():
    fuse = FuseOperands.from_metadata({"fuse": CHAIN})
    m, n = 30, 20
    views = fuse_views("k", fuse, {"bias": view((n,), (1,), pointer=BASE),
                                   "residual": view((m, n), (1, 32), pointer=BASE + 4096),
                                   "row_scale": view((m,), (1,), "float32", 4, BASE + 8192),
                                   "col_scale": view((n,), (1,), "float32", 4, BASE + 12288)}, m, n)
    assert views["residual"].ld == 32 and views["bias"].along == "n" and views["row_scale"].along == "m"
    assert [int(x) for x in fuse_arguments(views)] == [BASE, BASE + 4096, 32, BASE + 8192, BASE + 12288]
    shifted = moved(views, 8, 4)  # a sub-launch at row 8, column 4
    assert [int(x) for x in fuse_arguments(shifted)] == [BASE + 2 * 4, BASE + 4096 + 2 * (4 * 32 + 8), 32,
                                                        BASE + 8192 + 4 * 8, BASE + 12288 + 4 * 4]
    with pytest.raises(ValueError, match="must be contiguous"):
        fuse_views("k", fuse, {"bias": view((n,), (2,)), "residual": view((m, n), (1, 32)),
                               "row_scale": view((m,), (1,), "float32", 4), "col_scale": view((n,), (1,), "float32", 4)},
                   m, n)


@given(st.integers(0, 4096), st.integers(1, 64), st.integers(1, 64))
def test_a_vector_may_not_overlap_c_but_the_residual_may_be_c(offset, m, n):
    c_at = BASE + 65536
    bias_at = c_at - 2048 + offset
    bias = fuse_views("k", chain(bias={"along": "m", "dtype": "f32"}), {"bias": view((m,), (1,), "float32", 4, bias_at)},
                      m, n)
    if bias_at < c_at + 4 * m * n and c_at < bias_at + 4 * m:
        with pytest.raises(ValueError, match="bias overlaps C"):
            check_no_overlap_with_c(bias, c_at, n, "row", 4, m, n)
    else:
        check_no_overlap_with_c(bias, c_at, n, "row", 4, m, n)
    same = fuse_views("k", chain(residual={"dtype": "f32", "layout": "row"}),
                      {"residual": view((m, n), (n, 1), "float32", 4, c_at)}, m, n)
    check_no_overlap_with_c(same, c_at, n, "row", 4, m, n)  # C = f(A @ B) + C in place
    shifted = fuse_views("k", chain(residual={"dtype": "f32", "layout": "row"}),
                         {"residual": view((m, n), (n, 1), "float32", 4, c_at + 4)}, m, n)
    if m * n > 1:
        with pytest.raises(ValueError, match="residual overlaps C"):
            check_no_overlap_with_c(shifted, c_at, n, "row", 4, m, n)

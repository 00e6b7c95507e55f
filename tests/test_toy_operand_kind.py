"""An operand kind is a class and a registration: a toy kind, "column_scalar" (one value for the whole launch that
rides with each column's values in `fuse_n`, where the shipped "scalar" rides with each row's), written into a
temporary folder with a toy op `shift: n;` that reads one operand of it, and registered from there with nothing in
gemmdsl/ edited. The spec compiles, its C carries the value where the kind says, and the launcher, the cost
pass, the runtime's checks and verify's random operands treat the operand as the kind says.
"""
from __future__ import annotations

import numpy as np
import pytest

from gemmdsl import fuse_ops, ir
from gemmdsl.analysis import analyze
from gemmdsl.arrays import ArrayView
from gemmdsl.compiler import compile_text
from gemmdsl.fuse_operands import FuseOperands, fuse_views
from gemmdsl.fuse_ops.kinds import operand_kind, unregister_kind
from test_emulated_fuse import spec_text
from toy_modules import module_from_folder

TOY_MODULE = '''
from dataclasses import dataclass

import numpy as np

from gemmdsl import ir
from gemmdsl.fuse_ops import FuseStep, Operand, Work, register
from gemmdsl.fuse_ops.kinds import ArrayRule, OperandKind, register_kind


class ColumnScalarKind(OperandKind):
    """One value for the launch in device memory, read with each column's values into fuse_n."""

    name = "column_scalar"
    uniform = True

    def carried_along(self, operand):
        return ir.Broadcast.N

    def array(self, operand, m, n, k, groups):
        return ArrayRule((), "one value for the launch (shape () or (1,))")


COLUMN_SCALAR = register_kind(ColumnScalarKind())


@register
@dataclass(frozen=True, kw_only=True)
class Shift(FuseStep):
    key = "shift"
    syntax = staticmethod(lambda reader, value: reader.name(value, ("n",), "n (the value rides with each column's)"))
    order = 35  # after the bias, before the activation

    @classmethod
    def from_value(cls, value, span):
        return cls(span=span)

    @property
    def value(self):
        return "n"

    def metadata(self):
        return "n"

    def describe(self, x):
        return f"{x} + shift"

    def operands(self):
        return self.operands_of(self.metadata())

    @staticmethod
    def operands_of(entry):
        return (Operand("shift", "column_scalar", ir.DType.F32, field="shift"),)

    def c_statement(self, spec):
        return "x += n.shift;"

    @staticmethod
    def reference(entry, x, operands):
        return x + float(np.asarray(operands["shift"]).reshape(()))

    def work(self, spec, reads):
        return Work(alu=1)
'''
CHAIN = "bias: m; shift: n; residual: f32 row;"
M, N, K = 96, 80, 64


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The toy kind and op, imported from a module in a temporary folder; unregistered afterwards."""
    with module_from_folder(tmp_path_factory.mktemp("toy_kind"), "toy_column_scalar", TOY_MODULE) as module:
        try:
            yield module
        finally:
            fuse_ops.unregister(module.Shift)
            unregister_kind(module.COLUMN_SCALAR)


@pytest.fixture(scope="module")
def artifacts(toy):
    return compile_text(spec_text(CHAIN, alpha_beta=False), "sgemm_fused.gemm")


def test_the_kind_is_registered_by_name(toy):
    assert operand_kind("column_scalar") is toy.COLUMN_SCALAR
    (shift,) = toy.Shift.operands_of("n")
    assert shift.kind is toy.COLUMN_SCALAR


def test_a_column_carries_the_value_read_at_its_one_address(artifacts):
    cuda = artifacts.cuda
    assert "struct fuse_n { float shift; };" in cuda
    assert "v.shift = col < N ? shift[0] : 0.0f;" in cuda  # one value: index 0 whatever the column
    assert "struct fuse_m { float bias; };" in cuda
    body = cuda[cuda.index("fuse_chain(float acc"):]
    assert body.index("x += m.bias;") < body.index("x += n.shift;") < body.index("x += r;")
    assert artifacts.metadata["fuse"]["shift"] == "n"
    assert artifacts.metadata["fuse"]["formula"] == "acc + bias[m] + shift + R"


def test_the_kernels_take_its_pointer_and_a_sub_launch_does_not_move_it(artifacts):
    """The edge strips' launches move the vector and the matrix with C, and leave the one value where it is."""
    cuda = artifacts.cuda
    assert "const float* bias, const float* R, int ldr, const float* shift" in cuda  # after the shipped ops'
    assert "beta, bias, R + inner_n, ldr, shift);" in cuda
    assert "beta, bias + inner_m, R + (size_t)inner_m * ldr, ldr, shift);" in cuda


def test_the_cost_pass_leaves_its_bytes_out(toy):
    from gemmdsl.frontend import load
    from gemmdsl.source import SourceFile
    spec, diagnostics = load(SourceFile("sgemm_fused.gemm", spec_text(CHAIN, alpha_beta=False)))
    assert not diagnostics
    cost = analyze(spec, (M, N, K)).facts["fuse"]
    assert set(cost.dram_bytes) == {"bias", "residual"}
    assert "shift" in cost.formula


def view(shape: tuple, strides: tuple, pointer: int) -> ArrayView:
    return ArrayView("numpy", shape, strides, "float32", 4, pointer, None)


def test_the_runtime_checks_the_array_its_kind_takes(artifacts):
    fuse = FuseOperands.from_metadata(artifacts.metadata)
    assert fuse.names == ("bias", "residual", "shift")
    good = {"bias": view((M,), (1,), 0x10000), "residual": view((M, N), (N, 1), 0x20000),
            "shift": view((), (), 0x90000)}
    views = fuse_views("k", fuse, good, M, N, K)
    assert views["shift"].scalar and views["shift"].pointer == 0x90000
    with pytest.raises(ValueError, match=r"shift must be one value for the launch \(shape \(\) or \(1,\)\), got "
                                         r"shape \(80,\)"):
        fuse_views("k", fuse, {**good, "shift": view((N,), (1,), 0x90000)}, M, N, K)


def test_verify_draws_one_value_for_it(artifacts):
    from gemmdsl.verify import Case, chain_operands

    class HostArrays:
        rng = np.random.default_rng(5)

        def random(self, count, dtype, wide=False):
            return self.rng.uniform(-1, 1, count)

    chain = chain_operands(HostArrays(), artifacts.metadata["fuse"], M, N, K, Case("contiguous", False, 1, False))
    assert chain["shift"].shape == () and chain["bias"].shape == (M,) and chain["residual"].shape == (M, N)

"""The kinds of operand a fuse step reads (docs/fusion.md, "Adding an operand kind"), registered by name.

An operand's kind answers every question shared code asks of an operand beyond its name and type: the kernel
parameters it takes, whether a row or a column of C carries its value into the chain (`fuse_m`, `fuse_n`), whether
it is read per element, where a sub-launch's share of it starts, and what array the Python API takes for it. The
emitter, the launcher, the cost pass, the runtime and verify ask the kind and never its name; a new kind is a
subclass and a `register_kind`, in a module of its own if need be.

The kinds sit on the IR layer: what a tool does with an operand (the runtime's checks of an array, verify's
random values) it reads from `ArrayRule`, plain data, rather than from code here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from .. import ir

K_BLOCK = 128  # elements of K one k-loop operand's value covers (DeepSeek's block scales: 1 x 128, 128 x 128)


@dataclass(frozen=True)
class ArrayRule:
    """The array the Python API takes for one operand of an M x N x K launch, as data the runtime checks and verify
    fills: its shape, and how the kernel walks it when a launch is split into parts of C."""

    shape: tuple[int, ...]  # () for one value (an array of shape (1,) is taken too)
    what: str  # the shape in words, for the runtime's message: "{name} must be {what}, got shape ..."
    layout: ir.MatrixLayout | None = None  # M x N in this layout with a leading dimension of its own (None: contiguous)
    along: ir.Broadcast | None = None  # the axis of C whose rows (columns) it follows; None: it stays put
    per: int = 1  # rows (columns) of C one row of the array covers
    row: int = 0  # values in one row of the array that belong to one row (column) of C; 0: one value
    groups: int = 1  # a grouped kernel's: one row of values per group


class Operand(Protocol):
    """What a kind reads of its operand (fuse_ops.base.Operand, which holds the kind: named here, not imported,
    so that the two modules import one way)."""

    dtype: ir.DType
    parameter: str
    along: ir.Broadcast | None
    ld: str
    layout: ir.MatrixLayout | None
    per: int


class OperandKind:
    """What shared code asks of an operand of this kind (`operand` is a fuse_ops.Operand of it)."""

    name: ClassVar[str]  # the kind's registered name
    uniform: ClassVar[bool] = False  # one value for the whole launch: read at index 0, not staged, not priced as bytes
    per_element: ClassVar[bool] = False  # read at each element of C as the chain's `r` (at most one in a chain)

    def parameters(self, operand: "Operand") -> tuple[tuple[str, str], ...]:
        """(C type, name) of the kernel parameters it takes."""
        return ((f"const {operand.dtype.c_type}*", operand.parameter),)

    def carried_along(self, operand: "Operand") -> ir.Broadcast | None:
        """The axis whose `fuse_m` (a row of C) or `fuse_n` (a column) carries its value as the field `field`;
        None: the chain's rows and columns do not carry it."""
        return None

    def start(self, operand: "Operand", row: str, col: str) -> str:
        """The offset in elements (C) of its first value for a sub-launch whose C starts at (row, col); "0": none."""
        return "0"

    def array(self, operand: "Operand", m: int, n: int, k: int, groups: int) -> ArrayRule:
        """The array the Python API takes for it (`groups`: a grouped kernel's count of groups, 0 otherwise)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class VectorKind(OperandKind):
    """One value per row (along m) or column (along n) of C, loaded into `fuse_m` or `fuse_n`; a grouped kernel's
    vector along n is one row of N values per group."""

    name = "vector"

    def carried_along(self, operand: "Operand") -> ir.Broadcast | None:
        return operand.along

    def start(self, operand: "Operand", row: str, col: str) -> str:
        return row if operand.along is ir.Broadcast.M else col

    def array(self, operand: "Operand", m: int, n: int, k: int, groups: int) -> ArrayRule:
        if operand.along is ir.Broadcast.N and groups:
            return ArrayRule((groups, n), f"{groups} x {n} for a grouped kernel (one row of N values per group of B)",
                             along=operand.along, groups=groups)
        rows = operand.along is ir.Broadcast.M
        length = m if rows else n
        return ArrayRule((length,), f"a vector of {length} values (one per {'row' if rows else 'column'} of C, "
                                    f"{'M' if rows else 'N'}={length})", along=operand.along)


class ScalarKind(OperandKind):
    """One value for the whole launch in device memory (a per-tensor scale), read by the kernel with each row's
    values into `fuse_m`: its value stays on the GPU."""

    name = "scalar"
    uniform = True

    def carried_along(self, operand: "Operand") -> ir.Broadcast | None:
        return ir.Broadcast.M

    def array(self, operand: "Operand", m: int, n: int, k: int, groups: int) -> ArrayRule:
        return ArrayRule((), "one value (shape () or (1,))")


class MatrixKind(OperandKind):
    """An M x N matrix in the operand's `layout` with a leading dimension `ld` of its own, read at each element."""

    name = "matrix"
    per_element = True

    def parameters(self, operand: "Operand") -> tuple[tuple[str, str], ...]:
        return super().parameters(operand) + (("int", operand.ld),)

    def start(self, operand: "Operand", row: str, col: str) -> str:
        return matrix_offset(operand.layout, operand.ld, row, col)

    def array(self, operand: "Operand", m: int, n: int, k: int, groups: int) -> ArrayRule:
        return ArrayRule((m, n), f"MxN = {m}x{n}", layout=operand.layout)


class KLoopKind(OperandKind):
    """Read by the main loop, not the epilogue (FP8 block scales): f32, row-major, one row per `per` rows (columns,
    `along`) of C and one value per K_BLOCK elements of K."""

    name = "k_loop"

    def array(self, operand: "Operand", m: int, n: int, k: int, groups: int) -> ArrayRule:
        rows_of_c = operand.along is ir.Broadcast.M
        rows, blocks = -(-(m if rows_of_c else n) // operand.per), -(-k // K_BLOCK)
        covers = (f"{operand.per} " if operand.per > 1 else "") + ("row" if rows_of_c else "column") + \
            ("s" if operand.per > 1 else "")
        what = f"one row per {covers} of {'A' if rows_of_c else 'B'}"
        return ArrayRule((rows, blocks), f"{rows} x {blocks} ({what}, one value per {K_BLOCK} elements of K={k})",
                         along=operand.along, per=operand.per, row=blocks)


def matrix_offset(layout: ir.MatrixLayout, ld: str, row: str, col: str) -> str:
    """The offset in elements (C) of element (row, col) of a matrix in `layout` with leading dimension `ld`."""
    if layout is ir.MatrixLayout.COL:
        row, col = col, row
    return col if row == "0" else f"(size_t){row} * {ld}" + ("" if col == "0" else f" + {col}")


_KINDS: dict[str, OperandKind] = {}


def register_kind(kind: OperandKind) -> OperandKind:
    """Make `kind` an operand kind that ops may name."""
    if kind.name in _KINDS and type(_KINDS[kind.name]) is not type(kind):
        raise ValueError(f"operand kind {kind.name!r} is registered already")
    _KINDS[kind.name] = kind
    return kind


def unregister_kind(kind: OperandKind) -> None:
    if _KINDS.get(kind.name) is kind:
        del _KINDS[kind.name]


def operand_kind(name: str) -> OperandKind:
    """The kind registered as `name` (KeyError naming the registered ones)."""
    if name not in _KINDS:
        raise KeyError(f"no operand kind {name!r}; registered: {', '.join(sorted(_KINDS))}")
    return _KINDS[name]


VECTOR, SCALAR, MATRIX, K_LOOP = (register_kind(kind()) for kind in (VectorKind, ScalarKind, MatrixKind, KLoopKind))

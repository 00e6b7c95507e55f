"""The fuse chain's operands in the Python API: which a fused kernel reads, their checks, their launch
arguments (pure: no CuPy; the runtime calls it, the CPU tests drive it with fakes).

A fused kernel (docs/fusion.md) takes, after its own parameters, the operands its chain reads, each step's
in the ops' operand order (gemmdsl/fuse_ops/): `bias`, then `R, ldr` (the residual), then A's scale and B's:
`row_scale` or `a_scale` (one f32 for A: per tensor), `col_scale` or `b_scale` (one f32 for B), or `a_scale`,
`b_scale` as block scales (A's M x ceil(K / 128), B's ceil(N / 128) x ceil(K / 128), f32, row-major). NAME.json records the chain under "fuse"; `FuseOperands.from_metadata` asks each op what its
entry reads, so the runtime passes exactly what the C launcher passes. The checks go by the operand's kind
(gemmdsl/fuse_ops/kinds.py: a vector, a scalar, a matrix, k-loop block scales), not by its op: each kind says
what array it takes (its ArrayRule), which `operand_view` checks.

Checks, each naming the operand: every operand the chain reads is given and nothing else; vectors are
1-D, contiguous, of their declared type and length (M values along m, N along n); a scalar is one value of
its type (a 0-dim array, as torch._scaled_mm's tensorwise scales, or one of shape (1,)), passed to the kernel
as its address: its value stays on the GPU; the residual is M x N
in its declared layout with a leading dimension of its own. Nothing may overlap C, except a residual
that is C itself (the same address, layout and leading dimension): each element of R is read by the
thread that then writes that element of C, so `C = f(A @ B) + C` in place is well defined.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy

from . import fuse_ops
from .fuse_ops.kinds import ArrayRule
from .arrays import DTYPE_NAMES, ArrayView, leading_dimension

# The keyword arguments the runtime takes for the chain (gemmdsl/runtime/kernel.py's `bind` and `__call__`).
FUSE_OPERANDS = ("bias", "residual", "row_scale", "col_scale", "a_scale", "b_scale")


@dataclass(frozen=True)
class FuseOperands:
    """What a fused kernel's chain reads, from its metadata: each step's operands (fuse_ops.Operand: name,
    kind, element type, a vector's axis, a matrix's layout), in the kernels' order."""

    operands: tuple[fuse_ops.Operand, ...] = ()
    formula: str = ""

    @classmethod
    def from_metadata(cls, metadata: dict) -> "FuseOperands | None":
        fuse = metadata.get("fuse")
        if fuse is None:
            return None
        steps = sorted((op for op in fuse_ops.ops() if fuse.get(op.key) is not None), key=lambda op: op.operand_order)
        return cls(tuple(operand for op in steps for operand in op.operands_of(fuse[op.key])), fuse["formula"])

    @property
    def names(self) -> tuple[str, ...]:
        """The keyword arguments a call must give, in the kernels' order."""
        return tuple(operand.name for operand in self.operands)


@dataclass(frozen=True)
class FuseView:
    """One chain operand as the kernel addresses it."""

    name: str
    pointer: int
    itemsize: int
    ld: int = 0  # the residual's leading dimension; a block scale's values per row (ceil(K / 128))
    along: str = ""  # a vector's or block scale's axis: "m" (indexed by row) or "n" (by column); the residual: ""
    layout: str = ""  # the residual's
    per: int = 1  # rows (columns) of C one value (one row of block scales) covers: 128 for b_scale
    groups: int = 1  # a grouped kernel's col_scale: one vector per group, back to back
    scalar: bool = False  # one value for the whole launch (a per-tensor scale): it does not move with C


def check_operand_names(kernel: str, fuse: FuseOperands | None, given: dict[str, Any]) -> None:
    """Every operand the chain reads is given, and nothing else (TypeError, naming them)."""
    wanted = fuse.names if fuse is not None else ()
    present = tuple(name for name, value in given.items() if value is not None)
    missing = [name for name in wanted if name not in present]
    extra = [name for name in present if name not in wanted]
    if extra:
        what = f"its fuse section computes {fuse.formula}" if fuse is not None else "it has no fuse section"
        raise TypeError(f"{kernel} takes no {', '.join(f'{name}=' for name in extra)}: {what}")
    if missing:
        raise TypeError(f"{kernel}'s fuse section computes {fuse.formula}: pass "
                        f"{', '.join(f'{name}=' for name in missing)}")


def fuse_views(kernel: str, fuse: FuseOperands, given: dict[str, ArrayView], m: int, n: int,
               k: int = 0, groups: int = 0) -> dict[str, FuseView]:
    """Check each chain operand against the chain and the problem (M x N x K, and a grouped kernel's G groups);
    how the kernel addresses it, in the kernels' order. What each operand must be is its kind's `array` rule."""
    return {operand.name: operand_view(kernel, operand.name, given[operand.name], DTYPE_NAMES[operand.dtype.value],
                                       operand.kind.array(operand, m, n, k, groups))
            for operand in fuse.operands}


def operand_view(kernel: str, name: str, array: ArrayView, dtype: str, rule: ArrayRule) -> FuseView:
    """An array of its declared type and the rule's shape: one value (shape () or (1,)), a matrix in the rule's
    layout with any leading dimension, or else row-major and contiguous."""
    check_dtype(name, array, dtype)
    shape = tuple(array.shape)
    if shape != rule.shape and not (rule.shape == () and shape == (1,)):
        raise ValueError(f"{name} must be {rule.what}, got shape {shape}")
    if rule.layout is not None:
        layout = rule.layout.value
        ld = leading_dimension(shape, tuple(array.strides), layout)
        if ld is None:
            raise ValueError(f"{name} must be {layout}-major: {kernel} was compiled with `{name}: ... {layout}`, but "
                             f"strides {tuple(array.strides)} (elements) for shape {shape} are not {layout}-major")
        return FuseView(name, array.pointer, array.itemsize, ld=ld, layout=layout)
    check_contiguous(name, array)
    return FuseView(name, array.pointer, array.itemsize, ld=rule.row, along=rule.along.value if rule.along else "",
                    per=rule.per, groups=rule.groups, scalar=rule.along is None)


def check_contiguous(name: str, array: ArrayView) -> None:
    """Row-major and contiguous: each axis of more than one element strided by the elements after it."""
    shape, strides = tuple(array.shape), tuple(array.strides)
    wanted = tuple(int(numpy.prod(shape[axis + 1:])) for axis in range(len(shape)))
    if all(size <= 1 or stride == step for size, stride, step in zip(shape, strides, wanted)):
        return
    if len(shape) == 1:
        raise ValueError(f"{name} must be contiguous (stride 1), got stride {strides[0]} elements; pass a "
                         f"contiguous copy")
    raise ValueError(f"{name} must be row-major and contiguous (strides {wanted} elements), got "
                     f"{strides}; pass a contiguous copy")


def check_dtype(name: str, array: ArrayView, dtype: str) -> None:
    if array.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {array.dtype}")


def byte_span(view: FuseView, m: int, n: int) -> tuple[int, int]:
    """[first, end) of the bytes the kernel reads of a chain operand."""
    if view.scalar:
        return view.pointer, view.pointer + view.itemsize
    if view.along:
        rows = -(-(m if view.along == "m" else n) // view.per)
        return view.pointer, view.pointer + view.groups * rows * max(view.ld, 1) * view.itemsize
    outer, inner = (m, n) if view.layout == "row" else (n, m)
    return view.pointer, view.pointer + ((outer - 1) * view.ld + inner) * view.itemsize


def check_no_overlap_with_c(views: dict[str, FuseView], c_pointer: int, c_ld: int, c_layout: str, c_itemsize: int,
                            m: int, n: int) -> None:
    """No chain operand may share a byte with C, but for a residual that is C itself."""
    c = FuseView("C", c_pointer, c_itemsize, ld=c_ld, layout=c_layout)
    c_start, c_end = byte_span(c, m, n)
    single = (m if c_layout == "row" else n) == 1  # one row (column) of C: its leading dimension is never used
    for view in views.values():
        if view.layout and (view.pointer, view.layout, view.itemsize) == (c_pointer, c_layout, c_itemsize) \
                and (view.ld == c_ld or single):
            continue  # C = f(A @ B) + C, in place: each element is read, then written, by one thread
        start, end = byte_span(view, m, n)
        if start < c_end and c_start < end:
            raise ValueError(f"{view.name} overlaps C: blocks write C while others still read {view.name}; pass "
                             f"{view.name} in memory of its own (a residual may be C itself, element for element)")


def moved(views: dict[str, FuseView], row: int, col: int) -> dict[str, FuseView]:
    """The operands of a sub-launch whose C starts at (row, col): vectors, block scales and the residual
    offset as C is (B's block scales move by whole blocks: `col` is a multiple of 128 for them); scalars stay."""
    out = {}
    for name, view in views.items():
        if view.scalar:
            elements = 0
        elif view.along:
            offset = row if view.along == "m" else col
            assert offset % view.per == 0, (name, offset)
            elements = offset // view.per * max(view.ld, 1)
        else:
            elements = row * view.ld + col if view.layout == "row" else col * view.ld + row
        out[name] = replace(view, pointer=view.pointer + elements * view.itemsize)
    return out


def fuse_arguments(views: dict[str, FuseView]) -> tuple:
    """The kernels' trailing parameters, in the order `fuse_views` made the views (the kernels'): each pointer,
    a matrix's followed by its leading dimension."""
    arguments: tuple = ()
    for view in views.values():
        arguments += (numpy.uint64(view.pointer),)
        if view.layout:
            arguments += (numpy.int32(view.ld),)
    return arguments

"""The Python runtime's rules for a `batch: grouped` call (runtime/ asks them; paths/wgmma/grouped.py is the
kernel): the operands' shapes, `offs`, and the tensor maps' third dimensions, as the C launcher has them.

A is all groups' rows (M x K, 2-D), B one K x N matrix per group (3-D: G x K x N, as every B is K x N; for
`b: col` the transposed view of G x N x K nn.Linear weights, `w.mT`; matrices back to back: group g's at g
times one matrix's extent), C is M x N (2-D); offs is a
vector of G int32 on the operands' GPU, the groups' cumulative row ends (torch._grouped_mm's `offs`). Its
values stay on the GPU: the kernel reads them (and clamps each end to [the previous end, M]).
"""
from __future__ import annotations

from .arrays import ArrayView

MAX_GROUPS = 65535  # paths/wgmma/grouped.MAX_GROUPS, which the C launcher checks


def check_grouped_operands(kernel: str, shapes: dict[str, tuple[int, ...]]) -> None:
    """A and C 2-D, B 3-D (one matrix per group); ValueError naming the operand otherwise."""
    for name, rank, what in (("A", 2, "all groups' rows, M x K"), ("B", 3, "one matrix per group, G x ..."),
                             ("C", 2, "all groups' rows, M x N")):
        if name in shapes and len(shapes[name]) != rank:
            raise ValueError(f"{name} must be {rank}-D for {kernel} (batch: grouped: {what}), got shape "
                             f"{tuple(shapes[name])}")


def check_offs(kernel: str, offs: ArrayView, groups: int, device: int) -> None:
    """offs: G int32 values, contiguous, on the operands' GPU."""
    if offs.dtype != "int32":
        raise TypeError(f"offs must be int32 (the groups' cumulative row ends), got {offs.dtype}")
    if tuple(offs.shape) != (groups,):
        raise ValueError(f"offs must be a vector of {groups} values, one per group of B (B holds {groups} "
                         f"matrices), got shape {tuple(offs.shape)}")
    if groups > 1 and offs.strides[0] != 1:
        raise ValueError(f"offs must be contiguous (stride 1), got stride {offs.strides[0]} elements")
    if groups > MAX_GROUPS:
        raise ValueError(f"{groups} groups is more than the {MAX_GROUPS} {kernel} takes")
    if offs.device is not None and offs.device != device:
        raise ValueError(f"offs is on GPU {offs.device} but the operands are on GPU {device}")


def check_offs_given(kernel: str, grouped: bool, given: bool) -> None:
    """A grouped kernel needs offs; any other refuses it."""
    if grouped and not given:
        raise ValueError(f"{kernel} has batch: grouped: pass offs=, the groups' cumulative row ends (G int32 on "
                         f"the GPU, as torch._grouped_mm takes them)")
    if given and not grouped:
        raise ValueError(f"offs= applies to batch: grouped kernels only; {kernel} is not grouped")


def check_b_packed(b_stride: int, b_extent: int, groups: int) -> None:
    """Group g's B at g times one matrix's extent (ldb x its outer dimension), as the C launcher steps."""
    if groups > 1 and b_stride != b_extent:
        raise ValueError(f"B's matrices must lie back to back: their stride is {b_stride} elements, but one matrix "
                         f"spans {b_extent} (leading dimension x rows); pass a contiguous B (x.contiguous())")


def map_batches(groups: int) -> dict[str, int]:
    """Each operand's map's third dimension: B's groups; one matrix of A and of C."""
    return {"a": 1, "b": groups, "c": 1}

"""The cross-field rules of a `fuse` section (docs/fusion.md), called from validate.py for every path.

The parser has read each step on its own; each op's `check` (gemmdsl/fuse_ops/) says how its step fits the
rest of the spec, and these rules hold for every chain.
"""
from __future__ import annotations

from typing import Callable

from . import fuse_ops, ir
from .source import Span

Report = Callable[[Span, str, str | None], None]


def check_fuse(spec: ir.KernelSpec, error: Report, stream_k_sums_whole: bool) -> None:
    """Every rule of the spec's fuse chain; `error` takes (span, message, hint). `stream_k_sums_whole`: the
    spec's path adds a stream-K tile's partial sums before its epilogue (InstructionPath.stream_k_sums_whole)."""
    fuse = spec.fuse
    if fuse is None:
        return
    if fuse.empty:
        keys = ", ".join(f"`{op.key}`" for op in fuse_ops.ops())
        error(fuse.span, "the fuse section has no step", f"give at least one of {keys}, or remove the section")
        return
    for step in fuse.steps:
        step.check(spec, error)
    if spec.block.stream_k and not stream_k_sums_whole:
        error(spec.block.at("schedule"), "schedule: stream_k adds partial sums of an element from several blocks, "
                                         "but a fuse chain needs each element's whole sum in one place",
              "use `schedule: tiles;` with a fuse section (the wgmma path's stream-K takes one)")

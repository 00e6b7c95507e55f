"""The rules of quantized weights (a weight type on B with `quant b { ... }`, docs/quantized.md), called from
validate.py for every path before the path's own rules.

They hold whatever path dequantizes: the weight types are B's alone, against bf16 or f16 activations; B lies as
nn.Linear stores its weight; the groups tile K so that each k-tile meets whole groups. Last, the spec's path must
dequantize B's type (its `weight_types`); where it does not, the path's own rules are not run, so that no rule
written for operands of one type meets a 4-bit one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from . import ir
from .source import Span, word_list

if TYPE_CHECKING:
    from .paths.interface import InstructionPath  # handed over by the front end, never looked up here

Report = Callable[[Span, str, str | None], None]
ACTIVATIONS = (ir.DType.BF16, ir.DType.F16)  # what quantized weights multiply
QUANT_EXAMPLE = "`quant b { group: 128; }`"


def check_weights(spec: ir.KernelSpec, path: InstructionPath, paths: Sequence[InstructionPath],
                  error: Report) -> bool:
    """Every rule of quantized weights; `paths` are the registered ones, which a refusal names where one takes
    B's type. Returns whether the path's own rules may run: not where B's type is one the path does not
    dequantize, nor where a weight type stands anywhere but in B (A, C and the fuse chain's operands report it)."""
    problem, quant = spec.problem, spec.quant
    a, b = problem.a.dtype, problem.b.dtype
    stray = a.integer or problem.c.dtype.integer or any(dtype.integer for dtype in (spec.fuse.dtypes if spec.fuse
                                                                                   else ()))
    if a.integer:
        error(problem.at("a"), f"A is {a.value}, a weight type: only B holds quantized weights, A the activations "
                               "they multiply", f"write `a: bf16 row;` (or f16), and `b: {a.value} col;` with "
                                                f"{QUANT_EXAMPLE}")
    if not problem.weights:
        if quant is not None:
            error(quant.span, f"a `quant b` section needs a weight type on B, which is {b.value}",
                  "give B a weight type (`b: s4 col;`, u4, s8, or e4m3 against a bf16 or f16 A), or remove the "
                  "section")
        return not stray
    if a not in ACTIVATIONS and not a.integer:
        error(problem.at("a"), f"A is {a.value}, but {b.value} weights multiply bf16 or f16 activations",
              "write `a: bf16 row;` or `a: f16 row;`")
    if problem.b.layout is not ir.MatrixLayout.COL:
        error(problem.at("b"), "quantized B must be `col`: N x K with K contiguous, as nn.Linear stores its "
                               "weight and the importers (docs/quantized.md) write its codes",
              f"write `b: {b.value} col;` and pass the weight untransposed")
    if quant is None:
        error(problem.at("b"), f"B is {b.value}, a weight type, but no `quant b` section says how its scales "
                               "apply", f"add {QUANT_EXAMPLE} (a scale per 128 weights along K; `zeros: yes;` for "
                                        "asymmetric codes such as GPTQ's and AWQ's u4)")
    else:
        _check_quant(spec, quant, b, error)
    if b in path.weight_types:
        return not stray
    takers = [other.name for other in paths if b in other.weight_types]
    where = (f"the {word_list(takers, 'or')} path takes them: see docs/quantized.md for its spec" if takers else
             f"no registered path dequantizes {b.value} yet: one whose `weight_types` (gemmdsl/paths/interface.py) "
             "lists it would take the spec")
    error(problem.at("b"), f"the {path.name} path cannot dequantize {b.value} weights", where)
    return False


def _check_quant(spec: ir.KernelSpec, quant: ir.WeightQuant, b: ir.DType, error: Report) -> None:
    """The `quant b` section against B's type and the block tile."""
    if quant.zeros and not b.integer:
        error(quant.at("zeros"), f"zeros: yes on {b.value} weights: zero points are integers subtracted from "
                                 "integer codes, and FP8 weights are scaled only", "remove `zeros: yes;`")
    group, bk = quant.group, spec.block.k
    if group is not None and group % bk and bk % group:
        divisor = bk & -bk  # the largest power of two dividing BK
        error(quant.at("group"),
              f"group {group} and the block tile's K ({bk}) do not divide one another: k-tiles would start inside "
              "a group at shifting offsets, so one k-tile of a column would need the scales of two groups at "
              "positions that change from tile to tile",
              f"use a block K that divides {group} or is a multiple of it" +
              (f", or `group: {divisor};`" if divisor >= 32 else ""))

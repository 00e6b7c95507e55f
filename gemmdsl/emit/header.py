"""NAME.h: the C interface of NAME.cu, for the C or C++ code that calls the launchers.

A spec's header declares its launchers; a kernel family's (emit_family_header) declares the family's
dispatching launchers and every member's launchers, which the family's .cu exports too (`extern "C"`
inside each member's namespace). The prototypes are the launchers' own parameter lists
(abi.launcher_parameters) and the constants are the plan's requirements, the figures NAME.json holds
(a family's: family.family_requirements, from its members'), so the header cannot drift from the
.cu. The .cu does not include it: it stays self-contained, and compiles under NVRTC.
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from .. import ir
from ..abi import (contiguous_extent, launcher_names, launcher_parameters, leading_name,
                   padded_launcher_name)
from ..emitter import Emitter
from ..launch_plan import Requirements, StreamKLaunch
from ..paths import path_of
from ..plan import KernelPlan
from ..source import printable
from .header_file import DEVICE_RULE, ConstantGroup, emit_prototype, header_file
from .launcher import empty_problem_rule, launch_contract, leading_dimension_rule, refuses_misaligned, shape_rule

COMMENT_WIDTH = 100  # comments that name members wrap here (the others are wrapped by hand)



def emit_header(plan: KernelPlan) -> str:
    own = plan.path.header(plan)
    if own is not None:
        return own
    spec, launch = plan.spec, plan.launch

    def declare(o: Emitter) -> None:
        o.comment("\n".join(_returns(plan)))
        _emit_prototypes(o, spec, launch.launchers, with_comments=True)
        _emit_padded_prototype(o, plan, with_comments=True)

    return header_file(spec.name, spec, printable(Path(spec.span.file).name), "the spec", _spec_constants(plan),
                      declare)


def emit_family_header(family: Any) -> str:
    """NAME.h of a compiled family (a family.FamilyArtifacts; typed loosely, as in emit/family.py): the
    family's requirements, its launchers and, member by member, the launchers that run one member alone."""
    name, spec = family.name, family.launcher_spec

    def declare(o: Emitter) -> None:
        o.comment("\n".join(_family_returns(family)))
        _emit_prototypes(o, spec, launcher_names(spec), with_comments=True)
        for member in family.members:
            plan = member.artifacts.plan
            bm, bn, bk = plan.launch.block_tile
            o.line()
            heading = (f"Member {member.artifacts.name} ({printable(member.path)}: {bm}x{bn}x{bk} tiles, bounds: "
                       f"{plan.spec.problem.bounds.value}). Its launchers take the parameters of {name}'s of "
                       "the same kind and run it alone, without the rule.")
            o.comment(textwrap.fill(heading, COMMENT_WIDTH) + "\n\n" + "\n".join(_returns(plan)))
            _emit_prototypes(o, plan.spec, plan.launch.launchers, with_comments=False)
            _emit_padded_prototype(o, plan, with_comments=False)

    return header_file(name, spec, printable(Path(family.source.path).name), "the family or its members",
                      _family_constants(family), declare)


def _spec_constants(plan: KernelPlan) -> list[ConstantGroup]:
    """The plan's requirements as macros: constant expressions in C and C++, and usable in #if."""
    spec, launch = plan.spec, plan.launch
    name, requirements = spec.name, launch.requirements
    bm, bn, bk = launch.block_tile
    fallback = ("else the launchers run a kernel with one-element accesses" if launch.entries.scalar
                else "else the launchers refuse the call")
    if launch.entries.narrow:
        widths = " or ".join(f"{narrow.width_bytes}-byte" for narrow in launch.entries.narrow)
        fallback = f"else the launchers run one with {widths} accesses or " + fallback.removeprefix(
            "else the launchers run ")
    return [(f"What a call must satisfy; the launchers check it, and {name}.json holds the same figures.", []),
            ("The block's C tile (M x N), the k-slice it multiplies per step, and its threads.",
             [("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("THREADS", launch.threads)]),
            _shape_constants(not spec.problem.checked, requirements),
            _operand_constants(f"Elements that an operand's {_aligned(spec)} must be a multiple of\n"
                               f"for the kernel's vector accesses ({fallback}).",
                               "VECTOR_ELEMENTS", requirements.vector_elements),
            _operand_constants("The largest leading dimension of each operand (offsets inside a tile are ints).",
                               "MAX_LD", requirements.max_leading_dimension),
            *_problem_constants(spec)]


def _family_constants(family: Any) -> list[ConstantGroup]:
    """The family's requirements (family.family_requirements) as the same macros; a family has no
    one block tile, so no BLOCK_M, BLOCK_N, BLOCK_K, THREADS."""
    spec, requirements = family.launcher_spec, family.requirements
    exact = [member.artifacts.name for member in family.members if member.model.exact]
    refusing = [member.artifacts.name for member in family.members
                if not member.model.exact and refuses_misaligned(member.artifacts.plan)]
    takers = [member.artifacts.name for member in family.members if member.model.any_alignment]
    fallback = "else "
    if exact or refusing:
        refusers = exact + refusing
        verb = "refuses" if len(refusers) == 1 else "refuse"
        fallback += (f"a call that {', '.join(refusers)} {verb} goes to the member the rule picks among "
                     f"{', '.join(takers)}, which run a kernel with one-element accesses" if takers
                     else f"{', '.join(refusers)} {verb} the call")
        if takers and refusing:
            fallback += "; the family's launchers take any alignment"
    else:
        fallback += "the members run a kernel with one-element accesses"
    vector_comment = textwrap.fill(f"Elements that an operand's {_aligned(spec)} must be a multiple of for "
                                   f"every member's vector accesses ({fallback}).", COMMENT_WIDTH)
    return [(f"What any call of {family.name}'s launchers may rely on, whichever member the rule picks: any\n"
             "shape, which a bounds: checked member takes, and the operands every checked member takes, since\n"
             "a call that a bounds: exact member refuses goes to one (gemmdsl/family.py, family_requirements).",
             []),
            _shape_constants(False, requirements),
            _operand_constants(vector_comment, "VECTOR_ELEMENTS", requirements.vector_elements),
            _operand_constants("The largest leading dimension of each operand that every checked member takes\n"
                               "(offsets inside a tile are ints); a member the rule picks may take more.",
                               "MAX_LD", requirements.max_leading_dimension),
            *_problem_constants(spec)]


def _aligned(spec: ir.KernelSpec) -> str:
    """What of an operand the vector accesses need aligned."""
    return "pointer, leading dimension and batch stride" if spec.problem.batched else "pointer and leading dimension"


def _shape_constants(exact: bool, requirements: Requirements) -> ConstantGroup:
    return ("1: bounds: exact, M, N and K must be multiples of the block tile (or one of them 0); 0: any M, N, K >= 0.",
            [("BOUNDS_EXACT", int(exact)), ("M_MULTIPLE", requirements.m_multiple),
             ("N_MULTIPLE", requirements.n_multiple), ("K_MULTIPLE", requirements.k_multiple)])


def _operand_constants(comment: str, suffix: str, per_operand: dict[str, int]) -> ConstantGroup:
    return comment, [(f"{op.value.upper()}_{suffix}", per_operand[op.value]) for op in ir.Operand]


def _problem_constants(spec: ir.KernelSpec) -> list[ConstantGroup]:
    """What the launchers compute: the layouts, the epilogue, the batch (a family's members share them)."""
    return [("1: row-major, element (i, j) at i * ld + j; 0: column-major, at j * ld + i.",
             [(f"{op.value.upper()}_ROW_MAJOR", int(spec.problem.matrix(op).layout is ir.MatrixLayout.ROW))
              for op in ir.Operand]),
            ("1: C = alpha * A*B + beta * C; 0: C = A*B, and the launchers ignore alpha and beta.",
             [("ALPHA_BETA", int(spec.problem.epilogue is ir.Epilogue.ALPHA_BETA))]),
            (f"1: {spec.name}_launch_batched runs many GEMMs in one launch.",
             [("BATCHED", int(spec.problem.batched))])]


def _family_returns(family: Any) -> list[str]:
    """What the family's launchers do and return."""
    spec = family.launcher_spec
    return [f"Each of {family.name}'s launchers runs the member that gemmdsl/family.py's rule picks for M, N, K",
            "(the fewest predicted cycles among the members that accept the shape) through that member's",
            "launcher of the same kind, below, and returns what it returns; when that member refuses the",
            "call for its operands' alignment (a bounds: exact or a TMA member), what the member the rule picks",
            "among those that run any alignment returns (a `fallback` member runs only then). Whichever member",
            "runs, they return cudaErrorInvalidValue, launching nothing,",
            "for a call that breaks one of these rules:", shape_rule(spec, None), leading_dimension_rule(spec),
            *empty_problem_rule(f"the first member's scale_c kernel ({family.members[0].artifacts.plan.launch.entries.scale_c})"),
            *DEVICE_RULE]


def _returns(plan: KernelPlan) -> list[str]:
    """What every launcher returns."""
    lines = ["Each launcher returns cudaSuccess once the work is queued on `stream` (kernel faults show at",
             "the next synchronizing call), the launch's error, or cudaErrorInvalidValue, launching nothing,",
             "for a call the kernel cannot handle:", *launch_contract(plan),
             *empty_problem_rule(plan.launch.entries.scale_c), *DEVICE_RULE]
    notes = plan.path.launcher_notes(plan)
    lines += notes
    if plan.spec.block.stream_k and plan.launch.stream_k is StreamKLaunch.LAUNCHED:
        lines += ["Stream-K: they size the launch from the current device (cudaGetDevice, its SM count, the",
                  "kernel's occupancy) and return those calls' errors; cudaErrorInvalidConfiguration when no",
                  "block fits on an SM."]
    return lines


def _launcher_comments(spec: ir.KernelSpec) -> dict[str, str]:
    """What each launcher computes, keyed like launch.launchers, for the launchers the file has."""
    alpha_beta = spec.problem.epilogue is ir.Epilogue.ALPHA_BETA
    if spec.fuse is not None:
        what = (f"C = {spec.fuse.describe(alpha_beta).replace('acc', 'A*B')} (docs/fusion.md: " +
                _fuse_operands(spec) + ("; alpha and beta are ignored)" if not alpha_beta else ")"))
    elif alpha_beta:
        what = "C = alpha * A*B + beta * C (C is not read when beta is 0)"
    else:
        what = "C = A*B (alpha and beta are ignored)"
    natural = ", ".join(f"{leading_name(op)} = {contiguous_extent(spec, op)}" for op in ir.Operand)
    comments = {"launcher": f"{what}, for A (M x K), B (K x N) and C (M x N)\nstored contiguously: {natural}.",
                "launcher_ld": f"{what}, with any leading dimensions lda, ldb, ldc."}
    if spec.problem.grouped:
        comments = {key: f"{what} for each of `groups` GEMMs (a mixture of experts): group g's rows of\nA (M x K) "
                         f"times its B (K x N), into its rows of C (M x N){rest}"
                    for key, rest in (("launcher", f"; stored contiguously: {natural}."),
                                      ("launcher_ld", ", with any leading dimensions lda, ldb, ldc."))}
    if spec.problem.batched:
        shares = path_of(spec).batch_strides_note
        comments["launcher_batched"] = (f"{what}, for `batch` GEMMs in one launch:\nGEMM i reads A + i * stride_a "
                                        f"and B + i * stride_b and writes C + i * stride_c {shares}")
    return comments


def _fuse_operands(spec: ir.KernelSpec) -> str:
    """What the launchers' fuse parameters point at."""
    steps = sorted(spec.fuse.steps, key=lambda step: step.operand_order)
    parts = [part for step in steps for part in step.header(spec)]
    return "; ".join(parts) if parts else "no operands of its own"


def _emit_prototypes(o: Emitter, spec: ir.KernelSpec, names: dict[str, str | None], with_comments: bool) -> None:
    """The prototype of every launcher the spec's file defines, named by `names` (keyed like
    launcher_parameters); with_comments: each after a blank line and a comment on what it computes."""
    parameters = launcher_parameters(spec)
    for key, text in _launcher_comments(spec).items():
        if with_comments:
            o.line()
            o.comment(text)
        emit_prototype(o, f"cudaError_t {names[key]}(", parameters[key])


def _emit_padded_prototype(o: Emitter, plan: KernelPlan, with_comments: bool) -> None:
    """A TMA file's launcher on padded copies of A and B (paths/wgmma/pad.py), where it has one."""
    if plan.launch.entries.pad_operands is None:
        return
    if with_comments:
        o.line()
        o.comment(f"{plan.launch.launchers['launcher_ld']} for operands TMA cannot read (pointers or leading dimensions not\n"
                  "multiples of 16 bytes): each such operand is copied into stream-ordered scratch with rows TMA reads\n"
                  "(cudaMallocAsync, freed after the launch); it returns those calls' errors too.")
    emit_prototype(o, f"cudaError_t {padded_launcher_name(plan.spec)}(", launcher_parameters(plan.spec)["launcher_ld"])

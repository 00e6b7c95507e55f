"""Kernel families: several tilings of one problem behind one launcher that picks a member per call.

A family file (`NAME.gemmf`) names member specs, paths relative to the file:

    // comment
    family sgemm_family {
        use sgemm_h100.gemm;      // exact, stream-K: the big shapes it divides
        use checked_v3.gemm;      // any shape
        use checked_64x64.gemm;   // small and skinny shapes
    }

A member named with `fallback` instead of `use` runs only the calls the others refuse for their
operands' alignment (a TMA member's misaligned pointers, odd leading dimensions, K that is no multiple of 8):
an mma.sync member beside wgmma ones, whose cycle figures the rule does not rank against the wgmma ones'.

The members must agree on what they compute (the `problem` section but `bounds`, and the target),
so that any of them can serve a call; at least one must be `bounds: checked`, so that every shape
has a member. `compile_family` compiles each member as a spec and emits one `.cu` with every
member's kernels and launchers and `NAME_launch` (and `_ld`, `_batched`) dispatching to one.

The rule (`choose`) is a pure function of the members' analysis and the problem size; the C
launcher (emit/family.py) computes it with the same integers, and a test checks the two agree.
For each member that accepts the shape (`bounds: exact` members only the shapes they divide):

    tiles = ceil(M/BM) * ceil(N/BN), k_tiles = ceil(K/BK), slots = SMs x blocks per SM
    k_tile(r) = SM cycles of one k-tile of r blocks resident on one SM, from the member's path:
        FMA: r x BM BN BK / 32 warp FFMAs x the tuner's clocks per FFMA with r blocks resident
        (cost_model.clocks_per_ffma: the slowest of instruction issue, L1's wavefronts and L2's
        bytes, plus latency no block hides, over the share of clocks a scheduler has a warp ready)
        mma.sync: max(r x BM*BN*BK / mma.sync's multiply-adds per clock, r x the shared-memory
        wavefronts (the bank pass's figures; one per clock), r x the shared-memory instructions /
        0.5 a clock, r x the warps' instructions / 4 a clock) plus the shared-memory latency of
        the fragment loads no multiply covers (once per k-step with single fragments, per k-tile
        with double) over r (paths/mma_sync/cycles.py; the tuner scores mma.sync by it too)
        wgmma (one block per SM): max(BM*BN*BK / wgmma's multiply-adds per clock, the shared-
        memory wavefronts (wgmma's, and 3xTF32's split), the k-tile's TMA bytes / L2 bytes per
        clock, the ring's round trip / (STAGES - 1)), plus for 3xTF32 the consumer's measured
        wait for its group; per tile C's bytes
        through L2 (`tile`; on the FMA path C's stores, below; 0 on mma.sync) and per stream-K block
        one partial tile written and read (`partial`)
    tiles schedule:  full_waves * (k_tiles * k_tile(blocks per SM) + blocks per SM * tile)
                     + k_tiles * k_tile(r) + r * tile, r = ceil(last wave's tiles / SMs)
    stream-K, when schedule.py splits: the whole waves as above, plus one wave in which each block
                     does ceil(shared k-tiles / stream-K blocks) k-tiles at k_tile(blocks per SM),
                     plus blocks per SM * (tile + partial); on the FMA and mma.sync paths plus
                     EXTRA_LAUNCH_CYCLES (cycles.py) per launch beyond the first: the prepare
                     kernel, and the plain tiles' kernel when there are plain tiles

    memory floor:    the cycles are at least estimate_rule's `memory`: A, B and C's bytes (each once) over HBM's
                     bytes per clock (targets.HBM_BYTES_PER_CLOCK: the datasheet's bandwidth), or, for wgmma, over what
                     the streaming blocks (min(tiles, SMs), or the stream-K wave) draw with STAGES - 1
                     k-tiles in flight each for RING_ROUND_TRIP_CYCLES (Little's law) if that is less;
                     and for wgmma, where a packed C's rows are off 16 bytes, C's bytes at the rate its
                     stores reach: row at a time from shared memory (targets.ROW_STORE_BYTES_PER_CLOCK per
                     consumer, `store: tma` specs) or from the accumulators (DIRECT_STORE_BYTES_PER_CLOCK per SM)
    C's stores:      on the FMA path `tile` is every 32-byte sector the epilogue's stores touch
                     (cost_model.c_store_sectors) at targets.C_STORE_BYTES_PER_CLOCK, one element a lane
                     where a packed C's leading dimension is off the widest vector (`narrow_tile_cycles`)

and the member with the fewest predicted cycles runs (on a tie, the fewest cycles before the floor, then the
first listed), unless the family's
measured table names the shape: there the member it names runs, the one timed fastest at that shape
(`gemmdsl tune --shapes` writes the table where its measurements and the model disagree):

    family llama_block {
        use llama_block_m0.gemm;
        use llama_block_m1.gemm;
        measured {
            16x4096x4096: llama_block_m1.gemm;   // MxNxK: one of the `use`d paths
        }
    }

A call the
chosen member refuses for its operands (misaligned pointers or leading dimensions: an exact member, or a
TMA member, which has no kernel with one-element accesses) goes to the member the rule picks among those
that run operands of any alignment (a checked FMA or mma.sync member; none: the call is refused). The figures are SM clock cycles on the target's
reference GPU: they rank members, they do not promise a time.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from . import ir
from .abi import launcher_names, launcher_parameters, size_errors
from .analysis import ProblemSizeError
from .compiler import Artifacts, compile_source, fuse_metadata
from .emit.family import emit_family
from .emit.header import emit_family_header
from .emit.launcher import refuses_misaligned
from .launch_plan import Requirements
from .cycles import MemberModel, choose, estimate
from .file_kinds import FAMILY_SUFFIX
from .source import CompileError, Diagnostic, Severity, SourceFile, Span, beyond_token_limit
from .targets import TargetName, arch
from .validate import kernel_name_problem
from .version import __version__

Size = tuple[int, int, int]  # M, N, K


# --- the rule (cycles.choose) ------------------------------------------------------------------


def member_model(artifacts: Artifacts, fallback: bool = False) -> MemberModel:
    """The member's cycle model, as its instruction path predicts it, whether its launchers run operands
    of any alignment, and whether the family names it a `fallback` (it runs only calls the others refuse)."""
    return dataclasses.replace(artifacts.plan.path.member_model(artifacts.analysis, artifacts.plan.arch.reference_sms),
                               any_alignment=not refuses_misaligned(artifacts.plan), fallback=fallback)


def family_requirements(members: tuple[Member, ...]) -> Requirements:
    """What any call of the family's launchers may rely on, whichever member the rule picks: any shape
    (a bounds: checked member takes every one); the alignment at which every member runs its vector
    kernel; and the leading dimensions every checked member takes, since a call that an exact member
    refuses goes to a checked one."""
    everyone = [member.artifacts.plan.launch.requirements for member in members]
    checked = [member.artifacts.plan.launch.requirements for member in members if not member.model.exact]
    operands = [op.value for op in ir.Operand]
    return Requirements(
        m_multiple=1, n_multiple=1, k_multiple=1,
        vector_elements={op: math.lcm(*(each.vector_elements[op] for each in everyone)) for op in operands},
        max_leading_dimension={op: min(each.max_leading_dimension[op] for each in checked) for op in operands})


# --- the front end -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    path: str  # as the family file writes it, relative to the file
    span: Span  # of the path in the family file
    artifacts: Artifacts
    model: MemberModel


@dataclass(frozen=True)
class FamilyArtifacts:
    name: str
    source: SourceFile
    members: tuple[Member, ...]
    measured: tuple[tuple[Size, int], ...] = ()  # (shape, member index): the measured table

    @cached_property
    def cuda(self) -> str:
        return emit_family(self)

    @cached_property
    def metadata(self) -> dict:
        return family_metadata(self)

    @property
    def header(self) -> str:
        """NAME.h, declaring the launchers of `cuda`; made when written, as a spec's is."""
        return emit_family_header(self)

    @cached_property
    def requirements(self) -> Requirements:
        return family_requirements(self.members)

    @cached_property
    def spec(self) -> ir.KernelSpec:
        """The first member's spec: what every member computes (problem section), with the target the family's
        .cu is built for: arch-specific (sm_90a) where any member's kernels need it, whichever member is first."""
        first = self.members[0].artifacts.spec
        if first.target.arch_specific or not any(member.artifacts.spec.target.arch_specific for member in self.members):
            return first
        return dataclasses.replace(first, target=dataclasses.replace(first.target, arch_specific=True))

    @property
    def launcher_spec(self) -> ir.KernelSpec:
        """The first member's spec under the family's name: the family's launchers' names and parameters."""
        return dataclasses.replace(self.spec, name=self.name)

    @property
    def models(self) -> list[MemberModel]:
        return [member.model for member in self.members]

    def metadata_json(self) -> str:
        return json.dumps(self.metadata, indent=2, sort_keys=True) + "\n"


TOKEN = re.compile(r"\s+|//[^\n]*|#[^\n]*|(?P<punct>[{};:])|(?P<word>[^\s{};:#]+)")


@dataclass(frozen=True)
class _Token:
    text: str
    span: Span


def _tokens(source: SourceFile) -> list[_Token]:
    tokens = []
    line, line_start = 1, 0
    position = 0
    text = source.text
    while position < len(text):
        match = TOKEN.match(text, position)  # every character starts some alternative
        if match.lastgroup:
            column = position - line_start + 1
            tokens.append(_Token(match.group(), Span(source.path, line, column, line, column + len(match.group()))))
        newlines = match.group().count("\n")
        if newlines:
            line += newlines
            line_start = match.start() + match.group().rindex("\n") + 1
        position = match.end()
    return tokens


def _error(span: Span, message: str, hint: str | None = None) -> Diagnostic:
    return Diagnostic(Severity.ERROR, span, message, hint)


FAMILY_HINT = "a family file reads `family NAME { use member.gemm; use other.gemm; }`"
MEASURED_HINT = "a measured table reads `measured { 16x4096x4096: member.gemm; }`, one of the `use`d paths a shape"


def parse_family(source: SourceFile) -> tuple[str, Span, list[tuple[_Token, bool]], list[tuple[_Token, _Token]]]:
    """The family's name, its span, the members' path tokens (each with whether it is a `fallback` member)
    and the measured table's (shape, path) tokens; syntax errors raise CompileError."""
    too_long = beyond_token_limit(source, "family")
    if too_long is not None:
        raise CompileError([too_long], source)
    tokens = _tokens(source)
    end = Span(source.path, source.text.count("\n") + 1, 1, source.text.count("\n") + 1, 2)
    position = 0

    def expect(what: str, test) -> _Token:
        nonlocal position
        token = tokens[position] if position < len(tokens) else None
        if token is None or not test(token.text):
            found = f"'{token.text}'" if token else "the end of the file"
            raise CompileError([_error(token.span if token else end, f"expected {what}, found {found}",
                                       FAMILY_HINT)], source)
        position += 1
        return token

    expect("'family'", lambda text: text == "family")
    name = expect("the family's name", lambda text: re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text) is not None)
    bad_name = kernel_name_problem(name.text, "family name")
    if bad_name is not None:  # the name becomes the family's C functions' and files' names
        raise CompileError([_error(name.span, *bad_name)], source)
    expect("'{'", lambda text: text == "{")
    paths = []
    while position < len(tokens) and tokens[position].text in ("use", "fallback"):
        keyword = tokens[position].text
        position += 1
        paths.append((expect("a member's .gemm path", lambda text: text.endswith(".gemm")), keyword == "fallback"))
        expect("';' after the path", lambda text: text == ";")
    measured = []
    if position < len(tokens) and tokens[position].text == "measured":
        position += 1
        expect("'{' after measured", lambda text: text == "{")
        while position < len(tokens) and tokens[position].text != "}":
            shape = expect("a shape MxNxK", lambda text: re.fullmatch(r"[1-9]\d*x[1-9]\d*x[1-9]\d*", text) is not None)
            expect("':' after the shape", lambda text: text == ":")
            measured.append((shape, expect("a member's .gemm path", lambda text: text.endswith(".gemm"))))
            expect("';' after the path", lambda text: text == ";")
        expect("'}' closing the measured table", lambda text: text == "}")
    expect("'use', 'fallback', 'measured' or '}'", lambda text: text == "}")
    if position < len(tokens):
        raise CompileError([_error(tokens[position].span, f"unexpected '{tokens[position].text}' after the family",
                                   "a family file holds one family block")], source)
    if not paths:
        raise CompileError([_error(name.span, f"family {name.text} has no members",
                                   FAMILY_HINT)], source)
    return name.text, name.span, paths, measured


def _shared_problem(spec: ir.KernelSpec) -> tuple:
    """What every member must agree on: what the launcher's callers see."""
    problem = spec.problem
    return (tuple(problem.matrix(op) for op in ir.Operand), problem.epilogue, problem.batch, spec.target.sm)


def _describe(spec: ir.KernelSpec) -> str:
    problem = spec.problem
    matrices = ", ".join(f"{op.value} {problem.matrix(op).dtype.value} {problem.matrix(op).layout.value}"
                         for op in ir.Operand)
    return (f"{matrices}, epilogue {problem.epilogue.value}, batch {problem.batch.value}, "
            f"target sm_{spec.target.sm}")


def _accumulate(spec: ir.KernelSpec) -> str | None:
    """How an FP8 member sums K (fast or promoted; None on the other paths)."""
    accumulate = spec.mma.accumulate if spec.mma is not None else None
    return accumulate.value if accumulate is not None else None


def _describe_chain(spec: ir.KernelSpec) -> str:
    """What a member's fuse section computes, with the types it reads."""
    fuse = spec.fuse
    if fuse is None:
        return "has no fuse section"
    read = "; ".join(filter(None, (step.types() for step in sorted(fuse.steps, key=lambda step: step.operand_order))))
    return f"fuses C = {fuse.describe(spec.problem.epilogue is ir.Epilogue.ALPHA_BETA)}" + (f" ({read})" if read else "")


# What every member agrees with the first on: (the value compared, how a member's reads in the error, the hint).
SHARED_BY_MEMBERS = (
    (_shared_problem, lambda spec: f"computes {_describe(spec)}",
     "members share the problem section (all but `bounds`) and the target, so that any of them can serve a call"),
    (fuse_metadata, _describe_chain,
     "members share the fuse section (its keys and types), so that the family's launchers pass one set of the "
     "chain's operands to any of them"),
    (_accumulate, lambda spec: f"accumulates {_accumulate(spec)}",
     "members share `mma { accumulate: ...; }`, so that a call's sums are as accurate whichever member runs it "
     "(and verify and bench compare with one reference)"),
)


def compile_family(source: SourceFile, target: TargetName | int | None = None) -> FamilyArtifacts:
    """Parse a family file, compile its members (for `target` instead of their own, if given) and emit
    the family's .cu and metadata."""
    name, name_span, paths, measured_tokens = parse_family(source)
    directory = Path(source.path).parent
    members: list[Member] = []
    errors: list[Diagnostic] = []
    listed: dict[str, _Token] = {}  # the file each member names, resolved -> the path token that named it first
    for token, fallback in paths:
        first = listed.setdefault(_member_file(directory, token.text), token)
        if first is not token:
            same = "is" if first.text == token.text else f"names the same file as {first.text}, which is"
            errors.append(_error(token.span, f"{token.text} {same} a member already (line {first.span.line})",
                                 "a family lists each member once; remove this line"))
            continue
        try:
            member_source = SourceFile.read(directory / token.text)
        except CompileError as err:  # a file that cannot be read (or decoded): said at the `use` line
            (reason,) = err.diagnostics
            where = reason.span.line, reason.span.column
            at = "" if where == (1, 1) else f" (line {where[0]}, column {where[1]})"
            errors.append(_error(token.span, f"member {token.text} cannot be read: "
                                 f"{reason.message.removeprefix('cannot read file: ')}{at}", reason.hint))
            continue
        try:
            artifacts = compile_source(member_source, target)
        except CompileError as err:
            errors.append(_error(token.span, f"member {token.text} does not compile",
                                 "its own diagnostics follow; `gemmdsl compile` it alone to fix them"))
            errors += [d for d in err.diagnostics if d.severity is Severity.ERROR]
            continue
        member = Member(token.text, token.span, artifacts, member_model(artifacts, fallback))
        if fallback and not member.model.any_alignment:
            errors.append(_error(token.span, f"fallback member {artifacts.spec.name} refuses misaligned operands "
                                 "too", "a fallback runs what the other members refuse: a bounds: checked spec "
                                 "with a scalar kernel (FMA or mma.sync), not a TMA or exact one"))
        for shared, describe, hint in SHARED_BY_MEMBERS:
            first = members[0].artifacts.spec if members else None
            if first is not None and shared(artifacts.spec) != shared(first):
                errors.append(_error(token.span, f"member {artifacts.spec.name} {describe(artifacts.spec)}, but "
                                     f"{first.name} {describe(first)}", hint))
        if any(other.artifacts.spec.name == artifacts.spec.name for other in members):
            errors.append(_error(token.span, f"two members are named {artifacts.spec.name}",
                                 "each member's kernels and launchers keep their spec's name"))
        if artifacts.spec.name == name:
            errors.append(_error(token.span, f"member {name} has the family's name",
                                 "the family's launchers are NAME_launch...; rename the family or the spec"))
        members.append(member)
    if not errors and all(member.model.exact or member.model.fallback for member in members):
        errors.append(_error(name_span, f"family {name} has no `bounds: checked` member (besides its fallbacks)",
                             "add one with `use`, so that every shape has a member that accepts it"))
    measured = _measured_table(measured_tokens, members, errors) if not errors else ()
    if errors:
        # A member's own diagnostics render against its own file.
        raise _FamilyError(errors, source)
    return FamilyArtifacts(name, source, tuple(members), measured)


def _member_file(directory: Path, path: str) -> str:
    """The file a member's path names, symbolic links and `..` resolved, so that two spellings of one file
    are one member; a path no file can have (a NUL byte) stays as written, for `SourceFile.read` to refuse."""
    try:
        return os.path.realpath(directory / path)
    except (OSError, ValueError):
        return str(directory / path)


def _measured_table(entries: list[tuple[_Token, _Token]], members: list[Member],
                    errors: list[Diagnostic]) -> tuple[tuple[Size, int], ...]:
    """The measured table as (shape, member index); a path that is no member, a shape listed twice or an
    exact member given a shape its tile does not divide is an error."""
    table: dict[Size, int] = {}
    paths = [member.path for member in members]
    for shape_token, path_token in entries:
        shape = tuple(int(extent) for extent in shape_token.text.split("x"))
        if path_token.text not in paths:
            errors.append(_error(path_token.span, f"{path_token.text} is not a member of the family", MEASURED_HINT))
        elif shape in table:
            errors.append(_error(shape_token.span, f"shape {shape_token.text} is listed twice",
                                 "a shape has one measured member"))
        else:
            index = paths.index(path_token.text)
            model = members[index].model
            if model.exact and any(extent % step for extent, step in zip(shape, model.tile)):
                errors.append(_error(path_token.span, f"{path_token.text} (bounds: exact, tile "
                                     f"{'x'.join(map(str, model.tile))}) cannot take {shape_token.text}",
                                     "name a member that accepts the shape"))
            table[shape] = index
    return tuple(table.items())


class _FamilyError(CompileError):
    """Diagnostics in the family file and in its members' files: each renders against its own text."""

    def source_of(self, diagnostic: Diagnostic) -> SourceFile | None:
        file = diagnostic.span.file
        if file == self.source.path:
            return self.source
        if file not in self._members_read:  # read once, however many of its diagnostics there are
            self._members_read[file] = _read_or_none(file)
        return self._members_read[file]

    @cached_property
    def _members_read(self) -> dict[str, SourceFile | None]:
        return {}


def _read_or_none(path: str) -> SourceFile | None:
    try:
        return SourceFile.read(path)
    except CompileError:
        return None


def compile_family_path(path: str | Path, target: TargetName | int | None = None) -> FamilyArtifacts:
    return compile_family(SourceFile.read(path, FAMILY_SUFFIX, "family"), target)


def family_metadata(family: FamilyArtifacts) -> dict:
    spec = family.launcher_spec
    return {
        "family": family.name,
        **launcher_names(spec),
        "members": [{"spec": member.path, "kernel": member.artifacts.name, "bounds": member.artifacts.metadata["bounds"],
                     "block_tile": list(member.model.tile), "schedule": member.artifacts.metadata["schedule"],
                     "launcher": member.artifacts.metadata["launcher"], "entries": member.artifacts.metadata["entries"],
                     "rule": {"sms": member.model.sms, "blocks_per_sm": member.model.blocks_per_sm,
                              "k_tile_cycles": list(member.model.k_tile_cycles),
                              "tile_cycles": member.model.tile_cycles,
                              "partial_cycles": member.model.partial_cycles,
                              "launch_cycles": member.model.launch_cycles, **dict(member.model.terms)}}
                    for member in family.members],
        **({"measured": [{"shape": list(shape), "member": family.members[index].artifacts.name}
                         for shape, index in family.measured]} if family.measured else {}),
        "rule": "fewest predicted cycles among the members that accept the shape (gemmdsl/family.py)",
        "requires": {"m_multiple": family.requirements.m_multiple, "n_multiple": family.requirements.n_multiple,
                     "k_multiple": family.requirements.k_multiple},
        "target": str(spec.target),
        "epilogue": spec.problem.epilogue.value,
        "batch": spec.problem.batch.value,
        "layouts": {op.value: spec.problem.matrix(op).layout.value for op in ir.Operand},
        **fuse_metadata(spec),
        "parameters": launcher_parameters(spec),
        "gemmdsl_version": __version__,
    }


# --- gemmdsl check FAMILY --problem MxNxK --------------------------------------------------------


def explain(family: FamilyArtifacts, problem: tuple[int, int, int]) -> dict:
    """Which member runs the problem and the rule's figures for every member; ProblemSizeError for a size the
    launchers do not take."""
    beyond = size_errors(problem)
    if beyond:
        raise ProblemSizeError("; ".join(beyond))
    m, n, k = problem
    models = family.models
    chosen = choose(models, m, n, k, measured=family.measured)
    model_pick = choose(models, m, n, k)
    rows = []
    for model in models:
        figures = estimate(model, m, n, k)
        row = {"member": model.name, "tile": "x".join(map(str, model.tile)), "accepted": figures.accepted}
        if figures.accepted:
            row.update(tiles=figures.tiles, k_tiles=figures.k_tiles, slots=model.slots, waves=figures.waves,
                       stream_k_tiles=figures.sk_tiles, useful=round(figures.useful, 4), cycles=figures.cycles,
                       memory_cycles=figures.memory_cycles)
        rows.append(row)
    best = estimate(models[chosen], m, n, k).cycles
    runner_up = [row["cycles"] for index, row in enumerate(rows)  # the fallback runs only what the others refuse
                 if row["accepted"] and index != chosen and not models[index].fallback]
    reason = f"{models[chosen].name}: the fewest predicted cycles ({best:,})"
    if chosen != model_pick:
        reason = (f"{models[chosen].name}: timed fastest at this shape (the family's measured table), where "
                  f"the model picks {models[model_pick].name}")
    elif runner_up and min(runner_up) == best:
        reason += ", tied with the next member and listed first"
    elif runner_up:
        reason += f"; the next member predicts {min(runner_up) / best:.3f}x as many"
    rejected = [row["member"] for row in rows if not row["accepted"]]
    if rejected:
        reason += f"; {', '.join(rejected)} (bounds: exact) cannot take {m}x{n}x{k}"
    return {"family": family.name, "problem": [m, n, k], "member": models[chosen].name, "reason": reason,
            "predicted_time": predicted_time(models[chosen], family.spec.target.sm, problem), "members": rows}


def predicted_time(model: MemberModel, sm: int, problem: tuple[int, int, int]) -> dict:
    """The cycle model's figure for the member at M x N x K as a time: its cycles (the rule's, at least the memory
    floor) at the clock of the target's reference GPU (targets.Arch.reference_clock_mhz), where its constants
    were measured or taken from the datasheet. What `check --problem` prints."""
    figures = estimate(model, *problem)
    target = arch(sm)
    return {"microseconds": round(figures.cycles / target.reference_clock_mhz, 2), "cycles": figures.cycles,
            "memory_floor": figures.memory_cycles >= figures.compute_cycles, "gpu": target.reference_gpu,
            "sms": model.sms, "clock_mhz": target.reference_clock_mhz}


def format_predicted_time(time: dict) -> str:
    floor = " (the memory floor)" if time["memory_floor"] else ""
    return (f"predicted time: {time['microseconds']:,.2f} us: {time['cycles']:,} cycles{floor} of the cycle model "
            f"on the {time['gpu']}'s {time['sms']} SMs at {time['clock_mhz']} MHz (docs/analysis.md)")


def format_explanation(explanation: dict) -> str:
    m, n, k = explanation["problem"]
    lines = [f"{explanation['family']} (family) at {m}x{n}x{k}: {explanation['member']} runs",
             f"  why: {explanation['reason']}",
             f"  {format_predicted_time(explanation['predicted_time'])}",
             "",
             f"  {'member':<20}{'tile':>12}{'tiles':>9}{'k-tiles':>9}{'slots':>7}{'waves':>7}{'stream-K':>10}"
             f"{'useful':>8}{'memory floor':>14}{'cycles':>16}"]
    for row in explanation["members"]:
        mark = "*" if row["member"] == explanation["member"] else " "
        head = f"{mark} {row['member']:<20}{row['tile']:>12}"
        if not row["accepted"]:
            lines.append(f"{head}  does not divide the shape (bounds: exact)")
            continue
        lines.append(f"{head}{row['tiles']:>9,}{row['k_tiles']:>9,}{row['slots']:>7}{row['waves']:>7}"
                     f"{row['stream_k_tiles']:>10}{row['useful']:>8.1%}{row['memory_cycles']:>14,}{row['cycles']:>16,}")
    lines += ["", "  cycles: SM clocks on the reference GPU, waves x k-tiles x one k-tile's cycles (FMA: the tuner's "
              "cost model; mma.sync: tensor, shared or issue rate and exposed latency; wgmma: tensor, shared or L2 "
              "rate), plus C's stores per tile (FMA: every sector they touch; wgmma: through L2) and stream-K's traffic "
              "on the wgmma path, and at least the memory floor: A, B and C across HBM at the rate the streaming "
              "blocks draw, or C at the row stores' rate where TMA cannot store it (gemmdsl/family.py)"]
    return "\n".join(lines) + "\n"

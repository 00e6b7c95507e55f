"""`gemmdsl tune TEMPLATE`: search a space of specs, prune it with the analysis passes, time the rest.

    candidates = expand(template_text, path)       # every combination of the choice groups
    report = screen(candidates, sizes)             # front end + analysis passes, no GPU
    ranked = rank(report.survivors, sizes)         # best predicted first
    kept, dropped = select(ranked, budget)         # the top N, after ptxas's spill check
    timing = time_candidates(kept, sizes, pool, db)  # workers, one per GPU (tune_workers), into the database
    write_winner(path, winner, timing, ...)        # a plain .gemm with the figures in its header

Templates
---------
A template (`.tgemm`) is a spec in which any value, or part of one, may be a choice
group `{a,b,c}`: `tile: {128x128,256x128}x{8,16}`, `lanes: {4x8 row,8x4 col}`,
`raster: {row,group(8)}`. The candidates are every combination of the groups, in
source order with the last group varying fastest, numbered t0, t1, ...; each
candidate is the template's text with every group replaced by one alternative and
the kernel name NAME replaced by NAME_tI.

A `{` opens a choice group when, reading on from it, a top-level `,` or the
closing `}` comes before any `{`, `;`, `:`, comment or line end, with text before
it (a comma inside parentheses, as in `xor(2, 2, 3)`, is not top-level). Section
braces never qualify: in a valid spec a `{` is followed by nothing, by an entry's
`key:` or by a section header, so a plain spec expands to itself. Comments are
never expanded. A group must close on its own line; it holds no `{ } ; :`, no
comment and no other group; its alternatives are trimmed, substituted verbatim,
non-empty and distinct.

Screening and the cost model
----------------------------
Every candidate goes through the real front end; those it rejects are counted by
their first error. The valid ones are analysed at the first problem size and pruned,
each for the first rule it breaks, in this order:

  tile        the block tile does not divide every requested size (`bounds: exact` kernels;
              checked kernels are analysed at the first size rounded up to whole tiles)
  conflicts   only with --conflict-tolerance PCT: the bank-conflict pass predicts wavefronts beyond
              the ideal (loads or stores) of at least PCT% of all wavefronts. By default conflicts
              are not pruned but priced: the cost model counts every wavefront (measured on an
              H100, pad-0 twins with 3-8% excess store wavefronts were among the fastest)
  registers   the register estimate exceeds the per-thread cap even at the low edge of its measured
              error band: max(accumulators + fragments, demand x (1 - ESTIMATE_BAND)) > cap
              (gemmdsl/passes/registers.py; the band is what scripts/register_study.py measured
              against ptxas): the cap is the architecture's 255,
              `budget { registers }`, or what `__launch_bounds__(threads[, blocks_per_sm])` leaves
              (65536 / (blocks_per_sm * threads), rounded down to 8) -- a predicted spill
  occupancy   fewer than --min-warps resident warps per SM (default 8)

The survivors are ranked by the cost model's predicted efficiency (gemmdsl/cost_model.py:
the bottleneck of instruction issue, the L1 pipe that serves shared memory and global loads, and
L2 bandwidth, per FFMA; fragment-load latency where the register cap leaves no room for double
buffering; occupancy averaged over the register estimate's band; wave quantization over --sms SMs).
Tensor-core candidates are scored by the cycle model the families pick their members by, as a share
of the instruction's peak: mma.sync and wgmma by their paths' member models (paths/*/cycles.py).
Equal scores go to the candidate with fewer FFMAs that switch both operands (FMA order), then to
more registers left under the cap, then to fewer L1 wavefronts per FFMA, then to the earlier one.
The model sees neither raster nor pipeline depth: variants that differ only there tie on all of
these, and timing decides between them. The top --budget candidates are kept; with nvcc
on PATH (else NVRTC) each is built first and one that ptxas makes spill (an mma.sync kernel: more than
MMA_SYNC_TOLERATED_SPILL_BYTES), or whose real register count drops it under --min-warps, is replaced
by the next in rank.

Timing uses bench.bench (cuBLAS beside, same buffers) in one worker process per GPU, or in Ray
tasks (gemmdsl/tune_workers.py), writes every measurement to the tuning database as it arrives and
reuses what it holds (gemmdsl/tune_db.py), and picks the highest geometric mean over the sizes of the
percentage of the cuBLAS launches timed beside each candidate (docs/tuning-at-scale.md). --exhaustive
times every valid candidate in the same run and reports whether the pruned search found the same winner.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import itertools
import math
import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from . import ir
from .cost_model import cost_facts, efficiency, register_cap
from .paths import path_of
from .cycles import MemberModel, tensor_share
from .passes.registers import ESTIMATE_BAND, MMA_ESTIMATE_BAND
from .file_kinds import inputs_help
from .source import CompileError, Diagnostic, Severity, SourceFile, Span
from .targets import WARP, arch
from .tune_workers import build_failure  # noqa: F401  (tune's name for it, where the workers' backend uses it)

DEFAULT_SIZES = "4096x4096x4096"
DEFAULT_BUDGET = 8
DEFAULT_MAX_CANDIDATES = 5000
DEFAULT_MIN_WARPS = 8

REASONS = ("tile", "conflicts", "registers", "occupancy")
REASON_WORDS = {
    "tile": "block tile does not divide the sizes",
    "conflicts": "predicted bank conflicts",
    "registers": "register estimate over the cap (predicted spills)",
    "occupancy": "too few warps per SM",
    "ptxas spills": "ptxas spills registers",
    "ptxas occupancy": "too few warps per SM with ptxas's registers",
    "build": "nvcc failed",
}

Size = tuple[int, int, int]


# ---------------------------------------------------------------------------
# Templates


@dataclass(frozen=True)
class ChoiceGroup:
    start: int  # offset of the '{'
    end: int  # offset just past the '}'
    alternatives: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Template:
    """A template's text cut at its kernel name and its choice groups. Every candidate holds this one
    object and renders its text on demand, so a candidate costs the same whatever the template's size."""

    text: str
    name: str  # the kernel's name in the template
    name_start: int  # offset of the name
    body_start: int  # offset of the `gemm` keyword (what precedes it is the leading comment)
    groups: tuple[ChoiceGroup, ...]
    entries: tuple[tuple[int, int, tuple[int, ...]], ...]  # (start, end, group numbers) of each entry holding choices

    def render(self, name: str, choices: Sequence[str]) -> str:
        """The template's text with the kernel named `name` and each group replaced by its choice."""
        cuts = [(self.name_start, self.name_start + len(self.name), name)]
        cuts += [(group.start, group.end, choice) for group, choice in zip(self.groups, choices)]
        out, position = [], 0
        for start, end, fill in cuts:
            out += [self.text[position:start], fill]
            position = end
        out.append(self.text[position:])
        return "".join(out)

    def entry(self, number: int, choices: Sequence[str]) -> str:
        """Entry `number` of `entries` with its groups replaced by their choices: `tile: 128x128x8`."""
        start, end, groups = self.entries[number]
        out, position = [], start
        for group in groups:
            out += [self.text[position:self.groups[group].start], choices[group]]
            position = self.groups[group].end
        out.append(self.text[position:end])
        return " ".join("".join(out).split())


@dataclass(frozen=True)
class Candidate:
    """One concrete spec of a template: its number and the alternative taken from each group."""

    index: int
    choices: tuple[str, ...]  # in source order
    template: Template = field(repr=False)

    @property
    def name(self) -> str:
        """The kernel name, NAME_tI."""
        return f"{self.template.name}_t{self.index}"

    @property
    def text(self) -> str:
        return self.template.render(self.name, self.choices)

    @property
    def name_start(self) -> int:
        """Offset of the kernel name in `text`."""
        return self.template.name_start

    @property
    def body_start(self) -> int:
        """Offset of the `gemm` keyword in `text` (what precedes it is the leading comment)."""
        return self.template.body_start

    @property
    def summary(self) -> str:
        """The entries that hold choices, concrete: `tile: 128x128x8; stages: 2`."""
        return "; ".join(self.template.entry(number, self.choices) for number in range(len(self.template.entries)))

    def describe(self) -> str:
        return self.summary or "(no choices)"


def template_error(path: str, text: str, offset: int, message: str, hint: str | None = None,
                   length: int = 1) -> CompileError:
    line, column = line_column(text, offset)
    span = Span(path, line, column, line, column + max(1, length))
    return CompileError([Diagnostic(Severity.ERROR, span, message, hint)], SourceFile(path, text))


def line_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def mask_comments(text: str) -> str:
    """The text with every `//` and `#` comment blanked out (same length, newlines kept)."""
    return re.sub(r"(//|#)[^\n]*", lambda match: " " * len(match.group()), text)


GROUP_HINT = "a choice group `{a,b,c}` closes on its own line and holds no '{', ';', ':' or comment"


def find_choice_groups(text: str, path: str = "<template>") -> list[ChoiceGroup]:
    """Every choice group of a template, in source order; malformed ones raise CompileError."""
    masked = mask_comments(text)
    groups = []
    position = 0
    while (start := masked.find("{", position)) >= 0:
        group = _read_group(text, masked, start, path)
        if group is None:  # a section brace
            position = start + 1
        else:
            groups.append(group)
            position = group.end
    return groups


def _read_group(text: str, masked: str, start: int, path: str) -> ChoiceGroup | None:
    """The choice group opened by the '{' at `start`, or None when that brace opens a section."""
    depth = 0
    commas: list[int] = []
    stop = start + 1
    while stop < len(masked):
        char = masked[stop]
        if char in "{};:\n" or (char == " " and text[stop] != " "):  # a structural character, or a comment
            break
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            commas.append(stop)
        stop += 1
    closer = masked[stop] if stop < len(masked) else ""
    content = text[start + 1:stop]
    if closer == "{" and (commas or not content.strip()):
        raise template_error(path, text, stop, "a choice group cannot contain another choice group", GROUP_HINT)
    if closer != "}" or not content.strip():
        if commas:
            raise template_error(path, text, start, "this choice group is not closed", GROUP_HINT)
        return None  # a section brace: `block {`, `problem { a: ...`, `gemm k { target sm_90; ...`, `{ }`
    pieces = [start, *commas, stop]
    alternatives = []
    for left, right in zip(pieces, pieces[1:]):
        alternative = text[left + 1:right].strip()
        if not alternative:
            raise template_error(path, text, left, "empty alternative in a choice group",
                                 "write alternatives as `{a,b}`; drop the extra ','")
        if alternative.count("(") != alternative.count(")"):
            raise template_error(path, text, left + 1, f"unbalanced parentheses in alternative {alternative!r}",
                                 GROUP_HINT)
        if alternative in alternatives:
            raise template_error(path, text, left + 1, f"alternative {alternative!r} appears twice in this group")
        alternatives.append(alternative)
    return ChoiceGroup(start, stop + 1, tuple(alternatives))


_KERNEL = re.compile(r"\bgemm\s+([A-Za-z_][A-Za-z0-9_]*)\b")


def kernel_name_span(text: str, path: str = "<template>") -> tuple[int, int, str]:
    """(offset of `gemm`, offset of the name, the name) of a template's or spec's kernel."""
    match = _KERNEL.search(mask_comments(text))
    if match is None:
        raise template_error(path, text, 0, "the template holds no `gemm NAME {` block",
                             "a template (.tgemm) is a spec whose values may be choice groups `{a,b}`")
    return match.start(), match.start(1), match.group(1)


def count_candidates(groups: Sequence[ChoiceGroup]) -> int:
    return math.prod(len(group.alternatives) for group in groups)


def expand(template_text: str, path: str = "<template>",
           max_candidates: int = DEFAULT_MAX_CANDIDATES) -> list[Candidate]:
    """Every concrete spec of a template, t0 first; raises CompileError on a malformed template."""
    groups = find_choice_groups(template_text, path)
    body_start, name_start, name = kernel_name_span(template_text, path)
    if groups and groups[0].start < name_start + len(name):
        raise template_error(path, template_text, groups[0].start,
                             "choice groups belong in the values of the kernel's sections",
                             "the kernel name cannot be a choice; --name sets the winner's name")
    total = count_candidates(groups)
    if total > max_candidates:
        sizes = " x ".join(str(len(group.alternatives)) for group in groups)
        raise template_error(path, template_text, groups[0].start,
                             f"the template expands to {total:,} candidates ({sizes}), more than the "
                             f"limit of {max_candidates:,}",
                             "narrow some choice groups, or raise the limit with --max-candidates")
    template = Template(template_text, name, name_start, body_start, tuple(groups),
                        choice_entries(template_text, groups))
    return [Candidate(index, choices, template)
            for index, choices in enumerate(itertools.product(*(group.alternatives for group in groups)))]


def choice_entries(text: str, groups: Sequence[ChoiceGroup]) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
    """Each entry (`key: value;`) that holds choice groups, as (start, end, the numbers of its groups)."""
    masked = mask_comments(text)
    cut = [0, *(offset for group in groups for offset in (group.start, group.end)), len(text)]
    masked = "".join(masked[a:b] if i % 2 == 0 else "x" * (b - a) for i, (a, b) in enumerate(zip(cut, cut[1:])))
    spans: dict[tuple[int, int], list[int]] = {}
    for number, group in enumerate(groups):
        start = max(masked.rfind(char, 0, group.start) for char in ";{}") + 1
        ends = [e for e in (masked.find(char, group.end) for char in ";}") if e >= 0]
        spans.setdefault((start, min(ends, default=len(text))), []).append(number)
    return tuple((start, end, tuple(numbers)) for (start, end), numbers in spans.items())


def template_stem(path: str | Path) -> str:
    """`dir/sgemm_space.tgemm` -> `sgemm_space`, made a valid C identifier."""
    stem = Path(path).name.split(".")[0] or "tuned"
    stem = re.sub(r"[^A-Za-z0-9_]", "_", stem)
    return stem if not stem[0].isdigit() else f"k_{stem}"


# ---------------------------------------------------------------------------
# Screening


@dataclass(frozen=True)
class Prediction:
    """What the analysis passes say of one valid candidate, and the cost model's figures."""

    registers: int  # per thread: the estimate, or ptxas's count once built
    register_cap: int
    register_low: int  # the fewest registers per thread the estimate's measured band allows, or ptxas's count
    blocks_per_sm: int
    warps_per_sm: int
    load_conflicts: int  # excess wavefronts per launch
    store_conflicts: int
    conflict_pct: float  # excess wavefronts as a percentage of all shared-memory wavefronts
    smem_wavefronts_per_ffma: float  # per warp-level FFMA
    issue_per_ffma: float  # warp instructions issued per warp-level FFMA
    block_flops_per_byte: float
    warp_flops_per_byte: float
    launch_flops_per_byte: float
    # The cost model's other inputs (cost_model.CostFacts), per warp-level FFMA unless said otherwise
    global_wavefronts_per_ffma: float = 0.0  # L1 wavefronts of the global loads or cp.async copies
    exposed_latency_per_ffma: float = 0.0  # clocks per block FFMA no warp of the block hides
    register_demand: int = 0  # registers the main loop keeps live (the estimate's demand), or ptxas's count
    fma_switches_per_ffma: float = 0.0  # FFMAs whose A and B operands both differ from the previous one's
    threads: int = 0  # per block
    smem_bytes: int = 0  # per block
    ptxas: dict | None = None
    score: float = 0.0  # predicted efficiency, filled in by rank()
    wgmma: bool = False  # Hopper's path: the per-FFMA figures do not apply (zero), the score is wgmma_efficiency
    mma_model: MemberModel | None = None  # mma.sync: the cycle model the score reads (tensor_share), not the FMA one

    @property
    def lsu_per_ffma(self) -> float:
        """L1 wavefronts (shared memory and global loads) per warp-level FFMA."""
        return self.smem_wavefronts_per_ffma + self.global_wavefronts_per_ffma

    @property
    def spills(self) -> bool:
        """Predicted (or, once built, ptxas-reported) register spills that the register pruning rule drops;
        an mma.sync kernel's small spills are kept (`spill_prunes`)."""
        if self.ptxas is not None:
            return self.registers > self.register_cap or spill_prunes(self.ptxas, mma_sync=self.mma_model is not None)
        return self.predicted_spill

    @property
    def predicted_spill(self) -> bool:
        """The estimate's fewest registers exceed the cap; for mma.sync by more than the spill it tolerates
        (4 bytes a register), since ptxas then spills the excess and such kernels ran fastest (3xTF32)."""
        over = self.register_low - self.register_cap
        return 4 * over > MMA_SYNC_TOLERATED_SPILL_BYTES if self.mma_model is not None else over > 0

    def costs(self):
        from .cost_model import CostFacts

        return CostFacts(self.issue_per_ffma, self.smem_wavefronts_per_ffma, self.global_wavefronts_per_ffma,
                         self.exposed_latency_per_ffma, self.register_demand, self.fma_switches_per_ffma)

    def summary(self) -> str:
        source = "ptxas" if self.ptxas is not None else "est."
        if self.wgmma:
            return (f"{self.registers:>3} regs at launch ({source}), {self.warps_per_sm:>2} warps/SM, "
                    f"{self.smem_bytes // 1024} KiB smem, {self.block_flops_per_byte:.0f} flop/B")
        if self.mma_model is not None:
            model = self.mma_model
            return (f"{self.registers:>3} regs ({source}), {self.warps_per_sm:>2} warps/SM, "
                    f"k-tile {model.k_tile_cycles[-1]:,} cycles for mma's {model.tensor_cycles:,} "
                    f"x {model.blocks_per_sm}, {self.block_flops_per_byte:.0f} flop/B")
        return (f"{self.registers:>3} regs ({source}), {self.warps_per_sm:>2} warps/SM, "
                f"{self.smem_wavefronts_per_ffma:.3f} smem wf/FFMA, {self.block_flops_per_byte:.0f} flop/B")


@dataclass(frozen=True)
class Survivor:
    candidate: Candidate
    spec: ir.KernelSpec
    prediction: Prediction


@dataclass
class ScreenReport:
    generated: int = 0
    rejected: list[tuple[Candidate, Diagnostic]] = field(default_factory=list)
    pruned: dict[str, list[tuple[Candidate, str]]] = field(default_factory=dict)  # reason -> (candidate, detail)
    survivors: list[Survivor] = field(default_factory=list)
    timeable: list[Survivor] = field(default_factory=list)  # every valid candidate that tiles the sizes

    @property
    def valid(self) -> int:
        return self.generated - len(self.rejected)

    @property
    def pruned_count(self) -> int:
        return sum(len(items) for items in self.pruned.values())

    def rejected_by_reason(self) -> list[tuple[str, int, Diagnostic]]:
        """(reason, count, first diagnostic), most frequent first. Messages that differ only in numbers and
        quoted names are one reason, shown with those folded (N, '…'); a message that never varies is shown as is."""
        groups: dict[str, list[Diagnostic]] = {}
        for _, diagnostic in self.rejected:
            groups.setdefault(message_shape(diagnostic.message), []).append(diagnostic)
        reasons = []
        for shape, items in groups.items():
            same = all(d.message == items[0].message for d in items)
            reasons.append((items[0].message if same else shape, len(items), items[0]))
        return sorted(reasons, key=lambda item: (-item[1], item[0]))


def message_shape(message: str) -> str:
    """A diagnostic message with its numbers and quoted words folded, so like errors group together."""
    shape = re.sub(r"'[^']*'|`[^`]*`", "'…'", message)
    return re.sub(r"\d+", "N", shape)


def predict(spec: ir.KernelSpec, size: Size, ptxas: dict | None = None) -> Prediction:
    """Run the analysis passes on a valid spec and read off what screening and ranking use."""
    from .analysis import analyze

    analysis = analyze(spec, size, ptxas, hints=False)
    own = analysis.path.predict(analysis, ptxas)
    if own is not None:
        return own
    facts = analysis.facts
    mma_model = None
    if spec.mma is not None:  # the family rule's model (paths/mma_sync/cycles.py), which the score reads
        mma_model = analysis.path.member_model(analysis, analysis.layout.arch.reference_sms)
    traffic = facts["smem_traffic"]
    registers, occupancy, intensity = facts["registers"], facts["occupancy"], facts["intensity"]
    cap = register_cap(spec, analysis.layout.threads)
    costs = cost_facts(spec, analysis, cap)
    return Prediction(
        registers=registers.per_thread,
        register_cap=cap,
        register_low=registers.ptxas if registers.ptxas is not None else registers.estimate.low,
        blocks_per_sm=occupancy.blocks_per_sm,
        warps_per_sm=occupancy.warps_per_sm,
        load_conflicts=traffic.load_conflicts,
        store_conflicts=traffic.store_conflicts,
        conflict_pct=100 * (traffic.load_conflicts + traffic.store_conflicts)
        / max(1, traffic.load_wavefronts + traffic.store_wavefronts),
        smem_wavefronts_per_ffma=costs.smem_wavefronts_per_ffma,
        issue_per_ffma=costs.issue_per_ffma,
        block_flops_per_byte=intensity.block_flops_per_byte,
        warp_flops_per_byte=intensity.warp_flops_per_byte,
        launch_flops_per_byte=intensity.launch_flops_per_byte,
        global_wavefronts_per_ffma=costs.global_wavefronts_per_ffma,
        exposed_latency_per_ffma=costs.exposed_latency_per_ffma,
        register_demand=costs.register_demand,
        fma_switches_per_ffma=costs.fma_switches_per_ffma,
        threads=analysis.layout.threads,
        smem_bytes=occupancy.smem_bytes,
        ptxas=ptxas,
        mma_model=mma_model,
    )


def predict_wgmma(analysis, ptxas: dict | None) -> Prediction:
    """Hopper's path: validation has already refused what does not fit (the ring, the consumers'
    accumulators), so screening sees the launch's registers and warps, the block's intensity per
    stage and, through `wgmma_efficiency`, the cycle model the families pick members by."""
    layout, bound = analysis.layout, analysis.facts["wgmma_bound"]
    registers = ptxas["registers"] if ptxas is not None else layout.entry_registers
    flops_per_byte = 2 * layout.bm * layout.bn * layout.bk / layout.stage_bytes
    return Prediction(
        registers=registers, register_cap=layout.entry_registers, register_low=registers, blocks_per_sm=1,
        warps_per_sm=layout.threads // WARP, load_conflicts=0, store_conflicts=0, conflict_pct=0.0,
        smem_wavefronts_per_ffma=0.0, issue_per_ffma=0.0, block_flops_per_byte=flops_per_byte,
        warp_flops_per_byte=flops_per_byte, launch_flops_per_byte=bound.flops / bound.dram_bytes,
        threads=layout.threads, smem_bytes=layout.smem_bytes, ptxas=ptxas, wgmma=True)


def reference_sms(spec: ir.KernelSpec) -> int:
    """The SM count the ranking assumes without --sms: the target's reference GPU's (targets.Arch)."""
    return arch(spec.target.sm).reference_sms


def wgmma_efficiency(spec: ir.KernelSpec, sizes: Sequence[Size], sms: int | None = None) -> float:
    """The cycles a family of wgmma specs picks its member by (paths/wgmma/cycles.py: per k-tile the
    slowest of wgmma's rate, its shared-memory reads, TMA's bytes from L2 and the ring's round trip over
    the stages in flight; C through L2 per tile; the grid's rounds over the SMs), as the share of them
    wgmma's multiply-adds alone would take; geometric mean over the sizes. So a tile that brings more
    bytes per multiply-add scores lower (128x128 below 128x256), so does a ring too shallow to cover the
    round trip (3 stages of 128x256x64 below 4), and the tuner and the families rank Hopper kernels by
    one model. It sees neither the instruction shape, the raster nor the schedule: candidates that
    differ only there tie, and rank_key orders them."""
    from .paths import path_of

    # the lowering alone: no second run of the passes
    path = path_of(spec)
    model = path.lowered_member_model(path.lowering(spec), sms or reference_sms(spec))
    return _geomean([tensor_share(model, *size) for size in sizes])


def checked_bounds(spec: ir.KernelSpec) -> bool:
    """Whether the kernel handles sizes that are not multiples of its tile (`bounds: checked`)."""
    return bool(getattr(spec.problem, "checked", False))


def tiles_all(spec: ir.KernelSpec, sizes: Sequence[Size]) -> bool:
    """Whether the kernel can run every size: its tile divides them all, or its bounds are checked."""
    tile = (spec.block.m, spec.block.n, spec.block.k)
    return checked_bounds(spec) or all(not any(e % t for e, t in zip(size, tile)) for size in sizes)


def analysis_size(spec: ir.KernelSpec, size: Size) -> Size:
    """The size the passes analyse: `size` rounded up to whole tiles (they count whole tiles only)."""
    tile = (spec.block.m, spec.block.n, spec.block.k)
    return tuple(-(-extent // step) * step for extent, step in zip(size, tile))  # type: ignore[return-value]


def prune_reason(spec: ir.KernelSpec, prediction: Prediction | None, sizes: Sequence[Size],
                 min_warps: int = DEFAULT_MIN_WARPS, conflict_pct: float | None = None) -> tuple[str, str] | None:
    """(rule, detail) of the first pruning rule the candidate breaks, or None."""
    tile = (spec.block.m, spec.block.n, spec.block.k)
    if not tiles_all(spec, sizes):
        size = next(size for size in sizes if any(e % t for e, t in zip(size, tile)))
        return "tile", (f"{'x'.join(map(str, tile))} does not divide {'x'.join(map(str, size))} "
                        "(bounds: exact)")
    assert prediction is not None
    p = prediction
    if conflict_pct is not None and (p.load_conflicts or p.store_conflicts) and p.conflict_pct >= conflict_pct:
        return "conflicts", (f"{p.load_conflicts:,} load and {p.store_conflicts:,} store wavefronts beyond ideal "
                             f"({p.conflict_pct:.1f}%)")
    if p.ptxas is not None and p.registers > p.register_cap:
        return "registers", f"ptxas {p.registers} > cap {p.register_cap}"
    if p.ptxas is None and p.predicted_spill:
        band = MMA_ESTIMATE_BAND if spec.mma is not None else ESTIMATE_BAND
        return "registers", (f"estimate at least {p.register_low} (its {100 * band:.0f}% band, "
                             f"accumulators and fragments) > cap {p.register_cap}")
    if p.warps_per_sm < min_warps:
        return "occupancy", f"{p.warps_per_sm} warps per SM < {min_warps}"
    return None


def screen(candidates: Sequence[Candidate], sizes: Sequence[Size], min_warps: int = DEFAULT_MIN_WARPS,
           conflict_pct: float | None = None, path: str = "<template>.gemm",
           progress: Callable[[int, int], None] | None = None) -> ScreenReport:
    """Front end, then the analysis-based pruning rules, for every candidate (no GPU, no nvcc)."""
    from .frontend import load

    report = ScreenReport(generated=len(candidates))
    for done, candidate in enumerate(candidates, 1):
        if progress is not None:
            progress(done, len(candidates))
        try:
            spec, _ = load(SourceFile(candidate_path(path, candidate), candidate.text))
        except CompileError as err:
            errors = [d for d in err.diagnostics if d.severity is Severity.ERROR] or err.diagnostics
            report.rejected.append((candidate, errors[0]))
            continue
        prediction = predict(spec, analysis_size(spec, sizes[0])) if tiles_all(spec, sizes) else None
        reason = prune_reason(spec, prediction, sizes, min_warps, conflict_pct)
        if prediction is not None:
            report.timeable.append(Survivor(candidate, spec, prediction))
        if reason is not None:
            report.pruned.setdefault(reason[0], []).append((candidate, reason[1]))
        else:
            report.survivors.append(Survivor(candidate, spec, prediction))
    return report


def candidate_path(template_path: str, candidate: Candidate) -> str:
    """The display name of a candidate in diagnostics: `template.tgemm[t12]`."""
    return f"{template_path}[t{candidate.index}]"


# ---------------------------------------------------------------------------
# Ranking and selection


def predicted_efficiency(survivor: Survivor, sizes: Sequence[Size], sms: int | None = None) -> float:
    """The cost model's score (cost_model.py): predicted fraction of the FMA peak, 0 for a predicted spill;
    for Hopper's path, `wgmma_efficiency`; for mma.sync, the share of mma.sync's peak its cycle model
    predicts (paths/mma_sync/cycles.py, as the family rule), 0 for a predicted spill. `sms`: the SMs
    the grid's rounds are counted over, by default the target's reference GPU's."""
    p = survivor.prediction
    sms = sms or reference_sms(survivor.spec)
    if p.wgmma:
        return wgmma_efficiency(survivor.spec, sizes, sms)
    if p.mma_model is not None:
        model = replace(p.mma_model, sms=sms)  # --sms sets the grid's rounds here as on the FMA path
        return 0.0 if p.spills else _geomean([tensor_share(model, *size) for size in sizes])
    return efficiency(p.costs(), survivor.spec, threads=p.threads, smem_bytes=p.smem_bytes, cap=p.register_cap,
                      blocks_per_sm=p.blocks_per_sm, known_registers=p.ptxas is not None, spills=p.spills,
                      launch_flops_per_byte=p.launch_flops_per_byte, sizes=sizes, sms=sms)


def rank_key(survivor: Survivor) -> tuple:
    """Best predicted first; equal scores go to what the score does not see but the H100 rewards: fewer
    FFMAs that switch both operands (FMA order, docs/performance.md note 11), more registers left under the cap (room
    for ptxas to schedule: register-staged copies of big tiles, which hold the next tile in registers,
    measured 8% slower than their cp.async twins), fewer L1 wavefronts per FFMA (slack on the pipe
    shared memory and global loads share), then template order. On Hopper's path, whose other figures
    are zero, more stages come before template order: more bytes in flight from L2 (on the H100 every
    4-stage hgemm_h100 candidate ran 3-40% faster than its 3-stage twin; docs/tuning.md)."""
    p = survivor.prediction
    return (-round(p.score, 6), round(p.fma_switches_per_ffma, 6), p.register_demand - p.register_cap,
            round(p.lsu_per_ffma, 6), -survivor.spec.pipeline.stages if p.wgmma else 0,
            survivor.candidate.index)


def rank(survivors: Sequence[Survivor], sizes: Sequence[Size], sms: int | None = None) -> list[Survivor]:
    """Survivors with their score set, in rank_key order."""
    scored = [Survivor(s.candidate, s.spec, _with_score(s.prediction, predicted_efficiency(s, sizes, sms)))
              for s in survivors]
    return sorted(scored, key=rank_key)


def _with_score(prediction: Prediction, score: float) -> Prediction:
    return replace(prediction, score=score)


BuildFn = Callable[[Survivor], dict]  # -> PtxasResources.as_dict(); raises on failure


def ptxas_of(survivor: Survivor, template_path: str = "<template>.gemm", compiler: str = "nvcc") -> dict:
    """ptxas's figures for a candidate, through the real compiler and nvcc (or NVRTC)."""
    from .build import kernel_resources
    from .compiler import compile_source

    artifacts = compile_source(SourceFile(candidate_path(template_path, survivor.candidate), survivor.candidate.text))
    return kernel_resources(artifacts.cuda, artifacts.name, artifacts.spec.target.code, compiler).as_dict()


# Spill bytes per thread (stores or loads) an mma.sync kernel may have and still be kept. On the H100
# (tests/fixtures/tune_h100 and docs/performance.md, T13) mma.sync kernels whose double-buffered fragments
# made ptxas spill ran faster than their single-fragment twins that did not: 256x128x32 bf16 in 16 warps
# spilling 56 bytes 334.8 against 315.7 TFLOP/s, tf32_ldmatrix's interior kernel spilling 72 bytes 12.5%
# faster, tf32_ldmatrix_nt's 148 bytes 9.9% faster; the slowest read-32 TF32 kernels spill 248. On the
# FMA path spilling kernels ran about 10x slower, and any spill drops them.
MMA_SYNC_TOLERATED_SPILL_BYTES = 160


def spill_prunes(ptxas: dict, mma_sync: bool) -> bool:
    """Whether ptxas's spills drop a candidate: any spill, or for mma.sync more than MMA_SYNC_TOLERATED_SPILL_BYTES."""
    spilled = max(ptxas.get("spill_stores", 0), ptxas.get("spill_loads", 0))
    return spilled > (MMA_SYNC_TOLERATED_SPILL_BYTES if mma_sync else 0)


def ranks_on_ptxas(spec: ir.KernelSpec) -> bool:
    """Whether a survivor is scored on ptxas's figures when nvcc is there: mma.sync kernels, whose score
    (the cycle model) reads registers only for occupancy and spills. On the H100 timings (docs/tuning.md,
    "How well it ranks") ptxas's figures raised all three mma.sync templates' rank correlation, most
    where spills decide (sgemm_3xtf32_mma 0.32 -> 0.53); the FMA cost model, whose occupancy term was
    fitted over the estimate's register band, fell on sgemm_h100 (0.72 -> 0.26), and wgmma scores do not
    read registers."""
    return path_of(spec).tune_reads_ptxas


def with_ptxas(report: ScreenReport, sizes: Sequence[Size], build_fn: BuildFn, jobs: int = 1,
               progress: Callable[[str], None] | None = None) -> tuple[ScreenReport, list[tuple[Candidate, str]]]:
    """The survivors `ranks_on_ptxas` picks built and predicted again with ptxas's registers and spills,
    which the estimate cannot see; those that do not build are taken out and returned with the reason.
    Other survivors, and the candidates the analysis pruned, keep their estimates."""
    chosen = [s for s in report.survivors if ranks_on_ptxas(s.spec)]
    if not chosen:
        return report, []
    if progress is not None:
        progress(f"building {len(chosen)} mma.sync candidate(s) to rank them on ptxas's figures")
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda s: _try_build(build_fn, s), chosen))
    built: dict[str, Survivor] = {}
    failed: list[tuple[Candidate, str]] = []
    for survivor, (ptxas, error) in zip(chosen, results):
        if error is not None:
            failed.append((survivor.candidate, error))
            continue
        prediction = predict(survivor.spec, analysis_size(survivor.spec, sizes[0]), ptxas)
        built[survivor.candidate.name] = Survivor(survivor.candidate, survivor.spec, prediction)
    failed_names = {candidate.name for candidate, _ in failed}
    survivors = [built.get(s.candidate.name, s) for s in report.survivors if s.candidate.name not in failed_names]
    timeable = [built.get(s.candidate.name, s) for s in report.timeable]
    return replace(report, survivors=survivors, timeable=timeable), failed


def select(ranked: Sequence[Survivor], budget: int, sizes: Sequence[Size], min_warps: int = DEFAULT_MIN_WARPS,
           build_fn: BuildFn | None = None, jobs: int = 1,
           progress: Callable[[str], None] | None = None) -> tuple[list[Survivor], dict[str, list[tuple[Candidate, str]]]]:
    """The top `budget` of `ranked`; with `build_fn`, candidates ptxas makes spill (or whose real register
    count breaks --min-warps) are dropped and the next in rank takes their place. Returns (kept, dropped)."""
    if build_fn is None:
        return list(ranked[:budget]), {}
    kept: list[Survivor] = []
    dropped: dict[str, list[tuple[Candidate, str]]] = {}
    queue = list(ranked)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        while queue and len(kept) < budget:
            batch, queue = queue[:max(budget - len(kept), jobs)], queue[max(budget - len(kept), jobs):]
            if progress is not None:
                progress(f"building {len(batch)} candidate(s): {', '.join(s.candidate.name for s in batch)}")
            results = list(pool.map(lambda s: _try_build(build_fn, s), batch))
            for survivor, (ptxas, error) in zip(batch, results):
                if len(kept) == budget:
                    break
                if error is not None:
                    dropped.setdefault("build", []).append((survivor.candidate, error))
                    continue
                spills = ptxas.get("spill_stores", 0) + ptxas.get("spill_loads", 0)
                if spill_prunes(ptxas, mma_sync=survivor.spec.mma is not None):
                    dropped.setdefault("ptxas spills", []).append(
                        (survivor.candidate, f"{ptxas['registers']} registers, {spills} bytes of spills"))
                    continue
                prediction = predict(survivor.spec, analysis_size(survivor.spec, sizes[0]), ptxas)
                if prediction.warps_per_sm < min_warps:
                    dropped.setdefault("ptxas occupancy", []).append(
                        (survivor.candidate, f"{ptxas['registers']} registers: {prediction.warps_per_sm} warps per SM"))
                    continue
                prediction = _with_score(prediction, survivor.prediction.score)
                kept.append(Survivor(survivor.candidate, survivor.spec, prediction))
    return kept, dropped


def _try_build(build_fn: BuildFn, survivor: Survivor) -> tuple[dict | None, str | None]:
    try:
        return build_fn(survivor), None
    except Exception as err:  # BuildError or CompileError: the candidate is dropped, with the reason
        return None, str(err).splitlines()[0] if str(err) else type(err).__name__


# ---------------------------------------------------------------------------
# Timing


@dataclass(frozen=True)
class Measurement:
    """One candidate's timings: per size (ms, TFLOP/s, % of cuBLAS), and the geomean of the times."""

    name: str
    per_size: tuple[tuple[Size, float, float, float], ...]
    geomean_ms: float

    @property
    def geomean_tflops(self) -> float:
        return _geomean([tflops for _, _, tflops, _ in self.per_size])

    @property
    def geomean_pct_cublas(self) -> float:
        return _geomean([pct for _, _, _, pct in self.per_size])


@dataclass(frozen=True)
class Timing:
    device: str
    cupy_version: str
    peak_tflops: float
    runs: int
    sizes: tuple[Size, ...]
    measurements: dict[str, Measurement]  # by kernel name; kernels that could not run are absent
    cublas_ms: dict[Size, float]

    def ranking(self, names: Iterable[str] | None = None) -> list[Measurement]:
        """Measured candidates (all, or those in `names`), fastest first; ties by name for determinism.

        Fastest relative to the cuBLAS launches timed beside each candidate (bench interleaves
        them), so that candidates timed minutes apart are not ranked by how the clocks drifted."""
        wanted = None if names is None else set(names)
        chosen = [m for n, m in self.measurements.items() if wanted is None or n in wanted]
        return sorted(chosen, key=lambda m: (-m.geomean_pct_cublas, m.name))


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def timing_from_report(report, sizes: Sequence[Size]) -> Timing:
    """bench.BenchReport -> Timing; a kernel skipped at any size is left out."""
    per_name: dict[str, list] = {}
    skipped: set[str] = set()
    cublas: dict[Size, float] = {}
    from .bench import is_cublas_row

    for row in report.rows:
        size = (row.m, row.n, row.k)
        if is_cublas_row(row.name):  # "cuBLAS" (SGEMM) or "cuBLAS BF16 GEMM" and the like
            cublas[size] = row.median_ms
        elif row.median_ms is None:
            skipped.add(row.name)
        else:
            per_name.setdefault(row.name, []).append((size, row.median_ms, row.tflops, row.pct_of_cublas))
    measurements = {name: Measurement(name, tuple(rows), _geomean([ms for _, ms, _, _ in rows]))
                    for name, rows in per_name.items() if name not in skipped and len(rows) == len(sizes)}
    return Timing(report.device, report.cupy_version, report.peak_tflops, report.runs, tuple(sizes),
                  measurements, cublas)


def prebuild(survivors: Sequence[Survivor], jobs: int, template_path: str) -> None:
    """Fill the runtime's cubin cache in parallel so that loading many candidates does not compile serially.

    Best effort: anything unexpected leaves the cache as it is and Kernel() compiles on a miss."""
    if jobs <= 1 or len(survivors) <= 1:
        return
    try:
        import cupy

        from .compiler import compile_source
        from .runtime import BinaryCache, build_target, cache_dir, compile_cubin, cubin_cache_name

        cache = BinaryCache(cache_dir())
        compute_capability = cupy.cuda.Device().compute_capability
        work = []
        for survivor in survivors:
            artifacts = compile_source(SourceFile(candidate_path(template_path, survivor.candidate),
                                                  survivor.candidate.text))
            built_for = build_target(artifacts.metadata["target"], compute_capability)
            file_name = cubin_cache_name(artifacts.metadata, artifacts.cuda, built_for)
            if not (cache.directory / file_name).is_file():
                work.append((file_name, artifacts.cuda, built_for))
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # the parent may already hold a CUDA context
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            binaries = list(pool.map(_cubin_or_none, [w[1] for w in work], [w[2] for w in work]))
        for (file_name, _, _), binary in zip(work, binaries):
            if binary is not None:  # one that does not build fails again, with its message, when it is loaded
                cache.get_or_build(file_name, lambda binary=binary: binary)
    except Exception as err:  # pragma: no cover - depends on the GPU machine
        print(f"note: parallel prebuild skipped ({err}); kernels compile one by one", file=sys.stderr)


def _cubin_or_none(source: str, target: str) -> bytes | None:
    """A prebuild worker: the cubin, or None when the candidate does not build (loading it says why)."""
    from .runtime import KernelBuildError, compile_cubin

    try:
        return compile_cubin(source, target)
    except KernelBuildError:
        return None


def timing_tasks(survivors: Sequence[Survivor], sizes: Sequence[Size], runs: int, warmup: int,
                 template_path: str = "<template>.gemm") -> list:
    """One tune_workers.Task per candidate and size, each holding its candidate, which renders the text
    when a worker needs it (so that many tasks of a large template do not each hold a copy)."""
    from .tune_db import spec_hash
    from .tune_workers import Task

    hashes = [spec_hash(s.candidate.text) for s in survivors]
    return [Task(key, tuple(size), s.candidate.name, s.candidate, candidate_path(template_path, s.candidate), runs,
                 warmup, s.prediction.score)
            for s, key in zip(survivors, hashes) for size in sizes]


def time_candidates(survivors: Sequence[Survivor], sizes: Sequence[Size], runs: int, warmup: int, pool, db,
                    jobs: int = 1, template_path: str = "<template>.gemm",
                    progress: Callable[[str], None] = lambda line: None) -> Timing:
    """Time every candidate at every size in the pool's workers (tune_workers: one per GPU, or Ray tasks),
    each measurement written to the tuning database as it arrives and those it holds for this GPU model
    reused. A candidate that failed at some size (it does not build, faulted, hung) is left out with its
    reason, and the others are timed."""
    tasks = timing_tasks(survivors, sizes, runs, warmup, template_path)
    return timing_from_rows(run_tasks(tasks, survivors, pool, db, jobs, template_path, progress),
                            {task.spec_hash: task.name for task in tasks}, sizes)


def run_tasks(tasks: Sequence, survivors: Sequence[Survivor], pool, db, jobs: int = 1,
              template_path: str = "<template>.gemm", progress: Callable[[str], None] = lambda line: None) -> list:
    """Time the tasks the database does not hold for the pool's GPU model (after building their candidates
    on this host's CPUs, for a local pool), and return the database's rows of all of them."""
    from .tune_db import spec_hash
    from .tune_workers import LocalPool, measure, pending, warm_up_task

    device = pool.start()
    todo = pending(tasks, db, device.gpu)
    if isinstance(pool, LocalPool):  # compile on this host's CPUs, in parallel, before the workers load
        hashes = {task.spec_hash for task in todo}
        prebuild([s for s in survivors if spec_hash(s.candidate.text) in hashes], jobs, template_path)
    progress(f"{device.gpu}: {len(tasks) - len(todo)} of {len(tasks)} measurement(s) already in {db.path}, "
             f"{len(todo)} to time")
    if todo:
        pool.warm_up(warm_up_task(todo[0]))
    measure(pool, todo, db, progress)
    names = {task.spec_hash: task.name for task in tasks}
    wanted = {task.key for task in tasks}
    rows = [row for row in db.rows(names, gpu=device.gpu) if (row.spec_hash, row.size) in wanted]
    for row in rows:
        if row.status != "ok":
            print(f"note: {names[row.spec_hash]} left out at {'x'.join(map(str, row.size))}: {row.status} "
                  f"({row.error})", file=sys.stderr)
    return rows


def timing_from_rows(rows: Sequence, names: dict[str, str], sizes: Sequence[Size]) -> Timing:
    """Tuning-database rows (tune_db.Row, one GPU model) -> Timing, through the bench rows they stand for:
    candidates by their names here (`names`: spec hash -> name), cuBLAS at each size the median of the
    cuBLAS launches timed beside them, the peak the median the workers measured."""
    from statistics import median

    from .bench import BenchReport, Row, measured_row

    chosen = [row for row in rows if row.spec_hash in names and row.size in set(map(tuple, sizes))]
    ok = [row for row in chosen if row.status == "ok"]
    peak = median(row.peak_tflops for row in ok) if ok else 0.0
    bench_rows = []
    for size in sizes:
        beside = [row.cublas_ms for row in ok if row.size == tuple(size)]
        if beside:
            bench_rows.append(measured_row("cuBLAS", tuple(size), 1, median(beside), median(beside), peak))
    for row in chosen:
        name = names[row.spec_hash]
        bench_rows.append(measured_row(name, row.size, 1, row.median_ms, row.cublas_ms, row.peak_tflops)
                          if row.status == "ok" else Row(name, *row.size, buffer_sets=1, note=row.error))
    device, cupy_version = (chosen[0].gpu, chosen[0].cupy) if chosen else ("no GPU", "")
    runs = max((row.runs for row in ok), default=0)
    return timing_from_report(BenchReport(device, cupy_version, peak, runs, 0, bench_rows), sizes)


# ---------------------------------------------------------------------------
# The winner


def winner_text(candidate: Candidate, name: str, header: Sequence[str]) -> str:
    """The candidate as a plain spec named `name`, its leading comment replaced by `header`."""
    old = candidate.name
    body = candidate.text[candidate.body_start:]
    offset = candidate.name_start - candidate.body_start
    assert body[offset:offset + len(old)] == old
    body = body[:offset] + name + body[offset + len(old):]
    return "".join(f"// {line}".rstrip() + "\n" for line in header) + body


def winner_header(name: str, template_path: str, candidate: Candidate, measurement: Measurement, timing: Timing,
                  search_lines: Sequence[str], date: str) -> list[str]:
    lines = [f"{name}: tuned by `gemmdsl tune {template_path}` on {date}",
             f"winner: candidate {candidate.name}, choices {candidate.describe()}",
             f"device: {timing.device}, CuPy {timing.cupy_version}, measured FP32 FMA peak "
             f"{timing.peak_tflops:.1f} TFLOP/s; median of {timing.runs} launches"]
    for size, ms, tflops, pct in measurement.per_size:
        lines.append(f"  {'x'.join(map(str, size))}: {ms:.3f} ms, {tflops:.2f} TFLOP/s, {pct:.1f}% of cuBLAS "
                     f"timed beside it ({ms * pct / 100:.3f} ms)")
    if len(measurement.per_size) > 1:
        lines.append(f"  geomean: {measurement.geomean_ms:.3f} ms, {measurement.geomean_tflops:.2f} TFLOP/s, "
                     f"{measurement.geomean_pct_cublas:.1f}% of cuBLAS")
    lines += list(search_lines)
    return lines


def write_winner(output: str | Path, name: str, template_path: str, candidate: Candidate,
                 measurement: Measurement, timing: Timing, search_lines: Sequence[str],
                 date: str | None = None) -> str:
    """Write the winning spec (checked by the front end first) and return its text."""
    from .compiler import write_outputs
    from .frontend import load

    date = date or datetime.date.today().isoformat()
    text = winner_text(candidate, name, winner_header(name, template_path, candidate, measurement, timing,
                                                      search_lines, date))
    load(SourceFile(str(output), text))  # a CompileError here would be a bug in the renaming
    output = Path(output)
    write_outputs(output.parent if str(output.parent) else Path("."), {output.name: text.encode()})
    return text


# ---------------------------------------------------------------------------
# Reports


def screen_lines(report: ScreenReport, kept: Sequence[Survivor], dropped: dict[str, list],
                 budget: int) -> list[str]:
    """The pruning report: generated, rejected by reason, pruned by rule, kept."""
    lines = [f"generated {report.generated:,} candidates: {len(report.rejected):,} rejected by the front end, "
             f"{report.valid:,} valid"]
    for shape, count, first in report.rejected_by_reason():
        lines.append(f"  rejected {count:>5,}  {shape}")
    lines.append(f"pruned {report.pruned_count:,} of the valid by the analysis, {len(report.survivors):,} left")
    for reason in REASONS:
        items = report.pruned.get(reason, [])
        if items:
            lines.append(f"  pruned   {len(items):>5,}  {REASON_WORDS[reason]} (e.g. {items[0][0].name}: {items[0][1]})")
    for reason, items in dropped.items():
        lines.append(f"  dropped  {len(items):>5,}  {REASON_WORDS[reason]} (e.g. {items[0][0].name}: {items[0][1]})")
    lines.append(f"kept {len(kept)} for timing (budget {budget}), best predicted first")
    return lines


def nothing_survived(path: str, first: Candidate, report: ScreenReport) -> str:
    """The error when screening keeps no candidate, at the template's kernel name; where the front end
    rejected candidates, the most common reason follows, positioned in the first candidate it rejected."""
    line, column = line_column(first.text, first.name_start)  # the text before the name is the template's
    name = first.name.removesuffix(f"_t{first.index}")
    try:
        template = SourceFile.read(path, suffix="")
    except CompileError:  # gone since it was read: the message without the quoted line
        template = None
    hint, reason = None, None
    if report.rejected:
        _, count, diagnostic = report.rejected_by_reason()[0]
        candidate = next(candidate for candidate, rejected in report.rejected if rejected is diagnostic)
        reason = diagnostic.render(SourceFile(candidate_path(path, candidate), candidate.text))
        hint = (f"{len(report.rejected):,} of {report.generated:,} candidates were rejected by the front end; "
                f"the most common reason ({count:,}) follows")
    error = Diagnostic(Severity.ERROR, Span(path, line, column, line, column + len(name)),
                       "no candidate survived the screening; nothing to time", hint)
    return "\n".join(filter(None, (error.render(template), reason)))


def kept_lines(kept: Sequence[Survivor]) -> list[str]:
    width = max((len(s.candidate.name) for s in kept), default=4)
    return [f"  {s.candidate.name:<{width}}  score {s.prediction.score:.3f}  {s.prediction.summary()}  "
            f"[{s.candidate.describe()}]" for s in kept]


def search_summary(report: ScreenReport, kept: Sequence[Survivor], dropped: dict[str, list],
                   timed: int, exhaustive_line: str | None) -> list[str]:
    """The one-paragraph account of the search that goes into the winner's header."""
    pruned = ", ".join(f"{REASON_WORDS[r]} {len(report.pruned[r])}" for r in REASONS if report.pruned.get(r))
    dropped_text = ", ".join(f"{REASON_WORDS[r]} {len(items)}" for r, items in dropped.items())
    lines = [f"search: {report.generated} generated, {len(report.rejected)} rejected by the front end, "
             f"{report.pruned_count} pruned by the analysis" + (f" ({pruned})" if pruned else ""),
             f"  {len(kept)} kept" + (f" after nvcc ({dropped_text})" if dropped_text else "") + f", {timed} timed"]
    if exhaustive_line:
        lines.append(exhaustive_line)
    return lines


def exhaustive_comparison(timing: Timing, kept: Sequence[Survivor]) -> tuple[str, Measurement, Measurement]:
    """(one line, best of the pruned search, best of all) from one timing of every valid candidate."""
    best = timing.ranking()[0]
    pruned_best = timing.ranking(s.candidate.name for s in kept)[0]
    if pruned_best.name == best.name:
        line = f"exhaustive: timing all {len(timing.measurements)} valid candidates found the same winner"
    else:
        gap = 100 * (best.geomean_pct_cublas / pruned_best.geomean_pct_cublas - 1)
        line = (f"exhaustive: the best of all {len(timing.measurements)} valid candidates is {best.name} "
                f"({best.geomean_pct_cublas:.1f}% of cuBLAS); the pruned search's {pruned_best.name} "
                f"({pruned_best.geomean_pct_cublas:.1f}%) is {gap:.1f}% slower")
    return line, pruned_best, best


def results_json(report: ScreenReport, ranked: Sequence[Survivor], kept: Sequence[Survivor],
                 dropped: dict[str, list], sizes: Sequence[Size], timing: Timing | None = None,
                 template: str | None = None, scored: Sequence[Survivor] = ()) -> dict:
    """Every candidate's fate, prediction and (when timed) measurement, for tools and later analysis
    (scripts/tune_ranking.py). `scored`: every timeable candidate ranked, so that pruned ones carry
    their score too."""
    from dataclasses import asdict

    status: dict[str, dict] = {}
    for candidate, diagnostic in report.rejected:
        status[candidate.name] = {"status": "rejected", "detail": diagnostic.message}
    for reason, items in report.pruned.items():
        for candidate, detail in items:
            status[candidate.name] = {"status": "pruned", "reason": reason, "detail": detail}
    for place, survivor in enumerate(ranked, 1):
        status[survivor.candidate.name] = {"status": "survivor", "rank": place}
    for reason, items in dropped.items():
        for candidate, detail in items:
            status.setdefault(candidate.name, {}).update(status="dropped", reason=reason, detail=detail)
    predictions = {s.candidate.name: s.prediction for s in [*report.timeable, *scored, *ranked, *kept]}
    for survivor in kept:
        status[survivor.candidate.name]["status"] = "kept"
    rows = []
    for candidate in sorted({c for c, _ in report.rejected} | {s.candidate for s in report.timeable}
                            | {c for items in report.pruned.values() for c, _ in items}, key=lambda c: c.index):
        row = {"name": candidate.name, "choices": candidate.summary, **status[candidate.name]}
        if candidate.name in predictions:
            row["prediction"] = asdict(predictions[candidate.name])
        if timing is not None and candidate.name in timing.measurements:
            m = timing.measurements[candidate.name]
            row["measured"] = {"geomean_ms": m.geomean_ms, "geomean_tflops": m.geomean_tflops,
                               "geomean_pct_cublas": m.geomean_pct_cublas,
                               "per_size": [{"size": list(size), "ms": ms, "tflops": tf, "pct_cublas": pct}
                                            for size, ms, tf, pct in m.per_size]}
        rows.append(row)
    out = {"template": template, "sizes": [list(size) for size in sizes], "generated": report.generated, "rejected": len(report.rejected),
           "pruned": {reason: len(items) for reason, items in report.pruned.items()},
           "survivors": len(report.survivors), "dropped": {reason: len(items) for reason, items in dropped.items()},
           "kept": [s.candidate.name for s in kept], "candidates": rows}
    if timing is not None:
        out["device"] = {"name": timing.device, "cupy": timing.cupy_version, "peak_tflops": timing.peak_tflops,
                         "runs": timing.runs,
                         "cublas_ms": [{"size": list(size), "ms": ms} for size, ms in timing.cublas_ms.items()]}
    return out


def write_results_json(path: str | Path, data: dict) -> bool:
    """Write `data` to `path` whole or not at all; False (after the error) when it cannot be written."""
    import json

    from .compiler import OutputError, write_outputs

    path = Path(path)
    try:
        write_outputs(path.parent, {path.name: (json.dumps(data, indent=1) + "\n").encode()})
    except OutputError as err:
        print(f"error: {err}", file=sys.stderr)
        return False
    return True


# ---------------------------------------------------------------------------
# The command


def add_tune_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("template", metavar="TEMPLATE",
                        help=inputs_help("tune", "file: a spec whose values may be choice groups {a,b}"))
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"comma-separated MxNxK sizes (default {DEFAULT_SIZES})")
    parser.add_argument("--budget", type=_positive, default=DEFAULT_BUDGET, metavar="N",
                        help=f"candidates to time after pruning (default {DEFAULT_BUDGET})")
    parser.add_argument("--max-candidates", type=_positive, default=DEFAULT_MAX_CANDIDATES, metavar="N",
                        help=f"refuse templates that expand to more (default {DEFAULT_MAX_CANDIDATES})")
    parser.add_argument("--min-warps", type=int, default=DEFAULT_MIN_WARPS, metavar="W",
                        help=f"prune candidates with fewer resident warps per SM (default {DEFAULT_MIN_WARPS})")
    parser.add_argument("--conflict-tolerance", type=float, default=None, metavar="PCT",
                        help="prune candidates whose predicted bank-conflict wavefronts are PCT%% or more of all "
                             "shared-memory wavefronts (default: prune none; the cost model prices them)")
    parser.add_argument("--sms", type=_positive, default=None,
                        help="SM count for the ranking's wave-quantization term (default: the target's reference "
                             "GPU's, gemmdsl/targets.py: 132 for sm_90, the H100 SXM)")
    parser.add_argument("--exhaustive", action="store_true",
                        help="also time every valid candidate and compare winners")
    parser.add_argument("--screen-only", action="store_true", help="stop after the pruning report (exit 0)")
    parser.add_argument("--no-nvcc", action="store_true",
                        help="build nothing before timing (neither nvcc nor, without it, NVRTC): no ptxas spill check of "
                             "the kept candidates, and mma.sync candidates ranked on the register estimate instead of "
                             "ptxas's figures")
    parser.add_argument("--jobs", type=_positive, default=os.cpu_count() or 1,
                        help="parallel nvcc/NVRTC builds (default: the CPU count)")
    from .bench import MIN_RUNS, runs_argument

    parser.add_argument("--runs", type=runs_argument, default=MIN_RUNS,
                        help=f"timed launches per kernel and size, median used (default and minimum {MIN_RUNS})")
    parser.add_argument("--warmup", type=int, default=5, help="untimed launches first (default 5)")
    parser.add_argument("-o", "--output", metavar="FILE.gemm",
                        help="where to write the winner (default: <template stem>_best.gemm)")
    parser.add_argument("--name", help="kernel name of the winner (default: <template stem>_best)")
    parser.add_argument("--json", metavar="FILE", help="also write every candidate's fate, prediction and timing")
    from .tune_db import DEFAULT_DB
    from .tune_workers import DEFAULT_TIMEOUT_S, GPU_BACKEND

    scale = parser.add_argument_group("tuning at scale (docs/tuning-at-scale.md)")
    scale.add_argument("--db", default=str(DEFAULT_DB), metavar="FILE",
                       help=f"the tuning database every measurement is written to as it arrives and reused from "
                            f"(default {DEFAULT_DB})")
    scale.add_argument("--gpus", type=gpus_argument, default=None, metavar="N|all",
                       help="time on the first N GPUs of this host (CUDA_VISIBLE_DEVICES's, else all CUDA finds), "
                            "one worker process each (default all)")
    scale.add_argument("--timeout", type=_positive_seconds, default=DEFAULT_TIMEOUT_S, metavar="S",
                       help=f"seconds one measurement may take before its worker is killed and restarted and the "
                            f"candidate recorded as timed out (default {DEFAULT_TIMEOUT_S:g})")
    scale.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="time as Ray tasks, one per candidate and size with num_gpus=1, on the cluster at "
                            "ADDRESS (without it: RAY_ADDRESS, else a local Ray); needs pip install 'gemmdsl[ray]'")
    scale.add_argument("--backend", default=GPU_BACKEND, metavar="MODULE:CLASS",
                       help="the timing backend each worker builds (default: the GPU's, bench beside cuBLAS)")
    scale.add_argument("--report", action="store_true",
                       help="print what the database holds for the template's candidates at --sizes: the measured "
                            "ranking beside the predicted one; time nothing")
    scale.add_argument("--shapes", metavar="FILE",
                       help="tune each shape of FILE (one `MxNxK [weight]` a line) and write a .gemmf family of the "
                            "winners (-o, default <template stem>_family.gemmf), its rule refined where the measured "
                            "winner is not the model's pick")


def gpus_argument(text: str) -> int | None:
    """`all` -> None, else a positive count."""
    return None if text == "all" else _positive(text)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text!r}")
    return value


def _screen_progress(done: int, total: int) -> None:
    if sys.stderr.isatty() and (done % 25 == 0 or done == total):
        sys.stderr.write(f"\r\033[Kscreening {done}/{total}")
        if done == total:
            sys.stderr.write("\r\033[K")
        sys.stderr.flush()


def search(candidates: Sequence[Candidate], sizes: Sequence[Size], args: argparse.Namespace,
           path: str) -> tuple[ScreenReport, list[Survivor], list[Survivor], dict, str | None]:
    """Screen, rank and select as the options say: (report, ranked, kept, dropped, the ptxas compiler or None)."""
    from .build import ptxas_compiler

    report = screen(candidates, sizes, args.min_warps, args.conflict_tolerance, path, _screen_progress)
    compiler = None if args.no_nvcc else ptxas_compiler()
    build_fn, failed = None, []
    if compiler is not None:  # mma.sync: rank on ptxas's figures; select reuses them for its spill check
        built = lambda survivor: ptxas_of(survivor, path, compiler)  # noqa: E731
        report, failed = with_ptxas(report, sizes, built, args.jobs, _progress)
        build_fn = lambda survivor: survivor.prediction.ptxas or built(survivor)  # noqa: E731
    ranked = rank(report.survivors, sizes, args.sms)
    kept, dropped = select(ranked, args.budget, sizes, args.min_warps, build_fn, args.jobs, _progress)
    if failed:
        dropped = {"build": failed + dropped.pop("build", []), **dropped}
    return report, ranked, kept, dropped, compiler


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def timing_pool(args: argparse.Namespace):
    """The workers `--gpus`, `--ray` and `--backend` ask for (tune_workers)."""
    from .tune_workers import LocalPool, RayPool, visible_devices

    if args.ray is not None:  # the cluster runs this gemmdsl, whether or not its nodes have one installed
        return RayPool(args.backend, args.ray or None, args.timeout,
                       runtime_env={"py_modules": [str(Path(__file__).parent)]})
    return LocalPool(args.backend, visible_devices(args.gpus), args.timeout)


def read_template(args: argparse.Namespace) -> tuple[str, list, list[Size]] | int:
    """The template's path, its candidates and `--sizes`; an exit status (after the error) when one is bad:
    1 for the template, 2 for the sizes."""
    from .runtime import parse_sizes

    try:
        sizes = parse_sizes(args.sizes)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    path = args.template
    try:  # any suffix: a template may be a .tgemm or a .gemm
        return path, expand(SourceFile.read(path, suffix="").text, path, args.max_candidates), sizes
    except CompileError as err:
        print(err.render(), file=sys.stderr)
        return 1


def tune_sizes_main(args: argparse.Namespace, path: str, candidates: Sequence, sizes: list[Size]) -> int:
    """Tune the template for `sizes`: 1 when nothing survives; 2 when there is no GPU to time on (after the
    screening report)."""
    stem = template_stem(path)
    name = args.name or f"{stem}_best"
    output = args.output or f"{stem}_best.gemm"
    files = [("--json", args.json)] if args.screen_only else [("--json", args.json), ("-o", output)]
    refused = refuse_late_failures(args, [] if args.screen_only else [name], files)
    if refused is not None:
        return refused
    report, ranked, kept, dropped, compiler = search(candidates, sizes, args, path)
    print(f"{path}: {len(candidates)} candidates for {', '.join('x'.join(map(str, s)) for s in sizes)}")
    print("\n".join(screen_lines(report, kept, dropped, args.budget)))
    print("\n".join(kept_lines(kept)))
    if compiler is None:
        print("note: ptxas spill check skipped, and mma.sync candidates ranked on the register estimate"
              + (" (--no-nvcc)" if args.no_nvcc else " (neither nvcc on PATH nor NVRTC through CuPy)"))
    if not kept:
        print(nothing_survived(path, candidates[0], report), file=sys.stderr)
        return 1
    if args.json and not write_results_json(args.json, results_json(
            report, ranked, kept, dropped, sizes, template=path, scored=rank(report.timeable, sizes, args.sms))):
        return 1
    if args.screen_only:
        return 0

    to_time = list(kept)
    if args.exhaustive:  # the kept ones with their ptxas figures, then every other valid candidate, by rank
        kept_names = {s.candidate.name for s in kept}
        to_time += [s for s in rank(report.timeable, sizes, args.sms) if s.candidate.name not in kept_names]
    timing = time_with_options(args, path, lambda pool, db: time_candidates(
        to_time, sizes, args.runs, args.warmup, pool, db, args.jobs, path, _progress))
    if isinstance(timing, int):
        return timing
    written = not args.json or write_results_json(args.json, results_json(
        report, ranked, kept, dropped, sizes, timing, template=path, scored=rank(report.timeable, sizes, args.sms)))
    status = report_and_write(args, path, name, output, report, kept, dropped, to_time, timing)
    return status or (0 if written else 1)


def refuse_late_failures(args: argparse.Namespace, names: Sequence[str],
                         files: Sequence[tuple[str, str | None]]) -> int | None:
    """Refuse, before screening or timing, what would otherwise fail only once the timing is done: the
    kernel names the winners get, the files to be written (`files`: (option, path)), and when `names`
    is not empty (a run that times) the database and the backend. Prints every problem and returns
    2, else None."""
    from .tune_db import TuneDB, TuneDBError
    from .tune_workers import error_text, resolve
    from .validate import kernel_name_problem

    problems = []
    for name in names:
        if (problem := kernel_name_problem(name)) is not None:
            source = "--name" if args.name else "the name made from a file name (set one with --name)"
            problems.append(f"error: {source}: {problem[0]}\n  hint: {problem[1]}")
    for option, path in files:
        if path is not None and (reason := unwritable(path)) is not None:
            problems.append(f"error: {option}: cannot write {path}: {reason}")
    if names:
        database = Path(args.db).expanduser()
        try:
            if database.is_file() and database.stat().st_size:  # an empty file becomes a new database
                TuneDB(args.db, read_only=True).close()
            elif (reason := unwritable(database)) is not None:
                problems.append(f"error: --db: cannot create {args.db}: {reason}")
        except TuneDBError as err:
            problems.append(f"error: --db: {err}")
        if args.ray is None:  # a Ray cluster may hold a backend this host does not
            try:
                resolve(args.backend)
            except Exception as err:
                problems.append(f"error: --backend {args.backend}: cannot load it ({error_text(err)})")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    return None


def unwritable(path: str | Path) -> str | None:
    """Why compiler.write_outputs could not write a file at `path` (found without writing), or None."""
    target = Path(path)
    if target.is_dir():
        return "it is a directory"
    folder = target.parent
    while not folder.exists() and folder != folder.parent:  # write_outputs creates the missing folders
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is not a directory"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable"
    return None


def time_with_options(args: argparse.Namespace, path: str, work: Callable):
    """`work(pool, db)` on the pool and database the options name; an exit status when it cannot time."""
    from .runtime import GpuUnavailable, gpu_unavailable_reason, require_fp32_cublas
    from .tune_db import TuneDB, TuneDBError
    from .tune_workers import GPU_BACKEND, WorkerError

    reason = gpu_unavailable_reason() if args.backend == GPU_BACKEND and args.ray is None else None
    if reason is not None:
        print(f"error: timing needs a GPU ({reason}); the screening above ran without one. "
              f"On a GPU machine: gemmdsl tune {path} --sizes {args.sizes} --budget {args.budget}"
              + (" --exhaustive" if args.exhaustive else ""), file=sys.stderr)
        return 2
    try:
        require_fp32_cublas()
        with TuneDB(args.db) as db, timing_pool(args) as pool:
            return work(pool, db)
    except (GpuUnavailable, WorkerError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (CompileError, ValueError, TuneDBError) as err:
        print(f"error: {err.render() if isinstance(err, CompileError) else err}", file=sys.stderr)
        return 1


def report_and_write(args: argparse.Namespace, path: str, name: str, output: str, report: ScreenReport,
                     kept: Sequence[Survivor], dropped: dict, timed: Sequence[Survivor], timing: Timing) -> int:
    print(f"\n{timing.device} | measured FP32 FMA peak {timing.peak_tflops:.1f} TFLOP/s | "
          f"median of {timing.runs} launches, geomean over sizes")
    by_name = {s.candidate.name: s for s in timed}
    kept_names = {s.candidate.name for s in kept}
    ranking = timing.ranking()
    if not ranking:
        print("error: no candidate could be timed", file=sys.stderr)
        return 1
    shown = ranking if len(ranking) <= 20 else ranking[:10] + [m for m in ranking[10:] if m.name in kept_names]
    for place, measurement in enumerate(ranking, 1):
        if measurement not in shown:
            continue
        survivor = by_name[measurement.name]
        mark = "*" if measurement.name in kept_names else " "
        print(f"{place:>4} {mark} {measurement.name:<24} {measurement.geomean_ms:>8.3f} ms "
              f"{measurement.geomean_tflops:>6.2f} TFLOP/s {measurement.geomean_pct_cublas:>6.1f}% cuBLAS  "
              f"score {survivor.prediction.score:.3f}  [{survivor.candidate.describe()}]")
    if args.exhaustive:
        print("  (* = kept by the pruned search)")
    exhaustive_line = None
    winner = timing.ranking(kept_names)[0] if kept_names & set(timing.measurements) else ranking[0]
    if args.exhaustive:  # the best of everything timed is the one to keep
        exhaustive_line, _, winner = exhaustive_comparison(timing, kept)
        print(exhaustive_line)
    lines = search_summary(report, kept, dropped, len(timing.measurements), exhaustive_line)
    from .compiler import OutputError

    try:
        write_winner(output, name, path, by_name[winner.name].candidate, winner, timing, lines)
    except OutputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"winner {winner.name} ({winner.geomean_tflops:.2f} TFLOP/s, {winner.geomean_pct_cublas:.1f}% of cuBLAS) "
          f"written to {output} as {name}")
    return 0


def print_report(db_path: str, path: str, candidates: Sequence[Candidate], sizes: Sequence[Size]) -> int:
    """`--report`: per GPU model, the template's candidates the database holds at every size, fastest first
    (geomean of % cuBLAS), beside the rank the cost model gave them, and the failures; nothing is timed."""
    from .tune_db import TuneDB, TuneDBError, spearman, spec_hash

    names = {spec_hash(c.text): c.name for c in candidates}
    choices = {c.name: c.describe() for c in candidates}
    try:
        with TuneDB(db_path, read_only=True) as db:
            rows = db.rows(names)
    except TuneDBError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    wanted = set(map(tuple, sizes))
    rows = [row for row in rows if row.size in wanted]
    if not rows:
        print(f"{path}: {db_path} holds no measurement of its candidates at "
              f"{', '.join('x'.join(map(str, s)) for s in sizes)}")
        return 1
    for gpu in sorted({row.gpu for row in rows}):
        mine = [row for row in rows if row.gpu == gpu]
        timing = timing_from_rows(mine, names, sizes)
        ranking = timing.ranking()
        predicted = {names[row.spec_hash]: row.predicted or 0.0 for row in mine}
        by_prediction = {name: place for place, name in
                         enumerate(sorted((m.name for m in ranking), key=lambda n: (-predicted[n], n)), 1)}
        print(f"{gpu} | {len(ranking)} candidate(s) measured at every size | driver {mine[0].driver}, "
              f"{mine[0].compiler}, CuPy {mine[0].cupy}")
        for place, m in enumerate(ranking, 1):
            print(f"{place:>4} {m.name:<24} {m.geomean_ms:>8.3f} ms {m.geomean_tflops:>7.2f} TFLOP/s "
                  f"{m.geomean_pct_cublas:>6.1f}% cuBLAS  predicted #{by_prediction[m.name]} "
                  f"(score {predicted[m.name]:.3f})  [{choices[m.name]}]")
        for row in mine:
            if row.status != "ok":
                print(f"   {row.status:<7} {names[row.spec_hash]} at {'x'.join(map(str, row.size))}: {row.error}")
        rho = (spearman([predicted[m.name] for m in ranking], [m.geomean_pct_cublas for m in ranking])
               if len(ranking) > 1 else math.nan)
        print("  predicted vs measured: " + (f"Spearman {rho:.2f} over {len(ranking)} candidates" if not math.isnan(rho)
                                             else "too few candidates or scores to compare"))
    return 0

"""`gemmdsl check`: report what the analysis passes found about a spec.

    analysis = analyze(spec, problem=(4096, 4096, 4096), ptxas=None)   # gemmdsl/analysis.py
    print(format_report(analysis))      # tables, verdicts, warnings, a bank map where banks conflict
    to_json(analysis)                   # the same figures for tools

The passes live in gemmdsl/passes/ and analysis.py runs them; this module only
formats their facts.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap

from . import ir
from .abi import size_errors
from .analysis import Analysis, InexactProblemError, ProblemSizeError, analyze
from .build import PtxasFigures
from .compiler import Artifacts, compile_path, ptxas_figures
from .family import (compile_family_path, explain, format_explanation, format_predicted_time, member_model,
                     predicted_time)
from .file_kinds import inputs_help, is_family_path
from .passes import DEFAULT_PROBLEM, ProblemSize
from .passes.banks import AccessCost, lane_byte_addresses, lanes_by_bank, phase_of_each_lane
from .passes.waves import Waves
from .quant_check import quant_facts, quant_json, quant_lines
from .source import CompileError, SourceFile, printable


# --- the text report ---------------------------------------------------------------------------

REPORT_WIDTH = 100  # verdicts wrap here


def format_report(analysis: Analysis, verbose: bool = False) -> str:
    """The report; the bank map of the worst access only where it conflicts, or with `verbose`. A path with a
    headline of its own (paths/facts.py) gets the short report: its headline and alarms, the verdicts, the
    warnings."""
    facts = analysis.path.facts
    headline = facts.headline(analysis)
    if headline is not None:
        return _joined([headline, *facts.alarms(analysis), _quant_section(analysis),
                        "\n".join(_wrapped(f"{outcome.name}: ", outcome.verdict) for outcome in analysis.outcomes),
                        _warnings(analysis)])
    worst = worst_access(analysis.facts["smem_accesses"])
    return _joined([
        _header(analysis),
        _quant_section(analysis),
        _spill_banner(analysis),
        _access_table(analysis),
        _launch_totals(analysis),
        _verdicts(analysis),
        _warnings(analysis),
        _bank_map(analysis, worst) if verbose or worst.max_ways > 1 else "",
    ])


def _joined(sections: list[str]) -> str:
    return "\n\n".join(section for section in sections if section) + "\n"


def _header(analysis: Analysis) -> str:
    spec, layout = analysis.spec, analysis.layout
    launch = analysis.facts["launch"]
    return (f"{spec.name} ({spec.target}): {layout.threads} threads = {launch.warps_per_block} warps, "
            f"block tile {layout.bm}x{layout.bn}x{layout.bk}, problem {analysis.problem}")


def _quant_section(analysis: Analysis) -> str:
    """A quantized spec's bytes per weight, HBM bound and dequantization cost (quant_check.py); empty otherwise."""
    spec = analysis.spec
    if spec.quant is None:
        return ""
    facts = quant_facts(spec, tuple(analysis.problem), analysis.path.facts.dequantization(analysis))
    return "\n".join(quant_lines(spec, tuple(analysis.problem), facts))


def _spill_banner(analysis: Analysis) -> str:
    registers = analysis.facts["registers"]
    if not registers.spills:
        return ""
    return (f"!!! ptxas SPILLS registers to local memory: {registers.spill_store_bytes} bytes stored, "
            f"{registers.spill_load_bytes} bytes loaded per thread !!!")


def _merged_rows(costs: list[AccessCost]) -> list[list[AccessCost]]:
    """Instructions of equal operand, op, width and cost, in order of first appearance."""
    rows: dict[tuple, list[AccessCost]] = {}
    for c in costs:
        key = (c.access.operand, c.access.op, c.width_bits, c.wavefronts, c.ideal_wavefronts, c.max_ways)
        rows.setdefault(key, []).append(c)
    return list(rows.values())


def _access_table(analysis: Analysis) -> str:
    warps = analysis.facts["launch"].warps_per_block
    lines = [f"Shared-memory instructions per k-tile, per block of {warps} warps "
             "(equal rows merged; 'per thread' counts unrolled instructions)",
             f"  {'operand':<8}{'op':<7}{'bits':>5}{'per thread':>12}{'warp instrs':>13}"
             f"{'wavefronts':>12}{'ideal':>8}{'max ways':>10}"]
    for row in _merged_rows(analysis.facts["smem_accesses"]):
        first = row[0]
        lines.append(f"  {first.access.operand.name:<8}{first.access.op:<7}{first.width_bits:>5}{len(row):>12}"
                     f"{sum(c.instructions for c in row):>13}{sum(c.wavefronts for c in row):>12}"
                     f"{sum(c.ideal_wavefronts for c in row):>8}{first.max_ways:>10}")
    return "\n".join(lines)


def _launch_totals(analysis: Analysis) -> str:
    launch, traffic = analysis.facts["launch"], analysis.facts["smem_traffic"]
    return "\n".join([
        f"Per launch ({launch.blocks:,} blocks x {launch.k_tiles:,} k-tiles):",
        f"  shared loads  {traffic.load_wavefronts:>16,} wavefronts, {traffic.load_conflicts:,} beyond ideal",
        f"  shared stores {traffic.store_wavefronts:>16,} wavefronts, {traffic.store_conflicts:,} beyond ideal",
    ])


def _verdicts(analysis: Analysis) -> str:
    width = max(len(outcome.name) for outcome in analysis.outcomes)
    return "Verdicts\n" + "\n".join(_wrapped(f"  {o.name:<{width}}  ", o.verdict) for o in analysis.outcomes)


def _wrapped(label: str, text: str) -> str:
    """`label` then `text`, wrapped at REPORT_WIDTH columns with continuation lines under the text."""
    return textwrap.fill(text, REPORT_WIDTH, initial_indent=label, subsequent_indent=" " * len(label),
                         break_on_hyphens=False, break_long_words=False)


def _warnings(analysis: Analysis) -> str:
    if not analysis.warnings:
        return ""
    source = _source_of(analysis.spec)
    return "Warnings\n" + "\n".join(w.render(source) for w in analysis.warnings)


def _source_of(spec: ir.KernelSpec) -> SourceFile | None:
    """The spec's text, so warnings can quote their line; None for specs not read from a file."""
    try:
        return SourceFile.read(spec.span.file)
    except CompileError:
        return None


def worst_access(costs: list[AccessCost]) -> AccessCost:
    """The instruction with the worst conflict, then the most excess wavefronts, then an ldmatrix (its phase
    is the one a tensor-core layout is tuned for); the first such in program order."""
    return max(costs, key=lambda c: (c.max_ways, c.excess_wavefronts, c.access.op == "ldmatrix"))


def _bank_map(analysis: Analysis, cost: AccessCost) -> str:
    access = cost.access
    addresses = lane_byte_addresses(analysis.layout, access, analysis.layout.thread_env())[cost.worst_warp]
    width_bytes = access.width_bytes
    phases = phase_of_each_lane(access.op, width_bytes, addresses[None, :])[0]
    lanes = [lane for lane, phase in enumerate(phases) if phase == cost.worst_phase]
    where = f" at kk={access.kk}" if access.kk is not None else ""
    conflict = f"{cost.max_ways}-way conflict" if cost.max_ways > 1 else "no conflict"
    lines = [f"Bank map of the worst access: {access.operand.name} {access.op} {cost.width_bits}-bit{where} "
             f"({access.offset}), warp {cost.worst_warp}, lanes {lanes[0]}-{lanes[-1]}: {conflict}"]
    for bank, words in lanes_by_bank(addresses, width_bytes, access.op, cost.worst_phase).items():
        cells = " | ".join(f"word {word}: lanes {','.join(map(str, word_lanes))}"
                           for word, word_lanes in words.items())
        lines.append(f"  bank {bank:>2}  {cells}")
    return "\n".join(lines)


# --- JSON --------------------------------------------------------------------------------------


def to_json(analysis: Analysis) -> dict:
    spec, layout = analysis.spec, analysis.layout
    facts = analysis.path.facts.figures(analysis) or _tile_facts(analysis)
    return {
        "kernel": spec.name,
        "target": str(spec.target),
        "threads": layout.threads,
        "block_tile": [layout.bm, layout.bn, layout.bk],
        "smem_bytes": layout.smem_bytes,
        **facts,
        "fuse": _fuse_json(analysis),
        "quant": None if spec.quant is None else quant_json(
            spec, tuple(analysis.problem), quant_facts(spec, tuple(analysis.problem),
                                                       analysis.path.facts.dequantization(analysis))),
        "verdicts": {outcome.name: outcome.verdict for outcome in analysis.outcomes},
        "warnings": [w.render() for w in analysis.warnings],
    }


def spec_time(artifacts: Artifacts, problem: tuple[int, int, int]) -> dict:
    """The predicted time of the spec at the problem, from the family rule's model of it (built from its
    analysis at the default problem, as a family builds its members'), so that a member's time is the one
    its family's explanation gives."""
    return predicted_time(member_model(artifacts), artifacts.spec.target.sm, problem)


def _tile_facts(analysis: Analysis) -> dict:
    """The FMA and mma.sync paths' figures."""
    facts = analysis.facts
    launch, traffic = facts["launch"], facts["smem_traffic"]
    registers, occupancy, intensity = facts["registers"], facts["occupancy"], facts["intensity"]
    return {
        "registers": {
            "estimate": registers.estimate.total,
            "estimate_parts": {"accumulators": registers.estimate.accumulators,
                               "fragments": registers.estimate.fragments,
                               "staging": registers.estimate.staging,
                               "overhead": registers.estimate.overhead},
            "ptxas": registers.ptxas,
            "spills": None if registers.ptxas is None else {"store_bytes": registers.spill_store_bytes,
                                                            "load_bytes": registers.spill_load_bytes},
        },
        "occupancy": {
            "blocks_per_sm": occupancy.blocks_per_sm,
            "limited_by": occupancy.limited_by,
            "limits": occupancy.limits,
            "warps_per_sm": occupancy.warps_per_sm,
            "registers_per_thread": occupancy.registers_per_thread,
        },
        "smem_accesses": [_access_json(cost) for cost in facts["smem_accesses"]],
        "launch": {
            "problem": list(analysis.problem),
            "blocks": launch.blocks,
            "k_tiles": launch.k_tiles,
            "warps_per_block": launch.warps_per_block,
            "smem_load_wavefronts": traffic.load_wavefronts,
            "smem_store_wavefronts": traffic.store_wavefronts,
            "smem_load_conflicts": traffic.load_conflicts,
            "smem_store_conflicts": traffic.store_conflicts,
        },
        "waves": _waves_json(facts["waves"]),
        "intensity": {
            "block_flops_per_byte": round(intensity.block_flops_per_byte, 3),
            "warp_tile": [intensity.warp_tile.m, intensity.warp_tile.n],
            "warp_flops_per_byte": round(intensity.warp_flops_per_byte, 3),
            "launch_flops": intensity.flops,
            "launch_global_bytes": intensity.global_bytes,
            "launch_flops_per_byte": round(intensity.launch_flops_per_byte, 3),
            "dram_bytes": intensity.dram_bytes,
            "unit": intensity.unit,
            "peak_tflops": round(intensity.peak_tflops, 1),
            "memory_tflops": round(intensity.memory_tflops, 1),
            "bound_tflops": round(intensity.bound_tflops, 1),
            "limit": intensity.limit,
        },
    }


def _fuse_json(analysis: Analysis) -> dict | None:
    """The fuse chain's figures (passes/fuse.py) and, where the path's passes count them (`epilogue_cycles`),
    its epilogue's cycles; None unfused."""
    cost = analysis.facts["fuse"]
    if cost is None:
        return None
    epilogue = analysis.facts.get("epilogue_cycles")
    return {**cost.figures(), "extra_dram_bytes": cost.extra_dram_bytes,
            "epilogue": None if epilogue is None else {**dataclasses.asdict(epilogue), "exposed": epilogue.exposed,
                                                       "share": round(epilogue.share, 4)}}


def _waves_json(waves: Waves) -> dict:
    split = waves.split
    return {"slots": waves.slots, "tiles": waves.tiles, "waves": round(waves.waves, 4),
            "last_wave_fill": round(waves.last_wave_fill, 4),
            "stream_k": None if split is None else {"sk_tiles": split.sk_tiles, "sk_blocks": split.sk_blocks}}


def _access_json(cost: AccessCost) -> dict:
    return {
        "operand": cost.access.operand.value,
        "op": cost.access.op,
        "width_bits": cost.width_bits,
        "kk": cost.access.kk,
        "offset": cost.access.offset.render(),
        "instructions": cost.instructions,  # warp instructions per block and k-tile
        "wavefronts": cost.wavefronts,
        "ideal_wavefronts": cost.ideal_wavefronts,
        "max_ways": cost.max_ways,
    }


# --- the command -------------------------------------------------------------------------------


def parse_problem(text: str) -> ProblemSize:
    """'MxNxK' -> ProblemSize, for argparse."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected MxNxK with positive sizes, such as 4096x4096x4096, not {text!r}")
    size = ProblemSize(*map(int, parts))
    beyond = size_errors(size)
    if beyond:
        raise argparse.ArgumentTypeError("; ".join(beyond))
    return size


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("specs", nargs="+", metavar="SPEC",
                        help=inputs_help("check", "files to analyse; for a family, which member runs --problem and why"))
    parser.add_argument("--problem", type=parse_problem, default=DEFAULT_PROBLEM, metavar="MxNxK",
                        help="problem size for per-launch figures (default 4096x4096x4096)")
    parser.add_argument("--json", action="store_true",
                        help="print JSON: one object for one spec, a list for several")
    parser.add_argument("--verbose", action="store_true",
                        help="print the bank map of the worst shared-memory access even where no bank conflicts")
    parser.add_argument("--no-ptxas", action="store_true",
                        help="leave out ptxas's figures (registers, spills): build nothing with nvcc or NVRTC")


def report_json(analysis: Analysis, figures: PtxasFigures | None, artifacts: Artifacts) -> dict:
    """`check --json`'s object for one spec: the analysis' figures (`to_json`), which compiler gave ptxas's and
    whether they came from the cache, and the predicted time."""
    return {**to_json(analysis), "ptxas_figures": None if figures is None else
            {"compiler": figures.compiler, "cached": figures.cached},
            "predicted_time": spec_time(artifacts, analysis.problem)}


def analyze_with_ptxas(path: str, problem: ProblemSize, ptxas: bool) -> tuple[Analysis, PtxasFigures | None, Artifacts]:
    """The analysis of the spec at `path` for `problem`, with ptxas's figures (build.cached_kernel_resources: from
    the cache where its .cu was built before) unless `ptxas` is False, and the spec's compiled artifacts."""
    artifacts = compile_path(path)
    figures = ptxas_figures(artifacts) if ptxas else None
    resources = None if figures is None else figures.resources.as_dict()
    try:
        return analyze(artifacts.spec, problem, resources, plan=artifacts.plan), figures, artifacts
    except InexactProblemError as err:  # positioned at the spec's `bounds`: quote that line
        raise InexactProblemError(err.diagnostics, SourceFile.read(path)) from None


def check_main(args: argparse.Namespace) -> int:
    """Analyse each spec; exit status 1 if any failed to load or build, or does not tile the problem."""
    from .build import BuildError, nvrtc_version, old_nvrtc_note, ptxas_compiler

    if not args.no_ptxas and ptxas_compiler() == "nvrtc" and not all(map(is_family_path, args.specs)):
        print(f"note: ptxas's figures from NVRTC {nvrtc_version()} (nvcc not on PATH): the kernel the runtime "
              f"builds here", file=sys.stderr)
        note = old_nvrtc_note()
        if note is not None:
            print(note, file=sys.stderr)
    status = 0
    reports = []
    for path in args.specs:
        try:
            if is_family_path(path):  # which member runs the problem, and why
                explanation = explain(compile_family_path(path), args.problem)
                reports.append(explanation if args.json else format_explanation(explanation))
                continue
            analysis, figures, artifacts = analyze_with_ptxas(path, args.problem, not args.no_ptxas)
        except CompileError as err:
            print(err.render(), file=sys.stderr)
            status = 1
            continue
        except (BuildError, ProblemSizeError) as err:
            print(f"{printable(path)}: error: {err}", file=sys.stderr)
            status = 1
            continue
        note = figures.note() if figures is not None else "ptxas's figures: none (--no-ptxas, or no nvcc or NVRTC)"
        time = format_predicted_time(spec_time(artifacts, args.problem))
        reports.append(report_json(analysis, figures, artifacts) if args.json
                       else f"{format_report(analysis, args.verbose)}{time}\n{note}\n")
    if args.json:
        print(json.dumps(reports[0] if len(reports) == 1 else reports, indent=2))
    else:
        print("\n".join(reports), end="")
    return status

"""`gemmdsl tune TEMPLATE`: the options, the search (screen, rank, select), the timing and the report
(tune_cli.py is the command's entry; tune_family.py builds on these)."""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from ..file_kinds import inputs_help
from ..source import CompileError, SourceFile
from .templates import Candidate, DEFAULT_MAX_CANDIDATES, expand, template_stem
from .screen import DEFAULT_MIN_WARPS, ScreenReport, Size, Survivor, screen
from .timing import Timing, time_candidates, timing_from_rows
from .rank import ptxas_of, rank, select, with_ptxas
from .report import (exhaustive_comparison, kept_lines, nothing_survived, results_json, screen_lines, search_summary,
                     write_results_json, write_winner)


DEFAULT_SIZES = "4096x4096x4096"
DEFAULT_BUDGET = 8


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
    from ..bench import MIN_RUNS, runs_argument

    parser.add_argument("--runs", type=runs_argument, default=MIN_RUNS,
                        help=f"timed launches per kernel and size, median used (default and minimum {MIN_RUNS})")
    parser.add_argument("--warmup", type=int, default=5, help="untimed launches first (default 5)")
    parser.add_argument("-o", "--output", metavar="FILE.gemm",
                        help="where to write the winner (default: <template stem>_best.gemm)")
    parser.add_argument("--name", help="kernel name of the winner (default: <template stem>_best)")
    parser.add_argument("--json", metavar="FILE", help="also write every candidate's fate, prediction and timing")
    from ..tune_db import DEFAULT_DB
    from ..tune_workers import DEFAULT_TIMEOUT_S, GPU_BACKEND

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
    from ..build import ptxas_compiler

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
    from ..tune_workers import LocalPool, RayPool, visible_devices

    if args.ray is not None:  # the cluster runs this gemmdsl, whether or not its nodes have one installed
        return RayPool(args.backend, args.ray or None, args.timeout,
                       runtime_env={"py_modules": [str(Path(__file__).resolve().parents[1])]})  # gemmdsl/
    return LocalPool(args.backend, visible_devices(args.gpus), args.timeout)


def read_template(args: argparse.Namespace) -> tuple[str, list, list[Size]] | int:
    """The template's path, its candidates and `--sizes`; an exit status (after the error) when one is bad:
    1 for the template, 2 for the sizes."""
    from ..runtime.commands import parse_sizes

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
    from ..tune_db import TuneDB, TuneDBError
    from ..tune_workers import error_text, resolve
    from ..validate import kernel_name_problem

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
    from ..runtime.environment import GpuUnavailable, gpu_unavailable_reason, require_fp32_cublas
    from ..tune_db import TuneDB, TuneDBError
    from ..tune_workers import GPU_BACKEND, WorkerError

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
    from ..compiler import OutputError

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
    from ..tune_db import TuneDB, TuneDBError, spearman, spec_hash

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

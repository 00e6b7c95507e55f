"""`gemmdsl profile`: the analysis passes' predictions beside what Nsight Compute measures.

For each spec, ncu runs a small driver (this module with `drive`) that loads the
kernel through gemmdsl.runtime and launches it once on random inputs; ncu reads
the shared-memory wavefront and bank-conflict counters and the launch's register
and occupancy limits. A path may name counters of its own and the figures they measure (its `facts`,
paths/facts.py): Hopper's wgmma path, whose shared-memory reads are wgmma's own (GMMA) and whose copies
are TMA's, reads those, with the instructions issued and the launch's grid and shared memory. On every path it reads the bytes
the launch reads from DRAM, against A and B once plus a fuse chain's operands. Needs a GPU,
CuPy and ncu on PATH.

    gemmdsl profile specs/sgemm_v3.gemm --problem 4096x4096x4096 --json profile.json
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import ir
from .build import BuildError
from .analysis import Analysis, ProblemSizeError, analyze
from .check import parse_problem
from .compiler import ptxas_resources
from .file_kinds import inputs_help
from .passes import DEFAULT_PROBLEM, ProblemSize
from .ncu_counters import DRAM_READ, LAUNCH_METRICS, MEASURED_BLOCKS_PER_SM, OCCUPANCY_LIMITS, REGISTERS
from .passes.intensity import compulsory_bytes
from .quant_check import quant_facts
from .source import CompileError, printable

NCU_TIMEOUT_S = 600
# What a launch's shared-memory traffic and occupancy are compared on.
LOAD_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
STORE_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"
LOAD_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
STORE_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
CP_ASYNC_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum"  # cp.async is LDGSTS, not STS
NCU_METRICS = (LOAD_WAVEFRONTS, STORE_WAVEFRONTS, LOAD_CONFLICTS, STORE_CONFLICTS, CP_ASYNC_CONFLICTS,
               *LAUNCH_METRICS)


class ProfileError(RuntimeError):
    """ncu is missing, failed, or reported nothing for the kernel."""


# --- reading ncu --csv ---------------------------------------------------------------------


@dataclass(frozen=True)
class ProfiledLaunch:
    launch_id: int
    kernel: str
    metrics: dict[str, float]


def parse_metric_value(text: str) -> float | None:
    """'1,048,576' -> 1048576.0; ncu writes 'n/a' (or nothing) for metrics it could not collect."""
    cleaned = text.replace(",", "").strip()
    try:
        return float(cleaned)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[ProfiledLaunch]:
    """The launches in `ncu --csv` output (one row per metric), in profiling order.

    Lines that are not quoted CSV (ncu's ==PROF== and ==WARNING== chatter) are skipped.
    """
    rows = csv.DictReader(line for line in text.splitlines() if line.startswith('"'))
    launches: dict[int, ProfiledLaunch] = {}
    for row in rows:
        launch_id = int(row["ID"])
        launch = launches.setdefault(launch_id, ProfiledLaunch(launch_id, row["Kernel Name"], {}))
        value = parse_metric_value(row["Metric Value"])
        if value is not None:
            launch.metrics[row["Metric Name"]] = value
    return list(launches.values())


# --- running ncu ---------------------------------------------------------------------------


def ncu_command(ncu: str, spec_path: str, kernel: str, problem: ProblemSize, log_file: str,
                metrics: tuple[str, ...] = NCU_METRICS) -> list[str]:
    return [
        ncu, "--clock-control", "none", "--csv", "--print-units", "base", "--log-file", log_file,
        "--kernel-name", f"regex:^{kernel}_kernel$", "--launch-count", "1",
        "--metrics", ",".join(metrics),
        sys.executable, "-m", "gemmdsl.profile", "drive", spec_path, str(problem),
    ]


def measure(ncu: str, spec_path: str, kernel: str, problem: ProblemSize,
            metrics: tuple[str, ...] = NCU_METRICS) -> dict[str, float]:
    """ncu's `metrics` for one launch of the spec's kernel at `problem`."""
    with tempfile.TemporaryDirectory(prefix="gemmdsl-ncu-") as tmp:
        log_file = str(Path(tmp) / "ncu.csv")
        try:
            done = subprocess.run(ncu_command(ncu, spec_path, kernel, problem, log_file, metrics),
                                  capture_output=True, text=True, timeout=NCU_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ProfileError(f"ncu did not finish within {NCU_TIMEOUT_S} s") from None
        report = Path(log_file).read_text() if Path(log_file).exists() else ""
    for line in done.stderr.splitlines():
        if line.startswith("note: "):  # the driver's own, e.g. that it built the spec for a newer GPU
            print(line, file=sys.stderr)
    launches = [launch for launch in parse_ncu_csv(report) if launch.kernel == f"{kernel}_kernel"]
    if done.returncode != 0 or not launches:
        raise ProfileError(f"ncu (exit {done.returncode}) reported no launch of {kernel}_kernel:\n"
                           f"{(done.stdout + done.stderr + report).strip()}")
    return launches[0].metrics


def drive(spec_path: str, problem: ProblemSize) -> None:
    """Launch the spec's kernel once on random inputs in the spec's layouts (what ncu profiles).

    One launch of the plain kernel over every tile, the launch the analysis describes: no stream-K
    split, and a checked spec's vector kernel on the inner tiles too (not its interior kernel)."""
    import cupy

    from .precisions import comparison
    from .runtime.quantized import load
    from .verify import Case, arrays_for, chain_operands, random_operand

    kernel = load(spec_path)
    arrays = arrays_for(comparison(kernel.metadata), seed=0)  # inputs of the kernel's own types
    if "quant" in kernel.metadata:
        drive_quantized(kernel, arrays, problem)
        cupy.cuda.runtime.deviceSynchronize()
        return
    dtypes, layouts = kernel.metadata["dtypes"], kernel.requirements.layouts
    a = random_operand(arrays, dtypes["a"], layouts["A"], problem.m, problem.k)
    b = random_operand(arrays, dtypes["b"], layouts["B"], problem.k, problem.n)
    fuse = kernel.metadata.get("fuse")
    chain = chain_operands(arrays, fuse, problem.m, problem.n, problem.k, Case("plain", False, 1, False)) if fuse else {}
    if kernel.requirements.grouped:  # the groups `check` assumes: its rows split evenly (grouped_schedule.py)
        from .grouped_schedule import ASSUMED_GROUPS, even_offs

        b = random_operand(arrays, dtypes["b"], layouts["B"], problem.k, problem.n, batch=ASSUMED_GROUPS)
        chain["offs"] = cupy.asarray(even_offs(problem.m, ASSUMED_GROUPS), dtype=cupy.int32)
        if "col_scale" in chain:  # one row of column scales per group
            chain["col_scale"] = cupy.tile(chain["col_scale"], (ASSUMED_GROUPS, 1))
    kernel(a, b, stream_k=False, interior=False, **chain)
    cupy.cuda.runtime.deviceSynchronize()


def drive_quantized(kernel, arrays, problem: ProblemSize) -> None:
    """One call of a dequantizing kernel on a random weight quantized in its format and packed, and a random A
    (PyTorch's arrays, as verify's)."""
    import numpy

    from .quant_operands import draw_weight
    from .verify import device_packed

    weight = draw_weight(numpy.random.default_rng(0), kernel.format, problem.n, problem.k)
    a = arrays.random(problem.m * problem.k, kernel.format.activation).reshape(problem.m, problem.k)
    c = arrays.poisoned(problem.m * problem.n, kernel.metadata["dtypes"]["c"]).reshape(problem.m, problem.n)
    kernel(a, device_packed(arrays, weight, kernel.format), c)


# --- predicted beside measured -------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    predicted: float | str | None
    measured: float | str | None


def measured_blocks(metrics: dict[str, float]) -> dict[str, int]:
    return {name: int(metrics[metric]) for name, metric in OCCUPANCY_LIMITS.items() if metric in metrics}


def dram_read_bytes(analysis: Analysis) -> int:
    """What the profiled launch must read from DRAM: A and B once and the fuse chain's operands once (the
    driver leaves beta at 0, so C is not read); a quantized B in the kernel's layout, codes, scales and zero
    points (quant_check.quant_facts)."""
    m, n, k = analysis.problem
    if analysis.spec.quant is not None:
        facts = quant_facts(analysis.spec, analysis.problem, None)
        return facts.a_bytes + facts.weight_bytes
    return sum(count for name, count in compulsory_bytes(analysis.spec, m, n, k).items() if name != "c")


def dram_row(analysis: Analysis, metrics: dict[str, float]) -> Row:
    fuse = analysis.facts.get("fuse")
    label = "DRAM bytes read (A, B" + (f", {', '.join(fuse.dram_bytes)})" if fuse is not None else ")")
    if analysis.spec.quant is not None:
        label = "DRAM bytes read (A, packed B)"
    return Row(label, dram_read_bytes(analysis), metrics.get(DRAM_READ))


def comparison_rows(analysis: Analysis, metrics: dict[str, float]) -> list[Row]:
    own = analysis.path.facts.comparisons(analysis)
    if own is not None:
        limits = measured_blocks(metrics)
        measured = {**metrics, MEASURED_BLOCKS_PER_SM: min(limits.values()) if limits else None}
        return [Row(row.label, row.predicted, measured.get(row.counter)) for row in own] + [dram_row(analysis, metrics)]
    facts = analysis.facts
    traffic, registers, occupancy = facts["smem_traffic"], facts["registers"], facts["occupancy"]
    cp_async = analysis.spec.pipeline.copy is ir.CopyMode.CP_ASYNC
    limits = measured_blocks(metrics)
    rows = [
        Row("shared load wavefronts", traffic.load_wavefronts, metrics.get(LOAD_WAVEFRONTS)),
        Row("shared load conflicts", traffic.load_conflicts, metrics.get(LOAD_CONFLICTS)),
    ]
    if cp_async:
        # ncu counts cp.async copies as LDGSTS, outside op_st, and has no LDGSTS wavefront counter.
        rows.append(Row("cp.async conflicts (LDGSTS)", traffic.store_conflicts, metrics.get(CP_ASYNC_CONFLICTS)))
    else:
        rows += [Row("shared store wavefronts", traffic.store_wavefronts, metrics.get(STORE_WAVEFRONTS)),
                 Row("shared store conflicts", traffic.store_conflicts, metrics.get(STORE_CONFLICTS))]
    rows += [
        Row("registers per thread (estimate)", registers.estimate.total, metrics.get(REGISTERS)),
        Row("registers per thread (nvcc ptxas)", registers.ptxas, metrics.get(REGISTERS)),
        Row("blocks per SM", occupancy.blocks_per_sm, min(limits.values()) if limits else None),
    ]
    rows += [Row(f"  limit by {name}", blocks, limits.get(name)) for name, blocks in occupancy.limits.items()]
    return rows + [dram_row(analysis, metrics)]


def _cell(value: float | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:,.0f}"


def _difference(row: Row) -> str:
    if not isinstance(row.predicted, (int, float)) or not isinstance(row.measured, (int, float)) or not row.predicted:
        return ""
    return f"{100 * (row.measured - row.predicted) / row.predicted:+.1f}%"


def format_comparison(analysis: Analysis, rows: list[Row]) -> str:
    lines = [f"{analysis.spec.name} at {analysis.problem}",
             f"  {'':<36}{'predicted':>16}{'measured':>16}{'':>9}"]
    lines += [f"  {row.label:<36}{_cell(row.predicted):>16}{_cell(row.measured):>16}{_difference(row):>9}"
              for row in rows]
    lines.append("  (ncu's shared-memory limit reflects the carveout the driver chose for this launch, which can be "
                 "smaller than the full one the prediction assumes)")
    if any(row.label.startswith("DRAM") for row in rows):
        lines.append("  (DRAM bytes read: the least the launch must read, each operand once; what L2 does not keep of "
                     "A's and B's repeats comes on top)")
    if analysis.spec.quant is not None:
        lines.append("  (packed B: its codes, scales and zero points in the kernel's layout; the split-K workspace's "
                     "atomics stay in L2. Shared-memory wavefronts and conflicts are not compared: the path stages "
                     "A's k-slice once and predicts none)")
    if any(row.label.startswith("cp.async") for row in rows):
        lines.append("  (ncu's LDGSTS conflict counter does not count what cp.async's stores cost; timed on the H100 "
                     "they take the wavefronts predicted: tests/test_gpu_probes.py)")
    return "\n".join(lines)


def comparison_json(analysis: Analysis, rows: list[Row], metrics: dict[str, float]) -> dict:
    return {"kernel": analysis.spec.name, "problem": list(analysis.problem),
            "rows": [{"label": row.label, "predicted": row.predicted, "measured": row.measured} for row in rows],
            "ncu_metrics": metrics}


# --- the command ---------------------------------------------------------------------------


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("specs", nargs="+", metavar="SPEC", help=inputs_help("profile", "files to profile"))
    parser.add_argument("--problem", type=parse_problem, default=DEFAULT_PROBLEM, metavar="MxNxK",
                        help="problem size of the profiled launch (default 4096x4096x4096)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the comparison as JSON to FILE")


def profile_main(args: argparse.Namespace) -> int:
    """Exit status 1 if a spec fails to load or profile, 2 when ncu is not available.

    Specs are read first, so bad input gets its diagnostics on any machine."""
    from .frontend import load_path

    status = 0
    specs = []
    for path in args.specs:
        try:
            spec = load_path(path)[0]
        except CompileError as err:
            print(err.render(), file=sys.stderr)
            status = 1
            continue
        if spec.quant is not None and importlib.util.find_spec("torch") is None:
            print(f"{printable(path)}: error: {spec.name} multiplies packed quantized weights, and profile launches it "
                  "on bf16 or f16 operands PyTorch makes: PyTorch is not installed (pip install torch)",
                  file=sys.stderr)
            status = 1
            continue
        specs.append((path, spec))
    ncu = shutil.which("ncu")
    if ncu is None:
        print("error: ncu (Nsight Compute) is not on PATH; profile needs it and a GPU", file=sys.stderr)
        return status or 2
    results = []
    for path, spec in specs:
        try:
            analysis = analyze(spec, args.problem, ptxas_resources(path))
            metrics = measure(ncu, path, spec.name, args.problem, analysis.path.facts.ncu_metrics or NCU_METRICS)
        except (BuildError, ProblemSizeError, ProfileError) as err:
            print(f"{path}: error: {err}", file=sys.stderr)
            status = 1
            continue
        rows = comparison_rows(analysis, metrics)
        print(format_comparison(analysis, rows))
        results.append(comparison_json(analysis, rows, metrics))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return status


def _drive_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m gemmdsl.profile", description="launch one kernel for ncu")
    parser.add_argument("command", choices=["drive"])
    parser.add_argument("spec")
    parser.add_argument("problem", type=parse_problem)
    args = parser.parse_args(argv)
    drive(args.spec, args.problem)


if __name__ == "__main__":
    _drive_main(sys.argv[1:])

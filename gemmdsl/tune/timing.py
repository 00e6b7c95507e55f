"""Timing the kept candidates: bench beside cuBLAS in worker processes or Ray tasks (tune_workers.py),
writing each measurement to the tuning database (tune_db.py), and the geometric means that pick the winner."""
from __future__ import annotations

import concurrent.futures
import math
import sys
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from ..source import SourceFile
from .screen import Size, Survivor, candidate_path


@dataclass(frozen=True)
class Measurement:
    """One candidate's timings: per size (ms, TFLOP/s, % of cuBLAS), and the geomean of the times."""

    name: str
    per_size: tuple[tuple[Size, float, float, float], ...]
    geomean_ms: float

    @property
    def geomean_tflops(self) -> float:
        return geomean([tflops for _, _, tflops, _ in self.per_size])

    @property
    def geomean_pct_cublas(self) -> float:
        return geomean([pct for _, _, _, pct in self.per_size])


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


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def timing_from_report(report, sizes: Sequence[Size]) -> Timing:
    """bench.BenchReport -> Timing; a kernel skipped at any size is left out."""
    per_name: dict[str, list] = {}
    skipped: set[str] = set()
    cublas: dict[Size, float] = {}
    from ..bench import is_cublas_row

    for row in report.rows:
        size = (row.m, row.n, row.k)
        if is_cublas_row(row.name):  # "cuBLAS" (SGEMM) or "cuBLAS BF16 GEMM" and the like
            cublas[size] = row.median_ms
        elif row.median_ms is None:
            skipped.add(row.name)
        else:
            per_name.setdefault(row.name, []).append((size, row.median_ms, row.tflops, row.pct_of_cublas))
    measurements = {name: Measurement(name, tuple(rows), geomean([ms for _, ms, _, _ in rows]))
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

        from ..cache_root import cache_dir
        from ..compiler import compile_source
        from ..runtime.binaries import BinaryCache, build_target, compile_cubin, cubin_cache_name

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
    from ..runtime.binaries import KernelBuildError, compile_cubin

    try:
        return compile_cubin(source, target)
    except KernelBuildError:
        return None


def timing_tasks(survivors: Sequence[Survivor], sizes: Sequence[Size], runs: int, warmup: int,
                 template_path: str = "<template>.gemm") -> list:
    """One tune_workers.Task per candidate and size, each holding its candidate, which renders the text
    when a worker needs it (so that many tasks of a large template do not each hold a copy)."""
    from ..tune_db import spec_hash
    from ..tune_workers import Task

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
    from ..tune_db import spec_hash
    from ..tune_workers import LocalPool, measure, pending, warm_up_task

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

    from ..bench import BenchReport, Row, measured_row

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

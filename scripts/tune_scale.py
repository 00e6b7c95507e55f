"""Tuning at scale on this host's GPUs: candidates timed per minute on 1 GPU and on all of them, the rank
agreement of the two timings, and planted faults (tests/fake_timing.py's PlantedGpuBackend).

    python3 scripts/tune_scale.py OUT_DIR [--template T] [--sizes MxNxK,...] [--count 24]

Each pool is started and warmed (every worker times one small task: see tune_workers.warm_up) before its
clock starts; the table gives that start-up apart.

Writes OUT_DIR/one.sqlite, OUT_DIR/all.sqlite, OUT_DIR/faults.sqlite and prints a table last.
"""
import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from gemmdsl import tune  # noqa: E402
from gemmdsl.tune_db import TuneDB, spearman, spec_hash  # noqa: E402
from gemmdsl.tune_workers import GPU_BACKEND, LocalPool, Task, measure, visible_devices, warm_up_task  # noqa: E402


def timed_run(database: Path, devices: list[str], tasks: list, timeout: float) -> tuple[float, float, dict]:
    """Seconds to start and warm the workers, seconds to time every task on these GPUs into a fresh
    database, and % of cuBLAS by spec hash."""
    database.unlink(missing_ok=True)
    with TuneDB(database) as db, LocalPool(GPU_BACKEND, devices, timeout) as pool:
        start = time.monotonic()
        pool.start()
        pool.warm_up(warm_up_task(tasks[0]))
        warm = time.monotonic()
        measure(pool, tasks, db, lambda line: print(line, flush=True))
        seconds = time.monotonic() - warm
        return warm - start, seconds, {(row.spec_hash, row.size): row.pct_cublas for row in db.rows() if row.status == "ok"}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--template", default=str(ROOT / "gemmdsl" / "templates" / "hgemm_h100.tgemm"))
    parser.add_argument("--sizes", default="4096x4096x4096,2048x2048x2048,8192x8192x4096")
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sizes = [tuple(map(int, size.split("x"))) for size in args.sizes.split(",")]
    size = sizes[0]
    candidates = tune.expand(Path(args.template).read_text(), args.template)
    report = tune.screen(candidates, sizes, path=args.template)
    chosen = tune.rank(report.survivors, sizes)[:args.count]
    tasks = tune.timing_tasks(chosen, sizes, 20, 5, args.template)
    tune.prebuild(chosen, 16, args.template)
    devices = visible_devices()
    print(f"{len(chosen)} candidates of {args.template} at {args.sizes}: {len(tasks)} tasks; GPUs "
          f"{','.join(devices)}", flush=True)

    one_start, one_s, one = timed_run(args.out / "one.sqlite", devices[:1], tasks, args.timeout)
    all_start, all_s, every = timed_run(args.out / "all.sqlite", devices, tasks, args.timeout)
    both = sorted(set(one) & set(every))
    rhos = {}  # candidates rank against each other at one size
    for at in sizes:
        keys = [key for key in both if key[1] == at]
        if len(keys) > 2:
            rhos[at] = spearman([one[key] for key in keys], [every[key] for key in keys])

    plants = [Task(spec_hash(f"gemm planted {{ {kind} }}"), size, f"planted_{kind}", f"gemm planted {{ {kind} }}\n"
                   f"// plant: {kind}", "planted", 20, 5) for kind in ("fault", "hang")]
    fault_tasks = plants + tasks[:max(2, len(devices))]
    (args.out / "faults.sqlite").unlink(missing_ok=True)
    with TuneDB(args.out / "faults.sqlite") as db, LocalPool("fake_timing:PlantedGpuBackend", devices, 30.0) as pool:
        pool.start()
        start = time.monotonic()
        measure(pool, fault_tasks, db, lambda line: print(line, flush=True))
        fault_s = time.monotonic() - start
        fault_rows = {row.name: row for row in db.rows()}

    print()
    print(f"{'run':<34} {'GPUs':>4} {'timed':>10} {'seconds':>8} {'per minute':>10} {'start-up s':>10}")
    print(f"{'timing, 1 GPU':<34} {1:>4} {len(one):>10} {one_s:>8.1f} {60 * len(one) / one_s:>10.1f} "
          f"{one_start:>10.1f}")
    print(f"{'timing, all GPUs':<34} {len(devices):>4} {len(every):>10} {all_s:>8.1f} {60 * len(every) / all_s:>10.1f} "
          f"{all_start:>10.1f}")
    print(f"speed-up {one_s / all_s:.2f}x; Spearman of % cuBLAS, {len(devices)} GPUs vs 1, per size: "
          + ", ".join(f"{'x'.join(map(str, at))} {rho:.3f}" for at, rho in rhos.items())
          + f" ({len(both)} timings in both)")
    print(f"faults ({fault_s:.1f} s, {len(fault_tasks)} tasks, timeout 30 s):")
    for task in fault_tasks:
        row = fault_rows.get(task.name)
        print(f"  {task.name:<24} {row.status if row else 'missing':<8} {(row.error if row else '')[:90]}")
    expected = (fault_rows.get("planted_fault") is not None and fault_rows["planted_fault"].status == "failed"
                and fault_rows.get("planted_hang") is not None and fault_rows["planted_hang"].status == "timeout"
                and all(fault_rows[t.name].status == "ok" for t in fault_tasks[2:]))
    print("faults contained: " + ("yes" if expected else "NO"))
    return 0 if expected else 1


if __name__ == "__main__":
    sys.exit(main())

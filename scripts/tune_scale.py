"""Tuning at scale on this host's GPUs: candidates timed per minute on 1 GPU and on all of them, the rank
agreement of the two timings, and planted faults (tests/fake_timing.py's PlantedGpuBackend).

    python3 scripts/tune_scale.py OUT_DIR [--template T] [--size MxNxK] [--count 24]

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
from gemmdsl.tune_workers import GPU_BACKEND, LocalPool, Task, measure, visible_devices  # noqa: E402


def timed_run(database: Path, devices: list[str], tasks: list, timeout: float) -> tuple[float, dict]:
    """Seconds to time every task on these GPUs into a fresh database, and % of cuBLAS by spec hash."""
    database.unlink(missing_ok=True)
    with TuneDB(database) as db, LocalPool(GPU_BACKEND, devices, timeout) as pool:
        pool.start()
        start = time.monotonic()
        measure(pool, tasks, db, lambda line: print(line, flush=True))
        seconds = time.monotonic() - start
        return seconds, {row.spec_hash: row.pct_cublas for row in db.rows() if row.status == "ok"}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--template", default=str(ROOT / "gemmdsl" / "templates" / "hgemm_h100.tgemm"))
    parser.add_argument("--size", default="4096x4096x4096")
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    size = tuple(map(int, args.size.split("x")))
    candidates = tune.expand(Path(args.template).read_text(), args.template)
    report = tune.screen(candidates, [size], path=args.template)
    chosen = tune.rank(report.survivors, [size])[:args.count]
    tasks = tune.timing_tasks(chosen, [size], 20, 5, args.template)
    tune.prebuild(chosen, 16, args.template)
    devices = visible_devices()
    print(f"{len(chosen)} candidates of {args.template} at {args.size}; GPUs {','.join(devices)}", flush=True)

    one_s, one = timed_run(args.out / "one.sqlite", devices[:1], tasks, args.timeout)
    all_s, every = timed_run(args.out / "all.sqlite", devices, tasks, args.timeout)
    both = sorted(set(one) & set(every))
    rho = spearman([one[h] for h in both], [every[h] for h in both]) if both else float("nan")

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
    print(f"{'run':<34} {'GPUs':>4} {'candidates':>10} {'seconds':>8} {'per minute':>10}")
    print(f"{'timing, 1 GPU':<34} {1:>4} {len(one):>10} {one_s:>8.1f} {60 * len(one) / one_s:>10.1f}")
    print(f"{'timing, all GPUs':<34} {len(devices):>4} {len(every):>10} {all_s:>8.1f} {60 * len(every) / all_s:>10.1f}")
    print(f"speed-up {one_s / all_s:.2f}x; Spearman of % cuBLAS, {len(devices)} GPUs vs 1: "
          + f"{rho:.3f} over {len(both)} candidates")
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

"""How fast `gemmdsl tunedb merge` folds databases together.

    python3 scripts/tunedb_bench.py [--rows 40000] [--dir DIR]

Builds two databases of ROWS keys each (written in one transaction, not through the tuner): `ok.sqlite`
holds every key as an `ok` measurement, `failed.sqlite` the same keys as `failed`. Then times, each as
the command a user runs (`python -m gemmdsl.cli tunedb merge ...`, a fresh process, its start-up
included):

    new        merge failed.sqlite ok.sqlite -o new.sqlite    every key written, then every one replaced
    existing   merge ok.sqlite -o existing.sqlite             into a copy of failed.sqlite: every key compared
                                                              with the row there and replaced
    again      merge ok.sqlite -o existing.sqlite             the same again: every key compared, none replaced

and prints one line per case: seconds of wall time and of CPU time (the command's own, which a busy
machine does not inflate as much), rows read, and the `ok` rows the output holds (ROWS when right).
"""
import argparse
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gemmdsl.tune_db import COLUMNS, SCHEMA  # noqa: E402


def build(path: Path, rows: int, status: str) -> None:
    """ROWS keys (spec hashes k0..), all at 4096^3 on one GPU model, of this status."""
    with sqlite3.connect(path) as connection:
        connection.executescript(SCHEMA)
        ok = status == "ok"
        connection.executemany(
            f"INSERT INTO measurements ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
            ((f"k{i:08d}", 4096, 4096, 4096, "Bench GPU", status, 1.0 + i % 97 / 97 if ok else None,
              1.1 if ok else None, 20, 60.0 if ok else None, "13.0", "nvcc 13.0", "14.0", f"k_t{i}", 0.5,
              "host", "host/gpu0", "" if ok else "planted", "2026-01-01T00:00:00.000Z") for i in range(rows)))
    connection.close()


def ok_rows(path: Path) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        (count,) = connection.execute("SELECT count(*) FROM measurements WHERE status = 'ok'").fetchone()
    connection.close()
    return count


def timed_merge(inputs: list[Path], output: Path) -> tuple[float, float]:
    """Seconds of wall time and of CPU time (user and system) the command took."""
    command = [sys.executable, "-m", "gemmdsl.cli", "tunedb", "merge", *map(str, inputs), "-o", str(output)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=40000)
    parser.add_argument("--dir", type=Path, default=None, help="where the databases go (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.dir or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        ok, failed = folder / "ok.sqlite", folder / "failed.sqlite"
        for path in (ok, failed, folder / "new.sqlite", folder / "existing.sqlite"):
            path.unlink(missing_ok=True)
        build(ok, args.rows, "ok")
        build(failed, args.rows, "failed")
        shutil.copy(failed, folder / "existing.sqlite")
        cases = [("new", [failed, ok], folder / "new.sqlite", 2 * args.rows),
                 ("existing", [ok], folder / "existing.sqlite", args.rows),
                 ("again", [ok], folder / "existing.sqlite", args.rows)]
        for label, inputs, output, read in cases:
            wall, cpu = timed_merge(inputs, output)
            print(f"{label:<9} {wall:7.2f} s ({cpu:.2f} s of CPU)  {read:,} rows read, "
                  f"{ok_rows(output):,} ok rows in the output")
    return 0


if __name__ == "__main__":
    sys.exit(main())

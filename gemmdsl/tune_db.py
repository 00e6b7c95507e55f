"""The tuning database: every timing `gemmdsl tune` makes, kept in one SQLite file.

A measurement is one candidate at one size on one GPU model, keyed by

    spec hash   sha256 of the candidate's canonical text (`spec_hash`): comments dropped, white space
                folded, the kernel name blanked, so the same spec reached from two templates (or from one
                template whose groups grew, renumbering its candidates) is one spec
    size        M, N, K
    gpu         the device's name as CUDA reports it ("NVIDIA H100 80GB HBM3"): timings from different
                GPU models are never compared or reused across models

and holds the status (ok, failed, timeout), the median time and the median of the cuBLAS launches timed
beside it, the timed launches, the measured FP32 FMA peak, the driver, compiler and CuPy versions, the
cost model's score when it was timed, the host and worker, the error text of a failure, and when.

The driver writes each measurement as it arrives, in its own transaction, so a run killed at any point
keeps everything measured before it; the next run skips what the database holds (failed and timed-out
candidates included: they would fail or hang again). Databases from several hosts merge
(`gemmdsl tunedb merge OUT IN...`): on a key both hold, an ok row wins over a failure, then the one of
more timed launches, then the later one.
"""
from __future__ import annotations

import argparse
import hashlib
import math
import re
import sqlite3
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterable, Sequence

Size = tuple[int, int, int]
STATUSES = ("ok", "failed", "timeout")
DEFAULT_DB = Path("~/.cache/gemmdsl/tune.sqlite")

SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    spec_hash TEXT NOT NULL, m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL, gpu TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'timeout')),
    median_ms REAL, cublas_ms REAL, runs INTEGER NOT NULL, peak_tflops REAL,
    driver TEXT NOT NULL, compiler TEXT NOT NULL, cupy TEXT NOT NULL,
    name TEXT NOT NULL, predicted REAL, host TEXT NOT NULL, worker TEXT NOT NULL, error TEXT NOT NULL,
    measured_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (spec_hash, m, n, k, gpu)
);
CREATE TABLE IF NOT EXISTS specs (spec_hash TEXT PRIMARY KEY, text TEXT NOT NULL);
"""


def spec_hash(text: str) -> str:
    """The key of a spec's text: the same for every spelling that differs only in comments, white space
    and the kernel's name."""
    body = re.sub(r"(//|#)[^\n]*", " ", text)
    body = re.sub(r"\bgemm\s+[A-Za-z_][A-Za-z0-9_]*", "gemm _", body, count=1)
    return hashlib.sha256(" ".join(body.split()).encode()).hexdigest()[:20]


@dataclass(frozen=True)
class Row:
    """One measurement, as stored."""

    spec_hash: str
    m: int
    n: int
    k: int
    gpu: str
    status: str
    median_ms: float | None
    cublas_ms: float | None
    runs: int
    peak_tflops: float | None
    driver: str
    compiler: str
    cupy: str
    name: str  # the candidate's name when it was timed (display only: not part of the key)
    predicted: float | None
    host: str
    worker: str
    error: str = ""
    measured_at: str = ""

    @property
    def size(self) -> Size:
        return (self.m, self.n, self.k)

    @property
    def pct_cublas(self) -> float | None:
        return None if self.status != "ok" else 100 * self.cublas_ms / self.median_ms


COLUMNS = tuple(field.name for field in fields(Row))


def merge_priority(row: Row) -> tuple:
    """Which of two rows of one key a merge keeps: the larger."""
    return (row.status == "ok", row.runs, row.measured_at)


class TuneDB:
    """An open tuning database; `record` commits each row on its own."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.connection = sqlite3.connect(self.path, timeout=30)
        self.connection.executescript(SCHEMA)

    def __enter__(self) -> TuneDB:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.connection.close()

    def record(self, row: Row, text: str | None = None) -> None:
        """Store a measurement (replacing one of the same key) and, when given, the spec's text."""
        values = [getattr(row, column) for column in COLUMNS]
        columns = COLUMNS if row.measured_at else COLUMNS[:-1]
        with self.connection:
            self.connection.execute(f"INSERT OR REPLACE INTO measurements ({', '.join(columns)}) "
                                    f"VALUES ({', '.join('?' * len(columns))})", values[:len(columns)])
            if text is not None:
                self.connection.execute("INSERT OR IGNORE INTO specs VALUES (?, ?)", (row.spec_hash, text))

    def rows(self, hashes: Iterable[str] | None = None, gpu: str | None = None) -> list[Row]:
        """The rows of these spec hashes (all, without), on this GPU model (any, without), in key order."""
        where, parameters = ("WHERE gpu = ?", [gpu]) if gpu is not None else ("", [])
        rows = [Row(*values) for values in self.connection.execute(
            f"SELECT {', '.join(COLUMNS)} FROM measurements {where} ORDER BY spec_hash, m, n, k, gpu", parameters)]
        if hashes is None:
            return rows
        wanted = set(hashes)
        return [row for row in rows if row.spec_hash in wanted]

    def measured(self, gpu: str) -> set[tuple[str, Size]]:
        """The (spec hash, size) keys this GPU model has a row of, whatever its status."""
        return {(h, (m, n, k)) for h, m, n, k in
                self.connection.execute("SELECT spec_hash, m, n, k FROM measurements WHERE gpu = ?", (gpu,))}

    def gpus(self) -> list[str]:
        return [gpu for (gpu,) in self.connection.execute("SELECT DISTINCT gpu FROM measurements ORDER BY gpu")]

    def spec_texts(self) -> dict[str, str]:
        return dict(self.connection.execute("SELECT spec_hash, text FROM specs"))

    def merge_from(self, other: TuneDB) -> tuple[int, int]:
        """Fold another database in; returns (rows taken, rows kept from this one)."""
        mine = {(row.spec_hash, row.size, row.gpu): row for row in self.rows()}
        texts = other.spec_texts()
        taken = kept = 0
        for row in other.rows():
            current = mine.get((row.spec_hash, row.size, row.gpu))
            if current is not None and merge_priority(current) >= merge_priority(row):
                kept += 1
                continue
            self.record(row, texts.get(row.spec_hash))
            mine[(row.spec_hash, row.size, row.gpu)] = row
            taken += 1
        with self.connection:
            self.connection.executemany("INSERT OR IGNORE INTO specs VALUES (?, ?)", texts.items())
        return taken, kept


def merge(output: str | Path, inputs: Sequence[str | Path]) -> list[str]:
    """Merge databases into `output` (which may be one of them, or new); one line per input."""
    lines = []
    with TuneDB(output) as target:
        for path in inputs:
            if Path(path).expanduser().resolve() == target.path.resolve():
                continue
            if not Path(path).expanduser().is_file():
                raise FileNotFoundError(f"{path}: no such tuning database")
            with TuneDB(path) as source:
                taken, kept = target.merge_from(source)
            lines.append(f"{path}: {taken} measurement(s) taken, {kept} already held as good or better")
    return lines


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing the average of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        stop = start
        while stop + 1 < len(order) and values[order[stop + 1]] == values[order[start]]:
            stop += 1
        for position in range(start, stop + 1):
            ranks[order[position]] = (start + stop) / 2 + 1
        start = stop + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's correlation of the average ranks (nan when either side is constant)."""
    if len(x) != len(y) or not x:
        raise ValueError("spearman needs two non-empty sequences of one length")
    rx, ry = average_ranks(x), average_ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx and syy else math.nan


# --- `gemmdsl tunedb` ------------------------------------------------------------------------------


def add_tunedb_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    merge_cmd = actions.add_parser("merge", help="merge tuning databases from several hosts into one")
    merge_cmd.add_argument("inputs", nargs="+", metavar="DB", help="databases to merge")
    merge_cmd.add_argument("-o", "--output", required=True, metavar="DB",
                           help="the merged database (created, or merged into when it exists)")


def tunedb_main(args: argparse.Namespace) -> int:
    try:
        lines = merge(args.output, args.inputs)
    except (FileNotFoundError, sqlite3.DatabaseError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("\n".join(lines + [f"merged into {args.output}"]))
    return 0

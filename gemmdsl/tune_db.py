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

Many writers share one file (docs/tuning-at-scale.md states the guarantees). Every write is a transaction
that takes the write lock first (BEGIN IMMEDIATE) and compares each row with the row of its key held at
that moment, never with an earlier read: the one of higher `precedence` stays, so the outcome does not
depend on the order or the interleaving of the writers. The tuner writes each measurement as it arrives,
in its own transaction, so a run killed at any point keeps everything measured before it; the next run
skips what the database holds (failed and timed-out candidates included: they would fail or hang
again). A merge (`gemmdsl tunedb merge IN... -o OUT`) opens its inputs read-only and is one transaction:
all of it or none. A timing that is no time (zero, negative, NaN, infinite) is stored as a failure with
the reason. Reading skips a row that is not a measurement (a hand edit, another program's write), with a
warning naming its key.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import itertools
import math
import os
import re
import secrets
import sqlite3
import sys
import urllib.parse
from operator import attrgetter
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

Size = tuple[int, int, int]
STATUSES = ("ok", "failed", "timeout")
DEFAULT_DB = Path("~/.cache/gemmdsl/tune.sqlite")
BUSY_TIMEOUT_S = 120.0  # how long a writer waits for another's transaction (a merge of 10^6 rows takes ~20 s)
MAX_WARNINGS = 20  # bad rows warned of one by one, per database; the rest are counted in one line

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


class TuneDBError(Exception):
    """A database that cannot be opened, read or written; the message starts with the file's name."""


def spec_hash(text: str) -> str:
    """The key of a spec's text: the same for every spelling that differs only in comments, white space
    and the kernel's name."""
    body = re.sub(r"(//|#)[^\n]*", " ", text)
    body = re.sub(r"\bgemm\s+[A-Za-z_][A-Za-z0-9_]*", "gemm _", body, count=1)
    return hashlib.sha256(" ".join(body.split()).encode()).hexdigest()[:20]


class Row(NamedTuple):
    """One measurement, as stored: a tuple in the table's column order (a merge reads and writes rows by
    the hundred thousand)."""

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
    def key(self) -> tuple:
        return (self.spec_hash, self.m, self.n, self.k, self.gpu)

    @property
    def pct_cublas(self) -> float | None:
        return None if self.status != "ok" else 100 * self.cublas_ms / self.median_ms


COLUMNS = Row._fields
KEY_COLUMNS = ("spec_hash", "m", "n", "k", "gpu")
TEXT_COLUMNS = ("spec_hash", "gpu", "status", "driver", "compiler", "cupy", "name", "host", "worker", "error",
                "measured_at")
TIMINGS = ("median_ms", "cublas_ms", "peak_tflops")  # what an ok row needs, each finite and positive
COUNT_COLUMNS = ("m", "n", "k", "runs")
REAL_COLUMNS = (*TIMINGS, "predicted")
TEXT_VALUES, COUNT_VALUES, REAL_VALUES, TIMING_VALUES = (
    attrgetter(*columns) for columns in (TEXT_COLUMNS, COUNT_COLUMNS, REAL_COLUMNS, TIMINGS))
# Rows a merge compares with what their keys hold in one query: 5 parameters each, under the 999 a
# statement that SQLite before 3.32 allows.
MERGE_BATCH = 190
SELECT = f"SELECT {', '.join(COLUMNS)} FROM measurements"
# The rows of the keys listed in {keys} (a VALUES list), each found through the primary key's index
# (`WHERE (...) IN (VALUES ...)` would scan the table).
SELECT_KEYS = (f"SELECT {', '.join(f'held.{c}' for c in COLUMNS)} FROM (VALUES {{keys}}) AS wanted "
               f"JOIN measurements AS held ON "
               + " AND ".join(f"held.{c} = wanted.column{i}" for i, c in enumerate(KEY_COLUMNS, 1)))
INSERT = f"INSERT OR REPLACE INTO measurements ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"


def _finite(value) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _finite_or_none(value) -> bool:
    return value is None or _finite(value)


def _positive_finite(value) -> bool:
    return _finite(value) and value > 0


def _first_bad(columns: Sequence[str], values: Sequence, good: Callable[[object], bool]) -> str:
    column, value = next((column, value) for column, value in zip(columns, values) if not good(value))
    return f"{column} {value!r}"


def timing_problem(row: Row) -> str | None:
    """What makes an ok row's figures no timing (missing, zero, negative, NaN, infinite), or None."""
    values = TIMING_VALUES(row)
    if all(map(_positive_finite, values)):
        return None
    return ", ".join(f"{column} {value!r}" for column, value in zip(TIMINGS, values) if not _positive_finite(value))


def row_problem(row: Row) -> str | None:
    """What makes a row read from a database no measurement (a wrong type, a bad status or timing), or None."""
    texts = TEXT_VALUES(row)
    if set(map(type, texts)) != {str}:
        return f"{_first_bad(TEXT_COLUMNS, texts, lambda v: type(v) is str)}: not text"
    counts = COUNT_VALUES(row)
    if set(map(type, counts)) != {int} or min(counts) < 1:
        return f"{_first_bad(COUNT_COLUMNS, counts, lambda v: type(v) is int and v >= 1)}: not a positive integer"
    if row.status not in STATUSES:
        return f"status {row.status!r} is not one of {', '.join(STATUSES)}"
    reals = REAL_VALUES(row)
    if not all(map(_finite_or_none, reals)):
        return f"{_first_bad(REAL_COLUMNS, reals, _finite_or_none)}: not a finite number"
    if row.status == "ok" and (problem := timing_problem(row)):
        return f"an ok row whose timing is no time ({problem})"
    return None


TIE_BREAK = tuple(column for column in COLUMNS if column not in (*KEY_COLUMNS, "runs", "measured_at"))


def precedence(row: Row) -> tuple:
    """Which of two rows of one key a write keeps: the larger. An ok row over a failure, then the one of
    more timed launches, then the later (`precedence_tie_break` settles the rest)."""
    return (row.status == "ok", row.runs, row.measured_at)


def precedence_tie_break(row: Row) -> tuple:
    """Between rows of equal `precedence`: the other columns, so that the rule is a total order and
    merging is commutative, associative and idempotent."""
    return tuple((value is not None, value if value is not None else 0)
                 for value in (getattr(row, column) for column in TIE_BREAK))


def outranks(row: Row, other: Row) -> bool:
    """Whether a write of `row` replaces `other`, a measurement of the same key."""
    mine, theirs = precedence(row), precedence(other)
    return mine > theirs if mine != theirs else precedence_tie_break(row) > precedence_tie_break(other)


def now() -> str:
    """The time of writing, as SQLite's strftime('%Y-%m-%dT%H:%M:%fZ') writes it."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def as_written(row: Row) -> Row:
    """A measurement as the tuner stores it: an ok row whose timing is no time turned into a failure that
    says why, the time of writing filled in. Raises ValueError for a row no backend produces."""
    if row.status == "ok" and (problem := timing_problem(row)):
        row = row._replace(status="failed", median_ms=None, cublas_ms=None, peak_tflops=None,
                           error=f"the backend's timing is no time: {problem}")
    row = row if row.measured_at else row._replace(measured_at=now())
    problem = row_problem(row)
    if problem is not None:
        raise ValueError(f"not a measurement ({describe_key(row)}): {problem}")
    return row


def describe_key(row: Row) -> str:
    return f"{row.spec_hash} at {row.m}x{row.n}x{row.k} on {row.gpu}"


def _print_warning(line: str) -> None:
    print(line, file=sys.stderr)


class TuneDB:
    """An open tuning database: read-only (never written, its schema never created), or for writing
    (created when missing)."""

    def __init__(self, path: str | Path, read_only: bool = False, warn: Callable[[str], None] = _print_warning):
        self.name = str(path)
        self.path = Path(path).expanduser()
        self.read_only = read_only
        self.warn = warn
        self.skipped: set[tuple] = set()  # keys of the bad rows warned of
        self.connection: sqlite3.Connection | None = None
        with self._naming():
            if read_only:
                self._open_read_only()
            else:
                self._open_for_writing()

    def __enter__(self) -> TuneDB:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    @contextlib.contextmanager
    def _naming(self) -> Iterator[None]:
        """SQLite's and the file system's errors as TuneDBError, naming this file."""
        try:
            yield
        except (sqlite3.Error, OSError) as err:
            self.close()
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise TuneDBError(f"{self.name}: {reason}") from None

    def _connect(self, target: str, uri: bool = False) -> None:
        # isolation_level None: no implicit transactions; writes take the lock themselves (`_writing`)
        self.connection = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None, uri=uri)

    def _open_read_only(self) -> None:
        if not self.path.is_file():
            raise TuneDBError(f"{self.name}: no such tuning database")
        self._connect(f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=ro", uri=True)
        tables = self._tables()
        if "measurements" not in tables:
            raise TuneDBError(f"{self.name}: not a tuning database (it holds no measurements table)")
        self.has_specs = "specs" in tables

    def _open_for_writing(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connect(str(self.path))
        tables = self._tables()
        if tables and "measurements" not in tables:
            raise TuneDBError(f"{self.name}: not a tuning database (it holds other tables: "
                              f"{', '.join(sorted(tables))})")
        if not {"measurements", "specs"} <= tables:
            self.connection.executescript(f"BEGIN IMMEDIATE; {SCHEMA} COMMIT;")  # one commit; a racing creator waits
            self._tables()
        self.has_specs = True

    def _tables(self) -> set[str]:
        """The database's tables; raises when `measurements` lacks a column of Row."""
        tables = {name for (name,) in self.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "measurements" in tables:
            columns = {row[1] for row in self.connection.execute("PRAGMA table_info(measurements)")}
            if missing := [column for column in COLUMNS if column not in columns]:
                raise TuneDBError(f"{self.name}: not a tuning database (its measurements lack {', '.join(missing)})")
        return tables

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One write transaction, the write lock taken at its start: every row it compares with is current."""
        if self.read_only:
            raise TuneDBError(f"{self.name}: opened read-only")
        with self._naming():
            self.connection.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                if self.connection.in_transaction:  # some errors (a full disk) end it themselves
                    self.connection.execute("ROLLBACK")
                raise
            self.connection.execute("COMMIT")

    def record(self, row: Row, text: str | None = None) -> Row:
        """Store a measurement (`as_written`) unless the database holds a row of its key of higher
        precedence, and when given the spec's text; returns the row as written."""
        row = as_written(row)
        with self._writing():
            self._put([row])
            if text is not None:
                self.connection.execute("INSERT OR IGNORE INTO specs VALUES (?, ?)", (row.spec_hash, text))
        return row

    def _put(self, rows: Sequence[Row]) -> int:
        """Inside a write transaction: store each row (of distinct keys) unless its key holds a measurement
        that it does not outrank, reading what the keys hold in one query. Returns how many were stored."""
        keys = ", ".join(["(?, ?, ?, ?, ?)"] * len(rows))
        held = {row.key: row for row in itertools.starmap(Row, self.connection.execute(
            SELECT_KEYS.format(keys=keys), [value for row in rows for value in row.key]))}
        stored = [row for row in rows if (old := held.get(row.key)) is None or row_problem(old) is not None
                  or outranks(row, old)]
        self.connection.executemany(INSERT, stored)
        return len(stored)

    def _read(self, hashes: Iterable[str] | None = None, gpu: str | None = None) -> Iterator[Row]:
        """The measurements of these spec hashes (all, without), on this GPU model (any, without), in key
        order; a bad row is skipped with a warning naming its key (once per key)."""
        where, parameters = ("WHERE gpu = ?", [gpu]) if gpu is not None else ("", [])
        wanted = None if hashes is None else set(hashes)
        with self._naming():
            for row in itertools.starmap(Row, self.connection.execute(
                    f"{SELECT} {where} ORDER BY {', '.join(KEY_COLUMNS)}", parameters)):
                if wanted is not None and row.spec_hash not in wanted:
                    continue
                problem = row_problem(row)
                if problem is None:
                    yield row
                elif row.key not in self.skipped:
                    self.skipped.add(row.key)
                    if len(self.skipped) <= MAX_WARNINGS:
                        self.warn(f"{self.name}: warning: skipped the row of {describe_key(row)}: {problem}")
                    elif len(self.skipped) == MAX_WARNINGS + 1:
                        self.warn(f"{self.name}: warning: more bad rows skipped, without a warning each")

    def rows(self, hashes: Iterable[str] | None = None, gpu: str | None = None) -> list[Row]:
        """The measurements of these spec hashes (all, without), on this GPU model (any, without), in key order."""
        return list(self._read(hashes, gpu))

    def measured(self, gpu: str) -> set[tuple[str, Size]]:
        """The (spec hash, size) keys this GPU model has a measurement of, whatever its status."""
        return {(row.spec_hash, row.size) for row in self._read(gpu=gpu)}

    def gpus(self) -> list[str]:
        return sorted({row.gpu for row in self._read()})

    def spec_texts(self) -> dict[str, str]:
        if not self.has_specs:
            return {}
        with self._naming():
            return {key: text for key, text in self.connection.execute("SELECT spec_hash, text FROM specs")
                    if isinstance(key, str) and isinstance(text, str)}

    def merge_all(self, sources: Sequence[TuneDB]) -> list[str]:
        """Fold other databases in, in one transaction; one line per source."""
        lines = []
        with self._writing():
            for source in sources:
                read = taken = 0
                for batch in batched(source._read(), MERGE_BATCH):
                    read += len(batch)
                    taken += self._put(batch)
                kept = read - taken
                self.connection.executemany("INSERT OR IGNORE INTO specs VALUES (?, ?)", source.spec_texts().items())
                lines.append(f"{source.name}: {taken} measurement(s) taken, {kept} already held as good or better")
        return lines


def batched(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    iterator = iter(rows)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def merge(output: str | Path, inputs: Sequence[str | Path], warn: Callable[[str], None] = _print_warning) -> list[str]:
    """Merge databases into `output` (which may be one of them, or new); one line per input.

    Every input is opened read-only, and all of them before the output is touched. Into an existing
    output the merge is one transaction. A new output is built under a temporary name beside it and
    linked into place whole; if another process created the output meanwhile, the inputs are merged
    into that one instead. On an error (TuneDBError) an existing output is as it was and a new one is
    not created."""
    target = Path(output).expanduser()
    sources: list[TuneDB] = []
    try:
        for path in inputs:
            if not _same_file(Path(path).expanduser(), target):
                sources.append(TuneDB(path, read_only=True, warn=warn))
        if target.exists():
            with TuneDB(output, warn=warn) as db:
                return db.merge_all(sources)
        return _merge_into_new(output, target, sources, warn)
    finally:
        for source in sources:
            source.close()


def _merge_into_new(output: str | Path, target: Path, sources: Sequence[TuneDB],
                    warn: Callable[[str], None]) -> list[str]:
    staged = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with TuneDB(staged, warn=warn) as db:
            db.name = str(output)
            # No one else sees this file and a failure deletes it: no journal on disk, no sync per
            # commit, one fsync of the whole file before it is linked into place.
            db.connection.execute("PRAGMA journal_mode = MEMORY")
            db.connection.execute("PRAGMA synchronous = OFF")
            lines = db.merge_all(sources)
        with open(staged, "rb") as written:
            os.fsync(written.fileno())
        try:
            os.link(staged, target)
        except OSError:  # it exists now (another merge), or the file system has no hard links
            with TuneDB(output, warn=warn) as db:
                lines = db.merge_all(sources)
        return lines
    finally:
        for leftover in (staged, Path(f"{staged}-journal")):
            leftover.unlink(missing_ok=True)


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
    except TuneDBError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("\n".join(lines + [f"merged into {args.output}"]))
    return 0

"""The tuning database: keys, round trips, merging databases from several hosts, bad input."""
import math
import os
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from gemmdsl import tune_db
from gemmdsl.cli import main
from gemmdsl.tune_db import Row, TuneDB

SPEC = "gemm k_t3 {\n  block { tile: 128x128x8; }  // the block\n}\n"


def row(spec="a", size=(64, 64, 64), gpu="GPU A", status="ok", ms=1.0, runs=20, at="2024-01-01T00:00:00Z",
        host="host"):
    return Row(spec, *size, gpu, status, ms if status == "ok" else None, 1.1 if status == "ok" else None, runs,
               60.0 if status == "ok" else None, "13.0", "nvcc 13.0", "14.0", "k", 0.5, host, f"{host}/gpu0",
               "" if status == "ok" else "boom", at)


def test_the_spec_hash_ignores_comments_white_space_and_the_kernel_name():
    same = "// tuned\ngemm other_name {\n    block {   tile: 128x128x8; }\n}"
    assert tune_db.spec_hash(SPEC) == tune_db.spec_hash(same)
    assert tune_db.spec_hash(SPEC) != tune_db.spec_hash(SPEC.replace("128x128x8", "128x64x8"))


def test_a_row_round_trips_and_its_key_replaces(tmp_path):
    with TuneDB(tmp_path / "t.sqlite") as db:
        db.record(row(status="failed"), SPEC)
        db.record(row(ms=2.0))
        [stored] = db.rows()
        assert stored == row(ms=2.0) and stored.pct_cublas == pytest.approx(55.0)
        assert db.measured("GPU A") == {("a", (64, 64, 64))} and db.measured("GPU B") == set()
        assert db.spec_texts() == {"a": SPEC}
        with pytest.raises(ValueError, match="status 'lost'"):
            db.record(row(status="lost"))


def test_merge_keeps_the_better_row_of_each_key_and_every_gpu_apart(tmp_path):
    with TuneDB(tmp_path / "a.sqlite") as a:
        a.record(row("x", status="failed"))
        a.record(row("y", runs=50))
        a.record(row("z", gpu="GPU A"), SPEC)
    with TuneDB(tmp_path / "b.sqlite") as b:
        b.record(row("x", ms=3.0))
        b.record(row("y", runs=20, ms=9.0))
        b.record(row("z", gpu="GPU B"))
    assert main(["tunedb", "merge", str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite"),
                 "-o", str(tmp_path / "c.sqlite")]) == 0
    with TuneDB(tmp_path / "c.sqlite") as c:
        rows = {(r.spec_hash, r.gpu): r for r in c.rows()}
        assert set(rows) == {("x", "GPU A"), ("y", "GPU A"), ("z", "GPU A"), ("z", "GPU B")}
        assert rows["x", "GPU A"].median_ms == 3.0 and rows["y", "GPU A"].runs == 50
        assert c.spec_texts() == {"z": SPEC} and c.gpus() == ["GPU A", "GPU B"]


def test_merging_a_missing_database_is_an_error(tmp_path, capsys):
    assert main(["tunedb", "merge", str(tmp_path / "none.sqlite"), "-o", str(tmp_path / "c.sqlite")]) == 1
    assert "no such tuning database" in capsys.readouterr().err


@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=20, unique=True))
def test_spearman_of_a_list_with_itself_is_one_and_with_its_reverse_minus_one(values):
    assert tune_db.spearman(values, values) == pytest.approx(1.0)
    assert tune_db.spearman(values, [-v for v in values]) == pytest.approx(-1.0)


def test_a_later_write_of_a_key_never_replaces_a_better_row(tmp_path):
    with TuneDB(tmp_path / "t.sqlite") as db:
        db.record(row(runs=50, at="2024-01-01T00:00:00Z"))
        db.record(row(status="failed", at="2025-01-01T00:00:00Z"))
        db.record(row(runs=20, ms=9.0, at="2025-01-01T00:00:00Z"))
        [stored] = db.rows()
    assert stored == row(runs=50, at="2024-01-01T00:00:00Z")


# --- merge: inputs, outputs, errors -----------------------------------------------------------------


def merge(*arguments):
    return main(["tunedb", "merge", *map(str, arguments)])


def database(path, *rows):
    with TuneDB(path) as db:
        for one in rows:
            db.record(one, SPEC)
    return path


def test_merge_opens_its_inputs_read_only_and_refuses_a_file_that_is_not_a_tuning_database(tmp_path, capsys):
    empty = tmp_path / "empty.gemm"
    empty.write_bytes(b"")
    assert merge(empty, empty, "-o", tmp_path / "d.sqlite") == 1
    assert f"error: {empty}: not a tuning database" in capsys.readouterr().err
    assert empty.read_bytes() == b"" and not (tmp_path / "d.sqlite").exists()
    good = database(tmp_path / "a.sqlite", row("x"), row("y", status="failed"))
    before = good.read_bytes()
    good.chmod(0o444)
    assert merge(good, "-o", tmp_path / "d.sqlite") == 0
    assert good.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["a.sqlite", "d.sqlite", "empty.gemm"]


def test_a_failed_merge_leaves_no_new_output_and_an_existing_one_untouched(tmp_path, capsys):
    good = database(tmp_path / "a.sqlite", row("x"))
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database\n" * 200)
    output = tmp_path / "out.sqlite"
    assert merge(good, tmp_path / "none.sqlite", "-o", output) == 1
    assert f"error: {tmp_path / 'none.sqlite'}: no such tuning database" in capsys.readouterr().err
    assert merge(good, junk, "-o", output) == 1
    assert f"error: {junk}: file is not a database" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["a.sqlite", "junk.sqlite"]
    database(output, row("z", status="failed"))
    held = output.read_bytes()
    assert merge(good, junk, "-o", output) == 1
    assert output.read_bytes() == held
    assert merge(good, "-o", junk) == 1
    assert f"error: {junk}: file is not a database" in capsys.readouterr().err


# --- bad timings and bad rows -------------------------------------------------------------------


@pytest.mark.parametrize("field", ["median_ms", "cublas_ms", "peak_tflops"])
@pytest.mark.parametrize("value", [0.0, math.nan, math.inf, -1.0])
def test_a_non_finite_or_non_positive_timing_is_stored_as_failed_with_the_reason(tmp_path, field, value):
    with TuneDB(tmp_path / "t.sqlite") as db:
        db.record(row()._replace(**{field: value}))
        [stored] = db.rows()
    assert stored.status == "failed" and stored.median_ms is None and stored.pct_cublas is None
    assert f"{field} {value}" in stored.error


BAD_ROWS = {  # spec hash -> (column, value) written by hand over a good row
    "zero": ("median_ms", 0.0), "null": ("median_ms", None), "no_cublas": ("cublas_ms", None),
    "many": ("runs", "many"), "size": ("m", "x"), "peak": ("peak_tflops", -5.0), "status": ("status", "ok "),
    "predicted": ("predicted", "high"), "blob": ("host", b"\x00"), "at": ("measured_at", b"2024"),
}


def hand_edited(path):
    """A database of one good row ("good") and one bad row per BAD_ROWS entry, written past TuneDB."""
    database(path, row("good"), *(row(key) for key in BAD_ROWS))
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA ignore_check_constraints = 1")
    with connection:
        for key, (column, value) in BAD_ROWS.items():
            connection.execute(f"UPDATE measurements SET {column} = ? WHERE spec_hash = ?", (value, key))
    connection.close()
    return path


def test_a_bad_row_is_skipped_with_one_warning_naming_its_key(tmp_path, capsys):
    path = hand_edited(tmp_path / "t.sqlite")
    with TuneDB(path) as db:
        assert [r.spec_hash for r in db.rows()] == ["good"]
        assert db.measured("GPU A") == {("good", (64, 64, 64))}
    err = capsys.readouterr().err
    for key in BAD_ROWS:
        assert err.count(f"skipped the row of {key} at ") == 1, key
    assert merge(path, "-o", tmp_path / "out.sqlite") == 0
    assert all(f"skipped the row of {key} at " in capsys.readouterr().err for key in ["zero"])
    with TuneDB(tmp_path / "out.sqlite") as out:
        assert [r.spec_hash for r in out.rows()] == ["good"]


def test_a_tuner_write_replaces_a_bad_row(tmp_path):
    path = hand_edited(tmp_path / "t.sqlite")
    with TuneDB(path) as db:
        db.record(row("many", ms=4.0))
        assert {r.spec_hash: r.median_ms for r in db.rows()} == {"good": 1.0, "many": 4.0}


# --- the precedence rule, for all databases -------------------------------------------------------

KEYS = [(spec, size, gpu) for spec in "ab" for size in [(64, 64, 64), (128, 64, 64)] for gpu in ["GPU A", "GPU B"]]
ROWS = st.builds(lambda key, *rest: row(*key, *rest), st.sampled_from(KEYS),
                 st.sampled_from(["ok", "failed", "timeout"]), st.sampled_from([1.0, 2.0]), st.integers(1, 3),
                 st.sampled_from(["2024-01-01T00:00:00Z", "2024-06-01T00:00:00Z"]), st.sampled_from(["h1", "h2"]))
DATABASES = st.lists(ROWS, max_size=8, unique_by=lambda r: r.key)


def contents(path):
    with TuneDB(path, read_only=True) as db:
        return db.rows()


def written(path, rows):
    """A database holding exactly these rows (one a key), written in one transaction."""
    connection = sqlite3.connect(path)
    with connection:
        connection.executescript(tune_db.SCHEMA)
        connection.executemany(tune_db.INSERT, rows)
    connection.close()
    return path


@settings(max_examples=20, deadline=None)
@given(DATABASES, DATABASES, DATABASES)
def test_merging_is_commutative_associative_and_idempotent_and_keeps_each_keys_best_row(a, b, c):
    # A RAM disk where there is one: the rule is about merging, and each example commits a dozen times.
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as scratch:
        folder = Path(scratch)
        paths = [written(folder / f"{name}.sqlite", rows) for name, rows in zip("abc", (a, b, c))]
        tune_db.merge(folder / "ab", paths[:2])
        tune_db.merge(folder / "ba", paths[1::-1])
        assert contents(folder / "ab") == contents(folder / "ba")
        tune_db.merge(folder / "ab", [folder / "ab", paths[0], paths[1]])
        assert contents(folder / "ab") == contents(folder / "ba")
        tune_db.merge(folder / "ab_c", [folder / "ab", paths[2]])
        tune_db.merge(folder / "bc", paths[1:])
        tune_db.merge(folder / "a_bc", [paths[0], folder / "bc"])
        assert contents(folder / "ab_c") == contents(folder / "a_bc")
        merged = {(r.spec_hash, r.size, r.gpu): r for r in contents(folder / "ab_c")}
    every = a + b + c
    assert set(merged) == {(r.spec_hash, r.size, r.gpu) for r in every}
    for key, kept in merged.items():
        rivals = [r for r in every if (r.spec_hash, r.size, r.gpu) == key]
        assert kept in rivals
        assert (kept.status == "ok") == any(r.status == "ok" for r in rivals)
        assert kept.runs == max(r.runs for r in rivals if (r.status == "ok") == (kept.status == "ok"))

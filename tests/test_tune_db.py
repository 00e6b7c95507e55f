"""The tuning database: keys, round trips, merging databases from several hosts."""
import sqlite3

import pytest
from hypothesis import given, strategies as st

from gemmdsl import tune_db
from gemmdsl.cli import main
from gemmdsl.tune_db import Row, TuneDB

SPEC = "gemm k_t3 {\n  block { tile: 128x128x8; }  // the block\n}\n"


def row(spec="a", size=(64, 64, 64), gpu="GPU A", status="ok", ms=1.0, runs=20, at="2024-01-01T00:00:00Z"):
    return Row(spec, *size, gpu, status, ms if status == "ok" else None, 1.1 if status == "ok" else None, runs,
               60.0, "13.0", "nvcc 13.0", "14.0", "k", 0.5, "host", "host/gpu0",
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
        with pytest.raises(sqlite3.IntegrityError):
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

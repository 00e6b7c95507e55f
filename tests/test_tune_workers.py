"""The tuning workers on fake GPUs (tests/fake_timing.py): scheduling, faults, kills, resuming."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gemmdsl import tune_db
from gemmdsl.tune_workers import (WARM_UP_SIZE, LocalPool, Task, WorkerError, measure, pending,
                                  warm_up_task)

ROOT = Path(__file__).resolve().parents[1]
FAKE = "fake_timing:FakeBackend"
SIZE = (4096, 4096, 4096)


def make_tasks(count, plants=(), size=SIZE):
    """`count` tasks; those whose index is in `plants` carry `// plant: KIND` (plants: {index: kind})."""
    plants = dict(plants)
    tasks = []
    for i in range(count):
        text = f"gemm k_t{i} {{ block {{ tile: {i}x1x1; }} }}" + (f"\n// plant: {plants[i]}" if i in plants else "")
        tasks.append(Task(tune_db.spec_hash(text), size, f"k_t{i}", text, f"t.tgemm[t{i}]", 20, 5, predicted=0.5))
    return tasks


def run_pool(tasks, devices, timeout=30.0, on_outcome=None):
    outcomes = []
    with LocalPool(FAKE, devices, timeout) as pool:
        pool.start()

        def record(outcome):
            outcomes.append(outcome)
            if on_outcome is not None:
                on_outcome(pool, outcome)

        pool.run(tasks, record)
    return outcomes


def timings(log: Path, warm_ups: bool = False) -> list[str]:
    """The fake timings logged, without the workers' warm-ups (at WARM_UP_SIZE) unless asked."""
    lines = log.read_text().split("\n")[:-1] if log.exists() else []
    warm = "x".join(map(str, WARM_UP_SIZE))
    return [line for line in lines if warm_ups or line.split()[1] != warm]


@pytest.fixture
def log(tmp_path, monkeypatch):
    path = tmp_path / "timings.log"
    monkeypatch.setenv("FAKE_TIMING_LOG", str(path))
    monkeypatch.setenv("FAKE_TIMING_SLEEP", "0.05")
    return path


def test_every_worker_takes_tasks_and_the_figures_do_not_depend_on_which(log):
    tasks = make_tasks(9)
    one = {o.task.key: o.timed for o in run_pool(tasks, ["0"])}
    three = run_pool(tasks, ["0", "1", "2"])
    assert {o.task.key: o.timed for o in three} == one and len(one) == 9
    assert {o.worker.rsplit("/", 1)[1] for o in three} == {"gpu0", "gpu1", "gpu2"}
    assert all(o.status == "ok" and o.device.gpu == "Fake GPU" for o in three)
    assert len(timings(log)) == 18


def test_warm_up_has_every_worker_time_a_small_task_and_records_nothing(log):
    tasks = make_tasks(4, {0: "fault"})
    outcomes = []
    with LocalPool(FAKE, ["0", "1"], 30.0) as pool:
        pool.start()
        pool.warm_up(warm_up_task(tasks[1]))
        warmed = {line.split()[2] for line in timings(log, warm_ups=True)}
        assert timings(log, warm_ups=True) and not timings(log) and set(map(str, pool.pids())) == warmed
        pool.warm_up(warm_up_task(tasks[0]))  # a warm-up that kills its workers: they come back, cold
        assert len(set(pool.pids()) & set(map(int, warmed))) == 0
        pool.run(tasks[1:], outcomes.append)
    assert sorted(o.task.name for o in outcomes) == ["k_t1", "k_t2", "k_t3"]
    assert all(o.status == "ok" for o in outcomes) and len(timings(log)) == 3


def test_faults_cost_one_worker_and_are_recorded_with_the_reason(log):
    tasks = make_tasks(8, {1: "fault", 3: "hang", 5: "lost", 6: "error"})
    outcomes = {o.task.name: o for o in run_pool(tasks, ["0", "1"], timeout=1.5)}
    assert set(outcomes) == {t.name for t in tasks}
    assert outcomes["k_t1"].status == "failed" and "SIGSEGV" in outcomes["k_t1"].error
    assert outcomes["k_t3"].status == "timeout" and "1.5 s" in outcomes["k_t3"].error
    assert outcomes["k_t5"].status == "failed" and "illegal memory access" in outcomes["k_t5"].error
    assert outcomes["k_t6"].status == "failed" and "planted error" in outcomes["k_t6"].error
    assert all(outcomes[f"k_t{i}"].status == "ok" for i in (0, 2, 4, 7))
    # The faulting task is tried again once (a worker killed from outside looks the same), then recorded.
    assert sum(line.startswith(tasks[1].spec_hash) for line in timings(log)) == 2


def test_a_worker_killed_from_outside_loses_only_its_task_which_is_timed_again(log):
    killed = {}

    def kill_the_slow_tasks_worker(pool, outcome):
        if not killed:  # the first outcome is a fast task's: the slow one is surely still being timed
            slot = next(slot for slot in pool.slots if slot.task is not None and slot.task.name == "k_t0")
            killed["task"] = slot.task
            os.kill(slot.pid, signal.SIGKILL)

    tasks = make_tasks(8, {0: "slow"})
    outcomes = run_pool(tasks, ["0", "1", "2"], on_outcome=kill_the_slow_tasks_worker)
    assert sorted(o.task.name for o in outcomes) == sorted(t.name for t in tasks)
    assert all(o.status == "ok" for o in outcomes)
    counts = {t.spec_hash: sum(line.startswith(t.spec_hash) for line in timings(log)) for t in tasks}
    assert counts[killed["task"].spec_hash] == 2
    assert sum(counts.values()) == len(tasks) + 1


def test_measure_writes_every_outcome_and_a_second_run_reuses_them(log, tmp_path):
    tasks = make_tasks(6, {2: "error"})
    with tune_db.TuneDB(tmp_path / "t.sqlite") as db, LocalPool(FAKE, ["0", "1"]) as pool:
        device = pool.start()
        measure(pool, pending(tasks, db, device.gpu), db)
        rows = db.rows(gpu=device.gpu)
    assert len(rows) == 6 and {r.status for r in rows} == {"ok", "failed"}
    assert all(r.runs == 20 and r.predicted == 0.5 and r.driver == "13.0" and r.compiler == "fake 1.0" for r in rows)
    before = len(timings(log))
    with tune_db.TuneDB(tmp_path / "t.sqlite") as db, LocalPool(FAKE, ["0"]) as pool:
        todo = pending(tasks + make_tasks(7)[6:], db, pool.start().gpu)
        measure(pool, todo, db)
    assert len(timings(log)) == before + 1  # only the new task: the failed one is not retried


def test_a_timing_that_is_no_time_is_stored_as_failed_with_the_reason(log, tmp_path):
    kinds = ["zero", "nan", "inf", "negative"]
    tasks = make_tasks(5, dict(enumerate(kinds)))
    lines = []
    with tune_db.TuneDB(tmp_path / "t.sqlite") as db, LocalPool(FAKE, ["0"]) as pool:
        measure(pool, pending(tasks, db, pool.start().gpu), db, lines.append)
        rows = {row.name: row for row in db.rows()}
    assert [rows[f"k_t{i}"].status for i in range(5)] == ["failed"] * 4 + ["ok"]
    for i, shown in enumerate(["0.0", "nan", "inf", "-1.0"]):
        assert rows[f"k_t{i}"].error == f"the backend's timing is no time: median_ms {shown}"
        assert rows[f"k_t{i}"].median_ms is None
    assert sum(": failed: the backend's timing is no time" in line for line in lines) == 4


def test_timings_of_another_gpu_model_are_kept_apart(log, tmp_path, monkeypatch):
    tasks = make_tasks(3)
    with tune_db.TuneDB(tmp_path / "t.sqlite") as db:
        with LocalPool(FAKE, ["0"]) as pool:
            measure(pool, pending(tasks, db, pool.start().gpu), db)
        monkeypatch.setenv("FAKE_GPU", "Other GPU")
        with LocalPool(FAKE, ["0"]) as pool:
            measure(pool, pending(tasks, db, pool.start().gpu), db)
        assert db.gpus() == ["Fake GPU", "Other GPU"] and len(db.rows(gpu="Other GPU")) == 3
    assert len(timings(log)) == 6


def test_a_worker_that_cannot_start_stops_the_run_with_its_reason(monkeypatch):
    with pytest.raises(WorkerError, match="cannot time: .*no_such_module"):
        with LocalPool("no_such_module:Backend", ["0"]) as pool:
            pool.start()


DRIVER = """
import sys
from pathlib import Path
sys.path[:0] = [{root!r}, {tests!r}]
from gemmdsl import tune_db
from gemmdsl.tune_workers import LocalPool, measure, pending
from test_tune_workers import make_tasks
with tune_db.TuneDB(sys.argv[1]) as db, LocalPool("fake_timing:FakeBackend", ["0", "1", "2"]) as pool:
    measure(pool, pending(make_tasks(15), db, pool.start().gpu), db)
"""


def test_a_killed_driver_restarted_retimes_at_most_one_task_per_worker(log, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TIMING_SLEEP", "0.3")
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(root=str(ROOT), tests=str(ROOT / "tests")))
    database = tmp_path / "t.sqlite"
    driver = subprocess.Popen([sys.executable, str(script), str(database)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if database.exists():
            with tune_db.TuneDB(database) as db:
                if len(db.rows()) >= 4:
                    break
        time.sleep(0.05)
    driver.kill()
    driver.wait()
    subprocess.run([sys.executable, str(script), str(database)], check=True, timeout=120)
    with tune_db.TuneDB(database) as db:
        assert len(db.rows()) == 15 and all(row.status == "ok" for row in db.rows())
    hashes = [line.split()[0] for line in timings(log)]
    retimed = {h for h in hashes if hashes.count(h) > 1}
    assert len(retimed) <= 3 and all(hashes.count(h) == 2 for h in retimed)


# --- `gemmdsl tune` end to end on fake GPUs -------------------------------------------------------------

V3 = """\
gemm v3 {
    problem  { a: f32 row; b: f32 row; c: f32 row; epilogue: alpha_beta; bounds: exact; }
    block    { tile: 128x128x8; raster: {row,group(8)}; }
    threads  { warps: 4x2; lanes: 4x8 row; micro: 4x4; repeat: 2x2 block; }
    smem a   { order: km; pad: 4; }
    pipeline { stages: {2,3}; copy: registers; fragments: double; }
}
"""


def test_tune_times_on_fake_gpus_reuses_the_database_and_reports_from_it(log, tmp_path, capsys):
    from gemmdsl.cli import main

    template = tmp_path / "v3.tgemm"
    template.write_text(V3)
    common = ["tune", str(template), "--sizes", "4096,2048", "--budget", "4", "--no-nvcc", "--backend", FAKE,
              "--db", str(tmp_path / "t.sqlite"), "--jobs", "1"]
    assert main(common + ["--gpus", "2", "-o", str(tmp_path / "best.gemm")]) == 0
    out = capsys.readouterr().out
    with tune_db.TuneDB(tmp_path / "t.sqlite") as db:
        rows = db.rows()
    timed = len({r.spec_hash for r in rows})
    assert len(timings(log)) == len(rows) == 2 * timed >= 4 and (tmp_path / "best.gemm").exists()
    best = max({r.spec_hash for r in rows}, key=lambda h: sum(
        __import__("math").log(r.pct_cublas) for r in rows if r.spec_hash == h))
    winner = next(r.name for r in rows if r.spec_hash == best)
    assert f"winner {winner} " in out and "device: Fake GPU" in (tmp_path / "best.gemm").read_text()
    assert main(common + ["--gpus", "1", "-o", str(tmp_path / "again.gemm")]) == 0
    assert len(timings(log)) == len(rows)  # everything came from the database
    body = [(tmp_path / file).read_text().split("\n", 1)[1] for file in ("again.gemm", "best.gemm")]
    assert body[0] == body[1]
    capsys.readouterr()
    assert main(common + ["--report"]) == 0
    report = capsys.readouterr().out
    assert report.startswith(f"Fake GPU | {timed} candidate(s) measured at every size")
    assert f"   1 {winner} " in report and "predicted vs measured: " in report


CHECKED = """\
gemm fam {
    problem  { a: f32 row; b: f32 row; c: f32 row; epilogue: alpha_beta; bounds: checked; }
    target   sm_90;
    block    { tile: 128x128x8; raster: {row,group(8),group(4)}; }
    threads  { warps: 4x2; lanes: 4x8 row; micro: 4x4; repeat: 2x2 block; }
    smem a   { order: km; pad: {4,8}; }
    smem b   { order: kn; }
    load a   { vector: 4; }
    load b   { vector: 4; }
    pipeline { stages: 2; copy: registers; fragments: double; }
}
"""


def test_tune_shapes_writes_a_family_of_the_winners_with_a_measured_table(log, tmp_path, capsys):
    from gemmdsl.cli import main
    from gemmdsl.family import choose, compile_family_path

    (tmp_path / "fam.tgemm").write_text(CHECKED)
    shapes = ["1x4096x4096 2", "16x4096x4096", "128x4096x4096", "1024x4096x4096 0.5", "4096x4096x4096",
              "4096x14336x4096", "8192x4096x14336"]
    (tmp_path / "shapes.txt").write_text("# a block\n" + "\n".join(shapes) + "\n")
    output = tmp_path / "out" / "fam_family.gemmf"
    output.parent.mkdir()
    assert main(["tune", str(tmp_path / "fam.tgemm"), "--shapes", str(tmp_path / "shapes.txt"), "--budget", "6",
                 "--no-nvcc", "--backend", FAKE, "--db", str(tmp_path / "t.sqlite"), "--jobs", "1", "--gpus", "2",
                 "-o", str(output)]) == 0
    family = compile_family_path(output)
    with tune_db.TuneDB(tmp_path / "t.sqlite") as db:
        rows = db.rows()
    hash_of = {m.artifacts.spec.name: tune_db.spec_hash((output.parent / m.path).read_text()) for m in family.members}
    for line in shapes:
        shape = tuple(map(int, line.split()[0].split("x")))
        fastest = max((r for r in rows if r.size == shape), key=lambda r: (r.pct_cublas, r.name))
        picked = choose(family.models, *shape, measured=family.measured)
        assert hash_of[family.models[picked].name] == fastest.spec_hash, line
    assert len(family.members) == len({h for h in hash_of.values()}) >= 2
    assert all(choose(family.models, *shape) != index for shape, index in family.measured)
    assert "weighted geomean over the shapes" in output.read_text()


def test_a_bad_shape_line_names_its_file_and_line(tmp_path):
    from gemmdsl.tune_family import read_weighted_shapes

    (tmp_path / "s.txt").write_text("16x4096x4096 2\n16x4096x4096 -1\n")
    with pytest.raises(ValueError, match=r"s\.txt:2: the weight -1 is not a positive number"):
        read_weighted_shapes(tmp_path / "s.txt")
    assert read_weighted_shapes(ROOT / "examples" / "shapes" / "llama_block.txt")[0] == ((1, 6144, 4096), 1.0)


def test_tune_and_its_report_skip_bad_rows_with_a_warning_and_time_their_keys_again(log, tmp_path, capsys):
    import sqlite3

    from gemmdsl.cli import main

    (tmp_path / "v3.tgemm").write_text(V3.replace("pad: 4;", "pad: {4,8};"))  # 4 valid candidates
    database = tmp_path / "t.sqlite"
    common = ["tune", str(tmp_path / "v3.tgemm"), "--sizes", "4096", "--budget", "4", "--no-nvcc", "--backend", FAKE,
              "--db", str(database), "--jobs", "1", "--gpus", "1", "-o", str(tmp_path / "best.gemm")]
    assert main(common) == 0
    timed = len(timings(log))
    connection = sqlite3.connect(database)
    with connection:  # hand edits: a zero time, a missing one, a word for a count
        connection.execute("UPDATE measurements SET median_ms = 0 WHERE rowid = 1")
        connection.execute("UPDATE measurements SET median_ms = NULL WHERE rowid = 2")
        connection.execute("UPDATE measurements SET runs = 'many' WHERE rowid = 3")
    connection.close()
    capsys.readouterr()
    assert main(common + ["--report"]) == 0
    assert capsys.readouterr().err.count("warning: skipped the row of ") == 3
    assert timed == 4
    assert main(["tunedb", "merge", str(database), "-o", str(tmp_path / "merged.sqlite")]) == 0
    assert main(common) == 0
    assert len(timings(log)) == timed + 3
    with tune_db.TuneDB(database) as db:
        assert len(db.rows()) == timed and all(row.status == "ok" for row in db.rows())


@pytest.mark.parametrize("option, refusal", [
    (["--name", "../../evil"], "error: --name: kernel name '../../evil' is not an identifier"),
    (["--name", "int"], "error: --name: kernel name 'int' is a C/C++ keyword"),
    (["--name", "k" * 65], "error: --name: kernel name is 65 characters long"),
    (["-o", "{tmp}/file.txt/best.gemm"], "error: -o: cannot write {tmp}/file.txt/best.gemm: {tmp}/file.txt is not a "
                                         "directory"),
    (["--json", "{tmp}"], "error: --json: cannot write {tmp}: it is a directory"),
    (["--db", "{tmp}/file.txt"], "error: --db: {tmp}/file.txt: file is not a database"),
    (["--backend", "fake_timing:NoSuchBackend"], "error: --backend fake_timing:NoSuchBackend: cannot load it"),
    (["--shapes", "{tmp}/shapes.txt", "--name", "../../evil"], "error: --name: kernel name '../../evil' is not an"),
    (["--shapes", "{tmp}/shapes.txt", "--name", "k" * 62], "kernel name is 65 characters long"),
])
def test_what_would_fail_after_timing_is_refused_before_anything_is_timed(log, tmp_path, capsys, option, refusal):
    from gemmdsl.cli import main

    (tmp_path / "v3.tgemm").write_text(V3)
    (tmp_path / "file.txt").write_text("not a database\n" * 100)
    (tmp_path / "shapes.txt").write_text("4096x4096x4096\n2048x2048x2048\n")
    command = ["tune", str(tmp_path / "v3.tgemm"), "--budget", "2", "--no-nvcc", "--backend", FAKE, "--jobs", "1",
               "--gpus", "1", "--db", str(tmp_path / "t.sqlite"), "-o", str(tmp_path / "best.gemm")]
    assert main(command + [part.format(tmp=tmp_path) for part in option]) == 2
    err = capsys.readouterr().err
    assert refusal.format(tmp=tmp_path) in err and "Traceback" not in err
    assert not log.exists() and not (tmp_path / "t.sqlite").exists()


def test_the_name_made_from_a_long_template_file_name_is_refused_before_timing(log, tmp_path, capsys):
    from gemmdsl.cli import main

    template = tmp_path / ("v" * 60 + ".tgemm")
    template.write_text(V3)
    assert main(["tune", str(template), "--no-nvcc", "--backend", FAKE, "--gpus", "1",
                 "--db", str(tmp_path / "t.sqlite"), "-o", str(tmp_path / "best.gemm")]) == 2
    assert "the name made from a file name (set one with --name)" in capsys.readouterr().err
    assert not log.exists()


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "inf"])
def test_a_timeout_that_is_no_time_is_refused(seconds, capsys):
    from gemmdsl.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["tune", "t.tgemm", "--timeout", seconds])
    assert exit_.value.code == 2 and "expected a positive number of seconds" in capsys.readouterr().err

"""The tuning database under many writers: concurrent merges and tuner writes, some killed with SIGKILL and
run again, end as a serial run does."""
import multiprocessing
import os
import random
import signal
import sqlite3
import tempfile
import time
from pathlib import Path

import pytest

from gemmdsl import tune_db
from gemmdsl.tune_db import COLUMNS, SCHEMA, TuneDB
from gemmdsl.tune_workers import Device, Outcome, Task, Timed, measure

FORK = multiprocessing.get_context("fork")  # the children start at once, with gemmdsl imported
KEYS = 2500


@pytest.fixture
def tmp_path():
    """A RAM disk where there is one: these tests are about locks and transactions, which it has, and they
    commit hundreds of times, which a busy disk makes slow."""
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as folder:
        yield Path(folder)


def bulk(path, status, keys=KEYS, gpu="GPU A"):
    """A database of `keys` keys at one status, written in one transaction."""
    ok = status == "ok"
    with sqlite3.connect(path) as connection:
        connection.executescript(SCHEMA)
        connection.executemany(
            f"INSERT INTO measurements ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
            ((f"k{i:06d}", 64, 64, 64, gpu, status, 1.0 + i % 7 if ok else None, 1.1 if ok else None, 20,
              60.0 if ok else None, "13.0", "nvcc 13.0", "14.0", f"k_t{i}", 0.5, "host", "host/gpu0",
              "" if ok else "planted", "2024-01-01T00:00:00.000Z") for i in range(keys)))
    connection.close()
    return path


def contents(path):
    with TuneDB(path, read_only=True) as db:
        return db.rows()


def start(target, *args):
    process = FORK.Process(target=target, args=args)
    process.start()
    return process


def run_killing_some(jobs, seed, within_s):
    """Start every job (target, args) at once, SIGKILL a random half of them at random moments within
    `within_s`, and return the jobs that did not finish."""
    chance = random.Random(seed)
    processes = [start(target, *args) for target, args in jobs]
    doomed = chance.sample(range(len(jobs)), len(jobs) // 2)
    for index in sorted(doomed, key=lambda _: chance.random()):
        time.sleep(chance.uniform(0, within_s / len(doomed)))
        os.kill(processes[index].pid, signal.SIGKILL)
    for process in processes:
        process.join(60)
    return [job for job, process in zip(jobs, processes) if process.exitcode != 0]


def test_concurrent_merges_end_as_a_serial_merge_does(tmp_path):
    good, bad = bulk(tmp_path / "a.sqlite", "ok"), bulk(tmp_path / "b.sqlite", "failed")
    other = bulk(tmp_path / "c.sqlite", "ok", keys=3000, gpu="GPU B")
    tune_db.merge(tmp_path / "serial.sqlite", [bad, good, other])
    expected = contents(tmp_path / "serial.sqlite")
    assert len(expected) == KEYS + 3000 and {r.status for r in expected} == {"ok"}
    output = tmp_path / "out.sqlite"
    processes = [start(tune_db.merge, output, [path]) for path in (bad, good, bad, other, good, bad)]
    for process in processes:
        process.join(60)
    assert [process.exitcode for process in processes] == [0] * 6
    assert contents(output) == expected


def test_merges_killed_at_random_and_run_again_end_as_a_serial_merge_does(tmp_path):
    good, bad = bulk(tmp_path / "a.sqlite", "ok"), bulk(tmp_path / "b.sqlite", "failed")
    tune_db.merge(tmp_path / "serial.sqlite", [good, bad])
    expected = contents(tmp_path / "serial.sqlite")
    killed = 0
    for seed in range(3):
        output = tmp_path / f"out{seed}.sqlite"
        jobs = [(tune_db.merge, (output, [path])) for path in (bad, good, bad, good)]
        unfinished = run_killing_some(jobs, seed, within_s=0.3)
        killed += len(unfinished)
        for target, args in unfinished:
            target(*args)
        assert contents(output) == expected, f"seed {seed}"
    assert killed  # some merge was killed before it finished


def write_outcomes(path, outcomes, pace_s=0.0):
    """A tuner's writes: `measure` on a pool that reports these outcomes, one each `pace_s`."""
    class Reported:
        def run(self, tasks, record):
            for outcome in outcomes:
                time.sleep(pace_s)
                record(outcome)

    with TuneDB(path) as db:
        measure(Reported(), [outcome.task for outcome in outcomes], db)


def outcomes_of(worker, seed):
    """A tuner's outcomes over 150 shared keys, some ok, some failed; each worker times with its own number
    of launches, so that the precedence rule, not the time of writing, decides every key."""
    chance = random.Random(seed)
    device = Device("GPU A", "13.0", "nvcc 13.0", "14.0", f"host{worker}")
    outcomes = []
    for i in chance.sample(range(150), 100):
        text = f"gemm k_t{i} {{ block {{ tile: {i}x1x1; }} }}"
        task = Task(tune_db.spec_hash(text), (64, 64, 64), f"k_t{i}", text, "t.tgemm", 20 + worker, 5)
        if chance.random() < 0.5:
            outcomes.append(Outcome(task, "ok", device, f"host{worker}/gpu0", Timed(1.0 + worker, 1.1, 60.0)))
        else:
            outcomes.append(Outcome(task, "failed", device, f"host{worker}/gpu0", error="planted"))
    return outcomes


def comparable(rows):
    """The rows without their time of writing (which no two runs share)."""
    return [row._replace(measured_at="") for row in rows]


def test_concurrent_tuner_writes_killed_at_random_end_as_a_serial_run_does(tmp_path):
    work = [outcomes_of(worker, seed=worker) for worker in range(4)]
    write_outcomes(tmp_path / "forward.sqlite", [o for outcomes in work for o in outcomes])
    write_outcomes(tmp_path / "backward.sqlite", [o for outcomes in reversed(work) for o in reversed(outcomes)])
    expected = comparable(contents(tmp_path / "forward.sqlite"))
    assert comparable(contents(tmp_path / "backward.sqlite")) == expected
    assert len(expected) == len({o.task.key for outcomes in work for o in outcomes})
    # Paced as measurements arrive, the writers overlap, and a kill finds them busy.
    jobs = [(write_outcomes, (tmp_path / "shared.sqlite", outcomes, 0.003)) for outcomes in work]
    unfinished = run_killing_some(jobs, seed=7, within_s=0.2)
    assert unfinished
    for target, args in unfinished:
        target(*args)
    assert comparable(contents(tmp_path / "shared.sqlite")) == expected

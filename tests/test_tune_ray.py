"""Tuning as Ray tasks on a two-node local cluster with faked GPUs (skipped without Ray)."""
import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from fake_timing import fake_figures  # noqa: E402
from gemmdsl import tune_db  # noqa: E402
from gemmdsl.tune_workers import RayPool, measure, pending  # noqa: E402
from test_tune_workers import make_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1})
    cluster.add_node(num_cpus=1, num_gpus=1)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


def test_ray_times_one_task_per_candidate_on_a_two_node_cluster(cluster, tmp_path):
    log = tmp_path / "timings.log"
    env = {"env_vars": {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
                        "FAKE_TIMING_LOG": str(log), "FAKE_TIMING_SLEEP": "0.2"}}
    tasks = make_tasks(6, {4: "error", 5: "fault"})
    with tune_db.TuneDB(tmp_path / "t.sqlite") as db:
        with RayPool("fake_timing:FakeBackend", cluster.address, timeout=60, runtime_env=env) as pool:
            device = pool.start()
            measure(pool, pending(tasks, db, device.gpu), db)
        rows = {row.name: row for row in db.rows()}
    assert device.gpu == "Fake GPU" and set(rows) == {t.name for t in tasks}
    assert rows["k_t4"].status == "failed" and "planted error" in rows["k_t4"].error
    assert rows["k_t5"].status == "failed" and "SIGSEGV" in rows["k_t5"].error
    for task in tasks[:4]:
        assert rows[task.name].status == "ok" and rows[task.name].median_ms == fake_figures(task).median_ms
    assert len(log.read_text().splitlines()) == 6 + 1  # the fault is tried twice

"""The tuning workers on two real GPUs: candidates spread over both, planted faults contained."""
import pytest

from gemmdsl import tune, tune_db
from gemmdsl.tune_workers import LocalPool, Task, measure

pytestmark = pytest.mark.gpu
SIZE = (2048, 2048, 2048)
TEMPLATE = """\
gemm v3 {
    problem  { a: f32 row; b: f32 row; c: f32 row; epilogue: alpha_beta; bounds: exact; }
    block    { tile: 128x128x8; raster: {row,group(8)}; }
    threads  { warps: 4x2; lanes: 4x8 row; micro: 4x4; repeat: 2x2 block; }
    smem a   { order: km; pad: {0,4}; }
    pipeline { stages: 2; copy: registers; fragments: double; }
}
"""


@pytest.fixture
def two_gpus():
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs 2 GPUs")
    return ["0", "1"]


def test_two_gpus_time_candidates_and_contain_a_fault_and_a_hang(two_gpus, tmp_path):
    report = tune.screen(tune.expand(TEMPLATE, "v3.tgemm"), [SIZE], min_warps=0, path="v3.tgemm")
    tasks = tune.timing_tasks(report.timeable, [SIZE], 20, 5, "v3.tgemm")
    plants = [Task(tune_db.spec_hash(f"gemm p {{ {kind} }}"), SIZE, f"planted_{kind}",
                   f"gemm p {{ {kind} }}\n// plant: {kind}", "planted", 20, 5) for kind in ("fault", "hang")]
    with tune_db.TuneDB(tmp_path / "t.sqlite") as db, LocalPool("fake_timing:PlantedGpuBackend", two_gpus, 30.0) as pool:
        pool.start()
        measure(pool, plants + tasks, db)
        rows = {row.name: row for row in db.rows()}
    assert rows["planted_fault"].status == "failed" and "CUDA error" in rows["planted_fault"].error
    assert rows["planted_hang"].status == "timeout"
    timed = [rows[task.name] for task in tasks]
    assert len(timed) >= 2 and all(row.status == "ok" and row.median_ms > 0 for row in timed)
    assert {row.worker.rsplit("/", 1)[1] for row in rows.values()} == {"gpu0", "gpu1"}

"""scripts/gpu_suite.py: the GPU suite in resumable pieces, checked on a small suite of its own (no GPU)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_suite.py"

SUITE = '''
import time, pytest

@pytest.mark.gpu
def test_passes():
    pass

@pytest.mark.gpu
def test_fails():
    assert False

@pytest.mark.gpu
def test_skips():
    pytest.skip("no reason")

@pytest.mark.gpu
def test_slow():
    time.sleep({slow})

def test_not_gpu():
    assert False
'''


def suite(tmp_path: Path, slow: float) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: a GPU test\n")
    path = tmp_path / "test_suite.py"
    path.write_text(SUITE.replace("{slow}", str(slow)))
    return path


def gpu_suite(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def outcomes(state: Path) -> dict[str, str]:
    return {nodeid.split("::")[-1]: record["outcome"]
            for nodeid, record in json.loads(state.read_text())["outcomes"].items()}


def test_a_run_records_every_gpu_test_and_a_second_run_has_nothing_left(tmp_path):
    tests, state = suite(tmp_path, 0), tmp_path / "state" / "state.json"
    first = gpu_suite("run", "--state", str(state), "--", str(tests))
    assert first.returncode == 1, first.stdout + first.stderr
    assert outcomes(state) == {"test_passes": "passed", "test_fails": "failed", "test_skips": "skipped",
                               "test_slow": "passed"}
    assert "2 passed, 1 failed, 1 skipped; 0 remaining" in first.stdout
    recorded = outcomes(state)
    again = gpu_suite("run", "--state", str(state), "--", str(tests))
    assert outcomes(state) == recorded
    assert "2 passed, 1 failed, 1 skipped; 0 remaining" in again.stdout
    summary = gpu_suite("summary", "--state", str(state))
    assert summary.returncode == 1 and "test_fails: failed" in summary.stdout


def test_a_spent_budget_stops_between_tests_and_the_next_run_resumes(tmp_path):
    tests, state = suite(tmp_path, 0), tmp_path / "state.json"
    gpu_suite("run", "--state", str(state), "--budget", "0", "--", str(tests))
    assert len(outcomes(state)) == 1
    assert "3 remaining" in gpu_suite("summary", "--state", str(state)).stdout
    for _ in range(3):
        gpu_suite("run", "--state", str(state), "--budget", "0", "--", str(tests))
    assert len(outcomes(state)) == 4
    assert "0 remaining" in gpu_suite("summary", "--state", str(state)).stdout


def test_a_test_in_flight_at_the_hard_limit_is_recorded_killed_and_not_run_again(tmp_path):
    tests, state = suite(tmp_path, 60), tmp_path / "state.json"
    slow = ("--budget", "0", "--kill-after", "5", "--", "-k", "slow", str(tests))
    killed = gpu_suite("run", "--state", str(state), *slow)
    assert killed.returncode == 1 and "killed after" in killed.stderr
    assert outcomes(state) == {"test_slow": "killed"}
    again = gpu_suite("run", "--state", str(state), *slow)
    assert "killed after" not in again.stderr and outcomes(state) == {"test_slow": "killed"}

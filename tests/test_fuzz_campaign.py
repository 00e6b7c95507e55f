"""scripts/fuzz_campaign.py: hangs and dead workers are recorded and replaced, and a campaign resumes."""
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "fuzz_campaign.py"


@pytest.fixture(scope="module")
def campaign():
    spec = importlib.util.spec_from_file_location("fuzz_campaign", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_hang_and_a_dead_worker_are_findings_and_the_rest_runs_on(campaign, tmp_path, monkeypatch):
    judge = campaign.run_mutant
    hanging, dying = campaign.mutant_at("1", 3), campaign.mutant_at("1", 4)  # 2 to 5: specs and a family, quick

    def run(mutant, workdir):  # the workers are forked after this patch, so they run it
        if mutant == hanging:
            time.sleep(600)
        if mutant == dying:
            os._exit(3)
        return judge(mutant, workdir)

    monkeypatch.setattr(campaign, "run_mutant", run)
    pool = campaign.Pool(2, "1", tmp_path, timeout=5.0, memory_bytes=2 ** 30)
    try:
        records = {item["index"]: item for item in pool.run([2, 3, 4, 5])}
    finally:
        pool.close()
    assert sorted(records) == [2, 3, 4, 5]
    assert records[3]["verdict"] == "hang"
    assert records[4]["verdict"] == "crash" and "exit status 3" in records[4]["detail"]
    assert {records[i]["verdict"] for i in (2, 5)} <= {"accepted", "refused"}


def test_a_campaign_resumes_and_summarizes(tmp_path):
    def run(count: int) -> str:
        done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--count", str(count), "--jobs", "1"],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run(4)
    assert "running 2 mutants (4 done before)" in run(6)
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["index"] for line in lines) == list(range(6))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["count"] == 6 and summary["tracebacks"] == summary["hangs"] == 0
    assert sum(summary["verdicts"].values()) == 6

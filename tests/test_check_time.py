"""`check --problem`'s predicted time: the family rule's cycles at the target's reference clock."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gemmdsl import check
from gemmdsl.cli import main
from gemmdsl.family import compile_family_path, explain
from gemmdsl.targets import ARCHS, HOPPER

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"


@pytest.fixture(autouse=True)
def no_ptxas(monkeypatch):
    """The analysis without ptxas's figures: the time does not read them, and nvcc is slow."""
    monkeypatch.setattr(check, "ptxas_figures", lambda artifacts: None)


def check_json(capsys, *args) -> dict:
    assert main(["check", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("family, problem", [("sgemm_family", (1000, 3000, 700)),
                                             ("hgemm_h100_family", (16, 8192, 8192)),
                                             ("hgemm_h100_family", (4096, 4096, 4096))])
def test_a_member_is_predicted_the_time_its_family_explains(capsys, family, problem):
    text = "x".join(map(str, problem))
    explanation = check_json(capsys, str(SPECS / f"{family}.gemmf"), "--problem", text)
    member = explanation["member"]
    row = next(row for row in explanation["members"] if row["member"] == member)
    time = check_json(capsys, str(SPECS / f"{member}.gemm"), "--problem", text)["predicted_time"]
    assert explanation["predicted_time"] == time
    assert time["cycles"] == row["cycles"] > 0
    hopper = ARCHS[90]  # priced on the reference GPU's profile (gemmdsl/profiles/h200.json)
    assert (time["gpu"], time["sms"], time["clock_mhz"]) == (hopper.reference_gpu, 132, hopper.reference_clock_mhz)
    assert time["microseconds"] == pytest.approx(time["cycles"] / hopper.reference_clock_mhz, abs=0.005)


def test_a_decode_call_is_predicted_at_hbm_bandwidth():
    """16x8192x8192 BF16 moves its 128 MiB of B at the memory floor: HBM's rate as the profile measured it (the H200's
    4.79 TB/s), after the call's fixed latency."""
    time = explain(compile_family_path(SPECS / "hgemm_h100_family.gemmf"), (16, 8192, 8192))["predicted_time"]
    moved = 2 * (16 * 8192 + 8192 * 8192) + 4 * 16 * 8192  # bf16 A and B, f32 C
    assert time["memory_floor"]
    streaming = time["microseconds"] - HOPPER.call_latency_ns / 1e3
    assert moved / (streaming * 1e-6) == pytest.approx(HOPPER.hbm_tbps * 1e12, rel=0.01)


def test_the_reports_print_the_time(capsys):
    assert main(["check", str(SPECS / "sgemm_v3.gemm"), "--problem", "2048x2048x2048"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^predicted time: [0-9,]+\.\d\d us: [0-9,]+ cycles of the cycle model on the H200's 132 "
                     r"SMs at 1770 MHz \(docs/analysis\.md\)$", out, re.M)
    assert main(["check", str(SPECS / "sgemm_family.gemmf"), "--problem", "16x4096x4096"]) == 0
    assert re.search(r"^  predicted time: [0-9,]+\.\d\d us: ", capsys.readouterr().out, re.M)

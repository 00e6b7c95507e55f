"""`check --problem`'s predicted time: the family rule's cycles at the target's reference clock."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gemmdsl import check
from gemmdsl.cli import main
from gemmdsl.compiler import compile_text
from gemmdsl.family import compile_family_path, explain
from gemmdsl.paths.dequant.kernel import DecodeConfig
from gemmdsl.quant_layout import QuantFormat
from gemmdsl.targets import ARCHS, HOPPER
from quant_cases import spec_text

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


@pytest.mark.parametrize("family, percent", [("hgemm_h100_family", "gemv_tensor_hbm_percent"),
                                             ("tf32_h100_family", "tma_hbm_percent")])
def test_a_decode_call_is_predicted_at_hbm_bandwidth(family, percent):
    """16x8192x8192 moves its B at the memory floor, after the call's fixed latency: BF16's 128 MiB at the rate the
    GEMV tensor member's loads stream at, TF32's 256 MiB at the rate the wgmma member's TMA k-tiles stream at (the
    profile's HBM rate, the H200's 4.79 TB/s, times its `gemv_tensor_hbm_percent` and `tma_hbm_percent`)."""
    time = explain(compile_family_path(SPECS / f"{family}.gemmf"), (16, 8192, 8192))["predicted_time"]
    element = 2 if family.startswith("hgemm") else 4
    moved = element * (16 * 8192 + 8192 * 8192) + 4 * 16 * 8192  # A and B, f32 C
    assert time["memory_floor"]
    streaming = time["microseconds"] - HOPPER.call_latency_ns / 1e3
    rate = HOPPER.hbm_tbps * 1e12 * getattr(HOPPER, percent) / 100
    assert moved / (streaming * 1e-6) == pytest.approx(rate, rel=0.01)


def test_the_reports_print_the_time(capsys):
    assert main(["check", str(SPECS / "sgemm_v3.gemm"), "--problem", "2048x2048x2048"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^predicted time: [0-9,]+\.\d\d us: [0-9,]+ cycles of the cycle model on the H200's 132 "
                     r"SMs at 1770 MHz \(docs/analysis\.md\)$", out, re.M)
    assert main(["check", str(SPECS / "sgemm_family.gemmf"), "--problem", "16x4096x4096"]) == 0
    assert re.search(r"^  predicted time: [0-9,]+\.\d\d us: ", capsys.readouterr().out, re.M)


# The dequantizing decode kernel's times on the H200 (docs/performance.md, "Quantized weights": the shipped
# kernel, scripts/quant_bench.py, 2026-11-29): (spec's format, rows of A per block, k-slice, M, N, K, us). M = 8
# and the 8 x 28672 x 8192 call took no part in fitting targets.DECODE_STEP_CYCLES.
DECODE_TIMES = [
    ("s4_g128", 8, 2048, 1, 8192, 8192, 13.5), ("s4_g128", 8, 2048, 8, 28672, 8192, 41.3),
    ("s4_g128", 16, 2048, 16, 8192, 28672, 56.7), ("s4_g128", 32, 1024, 128, 28672, 8192, 318.2),
    ("s8_channel", 8, 2048, 8, 8192, 8192, 21.6), ("s8_channel", 16, 2048, 16, 28672, 8192, 71.1),
    ("e4m3_channel", 32, 1024, 64, 8192, 28672, 156.6),
]


@pytest.mark.parametrize("fmt, rows, k_slice, m, n, k, measured", DECODE_TIMES)
def test_a_dequantizing_decode_call_is_predicted_near_its_measured_time(fmt, rows, k_slice, m, n, k, measured):
    """The decode kernel's k-slices side by side, each k-step at the cycles fitted on the H200, and the call's
    latency: within 15% of the time measured (the memory floor alone said 7.1 us where 16 x 8192 x 8192 ran
    19.8)."""
    weight, scales = fmt.split("_")
    config = DecodeConfig(QuantFormat(weight, "bf16", 128 if scales == "g128" else None), "bf16",
                          m_tiles=rows // 8, k_slice=k_slice)
    time = check.spec_time(compile_text(spec_text("decode", config), "decode.gemm"), (m, n, k))
    assert time["microseconds"] == pytest.approx(measured, rel=0.15)

"""The per-GPU profiles the cycle model prices with (gemmdsl/gpu_profile.py, docs/calibration.md), and
`gemmdsl calibrate` without a GPU."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gemmdsl.gpu_profile import (FITTED, REFERENCE_PROFILES, ProfileError, load_profile, profile_for,
                                 profile_names)
from gemmdsl.targets import ARCHS, HBM_BYTES_PER_CLOCK, HOPPER, L2_BYTES_PER_CLOCK_PER_SM

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gemmdsl.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("name", profile_names())
def test_every_shipped_profile_reads_and_its_per_clock_figures_follow_from_its_clock(name):
    profile = load_profile(name)
    assert profile.sm == 90 and profile.sms == 132
    clock = profile.clock_mhz * 1e6
    assert abs(profile.hbm_bytes_per_clock - profile.hbm_tbps * 1e12 / clock) <= 0.5
    assert abs(profile.l2_bytes_per_clock_per_sm - profile.l2_tbps * 1e12 / clock / profile.sms) <= 0.5
    assert profile.launch_cycles == round(profile.launch_ns * profile.clock_mhz / 1e3)
    assert all(getattr(profile, key) > 0 for key in FITTED)


@pytest.mark.parametrize("name", profile_names())
def test_every_fitted_figure_of_a_shipped_profile_says_where_it_came_from(name):
    """Each key of `fitted` is named in its `source` (a `prefix_*` there names every key it begins), so that no
    figure loses its provenance when the text is edited."""
    fitted = json.loads((ROOT / "gemmdsl" / "profiles" / f"{name}.json").read_text())["fitted"]
    source = fitted["source"]
    prefixes = [word[:-1] for word in source.replace(",", " ").split() if word.endswith("_*")]
    unnamed = [key for key in fitted if key != "source" and key not in source
               and not any(key.startswith(prefix) for prefix in prefixes)]
    assert not unnamed, f"{name}.json's fitted source does not name {unnamed}"


def test_the_h100_profile_keeps_the_figures_the_model_had_before_profiles():
    h100 = load_profile("h100_sxm")
    assert (h100.hbm_bytes_per_clock, h100.l2_bytes_per_clock_per_sm, h100.clock_mhz) == (1909, 38, 1755)
    assert h100.launch_cycles == 10_700


def test_sm_90_prices_on_its_reference_gpu_and_the_model_reads_it():
    assert profile_for(90) == load_profile(REFERENCE_PROFILES[90]) == HOPPER  # no $GEMMDSL_GPU in the tests
    assert HBM_BYTES_PER_CLOCK[90] == HOPPER.hbm_bytes_per_clock
    assert L2_BYTES_PER_CLOCK_PER_SM[90] == HOPPER.l2_bytes_per_clock_per_sm
    assert (ARCHS[90].reference_sms, ARCHS[90].reference_clock_mhz) == (HOPPER.sms, HOPPER.clock_mhz)
    assert profile_for(80) is None  # no profile: targets.py's datasheet rates


def test_a_profile_of_another_architecture_is_refused(tmp_path):
    data = json.loads((ROOT / "gemmdsl" / "profiles" / "h200.json").read_text())
    path = tmp_path / "ampere.json"
    path.write_text(json.dumps({**data, "sm": 80}))
    with pytest.raises(ProfileError, match="is for sm_80, not sm_90"):
        profile_for(90, str(path))


def test_a_calibrated_profile_takes_its_fitted_terms_from_the_reference_gpu(tmp_path):
    data = json.loads((ROOT / "gemmdsl" / "profiles" / "h200.json").read_text())
    del data["fitted"]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**data, "hbm_tbps": 2.0}))
    mine = load_profile(str(path))
    assert mine.hbm_tbps == 2.0 and mine.name == "mine"
    assert all(getattr(mine, key) == getattr(HOPPER, key) for key in FITTED)


@pytest.mark.parametrize("text, message", [("{", "not a GPU profile"), ('{"gpu": "x"}', "not a GPU profile")])
def test_a_profile_that_does_not_read_is_an_error_naming_its_file(tmp_path, text, message):
    path = tmp_path / "broken.json"
    path.write_text(text)
    with pytest.raises(ProfileError, match=message) as caught:
        load_profile(str(path))
    assert str(path) in str(caught.value)


def test_an_unknown_profile_name_lists_the_shipped_ones():
    with pytest.raises(ProfileError, match="shipped: h100_sxm, h200"):
        load_profile("nonsense")


def test_the_cli_refuses_a_bad_gemmdsl_gpu_without_a_traceback():
    done = run_cli("check", "specs/sgemm_v3.gemm", "--no-ptxas", env={"GEMMDSL_GPU": "nonsense"})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: $GEMMDSL_GPU: no GPU profile named 'nonsense'")


def test_gemmdsl_gpu_chooses_the_profile_a_family_is_priced_with():
    """The same decode call on the H100's profile and the H200's: the memory floor, which sets it, moves with HBM."""
    args = ("check", "specs/hgemm_h100_bf16c_family.gemmf", "--problem", "16x8192x8192", "--no-ptxas", "--json")
    h100 = json.loads(run_cli(*args, env={"GEMMDSL_GPU": "h100_sxm"}).stdout)["predicted_time"]
    h200 = json.loads(run_cli(*args).stdout)["predicted_time"]
    assert (h100["gpu"], h100["clock_mhz"], h200["gpu"], h200["clock_mhz"]) == ("H100 80GB HBM3", 1755, "H200", 1770)
    assert h100["memory_floor"] and h200["memory_floor"]
    assert h100["microseconds"] > 1.3 * h200["microseconds"]  # 3.35 against 4.79 TB/s


def test_calibrate_without_a_gpu_says_so():
    done = run_cli("calibrate")
    if done.returncode == 0:
        pytest.skip("a GPU is present: calibrate measured it")
    assert done.returncode == 1 and "Traceback" not in done.stderr and done.stderr.startswith("error: ")

"""The tuner's ranking against H100 measurements (tests/fixtures/tune_h100), priced on the H100's profile as the
measurements were made there (gemmdsl/profiles/h100_sxm.json), and the study tool's pieces."""
import importlib.util
import json
import os
import subprocess
import sys
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "tune_h100"

spec = importlib.util.spec_from_file_location("tune_ranking", ROOT / "scripts" / "tune_ranking.py")
tune_ranking = importlib.util.module_from_spec(spec)
sys.modules["tune_ranking"] = tune_ranking  # dataclasses look their module up
spec.loader.exec_module(tune_ranking)

# What docs/tuning.md reports for the shipped model (in-sample Spearman, gap of the best of the
# top 8 to the best measured, in percent). A model change that ranks worse fails here; one that ranks better
# should raise these figures and docs/tuning.md's together.
REPORTED = {
    "sgemm_warp": (0.70, 0.0),
    "sgemm_h100": (0.72, 0.0),
    "sgemm_space": (0.85, 0.0),
    # wgmma: the families' cycle model, its ring round trip calibrated on tf32_h100 (both sizes) alone
    "tf32_h100": (0.91, 0.0),
    "tf32_h100_2048": (0.91, 0.0),
    "hgemm_h100_bf16c": (0.90, 0.0),  # held out
    "hgemm_h100_bf16c_2048": (0.89, 0.0),  # held out
    "hgemm_h100": (0.85, 0.0),  # held out; 4096^3, f32 C through direct stores
    "hgemm_h100_2048": (0.84, 0.0),  # held out; 2048^3 (one tile per SM)
    # mma.sync: paths/mma_sync/cycles.py, its form chosen on hgemm_mma, its shared-instruction rate
    # fitted on tf32_mma (which alone it changes); scored on ptxas's registers and spills (recorded in the
    # fixtures, nvcc 13.0.88), as tune ranks mma.sync candidates with nvcc on PATH
    "hgemm_mma": (0.71, 0.0),
    "tf32_mma": (0.77, 0.0),
    # held out (timed after the model was settled; re-timed after T15 changed the 3xTF32 split): both targets
    # missed (on the estimate alone 0.32 and 15.6%)
    "sgemm_3xtf32_mma": (0.53, 2.9),
    # wgmma 3xTF32: timed after the model's consumer wait was set (one 8192^3 measurement) and counted its adds
    # (0.95 and 0.0% before a lone consumer's wait was counted in full, which the H200's 64x128 member was fitted on)
    "sgemm_3xtf32_h100": (0.94, 1.13),
    "sgemm_3xtf32_h100_2048": (0.89, 0.0),
    # wgmma BF16 over 1-4 consumer warpgroups, held out: the model ranks 3 consumers of 192x256 first, which
    # ran 10% behind the best; at 2048^3 the 0.7 target is missed
    "hgemm_h100_warpgroups": (0.78, 0.0),
    "hgemm_h100_warpgroups_2048": (0.66, 0.0),
}
CANDIDATES = {"sgemm_warp": 28, "sgemm_h100": 96, "sgemm_space": 512, "hgemm_h100": 32, "hgemm_h100_2048": 32,
              "tf32_h100": 17, "tf32_h100_2048": 17, "hgemm_h100_bf16c": 37, "hgemm_h100_bf16c_2048": 37,
              "hgemm_mma": 216, "tf32_mma": 288, "sgemm_3xtf32_mma": 160, "sgemm_3xtf32_h100": 84,
              "sgemm_3xtf32_h100_2048": 84, "hgemm_h100_warpgroups": 16, "hgemm_h100_warpgroups_2048": 16}


# The mma.sync templates scored on the register estimate alone (`tune --no-nvcc`, `tune_ranking.py --estimate`).
REPORTED_ON_THE_ESTIMATE = {"hgemm_mma": (0.70, 0.0), "tf32_mma": (0.74, 0.0), "sgemm_3xtf32_mma": (0.31, 15.6)}
# A study predicts every candidate (a few seconds per hundred): the larger ones run in the full run only, each
# model keeping a study in the quick set (sgemm_warp and sgemm_h100 for FMA, sgemm_3xtf32_mma for mma.sync).
QUICK_CANDIDATES = 200


def studies(names) -> list:
    return [pytest.param(name, marks=pytest.mark.slow if CANDIDATES[name] > QUICK_CANDIDATES else ())
            for name in sorted(names)]


H100_STUDY = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("tune_ranking", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["tune_ranking"] = module
spec.loader.exec_module(module)
result = module.study(json.loads(open(sys.argv[2]).read()), estimate=sys.argv[3] == "estimate")
print(json.dumps({"rho": result.rho, "gap": result.gap_pct, "points": len(result.points),
                  "top": sum(p.top for p in result.points)}))
"""


def study_on_the_h100(name: str, estimate: bool = False) -> dict:
    """tune_ranking.study of an H100 fixture in a process priced on the H100's profile (profiles are chosen once a
    process, by $GEMMDSL_GPU)."""
    done = subprocess.run([sys.executable, "-c", H100_STUDY, str(ROOT / "scripts" / "tune_ranking.py"),
                           str(FIXTURES / f"tune_{name}.json"), "estimate" if estimate else "model"],
                          capture_output=True, text=True, cwd=ROOT, check=True,
                          env={**os.environ, "GEMMDSL_GPU": "h100_sxm", "PYTHONPATH": str(ROOT)})
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", studies(REPORTED_ON_THE_ESTIMATE))
def test_on_the_estimate_alone_the_mma_sync_templates_rank_as_reported(name):
    result = study_on_the_h100(name, estimate=True)
    rho, gap = REPORTED_ON_THE_ESTIMATE[name]
    assert result["rho"] >= rho and result["gap"] <= gap + 0.05


@pytest.mark.parametrize("name", studies(REPORTED))
def test_the_shipped_model_ranks_the_h100_measurements_as_reported(name):
    result = study_on_the_h100(name)
    rho, gap = REPORTED[name]
    assert result["points"] == CANDIDATES[name]
    assert result["rho"] >= rho
    assert result["gap"] <= gap + 0.05
    assert result["top"] == tune_ranking.TOP


def test_spearman_uses_average_ranks_for_ties():
    assert tune_ranking.average_ranks([3, 1, 3, 2]) == [3.5, 1.0, 3.5, 2.0]
    assert tune_ranking.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert tune_ranking.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # ranks (1, 2.5, 2.5, 4) against (1, 3, 2, 4): 4.5 / sqrt(4.5 * 5)
    assert tune_ranking.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert math.isnan(tune_ranking.spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError):
        tune_ranking.spearman([1, 2], [1])


def test_svg_scatter_draws_one_marker_per_point_and_labels_the_axes():
    points = [(0.5, 40.0, False), (0.8, 52.5, True), (0.6, 45.0, False)]
    svg = tune_ranking.svg_scatter(points, "t <1>", "predicted score", "measured TFLOP/s", note="n")
    root = ET.fromstring(svg)  # well-formed, the title escaped
    ns = "{http://www.w3.org/2000/svg}"
    circles = root.findall(f"{ns}circle")
    assert len(circles) == len(points) + 2  # and the two legend markers
    assert sum(c.get("fill") == "#e67e22" for c in circles) == 1 + 1
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert "t <1>" in texts and "predicted score" in texts and "measured TFLOP/s" in texts
    # higher measurements are drawn higher up, larger scores further right
    data = [(float(c.get("cx")), float(c.get("cy"))) for c in circles[:3]]
    by_x = sorted(data)
    assert by_x[0][1] > by_x[1][1] > by_x[2][1]
    assert tune_ranking.nice_ticks(0.52, 0.87) == [0.5, 0.6, 0.7, 0.8, 0.9]


def test_one_svg_per_results_file_named_after_it(tmp_path):
    """A template timed at two sizes gives two plots (tune_T.json -> T.svg, tune_T_2048.json -> T_2048.svg)."""
    files = [str(FIXTURES / "tune_tf32_h100.json"), str(FIXTURES / "tune_tf32_h100_2048.json")]
    assert tune_ranking.main([*files, "--svg-dir", str(tmp_path)]) == 0
    titles = {path.name: ET.parse(path).getroot().find("{http://www.w3.org/2000/svg}text").text
              for path in tmp_path.iterdir()}
    assert sorted(titles) == ["tf32_h100.svg", "tf32_h100_2048.svg"]
    assert "at 4096x4096x4096" in titles["tf32_h100.svg"] and "at 2048x2048x2048" in titles["tf32_h100_2048.svg"]


def test_strip_keeps_the_timed_candidates_and_what_a_study_reads():
    data = {"template": "t.tgemm", "sizes": [[4096, 4096, 4096]], "candidates": [
        {"name": "k_t0", "status": "rejected", "detail": "no"},
        {"name": "k_t1", "status": "kept", "rank": 1, "prediction": {"score": 0.5}, "choices": "x",
         "measured": {"geomean_ms": 2.0, "geomean_tflops": 60.0, "geomean_pct_cublas": 90.0, "per_size": []}}]}
    stripped = tune_ranking.strip(data)
    assert [row["name"] for row in stripped["candidates"]] == ["k_t1"]
    assert "per_size" not in stripped["candidates"][0]["measured"] and stripped["template"] == "t.tgemm"

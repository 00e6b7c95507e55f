"""scripts/family_tables.py on a made-up study: the ratios, the regret and the prediction columns it derives from
member times (the study's JSON, scripts/family_study.py)."""
import importlib.util
import sys
from pathlib import Path

import pytest

from gemmdsl.cycles import choose, estimate
from gemmdsl.targets import ARCHS

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("family_tables", ROOT / "scripts" / "family_tables.py")
family_tables = importlib.util.module_from_spec(spec)
sys.modules["family_tables"] = family_tables
spec.loader.exec_module(family_tables)


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("|").split("|")]


@pytest.fixture(scope="module")
def bf16c():
    from gemmdsl.family import compile_family_path

    return compile_family_path(family_tables.FAMILY_FILES["hgemm_h100_bf16c"])


def test_a_study_s_tables_from_its_member_times(bf16c):
    """Two shapes: at the first the family ran its fastest member at half cuBLAS's time (2x); at the second it ran a
    member 50% slower than the fastest, at cuBLAS's time. Each member is timed at exactly its predicted time at the
    first shape, and at three times it at the second (the picked one at 1.5x the fastest)."""
    clock = ARCHS[90].reference_clock_mhz
    rows = []
    for scale, shape in ((1, (4096, 4096, 4096)), (3, (1024, 1024, 1024))):
        predicted = [estimate(model, *shape).cycles / clock / 1e3 for model in bf16c.models]  # ms
        picked = choose(bf16c.models, *shape)
        times = {f"member{i}": scale * t for i, t in enumerate(predicted)}
        fastest = min(times.values())
        family = fastest if scale == 1 else 1.5 * fastest
        times[f"member{picked}"] = family
        rows.append({"shape": list(shape), "chosen": picked, "members": [m.name for m in bf16c.models],
                     "cublas": 2 * family if scale == 1 else family, "family": family, **times})
    line = family_tables.tables(rows)[2]
    (family, shapes, geomean, _, _, _, total, _, _, _, _, within_5, _, worst, predicted_within_20, _) = cells(line)
    assert (family, shapes) == ("hgemm_h100_bf16c", "2")
    cublas, ran = (sum(row[key] for row in rows) for key in ("cublas", "family"))
    assert geomean == f"{2 ** 0.5:.3f}" and total == f"{cublas / ran:.3f}"
    assert (within_5, worst) == ("50%", "1.50")
    # the first shape's predictions are exact, the second's a third of the time: half of the pairs within 20%
    assert predicted_within_20 == "50%"

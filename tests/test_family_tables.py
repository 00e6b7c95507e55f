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

    return compile_family_path(family_tables.family_files()["hgemm_h100_bf16c"])


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


def load_script(name: str):
    found = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def test_the_fp8_families_are_found_by_their_first_member():
    assert family_tables.family_files()["fp8_rowwise"].name == "fp8_rowwise_family.gemmf"
    assert family_tables.family_files()["fp8_h100_fast"].name == "fp8_fast_family.gemmf"


def test_shapes_the_reference_refused_are_tabled_apart_from_the_ratios():
    """An FP8 study: torch._scaled_mm ran at 4096^3 and refused 1000x1000x1000 (K and N off 16), where the family ran
    a member 1.2x slower than the fastest. The ratios hold the first shape alone; the refused one has its own rows."""
    members = ["fp8_rowwise", "fp8_rowwise_128x192", "fp8_rowwise_128x64", "fp8_rowwise_64x128_sk"]
    reason = "RuntimeError: mat2 shape (1000x1000) must be divisible by 16"
    rows = [{"shape": [4096, 4096, 4096], "chosen": 0, "members": members, "cublas": 0.1, "family": 0.1,
             "member0": 0.1, "member1": 0.12},
            {"shape": [1000, 1000, 1000], "chosen": 2, "members": members, "reference_refused": reason,
             "family": 0.012, "member1": 0.011, "member2": 0.012, "member3": 0.010}]
    lines = family_tables.tables(rows, per_shape=True)
    assert cells(lines[2])[:2] == ["fp8_rowwise", "1"]
    at = lines.index("| family | shapes the reference refused | picked within 5% of fastest | worst regret | "
                     "family's total us |")
    assert cells(lines[at + 2]) == ["fp8_rowwise", "1", "0%", "1.20", "12.0"]
    assert cells(lines[-1]) == ["fp8_rowwise", "1000x1000x1000", "12.0", "fp8_rowwise_128x64", "1.20", reason]


def test_a_refused_reference_is_recorded_and_not_timed():
    """The study tries the library's call once per shape: where it raises, no reference launches, and why."""
    family_study = load_script("family_study")

    class Refusing:
        def library_call(self, a, b, c):
            def call():
                raise RuntimeError("Expected trailing dimension of mat1 to be divisible by 16\nmore")
            return call

    class Taking:
        def library_call(self, a, b, c):
            return lambda: None

    sets = [("a", "b", "c")] * 3
    assert family_study.reference_launches(Refusing(), sets) == (
        [], "RuntimeError: Expected trailing dimension of mat1 to be divisible by 16")
    launches, refused = family_study.reference_launches(Taking(), sets)
    assert len(launches) == 3 and refused is None


def test_the_study_s_shapes_hold_the_sampler_s_200_and_the_models_with_fp8_refusals_among_them():
    """`--shapes random:200:1 --shapes models`: 200 sampled shapes and the models' layers, each once; some sampled ones
    have K or N off 16, where torch._scaled_mm refuses FP8 operands and the FP8 families are timed alone."""
    family_study = load_script("family_study")
    from gemmdsl.family_kernel import read_shapes
    from gemmdsl.shape_sets import RandomShapes, shape_source

    sampled = shape_source("random:200:1")
    assert isinstance(sampled, RandomShapes)
    models = read_shapes(shape_source("models"))
    shapes = family_study.shapes_of(["random:200:1", "models"])
    assert set(sampled.shapes()) | set(models) == set(shapes) and len(shapes) == len(set(shapes))
    assert any(k % 16 or n % 16 for _, n, k in sampled.shapes())

"""The test suite's own machinery: the quick set of specs (tests/spec_sets.py), the slow marker's deselection
(tests/conftest.py) and the shared build cache (tests/build_cache.py)."""
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import build_cache
import spec_sets
from gemmdsl.frontend import load_spec
from gemmdsl.paths import path_of

ROOT = Path(__file__).resolve().parent.parent
PATH_NAMES = {"fma": "fma", "mma_sync": "mma.sync", "wgmma": "wgmma", "wgmma_fp8": "wgmma", "dequant": "dequant", "gemv": "gemv"}


def test_the_instruction_path_read_from_the_text_is_the_compilers():
    for path in sorted((ROOT / "specs").glob("*.gemm")):
        assert spec_sets.instruction_path(path.read_text()) == PATH_NAMES[path_of(load_spec(path)).name], path.stem


def test_the_quick_set_has_every_feature_of_the_shipped_specs_and_not_every_spec():
    names = [path.stem for path in sorted((ROOT / "specs").glob("*.gemm*"))]
    quick = spec_sets.quick_set()
    assert set().union(*(spec_sets.spec_features(name) for name in quick)) == \
        set().union(*(spec_sets.spec_features(name) for name in names))
    assert quick < set(names)


def collected(*options: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *options,
                           "tests/test_tune_ranking.py"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_slow_tests_run_with_full_or_when_selected_only():
    quick, full, slow = collected(), collected("--full"), collected("-m", "slow")
    study = "test_the_shipped_model_ranks_the_h100_measurements_as_reported[tf32_mma]"
    assert not any(study in line for line in quick) and any(study in line for line in full)
    assert sorted(quick + slow) == sorted(full) and slow


def test_a_build_is_made_once_for_everyone_waiting_on_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMDSL_TEST_CACHE", str(tmp_path))
    made = []
    started = threading.Barrier(4)

    def make(directory: Path):  # a build that takes a while: the others arrive meanwhile
        made.append(directory)
        time.sleep(0.2)
        (directory / "out").write_text("built")

    def build():
        started.wait()
        return build_cache.cached_build("kind", "key", make)

    results = []
    threads = [threading.Thread(target=lambda: results.append(build())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 1 and len(set(results)) == 1 and (results[0] / "out").read_text() == "built"
    assert build_cache.cached_build("kind", "other key", make) != results[0] and len(made) == 2


def test_a_failed_build_leaves_nothing_and_is_made_again(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMDSL_TEST_CACHE", str(tmp_path))

    def fail(directory: Path):
        (directory / "half").write_text("")
        raise RuntimeError("compiler error")

    with pytest.raises(RuntimeError, match="compiler error"):
        build_cache.cached_build("kind", "key", fail)
    assert [path.name for path in (tmp_path / "kind").iterdir() if path.suffix != ".lock"] == []
    built = build_cache.cached_build("kind", "key", lambda directory: (directory / "out").write_text("ok"))
    assert (built / "out").read_text() == "ok"

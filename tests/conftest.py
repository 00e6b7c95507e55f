"""Make the package importable, in pytest and the commands it starts, when pytest runs from a checkout
that is not pip-installed and from any directory;
skip GPU tests without a GPU; fixtures the GPU test modules share."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# The commands the tests start (`python -m gemmdsl.cli ...`) import this checkout too, from any directory.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` skip themselves when CuPy or a CUDA device is missing.

    Done at collection rather than in a fixture so that it also covers module-scoped
    fixtures, which would otherwise touch the GPU before a skip could happen.
    """
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    from gemmdsl.runtime import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def nvrtc_failures(monkeypatch, tmp_path):
    """verify() of a shipped spec built by NVRTC alone (GEMMDSL_COMPILER=nvrtc, an empty cubin cache) at one
    size: returns the results and the formatted failures."""
    def check(name: str, size: tuple[int, int, int]):
        from gemmdsl import runtime
        from gemmdsl.verify import format_result, verify

        monkeypatch.setenv("GEMMDSL_COMPILER", "nvrtc")
        monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path))
        results = verify(runtime.load(ROOT / "specs" / f"{name}.gemm"), [size], seed=5)
        return results, [format_result(result) for result in results if not result.passed]

    return check


@pytest.fixture(scope="module")
def load_kernel(tmp_path_factory):
    """Load each spec once for the module, caching cubins in a temporary directory."""
    from gemmdsl import runtime

    loaded = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GEMMDSL_CACHE", str(tmp_path_factory.mktemp("cubins")))

        def load(path):
            if path not in loaded:
                loaded[path] = runtime.load(path)
            return loaded[path]

        yield load


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="session")
def nvcc_build():
    """nvcc's build of a shipped spec for its target (`gemmdsl.build.build`), made once per test run:
    tests/test_nvcc.py, test_analysis.py and test_wgmma.py read the same ptxas figures, and each build
    takes seconds. Returns (artifacts, BuildResult)."""
    from gemmdsl.build import build
    from gemmdsl.compiler import compile_path

    built = {}

    def build_spec(path):
        if path not in built:
            artifacts = compile_path(path)
            built[path] = (artifacts, build(artifacts.cuda, artifacts.name, artifacts.spec.target.code))
        return built[path]

    return build_spec

"""Make the package importable, in pytest and the commands it starts, when pytest runs from a checkout
that is not pip-installed and from any directory; run the quick set on every core (`--full` adds the tests
marked `slow`); skip GPU tests without a GPU; fixtures the test modules share."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# The commands the tests start (`python -m gemmdsl.cli ...`) import this checkout too, from any directory.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true",
                     help="also run the tests marked `slow` (every shipped spec's builds, the full tuning studies)")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """With pytest-xdist installed, and no -n given, spread the tests over every core (-n auto). GPU runs
    (a -m expression naming `gpu`) stay in one process: their tests share the device and time kernels."""
    # An xdist worker runs this hook too, with -n cleared: without this guard each would start workers of its own.
    worker = hasattr(config, "workerinput") or os.environ.get("PYTEST_XDIST_WORKER")
    if worker or not config.pluginmanager.hasplugin("xdist") or config.option.numprocesses is not None:
        return
    if "gpu" not in (config.option.markexpr or "") and not config.option.collectonly:
        config.option.numprocesses = "auto"


def pytest_configure(config):
    import budget

    budget.FULL = config.getoption("--full")


def pytest_collection_modifyitems(config, items):
    """The quick set by default: tests marked `slow` are deselected unless --full, a -m expression (`pytest -m
    slow` runs them alone) or a test's node id on the command line asks for them. Tests marked `gpu` skip
    themselves when CuPy or a CUDA device is missing.

    Both are done at collection rather than in a fixture so that they also cover module-scoped
    fixtures, which would otherwise build or touch the GPU before a skip could happen.
    """
    named = any("::" in arg for arg in config.args)
    if not (config.getoption("--full") or config.option.markexpr or named):
        slow = [item for item in items if item.get_closest_marker("slow") is not None]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if item.get_closest_marker("slow") is None]
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
    """Load each spec once for the module, caching cubins in a temporary directory, or in
    $GEMMDSL_TEST_CUBINS where it is set (scripts/gpu_suite.py prebuilds every spec's cubin there on all
    cores, so that the suite does not build them one at a time)."""
    from gemmdsl import runtime

    loaded = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GEMMDSL_CACHE", os.environ.get("GEMMDSL_TEST_CUBINS") or str(tmp_path_factory.mktemp("cubins")))

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
    """nvcc's build of a shipped spec for its target (`gemmdsl.build.build`), made once for its source, gemmdsl's
    build commands and nvcc's release (tests/build_cache.py): tests/test_nvcc.py, test_analysis.py and
    test_wgmma.py read the same ptxas figures, and each build takes seconds. Returns (artifacts, BuildResult)."""
    import gemmdsl.build
    from build_cache import cached_build, tool_version
    from gemmdsl.build import BuildResult, build, find_nvcc, parse_ptxas
    from gemmdsl.compiler import compile_path

    commands = Path(gemmdsl.build.__file__).read_text()
    built = {}

    def build_spec(path):
        if path not in built:
            artifacts = compile_path(path)
            sm = artifacts.spec.target.code
            key = "\n".join([artifacts.cuda, artifacts.name, str(sm), commands, tool_version(find_nvcc() or "nvcc")])

            def make(directory):
                (directory / "nvcc.log").write_text(build(artifacts.cuda, artifacts.name, sm).log)

            log = (cached_build("nvcc", key, make) / "nvcc.log").read_text()
            built[path] = (artifacts, BuildResult(parse_ptxas(log, f"{artifacts.name}_kernel"), log=log))
        return built[path]

    return build_spec

"""The Python API without a GPU: gemmdsl.compile_spec, check_spec and choose_member (gemmdsl/api.py), and the
errors every entry point raises (gemmdsl.GemmdslError, naming what to install or the file and line at fault)."""
import subprocess
import sys
import types
from pathlib import Path

import pytest

import gemmdsl
from gemmdsl import runtime
from gemmdsl.errors import GemmdslError

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "sgemm_v3.gemm"
FAMILY = ROOT / "specs" / "sgemm_family.gemmf"
BAD_SPEC = """gemm bad {
    problem  { a: f32 row; b: f32 row; c: f32 row; }
    block    { tile: 128x128x8: }
}
"""


# --- errors of gemmdsl.load without a GPU ------------------------------------------------------------


def test_load_without_cupy_names_the_gpu_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ModuleNotFoundError
    with pytest.raises(GemmdslError, match=r"pip install 'gemmdsl\[gpu\]'"):
        gemmdsl.load(SPEC)


def test_a_family_without_cupy_names_the_gpu_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(GemmdslError, match=r"pip install 'gemmdsl\[gpu\]'"):
        gemmdsl.load(FAMILY)


def fake_cupy(error_name: str) -> types.ModuleType:
    """A CuPy whose runtime cannot count devices, failing with `error_name` as CuPy's CUDARuntimeError does."""
    class CUDARuntimeError(RuntimeError):
        pass

    def failing():
        raise CUDARuntimeError(f"{error_name}: CUDA driver version is insufficient for CUDA runtime version")

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(CUDARuntimeError=CUDARuntimeError,
                                                                    getDeviceCount=failing, getDevice=failing))
    return cupy


def test_load_with_a_driver_too_old_says_what_is_wrong(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy("cudaErrorInsufficientDriver"))
    with pytest.raises(GemmdslError) as caught:
        gemmdsl.load(SPEC)
    message = str(caught.value)
    assert "cudaErrorInsufficientDriver" in message and "driver" in message and "update" in message
    assert message == runtime.gpu_unavailable_reason()  # the CLI's words: one path


def test_spec_errors_from_load_come_first_and_carry_their_position(monkeypatch, tmp_path):
    """Without a GPU too: the spec is compiled before the GPU is asked for."""
    monkeypatch.setitem(sys.modules, "cupy", None)
    path = tmp_path / "bad.gemm"
    path.write_text(BAD_SPEC)
    with pytest.raises(GemmdslError) as caught:
        gemmdsl.load(path)
    text = str(caught.value)
    assert f"{path}:3:31: error: expected ';'" in text
    assert "    3 |     block    { tile: 128x128x8: }" in text
    assert "^" in text.splitlines()[2]


def test_spec_errors_of_text_name_the_given_file(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(GemmdslError, match=r"^mine\.gemm:3:31: error: "):
        gemmdsl.load("mine.gemm", text=BAD_SPEC)

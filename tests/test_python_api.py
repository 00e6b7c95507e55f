"""The Python API without a GPU: gemmdsl.compile_spec, check_spec and choose_member (gemmdsl/api.py; that it
loads no CuPy is in tests/test_paths.py), and the errors every entry point raises (gemmdsl.GemmdslError, naming
what to install or the file and line at fault)."""
import json
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


# --- compile_spec, check_spec, choose_member: the GPU-free API ----------------------------------------


def golden(name):
    return {path.name: path.read_text() for path in sorted((ROOT / "generated").glob(f"{name}.*"))}


@pytest.mark.parametrize("path", [SPEC, FAMILY], ids=lambda path: path.name)
def test_compile_spec_gives_the_files_compile_writes(path):
    compiled = gemmdsl.compile_spec(path)
    assert compiled.files == golden(compiled.name)  # generated/ holds `gemmdsl compile --no-nvcc`'s output
    assert json.loads(compiled.metadata_json) == compiled.metadata


def test_compile_spec_writes_the_set_into_a_directory(tmp_path):
    compiled = gemmdsl.compile_spec(SPEC, output=tmp_path / "out")
    assert {path.name: path.read_text() for path in (tmp_path / "out").iterdir()} == compiled.files
    assert compiled.write(tmp_path / "again") == [tmp_path / "again" / name for name in compiled.files]


def test_compile_spec_takes_text_and_a_target():
    compiled = gemmdsl.compile_spec("mine.gemm", text=SPEC.read_text().replace("sgemm_v3", "mine"), target="sm_80")
    assert compiled.name == "mine" and compiled.metadata["target"] == "sm_80"


def test_compile_spec_renders_warnings_with_their_line():
    (warning,) = gemmdsl.compile_spec(ROOT / "specs" / "transpose_nopad.gemm").warnings
    assert "warning: 2-way bank conflict on A stores" in warning and "smem a" in warning and "hint:" in warning


def cli_json(capsys, monkeypatch, *argv):
    """What `gemmdsl check --json` prints, in this process, without ptxas's figures."""
    from gemmdsl import check
    from gemmdsl.cli import main

    monkeypatch.setattr(check, "ptxas_resources", lambda path: None)
    monkeypatch.setattr("gemmdsl.build.ptxas_compiler", lambda: None)
    assert main(["check", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("path, problem", [(SPEC, (1024, 2048, 512)), (ROOT / "specs" / "hgemm_h100.gemm", (4096,) * 3),
                                           (FAMILY, (16, 4096, 4096))], ids=lambda x: getattr(x, "name", None))
def test_check_spec_is_what_check_json_prints(path, problem, capsys, monkeypatch):
    expected = cli_json(capsys, monkeypatch, str(path), "--problem", "x".join(map(str, problem)))
    assert json.loads(json.dumps(gemmdsl.check_spec(path, problem))) == expected
    assert gemmdsl.check_spec(path, "x".join(map(str, problem))) == gemmdsl.check_spec(path, problem)


def test_choose_member_says_which_member_runs_and_why():
    choice = gemmdsl.choose_member(FAMILY, (16, 4096, 4096))
    assert choice == gemmdsl.check_spec(FAMILY, (16, 4096, 4096))
    assert choice["member"] in [row["member"] for row in choice["members"]]
    assert choice["reason"].startswith(f"{choice['member']}: ")


def test_the_api_is_the_packages():
    from gemmdsl import api

    assert (gemmdsl.compile_spec, gemmdsl.check_spec, gemmdsl.choose_member) == (api.compile_spec, api.check_spec,
                                                                                api.choose_member)
    assert issubclass(api.UsageError, gemmdsl.GemmdslError)


# Every error of the API is a GemmdslError that names the file and line at fault, or what to pass or install.
@pytest.mark.parametrize("call, message", [
    (lambda tmp: gemmdsl.compile_spec(tmp / "bad.gemm"), r"bad\.gemm:3:31: error: expected ';'.*\n.*\n.*\^"),
    (lambda tmp: gemmdsl.check_spec(tmp / "bad.gemm"), r"bad\.gemm:3:31: error: expected ';'"),
    (lambda tmp: gemmdsl.compile_spec(tmp / "missing.gemm"), r"missing\.gemm:1:1: error: cannot read file"),
    (lambda tmp: gemmdsl.compile_spec(tmp / "spec.txt"), r"spec\.txt:1:1: error: not a \.gemm file"),
    (lambda tmp: gemmdsl.compile_spec(SPEC, target="sm_99"), r"unknown target 'sm_99'; the targets are sm_80, "),
    (lambda tmp: gemmdsl.compile_spec(3), r"expected the path of a \.gemm spec or \.gemmf family"),
    (lambda tmp: gemmdsl.check_spec(SPEC, (0, 1, 1)), r"a problem is three positive integers"),
    (lambda tmp: gemmdsl.check_spec(SPEC, "64x64"), r"a problem is three positive integers"),
    (lambda tmp: gemmdsl.check_spec(SPEC, (2**32, 64, 64)), r"M=4294967296 is more than"),
    (lambda tmp: gemmdsl.check_spec(SPEC, (100, 100, 100)), r"not a multiple of the block tile 128x128x8"),
    (lambda tmp: gemmdsl.choose_member(FAMILY, (2**32, 1, 1)), r"M=4294967296 is more than 2147483647"),
    (lambda tmp: gemmdsl.choose_member(SPEC, (64, 64, 64)), r"choose_member takes a \.gemmf kernel family"),
    (lambda tmp: gemmdsl.compile_spec(SPEC, output=tmp / "bad.gemm"), r"cannot write .*bad\.gemm: Not a directory"),
])
def test_every_api_error_is_a_gemmdsl_error_saying_where_or_what(call, message, tmp_path):
    (tmp_path / "bad.gemm").write_text(BAD_SPEC)
    with pytest.raises(GemmdslError, match=message):
        call(tmp_path)


def test_ptxas_figures_without_nvcc_name_the_toolkit(monkeypatch):
    monkeypatch.setattr("gemmdsl.api.find_nvcc", lambda: None)
    with pytest.raises(GemmdslError, match="ptxas=True needs nvcc on PATH: install the CUDA toolkit"):
        gemmdsl.check_spec(SPEC, ptxas=True)

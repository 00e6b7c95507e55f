"""The compile command: outputs, determinism, atomic writes, and errors without tracebacks."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gemmdsl.cli import main
from gemmdsl.compiler import compile_path

ROOT = Path(__file__).resolve().parent.parent
V3 = ROOT / "specs" / "sgemm_v3.gemm"


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gemmdsl.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_same_spec_gives_the_same_bytes(tmp_path):
    first, second = tmp_path / "1", tmp_path / "2"
    assert main(["compile", str(V3), "-o", str(first), "--no-nvcc"]) == 0
    assert main(["compile", str(V3), "-o", str(second), "--no-nvcc"]) == 0
    for name in ("sgemm_v3.cu", "sgemm_v3.h", "sgemm_v3.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()


def test_launcher_and_header_are_in_the_output(tmp_path):
    assert main(["compile", str(V3), "-o", str(tmp_path), "--no-nvcc"]) == 0
    cu = (tmp_path / "sgemm_v3.cu").read_text()
    assert 'extern "C" cudaError_t sgemm_v3_launch(const float* A, const float* B, float* C, int M, int N, int K,' in cu
    assert "//       pipeline { stages: 2; copy: registers; fragments: double; }" in cu
    assert "#ifndef __CUDACC_RTC__" in cu


def test_bad_spec_exits_1_with_a_diagnostic_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.gemm"
    bad.write_text(V3.read_text().replace("warps: 4x2", "warps: 4x3"))
    out = tmp_path / "out"
    done = run_cli("compile", str(bad), "-o", str(out), "--no-nvcc")
    assert done.returncode == 1
    assert f"{bad}:6:" in done.stderr and "error:" in done.stderr and "^" in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists() or not any(out.iterdir())


def test_one_bad_spec_does_not_stop_the_others(tmp_path):
    bad = tmp_path / "bad.gemm"
    bad.write_text("gemm bad {")
    done = run_cli("compile", str(bad), str(V3), "-o", str(tmp_path / "out"), "--no-nvcc")
    assert done.returncode == 1
    assert (tmp_path / "out" / "sgemm_v3.cu").exists()


def test_unknown_arch_and_emit_kind_are_usage_errors(tmp_path):
    for args in (("--arch", "sm_75"), ("--emit", "cu,sass")):
        done = run_cli("compile", str(V3), "-o", str(tmp_path), *args)
        assert done.returncode == 2 and "Traceback" not in done.stderr


def test_arch_override_changes_the_target(tmp_path):
    assert main(["compile", str(V3), "-o", str(tmp_path), "--no-nvcc", "--arch", "sm_80"]) == 0
    assert '"target": "sm_80"' in (tmp_path / "sgemm_v3.json").read_text()


def test_every_tool_reports_bad_input_as_diagnostics_with_status_1(tmp_path):
    bad = tmp_path / "bad.gemm"
    bad.write_text("gemm bad {\n  block { tile: 128x128x8 }\n}\n")
    for tool in ("check", "verify", "bench", "profile"):
        done = run_cli(tool, str(bad))
        assert done.returncode == 1, tool
        assert f"{bad}:2:26: error: expected ';'" in done.stderr, tool
        assert "Traceback" not in done.stderr, tool


def test_a_reader_that_stops_early_gets_no_traceback():
    """`gemmdsl check ... | head`: the closed pipe ends the command quietly, with a shell's SIGPIPE status."""
    specs = [str(ROOT / "specs" / f"{name}.gemm") for name in ("sgemm_v1", "sgemm_v3", "sgemm_h100", "hgemm_mma",
                                                                 "large_128x256")]  # 90 KB of JSON: over a pipe's buffer
    process = subprocess.Popen([sys.executable, "-m", "gemmdsl.cli", "check", *specs, "--json"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "PATH": ""})  # no nvcc: no ptxas runs, a quick check
    assert process.stdout.read(10)
    process.stdout.close()  # like `head` exiting
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141 and "Traceback" not in stderr, stderr


def _unwritable_directories(tmp_path):
    """Output directories the file system refuses, each a different reason."""
    regular = tmp_path / "a_file"
    regular.write_text("")
    yield regular
    yield Path("/dev/null")
    yield Path("/proc/self")
    read_only = Path("/sys/kernel")  # refused even to root
    if not read_only.is_dir() or os.access(read_only, os.W_OK):
        read_only = tmp_path / "read_only"
        read_only.mkdir()
        read_only.chmod(0o555)
    yield read_only


def test_an_unwritable_output_directory_is_an_error_not_a_traceback(tmp_path):
    for directory in _unwritable_directories(tmp_path):
        if directory.is_dir() and os.access(directory, os.W_OK) and directory.parts[1] != "proc":
            continue  # root writes through the mode bits
        done = run_cli("compile", str(V3), "-o", str(directory), "--no-nvcc")
        assert done.returncode == 1, directory
        assert "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(f"gemmdsl: error: cannot write {directory}"), done.stderr
        assert done.stderr.count("\n") == 1, done.stderr


def test_a_refused_file_leaves_no_file_of_the_spec_behind(tmp_path):
    """NAME.h cannot be written (a directory has its name): NAME.cu and NAME.json are not written either."""
    (tmp_path / "sgemm_v3.h").mkdir()
    done = run_cli("compile", str(V3), "-o", str(tmp_path), "--no-nvcc")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"cannot write {tmp_path / 'sgemm_v3.h'}: Is a directory" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sgemm_v3.h"]


def test_outputs_have_the_mode_the_umask_gives(tmp_path):
    for umask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        out = tmp_path / oct(umask)
        previous = os.umask(umask)
        try:
            assert main(["compile", str(V3), "-o", str(out), "--no-nvcc"]) == 0
        finally:
            os.umask(previous)
        assert {(p.stat().st_mode & 0o777) for p in out.iterdir()} == {mode}


def test_arch_takes_every_target_the_language_takes(tmp_path):
    from gemmdsl.targets import TARGETS

    wgmma = ROOT / "specs" / "hgemm_h100.gemm"
    for target in map(str, TARGETS):
        spec = wgmma if target.endswith("a") else V3
        out = tmp_path / target
        assert main(["compile", str(spec), "-o", str(out), "--no-nvcc", "--arch", target]) == 0, target
        assert f'"target": "{target}"' in (out / f"{spec.stem}.json").read_text()


def test_arch_override_names_only_real_targets(tmp_path):
    done = run_cli("compile", str(ROOT / "specs" / "hgemm_h100.gemm"), "--arch", "sm_80", "-o", str(tmp_path),
                   "--no-nvcc")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "sm_80 has no wgmma" in done.stderr
    assert "sm_80 replaces the spec's sm_90a" in done.stderr
    assert "sm_80a" not in done.stderr


def test_two_specs_of_one_name_are_refused_with_both_files_named(tmp_path):
    twin = tmp_path / "twin.gemm"
    twin.write_text(V3.read_text().replace("fragments: double", "fragments: single"))
    out = tmp_path / "out"
    done = run_cli("compile", str(V3), str(twin), "-o", str(out), "--no-nvcc")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"{twin}:2:6: error: kernel name 'sgemm_v3' is also that of {V3}, earlier on the command line" in done.stderr
    assert (out / "sgemm_v3.cu").read_text() == compile_path(V3).cuda  # the first one's output stands


def test_a_family_named_twice_is_refused(tmp_path):
    family = ROOT / "specs" / "sgemm_family.gemmf"
    done = run_cli("compile", str(family), str(family), "-o", str(tmp_path), "--no-nvcc")
    assert done.returncode == 1
    assert f"error: kernel name 'sgemm_family' is also that of {family}" in done.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_compile_reports_ptxas_for_every_kernel_of_the_file_the_narrow_rungs_included(tmp_path):
    """A checked cp.async spec's file holds 8- and 4-byte kernels listed under entries.narrow in NAME.json (a list
    of kernels, not a name): compile prints each one's ptxas figures instead of failing on them."""
    done = run_cli("compile", str(ROOT / "specs" / "hgemm_mma.gemm"), "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    for entry in ("hgemm_mma_kernel_8byte: ptxas:", "hgemm_mma_kernel_4byte: ptxas:", "hgemm_mma_kernel_scalar: ptxas:"):
        assert entry in done.stdout, done.stdout


def test_an_exact_spec_whose_tile_does_not_divide_the_default_problem_compiles(tmp_path):
    """compile analyses such a spec at the default problem rounded up to its tile, not at one it refuses."""
    text = V3.read_text()
    for old, new in (("tile: 128x128x8;", "tile: 96x128x8;"), ("micro: 4x4;", "micro: 3x4;"),
                     ("load a   { vector: 4; }", "load a   { vector: 1; }")):
        assert old in text
        text = text.replace(old, new)
    spec = tmp_path / "exact96.gemm"
    spec.write_text(text.replace("gemm sgemm_v3", "gemm exact96"))
    done = subprocess.run([sys.executable, "-m", "gemmdsl.cli", "compile", str(spec), "-o", str(tmp_path / "out"),
                           "--no-nvcc"], capture_output=True, text=True)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "4128x4096x4096" in (tmp_path / "out" / "exact96.cu").read_text()

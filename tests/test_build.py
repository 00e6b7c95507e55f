"""The build stage without a GPU: where NVRTC finds its headers, which compiler gives ptxas's figures,
and NVRTC's figures read from its log (CuPy's NVRTC faked; tests/test_gpu.py runs the real one)."""
from __future__ import annotations

import argparse
import io
import sys
import types
from pathlib import Path

import pytest

from gemmdsl import build, check
from gemmdsl.check import parse_problem

ROOT = Path(__file__).resolve().parent.parent

# `nvrtc -Xptxas=-v` on sgemm_v3's .cu for sm_90 (NVRTC 13.1.115, 2026-11-26): NVRTC builds no host code,
# so no "bytes smem" line for the launcher's stub and no gmem figures beyond this.
NVRTC_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'sgemm_v3_kernel' for 'sm_90'
ptxas info    : Function properties for sgemm_v3_kernel
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 127 registers, used 1 barriers
ptxas info    : Compile time = 154.796 ms
"""


class FakeNvrtc(types.ModuleType):
    """cupy.cuda.nvrtc as `build.nvrtc_compile` calls it."""

    class NVRTCError(Exception):
        pass

    def __init__(self, log: str = NVRTC_LOG, fails: bool = False):
        super().__init__("cupy.cuda.nvrtc")
        self.log, self.fails, self.flags, self.destroyed = log, fails, None, False

    version = (13, 1)

    def getVersion(self):
        return self.version

    def createProgram(self, source, name, headers, include_names):
        return ("program", source)

    def compileProgram(self, program, flags):
        self.flags = tuple(flags)
        if self.fails:
            raise self.NVRTCError("NVRTC_ERROR_COMPILATION (6)")

    def getCUBIN(self, program):
        return b"\x7fELF"

    def getProgramLog(self, program):
        return self.log

    def destroyProgram(self, program):
        self.destroyed = True


@pytest.fixture
def fake_nvrtc(monkeypatch):
    nvrtc = FakeNvrtc()
    cuda = types.ModuleType("cupy.cuda")
    cuda.nvrtc = nvrtc
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    for name, module in (("cupy", cupy), ("cupy.cuda", cuda), ("cupy.cuda.nvrtc", nvrtc)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(build, "cuda_include_dirs", lambda: ["/toolkit/include"])
    return nvrtc


def test_nvrtc_is_given_the_directory_of_the_16_bit_headers(monkeypatch, tmp_path):
    toolkit = tmp_path / "toolkit"
    (toolkit / "include").mkdir(parents=True)
    monkeypatch.setenv("CUDA_PATH", str(toolkit))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(build, "find_nvcc", lambda: None)
    monkeypatch.setattr(build, "DEFAULT_TOOLKIT", tmp_path / "none")
    monkeypatch.setattr(build.sys, "path", [str(tmp_path / "site")])
    wheel = tmp_path / "site" / "nvidia" / "cu13" / "include"
    wheel.mkdir(parents=True)
    for header in ("cuda_fp16.h", "cuda_bf16.h"):
        (wheel / header).write_text("")
    assert build.cuda_include_dirs() == [str(wheel)]  # the toolkit lacks them: the pip wheel's
    for header in ("cuda_fp16.h", "cuda_bf16.h"):
        (toolkit / "include" / header).write_text("")
    assert build.cuda_include_dirs() == [str(toolkit / "include")]  # CUDA_PATH first


def test_ptxas_figures_come_from_nvcc_then_nvrtc_then_nowhere(monkeypatch, fake_nvrtc):
    monkeypatch.setattr(build, "find_nvcc", lambda: "/usr/bin/nvcc")
    assert build.ptxas_compiler() == "nvcc"
    monkeypatch.setattr(build, "find_nvcc", lambda: None)
    assert build.ptxas_compiler() == "nvrtc"
    for name in ("cupy", "cupy.cuda", "cupy.cuda.nvrtc"):
        monkeypatch.setitem(sys.modules, name, None)  # `import` of each raises ImportError
    assert build.ptxas_compiler() is None


@pytest.fixture
def nvrtc_in_process(monkeypatch):
    """`nvrtc_ptxas_log` run here instead of in its child process (whose cupy is the real one, or none)."""
    seen = []

    def log(source, target):
        seen.append(target)
        return build.nvrtc_compile(source, target, ("-Xptxas=-v",))[1]

    monkeypatch.setattr(build, "nvrtc_ptxas_log", log)
    return seen


def test_nvrtc_figures_are_read_from_its_ptxas_log(fake_nvrtc, nvrtc_in_process):
    resources = build.kernel_resources("// the kernels", "sgemm_v3", 90, "nvrtc")
    assert (resources.registers, resources.spills, resources.stack, resources.static_smem) == (127, 0, 0, 0)
    assert fake_nvrtc.flags == ("-arch=sm_90", *build.COMPILER_OPTIONS, "-Xptxas=-v", "-I/toolkit/include")
    assert fake_nvrtc.destroyed
    build.kernel_resources("// the kernels", "hgemm_h100", "90a", "nvrtc", entry="sgemm_v3_kernel")
    assert nvrtc_in_process == ["sm_90", "sm_90a"]  # an arch-specific target as NVRTC spells it


def test_the_nvrtc_child_process_prints_the_log_or_fails_with_nvrtcs_message(fake_nvrtc, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("// the kernels"))
    build.print_nvrtc_ptxas_log("sm_90")
    assert capsys.readouterr().out == NVRTC_LOG and fake_nvrtc.flags[0] == "-arch=sm_90"
    fake_nvrtc.fails, fake_nvrtc.log = True, "kernel.cu(3): error: identifier \"undefined_name\" is undefined"
    monkeypatch.setattr(sys, "stdin", io.StringIO("// bad"))
    with pytest.raises(SystemExit, match="(?s)NVRTC failed.*undefined_name"):
        build.print_nvrtc_ptxas_log("sm_90")


def test_the_nvrtc_child_process_runs_with_the_compute_cache_off(monkeypatch):
    """Its command and environment (the real child needs CuPy: tests/test_gpu.py runs it)."""
    runs = []

    def run(command, **options):
        runs.append((command, options))
        return types.SimpleNamespace(returncode=0, stdout=NVRTC_LOG, stderr="")

    monkeypatch.setattr(build.subprocess, "run", run)
    assert build.nvrtc_ptxas_log("// the kernels", "sm_90a") == NVRTC_LOG
    (command, options), = runs
    assert command[0] == sys.executable and command[-1] == "sm_90a" and "print_nvrtc_ptxas_log" in command[2]
    assert options["input"] == "// the kernels" and options["env"]["CUDA_CACHE_DISABLE"] == "1"
    monkeypatch.setattr(build.subprocess, "run", lambda command, **options: types.SimpleNamespace(
        returncode=1, stdout="", stderr="NVRTC failed (NVRTC_ERROR_COMPILATION (6)):\nkernel.cu(3): error"))
    with pytest.raises(build.BuildError, match="NVRTC_ERROR_COMPILATION"):
        build.nvrtc_ptxas_log("// bad", "sm_90")


def test_an_nvrtc_failure_carries_its_log(fake_nvrtc):
    fake_nvrtc.fails, fake_nvrtc.log = True, "kernel.cu(3): error: identifier \"undefined_name\" is undefined"
    with pytest.raises(build.BuildError, match=r"(?s)NVRTC failed \(NVRTC_ERROR_COMPILATION \(6\)\).*undefined_name"):
        build.nvrtc_compile("// bad", "sm_90")
    assert fake_nvrtc.destroyed


def test_check_without_nvcc_reports_nvrtcs_figures_and_says_so(monkeypatch, fake_nvrtc, nvrtc_in_process, capsys,
                                                               tmp_path):
    monkeypatch.setattr(build, "find_nvcc", lambda: None)
    monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path))  # ptxas's figures from NVRTC, not from another test's cache
    args = argparse.Namespace(specs=[str(ROOT / "specs" / "sgemm_v3.gemm")], problem=parse_problem("4096x4096x4096"),
                              json=False, verbose=False, no_ptxas=False)
    assert check.check_main(args) == 0
    out, err = capsys.readouterr()
    assert "note: ptxas's figures from NVRTC 13.1 (nvcc not on PATH)" in err and "more registers" not in err
    assert "ptxas 127, no spills" in " ".join(out.split())  # verdicts wrap
    assert fake_nvrtc.flags[0] == "-arch=sm_90"


def test_check_with_an_nvrtc_before_13_1_says_what_it_costs_and_the_fix(monkeypatch, fake_nvrtc, nvrtc_in_process,
                                                                          capsys, tmp_path):
    monkeypatch.setattr(build, "find_nvcc", lambda: None)
    monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path))
    fake_nvrtc.version = (13, 0)
    args = argparse.Namespace(specs=[str(ROOT / "specs" / "sgemm_v3.gemm")], problem=parse_problem("4096x4096x4096"),
                              json=False, verbose=False, no_ptxas=False)
    assert check.check_main(args) == 0
    err = capsys.readouterr().err
    assert "note: ptxas's figures from NVRTC 13.0 (nvcc not on PATH)" in err
    assert "note: NVRTC 13.0 builds take more registers than nvcc's (fixed in NVRTC 13.1): " \
           "pip install 'nvidia-cuda-nvrtc>=13.1', or put nvcc on PATH" in err


@pytest.mark.parametrize("with_nvrtc, says", [(True, "(`gemmdsl check` reads ptxas's figures from NVRTC)"),
                                              (False, "(registers unknown)")])
def test_compile_without_nvcc_says_where_the_registers_are(with_nvrtc, says, monkeypatch, tmp_path, capsys):
    from gemmdsl import cli

    monkeypatch.setattr(cli, "find_nvcc", lambda: None)
    monkeypatch.setattr(cli, "nvrtc_available", lambda: with_nvrtc)
    assert cli.main(["compile", str(ROOT / "specs" / "sgemm_v3.gemm"), "-o", str(tmp_path)]) == 0
    assert f"gemmdsl: note: nvcc not found on PATH; writing CUDA source only {says}" in capsys.readouterr().err

"""Every spec's .cu (kernel and host launcher) compiles with nvcc for its target; CI has nvcc."""
import json
from pathlib import Path

import pytest

from gemmdsl.build import BuildError, build, find_nvcc, parse_ptxas
from gemmdsl.cli import main
from gemmdsl.compiler import compile_path

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.gemm"))

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not on PATH")
pytestmark = [pytest.mark.nvcc, needs_nvcc]


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_spec_compiles_without_spills(spec):
    artifacts = compile_path(spec)
    result = build(artifacts.cuda, artifacts.name, artifacts.spec.target.sm)
    entries = [entry for entry in artifacts.metadata["entries"].values() if entry is not None]
    for resources in [result.resources] + [parse_ptxas(result.log, entry) for entry in entries[1:]]:
        assert 0 < resources.registers <= 255
        assert resources.spills == 0 and resources.stack == 0


def test_compile_command_reports_ptxas_and_emits_ptx_and_cubin(tmp_path, capsys):
    spec = ROOT / "specs" / "sgemm_v3.gemm"
    assert main(["compile", str(spec), "-o", str(tmp_path), "--emit", "cu,ptx,cubin"]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["sgemm_v3.cu", "sgemm_v3.cubin", "sgemm_v3.json", "sgemm_v3.ptx"]
    metadata = json.loads((tmp_path / "sgemm_v3.json").read_text())
    assert metadata["ptxas"]["registers"] > 0
    assert "ptxas:" in capsys.readouterr().out


def test_a_failing_nvcc_run_is_an_error_that_shows_nvccs_message():
    with pytest.raises(BuildError, match="nvcc failed"):
        build("this is not CUDA", "broken", 90)


def test_parse_ptxas_reads_the_named_entry_only():
    log = """ptxas info    : Compiling entry function 'other_kernel' for 'sm_90'
ptxas info    : Used 32 registers
ptxas info    : Compiling entry function 'k_kernel' for 'sm_90'
ptxas info    : Function properties for k_kernel
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
"""
    resources = parse_ptxas(log, "k_kernel")
    assert (resources.registers, resources.stack, resources.spill_stores, resources.spill_loads,
            resources.static_smem) == (255, 8, 4, 12, 1024)

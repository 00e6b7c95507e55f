"""Tensor-core specs on the GPU: every case `verify` makes (packed and padded operands, alpha/beta,
poisoned C and guard regions, wide-range data for 3xTF32) at odd shapes, held to each
precision's tolerance (gemmdsl/precisions.py), and PyTorch tensors in and out.

The specs target sm_80; on a newer GPU they are built for it (runtime.build_target)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gemmdsl.frontend import load_spec
from gemmdsl.paths import path_of
from gemmdsl.verify import format_result, verify

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
# mma.sync specs; the wgmma ones (Hopper's own path, no scalar variant) are in tests/test_gpu_wgmma.py.
MMA_SPECS = [path for path in sorted((ROOT / "specs").glob("*.gemm"))
             if path_of(load_spec(path)).name == "mma_sync"]
# (333, 520, 136): N a multiple of 8 with edges on both axes, so edge blocks copy whole vectors.
ODD_SHAPES = [(333, 517, 129), (333, 520, 136), (1000, 1000, 1000), (64, 48, 40)]
# TF32 and 3xTF32 with fragments from ldmatrix (k contiguous in shared memory: A mk, column-major B nk).
F32_LDMATRIX_SPECS = ["tf32_ldmatrix", "tf32_ldmatrix_nt", "sgemm_3xtf32_ldmatrix", "sgemm_3xtf32_ldmatrix_nt"]


@pytest.mark.parametrize("path", MMA_SPECS, ids=lambda path: path.stem)
def test_mma_spec_is_correct_at_odd_shapes(path, load_kernel):
    kernel = load_kernel(path)
    results = verify(kernel, ODD_SHAPES, seed=3)
    failed = [format_result(result) for result in results if not result.passed]
    assert results and not failed, "\n".join(failed)
    # Odd leading dimensions run the scalar variant; padded ones the vector kernel: both ran.
    assert {result.entry for result in results} == {kernel.requirements.launch.entries.vector,
                                                          kernel.requirements.launch.entries.scalar}


def test_the_f32_ldmatrix_specs_are_among_those_verified():
    assert set(F32_LDMATRIX_SPECS) <= {path.stem for path in MMA_SPECS}


@pytest.mark.parametrize("name", F32_LDMATRIX_SPECS)
def test_f32_ldmatrix_spec_is_correct_on_whole_tiles(name, load_kernel):
    """512x512x512 is whole block tiles and k-tiles of every one of them: the interior kernel, its
    fragments all from the ldmatrix and 32-bit loads the emulation in test_mma_layout.py checks."""
    kernel = load_kernel(ROOT / "specs" / f"{name}.gemm")
    results = verify(kernel, [(512, 512, 512)], seed=5)
    failed = [format_result(result) for result in results if not result.passed]
    assert results and not failed, "\n".join(failed)


def test_bf16_kernel_takes_and_returns_torch_tensors(load_kernel):
    torch = pytest.importorskip("torch")
    kernel = load_kernel(ROOT / "specs" / "hgemm_mma.gemm")
    a = torch.randn(256, 96, device="cuda").to(torch.bfloat16)
    b = torch.randn(96, 200, device="cuda").to(torch.bfloat16)
    c = kernel(a, b)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float32 and c.shape == (256, 200)
    reference = a.double() @ b.double()
    assert ((c.double() - reference).norm() / reference.norm()).item() < 1e-5


def test_nvrtc_builds_a_16_bit_kernel(nvrtc_failures):
    """cuda_bf16.h is found for NVRTC too (it has no built-in copy and searches nothing by default)."""
    results, failed = nvrtc_failures("hgemm_mma", (333, 517, 129))
    assert results and not failed, "\n".join(failed)


def test_tune_builds_times_and_writes_an_mma_sync_winner_that_verifies(tmp_path, monkeypatch):
    """`gemmdsl tune` end to end on an mma.sync template (scored by paths/mma_sync/cycles.py, built by
    nvcc where present, whose ptxas check keeps mma.sync candidates with small spills): the winner it writes is a
    spec that compiles, runs and verifies."""
    import shutil

    from gemmdsl import runtime
    from gemmdsl.cli import main

    monkeypatch.setenv("GEMMDSL_CACHE", str(tmp_path / "cubins"))
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "gemmdsl" / "templates" / "tf32_mma.tgemm").read_text()
    text = (text.replace("tile: {128x128,128x256,256x128}x{16,32}", "tile: 256x128x32")
                .replace("warps: {2x2,2x4,4x2}", "warps: 4x2").replace("repeat: {2x8,4x4,4x8}", "repeat: 4x8")
                .replace("swizzle: {xor(2,2,3),xor(3,2,3)}; read: {ldmatrix,32}", "swizzle: xor(3,2,3); read: ldmatrix")
                .replace("pad: {4,8}", "pad: 8").replace("stages: {3,4}", "stages: 3"))
    (tmp_path / "t.tgemm").write_text(text)
    args = ["tune", "t.tgemm", "--sizes", "1024x1024x1024", "--json", "t.json"]
    assert main(args + ([] if shutil.which("nvcc") else ["--no-nvcc"])) == 0
    timed = {row["name"] for row in json.loads((tmp_path / "t.json").read_text())["candidates"]
            if row.get("measured")}
    assert len(timed) == 2  # single and double fragments; the double one spills 72 bytes under ptxas 13.0
    kernel = runtime.load(tmp_path / "t_best.gemm")
    results = verify(kernel, [(1024, 1024, 1024), (2048, 1024, 512)], seed=7)  # bounds: exact
    failed = [format_result(result) for result in results if not result.passed]
    assert results and not failed, "\n".join(failed)

"""Each .cu stops a device pass for a GPU its kernels cannot run on, with an #error that names the flag to
build with (emit.arch_guard): a wgmma file built with plain `nvcc -arch=sm_80` compiled silently into kernels
that trap."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gemmdsl.targets import INSTRUCTION_TARGETS, TargetName

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "generated"
GUARD = re.compile(r"#if defined\(__CUDA_ARCH__\) && "
                   r"(?:__CUDA_ARCH__ < (\d+)0|!defined\(__CUDA_ARCH_FEAT_SM(\d+)_ALL\))\n"
                   r"#error \"(\w+)\.cu: its kernels use ([^\"]*)\"\n#endif\n")
# What each instruction looks like in the emitted text.
SPELLED = {"ldmatrix": "ldmatrix.sync", "cp.async": "cp.async.", "mma.sync": "mma.sync.aligned",
           "float2 and float4 atomicAdd": "atomicAdd(reinterpret_cast<float",
           "wgmma, setmaxnreg and TMA": "wgmma.mma_async"}


def guard_of(cuda: str) -> TargetName | None:
    """The oldest target the file's guard lets a device pass compile for, or None without a guard."""
    found = GUARD.findall(cuda)
    assert len(found) <= 1
    if not found:
        return None
    plain, specific, _, _ = found[0]
    return TargetName(int(plain)) if plain else TargetName(int(specific), True)


@pytest.mark.parametrize("path", sorted(GENERATED.glob("*.cu")), ids=lambda path: path.stem)
def test_every_shipped_file_guards_what_its_instructions_need(path):
    cuda = path.read_text()
    needed = [INSTRUCTION_TARGETS[name] for name, text in SPELLED.items() if text in cuda]
    guard = guard_of(cuda)
    if not needed:
        assert guard is None
        return
    assert guard == max(needed)
    assert cuda.index("#if defined(__CUDA_ARCH__)") < cuda.index("__global__")


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("name, flag, stops", [
    ("hgemm_h100", "-arch=sm_80", True),
    ("hgemm_h100", "-arch=sm_90", True),
    ("hgemm_h100", "-arch=sm_90a", True),  # its compute_90 pass
    ("hgemm_h100", "-gencode=arch=compute_90a,code=sm_90a", False),
    ("hgemm_h100_mma", "-arch=sm_75", True),
    ("hgemm_h100_mma", "-arch=sm_80", False),
])
def test_nvcc_stops_a_build_for_a_gpu_the_kernels_cannot_run_on(name, flag, stops, tmp_path):
    """`nvcc -E` runs every pass's preprocessor, the guard's included, without compiling: seconds per build."""
    command = ["nvcc", flag, "-std=c++17", "-E", str(GENERATED / f"{name}.cu"), "-o", str(tmp_path / "out")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert (done.returncode != 0) == stops, done.stderr[-2000:]
    if stops:
        needs = "-gencode=arch=compute_90a,code=sm_90a" if name == "hgemm_h100" else "sm_80 and later"
        assert f"#error \"{name}.cu: its kernels use" in done.stderr and needs in done.stderr, done.stderr[-2000:]

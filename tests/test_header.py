"""NAME.h: `compile` writes it beside NAME.cu; it declares exactly the launchers the .cu defines, with
their parameter lists, and compiles as C (f32 kernels) and as C++."""
import json
import re
import subprocess
from pathlib import Path

import pytest

from gemmdsl.abi import launcher_parameters
from gemmdsl.build import find_nvcc
from gemmdsl.cli import main
from gemmdsl.emit.header import emit_header
from gemmdsl.frontend import load_path
from gemmdsl.plan import plan_kernel

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.gemm"))
V3 = ROOT / "specs" / "sgemm_v3.gemm"
BF16_SPEC = ROOT / "tests" / "fixtures" / "hgemm_mma.gemm"
PROTOTYPE = re.compile(r"^cudaError_t (\w+)\(([^;]*)\);", re.MULTILINE)

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not on PATH")


def prototypes(header: str) -> dict[str, str]:
    """Launcher name -> parameter list, with the header's line wrapping undone."""
    return {name: " ".join(parameters.split()) for name, parameters in PROTOTYPE.findall(header)}


def nvcc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([find_nvcc(), *args], cwd=cwd, capture_output=True, text=True)


def test_compile_writes_a_header_declaring_every_launcher(tmp_path):
    assert main(["compile", str(V3), "-o", str(tmp_path), "--no-nvcc"]) == 0
    header = (tmp_path / "sgemm_v3.h").read_text()
    assert header.count("#ifndef GEMMDSL_SGEMM_V3_H\n#define GEMMDSL_SGEMM_V3_H\n") == 1
    assert '#ifdef __cplusplus\nextern "C" {\n#endif' in header
    spec, _ = load_path(V3)
    names = plan_kernel(spec).launch.launchers
    assert prototypes(header) == {names[key]: parameters for key, parameters in launcher_parameters(spec).items()}
    assert "#define sgemm_v3_BLOCK_K 8\n" in header and "#define sgemm_v3_BOUNDS_EXACT 1\n" in header


def test_a_bf16_header_includes_cuda_bf16_and_stops_a_c_compiler():
    spec, _ = load_path(BF16_SPEC)
    header = emit_header(plan_kernel(spec))
    assert "#include <cuda_bf16.h>\n" in header and "cuda_fp16.h" not in header
    assert '#ifndef __cplusplus\n#error "hgemm_mma.h: the launchers take __nv_bfloat16' in header
    assert "cudaError_t hgemm_mma_launch(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C," in header


@pytest.mark.nvcc
@needs_nvcc
def test_bf16_header_compiles_as_cpp_and_refuses_c(tmp_path):
    spec, _ = load_path(BF16_SPEC)
    (tmp_path / "hgemm_mma.h").write_text(emit_header(plan_kernel(spec)))
    for language in ("c++", "c"):
        (tmp_path / f"use.{language}").write_text('#include "hgemm_mma.h"\n')
    assert nvcc("-c", "-x", "c++", "use.c++", "-o", "cpp.o", cwd=tmp_path).returncode == 0
    as_c = nvcc("-c", "-x", "c", "use.c", "-o", "c.o", cwd=tmp_path)
    assert as_c.returncode != 0 and "which the CUDA headers define for C++ only" in as_c.stderr


@pytest.mark.nvcc
@needs_nvcc
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_header_matches_the_cu_and_compiles_as_c(spec, tmp_path):
    """One translation unit with the header first and the .cu after it: a launcher whose parameters
    differ is a second C-linkage overload, which nvcc rejects. PTX only (no ptxas): the host side is
    what is checked. f32 headers also compile as C; 16-bit ones stop a C compiler with their #error."""
    name = spec.stem
    assert main(["compile", str(spec), "-o", str(tmp_path), "--no-nvcc"]) == 0
    metadata = json.loads((tmp_path / f"{name}.json").read_text())
    sm = metadata["target"].removeprefix("sm_")
    (tmp_path / "both.cu").write_text(f'#include "{name}.h"\n#include "{name}.cu"\n')
    both = nvcc("-c", "-std=c++17", "-gencode", f"arch=compute_{sm},code=compute_{sm}", "both.cu", "-o", "both.o",
                cwd=tmp_path)
    assert both.returncode == 0, both.stderr
    declared = set(prototypes((tmp_path / f"{name}.h").read_text()))
    symbols = subprocess.run(["nm", "--defined-only", "both.o"], cwd=tmp_path, capture_output=True, text=True)
    defined = {line.split()[-1] for line in symbols.stdout.splitlines() if line.split()[-2:-1] == ["T"]}
    assert declared and declared == {symbol for symbol in defined if symbol.startswith(f"{name}_launch")}
    (tmp_path / "use.c").write_text(f'#include "{name}.h"\nint main(void) {{ return {name}_BLOCK_M > 0 ? 0 : 1; }}\n')
    as_c = nvcc("-c", "-x", "c", "-Xcompiler", "-std=c11,-Wall,-Werror", "use.c", "-o", "use.o", cwd=tmp_path)
    if set(metadata["dtypes"].values()) == {"f32"}:
        assert as_c.returncode == 0, as_c.stderr
    else:  # __half and __nv_bfloat16 exist in C++ only: the header says so instead of failing obscurely
        assert as_c.returncode != 0 and "include it from C++" in as_c.stderr

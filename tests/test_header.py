"""NAME.h: `compile` writes it beside NAME.cu, for a spec and for a kernel family; it declares exactly
the launchers the .cu defines, with their parameter lists, and compiles as C (f32 kernels) and as C++."""
import json
import re
import subprocess
from pathlib import Path

import pytest

from gemmdsl.abi import launcher_parameters
from gemmdsl.build import find_nvcc
from gemmdsl.cli import main
from gemmdsl.emit.header import emit_header
from gemmdsl.family import compile_family, compile_family_path
from gemmdsl.frontend import load_path
from gemmdsl.ir import DType, Operand
from gemmdsl.paths import plan_kernel
from gemmdsl.source import SourceFile
from spec_sets import spec_params

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.gemm")) + sorted((ROOT / "specs").glob("*.gemmf"))
V3 = ROOT / "specs" / "sgemm_v3.gemm"
FAMILY = ROOT / "specs" / "sgemm_family.gemmf"
BF16_SPEC = ROOT / "tests" / "fixtures" / "hgemm_mma.gemm"
PROTOTYPE = re.compile(r"^cudaError_t (\w+)\(([^;]*)\);", re.MULTILINE)
# A launcher's definition in a .cu (a family's members' sit in their namespaces, with C linkage still).
DEFINITION = re.compile(r'^\s*extern "C" cudaError_t (\w+)\(([^)]*)\) \{', re.MULTILINE)

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not on PATH")


def prototypes(header: str) -> dict[str, str]:
    """Launcher name -> parameter list, with the header's line wrapping undone."""
    return {name: " ".join(parameters.split()) for name, parameters in PROTOTYPE.findall(header)}


def definitions(cuda: str) -> dict[str, str]:
    """Launcher name -> parameter list of every `extern "C"` launcher the .cu defines."""
    found = DEFINITION.findall(cuda)
    assert len({name for name, _ in found}) == len(found), "a launcher defined twice"
    return dict(found)


def macros(header: str) -> dict[str, int]:
    return {name: int(value) for name, value in re.findall(r"^#define (\w+) (\d+)$", header, re.MULTILINE)}


def batched_family(directory: Path):
    """A family of two batched members (copies of batched_v3 under other names)."""
    batched = (ROOT / "specs" / "batched_v3.gemm").read_text()
    (directory / "wide.gemm").write_text(batched.replace("gemm batched_v3", "gemm batched_wide"))
    (directory / "small.gemm").write_text(batched.replace("gemm batched_v3", "gemm batched_small"))
    return compile_family(SourceFile(str(directory / "f.gemmf"), "family fb { use wide.gemm; use small.gemm; }"))


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


def test_a_family_header_declares_its_launchers_and_every_member_s():
    family = compile_family_path(FAMILY)
    header = family.header
    assert header.count("#ifndef GEMMDSL_SGEMM_FAMILY_H\n#define GEMMDSL_SGEMM_FAMILY_H\n") == 1
    expected = {f"sgemm_family_{kind}": parameters for kind, parameters in
                (("launch", family.metadata["parameters"]["launcher"]),
                 ("launch_ld", family.metadata["parameters"]["launcher_ld"]))}
    for member in family.members:
        spec = member.artifacts.spec
        names = member.artifacts.plan.launch.launchers
        expected |= {names[key]: parameters for key, parameters in launcher_parameters(spec).items()}
    assert prototypes(header) == expected
    assert prototypes(header) == definitions(family.cuda)
    assert "\n// Member sgemm_h100 (sgemm_h100.gemm: 128x128x8 tiles, bounds: exact)." in header


def test_a_family_header_states_what_every_call_may_rely_on():
    """Any shape (a checked member takes it); every member's vector alignment; the leading dimensions
    that every checked member takes (the exact sgemm_h100's tighter limit does not count: a call it
    refuses goes to a checked member)."""
    family = compile_family_path(FAMILY)
    constants = macros(family.header)
    assert {constants[f"sgemm_family_{axis}_MULTIPLE"] for axis in "MNK"} == {1}
    assert constants["sgemm_family_BOUNDS_EXACT"] == 0 and "sgemm_family_BLOCK_M" not in constants
    checked = [member.artifacts.plan.launch.requirements for member in family.members if not member.model.exact]
    for op in (operand.value for operand in Operand):
        assert constants[f"sgemm_family_{op.upper()}_MAX_LD"] == min(r.max_leading_dimension[op] for r in checked)
    # checked_32x128 reads A two floats at a time, checked_128x32 B: every member's vector kernel needs 4
    assert {constants[f"sgemm_family_{op}_VECTOR_ELEMENTS"] for op in "ABC"} == {4}
    text = " ".join(line.removeprefix("// ") for line in family.header.splitlines())
    assert ("else a call that sgemm_h100 refuses goes to the member the rule picks among sgemm_any, checked_64x64, "
            "checked_32x128, checked_128x32, sgemm_short_k, sgemm_decode_8x256, which run a kernel with one-element "
            "accesses)") in text


def test_a_batched_family_header_declares_the_batched_launchers(tmp_path):
    family = batched_family(tmp_path)
    declared = prototypes(family.header)
    assert declared == definitions(family.cuda)
    assert {"fb_launch_batched", "batched_wide_launch_batched", "batched_small_launch_batched"} <= set(declared)
    assert macros(family.header)["fb_BATCHED"] == 1
    assert "// - M, N, K >= 0; 1 <= batch <= 65535;\n" in family.header


def element_types(path: Path) -> set[DType]:
    spec = compile_family_path(path).spec if path.suffix == ".gemmf" else load_path(path)[0]
    return {spec.problem.matrix(op).dtype for op in Operand}


@pytest.mark.nvcc
@needs_nvcc
@pytest.mark.parametrize("spec", spec_params(SPECS))
def test_header_matches_the_cu_and_compiles_as_c(spec, tmp_path):
    """The header declares every `extern "C"` launcher the .cu defines, with its parameters, and
    nothing else. One translation unit with the header first and the .cu after it: a launcher whose
    parameters differ is a second C-linkage overload, which nvcc rejects (a family member's, defined
    in its namespace, only draws a warning: the parsed comparison catches that). PTX only (no ptxas):
    the host side is what is checked. f32 headers also compile as C; 16-bit ones stop a C compiler
    with their #error."""
    name = spec.stem
    assert main(["compile", str(spec), "-o", str(tmp_path), "--no-nvcc"]) == 0
    header = (tmp_path / f"{name}.h").read_text()
    declared = prototypes(header)
    assert declared and declared == definitions((tmp_path / f"{name}.cu").read_text())
    sm = json.loads((tmp_path / f"{name}.json").read_text())["target"].removeprefix("sm_")
    (tmp_path / "both.cu").write_text(f'#include "{name}.h"\n#include "{name}.cu"\n')
    # -Xcicc -O0: the device code is not what is checked, and optimizing it is three quarters of the time.
    both = nvcc("-c", "-std=c++17", "-gencode", f"arch=compute_{sm},code=compute_{sm}", "-Xcicc", "-O0", "both.cu",
                "-o", "both.o", cwd=tmp_path)
    assert both.returncode == 0, both.stderr
    symbols = subprocess.run(["nm", "--defined-only", "both.o"], cwd=tmp_path, capture_output=True, text=True)
    defined = {line.split()[-1] for line in symbols.stdout.splitlines() if line.split()[-2:-1] == ["T"]}
    assert set(declared) == {symbol for symbol in defined if re.fullmatch(r"\w+_(launch(_ld|_batched|_ld_padded)?|dequantize)", symbol)}
    (tmp_path / "use.c").write_text(f'#include "{name}.h"\nint main(void) {{ return {name}_M_MULTIPLE > 0 ? 0 : 1; }}\n')
    as_c = nvcc("-c", "-x", "c", "-Xcompiler", "-std=c11,-Wall,-Werror", "use.c", "-o", "use.o", cwd=tmp_path)
    if element_types(spec) == {DType.F32}:
        assert as_c.returncode == 0, as_c.stderr
    else:  # __half and __nv_bfloat16 exist in C++ only: the header says so instead of failing obscurely
        assert as_c.returncode != 0 and "include it from C++" in as_c.stderr


def test_every_header_says_its_launchers_run_on_the_current_device():
    """The C launchers' device rule (docs/python-api.md, "Devices and streams") is stated in every NAME.h."""
    headers = sorted((ROOT / "generated").glob("*.h"))
    assert headers
    missing = [h.name for h in headers if "run on the calling thread's current CUDA device" not in h.read_text()]
    assert not missing

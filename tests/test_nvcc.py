"""Every spec's .cu (kernel and host launcher) compiles with nvcc for its target; CI has nvcc."""
import json
from pathlib import Path

import pytest

from gemmdsl.build import BuildError, build, find_nvcc, parse_ptxas
from gemmdsl.cli import main
from spec_sets import spec_params

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.gemm"))

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not on PATH")
pytestmark = [pytest.mark.nvcc, needs_nvcc]


# sgemm_h100's stream-K kernel keeps one 64-bit value in local memory across its 4x-unrolled
# k-loop (one store and one load per 4 k-tiles, 2,048 FMAs) and one int around its remainder
# loop: 12 bytes. Measured on the H100 it is faster than the same kernel without the unroll
# (and without the spill): 51.8 vs 49.6 TFLOP/s at 4096^3 (docs/performance.md, notes).
STREAM_K_SPILL_BYTES = 16
# Tensor-core kernels run at 233-255 registers. Measured with nvcc 13.0 (docs/performance.md, tensor-core notes):
# hgemm_h100_mma's vector kernel spills 8 bytes; the scalar variants of 16-bit specs (leading
# dimensions not multiples of 8 elements) copy element by element and spill up to 448 bytes
# (hgemm_h100_mma). These bounds keep them from growing unseen.
MMA_SPILL_BYTES = {"scalar": 512}
MMA_OTHER_SPILL_BYTES = 80
# The f32 mma.sync specs, measured with nvcc 13.0 for their targets (sm_80; sm_90, the build the H100
# runs, for the ldmatrix ones): tf32_mma holds everything in registers; the ldmatrix TF32 ones, whose
# fragments are double-buffered (T13), run at 255 and spill 32-176 bytes, and ran 10-13%
# faster than with single fragments and no spills (docs/performance.md, tensor-core notes); the 3xTF32 ones
# run at 255 and keep 8-188 bytes in local memory (pointers and loop values). They
# round with two integer instructions instead of cvt.rna.tf32 (ctext.TF32_HELPER): more spills than
# before (up to 72 bytes then), and faster on the H100 all the same (sgemm_3xtf32 1.08/1.11x -> 1.16/1.19x
# cuBLAS SGEMM at 4096^3/8192^3; docs/performance.md, T11). Since T15 their small parts are not
# rounded (T15): spills moved (sgemm_3xtf32's sm_80 interior kernel 8 -> 188 bytes; its sm_90 build, the
# one the H100 ran 2-4% faster, spills none in three of its four kernels), not measured on an A100.
SPEC_SPILL_BYTES = {
    "tf32_ldmatrix": {"vector": 40, "interior": 72, "interior_partial_k": 88, "scalar": 48},
    "tf32_ldmatrix_nt": {"vector": 84, "interior": 152, "interior_partial_k": 176, "scalar": 48},
    "sgemm_3xtf32": {"vector": 84, "interior": 188, "interior_partial_k": 140, "scalar": 80},
    "sgemm_3xtf32_ldmatrix": {"vector": 48, "interior": 8, "interior_partial_k": 40, "scalar": 24, "narrow": 108},
    "sgemm_3xtf32_ldmatrix_nt": {"vector": 24, "interior": 52, "interior_partial_k": 84, "scalar": 56, "narrow": 44},
    # checked_32x128's tiling with B column-major: its stream-K kernels, at the 96 registers of 5 blocks an SM,
    # keep 8 bytes in local memory (32-40 bytes of loads; nvcc 13.0), the build the H200's family study timed
    # (docs/performance.md, "Few rows or columns against a long K"); at 4 blocks an SM the scalar one spills more
    "sgemm_32x128_nt": {"stream_k": 40, "stream_k_scalar": 40},
}
# The narrow kernels (8- or 4-byte copies for operands the vector kernel's 16-byte copies cannot read) are
# held to their vector kernel's allowance, but for the two 3xTF32 ldmatrix specs above, whose 8-byte kernels
# keep more in local memory at 255 registers (nvcc 13.0: 108 and 44 bytes; not timed on a GPU).


@pytest.mark.parametrize("spec", spec_params(SPECS))
def test_spec_compiles_without_spills(spec, nvcc_build):
    artifacts, result = nvcc_build(spec)
    entries = artifacts.metadata["entries"]
    table = SPEC_SPILL_BYTES.get(spec.stem, {})
    roles = [(name, entry) for name, entry in entries.items() if name not in ("narrow", "others")]
    roles += [("others", entry) for entry in entries.get("others", ())]  # a path's own kernels (dequantize)
    roles += [(role, kernel[key]) for kernel in entries.get("narrow", ())  # a narrow kernel's stream-K twin: stream-K's
              for role, key in (("narrow" if "narrow" in table else "vector", "entry"), ("stream_k", "stream_k"))]
    for name, entry in roles:
        if entry is None:
            continue
        resources = result.resources if entry == entries["vector"] else parse_ptxas(result.log, entry)
        assert 0 < resources.registers <= 255
        if spec.stem in SPEC_SPILL_BYTES:
            allowed = SPEC_SPILL_BYTES[spec.stem].get(name, 0)  # the K = 0 kernel: none
        elif artifacts.metadata["unit"] != "fma":
            allowed = MMA_SPILL_BYTES.get(name, MMA_OTHER_SPILL_BYTES)
        else:
            allowed = STREAM_K_SPILL_BYTES if name == "stream_k" else 0
        assert max(resources.spill_stores, resources.spill_loads, resources.stack) <= allowed, (entry, resources)


def test_compile_command_reports_ptxas_and_emits_ptx_and_cubin(tmp_path, capsys):
    spec = ROOT / "specs" / "sgemm_v3.gemm"
    assert main(["compile", str(spec), "-o", str(tmp_path), "--emit", "cu,ptx,cubin"]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["sgemm_v3.cu", "sgemm_v3.cubin", "sgemm_v3.h", "sgemm_v3.json", "sgemm_v3.ptx"]
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


def test_tune_ranks_mma_sync_survivors_on_ptxas_figures(tmp_path, capsys):
    from test_tune import MMA_SYNC_TEMPLATE

    path = tmp_path / "hm.tgemm"
    path.write_text(MMA_SYNC_TEMPLATE)
    results = tmp_path / "r.json"
    assert main(["tune", str(path), "--screen-only", "--jobs", "2", "--json", str(results)]) == 0
    candidates = json.loads(results.read_text())["candidates"]
    survivors = [c for c in candidates if c["status"] in ("survivor", "kept")]
    assert len(survivors) == 4
    assert all(c["prediction"]["ptxas"]["registers"] == c["prediction"]["registers"] for c in survivors)
    assert "building 4 mma.sync candidate(s) to rank them on ptxas" in capsys.readouterr().err

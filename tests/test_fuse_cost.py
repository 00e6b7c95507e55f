"""What `check` says a fuse chain costs (passes/fuse.py, paths/wgmma/cycles.py): the figures of every shipped
fused spec, the layouts' chain reads against the arrays the epilogues declare, properties over chains and
sizes, and the activations' instruction counts against nvcc's PTX."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl import ir
from gemmdsl.analysis import analyze, summary_lines
from gemmdsl.compiler import compile_source
from gemmdsl.fuse_ops.activation import ACTIVATION_OPS, ACTIVATIONS, FAST_ACTIVATION_OPS, FAST_ACTIVATIONS, TANH_APPROX
from gemmdsl.frontend import load, load_spec
from gemmdsl.passes.fuse import fuse_cost
from gemmdsl.passes.intensity import compulsory_bytes
from gemmdsl.source import SourceFile
from gemmdsl.targets import L2_BYTES_PER_CLOCK_PER_SM

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
FUSED = ["sgemm_fused", "hgemm_mma_fused", "linear_gelu", "hgemm_h100_relu_residual"]
UNFUSED_TWINS = ["sgemm_v3", "hgemm_mma", "linear_bf16"]
SIZE = 4096


def fuse_fact(name: str, problem=(SIZE, SIZE, SIZE)):
    return analyze(load_spec(SPECS / f"{name}.gemm"), problem).facts["fuse"]


def test_sgemm_fused_bias_along_m_is_loaded_by_the_sixteen_threads_of_each_row():
    cost = fuse_fact("sgemm_fused")
    assert cost.dram_bytes == {"bias": SIZE * 4, "residual": SIZE * SIZE * 4}
    # 32 columns of blocks each read all 4096 rows; warps 2 x lanes 8 along n hold each row.
    assert cost.block_bytes == {"bias": 32 * SIZE * 4, "residual": SIZE * SIZE * 4}
    assert cost.thread_bytes["bias"] == 32 * SIZE * 16 * 4
    assert cost.c_read_bytes == SIZE * SIZE * 4  # beta * C, which sgemm_v3 reads too
    assert cost.registers == 8  # 2 repeats x 4 micro rows
    # alpha's product, beta's multiply-add, the bias, relu, the residual; C's old value and R loaded.
    assert (cost.work.alu, cost.work.sfu, cost.work.loads) == (5, 0, 2)


def test_hgemm_mma_fused_keeps_a_pair_of_columns_per_block_column():
    cost = fuse_fact("hgemm_mma_fused")
    assert cost.dram_bytes == {"bias": SIZE * 2, "residual": SIZE * SIZE * 2}
    # warps 2x2, repeat 4x8 of m16n8: 16 columns per thread, each column held by 8 groups x 2 warps.
    assert cost.block_bytes["bias"] == 32 * SIZE * 2 and cost.thread_bytes["bias"] == 32 * SIZE * 16 * 2
    assert cost.registers == 16 and cost.c_read_bytes == 0
    assert (cost.work.alu, cost.work.sfu) == (1 + 3 + 2, 1)  # bias, silu (BF16 C: tanh.approx), R read as f32 and added


def test_linear_gelu_stages_its_bias_once_per_tile():
    cost = fuse_fact("linear_gelu")
    assert cost.dram_bytes == {"bias": SIZE * 2}
    assert cost.block_bytes == {"bias": 32 * SIZE * 2}  # 32 rows of 128-row blocks, each all N columns
    assert cost.thread_bytes == cost.block_bytes  # one producer warp loads a tile's 256 columns once
    assert cost.staged_bytes == 256 * 4 and cost.epilogue_block_bytes == 0
    assert cost.registers == 0
    # the bias, gelu_tanh (BF16 C: through tanh.approx); the columns are read per pair from shared memory, already f32
    assert (cost.work.alu, cost.work.sfu, cost.work.loads, cost.work.smem_loads) == (1 + 7, 1, 0, 1)


@pytest.mark.parametrize("name, waited_for", [
    ("linear_gelu", lambda block: 0),  # the bias staged during the main loop
    ("fp8_rowwise", lambda block: 0),  # both scales staged
    ("fp8_blockwise", lambda block: 0),  # the block scales read in the k-loop
    ("hgemm_h100_relu_residual", lambda block: block["residual"] // 2),  # R's first 2 of 4 boxes copied ahead
    ("hgemm_mma_fused", lambda block: sum(block.values())),  # no staging on the mma.sync path
])
def test_the_epilogue_waits_only_for_what_is_neither_staged_nor_read_in_the_k_loop(name, waited_for):
    cost = fuse_fact(name)
    assert cost.block_bytes and cost.epilogue_block_bytes == waited_for(cost.block_bytes)


def test_the_wgmma_epilogue_verdicts_of_the_shipped_specs():
    gelu = analyze(load_spec(SPECS / "linear_gelu.gemm"), (SIZE, SIZE, SIZE))
    epilogue = gelu.facts["epilogue_cycles"]
    # 128 x 256 elements x (8 ALU + 1 shared load) over 32 lanes x 4 schedulers; the SFU: 32768 / 16.
    assert (epilogue.cycles, epilogue.limit) == (2304, "instruction issue")
    k_tile = gelu.facts["wgmma_bound"].k_tile_cycles
    assert epilogue.main_loop_cycles == 64 * k_tile
    assert epilogue.hidden == 0  # both consumers share the tile: wgmma waits for the chain
    (line,) = [line for line in summary_lines(gelu) if line.startswith("epilogue:")]
    assert "the fused epilogue costs ~2,304 cycles per tile" in line and "not hidden: both consumers" in line
    residual = analyze(load_spec(SPECS / "hgemm_h100_relu_residual.gemm"), (SIZE, SIZE, SIZE))
    epilogue = residual.facts["epilogue_cycles"]
    # Half of R's tile (each warp's first 2 of 4 boxes) is copied during the main loop; the rest at L2's rate per SM.
    assert (epilogue.limit, epilogue.cycles) == ("L2", -(-128 * 256 * 2 // 2 // L2_BYTES_PER_CLOCK_PER_SM[90]))
    assert residual.facts["fuse"].work.loads == 0  # R comes by 16-byte copies, not per element
    assert epilogue.exposed == epilogue.cycles
    pingpong = analyze(load_spec(SPECS / "linear_gelu_pingpong.gemm"), (SIZE, SIZE, SIZE)).facts["epilogue_cycles"]
    assert pingpong.cycles == 2304 // 2 and pingpong.exposed == 0  # half the tile, under the other consumer's loop
    alone = analyze(load_spec(SPECS / "linear_gelu_pingpong.gemm"), (1024, 1024, 1024))  # 64 tiles: one per block
    assert alone.facts["epilogue_cycles"].hidden == 0
    assert any("no block has a second tile" in line for line in summary_lines(alone))


def test_one_block_per_tile_hides_nothing():
    text = (SPECS / "linear_gelu.gemm").read_text().replace("schedule: persistent", "schedule: tiles")
    spec, _ = load(SourceFile("tiles.gemm", text))
    analysis = analyze(spec, (SIZE, SIZE, SIZE))
    assert analysis.facts["epilogue_cycles"].hidden == 0
    assert any("not hidden: one block per tile" in line for line in summary_lines(analysis))


@pytest.mark.parametrize("name", UNFUSED_TWINS)
def test_an_unfused_spec_says_nothing_of_a_chain(name):
    analysis = analyze(load_spec(SPECS / f"{name}.gemm"), (SIZE, SIZE, SIZE))
    assert analysis.facts["fuse"] is None
    assert not any(line.startswith(("fuse:", "epilogue:")) for line in summary_lines(analysis))
    assert set(compulsory_bytes(analysis.spec, SIZE, SIZE, SIZE)) == {"a", "b", "c"}


def test_the_bound_counts_the_residual_through_dram():
    fused, twin = (analyze(load_spec(SPECS / f"{name}.gemm"), (SIZE, SIZE, SIZE)).facts["wgmma_bound"]
                   for name in ("hgemm_h100_relu_residual", "linear_bf16"))
    assert fused.dram_bytes - twin.dram_bytes == SIZE * SIZE * 2


@pytest.mark.parametrize("name", FUSED)
def test_the_chain_reads_are_the_arrays_the_epilogue_declares(name):
    """rows_per_thread and cols_per_thread are the sizes of the kernel's fuse_m_values and fuse_n_values."""
    artifacts = compile_source(SourceFile.read(SPECS / f"{name}.gemm"))
    constants = {key: int(value) for key, value in re.findall(r"constexpr int (\w+) = (\d+);", artifacts.cuda)}

    def declared(axis: str) -> int | None:
        found = re.search(rf"fuse_{axis} fuse_{axis}_values((?:\[[^\]]+\])+);", artifacts.cuda)
        if found is None:
            return None
        size = 1
        for extent in re.findall(r"\[([^\]]+)\]", found.group(1)):
            size *= eval(extent, {}, constants)  # products of the kernel's constants
        return size

    reads = artifacts.plan.layout.chain_reads()
    assert declared("m") == reads.rows_per_thread
    if reads.cols_per_element:  # each pair's columns given to fuse_pair, from the staged vectors if any
        assert declared("n") is None and re.search(r"fuse_pair\([^;]*fuse_n\{", artifacts.cuda)
        assert ("fuse_n{vectors[" in artifacts.cuda) == reads.staged
    else:
        assert declared("n") == reads.cols_per_thread


FUSE_SECTIONS = st.builds(
    lambda bias, activation, residual, scale: " ".join(filter(None, (bias, activation, residual, scale))),
    st.sampled_from(["", "bias: m;", "bias: n;"]),
    st.sampled_from(["", *(f"activation: {a.value};" for a in ir.Activation)]),
    st.sampled_from(["", "residual: f32 row;", "residual: f32 col;"]),
    st.sampled_from(["", "scale: row;", "scale: col;", "scale: rowcol;"]),
).filter(bool)
BASES = {"sgemm": "sgemm_fused", "mma": "hgemm_mma_fused", "wgmma": "linear_gelu"}


def fused_spec(base: str, section: str) -> ir.KernelSpec:
    text = (SPECS / f"{BASES[base]}.gemm").read_text()
    text = re.sub(r"fuse\s*\{[^}]*\}", f"fuse {{ {section} }}", text)
    if base == "sgemm":
        text = text.replace("epilogue: alpha_beta; ", "")  # scales take alpha's place
    else:
        text = text.replace("residual: f32", "residual: bf16")
    if base == "wgmma":  # 4 stages leave too little shared memory for a bias along m beside both scales
        text = text.replace("stages: 4", "stages: 3")
    return load(SourceFile(f"{base}.gemm", text))[0]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(BASES)), FUSE_SECTIONS, st.integers(1, 9000), st.integers(1, 9000),
       st.integers(0, 2000), st.integers(0, 2000))
def test_a_chains_bytes_grow_with_m_and_n(base, section, m, n, more_m, more_n):
    spec = fused_spec(base, section)
    reads = (spec.fuse and analyze(spec, (128, 256, 64)).layout.chain_reads())
    small, large = fuse_cost(spec, reads, m, n, 1), fuse_cost(spec, reads, m + more_m, n + more_n, 1)
    for level in ("dram_bytes", "block_bytes", "thread_bytes"):
        before, after = getattr(small, level), getattr(large, level)
        assert set(before) == set(after) and all(after[name] >= before[name] for name in before)
        assert all(before[name] >= small.dram_bytes.get(name, 0) for name in before)  # never below DRAM's
    assert small.extra_dram_bytes == sum(compulsory_bytes(spec, m, n, 1).values()) - sum(
        compulsory_bytes(spec, m, n, 1)[key] for key in ("a", "b", "c"))
    assert (small.extra_dram_bytes > 0) == (spec.fuse.bias is not None or spec.fuse.scale is not None
                                            or spec.fuse.residual is not None)


def ptx_counts(expression: str, tmp_path: Path, helpers: str = "") -> tuple[int, int]:
    """(ALU, SFU) instructions of `expression` in the PTX nvcc emits for sm_90a, between x's load and the
    store; mov, address arithmetic and branches are not counted, and div.rn.f32 as ptxas lowers it."""
    source = tmp_path / "activation.cu"
    source.write_text(helpers + '\nextern "C" __global__ void k(const float* __restrict__ in, float* __restrict__ out) '
                      f"{{ float x = in[threadIdx.x]; out[threadIdx.x] = {expression}; }}\n")
    ptx = tmp_path / "activation.ptx"
    subprocess.run(["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-ptx", "-o", str(ptx), str(source)],
                   check=True, capture_output=True)
    text = ptx.read_text()
    body = text[text.index("ld.global"):text.index("st.global")].splitlines()[1:]
    alu = sfu = 0
    for line in body:
        op = line.split()[0] if line.split() else ""
        if not op or op.startswith(("$", "@", "//", "mov", "cvta", "bra")) or op in ("add.s64", "mul.wide.u32"):
            continue
        if op.startswith(("ex2", "rcp", "tanh", "lg2")):
            sfu += 1
        elif op == "div.rn.f32":
            alu, sfu = alu + 7, sfu + 1
        else:
            alu += 1
    return alu, sfu


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("activation", list(ir.Activation), ids=lambda a: a.value)
def test_the_activations_instruction_counts_are_nvccs(activation, tmp_path):
    assert ptx_counts(ACTIVATIONS[activation], tmp_path) == ACTIVATION_OPS[activation]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("activation", list(ir.Activation), ids=lambda a: a.value)
def test_the_16_bit_activations_instruction_counts_are_nvccs(activation, tmp_path):
    """16-bit C: gelu_tanh and silu through tanh.approx.f32 (counted as the one SFU instruction it is)."""
    assert ptx_counts(FAST_ACTIVATIONS[activation], tmp_path, TANH_APPROX) == FAST_ACTIVATION_OPS[activation]


# --- gemmdsl profile: the chain's bytes beside ncu's DRAM counter -------------------------------------

# ncu --csv as `gemmdsl profile` asks for it (the wgmma path's `facts.ncu_metrics`) for one launch of linear_gelu
# at 4096^3; the values are the format's, not a measurement.
LINEAR_GELU_NCU_CSV = "\n".join(
    ['"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device",'
     '"CC","Section Name","Metric Name","Metric Unit","Metric Value"']
    + [f'"0","77","python3","127.0.0.1","linear_gelu_kernel","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0",'
       f'"Command line profiler metrics","{metric}","{unit}","{value}"'
       for metric, unit, value in [("dram__bytes_read.sum", "byte", "69,412,352"),
                                   ("launch__registers_per_thread", "register/thread", "168"),
                                   ("launch__grid_size", "", "132"),
                                   ("sm__inst_executed_pipe_tensor_op_gmma.sum", "inst", "1,048,576")]])


def test_profile_puts_the_chains_dram_bytes_beside_ncus():
    from gemmdsl.profile import DRAM_READ, comparison_rows, parse_ncu_csv

    analysis = analyze(load_spec(SPECS / "linear_gelu.gemm"), (SIZE, SIZE, SIZE))
    assert DRAM_READ in analysis.path.facts.ncu_metrics
    (launch,) = parse_ncu_csv(LINEAR_GELU_NCU_CSV)
    rows = {row.label: row for row in comparison_rows(analysis, launch.metrics)}
    row = rows["DRAM bytes read (A, B, bias)"]
    assert row.predicted == 2 * SIZE * SIZE * 2 + SIZE * 2 and row.measured == 69412352
    assert rows["wgmma warp instructions"].measured == 1048576  # the path's own rows stay


@pytest.mark.parametrize("name, operands", [("sgemm_fused", {"bias": SIZE * 4, "residual": SIZE * SIZE * 4}),
                                            ("hgemm_mma_fused", {"bias": SIZE * 2, "residual": SIZE * SIZE * 2}),
                                            ("sgemm_v3", {})])
def test_profile_predicts_a_and_b_once_and_the_chains_operands_once(name, operands):
    from gemmdsl.profile import comparison_rows

    analysis = analyze(load_spec(SPECS / f"{name}.gemm"), (SIZE, SIZE, SIZE))
    (row,) = [row for row in comparison_rows(analysis, {}) if row.label.startswith("DRAM")]
    size = analysis.spec.problem.a.dtype.bytes
    assert row.predicted == 2 * SIZE * SIZE * size + sum(operands.values())  # C is not read: beta is 0
    assert all(name in row.label for name in operands) and row.measured is None


@pytest.mark.gpu
def test_profile_drives_a_fused_kernel_with_its_chains_operands():
    from gemmdsl.passes import ProblemSize
    from gemmdsl.profile import drive

    for name in FUSED:
        drive(str(SPECS / f"{name}.gemm"), ProblemSize(256, 512, 128))


def test_block_scales_count_both_scale_matrices_at_checks_problem_size():
    """fp8_blockwise at 4096 x 4096 x 5000 (40 k-tiles, the last one partial): A's scales M x 40 f32, B's 32 x 40."""
    m, n, k = 4096, 4096, 5000
    cost = analyze(load_spec(SPECS / "fp8_blockwise.gemm"), (m, n, k)).facts["fuse"]
    assert cost.dram_bytes == {"a_scale": m * 40 * 4, "b_scale": 32 * 40 * 4}
    # 16 columns of blocks each read all rows' A scales; 32 rows of blocks all of B's.
    assert cost.block_bytes == {"a_scale": 16 * m * 40 * 4, "b_scale": 32 * 32 * 40 * 4}
    # 512 tiles x 40 k-tiles x 256 consumer threads: 2 rows' A scales and 2 column blocks' B scales each.
    assert cost.thread_bytes == {"a_scale": 512 * 40 * 256 * 2 * 4, "b_scale": 512 * 40 * 256 * 2 * 4}
    lines = summary_lines(analyze(load_spec(SPECS / "fp8_blockwise.gemm"), (m, n, k)))
    line = next(line for line in lines if line.startswith("fuse:"))
    # The scales are read in the k-loop: the epilogue has nothing of the chain to fetch.
    assert any(line.startswith("epilogue: the fused epilogue costs ~0 cycles") for line in lines), lines
    assert "+0.7 MB through DRAM (a_scale 0.7 MB, b_scale 5.1 KB); blocks fetch 10.6 MB" in line, line

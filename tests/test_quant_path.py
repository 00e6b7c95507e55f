"""The dequantizing decode path from a spec: the four shipped specs compile through it (metadata, header), its
refusals are positioned with hints, its grid rule is the kernel's, `gemmdsl.load`'s kernel binds a call's
packed operands to the launch (on the fake GPU of tests/fake_gpu.py), and the GPU commands take such a spec."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from fake_gpu import STREAM, FakeGpu, FakeTensor
from gemmdsl import compiler, runtime
from gemmdsl.frontend import load_spec
from gemmdsl.paths.dequant.kernel import DecodeConfig
from gemmdsl.paths.dequant.lowering import decode_config
from gemmdsl.quant_layout import packed_shapes
from gemmdsl.runtime.quantized import QuantizedKernel
from gemmdsl.source import CompileError, SourceFile

ROOT = Path(__file__).resolve().parent.parent
SPECS = ("w4a16_decode", "w4a16_decode_m8", "w4a16_decode_m32", "w4a16_zeros_decode", "w8a16_decode",
         "w8a16_decode_m8", "w8a16_decode_m32", "fp8w_a16_decode", "fp8w_a16_decode_m8", "fp8w_a16_decode_m32")
ARRAYS = {"w4a16_decode": ["weights", "scales"], "w4a16_decode_m8": ["weights", "scales"],
          "w4a16_decode_m32": ["weights", "scales"], "w4a16_zeros_decode": ["weights", "scales", "zeros"],
          **dict.fromkeys(("w8a16_decode", "w8a16_decode_m8", "w8a16_decode_m32", "fp8w_a16_decode",
                           "fp8w_a16_decode_m8", "fp8w_a16_decode_m32"), ["weights", "scales"])}


def spec_text(name: str = "w4a16_decode") -> str:
    return (ROOT / "specs" / f"{name}.gemm").read_text()


@pytest.mark.parametrize("name", SPECS)
def test_each_spec_compiles_on_the_dequant_path(name):
    artifacts = compiler.compile_path(ROOT / "specs" / f"{name}.gemm")
    assert artifacts.plan.path.name == "dequant"
    metadata = artifacts.metadata
    assert metadata["operands"] == ["A", *ARRAYS[name], "C"]
    assert list(metadata["quant"]["layout"]) == ARRAYS[name]
    assert metadata["entry"] == f"{name}_kernel" and metadata["launch"]["entries"]["vector"] == f"{name}_kernel"
    assert f"cudaError_t {name}_launch(" in artifacts.header and f"size_t {name}_workspace_bytes(" in artifacts.header
    assert f'extern "C" cudaError_t {name}_launch(' in artifacts.cuda
    config = decode_config(artifacts.spec)
    assert metadata["decode"]["k_slice"] == config.k_slice == artifacts.spec.block.k
    assert metadata["dynamic_smem_bytes"] == config.smem_bytes


REFUSALS = [
    ("bounds: checked;", "bounds: exact;", "exact-bounds", "exact"),
    ("c: bf16 row;", "c: bf16 col;", "C must be row-major", "bf16 col"),
    ("tile: 16x128x2048;", "tile: 24x128x2048;", "rows of A per block", "24x128x2048"),
    ("tile: 16x128x2048;", "tile: 16x200x2048;", "rows of W per block", "16x200x2048"),
    ("tile: 16x128x2048;", "tile: 32x128x8192;", "bytes of shared memory", "32x128x8192"),
    ("warps: 1x8;", "warps: 2x4;", "side by side", "2x4"),
    ("stages: 6;", "stages: 33;", "prefetch (33)", "33"),
    ("stages: 6; }", "stages: 6; unroll: 2; }", "`unroll` does not apply", "2"),
    ("target   sm_90a;", "target   sm_90a;\n    smem a { pad: 8; }", "does not take `smem a`", "smem a"),
]


@pytest.mark.parametrize("old, new, message, at", REFUSALS)
def test_refusals_are_positioned_with_a_hint(old, new, message, at):
    text = spec_text()
    assert old in text
    with pytest.raises(CompileError) as info:
        compiler.compile_source(SourceFile("w4.gemm", text.replace(old, new, 1)))
    (error,) = [d for d in info.value.diagnostics if message in d.message]
    line = text.replace(old, new, 1).split("\n")[error.span.line - 1]
    assert at in line[error.span.column - 1:] and error.hint


def test_a_register_hungry_ring_is_warned_at_its_stages():
    """8 chunks in flight at 3 blocks per SM leave a thread 80 registers, fewer than the ring, the sums and the
    rest need (ptxas 13.0 spills 32 bytes there) and are warned at `stages`; the shipped shape (6 chunks at 2
    blocks per SM) leaves room."""
    hungry = spec_text().replace("stages: 6;", "stages: 8;").replace("blocks_per_sm: 2;", "blocks_per_sm: 3;")
    (warning,) = compiler.compile_source(SourceFile("w4.gemm", hungry)).warnings
    assert "registers" in warning.message and "stages" in hungry.split("\n")[warning.span.line - 1]
    assert not compiler.compile_source(SourceFile("w4.gemm", spec_text())).warnings


def test_blocks_per_sm_that_shared_memory_cannot_hold_are_warned_at_the_budget():
    """32 rows of A over a k-slice of 2048 stage 135,680 bytes a block: one block fits an SM's 233,472 bytes, so
    asking for 2 is warned at `blocks_per_sm`, with the count that fits in the hint."""
    text = spec_text().replace("tile: 16x128x2048;", "tile: 32x128x2048;")
    (warning,) = [w for w in compiler.compile_source(SourceFile("w4.gemm", text)).warnings if "resident" in w.message]
    assert "blocks_per_sm" in text.split("\n")[warning.span.line - 1]
    assert "135," in warning.message and "blocks_per_sm: 1;" in warning.hint
    fitting = text.replace("blocks_per_sm: 2;", "blocks_per_sm: 1;")
    assert not [w for w in compiler.compile_source(SourceFile("w4.gemm", fitting)).warnings if "resident" in w.message]


@settings(max_examples=200, deadline=None)
@given(m=st.integers(0, 5000), n=st.integers(0, 70000), k=st.integers(0, 70000))
def test_the_runtime_rule_from_the_metadata_is_the_kernels(m, n, k):
    """NAME.json's `decode` figures rebuild DecodeConfig's grid rule (the one the C launcher prints)."""
    for name, artifacts in COMPILED.items():
        config = decode_config(artifacts.spec)
        decode = artifacts.metadata["decode"]
        assert config.grid(m, n, k) == (-(-m // decode["rows"]), -(-(-(-n // 16)) // (decode["block_rows"] // 16)),
                                        max(1, -(-k // decode["k_slice"])))  # K = 0: one slice writes C = 0


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 70000), k=st.integers(0, 70000))
def test_the_dequantize_kernels_metadata_rebuilds_its_grid(n, k):
    """NAME.json's `dequantize` entry names the kernel and its launch; its figures rebuild DecodeConfig's
    dequantize_grid rule (the one NAME_dequantize prints): a block per items_per_block (tile, chunk) items."""
    for name, artifacts in COMPILED.items():
        config = decode_config(artifacts.spec)
        dequantize = artifacts.metadata["dequantize"]
        assert dequantize["entry"] == f"{name}_dequantize_kernel" and dequantize["launcher"] == f"{name}_dequantize"
        assert (dequantize["threads"], dequantize["smem"]) == (config.dequantize_threads, config.dequantize_smem_bytes)
        items = -(-n // 16) * -(-k // dequantize["chunk_k"])
        assert config.dequantize_grid(n, k) == (-(-items // dequantize["items_per_block"]), 1, 1)


@pytest.mark.parametrize("name", SPECS)
def test_the_dequantize_kernel_and_launcher_are_emitted_and_declared(name):
    artifacts = COMPILED[name]
    act = {"bf16": "__nv_bfloat16", "f16": "__half"}[artifacts.metadata["quant"]["activation"]]
    assert f'extern "C" __global__ void __launch_bounds__(256) {name}_dequantize_kernel(' in artifacts.cuda
    assert f'extern "C" cudaError_t {name}_dequantize(const void* weights, ' in artifacts.cuda
    declared = " ".join(artifacts.header.split())
    assert (f"cudaError_t {name}_dequantize(const void* weights, const void* scales, const void* zeros, {act}* W, "
            "int N, int K, cudaStream_t stream);") in declared


COMPILED = {name: compiler.compile_path(ROOT / "specs" / f"{name}.gemm") for name in SPECS}


@pytest.fixture
def gpu(monkeypatch):
    fake = FakeGpu().install(monkeypatch)
    monkeypatch.setattr(runtime.quantized, "zeroed_workspace", lambda nbytes: fake.new((-(-nbytes // 4),), "int32"))
    return fake


def packed_arrays(name: str, n: int, k: int) -> dict:
    fmt = decode_config(COMPILED[name].spec).fmt
    arrays = {array: FakeTensor(shape, "int32" if dtype == "uint32" else "bfloat16")
              for array, (shape, dtype) in packed_shapes(n, k, fmt).items()}
    return {**arrays, "shape": (n, k)}


@pytest.mark.parametrize("name", ["w4a16_decode", "w4a16_zeros_decode"])
def test_a_call_binds_the_packed_arrays_in_the_kernels_order(gpu, name):
    kernel = runtime.quantized.QuantizedKernel(COMPILED[name])
    m, n, k = 3, 4100, 4096
    a, c = FakeTensor((m, k), "bfloat16"), FakeTensor((m, n), "bfloat16")
    packed = packed_arrays(name, n, k)
    assert kernel(a, packed, c) is c
    (launch,) = gpu.launched
    config = decode_config(COMPILED[name].spec)
    assert launch.entry == f"{name}_kernel" and launch.stream == STREAM
    assert launch.grid == config.grid(m, n, k) == (1, 33, 2)  # 4100 rows of W in blocks of 128; K in k-slices of 2048
    assert launch.block == (256, 1, 1) and launch.shared_mem == config.smem_bytes
    workspace = launch.args[5]
    assert launch.args == (a.data_ptr(), packed["weights"].data_ptr(), packed["scales"].data_ptr(),
                           packed["zeros"].data_ptr() if "zeros" in packed else 0, c.data_ptr(), workspace,
                           workspace + m * n * 4, m, n, k)
    assert workspace != 0
    kernel(a, packed, c)  # the workspace is kept: the kernel leaves it zero
    assert gpu.launched[1].args[5] == workspace


def test_one_k_slice_needs_no_workspace_and_c_is_made(gpu):
    kernel = runtime.quantized.QuantizedKernel(COMPILED["w8a16_decode"])
    c = kernel(FakeTensor((1, 1024), "bfloat16"), packed_arrays("w8a16_decode", 64, 1024))
    (launch,) = gpu.launched
    assert launch.args[5:7] == (0, 0) and launch.grid == (1, 1, 1)
    assert c.shape == (1, 64) and launch.args[4] == c.data_ptr()


@pytest.mark.parametrize("change, message", [
    (lambda a, p, c: (FakeTensor((2, 4096), "float16"), p, c), "bfloat16"),
    (lambda a, p, c: (FakeTensor((2, 4000), "bfloat16"), {**p, "shape": (64, 4000)}, c), "multiple of 128"),
    (lambda a, p, c: (a, {k: v for k, v in p.items() if k != "scales"}, c), "missing scales"),
    (lambda a, p, c: (a, {**p, "zeros": p["scales"]}, c), "not of its format"),
    (lambda a, p, c: (a, {**p, "weights": FakeTensor((4, 32, 32, 4), "int32")}, c), "shape (4, 64, 32, 4)"),
    (lambda a, p, c: (a, p, FakeTensor((2, 65), "bfloat16")), "2 x 64"),
    (lambda a, p, c: (a, {k: v for k, v in p.items() if k != "shape"}, None), "N is unknown"),
    (lambda a, p, c: (a, [p["weights"]], c), "quant_layout.pack's dict"),
])
def test_wrong_operands_are_refused_before_any_launch(gpu, change, message):
    kernel = runtime.quantized.QuantizedKernel(COMPILED["w4a16_decode"])
    a, packed, c = change(FakeTensor((2, 4096), "bfloat16"), packed_arrays("w4a16_decode", 64, 4096),
                          FakeTensor((2, 64), "bfloat16"))
    with pytest.raises((ValueError, TypeError), match=message.replace("(", r"\(").replace(")", r"\)")):
        kernel(a, packed, c)
    assert gpu.launched == []


def test_gemmdsl_load_gives_a_quantized_kernel_for_a_dequant_spec(gpu):
    kernel = runtime.quantized.load(str(ROOT / "specs" / "w4a16_decode.gemm"))
    assert isinstance(kernel, QuantizedKernel) and "s4 weights" in repr(kernel)
    assert type(runtime.quantized.load(str(ROOT / "specs" / "sgemm_v3.gemm"))) is runtime.Kernel


def test_the_spec_loads_with_its_path_s_stages_default():
    spec = load_spec(SourceFile("w4.gemm", spec_text().replace("    pipeline { stages: 6; }", "")))
    assert spec.pipeline.stages == DecodeConfig.prefetch == 6


def test_the_gpu_tests_configurations_compile_as_specs():
    """tests/test_gpu_quant.py builds its kernels from spec_text; a configuration the path refuses would error
    every GPU test at once."""
    from quant_cases import CONFIGS, spec_text

    for name, config in CONFIGS.items():
        compiler.compile_source(SourceFile(f"{name}.gemm", spec_text(name, config)))


@pytest.mark.parametrize("command", ["verify", "bench"])
def test_verify_and_bench_take_a_dequantizing_spec_up_to_the_gpu(command, monkeypatch, capsys):
    """verify and bench compile a dequantizing spec and go on to look for the GPU (tests/test_quant_tools.py checks
    what they do there), without refusing it by name or a traceback."""
    import sys

    from gemmdsl.cli import main

    monkeypatch.setitem(sys.modules, "cupy", None)
    status = main([command, str(ROOT / "specs" / "w4a16_decode.gemm"), "--sizes", "1x4096x4096"])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: CuPy is not installed") and "Traceback" not in err


def test_profile_takes_a_dequantizing_spec_and_says_what_it_needs(monkeypatch, capsys):
    """profile goes on to ncu with a dequantizing spec where PyTorch (which makes its operands) is there, and
    says so where it is not."""
    import importlib.util

    from gemmdsl import profile
    from gemmdsl.cli import main

    spec = str(ROOT / "specs" / "w4a16_decode.gemm")
    monkeypatch.setattr(profile.shutil, "which", lambda name: None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert main(["profile", spec]) == 2
    assert capsys.readouterr().err.startswith("error: ncu (Nsight Compute) is not on PATH")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert main(["profile", spec]) == 1
    err = capsys.readouterr().err
    assert "w4a16_decode.gemm: error: w4a16_decode multiplies packed quantized weights" in err
    assert "PyTorch is not installed" in err and "Traceback" not in err


DENSE = {name: compiler.compile_path(ROOT / "specs" / f"{name}.gemm") for name in ("hgemm_h100_bf16c", "hgemm_h100")}


def test_quantized_linear_decodes_few_rows_and_dequantizes_for_many(gpu, monkeypatch):
    """Below prefill_from rows the decode kernel alone; from there the dequantize kernel into one kept scratch
    (N x K of A's type), then the dense kernel."""
    scratches = []
    monkeypatch.setattr(runtime.quantized, "matrix_maker", lambda library, dtype, rows, cols, device: (
        lambda: (scratches.append(FakeTensor((rows, cols), dtype)) or scratches[-1],)))
    decode = QuantizedKernel(COMPILED["w4a16_decode"])
    linear = runtime.QuantizedLinear(decode, runtime.Kernel(DENSE["hgemm_h100_bf16c"]), prefill_from=64)
    n, k = 4100, 4096
    packed = packed_arrays("w4a16_decode", n, k)
    few = FakeTensor((63, k), "bfloat16")
    linear(few, packed, FakeTensor((63, n), "bfloat16"))
    assert [launch.entry for launch in gpu.launched] == ["w4a16_decode_kernel"]
    for _ in range(2):
        many = FakeTensor((64, k), "bfloat16")
        linear(many, packed, FakeTensor((64, n), "bfloat16"))
    (scratch,) = scratches  # made once for this N x K
    assert scratch.shape == (n, k) and scratch.dtype.name == "bfloat16"
    dequantized = [launch for launch in gpu.launched if launch.entry == "w4a16_decode_dequantize_kernel"]
    assert len(dequantized) == 2 and all(launch.args[3] == scratch.data_ptr() for launch in dequantized)
    assert launch_order(gpu.launched[1:]) == ["dequantize", "dense"] * 2


@pytest.mark.parametrize("stem, m, rows", [*(("w4a16_decode", m, rows) for m, rows in
                                               [(1, 8), (8, 8), (9, 16), (16, 16), (17, 32), (64, 32), (127, 32)]),
                                             ("w8a16_decode", 1, 8), ("w8a16_decode", 16, 16),
                                             ("fp8w_a16_decode", 64, 32)])
def test_quantized_linear_runs_the_decode_shape_the_model_predicts_fastest(gpu, stem, m, rows):
    """Given a kernel's 8-, 16- and 32-row shapes, a call below the prefill route runs on the one the cycle model
    predicts fastest: at 8192 x 8192 the shape scripts/quant_bench.py times at each M (8 rows to 8, 16 to 16, 32
    past that: each measured fastest there on the H200), picked once per shape."""
    shapes = {f"{stem}_m8": 8, stem: 16, f"{stem}_m32": 32}
    linear = runtime.QuantizedLinear([QuantizedKernel(COMPILED[name]) for name in shapes],
                                     runtime.Kernel(DENSE["hgemm_h100_bf16c"]))
    n, k = 8192, 8192
    packed = packed_arrays(stem, n, k)
    for _ in range(2):
        linear(FakeTensor((m, k), "bfloat16"), packed, FakeTensor((m, n), "bfloat16"))
    assert {launch.entry.removesuffix("_kernel") for launch in gpu.launched} == {
        name for name, block_rows in shapes.items() if block_rows == rows}
    assert list(linear._chosen) == [(m, n, k)]


def test_quantized_linear_refuses_decode_kernels_of_other_formats(gpu):
    int4, int8 = QuantizedKernel(COMPILED["w4a16_decode"]), QuantizedKernel(COMPILED["w8a16_decode"])
    with pytest.raises(ValueError, match="share w4a16_decode's weight format and C type; w8a16_decode"):
        runtime.QuantizedLinear([int4, int8], runtime.Kernel(DENSE["hgemm_h100_bf16c"]))
    with pytest.raises(TypeError, match="a list of them, not str"):
        runtime.QuantizedLinear("w4a16_decode", runtime.Kernel(DENSE["hgemm_h100_bf16c"]))


def launch_order(launched) -> list[str]:
    order = []
    for launch in launched:
        kind = "dequantize" if launch.entry.endswith("_dequantize_kernel") else "dense"
        if not order or order[-1] != kind or kind == "dequantize":
            order.append(kind)
    return order


def test_quantized_linear_refuses_a_dense_kernel_of_other_types(gpu):
    decode = QuantizedKernel(COMPILED["w4a16_decode"])
    with pytest.raises(ValueError, match="C float32 row"):
        runtime.QuantizedLinear(decode, runtime.Kernel(DENSE["hgemm_h100"]))
    with pytest.raises(TypeError, match="QuantizedKernel"):
        runtime.QuantizedLinear(runtime.Kernel(DENSE["hgemm_h100"]), decode)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 300), prefill_from=st.integers(1, 300))
def test_quantized_linear_decodes_exactly_the_calls_below_prefill_from(m, prefill_from):
    """For any M and prefill_from: the decode kernel alone below it, the dequantize kernel then the dense one from
    it on."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        gpu = FakeGpu().install(monkeypatch)
        monkeypatch.setattr(runtime.quantized, "zeroed_workspace", lambda nbytes: gpu.new((-(-nbytes // 4),), "int32"))
        monkeypatch.setattr(runtime.quantized, "matrix_maker", lambda library, dtype, rows, cols, device: (
            lambda: (FakeTensor((rows, cols), dtype),)))
        linear = runtime.QuantizedLinear(QuantizedKernel(COMPILED["w4a16_decode"]),
                                         runtime.Kernel(DENSE["hgemm_h100_bf16c"]), prefill_from=prefill_from)
        n, k = 256, 1024
        linear(FakeTensor((m, k), "bfloat16"), packed_arrays("w4a16_decode", n, k), FakeTensor((m, n), "bfloat16"))
        entries = [launch.entry for launch in gpu.launched]
        if m < prefill_from:
            assert entries == ["w4a16_decode_kernel"]
        else:
            assert entries[0] == "w4a16_decode_dequantize_kernel" and "w4a16_decode_kernel" not in entries[1:]
            assert len(entries) >= 2


def test_a_call_with_k_zero_runs_one_k_slice_that_writes_zeros(gpu):
    """K = 0 is the C launcher's call too: one k-slice (no workspace), whose block finds no weights and stores
    C = 0 (tests/test_emulated_dequant.py runs it)."""
    kernel = QuantizedKernel(COMPILED["w8a16_decode"])
    a, c = FakeTensor((3, 0), "bfloat16"), FakeTensor((3, 100), "bfloat16")
    assert kernel(a, packed_arrays("w8a16_decode", 100, 0), c) is c
    (launch,) = gpu.launched
    assert launch.grid == (1, 1, 1) and launch.args[5] == 0  # no workspace

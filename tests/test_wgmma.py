"""Hopper's own path (wgmma specs): the language, its diagnostics, the lowering every stage reads,
the 128-byte swizzle and descriptor rules, the generated code's structure, the runtime's tensor maps
(CPU), and nvcc for sm_90a where it is installed. GPU tests are in tests/test_gpu_wgmma.py."""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy
import pytest

from gemmdsl import ir
from gemmdsl.bench import instruction_peak
from gemmdsl.compiler import compile_path, compile_text
from gemmdsl.frontend import load, load_spec
from gemmdsl.launch_plan import GridRule, Workspace
from gemmdsl.paths import path_of
from gemmdsl.paths import plan_kernel
from gemmdsl.runtime import KernelRequirements, OperandView, choose_entry
from gemmdsl.source import CompileError, Severity, SourceFile
from gemmdsl.tensor_maps import TENSOR_MAP_BYTES, TensorMapCache, pack, tensor_map_requests
from gemmdsl.paths.wgmma.layout import WgmmaLayout, descriptor, swizzled_offset
from gemmdsl.targets import (CALL_CYCLES, L2_BYTES_PER_CLOCK_PER_SM, PEAK_TFLOPS, WGMMA_MACS_PER_CLOCK,
                             WGMMA_PEAK_TFLOPS)
from spec_sets import spec_params

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "hgemm_h100.gemm"
TEXT = "gemm hgemm_h100 {" + SPEC.read_text().split("gemm hgemm_h100 {", 1)[1]  # without the comment


def spec_of(text: str = TEXT):
    return load(SourceFile("case.gemm", text))[0]


def errors_of(old: str, new: str) -> list:
    assert TEXT.count(old) == 1, old
    text = TEXT.replace(old, new)
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    return [(d, text) for d in caught.value.diagnostics if d.severity is Severity.ERROR]


def test_the_prototype_spec_parses_into_the_wgmma_path():
    spec = spec_of()
    assert path_of(spec).name == "wgmma" and str(spec.target) == "sm_90a" and spec.target.arch_specific
    assert spec.mma.shape == ir.WgmmaShape(n=256, k=16)
    assert (spec.threads.warpgroups, spec.threads.producers, spec.threads.threads) == (2, 1, 384)
    assert spec.block.schedule is ir.Schedule.PERSISTENT and spec.pipeline.copy is ir.CopyMode.TMA
    assert spec.smem_a.swizzle_bytes == 128 and spec.smem_b.order is ir.SmemOrder.NK


def test_layout_matches_the_measured_prototype():
    layout = WgmmaLayout(spec_of())
    assert (layout.stage_bytes_of(ir.Operand.A), layout.stage_bytes_of(ir.Operand.B)) == (16384, 32768)
    assert layout.smem_bytes == 4 * 49152 + 2 * 2 * 8192 + 1024 + 8 * 8  # ring, staged C boxes, alignment, barriers
    assert (layout.entry_registers, layout.producer_registers, layout.consumer_registers) == (168, 40, 232)
    assert layout.accumulators == 128 and layout.mbarriers == 8 and layout.wgmma_per_k_tile == 4
    a, b = ir.Operand.A, ir.Operand.B
    assert [layout.k_step(a), layout.row_step(a), layout.row_step(b)] == [2, 512, 2048]
    launch = plan_kernel(spec_of()).launch
    assert launch.grid_for(4096, 4096, 4096, 1, 132)[0] == 132 and launch.grid_for(256, 256, 4096, 1, 132)[0] == 2


# --- diagnostics: every rule points at the value it objects to ---------------------------------------

CASES = [
    ("target   sm_90a;", "target   sm_90;", "sm_90", "needs an arch-specific target"),
    ("smem b   { order: nk;", "smem b   { order: kn;", "kn", "a col-major B arrives k-contiguous"),
    ("smem a   { order: mk;", "smem a   { order: km;", "km", "a row-major A arrives k-contiguous"),
    ("m64n256k16", "m64n250k16", "m64n250k16", "no N = 250"),
    ("m64n256k16", "m64n256k8", "m64n256k8", "bf16 operands take m64nNk16"),
    ("m64n256k16;", "m64n256k16; precision: tf32;", "tf32", "applies to f32 operands"),
    ("128x256x64", "128x256x32", "128x256x32", "the 128-byte swizzle span"),
    ("128x256x64", "128x512x64", "128x512x64", "TMA box spans at most 256"),
    ("128x256x64", "192x256x64", "192x256x64", "whole 64-row wgmma tiles"),
    ("stages: 4", "stages: 5", "5", "more than the 232448"),
    ("stages: 4", "stages: 1", "1", "deadlocks"),
    ("copy: tma", "copy: cp_async", "cp_async", "does not feed wgmma"),
    ("smem a   { order: mk; swizzle: 128B; }", "smem a   { order: mk; swizzle: xor(2,3,3); }", "xor(2,3,3)",
     "descriptor cannot express"),
    ("smem a   { order: mk; swizzle: 128B; }", "smem a   { order: mk; swizzle: 64B; }", "64B", "not supported yet"),
    ("smem a   { order: mk;", "smem a   { order: mk; pad: 8;", "8;", "TMA writes each box densely"),
    ("producer: 1", "producer: 2", "2", "a producer warpgroup count must be 1, found 2"),
    ("warpgroups: 2", "warps: 2x2", "warps", "does not apply to a wgmma spec"),
]


@pytest.mark.parametrize("old, new, anchor, message", CASES, ids=[c[3][:30] + c[1][-12:] for c in CASES])
def test_each_rule_reports_position_and_hint(old, new, anchor, message):
    found = errors_of(old, new)
    matching = [(d, text) for d, text in found if message in d.message]
    assert matching, [d.message for d, _ in found]
    diagnostic, text = matching[0]
    line = text.splitlines()[diagnostic.span.line - 1]
    assert line[diagnostic.span.column - 1:].startswith(anchor), (line, diagnostic.span)
    assert diagnostic.hint
    rendered = CompileError([diagnostic], SourceFile("case.gemm", text)).render()
    assert f"case.gemm:{diagnostic.span.line}:{diagnostic.span.column}: error" in rendered and "^" in rendered


def test_a_batch_with_stream_k_is_refused_and_with_persistent_tiles_compiles():
    """batch: strided on the wgmma path: 3-D tensor maps and the tiles of every GEMM in one persistent walk;
    stream-K's workspace and fixup know one GEMM only, so the pair is an error at `batch`."""
    batched = TEXT.replace("bounds: checked;", "bounds: checked; batch: strided;")
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", batched.replace("schedule: persistent", "schedule: stream_k")))
    [error] = [d for d in caught.value.diagnostics if "stream_k is not supported yet" in d.message]
    assert batched.splitlines()[error.span.line - 1][error.span.column - 1:].startswith("strided") and "persistent" in error.hint
    cuda = compile_text(batched, "case.gemm").cuda
    assert "tma_load_3d" in cuda and "tma_load_2d(" not in cuda
    assert "for (int work = blockIdx.x; work < tile_count * batch; work += gridDim.x)" in cuda
    assert "* const C = C_batch + (size_t)gemm * stride_c;" in cuda
    assert "const cuuint64_t dims[3] = {(cuuint64_t)inner, (cuuint64_t)outer, (cuuint64_t)batch};" in cuda
    assert "hgemm_h100_launch_batched(" in cuda


def test_a_fuse_chain_with_stream_k_reads_its_vectors_and_residual_only_in_a_tile_s_last_piece():
    """The block that finishes a stream-K tile adds the others' partial sums before its epilogue, so a fuse chain
    sees whole sums; the producer warp stages the chain's vectors, and a consumer starts R's boxes, only for that
    piece, the one whose epilogue reads them (a piece that stops inside a tile would leave them unread)."""
    text = (ROOT / "specs" / "hgemm_h100_bf16c_64x128_sk.gemm").read_text().replace(
        "epilogue: alpha_beta; ", "").replace("target", "fuse { bias: n; residual: bf16 row; }\n    target")
    cuda = compile_text(text, "case.gemm").cuda
    staged = re.search(r"if \(k_end == k_tiles\) \{\s*mbarrier_wait\(smem_u32\(vectors_empty\)", cuda)
    started = re.search(r"if \(k_end == k_tiles\) \{\s*if \(residual_staged\)", cuda)
    assert staged and started
    persistent = compile_text(text.replace("schedule: stream_k", "schedule: persistent"), "case.gemm").cuda
    assert "k_end == k_tiles" not in persistent


def test_accumulators_over_the_consumer_registers_are_an_error():
    found = errors_of("warpgroups: 2", "warpgroups: 1")  # 128 rows on one warpgroup: 256 accumulators
    assert any("setmaxnreg can give a consumer only" in d.message for d, _ in found)


THREE_CONSUMERS = (TEXT.replace("128x256x64", "192x256x64").replace("warpgroups: 2", "warpgroups: 3")
                   .replace("m64n256k16", "m64n128k16").replace("stages: 4", "stages: 3"))


def test_three_consumers_of_128_accumulators_take_registers_from_the_producer():
    """512 threads launch at 128 registers; with the producer at 40 the consumers would get 152, short of
    the 160 that 128 accumulators and the reserve need, so the producer keeps 32 (verified on an H200,
    2026-11-25: this tiling passed `verify` at 333x517x129 and 4095x4097x4096)."""
    layout = WgmmaLayout(spec_of(THREE_CONSUMERS))
    assert (layout.entry_registers, layout.producer_registers, layout.consumer_registers) == (128, 32, 160)
    assert layout.consumer_registers_needed == 160
    assert layout.producer_registers + 3 * layout.consumer_registers <= 4 * layout.entry_registers
    source = compile_text(THREE_CONSUMERS, "case.gemm").cuda
    assert "setmaxnreg.dec.sync.aligned.u32 32" in source and "setmaxnreg.inc.sync.aligned.u32 160" in source


def test_an_instruction_too_wide_for_the_launch_cap_is_an_error_naming_a_narrower_one():
    """ptxas compiles each wgmma under the launch cap, before setmaxnreg: three consumers (128 registers at
    launch) cannot hold one m64n256k16's 128 accumulators ("C7602 ... Try 154", nvcc 13.0); m64n128k16 fits."""
    text = THREE_CONSUMERS.replace("m64n128k16", "m64n256k16")
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    [error] = [d for d in caught.value.diagnostics if "C7602" in d.message]
    assert "one m64n256k16 needs about 154 registers" in error.message and "leave 128 at launch" in error.message
    assert "m64n128k16" in error.hint and "m64n256k16" in text.splitlines()[error.span.line - 1]
    assert spec_of(THREE_CONSUMERS).threads.warpgroups == 3  # the narrower instruction validates


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("tile, warpgroups, shape", [("192x192x64", 3, "m64n192k16"), ("256x128x64", 4, "m64n128k16")])
def test_the_widest_instructions_the_launch_cap_admits_build(tile, warpgroups, shape, tmp_path):
    """The rule's boundary, held to ptxas: 96 accumulators under 128 registers, 64 under 96 (one short of
    C7602 would be the next width up)."""
    from gemmdsl.build import build

    text = (TEXT.replace("128x256x64", tile).replace("warpgroups: 2", f"warpgroups: {warpgroups}")
            .replace("m64n256k16", shape).replace("stages: 4", "stages: 3"))
    artifacts = compile_text(text, "case.gemm")
    resources = build(artifacts.cuda, artifacts.name, artifacts.spec.target.code).resources
    assert resources.spills == 0 and not resources.wgmma_serialized


def test_the_producer_keeps_40_registers_when_the_consumers_have_enough():
    """Two consumers need 160 of the 232 they get with the producer at 40: nothing moves further."""
    layout = WgmmaLayout(spec_of())
    assert layout.producer_registers == 40 and layout.consumer_registers == 232


def test_tiles_no_producer_share_can_feed_are_still_an_error():
    """Four consumers of 128 accumulators: even at setmaxnreg's least (24), 640 threads leave each
    consumer less than 160 registers."""
    text = (THREE_CONSUMERS.replace("192x256x64", "256x256x64").replace("warpgroups: 3", "warpgroups: 4")
            .replace("stages: 3", "stages: 2"))
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    assert any("setmaxnreg can give a consumer only" in d.message for d in caught.value.diagnostics)

def test_hopper_keys_outside_a_wgmma_spec_are_errors():
    text = (ROOT / "specs" / "hgemm_h100_mma.gemm").read_text().replace("swizzle: xor(3,3,3)", "swizzle: 128B")
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    assert any("needs a wgmma spec" in d.message for d in caught.value.diagnostics)
    text = text.replace("swizzle: 128B", "swizzle: xor(3,3,3)").replace("warps: 2x4;", "warpgroups: 2;")
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    assert any("applies to wgmma specs only" in d.message for d in caught.value.diagnostics)


# --- the swizzle and the descriptor ---------------------------------------------------------------


def test_128b_swizzle_is_the_chunk_xor_row_rule_and_cute_swizzle_3_4_3():
    for row in range(16):
        for byte in range(128):
            linear = row * 128 + byte
            assert swizzled_offset(row, byte) == linear ^ ((linear >> 3) & 0x70)  # Swizzle<3,4,3> on bytes
            assert swizzled_offset(row, byte) // 16 % 8 == (byte // 16) ^ (row % 8)


def test_128b_swizzle_is_a_permutation_and_spreads_a_column_over_all_banks():
    offsets = {swizzled_offset(row, byte) for row in range(8) for byte in range(128)}
    assert offsets == set(range(1024))
    for chunk in range(8):  # 8 rows' same 16-byte chunk (one k16 step of 8 rows): 8 distinct bank groups
        assert len({swizzled_offset(row, chunk * 16) % 128 // 16 for row in range(8)}) == 8


def test_descriptor_matches_the_prototype_encoding():
    for address in (0, 1024, 0x1C400, 0x3FC00):
        assert descriptor(address) == ((address & 0x3FFFF) >> 4) | 1 << 16 | 64 << 32 | 1 << 62
    assert descriptor(1024 + 32) - descriptor(1024) == 2  # one k16 step of 16-bit elements


# --- the generated code ------------------------------------------------------------------------------


def test_generated_kernel_has_the_warp_specialized_structure():
    cuda = compile_path(SPEC).cuda
    for piece in ("setmaxnreg.dec.sync.aligned.u32 40", "setmaxnreg.inc.sync.aligned.u32 232",
                  "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", "cp.async.bulk.tensor.2d",
                  "mbarrier.try_wait.parity", "fence.mbarrier_init", "__launch_bounds__(384, 1)",
                  "const __grid_constant__ hgemm_h100_tensor_map map_a", "CU_TENSOR_MAP_SWIZZLE_128B",
                  "cudaGetDriverEntryPointByVersion", "static thread_local hgemm_h100_map_cache cache;",
                  "if (lda % 8 != 0 || ldb % 8 != 0) return cudaErrorInvalidValue;",
                  "const long long blocks = sms > 0 && tiles > sms ? sms : tiles;"):
        assert piece in cuda, piece
    # The launcher keeps every spec's C signature.
    assert re.search(r'extern "C" cudaError_t hgemm_h100_launch_ld\(const __nv_bfloat16\* A, int lda, '
                     r'const __nv_bfloat16\* B, int ldb, float\* C, int ldc, int M, int N, int K, float alpha, '
                     r'float beta, cudaStream_t stream\)', cuda)


def test_metadata_describes_the_tensor_maps_and_the_persistent_grid():
    artifacts = compile_path(SPEC)
    metadata = artifacts.metadata
    assert metadata["target"] == "sm_90a" and metadata["dynamic_smem_bytes"] == 230464
    assert metadata["launch"]["grid_rule"] == "persistent"
    assert metadata["tensor_maps"]["c"] == {"dims": ["N", "M"], "box": [32, 64], "boxes": 8, "element_bytes": 4,
                                            "swizzle_bytes": 128, "dtype": "f32"}
    assert metadata["tensor_maps"]["a"] == {"dims": ["K", "M"], "box": [64, 128], "boxes": 1, "element_bytes": 2,
                                            "swizzle_bytes": 128, "dtype": "bf16"}
    assert metadata["tensor_maps"]["b"]["box"] == [64, 256]
    assert metadata["requires"]["vector_elements"] == {"a": 8, "b": 8, "c": 1}
    assert metadata["unit"] == "bf16"


def test_exact_bounds_and_tiles_schedule_and_f16_compile():
    text = (TEXT.replace("bounds: checked", "bounds: exact").replace("schedule: persistent", "schedule: tiles")
            .replace("bf16", "f16").replace("c: f32 row", "c: f16 row"))
    cuda = compile_text(text, "case.gemm").cuda
    assert ".f32.f16.f16" in cuda and "CU_TENSOR_MAP_DATA_TYPE_FLOAT16" in cuda
    assert "if (M % 128 != 0 || N % 256 != 0 || K % 64 != 0) return cudaErrorInvalidValue;" in cuda
    assert "blocks = sms" not in cuda
    assert "__floats2half2_rn" in cuda


TF32_SPEC = ROOT / "specs" / "tf32_h100.gemm"
TF32_TEXT = "gemm tf32_h100 {" + TF32_SPEC.read_text().split("gemm tf32_h100 {", 1)[1]


def test_tf32_spec_is_k8_on_f32_words_with_the_same_ring_as_bf16():
    layout = WgmmaLayout(load_spec(TF32_SPEC))
    bf16 = WgmmaLayout(spec_of())
    assert layout.shape == ir.WgmmaShape(n=256, k=8) and layout.bk == 32 and layout.element_bytes == 4
    # A k-step is 32 bytes of either operand type, so the descriptors move as for bf16.
    steps = [(x.k_step(ir.Operand.A), x.k_step(ir.Operand.B), x.row_step(ir.Operand.A), x.row_step(ir.Operand.B))
             for x in (layout, bf16)]
    assert steps[0] == steps[1] == (2, 2, 512, 2048)
    assert layout.stage_bytes == bf16.stage_bytes and layout.k_steps == bf16.k_steps == 4
    artifacts = compile_path(TF32_SPEC)
    cuda, metadata = artifacts.cuda, artifacts.metadata
    assert "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32" in cuda
    assert '" %128, %129, 1, 1, 1;\\n"' in cuda  # TF32 takes no transpose immediates
    assert "CU_TENSOR_MAP_DATA_TYPE_TFLOAT32" in cuda and "if (lda % 4 != 0 || ldb % 4 != 0)" in cuda
    assert metadata["unit"] == "tf32" and metadata["tensor_maps"]["a"]["dtype"] == "tf32"  # TMA rounds
    assert metadata["tensor_maps"]["a"]["box"] == [32, 128]
    request = tensor_map_requests(metadata["tensor_maps"], {"a": 0, "b": 0}, 64, 64, 64, {"a": 64, "b": 64})["a"]
    assert request.data_type == 11 and request.strides == (256,)  # CU_TENSOR_MAP_DATA_TYPE_TFLOAT32: rounds


@pytest.mark.parametrize("old, new, message", [
    ("precision: tf32; ", "", "need a precision"),
    ("m64n256k8;", "m64n256k16;", "f32 operands (as TF32) take m64nNk8"),
    ("b: f32 col", "b: f32 row", "TF32 wgmma reads k-major operands only"),
    ("128x256x32", "128x256x64", "the 128-byte swizzle span (32 elements)"),
])
def test_tf32_rules_report_position_and_hint(old, new, message):
    assert TF32_TEXT.count(old) == 1, old
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", TF32_TEXT.replace(old, new)))
    errors = [d for d in caught.value.diagnostics if d.severity is Severity.ERROR]
    assert any(message in d.message and d.hint for d in errors), [d.message for d in errors]


def test_store_tma_stages_c_in_swizzled_boxes_and_stores_them_with_tma():
    layout = WgmmaLayout(spec_of())
    box = layout.c_box
    assert layout.tma_store and (box.inner, box.outer, box.count, box.bytes) == (32, 64, 8, 8192)
    assert layout.staging_bytes == 2 * 2 * 8192 and box.data_type == "f32"  # C as it is, never TF32
    cuda = compile_path(SPEC).cuda
    for piece in ("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group", "cp.async.bulk.wait_group.read %0;",
                  "const __grid_constant__ hgemm_h100_tensor_map map_c", "maps->map_c, C, M, N, K",
                  "(smem + STAGES * STAGE_BYTES + STAGING_BYTES)", "if (staged && tid == 0) bulk_wait_all();",
                  "CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, C, N, M, ldc, 32, 64);",
                  "(long long)N * 4 % 16 == 0"):
        assert piece in cuda, piece
    # The kernel and the launcher test the same condition for staging (C, ldc and N in 16-byte units).
    assert cuda.count("% 16 == 0 && (long long)ldc * 4 % 16 == 0 && (long long)N * 4 % 16 == 0") == 2
    bf16c = WgmmaLayout(load_spec(ROOT / "specs" / "hgemm_h100_bf16c.gemm"))
    box = bf16c.c_box  # 16-bit C: a warp's 16 rows per box, two buffers per warp: the same 32 KiB
    assert (box.inner, box.outer, box.count, box.data_type) == (64, 16, 4, "bf16") and bf16c.stmatrix_store
    assert bf16c.staging_bytes == 2 * 4 * 2 * 2048 and not layout.stmatrix_store


def test_16_bit_c_is_staged_per_warp_by_stmatrix_where_tma_reads_it_back():
    """Each lane's stmatrix row address, as the kernel computes it, is where the 128-byte swizzle puts the
    row and 8-column chunk that lane's matrix row holds: matrices 0-3 are rows 0-7 and 8-15 of chunk j,
    then of chunk j + 1 (registers d[0..3], e[0..3] of the accumulator layout)."""
    cuda = compile_path(ROOT / "specs" / "hgemm_h100_bf16c.gemm").cuda
    offset = re.search(r"const unsigned lane_offset = (.*);", cuda).group(1)
    step = re.search(r"stmatrix_x4\(base \^ \(j \* (\d+)\)", cuda).group(1)
    for piece in ("stmatrix.sync.aligned.m8n8.x4.shared.b16", "if (lane == 0) bulk_wait_read<STORE_BUFFERS - 1>();",
                  "mr * 64 + warp * 16);", "if (staged && tid % 32 == 0) bulk_wait_all();", "acc[i] *= alpha;",
                  "for (int j = 0; j < C_BOX_COLS / 8; j += 2)"):
        assert piece in cuda, piece
    assert "warpgroup_sync(consumer)" not in cuda.split("if (staged) {", 1)[1].split("else {", 1)[0]
    written = set()
    for j in range(0, 8, 2):
        for lane in range(32):
            matrix, row_in_matrix = lane // 8, lane % 8
            row, chunk = (matrix & 1) * 8 + row_in_matrix, j + matrix // 2
            address = eval(offset, {"lane": lane}) ^ (j * int(step))  # noqa: S307 (the kernel's own expression)
            assert address == row * 128 + ((chunk ^ row) & 7) * 16, (lane, j)
            written.add(address)
    assert written == set(range(0, 16 * 128, 16))  # every 16-byte chunk of the 16 x 128-byte box, once


def test_a_store_epilogue_stages_c_too():
    """`epilogue: store` with `store: tma` gets the bulk-store helpers, as `alpha_beta` does."""
    for name in ("hgemm_h100", "hgemm_h100_bf16c"):
        text = (ROOT / "specs" / f"{name}.gemm").read_text().replace("epilogue: alpha_beta", "epilogue: store")
        cuda = compile_text(text, "case.gemm").cuda
        assert "void bulk_wait_read()" in cuda and "tma_store_2d(&map_c" in cuda


def test_store_tma_rules():
    with pytest.raises(CompileError) as caught:  # only Hopper's path stages C through TMA
        load(SourceFile("case.gemm", (ROOT / "specs" / "hgemm_h100_mma.gemm").read_text().replace(
            "fragments: double;", "fragments: double; store: tma;")))
    assert any("applies to wgmma specs only" in d.message for d in caught.value.diagnostics)
    text = TEXT.replace("128x256x64", "128x200x64").replace("m64n256k16", "m64n200k16")
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    assert any("boxes of 32 columns" in d.message and d.hint for d in caught.value.diagnostics)
    direct = spec_of(TEXT.replace("store: tma;", "store: direct;"))
    assert WgmmaLayout(direct).c_box is None and "tensor_map map_c" not in compile_text(
        TEXT.replace("store: tma;", "store: direct;"), "case.gemm").cuda


def test_runtime_passes_a_zero_map_for_a_c_tma_cannot_store():
    maps = compile_path(SPEC).metadata["tensor_maps"]
    cache = TensorMapCache(lambda request: request.address.to_bytes(8, "little") * 16)
    packed = cache.get(maps, {"a": 16, "b": 32, "c": None}, 64, 64, 64, {"a": 64, "b": 64, "c": 65})
    assert len(packed) == 3 and cache.encodes == 2 and packed[2].tobytes() == bytes(128)
    packed = cache.get(maps, {"a": 16, "b": 32, "c": 48}, 64, 64, 64, {"a": 64, "b": 64, "c": 64})
    assert cache.encodes == 5 and numpy.frombuffer(packed[2].tobytes(), "<u8")[0] == 48


X3_SPEC = ROOT / "specs" / "sgemm_3xtf32_h100.gemm"


def test_3xtf32_splits_b_in_the_producer_and_a_in_registers_and_sums_three_products_per_k_tile_apart():
    layout = WgmmaLayout(load_spec(X3_SPEC))
    assert layout.split and layout.products == 3 and layout.wgmma_per_k_tile == 4 * 3
    assert layout.a_in_registers and layout.a_fragment_registers == 2 * 4 * 4  # big and small, 4 k-steps
    assert layout.split_bytes == 4 * 16384 == 65536  # B's small parts, one k-tile per stage
    assert layout.mbarriers == 3 * 4 and layout.splitter_threads == 96
    assert layout.smem_bytes == 4 * 32768 + 65536 + 12 * 8 + 1024
    # acc, part, A's fragments and a few addresses: ptxas compiled it without spilling (nvcc 13.0)
    assert layout.consumer_registers_needed == 2 * 64 + 32 + 8 <= layout.consumer_registers
    assert layout.smem_read_bytes_per_k_tile == 2 * 12 * 128 * 8 * 4  # B only: A comes from registers
    assert layout.split_lsu_bytes_per_k_tile == 16384 + 2 * 16384  # A's loads; B read, its small parts written
    assert layout.tma_data_type == "f32"  # the words as they are: the kernel splits them
    artifacts = compile_path(X3_SPEC)
    cuda, metadata = artifacts.cuda, artifacts.metadata
    assert metadata["unit"] == "3xtf32" and metadata["tensor_maps"]["b"]["dtype"] == "f32"
    assert "CU_TENSOR_MAP_DATA_TYPE_FLOAT32" in cuda and "TFLOAT32" not in cuda
    for piece in ("(__float_as_uint(x) + 0x1000u) & 0xFFFFE000u", "fence.proxy.async.shared::cta;",
                  "else if (tid >= 32) {", "mbarrier_init(smem_u32(ready + s), SPLITTER_THREADS);",
                  "constexpr int SPLITTER_THREADS = 96;", "mbarrier_arrive(smem_u32(ready + stage));",
                  "mbarrier_wait(smem_u32(ready + stage), phase);",
                  "float4* const small = reinterpret_cast<float4*>(split + stage * B_STAGE_BYTES);",
                  '" {%64, %65, %66, %67}, %68, 0, 1, 1;\\n"', '" {%64, %65, %66, %67}, %68, 1, 1, 1;\\n"',
                  "a_small[mr][kk][j] = __float_as_uint(x - big);  // read truncated to TF32", "acc[i] += part[i];",
                  "if (tid == 0) mbarrier_arrive(smem_u32(empty + stage));"):
        assert piece in cuda, piece
    # No cvt.rna (ptxas expands it), and no shared-memory form of wgmma left unused.
    assert "asm(\"cvt.rna" not in cuda and "unsigned long long a, unsigned long long b" not in cuda
    # small x big (overwriting `part` at kk = 0) and big x small for every k-step, then big x big for every one.
    body = cuda[cuda.index("if (kk == 0) wgmma_m64n128k8_rs_set("):]
    small_terms = body.index("a_big[mr][kk], small_b + 2 * kk + 1024 * nr")
    big_terms = body.index("a_big[mr][kk], big_b + 2 * kk + 1024 * nr")
    assert small_terms < body.index("for (int kk = 0", 1) < big_terms
    assert "wgmma_wait<1>" not in cuda.split("// Consumers.")[1]


def test_tf32_rounding_helper_rounds_to_nearest_with_ties_away_from_zero():
    """The C expression of ctext.TF32_HELPER, evaluated on the host over float32 bit patterns, against
    TF32 rounding done exactly: 11 significant bits (a fixed quantum of 2^-136 below 2^-126), ties away
    from zero; overflow beyond TF32's largest value gives an infinity, as cvt.rna.tf32.f32 does."""
    from gemmdsl.emit.ctext import TF32_HELPER

    add, mask = re.search(r"\(__float_as_uint\(x\) \+ (0x[0-9A-Fa-f]+)u\) & (0x[0-9A-Fa-f]+)u;", TF32_HELPER).groups()
    rng = numpy.random.default_rng(7)
    bits = rng.integers(0, 0x7F800000, 200_000, dtype=numpy.uint32)  # finite magnitudes, subnormals included
    bits = numpy.concatenate([bits, bits | 0x80000000, numpy.array([0x1000, 0x3F801000, 0x7F7FF000], numpy.uint32)])
    rounded = ((bits + numpy.uint32(int(add, 16))) & numpy.uint32(int(mask, 16))).view(numpy.float32)
    x = bits.view(numpy.float32).astype(numpy.float64)
    exponent = numpy.floor(numpy.log2(numpy.maximum(numpy.abs(x), 2.0 ** -126)))
    quantum = 2.0 ** (exponent - 10)
    expected = numpy.sign(x) * numpy.floor(numpy.abs(x) / quantum + 0.5) * quantum
    expected[numpy.abs(expected) > numpy.finfo(numpy.float32).max] *= numpy.inf
    assert numpy.array_equal(rounded.astype(numpy.float64), expected)


def test_3xtf32_splits_leave_under_2_to_the_minus_21_of_each_word():
    """The two splits the emitters write, with the tensor cores' reading of a word (its top 19 bits)
    emulated on the host: T15's rounded big part and unrounded rest (emit/mma_sync.py, A on Hopper's path)
    and T16's word-as-is big part and rest rounded as wgmma reads it (`tf32_rest`, B on Hopper's path).
    Both represent each word within 2^-21 of its binade. T15's errors average out; T16's ties, common in a
    rest of at most 13 significant bits, round away from zero, so its errors lean one way (3:1), by under
    2^-24 on average; truncating both parts (tried on the H100: 3.5x cuBLAS SGEMM's error on wide-range
    data) errs one way always, twice as far."""
    from gemmdsl.paths.wgmma.split import SPLIT_HELPERS

    assert "(__float_as_uint(x) & 0xFFFFE000u)) + 0x1000u)" in SPLIT_HELPERS
    rng = numpy.random.default_rng(11)
    bits = rng.integers(0x0C800000, 0x72800000, 200_000, dtype=numpy.uint32)  # normal words, 2^-102..2^102
    bits = numpy.concatenate([bits, bits | 0x80000000])
    x = bits.view(numpy.float32)
    mask = numpy.uint32(0xFFFFE000)

    def read(words):  # what mma.sync and wgmma multiply: the top 19 bits
        return (words.view(numpy.uint32) & mask).view(numpy.float32).astype(numpy.float64)

    def plus_half(words):  # half a TF32 unit added to the bits: read as ctext.TF32_HELPER rounds
        return (words.view(numpy.uint32) + numpy.uint32(0x1000)).view(numpy.float32)

    rest = x - (bits & mask).view(numpy.float32)
    big = (plus_half(x).view(numpy.uint32) & mask).view(numpy.float32)
    splits = {"T15": (big, x - big), "T16": (x, plus_half(rest)), "both truncated": (x, rest)}
    binade = 2.0 ** numpy.floor(numpy.log2(numpy.abs(x.astype(numpy.float64))))
    signed = {name: (x.astype(numpy.float64) - read(b) - read(s)) / binade * numpy.sign(x)
              for name, (b, s) in splits.items()}
    for name in ("T15", "T16"):
        assert numpy.abs(signed[name]).max() < 2.0 ** -21
        assert (signed[name] > 0).any() and (signed[name] < 0).any()
    assert abs(signed["T15"].mean()) < 0.05 * 2.0 ** -24
    assert abs(signed["T16"].mean()) < 2.0 ** -24 < signed["both truncated"].mean()
    assert (signed["both truncated"] >= 0).all()


def test_3xtf32_accumulator_sets_must_fit_the_consumer_registers():
    text = X3_SPEC.read_text().replace("128x128x32", "128x256x32").replace("m64n128k8", "m64n256k8")
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text))
    assert any("two sets" in d.message and "32 of A's fragment words" in d.message and "296 registers in all"
               in d.message for d in caught.value.diagnostics)


NN_SPEC = ROOT / "specs" / "hgemm_h100_nn.gemm"


def test_mn_major_b_comes_in_64_column_panels_read_through_the_transposed_descriptor():
    layout = WgmmaLayout(load_spec(NN_SPEC))
    a, b = ir.Operand.A, ir.Operand.B
    assert layout.k_major(a) and not layout.k_major(b)
    box = layout.boxes[b]
    assert (box.dims, box.inner, box.outer, box.count, box.bytes) == (("N", "K"), 64, 64, 4, 8192)
    assert box.count * box.bytes == layout.stage_bytes_of(b)
    # The prototype's measured descriptor: 8192 bytes between panels (leading), 1024 between 8 k rows
    # (stride), a k16 step 16 rows of 128 bytes down the panel.
    assert layout.descriptor_offsets(b) == (8192 >> 4, 1024 >> 4) and layout.descriptor_offsets(a) == (1, 64)
    assert (layout.k_step(a), layout.k_step(b)) == (2, 2048 >> 4)
    cuda = compile_path(NN_SPEC).cuda
    assert '" %128, %129, 1, 1, 1, 0, 1;\\n"' in cuda  # B transposed, A not
    assert "desc_a + 2 * kk + 512 * mr, desc_b + 128 * kk + 2048 * nr" in cuda
    for panel in range(4):
        offset = f" + {panel * 8192}" if panel else ""
        column = f" + {panel * 64}" if panel else ""
        assert f"tma_load_2d(smem_u32(tile_a + A_STAGE_BYTES{offset}), &map_b, block_n{column}, kt * BK, barrier);" in cuda
    assert "tensor_map_of(&cache.map_b, encode, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, B, N, K, ldb, 64, 64);" in cuda
    requests = tensor_map_requests(compile_path(NN_SPEC).metadata["tensor_maps"], {"a": 0, "b": 0}, 333, 517, 136,
                                   {"a": 136, "b": 520})
    assert (requests["b"].dims, requests["b"].strides, requests["b"].box) == ((517, 136), (1040,), (64, 64))


@pytest.mark.parametrize("a, b", [("row", "col"), ("row", "row"), ("col", "col"), ("col", "row")])
def test_every_16_bit_layout_compiles_with_the_orders_tma_lands(a, b):
    text = TEXT.replace("a: bf16 row; b: bf16 col", f"a: bf16 {a}; b: bf16 {b}")
    text = text.replace("smem a   { order: mk; swizzle: 128B; }\n", "").replace(
        "smem b   { order: nk; swizzle: 128B; }\n", "")  # the default orders follow the layouts
    spec = load(SourceFile("case.gemm", text))[0]
    layout = WgmmaLayout(spec)
    assert layout.k_major(ir.Operand.A) == (a == "row") and layout.k_major(ir.Operand.B) == (b == "col")
    boxes = sum(box.count * box.bytes for box in layout.boxes.values())
    assert boxes == layout.stage_bytes  # what the full barrier expects is what the copies bring
    cuda = compile_text(text, "case.gemm").cuda
    assert f"1, 1, 1, {int(a == 'col')}, {int(b == 'row')};" in cuda


def test_mn_major_tiles_must_be_whole_panels():
    text = TEXT.replace("b: bf16 col", "b: bf16 row").replace("order: nk", "order: kn")
    with pytest.raises(CompileError) as caught:
        load(SourceFile("case.gemm", text.replace("m64n256k16", "m64n32k16")))
    assert any("whole 64-column panels" in d.message for d in caught.value.diagnostics)


# --- the runtime's tensor maps (no GPU needed) ------------------------------------------------------------


def test_tensor_map_requests_follow_the_metadata():
    maps = compile_path(SPEC).metadata["tensor_maps"]
    requests = tensor_map_requests(maps, {"a": 0x1000, "b": 0x2000}, 333, 517, 136, {"a": 136, "b": 144})
    a, b = requests["a"], requests["b"]
    assert (a.data_type, a.address, a.dims, a.strides, a.box, a.swizzle) == (9, 0x1000, (136, 333), (272,), (64, 128), 3)
    assert (b.dims, b.strides, b.box) == ((136, 517), (288,), (64, 256))


def test_a_batchs_tensor_maps_have_the_gemm_as_a_third_dimension():
    """As NAME_launch_batched encodes them: the batch stride (bytes) between GEMMs, boxes of one GEMM; the
    cache tells two batches apart by their strides."""
    maps = compile_path(ROOT / "specs" / "hgemm_h100_batched.gemm").metadata["tensor_maps"]
    strides = {"a": 333 * 136, "b": 517 * 144, "c": 333 * 520}
    requests = tensor_map_requests(maps, {"a": 0x1000, "b": 0x2000, "c": 0x3000}, 333, 517, 136,
                                   {"a": 136, "b": 144, "c": 520}, strides, batch=3)
    a, c = requests["a"], requests["c"]
    assert (a.dims, a.strides, a.box) == ((136, 333, 3), (272, 333 * 136 * 2), (64, 128, 1))
    assert (c.dims, c.strides, c.box) == ((517, 333, 3), (1040, 333 * 520 * 2), (64, 16, 1))
    cache = TensorMapCache(lambda request: request.address.to_bytes(8, "little") * 16)
    lds = {"a": 136, "b": 144, "c": 520}
    cache.get(maps, {"a": 16, "b": 32, "c": 48}, 333, 517, 136, lds, strides, 3)
    cache.get(maps, {"a": 16, "b": 32, "c": 48}, 333, 517, 136, lds, {**strides, "b": 0}, 3)
    assert cache.encodes == 6


def test_tensor_maps_are_packed_byte_for_byte_and_cached_per_call_shape():
    raw = bytes(range(128))
    packed = pack(raw)
    assert packed.dtype.itemsize == TENSOR_MAP_BYTES and packed.tobytes() == raw
    assert packed.dtype.alignment >= 8
    with pytest.raises(ValueError):
        pack(b"\0" * 64)
    maps = compile_path(SPEC).metadata["tensor_maps"]
    cache = TensorMapCache(lambda request: request.address.to_bytes(8, "little") * 16)
    first = cache.get(maps, {"a": 16, "b": 32}, 64, 64, 64, {"a": 64, "b": 64})
    again = cache.get(maps, {"a": 16, "b": 32}, 64, 64, 64, {"a": 64, "b": 64})
    assert cache.encodes == 2 and first is again
    cache.get(maps, {"a": 16, "b": 48}, 64, 64, 64, {"a": 64, "b": 64})
    assert cache.encodes == 4
    assert numpy.frombuffer(first[1].tobytes(), "<u8")[0] == 32


def test_runtime_refuses_what_tma_cannot_describe_and_sizes_the_persistent_grid():
    req = KernelRequirements.from_metadata(compile_path(SPEC).metadata)
    assert req.tensor_maps is not None and req.launch.grid_rule is GridRule.PERSISTENT
    assert req.launch.entries.scalar is None
    views = {"A": OperandView("A", 333, 129, 1, 129, 0, 0x10000, 2), "B": OperandView("B", 129, 517, 1, 129, 0,
                                                                                      0x20000, 2),
             "C": OperandView("C", 333, 517, 1, 517, 0, 0x30004, 4)}
    with pytest.raises(ValueError, match="TMA"):
        choose_entry(req, views)
    views["A"] = OperandView("A", 333, 136, 1, 136, 0, 0x10000, 2)
    views["B"] = OperandView("B", 136, 517, 1, 136, 0, 0x20000, 2)
    assert choose_entry(req, views) == "hgemm_h100_kernel"  # C's odd alignment is the kernel's business
    assert req.launch.grid_for(4096, 4096, 4096, 1, 132) == (132, 1, 1)
    assert req.launch.grid_for(100, 100, 100, 1, 132) == (1, 1, 1)


# --- nvcc ------------------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("spec", spec_params([ROOT / "specs" / f"{name}.gemm" for name in [
    "hgemm_h100", "hgemm_h100_bf16c", "hgemm_h100_f16", "hgemm_h100_nn", "tf32_h100", "sgemm_3xtf32_h100",
    "sgemm_3xtf32_h100_sk", "sgemm_3xtf32_h100_128x192", "sgemm_3xtf32_h100_128x192_sk", "hgemm_h100_batched",
    "hgemm_h100_128x64", "hgemm_h100_bf16c_128x64", "hgemm_h100_f16_128x64", "tf32_h100_128x64", "hgemm_h100_128x192",
    "hgemm_h100_bf16c_128x192", "hgemm_h100_f16_128x192", "tf32_h100_128x192"]]))
def test_nvcc_builds_the_hopper_specs_for_sm_90a_without_spills(spec, nvcc_build):
    """... and without ptxas serializing the wgmma (C7515), which a stream-K loop from a variable first
    k-tile once caused: 10% slower at every size (docs/performance.md, Hopper)."""
    resources = nvcc_build(spec)[1].resources
    assert resources.registers <= 168 and resources.spills == 0 and not resources.wgmma_serialized


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("name", ["hgemm_h100", pytest.param("hgemm_h100_bf16c", marks=pytest.mark.slow)])
def test_nvcc_builds_a_store_epilogue_staged_through_tma(name):
    from gemmdsl.build import build

    text = (ROOT / "specs" / f"{name}.gemm").read_text().replace("epilogue: alpha_beta", "epilogue: store")
    artifacts = compile_text(text, "case.gemm")
    resources = build(artifacts.cuda, artifacts.name, artifacts.spec.target.code).resources
    assert resources.spills == 0 and not resources.wgmma_serialized


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("name", ["hgemm_h100", pytest.param("sgemm_3xtf32_h100_sk", marks=pytest.mark.slow)])
def test_the_stated_build_command_builds_the_wgmma_kernel(name, tmp_path):
    """`nvcc -gencode=arch=compute_90a,code=sm_90a -c NAME.cu`, the command the .cu and NAME.h state, builds the
    sm_90a code alone, the whole kernel with its wgmma (the compute_90 pass `-arch=sm_90a` adds stops at the
    file's guard: tests/test_arch_guard.py)."""
    import subprocess

    artifacts = compile_path(ROOT / "specs" / f"{name}.gemm")
    (tmp_path / f"{name}.cu").write_text(artifacts.cuda)
    command = f"nvcc -gencode=arch=compute_90a,code=sm_90a -c {name}.cu"
    assert f"// Build: {command}\n" in artifacts.cuda and f"(`{command}`" in artifacts.header
    done = subprocess.run([*command.split(), "-keep", "-Xptxas", "-v"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    (ptx,) = tmp_path.glob("*.ptx")  # one pass: the sm_90a code
    assert ".target sm_90a" in ptx.read_text()
    assert "wgmma.mma_async" in ptx.read_text() and "setmaxnreg" in ptx.read_text()
    assert re.search(r"Compiling entry function '\w+' for 'sm_90a'", done.stderr)
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump and shutil.which("nvdisasm"):
        sass = subprocess.run([cuobjdump, "-sass", f"{name}.o"], cwd=tmp_path, capture_output=True, text=True).stdout
        assert "HGMMA" in sass


def test_ptxas_serializing_wgmma_is_read_from_its_log():
    from gemmdsl.build import parse_ptxas

    log = """ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to \
non wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage in the \
function 'slow_kernel'
ptxas info    : Compiling entry function 'slow_kernel' for 'sm_90a'
ptxas info    : Function properties for slow_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers
ptxas info    : Compiling entry function 'fast_kernel' for 'sm_90a'
ptxas info    : Function properties for fast_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers"""
    slow, fast = parse_ptxas(log, "slow_kernel"), parse_ptxas(log, "fast_kernel")
    assert slow.wgmma_serialized and "SERIALIZED" in str(slow) and slow.as_dict()["wgmma_serialized"]
    assert not fast.wgmma_serialized and "SERIALIZED" not in str(fast)


def test_bench_rates_a_wgmma_kernel_against_wgmmas_peak():
    mma_sync_peak = PEAK_TFLOPS[90]["bf16"]
    hopper = SimpleNamespace(spec=load_spec(SPEC))
    ampere = SimpleNamespace(spec=load_spec(ROOT / "specs" / "hgemm_mma.gemm"))
    assert instruction_peak(hopper, "bf16", 90, mma_sync_peak) == WGMMA_PEAK_TFLOPS[90]["bf16"]
    assert instruction_peak(ampere, "bf16", 90, mma_sync_peak) == mma_sync_peak
    assert instruction_peak(SimpleNamespace(), "bf16", 90, mma_sync_peak) == mma_sync_peak  # a family


# --- stream-K ----------------------------------------------------------------------------------------

SK_SPEC = ROOT / "specs" / "sgemm_3xtf32_h100_sk.gemm"


def test_stream_k_shares_the_last_wave_in_the_analysis_and_the_launch():
    from gemmdsl.analysis import analyze

    artifacts = compile_path(SK_SPEC)
    layout = artifacts.plan.layout
    assert layout.persistent and layout.stream_k and layout.partial_bytes == 128 * 128 * 4
    # 4096^3 in 128x128 tiles: 1024 tiles, 7 whole waves of 132 and 100 tiles' 12,800 k-tiles shared by 132
    # blocks (97 each): 7 * 128 + 97 k-tiles on the busiest SM instead of 8 * 128.
    waves = analyze(artifacts.spec, problem=(4096, 4096, 4096), plan=artifacts.plan).facts["wgmma_waves"]
    assert (waves.tiles, waves.blocks, waves.sk_tiles, waves.sk_blocks) == (1024, 132, 100, 132)
    assert waves.efficiency == pytest.approx(1024 * 128 / ((7 * 128 + 97) * 132))
    persistent = analyze(load_spec(X3_SPEC), problem=(4096, 4096, 4096)).facts["wgmma_waves"]
    assert persistent.sk_tiles == 0 and persistent.efficiency == pytest.approx(1024 / (8 * 132))
    req = KernelRequirements.from_metadata(artifacts.metadata)
    assert req.launch.workspace == Workspace(partial_bytes=65536, consumers=2)
    # 64 tiles shared by 128 blocks: two a tile, each tile's pair starting at the same k-tiles (the aligned
    # split of the wgmma path, which leaves 4 SMs idle rather than split tiles unevenly)
    assert req.launch.grid_for(1000, 1000, 1000, 1, 132) == (128, 1, 1)
    assert req.launch.grid_for(2048, 2048, 2048, 1, 132) == (132, 1, 1)  # 256 tiles: 124 in the last wave, 6% idle
    cuda = artifacts.cuda
    assert "int sk_tiles, int sk_blocks, float* __restrict__ partials, unsigned* __restrict__ flags)" in cuda
    assert "cudaMallocAsync" in cuda and "sgemm_3xtf32_h100_sk_stream_k_split(tiles" in cuda
    # The consumers count their k-tiles from 0 (ptxas serializes wgmma in a loop from a variable start).
    assert "for (int kt = 0; kt < k_end - k_first; ++kt, ++it)" in cuda
    assert "for (int kt = k_first; kt < k_end; ++kt, ++it)" in cuda  # the producer's TMA coordinates


L2 = L2_BYTES_PER_CLOCK_PER_SM[90]
C_CYCLES = -(-128 * 256 * 2 * 2 // L2)  # a tile's C through L2, read and written (alpha_beta): 128 KiB either way
BF16_TMA = -(-48 * 1024 // L2)  # 128x256x64 bf16: 48 KiB per k-tile from L2
TF32X3_TENSOR = -(-128 * 128 * 32 * 3 // WGMMA_MACS_PER_CLOCK[90]["tf32"])  # three TF32 products


@pytest.mark.parametrize("spec, cycles, limit, share", [
    # 128x256x64 bf16: its k-tile from L2 at the profile's rate (1,229 cycles on the H200) is slower than wgmma
    # (1,025); 512 tiles of 64 k-tiles in 4 rounds over 132 SMs, plus the call's fixed latency
    ("hgemm_h100_bf16c", BF16_TMA, "TMA's bytes from L2",
     512 * 64 * -(-128 * 256 * 64 // WGMMA_MACS_PER_CLOCK[90]["bf16"]) / 132
     / (4 * (64 * BF16_TMA + C_CYCLES) + CALL_CYCLES[90])),
    # 3xTF32 128x128x32: three TF32 products, the consumer's wait (190) and its adds of `part` (64 accumulators,
    # two consumer warps per scheduler); 1024 tiles in 8 rounds
    ("sgemm_3xtf32_h100", TF32X3_TENSOR + 190 + 2 * 64, "wgmma's multiply-adds",
     1024 * 128 * TF32X3_TENSOR / 132 / (8 * (128 * (TF32X3_TENSOR + 190 + 2 * 64) + C_CYCLES) + CALL_CYCLES[90])),
])
def test_check_states_the_cycle_model_the_families_and_the_tuner_rank_by(spec, cycles, limit, share):
    from gemmdsl import tune
    from gemmdsl.analysis import analyze

    artifacts = compile_path(ROOT / "specs" / f"{spec}.gemm")
    size = (4096, 4096, 4096)
    bound = analyze(artifacts.spec, problem=size, plan=artifacts.plan).facts["wgmma_bound"]
    assert (bound.k_tile_cycles, bound.k_tile_limit) == (cycles, limit)
    assert bound.predicted_share == pytest.approx(share)
    tuner = tune.Survivor(None, artifacts.spec, tune.predict(artifacts.spec, size))
    assert bound.predicted_share == pytest.approx(tune.predicted_efficiency(tuner, [size]))
    assert bound.predicted_tflops < bound.bound_tflops


def test_persistent_specs_carry_no_stream_k_code():
    cuda = compile_path(SPEC).cuda
    assert "sk_tiles" not in cuda and "flag_wait" not in cuda and "for (int kt = 0; kt < k_tiles;" in cuda


def test_check_shouts_when_ptxas_serialized_the_wgmma():
    from gemmdsl.analysis import analyze
    from gemmdsl.check import format_report

    ptxas = {"registers": 168, "spill_stores": 0, "spill_loads": 0, "stack": 0, "static_smem": 0}
    spec = load_spec(SPEC)
    assert "SERIALIZED" not in format_report(analyze(spec, ptxas=dict(ptxas, wgmma_serialized=False)))
    assert "!!! ptxas SERIALIZED the kernel's wgmma" in format_report(analyze(spec, ptxas=dict(ptxas,
                                                                                              wgmma_serialized=True)))

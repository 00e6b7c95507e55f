"""The wgmma path's fuse chain vectors staged in shared memory (paths/wgmma/epilogue.py): a producer warp
loads each tile's bias and scales during the main loop, the consumers wait on `vectors_full` and read them
from shared memory in the epilogue, and release the buffer on `vectors_empty`; checked on the emitted code
of every shipped fused wgmma spec, on the layout's shared-memory budget and on the diagnostics."""
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmdsl import ir
from gemmdsl.compiler import compile_source
from gemmdsl.frontend import load
from gemmdsl.paths.wgmma.layout import MBARRIER_BYTES, WgmmaLayout
from gemmdsl.source import CompileError, SourceFile

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
STAGED = ["linear_gelu", "linear_gelu_128x128", "fp8_h100", "fp8_h100_fast", "fp8_rowwise"]


def cuda_of(name: str) -> str:
    return compile_source(SourceFile.read(SPECS / f"{name}.gemm")).cuda


def sections(cuda: str) -> tuple[str, str]:
    """The kernel's producer branch and its consumers' branch, without comments."""
    kernel = re.sub(r"//[^\n]*", "", cuda[cuda.index("__launch_bounds__("):].replace("// Consumers.", "CONSUMERS:"))
    producer = kernel[kernel.index("if (warpgroup == 0)"):kernel.index("CONSUMERS:")]
    consumers = kernel[kernel.index("CONSUMERS:"):]
    return producer, consumers[:consumers.index("#else")]  # the kernel's end: the other arch passes' trap


@pytest.mark.parametrize("name", STAGED)
def test_a_producer_warp_loads_the_vectors_into_shared_memory(name):
    producer, _ = sections(cuda_of(name))
    loader = producer[producer.index("else if (tid / 32 == 1)"):]
    spec = load(SourceFile.read(SPECS / f"{name}.gemm"))[0]
    for vector, _, _ in spec.fuse.vectors:
        assert re.search(rf"vectors\[\d+ \+ i\] = index < [MN] \? [^;]*{vector}\[index\]", loader), vector
    waits, arrives = loader.index("mbarrier_wait(smem_u32(vectors_empty)"), loader.index(
        "mbarrier_arrive(smem_u32(vectors_full))")
    assert waits < loader.index("vectors[") < arrives  # the buffer is free before the stores, full after


@pytest.mark.parametrize("name", STAGED)
def test_the_epilogue_reads_the_vectors_from_shared_memory_after_the_wait(name):
    cuda = cuda_of(name)
    _, consumers = sections(cuda)
    spec = load(SourceFile.read(SPECS / f"{name}.gemm"))[0]
    for vector, _, _ in spec.fuse.vectors:  # no global read of a vector anywhere in the consumers' code
        assert f"{vector}[" not in consumers and f"{vector}, " not in consumers.split("fuse_pair(", 1)[1]
    assert "load_fuse_m(" not in consumers and "load_fuse_n(" not in consumers
    helper = cuda[cuda.index("void fuse_pair("):]
    assert "load_fuse_n(" not in helper[:helper.index("\n}")]
    wait = consumers.index("mbarrier_wait(smem_u32(vectors_full), vectors_phase)")
    first_read = consumers.index("vectors[")
    release = consumers.index("mbarrier_arrive(smem_u32(vectors_empty))")
    assert wait < first_read < release and consumers.rindex("fuse_pair(") < release


def test_a_chain_without_vectors_stages_nothing():
    cuda = cuda_of("hgemm_h100_relu_residual")
    assert "vectors" not in cuda and "tid / 32 == 1" not in cuda
    assert WgmmaLayout(load(SourceFile.read(SPECS / "hgemm_h100_relu_residual.gemm"))[0]).vector_bytes == 0


def test_block_scales_are_read_in_the_k_loop_not_staged():
    cuda = cuda_of("fp8_blockwise")
    assert "vectors" not in cuda and "tid / 32 == 1" not in cuda
    assert WgmmaLayout(load(SourceFile.read(SPECS / "fp8_blockwise.gemm"))[0]).vector_bytes == 0


def wgmma_spec(section: str, stages: int = 3) -> ir.KernelSpec:
    text = (SPECS / "linear_gelu.gemm").read_text().replace("stages: 4", f"stages: {stages}")
    return load(SourceFile("staged.gemm", re.sub(r"fuse\s*\{[^}]*\}", f"fuse {{ {section} }}", text)))[0]


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(["", "bias: m;", "bias: n;", "bias: n f32;"]),
       st.sampled_from(["", "scale: row;", "scale: col;"]),
       st.sampled_from(["", "activation: relu;"]))
def test_the_buffer_holds_one_tiles_vectors_as_f32(bias, scale, activation):
    section = " ".join(filter(None, (bias, scale, activation))) or "activation: relu;"
    layout = WgmmaLayout(wgmma_spec(section))
    plain = WgmmaLayout(wgmma_spec("activation: relu;"))
    extents = [layout.bm if axis is ir.Broadcast.M else layout.bn for _, axis, _ in layout.spec.fuse.vectors]
    assert layout.vector_bytes == 4 * sum(extents)
    assert layout.staged_vectors == bool(extents)
    assert layout.smem_bytes - plain.smem_bytes == layout.vector_bytes + 2 * MBARRIER_BYTES * bool(extents)
    offsets = sorted(layout.vector_offsets.values())
    assert offsets == [sum(extents[:i]) for i in range(len(extents))]  # side by side, none overlapping


def test_vectors_that_do_not_fit_beside_four_stages_are_refused_at_stages():
    with pytest.raises(CompileError) as info:
        wgmma_spec("bias: n f32; scale: col;", stages=4)  # 2 x 256 f32 beside the ring and C's boxes
    rendered = info.value.render()
    assert "bytes of the fuse chain's staged vectors" in rendered and "use at most stages: 3" in rendered
    (diagnostic,) = info.value.diagnostics
    line = info.value.source.text.splitlines()[diagnostic.span.line - 1]
    assert line[diagnostic.span.column - 1:].startswith("4;") and "stages:" in line


def test_three_tf32_products_refuse_staged_vectors_at_the_fuse_section():
    text = (SPECS / "sgemm_3xtf32_h100.gemm").read_text().replace(
        "    target", "    fuse     { bias: n; }\n    target", 1)
    with pytest.raises(CompileError) as info:
        load(SourceFile("split.gemm", text))
    messages = [d.message for d in info.value.diagnostics]
    assert any("3xTF32's splitting occupies" in message for message in messages), messages
    assert "use `precision: tf32;`" in info.value.render()


# --- the residual through C's staging buffers (paths/wgmma/stmatrix.py) ------------------------------------------

def test_r_s_first_boxes_are_copied_before_the_main_loop():
    _, consumers = sections(cuda_of("hgemm_h100_relu_residual"))
    tile = consumers[consumers.index("for (int tile"):]
    start = tile.index("if (residual_staged)")
    assert tile.index("bulk_wait_read<0>()", start) < tile.index("residual_box(", start) < tile.index(
        "for (int kt = 0")  # the buffers are free, then the copies start, then the main loop


def test_the_epilogue_adds_r_from_shared_memory_after_its_copies_landed():
    cuda = cuda_of("hgemm_h100_relu_residual")
    _, consumers = sections(cuda)
    boxes = consumers[consumers.index("for (int box = 0; box < C_BOXES"):]
    wait = boxes.index("residual_wait<1>(); else residual_wait<0>();")
    assert wait < boxes.index("ldmatrix_x4(base ^ (j * 16)") < boxes.index("stmatrix_x4(base ^ (j * 16)")
    # the next box of the buffer: copied only once the store that read it is done
    store = boxes.index("tma_store_2d(")
    assert store < boxes.index("bulk_wait_read<0>()", store) < boxes.index("residual_box(smem_u32(buffer)", store)
    # the chain reads R itself only where it is not staged
    assert "fuse_pair(C, ldc, (residual_staged ? nullptr : R), ldr" in consumers
    helper = cuda[cuda.index("void fuse_pair("):]
    assert helper.index("if (R != nullptr)") < helper.index("load_residual(R")
    assert "residual_staged = staged && reinterpret_cast<size_t>(R) % 16 == 0 && ldr % 8 == 0" in consumers


@pytest.mark.parametrize("residual, staged", [("bf16 row", True), ("f16 row", True), ("bf16 col", False),
                                              ("f32 row", False)])
def test_only_a_row_major_16_bit_residual_goes_through_the_boxes(residual, staged):
    spec = wgmma_spec(f"activation: relu; residual: {residual};", stages=4)
    layout = WgmmaLayout(spec)
    assert layout.staged_residual == staged
    assert layout.residual_ahead == (0.5 if staged else 0.0)  # 2 buffers of a warp's 4 boxes
    assert layout.chain_reads().residual_copied == staged
    cuda = compile_source(SourceFile("staged.gemm", (SPECS / "linear_gelu.gemm").read_text().replace(
        "bias: n; activation: gelu_tanh;", f"activation: relu; residual: {residual};"))).cuda
    assert ("residual_box(" in cuda) == staged and ("ldmatrix_x4(" in cuda) == staged

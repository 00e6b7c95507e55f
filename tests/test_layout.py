"""Properties of the lowering that must hold for every valid spec: each C element has
exactly one owner, each tile element is copied exactly once, and shared-memory offsets
never collide or leave their stage."""
import re
from collections import Counter
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings

from gemmdsl import ir
from gemmdsl.emit.epilogue import StagedAdds, staged_adds
from gemmdsl.layout import KernelLayout
from gemmdsl.parser import parse_text
from spec_strategies import spec_texts

ROOT = Path(__file__).resolve().parent.parent

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


def layout_of(text: str) -> KernelLayout:
    return KernelLayout(parse_text(text))


@PROPERTY
@given(spec_texts())
def test_every_c_element_has_exactly_one_owner(text):
    layout = layout_of(text)
    env = layout.thread_env()
    owners = np.zeros((layout.bm, layout.bn), dtype=int)
    for _, row in layout.fragment_rows("m"):
        for _, col in layout.fragment_rows("n"):
            np.add.at(owners, (row.evaluate(env), col.evaluate(env)), 1)
    assert (owners == 1).all()


@PROPERTY
@given(spec_texts())
def test_global_chunks_cover_each_tile_once(text):
    layout = layout_of(text)
    env = layout.thread_env()
    for operand in (ir.Operand.A, ir.Operand.B):
        vector = layout.load_vector(operand)
        hits = np.zeros(layout.spec.global_tile(operand), dtype=int)
        for chunk in layout.global_chunks(operand):
            rows = np.broadcast_to(chunk.row.evaluate(env), (layout.threads,))
            cols = np.broadcast_to(chunk.col.evaluate(env), (layout.threads,))
            for element in range(vector):
                np.add.at(hits, (rows, cols + element), 1)
        assert (hits == 1).all(), operand


@PROPERTY
@given(spec_texts())
def test_chunks_fill_each_shared_tile_element_once_in_both_variants(text):
    # The scalar variant of a checked kernel re-lowers the copies with one-element vectors.
    for layout in (layout_of(text), KernelLayout(parse_text(text), max_global_vector=1)):
        env = layout.thread_env()
        for operand, extent in ((ir.Operand.A, layout.bm), (ir.Operand.B, layout.bn)):
            hits = np.zeros((extent, layout.bk), dtype=int)
            for chunk in layout.global_chunks(operand):
                for element in range(layout.load_vector(operand)):
                    mn, k = layout.chunk_tile_coords(operand, chunk, element)
                    np.add.at(hits, tuple(np.broadcast_to(e.evaluate(env), (layout.threads,)) for e in (mn, k)), 1)
            assert (hits == 1).all(), operand


def test_global_tiles_follow_the_layouts():
    text = open(ROOT / "specs" / "layouts_tn.gemm").read()
    layout = layout_of(text)
    # A is column-major: its 128x8 tile lies in memory as 8 runs of 128 m-contiguous elements, which
    # km keeps contiguous, so the copies store float4; row-major B likewise into kn.
    assert layout.spec.global_tile(ir.Operand.A) == (8, 128)
    assert layout.store_width(ir.Operand.A) == layout.store_width(ir.Operand.B) == 4
    assert layout.c_store_width() == 4  # column-major C: along m, the micro tile's 4 rows
    nt = layout_of(open(ROOT / "specs" / "layouts_nt.gemm").read())
    assert nt.spec.global_tile(ir.Operand.B) == (128, 16) and nt.store_width(ir.Operand.B) == 1
    assert nt.global_vector(ir.Operand.B) == 1  # cp.async reads what it stores: 4 bytes per element


@PROPERTY
@given(spec_texts())
def test_smem_offsets_are_distinct_and_inside_the_stage(text):
    layout = layout_of(text)
    for operand, extent in ((ir.Operand.A, layout.bm), (ir.Operand.B, layout.bn)):
        geometry = layout.smem[operand]
        mn, k = np.meshgrid(np.arange(extent), np.arange(layout.bk), indexing="ij")
        offsets = geometry.offset_func.body.evaluate({"mn": mn, "k": k}).ravel()
        assert len(set(offsets.tolist())) == offsets.size
        assert offsets.min() >= 0 and offsets.max() < geometry.stage_elems


@PROPERTY
@given(spec_texts())
def test_vector_accesses_are_aligned(text):
    layout = layout_of(text)
    env = dict(layout.thread_env())
    for access in layout.smem_accesses():
        offsets = np.broadcast_to(access.offset.evaluate(env), (layout.threads,))
        assert (offsets % access.width == 0).all()


def test_sgemm_v3_thread_zero_owns_rows_and_columns_64_apart():
    # sgemm_v3: thread 0 of warp 0 reads A rows 0..3 and 64..67, B columns 0..3 and 64..67.
    layout = layout_of(open(ROOT / "specs" / "sgemm_v3.gemm").read())
    env = layout.thread_env()
    rows = sorted(int(np.asarray(e.evaluate(env))[0]) for _, e in layout.fragment_rows("m"))
    assert rows == [0, 1, 2, 3, 64, 65, 66, 67]
    counts = Counter(a.op for a in layout.smem_accesses())
    assert counts == {"store": 4 + 1, "load": 8 * 4}


@PROPERTY
@given(spec_texts())
def test_staged_atomic_adds_fill_each_buffer_cell_once_with_the_row_they_are_added_to(text):
    # A stream-K share's one-element adds go through shared memory (emit/epilogue.py, StagedAdds): per
    # step along C's lines each thread writes its line to slot thread_line / MICRO, and the block adds
    # slot s to line s * MICRO + the step. That is only right if every cell is written exactly once
    # and each writer's line is its slot's, and the buffer fits in the pipeline's shared memory.
    layout = layout_of(text)
    staged = staged_adds(layout.spec, layout)
    if staged is None:
        return
    env = layout.thread_env()
    micro = {"m": layout.spec.threads.micro.m, "n": layout.spec.threads.micro.n}
    repeat = {"m": layout.spec.threads.repeat.m, "n": layout.spec.threads.repeat.n}
    extent = layout.bn if staged.along == "n" else layout.bm
    lines = np.asarray(env[f"thread_{staged.line}"])
    starts = np.asarray(env[f"thread_{staged.along}"])
    slots = lines // micro[staged.line]
    assert (slots * micro[staged.line] == lines).all()
    hits = np.zeros((staged.slots, extent), dtype=int)
    for r in range(repeat[staged.along]):
        for e in range(micro[staged.along]):
            np.add.at(hits, (slots, starts + r * layout.repeat_stride(staged.along) + e), 1)
    assert (hits == 1).all()
    assert staged.pitch >= extent and staged.slots * staged.pitch <= layout.smem_elems


def test_sgemm_any_stages_its_one_element_adds_and_only_there():
    layout = KernelLayout(parse_text(open(ROOT / "specs" / "sgemm_any.gemm").read()))
    assert staged_adds(layout.spec, layout) == StagedAdds("m", 16, 132)
    pieces = re.split(r'extern "C" __global__ void __launch_bounds__\([^)]*\) (\w+)\(',
                      open(ROOT / "generated" / "sgemm_any.cu").read())
    bodies = dict(zip(pieces[1::2], pieces[2::2]))
    staged = "smem[slot * 132 + e % BN]"
    assert staged not in bodies["sgemm_any_kernel"] and staged not in bodies["sgemm_any_kernel_scalar"]
    assert staged in bodies["sgemm_any_kernel_stream_k"] and staged in bodies["sgemm_any_kernel_stream_k_scalar"]

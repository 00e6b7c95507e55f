"""3xTF32's splitter on the wgmma path: the producer warpgroup's warps 1-3 (warp 0 issues TMA) split
each landed stage of B into TF32 parts before the consumers read it.

They walk the same k-tiles as the producer and the consumers (`it`, across tiles). For each they wait
for `full` (TMA wrote the stage) and write the small part of every word of B's k-tile to the same offset
of the stage's slot of the split buffer; then each thread makes its stores visible to the async proxy
(wgmma reads through it) and arrives on `ready`, which counts one arrival per splitter thread. B's big
part is the word as TMA wrote it, which wgmma reads truncated to TF32 (it ignores the low 13 bits), so
the small part is what truncation leaves, rounded to TF32 (`tf32_rest`: half a TF32 unit added, the low
bits left for wgmma to ignore): an error under 2^-21 of the word. The splitter's instructions take issue
slots from the consumers: rounding the big part in place (an earlier form) cost a store per word and
clearing the rest's low bits an instruction; on the H100 the 3xTF32 family ran 2.16x cuBLAS SGEMM with
both, 2.22x without the store and 2.32x without either, at worst 1.48x SGEMM's error against 1.24x
(the rule is 2x; docs/performance.md, T16). A stage's slot is rewritten only
after TMA refilled the stage, which waited for `empty`: no wgmma reads the old small parts any more.

They run as far ahead as TMA does, so the consumers, which wait for `ready`, find B split and spend
their issue slots on A (paths/wgmma/split.py).
"""
from __future__ import annotations

from ... import ir
from ...emitter import Emitter
from .layout import CHUNK, WgmmaLayout


class StageSplitter:
    def __init__(self, layout: WgmmaLayout, out: Emitter):
        assert layout.split
        self.layout = layout
        self.out = out

    @property
    def guard(self) -> str:
        """Which producer threads split: warps 1-3."""
        return "tid >= 32"

    def constants(self) -> list[tuple[str, int]]:
        return [("SPLITTER_THREADS", self.layout.splitter_threads)]

    def emit_k_tile(self) -> None:
        """Split B's k-tile in stage `stage` once it has landed, and tell the consumers."""
        o = self.out
        words = self.layout.stage_bytes_of(ir.Operand.B) // CHUNK
        o.line("mbarrier_wait(smem_u32(full + stage), phase);")
        o.comment(f"{words} float4 of B, {words / self.layout.splitter_threads:.1f} per splitter thread: the small "
                  "parts, at the same offset of the stage's\nslot of `split`; the big parts are the words as they "
                  "are (wgmma reads them truncated to TF32).")
        o.line("float4* const big = reinterpret_cast<float4*>(smem + stage * STAGE_BYTES + A_STAGE_BYTES);")
        o.line("float4* const small = reinterpret_cast<float4*>(split + stage * B_STAGE_BYTES);")
        # Unrolled whole: the loop's own instructions take issue slots from the consumers too (H100: 2-4% over
        # unroll 2, docs/performance.md, T16).
        o.line("#pragma unroll")
        with o.block(f"for (int w = tid - 32; w < B_STAGE_BYTES / {CHUNK}; w += SPLITTER_THREADS)"):
            o.line("const float4 x = big[w];")
            o.line("small[w] = make_float4(tf32_rest(x.x), tf32_rest(x.y), tf32_rest(x.z), tf32_rest(x.w));")
        o.line("fence_proxy_async();")
        o.line("mbarrier_arrive(smem_u32(ready + stage));")

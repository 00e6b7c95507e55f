"""3xTF32's splitter on the wgmma path: the producer warpgroup's warps 1-3 (warp 0 issues TMA) split
each landed stage of B into TF32 parts before the consumers read it.

They walk the same k-tiles as the producer and the consumers (`it`, across tiles). For each they wait
for `full` (TMA wrote the stage), replace every word of B's k-tile by its big part, the word rounded to
TF32, and write its small part, the rest as it is (wgmma reads it truncated to TF32, as emit/mma_sync.py
says why), to the same offset of the stage's slot of the split buffer; then each thread makes its stores visible to the async proxy (wgmma reads through it)
and arrives on `ready`, which counts one arrival per splitter thread. A stage's slot is rewritten only
after TMA refilled the stage, which waited for `empty`: no wgmma reads the old small parts any more.

They run as far ahead as TMA does, so the consumers, which wait for `ready`, find B split and spend
their issue slots on A (emit/wgmma_split.py).
"""
from __future__ import annotations

from .. import ir
from ..emitter import Emitter
from ..wgmma_layout import CHUNK, WgmmaLayout


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
        o.comment(f"{words} float4 of B, {words / self.layout.splitter_threads:.1f} per splitter thread: the big "
                  "parts in place, the small ones at the same\noffset of the stage's slot of `split`.")
        o.line("float4* const big = reinterpret_cast<float4*>(smem + stage * STAGE_BYTES + A_STAGE_BYTES);")
        o.line("float4* const small = reinterpret_cast<float4*>(split + stage * B_STAGE_BYTES);")
        o.line("#pragma unroll 2")
        with o.block(f"for (int w = tid - 32; w < B_STAGE_BYTES / {CHUNK}; w += SPLITTER_THREADS)"):
            o.line("const float4 x = big[w];")
            o.line("const float4 hi = make_float4(tf32_round(x.x), tf32_round(x.y), tf32_round(x.z), tf32_round(x.w));")
            o.line("big[w] = hi;")
            o.line("small[w] = make_float4(x.x - hi.x, x.y - hi.y, x.z - hi.z, x.w - hi.w);")
        o.line("fence_proxy_async();")
        o.line("mbarrier_arrive(smem_u32(ready + stage));")

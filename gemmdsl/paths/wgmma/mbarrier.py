"""The stage ring of the wgmma path: shared-memory stages guarded by mbarriers.

Each stage has two barriers. `full[s]` counts one arrival (the producer's, which also tells it how
many bytes TMA will deliver) plus those bytes; it completes when stage s holds its k-tile. `empty[s]`
counts one arrival per consumer warpgroup; it completes when every consumer is done reading stage s.
Producer and consumers walk the same sequence of k-tiles (`it`, across tiles), so stage `it % STAGES`
and phase `(it / STAGES) & 1` name the same use of the ring on both sides without any other
communication. 3xTF32 adds a third barrier per stage, `ready[s]`, which counts one arrival per splitter
thread (paths/wgmma/splitter.py) and completes when B's k-tile in stage s is split; the consumers wait
for it after `full`. A fuse chain with vectors adds one pair for the block, `vectors_full` and
`vectors_empty` (paths/wgmma/epilogue.py; one pair per consumer under pingpong, which also adds a `turn`
barrier per consumer: paths/wgmma/pingpong.py). A fresh barrier is in phase 0, and waiting for the parity of the phase before it
returns at once: so the producer's first pass, which waits on `empty` with parity 1, does not block.
"""
from __future__ import annotations

from ...emitter import Emitter
from .layout import WgmmaLayout

HELPERS = r'''
static __device__ __forceinline__ unsigned smem_u32(const void* p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void mbarrier_init(unsigned barrier, unsigned arrivals)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(barrier), "r"(arrivals));
}

// Arrive and announce `bytes` more transaction bytes: the phase completes once TMA has written them.
static __device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned barrier, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(barrier), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void mbarrier_arrive(unsigned barrier)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(barrier) : "memory");
}

// Make this thread's ordinary shared-memory stores visible to the async proxy (wgmma's and TMA's reads).
static __device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Spin until the phase with this parity has completed.
static __device__ __forceinline__ void mbarrier_wait(unsigned barrier, unsigned parity)
{
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" :: "r"(barrier), "r"(parity) : "memory");
}'''


class MbarrierRing:
    """Declares the ring (stages aligned to the swizzle's period, then the barriers), initialises the
    barriers, and names a k-tile's stage and phase."""

    def __init__(self, layout: WgmmaLayout, out: Emitter):
        self.layout = layout
        self.out = out

    def emit_helpers(self) -> None:
        self.out.comment("mbarriers (PTX ISA, \"Parallel synchronization and communication instructions: mbarrier\").")
        self.out.lines(HELPERS)

    def declare(self) -> None:
        o = self.out
        o.comment("The ring: STAGES k-tiles of A then B, each stage aligned to 1024 bytes (the 128-byte swizzle\n"
                  "repeats every 8 rows of 128 bytes, and TMA and the wgmma descriptors both assume the\n"
                  "pattern starts there); then a `full` and an `empty` barrier per stage"
                  + (" (and a `ready` one: 3xTF32)." if self.layout.split else "."))
        o.line("extern __shared__ __align__(1024) unsigned char smem_raw[];")
        o.comment("Aligned by an offset from smem_raw, not by rounding a pointer cast to an integer: so nvcc still\n"
                  "knows that `smem` is shared memory and emits ld.shared/st.shared for the kernel's own accesses\n"
                  "(rounded through size_t it emitted generic loads and stores).")
        o.line("unsigned char* const smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);")
        barriers = "STAGES * STAGE_BYTES"
        if self.layout.split:
            o.comment("3xTF32's split buffer follows the ring (paths/wgmma/splitter.py).")
            o.line("unsigned char* const split = smem + STAGES * STAGE_BYTES;")
            barriers += " + SPLIT_BYTES"
        if self.layout.tma_store:
            o.comment("The staged boxes of C (store: tma, paths/wgmma/store.py).")
            o.line(f"unsigned char* const staging = smem + {barriers};")
            barriers += " + STAGING_BYTES"
        if self.layout.staged_vectors:
            o.comment("The fuse chain's vectors of the consumers' current tile, as f32 (paths/wgmma/epilogue.py).")
            o.line(f"float* const vectors = reinterpret_cast<float*>(smem + {barriers});")
            barriers += " + VECTOR_BYTES"
        o.line(f"unsigned long long* const full = reinterpret_cast<unsigned long long*>(smem + {barriers});")
        o.line("unsigned long long* const empty = full + STAGES;")
        after = "empty + STAGES"  # the next free barrier
        if self.layout.split:
            o.line("unsigned long long* const ready = empty + STAGES;")
            after = "ready + STAGES"
        if self.layout.staged_vectors:
            buffers = self.layout.vector_buffers
            o.line(f"unsigned long long* const vectors_full = {after};")
            o.line(f"unsigned long long* const vectors_empty = vectors_full + {buffers};")
            after = f"vectors_empty + {buffers}"
        if self.layout.pingpong:
            o.line(f"unsigned long long* const turn = {after};")

    def emit_init(self) -> None:
        o = self.out
        ready = "; `ready`: one per splitter thread" if self.layout.split else ""
        if self.layout.staged_vectors:
            ready += ";\n`vectors_full`: one per lane of the warp that stages them; `vectors_empty`: every consumer thread"
        readers = "the consumer warpgroup of the stage's tile" if self.layout.pingpong else "one arrival per consumer warpgroup"
        if self.layout.pingpong:
            ready += ";\n`turn`: every thread of the consumer before"
        o.comment(f"`full`: the producer's arrival and TMA's bytes; `empty`: {readers}{ready}.")
        with o.block("if (threadIdx.x == 0)"):
            with o.block("for (int s = 0; s < STAGES; ++s)"):
                o.line("mbarrier_init(smem_u32(full + s), 1);")
                o.line(f"mbarrier_init(smem_u32(empty + s), {1 if self.layout.pingpong else 'CONSUMERS'});")
                if self.layout.split:
                    o.line("mbarrier_init(smem_u32(ready + s), SPLITTER_THREADS);")
            if self.layout.staged_vectors and not self.layout.pingpong:
                o.line("mbarrier_init(smem_u32(vectors_full), 32);")
                o.line("mbarrier_init(smem_u32(vectors_empty), CONSUMERS * 128);")
            if self.layout.pingpong:
                with o.block("for (int c = 0; c < CONSUMERS; ++c)"):
                    if self.layout.staged_vectors:
                        o.line("mbarrier_init(smem_u32(vectors_full + c), 32);")
                        o.line("mbarrier_init(smem_u32(vectors_empty + c), 128);")
                    o.line("mbarrier_init(smem_u32(turn + c), 128);")
            o.comment("Make the initialised barriers visible to the async proxy (TMA) before anyone uses them.")
            o.line('asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");')
        o.line("__syncthreads();")

    def emit_consumer_wait(self) -> None:
        """A consumer waits until stage `stage` holds its k-tile (and, for 3xTF32, B's part is split)."""
        self.out.line("mbarrier_wait(smem_u32(full + stage), phase);")
        if self.layout.split:
            self.out.line("mbarrier_wait(smem_u32(ready + stage), phase);")

    def emit_stage(self) -> None:
        """`stage` and `phase` of k-tile number `it` of this block's sequence."""
        self.out.line("const int stage = it % STAGES;")
        self.out.line("const unsigned phase = (it / STAGES) & 1;")

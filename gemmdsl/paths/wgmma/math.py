"""The math of the wgmma path: each consumer warpgroup's accumulators and the wgmma.mma_async
instructions of one k-tile.

A consumer warpgroup multiplies CONSUMER_ROWS rows of the block tile by all BN columns: M_REPEAT x
N_REPEAT instructions of WGMMA_N columns per k-step, BK / WGMMA_K steps per k-tile. A k-step is 32
bytes of the operands: 16 bf16/f16 elements (m64nNk16), or 8 f32 elements read as TF32 (m64nNk8; TMA
rounded each word to TF32 on the way in, and the instruction reads its top 19 bits). Both operands stay in shared memory; the instruction reads
them through 64-bit matrix descriptors (layout.descriptor): k-major tiles in the 128-byte
swizzle, 8-row groups 1024 bytes apart. Moving a descriptor along k by one step (32 bytes) adds 2 to
its start field, inside the swizzled row, which the hardware swizzles the same way TMA did; moving by
64 rows of A adds 64 * 128 bytes >> 4.
"""
from __future__ import annotations

from ... import ir
from ...emitter import Emitter
from .layout import DESCRIPTOR_SWIZZLE_128B, WGMMA_M, WgmmaLayout

REGISTERS_PER_ROW = 8  # accumulator operands per line of the asm's register list


class WgmmaMath:
    # Whether a k-tile waits for its own wgmma groups (to add a second set of accumulators into the first),
    # and so releases its own stage; otherwise one group stays in flight across k-tiles.
    waits_each_k_tile = False

    def __init__(self, layout: WgmmaLayout, out: Emitter):
        self.layout = layout
        self.out = out
        self.shape = layout.shape
        problem = layout.spec.problem
        self.tf32 = problem.a.dtype is ir.DType.F32
        # Only the 16-bit forms take transpose immediates; TF32 and FP8 read k-major operands only.
        self.transposes = problem.a.dtype.bytes == 2
        kinds = ".".join("tf32" if self.tf32 else matrix.dtype.value for matrix in (problem.a, problem.b))
        self.instruction = f"wgmma.mma_async.sync.aligned.{self.shape.value}.f32.{kinds}"
        self.function = f"wgmma_{self.shape.value}"

    def constants(self) -> list[tuple[str, int]]:
        layout = self.layout
        return [("WGMMA_N", self.shape.n), ("WGMMA_K", self.shape.k), ("CONSUMER_ROWS", layout.consumer_rows),
                ("M_REPEAT", layout.m_repeat), ("N_REPEAT", layout.n_repeat), ("ACCUMULATORS", layout.accumulators)]

    def tiling_note(self) -> str:
        layout = self.layout
        turns = " (whole tiles, in turn: schedule: pingpong)" if layout.pingpong else ""
        return (f"Each of the {layout.consumers} consumer warpgroups{turns} multiplies {layout.consumer_rows} rows by {layout.bn} "
                f"columns: {layout.m_repeat} x {layout.n_repeat} {self.shape} per k-step, {layout.k_steps} steps "
                f"per k-tile,\n{layout.accumulators} f32 accumulators per thread.")

    def descriptor_function(self, operand: ir.Operand) -> str:
        return "wgmma_descriptor" if self.layout.k_major(operand) else "wgmma_descriptor_mn"

    @property
    def shared_operands(self) -> tuple[ir.Operand, ...]:
        """The operands wgmma reads from shared memory through descriptors."""
        return (ir.Operand.B,) if self.layout.a_in_registers else (ir.Operand.A, ir.Operand.B)

    def emit_helpers(self) -> None:
        self.emit_descriptors()
        self.emit_group_helpers()
        self.out.line()
        self._emit_instruction(self.function, accumulate=True)

    def emit_descriptors(self) -> None:
        o, layout = self.out, self.layout
        written = set()
        for operand in self.shared_operands:
            function = self.descriptor_function(operand)
            if function in written:
                continue
            written.add(function)
            leading, stride = layout.descriptor_offsets(operand)
            if layout.k_major(operand):
                o.comment("wgmma shared-memory matrix descriptor of a k-major tile in the 128-byte swizzle: start address "
                          f">> 4\n(bits 0-13), leading byte offset >> 4 = {leading} (unused by this mode, bits 16-29), "
                          f"stride byte offset >> 4 = {stride}\n(1024 bytes between 8-row groups, bits 32-45), "
                          f"swizzle mode {DESCRIPTOR_SWIZZLE_128B} = 128B (bits 62-63).")
            else:
                o.comment("wgmma descriptor of an MN-major tile in the 128-byte swizzle (rows of k, 64 elements of m or n "
                          f"each):\nleading byte offset >> 4 = {leading} ({leading << 4} bytes from one 64-wide panel to the "
                          f"next), stride byte\noffset >> 4 = {stride} (1024 bytes between groups of 8 k rows), swizzle "
                          f"mode {DESCRIPTOR_SWIZZLE_128B} = 128B.")
            with o.block(f"static __device__ __forceinline__ unsigned long long {function}(unsigned address)"):
                o.line(f"return (unsigned long long)((address & 0x3FFFF) >> 4) | ({leading}ull << 16) | "
                       f"({stride}ull << 32) | ({DESCRIPTOR_SWIZZLE_128B}ull << 62);")
            o.line()

    def emit_group_helpers(self) -> None:
        self.out.lines(r'''
// Order this warpgroup's register accesses before the wgmma that follow (the accumulators were written).
static __device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

static __device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// Wait until at most N committed groups of this warpgroup's wgmma are still running.
template <int N>
static __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}''')

    def _emit_instruction(self, function: str, accumulate: bool, a_in_registers: bool = False) -> None:
        """`function(d, a, b)`: one wgmma of the spec's shape into the accumulators at d, A through a
        descriptor, or (a_in_registers) from the thread's fragment words of A (64 x k over the warpgroup's
        128 threads), B through a descriptor."""
        o, count = self.out, self.shape.n * WGMMA_M // 128
        # The transpose immediates say which operands are MN-major; TF32 has none (k-major only).
        transposed = [int(not self.layout.k_major(op)) for op in (ir.Operand.A, ir.Operand.B)]
        scale_d = int(accumulate)
        immediates = f"{scale_d}, 1, 1, {transposed[0]}, {transposed[1]}" if self.transposes else f"{scale_d}, 1, 1"
        majors = " and ".join(f"{op.value.upper()} {'k' if self.layout.k_major(op) else 'MN'}-major"
                              for op in (ir.Operand.A, ir.Operand.B))
        transposes = "" if not self.transposes else f", transposes {transposed[0]} and {transposed[1]}\n({majors})"
        what = "+=" if accumulate else "="
        scale = "1 (accumulate)" if accumulate else "0 (overwrite)"
        a_words = WGMMA_M * self.shape.k // 128
        a_what = f"{a_words} fragment words a per thread" if a_in_registers else "descriptor a"
        o.comment(f"d (the {count} accumulators of one {self.shape} per thread) {what} A (64 x {self.shape.k}, "
                  f"{a_what}) *\nB ({self.shape.k} x {self.shape.n}, descriptor b). The immediates: scale-d "
                  f"{scale}, A and B scaled by 1{transposes}.")
        a_type = "const unsigned* a" if a_in_registers else "unsigned long long a"
        with o.block(f"static __device__ __forceinline__ void {function}(float* d, {a_type}, unsigned long long b)"):
            o.line("asm volatile(")
            o.line('    "{\\n"')
            o.line(f'    "{self.instruction}\\n"')
            for first in range(0, count, REGISTERS_PER_ROW):
                names = ", ".join(f"%{i}" for i in range(first, min(first + REGISTERS_PER_ROW, count)))
                opening = "{" if first == 0 else " "
                closing = "}," if first + REGISTERS_PER_ROW >= count else ","
                o.line(f'    "{opening}{names}{closing}\\n"')
            if a_in_registers:
                a = ", ".join(f"%{count + i}" for i in range(a_words))
                o.line(f'    " {{{a}}}, %{count + a_words}, {immediates};\\n"')
            else:
                o.line(f'    " %{count}, %{count + 1}, {immediates};\\n"')
            o.line('    "}\\n"')
            for first in range(0, count, REGISTERS_PER_ROW):
                names = ", ".join(f'"+f"(d[{i}])' for i in range(first, min(first + REGISTERS_PER_ROW, count)))
                lead = ": " if first == 0 else "  "
                o.line(f"    {lead}{names}{',' if first + REGISTERS_PER_ROW < count else ''}")
            a_inputs = ", ".join(f'"r"(a[{i}])' for i in range(a_words)) if a_in_registers else '"l"(a)'
            o.line(f'    : {a_inputs}, "l"(b));')

    def declare(self) -> None:
        o = self.out
        o.line("float acc[ACCUMULATORS];")
        with o.unrolled("i", "ACCUMULATORS"):
            o.line("acc[i] = 0.0f;")

    def emit_release(self) -> None:
        """After a k-tile's group is issued: free the stage of the k-tile before it; or, where the k-tile
        waited for its own groups (`waits_each_k_tile`), its own stage."""
        o = self.out
        if self.waits_each_k_tile:
            o.line("if (tid == 0) mbarrier_arrive(smem_u32(empty + stage));")
            return
        o.comment("Keep one group in flight: once the previous k-tile's group has finished, its stage is free.")
        o.line("wgmma_wait<1>();")
        o.line("if (kt > 0 && tid == 0) mbarrier_arrive(smem_u32(empty + (it - 1) % STAGES));")

    def emit_drain(self) -> None:
        """After a tile's last k-tile: wait for its group and free its stage (nothing is left in flight where
        each k-tile waited for its own groups)."""
        if self.waits_each_k_tile:
            return
        self.out.line("wgmma_wait<0>();")
        self.out.line("if (tid == 0) mbarrier_arrive(smem_u32(empty + (it - 1) % STAGES));")

    def emit_k_tile(self) -> None:
        """Issue the k-tile in stage `stage` (its barrier has completed) as one wgmma group."""
        o, layout = self.out, self.layout
        o.line("unsigned char* const tile_a = smem + stage * STAGE_BYTES;")
        a, b = ir.Operand.A, ir.Operand.B
        o.line(f"const unsigned long long desc_a = {self.descriptor_function(a)}(smem_u32({layout.consumer_a('tile_a')}));")
        o.line(f"const unsigned long long desc_b = {self.descriptor_function(b)}(smem_u32(tile_a + A_STAGE_BYTES));")
        o.line("wgmma_fence();")
        a_k, b_k, m_step, n_step = layout.k_step(a), layout.k_step(b), layout.row_step(a), layout.row_step(b)
        if a_k == b_k:
            k_steps = f"k{self.shape.k} = {a_k} ({a_k << 4} bytes)"
        else:
            k_steps = f"k{self.shape.k} = {a_k} on A, {b_k} on B ({a_k << 4} and {b_k << 4} bytes)"
        o.comment(f"Descriptor steps (>> 4): {k_steps}, 64 rows of A = {m_step}, {self.shape.n} rows of B = "
                  f"{n_step}.")
        with o.unrolled("kk", "BK / WGMMA_K"):
            with o.unrolled("mr", "M_REPEAT"):
                with o.unrolled("nr", "N_REPEAT"):
                    o.line(f"{self.function}(acc + (mr * N_REPEAT + nr) * (WGMMA_N / 2), "
                           f"desc_a + {a_k} * kk + {m_step} * mr, desc_b + {b_k} * kk + {n_step} * nr);")
        o.line("wgmma_commit();")

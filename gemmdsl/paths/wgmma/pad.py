"""Padded copies of A and B for TMA: `NAME_pad_operands` and `NAME_launch_ld_padded`.

TMA reads a matrix only where its address and row stride are multiples of 16 bytes, so a call with
K = 77 (rows of 154 bytes), an odd leading dimension or a pointer one element off is refused by the
wgmma launchers. Where it does read them, rows that start 16 bytes into a 32-byte sector (BF16 rows of
K = 1000, 1016, 1032...: every other 16-byte-aligned K) cost the members about 1.6x the time of the same
call with 32-byte-aligned rows (H100: 4096x4096x1000 87.9 us, with rows 1,024 elements apart 54.5 us;
cuBLAS 56.3; docs/performance.md, "Operands TMA cannot read, or reads slowly"). Copying such operands
into rows 128 bytes apart costs one read and one write of them: the family launchers (emit/family.py)
and FamilyKernel call NAME_launch_ld_padded, which copies
- an operand TMA refuses, always: this measured faster than the `fallback` member at every shape tried,
  from 33^3 to 4096x4096x4094 and decode calls, so the fallback runs only what this launcher does not
  take (batched and grouped calls, libraries the Python runtime cannot allocate in);
- an operand whose rows start off a sector, where the kernel uses each of its elements at least
  PAD_MIN_REUSE times (N for A, M for B): there the copy costs less than the penalty. A BF16 element's copy
  moves 4 bytes, 1.2 ps at HBM's 3.35 TB/s; 768 uses are 1,536 flops, 2.2 ps at a sustained 700 TFLOP/s, of
  which the penalty is 0.6, 1.3 ps (TF32: 8 bytes, 2.4 ps, against 0.6 x 1,536 flops at 350 TFLOP/s, 2.6 ps).
  Decode calls (B used M <= 128 times) keep their rows, and so do calls of fewer than PAD_MIN_WORK (2^33)
  multiply-adds, where the copy's own launch and pass outweigh the penalty (1000^3 ran in 15.4 us as it is
  and 16 us copied, 768x768x1000 9 us against 19);
and otherwise calls NAME_launch_ld itself. The copies share one stream-ordered scratch allocation
(cudaMallocAsync, freed with cudaFreeAsync after the launch, so CUDA graphs can capture it); the padding is
never read (the tensor maps' extents are the matrices' own). The Python runtime launches the same kernel on
copies it allocates (runtime.Kernel.bind_padded, runtime.padded_copies).
"""
from __future__ import annotations

from ... import ir
from ...abi import (fuse_arguments, launcher_parameters, outer_extent, contiguous_extent, pad_operands_entry,
                    padded_launcher_name)
from ...emitter import Emitter
from ...launch_plan import (PAD_CHUNK, PAD_GRID, PAD_MIN_REUSE, PAD_MIN_WORK, PAD_ROW_BYTES, PAD_SEGMENT, PAD_THREADS,
                            PAD_WARPS_PER_BLOCK)
from ...targets import SECTOR_BYTES
from ...plan import KernelPlan


def pads_operands(spec: ir.KernelSpec) -> bool:
    """Whether the file has the padded launcher: 2-D calls (a batch's or a group's strides would need
    copies of every matrix; those calls keep the launchers' refusal)."""
    return not (spec.problem.batched or spec.problem.grouped)


STORAGE = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int"}  # the copy moves elements as their bits


def storage_type(spec: ir.KernelSpec) -> str:
    """The unsigned type of A's and B's element size (the wgmma specs' A and B have one size)."""
    sizes = {spec.problem.matrix(op).dtype.bytes for op in (ir.Operand.A, ir.Operand.B)}
    assert len(sizes) == 1, "A and B of one wgmma spec have one element size"
    return STORAGE[sizes.pop()]


def emit_pad_kernel(plan: KernelPlan, o: Emitter) -> None:
    """A warp to a segment of PAD_SEGMENT elements of a row (launch_plan.PAD_GRID counts them): a warp to a whole row
    left a decode call's few rows of a long K on a few SMs, one round trip to memory per PAD_SEGMENT elements each.
    A segment's loads have constant offsets from one address; segments that ran across rows needed a row's
    wrap per element and measured up to 2.5x slower on many rows of a moderate K (H200, docs/performance.md)."""
    spec = plan.spec
    t = storage_type(spec)
    o.comment("Copies of A and B whose rows TMA can read (paths/wgmma/pad.py): A's rows, then B's, in segments of\n"
              f"{PAD_SEGMENT} elements, a warp to a segment, each lane loading {PAD_CHUNK} elements 32 apart before storing "
              "them,\nso that a warp has "
              f"{PAD_CHUNK} loads in flight on rows whose alignment allows no wider ones. A matrix with no rows is not copied.")
    o.line(f'extern "C" __global__ void __launch_bounds__({PAD_THREADS}) {pad_operands_entry(spec)}(')
    o.line(f"    const {t}* __restrict__ a, long long lda, {t}* __restrict__ a_copy, long long lda_copy, "
           "int a_rows, int a_cols,")
    o.line(f"    const {t}* __restrict__ b, long long ldb, {t}* __restrict__ b_copy, long long ldb_copy, "
           "int b_rows, int b_cols)")
    with o.block(""):
        o.line(f"constexpr int CHUNK = {PAD_CHUNK}, SEGMENT = 32 * CHUNK;")
        o.line("const int a_segments = (a_cols + SEGMENT - 1) / SEGMENT, b_segments = (b_cols + SEGMENT - 1) / SEGMENT;")
        o.line("const long long a_items = (long long)a_rows * a_segments, items = a_items + (long long)b_rows * b_segments;")
        o.line("const int lane = threadIdx.x % 32;")
        with o.block(f"for (long long item = (long long)blockIdx.x * {PAD_WARPS_PER_BLOCK} + threadIdx.x / 32; "
                     f"item < items; item += (long long)gridDim.x * {PAD_WARPS_PER_BLOCK})"):
            o.line("const bool of_a = item < a_items;")
            o.line("const int segments = of_a ? a_segments : b_segments;")
            o.line("const long long index = of_a ? item : item - a_items;")
            o.comment("A short row is one segment; otherwise a 32-bit division where the index fits: a 64-bit one is a\n"
                      "called routine, on the path to each warp's first load.")
            o.line("const long long row = segments == 1 ? index : index < 4294967296LL ? "
                   "(long long)((unsigned)index / (unsigned)segments) : index / segments;")
            o.line("const int first = (int)(index - row * segments) * SEGMENT + lane;")
            o.line(f"const {t}* const from = of_a ? a + row * lda : b + row * ldb;")
            o.line(f"{t}* const to = of_a ? a_copy + row * lda_copy : b_copy + row * ldb_copy;")
            o.line("const int cols = of_a ? a_cols : b_cols;")
            o.line(f"{t} v[CHUNK];")
            o.line("#pragma unroll")
            o.line("for (int j = 0; j < CHUNK; ++j) if (first + 32 * j < cols) v[j] = from[first + 32 * j];")
            o.line("#pragma unroll")
            o.line("for (int j = 0; j < CHUNK; ++j) if (first + 32 * j < cols) to[first + 32 * j] = v[j];")


def emit_padded_launcher(plan: KernelPlan, o: Emitter) -> None:
    spec, layout = plan.spec, plan.layout
    align, multiple = layout.global_alignment_bytes, layout.ld_multiple
    parameters = launcher_parameters(spec)["launcher_ld"]
    a, b = (spec.problem.matrix(op).dtype.c_type for op in (ir.Operand.A, ir.Operand.B))
    row = {op: PAD_ROW_BYTES // spec.problem.matrix(ir.Operand(op)).dtype.bytes for op in "ab"}
    o.comment(f"{plan.launch.launchers['launcher_ld']} on copies of the operands TMA refuses ({align}-byte rows) or reads slowly\n"
              f"(rows off a {SECTOR_BYTES}-byte sector, each element used {PAD_MIN_REUSE}+ times, {PAD_MIN_WORK} multiply-adds), "
              f"rows {PAD_ROW_BYTES} bytes apart in\nstream-ordered scratch freed after the launch; "
              "without such operands, that launcher itself. The family launchers call it.")
    with o.block(f'extern "C" cudaError_t {padded_launcher_name(spec)}({parameters})'):
        o.line(f"const bool large = (long long)M * N >= ({PAD_MIN_WORK}LL + K - 1) / K;  // M N K >= PAD_MIN_WORK, "
               "without overflow")
        for op, pointer, reuse, element in (("a", "A", "N", a), ("b", "B", "M", b)):
            o.line(f"const bool pad_{op} = reinterpret_cast<uintptr_t>({pointer}) % {align} != 0 || ld{op} % {multiple} != 0 ||")
            o.line(f"    ((reinterpret_cast<uintptr_t>({pointer}) % {SECTOR_BYTES} != 0 || "
                   f"ld{op} * sizeof({element}) % {SECTOR_BYTES} != 0) && {reuse} >= {PAD_MIN_REUSE} && large);")
        rest = f"C, ldc, M, N, K, {fuse_arguments(spec)}alpha, beta, stream"
        o.line(f"if (M <= 0 || N <= 0 || K <= 0 || (!pad_a && !pad_b)) "
               f"return {plan.launch.launchers['launcher_ld']}(A, lda, B, ldb, {rest});")
        o.line(f"if (lda < {contiguous_extent(spec, ir.Operand.A)} || ldb < {contiguous_extent(spec, ir.Operand.B)}) "
               "return cudaErrorInvalidValue;")
        for op, flag in (("a", "pad_a"), ("b", "pad_b")):
            operand = ir.Operand(op)
            o.line(f"const long long {op}_rows = {flag} ? {outer_extent(spec, operand)} : 0, "
                   f"{op}_cols = {contiguous_extent(spec, operand)};")
            o.line(f"const long long ld{op}_copy = ({op}_cols + {row[op] - 1}) / {row[op]} * {row[op]};")
        o.line(f"const size_t a_bytes = (size_t)(a_rows * lda_copy * sizeof({a}) + {PAD_ROW_BYTES - 1}) / "
               f"{PAD_ROW_BYTES} * {PAD_ROW_BYTES};")
        o.line(f"const size_t bytes = a_bytes + (size_t)(b_rows * ldb_copy) * sizeof({b});")
        o.line("if (a_rows + b_rows > 2147483647LL || lda_copy > 2147483647LL || ldb_copy > 2147483647LL) "
               "return cudaErrorInvalidValue;")
        o.line("void* scratch = nullptr;")
        o.line("cudaError_t err = cudaMallocAsync(&scratch, bytes, stream);")
        o.line("if (err != cudaSuccess) return err;")
        o.line(f"{a}* const a_copy = static_cast<{a}*>(scratch);")
        o.line(f"{b}* const b_copy = reinterpret_cast<{b}*>(static_cast<char*>(scratch) + a_bytes);")
        PAD_GRID.render_inline(o)
        t = storage_type(spec)
        o.line(f"{pad_operands_entry(spec)}<<<(unsigned)pad_blocks, {PAD_THREADS}, 0, stream>>>(reinterpret_cast<const {t}*>(A), lda, "
               f"reinterpret_cast<{t}*>(a_copy), lda_copy, (int)a_rows, (int)a_cols, reinterpret_cast<const {t}*>(B), "
               f"ldb, reinterpret_cast<{t}*>(b_copy), ldb_copy, (int)b_rows, (int)b_cols);")
        o.line("err = cudaGetLastError();")
        with o.block("if (err == cudaSuccess)"):
            o.line(f"err = {plan.launch.launchers['launcher_ld']}(pad_a ? a_copy : A, pad_a ? (int)lda_copy : lda, "
                   f"pad_b ? b_copy : B, pad_b ? (int)ldb_copy : ldb, {rest});")
        o.line("const cudaError_t freed = cudaFreeAsync(scratch, stream);")
        o.line("return err != cudaSuccess ? err : freed;")

"""The GEMV path's CUDA: C = A B for a few rows of one operand against many rows of the other, both read along K.

Each block takes S rows of the small operand and R rows of the streamed one (the weight): blockIdx.x counts the
small operand's row-blocks fastest, so the blocks that share a weight tile run together and meet in L2. Its warps
split into K-warps, which take interleaved 16-byte chunks of K, and row-warps, which take the streamed rows in
equal parts. Per step a lane loads STAGES chunks of each of its rows and of the small rows (ld.global.nc, 16 bytes,
so a warp reads 512 contiguous bytes of a row per chunk: HBM's full rate), widens them to f32 and adds the
products into one f32 sum per (small row, streamed row). The sums meet by warp shuffles, then across K-warps in
shared memory, and one thread a C element applies the epilogue.

Two kernels: NAME_kernel for operands whose rows all start 16-byte aligned (pointer, leading dimension and batch
stride multiples of 16 bytes), and NAME_kernel_scalar for any others. The second reads each row through 16-byte
windows: two aligned chunks, the row's own misalignment selected out of them in registers, so a K that puts every
row off 16 bytes (an odd K of 16-bit elements) still streams at 16 bytes a load. Where the aligned chunks would
pass the row's last element, the last few elements of every row are read one at a time.
"""
from __future__ import annotations

from ... import ir
from ...abi import kernel_parameters, scalar_entry, vector_entry
from ...emitter import Emitter
from ...emit.fuse import to_float
from ...emit.scale_c import FROM_FLOAT
from .config import CHUNK_BYTES, GemvConfig

WIDEN = {  # a 32-bit word of the element type as f32 values (the word's elements, lowest first)
    ir.DType.BF16: ("__uint_as_float({w} << 16)", "__uint_as_float({w} & 0xffff0000u)"),
    ir.DType.F16: ("__low2float(*reinterpret_cast<const __half2*>(&{w}))",
                   "__high2float(*reinterpret_cast<const __half2*>(&{w}))"),
    ir.DType.F32: ("__uint_as_float({w})",),
}


def emit_gemv_definitions(spec: ir.KernelSpec, config: GemvConfig, o: Emitter) -> None:
    """The device helpers, the shared body and both entries."""
    name = spec.name
    _emit_helpers(o, name, spec.problem.a.dtype)
    o.line()
    _emit_body(o, spec, config)
    for entry, windowed in ((vector_entry(spec), "false"), (scalar_entry(spec), "true")):
        o.line()
        _emit_entry(o, spec, config, entry, windowed)


def _emit_helpers(o: Emitter, name: str, dtype: ir.DType) -> None:
    words = CHUNK_BYTES // 4
    o.comment("The 16 bytes of a row that start `off` elements past an aligned chunk `lo` (the next aligned chunk "
              "`hi`):\nthe words shifted by whole words in two selects, then, for 16-bit elements, by half a word "
              "(the off is\nwarp-uniform: selects, no divergence).")
    with o.block(f"static __device__ __forceinline__ uint4 {name}_window(uint4 lo, uint4 hi, int off)"):
        o.line(f"unsigned w[{2 * words}] = {{lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w}};")
        shift_words = "off >> 1" if dtype.bytes == 2 else "off"
        o.line(f"const int by = {shift_words};")
        o.line("#pragma unroll")
        o.line(f"for (int j = 0; j < {2 * words - 2}; ++j) w[j] = (by & 2) ? w[j + 2] : w[j];")
        o.line("#pragma unroll")
        o.line(f"for (int j = 0; j < {2 * words - 3}; ++j) w[j] = (by & 1) ? w[j + 1] : w[j];")
        if dtype.bytes == 2:
            o.line("const unsigned half = (off & 1) * 16;")
            o.line("return make_uint4(__funnelshift_r(w[0], w[1], half), __funnelshift_r(w[1], w[2], half),")
            o.line("                  __funnelshift_r(w[2], w[3], half), __funnelshift_r(w[3], w[4], half));")
        else:
            o.line("return make_uint4(w[0], w[1], w[2], w[3]);")
    o.line()
    o.comment("The chunk `c` (16 bytes) of a row whose start is `off` elements past the aligned pointer `row`.")
    with o.block(f"template <bool WINDOWED>\nstatic __device__ __forceinline__ uint4 {name}_chunk(const uint4* row, "
                 "int off, int c)"):
        o.line("const uint4 lo = __ldg(row + c);")
        o.line("if (!WINDOWED) return lo;")
        o.line(f"return off == 0 ? lo : {name}_window(lo, __ldg(row + c + 1), off);")
    o.line()
    widen = WIDEN[dtype]
    elements = CHUNK_BYTES // dtype.bytes
    o.comment(f"A chunk's {elements} elements as f32.")
    with o.block(f"static __device__ __forceinline__ void {name}_widen(uint4 chunk, float (&out)[{elements}])"):
        o.line("const unsigned words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};")
        o.line("#pragma unroll")
        with o.block("for (int t = 0; t < 4; ++t)"):
            for part, text in enumerate(widen):
                o.line(f"out[{len(widen)} * t + {part}] = {text.format(w='words[t]')};")


def _emit_body(o: Emitter, spec: ir.KernelSpec, config: GemvConfig) -> None:
    problem = spec.problem
    name = spec.name
    element, c_type = problem.a.dtype.c_type, problem.c.dtype.c_type
    streams_b = config.streamed is ir.Operand.B
    s, r, rw, stages = config.small_rows, config.rows, config.warp_rows, config.stages
    kw, v, threads = config.k_warps, config.vector, config.threads
    parameters = ", ".join(f"{ctype} {pname}" for ctype, pname in kernel_parameters(spec))
    o.comment(f"C = A B: {s} row(s) of {'A' if streams_b else 'B'} against {r} rows of "
              f"{'B' if streams_b else 'A'} per block; WINDOWED reads rows that start off 16 bytes.")
    with o.block(f"template <bool WINDOWED>\nstatic __device__ __forceinline__ void {name}_gemv({parameters})"):
        o.line(f"__shared__ float sums[{kw}][{s}][{r}];")
        if problem.batched:
            o.line("A += blockIdx.z * stride_a;")
            o.line("B += blockIdx.z * stride_b;")
            o.line("C += blockIdx.z * stride_c;")
        weight, ldw, rows_total, small, ldx, small_total = (
            ("B", "ldb", "N", "A", "lda", "M") if streams_b else ("A", "lda", "M", "B", "ldb", "N"))
        o.line(f"const int small_blocks = ({small_total} + {s - 1}) / {s};")
        o.comment("The small operand's row-blocks fastest: the blocks that read one weight tile run together.")
        o.line("const int small0 = (int)(blockIdx.x % small_blocks) * " + str(s) + ";")
        o.line(f"const int row_block = (int)(blockIdx.x / small_blocks) * {r};")
        o.line("const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;")
        o.line(f"const int k_warp = warp % {kw}, row_warp = warp / {kw};")
        o.line(f"const int row0 = row_block + row_warp * {rw};")
        o.comment("Rows past the matrix read its last row (in bounds) and are not stored.")
        o.line(f"const {element}* w_rows[{rw}];")
        o.line(f"const {element}* x_rows[{s}];")
        o.line("#pragma unroll")
        o.line(f"for (int i = 0; i < {rw}; ++i) "
               f"w_rows[i] = {weight} + (size_t)min(row0 + i, {rows_total} - 1) * {ldw};")
        o.line("#pragma unroll")
        o.line(f"for (int j = 0; j < {s}; ++j) "
               f"x_rows[j] = {small} + (size_t)min(small0 + j, {small_total} - 1) * {ldx};")
        o.comment("Each row as aligned 16-byte chunks and its start's offset into the first (0 unless WINDOWED).")
        o.line(f"const uint4* w_chunks[{rw}];")
        o.line(f"const uint4* x_chunks[{s}];")
        o.line(f"int w_off[{rw}], x_off[{s}];")
        o.line(f"int whole = K / {v};  // chunks of 16 bytes that every row reads inside itself")
        for array, offsets, count in (("w", "w_off", rw), ("x", "x_off", s)):
            o.line("#pragma unroll")
            with o.block(f"for (int i = 0; i < {count}; ++i)"):
                o.line(f"const size_t address = reinterpret_cast<size_t>({array}_rows[i]);")
                o.line(f"{offsets}[i] = WINDOWED ? (int)(address & {CHUNK_BYTES - 1}) / {config.element_bytes} : 0;")
                o.line(f"{array}_chunks[i] = reinterpret_cast<const uint4*>(address - (size_t){offsets}[i] * "
                       f"{config.element_bytes});")
                o.line(f"if ({offsets}[i] != 0) whole = min(whole, max(0, (K + {offsets}[i] - {v}) / {v}));")
        o.line(f"float acc[{s}][{rw}];")
        o.line("#pragma unroll")
        o.line(f"for (int j = 0; j < {s}; ++j)")
        o.line("#pragma unroll")
        o.line(f"    for (int i = 0; i < {rw}; ++i) acc[j][i] = 0.0f;")
        step = kw * stages * 32
        o.comment(f"Per step a warp's lanes take {stages} x 32 consecutive chunks; the K-warps take the next ones.")
        with o.block(f"for (int base = k_warp * {stages * 32} + lane; base < whole; base += {step})"):
            o.line(f"uint4 w[{stages}][{rw}], x[{stages}][{s}];")
            o.line("#pragma unroll")
            with o.block(f"for (int u = 0; u < {stages}; ++u)"):
                o.line("const int c = base + u * 32;")
                o.line("const bool in = c < whole;")
                o.line("#pragma unroll")
                o.line(f"for (int i = 0; i < {rw}; ++i) "
                       f"w[u][i] = in ? {name}_chunk<WINDOWED>(w_chunks[i], w_off[i], c) : make_uint4(0, 0, 0, 0);")
                o.line("#pragma unroll")
                o.line(f"for (int j = 0; j < {s}; ++j) "
                       f"x[u][j] = in ? {name}_chunk<WINDOWED>(x_chunks[j], x_off[j], c) : make_uint4(0, 0, 0, 0);")
            o.comment("Each chunk widened once: the small rows' for every streamed row, then each streamed row's.")
            o.line("#pragma unroll")
            with o.block(f"for (int u = 0; u < {stages}; ++u)"):
                o.line(f"float xs[{s}][{v}];")
                o.line("#pragma unroll")
                o.line(f"for (int j = 0; j < {s}; ++j) {name}_widen(x[u][j], xs[j]);")
                o.line("#pragma unroll")
                with o.block(f"for (int i = 0; i < {rw}; ++i)"):
                    o.line(f"float ws[{v}];")
                    o.line(f"{name}_widen(w[u][i], ws);")
                    o.line("#pragma unroll")
                    o.line(f"for (int j = 0; j < {s}; ++j)")
                    o.line("#pragma unroll")
                    o.line(f"    for (int e = 0; e < {v}; ++e) acc[j][i] = fmaf(ws[e], xs[j][e], acc[j][i]);")
        o.comment("The elements past the whole chunks (fewer than 32), one a lane, on the first K-warp.")
        with o.block("if (k_warp == 0)"):
            with o.block(f"for (int k = whole * {v} + lane; k < K; k += 32)"):
                o.line(f"float xs[{s}];")
                o.line("#pragma unroll")
                o.line(f"for (int j = 0; j < {s}; ++j) xs[j] = {to_float(problem.a.dtype, 'x_rows[j][k]')};")
                o.line("#pragma unroll")
                with o.block(f"for (int i = 0; i < {rw}; ++i)"):
                    o.line(f"const float wk = {to_float(problem.a.dtype, 'w_rows[i][k]')};")
                    o.line("#pragma unroll")
                    o.line(f"for (int j = 0; j < {s}; ++j) acc[j][i] = fmaf(wk, xs[j], acc[j][i]);")
        o.comment("The lanes' sums meet by shuffles, the K-warps' in shared memory.")
        o.line("#pragma unroll")
        with o.block(f"for (int j = 0; j < {s}; ++j)"):
            o.line("#pragma unroll")
            with o.block(f"for (int i = 0; i < {rw}; ++i)"):
                o.line("float sum = acc[j][i];")
                o.line("#pragma unroll")
                o.line("for (int lanes = 16; lanes > 0; lanes >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, lanes);")
                o.line(f"if (lane == 0) sums[k_warp][j][row_warp * {rw} + i] = sum;")
        o.line("__syncthreads();")
        with o.block(f"for (int t = threadIdx.x; t < {s * r}; t += {threads})"):
            o.line(f"const int j = t / {r}, i = t % {r};")
            o.line("float sum = 0.0f;")
            o.line("#pragma unroll")
            o.line(f"for (int q = 0; q < {kw}; ++q) sum += sums[q][j][i];")
            o.line("const int row = row_block + i, small_row = small0 + j;")
            o.line(f"if (row >= {rows_total} || small_row >= {small_total}) continue;")
            m, n = ("small_row", "row") if streams_b else ("row", "small_row")
            row_major = problem.c.layout is ir.MatrixLayout.ROW
            index = f"(size_t){m} * ldc + {n}" if row_major else f"(size_t){n} * ldc + {m}"
            o.line(f"{c_type}* const c = C + {index};")
            if problem.epilogue is ir.Epilogue.ALPHA_BETA:
                o.line(f"const float value = beta == 0.0f ? alpha * sum : alpha * sum + beta * "
                       f"{to_float(problem.c.dtype, '*c')};")
            else:
                o.line("const float value = sum;")
            o.line(f"*c = {FROM_FLOAT[problem.c.dtype].format('value')};")


def _emit_entry(o: Emitter, spec: ir.KernelSpec, config: GemvConfig, entry: str, windowed: str) -> None:
    parameters = kernel_parameters(spec)
    bounds = f"{config.threads}, {config.blocks_per_sm}" if config.blocks_per_sm else f"{config.threads}"
    o.line(f'extern "C" __global__ void __launch_bounds__({bounds}) {entry}('
           + ", ".join(f"{ctype} {pname}" for ctype, pname in parameters) + ")")
    with o.block(""):
        o.line(f"{spec.name}_gemv<{windowed}>(" + ", ".join(pname for _, pname in parameters) + ");")

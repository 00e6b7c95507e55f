"""The GEMV path's CUDA: C = A B for a few rows of one operand against many rows of the other, both read along K.

Each block takes S rows of the small operand and R rows of the streamed one (the weight): blockIdx.x counts the
small operand's row-blocks fastest, so the blocks that share a weight tile run together and meet in L2. Its warps
split into K-warps, which take interleaved 16-byte chunks of K, and row-warps, which take the streamed rows in
equal parts. Per step a lane loads STAGES chunks of each of its rows and of the small rows (ld.global.nc, 16 bytes,
so a warp reads 512 contiguous bytes of a row per chunk: HBM's full rate), widens them to f32 and adds the
products into one f32 sum per (small row, streamed row). The sums meet by warp shuffles, then across K-warps in
shared memory, and one thread a C element applies the epilogue.

With `gemv_m16n8k16` (config.tensor) a warp multiplies instead: each of its 16-row tiles of the streamed operand is
mma.sync m16n8k16's A operand, each 8-row tile of the small one its B operand. Lane l loads 16 bytes of row l / 4
(and of row l / 4 + 8) at element 8 (l % 4) of each 32-element piece of K; those 8 elements fill the fragment's
k 2t, 2t + 1, 2t + 8, 2t + 9 of one k-step and the same of the next, for both operands alike, so the tensor cores
see K permuted within the piece and the sums are the product's. A warp issues its next step's loads before it
multiplies this step's (two register buffers), and each lane's accumulators are the fragment's C: no shuffles.

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
from .config import CHUNK_BYTES, MMA_SMALL_ROWS, MMA_TILE_ROWS, QUAD, GemvConfig

WIDEN = {  # a 32-bit word of the element type as f32 values (the word's elements, lowest first)
    ir.DType.BF16: ("__uint_as_float({w} << 16)", "__uint_as_float({w} & 0xffff0000u)"),
    ir.DType.F16: ("__low2float(*reinterpret_cast<const __half2*>(&{w}))",
                   "__high2float(*reinterpret_cast<const __half2*>(&{w}))"),
    ir.DType.F32: ("__uint_as_float({w})",),
}


def emit_gemv_definitions(spec: ir.KernelSpec, config: GemvConfig, o: Emitter) -> None:
    """The device helpers, the shared body and both entries."""
    name = spec.name
    if config.tensor:
        _emit_line_load(o, name)
        o.line()
    _emit_helpers(o, name, spec.problem.a.dtype, f"{name}_ldg" if config.tensor else "__ldg",
                  tensor=config.tensor)
    o.line()
    if config.tensor:
        _emit_mma_helpers(o, spec, config)
        o.line()
    _emit_body(o, spec, config)
    for entry, windowed in ((vector_entry(spec), "false"), (scalar_entry(spec), "true")):
        o.line()
        _emit_entry(o, spec, config, entry, windowed)


def _emit_line_load(o: Emitter, name: str) -> None:
    """The tensor kernel's 16-byte load, asking L2 for the chunk's whole 128-byte line: its lanes read 64 bytes of a
    row a load, and the line's other half a piece later (docs/gemv.md: 3-6% faster than without the hint)."""
    o.comment("A 16-byte load of a streamed row; L2 fetches the whole 128-byte line it lies in.")
    with o.block(f"static __device__ __forceinline__ uint4 {name}_ldg(const uint4* p)"):
        o.line("uint4 v;")
        o.line('asm("ld.global.nc.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), '
               '"=r"(v.w) : "l"(p));')
        o.line("return v;")


def _emit_helpers(o: Emitter, name: str, dtype: ir.DType, load: str, tensor: bool) -> None:
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
    if tensor:
        o.comment("The chunk `c` (16 bytes) of a row whose start is `off` elements past the aligned pointer `row`. "
                  "The lanes' rows\nstart at different offsets: both chunks are loaded and the window taken "
                  "whatever the offset (no branch, so\nthe step's loads all issue before the first returns).")
    else:
        o.comment("The chunk `c` (16 bytes) of a row whose start is `off` elements past the aligned pointer `row`.")
    with o.block(f"template <bool WINDOWED>\nstatic __device__ __forceinline__ uint4 {name}_chunk(const uint4* row, "
                 "int off, int c)"):
        o.line(f"const uint4 lo = {load}(row + c);")
        o.line("if (!WINDOWED) return lo;")
        if tensor:
            o.line(f"return {name}_window(lo, {load}(row + c + 1), off);")
        else:
            o.line(f"return off == 0 ? lo : {name}_window(lo, {load}(row + c + 1), off);")
    if tensor:  # the tensor kernel multiplies the 16-bit chunks as they are
        return
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
    s, r, rw = config.small_rows, config.rows, config.warp_rows
    kw, threads = config.k_warps, config.threads
    streams_b = config.streamed is ir.Operand.B
    parameters = ", ".join(f"{ctype} {pname}" for ctype, pname in kernel_parameters(spec))
    o.comment(f"C = A B: {s} row(s) of {'A' if streams_b else 'B'} against {r} rows of "
              f"{'B' if streams_b else 'A'} per block; WINDOWED reads rows that start off 16 bytes.")
    with o.block(f"template <bool WINDOWED>\nstatic __device__ __forceinline__ void {name}_gemv({parameters})"):
        o.line(f"__shared__ float sums[{kw}][{s}][{r}];")
        if problem.batched:
            o.line("A += blockIdx.z * stride_a;")
            o.line("B += blockIdx.z * stride_b;")
            o.line("C += blockIdx.z * stride_c;")
        rows_total, small_total = ("N", "M") if streams_b else ("M", "N")
        o.line(f"const int small_blocks = ({small_total} + {s - 1}) / {s};")
        o.comment("The small operand's row-blocks fastest: the blocks that read one weight tile run together.")
        o.line("const int small0 = (int)(blockIdx.x % small_blocks) * " + str(s) + ";")
        o.line(f"const int row_block = (int)(blockIdx.x / small_blocks) * {r};")
        o.line("const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;")
        o.line(f"const int k_warp = warp % {kw}, row_warp = warp / {kw};")
        o.line(f"const int row0 = row_block + row_warp * {rw};")
        if config.tensor:
            _emit_mma_loop(o, spec, config)
        else:
            _emit_fma_loop(o, spec, config)
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
            o.line(f"{problem.c.dtype.c_type}* const c = C + {index};")
            if problem.epilogue is ir.Epilogue.ALPHA_BETA:
                o.line(f"const float value = beta == 0.0f ? alpha * sum : alpha * sum + beta * "
                       f"{to_float(problem.c.dtype, '*c')};")
            else:
                o.line("const float value = sum;")
            o.line(f"*c = {FROM_FLOAT[problem.c.dtype].format('value')};")


def _operands(config: GemvConfig) -> tuple[str, str, str, str, str, str]:
    """(the streamed operand, its leading dimension, its rows' extent, the small operand, its leading dimension, its
    rows' extent)."""
    if config.streamed is ir.Operand.B:
        return "B", "ldb", "N", "A", "lda", "M"
    return "A", "lda", "M", "B", "ldb", "N"


def _emit_row_chunks(o: Emitter, config: GemvConfig, rows: str, chunks: str, offsets: str, count: int,
                     index: str = "i", whole: bool = False) -> None:
    """Rows `rows[index]` as aligned 16-byte chunks `chunks[index]` and each start's offset into its first,
    `offsets[index]` (0 unless WINDOWED); with `whole`, `whole` lowered to the chunks every row reads inside itself."""
    o.line("#pragma unroll")
    with o.block(f"for (int {index} = 0; {index} < {count}; ++{index})"):
        o.line(f"const size_t address = reinterpret_cast<size_t>({rows}[{index}]);")
        o.line(f"{offsets}[{index}] = WINDOWED ? (int)(address & {CHUNK_BYTES - 1}) / {config.element_bytes} : 0;")
        o.line(f"{chunks}[{index}] = reinterpret_cast<const uint4*>(address - (size_t){offsets}[{index}] * "
               f"{config.element_bytes});")
        if whole:
            v = config.vector
            o.line(f"if ({offsets}[{index}] != 0) whole = min(whole, max(0, (K + {offsets}[{index}] - {v}) / {v}));")


def _emit_fma_loop(o: Emitter, spec: ir.KernelSpec, config: GemvConfig) -> None:
    """CUDA cores: every lane on every row of the warp, the sums reduced by shuffles into `sums`."""
    problem = spec.problem
    name = spec.name
    element = problem.a.dtype.c_type
    s, rw, stages, kw, v = config.small_rows, config.warp_rows, config.stages, config.k_warps, config.vector
    weight, ldw, rows_total, small, ldx, small_total = _operands(config)
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
    _emit_row_chunks(o, config, "w_rows", "w_chunks", "w_off", rw, whole=True)
    _emit_row_chunks(o, config, "x_rows", "x_chunks", "x_off", s, whole=True)
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


def _emit_mma_helpers(o: Emitter, spec: ir.KernelSpec, config: GemvConfig) -> None:
    """The mma.sync wrapper, and a step's loads and multiplies over one buffer of a lane's chunks."""
    name = spec.name
    o.uses("mma.sync")
    operand = spec.problem.a.dtype.value  # PTX names bf16 and f16 as ir.DType does
    tiles, small_tiles, stages = config.tiles, config.small_tiles, config.stages
    o.comment("D += A B, mma.sync m16n8k16: A a 16-row tile of the streamed rows, B an 8-row tile of the small ones.")
    with o.block(f"static __device__ __forceinline__ void {name}_mma(float (&d)[4], const unsigned (&a)[4], "
                 "unsigned b0, unsigned b1)"):
        o.line(f'asm("mma.sync.aligned.m16n8k16.row.col.f32.{operand}.{operand}.f32 {{%0, %1, %2, %3}}, '
               '{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"')
        o.line('    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])')
        o.line('    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));')
    o.line()
    w_type, x_type = f"uint4 (&w)[{stages}][{tiles}][2]", f"uint4 (&x)[{stages}][{small_tiles}]"
    o.comment(f"A step's chunks from piece `base` of K on ({stages} pieces of 32 elements): this lane's 16 bytes of "
              "each of its rows\n(two a tile) and small rows; pieces past `pieces` read the last one, multiplied "
              "as zeros.")
    with o.block(f"template <bool WINDOWED>\nstatic __device__ __forceinline__ void {name}_load({w_type}, "
                 f"{x_type}, const uint4* (&w_chunks)[{tiles}][2], int (&w_off)[{tiles}][2], "
                 f"const uint4* (&x_chunks)[{small_tiles}], int (&x_off)[{small_tiles}], int base, "
                 "int pieces, int pair)"):
        o.line("#pragma unroll")
        with o.block(f"for (int u = 0; u < {stages}; ++u)"):
            o.comment("The piece's chunk of this lane, clamped into the rows: its loads stay in bounds (the "
                      "compiler may issue\na load whatever the select after it keeps).")
            o.line("const bool in = base + u < pieces;")
            o.line(f"const int c = {QUAD} * min(base + u, pieces - 1) + pair;")
            o.line("#pragma unroll")
            o.line(f"for (int i = 0; i < {tiles}; ++i)")
            o.line("#pragma unroll")
            o.line("    for (int h = 0; h < 2; ++h) w[u][i][h] = in ? "
                   f"{name}_chunk<WINDOWED>(w_chunks[i][h], w_off[i][h], c) : make_uint4(0, 0, 0, 0);")
            o.line("#pragma unroll")
            o.line(f"for (int j = 0; j < {small_tiles}; ++j) "
                   f"x[u][j] = in ? {name}_chunk<WINDOWED>(x_chunks[j], x_off[j], c) : make_uint4(0, 0, 0, 0);")
    o.line()
    o.comment("A step's multiplies: each piece two k-steps, the chunks' first two words one and their last two the "
              "next.")
    with o.block(f"static __device__ __forceinline__ void {name}_multiply(float (&acc)[{tiles}][{small_tiles}][4], "
                 f"const {w_type}, const {x_type})"):
        o.line("#pragma unroll")
        with o.block(f"for (int u = 0; u < {stages}; ++u)"):
            o.line("#pragma unroll")
            with o.block(f"for (int i = 0; i < {tiles}; ++i)"):
                o.line("const unsigned low[4] = {w[u][i][0].x, w[u][i][1].x, w[u][i][0].y, w[u][i][1].y};")
                o.line("const unsigned high[4] = {w[u][i][0].z, w[u][i][1].z, w[u][i][0].w, w[u][i][1].w};")
                o.line("#pragma unroll")
                with o.block(f"for (int j = 0; j < {small_tiles}; ++j)"):
                    o.line(f"{name}_mma(acc[i][j], low, x[u][j].x, x[u][j].y);")
                    o.line(f"{name}_mma(acc[i][j], high, x[u][j].z, x[u][j].w);")


def _emit_mma_loop(o: Emitter, spec: ir.KernelSpec, config: GemvConfig) -> None:
    """Tensor cores: a warp's 16-row tiles against the 8-row tiles of the small rows, its lanes' accumulators the
    fragments of C, written to `sums`."""
    problem = spec.problem
    name = spec.name
    tiles, small_tiles, stages, kw, v = config.tiles, config.small_tiles, config.stages, config.k_warps, config.vector
    weight, ldw, rows_total, small, ldx, small_total = _operands(config)
    element = problem.a.dtype.c_type
    o.line("const int g = lane >> 2, pair = lane & 3;  // the fragments' row and pair of columns")
    o.comment("This lane's rows: g and g + 8 of each tile, g of each tile of the small rows. Rows past the matrix "
              "read its last\nrow (in bounds) and are not stored.")
    o.line(f"const uint4* w_chunks[{tiles}][2];")
    o.line(f"int w_off[{tiles}][2];")
    o.line("#pragma unroll")
    with o.block(f"for (int i = 0; i < {tiles}; ++i)"):
        o.line(f"const {element}* w_rows[2];")
        o.line("#pragma unroll")
        o.line(f"for (int h = 0; h < 2; ++h) w_rows[h] = {weight} + "
               f"(size_t)min(row0 + {MMA_TILE_ROWS} * i + 8 * h + g, {rows_total} - 1) * {ldw};")
        _emit_row_chunks(o, config, "w_rows", "w_chunks[i]", "w_off[i]", 2, index="h")
    o.line(f"const {element}* x_rows[{small_tiles}];")
    o.line(f"const uint4* x_chunks[{small_tiles}];")
    o.line(f"int x_off[{small_tiles}];")
    o.line("#pragma unroll")
    o.line(f"for (int j = 0; j < {small_tiles}; ++j) x_rows[j] = {small} + "
           f"(size_t)min(small0 + {MMA_SMALL_ROWS} * j + g, {small_total} - 1) * {ldx};")
    _emit_row_chunks(o, config, "x_rows", "x_chunks", "x_off", small_tiles, index="j")
    o.comment("Pieces of 32 elements that every row reads in whole chunks, the same for every lane (mma.sync takes "
              "the\nwarp's 32): a row that starts off 16 bytes reads one chunk fewer.")
    o.line(f"const int pieces = (WINDOWED ? max(0, K / {v} - 1) : K / {v}) / {QUAD};")
    o.line(f"float acc[{tiles}][{small_tiles}][4];")
    o.line("#pragma unroll")
    o.line(f"for (int i = 0; i < {tiles}; ++i)")
    o.line("#pragma unroll")
    o.line(f"    for (int j = 0; j < {small_tiles}; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] "
           "= 0.0f;")
    step = kw * stages
    o.comment(f"A warp's step takes {stages} consecutive pieces, the K-warps the next ones; the next step's chunks "
              "are loaded\nbefore this step's are multiplied.")
    o.line(f"uint4 w0[{stages}][{tiles}][2], x0[{stages}][{small_tiles}], w1[{stages}][{tiles}][2], "
           f"x1[{stages}][{small_tiles}];")
    o.line(f"int base = k_warp * {stages};")
    o.line(f"{name}_load<WINDOWED>(w0, x0, w_chunks, w_off, x_chunks, x_off, base, pieces, pair);")
    with o.block(f"for (; base < pieces; base += {2 * step})"):
        o.line(f"{name}_load<WINDOWED>(w1, x1, w_chunks, w_off, x_chunks, x_off, base + {step}, pieces, pair);")
        o.line(f"{name}_multiply(acc, w0, x0);")
        o.line(f"{name}_load<WINDOWED>(w0, x0, w_chunks, w_off, x_chunks, x_off, base + {2 * step}, pieces, pair);")
        o.line(f"{name}_multiply(acc, w1, x1);")
    o.comment("The elements past the whole pieces (fewer than 40), on the first K-warp: each lane its own elements "
              "of C.")
    with o.block("if (k_warp == 0)"):
        with o.block(f"for (int k = pieces * {QUAD * v}; k < K; ++k)"):
            o.line("#pragma unroll")
            with o.block(f"for (int j = 0; j < {small_tiles}; ++j)"):
                o.line("#pragma unroll")
                with o.block("for (int e = 0; e < 2; ++e)"):
                    x_row = f"min(small0 + {MMA_SMALL_ROWS} * j + 2 * pair + e, {small_total} - 1)"
                    o.line(f"const float xk = {to_float(problem.a.dtype, f'{small}[(size_t){x_row} * {ldx} + k]')};")
                    o.line("#pragma unroll")
                    o.line(f"for (int i = 0; i < {tiles}; ++i)")
                    o.line("#pragma unroll")
                    with o.block("    for (int h = 0; h < 2; ++h)"):
                        w_row = f"min(row0 + {MMA_TILE_ROWS} * i + 8 * h + g, {rows_total} - 1)"
                        w_k = to_float(problem.a.dtype, f"{weight}[(size_t){w_row} * {ldw} + k]")
                        o.line(f"const float wk = {w_k};")
                        o.line("acc[i][j][2 * h + e] = fmaf(wk, xk, acc[i][j][2 * h + e]);")
    o.comment("The fragments of C: d0, d1 at row g, columns 2 pair and 2 pair + 1; d2, d3 at row g + 8.")
    o.line("#pragma unroll")
    o.line(f"for (int i = 0; i < {tiles}; ++i)")
    o.line("#pragma unroll")
    o.line(f"    for (int j = 0; j < {small_tiles}; ++j)")
    o.line("#pragma unroll")
    o.line("        for (int e = 0; e < 4; ++e)")
    o.line(f"            sums[k_warp][{MMA_SMALL_ROWS} * j + 2 * pair + (e & 1)][row_warp * {config.warp_rows} + "
           f"{MMA_TILE_ROWS} * i + 8 * (e >> 1) + g] = acc[i][j][e];")


def _emit_entry(o: Emitter, spec: ir.KernelSpec, config: GemvConfig, entry: str, windowed: str) -> None:
    parameters = kernel_parameters(spec)
    bounds = f"{config.threads}, {config.blocks_per_sm}" if config.blocks_per_sm else f"{config.threads}"
    o.line(f'extern "C" __global__ void __launch_bounds__({bounds}) {entry}('
           + ", ".join(f"{ctype} {pname}" for ctype, pname in parameters) + ")")
    with o.block(""):
        o.line(f"{spec.name}_gemv<{windowed}>(" + ", ".join(pname for _, pname in parameters) + ");")

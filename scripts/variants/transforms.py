"""Source-level variants of generated kernels, for measuring ideas before they enter the language.

Each transform takes the emitted .cu text and returns a changed one; `codegen_patch` swaps an
emitter method while a spec compiles. bench_variants.py and ncu_stalls.sh apply them as
SPEC:NAME[+NAME...], e.g. `specs/sgemm_v3.gemm:o_snake+u4`. Used for the README's Performance
notes 9-16; `fma_order` and `unroll` (o_row/o_col/o_snake, u2/u4) later became spec keys.

  nv        plain C++ float4 shared loads instead of the volatile PTX wrapper
  ji, ba    FMA loops swapped; a and b swapped in fmaf
  o_ORDER   the outer product written out in an order: row, col, snake, csnake, quad, pair, diag
  gR_C_M    snake orders over permuted rows/columns (R, C: id, il = interleaved halves, rev; M: r, c)
  uN        #pragma unroll N on the k-tile loop; sku1: no unroll in a stream-K kernel
  H         register path: first fragments of tile k+1 loaded before the last slice of tile k
  W         register path: tile k+1 copied in waves, one per global chunk, during tile k
"""
import contextlib
import re
PLAIN_LDS = '''static __device__ __forceinline__ float4 lds128(const float* p) {
    return *reinterpret_cast<const float4*>(p);
}'''
def nonvolatile(src):
    return re.sub(r'static __device__ __forceinline__ float4 lds128\(const float\* p\) \{.*?\n\}', PLAIN_LDS, src, flags=re.S)
TRANSFORMS = {"nv": nonvolatile}

FMA_NEST = re.compile(r'(?P<ind1>[ ]*)for \(int i = 0; i < FRAG_M; \+\+i\) \{\n(?P<p2>[ ]*#pragma unroll\n)(?P<ind2>[ ]*)for \(int j = 0; j < FRAG_N; \+\+j\) \{\n(?P<ind3>[ ]*)acc\[i\]\[j\] = fmaf\((?P<x>[^,]+), (?P<y>[^,]+), acc\[i\]\[j\]\);')

def swap_loops(src):
    return FMA_NEST.sub(lambda m: f"{m['ind1']}for (int j = 0; j < FRAG_N; ++j) {{\n{m['p2']}{m['ind2']}for (int i = 0; i < FRAG_M; ++i) {{\n{m['ind3']}acc[i][j] = fmaf({m['x']}, {m['y']}, acc[i][j]);", src)

def snake(src):
    return FMA_NEST.sub(lambda m: f"{m['ind1']}for (int i = 0; i < FRAG_M; ++i) {{\n{m['p2']}{m['ind2']}for (int jj = 0; jj < FRAG_N; ++jj) {{\n{m['ind3']}const int j = i % 2 == 0 ? jj : FRAG_N - 1 - jj;\n{m['ind3']}acc[i][j] = fmaf({m['x']}, {m['y']}, acc[i][j]);", src)

def operands_ba(src):
    return FMA_NEST.sub(lambda m: f"{m['ind1']}for (int i = 0; i < FRAG_M; ++i) {{\n{m['p2']}{m['ind2']}for (int j = 0; j < FRAG_N; ++j) {{\n{m['ind3']}acc[i][j] = fmaf({m['y']}, {m['x']}, acc[i][j]);", src)

TRANSFORMS.update(ji=swap_loops, snake=snake, ba=operands_ba)

def order_pairs(name, M, N):
    if name == "row": return [(i, j) for i in range(M) for j in range(N)]
    if name == "col": return [(i, j) for j in range(N) for i in range(M)]
    if name == "snake": return [(i, j if i % 2 == 0 else N - 1 - j) for i in range(M) for j in range(N)]
    if name == "csnake": return [(i if j % 2 == 0 else M - 1 - i, j) for j in range(N) for i in range(M)]
    if name == "quad":  # 4x4 quadrants visited in a U, snake inside each
        out = []
        for qi, qj in [(0, 0), (0, 1), (1, 1), (1, 0)]:
            for ii in range(4):
                js = range(4) if ii % 2 == 0 else range(3, -1, -1)
                out += [(qi * 4 + ii, qj * 4 + j) for j in js]
        return out
    if name == "pair":  # two rows at a time, column by column, snaking
        out = []
        for p in range(M // 2):
            js = range(N) if p % 2 == 0 else range(N - 1, -1, -1)
            for j in js:
                out += [(2 * p, j), (2 * p + 1, j)]
        return out
    if name == "diag":
        return sorted(((i, j) for i in range(M) for j in range(N)), key=lambda t: ((t[0] + t[1]) % N, t[0]))
    raise KeyError(name)

def straight(name):
    def tr(src):
        def rep(m):
            M = int(re.search(r"constexpr int FRAG_M = (\d+);", src).group(1)); N = int(re.search(r"constexpr int FRAG_N = (\d+);", src).group(1))
            ind = m['ind1']
            lines = []
            for i, j in order_pairs(name, M, N):
                x = re.sub(r'\bi\b', str(i), m['x']); y = re.sub(r'\bj\b', str(j), m['y'])
                lines.append(f"{ind}acc[{i}][{j}] = fmaf({x}, {y}, acc[{i}][{j}]);")
            return "\n".join(lines) + "\n" + ind + "{{"   # two braces to swallow the loops' closing braces
        out = FMA_NEST.sub(rep, src)
        # remove the two closing braces that followed the old statement
        out = re.sub(r"\{\{\n[ ]*\}\n[ ]*\}\n", "", out)
        return re.sub(r"#pragma unroll\n(\s*acc\[)", r"\1", out)
    return tr

for _n in ["row", "col", "snake", "csnake", "quad", "pair", "diag"]:
    TRANSFORMS["o_" + _n] = straight(_n)

def unroll_kt(n):
    def tr(src):
        return src.replace("    for (int kt = 0; kt < k_tiles; ++kt) {", f"    #pragma unroll {n}\n    for (int kt = 0; kt < k_tiles; ++kt) {{", 1)
    return tr
TRANSFORMS["u2"] = unroll_kt(2)
TRANSFORMS["u4"] = unroll_kt(4)

def chain(*names):
    def tr(src):
        for n in names:
            src = TRANSFORMS[n](src)
        return src
    return tr

# Codegen patches (applied while compiling): H = fragments double-buffered across k-tiles on the register path.

@contextlib.contextmanager
def codegen_patch(names):
    from gemmdsl import codegen
    cls = codegen.KernelEmitter if hasattr(codegen, "KernelEmitter") else None
    saved = {}
    if "H" in names:
        def reg_double(self):
            o = self.out
            self._declare_stage_registers()
            self._emit_global_loads("0")
            self._emit_shared_stores("0")
            o.line("__syncthreads();")
            self._emit_stage_pointers("0", "first")
            self._emit_fragment_loads("0", "[0]", "first")
            with o.block("for (int kt = 0; kt < k_tiles; ++kt)"):
                o.line("const int stage = kt % 2;")
                o.line("const bool has_next = kt + 1 < k_tiles;")
                with o.block("if (has_next)"):
                    self._emit_global_loads("kt + 1")
                self._emit_compute_with_handoff("stage", "stage ^ 1", self._emit_register_handoff)
        saved["_emit_register_double"] = cls._emit_register_double
        cls._emit_register_double = reg_double
    if "W" in names:
        from gemmdsl.codegen import OPERANDS, VECTOR_TYPES, as_vector, stage_base, vector_of
        def loads(self, tile, wave):
            o = self.out
            for operand in OPERANDS:
                vector = self.layout.load_vector(operand)
                src = self._emit_source_pointer(operand, tile)
                chunk = self.layout.global_chunks(operand)[wave]
                address = f"{src}[{self._global_offset(operand, chunk.row, chunk.col)}]"
                o.line(f"{operand.value}_stage = {as_vector(address, vector, const=True)};")
        def stores(self, stage, wave):
            o = self.out
            for operand in OPERANDS:
                geometry = self.layout.smem[operand]
                vector = self.layout.load_vector(operand)
                width = self.layout.store_width(operand)
                o.line(f"float* const {operand.value}_dst = {stage_base(operand, stage)};")
                chunk = self.layout.global_chunks(operand)[wave]
                for element in range(0, vector, width):
                    mn, k = self.layout.chunk_tile_coords(operand, chunk, element)
                    target = f"{operand.value}_dst + {geometry.offset(mn, k).render()}"
                    o.line(f"sts{32 * width}({target}, {vector_of(operand.value + '_stage', vector, element, width)});")
        def reg_double_waves(self):
            o = self.out
            waves = len(self.layout.global_chunks(OPERANDS[0]))
            assert all(len(self.layout.global_chunks(op)) == waves for op in OPERANDS)
            for operand in OPERANDS:
                o.line(f"{VECTOR_TYPES[self.layout.load_vector(operand)]} {operand.value}_stage;")
            for w in range(waves):
                with o.block(""):
                    loads(self, "0", w); stores(self, "0", w)
            o.line("__syncthreads();")
            with o.block("for (int kt = 0; kt < k_tiles; ++kt)"):
                o.line("const int stage = kt % 2;")
                o.line("const bool has_next = kt + 1 < k_tiles;")
                with o.block("if (has_next)"):
                    loads(self, "kt + 1", 0)
                self._emit_stage_pointers("stage", "read")
                self._emit_fragment_loads("0", "[0]")
                with o.unrolled("kk", "BK"):
                    with o.block("if (kk + 1 < BK)"):
                        self._emit_fragment_loads("kk + 1", "[(kk + 1) % 2]")
                    self._emit_outer_product("[kk % 2]")
                    for w in range(1, waves):
                        with o.block(f"if (kk == {w} * BK / {waves} - 1 && has_next)"):
                            stores(self, "stage ^ 1", w - 1)
                            loads(self, "kt + 1", w)
                with o.block("if (has_next)"):
                    stores(self, "stage ^ 1", waves - 1)
                o.line("__syncthreads();")
        saved["_emit_register_double"] = cls._emit_register_double
        cls._emit_register_double = reg_double_waves
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(cls, k, v)
TRANSFORMS["u8"] = unroll_kt(8)

def perm(kind, n):
    if kind == "id": return list(range(n))
    if kind == "il": return [x for p in zip(range(n // 2), range(n // 2, n)) for x in p]
    if kind == "rev": return list(range(n - 1, -1, -1))
def gen_pairs(rows, cols, mode, M, N):
    ri, cj = perm(rows, M), perm(cols, N)
    out = []
    if mode == "r":
        for t, i in enumerate(ri):
            out += [(i, j) for j in (cj if t % 2 == 0 else cj[::-1])]
    else:
        for t, j in enumerate(cj):
            out += [(i, j) for i in (ri if t % 2 == 0 else ri[::-1])]
    return out
_orig_order_pairs = order_pairs
def order_pairs(name, M, N):
    if name.startswith("g"):
        rows, cols, mode = name[1:].split("_")
        return gen_pairs(rows, cols, mode, M, N)
    return _orig_order_pairs(name, M, N)
for _r in ["id", "il", "rev"]:
    for _c in ["id", "il"]:
        for _m in ["r", "c"]:
            TRANSFORMS[f"g{_r}_{_c}_{_m}"] = straight(f"g{_r}_{_c}_{_m}")

def sk_unroll(n):
    def tr(src):
        i = src.index("_kernel_stream_k(")
        j = src.index("  // pipeline unroll", i)
        start = src.rindex("#pragma unroll", 0, j)
        return src[:start] + f"#pragma unroll {n}" + src[j:]
    return tr
TRANSFORMS["sku1"] = sk_unroll(1)

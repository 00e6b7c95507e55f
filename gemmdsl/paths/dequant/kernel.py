"""The dequantizing decode kernel's CUDA: C (M x N) = A (M x K) W^T, W given as quant_layout's packed arrays.

Mainloop (per warp): TILES 16-row tiles of W over the block's k-slice. Each lane keeps PREFETCH chunks of its
tiles' 128-bit loads in flight (ld.global.nc, no L1 allocation: the weights are read once), converts each word
to the 16-bit float of A with the magic-number trick (quant_layout's docstring), subtracts the code's bias
(and zero point), and feeds mma.sync m16n8k16 as its A operand; the activations are the B operand, staged once
per block in shared memory (the block's k-slice of MT * 8 rows) and read with ldmatrix; the block's scale and
zero-point words of the slice's groups are staged beside them and read as each group comes. Group scales multiply
f32 partial sums once per group (so the integer weights reach the tensor cores exactly); per-channel scales
multiply the accumulators once at the end.

Grid: x over blocks of MT * 8 rows of A (fastest, so blocks sharing a weight tile run together and meet in
L2), y over blocks of WARPS * TILES * 16 rows of W, z over k-slices (split-K). With more than one k-slice each
block adds its partial tile into an f32 workspace (M x N, zero) with atomics and counts itself in a counter of
its tile; the last block of a tile converts the tile into C and leaves the workspace and the counter zero
again, so one launch does the whole product and the workspace is zeroed only when allocated.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass

from ...emitter import Emitter
from ...launch_plan import decode_grid, dequantize_grid
from ...quant_layout import CODE_BIAS, TILE_N, QuantFormat
from ...rule import Rule
from ...targets import ARCHS, launch_register_cap

M_TILES = (1, 2, 4)  # 8-row tiles of A per block: ldmatrix.x4 loads two at once
# What the kernel's text uses that not every target has (targets.INSTRUCTION_TARGETS): the file's
# architecture guard (emit.arch_guard) names them.
INSTRUCTIONS = ("mma.sync", "ldmatrix")
MAX_SMEM_BYTES = ARCHS[90].smem_per_block  # what a block may opt into on the kernel's target
REGISTER_OVERHEAD = 40  # DecodeConfig.registers' addresses, activation fragments, a group's words, indices
# The dequantize-into-memory kernel (expand.py): warps per block, and (tile, chunk) items per warp, whose 128-bit
# loads a lane issues all before it converts the first.
DEQUANTIZE_WARPS = 8
DEQUANTIZE_ITEMS = 4

ACT = {  # A's type: C type, pair type, magic-number exponent (128.0 or 1024.0), mma operand type
    "bf16": ("__nv_bfloat16", "__nv_bfloat162", 0x4300, 128, "bf16"),
    "f16": ("__half", "__half2", 0x6400, 1024, "f16"),
}
C_TYPES = {"bf16": ("__nv_bfloat16", "__float2bfloat16_rn"), "f16": ("__half", "__float2half_rn"),
           "f32": ("float", "")}
# e4m3 into a 16-bit float: the byte's exponent and mantissa shifted under the target's, then 2^(bias - 7).
E4M3 = {"bf16": (4, 0x07F007F0, 0x7B807B80), "f16": (1, 0x3F803F80, 0x5C005C00)}


@dataclass(frozen=True)
class DecodeConfig:
    """The kernel's compile-time shape: the weight format, C's type, warps per block, 16-row tiles per warp,
    8-row tiles of A per block (M rows per block = 8 * m_tiles), k per block (a k-slice) and chunks in flight."""

    fmt: QuantFormat
    c: str
    # tiles, k_slice, prefetch and blocks_per_sm as measured fastest at M = 16 (and within the run's noise at
    # M = 1) against 8192 x 8192, 28672 x 8192 and 8192 x 28672 int4 weights (H200; docs/performance.md,
    # "Quantized weights"): one tile a warp, six chunks in flight, k-slices of 2048 at 2 blocks per SM.
    warps: int = 8
    tiles: int = 1
    m_tiles: int = 2
    k_slice: int = 2048
    prefetch: int = 6
    blocks_per_sm: int = 2  # __launch_bounds__'s minimum: caps the registers so that blocks share an SM

    @property
    def block_rows(self) -> int:
        return self.warps * self.tiles * 16

    @property
    def smem_bytes(self) -> int:
        """The block's rows of A over its k-slice, then its tiles' scale and zero-point words of the slice's groups."""
        return self.m_tiles * 8 * (self.k_slice + 8) * 2 + self.word_arrays * self.block_tiles * self.slice_groups * 8 * 4

    @property
    def block_tiles(self) -> int:
        return self.warps * self.tiles

    @property
    def word_arrays(self) -> int:
        """The word arrays a block stages: the scales (if any) and the zero points (if any)."""
        return int(self.fmt.scaled) + int(self.fmt.zeros)

    @property
    def slice_groups(self) -> int:
        return self.k_slice // self.fmt.group if self.fmt.group else 1

    @property
    def grid_rule(self) -> Rule:
        """The launch's grid and split-K workspace (launch_plan.decode_grid), which the C launcher prints."""
        return decode_grid(self.m_tiles * 8, self.block_rows, self.k_slice)

    def grid(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """The launch's grid: blocks of A's rows, of W's rows, k-slices (rule.Refused past CUDA's limits)."""
        values = self.grid_rule.evaluate({"M": m, "N": n, "K": k})
        return values["grid_x"], values["grid_y"], values["grid_z"]

    def workspace_bytes(self, m: int, n: int, k: int) -> int:
        """The f32 workspace and tile counters a split-K call needs (the C launcher's NAME_workspace_bytes)."""
        return self.grid_rule.evaluate({"M": m, "N": n, "K": k})["workspace_bytes"]

    @property
    def dequantize_threads(self) -> int:
        """The dequantize-into-memory kernel's block (expand.py)."""
        return DEQUANTIZE_WARPS * 32

    @property
    def dequantize_items_per_block(self) -> int:
        return DEQUANTIZE_WARPS * DEQUANTIZE_ITEMS

    @property
    def dequantize_smem_bytes(self) -> int:
        """Its dynamic shared memory: a warp's 16 x CHUNK_K tile of A's type, rows padded by 16 bytes."""
        return DEQUANTIZE_WARPS * TILE_N * self.dequantize_stage_stride * 2

    @property
    def dequantize_stage_stride(self) -> int:
        """Elements between the staged tile's rows: CHUNK_K and 8 more, so that the 8 rows a fragment register
        spans start in 8 different groups of 4 banks."""
        return self.fmt.chunk_k + 8

    @property
    def dequantize_grid_rule(self) -> Rule:
        """Its launch (launch_plan.dequantize_grid), which the C launcher NAME_dequantize prints."""
        return dequantize_grid(self.fmt.chunk_k, self.dequantize_items_per_block)

    def dequantize_grid(self, n: int, k: int) -> tuple[int, int, int]:
        """Its grid for an N x K W (rule.Refused for negative sizes or past CUDA's limits)."""
        return self.dequantize_grid_rule.evaluate({"N": n, "K": k})["grid_x"], 1, 1

    @property
    def k_multiple(self) -> int:
        """What K must be a multiple of: a row of A is read 16 bytes at a time, and groups are whole."""
        return max(8, self.fmt.group or 8)

    def problems(self, max_smem_bytes: int = MAX_SMEM_BYTES) -> list[ConfigProblem]:
        """What this configuration cannot do, each with the setting that causes it (empty: fine)."""
        fmt, out = self.fmt, []
        if self.k_slice % fmt.chunk_k or self.k_slice <= 0:
            out.append(ConfigProblem("k_slice", f"the k-slice ({self.k_slice}) must be a positive multiple of "
                                                f"{fmt.chunk_k}, the k of one 128-bit load of {fmt.weight} weights"))
        if fmt.group and self.k_slice % fmt.group:
            out.append(ConfigProblem("k_slice", f"the k-slice ({self.k_slice}) must be a multiple of the group "
                                                f"({fmt.group})"))
        if self.m_tiles not in M_TILES:
            out.append(ConfigProblem("m_tiles", f"m_tiles ({self.m_tiles}) must be 1, 2 or 4"))
        if self.smem_bytes > max_smem_bytes:
            out.append(ConfigProblem("smem", f"the staged activations and scales need {self.smem_bytes} bytes of "
                                             f"shared memory, more than the {max_smem_bytes} a block may have"))
        if self.prefetch < 1 or self.prefetch > max(1, self.k_slice // fmt.chunk_k):
            out.append(ConfigProblem("prefetch", f"prefetch ({self.prefetch}) must lie in "
                                                 f"1..{self.k_slice // fmt.chunk_k} (chunks per slice)"))
        return out

    @property
    def registers(self) -> int:
        """About the registers a lane's mainloop keeps live: the ring of loads, the accumulators (and a group's
        partial sums) and REGISTER_OVERHEAD for addresses, activations, a group's scales and indices (the
        slice's scale and zero-point words wait in shared memory). Fitted to ptxas 13.0 on sm_90a
        (docs/quantized-kernel.md): past register_cap it spills, below it does not."""
        ring = 4 * self.prefetch * self.tiles
        sums = 4 * self.tiles * self.m_tiles * (2 if self.fmt.group else 1)
        return ring + sums + REGISTER_OVERHEAD

    @property
    def register_cap(self) -> int:
        """The registers __launch_bounds__(threads, blocks_per_sm) leaves a thread (targets.launch_register_cap)."""
        return launch_register_cap(ARCHS[90], self.warps * 32, self.blocks_per_sm)


@dataclass(frozen=True)
class ConfigProblem:
    """A DecodeConfig setting the kernel cannot take: `setting` (k_slice, m_tiles, smem, prefetch) and why."""

    setting: str
    message: str


def decode_definitions(name: str, config: DecodeConfig) -> str:
    """The kernel, its device helpers and its C launchers: what follows a .cu's includes."""
    problems = config.problems()
    if problems:
        raise ValueError("; ".join(problem.message for problem in problems))
    return "\n".join([_prelude(name, config), _dequant(config), _helpers(name, config), _kernel(name, config),
                      _launcher(name, config)])


def _prelude(name: str, config: DecodeConfig) -> str:
    fmt = config.fmt
    act, act2, magic, magic_value, mma_type = ACT[fmt.activation]
    c_type, _ = C_TYPES[config.c]
    group_steps = fmt.group // 16 if fmt.group else 0
    return f"""// {name}: C ({config.c}, M x N) = A ({fmt.activation}, M x K) * W^T, W ({fmt.weight}, N x K) packed by
// gemmdsl/quant_layout.py (group {fmt.group or 'channel'}, zero points {'yes' if fmt.zeros else 'no'}).
#ifdef __CUDACC_RTC__
typedef unsigned int uint32_t;  // NVRTC has no <stdint.h>; a typedef may repeat one its headers make
#endif

namespace {name}_detail {{
typedef {act} act_t;
typedef {act2} act2_t;
typedef {c_type} c_t;
constexpr int WARPS = {config.warps}, TILES = {config.tiles}, MT = {config.m_tiles}, MROWS = MT * 8;
constexpr int K_SLICE = {config.k_slice}, CHUNK_K = {fmt.chunk_k}, STEPS = CHUNK_K / 16, CHUNKS = K_SLICE / CHUNK_K;
constexpr int PREFETCH = {config.prefetch}, BLOCK_TILES = WARPS * TILES, XS_STRIDE = K_SLICE + 8;
constexpr int GROUP = {fmt.group or 0}, GROUP_STEPS = {group_steps}, SLICE_GROUPS = {config.slice_groups};
constexpr uint32_t MAGIC2 = 0x{magic:04X}{magic:04X}u;  // two {fmt.activation} {magic_value}.0

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}}
// (x & MASK) | BITS in one lop3: written as C, ptxas spends an and and an or, since a lop3 takes one immediate.
template <uint32_t MASK, uint32_t BITS>
__device__ __forceinline__ uint32_t mask_or(uint32_t x) {{
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(x), "n"(MASK), "n"(BITS));
    return r;
}}
__device__ __forceinline__ act2_t as_act2(uint32_t u) {{ return *reinterpret_cast<act2_t*>(&u); }}
__device__ __forceinline__ uint32_t as_u32(act2_t v) {{ return *reinterpret_cast<uint32_t*>(&v); }}
__device__ __forceinline__ float act_float(uint32_t bits16) {{
    return {"__uint_as_float(bits16 << 16)" if fmt.activation == "bf16" else "__half2float(__ushort_as_half((unsigned short)bits16))"};
}}

__device__ __forceinline__ unsigned shared_address(const void* p) {{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}}

// Weights are read once: no L1 allocation. Volatile keeps each load where the ring issues it (ptxas would
// hoist every chunk of the unrolled slice to the top, out of registers).
__device__ __forceinline__ uint4 load_stream(const uint4* p) {{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {{%0, %1, %2, %3}}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}}

// Volatile, as load_stream: a group's word is read when the group comes, not hoisted with every other group's
// to the slice's start (where they would hold registers through the slice).
__device__ __forceinline__ uint32_t load_shared(const uint32_t* p) {{
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(shared_address(p)));
    return v;
}}

// Pins the accumulators' multiply-adds before this point: ptxas would otherwise sink every group's to the slice's
// end and keep each group's partial sums live until then (spilling past a few groups).
__device__ __forceinline__ void settle(float (&v)[4]) {{
    asm volatile("" : "+f"(v[0]), "+f"(v[1]), "+f"(v[2]), "+f"(v[3]));
}}

// Counts a block's k-slice in its tile's counter, for split-K. The release makes the block's atomics visible first
// (every thread's are ordered before it by the barrier they all passed), and the acquire lets the last block read
// every slice's sums; a fence per thread (two round trips to L2) did the same slower. Returns the count before.
__device__ __forceinline__ unsigned arrive(unsigned* counter) {{
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
    return before;
}}

__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{mma_type}.{mma_type}.f32 {{%0, %1, %2, %3}}, "
                 "{{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}}

__device__ __forceinline__ void ldmatrix_x2(uint32_t& r0, uint32_t& r1, const void* row) {{
    const unsigned address = shared_address(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{%0, %1}}, [%2];" : "=r"(r0), "=r"(r1) : "r"(address));
}}

__device__ __forceinline__ void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* row) {{
    const unsigned address = shared_address(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%0, %1, %2, %3}}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(address));
}}
"""


def _dequant(config: DecodeConfig) -> str:
    """`struct Offsets` (what each group subtracts, per accumulator row g and g + 8) and `dequant`, one k-step's
    four A registers from a lane's 128-bit load."""
    fmt = config.fmt
    act = fmt.activation
    low, high = ("__low2bfloat162", "__high2bfloat162") if act == "bf16" else ("__low2half2", "__high2half2")
    bias = CODE_BIAS.get(fmt.weight, 0)
    if fmt.bits == 16:
        return """struct Offsets {};
__device__ __forceinline__ Offsets offsets_of(uint32_t) { return Offsets{}; }
__device__ __forceinline__ void dequant(const uint4& w, int, const Offsets&, uint32_t (&a)[4]) {
    a[0] = w.x; a[1] = w.y; a[2] = w.z; a[3] = w.w;
}
"""
    if fmt.weight == "e4m3":
        shift, mask, power = E4M3[act]
        return f"""struct Offsets {{}};
__device__ __forceinline__ Offsets offsets_of(uint32_t) {{ return Offsets{{}}; }}
// Bytes (r, r + 2) of a word under the high bytes of two 16-bit halves, exponent and mantissa shifted under
// {act}'s, times 2^(bias of {act} - 7); subnormal codes stay exact (the product is normal).
__device__ __forceinline__ void dequant(const uint4& w, int step, const Offsets&, uint32_t (&a)[4]) {{
    #pragma unroll
    for (int p = 0; p < 2; ++p) {{
        const uint32_t word = word_of(w, 2 * step + p);
        #pragma unroll
        for (int r = 0; r < 2; ++r) {{
            const uint32_t pair = __byte_perm(word, 0u, 0x0404u | (r << 4) | ((r + 2) << 12));
            const uint32_t bits = ((pair >> {shift}) & 0x{mask:08X}u) | (pair & 0x80008000u);
            a[2 * p + r] = as_u32(__hmul2(as_act2(bits), as_act2(0x{power:08X}u)));
        }}
    }}
}}
"""
    offsets = f"""// Per row (g, g + 8): what the converted value subtracts; `word` holds bias + zero of the rows in {act}.
struct Offsets {{ {"float" if fmt.bits == 8 and act == "bf16" else "act2_t"} row[2]; }};
__device__ __forceinline__ Offsets offsets_of(uint32_t word) {{
"""
    if fmt.bits == 8 and act == "bf16":
        # bf16 cannot hold 128 + a byte: the byte goes under f32's 2^23 instead, and two f32s round to a pair.
        offsets += """    return Offsets{{8388608.0f + act_float(word & 0xFFFFu), 8388608.0f + act_float(word >> 16)}};
}
__device__ __forceinline__ void dequant(const uint4& w, int step, const Offsets& o, uint32_t (&a)[4]) {
    #pragma unroll
    for (int p = 0; p < 2; ++p) {
        const uint32_t word = word_of(w, 2 * step + p);
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float lo = __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7540u + r)) - o.row[r];
            const float hi = __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7542u + r)) - o.row[r];
            a[2 * p + r] = as_u32(__floats2bfloat162_rn(lo, hi));
        }
    }
}
"""
        return offsets
    offsets += f"""    const act2_t both = __hadd2(as_act2(word), as_act2(MAGIC2));
    return Offsets{{{{{low}(both), {high}(both)}}}};
}}
"""
    if fmt.bits == 4:
        body = """    const uint32_t word = word_of(w, step);
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t pair = mask_or<0x000F000Fu, MAGIC2>(word >> (4 * j));  // nibbles j and j + 4
        a[j] = as_u32(__hsub2(as_act2(pair), o.row[j & 1]));
    }
"""
    else:
        body = """    #pragma unroll
    for (int p = 0; p < 2; ++p) {
        const uint32_t word = word_of(w, 2 * step + p);
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint32_t pair = mask_or<0x00FF00FFu, MAGIC2>(word >> (8 * r));  // bytes r and r + 2
            a[2 * p + r] = as_u32(__hsub2(as_act2(pair), o.row[r]));
        }
    }
"""
    return offsets + f"""// Codes are stored + {bias}; without zero points every row subtracts the magic number and {bias}.
__device__ __forceinline__ void dequant(const uint4& w, int step, const Offsets& o, uint32_t (&a)[4]) {{
{body}}}
"""


def bias_word(fmt: QuantFormat) -> int:
    """The offsets word of a format without zero points: the code's bias in A's type, in both halves."""
    from ...quant_layout import float_bits

    bits = int(float_bits([CODE_BIAS.get(fmt.weight, 0)], fmt.activation)[0])
    return bits | bits << 16


def _helpers(name: str, config: DecodeConfig) -> str:
    """The kernel's device helpers in NAME_detail: its streams, their loads, the staging of A, the group scales,
    split-K's reduction and the store of C."""
    fmt = config.fmt
    _, convert = C_TYPES[config.c]
    grouped = bool(fmt.group)
    if config.m_tiles == 1:
        activations = "    ldmatrix_x2(b[0][0], b[0][1], xs + (lane & 7) * XS_STRIDE + k + ((lane >> 3) & 1) * 8);"
    else:
        activations = """    #pragma unroll
    for (int mt = 0; mt < MT; mt += 2)  // matrices: (mt, k..k+7), (mt, k+8..), (mt+1, k..), (mt+1, k+8..)
        ldmatrix_x4(b[mt][0], b[mt][1], b[mt + 1][0], b[mt + 1][1],
                    xs + ((mt + (lane >> 4)) * 8 + (lane & 7)) * XS_STRIDE + k + ((lane >> 3) & 1) * 8);"""
    return f"""
// A warp's streams: per tile, where its lane's words of the slice's first chunk are (null past N), and how many
// chunks remain before K's end. Addresses are bases plus constant offsets, so the unrolled slice holds no
// address per chunk.
struct Streams {{
    const uint4* weights[TILES];
    int chunks_left;
}};

__device__ __forceinline__ Streams streams_of(const uint4* weights, int tile0, int chunk0, int N, int K, int lane) {{
    const int tiles = (N + 15) / 16, chunks = (K + CHUNK_K - 1) / CHUNK_K;
    Streams s;
    #pragma unroll
    for (int i = 0; i < TILES; ++i)
        s.weights[i] = tile0 + i < tiles ? weights + ((unsigned long long)(tile0 + i) * chunks + chunk0) * 32 + lane : nullptr;
    s.chunks_left = chunks - chunk0;
    return s;
}}

__device__ __forceinline__ uint4 load_chunk(const uint4* base, int c, int left) {{
    return base != nullptr && c < left ? load_stream(base + c * 32) : make_uint4(0u, 0u, 0u, 0u);
}}

// Issues chunk c of the slice: its loads for the warp's tiles.
__device__ __forceinline__ void issue(uint4 (&slot)[TILES], int c, const Streams& streams) {{
    #pragma unroll
    for (int i = 0; i < TILES; ++i) slot[i] = load_chunk(streams.weights[i], c, streams.chunks_left);
}}

// Copies the block's tiles' words (scales or zero points) of the slice's groups into ws[tile][group][8]: held in
// shared memory, not registers, until their group comes (0 past N and past the last group).
__device__ __forceinline__ void stage_words(uint32_t* ws, const uint32_t* words, int tile0, int group0, int N, int K) {{
    const int tiles = (N + 15) / 16;
    const int groups = {"((K + CHUNK_K - 1) / CHUNK_K * CHUNK_K + GROUP - 1) / GROUP" if grouped else "1"};  // padded
    for (int e = threadIdx.x; e < BLOCK_TILES * SLICE_GROUPS * 8; e += WARPS * 32) {{
        const int tile = tile0 + e / (SLICE_GROUPS * 8), group = group0 + e / 8 % SLICE_GROUPS;
        ws[e] = tile < tiles && group < groups ? __ldg(words + ((unsigned long long)tile * groups + group) * 8 + e % 8) : 0u;
    }}
}}

__device__ __forceinline__ void stage_activations(act_t* xs, const act_t* A, int m0, int k0, int M, int K) {{
    constexpr int VECTORS = K_SLICE / 8;
    for (int v = threadIdx.x; v < MROWS * VECTORS; v += WARPS * 32) {{
        const int r = v / VECTORS, c = (v % VECTORS) * 8;
        uint4 value = make_uint4(0u, 0u, 0u, 0u);  // rows past M, k past K: zero (K is a multiple of 8)
        if (m0 + r < M && k0 + c < K) value = *reinterpret_cast<const uint4*>(A + (unsigned long long)(m0 + r) * K + k0 + c);
        *reinterpret_cast<uint4*>(xs + r * XS_STRIDE + c) = value;
    }}
}}

// The k-step at k's fragments of the staged rows of A: the mma's B operand of each 8-row tile.
__device__ __forceinline__ void load_activations(uint32_t (&b)[MT][2], const act_t* xs, int k, int lane) {{
{activations}
}}

__device__ __forceinline__ void scale_rows(float (&to)[MT][4], const float (&from)[MT][4], uint32_t scales) {{
    const float low = act_float(scales & 0xFFFFu), high = act_float(scales >> 16);
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {{
        to[mt][0] = fmaf(from[mt][0], low, {"to[mt][0]" if grouped else "0.0f"});
        to[mt][1] = fmaf(from[mt][1], low, {"to[mt][1]" if grouped else "0.0f"});
        to[mt][2] = fmaf(from[mt][2], high, {"to[mt][2]" if grouped else "0.0f"});
        to[mt][3] = fmaf(from[mt][3], high, {"to[mt][3]" if grouped else "0.0f"});
        settle(to[mt]);
    }}
}}

__device__ __forceinline__ c_t to_c(float v) {{ return {convert}(v); }}

// Adds the block's tile into the workspace; the last of a tile's k-slices writes it to C and zeroes it again.
__device__ __forceinline__ void reduce_slices(const float (&acc)[TILES][MT][4], c_t* C, float* workspace, unsigned* counters,
                              int m0, int tile0, int M, int N) {{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    #pragma unroll
    for (int i = 0; i < TILES; ++i)
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) {{
                const int n = (tile0 + i) * 16 + g + 8 * (e >> 1), m = m0 + mt * 8 + 2 * t + (e & 1);
                if (n < N && m < M) atomicAdd(workspace + (unsigned long long)m * N + n, acc[i][mt][e]);
            }}
    __shared__ bool last;
    __syncthreads();
    const unsigned tile_id = blockIdx.y * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0) last = arrive(counters + tile_id) == gridDim.z - 1;
    __syncthreads();
    if (!last) return;
    const int n0 = blockIdx.y * BLOCK_TILES * 16;
    for (int e = threadIdx.x; e < MROWS * BLOCK_TILES * 16; e += WARPS * 32) {{
        const int m = m0 + e / (BLOCK_TILES * 16), n = n0 + e % (BLOCK_TILES * 16);
        if (m < M && n < N) {{
            float* slot = workspace + (unsigned long long)m * N + n;
            C[(unsigned long long)m * N + n] = to_c(__ldcg(slot));
            *slot = 0.0f;
        }}
    }}
    if (threadIdx.x == 0) counters[tile_id] = 0u;
}}

__device__ __forceinline__ void store_tile(const float (&acc)[TILES][MT][4], c_t* C, int m0, int tile0, int M, int N) {{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    #pragma unroll
    for (int i = 0; i < TILES; ++i)
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) {{
                const int n = (tile0 + i) * 16 + g + 8 * (e >> 1), m = m0 + mt * 8 + 2 * t + (e & 1);
                if (n < N && m < M) C[(unsigned long long)m * N + n] = to_c(acc[i][mt][e]);
            }}
}}
}}  // namespace {name}_detail
"""


def _kernel(name: str, config: DecodeConfig) -> str:
    """The kernel: its ring of weight chunks, the staged rows of A, the k-steps' conversions and mma, the store."""
    fmt = config.fmt
    scaled, grouped = fmt.scaled, bool(fmt.group)
    target = "part" if grouped else "acc"
    group = "step / GROUP_STEPS" if grouped else "0"
    offsets = f"word(zero_ws, i, {group})" if fmt.zeros else f"0x{bias_word(fmt):08X}u"
    return f"""extern "C" __global__ void __launch_bounds__({config.warps * 32}, {config.blocks_per_sm}) {name}_kernel(
    const {ACT[fmt.activation][0]}* __restrict__ A, const uint4* __restrict__ weights, const uint32_t* __restrict__ scales,
    const uint32_t* __restrict__ zeros, {C_TYPES[config.c][0]}* __restrict__ C, float* __restrict__ workspace,
    unsigned* __restrict__ counters, int M, int N, int K) {{
    using namespace {name}_detail;
    extern __shared__ __align__(16) unsigned char smem[];
    act_t* xs = reinterpret_cast<act_t*>(smem);  // [MROWS][XS_STRIDE]: the block's rows of A over its k-slice
    // [BLOCK_TILES][SLICE_GROUPS][8] each: the block's scale and zero-point words of the slice's groups
    uint32_t* scale_ws = reinterpret_cast<uint32_t*>(xs + MROWS * XS_STRIDE);
    {"uint32_t* zero_ws = scale_ws + " + str(int(fmt.scaled)) + " * BLOCK_TILES * SLICE_GROUPS * 8;" if fmt.zeros else ""}
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int m0 = blockIdx.x * MROWS, tile0 = (blockIdx.y * WARPS + warp) * TILES, k0 = blockIdx.z * K_SLICE;
    const int block_tile0 = blockIdx.y * BLOCK_TILES, group0 = {"k0 / GROUP" if grouped else "0"};
    uint4 ring[PREFETCH][TILES];  // the chunks in flight
    const Streams streams = streams_of(weights, tile0, k0 / CHUNK_K, N, K, lane);
    #pragma unroll
    for (int c = 0; c < PREFETCH; ++c) issue(ring[c], c, streams);
    stage_activations(xs, A, m0, k0, M, K);
    {"stage_words(scale_ws, scales, block_tile0, group0, N, K);" if fmt.scaled else ""}
    {"stage_words(zero_ws, zeros, block_tile0, group0, N, K);" if fmt.zeros else ""}
    __syncthreads();
    // A word of the warp's tile i and the slice's group s: the pair of rows (g, g + 8) this lane accumulates.
    const auto word = [&](const uint32_t* ws, int i, int s) {{
        return load_shared(ws + ((warp * TILES + i) * SLICE_GROUPS + s) * 8 + (lane >> 2));
    }};

    float acc[TILES][MT][4] = {{}};
    {"float part[TILES][MT][4];" if grouped else ""}
    // The next k-step's fragments of A are loaded before the current ones are multiplied, so that their latency
    // overlaps the conversions and the mma.
    uint32_t b_next[MT][2];
    load_activations(b_next, xs, 0, lane);
    {"uint32_t scale_word[TILES];" if grouped else ""}
    Offsets offsets[TILES];
    #pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {{
        uint4 current[TILES];
        #pragma unroll
        for (int i = 0; i < TILES; ++i) current[i] = ring[c % PREFETCH][i];
        if (c + PREFETCH < CHUNKS) issue(ring[c % PREFETCH], c + PREFETCH, streams);
        #pragma unroll
        for (int s = 0; s < STEPS; ++s) {{
            const int step = c * STEPS + s;
            if ({"step % GROUP_STEPS == 0" if grouped else "step == 0"}) {{
                #pragma unroll
                for (int i = 0; i < TILES; ++i) {{
                    offsets[i] = offsets_of({offsets});
                    {"scale_word[i] = word(scale_ws, i, step / GROUP_STEPS);" if grouped else ""}
                    {"for (int mt = 0; mt < MT; ++mt) for (int e = 0; e < 4; ++e) part[i][mt][e] = 0.0f;" if grouped else ""}
                }}
            }}
            uint32_t b[MT][2];
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {{ b[mt][0] = b_next[mt][0]; b[mt][1] = b_next[mt][1]; }}
            if (step + 1 < CHUNKS * STEPS) load_activations(b_next, xs, (step + 1) * 16, lane);
            #pragma unroll
            for (int i = 0; i < TILES; ++i) {{
                uint32_t a[4];
                dequant(current[i], s, offsets[i], a);
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) mma({target}[i][mt], a, b[mt][0], b[mt][1]);
            }}
            {"if ((step + 1) % GROUP_STEPS == 0) { for (int i = 0; i < TILES; ++i) scale_rows(acc[i], part[i], scale_word[i]); }" if grouped else ""}
        }}
    }}
    {"for (int i = 0; i < TILES; ++i) scale_rows(acc[i], acc[i], word(scale_ws, i, 0));" if scaled and not grouped else ""}
    if (gridDim.z == 1) store_tile(acc, C, m0, tile0, M, N);
    else reduce_slices(acc, C, workspace, counters, m0, tile0, M, N);
}}
"""


def launcher_parameters(config: DecodeConfig) -> str:
    """The C launcher's parameter list, which NAME.h declares too."""
    act, c_type = ACT[config.fmt.activation][0], C_TYPES[config.c][0]
    return (f"const {act}* A, const void* weights, const void* scales, const void* zeros, {c_type}* C, "
            "void* workspace, int M, int N, int K, cudaStream_t stream")


def _launcher(name: str, config: DecodeConfig) -> str:
    fmt = config.fmt
    multiple = config.k_multiple
    grid, sizes = Emitter(), Emitter()
    config.grid_rule.render_inline(grid)
    config.grid_rule.render_inline(sizes, refuse="return 0;")
    return f"""
#ifndef __CUDACC_RTC__
// Host launchers. C = A * W^T for A of M x K (row-major, K contiguous), W of N x K given as quant_layout.pack's
// arrays (weights; scales{' and zeros' if fmt.zeros else ''}{'' if fmt.scaled else ': none'}), C of M x N (row-major).
// K must be a multiple of {multiple}; A and the weights 16-byte aligned; any M and N.
// With more than one k-slice (K > {config.k_slice}) the call needs `workspace`, of {name}_workspace_bytes(M, N, K)
// bytes, zero when first used: the kernel leaves it zero again. Calls sharing a workspace must not overlap.
// Each launcher returns cudaErrorInvalidValue, launching nothing, for arguments it cannot take.
extern "C" size_t {name}_workspace_bytes(int M, int N, int K) {{
{textwrap.indent(sizes.text().rstrip(), '    ')}
    return (size_t)workspace_bytes;
}}

extern "C" cudaError_t {name}_launch({launcher_parameters(config)}) {{
{textwrap.indent(grid.text().rstrip(), '    ')}
    if (K % {multiple} != 0) return cudaErrorInvalidValue;
    if (M == 0 || N == 0) return cudaSuccess;
    if (reinterpret_cast<uintptr_t>(A) % 16 != 0 || reinterpret_cast<uintptr_t>(weights) % 16 != 0) return cudaErrorInvalidValue;
    // K = 0 reads no weights, scales or zero points (a format's arrays may then be empty, their pointers null).
    if ({'(scales == nullptr && K > 0) || reinterpret_cast<uintptr_t>(scales) % 4 != 0' if fmt.scaled else 'false'}) return cudaErrorInvalidValue;
    if ({'(zeros == nullptr && K > 0) || reinterpret_cast<uintptr_t>(zeros) % 4 != 0' if fmt.zeros else 'false'}) return cudaErrorInvalidValue;
    if (workspace_bytes > 0 && workspace == nullptr) return cudaErrorInvalidValue;
    float* floats = static_cast<float*>(workspace);
    unsigned* counters = workspace_bytes > 0 ? reinterpret_cast<unsigned*>(floats + (size_t)M * N) : nullptr;
    const int smem = {config.smem_bytes};
    static bool attributes_set = false;  // the opt-in to more than 48 KB of dynamic shared memory, once
    if (!attributes_set) {{
        const cudaError_t err = cudaFuncSetAttribute({name}_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return err;
        attributes_set = true;
    }}
    const dim3 grid((unsigned)grid_x, (unsigned)grid_y, (unsigned)grid_z);
    {name}_kernel<<<grid, {config.warps * 32}, smem, stream>>>(A, static_cast<const uint4*>(weights),
        static_cast<const uint32_t*>(scales), static_cast<const uint32_t*>(zeros), C, floats, counters, M, N, K);
    return cudaGetLastError();
}}
#endif
"""

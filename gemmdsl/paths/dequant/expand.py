"""The dequantizing path's dequantize-into-memory kernel and its C launcher: W (N x K, row-major, A's 16-bit type)
from quant_layout's packed arrays, for calls with enough rows of A that dequantizing the weight once and running
a dense GEMM on it beats decoding it in every block (docs/quantized-kernel.md). Emitted into the decode kernel's
.cu after it, sharing its NAME_detail helpers: the loads, `dequant` and `offsets_of` (kernel.py).

Items: a 16-row tile's chunk of CHUNK_K (the k of one 128-bit load per lane), DEQUANTIZE_ITEMS consecutive ones
to a warp, so a warp's loads are one contiguous run of the packed weights and its stores adjacent row pieces of W.
A lane issues its 128-bit load of each of its items (ld.global.nc, no L1 allocation: read once) and the scale
and zero-point words of their groups before it converts the first. Each k-step's fragment comes out of `dequant`
as the integer code less bias and zero point, exact in A's type; times the group's scale in f32 (exact: at most
9 bits of code times 11 of scale) and rounded once to nearest even, it is quant_reference.rounded_weight's element.
The lane writes its fragment registers into the warp's 16 x CHUNK_K tile in shared memory, rows padded by 16
bytes so that the 8 rows a register spans fall in different banks, and the warp stores the tile's rows with
16-byte stores of whole row pieces (CHUNK_K elements: 128 bytes of a row for 4-bit codes, whole 32-byte
sectors), leaving out rows past N and columns past K.
"""
from __future__ import annotations

import textwrap

from ...emitter import Emitter
from .kernel import ACT, DEQUANTIZE_ITEMS, DEQUANTIZE_WARPS, DecodeConfig, bias_word


def dequantize_entry(name: str) -> str:
    """The dequantize kernel's name in spec NAME's file."""
    return f"{name}_dequantize_kernel"


def dequantize_definitions(name: str, config: DecodeConfig) -> str:
    """The kernel, its device helpers (in NAME_detail, after the decode kernel's) and its C launcher."""
    return "\n".join([_helpers(name, config), _kernel(name, config), _launcher(name, config)])


def launcher_parameters(config: DecodeConfig) -> str:
    """NAME_dequantize's parameter list, which NAME.h declares too."""
    return (f"const void* weights, const void* scales, const void* zeros, {ACT[config.fmt.activation][0]}* W, "
            "int N, int K, cudaStream_t stream")


def _chunk_groups(config: DecodeConfig) -> int:
    """The groups a chunk spans: more than one for groups shorter than a chunk (k-steps never straddle one)."""
    group, chunk_k = config.fmt.group, config.fmt.chunk_k
    return chunk_k // group if group and group < chunk_k else 1


def _words(config: DecodeConfig) -> tuple[str, str]:
    """`struct ItemWords` (an item's scale and zero-point words of the lane's rows, per group of the chunk) and
    `item_words`, which loads them."""
    fmt = config.fmt
    if not fmt.scaled:
        return ("struct ItemWords {};",
                "__device__ __forceinline__ ItemWords item_words(const uint32_t*, const uint32_t*, int, int, int, int) {\n"
                "    return ItemWords{};\n}")
    groups = "(chunks * CHUNK_K + GROUP - 1) / GROUP" if fmt.group else "1"
    group0 = "chunk * CHUNK_K / GROUP" if fmt.group else "0"
    zero = ("        words.zero[j] = __ldg(zeros + at);\n" if fmt.zeros else "")
    struct = ("struct ItemWords {\n    uint32_t scale[CHUNK_GROUPS];" + ("\n    uint32_t zero[CHUNK_GROUPS];" if fmt.zeros
                                                                          else "") + "\n};")
    load = f"""__device__ __forceinline__ ItemWords item_words(const uint32_t* scales, const uint32_t* zeros, int tile, int chunk,
                                             int chunks, int lane) {{
    const int groups = {groups}, group0 = {group0};  // padded groups; the chunk's first
    ItemWords words;
    #pragma unroll
    for (int j = 0; j < CHUNK_GROUPS; ++j) {{
        const unsigned long long at = ((unsigned long long)tile * groups + group0 + j) * 8 + (lane >> 2);
        words.scale[j] = __ldg(scales + at);
{zero}    }}
    return words;
}}"""
    return struct, load


def _stage(config: DecodeConfig) -> str:
    """`stage_item`: an item's fragments, dequantized and scaled, into the warp's staged tile."""
    fmt = config.fmt
    if not fmt.scaled:
        offsets, value = "0u", "a[r]"
    else:
        offsets = "words.zero[j]" if fmt.zeros else f"0x{bias_word(fmt):08X}u"
        pair = "__floats2bfloat162_rn" if fmt.activation == "bf16" else "__floats2half2_rn"
        value = f"as_u32({pair}(act_float(a[r] & 0xFFFFu) * scale, act_float(a[r] >> 16) * scale))"
    scale = ("\n        const int j = s * CHUNK_GROUPS / STEPS;  // the chunk's group of k-step s"
             "\n        const uint32_t scales = words.scale[j];  // rows g (low half) and g + 8" if fmt.scaled else "")
    row_scale = ("\n            const float scale = act_float(r & 1 ? scales >> 16 : scales & 0xFFFFu);"
                 if fmt.scaled else "")
    rounding = f", times its row's scale in f32 and rounded once to {fmt.activation}" if fmt.scaled else ""
    return f"""// An item's k-steps: register r of the lane's fragment (row g + 8 (r & 1), columns 16 s + 2t + 8 (r >> 1) and + 1)
// dequantized{rounding}, into the warp's staged tile.
__device__ __forceinline__ void stage_item(act_t* stage, const uint4& w, const ItemWords& words, int lane) {{
    const int g = lane >> 2, t = lane & 3;
    #pragma unroll
    for (int s = 0; s < STEPS; ++s) {{{scale}
        uint32_t a[4];
        dequant(w, s, offsets_of({offsets}), a);
        #pragma unroll
        for (int r = 0; r < 4; ++r) {{{row_scale}
            *reinterpret_cast<uint32_t*>(stage + (g + 8 * (r & 1)) * STAGE_STRIDE + 16 * s + 2 * t + 8 * (r >> 1)) = {value};
        }}
    }}
}}"""


def _helpers(name: str, config: DecodeConfig) -> str:
    struct, load = _words(config)
    return f"""
namespace {name}_detail {{
constexpr int DEQUANTIZE_WARPS = {DEQUANTIZE_WARPS}, DEQUANTIZE_ITEMS = {DEQUANTIZE_ITEMS}, CHUNK_GROUPS = {_chunk_groups(config)};
constexpr int STAGE_STRIDE = {config.dequantize_stage_stride}, ROW_VECTORS = CHUNK_K / 8;  // a staged row; its 16-byte pieces

{struct}

{load}

{_stage(config)}

// The staged tile's rows into W (row stride K): ROW_VECTORS 16-byte stores a row, consecutive lanes along it;
// rows past N and columns past K left out (K is a multiple of 8: a store is wholly in or out).
__device__ __forceinline__ void store_item(act_t* W, const act_t* stage, int tile, int chunk, int N, int K, int lane) {{
    #pragma unroll
    for (int v = lane; v < 16 * ROW_VECTORS; v += 32) {{
        const int row = v / ROW_VECTORS, column = v % ROW_VECTORS * 8;
        const int n = tile * 16 + row, k = chunk * CHUNK_K + column;
        if (n < N && k < K)
            *reinterpret_cast<uint4*>(W + (unsigned long long)n * K + k) = *reinterpret_cast<const uint4*>(stage + row * STAGE_STRIDE + column);
    }}
}}
}}  // namespace {name}_detail
"""


def _kernel(name: str, config: DecodeConfig) -> str:
    act = ACT[config.fmt.activation][0]
    return f"""extern "C" __global__ void __launch_bounds__({config.dequantize_threads}) {dequantize_entry(name)}(
    const uint4* __restrict__ weights, const uint32_t* __restrict__ scales, const uint32_t* __restrict__ zeros,
    {act}* __restrict__ W, int N, int K) {{
    using namespace {name}_detail;
    extern __shared__ __align__(16) unsigned char smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    act_t* stage = reinterpret_cast<act_t*>(smem) + warp * 16 * STAGE_STRIDE;  // the warp's 16 x CHUNK_K tile
    const int chunks = (K + CHUNK_K - 1) / CHUNK_K;
    const long long items = (long long)((N + 15) / 16) * chunks;
    const long long item0 = ((long long)blockIdx.x * DEQUANTIZE_WARPS + warp) * DEQUANTIZE_ITEMS;
    if (item0 >= items) return;  // the whole warp
    const int count = items - item0 < DEQUANTIZE_ITEMS ? (int)(items - item0) : DEQUANTIZE_ITEMS;
    uint4 held[DEQUANTIZE_ITEMS];
    #pragma unroll
    for (int i = 0; i < DEQUANTIZE_ITEMS; ++i)
        if (i < count) held[i] = load_stream(weights + (item0 + i) * 32 + lane);
    int tile[DEQUANTIZE_ITEMS], chunk[DEQUANTIZE_ITEMS];
    ItemWords words[DEQUANTIZE_ITEMS];
    tile[0] = (int)(item0 / chunks);
    chunk[0] = (int)(item0 % chunks);
    #pragma unroll
    for (int i = 0; i < DEQUANTIZE_ITEMS; ++i) {{
        if (i > 0) {{
            const bool wraps = chunk[i - 1] + 1 == chunks;
            tile[i] = tile[i - 1] + (wraps ? 1 : 0);
            chunk[i] = wraps ? 0 : chunk[i - 1] + 1;
        }}
        if (i < count) words[i] = item_words(scales, zeros, tile[i], chunk[i], chunks, lane);
    }}
    #pragma unroll
    for (int i = 0; i < DEQUANTIZE_ITEMS; ++i) {{
        if (i < count) {{
            stage_item(stage, held[i], words[i], lane);
            __syncwarp();
            store_item(W, stage, tile[i], chunk[i], N, K, lane);
            __syncwarp();  // every lane's rows read before the next item overwrites the tile
        }}
    }}
}}"""


def _launcher(name: str, config: DecodeConfig) -> str:
    fmt = config.fmt
    grid = Emitter()
    config.dequantize_grid_rule.render_inline(grid)
    return f"""
#ifndef __CUDACC_RTC__
// W (N x K, row-major) = the weight of quant_layout.pack's arrays (weights; scales{' and zeros' if fmt.zeros else ''}{'' if fmt.scaled else ': none'}),
// each element rounded once to {fmt.activation}. K must be a multiple of {config.k_multiple}; the weights and W 16-byte aligned.
// Returns cudaErrorInvalidValue, launching nothing, for arguments it cannot take.
extern "C" cudaError_t {name}_dequantize({launcher_parameters(config)}) {{
{textwrap.indent(grid.text().rstrip(), '    ')}
    if (K % {config.k_multiple} != 0) return cudaErrorInvalidValue;
    if (N == 0 || K == 0) return cudaSuccess;
    if (reinterpret_cast<uintptr_t>(weights) % 16 != 0 || reinterpret_cast<uintptr_t>(W) % 16 != 0) return cudaErrorInvalidValue;
    if ({'scales == nullptr || reinterpret_cast<uintptr_t>(scales) % 4 != 0' if fmt.scaled else 'false'}) return cudaErrorInvalidValue;
    if ({'zeros == nullptr || reinterpret_cast<uintptr_t>(zeros) % 4 != 0' if fmt.zeros else 'false'}) return cudaErrorInvalidValue;
    {dequantize_entry(name)}<<<(unsigned)grid_x, {config.dequantize_threads}, {config.dequantize_smem_bytes}, stream>>>(
        static_cast<const uint4*>(weights), static_cast<const uint32_t*>(scales), static_cast<const uint32_t*>(zeros), W, N, K);
    return cudaGetLastError();
}}
#endif
"""

// What the dequantizing path's kernels (gemmdsl/paths/dequant: decode, dequantize into memory) and the GEMV path's
// (gemmdsl/paths/gemv) use beyond the FMA paths' subset: 16-bit floats and their pair arithmetic, the streaming
// 128-bit load, split-K's atomics and fences, __syncwarp, the funnel shift, and the warp collectives mma.sync
// m16n8k16, ldmatrix and shfl.sync.bfly. Included by cuda_host.h.
//
// 16-bit floats are their bits; each operation is done in float and rounded back to nearest even, as the
// hardware rounds a pair add, subtract or multiply whose float result is exact, which is every one the
// kernel's magic-number conversions make.
//
// A warp collective: each lane deposits its registers (or row addresses) in its warp's exchange, the 32 lanes
// meet at the warp's barrier, each computes its own outputs from the PTX ISA's fragment layouts, and they meet
// again before the exchange is reused.
#pragma once

#include <barrier>
#include <bit>
#include <cstdint>
#include <cstring>

struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

inline float __uint_as_float(uint32_t bits) { return std::bit_cast<float>(bits); }

inline uint16_t bf16_bits_rn(float f) {
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
    return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}
inline float bf16_value(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// IEEE binary16 through the compiler's _Float16 (x86-64 g++ 12 rounds its conversions to nearest even).
inline uint16_t f16_bits_rn(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
inline float f16_value(uint16_t bits) { return static_cast<float>(std::bit_cast<_Float16>(bits)); }

struct alignas(2) __nv_bfloat16 {
    uint16_t bits;
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
struct alignas(2) __half {
    uint16_t bits;
};
struct alignas(4) __half2 {
    __half x, y;
};

inline float to_float(__nv_bfloat16 v) { return bf16_value(v.bits); }
inline float to_float(__half v) { return f16_value(v.bits); }
inline __nv_bfloat16 round_like(__nv_bfloat16, float f) { return {bf16_bits_rn(f)}; }
inline __half round_like(__half, float f) { return {f16_bits_rn(f)}; }

template <class Pair, class Op>
inline Pair pairwise(Pair a, Pair b, Op op) {
    return {round_like(a.x, op(to_float(a.x), to_float(b.x))), round_like(a.y, op(to_float(a.y), to_float(b.y)))};
}
template <class Pair>
inline Pair __hadd2(Pair a, Pair b) { return pairwise(a, b, [](float x, float y) { return x + y; }); }
template <class Pair>
inline Pair __hsub2(Pair a, Pair b) { return pairwise(a, b, [](float x, float y) { return x - y; }); }
template <class Pair>
inline Pair __hmul2(Pair a, Pair b) { return pairwise(a, b, [](float x, float y) { return x * y; }); }

inline __nv_bfloat162 __low2bfloat162(__nv_bfloat162 v) { return {v.x, v.x}; }
inline __nv_bfloat162 __high2bfloat162(__nv_bfloat162 v) { return {v.y, v.y}; }
inline __half2 __low2half2(__half2 v) { return {v.x, v.x}; }
inline __half2 __high2half2(__half2 v) { return {v.y, v.y}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) { return {{bf16_bits_rn(lo)}, {bf16_bits_rn(hi)}}; }
inline __half2 __floats2half2_rn(float lo, float hi) { return {{f16_bits_rn(lo)}, {f16_bits_rn(hi)}}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {bf16_bits_rn(f)}; }
inline __half __float2half_rn(float f) { return {f16_bits_rn(f)}; }
inline float __half2float(__half v) { return f16_value(v.bits); }
inline float __bfloat162float(__nv_bfloat16 v) { return bf16_value(v.bits); }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {bf16_value(v.x.bits), bf16_value(v.y.bits)}; }
inline float2 __half22float2(__half2 v) { return {f16_value(v.x.bits), f16_value(v.y.bits)}; }
inline __half __ushort_as_half(unsigned short bits) { return {bits}; }

// Byte `selector` nibble i of the result picks byte (nibble & 7) of {b, a} (a's bytes 0-3, b's 4-7).
inline uint32_t __byte_perm(uint32_t a, uint32_t b, uint32_t selector) {
    const uint64_t bytes = (static_cast<uint64_t>(b) << 32) | a;
    uint32_t out = 0;
    for (int i = 0; i < 4; ++i) out |= static_cast<uint32_t>((bytes >> (8 * ((selector >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return out;
}

template <class T>
inline T __ldg(const T* p) { return *p; }
template <class T>
inline T __ldcg(const T* p) { return *p; }
inline void __threadfence() {}  // the emulated atomics take a lock, which orders the block's writes

inline unsigned atomicAdd(unsigned* p, unsigned v) {
    std::lock_guard<std::mutex> lock(emulated_atomics);
    const unsigned old = *p;
    *p = old + v;
    return old;
}

inline uint4 load_stream(const uint4* p) {
    require_alignment(p, 16, "misaligned 128-bit streaming load");
    return *p;
}

inline unsigned arrive(unsigned* counter) { return atomicAdd(counter, 1u); }  // the decode kernel's split-K count

inline uint32_t load_shared(const uint32_t* p) {
    require_alignment(p, 4, "misaligned 32-bit shared load");
    return *p;
}

inline void settle(float (&)[4]) {}  // a scheduling fence for ptxas: nothing to do here

template <uint32_t MASK, uint32_t BITS>
inline uint32_t mask_or(uint32_t x) { return (x & MASK) | BITS; }  // one lop3 on the GPU

struct WarpExchange {
    std::barrier<> lanes{32};
    uint32_t registers[32][10];
    const char* rows[32];
};
inline WarpExchange warp_exchanges[32];  // a block has at most 32 warps

inline WarpExchange& my_warp() { return warp_exchanges[threadIdx.x / 32]; }
inline int my_lane() { return static_cast<int>(threadIdx.x % 32); }

// The warp's lanes meet (all 32 of them: the kernels call it where no lane has left).
inline void __syncwarp(unsigned = 0xFFFFFFFFu) { my_warp().lanes.arrive_and_wait(); }

// A pair of f16's halves as float (the GEMV path widens f16 chunks so).
inline float __low2float(__half2 v) { return f16_value(v.x.bits); }
inline float __high2float(__half2 v) { return f16_value(v.y.bits); }

// shfl.sync.bfly of a float: lane l receives lane (l ^ lanes)'s value (all 32 lanes take part, as in the GEMV
// path's reduction).
inline float __shfl_xor_sync(unsigned, float value, int lanes) {
    WarpExchange& warp = my_warp();
    const int lane = my_lane();
    std::memcpy(warp.registers[lane], &value, 4);
    warp.lanes.arrive_and_wait();
    float out;
    std::memcpy(&out, warp.registers[lane ^ lanes], 4);
    warp.lanes.arrive_and_wait();
    return out;
}

// shf.r.wrap: the low 32 bits of the 64-bit hi:lo shifted right by shift % 32.
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    return static_cast<unsigned>(((static_cast<uint64_t>(hi) << 32) | lo) >> (shift & 31));
}

// ldmatrix .m8n8 .b16 of `count` matrices: lanes 8i..8i+7 give matrix i's row addresses (16-byte aligned rows
// of 8 elements in shared memory); lane l receives, of each matrix, row l / 4's elements 2 (l % 4) and + 1.
inline void ldmatrix(uint32_t* out, int count, const void* row) {
    WarpExchange& warp = my_warp();
    const int lane = my_lane();
    warp.rows[lane] = static_cast<const char*>(row);
    warp.lanes.arrive_and_wait();
    for (int i = 0; i < count; ++i) {
        const char* source = warp.rows[8 * i + lane / 4];
        require_shared(source, 16);
        std::memcpy(&out[i], source + 4 * (lane % 4), 4);
    }
    warp.lanes.arrive_and_wait();
}
inline void ldmatrix_x2(uint32_t& r0, uint32_t& r1, const void* row) {
    uint32_t out[2];
    ldmatrix(out, 2, row);
    r0 = out[0];
    r1 = out[1];
}
inline void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* row) {
    uint32_t out[4];
    ldmatrix(out, 4, row);
    r0 = out[0];
    r1 = out[1];
    r2 = out[2];
    r3 = out[3];
}

// mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32, D = A B + D, T (bf16 or f16) the operands' type; g = lane / 4,
// t = lane % 4, each register two elements (the lower column or k in its low half):
//   A (16 x 16): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B (16 x 8):  b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
//   D (16 x 8):  d0, d1 (g, 2t, 2t+1), d2, d3 (g+8, 2t, 2t+1)
template <class T>
inline void warp_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    WarpExchange& warp = my_warp();
    const int lane = my_lane();
    uint32_t* mine = warp.registers[lane];
    std::memcpy(mine, a, 16);
    mine[4] = b0;
    mine[5] = b1;
    warp.lanes.arrive_and_wait();
    auto half = [&](int from, int index, int upper) {
        return to_float(T{static_cast<uint16_t>(warp.registers[from][index] >> (16 * upper))});
    };
    auto a_at = [&](int r, int c) { return half((r % 8) * 4 + (c % 8) / 2, (r / 8) + 2 * (c / 8), c % 2); };
    auto b_at = [&](int k, int n) { return half(n * 4 + (k % 8) / 2, 4 + k / 8, k % 2); };
    const int g = lane / 4, t = lane % 4;
    float out[4];
    for (int e = 0; e < 4; ++e) {
        const int r = g + 8 * (e / 2), n = 2 * t + e % 2;
        float sum = d[e];
        for (int k = 0; k < 16; ++k) sum += a_at(r, k) * b_at(k, n);
        out[e] = sum;
    }
    warp.lanes.arrive_and_wait();
    std::memcpy(d, out, 16);
}

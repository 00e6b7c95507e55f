// Host emulation of the CUDA subset that gemmdsl emits, so the CPU tests can run generated
// kernels: every thread of a block is an std::thread, __syncthreads() is an std::barrier, and
// shared memory is one array (blocks run one after another). Built with AddressSanitizer and
// UBSan, a kernel that reads or writes outside an operand, or makes a misaligned vector access,
// stops with a report; that is what the tests are after, next to the values.
//
// The PTX wrappers of the generated file (lds*/sts*/cp_async_*; the decode kernel's, warp_host.h's) are
// removed by tests/host_emulation.py and replaced by the functions below. cp.async copies are recorded when
// issued and performed at the cp.async.wait_group that retires their group, the latest moment
// the hardware may perform them, so a tile read before its wait would read stale data.
#pragma once

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>
#include <mutex>
#include <vector>

#define __CUDACC_RTC__ 1  // skips the generated file's includes and host launchers
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n)

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct alignas(8) int2 {
    int x, y;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
inline int2 make_int2(int x, int y) { return {x, y}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float __expf(float x) { return std::exp(x); }  // the fuse chain's silu
using std::max;
using std::min;
inline size_t __cvta_generic_to_shared(const void* p) { return reinterpret_cast<size_t>(p); }

inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline dim3 gridDim;
inline dim3 blockDim;

constexpr size_t EMULATED_SMEM_FLOATS = 232448 / 4;  // sm_90's largest block allocation
extern "C" {
alignas(128) inline float smem[EMULATED_SMEM_FLOATS];
}

inline std::barrier<>* emulated_barrier = nullptr;
inline void __syncthreads() { emulated_barrier->arrive_and_wait(); }

[[noreturn]] inline void emulation_fault(const char* what, const void* address) {
    std::fprintf(stderr, "EMULATION FAULT: %s at %p (thread %u of block %u,%u)\n", what, address, threadIdx.x,
                 blockIdx.x, blockIdx.z);
    std::abort();
}

inline void require_alignment(const void* address, size_t bytes, const char* what) {
    if (reinterpret_cast<uintptr_t>(address) % bytes != 0) emulation_fault(what, address);
}

inline void require_shared(const void* address, size_t bytes) {
    const char* p = static_cast<const char*>(address);
    const char* base = reinterpret_cast<const char*>(smem);
    if (p < base || p + bytes > base + sizeof(smem)) emulation_fault("shared access outside shared memory", address);
    require_alignment(address, bytes, "misaligned shared access");
}

inline float lds32(const float* p) { require_shared(p, 4); return *p; }
inline float2 lds64(const float* p) { require_shared(p, 8); return *reinterpret_cast<const float2*>(p); }
inline float4 lds128(const float* p) { require_shared(p, 16); return *reinterpret_cast<const float4*>(p); }
inline void sts32(float* p, float v) { require_shared(p, 4); *p = v; }
inline void sts64(float* p, float2 v) { require_shared(p, 8); *reinterpret_cast<float2*>(p) = v; }
inline void sts128(float* p, float4 v) { require_shared(p, 16); *reinterpret_cast<float4*>(p) = v; }

// Global-memory atomics (stream-K epilogues): one lock for all, which is all they need here.
inline std::mutex emulated_atomics;
inline float atomicAdd(float* p, float v) {
    std::lock_guard<std::mutex> lock(emulated_atomics);
    const float old = *p;
    *p = old + v;
    return old;
}
inline float2 atomicAdd(float2* p, float2 v) {
    require_alignment(p, 8, "misaligned float2 atomicAdd");
    std::lock_guard<std::mutex> lock(emulated_atomics);
    const float2 old = *p;
    *p = {old.x + v.x, old.y + v.y};
    return old;
}
inline float4 atomicAdd(float4* p, float4 v) {
    require_alignment(p, 16, "misaligned float4 atomicAdd");
    std::lock_guard<std::mutex> lock(emulated_atomics);
    const float4 old = *p;
    *p = {old.x + v.x, old.y + v.y, old.z + v.z, old.w + v.w};
    return old;
}

struct AsyncCopy {
    float* dst;
    const float* src;
    int bytes;      // cp-size
    int src_bytes;  // bytes read; the rest is zero-filled
};
inline thread_local std::vector<AsyncCopy> async_issued;
inline thread_local std::vector<std::vector<AsyncCopy>> async_groups;

inline void cp_async(float* dst, const float* src, int bytes, int src_bytes) {
    require_shared(dst, bytes);
    if (src_bytes > 0) require_alignment(src, bytes, "misaligned cp.async source");
    if (src_bytes < 0 || src_bytes > bytes) emulation_fault("cp.async src-size out of range", src);
    async_issued.push_back({dst, src, bytes, src_bytes});
}
inline void cp_async_4(float* dst, const float* src) { cp_async(dst, src, 4, 4); }
inline void cp_async_8(float* dst, const float* src) { cp_async(dst, src, 8, 8); }
inline void cp_async_16(float* dst, const float* src) { cp_async(dst, src, 16, 16); }
inline void cp_async_4_zfill(float* dst, const float* src, int n, const float* inside) { cp_async(dst, n ? src : inside, 4, n); }
inline void cp_async_8_zfill(float* dst, const float* src, int n, const float* inside) { cp_async(dst, n ? src : inside, 8, n); }
inline void cp_async_16_zfill(float* dst, const float* src, int n, const float* inside) { cp_async(dst, n ? src : inside, 16, n); }

inline void cp_async_commit() {
    async_groups.push_back(std::move(async_issued));
    async_issued.clear();
}

template <int PENDING>
inline void cp_async_wait() {
    while (async_groups.size() > static_cast<size_t>(PENDING)) {
        for (const AsyncCopy& copy : async_groups.front()) {
            char* dst = reinterpret_cast<char*>(copy.dst);
            std::memcpy(dst, copy.src, copy.src_bytes);
            std::memset(dst + copy.src_bytes, 0, copy.bytes - copy.src_bytes);
        }
        async_groups.erase(async_groups.begin());
    }
}

inline void reset_emulated_thread() {
    async_issued.clear();
    async_groups.clear();
}

#include "warp_host.h"  // the dequantizing decode kernel's 16-bit floats and warp collectives

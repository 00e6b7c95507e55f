// HBM's rate by the length of the runs a k-tile reads: a K-major operand (rows of K contiguous elements, as
// nn.Linear stores its weight) streamed in k-tiles of ROWS rows x RL contiguous bytes, through a cp.async ring of
// STAGES k-tiles a block, the blocks walking items (a tile of rows, a range of K) in turn, as a stream-K
// decode member's blocks do; the rows of a 16-bit operand in k-tiles of 32 are 64 bytes. docs/performance.md,
// "HBM's rate by the length of a k-tile's rows". On the GPU machine:
//
//     nvcc -arch=sm_90a -O3 -std=c++17 -o hbm_runs scripts/hbm_runs.cu && ./hbm_runs
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

__device__ __forceinline__ void cp16(void* s, const void* g) {
    unsigned a = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(g));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }

template <int ROWS, int RL, int STAGES>
__global__ void __launch_bounds__(256) stream(const char* B, long long row_bytes, int row_tiles, int k_ranges,
                                              int range_tiles, unsigned* out) {
    extern __shared__ uint4 ring[];
    constexpr int PIECES = ROWS * RL / 16, PER_ROW = RL / 16;
    const long long items = (long long)row_tiles * k_ranges;
    const long long mine = (items - blockIdx.x + gridDim.x - 1) / gridDim.x;
    const long long total = mine * range_tiles;  // k-tiles this block streams
    auto issue = [&](long long j) {
        if (j < total) {
            const long long item = blockIdx.x + (j / range_tiles) * gridDim.x;
            const int t = (int)(j % range_tiles);
            const long long r0 = (item / k_ranges) * ROWS;
            const long long c0 = (item % k_ranges) * (long long)range_tiles * RL + (long long)t * RL;
            uint4* stage = ring + (j % STAGES) * PIECES;
            for (int p = threadIdx.x; p < PIECES; p += 256) {
                const int r = p / PER_ROW, c = p % PER_ROW;
                cp16(stage + p, B + (r0 + r) * row_bytes + c0 + c * 16);
            }
        }
        commit();
    };
    for (int s = 0; s < STAGES - 1; ++s) issue(s);
    unsigned acc = 0;
    for (long long j = 0; j < total; ++j) {
        issue(j + STAGES - 1);
        wait<STAGES - 1>();
        __syncthreads();
        const uint4 v = ring[(j % STAGES) * PIECES + threadIdx.x % PIECES];
        acc ^= v.x ^ v.w;
        __syncthreads();
    }
    if (acc == 0x12345678u) out[0] = acc;
}

template <int ROWS, int RL, int STAGES>
void run(const char* name, const char* bufs[2], long long rows, long long row_bytes, int sms, int blocks_per_sm) {
    auto kernel = stream<ROWS, RL, STAGES>;
    const int smem = STAGES * ROWS * RL;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    const int row_tiles = (int)(rows / ROWS);
    // Items: a tile of ROWS rows by one of 33 ranges of K (64 tiles of 128 rows x 33 = 16 items an SM).
    const int k_ranges = 33, range_tiles = (int)(row_bytes / k_ranges / RL);
    unsigned* out; cudaMalloc(&out, 4);
    std::vector<float> ms;
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int i = 0; i < 12; ++i) {
        cudaEventRecord(a);
        kernel<<<sms * blocks_per_sm, 256, smem>>>(bufs[i & 1], row_bytes, row_tiles, k_ranges, range_tiles, out);
        cudaEventRecord(b); cudaEventSynchronize(b);
        float t; cudaEventElapsedTime(&t, a, b); if (i >= 2) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double bytes = (double)row_tiles * ROWS * k_ranges * range_tiles * RL;
    cudaError_t e = cudaGetLastError();
    printf("%-28s rows %3d run %5d B stages %2d blocks/SM %d in flight %6d KB/SM: %8.1f us %6.2f TB/s %s\n", name, ROWS, RL,
           STAGES, blocks_per_sm, (STAGES - 1) * ROWS * RL * blocks_per_sm / 1024, ms[ms.size() / 2] * 1e3,
           bytes / (ms[ms.size() / 2] * 1e-3) / 1e12, e == cudaSuccess ? "" : cudaGetErrorString(e));
    cudaFree(out);
}

int main() {
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    // Two 8192 x 16896 bf16 operands (277 MB each, 4.6 L2s), read in turn, so that no launch finds its bytes in L2.
    const long long rows = 8192, row_bytes = 33 * 512 * 2;
    const char* bufs[2];
    for (int i = 0; i < 2; ++i) { char* p; cudaMalloc(&p, rows * row_bytes); cudaMemset(p, i + 1, rows * row_bytes); bufs[i] = p; }
    run<128, 64, 12>("k-tiles of 32 (16-bit)", bufs, rows, row_bytes, sms, 1);
    run<128, 128, 8>("k-tiles of 64", bufs, rows, row_bytes, sms, 1);
    run<128, 128, 12>("k-tiles of 64, deeper", bufs, rows, row_bytes, sms, 1);
    run<128, 256, 4>("k-tiles of 128", bufs, rows, row_bytes, sms, 1);
    run<128, 256, 6>("k-tiles of 128, deeper", bufs, rows, row_bytes, sms, 1);
    run<128, 512, 2>("k-tiles of 256", bufs, rows, row_bytes, sms, 1);
    run<128, 512, 3>("k-tiles of 256, deeper", bufs, rows, row_bytes, sms, 1);
    run<64, 1024, 3>("64 rows x 1 KB", bufs, rows, row_bytes, sms, 1);
    run<16, 512, 16>("16 rows x 512 B", bufs, rows, row_bytes, sms, 1);
    run<16, 1024, 8>("16 rows x 1 KB", bufs, rows, row_bytes, sms, 1);
    run<128, 128, 4>("k-tiles of 64, 2 blocks", bufs, rows, row_bytes, sms, 2);
    run<128, 256, 3>("k-tiles of 128, 2 blocks", bufs, rows, row_bytes, sms, 2);
    run<128, 64, 6>("k-tiles of 32, 2 blocks", bufs, rows, row_bytes, sms, 2);
    run<128, 64, 4>("k-tiles of 32, 4 blocks", bufs, rows, row_bytes, sms, 4);
    run<32, 64, 4>("32 rows, k 32, 5 blocks", bufs, rows, row_bytes, sms, 5);
    run<128, 64, 4>("k-tiles of 32, 5 blocks", bufs, rows, row_bytes, sms, 5);
    return 0;
}

"""The CUDA sources of `gemmdsl calibrate`'s microbenchmarks (gemmdsl/calibrate.py runs them).

Every kernel records, in block 0's thread 0, the SM clock cycles (clock64) and the nanoseconds (%globaltimer)
its run took, so a rate per second becomes a rate per clock at the clock the GPU held while it ran.
"""

TIMER = r"""
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
"""

# Reads `words` float4s grid-stride, `passes` times over; one sum a thread keeps the loads alive.
READ = TIMER + r"""
extern "C" __global__ void calibrate_read(const float4* __restrict__ data, long long words, int passes,
                                         float* sink, unsigned long long* clocks) {
    unsigned long long c0 = clock64(), t0 = global_ns();
    float sum = 0.0f;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p) {
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
            float4 v = __ldcg(data + i);
            sum += v.x + v.y + v.z + v.w;
        }
    }
    if (sum == -1.0f) sink[0] = sum;
    if (blockIdx.x == 0 && threadIdx.x == 0) { clocks[0] = clock64() - c0; clocks[1] = global_ns() - t0; }
}
"""

EMPTY = r"""
extern "C" __global__ void calibrate_empty(int* sink) { if (sink[0] == 12345) sink[1] = 1; }
"""

# Register-only mma.sync loops: independent accumulators over a 4 x 8 warp tile (32 instructions a step).
MMA_SYNC = TIMER + r"""
__device__ __forceinline__ void mma_bf16(float* d, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_tf32(float* d, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <bool TF32>
__device__ void mma_loop(float* out, int iterations, unsigned long long* clocks) {
    unsigned long long c0 = clock64(), t0 = global_ns();
    float acc[4][8][4] = {};
    unsigned a[4][4], b[8][2];
    for (int i = 0; i < 4; ++i) for (int r = 0; r < 4; ++r) a[i][r] = threadIdx.x * 7 + i * 13 + r;
    for (int j = 0; j < 8; ++j) for (int r = 0; r < 2; ++r) b[j][r] = threadIdx.x * 3 + j * 5 + r;
    for (int it = 0; it < iterations; ++it) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                if (TF32) mma_tf32(acc[i][j], a[i], b[j]); else mma_bf16(acc[i][j], a[i], b[j]);
            }
    }
    float s = 0.0f;
    for (int i = 0; i < 4; ++i) for (int j = 0; j < 8; ++j) for (int e = 0; e < 4; ++e) s += acc[i][j][e];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if (blockIdx.x == 0 && threadIdx.x == 0) { clocks[0] = clock64() - c0; clocks[1] = global_ns() - t0; }
}
extern "C" __global__ void calibrate_mma_bf16(float* out, int iterations, unsigned long long* clocks) {
    mma_loop<false>(out, iterations, clocks);
}
extern "C" __global__ void calibrate_mma_tf32(float* out, int iterations, unsigned long long* clocks) {
    mma_loop<true>(out, iterations, clocks);
}
"""
MMA_SYNC_MACS = {"bf16": 16 * 8 * 16, "tf32": 16 * 8 * 8}  # one instruction's multiply-adds
MMA_SYNC_PER_STEP = 32  # instructions a warp issues per loop step

# wgmma from shared memory, two warpgroups a block: m64n256k16 (bf16) or m64n256k8 (tf32), groups of four
# instructions committed and waited with one group in flight. The operands' values do not matter to the
# rate; the descriptors (no swizzle) stay inside the block's shared memory.
WGMMA = TIMER + r"""
__device__ __forceinline__ unsigned long long descriptor(const void* smem) {
    unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    unsigned long long d = (address & 0x3FFFF) >> 4;
    d |= (unsigned long long)(128 >> 4) << 16;   // leading byte offset
    d |= (unsigned long long)(256 >> 4) << 32;   // stride byte offset
    return d;
}
#define ACC_OUT(i) "+f"(acc[i])
template <int KIND>
__device__ __forceinline__ void wgmma(float* acc, unsigned long long da, unsigned long long db);
#define WGMMA_ASM(SHAPE)                                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                                     \
                 "wgmma.mma_async.sync.aligned." SHAPE " "                                                        \
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"  \
                 "%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,"  \
                 "%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,"  \
                 "%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,"  \
                 "%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,"      \
                 "%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1" TRANS ";\n}\n"       \
                 : ACC128 : "l"(da), "l"(db))
#define A8(i) ACC_OUT(i), ACC_OUT(i + 1), ACC_OUT(i + 2), ACC_OUT(i + 3), ACC_OUT(i + 4), ACC_OUT(i + 5), \
              ACC_OUT(i + 6), ACC_OUT(i + 7)
#define A32(i) A8(i), A8(i + 8), A8(i + 16), A8(i + 24)
#define ACC128 A32(0), A32(32), A32(64), A32(96)
template <>
__device__ __forceinline__ void wgmma<0>(float* acc, unsigned long long da, unsigned long long db) {
#define TRANS ", 0, 0"
    WGMMA_ASM("m64n256k16.f32.bf16.bf16");
#undef TRANS
}
template <>
__device__ __forceinline__ void wgmma<1>(float* acc, unsigned long long da, unsigned long long db) {
#define TRANS ""
    WGMMA_ASM("m64n256k8.f32.tf32.tf32");
#undef TRANS
}
template <int KIND>
__device__ void wgmma_loop(float* out, int iterations, unsigned long long* clocks) {
    extern __shared__ __align__(1024) unsigned char smem[];
    unsigned long long c0 = clock64(), t0 = global_ns();
    for (int i = threadIdx.x; i < 40960 / 4; i += blockDim.x) reinterpret_cast<unsigned*>(smem)[i] = i * 2654435761u;
    __syncthreads();
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    unsigned long long da = descriptor(smem + (threadIdx.x / 128) * 4096);
    unsigned long long db = descriptor(smem + 8192);
    for (int it = 0; it < iterations; ++it) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int g = 0; g < 4; ++g) wgmma<KIND>(acc, da, db);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 128; ++i) s += acc[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if (blockIdx.x == 0 && threadIdx.x == 0) { clocks[0] = clock64() - c0; clocks[1] = global_ns() - t0; }
}
extern "C" __global__ void __launch_bounds__(256, 1) calibrate_wgmma_bf16(float* out, int iterations,
                                                                          unsigned long long* clocks) {
    wgmma_loop<0>(out, iterations, clocks);
}
extern "C" __global__ void __launch_bounds__(256, 1) calibrate_wgmma_tf32(float* out, int iterations,
                                                                          unsigned long long* clocks) {
    wgmma_loop<1>(out, iterations, clocks);
}
"""
WGMMA_SMEM_BYTES = 40960
WGMMA_MACS = {"bf16": 64 * 256 * 16, "tf32": 64 * 256 * 8}  # one instruction's multiply-adds
WGMMA_PER_STEP = 4  # instructions a warpgroup issues per loop step

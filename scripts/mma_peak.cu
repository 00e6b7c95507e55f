// The mma.sync ceiling by warps per SM: register-only loops of independent mma.sync (BF16 m16n8k16,
// TF32 m16n8k8) over a warp tile of MI x NJ instructions, on every SM, at 4 to 16 warps per SM.
// docs/performance.md, tensor-core note T7. On the GPU machine:
//
//     nvcc -arch=sm_90 -O3 -o mma_peak scripts/mma_peak.cu && ./mma_peak
#include <cstdio>
#include <cuda_runtime.h>
__device__ __forceinline__ void mma(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_tf32(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <int MI, int NJ, bool TF32>
__global__ void peak(float* out, int iters) {
  float acc[MI][NJ][4] = {};
  unsigned a[MI][4], b[NJ][2];
  for (int i = 0; i < MI; ++i) for (int r = 0; r < 4; ++r) a[i][r] = threadIdx.x * 7 + i * 13 + r;
  for (int j = 0; j < NJ; ++j) for (int r = 0; r < 2; ++r) b[j][r] = threadIdx.x * 3 + j * 5 + r;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NJ; ++j) { if (TF32) mma_tf32(acc[i][j], a[i], b[j]); else mma(acc[i][j], a[i], b[j]); }
  }
  float s = 0;
  for (int i = 0; i < MI; ++i) for (int j = 0; j < NJ; ++j) for (int e = 0; e < 4; ++e) s += acc[i][j][e];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
template <int MI, int NJ, bool TF32>
void run(int warps_per_block, int blocks_per_sm, int sms) {
  const int iters = 4096 / (MI * NJ) * 64;  // the same mma count per warp for every tile shape
  const int grid = sms * blocks_per_sm;
  float* out;  // one sum per thread, so that the loop is not optimized away
  cudaMalloc(&out, sizeof(float) * grid * warps_per_block * 32);
  cudaEvent_t s, e; cudaEventCreate(&s); cudaEventCreate(&e);
  peak<MI, NJ, TF32><<<grid, warps_per_block * 32>>>(out, iters);
  cudaEventRecord(s);
  for (int r = 0; r < 5; ++r) peak<MI, NJ, TF32><<<grid, warps_per_block * 32>>>(out, iters);
  cudaEventRecord(e); cudaEventSynchronize(e);
  float ms; cudaEventElapsedTime(&ms, s, e);
  double flop = 5.0 * grid * warps_per_block * (double)iters * MI * NJ * (TF32 ? 2.0 * 16 * 8 * 8 : 2.0 * 16 * 8 * 16);
  int occ; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, peak<MI, NJ, TF32>, warps_per_block * 32, 0);
  printf("%s warp tile %dx%d (%2d mma/step): %2d warps/SM (%d blocks of %d, occ %d): %6.1f TFLOP/s  %s\n", TF32 ? "tf32" : "bf16",
         MI * 16, NJ * 8, MI * NJ, warps_per_block * blocks_per_sm, blocks_per_sm, warps_per_block, occ, flop / ms / 1e9,
         cudaGetErrorString(cudaGetLastError()));
  cudaEventDestroy(s);
  cudaEventDestroy(e);
  cudaFree(out);
}
int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (int w : {4, 8, 12, 16}) run<4, 8, false>(4, w / 4, sms);
  for (int w : {4, 8, 16}) run<4, 4, false>(4, w / 4, sms);
  for (int w : {4, 8, 16}) run<2, 4, false>(4, w / 4, sms);
  run<4, 8, false>(8, 1, sms);
  for (int w : {4, 8, 12, 16}) run<4, 8, true>(4, w / 4, sms);
  for (int w : {8, 16}) run<4, 4, true>(4, w / 4, sms);
  return 0;
}

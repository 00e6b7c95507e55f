"""On the GPU: the shared-memory phase rule (gemmdsl/passes/banks.py) timed where Nsight Compute cannot
count it. cp.async's 16-byte stores are LDGSTS, whose bank-conflict counter read 0 for a pattern the rule
gives 2-way conflicts (docs/performance.md, tensor-core notes T5); a warp-wide loop of cp.async into shared memory,
its source in L1, takes about one SM cycle per wavefront the rule predicts (plus a fixed cost), so the
timing tells the two apart."""
from __future__ import annotations

import numpy as np
import pytest

from gemmdsl.passes.banks import bank_demand, phase_costs

pytestmark = pytest.mark.gpu

PROBE = r"""
extern "C" __global__ void cp_async_probe(const float4* __restrict__ src, const int* __restrict__ offsets,
                                          long long* cycles, int iterations) {
    __shared__ __align__(128) char smem[8 * 4096];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem + warp * 4096 + offsets[lane]);
    const float4* from = src + threadIdx.x;
    __syncthreads();
    long long start = clock64();
    for (int i = 0; i < iterations; ++i) {
        #pragma unroll
        for (int j = 0; j < 8; ++j)
            asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(from));
        asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group 4;\n" ::);
    }
    asm volatile("cp.async.wait_all;\n" ::);
    __syncthreads();
    if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - start;
}
"""
LANE = np.arange(32)
ITERATIONS, WARPS = 2000, 8
# Byte offsets of each lane's 16 bytes within its warp's 4 KiB.
PATTERNS = {
    "linear": LANE * 16,
    "rows of 20 floats (sgemm_3xtf32's A)": (LANE // 4) * 80 + (LANE % 4) * 16,
    "every lane on banks 0-3": LANE * 128,
    "rows of 136 floats (sgemm_3xtf32's B)": (LANE // 8) * 544 + (LANE % 8) * 16,
}


def cycles_per_instruction(cupy, kernel, offsets) -> float:
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    src = cupy.zeros(WARPS * 32 * 4, dtype=cupy.float32)
    cycles = cupy.zeros(sms, dtype=cupy.int64)
    args = (src, cupy.asarray(offsets, dtype=cupy.int32), cycles, np.int32(ITERATIONS))
    for _ in range(2):  # the first launch warms L1 and the clocks
        kernel((sms,), (WARPS * 32,), args)
    cupy.cuda.Device().synchronize()
    return float(cycles.mean()) / (ITERATIONS * 8 * WARPS)


def test_cp_async_stores_take_the_wavefronts_the_phase_rule_predicts(cupy):
    if int(cupy.cuda.Device().compute_capability) < 80:
        pytest.skip("cp.async needs sm_80")
    kernel = cupy.RawKernel(PROBE, "cp_async_probe")
    predicted = {name: int(phase_costs(bank_demand(offsets[None, :], 16, "store"))[0].sum())
                 for name, offsets in PATTERNS.items()}
    assert list(predicted.values()) == [4, 8, 32, 4]
    measured = {name: cycles_per_instruction(cupy, kernel, offsets) for name, offsets in PATTERNS.items()}
    fixed = measured["linear"] - predicted["linear"]  # the loop's own cost per instruction
    assert 0 <= fixed < 2, measured
    for name in PATTERNS:
        assert measured[name] - fixed == pytest.approx(predicted[name], rel=0.1), (name, measured)

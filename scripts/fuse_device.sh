#!/usr/bin/env bash
# Fused epilogues on the GPU machine, from the repository root; installs nothing.
#
#     OUT=out bash scripts/fuse_device.sh [STEP...]   # STEP: tests verify bench sanitize profile
#
#   tests     tests/test_gpu_fuse.py: every fused spec against float64 at odd shapes, the PyTorch views,
#             the fused MLP example eagerly and under torch.compile;
#   verify    `gemmdsl verify` on every fused spec at 333x517x129, 1000^3 and 4095x4097x4096;
#   bench     linear_gelu and its unfused twin linear_bf16, linear_gelu_pingpong and its twin
#             linear_bf16_pingpong at 4096^3, 8192^3, 16384x11008x4096 and 4096x4096x1024 (against cuBLASLt's
#             fused bias+GELU and torch unfused); sgemm_fused beside
#             sgemm_v3, hgemm_mma_fused beside hgemm_mma_bf16c and hgemm_h100_relu_residual beside linear_bf16 at
#             4096^3; then scripts/fuse_table.py's table of each fused kernel's ratios to its unfused twin,
#             cuBLASLt's fused epilogue and torch unfused (baseline ms / kernel ms), also in $OUT/fuse_table.txt;
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck on one fused spec per path (and the
#             wgmma path's two schedules);
#   profile   `gemmdsl profile` of the fused specs at 4096^3 (ncu's counters beside check's predictions).
#
# Logs go to $OUT (default out/).
source scripts/device_env.sh
STEPS=${*:-tests verify bench sanitize}
wants() { [[ " $STEPS " == *" $1 "* ]]; }
FUSED="specs/sgemm_fused.gemm specs/hgemm_mma_fused.gemm specs/linear_gelu.gemm specs/hgemm_h100_relu_residual.gemm
       specs/linear_gelu_pingpong.gemm"
status=0
python3 scripts/prebuild_cubins.py $FUSED specs/linear_bf16.gemm specs/linear_bf16_pingpong.gemm specs/sgemm_v3.gemm \
    specs/hgemm_mma_bf16c.gemm \
    > "$OUT/prebuild.log" 2>&1 || status=1
if wants tests; then
    python3 -m pytest -m gpu -q -rs tests/test_gpu_fuse.py > "$OUT/pytest_fuse.log" 2>&1 || status=1
    tail -n 5 "$OUT/pytest_fuse.log"
fi
if wants verify; then
    python3 -m gemmdsl.cli verify $FUSED --sizes 333x517x129,1000x1000x1000,4095x4097x4096 \
        --json "$OUT/verify_fuse.json" > "$OUT/verify_fuse.log" 2>&1 || status=1
    grep -E '^(FAIL|ERROR)|cases passed' "$OUT/verify_fuse.log"
fi
if wants bench; then
    python3 -m gemmdsl.cli bench specs/linear_gelu.gemm specs/linear_bf16.gemm specs/linear_gelu_pingpong.gemm \
        specs/linear_bf16_pingpong.gemm \
        --sizes 4096x4096x4096,8192x8192x8192,16384x11008x4096,4096x4096x1024 --json "$OUT/bench_linear.json" \
        2>/dev/null | tee "$OUT/bench_linear.log" || status=1
    python3 -m gemmdsl.cli bench specs/sgemm_fused.gemm specs/sgemm_v3.gemm specs/hgemm_mma_fused.gemm \
        specs/hgemm_mma_bf16c.gemm specs/hgemm_h100_relu_residual.gemm specs/linear_bf16.gemm --sizes 4096x4096x4096 \
        --json "$OUT/bench_fused.json" 2>/dev/null | tee "$OUT/bench_fused.log" || status=1
    python3 scripts/fuse_table.py "$OUT/bench_linear.json" "$OUT/bench_fused.json" | tee "$OUT/fuse_table.txt" \
        || status=1
fi
if wants sanitize; then
    SIZES=333x517x129,256x256x256 bash scripts/sanitize.sh $FUSED 2>&1 | tee "$OUT/sanitize_fuse.log" || status=1
fi
if wants profile; then
    python3 -m gemmdsl.cli profile $FUSED --json "$OUT/profile_fuse.json" > "$OUT/profile_fuse.log" 2>&1 || status=1
    tail -n 40 "$OUT/profile_fuse.log"
fi
exit $status

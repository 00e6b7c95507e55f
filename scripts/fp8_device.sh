#!/usr/bin/env bash
# FP8 GEMMs on the GPU machine (an H100), from the repository root; installs nothing.
#
#     OUT=out bash scripts/fp8_device.sh [STEP...]   # STEP: tests verify bench sanitize
#
#   tests     tests/test_gpu_fp8.py: each FP8 spec against float64 on the dequantized operands and against
#             torch._scaled_mm at odd shapes, C poisoned with NaN, the PyTorch calls; fp8_blockwise against
#             float64 on the block-dequantized operands and torch._scaled_mm's blockwise mode where it has one;
#   verify    `gemmdsl verify` on the FP8 specs, fp8_blockwise included (block scales drawn per block), at
#             333x517x1040, 1000x1008x2048 and 4095x4097x4096 (normal and wide-range data, within 1.1x of
#             torch._scaled_mm's error: its blockwise mode for fp8_blockwise, or where it has none the f32 product
#             of the dequantized operands);
#   bench     fp8_h100 (promoted), fp8_h100_fast and fp8_rowwise (promoted, m64n256k32 in two chunks) against
#             torch._scaled_mm with the same accumulation (rowwise scales, BF16 out), fp8_blockwise against its
#             blockwise mode (or, where it has none, its rowwise mode, named so in the table), at 4096^3, 8192^3
#             and 16384x11008x4096;
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck on fp8_h100.
#
# Logs go to $OUT (default out/); a short table of the bench comes last.
source scripts/device_env.sh
STEPS=${*:-tests verify bench sanitize}
wants() { [[ " $STEPS " == *" $1 "* ]]; }
FP8="specs/fp8_h100.gemm specs/fp8_h100_fast.gemm specs/fp8_rowwise.gemm"
status=0
python3 scripts/prebuild_cubins.py $FP8 specs/fp8_blockwise.gemm > "$OUT/prebuild_fp8.log" 2>&1 || status=1
if wants tests; then
    python3 -m pytest -m gpu -q -rs tests/test_gpu_fp8.py > "$OUT/pytest_fp8.log" 2>&1 || status=1
    tail -n 5 "$OUT/pytest_fp8.log"
fi
if wants verify; then
    python3 -m gemmdsl.cli verify $FP8 specs/fp8_blockwise.gemm --sizes 333x517x1040,1000x1008x2048,4095x4097x4096 \
        --json "$OUT/verify_fp8.json" > "$OUT/verify_fp8.log" 2>&1 || status=1
    grep -E '^(FAIL|ERROR)|cases passed' "$OUT/verify_fp8.log"
fi
if wants bench; then
    python3 -m gemmdsl.cli bench $FP8 specs/fp8_blockwise.gemm --sizes 4096x4096x4096,8192x8192x8192,16384x11008x4096 \
        --json "$OUT/bench_fp8.json" 2>/dev/null > "$OUT/bench_fp8.log" || status=1
fi
if wants sanitize; then
    SIZES=333x517x1040,256x256x256 bash scripts/sanitize.sh specs/fp8_h100.gemm 2>&1 | tee "$OUT/sanitize_fp8.log" \
        || status=1
fi
if wants bench && [ -s "$OUT/bench_fp8.log" ]; then
    echo "--- bench (each kernel's % of torch._scaled_mm with its accumulation) ---"
    cat "$OUT/bench_fp8.log"
fi
exit $status

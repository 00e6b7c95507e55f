#!/usr/bin/env bash
# Grouped GEMM (batch: grouped, mixtures of experts) on the GPU machine (an H100), from the repository root;
# installs nothing.
#
#     OUT=out bash scripts/grouped_device.sh [STEP...]   # STEP: tests verify bench sanitize
#
#   tests     tests/test_gpu_grouped.py: moe_grouped against float64 and torch._grouped_mm at group sizes that
#             are not multiples of the tile, empty groups, C poisoned with NaN, rows after the last group untouched;
#             moe_grouped_fp8 against float64 of the dequantized operands and torch._scaled_grouped_mm;
#   verify    `gemmdsl verify` of moe_grouped and moe_grouped_fp8 (grouped_bench.VERIFY_CASES; FP8: K rounded up
#             to 16, e4m3 operands, row_scale (M,) and col_scale (G, N), within 1.1x torch._scaled_grouped_mm's
#             error where this PyTorch runs it, else BF16's rounding);
#   bench     `gemmdsl bench` of moe_grouped, moe_grouped_family and moe_grouped_fp8: grouped_bench.CONFIGURATIONS
#             (8 experts x 16384 tokens, N = K = 4096, even and skewed; 64 experts x 32768 tokens, N = 2048,
#             K = 4096, some empty; 8 experts x 64 tokens) against torch._grouped_mm and torch.mm per group (FP8:
#             torch._scaled_grouped_mm where it runs, and torch._scaled_mm per group with rowwise scales);
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck (scripts/sanitize.sh) on verify's small cases.
#
# Logs go to $OUT (default out/); the bench's table comes last.
source scripts/device_env.sh
STEPS=${*:-tests verify bench sanitize}
wants() { [[ " $STEPS " == *" $1 "* ]]; }
SPEC=specs/moe_grouped.gemm
FP8=specs/moe_grouped_fp8.gemm
FAMILY=specs/moe_grouped_family.gemmf
status=0
python3 scripts/prebuild_cubins.py $SPEC $FP8 $FAMILY > "$OUT/prebuild_grouped.log" 2>&1 || status=1
if wants tests; then
    python3 -m pytest -m gpu -q -rs tests/test_gpu_grouped.py > "$OUT/pytest_grouped.log" 2>&1 || status=1
    tail -n 5 "$OUT/pytest_grouped.log"
fi
if wants verify; then
    python3 -m gemmdsl.cli verify $SPEC $FP8 > "$OUT/verify_grouped.log" 2>&1 || status=1
    grep -E '^(FAIL|ERROR)|cases passed|Traceback' "$OUT/verify_grouped.log"
fi
if wants bench; then
    python3 -m gemmdsl.cli bench $SPEC $FAMILY $FP8 2>"$OUT/bench_grouped.err" > "$OUT/bench_grouped.log" || status=1
fi
if wants sanitize; then
    bash scripts/sanitize.sh $SPEC 2>&1 | tee "$OUT/sanitize_grouped.log" || status=1
fi
if wants bench && [ -s "$OUT/bench_grouped.log" ]; then
    echo "--- bench (median ms; TFLOP/s; speed relative to torch._grouped_mm) ---"
    cat "$OUT/bench_grouped.log"
fi
exit $status

#!/usr/bin/env bash
# Hopper's own path (wgmma specs) on the H100, from the repository root; installs nothing.
#
#     OUT=out bash scripts/hopper_device.sh [STEP...]   # STEP: build tests verify bench variants triton sanitize
#
#   build     nvcc for sm_90a (registers, spills) and `check` of every wgmma spec;
#   tests     the CPU and GPU tests of the path (odd shapes, the four 16-bit layouts, refusals, the C launcher);
#   verify    every wgmma spec at verify's default sizes and at 333x517x129, 1000^3 and 4095x4097x4096;
#   bench     every wgmma spec and family against cuBLAS at its own precision over the five standard sizes;
#   variants  hgemm_h100 and tf32_h100 with other rasters, schedules and tiles, and the bf16, f16 and TF32
#             specs with schedule: stream_k (written to $OUT/variants);
#   triton    scripts/triton_baseline.py: Triton beside cuBLAS at bf16, f16 and tf32;
#   sanitize  compute-sanitizer on the TF32 specs (the family's members too), 3xTF32 (128x192 too, and
#             stream-K: both sizes share tiles) and MN-major specs.
#
# Logs go to $OUT (default out/). lark is pure Python: when it is not importable, the wheel in .whl/
# (scripts/device_gpu.sh's) is put on PYTHONPATH as it is (zipimport), not installed.
source scripts/device_env.sh
SPECS=$(python3 -c 'import glob; from gemmdsl.frontend import load_spec; from gemmdsl.paths import path_of
print(" ".join(p for p in sorted(glob.glob("specs/*.gemm")) if path_of(load_spec(p)).name == "wgmma"))')
FAMILIES=$(python3 -c 'import glob; from gemmdsl.family import compile_family_path; from gemmdsl.paths import path_of
print(" ".join(p for p in sorted(glob.glob("specs/*.gemmf")) if path_of(compile_family_path(p).spec).name == "wgmma"))')
SIZES=1024x1024x1024,2048x2048x2048,4096x4096x4096,8192x8192x8192,4096x4096x1024
STEPS=${*:-build tests verify bench variants triton sanitize}
wants() { [[ " $STEPS " == *" $1 "* ]]; }
status=0
python3 scripts/prebuild_cubins.py $SPECS > "$OUT/prebuild.log" 2>&1 || status=1
if wants build; then
    python3 -m gemmdsl.cli compile $SPECS -o "$OUT/generated" > "$OUT/compile.log" 2>&1 || status=1
    grep -E 'wrote|ptxas' "$OUT/compile.log"
    for spec in $SPECS; do python3 -m gemmdsl.cli check "$spec"; done > "$OUT/check.log" 2>&1 || status=1
fi
if wants tests; then
    python3 -m pytest -q tests/test_wgmma.py > "$OUT/pytest_cpu.log" 2>&1 || status=1
    python3 -m pytest -m gpu -q -rs tests/test_gpu_wgmma.py > "$OUT/pytest_gpu.log" 2>&1 || status=1
    tail -n 3 "$OUT/pytest_cpu.log"; tail -n 15 "$OUT/pytest_gpu.log"
fi
if wants verify; then
    python3 -m gemmdsl.cli verify $SPECS --json "$OUT/verify.json" > "$OUT/verify.log" 2>&1 || status=1
    python3 -m gemmdsl.cli verify $SPECS --sizes 333x517x129,1000x1000x1000,4095x4097x4096 \
        --json "$OUT/verify_odd.json" > "$OUT/verify_odd.log" 2>&1 || status=1
    cat "$OUT/verify.log" "$OUT/verify_odd.log" | grep -cE '^PASS ' | sed 's/^/verify: PASS lines /'
    cat "$OUT/verify.log" "$OUT/verify_odd.log" | grep -E '^(FAIL|ERROR) ' | head -20
fi
if wants bench; then
    python3 -m gemmdsl.cli bench $SPECS $FAMILIES --sizes "$SIZES" --json "$OUT/bench.json" 2>&1 | grep -v '^\[' \
        | tee "$OUT/bench.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if wants variants; then
    mkdir -p "$OUT/variants"
    variant() {  # NAME BASE SED: BASE's spec under NAME, edited by SED
        sed "$3; s/gemm $(basename "$2" .gemm) {/gemm $1 {/" "$2" > "$OUT/variants/$1.gemm"
    }
    bf16=specs/hgemm_h100.gemm tf32=specs/tf32_h100.gemm
    variant h100_tiles $bf16 's/schedule: persistent/schedule: tiles/'
    variant h100_group4 $bf16 's/group(8)/group(4)/'
    variant h100_group16 $bf16 's/group(8)/group(16)/'
    variant h100_256x128 $bf16 's/128x256x64/256x128x64/; s/m64n256k16/m64n128k16/'
    variant h100_128x128 $bf16 's/128x256x64/128x128x64/; s/m64n256k16/m64n128k16/; s/stages: 4/stages: 6/'
    variant tf32_group16 $tf32 's/group(8)/group(16)/'
    variant tf32_256x128 $tf32 's/128x256x32/256x128x32/; s/m64n256k8/m64n128k8/'
    variant tf32_128x192 $tf32 's/128x256x32/128x192x32/; s/m64n256k8/m64n192k8/; s/stages: 4/stages: 5/'
    variant h100_stream_k $bf16 's/schedule: persistent/schedule: stream_k/'
    variant bf16c_stream_k specs/hgemm_h100_bf16c.gemm 's/schedule: persistent/schedule: stream_k/'
    variant f16_stream_k specs/hgemm_h100_f16.gemm 's/schedule: persistent/schedule: stream_k/'
    variant tf32_stream_k $tf32 's/schedule: persistent/schedule: stream_k/'
    python3 scripts/prebuild_cubins.py "$OUT"/variants/*.gemm > "$OUT/prebuild_variants.log" 2>&1 || status=1
    python3 -m gemmdsl.cli bench $bf16 $tf32 "$OUT"/variants/*.gemm --sizes "$SIZES" \
        --json "$OUT/bench_variants.json" 2>&1 | grep -v '^\[' | tee "$OUT/bench_variants.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if wants triton; then
    python3 scripts/triton_baseline.py --sizes "$SIZES" --json "$OUT/triton.json" 2> "$OUT/triton.err" \
        | tee "$OUT/triton.log"
    [ "${PIPESTATUS[0]}" = 0 ] || { status=1; tail -n 20 "$OUT/triton.err"; }
fi
if wants sanitize; then
    SIZES=333x517x136,256x256x256 bash scripts/sanitize.sh specs/tf32_h100.gemm specs/sgemm_3xtf32_h100.gemm \
        specs/sgemm_3xtf32_h100_sk.gemm specs/sgemm_3xtf32_h100_128x192.gemm specs/sgemm_3xtf32_h100_128x192_sk.gemm \
        specs/tf32_h100_128x64.gemm \
        specs/tf32_h100_128x192.gemm specs/hgemm_h100_nn.gemm 2>&1 \
        | tee "$OUT/sanitize.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
exit $status

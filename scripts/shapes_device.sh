#!/usr/bin/env bash
# Every shape (the FP32 kernel family) on the GPU machine, from the repository root; installs nothing.
# Logs go to $OUT (default out/).
#
#     bash scripts/shapes_device.sh [STEP...]     # STEP: bench verify layouts tests sanitize (default: all, in this order)
#
#   bench     `bench --shapes` of the family, sgemm_h100 (exact) and checked_v3 against cuBLAS SGEMM;
#   verify    every member at every shape of the default list;
#   layouts   every member with A and B in each of the four layouts, and strided-batched, at every
#             shape of the default list (the variants are written to $OUT/layouts);
#   tests     the GPU tests of shapes and families;
#   sanitize  compute-sanitizer on the members at sizes that split K and leave partial tiles.
source scripts/device_env.sh
MEMBERS="specs/sgemm_h100.gemm specs/sgemm_any.gemm specs/checked_64x64.gemm specs/checked_32x128.gemm specs/checked_128x32.gemm"
SHAPES=$(grep -v '^#' gemmdsl/shapes/default.txt | awk 'NF { print ($1 ~ /x/) ? $1 : $1 "x" $1 "x" $1 }' | paste -sd,)
STEPS=${*:-bench verify layouts tests sanitize}
wants() { [[ " $STEPS " == *" $1 "* ]]; }
status=0
python3 scripts/prebuild_cubins.py $MEMBERS specs/checked_v3.gemm > "$OUT/prebuild.log" 2>&1 || status=1
if wants bench; then
    python3 -m gemmdsl.cli bench specs/sgemm_family.gemmf specs/sgemm_h100.gemm specs/checked_v3.gemm --shapes \
        --json "$OUT/bench_shapes.json" 2>&1 | grep -v '^\[' | tee "$OUT/bench_shapes.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if wants verify; then
    python3 -m gemmdsl.cli verify specs/sgemm_family.gemmf --sizes "$SHAPES" --json "$OUT/verify_shapes.json" \
        > "$OUT/verify_shapes.log" 2>&1 || status=1
    grep -cE '^PASS ' "$OUT/verify_shapes.log" | sed 's/^/verify: PASS lines /'
    grep -E '^FAIL ' "$OUT/verify_shapes.log" | head -20
fi
if wants layouts; then
    mkdir -p "$OUT/layouts"
    for spec in $MEMBERS; do
        name=$(basename "$spec" .gemm)
        for a in row col; do
            for b in row col; do
                sed "s/a: f32 row; b: f32 row;/a: f32 $a; b: f32 $b;/; s/gemm $name {/gemm ${name}_${a}_${b} {/" \
                    "$spec" > "$OUT/layouts/${name}_${a}_${b}.gemm"
            done
        done
        sed "s/bounds: \([a-z]*\); }/bounds: \1; batch: strided; }/; s/gemm $name {/gemm ${name}_batched {/" \
            "$spec" > "$OUT/layouts/${name}_batched.gemm"
    done
    python3 scripts/prebuild_cubins.py "$OUT"/layouts/*.gemm > "$OUT/prebuild_layouts.log" 2>&1 || status=1
    python3 -m gemmdsl.cli verify "$OUT"/layouts/*.gemm --sizes "$SHAPES" --json "$OUT/verify_layouts.json" \
        > "$OUT/verify_layouts.log" 2>&1 || status=1
    grep -cE '^PASS ' "$OUT/verify_layouts.log" | sed 's/^/layouts: PASS lines /'
    grep -E '^(FAIL|ERROR) ' "$OUT/verify_layouts.log" | head -20
fi
if wants tests; then
    python3 -m pytest -m gpu -q -rs tests/test_gpu_shapes.py tests/test_family.py > "$OUT/pytest_gpu.log" 2>&1 || status=1
    tail -n 15 "$OUT/pytest_gpu.log"
fi
if wants sanitize; then
    SIZES=33x4100x1029,4099x31x2053,256x256x9000 bash scripts/sanitize.sh $MEMBERS 2>&1 | tee "$OUT/sanitize.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
exit $status

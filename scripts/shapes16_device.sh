#!/usr/bin/env bash
# Tensor cores at every shape on the GPU machine, from the repository root; installs nothing. Logs go to
# $OUT (default out/).
#
#     bash scripts/shapes16_device.sh [STEP...]     # STEP: verify tests bench sanitize table (default: all)
#
#   verify    every member of the BF16, FP16 and TF32 families (their `fallback` mma.sync member included) at
#             the 12 awkward shapes (gemmdsl/shapes/default.txt's first 12) and the decode shapes
#             (gemmdsl/shapes/decode.txt);
#   tests     tests/test_gpu_shapes16.py: each family at those shapes against float64, the operands TMA refuses
#             (K = 555, a leading dimension of 1001, a pointer one element off) on the fallback, each of the
#             fallback's kernels (vector, 8-byte, 4-byte, scalar) at the alignments that pick it (K = 700, 702,
#             77, odd and even leading dimensions, A 1, 2 or 4 elements off) with C poisoned with NaN, and the
#             empty problems (M, N or K = 0);
#   bench     `bench --shapes` of both lists for the BF16, FP16, TF32, 3xTF32 and FP32 families against cuBLAS;
#   sanitize  compute-sanitizer (scripts/sanitize.sh) on the fallback members, at sizes off every tile with
#             odd leading dimensions (their scalar kernels), K = 700 and 702 on packed operands (16-bit: the
#             8-byte and the 4-byte kernel; TF32: the vector and the 8-byte one), and on the BF16-C stream-K member at small sizes
#             whose tiles it shares among every SM (its workspace and flags), and the families' padded path
#             (paths/wgmma/pad.py): scripts/padded_calls.py (each family at K = 33, 77, 129, A one element off,
#             against float64) under each tool, every kernel instrumented;
#   table     last: per family and shape list, every shape's ratio to cuBLAS (and at the decode shapes the
#             bytes of A, B and C over the time against HBM's 3.35 TB/s), then the geometric mean and the
#             lowest ratio, from the bench JSON.
source scripts/device_env.sh
FAMILIES16="specs/hgemm_h100_bf16c_family.gemmf specs/hgemm_h100_family.gemmf specs/hgemm_h100_f16_family.gemmf
specs/tf32_h100_family.gemmf"
BENCHED="$FAMILIES16 specs/sgemm_3xtf32_h100_family.gemmf specs/sgemm_family.gemmf"
FALLBACKS="specs/hgemm_h100_bf16c_any.gemm specs/hgemm_h100_any.gemm specs/hgemm_h100_f16_any.gemm specs/tf32_h100_any.gemm"
STREAM_K=specs/hgemm_h100_bf16c_64x128_sk.gemm
sizes_of() { grep -v '^#' "$1" | awk 'NF { print ($1 ~ /x/) ? $1 : $1 "x" $1 "x" $1 }' | paste -sd,; }
AWKWARD=$(grep -v '^#' gemmdsl/shapes/default.txt | awk 'NF' | head -12 > "$OUT/awkward.txt"; sizes_of "$OUT/awkward.txt")
DECODE=$(sizes_of gemmdsl/shapes/decode.txt)
STEPS=${*:-verify tests bench sanitize table}
wants() { [[ " $STEPS " == *" $1 "* ]]; }
status=0
members=$(grep -hoE '(use|fallback) [A-Za-z0-9_]+\.gemm' $BENCHED | awk '{ print "specs/" $2 }' | sort -u)
python3 scripts/prebuild_cubins.py $members > "$OUT/prebuild.log" 2>&1 || status=1
tail -n 3 "$OUT/prebuild.log"
if wants verify; then
    python3 -m gemmdsl.cli verify $FAMILIES16 --sizes "$AWKWARD,$DECODE" --json "$OUT/verify_shapes16.json" \
        > "$OUT/verify_shapes16.log" 2>&1 || status=1
    grep -cE '^PASS ' "$OUT/verify_shapes16.log" | sed 's/^/verify: PASS lines /'
    grep -E '^(FAIL|ERROR) ' "$OUT/verify_shapes16.log" | head -20
fi
if wants tests; then
    python3 -m pytest -m gpu -q -rs tests/test_gpu_shapes16.py tests/test_gpu.py -k "shapes16 or empty" \
        > "$OUT/pytest_shapes16.log" 2>&1 || status=1
    tail -n 15 "$OUT/pytest_shapes16.log"
fi
if wants bench; then
    for list in default decode; do
        python3 -m gemmdsl.cli bench $BENCHED --shapes "gemmdsl/shapes/$list.txt" --json "$OUT/bench_$list.json" \
            2>&1 | grep -v '^\[' > "$OUT/bench_$list.log"
        [ "${PIPESTATUS[0]}" = 0 ] || status=1
        tail -n 12 "$OUT/bench_$list.log"
    done
fi
if wants sanitize; then
    SIZES=1000x1000x555,33x4100x1029,16x4096x4095,200x296x700,200x296x702 bash scripts/sanitize.sh $FALLBACKS 2>&1 | tee "$OUT/sanitize.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    # 8 tiles of 64 k-tiles on every SM; 64x128 tiles split along K and across tiles; one row of a decode call
    SIZES=256x256x4096,200x296x1000,1x1024x8192 bash scripts/sanitize.sh $STREAM_K 2>&1 | tee -a "$OUT/sanitize.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    for family in $FAMILIES16; do
        for tool in memcheck racecheck synccheck; do
            log="$OUT/sanitize/$(basename "$family" .gemmf).padded.$tool.log"
            compute-sanitizer --tool "$tool" python3 scripts/padded_calls.py "$family" > "$log" 2>&1
            ran=$?  # 0 only where every call matched float64
            verdict=$( [ "$ran" = 0 ] && grep -qE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" "$log" \
                       && grep -q "^PASS" "$log" && echo CLEAN || echo "ERRORS (status $ran)")
            [ "$verdict" = CLEAN ] || status=1
            echo "$(basename "$family" .gemmf) padded path: $tool $verdict" | tee -a "$OUT/sanitize.log"
        done
    done
fi
if wants table; then
    python3 - "$OUT" <<'PY' | tee "$OUT/table.txt"
import json, math, sys
from pathlib import Path
HBM = 3.35e12  # bytes per second: the H100 SXM's datasheet (gemmdsl/targets.py, HBM_BYTES_PER_CLOCK)
# bytes per element of A, B and C by the kernel's name (families and their members share the prefix)
ELEMENTS = [("tf32_", (4, 4, 4)), ("hgemm_h100_bf16c", (2, 2, 2)), ("hgemm_h100_f16", (2, 2, 2)),
            ("hgemm_h100", (2, 2, 4)), ("sgemm", (4, 4, 4))]
summary = []
for name in ("default", "decode"):
    path = Path(sys.argv[1]) / f"bench_{name}.json"
    if not path.exists():
        continue
    rows = {}
    for row in json.loads(path.read_text())["rows"]:
        if row["pct_of_cublas"] is not None and not row["name"].startswith("cuBLAS"):
            rows.setdefault(row["name"], []).append(row)
    for kernel, measured in rows.items():
        a, b, c = next((sizes for prefix, sizes in ELEMENTS if kernel.startswith(prefix)), (4, 4, 4))
        print(f"{kernel} ({name})")
        for row in measured:
            m, n, k = row["m"], row["n"], row["k"]
            line = f"  {f'{m}x{n}x{k}':<18}{row['median_ms'] * 1e3:>10.1f} us{row['pct_of_cublas'] / 100:>8.3f}x"
            if name == "decode":
                rate = (m * k * a + n * k * b + m * n * c) / (row["median_ms"] * 1e-3)
                line += f"{rate / 1e12:>7.2f} TB/s ({100 * rate / HBM:.0f}% of HBM)"
            print(line)
        ratios = [row["pct_of_cublas"] / 100 for row in measured]
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        summary.append(f"{kernel:<32}{name:>8}{geomean:>9.3f}x{min(ratios):>9.3f}x")
print(f"\n{'kernel':<32}{'shapes':>8}{'geomean':>10}{'lowest':>10}  (ratio to cuBLAS)")
print("\n".join(summary))
PY
fi
exit $status

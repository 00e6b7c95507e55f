#!/usr/bin/env bash
# The cycle model's data on the GPU machine, from the repository root: `gemmdsl calibrate`'s profile, then
# scripts/family_study.py (every member, the family's pick and cuBLAS, launch for launch) for each family given,
# over the shape sets given. Logs and JSON go to $OUT (default out/).
#
#     bash scripts/study_device.sh BUDGET_PER_FAMILY "SHAPE_SOURCES" FAMILY.gemmf...
#     bash scripts/study_device.sh 70 "random:200:11 models" specs/hgemm_h100_bf16c_family.gemmf
#     bash scripts/study_device.sh 120 "random:200:1 models" specs/fp8_rowwise_family.gemmf specs/fp8_fast_family.gemmf
# (the FP8 families against torch._scaled_mm in their accumulation mode; the shapes it refuses are counted apart)
source scripts/device_env.sh
budget=$1; sources=$2; shift 2
members=$(grep -hoE '(use|fallback) [A-Za-z0-9_]+\.gemm' "$@" | awk '{ print "specs/" $2 }' | sort -u)
python3 scripts/prebuild_cubins.py $members > "$OUT/prebuild.log" 2>&1 || { tail -n 20 "$OUT/prebuild.log"; exit 1; }
python3 -m gemmdsl.cli calibrate --sustain 3 -o "$OUT/profile.json" 2>&1 | tee "$OUT/calibrate.log"
shape_args=$(for s in $sources; do printf -- '--shapes %s ' "$s"; done)
python3 scripts/family_study.py "$@" $shape_args --budget "$budget" --json "$OUT/study.json" > "$OUT/study.log" 2>&1
status=$?
grep -c ratio "$OUT/study.log" | sed 's/^/shapes timed: /'
grep -c 'reference refused' "$OUT/study.log" | sed 's/^/shapes the reference refused (timed alone): /'
grep -iE 'error|Traceback' "$OUT/study.log" | head -20
exit $status

#!/usr/bin/env bash
# Tuning at scale on a GPU machine: candidates timed per minute on 1 GPU vs all of them (hgemm_h100 at 4096^3,
# 24 candidates), their rank agreement, planted faults, and the multi-GPU tests. Logs under $OUT; a table last.
#   OUT=/tmp/out bash scripts/tune_scale_device.sh
set -u
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
status=0
python3 -m pytest -q tests/test_gpu_tune_scale.py tests/test_tune_workers.py > "$OUT/tests.log" 2>&1 || status=1
tail -3 "$OUT/tests.log"
python3 scripts/tune_scale.py "$OUT/scale" > "$OUT/scale.log" 2>&1 || status=1
sed -n '/^run /,$p' "$OUT/scale.log"
exit $status

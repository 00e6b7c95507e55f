#!/usr/bin/env bash
# On the GPU machine, from the repository root: the GPU tests, then `gemmdsl verify`
# and `gemmdsl bench` on every shipped spec. Logs and bench.json go to $OUT.
# The machine has no network: lark (and pytest, if missing there) come as wheels in .whl/.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"

status=0
python3 -m pytest -m gpu -q 2>&1 | tee "$OUT/pytest.log" || status=1
python3 scripts/prebuild_cubins.py specs/*.gemm > "$OUT/prebuild.log" 2>&1 || status=1
python3 -m gemmdsl.cli verify specs/*.gemm --json "$OUT/verify.json" 2>&1 | tee "$OUT/verify.log" || status=1
python3 -m gemmdsl.cli bench specs/*.gemm --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" || status=1
python3 -m gemmdsl.cli bench specs/sgemm_family.gemmf specs/sgemm_h100.gemm --shapes --json "$OUT/bench_shapes.json" \
    2>&1 | tee "$OUT/bench_shapes.log" || status=1
exit $status

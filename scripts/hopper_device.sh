#!/usr/bin/env bash
# Hopper's own path (wgmma specs) on the H100, from the repository root; installs nothing.
# Logs go to $OUT (default out/). lark is pure Python: when it is not importable, the wheel in .whl/
# (scripts/device_gpu.sh's) is put on PYTHONPATH as it is (zipimport), not installed.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ! python3 -c "import lark" 2>/dev/null; then
    for wheel in .whl/*.whl; do [ -e "$wheel" ] && PYTHONPATH=$PWD/$wheel:$PYTHONPATH; done
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
SPECS="specs/hgemm_h100.gemm specs/hgemm_h100_bf16c.gemm"
status=0
# 1. The kernels as nvcc builds them for sm_90a (registers, spills), and what the analysis predicts.
python3 -m gemmdsl.cli compile $SPECS -o "$OUT/generated" 2>&1 | tee "$OUT/compile.log" || status=1
python3 -m gemmdsl.cli check specs/hgemm_h100.gemm 2>&1 | tee "$OUT/check.log" || status=1
# 2. CPU tests of the path, then the GPU tests: odd shapes vs cuBLAS/float64, refusals, the C launcher.
python3 -m pytest -q tests/test_wgmma.py 2>&1 | tee "$OUT/pytest_cpu.log" || status=1
python3 -m pytest -m gpu -q tests/test_gpu_wgmma.py -rs 2>&1 | tee "$OUT/pytest_gpu.log" || status=1
# 3. verify (default sizes, and the odd ones) and bench against cuBLAS BF16.
python3 -m gemmdsl.cli verify $SPECS --json "$OUT/verify.json" 2>&1 | tee "$OUT/verify.log" || status=1
python3 -m gemmdsl.cli verify specs/hgemm_h100.gemm --sizes 333x517x136,1000x1000x1000,4095x4097x4096 \
    --json "$OUT/verify_odd.json" 2>&1 | tee "$OUT/verify_odd.log" || status=1
python3 -m gemmdsl.cli bench specs/hgemm_h100.gemm --sizes 4096x4096x4096,8192x8192x8192,2048x2048x2048 \
    --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" || status=1
python3 -m gemmdsl.cli bench specs/hgemm_h100_bf16c.gemm --sizes 4096x4096x4096,8192x8192x8192 \
    --json "$OUT/bench_bf16c.json" 2>&1 | tee "$OUT/bench_bf16c.log" || status=1
exit $status

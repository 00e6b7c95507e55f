# Sourced by the device scripts (hopper_device.sh, shapes_device.sh) from the repository root: strict
# mode, $OUT (default out/) created, gemmdsl importable, and lark, which is pure Python, put on
# PYTHONPATH as the wheel in .whl/ (zipimport) where it is not installed; the GPU's name, driver and
# clocks go to $OUT/gpu.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ! python3 -c "import lark" 2>/dev/null; then
    for wheel in .whl/*.whl; do [ -e "$wheel" ] && PYTHONPATH=$PWD/$wheel:$PYTHONPATH; done
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"

#!/usr/bin/env bash
# Where does a kernel's time go? Warp stall reasons per issued instruction (ncu) at 4096^3,
# and the kernel's SASS (cuobjdump) for reading the main loop.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
R=""
for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected selected dispatch_stall lg_throttle no_instruction branch_resolving drain membar misc; do
  R="$R,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
for s in "$@"; do
  n=$(basename $s .gemm)
  SIZES=4096x4096x4096 ncu --clock-control none --csv --metrics "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active${R}" --kernel-name regex:${n}_kernel -c 1 python3 scripts/smoke_device.py $s > $OUT/stall_$n.csv 2>&1
  grep -E "stalled|issue_active|pipe_fma" $OUT/stall_$n.csv | awk -F'","' -v n=$n '{m=$(NF-2); sub(/smsp__average_warps_issue_stalled_/, "", m); sub(/_per_issue_active.ratio/, "", m); v=$NF; gsub(/"/, "", v); if (v+0 > 0.05) printf "%s %s %s\n", n, m, v}'
  cuobjdump -sass /tmp/build/$n/k.cubin > $OUT/sass_$n.txt
done

#!/usr/bin/env bash
# Nsight Compute on variants at 4096^3 (GPU machine, repository root): issue and FMA-pipe use,
# the instruction mix, shared wavefronts and warp stall reasons per issued instruction.
#
#     bash scripts/variants/ncu_stalls.sh specs/sgemm_v3.gemm specs/sgemm_v3.gemm:o_snake+u4
#     CUBLAS=1 bash scripts/variants/ncu_stalls.sh ...    # cuBLAS's SGEMM kernel too
#
# Arguments as for bench_variants.py. Prints one block per kernel launch; $OUT/ncu.csv keeps all.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
here=$(dirname "$0")
stalls=""
for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected selected \
         dispatch_stall no_instruction branch_resolving; do
  stalls="$stalls,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
metrics="launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic"
metrics="$metrics,sm__warps_active.avg.per_cycle_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"
metrics="$metrics,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum"
metrics="$metrics,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_inst_executed_op_shared_ld.sum"
metrics="$metrics,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum$stalls"
ncu --clock-control none --csv --metrics "$metrics" python3 "$here/ncu_launch.py" "$@" > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
header = next(i for i, row in enumerate(rows) if row and row[0] == "ID")
names = rows[header]
kernel, metric, value = names.index("Kernel Name"), names.index("Metric Name"), names.index("Metric Value")
launches = {}
for row in rows[header + 1:]:
    launches.setdefault((row[0], row[kernel][:90]), {})[row[metric]] = row[value]
for (launch, name), values in launches.items():
    print("==", launch, name)
    for key, number in values.items():
        key = key.replace("smsp__average_warps_issue_stalled_", "stall ").replace("_per_issue_active.ratio", "")
        print(f"   {key:62s} {number}")
PY

#!/usr/bin/env bash
# Device probe: ncu shared-memory counters and a SASS opcode histogram of a few kernels.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
M="l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active"
for s in "$@"; do
  n=$(basename $s .gemm)
  SIZES=1024x1024x1024 ncu --clock-control none --csv --metrics $M --kernel-name regex:${n}_kernel -c 1 python3 scripts/smoke_device.py $s > $OUT/ncu_$n.csv 2>&1
  grep -E "shared|registers|occupancy|warps_active" $OUT/ncu_$n.csv | awk -F'","' -v n=$n '{print n, $(NF-2), $NF}'
  cuobjdump -sass /tmp/build/$n/k.cubin > /tmp/build/$n/k.sass
  echo "$n opcodes:"; grep -oE "^\s+/\*[0-9a-f]+\*/\s+[@!A-Z0-9_. ]+" /tmp/build/$n/k.sass | awk '{op=$2; if (op ~ /^@/) op=$3; sub(/\..*/, "", op); print op}' | sort | uniq -c | sort -rn | head -14 | tr '\n' ' '; echo
done

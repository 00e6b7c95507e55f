#!/usr/bin/env bash
# Per-SASS-instruction shared-memory wavefronts (ncu source page) for the given specs.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
for s in "$@"; do
  n=$(basename $s .gemm)
  SIZES=1024x1024x1024 ncu --clock-control none --section SourceCounters --kernel-name regex:${n}_kernel -c 1 -f -o /tmp/$n python3 scripts/smoke_device.py $s > /dev/null 2>&1
  ncu --import /tmp/$n.ncu-rep --page source --csv --print-source sass > $OUT/src_$n.csv 2>&1
  python3 - $OUT/src_$n.csv $n <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if "Source" in r)
h = rows[hdr]
src = h.index("Source")
cols = [i for i, c in enumerate(h) if "Shared" in c and ("Wavefronts" in c or "Ideal" in c or "Excessive" in c)]
print(sys.argv[2], [h[i] for i in cols])
for r in rows[hdr+1:]:
    if len(r) > src and ("LDS" in r[src] or "STS" in r[src]):
        print("  ", r[src].strip()[:60], [r[i] for i in cols])
PY
done

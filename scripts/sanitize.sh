#!/usr/bin/env bash
# compute-sanitizer's memcheck, racecheck and synccheck on every spec in specs/ (or the specs
# given), on the GPU machine from the repository root:
#
#     bash scripts/sanitize.sh [SPEC...]          # SIZES=MxNxK,... to change the sizes
#
# Each run is `gemmdsl verify SPEC --sizes 333x517x129,256x256x256`: at each size one launch
# on packed operands (the scalar kernel where leading dimensions are odd, a narrow one where they
# are aligned to 8 or 4 bytes but not 16), one on padded
# operands (the vector kernel) and, for batched specs, one on a batch of 3; exact specs skip
# the odd size, which their launcher refuses. memcheck and synccheck instrument only the spec's
# own kernels (--kernel-name kns=NAME_ matches NAME_kernel, NAME_kernel_scalar, NAME_kernel_8byte and stream-K's
# NAME_prepare_c), so cuBLAS and CuPy's helper kernels run at full speed; racecheck instruments
# every kernel, because under racecheck an uninstrumented cuBLAS BF16/FP16 GEMM (the reference
# verify computes for 16-bit specs) ends in "Internal Sanitizer Error: The Sanitizer failed to
# handle a hardware exception" (compute-sanitizer 2025.3.1, driver 580.159.04: a plain 256^3
# torch bf16 matmul does it alone, and runs clean once instrumented). GEMMDSL_NO_MEMORY_POOL=1
# gives every array its own allocation so that memcheck knows each operand's bounds. verify's
# own checks (NaN poison and guards, the float64 reference) run as usual. Racecheck's hazards are
# judged by the kernel they are in: those of other kernels (cuBLAS's split-K reductions, nvjet_*_splitK,
# report some at small sizes) are counted on the line but leave the spec CLEAN. TOOLS="racecheck"
# (say) runs a subset of the three tools.
#
# Prints one line per spec and tool, CLEAN or ERRORS or FAILED (wrong results or a crash),
# keeps every log in $OUT/sanitize/ (OUT defaults to out) and exits 1 unless all are CLEAN.
set -uo pipefail
SIZES=${SIZES:-333x517x129,256x256x256}
LOGS=${OUT:-out}/sanitize
PYTHON=${PYTHON:-python3}
mkdir -p "$LOGS"
if [ $# -gt 0 ]; then specs=("$@"); else specs=(specs/*.gemm); fi
export GEMMDSL_NO_MEMORY_POOL=1

status=0
for spec in "${specs[@]}"; do
    kernel=$("$PYTHON" -c 'import sys; from gemmdsl.frontend import load_spec; print(load_spec(sys.argv[1]).name)' "$spec") \
        || { echo "$spec: does not compile"; status=1; continue; }
    for tool in ${TOOLS:-memcheck racecheck synccheck}; do
        log="$LOGS/$kernel.$tool.log"
        filter=(--kernel-name "kns=${kernel}_")
        [ "$tool" = racecheck ] && filter=()
        compute-sanitizer --tool "$tool" "${filter[@]}" --error-exitcode 99 \
            "$PYTHON" -m gemmdsl.cli verify "$spec" --sizes "$SIZES" >"$log" 2>&1
        code=$?
        others=""
        if [ "$tool" = racecheck ] && [ $code = 99 ]; then
            ours=$(grep -E 'Race reported' "$log" | grep -c "${kernel}_")
            theirs=$(grep -cE 'Race reported' "$log")
            if [ "$ours" = 0 ] && [ "$theirs" -gt 0 ] && ! grep -q '^FAIL ' "$log"; then
                code=0
                others=" ($theirs race report(s), all in other kernels: $(grep -oE 'Race reported between [A-Za-z]+ access at [A-Za-z0-9_]+' "$log" | awk '{print $NF}' | sort -u | paste -sd,))"
            fi
        fi
        case $code in
            0) verdict=CLEAN ;;
            99) verdict=ERRORS; status=1 ;;
            *) verdict="FAILED (exit $code)"; status=1 ;;
        esac
        launches=$(grep -cE '^(PASS|FAIL) ' "$log")
        summary=$(grep -E '(ERROR|RACECHECK) SUMMARY' "$log" | tail -n 1 | sed 's/^=* *//')
        printf '%-16s %-9s %-18s %2d launches  %s%s\n' "$kernel" "$tool" "$verdict" "$launches" "$summary" "$others"
    done
done
exit $status

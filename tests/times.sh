# Part times of a test run, sourced by .ci/run, tests/run-all.sh and slurm/vm.sh.
#
#   timed NAME CMD...   runs CMD, says how long it took, and appends "NAME<TAB>seconds<TAB>exit
#                       status" to the file $GPU_TRACKER_TIMES when that is set; returns CMD's
#                       exit status
#   times_table [FILE]  prints the parts of FILE (default $GPU_TRACKER_TIMES) as a table
#
# One file collects the parts of the nested scripts, so the caller at the top prints them all.

timed() {
    local name=$1 t0=$SECONDS rc=0
    shift
    "$@" || rc=$?
    local took=$((SECONDS - t0))
    echo "time: $name: ${took} s$( ((rc == 0)) || echo " (exit $rc)")" >&2
    [[ -z ${GPU_TRACKER_TIMES:-} ]] || printf '%s\t%s\t%s\n' "$name" "$took" "$rc" >>"$GPU_TRACKER_TIMES"
    return "$rc"
}

times_table() {
    local file=${1:-${GPU_TRACKER_TIMES:-}}
    [[ -s $file ]] || return 0
    awk -F'\t' '
        { printf "  %-58s %6d s %3d:%02d%s\n", $1, $2, $2 / 60, $2 % 60, ($3 == 0 ? "" : "  FAILED (exit " $3 ")") }
    ' "$file"
}

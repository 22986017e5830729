#!/usr/bin/env bash
# Prints, for each test log given, what each failed test said when it panicked (the file and line,
# then the first lines of the message, each cut to 300 characters), and the retries of the
# emulated guests and of the host (slurm/vm/guest-test, tests/run-all.sh). .ci/run prints it
# last, under the table of parts, so that the end of a long CI output still says why a test
# failed. Prints nothing for logs without failures.
# Usage: tests/failure-digest.sh LOG...
for log in "$@"; do
    [[ -r $log ]] || continue
    digest=$(awk '
        /^(guest-test|run-all: host): .*(passed alone|FAILED again|no retry)/ { print "  " $0; next }
        /^---- .* stdout ----$/ { name = $2; left = 0; next }
        name != "" && / panicked at / { print "  " name ":"; left = 4; sub(/^thread .* panicked at /, "panicked at ") }
        left > 0 { print "    " substr($0, 1, 300); left--; if (left == 0) name = "" }
    ' "$log")
    # Only logs that said something: a guest's log has "guest-test:" lines in every run.
    [[ -n $digest ]] || continue
    echo "failure digest: $log"
    printf '%s\n' "$digest"
done

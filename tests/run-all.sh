#!/usr/bin/env bash
# Runs every test: unit tests, the CLI and GPU tests (fake NVML), and the end-to-end tests of the
# SPANK plugin on three real Slurm releases:
#   - Slurm 22.05 on this machine (cgroup v1): the cluster that slurm/local-cluster.sh up brings
#     up first (it installs Debian's Slurm packages if missing and builds the plugin): three nodes
#     (the tests' jobs run on the first, the only node of the default partition), the last with
#     a node-local spool, and accounting (MariaDB, slurmdbd, EpilogSlurmctld);
#   - Slurm 24.11 (Debian 13) and 26.05 (Debian 14) on cgroup v2, each in a QEMU guest built from
#     Debian's packages by slurm/vm.sh: the whole suite once, then again with
#     SlurmdParameters=contain_spank the tests whose behaviour it can change (slurm/vm.sh says
#     which).
# The non-Slurm tests run first, alone (some time CPU use); then the real-Slurm suite runs here
# and in both guests at once, each with a log of its own (target/test-logs/), printed at the end.
# Each part's time is printed at the end (and appended to $GPU_TRACKER_TIMES when set, for
# .ci/run's table).
# Arguments are passed to the test binaries (a name filter, say). GPU_TRACKER_VM_SUITES picks
# the guests ("trixie forky" by default; empty for this machine's Slurm only).
# Needs root for the clusters (it re-runs itself through sudo where there is one).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "run-all: must run as root (no sudo found)" >&2; exit 1; }
    exec sudo --preserve-env=PATH,CARGO_HOME,RUSTUP_HOME,GPU_TRACKER_VM_SUITES,GPU_TRACKER_TIMES,GPU_TRACKER_AFTER_HOST bash "$0" "$@"
fi
source tests/times.sh
started=$SECONDS
# The parts of this run alone, whatever the caller collects.
[[ -n ${GPU_TRACKER_TIMES:-} ]] || { GPU_TRACKER_TIMES=$(mktemp); trap 'rm -f "$GPU_TRACKER_TIMES"' EXIT; }
export GPU_TRACKER_TIMES
read -r -a suites <<<"${GPU_TRACKER_VM_SUITES-trixie forky}"
logs=target/test-logs
mkdir -p "$logs"
# What the tests need besides Slurm (slurm/local-cluster.sh installs Slurm, MariaDB and the
# plugin's build dependencies; the guests have all of it in their images):
#   fuse3, python3-pyfuse3, python3: tests/hangfs.py, a FUSE file that stops answering;
#   procps: kill(1) and pgrep(1) in the signal tests;
#   prometheus: Debian's own, which the exporter's test starts and scrapes through, and whose
#   promtool lints the exporter's text (tests/exporter/format.rs fails without it).
#   python3-venv: the Python package's own environment (python/ci-test: `pip install ./python`,
#   then pytest).
TEST_PACKAGES=(fuse3 python3-pyfuse3 python3 python3-venv procps prometheus)
test_packages() {
    local p missing=()
    for p in "${TEST_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    echo "run-all: installing ${missing[*]} ..."
    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        "${missing[@]}"; } >"$logs/apt.log" 2>&1 ||
        { tail -n 20 "$logs/apt.log" >&2; echo "run-all: installing ${missing[*]} failed (log: $logs/apt.log)" >&2; return 1; }
}
timed "host: packages the tests need" test_packages
timed "host: Slurm cluster up (install, build, 3 nodes, accounting, mail)" \
    slurm/local-cluster.sh up --nodes 3 --node-local-spool --accounting --mail
release=$(dpkg-query -W -f='${Version}' slurmd | sed 's/-.*//')
status=0 results=()
# Tests that need what this machine cannot have are left out by name, each with why, and
# counted as skipped (never as passed): the FUSE tests need /dev/fuse, which a container may
# lack. The guests have their own kernel and /dev/fuse, so they run every test.
# Prints why this machine cannot serve a FUSE file system, or nothing where it can.
fuse_missing() {
    [[ -c /dev/fuse ]] || { echo "no /dev/fuse: a container without the device, or no fuse module"; return; }
    (exec 3<>/dev/fuse) 2>/dev/null || echo "/dev/fuse cannot be opened: the container's device rules deny it"
}
host_skips=() skipped=()
fuse_why=$(fuse_missing)
if [[ -n $fuse_why ]]; then
    host_skips+=(--skip hangfs_hang_and_zero --skip hangfs_a_job_output_on_fuse_is_never_written
        --skip an_output_file_that_stops_answering_does_not_hold_the_job
        --skip warning_lines_to_an_output_that_stops_answering_do_not_hold_the_job)
    skipped+=("4 FUSE tests on this machine ($fuse_why)")
    echo "run-all: skipping the 4 FUSE tests here: $fuse_why"
fi
# 1. Every test but the real-Slurm ones, alone on the machine: some of them time CPU use.
echo "run-all: every test but the real-Slurm ones"
if timed "host: cargo test, all but the real-Slurm tests" \
    cargo test --workspace --locked --features spank -- --include-ignored --skip real_slurm:: \
    "${host_skips[@]}" "$@"; then
    results+=("unit, CLI and GPU tests: passed")
else
    results+=("unit, CLI and GPU tests: FAILED")
    status=1
fi
# 2. What the guests run, built here one suite after the other (they share cargo's target).
for suite in "${suites[@]}"; do
    slurm/vm.sh build "$suite"
done
# 3. The real-Slurm suite on this machine's Slurm and in each guest at once: the guests' emulated
# CPUs wait on their jobs most of the time, and each part has a cluster of its own.
declare -A pid
echo "run-all: the real-Slurm suite on Slurm $release here and in ${suites[*]:-no guest}, at once (logs: $logs/)"
# Each test's time is printed beside its result (libtest's --report-time; RUSTC_BOOTSTRAP lets
# the stable toolchain's test harness take that option), and the slowest are listed at the end:
# what to make cheaper when the run grows.
# A test that failed beside the others runs once more, alone, when few failed, as in the guests
# (slurm/vm/guest-test): this machine runs two emulated guests and the Python build beside the
# suite, and a test that holds a job for a fixed few seconds can lose them to its neighbours.
# Both results stay in the log, and the retry's line says which it was; a test that fails alone
# too fails the suite, and so do more than GPU_TRACKER_RETRY_MAX (6) failures.
host_suite() {
    local rc=0 name failed=() out=$logs/host.first.log
    env RUSTC_BOOTSTRAP=1 cargo test --locked --features spank --test slurm -- --include-ignored \
        -Z unstable-options --report-time "${host_skips[@]}" "$@" 2>&1 | tee "$out" || rc=$?
    ((rc == 0)) && return 0
    mapfile -t failed < <(sed -nE 's/^test ([^ ]+) \.\.\. FAILED.*/\1/p' "$out")
    if ((${#failed[@]} == 0 || ${#failed[@]} > ${GPU_TRACKER_RETRY_MAX:-6})); then
        echo "run-all: host: ${#failed[@]} test(s) failed: no retry"
        return "$rc"
    fi
    rc=0
    for name in "${failed[@]}"; do
        echo "run-all: host: retry: $name, alone"
        if env RUSTC_BOOTSTRAP=1 cargo test --locked --features spank --test slurm -- \
            --include-ignored --exact "$name" --test-threads=1 -Z unstable-options --report-time; then
            echo "run-all: host: retry: $name passed alone (it failed beside the others)"
        else
            echo "run-all: host: retry: $name FAILED again, alone"
            rc=1
        fi
    done
    return "$rc"
}
timed "host: real-Slurm suite (Slurm $release, cgroup v1)" host_suite "$@" >"$logs/host.log" 2>&1 &
pid[host]=$!
# The guests run niced: a job here that spins (a test compares a busy task with an idle one) gets
# its CPU first, and the emulated CPUs take what is left. Inside a guest nothing changes: its
# clock, and so its CPU accounting, is the host's wall time.
for suite in "${suites[@]}"; do
    (
        rc=0
        nice -n 10 slurm/vm.sh test "$suite" --no-build "$@" || rc=$?
        slurm/vm.sh down "$suite" || true
        exit "$rc"
    ) >"$logs/$suite.log" 2>&1 &
    pid[$suite]=$!
done
# The Python package (python/ci-test: installed the README's way into a fresh environment, then
# pytest) beside the suites, niced as the guests are: its build takes CPU the suites leave. Left
# out when test name filters are given (they name Rust tests).
python_pid=""
if (($# == 0)); then
    timed "python: pip install ./python, pytest" nice -n 10 python/ci-test >"$logs/python.log" 2>&1 &
    python_pid=$!
else
    skipped+=("the Python package's tests (test name filters given)")
fi
# A line a minute: how many tests each part has passed so far.
progress() {
    local p line=""
    for p in host "${suites[@]}"; do
        kill -0 "${pid[$p]}" 2>/dev/null || continue
        line+="  $p: $(grep -c '^test .* \.\.\. ok' "$logs/$p.log" || true) ok"
    done
    [[ -z $line ]] || echo "run-all: $((SECONDS - started)) s:$line"
}
any_running() {
    local p
    for p in host "${suites[@]}"; do kill -0 "${pid[$p]}" 2>/dev/null && return 0; done
    return 1
}
# Once the host's suite has ended: its exit status, and, where it passed, the command named by
# GPU_TRACKER_AFTER_HOST (.ci/run's benchmarks on this machine's cluster) beside the guests.
host_rc="" after_pid=""
host_ended() {
    [[ -z $host_rc ]] || return 0
    kill -0 "${pid[host]}" 2>/dev/null && return 0
    host_rc=0
    wait "${pid[host]}" || host_rc=$?
    if [[ -n ${GPU_TRACKER_AFTER_HOST:-} ]] && ((host_rc == 0)); then
        echo "run-all: the host's suite passed: $GPU_TRACKER_AFTER_HOST beside the guests (log: $logs/after-host.log)"
        "$GPU_TRACKER_AFTER_HOST" >"$logs/after-host.log" 2>&1 &
        after_pid=$!
    fi
}
ticks=0
while any_running; do
    sleep 5
    host_ended
    if ((++ticks % 12 == 0)); then progress; fi
done
host_ended
for p in host "${suites[@]}"; do
    rc=0
    if [[ $p == host ]]; then rc=$host_rc; else wait "${pid[$p]}" || rc=$?; fi
    echo "================ run-all: the real-Slurm suite, $p (exit $rc): $logs/$p.log"
    cat "$logs/$p.log"
    if ((rc == 0)); then results+=("$p: passed"); else results+=("$p: FAILED"); status=1; fi
done
# Waits for background part PID, prints its log, and counts it as passed or FAILED under LABEL.
collect_part() {
    local label=$1 pid=$2 log=$3 rc=0
    wait "$pid" || rc=$?
    echo "================ run-all: $label (exit $rc): $log"
    cat "$log"
    if ((rc == 0)); then results+=("$label: passed"); else results+=("$label: FAILED"); status=1; fi
}
[[ -z $after_pid ]] || collect_part "$GPU_TRACKER_AFTER_HOST" "$after_pid" "$logs/after-host.log"
[[ -z $python_pid ]] || collect_part "Python package" "$python_pid" "$logs/python.log"
# The slowest tests of each part (a guest's two passes together).
for p in host "${suites[@]}"; do
    echo "run-all: the slowest tests of $p:"
    # awk takes the first 8 and reads on: a `head` that leaves early can kill sort with SIGPIPE,
    # which pipefail and `set -e` make this script's exit status (141, stop 44's CI).
    sed -nE 's/^test (real_slurm::)?([^ ]+) \.\.\. ([a-zA-Z]+) <([0-9.]+)s>$/\4 \2 (\3)/p' "$logs/$p.log" |
        sort -rn | awk 'NR <= 8 { printf "  %6.0f s  %s %s\n", $1, $2, $3 }'
done
for s in "${skipped[@]}"; do results+=("skipped: $s"); done
summary=""
for r in "${results[@]}"; do summary+="${summary:+; }$r"; done
echo "run-all: $summary"
echo "run-all: done in $((SECONDS - started)) s; the parts:"
times_table
exit "$status"

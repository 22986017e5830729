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
# Each part's time is printed at the end (and appended to $GPU_TRACKER_TIMES when set, for
# .ci/run's table).
# Arguments are passed to the test binaries (a name filter, say). GPU_TRACKER_VM_SUITES picks
# the guests ("trixie forky" by default; empty for this machine's Slurm only).
# Needs root for the clusters (it re-runs itself through sudo where there is one).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "run-all: must run as root (no sudo found)" >&2; exit 1; }
    exec sudo --preserve-env=PATH,CARGO_HOME,RUSTUP_HOME,GPU_TRACKER_VM_SUITES,GPU_TRACKER_TIMES bash "$0" "$@"
fi
source tests/times.sh
started=$SECONDS
# The parts of this run alone, whatever the caller collects.
[[ -n ${GPU_TRACKER_TIMES:-} ]] || { GPU_TRACKER_TIMES=$(mktemp); trap 'rm -f "$GPU_TRACKER_TIMES"' EXIT; }
export GPU_TRACKER_TIMES
suites=${GPU_TRACKER_VM_SUITES-trixie forky}
timed "host: Slurm cluster up (install, build, 3 nodes, accounting)" \
    slurm/local-cluster.sh up --nodes 3 --node-local-spool --accounting
# The end-to-end tests are #[ignore]d in a plain `cargo test` (they need this cluster).
echo "run-all: every test, the end-to-end ones on this machine's Slurm $(dpkg-query -W -f='${Version}' slurmd) (cgroup v1)"
status=0 results=()
if timed "host: cargo test, all (real Slurm $(dpkg-query -W -f='${Version}' slurmd | sed 's/-.*//'))" \
    cargo test --workspace --locked --features spank -- --include-ignored "$@"; then
    results+=("host (Slurm 22.05, cgroup v1): passed")
else
    results+=("host (Slurm 22.05, cgroup v1): FAILED")
    status=1
fi
for suite in $suites; do
    echo "run-all: the real-Slurm suite in the $suite guest"
    if slurm/vm.sh test "$suite" "$@"; then results+=("$suite: passed"); else results+=("$suite: FAILED"); status=1; fi
    slurm/vm.sh down "$suite" || true
done
summary=""
for r in "${results[@]}"; do summary+="${summary:+; }$r"; done
echo "run-all: $summary"
echo "run-all: done in $((SECONDS - started)) s; the parts:"
times_table
exit "$status"

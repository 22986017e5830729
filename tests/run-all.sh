#!/usr/bin/env bash
# Runs every test: unit tests, the CLI and GPU tests (fake NVML), and the end-to-end tests of the
# SPANK plugin on three real Slurm releases:
#   - Slurm 22.05 on this machine (cgroup v1): the cluster that slurm/local-cluster.sh up brings
#     up first (it installs Debian's Slurm packages if missing and builds the plugin): three nodes
#     (the tests' jobs run on the first, the only node of the default partition), the last with
#     a node-local spool, and accounting (MariaDB, slurmdbd, EpilogSlurmctld);
#   - Slurm 24.11 (Debian 13) and 26.05 (Debian 14) on cgroup v2, each in a QEMU guest built from
#     Debian's packages by slurm/vm.sh, the suite run twice there: without and with
#     SlurmdParameters=contain_spank.
# Arguments are passed to the test binaries (a name filter, say). GPU_TRACKER_VM_SUITES picks
# the guests ("trixie forky" by default; empty for this machine's Slurm only).
# Needs root for the clusters (it re-runs itself through sudo where there is one).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "run-all: must run as root (no sudo found)" >&2; exit 1; }
    exec sudo --preserve-env=PATH,CARGO_HOME,RUSTUP_HOME,GPU_TRACKER_VM_SUITES bash "$0" "$@"
fi
started=$SECONDS
slurm/local-cluster.sh up --nodes 3 --node-local-spool --accounting
# The end-to-end tests are #[ignore]d in a plain `cargo test` (they need this cluster).
echo "run-all: every test, the end-to-end ones on this machine's Slurm $(dpkg-query -W -f='${Version}' slurmd) (cgroup v1)"
cargo test --workspace --locked --features spank -- --include-ignored "$@"
status=0 results=()
for suite in ${GPU_TRACKER_VM_SUITES-trixie forky}; do
    echo "run-all: the real-Slurm suite in the $suite guest"
    if slurm/vm.sh test "$suite" "$@"; then results+=("$suite: passed"); else results+=("$suite: FAILED"); status=1; fi
    slurm/vm.sh down "$suite" || true
done
summary="host (Slurm 22.05, cgroup v1): passed"
for r in "${results[@]}"; do summary+="; $r"; done
echo "run-all: $summary"
echo "run-all: done in $((SECONDS - started)) s"
exit "$status"

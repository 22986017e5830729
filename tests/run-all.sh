#!/usr/bin/env bash
# Runs every test: unit tests, the CLI and GPU tests (fake NVML), and the end-to-end tests of the
# SPANK plugin on a real one-node Slurm cluster that this script brings up first
# (slurm/local-cluster.sh up: installs Debian's Slurm packages if missing, builds the plugin).
# Needs root for the cluster (it re-runs itself through sudo where there is one).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "run-all: must run as root (no sudo found)" >&2; exit 1; }
    exec sudo --preserve-env=PATH,CARGO_HOME,RUSTUP_HOME bash "$0" "$@"
fi
slurm/local-cluster.sh up
# The end-to-end tests are #[ignore]d in a plain `cargo test` (they need this cluster).
cargo test --workspace --locked --features spank -- --include-ignored "$@"

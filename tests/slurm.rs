//! End-to-end tests of the SPANK plugin on a real Slurm: `slurmctld`, `slurmd` and `munge` from
//! Debian's packages, brought up by `slurm/local-cluster.sh up`, with jobs submitted by the
//! ordinary user `gtuser`. No part of Slurm is mocked; the GPUs are SIMULATED (spare device files
//! in gres.conf, the test fake NVML library behind them).
//!
//! They are `#[ignore]`d in a plain `cargo test` (they need root and the cluster); `tests/run-all.sh`
//! brings the cluster up and runs them with `--include-ignored`.
//!
//! The helpers every test uses are in `slurm/support.rs` (the cluster, its jobs, their output,
//! the report, slurmd) and `slurm/records.rs` (the records in the spool, and the check every
//! final record passes); the tests are in `slurm/`, one module a subject, all under
//! `real_slurm::` (`slurm/mod.rs`): `tests/run-all.sh` runs every other test first with
//! `--skip real_slurm::`, then these on each Slurm release.

mod common;
#[path = "slurm/records.rs"]
mod records;
#[path = "slurm/support.rs"]
mod support;

#[path = "slurm/mod.rs"]
mod real_slurm;

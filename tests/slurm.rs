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
//! final record passes); the tests are in `slurm/`, one module a subject.

mod common;
#[path = "slurm/records.rs"]
mod records;
#[path = "slurm/support.rs"]
mod support;

#[path = "slurm/faults.rs"]
mod faults;
#[path = "slurm/hostile.rs"]
mod hostile;
#[path = "slurm/load.rs"]
mod load;
#[path = "slurm/nodes.rs"]
mod nodes;
#[path = "slurm/nvml.rs"]
mod nvml;
#[path = "slurm/report.rs"]
mod report;
#[path = "slurm/security.rs"]
mod security;
#[path = "slurm/settings.rs"]
mod settings;
#[path = "slurm/story.rs"]
mod story;
#[path = "slurm/summary.rs"]
mod summary;
#[path = "slurm/tracking.rs"]
mod tracking;

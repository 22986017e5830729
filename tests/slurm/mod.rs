//! The real-Slurm tests, one module a subject. Their common prefix `real_slurm::` is how
//! `tests/run-all.sh` tells them from every other test of the workspace.

mod advise;
mod amd;
mod check_node;
mod exporter;
mod faults;
mod gpu_depth;
mod hostile;
mod jobstats;
mod load;
mod mail;
mod mig;
mod needed;
mod nodes;
mod nvml;
mod pressure;
mod report;
mod runs;
mod security;
mod settings;
mod site;
mod story;
mod summary;
mod tracking;

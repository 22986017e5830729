//! A job over time, from its records' timelines and events: phases (between `gpu-tracker mark`
//! marks) with their peaks and means, each GPU's idle time, the events that matter, the CSV and
//! JSON exports of `--timeline` and `--events`, and what `--plot` draws.
//!
//! Times are seconds since the job's start here: the earliest step start of the records read.
//! Per-phase figures come from the timeline's buckets, so a phase's edges are as precise as a
//! bucket is wide (the sampling interval, longer for long steps: see `crate::history`).
//!
//! The rooms, from the ground up: `words.rs` (GPU health events in words), `events.rs` (the
//! job's time zero and its events), `phases.rs` (phases and idle GPUs), `health.rs` (each GPU's
//! Xid errors and slowdowns over time), `export.rs` (the CSV and JSON exports), `plot_data.rs`
//! (the series `--plot` draws), and `command.rs` (a command's story as a record, so that all of
//! the above serve `gpu-tracker -e` too).

mod command;
mod events;
mod export;
mod health;
mod phases;
mod plot_data;
#[cfg(test)]
mod tests_support;
mod words;

pub use command::command_record;
pub use events::{EventFold, JobEvent, MAX_PHASES, events, job_start};
pub use export::{events_csv, events_json, timeline_csv, timeline_json};
pub use phases::{IdleGpu, Phase, PhaseFold, PhaseGpu, idle_gpus, phases};
pub use plot_data::plot_data;

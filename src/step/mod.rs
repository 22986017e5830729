//! Tracking one Slurm job step on one node, as the SPANK plugin drives it inside slurmstepd.
//! Nothing here knows SPANK: the plugin hands over plain facts (ids, pids, exit statuses) and
//! this module does the rest, so it is tested without Slurm.
//!
//! Lifecycle (see `../shared/DESIGN.md` section 2 for why):
//! - [`StepTracker::start`] (from `init_post_opt`, root): checks the spool, writes a first
//!   (incomplete) record, starts the sampler thread.
//! - [`StepTracker::task_started`] (from `task_post_fork`, root): records the task and its
//!   cgroup. Cheap: one small file read and a lock. Once the step's last local task is started
//!   (no task fork can race it then: see [`nvml_gate`]), the sampler thread opens NVML on a
//!   thread of its own, if the step has GPUs, and marks the descriptors NVML opened
//!   close-on-exec.
//! - [`StepTracker::task_ended`] (from `task_exit`, root): the task's exit status and the final
//!   counters of its cgroup, and of the step's cgroup after the last task (Slurm removes the
//!   cgroups before `exit`).
//! - [`StepTracker::finish`] (from `exit`): stops the thread, waits for it at most
//!   [`FINISH_DEADLINE`], writes the final record. A thread that does not stop in time (an NVML
//!   call that never returns) is left behind: the record is built from the figures of its last
//!   sample and says so.
//!
//! After a sample, at most once per `live_interval_seconds`, the thread rewrites the step's live
//! state ([`live`], `live_writer/`) for `gpu-tracker-exporter`; `finish` removes it.
//!
//! The thread starts no process (slurmstepd reaps any child with `wait3(-1)`), takes no lock a
//! forked task could need, and rewrites the record (marked incomplete) every checkpoint interval.
//! Its cost is bounded: each sample reads a bounded number of processes ([`procs`]), and the
//! interval lengthens while samples cost more than a tenth of it ([`crate::sampler::pace`]).

mod build;
mod cgroups;
pub mod live;
mod live_writer;
pub(crate) mod nvml_gate;
mod own_dir;
pub mod procs;
pub mod record;
pub mod run;
pub(crate) mod safe_read;
mod sample;
mod setup;
pub mod spool;
mod state;
mod thread;
mod tracker;

pub use cgroups::step_cgroup_of;
pub use sample::map_allocated;
pub use setup::{LiveSetup, StepSetup};
pub use thread::WARN_LINES;
pub use tracker::{FINISH_DEADLINE, StepTracker};

/// Now, in Unix seconds (kept here for the binaries: [`crate::clock::unix_now`]).
pub use crate::clock::unix_now;

//! gpu-tracker: exact, cheap resource tracking of a command, a block of code, or (through the
//! SPANK plugin) every step of a Slurm job: peak RAM, CPU utilization, peak GPU memory, GPU
//! utilization and time.
//!
//! The library holds everything that is not the plugin's FFI, floor by floor (`docs/LAYOUT.md`):
//! the kernel's readers (`proc`, `cgroup`, the GPU sources in `gpu`, `sys`), the sampler and its
//! result (`sampler`, `usage`, `history`), a command's life under tracking (`launch`), a Slurm
//! step's tracker and its records (`step`), the settings (`config`), Slurm's commands (`slurm`),
//! the reports (`report`), the advice at submission (`advise`) and the exporter (`exporter`).
//! The three programs, the plugin and the Python package are thin layers over it.
//!
//! Track a block of code:
//!
//! ```
//! use gpu_tracker::{Tracker, TrackerOptions};
//!
//! let tracker = Tracker::start(TrackerOptions::default().sleep_time(0.1)).unwrap();
//! let v: Vec<u8> = vec![1; 50_000_000];
//! assert_eq!(v.len(), 50_000_000);
//! let usage = tracker.stop().unwrap();
//! // The peak is the kernel's high-water mark: it includes the 50 MB buffer.
//! assert!(usage.max_ram.main.total_rss > 0.05);
//! println!("{usage}");
//! ```
#![warn(missing_docs)]

pub(crate) mod advise;
pub mod cgroup;
pub mod check;
pub mod cli;
pub mod clock;
pub mod config;
pub mod exporter;
#[doc(hidden)]
pub mod fuzzing;
pub mod gpu;
pub mod gres;
pub mod history;
pub mod launch;
pub mod mail;
pub mod proc;
pub mod report;
pub mod sampler;
pub(crate) mod shell;
pub(crate) mod slurm;
#[cfg(feature = "spank")]
mod spank;
pub mod step;
pub mod sys;
pub(crate) mod text;
pub mod tracker;
pub mod tracking_file;
pub(crate) mod trust;
pub mod units;
pub mod usage;

pub use tracker::{Tracker, TrackerGuard, TrackerOptions};
pub use usage::ResourceUsage;

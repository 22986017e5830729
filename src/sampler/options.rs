//! What a sampler is told: its settings, what it tracks, and how the command ended.

use std::path::PathBuf;
use std::time::Duration;

use crate::cgroup::Cgroup;
use crate::sys::Rusage;
use crate::units::Units;

/// How the private/shared split of each process is read (the plugin's `memory_detail`
/// setting, `gpu-tracker --cheap-memory-split`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryDetail {
    /// `/proc/<pid>/smaps_rollup`: the real split, as `gpu_tracker` reports it. Walks the
    /// process's page tables, so it costs more on very large processes.
    SmapsRollup,
    /// `/proc/<pid>/statm` only (the setting's name is `status`): anonymous memory as
    /// private, file and shmem pages as shared, the split `status` shows as `RssAnon` and
    /// `RssFile + RssShmem`. Cheap at any size; the default inside Slurm.
    Status,
}

impl MemoryDetail {
    /// The name reports use (`tracking.memory_detail`).
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryDetail::SmapsRollup => "smaps_rollup",
            MemoryDetail::Status => "status",
        }
    }
}

/// Settings of a sampler.
#[derive(Debug, Clone)]
pub struct SamplerOptions {
    /// Time between samples.
    pub interval: Duration,
    /// How memory is split into private and shared.
    pub memory_detail: MemoryDetail,
    /// Denominator of CPU hardware percentages; all online CPUs when `None`.
    pub n_expected_cores: Option<u32>,
    /// GPUs counted in `gpu_utilization`; all when `None`.
    pub gpu_uuids: Option<Vec<String>>,
    /// Units of the result.
    pub units: Units,
    /// Where procfs is.
    pub proc_root: PathBuf,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            interval: Duration::from_secs(1),
            memory_detail: MemoryDetail::SmapsRollup,
            n_expected_cores: None,
            gpu_uuids: None,
            units: Units::default(),
            proc_root: PathBuf::from(crate::proc::DEFAULT_ROOT),
        }
    }
}

/// What is tracked.
#[derive(Debug, Clone)]
pub struct Target {
    /// The main process.
    pub main: u32,
    /// Processes whose descendants are tracked: the main process, or the tracker itself when it
    /// is the command's parent and subreaper (then orphans stay in the tree).
    pub tree_roots: Vec<u32>,
    /// Pids never counted (the tracker, when it is a tree root).
    pub exclude: Vec<u32>,
    /// A cgroup holding exactly the tracked processes: exact combined peak.
    pub cgroup: Option<Cgroup>,
    /// The sampler runs inside the main process (library API): its own thread's CPU time and
    /// the thread itself are not counted, and CPU time before the start is not counted.
    pub in_process: bool,
}

/// How the tracked command ended, for the final figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct EndInfo {
    /// `wait4` usage of the main process (its own plus its waited-for descendants').
    pub main: Option<Rusage>,
    /// The tracker's usage of all its waited-for children (`RUSAGE_CHILDREN`).
    pub children: Option<Rusage>,
    /// The main process's own CPU seconds at its end (read from its zombie before reaping).
    pub main_own_cpu: Option<f64>,
}

//! A running step's live state: its latest figures in a small file that `gpu-tracker-exporter`
//! serves to Prometheus (docs/EXPORTER.md). The plugin rewrites it after a sample, at most once
//! per `live_interval_seconds` (`live_writer/`), and removes it when the step ends.
//!
//! The file is a documented wire format, like the record: `schema` and `schema_version` say
//! what it is; fields never change meaning, new ones are added. It holds numbers, ids and names
//! Slurm gave (cluster, user, node): never a command line, a path or the environment. Every
//! string is cut to [`MAX_NAME_CHARS`] and at most [`MAX_GPUS`] GPUs are listed, so a file
//! stays far below [`MAX_FILE_BYTES`].
//!
//! Building it costs no reading: it is what the sample just took, serialized.

use serde::{Deserialize, Serialize};

use super::state::Acc;
use crate::cgroup::pressure::{PressureTotals, Stall, Unavailable};

/// What the file is.
pub const SCHEMA: &str = "gpu-tracker/live";
/// The version of its format written now. A reader skips a file of a later version.
pub const SCHEMA_VERSION: u32 = 1;
/// Largest live state file a reader takes; a real one is 1 to 40 KiB.
pub const MAX_FILE_BYTES: u64 = 64 << 10;
/// Most characters of a name (cluster, user, node, step, UUID) in the file.
pub const MAX_NAME_CHARS: usize = 128;
/// Most GPUs of one step listed (a node's GPUs and MIG instances are fewer).
pub const MAX_GPUS: usize = 128;

/// Seconds after its `written_at` when a file is stale: 3 of its intervals and 30 s (its
/// slurmstepd was killed, or is stuck). The interval counts up to a week.
pub fn stale_after(interval_seconds: f64) -> f64 {
    3.0 * interval_seconds.clamp(0.0, 7.0 * 86400.0) + 30.0
}

/// A running step's latest figures on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveState {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// [`SCHEMA_VERSION`] when written.
    pub schema_version: u32,
    /// The cluster's name (slurm.conf's `ClusterName`; empty when unknown).
    pub cluster: String,
    /// Slurm's job id.
    pub job_id: u32,
    /// The step: `batch`, `extern`, `interactive` or its number.
    pub step: String,
    /// The job's user name (empty when it could not be looked up).
    pub user: String,
    /// The job's user id.
    pub uid: u32,
    /// Slurm's node name, as the records use it.
    pub node: String,
    /// The pid of the step's slurmstepd, which writes the file.
    pub stepd_pid: u32,
    /// When the file was written, Unix seconds.
    pub written_at: f64,
    /// When tracking of the step began, Unix seconds.
    pub started_at: f64,
    /// Most seconds until the next rewrite while the step runs: `live_interval_seconds`, or the
    /// sampling interval when that is longer. A file much older than this is stale.
    pub interval_seconds: f64,
    /// CPUs allocated to the job on this node (Slurm's).
    pub alloc_cpus: Option<u32>,
    /// The step's memory.
    pub memory: LiveMemory,
    /// The step's CPU use.
    pub cpu: LiveCpu,
    /// The step cgroup's pressure stall counters (cgroup v2 PSI), or why the kernel keeps
    /// none. `None`: the step has no cgroup, none was read yet, or an earlier build wrote the
    /// file.
    #[serde(default)]
    pub pressure: Option<LivePressure>,
    /// The step's GPUs on this node (a lost GPU is left out).
    pub gpus: Vec<LiveGpu>,
}

/// The step's memory, bytes, as of the latest sample.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveMemory {
    /// In use now: the step cgroup's charge (page cache included), else its processes' sum.
    pub current_bytes: Option<u64>,
    /// The peak so far, as the record has it.
    pub peak_bytes: Option<u64>,
    /// The step cgroup's limit, else the job's; `None`: no limit.
    pub limit_bytes: Option<u64>,
}

/// The step's CPU use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveCpu {
    /// CPU seconds of the step's tasks so far.
    pub seconds: Option<f64>,
    /// Cores busy over the latest interval.
    pub cores_busy: Option<f64>,
}

/// The step cgroup's pressure stall counters at the latest sample: each resource's time in
/// which some (or all) of the step's runnable tasks waited for it, since the cgroup was made
/// with the step. Either `unavailable` says why there are none, or all three resources are
/// given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivePressure {
    /// Why the kernel keeps no counters for the step; `None` when they were read.
    #[serde(default)]
    pub unavailable: Option<PressureMissing>,
    /// CPU: runnable tasks that waited for a core.
    #[serde(default)]
    pub cpu: Option<LiveStall>,
    /// Memory: tasks stalled in reclaim, refaults or swap.
    #[serde(default)]
    pub memory: Option<LiveStall>,
    /// I/O: tasks waiting for block I/O.
    #[serde(default)]
    pub io: Option<LiveStall>,
}

/// One resource's stall counters as the kernel keeps them (`total=`), microseconds: integers,
/// so that they stay exact and no file can make one negative or not a number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveStall {
    /// Time in which at least one task waited.
    pub some_us: u64,
    /// Time in which every runnable task waited; `None` where the kernel gives no `full` line
    /// (CPU before Linux 5.13).
    #[serde(default)]
    pub full_us: Option<u64>,
}

/// Why a step has no pressure counters, as the file names it (`cgroup_v1`, `psi_off`,
/// `unreadable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PressureMissing {
    /// cgroup v1 keeps no pressure per cgroup.
    CgroupV1,
    /// The kernel's pressure stall information is off (`psi=0`, `cgroup_disable=pressure`).
    PsiOff,
    /// The files could not be read, or did not read as the kernel writes them.
    Unreadable,
    /// A reason this build does not know (a later build's), or a file that gives neither a
    /// reason nor all three resources.
    #[serde(other)]
    Unknown,
}

impl PressureMissing {
    /// Its name in the file, and the exporter's `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            PressureMissing::CgroupV1 => "cgroup_v1",
            PressureMissing::PsiOff => "psi_off",
            PressureMissing::Unreadable => "unreadable",
            PressureMissing::Unknown => "unknown",
        }
    }
}

impl From<Stall> for LiveStall {
    fn from(s: Stall) -> LiveStall {
        LiveStall {
            some_us: s.some_us,
            full_us: s.full_us,
        }
    }
}

impl LivePressure {
    /// The counters of a reading, or why there are none.
    pub fn of(r: &Result<PressureTotals, Unavailable>) -> LivePressure {
        match r {
            Ok(t) => LivePressure {
                unavailable: None,
                cpu: Some(t.cpu.into()),
                memory: Some(t.memory.into()),
                io: Some(t.io.into()),
            },
            Err(e) => LivePressure {
                unavailable: Some(match e {
                    Unavailable::CgroupV1 => PressureMissing::CgroupV1,
                    Unavailable::Off(_) => PressureMissing::PsiOff,
                    Unavailable::Unreadable(_) => PressureMissing::Unreadable,
                }),
                ..LivePressure::default()
            },
        }
    }

    /// The counters in the order of [`crate::cgroup::pressure::RESOURCES`], or why there are
    /// none. A file that names a reason, or lacks a resource, has none.
    pub fn counters(&self) -> Result<[LiveStall; 3], PressureMissing> {
        if let Some(why) = self.unavailable {
            return Err(why);
        }
        match (self.cpu, self.memory, self.io) {
            (Some(c), Some(m), Some(i)) => Ok([c, m, i]),
            _ => Err(PressureMissing::Unknown),
        }
    }
}

/// One GPU of the step, as of its latest reading.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveGpu {
    /// `nvidia` or `amd`; states of earlier builds lack it (NVIDIA's).
    #[serde(default)]
    pub vendor: crate::gpu::Vendor,
    /// Slurm's index of the GPU (NVML's where Slurm's is unknown).
    pub index: u32,
    /// `GPU-...` or `MIG-...` UUID.
    pub uuid: String,
    /// Memory used by the step's processes.
    pub memory_used_bytes: Option<u64>,
    /// The GPU's (or MIG instance's) memory size.
    pub memory_total_bytes: u64,
    /// Utilization at the latest reading, percent.
    pub utilization_percent: Option<f64>,
    /// SM activity (GPM, Hopper and newer) at the latest reading, percent, where measured.
    #[serde(default)]
    pub sm_active_percent: Option<f64>,
    /// The step's processes' CU occupancy (AMD) at the latest reading, percent, where
    /// measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cu_occupancy_percent: Option<f64>,
    /// Energy used since the step's first reading of it, joules.
    #[serde(default)]
    pub energy_joules: Option<f64>,
    /// Power over the latest sampling interval (from the energy counter), watts; states of
    /// earlier builds lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_watts: Option<f64>,
    /// The GPU's temperature at the latest reading, degrees Celsius, where the source gives it;
    /// states of earlier builds lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_celsius: Option<u32>,
}

/// Who the step is: fixed for its life, taken once when it starts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Identity {
    /// The cluster's name.
    pub cluster: String,
    /// Slurm's job id.
    pub job_id: u32,
    /// The step's name.
    pub step: String,
    /// The user's name.
    pub user: String,
    /// The user's id.
    pub uid: u32,
    /// Slurm's node name.
    pub node: String,
    /// slurmstepd's pid.
    pub stepd_pid: u32,
    /// When tracking began, Unix seconds.
    pub started_at: f64,
    /// CPUs allocated on this node.
    pub alloc_cpus: Option<u32>,
}

impl Identity {
    /// The file's name: `<cluster>.<jobid>.<step>.<node>.json`, each part cut to letters,
    /// digits, `-`, `_` and `.` (the cluster's as the spool names its directory).
    pub fn file_name(&self) -> String {
        file_name(&self.cluster, self.job_id, &self.step, &self.node)
    }
}

impl LiveState {
    /// The name of the file that holds this state, as its writer named it
    /// ([`Identity::file_name`]).
    pub fn file_name(&self) -> String {
        file_name(&self.cluster, self.job_id, &self.step, &self.node)
    }
}

fn file_name(cluster: &str, job_id: u32, step: &str, node: &str) -> String {
    format!(
        "{}.{job_id}.{}.{}.json",
        crate::config::slurmconf::cluster_dir_name(Some(cluster)),
        super::record::file_safe(step),
        super::record::file_safe(node)
    )
}

fn cut(s: &str) -> String {
    s.chars().take(MAX_NAME_CHARS).collect()
}

/// The live state after a sample: `acc` as the sampler left it, written at `now` (Unix
/// seconds), rewritten at most every `interval_seconds`.
pub(super) fn state_of(id: &Identity, acc: &Acc, interval_seconds: f64, now: f64) -> LiveState {
    let l = &acc.latest;
    // The accumulator's devices are the step's, in the order of `gpu_devices`.
    let gpus = acc
        .gpu
        .latest()
        .into_iter()
        .take(MAX_GPUS)
        .map(|g| {
            let slurm = acc
                .gpu_devices
                .iter()
                .find(|(_, d)| d.uuid == g.uuid)
                .and_then(|(a, _)| *a);
            LiveGpu {
                vendor: g.vendor,
                index: slurm.unwrap_or(g.index),
                uuid: cut(&g.uuid),
                memory_used_bytes: g.tracked_memory,
                memory_total_bytes: g.memory_total,
                utilization_percent: g.utilization_percent,
                sm_active_percent: g.sm_active_percent,
                cu_occupancy_percent: g.cu_occupancy_percent,
                energy_joules: g.energy_joules,
                power_watts: g.power_watts,
                temperature_celsius: g.temperature_celsius,
            }
        })
        .collect();
    LiveState {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        cluster: cut(&id.cluster),
        job_id: id.job_id,
        step: cut(&id.step),
        user: cut(&id.user),
        uid: id.uid,
        node: cut(&id.node),
        stepd_pid: id.stepd_pid,
        written_at: now,
        started_at: id.started_at,
        interval_seconds: interval_seconds.max(acc.pace.current.as_secs_f64()),
        alloc_cpus: id.alloc_cpus,
        memory: LiveMemory {
            current_bytes: l.memory_bytes,
            peak_bytes: l.memory_peak_bytes,
            limit_bytes: l.memory_limit_bytes,
        },
        cpu: LiveCpu {
            seconds: l.cpu_seconds,
            cores_busy: l.cores_busy,
        },
        pressure: l.pressure.as_ref().map(LivePressure::of),
        gpus,
    }
}

/// What a reader makes of a file's bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// A live state of this version (or an earlier one).
    State(Box<LiveState>),
    /// Valid, but of a later version than this build reads.
    Newer(u32),
    /// Not a live state: cut short (written half), not JSON, or another schema.
    Bad(String),
}

/// Parses a live state file (pure).
pub fn parse(bytes: &[u8]) -> Parsed {
    #[derive(Deserialize)]
    struct Head {
        schema: String,
        schema_version: u32,
    }
    match serde_json::from_slice::<LiveState>(bytes) {
        Ok(s) if s.schema == SCHEMA && s.schema_version <= SCHEMA_VERSION => {
            Parsed::State(Box::new(s))
        }
        Ok(s) if s.schema == SCHEMA => Parsed::Newer(s.schema_version),
        Ok(s) => Parsed::Bad(format!("schema {:?}, not {SCHEMA}", cut(&s.schema))),
        // A later version may have changed what this build expects: its head says so.
        Err(e) => match serde_json::from_slice::<Head>(bytes) {
            Ok(h) if h.schema == SCHEMA && h.schema_version > SCHEMA_VERSION => {
                Parsed::Newer(h.schema_version)
            }
            _ => Parsed::Bad(e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests;

//! The record of one job step on one node: what the plugin writes to
//! `<spool>/<jobid>/<node>.<step>.json` and what reports read back. The format is versioned
//! (`schema_version`) and documented field by field in `slurm/RECORD.md`; a reader refuses a
//! version newer than it knows.
//!
//! Units are fixed: bytes, seconds, percent, joules. Times are RFC 3339 with the node's offset.

use serde::{Deserialize, Serialize};

/// Value of [`StepRecord::schema`].
pub const SCHEMA: &str = "gpu-tracker/step";
/// Value of [`StepRecord::schema_version`] written by this build.
pub const SCHEMA_VERSION: u32 = 2;

/// One job step on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Format version; readers refuse versions newer than theirs.
    pub schema_version: u32,
    /// `false` while the step runs (a checkpoint) or when it never finished (slurmstepd killed).
    pub complete: bool,
    /// When this file was written.
    pub written_at: String,
    /// gpu-tracker version that wrote it.
    pub tracker_version: String,
    /// The job.
    pub job: JobInfo,
    /// The step on this node.
    pub step: StepInfo,
    /// Every task of the step on this node.
    pub tasks: Vec<TaskRecord>,
    /// Memory of the whole step on this node.
    pub memory: StepMemory,
    /// CPU of the whole step on this node.
    pub cpu: StepCpu,
    /// The GPUs allocated to the step on this node.
    pub gpus: Vec<StepGpu>,
    /// How the figures were taken.
    pub sampler: SamplerStats,
    /// The step over time, in bounded space (see `crate::history`). Added without a version change: records of earlier builds lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<crate::history::Timeline>,
    /// What happened when, oldest first per kind of source. Added without a version change: records of earlier builds lack it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<crate::history::Event>,
    /// Events not kept (beyond the bounds). Added without a version change: records of earlier builds lack it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub events_dropped: u64,
    /// The step's pressure stall figures (cgroup v2), or why there are none. Added without a
    /// version change: records of earlier builds lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<crate::history::pressure::StepPressure>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The job a step belongs to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    /// Slurm job id.
    pub id: u32,
    /// Array job id (the `%A` of `<A>_<a>`), when the job is an array task.
    pub array_job_id: Option<u32>,
    /// Array task id, when the job is an array task.
    pub array_task_id: Option<u32>,
    /// User name (empty when it could not be looked up).
    pub user: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Nodes in the job: `SLURM_JOB_NUM_NODES` as Slurm set it for the batch step; in other
    /// steps as srun saw it. (Version 1 wrote the step's node count here, and 0 for the batch
    /// step.)
    pub nodes: Option<u32>,
    /// The job's nodes in Slurm's hostlist format (`SLURM_JOB_NODELIST`, read like `nodes`;
    /// at most 4 KiB of hostlist characters). Added in version 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_list: Option<String>,
    /// Tasks of the job (`--ntasks`), known in the batch step only. Added in version 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u32>,
    /// Memory allocated to the job on this node, bytes (`None`: no limit set).
    pub alloc_memory_bytes: Option<u64>,
    /// Cores allocated to the job on this node, in Slurm's list format.
    pub alloc_cores: Option<String>,
    /// Job name (`--job-name`), control characters removed. Added in 0.1 without a version
    /// change: older records lack it.
    #[serde(default)]
    pub name: Option<String>,
    /// The cluster's name (slurm.conf's `ClusterName`). Added in 0.2 without a version change:
    /// older records lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The token the plugin gave the job at submission, which tells two jobs of one user with
    /// the same id apart (see `instance.json`). Added in 0.2; older records lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_token: Option<String>,
    /// The run of the job this step belongs to (which run, its start and its time limit), from
    /// the run file the plugin's `job_prolog` wrote ([`crate::step::run`]). Absent where there
    /// was none (slurmd started before the plugin was installed), and in records of earlier
    /// builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<crate::step::run::RunInfo>,
}

/// The step itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepInfo {
    /// `batch`, `extern`, `interactive`, or the step number.
    pub id: String,
    /// `batch`, `srun`, `interactive` or `extern`.
    pub kind: String,
    /// Slurm node name (several slurmd can share one host).
    pub node: String,
    /// Host name of the machine.
    pub hostname: String,
    /// Index of this node in the step's node list.
    pub node_index: Option<u32>,
    /// Nodes the step runs on (1 for the batch and extern steps). Added in version 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// Step start (when tracking began, before the first task).
    pub start: String,
    /// Step end on this node; `None` while it runs.
    pub end: Option<String>,
    /// Seconds from start to end (or to this checkpoint).
    pub elapsed_seconds: f64,
    /// CPUs allocated to the job on this node (Slurm's `S_JOB_NCPUS`).
    pub alloc_cpus: Option<u32>,
    /// Cores allocated to the step on this node, in Slurm's list format.
    pub alloc_cores: Option<String>,
    /// Memory allocated to the step on this node, bytes.
    pub alloc_memory_bytes: Option<u64>,
    /// GPUs allocated, as Slurm's indices (`SLURM_STEP_GPUS` / `SLURM_JOB_GPUS`).
    pub alloc_gpus: Vec<u32>,
    /// Shards of a GPU the step holds on this node (Slurm's shard GRES, `SLURM_SHARDS_ON_NODE`).
    /// Absent without shards, and in records of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_shards: Option<u32>,
    /// Whether the step's GPU is shared through Slurm's MPS GRES.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gpu_mps: bool,
    /// Tasks of the step on this node.
    pub local_tasks: Option<u32>,
    /// Tasks of the step over all nodes (1 for the batch step: the script; version 1 wrote the
    /// job's task count there).
    pub total_tasks: Option<u32>,
    /// The step's command line (at most 200 characters, control characters removed).
    #[serde(default)]
    pub command: Option<String>,
}

/// One task: the process slurmstepd started, and its descendants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// Task id on this node.
    pub local_id: Option<u32>,
    /// Task id over the step (`SLURM_PROCID`).
    pub global_id: Option<u32>,
    /// Pid of the task's first process.
    pub pid: u32,
    /// Whether the task has ended.
    pub ended: bool,
    /// Exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Signal that killed it, when one did.
    pub signal: Option<i32>,
    /// Whether it dumped core.
    pub core_dumped: bool,
    /// Peak memory of the task, bytes: the larger of `cgroup_peak_bytes` (exact, catches every
    /// spike, includes page cache) and `sampled_peak_rss_bytes`.
    pub peak_memory_bytes: u64,
    /// `cgroup` or `sampled`: which of the two `peak_memory_bytes` is.
    pub peak_source: String,
    /// Peak resident memory of the task's processes: the largest sampled sum, raised to the
    /// largest per-process high-water mark (`VmHWM`) seen. No page cache; a process that lived
    /// between two samples is not in it.
    pub sampled_peak_rss_bytes: u64,
    /// Peak of the task's own cgroup (includes page cache), where Slurm made one.
    pub cgroup_peak_bytes: Option<u64>,
    /// Processes of the task killed by the OOM killer, where the task's cgroup says.
    pub oom_kills: Option<u64>,
    /// CPU seconds used by the task's processes.
    pub cpu_seconds: f64,
    /// `cgroup` (exact, from the task's cgroup) or `sampled` (last reading of its processes).
    pub cpu_source: String,
    /// Most threads at once, over the task's processes that a sample read; `None` when no
    /// sample saw the task (it ended between two samples) or read one of its processes (a step
    /// of many processes is read in turns, at most 500 a sample). Version 1 wrote 0 for that.
    pub max_threads: Option<u64>,
    /// Most processes at once; `None` like `max_threads`.
    pub max_processes: Option<u64>,
}

/// Memory of the step on this node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepMemory {
    /// Peak memory of the step: the cgroup's peak counter when there is one (catches every
    /// spike), else the largest sampled sum of the tasks' resident memory.
    pub peak_bytes: u64,
    /// Where `peak_bytes` comes from: the counter's file name, or `sampled`.
    pub peak_source: String,
    /// Whether `peak_bytes` counts page cache (cgroup counters do).
    pub peak_includes_page_cache: bool,
    /// Largest sampled sum of the tasks' resident memory (no page cache), bytes.
    pub sampled_peak_rss_bytes: u64,
    /// Memory limit of the step's cgroup, bytes (`None`: unlimited or unknown).
    pub limit_bytes: Option<u64>,
    /// Processes of the step killed by the kernel's OOM killer (`None`: the kernel does not say).
    pub oom_kills: Option<u64>,
    /// Times the memory limit was hit.
    pub limit_hits: Option<u64>,
    /// The step's cgroup directory (memory controller), when found.
    pub cgroup: Option<String>,
    /// `v1` or `v2`.
    pub cgroup_version: Option<String>,
    /// Peak memory of the whole job on this node (its cgroup, every step together), read when
    /// this step's last task ended, bytes. The figure `--mem` is compared with.
    #[serde(default)]
    pub job_peak_bytes: Option<u64>,
    /// Memory limit of the job's cgroup on this node, bytes.
    #[serde(default)]
    pub job_limit_bytes: Option<u64>,
    /// Why a figure below the step's peak is larger than it, when one is: a task's sampled
    /// resident memory counts shared file pages (libraries, files read earlier) that the kernel
    /// charged to the cgroup that first touched them, not to this step. Added in version 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_note: Option<String>,
    /// Peak of the step's memory the kernel could not reclaim (its cgroup's charge less file
    /// pages on the file LRU lists and, on v2, reclaimable slab): anonymous memory, shmem and
    /// tmpfs such as `/dev/shm`, unevictable and kernel memory. What the step needed; bytes.
    /// Absent without the cgroup's `memory.stat`, and in records of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needed_peak_bytes: Option<u64>,
    /// How `needed_peak_bytes` was found: `cgroup_peak` (no reading saw reclaimable memory:
    /// the charged peak, exact), `cgroup_peak_less_reclaimable` (the charged peak less the
    /// reclaimable memory read around its last rise: catches a spike between samples) or
    /// `sampled` (the largest sampled figure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needed_peak_source: Option<String>,
    /// The same for the job's cgroup on this node (every step together), over the readings
    /// taken while this step's tasks ran and when its last task ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_needed_peak_bytes: Option<u64>,
    /// How `job_needed_peak_bytes` was found, as `needed_peak_source`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_needed_peak_source: Option<String>,
}

/// CPU of the step on this node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepCpu {
    /// CPU seconds used by the step's processes.
    pub seconds: f64,
    /// `cgroup` (the step cgroup's counter) or `sampled` (sum over the tasks).
    pub source: String,
    /// Cores the utilization is measured against (the allocation on this node).
    pub alloc_cpus: u32,
    /// CPU seconds / (elapsed × `alloc_cpus`), percent.
    pub utilization_percent: f64,
    /// Mean cores busy (CPU seconds / elapsed).
    pub mean_cores: f64,
    /// Most cores busy over one sampling interval.
    pub max_cores: f64,
}

/// One GPU allocated to the step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepGpu {
    /// Slurm's index of the GPU (per gres.conf order), when the allocation named it.
    pub slurm_index: Option<u32>,
    /// `nvidia` or `amd`: which source read the GPU. Records of earlier builds lack it: they
    /// are NVIDIA's.
    #[serde(default)]
    pub vendor: crate::gpu::Vendor,
    /// NVML's index; for an AMD GPU its position among the KFD topology's GPUs.
    pub nvml_index: u32,
    /// Minor number of the device file: `/dev/nvidia<minor>`, or for an AMD GPU its render
    /// node `/dev/dri/renderD<minor>`, the file Slurm allocated.
    pub minor: Option<u32>,
    /// PCI address, where the source gives it. Absent in records of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// UUID.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Memory size, bytes.
    pub memory_total_bytes: u64,
    /// Peak memory in use on the device by anyone, bytes (sampled).
    pub peak_device_memory_bytes: u64,
    /// Peak memory of the step's processes on the device, bytes (sampled).
    pub peak_step_memory_bytes: u64,
    /// Peak memory of the job's processes on the device, bytes (sampled): the step's and the
    /// job's other steps' on this node at the same reading. `None` where the job's processes
    /// could not be told apart (no job cgroup) and in records of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_job_memory_bytes: Option<u64>,
    /// Mean utilization, percent; `None` where the device does not report it (MIG).
    pub mean_utilization_percent: Option<f64>,
    /// Highest utilization seen, percent.
    pub max_utilization_percent: Option<f64>,
    /// Energy used by the device during the step, joules.
    pub energy_joules: Option<f64>,
    /// Whether the device fell off the bus during the step.
    pub lost: bool,
    /// Its idle time. Added without a version change: records of earlier builds lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<crate::history::GpuIdle>,
    /// The MIG instance, when the GPU is one: `uuid` is then the instance's `MIG-` UUID and the
    /// memory figures are the instance's. Absent otherwise, and in records of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<crate::gpu::MigInfo>,
    /// Why the device-wide figures are not the step's alone, when they are not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<crate::gpu::Shared>,
    /// SM activity, clock event reasons, Xid and ECC errors, and why a figure has no value.
    #[serde(flatten)]
    pub depth: crate::gpu::figures::GpuDepth,
}

/// How the figures were taken.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplerStats {
    /// Seconds between samples.
    pub interval_seconds: f64,
    /// Samples taken.
    pub samples: u64,
    /// Mean time one sample took, microseconds.
    pub mean_sample_microseconds: f64,
    /// Longest sample, microseconds.
    pub max_sample_microseconds: f64,
    /// CPU seconds the sampler thread used.
    pub cpu_seconds: f64,
    /// `nvml`, `amd` (the kernel's amdgpu and KFD files), `nvml+amd` (a node with both), or
    /// `none` (no GPUs allocated, or none could be read: see `notes`).
    pub gpu_source: String,
    /// How Slurm's GPU indices were mapped to devices: `gres_conf_files`, `autodetect_nvml`,
    /// `autodetect_nvidia`, or `index_is_minor` (the order was not known; see `notes`).
    /// Absent when no GPU was mapped, and in records of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mapping: Option<String>,
    /// The longest interval used, seconds: `interval_seconds` unless samples cost more than
    /// 10 % of the interval and it was lengthened (at most 8 times, at most 60 s). The fields
    /// below up to `nvml_cloexec_descriptors` are absent in records of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_max_seconds: Option<f64>,
    /// The interval in use when the record was written, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_last_seconds: Option<f64>,
    /// Samples that cost more than 10 % of the interval in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overruns: Option<u64>,
    /// Times the interval was lengthened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoffs: Option<u64>,
    /// Samples that read only some of the step's processes (at most 500 per sample; the
    /// others at the next samples, in turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_samples: Option<u64>,
    /// When the last sample was taken: the sampled and GPU figures end there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sample: Option<String>,
    /// In a final record: whether the sampler thread stopped when the step ended. `false`: it
    /// did not within 5 s (a driver call that never returned, say) and was left behind; the
    /// sampled and GPU figures end at `last_sample`, the cgroup figures are final.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<bool>,
    /// When NVML was opened: `after_last_task` (every local task had been started) or
    /// `after_tasks_released` (the task count was unknown; every task had left slurmstepd).
    /// Absent when it was not opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_opened: Option<String>,
    /// Descriptors NVML left open without close-on-exec, which were marked close-on-exec (so
    /// no process slurmstepd starts later inherits them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_cloexec_descriptors: Option<u64>,
    /// Things a reader should know (estimates, failures).
    pub notes: Vec<String>,
    /// What went wrong while recording, each also in `notes`: NVML could not be opened, a GPU
    /// was lost or does not report a figure, the step's cgroup could not be read, a checkpoint
    /// was not written, the sampler failed or did not stop. The plugin logs them in one line
    /// when the step ends. Absent when nothing went wrong, and in records of earlier builds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<String>,
}

/// Why a record file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Not JSON, or not a step record.
    #[error("not a gpu-tracker step record: {0}")]
    Corrupt(String),
    /// Written by a newer gpu-tracker.
    #[error(
        "record format version {0} is newer than this gpu-tracker understands ({SCHEMA_VERSION})"
    )]
    FutureVersion(u32),
}

impl StepRecord {
    /// Parses a record, checking the schema name and version first so that a newer format gets
    /// its own error rather than a confusing field error.
    pub fn from_json(text: &str) -> Result<StepRecord, RecordError> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| RecordError::Corrupt(e.to_string()))?;
        if v.get("schema").and_then(|s| s.as_str()) != Some(SCHEMA) {
            return Err(RecordError::Corrupt(format!(
                "no \"schema\": \"{SCHEMA}\" field"
            )));
        }
        let version = v
            .get("schema_version")
            .and_then(|s| s.as_u64())
            .ok_or_else(|| RecordError::Corrupt("no schema_version".into()))?;
        if version > u64::from(SCHEMA_VERSION) {
            return Err(RecordError::FutureVersion(
                u32::try_from(version).unwrap_or(u32::MAX),
            ));
        }
        let mut r: StepRecord =
            serde_json::from_value(v).map_err(|e| RecordError::Corrupt(e.to_string()))?;
        if version < 2 {
            r.upgrade_from_v1();
        }
        Ok(r)
    }

    /// Reads a version 1 record's fields with version 2's meaning: there `job.nodes` was the
    /// step's node count (0 in the batch step), the batch step's `total_tasks` the job's, and a
    /// task no sample saw had 0 threads and processes.
    fn upgrade_from_v1(&mut self) {
        let step_nodes = self.job.nodes.take().filter(|n| *n > 0);
        if self.step.kind == "batch" {
            self.job.tasks = self.step.total_tasks.filter(|n| *n > 0);
            self.step.total_tasks = Some(1);
            self.step.nodes = Some(1);
        } else {
            self.step.nodes = step_nodes;
        }
        for t in &mut self.tasks {
            if t.max_processes == Some(0) {
                t.max_processes = None;
                t.max_threads = None;
            }
        }
    }

    /// The record as one line of JSON, newline-terminated: compact, since the timeline's
    /// numbers would each take a line of their own when pretty (`jq .` shows it indented).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

pub use crate::text::{clean_text, is_unsafe_on_terminal, json_terminal_safe, terminal_safe};

/// A name made safe as part of a file name: ASCII letters, digits, `-`, `_` and `.` kept, any
/// other character `_`, at most 64 characters, never empty.
pub fn file_safe(name: &str) -> String {
    let s: String = name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("_{s}")
    } else {
        s
    }
}

/// The file name part of a step id: `4294967291` is `batch`, and so on.
pub fn step_name(step_id: u32) -> String {
    match step_id {
        STEP_BATCH => "batch".into(),
        STEP_EXTERN => "extern".into(),
        STEP_INTERACTIVE => "interactive".into(),
        n => n.to_string(),
    }
}

/// Whether step `step_id` of a job is recorded when the site records at most
/// `max_step_records` numbered steps a job: the batch, extern and interactive steps always,
/// numbered steps below the bound.
pub fn is_recorded(step_id: u32, max_step_records: u32) -> bool {
    matches!(step_id, STEP_BATCH | STEP_EXTERN | STEP_INTERACTIVE) || step_id < max_step_records
}

/// Slurm's step id of the batch step.
pub const STEP_BATCH: u32 = 0xffff_fffb;
/// Slurm's step id of the extern step.
pub const STEP_EXTERN: u32 = 0xffff_fffc;
/// Slurm's step id of the interactive step (`salloc` with `use_interactive_step`).
pub const STEP_INTERACTIVE: u32 = 0xffff_fffa;

/// Records for other modules' tests.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// The batch step of job 42 on n1 with `requested` bytes of memory and a job peak of
    /// `peak` bytes.
    pub fn batch_with_memory(peak: u64, requested: u64) -> StepRecord {
        let mut r = record("n1", "batch");
        r.job.alloc_memory_bytes = Some(requested);
        r.memory.peak_bytes = peak;
        r.memory.job_peak_bytes = Some(peak);
        r
    }

    /// A complete record of job 42 (user alice, uid 1001), `step` on `node`, one task.
    pub fn record(node: &str, step: &str) -> StepRecord {
        StepRecord {
            schema: SCHEMA.into(),
            schema_version: SCHEMA_VERSION,
            complete: true,
            written_at: "2026-11-23T10:00:00+00:00".into(),
            tracker_version: "0.1.0".into(),
            job: JobInfo {
                id: 42,
                user: "alice".into(),
                uid: 1001,
                ..Default::default()
            },
            step: StepInfo {
                id: step.into(),
                kind: if step == "batch" { "batch" } else { "srun" }.into(),
                node: node.into(),
                start: "2026-11-23T09:59:00+00:00".into(),
                end: Some("2026-11-23T10:00:00+00:00".into()),
                elapsed_seconds: 60.0,
                ..Default::default()
            },
            tasks: vec![TaskRecord {
                pid: 77,
                ended: true,
                exit_code: Some(0),
                ..Default::default()
            }],
            memory: StepMemory::default(),
            cpu: StepCpu::default(),
            gpus: vec![],
            sampler: SamplerStats::default(),
            timeline: None,
            events: Vec::new(),
            events_dropped: 0,
            pressure: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StepRecord {
        let mut r = tests_support::record("n1", "batch");
        r.tasks[0].peak_memory_bytes = 300 << 20;
        r.memory.needed_peak_bytes = Some(5 << 20);
        r.memory.needed_peak_source = Some("sampled".into());
        r.memory.job_needed_peak_bytes = Some(6 << 20);
        r.memory.job_needed_peak_source = Some("cgroup_peak_less_reclaimable".into());
        r.sampler.interval_max_seconds = Some(4.0);
        r.sampler.overruns = Some(3);
        r.sampler.stopped = Some(false);
        r.sampler.nvml_opened = Some("after_last_task".into());
        r
    }

    #[test]
    fn round_trips_and_refuses_newer_or_foreign_files() {
        let r = sample();
        assert_eq!(StepRecord::from_json(&r.to_json()).unwrap(), r);
        let newer = r.to_json().replace(
            &format!("\"schema_version\":{SCHEMA_VERSION}"),
            "\"schema_version\":99",
        );
        assert!(matches!(
            StepRecord::from_json(&newer),
            Err(RecordError::FutureVersion(99))
        ));
        assert!(matches!(
            StepRecord::from_json("{\"x\": 1}"),
            Err(RecordError::Corrupt(_))
        ));
        assert!(matches!(
            StepRecord::from_json("{\"schema\": \"gpu-tracker/step\", \"sch"),
            Err(RecordError::Corrupt(_))
        ));
    }

    #[test]
    fn older_records_without_the_newer_optional_fields_still_parse() {
        let mut v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        v["job"].as_object_mut().unwrap().remove("name");
        v["step"].as_object_mut().unwrap().remove("command");
        for k in [
            "job_peak_bytes",
            "needed_peak_bytes",
            "needed_peak_source",
            "job_needed_peak_bytes",
            "job_needed_peak_source",
        ] {
            assert!(
                v["memory"].as_object_mut().unwrap().remove(k).is_some(),
                "{k}"
            );
        }
        for k in ["interval_max_seconds", "overruns", "stopped", "nvml_opened"] {
            assert!(
                v["sampler"].as_object_mut().unwrap().remove(k).is_some(),
                "{k}"
            );
        }
        let r = StepRecord::from_json(&v.to_string()).unwrap();
        assert_eq!(r.job.name, None);
        assert_eq!(r.memory.job_peak_bytes, None);
        assert_eq!(r.memory.needed_peak_bytes, None);
        assert_eq!((r.sampler.overruns, r.sampler.stopped), (None, None));
    }

    #[test]
    fn version_1_records_are_read_with_version_2_meanings() {
        let mut batch = sample();
        batch.schema_version = 1;
        batch.job.nodes = Some(0);
        batch.step.kind = "batch".into();
        batch.step.total_tasks = Some(4);
        batch.tasks[0].max_threads = Some(0);
        batch.tasks[0].max_processes = Some(0);
        let r = StepRecord::from_json(&batch.to_json()).unwrap();
        assert_eq!((r.job.nodes, r.job.tasks), (None, Some(4)));
        assert_eq!((r.step.nodes, r.step.total_tasks), (Some(1), Some(1)));
        assert_eq!(
            (r.tasks[0].max_threads, r.tasks[0].max_processes),
            (None, None)
        );
        let mut srun = sample();
        srun.schema_version = 1;
        srun.step.kind = "srun".into();
        srun.job.nodes = Some(2);
        srun.tasks[0].max_threads = Some(3);
        srun.tasks[0].max_processes = Some(1);
        let r = StepRecord::from_json(&srun.to_json()).unwrap();
        assert_eq!((r.job.nodes, r.step.nodes), (None, Some(2)));
        assert_eq!(r.tasks[0].max_threads, Some(3));
    }

    #[test]
    fn step_names() {
        assert_eq!(step_name(0xffff_fffb), "batch");
        assert_eq!(step_name(0xffff_fffc), "extern");
        assert_eq!(step_name(0xffff_fffa), "interactive");
        assert_eq!(step_name(3), "3");
    }

    #[test]
    fn numbered_steps_past_the_bound_are_not_recorded() {
        for id in [STEP_BATCH, STEP_EXTERN, STEP_INTERACTIVE, 0, 999] {
            assert!(is_recorded(id, 1000), "{id}");
        }
        for id in [1000, 39_999, 0xffff_fff0] {
            assert!(!is_recorded(id, 1000), "{id}");
        }
        assert!(!is_recorded(0, 0) && is_recorded(STEP_BATCH, 0));
    }
}

#[cfg(test)]
mod terminal_tests {
    use super::*;

    #[test]
    fn file_names_keep_only_safe_characters() {
        assert_eq!(file_safe("evil\u{1b}]2;x"), "evil__2_x");
        assert_eq!(file_safe(".."), "_..");
    }
}

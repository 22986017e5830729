//! The figures of a job's summary, as plain data: the job as a whole, each node, GPU and step,
//! totals, imbalance, classes and advice. Filled in by [`super::summary`] (from records), by
//! [`super::stored`] (from Slurm's database), and by [`super::nodes`] and [`super::classes`],
//! which read what is already there; the renderings read them. Nothing here computes, so every
//! room of the report can use these types without using each other.
//!
//! Every figure keeps its unit fixed (bytes, seconds, percent, joules); renderings convert.

use serde::{Deserialize, Serialize};

use crate::step::record::TaskRecord;

/// Most events a summary lists.
pub const MAX_SUMMARY_EVENTS: usize = 12;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The merged figures of a job (or of the steps chosen from it).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Slurm job id.
    pub job_id: u32,
    /// Array job id, for array tasks.
    pub array_job_id: Option<u32>,
    /// Array task id, for array tasks.
    pub array_task_id: Option<u32>,
    /// Job name (control characters removed).
    pub name: Option<String>,
    /// The one step summarised, when not the whole job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub only_step: Option<String>,
    /// User name.
    pub user: String,
    /// User id.
    pub uid: u32,
    /// Nodes that wrote records.
    pub nodes: Vec<String>,
    /// Nodes in the job, as Slurm counts them (more than `nodes`: the other nodes' records are
    /// in their own spool).
    pub job_nodes: Option<u32>,
    /// The job's nodes as Slurm lists them (hostlist format), when a record says.
    pub job_node_list: Option<String>,
    /// Nodes of the job with no record here: no tracked step ran there, or they keep their
    /// records in a spool of their own.
    pub missing_nodes: Vec<String>,
    /// Tasks of the job (`--ntasks`), as the batch step knows it.
    pub job_tasks: Option<u32>,
    /// Whether every record is final.
    pub complete: bool,
    /// Earliest step start.
    pub start: Option<String>,
    /// Latest step end.
    pub end: Option<String>,
    /// Wall-clock time of the job: the batch step's, else from the first step's start to the
    /// last step's end.
    pub elapsed_seconds: f64,
    /// CPU over the job.
    pub cpu: CpuSummary,
    /// Each node that wrote records: memory and CPU.
    pub per_node: Vec<NodeSummary>,
    /// Sums over the nodes.
    pub totals: Totals,
    /// Nodes, tasks and GPUs far below the others.
    pub imbalance: Vec<Imbalance>,
    /// Each GPU, per node.
    pub gpus: Vec<GpuSummary>,
    /// Each step on each node.
    pub steps: Vec<StepSummary>,
    /// The job's runs, first first ([`super::runs`]): more than one when Slurm requeued it.
    /// Empty where no record says which run it is (records of earlier builds, or no run file).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunSummary>,
    /// Steps where the kernel killed processes for memory.
    pub oom: Vec<OomEvent>,
    /// The job's classes ([`super::classes`]), in their fixed order; `[]` when none.
    pub classes: Vec<JobClass>,
    /// What the user could change, from the classes.
    pub advice: Vec<Advice>,
    /// Phases between `gpu-tracker mark` marks, with their figures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<super::story::Phase>,
    /// Each allocated GPU's idle time.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_idle: Vec<super::story::IdleGpu>,
    /// What the job's tasks waited for (cgroup v2's pressure stall figures), and the
    /// bottleneck it names. Absent where no record has pressure figures (earlier builds, and
    /// summaries read back from Slurm's database).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressure: Option<super::pressure::figures::JobPressure>,
    /// The events that matter (alerts, OOM kills, limit hits, lost GPUs, failed tasks), at
    /// most [`MAX_SUMMARY_EVENTS`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<super::story::JobEvent>,
    /// Events that matter beyond those shown.
    #[serde(skip_serializing_if = "is_zero")]
    pub events_more: u64,
    /// Where the figures were read, when not from the spool's records (`None`): a summary kept
    /// in Slurm's database has no steps or tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Step records of the job in the spool that were not read: past `max_summary_records`.
    /// The figures are those of the records read.
    #[serde(skip_serializing_if = "is_zero")]
    pub records_left_out: u64,
    /// The job had more numbered steps than the plugin records (`max_step_records`): steps
    /// numbered this and above have no record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps_not_recorded_from: Option<u32>,
    /// What went wrong while recording (the records' `sampler.faults`), as
    /// `step STEP on NODE: FAULT`, at most [`MAX_SUMMARY_FAULTS`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<String>,
}

/// Most recording faults a summary lists.
pub const MAX_SUMMARY_FAULTS: usize = 10;

/// CPU of the job.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CpuSummary {
    /// CPU seconds used by every step together.
    pub seconds: f64,
    /// CPUs allocated, over all nodes that wrote records.
    pub alloc_cpus: u32,
    /// `seconds` / (`elapsed_seconds` × `alloc_cpus`), percent.
    pub efficiency_percent: Option<f64>,
    /// Most cores one step kept busy over one sampling interval.
    pub max_cores: f64,
}

/// The job on one node.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeSummary {
    /// Node name.
    pub node: String,
    /// CPU seconds of every step on the node.
    pub cpu_seconds: f64,
    /// CPUs allocated to the job on the node.
    pub alloc_cpus: u32,
    /// `cpu_seconds` / (job's `elapsed_seconds` × `alloc_cpus`), percent.
    pub cpu_efficiency_percent: Option<f64>,
    /// Steps with a record from the node.
    pub steps: usize,
    /// Peak memory, bytes.
    pub peak_bytes: u64,
    /// `job cgroup` (every step together, exact) or `largest step`.
    pub source: String,
    /// Whether the peak counts page cache (cgroup counters do).
    pub includes_page_cache: bool,
    /// Memory allocated to the job on this node (`--mem`), bytes.
    pub requested_bytes: Option<u64>,
    /// `peak_bytes` / `requested_bytes`, percent.
    pub percent_of_request: Option<f64>,
    /// Energy of the job's GPUs on the node, joules (`None`: no GPU measured it).
    pub gpu_energy_joules: Option<f64>,
    /// Peak of the memory the job held on the node that the kernel could not reclaim (page
    /// cache left out): what it needed, and what sizing uses. `None` where no record has it
    /// (records of earlier builds, no cgroup): sizing then uses `peak_bytes`.
    pub needed_peak_bytes: Option<u64>,
    /// How `needed_peak_bytes` was found (the record's `needed_peak_source`, or `charged_peak`
    /// where a record had no figure of its own and its charged peak stood for it).
    pub needed_peak_source: Option<String>,
}

impl NodeSummary {
    /// The memory the job needed on the node, for sizing `--mem`: the needed peak, else the
    /// charged one.
    pub fn sizing_bytes(&self) -> u64 {
        self.needed_peak_bytes.unwrap_or(self.peak_bytes)
    }
}

/// One GPU of the job.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuSummary {
    /// Node name.
    pub node: String,
    /// Slurm's index of the GPU.
    pub slurm_index: Option<u32>,
    /// `nvidia` or `amd`.
    pub vendor: crate::gpu::Vendor,
    /// PCI address, where the record has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// An AMD GPU's render node minor (`/dev/dri/renderD<minor>`), the file Slurm allocated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub render_minor: Option<u32>,
    /// UUID.
    pub uuid: String,
    /// Model.
    pub name: String,
    /// Memory size, bytes.
    pub memory_total_bytes: u64,
    /// Peak memory of the job's processes on it (largest over steps), bytes.
    pub job_peak_bytes: u64,
    /// Peak memory in use on the device by anyone, bytes.
    pub device_peak_bytes: u64,
    /// Mean utilization over the longest step that had it (the batch step sees the whole job).
    pub mean_utilization_percent: Option<f64>,
    /// Highest utilization seen.
    pub max_utilization_percent: Option<f64>,
    /// Energy over the longest step that had it, joules.
    pub energy_joules: Option<f64>,
    /// The MIG instance, when the GPU is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig: Option<crate::gpu::MigInfo>,
    /// Why its device-wide figures are not the job's alone, when some step said so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared: Option<crate::gpu::Shared>,
    /// SM activity, clock event reasons, Xid and ECC errors over the longest step that had the
    /// figure (Xid errors of every step), and why a figure has none.
    #[serde(flatten)]
    pub depth: crate::gpu::figures::GpuDepth,
}

/// One step on one node.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StepSummary {
    /// Step id (`batch`, `0`, ...).
    pub id: String,
    /// Node name.
    pub node: String,
    /// Command line (control characters removed).
    pub command: Option<String>,
    /// Whether the record is final.
    pub complete: bool,
    /// Seconds.
    pub elapsed_seconds: f64,
    /// CPU seconds.
    pub cpu_seconds: f64,
    /// CPU use against the job's CPUs on the node, percent.
    pub cpu_efficiency_percent: f64,
    /// Peak memory, bytes.
    pub peak_memory_bytes: u64,
    /// Memory limit, bytes.
    pub limit_bytes: Option<u64>,
    /// Energy of the step's GPUs over the step, joules (`None`: no GPU measured it).
    pub gpu_energy_joules: Option<f64>,
    /// Tasks on this node.
    pub tasks: usize,
    /// Tasks that exited non-zero or were killed.
    pub failed: Vec<TaskFailure>,
    /// Every task, as recorded (for `--tasks`).
    pub task_records: Vec<TaskRecord>,
    /// Why a task's memory is above the step's peak, when it is (the record's `peak_note`).
    pub peak_note: Option<String>,
    /// The job's run the step belongs to (1 for the first), where its record says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<u32>,
    /// Peak of the step's memory the kernel could not reclaim (the record's
    /// `needed_peak_bytes`), when the record has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needed_peak_bytes: Option<u64>,
    /// The step's pressure stall figures (the record's), when the record has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressure: Option<crate::history::pressure::StepPressure>,
}

/// A task that did not exit 0.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TaskFailure {
    /// Task id over the step.
    pub global_id: Option<u32>,
    /// Exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Signal, when one killed it.
    pub signal: Option<i32>,
}

/// Processes killed by the kernel for memory.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OomEvent {
    /// Step id.
    pub step: String,
    /// Node name.
    pub node: String,
    /// Processes killed.
    pub kills: u64,
    /// Peak memory the step reached, bytes.
    pub peak_bytes: u64,
    /// The limit, bytes.
    pub limit_bytes: Option<u64>,
}

/// A class a job is in ([`super::classes`]): its tag (`gpu-unused`, ...) and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobClass {
    /// The stable tag.
    pub tag: String,
    /// One line for people: the figure that put the job in the class (the rule's words, for a
    /// class read back from Slurm's database).
    pub reason: String,
}

/// One piece of advice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// `memory-over-requested`, `gpu-idle`, `gpu-low-use`, `gpu-few-sms`, `cpu-idle`,
    /// `cpu-starved`, `io-bound`, `memory-throttled`, `oom`, `time-limit` or
    /// `time-over-requested`.
    pub code: &'static str,
    /// What to do, for people.
    pub message: String,
}

/// One run of the job.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunSummary {
    /// Which run: 1 for the first (Slurm's restart count + 1).
    pub run: u32,
    /// When it started (RFC 3339), as its records say.
    pub start: Option<String>,
    /// How long it ran: its batch step's elapsed time, else from its first step's start to its
    /// last step's end, seconds.
    pub elapsed_seconds: f64,
    /// Its time limit, seconds (`None`: unlimited or unknown, `time_limit_unknown` says which).
    pub time_limit_seconds: Option<u64>,
    /// Why `time_limit_seconds` is `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit_unknown: Option<String>,
    /// `completed`, `ran-out-of-time`, `failed`, `requeued` or `running`.
    pub ended: String,
}

/// Sums over the job's nodes (those with records).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Nodes' peak memory added up, bytes. An upper bound of the job's memory at one time: the
    /// nodes may have peaked at different times.
    pub memory_peak_bytes: u64,
    /// Memory allocated on those nodes, added up, bytes (`None` when a node had no limit).
    pub memory_requested_bytes: Option<u64>,
    /// The nodes' needed peaks added up, bytes (a node without one counts its charged peak);
    /// `None` when no node has one.
    pub memory_needed_bytes: Option<u64>,
    /// GPUs with records.
    pub gpus: usize,
    /// Peak GPU memory of the job's processes, added up over the GPUs, bytes.
    pub gpu_memory_peak_bytes: u64,
    /// Energy of the job's GPUs, added up, joules (`None` when no GPU measured it).
    pub gpu_energy_joules: Option<f64>,
    /// Emissions of that energy at the site's grams of CO2 per kWh, when the site set one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub co2_grams: Option<f64>,
    /// The site's grams of CO2 per kWh behind `co2_grams`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub co2_grams_per_kwh: Option<f64>,
    /// Mean of the GPUs' mean utilization, percent.
    pub gpu_mean_utilization_percent: Option<f64>,
    /// Tasks over the steps' records.
    pub tasks: usize,
}

/// One node, task or GPU far below the others.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Imbalance {
    /// `node`, `task` or `gpu`.
    pub kind: &'static str,
    /// Which: `vm-2`, `step 0 task 3 on vm-2`, `GPU 1 on vm-2`.
    pub what: String,
    /// Its figure (CPU efficiency or utilization percent, or CPU seconds for tasks).
    pub value: f64,
    /// The busiest one's figure.
    pub busiest_value: f64,
    /// Which the busiest is.
    pub busiest: String,
    /// For people.
    pub message: String,
}

impl Summary {
    /// Whether any task failed.
    pub fn any_failed(&self) -> bool {
        self.steps.iter().any(|st| !st.failed.is_empty())
    }
}

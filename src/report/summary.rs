//! A job's figures merged from its step records: the job as a whole, each step on each node.
//! Per-node rows, job totals and imbalance are in [`super::nodes`]; advice in [`super::advice`].
//!
//! Every figure keeps its unit fixed (bytes, seconds, percent, joules); renderings convert.

use std::collections::BTreeMap;

use chrono::{DateTime, FixedOffset};
use serde::Serialize;

use crate::step::record::{StepRecord, TaskRecord, clean_text};

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
    pub totals: super::nodes::Totals,
    /// Nodes, tasks and GPUs far below the others.
    pub imbalance: Vec<super::nodes::Imbalance>,
    /// Each GPU, per node.
    pub gpus: Vec<GpuSummary>,
    /// Each step on each node.
    pub steps: Vec<StepSummary>,
    /// Steps where the kernel killed processes for memory.
    pub oom: Vec<OomEvent>,
    /// What the user could change.
    pub advice: Vec<Advice>,
    /// Phases between `gpu-tracker mark` marks, with their figures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<super::story::Phase>,
    /// Each allocated GPU's idle time.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_idle: Vec<super::story::IdleGpu>,
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
}

/// One GPU of the job.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuSummary {
    /// Node name.
    pub node: String,
    /// Slurm's index of the GPU.
    pub slurm_index: Option<u32>,
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
    /// Tasks on this node.
    pub tasks: usize,
    /// Tasks that exited non-zero or were killed.
    pub failed: Vec<TaskFailure>,
    /// Every task, as recorded (for `--tasks`).
    pub task_records: Vec<TaskRecord>,
    /// Why a task's memory is above the step's peak, when it is (the record's `peak_note`).
    pub peak_note: Option<String>,
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

/// One piece of advice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// `memory-over-requested`, `gpu-idle`, `gpu-low-use`, `cpu-idle` or `oom`.
    pub code: &'static str,
    /// What to do, for people.
    pub message: String,
}

fn parse_time(s: &str) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(s).ok()
}

fn end_of(r: &StepRecord) -> Option<DateTime<FixedOffset>> {
    match &r.step.end {
        Some(e) => parse_time(e),
        None => parse_time(&r.written_at),
    }
}

/// CPU seconds against `alloc` CPUs over `elapsed` seconds, percent; `None` without either.
pub fn cpu_efficiency(seconds: f64, elapsed: f64, alloc: u32) -> Option<f64> {
    (elapsed > 0.0 && alloc > 0).then(|| 100.0 * seconds / (elapsed * f64::from(alloc)))
}

/// `f` of the batch step's record when it has the figure, else of any record that has it.
fn batch_or_any<T>(records: &[StepRecord], f: impl Fn(&StepRecord) -> Option<T>) -> Option<T> {
    records
        .iter()
        .filter(|r| r.step.kind == "batch")
        .find_map(&f)
        .or_else(|| records.iter().find_map(&f))
}

fn failed(t: &TaskRecord) -> bool {
    t.signal.is_some() || t.exit_code.is_some_and(|c| c != 0)
}

impl Summary {
    /// Merges `records` (of one job; any order). An empty slice gives an empty summary.
    pub fn from_records(records: &[StepRecord]) -> Summary {
        let Some(first) = records.first() else {
            return Summary::default();
        };
        let mut s = Summary {
            job_id: first.job.id,
            array_job_id: first.job.array_job_id,
            array_task_id: first.job.array_task_id,
            name: records
                .iter()
                .find_map(|r| r.job.name.as_deref())
                .map(|n| clean_text(n, 100)),
            user: clean_text(&first.job.user, 64),
            uid: first.job.uid,
            // The batch step's view is Slurm's own (see JobInfo::nodes).
            job_nodes: batch_or_any(records, |r| r.job.nodes),
            job_node_list: batch_or_any(records, |r| r.job.node_list.clone()),
            job_tasks: batch_or_any(records, |r| r.job.tasks),
            complete: records.iter().all(|r| r.complete),
            faults: records
                .iter()
                .flat_map(|r| {
                    r.sampler.faults.iter().map(|f| {
                        format!(
                            "step {} on {}: {}",
                            clean_text(&r.step.id, 32),
                            clean_text(&r.step.node, 64),
                            clean_text(f, 400)
                        )
                    })
                })
                .take(MAX_SUMMARY_FAULTS)
                .collect(),
            ..Summary::default()
        };
        let mut nodes: Vec<String> = records.iter().map(|r| r.step.node.clone()).collect();
        nodes.sort();
        nodes.dedup();

        let starts: Vec<_> = records
            .iter()
            .filter_map(|r| parse_time(&r.step.start))
            .collect();
        let ends: Vec<_> = records.iter().filter_map(end_of).collect();
        let start = starts.iter().min().copied();
        let end = ends.iter().max().copied();
        s.start = start.map(|t| t.to_rfc3339());
        s.end = end.map(|t| t.to_rfc3339());
        let batch = records
            .iter()
            .filter(|r| r.step.id == "batch")
            .map(|r| r.step.elapsed_seconds)
            .fold(None, |m: Option<f64>, e| Some(m.map_or(e, |m| m.max(e))));
        let span = match (start, end) {
            (Some(a), Some(b)) => Some((b - a).num_milliseconds().max(0) as f64 / 1e3),
            _ => None,
        };
        let longest = records
            .iter()
            .map(|r| r.step.elapsed_seconds)
            .fold(0.0, f64::max);
        s.elapsed_seconds = batch.or(span).unwrap_or(longest).max(longest);

        // CPU: steps have their own cgroups, so their CPU times add up.
        let mut alloc_per_node: BTreeMap<&str, u32> = BTreeMap::new();
        for r in records {
            let a = r.step.alloc_cpus.unwrap_or(0).max(r.cpu.alloc_cpus);
            let e = alloc_per_node.entry(r.step.node.as_str()).or_default();
            *e = (*e).max(a);
        }
        s.cpu.seconds = records.iter().map(|r| r.cpu.seconds).sum();
        s.cpu.alloc_cpus = alloc_per_node.values().fold(0, |a, b| a.saturating_add(*b));
        s.cpu.max_cores = records.iter().map(|r| r.cpu.max_cores).fold(0.0, f64::max);
        s.cpu.efficiency_percent =
            cpu_efficiency(s.cpu.seconds, s.elapsed_seconds, s.cpu.alloc_cpus);

        for node in &nodes {
            let on: Vec<&StepRecord> = records.iter().filter(|r| &r.step.node == node).collect();
            let job_peak = on.iter().filter_map(|r| r.memory.job_peak_bytes).max();
            let step_peak = on.iter().map(|r| r.memory.peak_bytes).max().unwrap_or(0);
            let (peak, source, cache) = match job_peak {
                Some(p) => (p.max(step_peak), "job cgroup", true),
                None => (
                    step_peak,
                    "largest step",
                    on.iter().any(|r| r.memory.peak_includes_page_cache),
                ),
            };
            let requested = on.iter().filter_map(|r| r.job.alloc_memory_bytes).max();
            let alloc = alloc_per_node.get(node.as_str()).copied().unwrap_or(0);
            let cpu_seconds: f64 = on.iter().map(|r| r.cpu.seconds).sum();
            s.per_node.push(NodeSummary {
                node: node.clone(),
                cpu_seconds,
                alloc_cpus: alloc,
                cpu_efficiency_percent: cpu_efficiency(cpu_seconds, s.elapsed_seconds, alloc),
                steps: on.len(),
                peak_bytes: peak,
                source: source.into(),
                includes_page_cache: cache,
                requested_bytes: requested,
                percent_of_request: requested
                    .filter(|r| *r > 0)
                    .map(|r| 100.0 * peak as f64 / r as f64),
            });

            // GPUs, merged by UUID over the node's steps.
            let mut by_uuid: BTreeMap<&str, (GpuSummary, f64)> = BTreeMap::new();
            for r in &on {
                for g in &r.gpus {
                    let e = by_uuid.entry(g.uuid.as_str()).or_insert_with(|| {
                        (
                            GpuSummary {
                                node: node.clone(),
                                uuid: g.uuid.clone(),
                                name: clean_text(&g.name, 96),
                                memory_total_bytes: g.memory_total_bytes,
                                ..GpuSummary::default()
                            },
                            -1.0,
                        )
                    });
                    let (sum, longest) = e;
                    sum.slurm_index = sum.slurm_index.or(g.slurm_index);
                    sum.job_peak_bytes = sum.job_peak_bytes.max(g.peak_step_memory_bytes);
                    sum.device_peak_bytes = sum.device_peak_bytes.max(g.peak_device_memory_bytes);
                    sum.max_utilization_percent =
                        match (sum.max_utilization_percent, g.max_utilization_percent) {
                            (Some(a), Some(b)) => Some(a.max(b)),
                            (a, b) => a.or(b),
                        };
                    if g.mean_utilization_percent.is_some() && r.step.elapsed_seconds > *longest {
                        *longest = r.step.elapsed_seconds;
                        sum.mean_utilization_percent = g.mean_utilization_percent;
                        sum.energy_joules = g.energy_joules;
                    }
                }
            }
            let mut gpus: Vec<GpuSummary> = by_uuid.into_values().map(|(g, _)| g).collect();
            gpus.sort_by_key(|g| (g.slurm_index, g.uuid.clone()));
            s.gpus.extend(gpus);
        }
        s.nodes = nodes;

        let mut ordered: Vec<&StepRecord> = records.iter().collect();
        ordered.sort_by(|a, b| {
            (super::step_order(&a.step.id), &a.step.node)
                .cmp(&(super::step_order(&b.step.id), &b.step.node))
        });
        for r in ordered {
            let alloc = r.step.alloc_cpus.unwrap_or(0).max(r.cpu.alloc_cpus).max(1);
            s.steps.push(StepSummary {
                id: r.step.id.clone(),
                node: r.step.node.clone(),
                command: r.step.command.as_deref().map(|c| clean_text(c, 200)),
                complete: r.complete,
                elapsed_seconds: r.step.elapsed_seconds,
                cpu_seconds: r.cpu.seconds,
                cpu_efficiency_percent: if r.step.elapsed_seconds > 0.0 {
                    100.0 * r.cpu.seconds / (r.step.elapsed_seconds * f64::from(alloc))
                } else {
                    0.0
                },
                peak_memory_bytes: r.memory.peak_bytes,
                limit_bytes: r.memory.limit_bytes,
                tasks: r.tasks.len(),
                failed: r
                    .tasks
                    .iter()
                    .filter(|t| failed(t))
                    .map(|t| TaskFailure {
                        global_id: t.global_id,
                        exit_code: t.exit_code,
                        signal: t.signal,
                    })
                    .collect(),
                task_records: r.tasks.clone(),
                peak_note: r.memory.peak_note.as_deref().map(|n| clean_text(n, 400)),
            });
            let kills = r.memory.oom_kills.unwrap_or(0);
            if kills > 0 {
                s.oom.push(OomEvent {
                    step: r.step.id.clone(),
                    node: r.step.node.clone(),
                    kills,
                    peak_bytes: r.memory.peak_bytes,
                    limit_bytes: r.memory.limit_bytes.or(r.memory.job_limit_bytes),
                });
            }
        }
        super::nodes::complete(&mut s, records);
        s.phases = super::story::phases(records);
        s.gpu_idle = super::story::idle_gpus(records);
        let important: Vec<_> = super::story::events(records)
            .into_iter()
            .filter(|e| e.event.important())
            .collect();
        s.events_more = important.len().saturating_sub(MAX_SUMMARY_EVENTS) as u64;
        s.events = important.into_iter().take(MAX_SUMMARY_EVENTS).collect();
        s.advice = super::advice::advise(&s);
        s
    }

    /// The summary of one step's records (`<job>.<step>`): like [`Summary::from_records`], but
    /// memory is the step's own peak, not the whole job's.
    pub fn of_step(records: &[StepRecord], step: &str) -> Summary {
        let mut own: Vec<StepRecord> = records.to_vec();
        for r in &mut own {
            r.memory.job_peak_bytes = None;
        }
        let mut s = Summary::from_records(&own);
        s.only_step = Some(step.to_string());
        s
    }

    /// Whether any task failed.
    pub fn any_failed(&self) -> bool {
        self.steps.iter().any(|st| !st.failed.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::record::tests_support::{batch_with_memory as job, record};

    const GIB: u64 = 1 << 30;

    fn s1_with_job_peak() -> StepRecord {
        let mut r = record("n1", "1");
        r.memory.job_peak_bytes = Some(3 * GIB);
        r
    }

    #[test]
    fn steps_merge_into_the_job() {
        let mut b = job(GIB, 4 * GIB);
        b.cpu.seconds = 10.0;
        let mut s0 = record("n1", "0");
        s0.cpu.seconds = 50.0;
        s0.memory.peak_bytes = 2 * GIB;
        s0.tasks[0].exit_code = Some(3);
        s0.step.command = Some("python\u{1b}[2J train.py".into());
        s0.complete = false;
        let s = Summary::from_records(&[s0, b]);
        assert_eq!(s.steps[0].id, "batch");
        assert_eq!(s.cpu.seconds, 60.0);
        assert_eq!(s.per_node[0].peak_bytes, 2 * GIB);
        assert!(!s.complete);
        assert!(s.any_failed());
        assert_eq!(s.steps[1].command.as_deref(), Some("python?[2J train.py"));
        // Incomplete figures give no memory advice.
        assert!(s.advice.iter().all(|a| a.code != "memory-over-requested"));
        // Two steps at once peak higher together than either: the job cgroup's peak counts.
        let mut both = s1_with_job_peak();
        both.memory.peak_bytes = GIB;
        let s = Summary::from_records(&[both]);
        assert_eq!(s.per_node[0].peak_bytes, 3 * GIB);
        assert_eq!(s.per_node[0].source, "job cgroup");
    }
}

//! A job's figures merged from its step records, and the advice they support.
//!
//! Every figure keeps its unit fixed (bytes, seconds, percent, joules); renderings convert.
//! Advice is given only where the figures show it; a job that used what it asked for gets none.

use std::collections::BTreeMap;

use chrono::{DateTime, FixedOffset};
use serde::Serialize;

use crate::step::record::{StepRecord, TaskRecord, clean_text};

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
    /// Memory per node.
    pub memory: Vec<NodeMemory>,
    /// Each GPU, per node.
    pub gpus: Vec<GpuSummary>,
    /// Each step on each node.
    pub steps: Vec<StepSummary>,
    /// Steps where the kernel killed processes for memory.
    pub oom: Vec<OomEvent>,
    /// What the user could change.
    pub advice: Vec<Advice>,
}

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

/// Memory of the job on one node.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeMemory {
    /// Node name.
    pub node: String,
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

/// Memory requests are compared with peaks only above this much waste.
const MEMORY_SLACK_BYTES: u64 = 1 << 30;
/// Utilization and CPU advice needs a job at least this long (seconds); start-up dominates
/// shorter ones.
const MIN_ELAPSED_FOR_USE_ADVICE: f64 = 60.0;

fn parse_time(s: &str) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(s).ok()
}

fn end_of(r: &StepRecord) -> Option<DateTime<FixedOffset>> {
    match &r.step.end {
        Some(e) => parse_time(e),
        None => parse_time(&r.written_at),
    }
}

/// A `--mem` value Slurm takes, at least `bytes`: multiples of 256 MiB up to 4 GiB, whole GiB
/// above.
pub fn mem_option(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if bytes <= 4 * GIB {
        let m = bytes.div_ceil(256 * MIB).max(1) * 256;
        if m % 1024 == 0 {
            format!("{}G", m / 1024)
        } else {
            format!("{m}M")
        }
    } else {
        format!("{}G", bytes.div_ceil(GIB))
    }
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
            job_nodes: records.iter().filter_map(|r| r.job.nodes).max(),
            complete: records.iter().all(|r| r.complete),
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
        s.cpu.alloc_cpus = alloc_per_node.values().sum();
        s.cpu.max_cores = records.iter().map(|r| r.cpu.max_cores).fold(0.0, f64::max);
        if s.elapsed_seconds > 0.0 && s.cpu.alloc_cpus > 0 {
            s.cpu.efficiency_percent =
                Some(100.0 * s.cpu.seconds / (s.elapsed_seconds * f64::from(s.cpu.alloc_cpus)));
        }

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
            s.memory.push(NodeMemory {
                node: node.clone(),
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
        s.advice = advise(&s);
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

fn gib(bytes: u64) -> String {
    let g = bytes as f64 / f64::from(1u32 << 30);
    if g >= 1.0 {
        format!("{g:.1} GiB")
    } else {
        format!("{:.0} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}

/// The advice the figures support.
pub fn advise(s: &Summary) -> Vec<Advice> {
    let mut out = Vec::new();
    for o in &s.oom {
        let more = o
            .limit_bytes
            .map(|l| format!(" (for example --mem={})", mem_option(l.saturating_mul(2))))
            .unwrap_or_default();
        let limit = o
            .limit_bytes
            .map(|l| format!(" of its {} limit", gib(l)))
            .unwrap_or_default();
        out.push(Advice {
            code: "oom",
            message: format!(
                "Step {} on {} was killed for memory: {} process(es) killed after reaching {}{limit}. Request more memory{more}, or use less.",
                o.step,
                o.node,
                o.kills,
                gib(o.peak_bytes)
            ),
        });
    }

    // Memory asked for far above the peak (not after an OOM kill, and only with every record).
    if s.oom.is_empty() && s.complete {
        let worst = s
            .memory
            .iter()
            .filter_map(|m| m.requested_bytes.map(|r| (r, m.peak_bytes)))
            .max_by_key(|&(_, p)| p);
        if let Some((req, peak)) = worst {
            if peak.saturating_mul(2) < req && req - peak >= MEMORY_SLACK_BYTES {
                let suggest = mem_option(peak + peak / 5);
                out.push(Advice {
                    code: "memory-over-requested",
                    message: format!(
                        "Memory: the job was allocated {} per node but used at most {} ({:.0}%). Request less next time, for example --mem={suggest}.",
                        gib(req),
                        gib(peak),
                        100.0 * peak as f64 / req as f64
                    ),
                });
            }
        }
    }

    let idle: Vec<&GpuSummary> = s
        .gpus
        .iter()
        .filter(|g| g.max_utilization_percent.is_some_and(|u| u < 1.0))
        .collect();
    for g in &idle {
        let held = if g.job_peak_bytes > 0 {
            format!(" (its processes held {} on it)", gib(g.job_peak_bytes))
        } else {
            String::new()
        };
        out.push(Advice {
            code: "gpu-idle",
            message: format!(
                "GPU {} on {} ({}) was allocated but idle: 0% utilization throughout{held}.",
                g.slurm_index.map_or_else(|| "?".into(), |i| i.to_string()),
                g.node,
                g.uuid
            ),
        });
    }
    if !idle.is_empty() {
        let per_node = s.gpus.len() / s.nodes.len().max(1);
        let used = per_node.saturating_sub(idle.len() / s.nodes.len().max(1));
        out.push(Advice {
            code: "gpu-idle",
            message: if used == 0 {
                "This job did not use its GPUs: run it without --gres=gpu (or --gpus) and leave them to others.".into()
            } else {
                format!("Request only the GPUs the job uses: --gres=gpu:{used} per node.")
            },
        });
    }
    if s.elapsed_seconds >= MIN_ELAPSED_FOR_USE_ADVICE {
        for g in s.gpus.iter().filter(|g| {
            g.max_utilization_percent.is_some_and(|u| u >= 1.0)
                && g.mean_utilization_percent.is_some_and(|u| u < 10.0)
        }) {
            out.push(Advice {
                code: "gpu-low-use",
                message: format!(
                    "GPU {} on {} was busy {:.0}% of the time on average: the job may be waiting on data loading or the CPU.",
                    g.slurm_index.map_or_else(|| "?".into(), |i| i.to_string()),
                    g.node,
                    g.mean_utilization_percent.unwrap_or(0.0)
                ),
            });
        }
        let per_node = s.cpu.alloc_cpus / (s.nodes.len().max(1) as u32);
        if let Some(eff) = s.cpu.efficiency_percent {
            let needed = (s.cpu.max_cores.ceil() as u32).max(1);
            if per_node >= 2 && eff < 25.0 && f64::from(needed) <= 0.75 * f64::from(per_node) {
                out.push(Advice {
                    code: "cpu-idle",
                    message: format!(
                        "CPU: {per_node} cores per node were allocated, the job kept {:.1} busy on average and at most {:.1}. Request {needed} (for example -c {needed}, or fewer tasks).",
                        s.cpu.efficiency_percent.unwrap_or(0.0) / 100.0 * f64::from(per_node),
                        s.cpu.max_cores
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::record::StepGpu;
    use crate::step::record::tests_support::record;

    const GIB: u64 = 1 << 30;

    fn job(peak: u64, requested: u64) -> StepRecord {
        let mut r = record("n1", "batch");
        r.job.alloc_memory_bytes = Some(requested);
        r.memory.peak_bytes = peak;
        r.memory.job_peak_bytes = Some(peak);
        r.step.alloc_cpus = Some(4);
        r.cpu.alloc_cpus = 4;
        r.cpu.seconds = 4.0 * 60.0 * 0.9;
        r.cpu.max_cores = 4.0;
        r
    }

    #[test]
    fn mem_options_are_round_and_at_least_the_need() {
        assert_eq!(mem_option(1), "256M");
        assert_eq!(mem_option(300 << 20), "512M");
        assert_eq!(mem_option(GIB), "1G");
        assert_eq!(mem_option(4 * GIB + 1), "5G");
    }

    #[test]
    fn a_job_that_used_what_it_asked_for_gets_no_advice() {
        let s = Summary::from_records(&[job(3 * GIB, 4 * GIB)]);
        assert!(s.advice.is_empty(), "{:?}", s.advice);
        assert_eq!(
            s.memory[0].percent_of_request.map(|p| p.round()),
            Some(75.0)
        );
        assert_eq!(s.cpu.efficiency_percent.map(|p| p.round()), Some(90.0));
    }

    #[test]
    fn memory_far_above_the_peak_suggests_a_smaller_request() {
        let s = Summary::from_records(&[job(600 << 20, 16 * GIB)]);
        assert_eq!(s.advice.len(), 1, "{:?}", s.advice);
        assert_eq!(s.advice[0].code, "memory-over-requested");
        assert!(
            s.advice[0].message.contains("--mem=768M"),
            "{}",
            s.advice[0].message
        );
        // Not below the slack: 100 MB of 1 GiB is wasteful in ratio but not worth a note.
        assert!(
            Summary::from_records(&[job(100 << 20, GIB)])
                .advice
                .is_empty()
        );
    }

    #[test]
    fn an_oom_kill_gets_its_own_advice_and_no_smaller_request() {
        let mut r = job(200 << 20, 16 * GIB);
        r.memory.oom_kills = Some(1);
        r.memory.limit_bytes = Some(200 << 20);
        let s = Summary::from_records(&[r]);
        assert_eq!(s.oom.len(), 1);
        let codes: Vec<_> = s.advice.iter().map(|a| a.code).collect();
        assert_eq!(codes, vec!["oom"]);
        assert!(
            s.advice[0].message.contains("--mem=512M"),
            "{}",
            s.advice[0].message
        );
    }

    #[test]
    fn idle_gpus_and_idle_cores_are_named() {
        let mut r = job(3 * GIB, 4 * GIB);
        r.cpu.seconds = 0.5 * 60.0;
        r.cpu.max_cores = 1.2;
        let gpu = |i: u32, util: f64| StepGpu {
            slurm_index: Some(i),
            uuid: format!("GPU-{i}"),
            mean_utilization_percent: Some(util),
            max_utilization_percent: Some(util),
            ..StepGpu::default()
        };
        r.gpus = vec![gpu(0, 80.0), gpu(1, 0.0)];
        let s = Summary::from_records(&[r.clone()]);
        let codes: Vec<_> = s.advice.iter().map(|a| a.code).collect();
        assert_eq!(
            codes,
            vec!["gpu-idle", "gpu-idle", "cpu-idle"],
            "{:?}",
            s.advice
        );
        assert!(s.advice[0].message.contains("GPU-1"));
        assert!(s.advice[1].message.contains("--gres=gpu:1"));
        assert!(
            s.advice[2].message.contains("-c 2"),
            "{}",
            s.advice[2].message
        );
        // A short job gets no CPU advice: start-up dominates.
        r.step.elapsed_seconds = 10.0;
        let s = Summary::from_records(&[r]);
        assert!(s.advice.iter().all(|a| a.code != "cpu-idle"));
    }

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
        assert_eq!(s.memory[0].peak_bytes, 2 * GIB);
        assert!(!s.complete);
        assert!(s.any_failed());
        assert_eq!(s.steps[1].command.as_deref(), Some("python?[2J train.py"));
        // Incomplete figures give no memory advice.
        assert!(s.advice.iter().all(|a| a.code != "memory-over-requested"));
        // Two steps at once peak higher together than either: the job cgroup's peak counts.
        let mut both = s1_with_job_peak();
        both.memory.peak_bytes = GIB;
        let s = Summary::from_records(&[both]);
        assert_eq!(s.memory[0].peak_bytes, 3 * GIB);
        assert_eq!(s.memory[0].source, "job cgroup");
    }
}

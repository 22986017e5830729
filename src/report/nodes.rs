//! A job across its nodes: totals over the nodes, the nodes Slurm gave the job that left no
//! record here, and imbalance (a node, task or GPU far below the others).
//!
//! Imbalance is flagged where one is below half the busiest of its kind, and the busiest did
//! enough for the comparison to mean something: [`MIN_BUSY_PERCENT`] for nodes' CPU efficiency
//! and GPUs' mean utilization, [`MIN_TASK_CPU_SECONDS`] for tasks of one step.

use super::figures::Summary;
use super::figures::{Imbalance, Totals};
use crate::step::record::StepRecord;
use crate::units::saturating_sum;

/// A node, task or GPU is flagged below this share of the busiest of its kind.
pub const IMBALANCE_RATIO: f64 = 0.5;
/// Nodes and GPUs are compared only when the busiest is at least this busy, percent.
pub const MIN_BUSY_PERCENT: f64 = 10.0;
/// Tasks of a step are compared only when the busiest used this much CPU, seconds.
pub const MIN_TASK_CPU_SECONDS: f64 = 1.0;
/// At most this many imbalance lines of each kind; the rest are counted.
pub const MAX_FLAGS_PER_KIND: usize = 5;

/// A step in sort order: its order ([`super::step_order`]) and its id.
type StepKey = ((u8, u64), String);

/// The tasks of a job's steps with their CPU seconds, for comparing the tasks of each step:
/// step id → (task, CPU seconds), in the order the records came; gathered one record at a time
/// ([`StepTasks::add`]).
#[derive(Debug, Default)]
pub struct StepTasks {
    /// Every task counted.
    tasks: usize,
    /// Ids of the steps compared: those of records not of the batch step.
    compared: std::collections::BTreeSet<String>,
    by_step: std::collections::BTreeMap<StepKey, Vec<(String, f64)>>,
}

impl StepTasks {
    /// Adds record `r`'s tasks.
    pub fn add(&mut self, r: &StepRecord) {
        self.tasks += r.tasks.len();
        let step = r.step.id.as_str();
        if r.step.kind != "batch" {
            self.compared.insert(step.to_string());
        }
        let items = self
            .by_step
            .entry((super::step_order(step), step.to_string()))
            .or_default();
        items.extend(r.tasks.iter().map(|t| {
            let id = t
                .global_id
                .map_or_else(|| format!("pid {}", t.pid), |g| g.to_string());
            (
                format!("step {step} task {id} on {}", r.step.node),
                t.cpu_seconds,
            )
        }));
    }
}

/// Fills in `s.totals`, `s.missing_nodes` and `s.imbalance` from the job's `tasks` (those of
/// the records [`Summary::from_records`] merged into `s`).
pub fn complete(s: &mut Summary, tasks: &StepTasks) {
    s.totals = totals(s, tasks.tasks);
    s.missing_nodes = s
        .job_node_list
        .as_deref()
        .map(crate::gres::parse::expand_hostlist)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| !s.nodes.contains(n))
        .collect();
    let mut flags = node_flags(s);
    flags.extend(task_flags(tasks));
    flags.extend(gpu_flags(s));
    s.imbalance = flags;
}

/// Like [`complete`] for a summary read back from Slurm's database: no records, so no task
/// comparison, and the missing nodes are as stored.
pub fn complete_stored(s: &mut Summary) {
    s.totals = totals(s, 0);
    let mut flags = node_flags(s);
    flags.extend(gpu_flags(s));
    s.imbalance = flags;
}

fn totals(s: &Summary, tasks: usize) -> Totals {
    let requested: Option<Vec<u64>> = s.per_node.iter().map(|n| n.requested_bytes).collect();
    let means: Vec<f64> = s
        .gpus
        .iter()
        .filter_map(|g| g.mean_utilization_percent)
        .collect();
    Totals {
        memory_peak_bytes: saturating_sum(s.per_node.iter().map(|n| n.peak_bytes)),
        memory_needed_bytes: s
            .per_node
            .iter()
            .any(|n| n.needed_peak_bytes.is_some())
            .then(|| saturating_sum(s.per_node.iter().map(|n| n.sizing_bytes()))),
        memory_requested_bytes: requested
            .filter(|r| !r.is_empty())
            .map(|r| saturating_sum(r.iter().copied())),
        gpus: s.gpus.len(),
        gpu_memory_peak_bytes: saturating_sum(s.gpus.iter().map(|g| g.job_peak_bytes)),
        gpu_mean_utilization_percent: (!means.is_empty())
            .then(|| means.iter().sum::<f64>() / means.len() as f64),
        tasks,
        gpu_energy_joules: s
            .gpus
            .iter()
            .filter_map(|g| g.energy_joules)
            .reduce(|a, b| a + b),
        co2_grams: None,
        co2_grams_per_kwh: None,
    }
}

/// An [`Imbalance`] of `kind` for each of `items` (name, figure) below [`IMBALANCE_RATIO`] of
/// the largest, when the largest is at least `floor`. `say(name, figure, busiest, its figure)`
/// words it; by how much is added.
fn below_busiest(
    kind: &'static str,
    items: &[(String, f64)],
    floor: f64,
    say: impl Fn(&str, f64, &str, f64) -> String,
) -> Vec<Imbalance> {
    let Some((top_name, top)) = items
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(n, v)| (n.as_str(), *v))
    else {
        return Vec::new();
    };
    if items.len() < 2 || top < floor {
        return Vec::new();
    }
    items
        .iter()
        .filter(|(_, v)| *v < IMBALANCE_RATIO * top)
        .map(|(n, v)| Imbalance {
            kind,
            what: n.clone(),
            value: *v,
            busiest_value: top,
            busiest: top_name.to_string(),
            message: format!("{} ({})", say(n, *v, top_name, top), how_much_less(*v, top)),
        })
        .collect()
}

/// "8.0x less"; "under a twentieth" or "none at all" for next to nothing against a busy one.
fn how_much_less(v: f64, top: f64) -> String {
    if v <= 0.0 {
        "none at all".into()
    } else if top / v > 20.0 {
        "under a twentieth".into()
    } else {
        format!("{:.1}x less", top / v)
    }
}

/// Keeps [`MAX_FLAGS_PER_KIND`] flags, the furthest below first, and counts the rest.
fn capped(mut flags: Vec<Imbalance>, kind: &'static str) -> Vec<Imbalance> {
    flags.sort_by(|a, b| a.value.total_cmp(&b.value));
    let more = flags.len().saturating_sub(MAX_FLAGS_PER_KIND);
    flags.truncate(MAX_FLAGS_PER_KIND);
    if more > 0 {
        flags.push(Imbalance {
            kind,
            what: format!("{more} more"),
            value: 0.0,
            busiest_value: 0.0,
            busiest: String::new(),
            message: format!("and {more} more {kind}(s) below half of the busiest"),
        });
    }
    flags
}

fn node_flags(s: &Summary) -> Vec<Imbalance> {
    let items: Vec<(String, f64)> = s
        .per_node
        .iter()
        .filter_map(|n| Some((n.node.clone(), n.cpu_efficiency_percent?)))
        .collect();
    let flags = below_busiest("node", &items, MIN_BUSY_PERCENT, |n, v, top_n, top| {
        format!("node {n}: CPU efficiency {v:.0}% against {top:.0}% on {top_n}")
    });
    capped(flags, "node")
}

fn task_flags(tasks: &StepTasks) -> Vec<Imbalance> {
    let mut flags = Vec::new();
    for ((_, step), items) in &tasks.by_step {
        if !tasks.compared.contains(step) {
            continue;
        }
        flags.extend(below_busiest(
            "task",
            items,
            MIN_TASK_CPU_SECONDS,
            |n, v, top_n, top| {
                let top_task = top_n.split(" on ").next().unwrap_or(top_n);
                format!("{n}: {v:.1} s of CPU against {top:.1} s for {top_task}")
            },
        ));
    }
    capped(flags, "task")
}

fn gpu_flags(s: &Summary) -> Vec<Imbalance> {
    let items: Vec<(String, f64)> = s
        .gpus
        .iter()
        .filter_map(|g| {
            let idx = g.slurm_index.map_or_else(|| "?".into(), |i| i.to_string());
            Some((
                format!("GPU {idx} on {}", g.node),
                g.mean_utilization_percent?,
            ))
        })
        .collect();
    let flags = below_busiest("gpu", &items, MIN_BUSY_PERCENT, |n, v, top_n, top| {
        format!("{n}: mean utilization {v:.0}% against {top:.0}% for {top_n}")
    });
    capped(flags, "gpu")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::record::StepGpu;
    use crate::step::record::tests_support::record;

    const GIB: u64 = 1 << 30;

    /// Step `step` of a 60 s job on `node`: 4 CPUs, `cpu` CPU seconds, `peak` bytes.
    fn on(node: &str, step: &str, cpu: f64, peak: u64) -> StepRecord {
        let mut r = record(node, step);
        r.step.alloc_cpus = Some(4);
        r.cpu.alloc_cpus = 4;
        r.cpu.seconds = cpu;
        r.memory.peak_bytes = peak;
        r.job.alloc_memory_bytes = Some(4 * GIB);
        r.job.nodes = Some(3);
        r.job.node_list = Some("n[1-3]".into());
        r.tasks[0].cpu_seconds = cpu;
        r.tasks[0].global_id = Some(if node == "n1" { 0 } else { 1 });
        r
    }

    #[test]
    fn a_node_far_below_the_others_is_named_with_the_ratio() {
        let mut b = on("n1", "batch", 0.0, GIB);
        b.job.tasks = Some(2);
        let recs = vec![b, on("n1", "0", 216.0, 2 * GIB), on("n2", "0", 24.0, GIB)];
        let s = Summary::from_records(&recs);
        assert_eq!(s.nodes, vec!["n1", "n2"]);
        assert_eq!(s.missing_nodes, vec!["n3"]);
        assert_eq!(s.job_nodes, Some(3));
        assert_eq!(s.job_tasks, Some(2));
        let n1 = &s.per_node[0];
        assert_eq!((n1.steps, n1.alloc_cpus), (2, 4));
        assert_eq!(n1.cpu_efficiency_percent.map(f64::round), Some(90.0));
        assert_eq!(s.totals.memory_peak_bytes, 3 * GIB);
        assert_eq!(s.totals.memory_requested_bytes, Some(8 * GIB));
        let nodes: Vec<&Imbalance> = s.imbalance.iter().filter(|i| i.kind == "node").collect();
        assert_eq!(nodes.len(), 1, "{:?}", s.imbalance);
        assert_eq!(nodes[0].what, "n2");
        assert_eq!(
            nodes[0].message,
            "node n2: CPU efficiency 10% against 90% on n1 (9.0x less)"
        );
        let tasks: Vec<&Imbalance> = s.imbalance.iter().filter(|i| i.kind == "task").collect();
        assert_eq!(tasks.len(), 1, "{:?}", s.imbalance);
        assert_eq!(tasks[0].what, "step 0 task 1 on n2");
        assert!(
            tasks[0]
                .message
                .contains("24.0 s of CPU against 216.0 s for step 0 task 0"),
            "{}",
            tasks[0].message
        );
    }

    #[test]
    fn even_or_idle_work_is_not_flagged() {
        // Even: 60% and 40% are within half of each other.
        let s = Summary::from_records(&[on("n1", "0", 144.0, GIB), on("n2", "0", 96.0, GIB)]);
        assert!(s.imbalance.is_empty(), "{:?}", s.imbalance);
        // Both nearly idle: 0.6 s against 0.1 s of CPU says nothing about balance.
        let s = Summary::from_records(&[on("n1", "0", 0.6, GIB), on("n2", "0", 0.1, GIB)]);
        assert!(s.imbalance.is_empty(), "{:?}", s.imbalance);
    }

    #[test]
    fn an_idle_gpu_among_busy_ones_is_flagged() {
        let mut r = on("n1", "0", 200.0, GIB);
        let gpu = |i: u32, util: f64| StepGpu {
            slurm_index: Some(i),
            uuid: format!("GPU-{i}"),
            peak_step_memory_bytes: GIB,
            mean_utilization_percent: Some(util),
            max_utilization_percent: Some(util),
            ..StepGpu::default()
        };
        r.gpus = vec![gpu(0, 80.0), gpu(1, 70.0), gpu(2, 0.0)];
        let s = Summary::from_records(&[r]);
        let g: Vec<&str> = s
            .imbalance
            .iter()
            .filter(|i| i.kind == "gpu")
            .map(|i| i.message.as_str())
            .collect();
        assert_eq!(
            g,
            vec!["GPU 2 on n1: mean utilization 0% against 80% for GPU 0 on n1 (none at all)"]
        );
        assert_eq!(s.totals.gpus, 3);
        assert_eq!(s.totals.gpu_memory_peak_bytes, 3 * GIB);
        assert_eq!(
            s.totals.gpu_mean_utilization_percent.map(f64::round),
            Some(50.0)
        );
    }

    #[test]
    fn many_flags_are_capped_and_counted() {
        let mut recs = vec![on("n1", "0", 240.0, GIB)];
        for i in 2..=9 {
            recs.push(on(&format!("n{i}"), "1", 1.0, GIB));
        }
        let s = Summary::from_records(&recs);
        let nodes: Vec<&Imbalance> = s.imbalance.iter().filter(|i| i.kind == "node").collect();
        assert_eq!(nodes.len(), MAX_FLAGS_PER_KIND + 1);
        assert_eq!(
            nodes.last().unwrap().message,
            "and 3 more node(s) below half of the busiest"
        );
    }
}

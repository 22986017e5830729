//! The job's pressure stall figures, merged from its steps' records one at a time
//! ([`PressureFold`]): the stall shares per resource over the job and per node
//! ([`JobPressure`]). The rules that read them are in [`super`].
//!
//! Which steps count: the steps that ran the work. A batch step that only waited for its srun
//! steps stalls on nothing, and the extern step holds no work: when the job has a numbered or
//! interactive step with figures, the batch step is left out; the extern step always is.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::pressure::{StallPair, StallShare, StepPressure};
use crate::step::record::{StepRecord, clean_text};

/// A step shorter than this (seconds, the figures' own span) names no bottleneck: start-up
/// dominates it. Its figures are still given.
pub const MIN_SECONDS: f64 = 20.0;

/// The job's stall on one node.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodePressure {
    /// Node.
    pub node: String,
    /// Step seconds the figures cover (each counted step's span, added).
    pub seconds: f64,
    /// CPU, memory and I/O.
    pub cpu: Option<StallShare>,
    /// Memory.
    pub memory: Option<StallShare>,
    /// I/O.
    pub io: Option<StallShare>,
}

/// What the job's tasks waited for. Where no counted step had figures (cgroup v1, PSI off),
/// `available` is false, `why` says why and every figure is `null`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobPressure {
    /// The job's figures, in the form of a step's: `seconds` are the counted steps' spans
    /// added over the nodes, the shares their stall over that time.
    #[serde(flatten)]
    pub figures: StepPressure,
    /// Per node.
    pub per_node: Vec<NodePressure>,
    /// The class named by the summary's line (`cpu-starved`, `io-bound`, `memory-throttled`),
    /// `none` when nothing held the job back, `null` when not judged (no figures, too short).
    pub bottleneck: Option<String>,
    /// The summary's line.
    pub explanation: Option<String>,
    /// The counted step that waited longest for a core: its task's most threads and the CPUs
    /// per task it had, for the advice.
    #[serde(skip)]
    pub(super) cpu_hint: Option<CpuHint>,
    /// Whether a counted step's memory peak came within 10 % of its limit.
    #[serde(skip)]
    pub(super) at_memory_limit: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct CpuHint {
    pub(super) share: f64,
    pub(super) threads: Option<u64>,
    pub(super) cpus_per_task: Option<f64>,
    /// CPU time over elapsed × CPUs, percent.
    pub(super) busy_percent: f64,
}

/// One record's figures while the job is folded.
#[derive(Debug, Clone)]
struct Entry {
    node: String,
    batch: bool,
    seconds: f64,
    stall: [StallPair; 3],
    hint: CpuHint,
    at_limit: bool,
}

/// The job's pressure figures, one record at a time.
#[derive(Debug, Default)]
pub struct PressureFold {
    entries: Vec<Entry>,
    seen: bool,
    why: Option<String>,
}

impl PressureFold {
    /// Takes record `r`.
    pub fn add(&mut self, r: &StepRecord) {
        let Some(p) = &r.pressure else { return };
        if r.step.kind == "extern" {
            return;
        }
        self.seen = true;
        let (Some(seconds), true) = (p.seconds, p.available) else {
            if self.why.is_none() {
                self.why = p.why.as_deref().map(|w| clean_text(w, 300));
            }
            return;
        };
        let pair = |s: Option<StallShare>| StallPair {
            some: s.map_or(0.0, |s| s.some_seconds),
            full: s.and_then(|s| s.full_seconds),
        };
        let tasks = r.step.local_tasks.filter(|n| *n > 0).unwrap_or(1);
        let cpus = r
            .step
            .alloc_cpus
            .filter(|n| *n > 0)
            .unwrap_or(r.cpu.alloc_cpus);
        let share = p.cpu.map_or(0.0, |c| c.some_percent);
        self.entries.push(Entry {
            node: clean_text(&r.step.node, 64),
            batch: r.step.kind == "batch",
            seconds,
            stall: [pair(p.cpu), pair(p.memory), pair(p.io)],
            hint: CpuHint {
                share,
                threads: r.tasks.iter().filter_map(|t| t.max_threads).max(),
                cpus_per_task: (cpus > 0).then(|| f64::from(cpus) / f64::from(tasks)),
                busy_percent: r.cpu.utilization_percent,
            },
            at_limit: r
                .memory
                .limit_bytes
                .or(r.memory.job_limit_bytes)
                .is_some_and(|l| r.memory.peak_bytes as f64 >= 0.9 * l as f64),
        });
    }

    /// The job's figures; `None` when no record has any (records of earlier builds).
    pub fn finish(self) -> Option<JobPressure> {
        if !self.seen {
            return None;
        }
        let others = self.entries.iter().any(|e| !e.batch);
        let counted: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| !(others && e.batch))
            .collect();
        if counted.is_empty() {
            let why = self
                .why
                .unwrap_or_else(|| "no step of the job had pressure figures".into());
            return Some(JobPressure::of(StepPressure::unavailable(why)));
        }
        let sum = |es: &[&Entry]| -> (f64, [StallPair; 3]) {
            let mut total = [StallPair::default(); 3];
            let mut secs = 0.0;
            for e in es {
                secs += e.seconds;
                for (t, s) in total.iter_mut().zip(e.stall) {
                    t.some += s.some;
                    t.full = match (t.full, s.full) {
                        (Some(a), Some(b)) => Some(a + b),
                        (a, b) => a.or(b),
                    };
                }
            }
            (secs, total)
        };
        let mut by_node: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
        for e in &counted {
            by_node.entry(&e.node).or_default().push(e);
        }
        let per_node = by_node
            .into_iter()
            .map(|(node, es)| {
                let (secs, st) = sum(&es);
                NodePressure {
                    node: node.to_string(),
                    seconds: round3(secs),
                    cpu: Some(StallShare::of(st[0], secs)),
                    memory: Some(StallShare::of(st[1], secs)),
                    io: Some(StallShare::of(st[2], secs)),
                }
            })
            .collect();
        let (secs, st) = sum(&counted);
        Some(JobPressure {
            figures: StepPressure {
                available: true,
                why: None,
                seconds: Some(round3(secs)),
                cpu: Some(StallShare::of(st[0], secs)),
                memory: Some(StallShare::of(st[1], secs)),
                io: Some(StallShare::of(st[2], secs)),
            },
            per_node,
            bottleneck: None,
            explanation: None,
            cpu_hint: counted
                .iter()
                .map(|e| e.hint)
                .max_by(|a, b| a.share.total_cmp(&b.share)),
            at_memory_limit: counted.iter().any(|e| e.at_limit),
        })
    }
}

impl JobPressure {
    fn of(figures: StepPressure) -> JobPressure {
        JobPressure {
            figures,
            per_node: Vec::new(),
            bottleneck: None,
            explanation: None,
            cpu_hint: None,
            at_memory_limit: false,
        }
    }

    /// The `some` shares of CPU, memory and I/O, percent.
    pub(super) fn shares(&self) -> Option<[f64; 3]> {
        let f = &self.figures;
        Some([
            f.cpu?.some_percent,
            f.memory?.some_percent,
            f.io?.some_percent,
        ])
    }

    /// Long enough to name a bottleneck.
    pub(super) fn long_enough(&self) -> bool {
        self.figures.seconds.is_some_and(|s| s >= MIN_SECONDS)
    }

    /// The `some` share of resource `i` (0 CPU, 1 memory, 2 I/O), percent; 0 without figures.
    pub(super) fn share(&self, i: usize) -> f64 {
        self.shares().map_or(0.0, |s| s[i])
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

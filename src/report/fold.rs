//! A job's summary built one record at a time: [`JobFold`] takes each record in turn and keeps
//! only the figures the summary needs (sums, peaks, one row per step, the first events), never
//! the records themselves. The end-of-job summary runs as root inside slurmstepd over a job
//! that may have thousands of steps: its memory grows with the rows of the summary, not with
//! the records' timelines, tasks and events.
//!
//! The phases of a job with marks need every record's timeline once the marks of all are
//! known: [`JobFold::phases`] gives the fold of a second pass over the same records.
//! [`Summary::from_records`] is this fold over a slice.

use std::collections::BTreeMap;

use chrono::{DateTime, FixedOffset};

use super::figures::{
    GpuSummary, MAX_SUMMARY_EVENTS, MAX_SUMMARY_FAULTS, NodeSummary, OomEvent, StepSummary,
    Summary, TaskFailure,
};
use super::merge::{cpu_efficiency, merge_depth};
use super::nodes::StepTasks;
use super::runs::RunFold;
use super::story::{EventFold, IdleGpu, Phase, PhaseFold};
use crate::step::record::{StepRecord, TaskRecord, clean_text};

fn parse_time(s: &str) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(s).ok()
}

fn end_of(r: &StepRecord) -> Option<DateTime<FixedOffset>> {
    match &r.step.end {
        Some(e) => parse_time(e),
        None => parse_time(&r.written_at),
    }
}

fn failed(t: &TaskRecord) -> bool {
    t.signal.is_some() || t.exit_code.is_some_and(|c| c != 0)
}

/// A figure taken from the batch step's record when it has it, else from the first record
/// that has it.
#[derive(Debug)]
struct BatchOrAny<T> {
    batch: Option<T>,
    any: Option<T>,
}

impl<T> Default for BatchOrAny<T> {
    fn default() -> Self {
        BatchOrAny {
            batch: None,
            any: None,
        }
    }
}

impl<T: Clone> BatchOrAny<T> {
    fn add(&mut self, r: &StepRecord, v: Option<&T>) {
        if r.step.kind == "batch" && self.batch.is_none() {
            self.batch = v.cloned();
        }
        if self.any.is_none() {
            self.any = v.cloned();
        }
    }
    fn get(self) -> Option<T> {
        self.batch.or(self.any)
    }
}

/// One GPU of a node while its steps are merged: its summary, the longest step with
/// utilization, the longest with SM activity, the figures some step measured, and whether
/// every step on it saw processes outside itself (a step counts the job's other steps'
/// processes as others; only a process outside the job is seen by every step).
struct GpuFold {
    sum: GpuSummary,
    longest: f64,
    gpm_longest: f64,
    measured: std::collections::BTreeSet<String>,
    /// What each step's record of the GPU said of its sharing ([`super::gpu_shared`]).
    shared_by_step: Vec<Option<crate::gpu::Shared>>,
}

/// One node while its records are merged.
#[derive(Default)]
struct NodeFold {
    job_peak: Option<u64>,
    step_peak: u64,
    /// The largest needed figure of a record and its source; `any_needed`: some record had
    /// a figure of its own (else the node has none).
    needed: Option<(u64, String)>,
    any_needed: bool,
    page_cache: bool,
    requested: Option<u64>,
    alloc_cpus: u32,
    cpu_seconds: f64,
    steps: usize,
    gpus: BTreeMap<String, GpuFold>,
}

/// Who the job is, from the first record taken: job id, array job and task ids, user, uid.
type JobIdentity = (u32, Option<u32>, Option<u32>, String, u32);

/// A step's row in the summary, with its sort key (step order, node, arrival) and its OOM
/// kills.
type StepRow = (((u8, u64), String, usize), StepSummary, Option<OomEvent>);

/// A job's summary while its records are taken one at a time ([`JobFold::add`]).
#[derive(Default)]
pub struct JobFold {
    /// The step's own memory only (a step's summary): the job cgroup's peak is not used.
    own_memory: bool,
    records: usize,
    first: Option<JobIdentity>,
    name: Option<String>,
    job_nodes: BatchOrAny<u32>,
    job_node_list: BatchOrAny<String>,
    job_tasks: BatchOrAny<u32>,
    incomplete: bool,
    faults: Vec<String>,
    start: Option<DateTime<FixedOffset>>,
    end: Option<DateTime<FixedOffset>>,
    batch_elapsed: Option<f64>,
    longest: f64,
    cpu_seconds: f64,
    max_cores: f64,
    nodes: BTreeMap<String, NodeFold>,
    steps: Vec<StepRow>,
    tasks: StepTasks,
    events: Option<EventFold>,
    idle: BTreeMap<(String, String), IdleGpu>,
    runs: RunFold,
    pressure: super::pressure::figures::PressureFold,
    /// The earliest timeline start and the latest timeline end (Unix seconds).
    t0: Option<f64>,
    t_end: Option<f64>,
}

impl JobFold {
    /// The fold of a whole job.
    pub fn new() -> JobFold {
        JobFold::default()
    }

    /// The fold of one step's records (`<job>.<step>`): memory is the step's own peak, not
    /// the whole job's.
    pub fn of_step() -> JobFold {
        JobFold {
            own_memory: true,
            ..JobFold::default()
        }
    }

    /// Records taken so far.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Takes record `r` (of the job; any order, though ties go to the first taken).
    pub fn add(&mut self, r: &StepRecord) {
        self.records += 1;
        if self.first.is_none() {
            self.first = Some((
                r.job.id,
                r.job.array_job_id,
                r.job.array_task_id,
                clean_text(&r.job.user, 64),
                r.job.uid,
            ));
        }
        if self.name.is_none() {
            self.name = r.job.name.as_deref().map(|n| clean_text(n, 100));
        }
        // The batch step's view is Slurm's own (see JobInfo::nodes).
        self.job_nodes.add(r, r.job.nodes.as_ref());
        self.job_node_list.add(r, r.job.node_list.as_ref());
        self.job_tasks.add(r, r.job.tasks.as_ref());
        self.incomplete |= !r.complete;
        for f in &r.sampler.faults {
            if self.faults.len() >= MAX_SUMMARY_FAULTS {
                break;
            }
            self.faults.push(format!(
                "step {} on {}: {}",
                clean_text(&r.step.id, 32),
                clean_text(&r.step.node, 64),
                clean_text(f, 400)
            ));
        }
        if let Some(t) = parse_time(&r.step.start) {
            self.start = Some(self.start.map_or(t, |s| s.min(t)));
        }
        if let Some(t) = end_of(r) {
            self.end = Some(self.end.map_or(t, |e| e.max(t)));
        }
        let elapsed = r.step.elapsed_seconds;
        if r.step.id == "batch" {
            self.batch_elapsed = Some(self.batch_elapsed.map_or(elapsed, |m| m.max(elapsed)));
        }
        self.longest = self.longest.max(elapsed);
        // CPU: steps have their own cgroups, so their CPU times add up.
        self.cpu_seconds += r.cpu.seconds;
        self.max_cores = self.max_cores.max(r.cpu.max_cores);
        self.add_node(r);
        self.add_step(r);
        self.runs.add(r);
        self.pressure.add(r);
        self.tasks.add(r);
        self.events
            .get_or_insert_with(|| EventFold::new(MAX_SUMMARY_EVENTS))
            .add(r);
        for g in super::story::idle_gpus(std::slice::from_ref(r)) {
            let key = (g.node.clone(), g.uuid.clone());
            let longer = self
                .idle
                .get(&key)
                .is_none_or(|o| g.idle.observed_seconds > o.idle.observed_seconds);
            if longer {
                self.idle.insert(key, g);
            }
        }
        if let Some(tl) = &r.timeline {
            self.t0 = Some(self.t0.map_or(tl.start_unix, |t| t.min(tl.start_unix)));
            let end = tl.start_unix + r.step.elapsed_seconds;
            self.t_end = Some(self.t_end.map_or(end, |t| t.max(end)));
        }
    }

    /// The node's figures: memory, CPU, and its GPUs merged by UUID over its steps.
    fn add_node(&mut self, r: &StepRecord) {
        let n = self.nodes.entry(r.step.node.clone()).or_default();
        let job_peak = r.memory.job_peak_bytes.filter(|_| !self.own_memory);
        n.job_peak = n.job_peak.max(job_peak);
        n.step_peak = n.step_peak.max(r.memory.peak_bytes);
        n.page_cache |= r.memory.peak_includes_page_cache;
        // What the record says the node needed: the job cgroup's figure and the step's, each
        // its charged peak where the record has no needed one (an earlier build, no cgroup),
        // so that no step is sized below what it was charged without a figure saying so. The
        // job's figure first: on a tie it is the node's.
        let m = &r.memory;
        n.any_needed |= m.needed_peak_bytes.is_some() || m.job_needed_peak_bytes.is_some();
        let charged = || "charged_peak".to_string();
        let step = match (m.needed_peak_bytes, &m.needed_peak_source) {
            (Some(b), s) => (b, s.clone().unwrap_or_else(charged)),
            (None, _) => (m.peak_bytes, charged()),
        };
        let job = job_peak.map(
            |p| match (m.job_needed_peak_bytes, &m.job_needed_peak_source) {
                (Some(b), s) => (b, s.clone().unwrap_or_else(charged)),
                (None, _) => (p, charged()),
            },
        );
        for c in [job, Some(step)].into_iter().flatten() {
            if n.needed.as_ref().is_none_or(|(b, _)| c.0 > *b) {
                n.needed = Some(c);
            }
        }
        n.requested = n.requested.max(r.job.alloc_memory_bytes);
        n.alloc_cpus = n
            .alloc_cpus
            .max(r.step.alloc_cpus.unwrap_or(0).max(r.cpu.alloc_cpus));
        n.cpu_seconds += r.cpu.seconds;
        n.steps += 1;
        for g in &r.gpus {
            let e = n.gpus.entry(g.uuid.clone()).or_insert_with(|| GpuFold {
                sum: GpuSummary {
                    node: r.step.node.clone(),
                    vendor: g.vendor,
                    pci_bus_id: g.pci_bus_id.as_deref().map(|p| clean_text(p, 32)),
                    render_minor: (g.vendor == crate::gpu::Vendor::Amd)
                        .then_some(g.minor)
                        .flatten(),
                    uuid: g.uuid.clone(),
                    name: clean_text(&g.name, 96),
                    memory_total_bytes: g.memory_total_bytes,
                    ..GpuSummary::default()
                },
                longest: -1.0,
                gpm_longest: -1.0,
                measured: Default::default(),
                shared_by_step: Vec::new(),
            });
            e.shared_by_step.push(g.shared.clone());
            let sum = &mut e.sum;
            sum.slurm_index = sum.slurm_index.or(g.slurm_index);
            if sum.mig.is_none() {
                sum.mig = g.mig.clone().map(|mut m| {
                    m.profile = clean_text(&m.profile, 32);
                    m.parent_uuid = clean_text(&m.parent_uuid, 96);
                    m
                });
            }
            // The job's processes at one reading: the step's and its other steps'.
            let job_bytes = g.peak_job_memory_bytes.unwrap_or(0);
            sum.job_peak_bytes = sum
                .job_peak_bytes
                .max(g.peak_step_memory_bytes)
                .max(job_bytes);
            sum.device_peak_bytes = sum.device_peak_bytes.max(g.peak_device_memory_bytes);
            sum.max_utilization_percent =
                match (sum.max_utilization_percent, g.max_utilization_percent) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            if g.mean_utilization_percent.is_some() && r.step.elapsed_seconds > e.longest {
                e.longest = r.step.elapsed_seconds;
                sum.mean_utilization_percent = g.mean_utilization_percent;
                sum.energy_joules = g.energy_joules;
            }
            let longer =
                g.depth.sm_active_percent.is_some() && r.step.elapsed_seconds > e.gpm_longest;
            if longer {
                e.gpm_longest = r.step.elapsed_seconds;
            }
            merge_depth(&mut sum.depth, &g.depth, longer, &mut e.measured);
        }
    }

    /// The step's row, and its OOM kills.
    fn add_step(&mut self, r: &StepRecord) {
        let alloc = r.step.alloc_cpus.unwrap_or(0).max(r.cpu.alloc_cpus).max(1);
        let row = StepSummary {
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
            gpu_energy_joules: r
                .gpus
                .iter()
                .filter_map(|g| g.energy_joules)
                .reduce(|a, b| a + b),
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
            run: r
                .job
                .run
                .as_ref()
                .map(|x| x.restart_count.saturating_add(1)),
            needed_peak_bytes: r.memory.needed_peak_bytes,
            pressure: r.pressure.clone(),
        };
        let kills = r.memory.oom_kills.unwrap_or(0);
        let oom = (kills > 0).then(|| OomEvent {
            step: r.step.id.clone(),
            node: r.step.node.clone(),
            kills,
            peak_bytes: r.memory.peak_bytes,
            limit_bytes: r.memory.limit_bytes.or(r.memory.job_limit_bytes),
        });
        let key = (
            super::step_order(&r.step.id),
            r.step.node.clone(),
            self.steps.len(),
        );
        self.steps.push((key, row, oom));
    }

    /// The fold of the job's phases, when a record had a mark: every record (the same ones)
    /// must then be taken again ([`PhaseFold::add`]), and the phases given to
    /// [`JobFold::finish`].
    pub fn phases(&self) -> Option<PhaseFold> {
        let t0 = self.t0?;
        let marks = self.events.as_ref()?.marks(t0);
        PhaseFold::new(t0, &marks, self.t_end.unwrap_or(t0).max(t0))
    }

    /// The summary of the records taken, with the job's `phases`. No record: an empty summary.
    pub fn finish(self, phases: Vec<Phase>) -> Summary {
        let Some((job_id, array_job_id, array_task_id, user, uid)) = self.first else {
            return Summary::default();
        };
        let mut s = Summary {
            job_id,
            array_job_id,
            array_task_id,
            name: self.name,
            user,
            uid,
            job_nodes: self.job_nodes.get(),
            job_node_list: self.job_node_list.get(),
            job_tasks: self.job_tasks.get(),
            complete: !self.incomplete,
            faults: self.faults,
            start: self.start.map(|t| t.to_rfc3339()),
            end: self.end.map(|t| t.to_rfc3339()),
            ..Summary::default()
        };
        let span = match (self.start, self.end) {
            (Some(a), Some(b)) => Some((b - a).num_milliseconds().max(0) as f64 / 1e3),
            _ => None,
        };
        s.elapsed_seconds = self
            .batch_elapsed
            .or(span)
            .unwrap_or(self.longest)
            .max(self.longest);
        s.runs = self.runs.finish();
        if s.runs.len() > 1 {
            // A requeued job's CPU time is every run's: so is the time it is measured against.
            s.elapsed_seconds = s.runs.iter().map(|r| r.elapsed_seconds).sum();
        }
        s.cpu.seconds = self.cpu_seconds;
        s.cpu.alloc_cpus = self
            .nodes
            .values()
            .fold(0, |a, n| a.saturating_add(n.alloc_cpus));
        s.cpu.max_cores = self.max_cores;
        s.cpu.efficiency_percent =
            cpu_efficiency(s.cpu.seconds, s.elapsed_seconds, s.cpu.alloc_cpus);
        for (node, n) in self.nodes {
            let (peak, source, cache) = match n.job_peak {
                Some(p) => (p.max(n.step_peak), "job cgroup", true),
                None => (n.step_peak, "largest step", n.page_cache),
            };
            // Never above what was charged: the two are read at different moments.
            let needed = n
                .needed
                .filter(|_| n.any_needed)
                .map(|(b, s)| (b.min(peak), s));
            let mut gpus: Vec<GpuSummary> = n
                .gpus
                .into_values()
                .map(|mut g| {
                    let steps: Vec<Option<&crate::gpu::Shared>> =
                        g.shared_by_step.iter().map(Option::as_ref).collect();
                    g.sum.shared = super::gpu_shared::job_shared(&steps);
                    g.sum
                })
                .collect();
            gpus.sort_by_key(|g| (g.slurm_index, g.uuid.clone()));
            s.per_node.push(NodeSummary {
                cpu_efficiency_percent: cpu_efficiency(
                    n.cpu_seconds,
                    s.elapsed_seconds,
                    n.alloc_cpus,
                ),
                cpu_seconds: n.cpu_seconds,
                alloc_cpus: n.alloc_cpus,
                steps: n.steps,
                peak_bytes: peak,
                source: source.into(),
                includes_page_cache: cache,
                requested_bytes: n.requested,
                percent_of_request: n
                    .requested
                    .filter(|r| *r > 0)
                    .map(|r| 100.0 * peak as f64 / r as f64),
                gpu_energy_joules: gpus
                    .iter()
                    .filter_map(|g| g.energy_joules)
                    .reduce(|a, b| a + b),
                needed_peak_bytes: needed.as_ref().map(|(b, _)| *b),
                needed_peak_source: needed.map(|(_, s)| clean_text(&s, 64)),
                node: node.clone(),
            });
            s.nodes.push(node);
            s.gpus.extend(gpus);
        }
        let mut steps = self.steps;
        steps.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, row, oom) in steps {
            s.steps.push(row);
            s.oom.extend(oom);
        }
        super::nodes::complete(&mut s, &self.tasks);
        s.phases = phases;
        s.gpu_idle = self.idle.into_values().collect();
        s.pressure = self.pressure.finish();
        if let (Some(t0), Some(ev)) = (self.t0, self.events) {
            let (events, count) = ev.important(t0);
            s.events_more = count.saturating_sub(events.len() as u64);
            s.events = events;
        }
        // The built-in rules; a caller with the site's settings sets its own.
        s.set_classes(&super::classes::ClassRules::default());
        s
    }
}

//! A job's figures merged from its step records: the job as a whole, each step on each node.
//! The figures themselves are plain data in [`super::figures`]; per-node rows, job totals and
//! imbalance are filled in by [`super::nodes`], classes and advice by [`super::classes`].

use std::collections::BTreeMap;

use chrono::{DateTime, FixedOffset};

// The types stay reachable where they were first defined.
pub use super::figures::{
    Advice, CpuSummary, GpuSummary, MAX_SUMMARY_EVENTS, MAX_SUMMARY_FAULTS, NodeSummary, OomEvent,
    StepSummary, Summary, TaskFailure,
};
use crate::gpu::figures::{GpuDepth, Spread};
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
                gpu_energy_joules: None,
            });

            // GPUs, merged by UUID over the node's steps.
            // Per GPU: its summary, the longest step with utilization, the longest with SM
            // activity, and the figures some step measured.
            type Merged = (GpuSummary, f64, f64, std::collections::BTreeSet<String>);
            let mut by_uuid: BTreeMap<&str, Merged> = BTreeMap::new();
            // Per GPU: what each step on it said of its sharing (super::gpu_shared).
            let mut shared_by_step: BTreeMap<&str, Vec<Option<&crate::gpu::Shared>>> =
                BTreeMap::new();
            for r in &on {
                for g in &r.gpus {
                    shared_by_step
                        .entry(g.uuid.as_str())
                        .or_default()
                        .push(g.shared.as_ref());
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
                            -1.0,
                            Default::default(),
                        )
                    });
                    let (sum, longest, gpm_longest, measured) = e;
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
                    if g.mean_utilization_percent.is_some() && r.step.elapsed_seconds > *longest {
                        *longest = r.step.elapsed_seconds;
                        sum.mean_utilization_percent = g.mean_utilization_percent;
                        sum.energy_joules = g.energy_joules;
                    }
                    let longer = g.depth.sm_active_percent.is_some()
                        && r.step.elapsed_seconds > *gpm_longest;
                    if longer {
                        *gpm_longest = r.step.elapsed_seconds;
                    }
                    merge_depth(&mut sum.depth, &g.depth, longer, measured);
                }
            }
            for (uuid, (sum, ..)) in by_uuid.iter_mut() {
                sum.shared = shared_by_step
                    .get(uuid)
                    .and_then(|steps| super::gpu_shared::job_shared(steps));
            }
            let mut gpus: Vec<GpuSummary> = by_uuid.into_values().map(|(g, ..)| g).collect();
            gpus.sort_by_key(|g| (g.slurm_index, g.uuid.clone()));
            if let Some(n) = s.per_node.last_mut() {
                n.gpu_energy_joules = gpus
                    .iter()
                    .filter_map(|g| g.energy_joules)
                    .reduce(|a, b| a + b);
            }
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
        // The built-in rules; a caller with the site's settings sets its own.
        s.set_classes(&super::classes::ClassRules::default());
        s
    }

    /// Evaluates the job's classes under `rules` and builds the advice from them. Called once
    /// where a summary is finished (with the built-in rules); again with the site's rules,
    /// where the caller has the site's settings.
    pub fn set_classes(&mut self, rules: &super::classes::ClassRules) {
        self.classes = super::classes::classify(self, rules);
        self.advice = super::advice::advise(self, rules);
    }

    /// Adds the emissions of the GPUs' energy at the site's `grams_per_kwh` (0: the site set
    /// none, and the summary has no emissions line).
    pub fn set_co2(&mut self, grams_per_kwh: f64) {
        if grams_per_kwh > 0.0
            && let Some(j) = self.totals.gpu_energy_joules
        {
            self.totals.co2_grams = Some(j / 3.6e6 * grams_per_kwh);
            self.totals.co2_grams_per_kwh = Some(grams_per_kwh);
        }
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
}

/// Merges one step's figures of a GPU into the job's (`longer`: the step is longer than every
/// one merged before that measured SM activity): SM activity from the longest step that
/// measured it (the batch step sees the whole job), Xid errors from every step once, and "no
/// data" only for the figures no step measured.
fn merge_depth(
    job: &mut GpuDepth,
    step: &GpuDepth,
    longer: bool,
    measured: &mut std::collections::BTreeSet<String>,
) {
    let take = |a: &mut Option<Spread>, b: &Option<Spread>| {
        if b.is_some() && (a.is_none() || longer) {
            *a = *b;
        }
    };
    take(
        &mut job.process_utilization_percent,
        &step.process_utilization_percent,
    );
    take(&mut job.sm_active_percent, &step.sm_active_percent);
    take(&mut job.sm_occupancy_percent, &step.sm_occupancy_percent);
    take(&mut job.tensor_active_percent, &step.tensor_active_percent);
    take(
        &mut job.dram_bandwidth_percent,
        &step.dram_bandwidth_percent,
    );
    if let Some(t) = &step.throttle_seconds {
        let mine = job.throttle_seconds.get_or_insert_with(Default::default);
        for (k, v) in t {
            let e = mine.entry(k.clone()).or_default();
            *e = e.max(*v);
        }
    }
    if let Some(x) = &step.xid_errors {
        let mine = job.xid_errors.get_or_insert_with(Vec::new);
        for e in x {
            if !mine.contains(e) {
                mine.push(e.clone());
            }
        }
    }
    if let Some(e) = step.ecc_errors {
        let mine = job.ecc_errors.get_or_insert_with(Default::default);
        mine.corrected = mine.corrected.max(e.corrected);
        mine.uncorrected = mine.uncorrected.max(e.uncorrected);
    }
    // A figure has no value for the job only when no step measured it.
    for (k, v) in &step.no_data {
        if !measured.contains(k) {
            job.no_data.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    for k in crate::gpu::figures::figure::ALL {
        if !step.no_data.contains_key(*k) {
            measured.insert(k.to_string());
            job.no_data.remove(*k);
        }
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
    fn gpu_energy_adds_up_per_step_node_and_job_and_emissions_only_where_the_site_says() {
        use crate::step::record::StepGpu;
        let gpu = |uuid: &str, j: Option<f64>| StepGpu {
            uuid: uuid.into(),
            energy_joules: j,
            mean_utilization_percent: Some(50.0),
            ..StepGpu::default()
        };
        let mut b1 = job(GIB, 4 * GIB);
        b1.gpus = vec![gpu("GPU-a", Some(3600.0)), gpu("GPU-b", Some(7200.0))];
        let mut b2 = job(GIB, 4 * GIB);
        b2.step.node = "n2".into();
        b2.gpus = vec![gpu("GPU-c", None)];
        let mut s = Summary::from_records(&[b1, b2]);
        assert_eq!(s.steps[0].gpu_energy_joules, Some(10800.0));
        assert_eq!(s.per_node[0].gpu_energy_joules, Some(10800.0));
        assert_eq!(
            s.per_node[1].gpu_energy_joules, None,
            "not measured is not 0"
        );
        assert_eq!(s.totals.gpu_energy_joules, Some(10800.0));
        s.set_co2(0.0);
        assert_eq!(s.totals.co2_grams, None);
        s.set_co2(400.0);
        // 3 Wh at 400 g/kWh.
        assert!((s.totals.co2_grams.unwrap() - 1.2).abs() < 1e-9);
        let text = super::super::text::render(&s, &[], &Default::default());
        assert!(
            text.contains(
                "GPU energy:    3.0 Wh on 2 GPU(s); about 1 g CO2 at the site's 400 g/kWh"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_gpu_held_by_the_batch_script_and_its_srun_step_is_the_jobs_alone() {
        use crate::gpu::Shared;
        use crate::step::record::StepGpu;
        // Each step saw the other's 1 GiB holder beside its own, and knew it for the job's.
        let saw_sibling = Shared::decide(None, false, 1).map(|s| Shared {
            other_step_processes: Some(1),
            outside_job_processes: Some(0),
            ..s
        });
        let gpu = |shared: Option<Shared>| StepGpu {
            uuid: "GPU-a".into(),
            peak_step_memory_bytes: GIB,
            peak_job_memory_bytes: Some(2 * GIB),
            shared,
            ..StepGpu::default()
        };
        let mut b = job(GIB, 4 * GIB);
        b.gpus = vec![gpu(saw_sibling.clone())];
        let mut s0 = record("n1", "0");
        s0.gpus = vec![gpu(saw_sibling.clone())];
        let s = Summary::from_records(&[b.clone(), s0.clone()]);
        assert_eq!(s.gpus[0].shared, None);
        // The job's processes held both holders at once.
        assert_eq!(s.gpus[0].job_peak_bytes, 2 * GIB);
        let text = super::super::text::render(&s, &[], &Default::default());
        assert!(!text.contains("shared"), "{text}");
        // Another job's process beside them: shared, with that one process named.
        s0.gpus[0].shared = saw_sibling.map(|sh| Shared {
            other_processes: 2,
            outside_job_processes: Some(1),
            ..sh
        });
        let s = Summary::from_records(&[b, s0]);
        let sh = s.gpus[0].shared.as_ref().expect("shared with others");
        assert_eq!(
            (sh.by.as_str(), sh.outside_job_processes),
            ("other_processes", Some(1))
        );
        let text = super::super::text::render(&s, &[], &Default::default());
        assert!(
            text.contains("shared with 1 process(es) of others seen on it"),
            "{text}"
        );
    }

    #[test]
    fn a_gpu_figure_has_no_value_for_the_job_only_when_no_step_measured_it() {
        use crate::gpu::figures::{GpuDepth, NoData, Spread, figure};
        use crate::step::record::StepGpu;
        let gpu = |depth: GpuDepth| StepGpu {
            uuid: "GPU-a".into(),
            depth,
            ..StepGpu::default()
        };
        let mut b = job(GIB, 4 * GIB);
        b.gpus = vec![gpu(GpuDepth::unsampled("too short"))];
        let mut s0 = record("n1", "0");
        s0.gpus = vec![gpu(GpuDepth {
            sm_active_percent: Some(Spread {
                mean: 30.0,
                max: 50.0,
            }),
            ..GpuDepth::default()
        })];
        let mut s1 = record("n1", "1");
        let mut no_gpm = GpuDepth::default();
        no_gpm.no_data.insert(
            figure::SM_ACTIVITY.into(),
            NoData::not_sampled("one reading"),
        );
        s1.gpus = vec![gpu(no_gpm)];
        for order in [[&b, &s0, &s1], [&s1, &s0, &b]] {
            let recs: Vec<_> = order.iter().map(|r| (*r).clone()).collect();
            let s = Summary::from_records(&recs);
            let d = &s.gpus[0].depth;
            assert!(d.no_data.is_empty(), "{:?}", d.no_data);
            assert_eq!(d.sm_active_percent.map(|x| x.mean), Some(30.0));
        }
        let s = Summary::from_records(&[b]);
        assert_eq!(s.gpus[0].depth.no_data.len(), 8);
        let text = super::super::text::render(&s, &[], &Default::default());
        assert!(
            text.contains("memory: n/a, not sampled: too short"),
            "{text}"
        );
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

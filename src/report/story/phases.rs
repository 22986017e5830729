//! Phases between `gpu-tracker mark` marks, with their peaks and means from the timeline's
//! buckets, and each allocated GPU's idle time.

use std::collections::BTreeMap;

use serde::Serialize;

use super::events::{events, job_start, record_end, round3};
use crate::history::pressure::{BucketStall, percent};
use crate::history::{Bucket, GpuIdle, Stat};
use crate::step::record::StepRecord;

/// One phase: from its mark to the next (or the job's end).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// Its name; `(before the first mark)` for the time before any.
    pub name: String,
    /// Start, seconds since the job's start.
    pub start: f64,
    /// End, seconds since the job's start.
    pub end: f64,
    /// Peak memory over the nodes (each node's steps added), bytes.
    pub memory_peak_bytes: u64,
    /// Mean cores busy over the nodes.
    pub cpu_mean_cores: Option<f64>,
    /// Most cores busy in one interval (nodes added).
    pub cpu_max_cores: Option<f64>,
    /// Each GPU in the phase.
    pub gpus: Vec<PhaseGpu>,
    /// Buckets the figures come from (0: no sample fell in the phase).
    pub buckets: u32,
    /// Share of the phase's time in which some task waited for a core, percent: the stall
    /// seconds of every step's buckets in the phase over the seconds they cover (the steps'
    /// shares weighted by time). `None` (JSON `null`) where no bucket in the phase had
    /// pressure figures (cgroup v1, `psi=0`): no data, never 0.
    pub cpu_stall_percent: Option<f64>,
    /// The same for memory (reclaim, refaults, swap).
    pub memory_stall_percent: Option<f64>,
    /// The same for block I/O.
    pub io_stall_percent: Option<f64>,
}

/// One GPU in a phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseGpu {
    /// Node.
    pub node: String,
    /// UUID.
    pub uuid: String,
    /// Slurm's index, else NVML's.
    pub index: u32,
    /// Peak device memory, bytes.
    pub memory_peak_bytes: Option<u64>,
    /// Mean utilization, percent.
    pub utilization_mean_percent: Option<f64>,
    /// Mean SM activity (GPM, Hopper and newer), percent; `None` (JSON `null`) where the GPU
    /// gave none in the phase: no data, never 0.
    pub sm_active_mean_percent: Option<f64>,
}

impl PhaseGpu {
    /// The mean SM activity for a table: `37%`, or `n/a` where the GPU gave none.
    pub fn sm_active_text(&self) -> String {
        self.sm_active_mean_percent
            .map_or_else(|| "n/a".into(), |p| format!("{p:.0}%"))
    }
}

/// One GPU's figures while a phase is summed up.
#[derive(Default)]
struct GpuSums {
    index: u32,
    memory_peak: Option<f64>,
    utilization: Mean,
    sm_active: Mean,
}

/// Overlap, in seconds, of a bucket `[b, b + w)` with `[s, e)` (its weight in the phase's
/// means).
fn overlap(b: f64, w: f64, s: f64, e: f64) -> f64 {
    ((b + w).min(e) - b.max(s)).max(0.0)
}

/// Time-weighted accumulation of bucket means.
#[derive(Default, Clone, Copy)]
struct Mean {
    sum: f64,
    weight: f64,
    max: f64,
}

impl Mean {
    fn add(&mut self, s: &Stat, w: f64) {
        self.sum += s.mean * w;
        self.weight += w;
        self.max = self.max.max(s.max);
    }
    fn mean(&self) -> Option<f64> {
        (self.weight > 0.0).then(|| self.sum / self.weight)
    }
}

/// The buckets of a record whose middle lies in `[s, e)` (job seconds), with their overlap with
/// it as weight. `t0` is the job's start.
fn buckets_in<'a>(
    r: &'a StepRecord,
    t0: f64,
    s: f64,
    e: f64,
) -> impl Iterator<Item = (&'a Bucket, f64)> + 'a {
    let tl = r.timeline.as_ref();
    let off = tl.map_or(0.0, |t| t.start_unix - t0);
    let w = tl.map_or(1.0, |t| t.bucket_seconds);
    let end = record_end(r).map_or(f64::INFINITY, |x| x - t0);
    tl.into_iter().flat_map(move |t| {
        t.buckets.iter().filter_map(move |b| {
            let bs = off + b.t;
            // A step's last bucket ends with the step.
            let be = (bs + w).min(end.max(bs + 1e-3));
            // Each bucket belongs to the phase its middle lies in: a phase's figures are as
            // precise as half a bucket, and a neighbour's peak never leaks in.
            let mid = (bs + be) / 2.0;
            let o = overlap(bs, be - bs, s, e);
            (mid >= s && mid < e).then_some((b, o.max(1e-3)))
        })
    })
}

use super::events::MAX_PHASES;

/// The job's phases with their figures. Empty when no step recorded a mark.
pub fn phases(records: &[StepRecord]) -> Vec<Phase> {
    let Some(t0) = job_start(records) else {
        return Vec::new();
    };
    let marks: Vec<(f64, String)> = events(records)
        .into_iter()
        .filter(|e| e.event.kind == "mark")
        .map(|e| (e.t, e.event.name.clone().unwrap_or_default()))
        .collect();
    let job_end = records.iter().filter_map(record_end).fold(t0, f64::max);
    let Some(mut fold) = PhaseFold::new(t0, &marks, job_end) else {
        return Vec::new();
    };
    for r in records {
        fold.add(r);
    }
    fold.finish()
}

/// The phases' figures, summed up one record at a time: the phases are known first (from the
/// marks of every record), then each record adds its buckets to the phases they lie in.
pub struct PhaseFold {
    t0: f64,
    spans: Vec<(String, f64, f64)>,
    sums: Vec<PhaseSums>,
}

/// One phase's figures while they are summed up.
#[derive(Default)]
struct PhaseSums {
    /// Per node: memory peaks of its steps added; CPU means added.
    mem: BTreeMap<String, f64>,
    cpu_mean: BTreeMap<String, Option<f64>>,
    cpu_max: BTreeMap<String, f64>,
    gpus: BTreeMap<(String, String), GpuSums>,
    count: u32,
    /// The stall of every step's buckets in the phase, added (exact: stall seconds add up).
    stall: Option<BucketStall>,
}

impl PhaseFold {
    /// The phases of a job that started at `t0` and ended at `job_end` (Unix seconds), from
    /// its marks (seconds since `t0`, in time order; at most [`MAX_PHASES`] are used). `None`
    /// without a mark.
    pub fn new(t0: f64, marks: &[(f64, String)], job_end: f64) -> Option<PhaseFold> {
        let marks = &marks[..marks.len().min(MAX_PHASES)];
        let first = marks.first()?;
        let job_end = job_end - t0;
        let mut spans: Vec<(String, f64, f64)> = Vec::new();
        if first.0 > 1.0 {
            spans.push(("(before the first mark)".into(), 0.0, first.0));
        }
        for (i, (t, name)) in marks.iter().enumerate() {
            let end = marks.get(i + 1).map_or(job_end.max(*t), |m| m.0);
            spans.push((name.clone(), *t, end));
        }
        let sums = spans.iter().map(|_| PhaseSums::default()).collect();
        Some(PhaseFold { t0, spans, sums })
    }

    /// Adds record `r`'s buckets to the phases they lie in.
    pub fn add(&mut self, r: &StepRecord) {
        for ((_, s, e), sums) in self.spans.iter().zip(self.sums.iter_mut()) {
            sums.add(r, self.t0, *s, *e);
        }
    }

    /// The phases with their figures.
    pub fn finish(self) -> Vec<Phase> {
        self.spans
            .into_iter()
            .zip(self.sums)
            .map(|((name, s, e), sums)| sums.phase(name, s, e))
            .collect()
    }
}

impl PhaseSums {
    fn add(&mut self, r: &StepRecord, t0: f64, s: f64, e: f64) {
        let node = r.step.node.as_str();
        let mut peak: f64 = 0.0;
        let mut cpu = Mean::default();
        for (b, w) in buckets_in(r, t0, s, e) {
            self.count += 1;
            peak = peak.max(b.memory_bytes.max);
            if let Some(c) = &b.cpu_cores {
                cpu.add(c, w);
            }
            if let Some(st) = b.stall {
                self.stall = Some(self.stall.map_or(st, |sum| sum.plus(st)));
            }
            let uuids = r.timeline.as_ref().map_or(&[][..], |t| &t.gpus[..]);
            for (g, uuid) in b.gpus.iter().zip(uuids) {
                let index = r
                    .gpus
                    .iter()
                    .find(|x| x.uuid == *uuid)
                    .map_or(0, |x| x.slurm_index.unwrap_or(x.nvml_index));
                let entry = self
                    .gpus
                    .entry((node.to_string(), uuid.clone()))
                    .or_insert_with(|| GpuSums {
                        index,
                        ..GpuSums::default()
                    });
                if let Some(m) = &g.memory_bytes {
                    entry.memory_peak = Some(entry.memory_peak.unwrap_or(0.0).max(m.max));
                }
                if let Some(u) = &g.utilization_percent {
                    entry.utilization.add(u, w);
                }
                if let Some(a) = &g.sm_active_percent {
                    entry.sm_active.add(a, w);
                }
            }
        }
        *self.mem.entry(node.to_string()).or_default() += peak;
        if let Some(m) = cpu.mean() {
            let slot = self.cpu_mean.entry(node.to_string()).or_default();
            *slot = Some(slot.unwrap_or(0.0) + m);
            *self.cpu_max.entry(node.to_string()).or_default() += cpu.max;
        }
    }

    fn phase(self, name: String, s: f64, e: f64) -> Phase {
        let means: Vec<f64> = self.cpu_mean.values().flatten().copied().collect();
        let stall = self
            .stall
            .filter(|st| st.seconds > 0.0)
            .map(|st| st.some().map(|some| percent(some, st.seconds)));
        Phase {
            name,
            start: round3(s),
            end: round3(e),
            memory_peak_bytes: self.mem.values().sum::<f64>() as u64,
            cpu_mean_cores: (!means.is_empty()).then(|| round3(means.iter().sum())),
            cpu_max_cores: (!means.is_empty()).then(|| round3(self.cpu_max.values().sum())),
            gpus: self
                .gpus
                .into_iter()
                .map(|((node, uuid), g)| PhaseGpu {
                    node,
                    uuid,
                    index: g.index,
                    memory_peak_bytes: g.memory_peak.map(|b| b as u64),
                    utilization_mean_percent: g.utilization.mean().map(round1),
                    sm_active_mean_percent: g.sm_active.mean().map(round1),
                })
                .collect(),
            buckets: self.count,
            cpu_stall_percent: stall.map(|p| p[0]),
            memory_stall_percent: stall.map(|p| p[1]),
            io_stall_percent: stall.map(|p| p[2]),
        }
    }
}

/// `v` rounded to tenths (percentages).
fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// One allocated GPU's idle time on one node (the step that held it longest says).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleGpu {
    /// Node.
    pub node: String,
    /// Slurm's index, else NVML's.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// The figures.
    #[serde(flatten)]
    pub idle: GpuIdle,
    /// Idle share, percent.
    pub share_percent: f64,
}

/// Each GPU's idle time, per node. A GPU several steps held (the batch step and an srun step
/// inside it) is taken from the step that observed it longest.
pub fn idle_gpus(records: &[StepRecord]) -> Vec<IdleGpu> {
    let mut by: BTreeMap<(String, String), IdleGpu> = BTreeMap::new();
    for r in records {
        for g in &r.gpus {
            let Some(idle) = &g.idle else { continue };
            let key = (r.step.node.clone(), g.uuid.clone());
            let longer = by
                .get(&key)
                .is_none_or(|o| idle.observed_seconds > o.idle.observed_seconds);
            if longer {
                by.insert(
                    key,
                    IdleGpu {
                        node: r.step.node.clone(),
                        index: g.slurm_index.unwrap_or(g.nvml_index),
                        uuid: g.uuid.clone(),
                        share_percent: round1(idle.share_percent()),
                        idle: idle.clone(),
                    },
                );
            }
        }
    }
    by.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests_support::{health_rec, rec, stall_rec};
    use super::*;

    #[test]
    fn phases_take_their_figures_from_the_buckets_inside_them() {
        // Node vm: load 0..10 (100 MB), train 10..20 (900 MB, GPU busy), save 20..30 (200 MB).
        let mem = |i: u32| match i {
            0..10 => 100,
            10..20 => 900,
            _ => 200,
        };
        let marks = [(0.0, "load"), (10.0, "train"), (20.0, "save")];
        let a = rec(
            "vm",
            "batch",
            1000.0,
            30,
            mem,
            |i| (10..20).contains(&i),
            &marks,
        );
        // The same marks reach an srun step of vm that started 2 s later: kept once.
        let b = rec("vm", "0", 1002.0, 20, |_| 50, |_| false, &[(8.0, "train")]);
        let p = phases(&[a.clone(), b]);
        let names: Vec<&str> = p.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["load", "train", "save"]);
        assert_eq!((p[1].start, p[1].end), (10.0, 20.0));
        assert_eq!(p[2].end, 30.0);
        // vm's steps add up: 900 + 50.
        assert_eq!(p[1].memory_peak_bytes, 950);
        assert_eq!(p[0].memory_peak_bytes, 150);
        assert!((p[1].cpu_mean_cores.unwrap() - 1.0).abs() < 1e-9, "{p:?}");
        let g = p[1].gpus.iter().find(|g| g.uuid == "GPU-vm-batch").unwrap();
        assert_eq!((g.node.as_str(), g.index), ("vm", 0));
        assert_eq!(g.utilization_mean_percent, Some(90.0));
        assert_eq!(p[0].gpus[1].utilization_mean_percent, Some(0.0));
        // Without marks: no phases; a late first mark gives a leading phase.
        assert!(phases(&[a.clone()][..0]).is_empty());
        let late = rec("vm", "batch", 0.0, 10, |_| 1, |_| true, &[(4.0, "x")]);
        let p = phases(&[late]);
        assert_eq!(p[0].name, "(before the first mark)");
        assert_eq!((p[0].start, p[0].end, p[1].start), (0.0, 4.0, 4.0));
    }

    #[test]
    fn idle_gpus_come_from_the_step_that_watched_longest() {
        let a = rec("vm", "batch", 0.0, 30, |_| 1, |i| i > 20, &[]);
        let mut b = rec("vm", "0", 5.0, 10, |_| 1, |_| true, &[]);
        b.gpus[0].uuid = "GPU-vm-batch".into();
        let idle = idle_gpus(&[b, a]);
        assert_eq!(idle.len(), 1);
        assert_eq!(idle[0].idle.observed_seconds, 30.0);
        assert_eq!(idle[0].idle.at_start_seconds, 20.0);
        assert_eq!(idle[0].share_percent, 66.7);
    }

    #[test]
    fn phases_give_the_mean_sm_activity_where_it_was_measured() {
        // SM activity 40..44% over the first 5 s, none after; marks at 0 s and 5 s.
        let mut a = health_rec("vm", "batch", 0.0);
        let b = rec(
            "vm",
            "batch",
            0.0,
            10,
            |_| 1,
            |_| true,
            &[(0.0, "a"), (5.0, "b")],
        );
        a.events.extend(b.events);
        let p = phases(&[a]);
        assert_eq!(p.len(), 2);
        let (first, second) = (&p[0].gpus[0], &p[1].gpus[0]);
        assert_eq!(first.utilization_mean_percent, Some(90.0));
        assert_eq!(first.sm_active_mean_percent, Some(42.0));
        assert_eq!(first.sm_active_text(), "42%");
        // Busy, but no SM activity figure: n/a, never 0.
        assert_eq!(second.utilization_mean_percent, Some(90.0));
        assert_eq!(second.sm_active_mean_percent, None);
        assert_eq!(second.sm_active_text(), "n/a");
        let j = serde_json::to_value(second).unwrap();
        assert!(j["sm_active_mean_percent"].is_null(), "{j}");
    }

    #[test]
    fn phases_give_the_share_of_their_time_stalled_where_pressure_was_measured() {
        // Each second up to 10 s: 0.2 s waiting for a core, 0.5 s for I/O; after: 0.6 s for a
        // core. The counters are cumulative microseconds.
        let step = |i: u32| -> [u64; 3] {
            if i <= 10 {
                [200_000, 0, 500_000]
            } else {
                [600_000, 0, 0]
            }
        };
        let totals = move |i: u32| {
            Some(
                (1..=i)
                    .map(step)
                    .fold([0; 3], |a, s| [a[0] + s[0], a[1] + s[1], a[2] + s[2]]),
            )
        };
        let marks = [(0.0, "load"), (10.0, "train")];
        let a = stall_rec("vm", "batch", 0.0, 20, totals, &marks);
        // A node without pressure figures (cgroup v1) adds nothing, not zeros.
        let v1 = stall_rec("vm-2", "batch", 0.0, 20, |_| None, &[]);
        let p = phases(&[a.clone(), v1.clone()]);
        let shares = |p: &Phase| {
            [
                p.cpu_stall_percent,
                p.memory_stall_percent,
                p.io_stall_percent,
            ]
        };
        // load: the buckets of 1..9 s (the first sample has no interval before it).
        assert_eq!(shares(&p[0]), [Some(20.0), Some(0.0), Some(50.0)]);
        // train: 10..19 s, the first of them still in the slow start.
        assert_eq!(shares(&p[1]), [Some(56.0), Some(0.0), Some(5.0)]);
        // Two steps of a node: their stall seconds over their seconds (a mean by time).
        let calm = stall_rec("vm", "0", 0.0, 20, |_| Some([0; 3]), &[]);
        let p = phases(&[a, calm]);
        assert_eq!(shares(&p[0]), [Some(10.0), Some(0.0), Some(25.0)]);
        // No bucket with pressure figures: null, never 0.
        let mut only_v1 = v1;
        only_v1
            .events
            .extend(stall_rec("vm", "x", 0.0, 1, |_| None, &marks).events);
        let p = phases(&[only_v1]);
        assert_eq!(p.len(), 2);
        assert_eq!(shares(&p[0]), [None, None, None]);
        let j = serde_json::to_value(&p[0]).unwrap();
        for k in [
            "cpu_stall_percent",
            "memory_stall_percent",
            "io_stall_percent",
        ] {
            assert!(j[k].is_null(), "{k}: {j}");
        }
    }
}

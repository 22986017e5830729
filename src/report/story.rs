//! A job over time, from its records' timelines and events: phases (between `gpu-tracker mark`
//! marks) with their peaks and means, each GPU's idle time, the events that matter, and the
//! CSV and JSON exports of `--timeline` and `--events`.
//!
//! Times are seconds since the job's start here: the earliest step start of the records read.
//! Per-phase figures come from the timeline's buckets, so a phase's edges are as precise as a
//! bucket is wide (the sampling interval, longer for long steps: see `crate::history`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::{Bucket, Event, GpuIdle, Stat};
use crate::step::record::StepRecord;
use crate::units::saturating_sum;

/// The job's time zero: the earliest timeline start of its records (Unix seconds).
pub fn job_start(records: &[StepRecord]) -> Option<f64> {
    records
        .iter()
        .filter_map(|r| r.timeline.as_ref().map(|t| t.start_unix))
        .reduce(f64::min)
}

/// Where a record's timeline ends (Unix seconds).
fn record_end(r: &StepRecord) -> Option<f64> {
    let t = r.timeline.as_ref()?;
    Some(t.start_unix + r.step.elapsed_seconds)
}

/// An event of the job, with where it happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobEvent {
    /// Seconds since the job's start.
    pub t: f64,
    /// Node.
    pub node: String,
    /// Step.
    pub step: String,
    /// The event.
    #[serde(flatten)]
    pub event: Event,
}

/// Every event of the job, in time order. The same mark seen by several steps of a node (each
/// step listening gets it) is kept once.
pub fn events(records: &[StepRecord]) -> Vec<JobEvent> {
    let Some(t0) = job_start(records) else {
        return Vec::new();
    };
    let mut out: Vec<JobEvent> = Vec::new();
    for r in records {
        let Some(tl) = &r.timeline else { continue };
        for e in &r.events {
            let t = tl.start_unix + e.t - t0;
            let dup = e.kind == "mark"
                && out.iter().any(|o| {
                    o.event.kind == "mark"
                        && o.node == r.step.node
                        && o.event.name == e.name
                        && (o.t - t).abs() < 0.01
                });
            if !dup {
                let mut event = e.clone();
                event.t = round3(t);
                out.push(JobEvent {
                    t: round3(t),
                    node: r.step.node.clone(),
                    step: r.step.id.clone(),
                    event,
                });
            }
        }
    }
    out.sort_by(|a, b| a.t.total_cmp(&b.t));
    out
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

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
    if marks.is_empty() {
        return Vec::new();
    }
    let job_end = records.iter().filter_map(record_end).fold(t0, f64::max) - t0;
    let mut spans: Vec<(String, f64, f64)> = Vec::new();
    if marks[0].0 > 1.0 {
        spans.push(("(before the first mark)".into(), 0.0, marks[0].0));
    }
    for (i, (t, name)) in marks.iter().enumerate() {
        let end = marks.get(i + 1).map_or(job_end.max(*t), |m| m.0);
        spans.push((name.clone(), *t, end));
    }
    spans
        .into_iter()
        .map(|(name, s, e)| phase(records, t0, name, s, e))
        .collect()
}

fn phase(records: &[StepRecord], t0: f64, name: String, s: f64, e: f64) -> Phase {
    // Per node: memory peaks of its steps added; CPU means added.
    let mut mem: BTreeMap<&str, f64> = BTreeMap::new();
    let mut cpu_mean: BTreeMap<&str, Option<f64>> = BTreeMap::new();
    let mut cpu_max: BTreeMap<&str, f64> = BTreeMap::new();
    let mut gpus: BTreeMap<(String, String), (u32, Option<f64>, Mean)> = BTreeMap::new();
    let mut count = 0;
    for r in records {
        let node = r.step.node.as_str();
        let mut peak: f64 = 0.0;
        let mut cpu = Mean::default();
        for (b, w) in buckets_in(r, t0, s, e) {
            count += 1;
            peak = peak.max(b.memory_bytes.max);
            if let Some(c) = &b.cpu_cores {
                cpu.add(c, w);
            }
            let uuids = r.timeline.as_ref().map_or(&[][..], |t| &t.gpus[..]);
            for (g, uuid) in b.gpus.iter().zip(uuids) {
                let index = r
                    .gpus
                    .iter()
                    .find(|x| x.uuid == *uuid)
                    .map_or(0, |x| x.slurm_index.unwrap_or(x.nvml_index));
                let entry = gpus.entry((node.to_string(), uuid.clone())).or_insert((
                    index,
                    None,
                    Mean::default(),
                ));
                if let Some(m) = &g.memory_bytes {
                    entry.1 = Some(entry.1.unwrap_or(0.0).max(m.max));
                }
                if let Some(u) = &g.utilization_percent {
                    entry.2.add(u, w);
                }
            }
        }
        *mem.entry(node).or_default() += peak;
        if let Some(m) = cpu.mean() {
            let slot = cpu_mean.entry(node).or_default();
            *slot = Some(slot.unwrap_or(0.0) + m);
            *cpu_max.entry(node).or_default() += cpu.max;
        }
    }
    let means: Vec<f64> = cpu_mean.values().flatten().copied().collect();
    Phase {
        name,
        start: round3(s),
        end: round3(e),
        memory_peak_bytes: mem.values().sum::<f64>() as u64,
        cpu_mean_cores: (!means.is_empty()).then(|| round3(means.iter().sum())),
        cpu_max_cores: (!means.is_empty()).then(|| round3(cpu_max.values().sum())),
        gpus: gpus
            .into_iter()
            .map(|((node, uuid), (index, m, u))| PhaseGpu {
                node,
                uuid,
                index,
                memory_peak_bytes: m.map(|b| b as u64),
                utilization_mean_percent: u.mean().map(|v| (v * 10.0).round() / 10.0),
            })
            .collect(),
        buckets: count,
    }
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
                        share_percent: (idle.share_percent() * 10.0).round() / 10.0,
                        idle: idle.clone(),
                    },
                );
            }
        }
    }
    by.into_values().collect()
}

fn csv_field(s: &str) -> String {
    // A field that a spreadsheet would take for a formula is quoted and prefixed.
    let formula = s.starts_with(['=', '+', '-', '@']) && s.parse::<f64>().is_err();
    if formula || s.contains([',', '"', '\n', '\r']) {
        let inner = if formula { format!("'{s}") } else { s.into() };
        format!("\"{}\"", inner.replace('"', "\"\""))
    } else {
        s.into()
    }
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(String::new, |x| {
        let r = round3(x);
        if r == r.trunc() && r.abs() < 1e15 {
            format!("{}", r as i64)
        } else {
            format!("{r}")
        }
    })
}

fn stat3(s: Option<&Stat>) -> [String; 3] {
    [
        num(s.map(|s| s.min)),
        num(s.map(|s| s.mean)),
        num(s.map(|s| s.max)),
    ]
}

/// The `--timeline csv` export: one row per bucket of each step on each node, and per GPU
/// when the step has GPUs (the step's columns repeat on each GPU's row).
pub fn timeline_csv(records: &[StepRecord]) -> String {
    let mut out = String::from(
        "node,step,t_start,t_end,samples,memory_min_bytes,memory_mean_bytes,memory_max_bytes,\
         cpu_min_cores,cpu_mean_cores,cpu_max_cores,gpu,gpu_uuid,gpu_memory_min_bytes,\
         gpu_memory_mean_bytes,gpu_memory_max_bytes,gpu_util_min_percent,\
         gpu_util_mean_percent,gpu_util_max_percent,gpu_power_min_watts,gpu_power_mean_watts,\
         gpu_power_max_watts\n",
    );
    let Some(t0) = job_start(records) else {
        return out;
    };
    for r in records {
        let Some(tl) = &r.timeline else { continue };
        let off = tl.start_unix - t0;
        let end = r.step.elapsed_seconds;
        for b in &tl.buckets {
            let head = [
                csv_field(&r.step.node),
                csv_field(&r.step.id),
                num(Some(off + b.t)),
                num(Some(off + (b.t + tl.bucket_seconds).min(end.max(b.t)))),
                b.samples.to_string(),
            ];
            let m = stat3(Some(&b.memory_bytes));
            let c = stat3(b.cpu_cores.as_ref());
            let base = [head.join(","), m.join(","), c.join(",")].join(",");
            if b.gpus.is_empty() {
                out.push_str(&base);
                out.push_str(&",".repeat(11));
                out.push('\n');
            }
            for (g, uuid) in b.gpus.iter().zip(&tl.gpus) {
                let index = r
                    .gpus
                    .iter()
                    .find(|x| x.uuid == *uuid)
                    .map_or(String::new(), |x| {
                        x.slurm_index.unwrap_or(x.nvml_index).to_string()
                    });
                let cols = [
                    index,
                    csv_field(uuid),
                    stat3(g.memory_bytes.as_ref()).join(","),
                    stat3(g.utilization_percent.as_ref()).join(","),
                    stat3(g.power_watts.as_ref()).join(","),
                ];
                out.push_str(&format!("{base},{}\n", cols.join(",")));
            }
        }
    }
    out
}

/// The `--timeline json` export: each step's timeline, with its node and step and its offset
/// from the job's start.
pub fn timeline_json(job_id: u32, records: &[StepRecord]) -> String {
    let t0 = job_start(records);
    let steps: Vec<serde_json::Value> = records
        .iter()
        .filter_map(|r| {
            let tl = r.timeline.as_ref()?;
            Some(serde_json::json!({
                "node": r.step.node,
                "step": r.step.id,
                "offset_seconds": round3(tl.start_unix - t0.unwrap_or(tl.start_unix)),
                "elapsed_seconds": r.step.elapsed_seconds,
                "timeline": tl,
            }))
        })
        .collect();
    let doc = serde_json::json!({
        "job_id": job_id,
        "start_unix": t0,
        "steps": steps,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

/// The `--events csv` export.
pub fn events_csv(records: &[StepRecord]) -> String {
    let mut out = String::from("t,node,step,kind,task,gpu,name,value,detail\n");
    for e in events(records) {
        let ev = &e.event;
        out.push_str(
            &[
                num(Some(e.t)),
                csv_field(&e.node),
                csv_field(&e.step),
                csv_field(&ev.kind),
                ev.task.map_or_else(String::new, |t| t.to_string()),
                ev.gpu.map_or_else(String::new, |g| g.to_string()),
                csv_field(ev.name.as_deref().unwrap_or("")),
                num(ev.value),
                csv_field(&ev.detail),
            ]
            .join(","),
        );
        out.push('\n');
    }
    out
}

/// The `--events json` export.
pub fn events_json(job_id: u32, records: &[StepRecord]) -> String {
    let dropped = saturating_sum(records.iter().map(|r| r.events_dropped));
    let doc = serde_json::json!({
        "job_id": job_id,
        "start_unix": job_start(records),
        "events": events(records),
        "events_dropped": dropped,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

/// A GPU's index, memory size and (memory, utilization) per time key, while a plot is made.
type GpuPoints = (u32, Option<f64>, BTreeMap<i64, (f64, f64)>);

/// What `--plot` draws: per node, each step's buckets added (memory: each bucket's highest
/// reading; CPU: its mean), each GPU (memory: highest; utilization: mean), the phases, and the
/// events that matter. Points sit at bucket middles, in seconds since the job's start.
pub fn plot_data(records: &[StepRecord], title: &str) -> super::plot::PlotData {
    use super::plot::{EventKind, PlotData, PlotEvent, PlotGpu, PlotLine, PlotPhase};
    let Some(t0) = job_start(records) else {
        return PlotData {
            title: title.into(),
            ..PlotData::default()
        };
    };
    let mut by_node: BTreeMap<&str, Vec<&StepRecord>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.timeline.is_some()) {
        by_node.entry(r.step.node.as_str()).or_default().push(r);
    }
    let several = by_node.len() > 1;
    let key = |t: f64| (t * 1000.0).round() as i64;
    let mut lines = Vec::new();
    for (node, recs) in &by_node {
        // Every bucket start of the node's steps, and each step's reading there.
        let mut times: Vec<i64> = Vec::new();
        let spans: Vec<(f64, f64, f64, &crate::history::Timeline)> = recs
            .iter()
            .filter_map(|r| {
                let tl = r.timeline.as_ref()?;
                let off = tl.start_unix - t0;
                Some((off, off + r.step.elapsed_seconds, tl.bucket_seconds, tl))
            })
            .collect();
        // Each bucket is drawn at its middle (the last one's ends with its step).
        for (off, end, w, tl) in &spans {
            times.extend(
                tl.buckets
                    .iter()
                    .map(|b| key(off + b.t + ((end - off - b.t).min(*w) / 2.0).max(0.0))),
            );
        }
        times.sort_unstable();
        times.dedup();
        let at = |t: f64, off: f64, end: f64, w: f64, tl: &'_ crate::history::Timeline| {
            if t < off - 1e-6 || t > end + 1e-6 {
                return None;
            }
            tl.buckets
                .iter()
                .rev()
                .find(|b| off + b.t <= t + 1e-6 && t < off + b.t + w)
                .cloned()
        };
        let mut memory = Vec::new();
        let mut cpu = Vec::new();
        let mut gpu_points: BTreeMap<String, GpuPoints> = BTreeMap::new();
        for &k in &times {
            let t = k as f64 / 1000.0;
            let (mut m, mut c, mut any_c) = (0.0, 0.0, false);
            for (off, end, w, tl) in &spans {
                let Some(b) = at(t, *off, *end, *w, tl) else {
                    continue;
                };
                m += b.memory_bytes.max;
                if let Some(cc) = b.cpu_cores {
                    c += cc.mean;
                    any_c = true;
                }
                for (g, uuid) in b.gpus.iter().zip(&tl.gpus) {
                    let rec = recs
                        .iter()
                        .find(|r| r.timeline.as_ref().is_some_and(|x| std::ptr::eq(x, *tl)));
                    let info = rec.and_then(|r| r.gpus.iter().find(|x| x.uuid == *uuid));
                    let entry = gpu_points.entry(uuid.clone()).or_insert((
                        info.map_or(0, |x| x.slurm_index.unwrap_or(x.nvml_index)),
                        info.map(|x| x.memory_total_bytes as f64)
                            .filter(|v| *v > 0.0),
                        BTreeMap::new(),
                    ));
                    let p = entry.2.entry(k).or_insert((f64::NAN, f64::NAN));
                    if let Some(v) = g.memory_bytes {
                        p.0 = if p.0.is_nan() { v.max } else { p.0.max(v.max) };
                    }
                    if let Some(v) = g.utilization_percent {
                        p.1 = if p.1.is_nan() {
                            v.mean
                        } else {
                            p.1.max(v.mean)
                        };
                    }
                }
            }
            memory.push((t, m));
            if any_c {
                cpu.push((t, c));
            }
        }
        let gpus = gpu_points
            .into_values()
            .map(|(index, total, pts)| PlotGpu {
                label: if several {
                    format!("{node} GPU {index}")
                } else {
                    format!("GPU {index}")
                },
                memory: pts
                    .iter()
                    .filter(|(_, v)| !v.0.is_nan())
                    .map(|(k, v)| (*k as f64 / 1000.0, v.0))
                    .collect(),
                memory_total: total,
                utilization: pts
                    .iter()
                    .filter(|(_, v)| !v.1.is_nan())
                    .map(|(k, v)| (*k as f64 / 1000.0, v.1))
                    .collect(),
            })
            .collect();
        lines.push(PlotLine {
            label: (*node).to_string(),
            memory,
            memory_limit: spans
                .iter()
                .filter_map(|s| s.3.memory_limit_bytes)
                .max()
                .map(|l| l as f64),
            cpu,
            gpus,
        });
    }
    let phases = phases(records)
        .into_iter()
        .map(|p| PlotPhase {
            name: p.name,
            start: p.start,
            end: p.end,
        })
        .collect();
    let events = events(records)
        .into_iter()
        .filter(|e| e.event.important())
        .map(|e| {
            let ev = &e.event;
            let gpu = ev.gpu.map_or_else(String::new, |g| g.to_string());
            let (label, kind) = match ev.kind.as_str() {
                "alert_memory" => (
                    format!("memory {:.0}%", ev.value.unwrap_or(0.0)),
                    EventKind::Alert,
                ),
                "alert_gpu_idle" => (format!("GPU {gpu} idle"), EventKind::Alert),
                "oom_kill" => ("OOM kill".to_string(), EventKind::Failure),
                "memory_limit_hit" => ("memory limit".to_string(), EventKind::Failure),
                "gpu_lost" => (format!("GPU {gpu} lost"), EventKind::Failure),
                "task_exit" => (
                    format!(
                        "task {} failed",
                        ev.task.map_or("?".into(), |t| t.to_string())
                    ),
                    EventKind::Failure,
                ),
                other => (other.replace('_', " "), EventKind::Other),
            };
            PlotEvent {
                t: e.t,
                label: if several {
                    format!("{}: {label}", e.node)
                } else {
                    label
                },
                kind,
            }
        })
        .collect();
    PlotData {
        title: title.into(),
        lines,
        phases,
        events,
    }
}

/// A record of a command run by `gpu-tracker -e`, from its [`crate::history::Story`]: so that the
/// exports and plots of jobs serve commands too. `gpus` are the GPUs read (UUID, NVML index).
pub fn command_record(
    story: &crate::history::Story,
    command: &str,
    elapsed_seconds: f64,
    gpus: &[(String, u32)],
) -> StepRecord {
    use crate::step::record::*;
    let host = crate::sys::hostname();
    StepRecord {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        complete: true,
        written_at: chrono::Local::now().to_rfc3339(),
        tracker_version: env!("CARGO_PKG_VERSION").into(),
        job: JobInfo {
            user: crate::sys::user_name(crate::sys::uid()).unwrap_or_default(),
            uid: crate::sys::uid(),
            name: Some(clean_text(command, 100)),
            ..JobInfo::default()
        },
        step: StepInfo {
            id: "command".into(),
            kind: "command".into(),
            node: host.clone(),
            hostname: host,
            elapsed_seconds,
            command: Some(clean_text(command, 200)),
            ..StepInfo::default()
        },
        tasks: Vec::new(),
        memory: StepMemory::default(),
        cpu: StepCpu::default(),
        gpus: story
            .timeline
            .gpus
            .iter()
            .enumerate()
            .map(|(i, uuid)| StepGpu {
                uuid: uuid.clone(),
                nvml_index: gpus
                    .iter()
                    .find(|(u, _)| u == uuid)
                    .map_or(i as u32, |(_, n)| *n),
                idle: story.idle.get(i).cloned().flatten(),
                ..StepGpu::default()
            })
            .collect(),
        sampler: SamplerStats::default(),
        timeline: Some(story.timeline.clone()),
        events: story.events.clone(),
        events_dropped: story.events_dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{AlertRules, GpuObservation, Observation, Recorder};
    use crate::step::record::{StepGpu, tests_support as test_support};

    /// A record on `node` whose step starts at `start` and samples each second for `secs`,
    /// memory `mem(t)`, half a core, one GPU busy when `busy(t)`.
    fn rec(
        node: &str,
        step: &str,
        start: f64,
        secs: u32,
        mem: impl Fn(u32) -> u64,
        busy: impl Fn(u32) -> bool,
        marks: &[(f64, &str)],
    ) -> StepRecord {
        let mut r = test_support::record(node, step);
        let mut h = Recorder::new(start, 1.0, AlertRules::default());
        h.set_gpus(vec![format!("GPU-{node}-{step}")], vec![0]);
        for i in 0..=secs {
            h.observe(&Observation {
                unix: start + f64::from(i),
                memory_bytes: mem(i),
                alert_memory_bytes: None,
                cpu_seconds: Some(f64::from(i) * 0.5),
                gpus: vec![GpuObservation {
                    memory_bytes: Some(u64::from(i) * 10),
                    utilization_percent: Some(if busy(i) { 90.0 } else { 0.0 }),
                    energy_mj: None,
                    lost: false,
                }],
                oom_kills: None,
                limit_hits: None,
            });
        }
        for (t, n) in marks {
            h.mark(start + t, n);
        }
        let crate::history::Story {
            timeline: tl,
            events,
            events_dropped: dropped,
            idle,
        } = h.finish(start + f64::from(secs));
        r.step.elapsed_seconds = f64::from(secs);
        r.gpus = vec![StepGpu {
            uuid: format!("GPU-{node}-{step}"),
            slurm_index: Some(0),
            idle: idle[0].clone(),
            ..StepGpu::default()
        }];
        r.timeline = Some(tl);
        r.events = events;
        r.events_dropped = dropped;
        r
    }

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
    fn exports_carry_every_bucket_and_event() {
        let a = rec(
            "vm",
            "batch",
            100.0,
            4,
            |_| 10,
            |i| i == 2,
            &[(1.0, "x,\"y\"")],
        );
        let csv = timeline_csv(std::slice::from_ref(&a));
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + 5);
        let head: Vec<&str> = lines[0].split(',').collect();
        assert_eq!(head.len(), 22);
        assert!(lines.iter().skip(1).all(|l| l.split(',').count() == 22));
        assert!(
            lines[3].starts_with(
                "vm,batch,2,3,1,10,10,10,0.5,0.5,0.5,0,GPU-vm-batch,20,20,20,90,90,90"
            ),
            "{}",
            lines[3]
        );
        let ev = events_csv(std::slice::from_ref(&a));
        assert!(ev.contains("1,vm,batch,mark,,,\"x,\"\"y\"\"\",,"), "{ev}");
        let j: serde_json::Value =
            serde_json::from_str(&events_json(5, std::slice::from_ref(&a))).unwrap();
        assert_eq!(j["events"][0]["kind"], "mark");
        assert_eq!(j["events"][0]["node"], "vm");
        let j: serde_json::Value = serde_json::from_str(&timeline_json(5, &[a])).unwrap();
        assert_eq!(
            j["steps"][0]["timeline"]["buckets"]
                .as_array()
                .unwrap()
                .len(),
            5
        );
        assert_eq!(csv_field("=cmd()"), "\"'=cmd()\"");
        assert_eq!(csv_field("-3.5"), "-3.5");
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
}

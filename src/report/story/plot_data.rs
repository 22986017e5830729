//! What `--plot` draws, from the records: per node and per GPU over time, with the phases and
//! the events that matter.

use std::collections::BTreeMap;

use super::events::{events, job_start};
use super::health::{gpu_health, is_health_event};
use super::phases::phases;
use crate::history::pressure::BucketStall;
use crate::report::plot::{EventKind, PlotData, PlotEvent, PlotGpu, PlotLine, PlotPhase};
use crate::step::record::StepRecord;

/// A GPU's index, memory size and [memory, utilization, SM activity] per time key (NaN: no
/// reading), while a plot is made.
type GpuPoints = (u32, Option<f64>, BTreeMap<i64, [f64; 3]>);

/// What `--plot` draws: per node, each step's buckets added (memory: each bucket's highest
/// reading; CPU: its mean; the share of time stalled: the steps' stall seconds over their
/// seconds), each GPU (memory: highest; utilization and SM activity: mean; its
/// Xid errors and slowdowns), the phases, and the events that matter. Points sit at bucket
/// middles, in seconds since the job's start.
pub fn plot_data(records: &[StepRecord], title: &str) -> PlotData {
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
    let all_events = events(records);
    let mut health = gpu_health(records, &all_events);
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
        let mut stall: [Vec<(f64, f64)>; 3] = Default::default();
        let mut gpu_points: BTreeMap<String, GpuPoints> = BTreeMap::new();
        for &k in &times {
            let t = k as f64 / 1000.0;
            let (mut m, mut c, mut any_c) = (0.0, 0.0, false);
            // The steps' stall seconds over their seconds, as the phases take it.
            let mut st: Option<BucketStall> = None;
            for (off, end, w, tl) in &spans {
                let Some(b) = at(t, *off, *end, *w, tl) else {
                    continue;
                };
                m += b.memory_bytes.max;
                if let Some(cc) = b.cpu_cores {
                    c += cc.mean;
                    any_c = true;
                }
                if let Some(s) = b.stall {
                    st = Some(st.map_or(s, |sum| sum.plus(s)));
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
                    let p = entry.2.entry(k).or_insert([f64::NAN; 3]);
                    // Two steps that watch the same GPU: the higher reading.
                    let figures = [
                        g.memory_bytes.map(|v| v.max),
                        g.utilization_percent.map(|v| v.mean),
                        g.sm_active_percent.map(|v| v.mean),
                    ];
                    for (slot, v) in p.iter_mut().zip(figures) {
                        if let Some(v) = v {
                            *slot = if slot.is_nan() { v } else { slot.max(v) };
                        }
                    }
                }
            }
            memory.push((t, m));
            if any_c {
                cpu.push((t, c));
            }
            if let Some(st) = st.filter(|s| s.seconds > 0.0) {
                for (series, some) in stall.iter_mut().zip(st.some()) {
                    series.push((t, (100.0 * some / st.seconds).clamp(0.0, 100.0)));
                }
            }
        }
        let gpus = gpu_points
            .into_values()
            .map(|(index, total, pts)| {
                let series = |i: usize| -> Vec<(f64, f64)> {
                    pts.iter()
                        .filter(|(_, v)| !v[i].is_nan())
                        .map(|(k, v)| (*k as f64 / 1000.0, v[i]))
                        .collect()
                };
                let h = health
                    .remove(&((*node).to_string(), index))
                    .unwrap_or_default();
                PlotGpu {
                    label: if several {
                        format!("{node} GPU {index}")
                    } else {
                        format!("GPU {index}")
                    },
                    memory: series(0),
                    memory_total: total,
                    utilization: series(1),
                    sm_active: series(2),
                    xids: h.xids,
                    slowdowns: h.slowdowns,
                }
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
            stall,
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
    // A GPU's health events are drawn on its chart; those of a GPU not drawn (the record does
    // not name it) stay with the other events.
    let events = all_events
        .into_iter()
        .filter(|e| e.event.important())
        .filter(|e| {
            !is_health_event(e)
                || e.event
                    .gpu
                    .is_none_or(|g| health.contains_key(&(e.node.clone(), g)))
        })
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
                "gpu_xid" => (
                    format!(
                        "GPU {gpu} Xid {}",
                        ev.value.map_or_else(|| "?".into(), |v| v.to_string())
                    ),
                    EventKind::Failure,
                ),
                "gpu_slowdown" => (format!("GPU {gpu} slowed down"), EventKind::Alert),
                "gpu_slowdown_end" => (format!("GPU {gpu} full clocks"), EventKind::Other),
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

#[cfg(test)]
mod tests {
    use super::super::tests_support::{health_rec, stall_rec};
    use super::*;

    #[test]
    fn a_gpus_sm_activity_xids_and_slowdowns_go_on_its_chart() {
        let d = plot_data(&[health_rec("vm", "batch", 100.0)], "t");
        let gpu = &d.lines[0].gpus[0];
        // SM activity only where measured (the first 5 s), at bucket middles.
        let sm: Vec<(f64, f64)> = gpu.sm_active.clone();
        assert_eq!(
            sm,
            [
                (0.5, 40.0),
                (1.5, 41.0),
                (2.5, 42.0),
                (3.5, 43.0),
                (4.5, 44.0)
            ]
        );
        assert_eq!(gpu.utilization.len(), 11);
        assert_eq!(gpu.xids, [(3.0, 79)]);
        assert_eq!(gpu.slowdowns, [(4.0, 7.0)]);
        assert!(d.events.is_empty(), "{:?}", d.events);

        // A GPU the record does not name stays with the other events.
        let mut r = health_rec("vm", "batch", 100.0);
        r.gpus[0].slurm_index = Some(5);
        let d = plot_data(&[r], "t");
        assert!(d.lines[0].gpus[0].xids.is_empty());
        let labels: Vec<&str> = d.events.iter().map(|e| e.label.as_str()).collect();
        assert_eq!(
            labels,
            ["GPU 0 Xid 79", "GPU 0 slowed down", "GPU 0 full clocks"]
        );
        assert_eq!(d.events[0].kind, EventKind::Failure);
    }

    #[test]
    fn the_share_of_time_stalled_is_the_nodes_steps_stall_over_their_time() {
        // vm's batch step waits 0.8 s of each second for I/O, its step 0 not at all; vm-2
        // has no pressure figures.
        let io = |i: u32| Some([0, 0, 800_000 * u64::from(i)]);
        let batch = stall_rec("vm", "batch", 100.0, 4, io, &[]);
        let calm = stall_rec("vm", "0", 100.0, 4, |_| Some([0; 3]), &[]);
        let v1 = stall_rec("vm-2", "batch", 100.0, 4, |_| None, &[]);
        let d = plot_data(&[batch.clone(), v1], "t");
        let (vm, vm2) = (&d.lines[0], &d.lines[1]);
        // The first sample has no interval before it: the line starts at the second bucket.
        assert_eq!(
            vm.stall[2],
            [(1.5, 80.0), (2.5, 80.0), (3.5, 80.0), (4.0, 80.0)]
        );
        assert!(vm.stall[0].iter().all(|p| p.1 == 0.0));
        assert!(vm2.stall.iter().all(|s| s.is_empty()), "{:?}", vm2.stall);
        let d = plot_data(&[batch, calm], "t");
        assert!(d.lines[0].stall[2].iter().all(|p| p.1 == 40.0));
    }
}

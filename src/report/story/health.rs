//! Each GPU's health over time, from the events: when it reported an Xid error and when it was
//! slowed down (power cap, heat), as the plot marks them.

use std::collections::BTreeMap;

use super::events::{JobEvent, job_start, record_end};
use crate::step::record::StepRecord;

/// The same Xid on the same GPU closer than this (seconds) is one error: every step that
/// watches the GPU (the batch step and an srun step inside it) reads it, a sampling interval
/// or so apart.
const SAME_XID_SECONDS: f64 = 10.0;

/// One GPU's Xid errors and slowdowns, in seconds since the job's start.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct GpuHealth {
    /// (when, the Xid).
    pub(super) xids: Vec<(f64, u64)>,
    /// (start, end) of each stretch slowed down, in time order, overlaps merged.
    pub(super) slowdowns: Vec<(f64, f64)>,
}

/// Whether the event is one [`gpu_health`] takes in.
pub(super) fn is_health_event(e: &JobEvent) -> bool {
    matches!(
        e.event.kind.as_str(),
        "gpu_xid" | "gpu_slowdown" | "gpu_slowdown_end"
    )
}

/// Each GPU's health, by (node, GPU index as the events give it: Slurm's, else NVML's). A
/// slowdown runs from `gpu_slowdown` to the next `gpu_slowdown_end` of the same step and GPU,
/// or to the step's end when it never ended.
pub(super) fn gpu_health(
    records: &[StepRecord],
    events: &[JobEvent],
) -> BTreeMap<(String, u32), GpuHealth> {
    let t0 = job_start(records).unwrap_or(0.0);
    let step_end = |node: &str, step: &str| {
        records
            .iter()
            .filter(|r| r.step.node == node && r.step.id == step)
            .filter_map(record_end)
            .fold(f64::NAN, f64::max)
            - t0
    };
    let mut out: BTreeMap<(String, u32), GpuHealth> = BTreeMap::new();
    // Slowdowns begun and not yet ended, by (node, step, GPU).
    let mut open: BTreeMap<(&str, &str, u32), f64> = BTreeMap::new();
    for e in events.iter().filter(|e| is_health_event(e)) {
        let Some(gpu) = e.event.gpu else { continue };
        let health = out.entry((e.node.clone(), gpu)).or_default();
        let key = (e.node.as_str(), e.step.as_str(), gpu);
        match e.event.kind.as_str() {
            "gpu_xid" => {
                let Some(xid) = e.event.value.filter(|v| v.is_finite() && *v >= 0.0) else {
                    continue;
                };
                let xid = xid as u64;
                let seen = health
                    .xids
                    .iter()
                    .any(|&(t, x)| x == xid && (e.t - t).abs() < SAME_XID_SECONDS);
                if !seen {
                    health.xids.push((e.t, xid));
                }
            }
            "gpu_slowdown" => {
                open.entry(key).or_insert(e.t);
            }
            _ => {
                if let Some(start) = open.remove(&key) {
                    health.slowdowns.push((start, e.t));
                }
            }
        }
    }
    for ((node, step, gpu), start) in open {
        let end = step_end(node, step);
        let end = if end.is_finite() {
            end.max(start)
        } else {
            start
        };
        let health = out.entry((node.to_string(), gpu)).or_default();
        health.slowdowns.push((start, end));
    }
    for health in out.values_mut() {
        health.slowdowns = merged(std::mem::take(&mut health.slowdowns));
    }
    out
}

/// `spans` in time order with overlapping ones made one.
fn merged(mut spans: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::events::events;
    use super::super::tests_support::health_rec;
    use super::*;

    #[test]
    fn xids_and_slowdowns_per_gpu_once_however_many_steps_saw_them() {
        // The batch step and an srun step 1 s later watch the same GPU.
        let a = health_rec("vm", "batch", 100.0);
        let mut b = health_rec("vm", "0", 101.0);
        // The srun step's slowdown never ends: it lasts to the step's end (11 s).
        b.events.retain(|e| e.kind != "gpu_slowdown_end");
        let records = [a, b];
        let h = gpu_health(&records, &events(&records));
        assert_eq!(h.len(), 1);
        let vm = &h[&("vm".to_string(), 0)];
        assert_eq!(vm.xids, [(3.0, 79)]);
        assert_eq!(vm.slowdowns, [(4.0, 11.0)]);
        assert_eq!(
            merged(vec![(5.0, 6.0), (1.0, 2.0)]),
            [(1.0, 2.0), (5.0, 6.0)]
        );
    }
}

//! The job's time zero and its events in time order, each with its node and step: the floor
//! the phases, exports and plot of [`super`] stand on.

use serde::Serialize;

use super::words::in_words;
use crate::history::Event;
use crate::step::record::StepRecord;

/// Most phases of a job: a step records at most 200 marks, and the marks of every step of a
/// job make its phases; past this many, the later marks are not phases.
pub const MAX_PHASES: usize = 200;

/// The job's time zero: the earliest timeline start of its records (Unix seconds).
pub fn job_start(records: &[StepRecord]) -> Option<f64> {
    records
        .iter()
        .filter_map(|r| r.timeline.as_ref().map(|t| t.start_unix))
        .reduce(f64::min)
}

/// Where a record's timeline ends (Unix seconds).
pub(super) fn record_end(r: &StepRecord) -> Option<f64> {
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

/// Every event of the job, in time order, GPU health events in words (see [`in_words`]). The
/// same mark seen by several steps of a node (each step listening gets it) is kept once.
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
                event.detail = in_words(e);
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

/// The events a summary needs, gathered one record at a time: the marks (for the phases, at
/// most [`MAX_PHASES`]) and the first important events in time order (at most
/// `keep`), with how many important events there were. The same as [`events`] for those, but
/// without holding every event of the job.
pub struct EventFold {
    keep: usize,
    marks: Vec<Pending>,
    important: Vec<Pending>,
    important_count: u64,
    seq: u64,
}

/// An event kept, at its Unix time.
struct Pending {
    at: f64,
    seq: u64,
    node: String,
    step: String,
    event: Event,
}

impl EventFold {
    /// Keeps the first `keep` important events.
    pub fn new(keep: usize) -> EventFold {
        EventFold {
            keep,
            marks: Vec::new(),
            important: Vec::new(),
            important_count: 0,
            seq: 0,
        }
    }

    /// Adds record `r`'s events.
    pub fn add(&mut self, r: &StepRecord) {
        let Some(tl) = &r.timeline else { return };
        for e in &r.events {
            let at = tl.start_unix + e.t;
            let mark = e.kind == "mark";
            if !mark && !e.important() {
                continue;
            }
            // The same mark seen by several steps of a node is kept once.
            let dup = mark
                && self.marks.iter().any(|o| {
                    o.node == r.step.node && o.event.name == e.name && (o.at - at).abs() < 0.01
                });
            if dup {
                continue;
            }
            self.seq += 1;
            let p = Pending {
                at,
                seq: self.seq,
                node: r.step.node.clone(),
                step: r.step.id.clone(),
                event: e.clone(),
            };
            if mark {
                self.marks.push(p);
                // A mark past the first phases is of no use: the later ones go (with room
                // left, so that a late duplicate of a kept mark is still seen as one).
                prune(&mut self.marks, 2 * MAX_PHASES);
            } else {
                self.important_count += 1;
                self.important.push(p);
                prune(&mut self.important, self.keep);
            }
        }
    }

    /// The marks (seconds since `t0`, name), in time order.
    pub fn marks(&self, t0: f64) -> Vec<(f64, String)> {
        let mut m: Vec<&Pending> = self.marks.iter().collect();
        m.sort_by(|a, b| a.at.total_cmp(&b.at).then(a.seq.cmp(&b.seq)));
        m.into_iter()
            .map(|p| (round3(p.at - t0), p.event.name.clone().unwrap_or_default()))
            .collect()
    }

    /// The first important events (times since `t0`), in time order, and how many there were.
    pub fn important(self, t0: f64) -> (Vec<JobEvent>, u64) {
        let mut kept = self.important;
        kept.sort_by(|a, b| a.at.total_cmp(&b.at).then(a.seq.cmp(&b.seq)));
        kept.truncate(self.keep);
        let events = kept
            .into_iter()
            .map(|p| {
                let t = round3(p.at - t0);
                let mut event = p.event;
                event.detail = in_words(&event);
                event.t = t;
                JobEvent {
                    t,
                    node: p.node,
                    step: p.step,
                    event,
                }
            })
            .collect();
        (events, self.important_count)
    }
}

/// Keeps the first `keep` of `v` in time order once it holds twice as many.
fn prune(v: &mut Vec<Pending>, keep: usize) {
    if v.len() > 2 * keep.max(8) {
        v.sort_by(|a, b| a.at.total_cmp(&b.at).then(a.seq.cmp(&b.seq)));
        v.truncate(keep.max(8));
    }
}

/// `v` rounded to thousandths (milliseconds, for times).
pub(super) fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::super::tests_support::health_rec;
    use super::*;

    #[test]
    fn gpu_health_events_are_told_in_words() {
        let e = events(&[health_rec("vm", "batch", 100.0)]);
        let told: Vec<(&str, f64, &str)> = e
            .iter()
            .map(|e| (e.event.kind.as_str(), e.t, e.event.detail.as_str()))
            .collect();
        assert_eq!(
            told,
            [
                (
                    "gpu_xid",
                    3.0,
                    "GPU 0 reported Xid 79: the GPU fell off the bus"
                ),
                (
                    "gpu_slowdown",
                    4.0,
                    "GPU 0 slowed down: high temperature (hardware)"
                ),
                (
                    "gpu_slowdown_end",
                    7.0,
                    "GPU 0 back to full clocks after 3 s"
                ),
            ]
        );
    }
}

//! The bounded timeline of a step: buckets of min, mean and max per figure. When it is full,
//! neighbours merge and the bucket width doubles, so a week-long step fits in the same space as
//! a short one and keeps its extremes.

use serde::{Deserialize, Serialize};

/// Most buckets a timeline keeps. With a 1 s interval, a step's first 4 minutes are kept
/// sample by sample; a week-long step has buckets of about 34 minutes.
pub const MAX_BUCKETS: usize = 240;
/// Min, mean and max of a figure over a bucket; written as `[min, mean, max]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(from = "[f64; 3]", into = "[f64; 3]")]
pub struct Stat {
    /// Lowest reading.
    pub min: f64,
    /// Mean of the readings.
    pub mean: f64,
    /// Highest reading.
    pub max: f64,
}

impl From<[f64; 3]> for Stat {
    fn from(v: [f64; 3]) -> Stat {
        Stat {
            min: v[0],
            mean: v[1],
            max: v[2],
        }
    }
}

impl From<Stat> for [f64; 3] {
    fn from(s: Stat) -> [f64; 3] {
        [s.min, s.mean, s.max]
    }
}

impl Stat {
    /// A single reading.
    pub(super) fn one(v: f64) -> Stat {
        Stat {
            min: v,
            mean: v,
            max: v,
        }
    }

    /// Merges `other` (over `m` readings) into `self` (over `n`).
    fn merge(self, n: u32, other: Stat, m: u32) -> Stat {
        let (n, m) = (f64::from(n), f64::from(m));
        Stat {
            min: self.min.min(other.min),
            mean: if n + m > 0.0 {
                (self.mean * n + other.mean * m) / (n + m)
            } else {
                self.mean
            },
            max: self.max.max(other.max),
        }
    }
}

fn merge_opt(a: Option<Stat>, n: u32, b: Option<Stat>, m: u32) -> Option<Stat> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.merge(n, b, m)),
        (a, b) => a.or(b),
    }
}

/// One GPU over one bucket. `None` where the device did not report the figure.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuStat {
    /// Device memory in use, bytes.
    pub memory_bytes: Option<Stat>,
    /// Utilization, percent.
    pub utilization_percent: Option<Stat>,
    /// Power, watts (the energy counter's change over the interval).
    pub power_watts: Option<Stat>,
    /// GPM's SM activity, percent (Hopper and newer). Absent in records of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_active_percent: Option<Stat>,
}

/// The readings of one stretch of time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Start of the bucket, seconds since [`Timeline::start_unix`].
    pub t: f64,
    /// Samples in it.
    pub samples: u32,
    /// Memory of the step: its cgroup's charge (page cache included) where there is one, else
    /// the sampled resident memory of its processes; bytes.
    pub memory_bytes: Stat,
    /// Cores busy over each sampling interval (absent in a bucket holding only a first sample).
    pub cpu_cores: Option<Stat>,
    /// The GPUs, in the order of [`Timeline::gpus`].
    pub gpus: Vec<GpuStat>,
    /// The step's pressure stall over the bucket (cgroup v2): the counters' changes added up.
    /// Absent without them (cgroup v1, `psi=0`), and in records of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall: Option<super::pressure::BucketStall>,
}

/// The bounded timeline of a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Time zero of the timeline and the events: the step's start, Unix seconds.
    pub start_unix: f64,
    /// Width of each bucket, seconds: the sampling interval, doubled each time the timeline
    /// was full.
    pub bucket_seconds: f64,
    /// Most buckets kept (the bound).
    pub max_buckets: u32,
    /// UUIDs of the GPUs in each bucket's `gpus`, in order.
    pub gpus: Vec<String>,
    /// Memory limit of the step (else of the job) on this node, bytes, for plots and alerts.
    pub memory_limit_bytes: Option<u64>,
    /// The buckets, oldest first; a stretch with no sample has none.
    pub buckets: Vec<Bucket>,
}

impl Timeline {
    /// Adds one sample at `t` seconds since the start (merging buckets while it is past the
    /// last one the bound allows).
    pub(super) fn add(
        &mut self,
        t: f64,
        mem: f64,
        cores: Option<f64>,
        gpus: Vec<GpuStat>,
        stall: Option<super::pressure::BucketStall>,
    ) {
        let mut idx = (t / self.bucket_seconds).floor() as u64;
        while idx >= MAX_BUCKETS as u64 {
            merge_pairs(self);
            idx = (t / self.bucket_seconds).floor() as u64;
        }
        let start = idx as f64 * self.bucket_seconds;
        let new = Bucket {
            t: start,
            samples: 1,
            memory_bytes: Stat::one(mem),
            cpu_cores: cores.map(Stat::one),
            gpus,
            stall,
        };
        match self.buckets.last_mut() {
            Some(b) if (b.t - start).abs() < 1e-9 => {
                let n = b.samples;
                merge_bucket(b, n, new);
            }
            _ => self.buckets.push(new),
        }
    }
}

fn merge_bucket(b: &mut Bucket, n: u32, other: Bucket) {
    let m = other.samples;
    b.memory_bytes = b.memory_bytes.merge(n, other.memory_bytes, m);
    b.cpu_cores = merge_opt(b.cpu_cores, n, other.cpu_cores, m);
    b.stall = super::pressure::add_opt(b.stall, other.stall);
    if b.gpus.len() < other.gpus.len() {
        b.gpus.resize(other.gpus.len(), GpuStat::default());
    }
    for (g, o) in b.gpus.iter_mut().zip(other.gpus) {
        g.memory_bytes = merge_opt(g.memory_bytes, n, o.memory_bytes, m);
        g.utilization_percent = merge_opt(g.utilization_percent, n, o.utilization_percent, m);
        g.power_watts = merge_opt(g.power_watts, n, o.power_watts, m);
        g.sm_active_percent = merge_opt(g.sm_active_percent, n, o.sm_active_percent, m);
    }
    b.samples = n + m;
}

/// Doubles the bucket width, merging each pair of neighbours.
fn merge_pairs(tl: &mut Timeline) {
    tl.bucket_seconds *= 2.0;
    let w = tl.bucket_seconds;
    let mut out: Vec<Bucket> = Vec::with_capacity(tl.buckets.len() / 2 + 1);
    for mut b in std::mem::take(&mut tl.buckets) {
        let start = (b.t / w + 1e-9).floor() * w;
        match out.last_mut() {
            Some(last) if (last.t - start).abs() < 1e-9 => {
                let n = last.samples;
                merge_bucket(last, n, b);
            }
            _ => {
                b.t = start;
                out.push(b);
            }
        }
    }
    tl.buckets = out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::tests::obs;
    use crate::history::{AlertRules, Recorder};

    #[test]
    fn a_long_step_stays_within_the_bound_and_keeps_its_extremes() {
        let mut r = Recorder::new(1000.0, 1.0, AlertRules::default());
        r.set_gpus(vec!["GPU-a".into()], vec![0]);
        // A day at one sample a second, with one spike at 50000 s.
        for i in 0..86_400u64 {
            let mem = if i == 50_000 { 9_000 } else { 1_000 };
            r.observe(&obs(1000.0 + i as f64, mem, i as f64 * 0.5, Some(50.0)));
        }
        let tl = r.finish(1000.0 + 86_400.0).timeline;
        assert!(tl.buckets.len() <= MAX_BUCKETS, "{}", tl.buckets.len());
        assert!(tl.buckets.len() > MAX_BUCKETS / 2);
        assert_eq!(tl.bucket_seconds, 512.0);
        let samples: u32 = tl.buckets.iter().map(|b| b.samples).sum();
        assert_eq!(samples, 86_400);
        let peak = tl
            .buckets
            .iter()
            .map(|b| b.memory_bytes.max)
            .fold(0.0, f64::max);
        assert_eq!(peak, 9_000.0, "the spike survives every merge");
        let spike = tl
            .buckets
            .iter()
            .find(|b| b.memory_bytes.max == 9_000.0)
            .unwrap();
        assert!(spike.t <= 50_000.0 && spike.t + tl.bucket_seconds > 50_000.0);
        assert!(spike.memory_bytes.mean > 1_000.0 && spike.memory_bytes.mean < 1_100.0);
        assert_eq!(spike.memory_bytes.min, 1_000.0);
        // Half a core throughout; power 100 W from the energy counter.
        let cpu = tl.buckets[10].cpu_cores.unwrap();
        assert!((cpu.mean - 0.5).abs() < 1e-6, "{cpu:?}");
        let p = tl.buckets[10].gpus[0].power_watts.unwrap();
        assert!((p.mean - 100.0).abs() < 0.5, "{p:?}");
        let json = serde_json::to_string(&tl).unwrap();
        assert!(json.len() < 50_000, "{} bytes", json.len());
        // The bound with 8 GPUs, every figure reported: what RECORD.md promises.
        let mut r8 = Recorder::new(0.0, 1.0, AlertRules::default());
        r8.set_gpus(
            (0..8).map(|i| format!("GPU-{i:036}")).collect(),
            (0..8).collect(),
        );
        for i in 0..100_000u64 {
            let mut o = obs(
                i as f64,
                123_456_789_012 + i * 4096,
                i as f64 * 7.3,
                Some(97.0),
            );
            o.gpus = vec![o.gpus[0]; 8];
            r8.observe(&o);
        }
        let big = serde_json::to_string(&r8.finish(1e5).timeline).unwrap();
        assert!(big.len() < 300_000, "{} bytes", big.len());
        let back: Timeline = serde_json::from_str(&json).unwrap();
        assert_eq!(back, tl);
    }
}

//! A step's story over time, kept in bounded space however long it runs: a timeline of
//! memory, CPU and each GPU's memory, utilization and power ([`Timeline`]), a list of events
//! with times ([`Event`]: tasks, OOM kills, limit hits, lost GPUs, phase marks, alerts), and
//! each GPU's idle time ([`GpuIdle`]). The plugin's step sampler and `gpu-tracker -e` both feed
//! a [`Recorder`] one [`Observation`] per sample; the record keeps what it [`Recorder::finish`]es.
//!
//! Bounds (documented in `slurm/RECORD.md`): at most [`MAX_BUCKETS`] buckets (each bucket keeps
//! min, mean and max; when the timeline is full, neighbours merge and the bucket width
//! doubles), at most [`MAX_EVENTS`] events (then they are counted, not kept), at most
//! [`MAX_MARKS`] phase marks per step.

pub mod mark;

use serde::{Deserialize, Serialize};

/// Most buckets a timeline keeps. With a 1 s interval, a step's first 4 minutes are kept
/// sample by sample; a week-long step has buckets of about 34 minutes.
pub const MAX_BUCKETS: usize = 240;
/// Most events a step's record keeps.
pub const MAX_EVENTS: usize = 500;
/// Most task start and exit events kept, so that a step of many tasks leaves room for the rest.
pub const MAX_TASK_EVENTS: usize = 200;
/// Most phase marks kept per step.
pub const MAX_MARKS: usize = 200;

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
    fn one(v: f64) -> Stat {
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

/// Something that happened, with its time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Seconds since [`Timeline::start_unix`].
    pub t: f64,
    /// `task_start`, `task_exit`, `oom_kill`, `memory_limit_hit`, `gpu_lost`, `mark`,
    /// `alert_memory` or `alert_gpu_idle`.
    pub kind: String,
    /// The task (its id in the step), for task events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<u32>,
    /// The GPU (Slurm's index, else NVML's), for GPU events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// The phase's name, for `mark`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A figure: the exit code, kills counted, percent of the limit, seconds idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// What happened, in words.
    pub detail: String,
}

impl Event {
    /// An event of `kind` saying `detail`; the time is set when it is recorded.
    pub fn new(kind: &str, detail: String) -> Event {
        Event {
            t: 0.0,
            kind: kind.into(),
            task: None,
            gpu: None,
            name: None,
            value: None,
            detail,
        }
    }

    /// Whether a summary shows it (task starts and clean exits it does not).
    pub fn important(&self) -> bool {
        match self.kind.as_str() {
            "task_start" | "mark" => false,
            // A task that exited 0 is not news; a non-zero code or a signal (no code) is.
            "task_exit" => self.value != Some(0.0),
            _ => true,
        }
    }
}

/// A GPU's idle time: utilization below [`GpuIdle::threshold_percent`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuIdle {
    /// Below this utilization (percent) the GPU counts as idle.
    pub threshold_percent: f64,
    /// Seconds the GPU was read over (from its first reading to the last).
    pub observed_seconds: f64,
    /// Seconds idle.
    pub idle_seconds: f64,
    /// Of which before it was first busy (all of it when it never was).
    pub at_start_seconds: f64,
    /// Of which after it was last busy.
    pub at_end_seconds: f64,
    /// Of which between busy stretches.
    pub in_gaps_seconds: f64,
    /// Longest idle stretch, seconds.
    pub longest_seconds: f64,
    /// Whether it was ever busy.
    pub ever_busy: bool,
}

impl GpuIdle {
    /// Idle seconds as a percent of the time observed.
    pub fn share_percent(&self) -> f64 {
        if self.observed_seconds > 0.0 {
            100.0 * self.idle_seconds / self.observed_seconds
        } else {
            0.0
        }
    }
}

/// When alerts fire (the site's settings; the defaults are the settings' defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlertRules {
    /// Memory above this percent of the limit (0: off).
    pub memory_percent: f64,
    /// A GPU idle this many seconds in a row (0: off).
    pub gpu_idle_seconds: f64,
    /// Utilization below this percent is idle.
    pub gpu_idle_percent: f64,
}

impl Default for AlertRules {
    fn default() -> Self {
        AlertRules {
            memory_percent: 90.0,
            gpu_idle_seconds: 600.0,
            gpu_idle_percent: 5.0,
        }
    }
}

/// One GPU's reading in an [`Observation`]; `None`: not reported, or the device is lost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuObservation {
    /// Device memory in use, bytes.
    pub memory_bytes: Option<u64>,
    /// Utilization, percent.
    pub utilization_percent: Option<f64>,
    /// Energy counter, millijoules.
    pub energy_mj: Option<u64>,
    /// The device is lost (no readings from now on).
    pub lost: bool,
}

/// What one sample saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    /// When, Unix seconds.
    pub unix: f64,
    /// Memory of the step, bytes.
    pub memory_bytes: u64,
    /// Memory the alert compares with the limit, when not `memory_bytes` (a batch step
    /// watches its whole job).
    pub alert_memory_bytes: Option<u64>,
    /// CPU seconds used by the step so far.
    pub cpu_seconds: Option<f64>,
    /// The GPUs, in the order given to [`Recorder::set_gpus`].
    pub gpus: Vec<GpuObservation>,
    /// OOM kills counted so far (cgroup).
    pub oom_kills: Option<u64>,
    /// Times the memory limit was hit so far (cgroup).
    pub limit_hits: Option<u64>,
}

#[derive(Debug, Clone, Default)]
struct IdleTracker {
    first: Option<f64>,
    last: Option<f64>,
    idle: f64,
    first_busy: Option<f64>,
    /// End of the latest busy interval.
    last_busy: Option<f64>,
    stretch_start: Option<f64>,
    longest: f64,
    alerted: bool,
    last_energy: Option<(f64, u64)>,
}

/// Builds a step's [`Timeline`], events and idle figures from its samples.
#[derive(Debug, Clone)]
pub struct Recorder {
    rules: AlertRules,
    timeline: Timeline,
    events: Vec<Event>,
    dropped: u64,
    task_events: usize,
    marks: usize,
    idle: Vec<IdleTracker>,
    gpu_ids: Vec<u32>,
    last_cpu: Option<(f64, f64)>,
    last_oom: Option<u64>,
    last_hits: Option<u64>,
    memory_alerted: bool,
    /// Alert lines not yet handed to [`Recorder::take_alerts`].
    pending_alerts: Vec<String>,
}

impl Recorder {
    /// A recorder for a step that started at `start_unix`, sampled every `interval` seconds.
    pub fn new(start_unix: f64, interval: f64, rules: AlertRules) -> Recorder {
        Recorder {
            rules,
            timeline: Timeline {
                start_unix,
                bucket_seconds: interval.max(0.01),
                max_buckets: MAX_BUCKETS as u32,
                gpus: Vec::new(),
                memory_limit_bytes: None,
                buckets: Vec::new(),
            },
            events: Vec::new(),
            dropped: 0,
            task_events: 0,
            marks: 0,
            idle: Vec::new(),
            gpu_ids: Vec::new(),
            last_cpu: None,
            last_oom: None,
            last_hits: None,
            memory_alerted: false,
            pending_alerts: Vec::new(),
        }
    }

    /// Names the GPUs: their UUIDs and the ids events give them (Slurm's index, else NVML's).
    pub fn set_gpus(&mut self, uuids: Vec<String>, ids: Vec<u32>) {
        self.idle = vec![IdleTracker::default(); uuids.len()];
        self.timeline.gpus = uuids;
        self.gpu_ids = ids;
    }

    /// Sets the memory limit the memory alert compares with.
    pub fn set_memory_limit(&mut self, limit: Option<u64>) {
        self.timeline.memory_limit_bytes = limit.filter(|&l| l > 0);
    }

    fn rel(&self, unix: f64) -> f64 {
        (unix - self.timeline.start_unix).max(0.0)
    }

    /// Adds an event at Unix time `unix` (kept while there is room, else counted).
    pub fn event(&mut self, unix: f64, mut e: Event) {
        e.t = self.rel(unix);
        let task = matches!(e.kind.as_str(), "task_start" | "task_exit");
        let mark = e.kind == "mark";
        if self.events.len() >= MAX_EVENTS
            || (task && self.task_events >= MAX_TASK_EVENTS)
            || (mark && self.marks >= MAX_MARKS)
        {
            self.dropped += 1;
            return;
        }
        self.task_events += usize::from(task);
        self.marks += usize::from(mark);
        self.events.push(e);
    }

    /// A phase mark named `name` at `unix`.
    pub fn mark(&mut self, unix: f64, name: &str) {
        self.event(
            unix,
            Event {
                name: Some(name.to_string()),
                ..Event::new("mark", format!("phase {name} begins"))
            },
        );
    }

    /// Adds one sample.
    pub fn observe(&mut self, o: &Observation) {
        let t = self.rel(o.unix);
        let cores = match (o.cpu_seconds, self.last_cpu) {
            (Some(c), Some((t0, c0))) if o.unix - t0 > 1e-3 => {
                Some(((c - c0) / (o.unix - t0)).max(0.0))
            }
            _ => None,
        };
        if let Some(c) = o.cpu_seconds {
            self.last_cpu = Some((o.unix, c));
        }
        self.counters(o);
        self.memory_alert(o);
        let mut gpus = Vec::with_capacity(o.gpus.len());
        for (i, g) in o.gpus.iter().enumerate() {
            gpus.push(self.gpu(i, o.unix, g));
        }
        self.add_to_bucket(t, o.memory_bytes as f64, cores, gpus);
    }

    fn counters(&mut self, o: &Observation) {
        if let (Some(now), Some(before)) = (o.oom_kills, self.last_oom)
            && now > before
        {
            let n = now - before;
            self.event(
                o.unix,
                Event {
                    value: Some(n as f64),
                    ..Event::new(
                        "oom_kill",
                        format!("the OOM killer killed {n} process(es) of the step"),
                    )
                },
            );
        }
        if o.oom_kills.is_some() {
            self.last_oom = o.oom_kills;
        }
        if let (Some(now), Some(before)) = (o.limit_hits, self.last_hits)
            && now > before
        {
            let n = now - before;
            self.event(
                o.unix,
                Event {
                    value: Some(n as f64),
                    ..Event::new(
                        "memory_limit_hit",
                        format!("memory reached the limit ({n} time(s) since the last sample)"),
                    )
                },
            );
        }
        if o.limit_hits.is_some() {
            self.last_hits = o.limit_hits;
        }
    }

    fn memory_alert(&mut self, o: &Observation) {
        let (Some(limit), true) = (
            self.timeline.memory_limit_bytes,
            self.rules.memory_percent > 0.0,
        ) else {
            return;
        };
        let mem = o.alert_memory_bytes.unwrap_or(o.memory_bytes);
        let pct = 100.0 * mem as f64 / limit as f64;
        if pct >= self.rules.memory_percent && !self.memory_alerted {
            self.memory_alerted = true;
            let detail = format!(
                "memory at {pct:.0}% of the limit ({} of {})",
                crate::units::human_bytes(mem),
                crate::units::human_bytes(limit)
            );
            self.pending_alerts.push(detail.clone());
            self.event(
                o.unix,
                Event {
                    value: Some((pct * 10.0).round() / 10.0),
                    ..Event::new("alert_memory", detail)
                },
            );
        } else if pct < self.rules.memory_percent - 10.0 {
            // Fires again only after falling well below.
            self.memory_alerted = false;
        }
    }

    fn gpu(&mut self, i: usize, unix: f64, g: &GpuObservation) -> GpuStat {
        let id = self.gpu_ids.get(i).copied().unwrap_or(i as u32);
        let Some(tr) = self.idle.get_mut(i) else {
            return GpuStat::default();
        };
        if g.lost {
            return GpuStat::default();
        }
        let power = match (g.energy_mj, tr.last_energy) {
            (Some(e), Some((t0, e0))) if unix - t0 > 1e-3 && e >= e0 => {
                Some((e - e0) as f64 / 1000.0 / (unix - t0))
            }
            _ => None,
        };
        if let Some(e) = g.energy_mj {
            tr.last_energy = Some((unix, e));
        }
        let mut alert = None;
        if let Some(u) = g.utilization_percent {
            // The reading stands for the interval since the previous one.
            let since = tr.last.unwrap_or(unix);
            let dt = (unix - since).max(0.0);
            tr.first.get_or_insert(unix);
            tr.last = Some(unix);
            if u < self.rules.gpu_idle_percent {
                tr.idle += dt;
                let start = *tr.stretch_start.get_or_insert(since);
                let stretch = unix - start;
                tr.longest = tr.longest.max(stretch);
                if self.rules.gpu_idle_seconds > 0.0
                    && stretch >= self.rules.gpu_idle_seconds
                    && !tr.alerted
                {
                    tr.alerted = true;
                    alert = Some(stretch);
                }
            } else {
                tr.first_busy.get_or_insert(since);
                tr.last_busy = Some(unix);
                tr.stretch_start = None;
                tr.alerted = false;
            }
        }
        if let Some(stretch) = alert {
            let detail = format!("GPU {id} idle for {stretch:.0} s");
            self.pending_alerts.push(detail.clone());
            self.event(
                unix,
                Event {
                    gpu: Some(id),
                    value: Some(stretch.round()),
                    ..Event::new("alert_gpu_idle", detail)
                },
            );
        }
        GpuStat {
            memory_bytes: g.memory_bytes.map(|b| Stat::one(b as f64)),
            utilization_percent: g.utilization_percent.map(Stat::one),
            power_watts: power.map(Stat::one),
        }
    }

    /// A GPU was lost at `unix`.
    pub fn gpu_lost(&mut self, unix: f64, i: usize) {
        let id = self.gpu_ids.get(i).copied().unwrap_or(i as u32);
        self.event(
            unix,
            Event {
                gpu: Some(id),
                ..Event::new(
                    "gpu_lost",
                    format!("GPU {id} fell off the bus (NVML: GPU is lost)"),
                )
            },
        );
    }

    fn add_to_bucket(&mut self, t: f64, mem: f64, cores: Option<f64>, gpus: Vec<GpuStat>) {
        let tl = &mut self.timeline;
        let mut idx = (t / tl.bucket_seconds).floor() as u64;
        while idx >= MAX_BUCKETS as u64 {
            merge_pairs(tl);
            idx = (t / tl.bucket_seconds).floor() as u64;
        }
        let start = idx as f64 * tl.bucket_seconds;
        let new = Bucket {
            t: start,
            samples: 1,
            memory_bytes: Stat::one(mem),
            cpu_cores: cores.map(Stat::one),
            gpus,
        };
        match tl.buckets.last_mut() {
            Some(b) if (b.t - start).abs() < 1e-9 => {
                let n = b.samples;
                merge_bucket(b, n, new);
            }
            _ => tl.buckets.push(new),
        }
    }

    /// Alert lines raised since the last call (for a site that warns users while jobs run).
    pub fn take_alerts(&mut self) -> Vec<String> {
        std::mem::take(&mut self.pending_alerts)
    }

    /// The timeline, events and per-GPU idle figures as of now (a sample at `end_unix` ends
    /// the idle figures).
    pub fn finish(&self, end_unix: f64) -> Story {
        let idle = self
            .idle
            .iter()
            .map(|tr| {
                let (first, last) = (tr.first?, tr.last?);
                let end = last.max(first).min(end_unix.max(last));
                let observed = end - first;
                let at_start = tr.first_busy.map_or(tr.idle, |b| (b - first).max(0.0));
                let at_end = tr.last_busy.map_or(0.0, |b| (end - b).max(0.0));
                Some(GpuIdle {
                    threshold_percent: self.rules.gpu_idle_percent,
                    observed_seconds: round3(observed),
                    idle_seconds: round3(tr.idle),
                    at_start_seconds: round3(at_start.min(tr.idle)),
                    at_end_seconds: round3(at_end.min(tr.idle)),
                    in_gaps_seconds: round3((tr.idle - at_start - at_end).max(0.0)),
                    longest_seconds: round3(tr.longest),
                    ever_busy: tr.first_busy.is_some(),
                })
            })
            .collect();
        Story {
            timeline: self.timeline.clone(),
            events: self.events.clone(),
            events_dropped: self.dropped,
            idle,
        }
    }
}

/// What a [`Recorder`] kept.
#[derive(Debug, Clone, PartialEq)]
pub struct Story {
    /// The timeline.
    pub timeline: Timeline,
    /// The events, in the order they were recorded.
    pub events: Vec<Event>,
    /// Events beyond the bounds.
    pub events_dropped: u64,
    /// Each GPU's idle time (in the timeline's GPU order); `None`: never read.
    pub idle: Vec<Option<GpuIdle>>,
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn merge_bucket(b: &mut Bucket, n: u32, other: Bucket) {
    let m = other.samples;
    b.memory_bytes = b.memory_bytes.merge(n, other.memory_bytes, m);
    b.cpu_cores = merge_opt(b.cpu_cores, n, other.cpu_cores, m);
    if b.gpus.len() < other.gpus.len() {
        b.gpus.resize(other.gpus.len(), GpuStat::default());
    }
    for (g, o) in b.gpus.iter_mut().zip(other.gpus) {
        g.memory_bytes = merge_opt(g.memory_bytes, n, o.memory_bytes, m);
        g.utilization_percent = merge_opt(g.utilization_percent, n, o.utilization_percent, m);
        g.power_watts = merge_opt(g.power_watts, n, o.power_watts, m);
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

    fn obs(unix: f64, mem: u64, cpu: f64, util: Option<f64>) -> Observation {
        Observation {
            unix,
            memory_bytes: mem,
            alert_memory_bytes: None,
            cpu_seconds: Some(cpu),
            gpus: vec![GpuObservation {
                memory_bytes: Some(mem / 2),
                utilization_percent: util,
                energy_mj: Some((unix * 100_000.0) as u64),
                lost: false,
            }],
            oom_kills: Some(0),
            limit_hits: Some(0),
        }
    }

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

    #[test]
    fn idle_time_is_split_into_start_gaps_and_end() {
        let mut r = Recorder::new(0.0, 1.0, AlertRules::default());
        r.set_gpus(vec!["GPU-a".into(), "GPU-b".into()], vec![0, 1]);
        // GPU a: idle 0..10, busy 10..20, idle 20..25, busy 25..30, idle 30..40.
        // GPU b: never busy.
        for i in 0..=40u32 {
            let t = f64::from(i);
            let busy = (11..=20).contains(&i) || (26..=30).contains(&i);
            let mut o = obs(t, 100, t, Some(if busy { 80.0 } else { 0.0 }));
            o.gpus.push(GpuObservation {
                utilization_percent: Some(1.0),
                ..GpuObservation::default()
            });
            r.observe(&o);
        }
        let idle = r.finish(40.0).idle;
        let a = idle[0].clone().unwrap();
        assert_eq!(a.observed_seconds, 40.0);
        assert_eq!(a.idle_seconds, 25.0);
        assert_eq!(a.at_start_seconds, 10.0);
        assert_eq!(a.at_end_seconds, 10.0);
        assert_eq!(a.in_gaps_seconds, 5.0);
        assert_eq!(a.longest_seconds, 10.0);
        assert!(a.ever_busy);
        assert_eq!(a.share_percent(), 62.5);
        let b = idle[1].clone().unwrap();
        assert_eq!(b.idle_seconds, 40.0);
        assert_eq!(b.at_start_seconds, 40.0);
        assert_eq!(b.in_gaps_seconds, 0.0);
        assert!(!b.ever_busy);
    }

    #[test]
    fn alerts_fire_once_per_episode_and_counters_become_events() {
        let rules = AlertRules {
            memory_percent: 80.0,
            gpu_idle_seconds: 5.0,
            gpu_idle_percent: 5.0,
        };
        let mut r = Recorder::new(0.0, 1.0, rules);
        r.set_gpus(vec!["GPU-a".into()], vec![3]);
        r.set_memory_limit(Some(1000));
        let mems = [100, 850, 900, 750, 600, 950];
        for (i, m) in mems.iter().enumerate() {
            let mut o = obs(i as f64, *m, 0.0, Some(0.0));
            o.oom_kills = Some(if i >= 4 { 2 } else { 0 });
            o.limit_hits = Some(if i >= 2 { 1 } else { 0 });
            r.observe(&o);
        }
        for i in 6..12 {
            r.observe(&obs(f64::from(i), 100, 0.0, Some(0.0)));
        }
        r.mark(3.5, "train");
        let alerts = r.take_alerts();
        let Story {
            events,
            events_dropped: dropped,
            ..
        } = r.finish(12.0);
        let kinds: Vec<(&str, f64)> = events.iter().map(|e| (e.kind.as_str(), e.t)).collect();
        assert_eq!(
            kinds,
            vec![
                ("alert_memory", 1.0),
                ("memory_limit_hit", 2.0),
                ("oom_kill", 4.0),
                ("alert_memory", 5.0),
                ("alert_gpu_idle", 5.0),
                ("mark", 3.5),
            ]
        );
        assert_eq!(events[2].value, Some(2.0));
        assert_eq!(events[4].gpu, Some(3));
        assert_eq!(dropped, 0);
        assert_eq!(alerts.len(), 3, "{alerts:?}");
        assert!(alerts[0].contains("85% of the limit"), "{alerts:?}");
        assert!(r.take_alerts().is_empty());
    }

    #[test]
    fn only_events_that_matter_are_important() {
        let ev = |kind: &str, value: Option<f64>| Event {
            t: 0.0,
            kind: kind.into(),
            task: Some(0),
            gpu: None,
            name: None,
            value,
            detail: String::new(),
        };
        assert!(!ev("task_exit", Some(0.0)).important());
        assert!(ev("task_exit", Some(1.0)).important());
        assert!(ev("task_exit", None).important(), "killed by a signal");
        assert!(!ev("task_start", None).important());
        assert!(!ev("mark", None).important());
        for k in [
            "oom_kill",
            "memory_limit_hit",
            "gpu_lost",
            "alert_memory",
            "alert_gpu_idle",
        ] {
            assert!(ev(k, Some(1.0)).important(), "{k}");
        }
    }

    #[test]
    fn events_beyond_the_bounds_are_counted() {
        let mut r = Recorder::new(0.0, 1.0, AlertRules::default());
        for i in 0..(MAX_TASK_EVENTS + 10) {
            r.event(
                i as f64,
                Event {
                    task: Some(i as u32),
                    ..Event::new("task_start", String::new())
                },
            );
        }
        for i in 0..(MAX_MARKS + 5) {
            r.mark(i as f64, "m");
        }
        r.gpu_lost(1.0, 0);
        let Story {
            events,
            events_dropped: dropped,
            ..
        } = r.finish(1.0);
        assert_eq!(events.len(), MAX_TASK_EVENTS + MAX_MARKS + 1);
        assert_eq!(dropped, 15);
        assert_eq!(events.last().unwrap().kind, "gpu_lost");
    }
}

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

mod event;
mod idle;
pub mod mark;
pub(crate) mod mark_dir;
pub mod pressure;
mod timeline;

pub use event::{AlertRules, Event};
pub use idle::GpuIdle;
pub use timeline::{Bucket, GpuStat, MAX_BUCKETS, Stat, Timeline};

use idle::IdleTracker;

/// Most events a step's record keeps.
pub const MAX_EVENTS: usize = 500;
/// Most task start and exit events kept, so that a step of many tasks leaves room for the rest.
pub const MAX_TASK_EVENTS: usize = 200;
/// Most phase marks kept per step.
pub const MAX_MARKS: usize = 200;
/// Most stall events (`stall_cpu`, `stall_memory`, `stall_io`) kept per step.
pub const MAX_STALL_EVENTS: usize = 50;

/// One GPU's reading in an [`Observation`]; `None`: not reported, or the device is lost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuObservation {
    /// Device memory in use, bytes.
    pub memory_bytes: Option<u64>,
    /// Utilization, percent.
    pub utilization_percent: Option<f64>,
    /// Energy counter, millijoules.
    pub energy_mj: Option<u64>,
    /// GPM's SM activity since the previous reading, percent.
    pub sm_active_percent: Option<f64>,
    /// Clock event (throttle) reasons active: NVML's bit mask.
    pub throttle: Option<u64>,
    /// A critical Xid error read at this sample (the last, when several).
    pub xid: Option<u64>,
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
    /// The step cgroup's pressure stall counters (cgroup v2), when read.
    pub pressure: Option<crate::cgroup::pressure::PressureTotals>,
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
    last_pressure: Option<(f64, crate::cgroup::pressure::PressureTotals)>,
    stretches: pressure::StallStretches,
    stall_events: usize,
    memory_alerted: bool,
    /// Per GPU: since when it has been slowed down (thermal, power), while it is.
    slowed: Vec<Option<f64>>,
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
            last_pressure: None,
            stretches: pressure::StallStretches::default(),
            stall_events: 0,
            memory_alerted: false,
            slowed: Vec::new(),
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
        let stall = pressure::STALL_EVENTS.contains(&e.kind.as_str());
        if self.events.len() >= MAX_EVENTS
            || (task && self.task_events >= MAX_TASK_EVENTS)
            || (mark && self.marks >= MAX_MARKS)
            || (stall && self.stall_events >= MAX_STALL_EVENTS)
        {
            self.dropped += 1;
            return;
        }
        self.task_events += usize::from(task);
        self.marks += usize::from(mark);
        self.stall_events += usize::from(stall);
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
                Some(crate::units::cores_busy(c - c0, o.unix - t0))
            }
            _ => None,
        };
        if let Some(c) = o.cpu_seconds {
            self.last_cpu = Some((o.unix, c));
        }
        self.counters(o);
        self.memory_alert(o);
        let stall = self.stall(o);
        let mut gpus = Vec::with_capacity(o.gpus.len());
        for (i, g) in o.gpus.iter().enumerate() {
            gpus.push(self.gpu(i, o.unix, g, stall.as_ref()));
        }
        self.timeline
            .add(t, o.memory_bytes as f64, cores, gpus, stall);
    }

    /// The pressure stall since the previous reading of the counters.
    fn stall(&mut self, o: &Observation) -> Option<pressure::BucketStall> {
        let now = o.pressure?;
        let (t0, before) = self.last_pressure.replace((o.unix, now))?;
        let dt = o.unix - t0;
        let stall = (dt > 1e-3)
            .then(|| pressure::BucketStall::between(&before, &now, dt))
            .flatten()?;
        for (i, start, share) in self.stretches.observe(o.unix, &stall) {
            let what = ["a core", "memory", "I/O"][i];
            self.event(
                start,
                Event {
                    value: Some(share),
                    ..Event::new(
                        pressure::STALL_EVENTS[i],
                        format!(
                            "the tasks waited for {what} {share:.0}% of the time for {:.0} s and \
                             more",
                            pressure::STALL_EVENT_SECONDS
                        ),
                    )
                },
            );
        }
        Some(stall)
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

    fn gpu(
        &mut self,
        i: usize,
        unix: f64,
        g: &GpuObservation,
        stall: Option<&pressure::BucketStall>,
    ) -> GpuStat {
        let id = self.gpu_ids.get(i).copied().unwrap_or(i as u32);
        let Some(tr) = self.idle.get_mut(i) else {
            return GpuStat::default();
        };
        if g.lost {
            return GpuStat::default();
        }
        let power = tr.power(unix, g.energy_mj);
        if let (Some(u), Some(s)) = (g.utilization_percent, stall)
            && u < self.rules.gpu_idle_percent
        {
            tr.waits.get_or_insert_default().add(s);
        }
        let alert = g.utilization_percent.and_then(|u| {
            tr.utilization(
                unix,
                u,
                self.rules.gpu_idle_percent,
                self.rules.gpu_idle_seconds,
            )
        });
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
        self.health(i, id, unix, g);
        GpuStat {
            memory_bytes: g.memory_bytes.map(|b| Stat::one(b as f64)),
            utilization_percent: g.utilization_percent.map(Stat::one),
            power_watts: power.map(Stat::one),
            sm_active_percent: g.sm_active_percent.map(Stat::one),
        }
    }

    /// Events for an Xid error, and for the start and end of a slowdown (thermal, power).
    fn health(&mut self, i: usize, id: u32, unix: f64, g: &GpuObservation) {
        if let Some(xid) = g.xid {
            self.event(
                unix,
                Event {
                    gpu: Some(id),
                    value: Some(xid as f64),
                    ..Event::new("gpu_xid", format!("GPU {id} reported Xid {xid}"))
                },
            );
        }
        let Some(bits) = g.throttle else { return };
        let slow: Vec<&str> = crate::gpu::figures::throttle_names(bits)
            .filter(|n| crate::gpu::figures::SLOWDOWN_REASONS.contains(n))
            .collect();
        if self.slowed.len() <= i {
            self.slowed.resize(i + 1, None);
        }
        match (self.slowed[i].take(), slow.is_empty()) {
            (None, false) => {
                self.event(
                    unix,
                    Event {
                        gpu: Some(id),
                        ..Event::new(
                            "gpu_slowdown",
                            format!("GPU {id} slowed down: {}", slow.join(", ")),
                        )
                    },
                );
                self.slowed[i] = Some(unix);
            }
            (Some(since), true) => {
                let secs = ((unix - since) * 10.0).round() / 10.0;
                self.event(
                    unix,
                    Event {
                        gpu: Some(id),
                        value: Some(secs),
                        ..Event::new(
                            "gpu_slowdown_end",
                            format!("GPU {id} back to full clocks after {secs} s"),
                        )
                    },
                );
            }
            (since, _) => self.slowed[i] = since,
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
            .map(|tr| tr.finish(self.rules.gpu_idle_percent, end_unix))
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A sample of one GPU (half the memory on it) at `unix`.
    pub(crate) fn obs(unix: f64, mem: u64, cpu: f64, util: Option<f64>) -> Observation {
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
                ..GpuObservation::default()
            }],
            oom_kills: Some(0),
            limit_hits: Some(0),
            pressure: None,
        }
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

//! A step's pressure stall figures (cgroup v2's PSI, read by [`crate::cgroup::pressure`]): the
//! stall over the whole step for the record, the stall per timeline bucket as exact sums of
//! the counters' changes, and the stall while each GPU was idle. Where the kernel keeps none
//! (cgroup v1, `psi=0`) every figure is `null` and the record says why: never 0.

use serde::{Deserialize, Serialize};

use crate::cgroup::pressure::{PressureTotals, Stall, Unavailable};

/// A resource's `some` and `full` stall seconds over a stretch, written `[some, full]`
/// (`full` is `null` where the kernel gives none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "(f64, Option<f64>)", into = "(f64, Option<f64>)")]
pub struct StallPair {
    /// Seconds in which some task waited.
    pub some: f64,
    /// Seconds in which every runnable task waited.
    pub full: Option<f64>,
}

impl From<(f64, Option<f64>)> for StallPair {
    fn from((some, full): (f64, Option<f64>)) -> StallPair {
        StallPair { some, full }
    }
}

impl From<StallPair> for (f64, Option<f64>) {
    fn from(p: StallPair) -> (f64, Option<f64>) {
        (p.some, p.full)
    }
}

impl StallPair {
    fn add(self, o: StallPair) -> StallPair {
        StallPair {
            some: self.some + o.some,
            full: match (self.full, o.full) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            },
        }
    }
}

/// The stall of one timeline bucket: the counters' changes over the intervals that ended in
/// it, added up (exact: no average is sampled).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BucketStall {
    /// Seconds the changes cover (the intervals' lengths, added).
    pub seconds: f64,
    /// CPU: tasks runnable, waiting for a core.
    pub cpu: StallPair,
    /// Memory: tasks stalled in reclaim, refaults or swap.
    pub memory: StallPair,
    /// I/O: tasks waiting for block I/O.
    pub io: StallPair,
}

impl BucketStall {
    /// The change from `before` to `now` over `seconds`; `None` where a counter went back
    /// (not the same cgroup).
    pub fn between(before: &PressureTotals, now: &PressureTotals, seconds: f64) -> Option<Self> {
        let pair = |a: Stall, b: Stall| -> Option<StallPair> {
            Some(StallPair {
                some: b.some_us.checked_sub(a.some_us)? as f64 / 1e6,
                full: match (a.full_us, b.full_us) {
                    (Some(x), Some(y)) => Some(y.checked_sub(x)? as f64 / 1e6),
                    _ => None,
                },
            })
        };
        Some(BucketStall {
            seconds,
            cpu: pair(before.cpu, now.cpu)?,
            memory: pair(before.memory, now.memory)?,
            io: pair(before.io, now.io)?,
        })
    }

    /// Both stretches together.
    pub fn plus(self, o: BucketStall) -> BucketStall {
        BucketStall {
            seconds: self.seconds + o.seconds,
            cpu: self.cpu.add(o.cpu),
            memory: self.memory.add(o.memory),
            io: self.io.add(o.io),
        }
    }

    /// `some` seconds of CPU, memory and I/O.
    pub fn some(&self) -> [f64; 3] {
        [self.cpu.some, self.memory.some, self.io.some]
    }
}

/// Sums of a stall over stretches, for a merge of optional ones.
pub(super) fn add_opt(a: Option<BucketStall>, b: Option<BucketStall>) -> Option<BucketStall> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.plus(b)),
        (a, b) => a.or(b),
    }
}

/// What the step's tasks waited for while a GPU was idle: over the idle intervals that had a
/// pressure reading, the `some` stall seconds of each resource.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IdleWaits {
    /// Idle seconds these figures cover.
    pub seconds: f64,
    /// Seconds in which some task waited for a core.
    pub cpu_seconds: f64,
    /// Seconds in which some task waited for memory.
    pub memory_seconds: f64,
    /// Seconds in which some task waited for I/O.
    pub io_seconds: f64,
}

impl IdleWaits {
    pub(super) fn add(&mut self, s: &BucketStall) {
        self.seconds += s.seconds;
        self.cpu_seconds += s.cpu.some;
        self.memory_seconds += s.memory.some;
        self.io_seconds += s.io.some;
    }

    /// Both together (two steps' figures of one GPU).
    pub fn merged(self, o: IdleWaits) -> IdleWaits {
        IdleWaits {
            seconds: self.seconds + o.seconds,
            cpu_seconds: self.cpu_seconds + o.cpu_seconds,
            memory_seconds: self.memory_seconds + o.memory_seconds,
            io_seconds: self.io_seconds + o.io_seconds,
        }
    }

    /// The shares of the idle time in which some task waited for CPU, memory and I/O, percent.
    pub fn percents(&self) -> Option<[f64; 3]> {
        (self.seconds > 0.0).then(|| {
            [self.cpu_seconds, self.memory_seconds, self.io_seconds]
                .map(|s| percent(s, self.seconds))
        })
    }
}

/// A resource's stall over the step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StallShare {
    /// Seconds in which some task waited.
    pub some_seconds: f64,
    /// Their share of the time measured, percent.
    pub some_percent: f64,
    /// Seconds in which every runnable task waited (`null`: the kernel gives none).
    pub full_seconds: Option<f64>,
    /// Their share, percent.
    pub full_percent: Option<f64>,
}

impl StallShare {
    /// The stall of `pair` over `seconds`.
    pub fn of(pair: StallPair, seconds: f64) -> StallShare {
        StallShare {
            some_seconds: round3(pair.some),
            some_percent: percent(pair.some, seconds),
            full_seconds: pair.full.map(round3),
            full_percent: pair.full.map(|f| percent(f, seconds)),
        }
    }
}

/// The step's pressure stall figures in its record. Where the kernel keeps none, `available`
/// is false, `why` says why and every figure is `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepPressure {
    /// Whether the figures below were read.
    pub available: bool,
    /// Why not, when they were not.
    pub why: Option<String>,
    /// Seconds the figures cover: from the step's start (its cgroup was made with it) to the
    /// last reading.
    pub seconds: Option<f64>,
    /// CPU.
    pub cpu: Option<StallShare>,
    /// Memory.
    pub memory: Option<StallShare>,
    /// I/O.
    pub io: Option<StallShare>,
}

impl StepPressure {
    /// The figures of a step that started at `start_unix`, from the counters' last reading
    /// (`Some((unix, totals))`), else the reason none was read.
    pub fn from_reading(
        start_unix: f64,
        last: Option<(f64, PressureTotals)>,
        why: Option<String>,
    ) -> StepPressure {
        match last {
            Some((unix, t)) => {
                let seconds = (unix - start_unix).max(0.0);
                // The counters start at 0 with the cgroup, made with the step.
                let share = |s: Stall| {
                    let pair = StallPair {
                        some: s.some_us as f64 / 1e6,
                        full: s.full_us.map(|f| f as f64 / 1e6),
                    };
                    Some(StallShare::of(pair, seconds))
                };
                StepPressure {
                    available: true,
                    why: None,
                    seconds: Some(round3(seconds)),
                    cpu: share(t.cpu),
                    memory: share(t.memory),
                    io: share(t.io),
                }
            }
            None => StepPressure::unavailable(
                why.unwrap_or_else(|| "no reading of the step's cgroup was taken".into()),
            ),
        }
    }

    /// No figures, for `why`.
    pub fn unavailable(why: String) -> StepPressure {
        StepPressure {
            available: false,
            why: Some(why),
            seconds: None,
            cpu: None,
            memory: None,
            io: None,
        }
    }

    /// The shares, in the order of [`crate::cgroup::pressure::RESOURCES`].
    pub fn shares(&self) -> [Option<StallShare>; 3] {
        [self.cpu, self.memory, self.io]
    }
}

/// The step cgroup's pressure readings as the step goes: the last good one (the final one,
/// taken when the last task ended, is kept) and why there is none.
#[derive(Debug, Clone, Default)]
pub struct PressureWatch {
    last: Option<(f64, PressureTotals)>,
    ended: bool,
    why: Option<String>,
}

impl PressureWatch {
    /// Takes a reading at `unix`; `last_one`: the step's last task has ended (later readings
    /// are ignored).
    pub fn observe(&mut self, unix: f64, r: Result<PressureTotals, Unavailable>, last_one: bool) {
        if self.ended {
            return;
        }
        match r {
            Ok(t) => {
                self.last = Some((unix, t));
                self.ended = last_one;
            }
            Err(e) => self.why = Some(e.to_string()),
        }
    }

    /// The last good reading.
    pub fn last(&self) -> Option<(f64, PressureTotals)> {
        self.last
    }

    /// What a running step shows after reading `r` (observed already): the last good reading
    /// (the final one once the last task ended, when the cgroup may be gone), else why `r`
    /// failed.
    pub fn shown(
        &self,
        r: Result<PressureTotals, Unavailable>,
    ) -> Result<PressureTotals, Unavailable> {
        match self.last {
            Some((_, t)) => Ok(t),
            None => r,
        }
    }

    /// The record's figures for a step that started at `start_unix`.
    pub fn figures(&self, start_unix: f64) -> StepPressure {
        StepPressure::from_reading(start_unix, self.last, self.why.clone())
    }
}

/// A resource whose tasks waited at least this share of every interval ...
pub const STALL_EVENT_SHARE: f64 = 0.5;
/// ... for this many seconds in a row becomes an event (`stall_cpu`, `stall_memory`,
/// `stall_io`), once per such stretch.
pub const STALL_EVENT_SECONDS: f64 = 10.0;
/// The event kinds, in the order of [`crate::cgroup::pressure::RESOURCES`].
pub const STALL_EVENTS: [&str; 3] = ["stall_cpu", "stall_memory", "stall_io"];

/// Stretches of heavy stall, per resource: when each began, the stall and time in it so far,
/// and whether it was told.
#[derive(Debug, Clone, Default)]
pub(super) struct StallStretches {
    open: [Option<(f64, f64, f64)>; 3],
    told: [bool; 3],
}

impl StallStretches {
    /// Takes the stall `s` of the interval ending at `unix`. Returns, for each resource whose
    /// stretch has just lasted [`STALL_EVENT_SECONDS`], its index, the stretch's start and the
    /// share of it the tasks waited (percent).
    pub(super) fn observe(&mut self, unix: f64, s: &BucketStall) -> Vec<(usize, f64, f64)> {
        let mut out = Vec::new();
        for (i, some) in s.some().into_iter().enumerate() {
            if s.seconds <= 0.0 || some / s.seconds < STALL_EVENT_SHARE {
                self.open[i] = None;
                self.told[i] = false;
                continue;
            }
            let (start, stall, secs) = self.open[i].unwrap_or((unix - s.seconds, 0.0, 0.0));
            let now = (start, stall + some, secs + s.seconds);
            self.open[i] = Some(now);
            if !self.told[i] && now.2 >= STALL_EVENT_SECONDS {
                self.told[i] = true;
                out.push((i, start, percent(now.1, now.2)));
            }
        }
        out
    }
}

/// `part` of `whole` in percent, to a tenth; 0 for no time.
pub fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        (1000.0 * part / whole).round() / 10.0
    } else {
        0.0
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(cpu: u64, mem: u64, io: u64) -> PressureTotals {
        let s = |us| Stall {
            some_us: us,
            full_us: Some(us / 2),
        };
        PressureTotals {
            cpu: s(cpu),
            memory: s(mem),
            io: s(io),
        }
    }

    #[test]
    fn the_step_figures_are_the_last_totals_over_the_time_since_its_start() {
        let mut w = PressureWatch::default();
        w.observe(110.0, Ok(totals(3_000_000, 0, 500_000)), false);
        w.observe(120.0, Ok(totals(7_000_000, 0, 1_000_000)), true);
        // After the last task: not taken.
        w.observe(125.0, Ok(totals(9_000_000, 0, 1_000_000)), false);
        let p = w.figures(100.0);
        assert!(p.available && p.why.is_none());
        assert_eq!(p.seconds, Some(20.0));
        let cpu = p.cpu.unwrap();
        assert_eq!((cpu.some_seconds, cpu.some_percent), (7.0, 35.0));
        assert_eq!(cpu.full_percent, Some(17.5));
        assert_eq!(p.memory.unwrap().some_percent, 0.0);
        assert_eq!(p.io.unwrap().some_percent, 5.0);
        // A running step shows the final reading, not the failure of one taken after it.
        let gone = Err(Unavailable::Off("no cpu.pressure".into()));
        w.observe(130.0, gone.clone(), false);
        assert_eq!(w.shown(gone), Ok(totals(7_000_000, 0, 1_000_000)));
    }

    #[test]
    fn without_a_reading_every_figure_is_null_and_the_record_says_why() {
        let mut w = PressureWatch::default();
        w.observe(1.0, Err(Unavailable::CgroupV1), false);
        let p = w.figures(0.0);
        assert!(!p.available);
        assert!(p.why.as_deref().unwrap().contains("v1"));
        let json = serde_json::to_value(&p).unwrap();
        for k in ["seconds", "cpu", "memory", "io"] {
            assert!(json[k].is_null(), "{k}: {json}");
        }
        let back: StepPressure = serde_json::from_value(json).unwrap();
        assert_eq!(back, p);
        let none = PressureWatch::default().figures(0.0);
        assert!(none.why.unwrap().contains("no reading"));
        // Nothing good yet: a running step shows why.
        assert_eq!(
            w.shown(Err(Unavailable::CgroupV1)),
            Err(Unavailable::CgroupV1)
        );
        w.observe(2.0, Ok(totals(5, 0, 0)), false);
        let failed = Err(Unavailable::Unreadable("EIO".into()));
        w.observe(3.0, failed.clone(), false);
        assert_eq!(w.shown(failed), Ok(totals(5, 0, 0)), "the last good one");
    }

    #[test]
    fn the_timeline_keeps_each_buckets_stall_and_each_gpu_what_its_idle_time_waited_for() {
        use crate::history::tests::obs;
        use crate::history::{AlertRules, Recorder};
        let mut r = Recorder::new(0.0, 1.0, AlertRules::default());
        r.set_gpus(vec!["GPU-a".into()], vec![0]);
        // 0..=10 s: the GPU idle while the tasks wait for I/O 0.8 s of every second; then
        // 10 s busy with no wait.
        let mut io = 0;
        for i in 0..=20u64 {
            if (1..=10).contains(&i) {
                io += 800_000;
            }
            let mut o = obs(i as f64, 100, 0.0, Some(if i <= 10 { 0.0 } else { 90.0 }));
            o.pressure = Some(totals(0, 0, io));
            r.observe(&o);
        }
        let story = r.finish(20.0);
        let stalls: Vec<f64> = story
            .timeline
            .buckets
            .iter()
            .map(|b| b.stall.map_or(-1.0, |s| s.io.some))
            .collect();
        assert_eq!(stalls[0], -1.0, "no interval before the first reading");
        assert!(
            stalls[1..=10].iter().all(|s| (s - 0.8).abs() < 1e-9),
            "{stalls:?}"
        );
        assert!(stalls[11..].iter().all(|s| *s == 0.0), "{stalls:?}");
        let waits = story.idle[0].clone().unwrap().waits.unwrap();
        assert_eq!(waits.seconds, 10.0);
        assert_eq!(waits.percents(), Some([0.0, 0.0, 80.0]));
    }

    #[test]
    fn ten_seconds_of_heavy_stall_become_one_event_per_stretch() {
        use crate::history::{AlertRules, Recorder};
        let mut r = Recorder::new(0.0, 1.0, AlertRules::default());
        // I/O: 0.9 s of every second for 15 s, then calm for 3 s, then heavy again for 12 s.
        // CPU: never over half.
        let (mut io, mut cpu) = (0, 0);
        for i in 0..=30u64 {
            if i > 0 && !(16..=18).contains(&i) {
                io += 900_000;
            }
            cpu += 200_000;
            let mut o = crate::history::tests::obs(i as f64, 100, 0.0, None);
            o.pressure = Some(totals(cpu, 0, io));
            r.observe(&o);
        }
        let ev: Vec<(String, f64, Option<f64>)> = r
            .finish(30.0)
            .events
            .into_iter()
            .filter(|e| e.kind.starts_with("stall_"))
            .map(|e| (e.kind, e.t, e.value))
            .collect();
        // Each at the start of its stretch: the interval from 0 s, and the one from 18 s.
        assert_eq!(
            ev,
            [
                ("stall_io".to_string(), 0.0, Some(90.0)),
                ("stall_io".to_string(), 18.0, Some(90.0)),
            ]
        );
    }

    #[test]
    fn a_stretch_is_the_counters_change_and_a_counter_that_went_back_is_no_stretch() {
        let a = totals(1_000_000, 0, 0);
        let b = totals(1_750_000, 100_000, 0);
        let s = BucketStall::between(&a, &b, 1.0).unwrap();
        assert_eq!(s.cpu.some, 0.75);
        assert_eq!(s.memory.full, Some(0.05));
        assert_eq!(BucketStall::between(&b, &a, 1.0), None);
        let two = s.plus(s);
        assert_eq!(two.seconds, 2.0);
        assert_eq!(two.some(), [1.5, 0.2, 0.0]);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"cpu\":[0.75,0.375]"), "{json}");
        let no_full = StallPair {
            some: 1.0,
            full: None,
        };
        assert_eq!(serde_json::to_string(&no_full).unwrap(), "[1.0,null]");
        let mut w = IdleWaits::default();
        w.add(&two);
        assert_eq!(w.percents(), Some([75.0, 10.0, 0.0]));
        assert_eq!(IdleWaits::default().percents(), None);
    }
}

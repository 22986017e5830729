//! How often a sampler samples (a step's, or `gpu-tracker -e`'s): the interval asked for, lengthened while samples cost
//! too much of it, so a step with many processes or a slow driver never turns the tracker into
//! a load of its own.
//!
//! A sample that takes more than [`OVERRUN_SHARE`] of the interval in use (10 % of one core,
//! the sampler being one thread) is an overrun: the interval doubles, up to [`MAX_BACKOFF_FACTOR`]
//! times the one asked for and at most [`MAX_BACKOFF_INTERVAL`] (never below the one asked
//! for). A sample under [`RECOVER_SHARE`] of it halves the interval again, down to the one
//! asked for: at the halved interval it would cost at most half the overrun share, so the pace
//! does not swing back and forth. The cost is the sample's wall time: it counts a driver call
//! that blocks as well as CPU spent.

use std::time::{Duration, Instant};

/// A sample costing more than this share of the interval in use lengthens the interval.
pub const OVERRUN_SHARE: f64 = 0.10;
/// A sample costing less than this share of the interval in use shortens it again.
pub const RECOVER_SHARE: f64 = 0.025;
/// The interval is never lengthened past this many times the one asked for...
pub const MAX_BACKOFF_FACTOR: u32 = 8;
/// ...nor past this, unless the one asked for is longer already.
pub const MAX_BACKOFF_INTERVAL: Duration = Duration::from_secs(60);

/// The sampling pace of one sampler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    /// The interval asked for.
    pub requested: Duration,
    /// The interval in use now.
    pub current: Duration,
    /// The longest interval used.
    pub max: Duration,
    /// Samples that cost more than [`OVERRUN_SHARE`] of the interval in use.
    pub overruns: u64,
    /// Times the interval was lengthened.
    pub backoffs: u64,
}

impl Pace {
    /// The pace of a sampler asked to sample every `requested`.
    pub fn new(requested: Duration) -> Pace {
        Pace {
            requested,
            current: requested,
            max: requested,
            overruns: 0,
            backoffs: 0,
        }
    }

    /// The longest interval this pace may reach.
    pub fn ceiling(&self) -> Duration {
        let r = self.requested;
        r.max((r * MAX_BACKOFF_FACTOR).min(MAX_BACKOFF_INTERVAL))
    }

    /// Accounts a sample that took `cost`; sets the interval until the next one.
    pub fn after_sample(&mut self, cost: Duration) {
        let share = cost.as_secs_f64() / self.current.as_secs_f64().max(1e-9);
        if share > OVERRUN_SHARE {
            self.overruns += 1;
            let longer = (self.current * 2).min(self.ceiling());
            if longer > self.current {
                self.backoffs += 1;
                self.current = longer;
                self.max = self.max.max(longer);
            }
        } else if share < RECOVER_SHARE {
            self.current = (self.current / 2).max(self.requested);
        }
    }

    /// A line for the record's notes when samples overran.
    pub fn note(&self) -> Option<String> {
        (self.overruns > 0).then(|| {
            format!(
                "{} sample(s) took more than {:.0} % of the interval: the interval was lengthened \
                 {} time(s), up to {} s (asked for: {} s)",
                self.overruns,
                OVERRUN_SHARE * 100.0,
                self.backoffs,
                self.max.as_secs_f64(),
                self.requested.as_secs_f64()
            )
        })
    }
}

/// When a sampler samples next, for both samplers' loops (`gpu-tracker -e`'s and the step's
/// thread, which wait on [`Schedule::due`] each their own way): the first at once, then one
/// interval of the [`Pace`] after the start of the last, at once for a phase mark (the phase
/// ends with a reading), sooner for a new task, but no sooner than the cost of the last sample
/// allows: it may take at most [`OVERRUN_SHARE`] of the time since the one before (a step of
/// 256 tasks that a busy node starts one by one would otherwise be sampled back to back, each
/// sample reading every task started so far, while its tasks wait for slurmstepd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    next: Instant,
    /// When the last sample started, and what it cost.
    last: Option<(Instant, Duration)>,
}

impl Schedule {
    /// The first sample is due at `now`.
    pub fn new(now: Instant) -> Schedule {
        Schedule {
            next: now,
            last: None,
        }
    }

    /// When the next sample is due.
    pub fn due(&self) -> Instant {
        self.next
    }

    /// Whether a sample is due at `now`.
    pub fn is_due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Something must be read at once (a phase mark came in at `now`).
    pub fn at_once(&mut self, now: Instant) {
        self.next = now;
    }

    /// The next sample is due at `t` at the latest (a new task), or as soon after it as the
    /// last sample's cost allows.
    pub fn by(&mut self, t: Instant) {
        let earliest = self
            .last
            .map_or(t, |(start, cost)| start + cost.div_f64(OVERRUN_SHARE));
        self.next = self.next.min(t.max(earliest));
    }

    /// A sample started at `started` and cost `cost`: `pace` accounts it, and the next sample
    /// is due an interval of it after that start, whatever the sample cost.
    pub fn sampled(&mut self, pace: &mut Pace, started: Instant, cost: Duration) {
        pace.after_sample(cost);
        self.next = started + pace.current;
        self.last = Some((started, cost));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn overruns_double_the_interval_up_to_its_ceiling_and_cheap_samples_halve_it() {
        let mut p = Pace::new(ms(100));
        p.after_sample(ms(5));
        assert_eq!((p.current, p.overruns), (ms(100), 0));
        p.after_sample(ms(30));
        assert_eq!((p.current, p.overruns, p.backoffs), (ms(200), 1, 1));
        p.after_sample(ms(30));
        assert_eq!(p.current, ms(400));
        // 30 ms is under 10 % of 400 ms, over 2.5 %: the pace holds.
        p.after_sample(ms(30));
        assert_eq!((p.current, p.overruns), (ms(400), 2));
        // Far too slow: up to 8 x 100 ms, no further, every overrun counted.
        for _ in 0..5 {
            p.after_sample(ms(500));
        }
        assert_eq!((p.current, p.max), (ms(800), ms(800)));
        assert_eq!((p.overruns, p.backoffs), (7, 3));
        // Cheap again: halves back to the interval asked for, not below.
        for _ in 0..5 {
            p.after_sample(ms(1));
        }
        assert_eq!((p.current, p.max), (ms(100), ms(800)));
        let note = p.note().unwrap();
        assert!(note.contains("up to 0.8 s (asked for: 0.1 s)"), "{note}");
    }

    #[test]
    fn the_ceiling_is_a_minute_unless_the_interval_asked_for_is_longer() {
        assert_eq!(
            Pace::new(Duration::from_secs(30)).ceiling(),
            Duration::from_secs(60)
        );
        assert_eq!(
            Pace::new(Duration::from_secs(120)).ceiling(),
            Duration::from_secs(120)
        );
        let mut p = Pace::new(Duration::from_secs(120));
        p.after_sample(Duration::from_secs(20));
        assert_eq!((p.current, p.overruns, p.backoffs), (p.requested, 1, 0));
        assert!(Pace::new(ms(100)).note().is_none());
    }

    #[test]
    fn the_next_sample_is_an_interval_after_the_last_start_or_at_once() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        assert!(s.is_due(t0));
        let mut p = Pace::new(ms(100));
        s.sampled(&mut p, t0, ms(1));
        assert_eq!(s.due(), t0 + ms(100));
        assert!(!s.is_due(t0 + ms(99)));
        // A new task: sooner, never later.
        s.by(t0 + ms(20));
        s.by(t0 + ms(50));
        assert_eq!(s.due(), t0 + ms(20));
        // A costly sample backs off from its start.
        s.sampled(&mut p, t0 + ms(20), ms(30));
        assert_eq!(s.due(), t0 + ms(220));
        s.at_once(t0 + ms(60));
        assert!(s.is_due(t0 + ms(60)));
    }

    #[test]
    fn new_tasks_bring_a_sample_no_sooner_than_its_cost_allows() {
        // A step of many tasks on a busy node: each sample costs 40 ms and tasks keep coming.
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        let mut p = Pace::new(ms(500));
        s.sampled(&mut p, t0, ms(40));
        // A new task 50 ms later asks for a sample 20 ms on: 400 ms after the last one's
        // start, when that one's cost is a tenth of the time since.
        s.by(t0 + ms(70));
        assert_eq!(s.due(), t0 + ms(400));
        // Never later than the interval's own due time (a longer wait is no reason to wait).
        s.sampled(&mut p, t0 + ms(400), ms(200));
        assert_eq!(p.current, ms(1000));
        s.by(t0 + ms(420));
        assert_eq!(s.due(), t0 + ms(1400));
        // Before any sample: as asked.
        let mut s = Schedule::new(t0 + ms(5000));
        s.by(t0);
        assert_eq!(s.due(), t0);
    }
}

//! Each GPU's idle time, split into the time before it was first busy, between busy
//! stretches and after it was last busy; and its power, from the energy counter.

use serde::{Deserialize, Serialize};

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
    /// What the step's tasks waited for while the GPU was idle (cgroup v2's pressure stall
    /// figures). Absent without them, and in records of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits: Option<super::pressure::IdleWaits>,
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

/// One GPU's readings as far as idle time and power go.
#[derive(Debug, Clone, Default)]
pub(super) struct IdleTracker {
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
    /// The stall over the idle intervals that had a pressure reading.
    pub(super) waits: Option<super::pressure::IdleWaits>,
}

impl IdleTracker {
    /// Power in watts since the previous energy reading, from the counter at `unix`.
    pub(super) fn power(&mut self, unix: f64, energy_mj: Option<u64>) -> Option<f64> {
        let power = match (energy_mj, self.last_energy) {
            (Some(e), Some((t0, e0))) if unix - t0 > 1e-3 && e >= e0 => {
                Some((e - e0) as f64 / 1000.0 / (unix - t0))
            }
            _ => None,
        };
        if let Some(e) = energy_mj {
            self.last_energy = Some((unix, e));
        }
        power
    }

    /// Adds a utilization reading `u` at `unix`, idle below `idle_percent`. Returns the idle
    /// stretch's length when it has just reached `alert_seconds` (0: no alert), once per stretch.
    pub(super) fn utilization(
        &mut self,
        unix: f64,
        u: f64,
        idle_percent: f64,
        alert_seconds: f64,
    ) -> Option<f64> {
        // The reading stands for the interval since the previous one.
        let since = self.last.unwrap_or(unix);
        let dt = (unix - since).max(0.0);
        self.first.get_or_insert(unix);
        self.last = Some(unix);
        if u < idle_percent {
            self.idle += dt;
            let start = *self.stretch_start.get_or_insert(since);
            let stretch = unix - start;
            self.longest = self.longest.max(stretch);
            if alert_seconds > 0.0 && stretch >= alert_seconds && !self.alerted {
                self.alerted = true;
                return Some(stretch);
            }
        } else {
            self.first_busy.get_or_insert(since);
            self.last_busy = Some(unix);
            self.stretch_start = None;
            self.alerted = false;
        }
        None
    }

    /// The idle figures as of `end_unix`, with `threshold_percent` said; `None`: never read.
    pub(super) fn finish(&self, threshold_percent: f64, end_unix: f64) -> Option<GpuIdle> {
        let (first, last) = (self.first?, self.last?);
        let end = last.max(first).min(end_unix.max(last));
        let observed = end - first;
        let at_start = self.first_busy.map_or(self.idle, |b| (b - first).max(0.0));
        let at_end = self.last_busy.map_or(0.0, |b| (end - b).max(0.0));
        Some(GpuIdle {
            threshold_percent,
            observed_seconds: round3(observed),
            idle_seconds: round3(self.idle),
            at_start_seconds: round3(at_start.min(self.idle)),
            at_end_seconds: round3(at_end.min(self.idle)),
            in_gaps_seconds: round3((self.idle - at_start - at_end).max(0.0)),
            longest_seconds: round3(self.longest),
            ever_busy: self.first_busy.is_some(),
            waits: self.waits.map(|w| super::pressure::IdleWaits {
                seconds: round3(w.seconds),
                cpu_seconds: round3(w.cpu_seconds),
                memory_seconds: round3(w.memory_seconds),
                io_seconds: round3(w.io_seconds),
            }),
        })
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use crate::history::tests::obs;
    use crate::history::{AlertRules, GpuObservation, Recorder};

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
}

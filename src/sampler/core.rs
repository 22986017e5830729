//! What both samplers compute the same way, whatever they sample (a command's process tree for
//! `gpu-tracker -e` and the library, a step's cgroup and tasks for the plugin): the resident
//! memory of a set of processes and its peaks, the busiest interval's CPU use, the time a
//! sample stands for in a time-weighted mean, and what one sample hands the history recorder.

use super::gpus::GpuAccumulator;
use crate::history::{Observation, Recorder};
use crate::units::Units;
use crate::usage::RssValues;

/// Resident memory of a set of processes: private pages summed, shared pages counted once (the
/// largest share of one process: processes share mostly the same files and libraries).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemSum {
    /// Private resident bytes, summed.
    pub private: u64,
    /// The largest shared resident bytes of one process.
    pub shared: u64,
}

impl MemSum {
    /// Adds a process (or a set summed already) of `private` and `shared` bytes.
    pub fn add(&mut self, private: u64, shared: u64) {
        self.private += private;
        self.shared = self.shared.max(shared);
    }

    /// Private and shared together, bytes.
    pub fn total(&self) -> u64 {
        self.private + self.shared
    }
}

/// Peak resident memory over samples: the largest total, private and shared parts seen (each
/// its own maximum, at whatever sample).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RssPeak {
    /// Largest total, bytes, raised to the kernel's high-water marks where known.
    pub total: u64,
    /// Largest private part, bytes.
    pub private: u64,
    /// Largest shared part, bytes.
    pub shared: u64,
}

impl RssPeak {
    /// Adds a sample of `m`; `floor`: a peak the kernel vouches for (`VmHWM`), 0 if none.
    pub fn update(&mut self, m: MemSum, floor: u64) {
        self.private = self.private.max(m.private);
        self.shared = self.shared.max(m.shared);
        self.total = self.total.max(m.total().max(floor));
    }

    /// The peaks in `units`.
    pub fn values(&self, units: &Units) -> RssValues {
        RssValues {
            total_rss: units.ram.from_bytes(self.total),
            private_rss: units.ram.from_bytes(self.private),
            shared_rss: units.ram.from_bytes(self.shared),
        }
    }
}

/// The busiest interval's CPU use, in percent (100 = one core busy). Only an interval of at
/// least half the sampling interval sets it: CPU time is counted in ticks (10 ms), so a few ms of
/// CPU time over an interval of 1 ms (a sample taken at once for a phase mark or a new task, the
/// last one at the end) would read as hundreds of percent.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuMax {
    min_interval: f64,
    max: f64,
    counted: bool,
}

impl CpuMax {
    /// For samples `interval` apart.
    pub fn new(interval: std::time::Duration) -> CpuMax {
        CpuMax {
            min_interval: interval.as_secs_f64() / 2.0,
            ..CpuMax::default()
        }
    }

    /// One interval of `seconds` in which `cpu_seconds` of CPU time were used: returns its
    /// percent (`None` for an interval of no time); sets the maximum if the interval is long
    /// enough.
    pub fn interval(&mut self, cpu_seconds: f64, seconds: f64) -> Option<f64> {
        self.add(cpu_seconds, seconds, false)
    }

    /// As [`CpuMax::interval`], for the last interval of a run: a short one sets the maximum
    /// when no other did (a run shorter than half an interval has no other).
    pub fn last_interval(&mut self, cpu_seconds: f64, seconds: f64) -> Option<f64> {
        self.add(cpu_seconds, seconds, !self.counted)
    }

    fn add(&mut self, cpu_seconds: f64, seconds: f64, short_counts: bool) -> Option<f64> {
        if seconds.is_nan() || seconds <= 0.0 {
            return None;
        }
        let pct = crate::units::cores_busy(cpu_seconds, seconds) * 100.0;
        if pct.is_finite() && (seconds >= self.min_interval || short_counts) {
            self.max = self.max.max(pct);
            self.counted = true;
        }
        Some(pct)
    }

    /// The maximum, percent (0 before any interval counted).
    pub fn percent(&self) -> f64 {
        self.max
    }

    /// The maximum in cores busy.
    pub fn cores(&self) -> f64 {
        self.max / 100.0
    }
}

/// The seconds a sample stands for in a time-weighted mean (GPU utilization): the time elapsed
/// since the previous sample (`since_previous`), whatever the pace made it (lengthened while
/// samples are costly, cut short by a phase mark or a new task); the interval asked for at the
/// first sample, which has none before it.
pub fn sample_weight(since_previous: Option<f64>, interval: std::time::Duration) -> f64 {
    since_previous.unwrap_or(interval.as_secs_f64())
}

/// Hands each sample to a history [`Recorder`]: names the GPUs once they are known, records
/// those lost at this sample, then the readings.
#[derive(Debug, Clone, Copy, Default)]
pub struct HistoryFeed {
    gpus_named: bool,
}

impl HistoryFeed {
    /// Adds the sample `o` (its GPU readings are taken from `gpu`'s latest) to `rec`. The GPUs
    /// are named by `ids` where given (Slurm's index of each), else by NVML's index.
    pub fn observe(
        &mut self,
        rec: &mut Recorder,
        gpu: &GpuAccumulator,
        ids: Option<Vec<u32>>,
        o: Observation,
    ) {
        let (uuids, nvml_ids) = gpu.devices_seen();
        if !self.gpus_named && !uuids.is_empty() {
            rec.set_gpus(uuids, ids.unwrap_or(nvml_ids));
            self.gpus_named = true;
        }
        for &i in gpu.lost_at_last_sample() {
            rec.gpu_lost(o.unix, i);
        }
        rec.observe(&Observation {
            gpus: gpu.last_readings().to_vec(),
            ..o
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_pages_add_up_and_shared_ones_count_once() {
        let mut m = MemSum::default();
        m.add(100, 40);
        m.add(50, 60);
        m.add(0, 10);
        assert_eq!((m.private, m.shared, m.total()), (150, 60, 210));
    }

    #[test]
    fn a_sample_weighs_the_time_since_the_one_before() {
        use super::super::stats::PercentAcc;
        let interval = std::time::Duration::from_secs(1);
        let mut a = PercentAcc::default();
        // The first sample (none before: the interval asked for), then 3 s later (backed
        // off), then 0.5 s later (a mark).
        for (since, pct) in [(None, 100.0), (Some(3.0), 0.0), (Some(0.5), 90.0)] {
            a.add(pct, sample_weight(since, interval));
        }
        assert_eq!(a.mean(), (100.0 + 0.0 * 3.0 + 90.0 * 0.5) / 4.5);
    }

    #[test]
    fn a_short_interval_does_not_set_the_cpu_max() {
        let mut c = CpuMax::new(std::time::Duration::from_secs(1));
        // 10 ms of CPU time over 2 ms (a sample at once for a mark): 500 %, noise.
        assert!(c.interval(0.01, 0.002).unwrap() > 499.0);
        assert_eq!(c.percent(), 0.0);
        assert_eq!(c.interval(0.5, 1.0), Some(50.0));
        assert_eq!(c.interval(0.02, 0.01), Some(200.0));
        assert_eq!(
            c.interval(0.375, 0.5),
            Some(75.0),
            "half the interval is enough"
        );
        assert_eq!(c.last_interval(0.02, 0.01), Some(200.0));
        assert_eq!((c.percent(), c.cores()), (75.0, 0.75));
        assert_eq!(c.interval(1.0, 0.0), None);
        // A run with no other interval: its short last one counts.
        let mut c = CpuMax::new(std::time::Duration::from_secs(1));
        c.interval(0.01, 0.002);
        c.last_interval(0.05, 0.1);
        assert_eq!(c.percent(), 50.0);
    }
}

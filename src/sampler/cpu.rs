//! CPU accounting over sampling intervals: the machine's (from `/proc/stat`), and the tracked
//! tree's from cumulative CPU times, so a process that ended between two samples still counts.

use super::core::CpuMax;
use super::stats::PercentAcc;
use crate::proc::CpuTotals;
use crate::sys::Rusage;
use crate::tracking_file::Timepoint;
use crate::usage::ProcessingUnitPercentages;

/// CPU figures over a run.
#[derive(Debug, Default)]
pub struct CpuAccumulator {
    ncores: f64,
    expected: f64,
    prev_sys: Option<CpuTotals>,
    prev_cum: Option<f64>,
    prev_main_own: Option<f64>,
    /// CPU seconds the main process had from reaped children at the last sample.
    pub main_last_reaped: f64,
    combined: f64,
    main: f64,
    sys: PercentAcc,
    main_pct: CpuMax,
    desc_pct: CpuMax,
    comb_pct: CpuMax,
}

/// The four utilization blocks of a result.
pub struct CpuFigures {
    /// The machine.
    pub system: ProcessingUnitPercentages,
    /// The main process.
    pub main: ProcessingUnitPercentages,
    /// Its descendants.
    pub descendants: ProcessingUnitPercentages,
    /// Both.
    pub combined: ProcessingUnitPercentages,
}

impl CpuAccumulator {
    /// For a machine of `ncores` CPUs, with hardware percentages against `expected` cores, and
    /// samples `interval` apart (the tree's maxima follow [`CpuMax`]'s rule).
    pub fn new(ncores: u32, expected: f64, interval: std::time::Duration) -> Self {
        CpuAccumulator {
            ncores: f64::from(ncores),
            expected,
            main_pct: CpuMax::new(interval),
            desc_pct: CpuMax::new(interval),
            comb_pct: CpuMax::new(interval),
            ..Default::default()
        }
    }

    /// The machine's utilization since the last reading, over `dt` seconds.
    pub fn system(&mut self, now: CpuTotals, dt: Option<f64>, tp: Option<&mut Timepoint>) {
        if let Some(prev) = self.prev_sys {
            let total = now.total.saturating_sub(prev.total);
            if total > 0 {
                let busy = now.busy.saturating_sub(prev.busy) as f64 / total as f64;
                let sum = busy * self.ncores * 100.0;
                if let Some(dt) = dt {
                    self.sys.add(sum, dt);
                }
                if let Some(tp) = tp {
                    tp.values[13] = sum;
                    tp.values[14] = sum / self.ncores;
                }
            }
        }
        self.prev_sys = Some(now);
    }

    /// The tree's utilization since the last sample: `cum` is its cumulative CPU seconds now,
    /// `main_own` the main process's own, if it is alive.
    pub fn tree(&mut self, dt: Option<f64>, cum: f64, main_own: Option<f64>, tp: &mut Timepoint) {
        let comb_delta = self.prev_cum.map(|p| (cum - p).max(0.0));
        let main_delta = match (self.prev_main_own, main_own) {
            (Some(p), Some(n)) => Some((n - p).max(0.0)),
            _ => None,
        };
        self.combined += comb_delta.unwrap_or(0.0);
        self.main += main_delta.unwrap_or(0.0);
        if let (Some(dt), Some(c)) = (dt, comb_delta) {
            self.interval(main_delta.unwrap_or(0.0).min(c), c, dt, false, tp);
        }
        self.prev_cum = Some(cum);
        if main_own.is_some() {
            self.prev_main_own = main_own;
        }
    }

    /// One interval of `dt` seconds in which the main process used `main` CPU seconds and the
    /// tree `comb`; `last`: the run's last (see [`CpuMax::last_interval`]).
    fn interval(&mut self, main: f64, comb: f64, dt: f64, last: bool, tp: &mut Timepoint) {
        let desc = comb - main;
        let [m, d, c] = [
            (&mut self.main_pct, main),
            (&mut self.desc_pct, desc),
            (&mut self.comb_pct, comb),
        ]
        .map(|(acc, cpu)| {
            if last {
                acc.last_interval(cpu, dt)
            } else {
                acc.interval(cpu, dt)
            }
        });
        let (Some(m), Some(d), Some(c)) = (m, d, c) else {
            return;
        };
        for (i, v) in [(15, m), (17, d), (19, c)] {
            tp.values[i] = v;
            tp.values[i + 1] = if self.expected > 0.0 {
                v / self.expected
            } else {
                0.0
            };
        }
    }

    /// Accounts the last, partial interval (`since` seconds) of a command that has ended, from
    /// the exact total CPU seconds of everything the tracker reaped (`exact`), the main
    /// process's own final CPU seconds where known (`main_own`), else `wait4`'s usage of it
    /// (its own plus its reaped children's). A short interval only sets maxima when it is the
    /// only one ([`CpuMax::last_interval`]). Returns the run's total CPU seconds.
    pub fn finish_tree(
        &mut self,
        exact: f64,
        main_own: Option<f64>,
        main: Option<Rusage>,
        since: f64,
        saw_descendants: bool,
    ) -> f64 {
        let comb_delta = self.prev_cum.map_or(exact, |p| (exact - p).max(0.0));
        let prev = self.prev_main_own.unwrap_or(0.0);
        let main_delta = match (main_own, main) {
            (Some(own), _) => (own - prev).max(0.0),
            // wait4's figure is main's own only when main never had a child.
            (None, Some(m)) if !saw_descendants => (m.cpu_seconds - prev).max(0.0),
            // Otherwise at most its wait4 total less what its children had given it.
            (None, Some(m)) if self.prev_main_own.is_some() => {
                (m.cpu_seconds - self.main_last_reaped - prev).max(0.0)
            }
            _ => 0.0,
        }
        .min(comb_delta);
        self.main += main_delta;
        // A last interval much shorter than the others counts in totals and means, but does
        // not set the maximum: a tick or two of CPU time (10 ms) over a few ms is noise.
        self.interval(
            main_delta,
            comb_delta,
            since,
            true,
            &mut Timepoint::default(),
        );
        (self.combined + comb_delta).max(exact)
    }

    /// Total CPU seconds of the tree as sampled (without [`CpuAccumulator::finish_tree`]).
    pub fn sampled_total(&self) -> f64 {
        self.combined
    }

    /// The figures, with means over `wall` seconds from `total` CPU seconds of the tree.
    pub fn finish(&self, wall: f64, total: f64) -> CpuFigures {
        let mean = |cpu: f64| if wall > 0.0 { cpu / wall * 100.0 } else { 0.0 };
        let (main_mean, comb_mean) = (mean(self.main), mean(total));
        let figures = |max: &CpuMax, mean: f64| {
            let hw = |v: f64| {
                if self.expected > 0.0 {
                    v / self.expected
                } else {
                    0.0
                }
            };
            ProcessingUnitPercentages {
                max_sum_percent: max.percent(),
                max_hardware_percent: hw(max.percent()),
                mean_sum_percent: mean,
                mean_hardware_percent: hw(mean),
            }
        };
        CpuFigures {
            system: self.sys.finish(self.ncores),
            main: figures(&self.main_pct, main_mean),
            descendants: figures(&self.desc_pct, (comb_mean - main_mean).max(0.0)),
            combined: figures(&self.comb_pct, comb_mean),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: std::time::Duration = std::time::Duration::from_secs(1);

    #[test]
    fn an_ended_child_still_counts() {
        let mut c = CpuAccumulator::new(4, 2.0, SECOND);
        let mut tp = Timepoint::default();
        c.tree(None, 0.0, Some(0.0), &mut tp);
        // One second later: main used 0.5 s; a child used 1 s and was reaped by main.
        c.tree(Some(1.0), 1.5, Some(0.5), &mut tp);
        assert_eq!(tp.values[15], 50.0);
        assert_eq!(tp.values[19], 150.0);
        assert_eq!(
            tp.values[20], 75.0,
            "hardware percent against 2 expected cores"
        );
        let total = c.finish_tree(2.0, Some(0.5), None, 1.0, true);
        assert_eq!(total, 2.0);
        let f = c.finish(2.0, total);
        assert_eq!(f.combined.mean_sum_percent, 100.0);
        assert_eq!(f.combined.max_sum_percent, 150.0);
        assert_eq!(f.main.mean_sum_percent, 25.0);
        assert_eq!(f.descendants.mean_sum_percent, 75.0);
    }

    #[test]
    fn a_very_short_last_interval_does_not_set_the_max() {
        let mut c = CpuAccumulator::new(2, 1.0, SECOND);
        let mut tp = Timepoint::default();
        c.tree(None, 0.0, Some(0.0), &mut tp);
        c.tree(Some(1.0), 1.0, Some(1.0), &mut tp);
        // 20 ms of CPU counted in the last 10 ms: a tick of rounding, not 200 %.
        let total = c.finish_tree(1.02, Some(1.02), None, 0.01, false);
        assert_eq!(total, 1.02);
        let f = c.finish(1.01, total);
        assert_eq!(f.main.max_sum_percent, 100.0);
        assert!((f.main.mean_sum_percent - 1.02 / 1.01 * 100.0).abs() < 1e-9);
        // With no other interval, even a short one counts.
        let mut c = CpuAccumulator::new(2, 1.0, SECOND);
        c.finish_tree(0.05, Some(0.05), None, 0.1, false);
        assert!(c.finish(0.1, 0.05).main.max_sum_percent > 0.0);
    }

    #[test]
    fn a_short_interval_mid_run_does_not_set_the_max() {
        let mut c = CpuAccumulator::new(2, 1.0, SECOND);
        let mut tp = Timepoint::default();
        c.tree(None, 0.0, Some(0.0), &mut tp);
        c.tree(Some(1.0), 0.5, Some(0.5), &mut tp);
        // A sample at once for a phase mark: a tick over 5 ms. The row shows it; the max not.
        c.tree(Some(0.005), 0.51, Some(0.51), &mut tp);
        assert!(tp.values[15] > 150.0);
        c.tree(Some(1.0), 1.01, Some(1.01), &mut tp);
        let f = c.finish(2.005, 1.01);
        assert_eq!(f.main.max_sum_percent, 50.0);
        assert_eq!(f.combined.max_sum_percent, 50.0);
    }

    #[test]
    fn machine_utilization() {
        let mut c = CpuAccumulator::new(2, 2.0, SECOND);
        c.system(CpuTotals { busy: 0, total: 0 }, None, None);
        let mut tp = Timepoint::default();
        c.system(
            CpuTotals {
                busy: 50,
                total: 200,
            },
            Some(1.0),
            Some(&mut tp),
        );
        assert_eq!(tp.values[13], 50.0);
        assert_eq!(c.finish(1.0, 0.0).system.max_hardware_percent, 25.0);
    }
}

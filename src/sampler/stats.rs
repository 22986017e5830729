//! Accumulators: maxima and time-weighted means of percentages over sampling intervals.

use crate::usage::ProcessingUnitPercentages;

/// Running max and time-weighted mean of a percentage.
#[derive(Debug, Clone, Copy, Default)]
pub struct PercentAcc {
    max: f64,
    weighted: f64,
    seconds: f64,
}

impl PercentAcc {
    /// Adds one interval of `seconds` during which the value was `percent`.
    pub fn add(&mut self, percent: f64, seconds: f64) {
        if !percent.is_finite() || seconds.is_nan() || seconds <= 0.0 {
            return;
        }
        self.max = self.max.max(percent);
        self.weighted += percent * seconds;
        self.seconds += seconds;
    }

    /// Highest value seen.
    pub fn max(&self) -> f64 {
        self.max
    }

    /// Time-weighted mean, or 0 with no interval.
    pub fn mean(&self) -> f64 {
        if self.seconds > 0.0 {
            self.weighted / self.seconds
        } else {
            0.0
        }
    }

    /// Whether any interval was added.
    pub fn is_empty(&self) -> bool {
        self.seconds == 0.0
    }

    /// The figures, with hardware percentages against `units` (0 units gives 0).
    pub fn finish(&self, units: f64) -> ProcessingUnitPercentages {
        self.finish_with_mean(units, self.mean())
    }

    /// As [`PercentAcc::finish`], with a mean computed elsewhere (an exact total over wall time).
    pub fn finish_with_mean(&self, units: f64, mean: f64) -> ProcessingUnitPercentages {
        let hw = |v: f64| if units > 0.0 { v / units } else { 0.0 };
        ProcessingUnitPercentages {
            max_sum_percent: self.max,
            max_hardware_percent: hw(self.max),
            mean_sum_percent: mean,
            mean_hardware_percent: hw(mean),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_is_weighted_by_interval_length() {
        let mut a = PercentAcc::default();
        a.add(100.0, 3.0);
        a.add(0.0, 1.0);
        assert_eq!(a.max(), 100.0);
        assert_eq!(a.mean(), 75.0);
        let p = a.finish(2.0);
        assert_eq!(p.max_hardware_percent, 50.0);
        assert_eq!(p.mean_hardware_percent, 37.5);
    }

    #[test]
    fn empty_and_degenerate_inputs() {
        let mut a = PercentAcc::default();
        a.add(f64::NAN, 1.0);
        a.add(50.0, 0.0);
        assert!(a.is_empty());
        assert_eq!(a.finish(0.0), ProcessingUnitPercentages::default());
    }
}

//! Where an AMD GPU's energy comes from, and the counter the source keeps when it has to
//! integrate power itself.
//!
//! A GPU whose `gpu_metrics` holds an energy accumulator of a known unit (the MI300 series)
//! gives the energy used since the driver loaded, as NVML does. Any other gives only power
//! (hwmon `power1_average`, else `power1_input`, in microwatts): then the source integrates it
//! over the times it reads it (the trapezoid between two readings), from 0 when it opened. That
//! figure is an estimate: power between readings is taken to move in a straight line. The
//! choice is made once, when the source opens, so a counter never switches kinds mid-run.

/// Where a GPU's energy figure comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnergyOrigin {
    /// The `gpu_metrics` energy accumulator (revision `format.content`): the GPU's own count.
    Accumulator {
        /// `1.6`, say.
        revision: String,
    },
    /// Power read from hwmon (`file`: `power1_average` or `power1_input`), integrated by the
    /// source over the times it read it: an estimate that starts at 0 when the source opened.
    IntegratedPower {
        /// The hwmon file read.
        file: &'static str,
        /// Why the accumulator is not used.
        why: String,
    },
    /// Neither: the GPU gives no energy here.
    None {
        /// Why.
        why: String,
    },
}

impl EnergyOrigin {
    /// A short description for notes and docs.
    pub fn describe(&self) -> String {
        match self {
            EnergyOrigin::Accumulator { revision } => {
                format!("the gpu_metrics energy counter (revision {revision})")
            }
            EnergyOrigin::IntegratedPower { file, why } => {
                format!("hwmon {file} integrated over the samples, an estimate ({why})")
            }
            EnergyOrigin::None { why } => format!("none ({why})"),
        }
    }

    /// Whether the figure is the source's own estimate rather than the GPU's count.
    pub fn is_estimate(&self) -> bool {
        matches!(self, EnergyOrigin::IntegratedPower { .. })
    }
}

/// Energy integrated from power readings: the trapezoid between consecutive readings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PowerIntegral {
    /// The previous reading: seconds (any monotonic origin) and microwatts.
    last: Option<(f64, u64)>,
    /// Millijoules so far.
    mj: f64,
}

impl PowerIntegral {
    /// Adds a reading of `microwatts` at `at_s` seconds and gives the millijoules so far. A
    /// reading not later than the previous one adds nothing (and replaces it).
    pub fn add(&mut self, at_s: f64, microwatts: u64) -> u64 {
        if let Some((t0, p0)) = self.last {
            let dt = at_s - t0;
            if dt > 0.0 && dt.is_finite() {
                // µW · s = µJ; / 1000 = mJ.
                self.mj += (p0 as f64 + microwatts as f64) / 2.0 * dt / 1000.0;
            }
        }
        self.last = Some((at_s, microwatts));
        self.total()
    }

    /// Millijoules so far.
    pub fn total(&self) -> u64 {
        self.mj as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_is_integrated_as_trapezoids_from_zero() {
        let mut e = PowerIntegral::default();
        // The first reading starts the count.
        assert_eq!(e.add(10.0, 100_000_000), 0);
        // 100 W for 2 s: 200 J.
        assert_eq!(e.add(12.0, 100_000_000), 200_000);
        // 100 W rising to 300 W over 1 s: 200 J more.
        assert_eq!(e.add(13.0, 300_000_000), 400_000);
        // A reading at the same time, or earlier, adds nothing.
        assert_eq!(e.add(13.0, 500_000_000), 400_000);
        assert_eq!(e.add(12.5, 500_000_000), 400_000);
        // The replaced reading is the start of the next trapezoid: 500 W for 0.5 s.
        assert_eq!(e.add(13.0, 500_000_000), 650_000);
    }

    #[test]
    fn an_estimate_says_so() {
        let i = EnergyOrigin::IntegratedPower {
            file: "power1_average",
            why: "gpu_metrics revision 1.3 has no energy counter of a documented unit".into(),
        };
        assert!(i.is_estimate());
        assert!(
            i.describe().contains("power1_average integrated"),
            "{}",
            i.describe()
        );
        let a = EnergyOrigin::Accumulator {
            revision: "1.6".into(),
        };
        assert!(!a.is_estimate());
        assert!(a.describe().contains("revision 1.6"));
    }
}

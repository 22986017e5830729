//! The GPU figures beyond memory and NVML's duty cycle, as the record and `gpu-tracker -e`'s
//! JSON both carry them: SM activity (GPM), time in each clock event (throttle) reason, Xid
//! errors and ECC errors, and for each figure that has no value, why ("no data" is never 0).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The keys of [`GpuDepth::no_data`]: every GPU figure that can lack a value.
pub mod figure {
    /// Device memory in use (by anyone).
    pub const MEMORY: &str = "memory";
    /// Memory of the tracked processes on the device (the driver may not say per process).
    pub const PROCESS_MEMORY: &str = "process_memory";
    /// NVML's utilization (the share of time a kernel ran).
    pub const UTILIZATION: &str = "utilization";
    /// The tracked processes' own share of the SMs (NVML's per-process utilization).
    pub const PROCESS_UTILIZATION: &str = "process_utilization";
    /// The energy counter.
    pub const ENERGY: &str = "energy";
    /// The tracked processes' compute units with waves in flight over the device's (AMD's
    /// KFD `cu_occupancy`).
    pub const CU_OCCUPANCY: &str = "cu_occupancy";
    /// GPM's SM activity, SM occupancy, tensor pipe and DRAM bandwidth.
    pub const SM_ACTIVITY: &str = "sm_activity";
    /// Clock event (throttle) reasons.
    pub const THROTTLE: &str = "throttle";
    /// ECC error counters.
    pub const ECC: &str = "ecc";
    /// Critical Xid error events.
    pub const XID: &str = "xid";
    /// Every figure above.
    pub const ALL: &[&str] = &[
        MEMORY,
        PROCESS_MEMORY,
        UTILIZATION,
        PROCESS_UTILIZATION,
        ENERGY,
        CU_OCCUPANCY,
        SM_ACTIVITY,
        THROTTLE,
        ECC,
        XID,
    ];
}

/// Why a figure has no value: `not_supported` (this GPU or driver does not give it) or
/// `not_sampled` (it could have, but no reading was taken: the run was too short, or NVML
/// failed), with the reason in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoData {
    /// `not_supported` or `not_sampled`.
    pub kind: String,
    /// Why, in words (NVML's answer where there was one).
    pub why: String,
}

/// `not_supported`.
pub const NOT_SUPPORTED: &str = "not_supported";
/// `not_sampled`.
pub const NOT_SAMPLED: &str = "not_sampled";

impl NoData {
    /// This GPU or driver does not give the figure.
    pub fn not_supported(why: impl Into<String>) -> NoData {
        NoData {
            kind: NOT_SUPPORTED.into(),
            why: why.into(),
        }
    }

    /// No reading was taken.
    pub fn not_sampled(why: impl Into<String>) -> NoData {
        NoData {
            kind: NOT_SAMPLED.into(),
            why: why.into(),
        }
    }

    /// A short label for tables and summaries: `n/a (not supported)` or `n/a (not sampled)`.
    pub fn label(&self) -> &'static str {
        if self.kind == NOT_SUPPORTED {
            "n/a (not supported)"
        } else {
            "n/a (not sampled)"
        }
    }
}

/// Mean and highest value of a percentage over the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Time-weighted mean.
    pub mean: f64,
    /// Highest reading.
    pub max: f64,
}

/// One critical Xid error NVML reported for the device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidError {
    /// When it was read (RFC 3339; NVML tells no time of its own).
    pub at: String,
    /// The Xid (for example 79: the GPU fell off the bus; 48: a double-bit ECC error).
    pub xid: u64,
}

/// ECC errors counted by the device during the run (growth of the volatile counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EccCounts {
    /// Single-bit errors the memory corrected.
    pub corrected: u64,
    /// Double-bit errors it could not correct.
    pub uncorrected: u64,
}

/// Clock event (throttle) reasons that mean the GPU ran slower than it could: a summary names
/// time in these; the others (idle, a clock the admin set) are kept in the record only.
pub const SLOWDOWN_REASONS: &[&str] = &[
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
];

/// The figures of one GPU beyond memory, duty cycle and energy. Each `Option` is `None` (JSON
/// `null`) exactly when [`GpuDepth::no_data`] says why. Added to the record without a version
/// change: records of earlier builds read with every figure absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuDepth {
    /// The tracked processes' own utilization: the sum of their SM shares in NVML's
    /// per-process samples, percent. On a GPU others use too, this is the job's part of the
    /// device's utilization.
    #[serde(default)]
    pub process_utilization_percent: Option<Spread>,
    /// The tracked processes' CU occupancy (AMD): their compute units with waves in flight
    /// over the device's, percent. Absent on NVIDIA GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cu_occupancy_percent: Option<Spread>,
    /// Share of time the SMs had at least one warp resident (GPM), percent.
    #[serde(default)]
    pub sm_active_percent: Option<Spread>,
    /// Warps resident relative to the most the SMs hold (GPM), percent.
    #[serde(default)]
    pub sm_occupancy_percent: Option<Spread>,
    /// Share of time any tensor pipe was busy (GPM), percent.
    #[serde(default)]
    pub tensor_active_percent: Option<Spread>,
    /// DRAM bandwidth used relative to the peak (GPM), percent.
    #[serde(default)]
    pub dram_bandwidth_percent: Option<Spread>,
    /// Seconds each clock event (throttle) reason was active, by NVML's name in lower case
    /// (`sw_power_cap`, `hw_thermal_slowdown`, `gpu_idle`, ...); reasons never seen are absent.
    #[serde(default)]
    pub throttle_seconds: Option<BTreeMap<String, f64>>,
    /// Critical Xid errors, in the order read.
    #[serde(default)]
    pub xid_errors: Option<Vec<XidError>>,
    /// ECC errors counted during the run.
    #[serde(default)]
    pub ecc_errors: Option<EccCounts>,
    /// Each figure without a value (keys in [`figure`]), and why.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub no_data: BTreeMap<String, NoData>,
}

impl GpuDepth {
    /// A GPU never read: every figure "not sampled", for `why`.
    pub fn unsampled(why: &str) -> GpuDepth {
        use figure::*;
        GpuDepth {
            // Whose processes held memory on a GPU never read is not a question; CU occupancy
            // is AMD's alone.
            no_data: ALL
                .iter()
                .filter(|f| **f != PROCESS_MEMORY && **f != CU_OCCUPANCY)
                .map(|f| (f.to_string(), NoData::not_sampled(why)))
                .collect(),
            ..GpuDepth::default()
        }
    }

    /// Seconds spent in reasons that slow the GPU down ([`SLOWDOWN_REASONS`]), by reason.
    pub fn slowdowns(&self) -> Vec<(&str, f64)> {
        self.throttle_seconds
            .iter()
            .flatten()
            .filter(|(k, s)| SLOWDOWN_REASONS.contains(&k.as_str()) && **s > 0.0)
            .map(|(k, s)| (k.as_str(), *s))
            .collect()
    }

    /// Whether anything went wrong with the device's health: an Xid, ECC errors, or time
    /// slowed down.
    pub fn has_health_news(&self) -> bool {
        self.xid_errors.as_ref().is_some_and(|x| !x.is_empty())
            || self
                .ecc_errors
                .is_some_and(|e| e.corrected + e.uncorrected > 0)
            || !self.slowdowns().is_empty()
    }
}

/// NVML's clock event reason bits and their names in the record.
pub const THROTTLE_BITS: &[(u64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The names of the reasons set in NVML's bit mask `bits`.
pub fn throttle_names(bits: u64) -> impl Iterator<Item = &'static str> {
    THROTTLE_BITS
        .iter()
        .filter(move |(b, _)| bits & b != 0)
        .map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_without_a_value_is_null_with_its_reason_and_old_records_read() {
        let mut d = GpuDepth::default();
        d.no_data.insert(
            figure::SM_ACTIVITY.into(),
            NoData::not_supported("no GPM on this GPU"),
        );
        let v = serde_json::to_value(&d).unwrap();
        assert!(v["sm_active_percent"].is_null(), "{v}");
        assert_eq!(v["no_data"]["sm_activity"]["kind"], "not_supported");
        let back: GpuDepth = serde_json::from_value(v).unwrap();
        assert_eq!(back, d);
        // A record of an earlier build has none of these keys.
        let old: GpuDepth = serde_json::from_str("{}").unwrap();
        assert_eq!(old, GpuDepth::default());
    }

    #[test]
    fn only_reasons_that_slow_the_gpu_are_health_news() {
        let mut d = GpuDepth {
            throttle_seconds: Some(BTreeMap::from([("gpu_idle".to_string(), 30.0)])),
            ..GpuDepth::default()
        };
        assert!(!d.has_health_news());
        d.throttle_seconds
            .as_mut()
            .unwrap()
            .insert("hw_thermal_slowdown".into(), 2.0);
        assert_eq!(d.slowdowns(), vec![("hw_thermal_slowdown", 2.0)]);
        assert!(d.has_health_news());
        assert_eq!(
            throttle_names(0x61).collect::<Vec<_>>(),
            ["gpu_idle", "sw_thermal_slowdown", "hw_thermal_slowdown"]
        );
    }
}

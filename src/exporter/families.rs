//! The metric families: name, type, unit and help of each, and where a step's or a GPU's
//! value comes from. Names are without `_total`: [`super::metrics`] adds it where a format
//! wants it.

use crate::cgroup::pressure::RESOURCES;
use crate::step::live::{LiveGpu, LiveState, PressureMissing};

/// Series of a step, without its GPUs and its pressure.
pub const SERIES_PER_STEP: usize = 7;
/// Series of each GPU of a step.
pub const SERIES_PER_GPU: usize = 6;
/// Most pressure series of a step: a stall counter for each resource, `some` and `full`, and
/// whether the step has them.
pub const PRESSURE_SERIES_PER_STEP: usize = 2 * RESOURCES.len() + 1;

/// A family's type.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Kind {
    /// A value that goes up and down.
    Gauge,
    /// A count that only grows: its samples end in `_total`.
    Counter,
}

/// One metric family: its name (without `_total`), type, unit and help.
pub(super) struct Family {
    pub(super) name: &'static str,
    pub(super) kind: Kind,
    pub(super) unit: Option<&'static str>,
    pub(super) help: &'static str,
}

const fn gauge(name: &'static str, unit: Option<&'static str>, help: &'static str) -> Family {
    Family {
        name,
        kind: Kind::Gauge,
        unit,
        help,
    }
}

const fn counter(name: &'static str, unit: Option<&'static str>, help: &'static str) -> Family {
    Family {
        name,
        kind: Kind::Counter,
        unit,
        help,
    }
}

pub(super) type StepValue = fn(&LiveState) -> Option<Value>;
pub(super) type GpuValue = fn(&LiveGpu) -> Option<Value>;

/// A sample's value: bytes and counts exactly, the rest as floats.
#[derive(Clone, Copy)]
pub(super) enum Value {
    /// An exact count.
    Int(u64),
    /// A float.
    Float(f64),
    /// Microseconds, written as seconds exactly (`7.25`, `0.000001`).
    Micros(u64),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) if v.is_nan() => f.write_str("NaN"),
            Value::Float(v) if v.is_infinite() => {
                f.write_str(if v > 0.0 { "+Inf" } else { "-Inf" })
            }
            // `{:?}` keeps a float short (`1e-7`, `12.5`) and exact.
            Value::Float(v) => write!(f, "{v:?}"),
            // In decimal, so that no rounding of a float changes the kernel's count.
            Value::Micros(us) => {
                let frac = format!("{:06}", us % 1_000_000);
                let frac = frac.trim_end_matches('0');
                let frac = if frac.is_empty() { "0" } else { frac };
                write!(f, "{}.{frac}", us / 1_000_000)
            }
        }
    }
}

fn int(v: Option<u64>) -> Option<Value> {
    v.map(Value::Int)
}

fn float(v: Option<f64>) -> Option<Value> {
    v.map(Value::Float)
}

fn ratio(percent: Option<f64>) -> Option<Value> {
    percent.map(|p| Value::Float((p / 100.0).clamp(0.0, 1.0)))
}

/// A step's families and how each takes its value.
pub(super) const STEP_FAMILIES: [(Family, StepValue); SERIES_PER_STEP] = [
    (
        gauge(
            "gpu_tracker_memory_bytes",
            Some("bytes"),
            "Memory in use by the step on the node: its cgroup's charge, page cache included (else its processes' resident sum).",
        ),
        |s| int(s.memory.current_bytes),
    ),
    (
        gauge(
            "gpu_tracker_memory_peak_bytes",
            Some("bytes"),
            "Peak memory of the step on the node so far: its cgroup's counter, page cache included (else the sampled peak).",
        ),
        |s| int(s.memory.peak_bytes),
    ),
    (
        gauge(
            "gpu_tracker_memory_limit_bytes",
            Some("bytes"),
            "Memory limit of the step on the node: its cgroup's, else its job's. No sample without a limit.",
        ),
        |s| int(s.memory.limit_bytes),
    ),
    (
        counter(
            "gpu_tracker_cpu_seconds",
            Some("seconds"),
            "CPU time used by the step's tasks on the node.",
        ),
        |s| float(s.cpu.seconds),
    ),
    (
        gauge(
            "gpu_tracker_cpu_cores_busy",
            None,
            "Cores the step kept busy on the node over the latest sampling interval.",
        ),
        |s| float(s.cpu.cores_busy),
    ),
    (
        gauge(
            "gpu_tracker_cpus_allocated",
            None,
            "CPUs Slurm allocated to the job on the node.",
        ),
        |s| int(s.alloc_cpus.map(u64::from)),
    ),
    (
        gauge(
            "gpu_tracker_step_start_time_seconds",
            Some("seconds"),
            "When tracking of the step began on the node, Unix time.",
        ),
        |s| float(Some(s.started_at)),
    ),
];

/// A GPU's families and how each takes its value.
pub(super) const GPU_FAMILIES: [(Family, GpuValue); SERIES_PER_GPU] = [
    (
        gauge(
            "gpu_tracker_gpu_memory_bytes",
            Some("bytes"),
            "GPU memory used by the step's processes.",
        ),
        |g| int(g.memory_used_bytes),
    ),
    (
        gauge(
            "gpu_tracker_gpu_memory_total_bytes",
            Some("bytes"),
            "Memory size of the GPU (or MIG instance).",
        ),
        |g| int(Some(g.memory_total_bytes)),
    ),
    (
        gauge(
            "gpu_tracker_gpu_utilization_ratio",
            Some("ratio"),
            "Share of the driver's latest sample period in which the GPU was busy (NVML utilization; AMD gpu_busy_percent), 0 to 1.",
        ),
        |g| ratio(g.utilization_percent),
    ),
    (
        gauge(
            "gpu_tracker_gpu_sm_active_ratio",
            Some("ratio"),
            "Share of the GPU's SMs that kernels kept busy (GPM, Hopper and newer), 0 to 1; only where measured.",
        ),
        |g| ratio(g.sm_active_percent),
    ),
    (
        gauge(
            "gpu_tracker_gpu_cu_occupancy_ratio",
            Some("ratio"),
            "Share of the AMD GPU's compute units with waves of the step's processes in flight (KFD cu_occupancy), 0 to 1; only where measured.",
        ),
        |g| ratio(g.cu_occupancy_percent),
    ),
    (
        counter(
            "gpu_tracker_gpu_energy_joules",
            Some("joules"),
            "Energy the GPU used since the step's first reading of it.",
        ),
        |g| float(g.energy_joules),
    ),
];

/// Steps exported.
pub(super) const STEPS: Family = gauge(
    "gpu_tracker_exporter_steps",
    None,
    "Running steps exported at this scrape.",
);
/// Files skipped.
pub(super) const SKIPPED: Family = counter(
    "gpu_tracker_exporter_state_files_skipped",
    None,
    "State files not exported, by reason, since the exporter started.",
);
/// Whether the directory was read.
pub(super) const DIR_READABLE: Family = gauge(
    "gpu_tracker_exporter_live_dir_readable",
    None,
    "1 when the live directory was read whole at this scrape; 0 when it is missing, refused or its listing failed.",
);
/// What the scrape took.
pub(super) const DURATION: Family = gauge(
    "gpu_tracker_exporter_scrape_duration_seconds",
    Some("seconds"),
    "Time this scrape took to read the state files and render them.",
);
/// Scrapes that did not read the directory whole.
pub(super) const DIR_ERRORS: Family = counter(
    "gpu_tracker_exporter_live_dir_errors",
    None,
    "Scrapes at which the live directory was not read whole, by reason, since the exporter started.",
);

/// The step's pressure stall counters.
pub(super) const PRESSURE_STALL: Family = counter(
    "gpu_tracker_step_pressure_stall_seconds",
    Some("seconds"),
    "Time in which some (kind some) or all (kind full) of the step's runnable tasks on the node waited for the resource since its cgroup was made: the kernel's pressure stall counters (cgroup v2). No sample where the kernel keeps none.",
);
/// Whether the step has them.
pub(super) const PRESSURE_AVAILABLE: Family = gauge(
    "gpu_tracker_step_pressure_available",
    None,
    "1 when the step's pressure stall counters are exported; 0 when the kernel keeps none for its cgroup, by reason (cgroup_v1, psi_off, unreadable, unknown).",
);

/// The step's pressure stall samples, as (`resource`, `kind`, value): `some` of each resource,
/// and `full` where the kernel gives it; none where the step has no counters.
pub(super) fn stall_samples(s: &LiveState) -> Vec<(&'static str, &'static str, Value)> {
    let Some(Ok(counters)) = s.pressure.map(|p| p.counters()) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(2 * RESOURCES.len());
    for (resource, c) in RESOURCES.into_iter().zip(counters) {
        out.push((resource, "some", Value::Micros(c.some_us)));
        if let Some(full) = c.full_us {
            out.push((resource, "full", Value::Micros(full)));
        }
    }
    out
}

/// Whether the step's pressure counters are exported: `Ok` (1), `Err(why)` (0, by `reason`);
/// `None` (no sample) where its state says nothing of them: no step cgroup, no reading yet, or
/// a plugin of an earlier build.
pub(super) fn pressure_available(s: &LiveState) -> Option<Result<(), PressureMissing>> {
    s.pressure.map(|p| p.counters().map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::Value;

    #[test]
    fn microseconds_are_written_as_seconds_exactly() {
        let w = |us| Value::Micros(us).to_string();
        assert_eq!(w(0), "0.0");
        assert_eq!(w(1), "0.000001");
        assert_eq!(w(7_250_000), "7.25");
        assert_eq!(w(3_000_000), "3.0");
        // Past a float's exact integers in microseconds: still every digit.
        assert_eq!(w(u64::MAX), "18446744073709.551615");
        assert_eq!(w(9_007_199_254_740_993), "9007199254.740993");
    }
}

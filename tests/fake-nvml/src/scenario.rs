//! The JSON scenario file (format documented at the crate root).

use crate::{CODES, Ret, SUCCESS};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::ffi::CString;
use std::path::PathBuf;
use std::time::Duration;

/// Library-wide functions (no device handle) that `hang` and `delays_ms` may name.
pub(crate) const SYSTEM_FUNCTIONS: &[&str] = &[
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount_v2",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleFree",
    "nvmlEventSetCreate",
    "nvmlEventSetFree",
];

/// Device functions whose result can be injected through `errors`.
pub(crate) const DEVICE_FUNCTIONS: &[&str] = &[
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetMigMode",
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleGet",
    "nvmlGpmMigSampleGet",
    // Applies when the first sample's device has it injected.
    "nvmlGpmMetricsGet",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents",
    // Apply when a device registered on the set has them injected.
    "nvmlEventSetWait_v2",
    "nvmlEventSetWait",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetSupportedClocksThrottleReasons",
    "nvmlDeviceGetSupportedClocksEventReasons",
    "nvmlDeviceGetTotalEccErrors",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    #[serde(default)]
    init_error: Option<String>,
    #[serde(default)]
    driver_version: Option<String>,
    #[serde(default)]
    devices: Vec<RawDevice>,
    #[serde(default)]
    control_file: Option<PathBuf>,
    #[serde(default)]
    hang: Option<Hang>,
    #[serde(default)]
    delays_ms: BTreeMap<String, u64>,
    #[serde(default)]
    fault_marker: Option<String>,
}

/// A call that stops answering: `call` blocks once it has been called `after_calls` times
/// before and `after_ms` have passed since init, for `for_ms` (for ever when absent).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Hang {
    pub call: String,
    #[serde(default)]
    pub after_ms: u64,
    #[serde(default)]
    pub after_calls: u64,
    #[serde(default)]
    pub for_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevice {
    uuid: String,
    name: String,
    #[serde(default)]
    minor: Option<u32>,
    memory_total: u64,
    #[serde(default)]
    memory_used_base: u64,
    #[serde(default)]
    utilization: Vec<UtilStep>,
    #[serde(default)]
    power_mw: u32,
    #[serde(default)]
    energy_base_mj: u64,
    #[serde(default)]
    processes: Vec<ProcessSpec>,
    #[serde(default)]
    lost_after_ms: Option<u64>,
    #[serde(default)]
    errors: BTreeMap<String, String>,
    #[serde(default)]
    device_file: Option<PathBuf>,
    #[serde(default)]
    gpm: Option<Gpm>,
    #[serde(default)]
    ecc: Option<Ecc>,
    #[serde(default = "default_fault_throttle_ms")]
    fault_throttle_ms: u64,
}

fn default_fault_throttle_ms() -> u64 {
    2000
}

/// GPM metrics (percent) of a device while one of its processes runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Gpm {
    #[serde(default)]
    pub sm_active: u32,
    #[serde(default)]
    pub sm_occupancy: u32,
    #[serde(default)]
    pub tensor_active: u32,
    #[serde(default)]
    pub dram_bandwidth: u32,
}

/// ECC error counts a device starts with (volatile and aggregate alike).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Ecc {
    #[serde(default)]
    pub corrected: u64,
    #[serde(default)]
    pub uncorrected: u64,
}

/// One step of the utilization timeline.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UtilStep {
    pub at_ms: u64,
    pub gpu: u32,
    pub memory: u32,
}

/// A process using the device: matched by command line substring or by pid.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProcessSpec {
    #[serde(default)]
    pub cmdline_contains: Option<String>,
    #[serde(default)]
    pub pid: Option<u32>,
    #[serde(default)]
    pub used_memory: Option<u64>,
}

/// A validated scenario.
#[derive(Debug, Default)]
pub(crate) struct Scenario {
    pub init_error: Option<Ret>,
    pub driver_version: CString,
    pub devices: Vec<DeviceSpec>,
    /// Opened at init and held until the last shutdown, as the driver's control device.
    pub control_file: Option<PathBuf>,
    pub hang: Option<Hang>,
    pub delays: BTreeMap<String, Duration>,
    /// A process of a device with this in its command line makes the device fault.
    pub fault_marker: Option<String>,
}

/// A validated device.
#[derive(Debug)]
pub(crate) struct DeviceSpec {
    pub uuid: CString,
    pub name: CString,
    pub minor: u32,
    pub memory_total: u64,
    pub memory_used_base: u64,
    pub utilization: Vec<UtilStep>,
    pub power_mw: u32,
    pub energy_base_mj: u64,
    pub processes: Vec<ProcessSpec>,
    pub lost_after_ms: Option<u64>,
    pub errors: BTreeMap<String, Ret>,
    /// Opened when the device's handle is first handed out, held until the last shutdown.
    pub device_file: Option<PathBuf>,
    /// GPM support and the metrics while a process runs; `None`: a pre-Hopper device.
    pub gpm: Option<Gpm>,
    /// ECC counters at init; `None`: ECC not supported.
    pub ecc: Option<Ecc>,
    /// How long a fault throttles the device's clocks.
    pub fault_throttle: Duration,
}

/// Parses an error name such as `NOT_SUPPORTED` or `NVML_ERROR_NOT_SUPPORTED`.
pub(crate) fn parse_code(name: &str) -> Result<Ret, String> {
    let bare = name.strip_prefix("NVML_ERROR_").unwrap_or(name);
    CODES
        .iter()
        .find(|(_, n, _)| *n == bare)
        .map(|(code, _, _)| *code)
        .ok_or_else(|| format!("unknown NVML error name {name:?}"))
}

fn c_string(what: &str, s: String) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} contains a NUL byte"))
}

/// Name of the scenario file looked for beside the loaded library.
pub(crate) const BESIDE_NAME: &str = "fake-nvml-scenario.json";

/// Loads the scenario: `fake-nvml-scenario.json` in the directory of the loaded library when
/// there is one, else the file named by `FAKE_NVML_SCENARIO`, else an empty scenario.
pub(crate) fn load() -> Result<Scenario, String> {
    let beside = crate::own_path()
        .and_then(|p| p.parent().map(|d| d.join(BESIDE_NAME)))
        .filter(|p| p.is_file());
    let path = match (beside, std::env::var_os("FAKE_NVML_SCENARIO")) {
        (Some(p), _) => p.into_os_string(),
        (None, Some(p)) if !p.is_empty() => p,
        _ => return parse("{}"),
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "cannot read FAKE_NVML_SCENARIO file {}: {e}",
            path.to_string_lossy()
        )
    })?;
    parse(&text).map_err(|e| format!("invalid scenario {}: {e}", path.to_string_lossy()))
}

/// Parses and validates a scenario document.
pub(crate) fn parse(text: &str) -> Result<Scenario, String> {
    let raw: RawScenario = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let init_error = match raw.init_error {
        Some(name) => match parse_code(&name)? {
            SUCCESS => None,
            code => Some(code),
        },
        None => None,
    };
    let driver_version = raw
        .driver_version
        .unwrap_or_else(|| "550.54.15-fake".to_owned());
    let known = |f: &str| SYSTEM_FUNCTIONS.contains(&f) || DEVICE_FUNCTIONS.contains(&f);
    if let Some(h) = &raw.hang {
        if !known(&h.call) {
            return Err(format!("hang: unknown function {:?}", h.call));
        }
    }
    let mut delays = BTreeMap::new();
    for (function, ms) in raw.delays_ms {
        if !known(&function) {
            return Err(format!("delays_ms: unknown function {function:?}"));
        }
        delays.insert(function, Duration::from_millis(ms));
    }
    if raw.fault_marker.as_deref() == Some("") {
        return Err("fault_marker is empty".to_owned());
    }
    let mut uuids = HashSet::new();
    let mut devices = Vec::with_capacity(raw.devices.len());
    for (index, d) in raw.devices.into_iter().enumerate() {
        let at = format!("devices[{index}]");
        if !uuids.insert(d.uuid.clone()) {
            return Err(format!("{at}: duplicate uuid {:?}", d.uuid));
        }
        if d.utilization.iter().any(|u| u.gpu > 100 || u.memory > 100) {
            return Err(format!("{at}: utilization above 100%"));
        }
        for p in &d.processes {
            match (&p.cmdline_contains, p.pid) {
                (Some(s), None) if !s.is_empty() => {}
                (None, Some(_)) => {}
                _ => {
                    return Err(format!(
                        "{at}: each process needs exactly one of a non-empty \
                         cmdline_contains or pid"
                    ));
                }
            }
        }
        let mut errors = BTreeMap::new();
        for (function, name) in d.errors {
            if !DEVICE_FUNCTIONS.contains(&function.as_str()) {
                return Err(format!(
                    "{at}: errors: unknown device function {function:?}"
                ));
            }
            errors.insert(function, parse_code(&name)?);
        }
        if let Some(g) = &d.gpm {
            let values = [
                g.sm_active,
                g.sm_occupancy,
                g.tensor_active,
                g.dram_bandwidth,
            ];
            if values.iter().any(|&v| v > 100) {
                return Err(format!("{at}: gpm above 100%"));
            }
        }
        let mut utilization = d.utilization;
        utilization.sort_by_key(|u| u.at_ms);
        devices.push(DeviceSpec {
            uuid: c_string(&format!("{at}.uuid"), d.uuid)?,
            name: c_string(&format!("{at}.name"), d.name)?,
            minor: d.minor.unwrap_or(index as u32),
            memory_total: d.memory_total,
            memory_used_base: d.memory_used_base,
            utilization,
            power_mw: d.power_mw,
            energy_base_mj: d.energy_base_mj,
            processes: d.processes,
            lost_after_ms: d.lost_after_ms,
            errors,
            device_file: d.device_file,
            gpm: d.gpm,
            ecc: d.ecc,
            fault_throttle: Duration::from_millis(d.fault_throttle_ms),
        });
    }
    Ok(Scenario {
        init_error,
        driver_version: c_string("driver_version", driver_version)?,
        devices,
        control_file: raw.control_file,
        hang: raw.hang,
        delays,
        fault_marker: raw.fault_marker,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_example() {
        let s = parse(
            r#"{"init_error": null, "driver_version": "550.54.15", "devices": [{
                "uuid": "GPU-1", "name": "Sim", "memory_total": 100,
                "utilization": [{"at_ms": 500, "gpu": 90, "memory": 30},
                                {"at_ms": 0, "gpu": 40, "memory": 10}],
                "processes": [{"cmdline_contains": "x", "used_memory": 5},
                              {"pid": 1, "used_memory": null}],
                "errors": {"nvmlDeviceGetMigMode": "NVML_ERROR_GPU_IS_LOST"}}]}"#,
        )
        .unwrap();
        let d = &s.devices[0];
        assert_eq!(d.minor, 0);
        assert_eq!(d.utilization[0].at_ms, 0);
        assert_eq!(d.errors["nvmlDeviceGetMigMode"], 15);
        assert_eq!(s.driver_version.to_str().unwrap(), "550.54.15");
    }

    #[test]
    fn rejects_bad_documents() {
        for bad in [
            r#"{"bogus": 1}"#,
            r#"{"init_error": "NOPE"}"#,
            r#"{"devices": [{"uuid": "a", "name": "n"}]}"#,
            r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1, "extra": 0}]}"#,
            r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
                "errors": {"nvmlFoo": "UNKNOWN"}}]}"#,
            r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
                "processes": [{"pid": 1, "cmdline_contains": "x"}]}]}"#,
            r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1},
                            {"uuid": "a", "name": "n", "memory_total": 1}]}"#,
            r#"{"hang": {"call": "nvmlFoo"}}"#,
            r#"{"hang": {"after_ms": 5}}"#,
            r#"{"hang": {"call": "nvmlShutdown", "forever": true}}"#,
            r#"{"delays_ms": {"nvmlFoo": 5}}"#,
            r#"{"delays_ms": {"nvmlShutdown": -1}}"#,
        ] {
            assert!(parse(bad).is_err(), "accepted {bad}");
        }
        assert_eq!(parse("{}").unwrap().devices.len(), 0);
    }

    #[test]
    fn parses_gpm_ecc_and_faults() {
        let s = parse(
            r#"{"fault_marker": "SIMGPU_XID", "devices": [
                {"uuid": "a", "name": "n", "memory_total": 1, "fault_throttle_ms": 50,
                 "gpm": {"sm_active": 55, "sm_occupancy": 30, "tensor_active": 20,
                         "dram_bandwidth": 15},
                 "ecc": {"corrected": 3, "uncorrected": 1},
                 "errors": {"nvmlGpmSampleGet": "UNKNOWN", "nvmlEventSetWait_v2": "TIMEOUT"}},
                {"uuid": "b", "name": "n", "memory_total": 1, "gpm": {"sm_active": 100},
                 "ecc": {}},
                {"uuid": "c", "name": "n", "memory_total": 1}]}"#,
        )
        .unwrap();
        assert_eq!(s.fault_marker.as_deref(), Some("SIMGPU_XID"));
        let [a, b, c] = &s.devices[..] else {
            panic!("3 devices")
        };
        let gpm = Gpm {
            sm_active: 55,
            sm_occupancy: 30,
            tensor_active: 20,
            dram_bandwidth: 15,
        };
        assert_eq!(a.gpm, Some(gpm));
        assert_eq!(
            a.ecc,
            Some(Ecc {
                corrected: 3,
                uncorrected: 1
            })
        );
        assert_eq!(a.fault_throttle, Duration::from_millis(50));
        assert_eq!(a.errors["nvmlEventSetWait_v2"], 10);
        let b_gpm = Gpm {
            sm_active: 100,
            ..Gpm::default()
        };
        assert_eq!((b.gpm, b.ecc), (Some(b_gpm), Some(Ecc::default())));
        assert_eq!((c.gpm, c.ecc), (None, None));
        assert_eq!(c.fault_throttle, Duration::from_millis(2000));
        assert!(parse("{}").unwrap().fault_marker.is_none());
        let s = parse(r#"{"delays_ms": {"nvmlEventSetCreate": 5, "nvmlGpmSampleFree": 1}}"#);
        assert_eq!(s.unwrap().delays.len(), 2);
    }

    #[test]
    fn rejects_bad_gpm_ecc_and_faults() {
        for bad in [
            r#"{"fault_marker": ""}"#,
            r#"{"fault_marker": 5}"#,
            r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
                "gpm": {"sm_active": 101}}]}"#,
            r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
                "gpm": {"dram_bandwidth": -1}}]}"#,
            r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
                "gpm": {"sm_util": 5}}]}"#,
            r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
                "ecc": {"corrected": 1, "double_bit": 1}}]}"#,
            r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1, "ecc": 3}]}"#,
            r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
                "fault_throttle_ms": null}]}"#,
            r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
                "fault_marker": "x"}]}"#,
            // Functions without a device handle take no injected errors.
            r#"{"devices": [{"uuid": "a", "name": "n", "memory_total": 1,
                "errors": {"nvmlEventSetCreate": "UNKNOWN"}}]}"#,
        ] {
            assert!(parse(bad).is_err(), "accepted {bad}");
        }
    }

    #[test]
    fn parses_files_hangs_and_delays() {
        let s = parse(
            r#"{"control_file": "/tmp/ctl", "delays_ms": {"nvmlDeviceGetUtilizationRates": 30},
                "hang": {"call": "nvmlDeviceGetMemoryInfo_v2", "after_ms": 1000, "after_calls": 2},
                "devices": [{"uuid": "a", "name": "n", "memory_total": 1, "device_file": "/tmp/d0"}]}"#,
        )
        .unwrap();
        assert_eq!(
            s.control_file.as_deref(),
            Some(std::path::Path::new("/tmp/ctl"))
        );
        assert_eq!(
            s.devices[0].device_file.as_deref(),
            Some(std::path::Path::new("/tmp/d0"))
        );
        assert_eq!(
            s.delays["nvmlDeviceGetUtilizationRates"],
            Duration::from_millis(30)
        );
        let h = s.hang.unwrap();
        assert_eq!(
            (h.call.as_str(), h.after_ms, h.after_calls, h.for_ms),
            ("nvmlDeviceGetMemoryInfo_v2", 1000, 2, None)
        );
        let s = parse(r#"{"hang": {"call": "nvmlInit_v2", "for_ms": 50}}"#).unwrap();
        let h = s.hang.unwrap();
        assert_eq!((h.after_ms, h.after_calls, h.for_ms), (0, 0, Some(50)));
        assert!(s.control_file.is_none() && s.delays.is_empty());
    }
}

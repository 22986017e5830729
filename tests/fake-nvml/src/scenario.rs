//! The JSON scenario file (format documented at the crate root).

use crate::{CODES, NO_INSTANCE, Ret, SUCCESS};
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
    "nvmlDeviceGetTemperature",
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
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetMaxMigDeviceCount",
    // On a parent: that call; on an instance: the lookup of that instance.
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
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
    #[serde(default)]
    compute_marker: Option<String>,
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
    temperature_c: Option<u32>,
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
    #[serde(default)]
    mig: Option<RawMig>,
}

/// A device in MIG mode: its instances (MIG devices).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMig {
    #[serde(default = "default_max_instances")]
    max_instances: u32,
    #[serde(default)]
    instances: Vec<RawInstance>,
    #[serde(default)]
    reconfigure: Option<RawReconfigure>,
}

/// A new MIG layout from `at_ms` since init on: the device's instances are then these.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReconfigure {
    at_ms: u64,
    #[serde(default)]
    instances: Vec<RawInstance>,
}

fn default_max_instances() -> u32 {
    7
}

/// One MIG device: a compute instance of a GPU instance.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInstance {
    uuid: String,
    profile: String,
    gpu_instance_id: u32,
    compute_instance_id: u32,
    memory_total: u64,
    #[serde(default)]
    memory_used_base: u64,
    #[serde(default)]
    gpm: Option<Gpm>,
    #[serde(default)]
    processes: Vec<ProcessSpec>,
    #[serde(default)]
    errors: BTreeMap<String, String>,
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

/// A process using the device: matched by command line substring or by pid, and then by a
/// substring of one of its environment entries when `environ_contains` is set.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProcessSpec {
    #[serde(default)]
    pub cmdline_contains: Option<String>,
    #[serde(default)]
    pub pid: Option<u32>,
    #[serde(default)]
    pub environ_contains: Option<String>,
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
    /// `Some`: a device is busy (utilization, GPM, no `GpuIdle`) only while a process of it
    /// with this in its command line is on it; `None`: while any process of it is (GPM,
    /// throttle reasons), its utilization following its timeline alone.
    pub compute_marker: Option<String>,
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
    /// The GPU sensor's temperature; `None`: the device has no such sensor.
    pub temperature_c: Option<u32>,
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
    /// `Some`: the device is in MIG mode, with these instances.
    pub mig: Option<MigSpec>,
}

/// A device's MIG mode.
#[derive(Debug)]
pub(crate) struct MigSpec {
    /// `nvmlDeviceGetMaxMigDeviceCount`.
    pub max_instances: u32,
    pub instances: Vec<InstanceSpec>,
    /// `Some`: from this many ms since init on, the instances are these instead.
    pub reconfigure: Option<(u64, Vec<InstanceSpec>)>,
}

/// A validated MIG device.
#[derive(Debug)]
pub(crate) struct InstanceSpec {
    pub uuid: CString,
    /// "<parent name> MIG <profile>", as NVML names a MIG device.
    pub name: CString,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    pub memory_total: u64,
    pub memory_used_base: u64,
    pub gpm: Option<Gpm>,
    pub processes: Vec<ProcessSpec>,
    pub errors: BTreeMap<String, Ret>,
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
    if raw.compute_marker.as_deref() == Some("") {
        return Err("compute_marker is empty".to_owned());
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
        check_processes(&at, &d.processes)?;
        check_gpm(&at, d.gpm.as_ref())?;
        let mig = match d.mig {
            Some(m) => Some(mig_spec(&format!("{at}.mig"), &d.name, m, &mut uuids)?),
            None => None,
        };
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
            temperature_c: d.temperature_c,
            processes: d.processes,
            lost_after_ms: d.lost_after_ms,
            errors: parse_errors(&at, d.errors)?,
            device_file: d.device_file,
            gpm: d.gpm,
            ecc: d.ecc,
            fault_throttle: Duration::from_millis(d.fault_throttle_ms),
            mig,
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
        compute_marker: raw.compute_marker,
    })
}

/// Checks that each process entry has exactly one of a non-empty `cmdline_contains` or `pid`,
/// and no empty `environ_contains`.
fn check_processes(at: &str, processes: &[ProcessSpec]) -> Result<(), String> {
    for p in processes {
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
        if p.environ_contains.as_deref() == Some("") {
            return Err(format!("{at}: empty environ_contains"));
        }
    }
    Ok(())
}

fn check_gpm(at: &str, gpm: Option<&Gpm>) -> Result<(), String> {
    if let Some(g) = gpm {
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
    Ok(())
}

/// An `errors` map: device function name -> return code.
fn parse_errors(at: &str, raw: BTreeMap<String, String>) -> Result<BTreeMap<String, Ret>, String> {
    let mut errors = BTreeMap::new();
    for (function, name) in raw {
        if !DEVICE_FUNCTIONS.contains(&function.as_str()) {
            return Err(format!(
                "{at}: errors: unknown device function {function:?}"
            ));
        }
        errors.insert(function, parse_code(&name)?);
    }
    Ok(errors)
}

/// Validates a device's `mig`: uuids unique among all devices and instances (`uuids`), at most
/// `max_instances` instances, GPU instance ids unique on the device. A `reconfigure` layout
/// follows the same rules; it may keep uuids of the first layout (an instance that stays).
fn mig_spec(
    at: &str,
    parent_name: &str,
    raw: RawMig,
    uuids: &mut HashSet<String>,
) -> Result<MigSpec, String> {
    let instances = instance_specs(at, parent_name, raw.max_instances, raw.instances, uuids)?;
    let reconfigure = match raw.reconfigure {
        Some(r) => {
            let mut later = uuids.clone();
            for i in &instances {
                later.remove(i.uuid.to_str().unwrap_or_default());
            }
            let at = format!("{at}.reconfigure");
            let new = instance_specs(&at, parent_name, raw.max_instances, r.instances, &mut later)?;
            uuids.extend(later);
            Some((r.at_ms, new))
        }
        None => None,
    };
    Ok(MigSpec {
        max_instances: raw.max_instances,
        instances,
        reconfigure,
    })
}

/// Validates one MIG layout of a device (see `mig_spec`).
fn instance_specs(
    at: &str,
    parent_name: &str,
    max_instances: u32,
    raw: Vec<RawInstance>,
    uuids: &mut HashSet<String>,
) -> Result<Vec<InstanceSpec>, String> {
    if raw.len() > max_instances as usize {
        return Err(format!("{at}: more instances than max_instances"));
    }
    let mut gis = HashSet::new();
    let mut instances = Vec::with_capacity(raw.len());
    for (k, i) in raw.into_iter().enumerate() {
        let at = format!("{at}.instances[{k}]");
        if !uuids.insert(i.uuid.clone()) {
            return Err(format!("{at}: duplicate uuid {:?}", i.uuid));
        }
        // One compute instance per GPU instance: GPM samples are taken per GPU instance.
        if !gis.insert(i.gpu_instance_id) {
            return Err(format!(
                "{at}: duplicate gpu_instance_id {}",
                i.gpu_instance_id
            ));
        }
        if i.gpu_instance_id == NO_INSTANCE || i.compute_instance_id == NO_INSTANCE {
            return Err(format!("{at}: instance id 0xFFFFFFFF means none"));
        }
        check_processes(&at, &i.processes)?;
        check_gpm(&at, i.gpm.as_ref())?;
        let name = format!("{parent_name} MIG {}", i.profile);
        instances.push(InstanceSpec {
            uuid: c_string(&format!("{at}.uuid"), i.uuid)?,
            name: c_string(&format!("{at}.profile"), name)?,
            gpu_instance_id: i.gpu_instance_id,
            compute_instance_id: i.compute_instance_id,
            memory_total: i.memory_total,
            memory_used_base: i.memory_used_base,
            gpm: i.gpm,
            processes: i.processes,
            errors: parse_errors(&at, i.errors)?,
        });
    }
    Ok(instances)
}

#[cfg(test)]
mod tests;

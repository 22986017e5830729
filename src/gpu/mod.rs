//! GPUs, behind one trait ([`GpuSource`]), a sibling source per vendor: NVIDIA's through NVML
//! (`nvml-wrapper`, [`nvml::NvmlSource`]), AMD's from the kernel's KFD, amdgpu and hwmon files
//! under a root ([`amd`]), both side by side on a node that has both. Tests drive the same code
//! with the project's fake `libnvidia-ml.so.1` and simulated AMD roots. A machine without GPUs
//! or without a vendor's library is normal: [`open_lazily`] logs one line and the tracker
//! reports no GPU figures (null, with why).

pub mod amd;
pub(crate) mod cloexec;
mod combined;
mod ffi;
pub mod figures;
mod live;
pub mod nvml;
mod query;

use std::path::PathBuf;
use std::sync::mpsc;
use std::thread;

use serde::{Deserialize, Serialize};

/// Who made a GPU, and so which source reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// Read through NVML.
    #[default]
    Nvidia,
    /// Read from the kernel's amdgpu and KFD files ([`amd`]).
    Amd,
}

impl Vendor {
    /// `nvidia` or `amd`, as records and metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
        }
    }
}

impl std::str::FromStr for Vendor {
    type Err = String;

    /// `nvidia` or `amd` (any case), as gpu_tracker's `gpu_brand`.
    fn from_str(s: &str) -> Result<Vendor, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "nvidia" => Ok(Vendor::Nvidia),
            "amd" => Ok(Vendor::Amd),
            _ => Err("the GPU brand must be nvidia or amd".into()),
        }
    }
}

/// What stays the same about a GPU during a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInfo {
    /// Who made it: which source reads it.
    pub vendor: Vendor,
    /// The source's index: NVML's (the order NVML enumerates devices in; a MIG instance's
    /// parent's), or for AMD the position in the KFD topology's GPU nodes.
    pub index: u32,
    /// Minor number of the device file Slurm's gres.conf `File=` names: `/dev/nvidia<minor>`
    /// (a MIG instance's parent's), or for AMD the render node `/dev/dri/renderD<minor>`.
    pub minor: Option<u32>,
    /// PCI address (`0000:c1:00.0`), where the source gives it.
    pub pci_bus_id: Option<String>,
    /// Compute units (AMD), the denominator of CU occupancy; `None` for NVIDIA.
    pub compute_units: Option<u32>,
    /// `GPU-...` or `MIG-...` UUID (NVIDIA); for AMD `GPU-` and `unique_id` in 16 hex digits
    /// (as `rocminfo` shows it), else the PCI address.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Memory size in bytes (a MIG instance's own).
    pub memory_total: u64,
    /// The MIG instance this device is, when it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigInfo>,
}

#[cfg(test)]
impl GpuInfo {
    /// A whole GPU for tests: NVML index `index`, UUID `GPU-<index>`.
    pub(crate) fn for_test(index: u32, minor: Option<u32>) -> GpuInfo {
        GpuInfo {
            vendor: Vendor::Nvidia,
            index,
            minor,
            pci_bus_id: None,
            compute_units: None,
            uuid: format!("GPU-{index}"),
            name: "G".into(),
            memory_total: 1,
            mig: None,
        }
    }
}

/// A MIG instance: a slice of a GPU with its own memory and SMs, named by its own `MIG-` UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInfo {
    /// The parent GPU's UUID.
    pub parent_uuid: String,
    /// The parent GPU's NVML index.
    pub parent_index: u32,
    /// The instance's profile, as Slurm's gres.conf `Type=` names it (`1g.10gb`).
    pub profile: String,
    /// GPU instance id on the parent.
    pub gpu_instance_id: u32,
    /// Compute instance id within the GPU instance.
    pub compute_instance_id: u32,
    /// NVML's MIG device index on the parent (`nvmlDeviceGetMigDeviceHandleByIndex`).
    pub mig_index: u32,
}

/// Why a GPU's device-wide figures are not the job's alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shared {
    /// `shard` (Slurm's shard GRES), `mps` (Slurm's MPS GRES) or `other_processes` (processes
    /// outside the step were seen on the GPU).
    pub by: String,
    /// Shards the step holds on its node (`shard` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// The most processes outside the step seen on the GPU at once.
    pub other_processes: u32,
    /// Of those, the most processes of the job's other steps on this node seen at once: the
    /// job's own. `None` where they could not be told apart (no job cgroup) and in records of
    /// earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_step_processes: Option<u32>,
    /// Of those, the most processes outside the job seen at once: other jobs' (or none of
    /// Slurm's). `None` as `other_step_processes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_job_processes: Option<u32>,
    /// The figures that are the whole device's, other jobs' use included; the step's own are
    /// its processes' memory.
    pub device_wide: Vec<String>,
}

/// The figures of a GPU record that are the device's, not its processes'.
pub const DEVICE_WIDE: [&str; 5] = [
    "peak_device_memory_bytes",
    "utilization",
    "energy_joules",
    "sm_active_percent",
    "throttle_seconds",
];

impl Shared {
    /// How a step's GPU is shared, if it is: Slurm's `shards` or `mps` for the step, else
    /// `others` (the most processes of others seen on it at once).
    pub fn decide(shards: Option<u32>, mps: bool, others: u32) -> Option<Shared> {
        let by = if shards.is_some() {
            "shard"
        } else if mps {
            "mps"
        } else if others > 0 {
            "other_processes"
        } else {
            return None;
        };
        Some(Shared {
            by: by.into(),
            shards,
            other_processes: others,
            other_step_processes: None,
            outside_job_processes: None,
            device_wide: DEVICE_WIDE.iter().map(|s| s.to_string()).collect(),
        })
    }
}

impl MigInfo {
    /// The profile from a MIG device's name ("NVIDIA H100 80GB HBM3 MIG 1g.10gb" → "1g.10gb").
    pub fn profile_from_name(name: &str) -> Option<String> {
        let at = name.rfind("MIG ")?;
        let p = name[at + 4..].trim();
        (!p.is_empty()).then(|| p.to_string())
    }
}

/// GPM's figures over the time since the device's previous reading, percent; `None` where
/// the driver gave no value for one.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpmReading {
    /// SM activity.
    pub sm_active: Option<f64>,
    /// SM occupancy.
    pub sm_occupancy: Option<f64>,
    /// Tensor pipes active (any).
    pub tensor_active: Option<f64>,
    /// DRAM bandwidth.
    pub dram_bandwidth: Option<f64>,
}

/// A figure a reading lacks: its key ([`figures::figure`]) and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Missing {
    /// Which figure.
    pub figure: &'static str,
    /// Why.
    pub why: figures::NoData,
}

/// One reading of one GPU. `None` where the device does not support a query; then `missing`
/// says why.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReading {
    /// Device memory in use by anyone, in bytes.
    pub used: Option<u64>,
    /// Percent of time a kernel ran over the driver's last sample period.
    pub utilization: Option<u32>,
    /// Energy used since the driver loaded, in millijoules (for AMD, a counter the source
    /// keeps: see [`amd`]).
    pub energy_mj: Option<u64>,
    /// Power drawn now, milliwatts, where the source gives it.
    pub power_mw: Option<u64>,
    /// Compute processes on the device: host pid and memory used, where the driver tells it.
    pub processes: Vec<(u32, Option<u64>)>,
    /// Each process's share of the SMs since the previous reading (NVML's per-process
    /// samples, the latest of each pid), percent; empty when no process ran a kernel since.
    pub process_utilization: Option<Vec<(u32, u32)>>,
    /// Each process's compute units with waves in flight now (AMD's KFD `cu_occupancy`), by
    /// host pid; `None` where the kernel does not give it. Over [`GpuInfo::compute_units`] it
    /// is the process's CU occupancy.
    pub process_cu_occupancy: Option<Vec<(u32, u32)>>,
    /// GPM's figures since the previous reading (none at the first: GPM needs two samples).
    pub gpm: Option<GpmReading>,
    /// Clock event (throttle) reasons active now: NVML's bit mask.
    pub throttle: Option<u64>,
    /// Volatile ECC error counts since the driver loaded: corrected, uncorrected.
    pub ecc: Option<(u64, u64)>,
    /// The GPU's die temperature now, degrees Celsius (a MIG instance: its GPU's), where the
    /// source gives it. A live figure only (the exporter's): no record keeps it, so a device
    /// without it lacks nothing a summary shows.
    pub temperature_c: Option<u32>,
    /// Figures this reading lacks, and why.
    pub missing: Vec<Missing>,
}

/// A failure of a GPU source as a whole (not of one query).
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The NVIDIA management library could not be loaded or initialized.
    #[error("NVML unavailable ({lib}): {source}")]
    Unavailable {
        /// Library path tried.
        lib: String,
        /// What NVML said.
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
    /// No AMD GPU can be read under the root given.
    #[error("AMD GPUs: {0}")]
    Amd(#[source] amd::AmdError),
    /// Neither vendor's GPUs can be read: each source's reason.
    #[error("no GPU can be read: {}", .0.join("; "))]
    NoneFound(Vec<String>),
    /// A device query failed while listing devices.
    #[error("NVML: {what}: {source}")]
    Query {
        /// What was being asked.
        what: String,
        /// What NVML said.
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
}

/// A set of GPUs that can be read repeatedly.
pub trait GpuSource: Send {
    /// The devices this source reads, in a fixed order.
    fn devices(&self) -> &[GpuInfo];
    /// Reads device `i` (an index into [`GpuSource::devices`]). `None` once the device is lost
    /// (fell off the bus): the caller keeps what it had.
    fn read(&mut self, i: usize) -> Option<GpuReading>;
    /// The tracked processes (`main`, where not 0, and `members`), told before each sample's
    /// reads: a source that must look processes up one by one (AMD's KFD files) reads only
    /// theirs, and of the others only as much as says whether the GPU is shared.
    fn track_processes(&mut self, _main: u32, _members: &std::collections::HashSet<u32>) {}
    /// Descriptors the source's library left open without close-on-exec when it was opened,
    /// and that were marked close-on-exec then (see [`cloexec`]).
    fn descriptors_marked_cloexec(&self) -> usize {
        0
    }
    /// What went wrong since the last call, once per device and query (a figure the device
    /// does not report, say), for the record's notes.
    fn take_problems(&mut self) -> Vec<String> {
        Vec::new()
    }
    /// Critical Xid errors reported since the last call: the device (an index into
    /// [`GpuSource::devices`]) and the Xid. Never blocks.
    fn take_xids(&mut self) -> Vec<(usize, u64)> {
        Vec::new()
    }
}

/// Where to find the NVIDIA management library.
#[derive(Debug, Clone, Default)]
pub struct GpuConfig {
    /// Path of `libnvidia-ml.so.1`; `None` lets the dynamic loader search (the usual case).
    pub nvml_lib: Option<PathBuf>,
    /// Skip GPUs altogether.
    pub disabled: bool,
    /// List MIG instances beside whole GPUs (a Slurm step, which maps its allocation to
    /// them). Without, a GPU in MIG mode is read whole: its instances' processes are its own.
    pub mig: bool,
    /// Read only this vendor's GPUs; `None`: every vendor found (NVIDIA's first).
    pub brand: Option<Vendor>,
    /// The directory AMD's kernel files are read under (`sys/class/kfd`, `sys/class/drm`);
    /// `None` is `/`, a real node. Another root is for tests only: a simulated node.
    pub amd_root: Option<PathBuf>,
}

/// The usage error for a `--guuids` UUID none of `devices` has, if one is given.
pub fn unknown_uuid(devices: &[GpuInfo], wanted: &[String]) -> Option<String> {
    let known: Vec<&str> = devices.iter().map(|d| d.uuid.as_str()).collect();
    let bad = wanted.iter().find(|w| !known.contains(&w.as_str()))?;
    let here = if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    };
    Some(format!("unknown GPU UUID \"{bad}\"; GPUs here: {here}"))
}

/// Opens the GPUs of a run: lazily (on the sampler thread), or at once when `wanted` names GPUs
/// (`--guuids`, the Python API's `gpu_uuids`), which must then be on this machine; the error is
/// the usage message. NVIDIA's are opened with their MIG instances, so that a MIG UUID can be
/// named, and the instances not named are dropped.
pub fn open_checked(config: &GpuConfig, wanted: Option<&[String]>) -> Result<LazyGpu, String> {
    let Some(wanted) = wanted else {
        return Ok(open_lazily(config));
    };
    let cannot =
        |e: &dyn std::fmt::Display| format!("GPU UUIDs given, but no GPU can be read: {e}");
    if config.brand == Some(Vendor::Amd) {
        let src = open(config).map_err(|e| cannot(&e))?;
        return match unknown_uuid(src.devices(), wanted) {
            Some(why) => Err(why),
            None => Ok(LazyGpu::ready(src)),
        };
    }
    let mut src =
        nvml::NvmlSource::open(config.nvml_lib.as_deref(), true).map_err(|e| cannot(&e))?;
    if let Some(why) = unknown_uuid(src.devices(), wanted) {
        return Err(why);
    }
    src.retain(|d| d.mig.is_none() || wanted.contains(&d.uuid));
    Ok(LazyGpu::ready(Box::new(src)))
}

/// Opens the GPUs `config` asks for: NVIDIA's through NVML, AMD's from the kernel's files,
/// side by side where both are there. A vendor asked for by name that cannot be read is the
/// error; with none named, the error only when neither can be read.
pub fn open(config: &GpuConfig) -> Result<Box<dyn GpuSource>, GpuError> {
    let root = config
        .amd_root
        .clone()
        .unwrap_or_else(|| PathBuf::from("/"));
    let nvidia = || {
        nvml::NvmlSource::open(config.nvml_lib.as_deref(), config.mig)
            .map(|s| Box::new(s) as Box<dyn GpuSource>)
    };
    let amd = || {
        amd::AmdSource::open(&root)
            .map(|s| Box::new(s) as Box<dyn GpuSource>)
            .map_err(GpuError::Amd)
    };
    match config.brand {
        Some(Vendor::Nvidia) => nvidia(),
        Some(Vendor::Amd) => amd(),
        None => {
            let found: Vec<Result<Box<dyn GpuSource>, GpuError>> = vec![nvidia(), amd()];
            let mut sources = Vec::new();
            let mut empty = None;
            let mut why = Vec::new();
            for r in found {
                match r {
                    Ok(s) if s.devices().is_empty() => {
                        empty.get_or_insert(s);
                    }
                    Ok(s) => sources.push(s),
                    Err(e) => why.push(e.to_string()),
                }
            }
            match sources.len() {
                0 => empty.ok_or(GpuError::NoneFound(why)),
                1 => Ok(sources.remove(0)),
                _ => Ok(Box::new(combined::Combined::new(sources))),
            }
        }
    }
}

/// A GPU source that is being opened on its own thread, so a slow NVML start (seconds without
/// persistence mode) never delays the command or its first samples.
pub struct LazyGpu {
    state: LazyState,
}

enum LazyState {
    Opening(mpsc::Receiver<Result<Box<dyn GpuSource>, GpuError>>),
    Ready(Box<dyn GpuSource>),
    None(Option<String>),
}

/// Starts opening the GPUs in the background.
pub fn open_lazily(config: &GpuConfig) -> LazyGpu {
    if config.disabled {
        return LazyGpu {
            state: LazyState::None(None),
        };
    }
    let (tx, rx) = mpsc::channel();
    let config = config.clone();
    let spawned = thread::Builder::new()
        .name("gpu-tracker-nvml-open".into())
        .spawn(move || {
            let _ = tx.send(open(&config));
        });
    LazyGpu {
        state: match spawned {
            Ok(_) => LazyState::Opening(rx),
            Err(e) => LazyState::None(Some(format!("could not start the NVML thread: {e}"))),
        },
    }
}

impl LazyGpu {
    /// A source that is already open (tests, or when UUIDs had to be checked up front).
    pub fn ready(source: Box<dyn GpuSource>) -> LazyGpu {
        LazyGpu {
            state: LazyState::Ready(source),
        }
    }

    /// No GPUs.
    pub fn none() -> LazyGpu {
        LazyGpu {
            state: LazyState::None(None),
        }
    }

    /// Whether opening has finished, either way.
    pub fn is_settled(&self) -> bool {
        !matches!(self.state, LazyState::Opening(_))
    }

    /// The source if it is open by now. `wait` blocks until opening has finished. A failure is
    /// handed out once through `on_unavailable`, then the source stays absent.
    pub fn get(
        &mut self,
        wait: bool,
        on_unavailable: &mut dyn FnMut(String),
    ) -> Option<&mut Box<dyn GpuSource>> {
        if let LazyState::Opening(rx) = &self.state {
            let r = if wait {
                rx.recv().ok()
            } else {
                match rx.try_recv() {
                    Ok(r) => Some(r),
                    Err(mpsc::TryRecvError::Empty) => return None,
                    Err(mpsc::TryRecvError::Disconnected) => None,
                }
            };
            self.state = match r {
                Some(Ok(src)) => LazyState::Ready(src),
                Some(Err(e)) => LazyState::None(Some(e.to_string())),
                None => LazyState::None(Some("the NVML thread ended without an answer".into())),
            };
        }
        match &mut self.state {
            LazyState::Ready(s) => Some(s),
            LazyState::None(msg) => {
                if let Some(m) = msg.take() {
                    on_unavailable(m);
                }
                None
            }
            LazyState::Opening(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_uuid_is_named_with_the_gpus_there() {
        let d = [GpuInfo::for_test(0, Some(0)), GpuInfo::for_test(1, Some(1))];
        assert_eq!(unknown_uuid(&d, &["GPU-1".into()]), None);
        assert_eq!(
            unknown_uuid(&d, &["GPU-1".into(), "GPU-9".into()]).as_deref(),
            Some("unknown GPU UUID \"GPU-9\"; GPUs here: GPU-0, GPU-1")
        );
        assert_eq!(
            unknown_uuid(&[], &["x".into()]).as_deref(),
            Some("unknown GPU UUID \"x\"; GPUs here: none")
        );
    }
}

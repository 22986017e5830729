//! The NVML GPU source. All NVML access goes through `nvml-wrapper`, which `dlopen`s the library
//! at [`NvmlSource::open`]; absent library, absent driver and absent GPUs are errors the caller
//! logs once and carries on from.

use std::ffi::OsStr;
use std::path::Path;

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use super::{GpuError, GpuInfo, GpuReading, GpuSource};

/// GPUs read through NVML.
pub struct NvmlSource {
    nvml: Nvml,
    devices: Vec<GpuInfo>,
    lost: Vec<bool>,
    cloexec_marked: usize,
    /// Queries that failed, by device and query, reported once each.
    reported: Vec<(usize, &'static str)>,
    problems: Vec<String>,
}

fn query<T>(what: impl Into<String>, r: Result<T, NvmlError>) -> Result<T, GpuError> {
    r.map_err(|source| GpuError::Query {
        what: what.into(),
        source,
    })
}

/// One reading's optional queries: a device that does not support one (or fails it) gives
/// `None`, not an error; the failures are kept for a note.
struct Optional {
    lost: bool,
    failed: Vec<(&'static str, NvmlError)>,
}

impl Optional {
    fn get<T>(&mut self, what: &'static str, r: Result<T, NvmlError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(NvmlError::GpuLost) => {
                self.lost = true;
                None
            }
            Err(e) => {
                self.failed.push((what, e));
                None
            }
        }
    }
}

impl NvmlSource {
    /// Loads NVML (from `lib`, or the loader's search path) and lists every device (which
    /// gets every device's handle). The descriptors the library opened meanwhile are marked
    /// close-on-exec: NVML may open the driver's device files without it.
    pub fn open(lib: Option<&Path>) -> Result<NvmlSource, GpuError> {
        let (r, marked) = super::cloexec::marking(|| NvmlSource::open_unmarked(lib));
        r.map(|s| NvmlSource {
            cloexec_marked: marked,
            ..s
        })
    }

    fn open_unmarked(lib: Option<&Path>) -> Result<NvmlSource, GpuError> {
        let lib_name = lib
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "libnvidia-ml.so.1".to_string());
        let nvml = match lib {
            Some(p) => Nvml::builder().lib_path(OsStr::new(p.as_os_str())).init(),
            None => Nvml::init(),
        }
        .map_err(|source| GpuError::Unavailable {
            lib: lib_name,
            source,
        })?;
        let count = query("device count", nvml.device_count())?;
        let mut devices = Vec::with_capacity(count as usize);
        for i in 0..count {
            let d = query(format!("device {i}"), nvml.device_by_index(i))?;
            devices.push(GpuInfo {
                index: i,
                minor: d.minor_number().ok(),
                uuid: query(format!("UUID of device {i}"), d.uuid())?,
                name: d.name().unwrap_or_else(|_| "unknown".into()),
                memory_total: query(format!("memory of device {i}"), d.memory_info())?.total,
            });
        }
        Ok(NvmlSource {
            lost: vec![false; devices.len()],
            nvml,
            devices,
            cloexec_marked: 0,
            reported: Vec::new(),
            problems: Vec::new(),
        })
    }

    /// Keeps only the devices `keep` accepts (a Slurm step's allocation, say).
    pub fn retain(&mut self, keep: impl Fn(&GpuInfo) -> bool) {
        let mut lost = self.lost.iter();
        let mut kept_lost = Vec::new();
        self.devices.retain(|d| {
            let l = *lost.next().unwrap_or(&false);
            let k = keep(d);
            if k {
                kept_lost.push(l);
            }
            k
        });
        self.lost = kept_lost;
    }
}

impl GpuSource for NvmlSource {
    fn devices(&self) -> &[GpuInfo] {
        &self.devices
    }

    fn descriptors_marked_cloexec(&self) -> usize {
        self.cloexec_marked
    }

    fn take_problems(&mut self) -> Vec<String> {
        std::mem::take(&mut self.problems)
    }

    fn read(&mut self, i: usize) -> Option<GpuReading> {
        if *self.lost.get(i)? {
            return None;
        }
        let mut q = Optional {
            lost: false,
            failed: Vec::new(),
        };
        let index = self.devices[i].index;
        let reading = match self.nvml.device_by_index(index) {
            Ok(d) => GpuReading {
                used: q.get("memory in use", d.memory_info()).map(|m| m.used),
                utilization: q.get("utilization", d.utilization_rates()).map(|u| u.gpu),
                energy_mj: q.get("energy", d.total_energy_consumption()),
                processes: q
                    .get("processes", d.running_compute_processes())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| {
                        let mem = match p.used_gpu_memory {
                            UsedGpuMemory::Used(b) => Some(b),
                            UsedGpuMemory::Unavailable => None,
                        };
                        (p.pid, mem)
                    })
                    .collect(),
            },
            Err(NvmlError::GpuLost) => {
                q.lost = true;
                GpuReading::default()
            }
            Err(e) => {
                q.failed.push(("handle", e));
                GpuReading::default()
            }
        };
        for (what, e) in q.failed {
            if !self.reported.contains(&(i, what)) {
                self.reported.push((i, what));
                let d = &self.devices[i];
                self.problems.push(format!(
                    "GPU {} ({}): {what} not read: {e}",
                    d.index, d.uuid
                ));
            }
        }
        if q.lost {
            self.lost[i] = true;
            return None;
        }
        Some(reading)
    }
}

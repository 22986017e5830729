//! The NVML GPU source. All NVML access goes through `nvml-wrapper`, which `dlopen`s the library
//! at [`NvmlSource::open`]; absent library, absent driver and absent GPUs are errors the caller
//! logs once and carries on from.

use std::ffi::OsStr;
use std::path::Path;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use super::figures::{NoData, figure};
use super::live::{Live, Session};
use super::query::{Optional, no_data};
use super::{GpuError, GpuInfo, GpuReading, GpuSource, MigInfo, Missing};

/// GPUs read through NVML.
pub struct NvmlSource {
    /// The library, and what borrows it (GPM samples, the Xid event set).
    session: Session,
    devices: Vec<GpuInfo>,
    lost: Vec<bool>,
    cloexec_marked: usize,
    /// Queries that failed, by device and query, reported once each.
    reported: Vec<(usize, &'static str)>,
    /// Per device: the newest per-process utilization sample read (µs), the start of the next.
    util_seen: Vec<Option<u64>>,
    problems: Vec<String>,
}

fn query<T>(what: impl Into<String>, r: Result<T, NvmlError>) -> Result<T, GpuError> {
    r.map_err(|source| GpuError::Query {
        what: what.into(),
        source,
    })
}

impl NvmlSource {
    /// Loads NVML (from `lib`, or the loader's search path) and lists every device (which
    /// gets every device's handle), and with `mig` every MIG instance after them. The
    /// descriptors the library opened meanwhile are marked close-on-exec: NVML may open the
    /// driver's device files without it.
    pub fn open(lib: Option<&Path>, mig: bool) -> Result<NvmlSource, GpuError> {
        let (r, marked) = super::cloexec::marking_unless(
            || NvmlSource::open_unmarked(lib, mig),
            // `dlopen` failed (no library here, the usual case on a machine without NVIDIA
            // GPUs): nothing of the library was loaded or run, so it opened nothing.
            |r| {
                matches!(
                    r,
                    Err(GpuError::Unavailable {
                        source: NvmlError::LibloadingError(_),
                        ..
                    })
                )
            },
        );
        r.map(|s| NvmlSource {
            cloexec_marked: marked,
            ..s
        })
    }

    fn open_unmarked(lib: Option<&Path>, mig: bool) -> Result<NvmlSource, GpuError> {
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
                vendor: super::Vendor::Nvidia,
                index: i,
                minor: d.minor_number().ok(),
                pci_bus_id: d.pci_info().ok().map(|p| p.bus_id.to_lowercase()),
                compute_units: None,
                uuid: query(format!("UUID of device {i}"), d.uuid())?,
                name: d.name().unwrap_or_else(|_| "unknown".into()),
                memory_total: query(format!("memory of device {i}"), d.memory_info())?.total,
                mig: None,
            });
        }
        let mut problems = Vec::new();
        let parents = if mig { devices.clone() } else { Vec::new() };
        for parent in &parents {
            match mig_instances(&nvml, parent) {
                Ok(found) => devices.extend(found),
                Err(e) => problems.push(e),
            }
        }
        let session = Session::open(nvml, &devices);
        Ok(NvmlSource {
            lost: vec![false; devices.len()],
            util_seen: vec![None; devices.len()],
            session,
            devices,
            cloexec_marked: 0,
            reported: Vec::new(),
            problems,
        })
    }

    /// Keeps only the devices `keep` accepts (a Slurm step's allocation, say).
    pub fn retain(&mut self, keep: impl Fn(&GpuInfo) -> bool) {
        let kept: Vec<bool> = self.devices.iter().map(&keep).collect();
        let mut flags = kept.iter();
        self.devices.retain(|_| *flags.next().unwrap_or(&false));
        let mut flags = kept.iter();
        self.lost.retain(|_| *flags.next().unwrap_or(&false));
        let mut flags = kept.iter();
        self.util_seen.retain(|_| *flags.next().unwrap_or(&false));
        self.session.keep(&kept);
    }
}

/// The SM share of each process that ran on `d` since `seen` (the latest sample of each pid),
/// moving `seen` on. `NotFound` is NVML's "no sample since then": no process ran a kernel.
fn process_utilization(
    d: &nvml_wrapper::Device,
    seen: &mut Option<u64>,
    q: &mut Optional,
) -> Option<Vec<(u32, u32)>> {
    let samples = match d.process_utilization_stats(*seen) {
        Err(NvmlError::NotFound) => Ok(Vec::new()),
        r => r,
    };
    let samples = q.get(
        figure::PROCESS_UTILIZATION,
        "per-process utilization",
        samples,
    )?;
    let mut latest: Vec<(u32, u64, u32)> = Vec::new();
    for s in samples {
        *seen = Some(seen.map_or(s.timestamp, |t| t.max(s.timestamp)));
        match latest.iter_mut().find(|(p, _, _)| *p == s.pid) {
            Some(l) if l.1 >= s.timestamp => {}
            Some(l) => *l = (s.pid, s.timestamp, s.sm_util),
            None => latest.push((s.pid, s.timestamp, s.sm_util)),
        }
    }
    Some(
        latest
            .into_iter()
            .map(|(p, _, u)| (p, u.min(100)))
            .collect(),
    )
}

/// The MIG instances of `parent`, in NVML's MIG index order (the order slurmd's AutoDetect=nvml
/// lists them in); none when the GPU is not in MIG mode or cannot be (`NotSupported`). An
/// instance that cannot be described is left out, with a note.
fn mig_instances(nvml: &Nvml, parent: &GpuInfo) -> Result<Vec<GpuInfo>, String> {
    let what = |e: &dyn std::fmt::Display| {
        format!(
            "GPU {} ({}): MIG instances not listed: {e}",
            parent.index, parent.uuid
        )
    };
    let d = nvml.device_by_index(parent.index).map_err(|e| what(&e))?;
    match d.mig_mode() {
        Ok(m) if m.current == 1 => {}
        Ok(_) | Err(NvmlError::NotSupported) | Err(NvmlError::FailedToLoadSymbol(_)) => {
            return Ok(Vec::new());
        }
        Err(e) => return Err(what(&e)),
    }
    let slots = d.mig_device_count().map_err(|e| what(&e))?;
    let mut out = Vec::new();
    // At most 7 on today's GPUs; a driver answering more is not believed past 64.
    for slot in 0..slots.min(64) {
        let m = match d.mig_device_by_index(slot) {
            Ok(m) => m,
            // An empty slot.
            Err(NvmlError::NotFound) => continue,
            Err(e) => return Err(what(&e)),
        };
        let described = (|| {
            let (gi, ci) = super::ffi::mig_instance_ids(nvml, &m)?;
            let name = m.name()?;
            Ok::<_, NvmlError>(GpuInfo {
                vendor: super::Vendor::Nvidia,
                index: parent.index,
                minor: parent.minor,
                pci_bus_id: parent.pci_bus_id.clone(),
                compute_units: None,
                uuid: m.uuid()?,
                memory_total: m.memory_info()?.total,
                mig: Some(MigInfo {
                    parent_uuid: parent.uuid.clone(),
                    parent_index: parent.index,
                    profile: MigInfo::profile_from_name(&name).unwrap_or_else(|| name.clone()),
                    gpu_instance_id: gi,
                    compute_instance_id: ci,
                    mig_index: slot,
                }),
                name,
            })
        })();
        out.push(described.map_err(|e| what(&format!("MIG device {slot}: {e}")))?);
    }
    Ok(out)
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

    fn take_xids(&mut self) -> Vec<(usize, u64)> {
        let (xids, problem) = self.session.take_xids(&self.devices);
        self.problems.extend(problem);
        xids
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
        let mig = self.devices[i]
            .mig
            .as_ref()
            .map(|m| (m.mig_index, m.gpu_instance_id));
        let uuid = &self.devices[i].uuid;
        let seen = &mut self.util_seen[i];
        // Why a MIG instance is no longer at its slot, when it is not.
        let mut moved: Option<String> = None;
        let mut reading = self
            .session
            .with_dependent_mut(|nvml: &Nvml, live: &mut Live| {
                // A MIG instance is read through its own handle, and GPM through its parent.
                let handles = nvml.device_by_index(index).and_then(|p| match mig {
                    Some((slot, gi)) => p.mig_device_by_index(slot).map(|d| (d, Some((p, gi)))),
                    None => Ok((p, None)),
                });
                // A MIG slot holds whatever instance the GPU's MIG layout puts there now: after
                // a change (instances destroyed and made, by an administrator or another job's
                // prolog) it can be another job's. Only the instance with the UUID listed at
                // the start is this device; anything else at its slot means it is gone.
                let handles = match (handles, mig) {
                    (Ok((d, parent)), Some((slot, _))) => match d.uuid() {
                        Ok(u) if u == *uuid => Ok((d, parent)),
                        Ok(u) => {
                            moved = Some(format!("MIG slot {slot} now holds {u}"));
                            Err(NvmlError::GpuLost)
                        }
                        Err(e) => Err(e),
                    },
                    (Err(NvmlError::NotFound), Some((slot, _))) => {
                        moved = Some(format!("MIG slot {slot} is empty now"));
                        Err(NvmlError::GpuLost)
                    }
                    (h, _) => h,
                };
                match handles {
                    Ok((d, parent)) => {
                        let mut r = GpuReading {
                            used: q
                                .get(figure::MEMORY, "memory in use", d.memory_info())
                                .map(|m| m.used),
                            utilization: q
                                .get(figure::UTILIZATION, "utilization", d.utilization_rates())
                                .map(|u| u.gpu),
                            energy_mj: q.get(
                                figure::ENERGY,
                                "energy",
                                d.total_energy_consumption(),
                            ),
                            processes: q
                                .get(
                                    figure::PROCESS_MEMORY,
                                    "processes",
                                    d.running_compute_processes(),
                                )
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
                            process_utilization: process_utilization(&d, seen, &mut q),
                            throttle: q
                                .get(
                                    figure::THROTTLE,
                                    "clock event reasons",
                                    d.current_throttle_reasons(),
                                )
                                .map(|r| r.bits()),
                            ..GpuReading::default()
                        };
                        let parent = parent.as_ref().map(|(p, gi)| (p, *gi));
                        // The die's temperature is the GPU's: a MIG instance reads its
                        // parent's. A GPU without the sensor leaves it out, and a failed query
                        // is not noted: it is a live figure only (GpuReading::temperature_c).
                        r.temperature_c = parent
                            .map_or(&d, |(p, _)| p)
                            .temperature(TemperatureSensor::Gpu)
                            .ok();
                        live.read_extra(i, nvml, &d, parent, &mut r, &mut q);
                        r
                    }
                    Err(NvmlError::GpuLost) => {
                        q.lost = true;
                        GpuReading::default()
                    }
                    Err(e) => {
                        q.failed.push((figure::MEMORY, "handle", e));
                        GpuReading::default()
                    }
                }
            });
        if reading.processes.iter().any(|(_, m)| m.is_none()) {
            reading.missing.push(Missing {
                figure: figure::PROCESS_MEMORY,
                why: NoData::not_supported(
                    "the driver does not tell a process's GPU memory here (MIG, or a container)",
                ),
            });
        }
        let is_mig = self.devices[i].mig.is_some();
        for (fig, what, e) in q.failed {
            let mut why = no_data(what, &e);
            if is_mig && why.kind == super::figures::NOT_SUPPORTED {
                // NVML's words do not say why: a MIG instance has no such figure of its own.
                why.why = format!("none per MIG instance ({})", why.why);
            }
            let expected = is_mig && why.kind == super::figures::NOT_SUPPORTED;
            reading.missing.push(Missing { figure: fig, why });
            if expected {
                // The figure's "no data" says it; a MIG instance lacking it is no fault.
                continue;
            }
            if [
                figure::THROTTLE,
                figure::PROCESS_UTILIZATION,
                figure::ECC,
                figure::SM_ACTIVITY,
                figure::XID,
            ]
            .contains(&fig)
            {
                // Most GPUs lack one of these: the figure's "no data" says why, not a note.
                continue;
            }
            if !self.reported.contains(&(i, what)) {
                self.reported.push((i, what));
                let d = &self.devices[i];
                self.problems.push(format!(
                    "GPU {} ({}): {what} not read: {e}",
                    d.index, d.uuid
                ));
            }
        }
        if let Some(why) = moved {
            let d = &self.devices[i];
            self.problems.push(format!(
                "GPU {} MIG instance {}: {why}: the GPU's MIG layout changed; the instance is \
                 taken as lost, its figures stop here",
                d.index, d.uuid
            ));
        }
        if q.lost {
            self.lost[i] = true;
            return None;
        }
        Some(reading)
    }
}

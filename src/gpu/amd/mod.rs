//! AMD GPUs, read from the kernel's own files (amdgpu, KFD, hwmon) under a root directory: `/`
//! on a node, a fixture or simulated tree in tests. No AMD library is loaded and no `amd-smi`
//! or `rocm-smi` is run.
//!
//! [`AmdSource::open`] lists the GPU nodes of the KFD topology ([`topology`]), finds each one's
//! device files through its render node ([`device`]) and checks that both name the same PCI
//! device; [`AmdSource`] reads them as a [`GpuSource`]. Which figure comes from which file is
//! in [`SOURCES`]; what AMD's kernel does not give, each reading says in `missing`.
//!
//! Energy: the `gpu_metrics` counter where its revision documents one ([`metrics`]), else
//! hwmon power integrated over the samples ([`energy`]); [`AmdSource::energy_origin`] and a
//! note at the start say which.

pub mod device;
pub mod energy;
pub mod files;
pub mod metrics;
pub mod parse;
pub mod procs;
mod sources;
pub mod topology;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::figures::{NoData, figure};
use super::{GpuInfo, GpuReading, GpuSource, Missing, Vendor};
use device::DeviceFiles;
use energy::{EnergyOrigin, PowerIntegral};
pub use sources::SOURCES;
use sources::absent_on_amd;

/// A listing of KFD's processes serves the reads of all devices made within this time of it,
/// unless a device is read twice (a new sample has begun).
pub const LISTING_MAX_AGE: Duration = Duration::from_millis(200);

/// Why AMD GPUs cannot be read under a root.
#[derive(Debug, thiserror::Error)]
pub enum AmdError {
    /// No KFD topology: the amdgpu driver is not loaded, or this is not an AMD GPU node.
    #[error("no AMD GPU: the KFD topology {path} cannot be listed: {source}")]
    NoKfd {
        /// The topology's nodes directory.
        path: PathBuf,
        /// What listing it gave.
        #[source]
        source: std::io::Error,
    },
    /// A KFD topology without a GPU node.
    #[error("no AMD GPU in the KFD topology {path}{}", unreadable_note(.unreadable))]
    NoGpu {
        /// The topology's nodes directory.
        path: PathBuf,
        /// Nodes that could not be read.
        unreadable: Vec<String>,
    },
}

fn unreadable_note(u: &[String]) -> String {
    if u.is_empty() {
        String::new()
    } else {
        format!(" ({} node(s) unreadable: {})", u.len(), u.join("; "))
    }
}

/// How one device's energy is counted.
enum Energy {
    Accumulator,
    Integral(PowerIntegral),
    None,
}

/// One device's state.
struct Gpu {
    gpu_id: u32,
    files: Option<DeviceFiles>,
    energy: Energy,
    origin: EnergyOrigin,
    lost: bool,
}

/// The KFD process listing shared by the devices' reads of one sample.
struct Listing {
    /// The pids, or whether the directory is missing and what went wrong.
    pids: Result<Vec<u32>, (bool, String)>,
    at: Instant,
    /// Devices read from this listing.
    served: Vec<bool>,
}

/// AMD GPUs read from the kernel's files under a root.
pub struct AmdSource {
    root: PathBuf,
    devices: Vec<GpuInfo>,
    gpus: Vec<Gpu>,
    listing: Option<Listing>,
    start: Instant,
    problems: Vec<String>,
    /// Problems already reported, by device and kind, so each is noted once.
    reported: Vec<(usize, &'static str)>,
}

impl AmdSource {
    /// Lists the AMD GPUs under `root` (`/` on a node): one device per GPU node of the KFD
    /// topology, in node order. An error when there is no KFD topology or no GPU in it.
    pub fn open(root: &Path) -> Result<AmdSource, AmdError> {
        let nodes = root.join(topology::NODES);
        let topo =
            topology::read(root).map_err(|(path, source)| AmdError::NoKfd { path, source })?;
        if topo.gpus.is_empty() {
            return Err(AmdError::NoGpu {
                path: nodes,
                unreadable: topo.unreadable,
            });
        }
        let mut problems: Vec<String> = topo
            .unreadable
            .iter()
            .map(|u| format!("a KFD topology node was left out: {u}"))
            .collect();
        let mut devices = Vec::new();
        let mut gpus = Vec::new();
        for (index, k) in topo.gpus.iter().enumerate() {
            let mut note = |s: String| problems.push(format!("AMD GPU {index}: {s}"));
            let files = match k.render_minor {
                None => {
                    note("the KFD topology gives no render node: no device figures".into());
                    None
                }
                Some(m) => match device::locate(root, m) {
                    Ok(f) => Some(f),
                    Err(e) => {
                        note(format!("no device figures: {e}"));
                        None
                    }
                },
            };
            let dev_pci = files.as_ref().and_then(|f| f.pci.clone());
            if let (Some(kfd), Some(dev)) = (&k.pci, &dev_pci)
                && kfd != dev
            {
                note(format!(
                    "KFD node {} is at PCI {kfd} but its render node leads to {dev}: device \
                     figures are read from {dev}",
                    k.node
                ));
            }
            let pci = dev_pci.or_else(|| k.pci.clone());
            let unique = files.as_ref().and_then(|f| f.unique_id()).or(k.unique_id);
            let uuid = match &pci {
                Some(p) => parse::uuid_of(unique, p),
                None => parse::uuid_of(unique, &format!("kfd-gpu-{}", k.gpu_id)),
            };
            let memory_total = match files.as_ref().map(|f| f.number("mem_info_vram_total")) {
                Some(Ok(b)) => b,
                Some(Err(e)) => {
                    note(format!("memory size unknown (0): {e}"));
                    0
                }
                None => 0,
            };
            let name = files
                .as_ref()
                .and_then(|f| f.product_name())
                .unwrap_or_else(|| parse::fallback_name(&k.name));
            let (energy, origin) = choose_energy(files.as_ref());
            if let EnergyOrigin::IntegratedPower { .. } | EnergyOrigin::None { .. } = origin {
                note(format!("energy: {}", origin.describe()));
            }
            devices.push(GpuInfo {
                vendor: Vendor::Amd,
                index: index as u32,
                minor: k.render_minor,
                pci_bus_id: pci,
                compute_units: k.compute_units,
                uuid,
                name,
                memory_total,
                mig: None,
            });
            gpus.push(Gpu {
                gpu_id: k.gpu_id,
                files,
                energy,
                origin,
                lost: false,
            });
        }
        Ok(AmdSource {
            root: root.to_path_buf(),
            devices,
            gpus,
            listing: None,
            start: Instant::now(),
            problems,
            reported: Vec::new(),
        })
    }

    /// Where device `i`'s energy comes from: the GPU's counter, or power integrated by this
    /// source (an estimate), or none.
    pub fn energy_origin(&self, i: usize) -> Option<&EnergyOrigin> {
        self.gpus.get(i).map(|g| &g.origin)
    }

    /// Keeps only the devices `keep` accepts (a Slurm step's allocation, say).
    pub fn retain(&mut self, keep: impl Fn(&GpuInfo) -> bool) {
        let kept: Vec<bool> = self.devices.iter().map(&keep).collect();
        let mut flags = kept.iter();
        self.devices.retain(|_| *flags.next().unwrap_or(&false));
        let mut flags = kept.iter();
        self.gpus.retain(|_| *flags.next().unwrap_or(&false));
        self.listing = None;
    }

    /// Notes `what` about device `i` once per `kind`.
    fn note_once(&mut self, i: usize, kind: &'static str, what: String) {
        if !self.reported.contains(&(i, kind)) {
            self.reported.push((i, kind));
            let d = &self.devices[i];
            self.problems
                .push(format!("AMD GPU {} ({}): {what}", d.index, d.uuid));
        }
    }

    /// This sample's KFD listing: a fresh one when device `i` was read from the last one
    /// already or it is old.
    fn listing_for(&mut self, i: usize) -> Result<Vec<u32>, (bool, String)> {
        let stale = match &self.listing {
            None => true,
            Some(l) => l.served.get(i).copied().unwrap_or(true) || l.at.elapsed() > LISTING_MAX_AGE,
        };
        if stale {
            self.listing = Some(Listing {
                pids: procs::list(&self.root).map_err(|e| (e.is_missing(), e.to_string())),
                at: Instant::now(),
                served: vec![false; self.gpus.len()],
            });
        }
        let l = self.listing.as_mut().expect("just made");
        if let Some(s) = l.served.get_mut(i) {
            *s = true;
        }
        l.pids.clone()
    }
}

/// How a device's energy is counted, chosen once at the start.
fn choose_energy(files: Option<&DeviceFiles>) -> (Energy, EnergyOrigin) {
    let Some(f) = files else {
        return (
            Energy::None,
            EnergyOrigin::None {
                why: "no device files".into(),
            },
        );
    };
    let why = match f.gpu_metrics() {
        Ok(blob) => match metrics::parse_energy_mj(&blob) {
            Ok((h, _)) => {
                return (
                    Energy::Accumulator,
                    EnergyOrigin::Accumulator {
                        revision: h.revision(),
                    },
                );
            }
            Err(e) => e.to_string(),
        },
        Err(e) if e.is_missing() => "the GPU has no gpu_metrics".to_string(),
        Err(e) => e.to_string(),
    };
    match &f.power {
        Some((_, file)) => (
            Energy::Integral(PowerIntegral::default()),
            EnergyOrigin::IntegratedPower { file, why },
        ),
        None => (
            Energy::None,
            EnergyOrigin::None {
                why: format!("{why}, and no amdgpu hwmon power file"),
            },
        ),
    }
}

impl GpuSource for AmdSource {
    fn devices(&self) -> &[GpuInfo] {
        &self.devices
    }

    fn take_problems(&mut self) -> Vec<String> {
        std::mem::take(&mut self.problems)
    }

    fn read(&mut self, i: usize) -> Option<GpuReading> {
        let g = self.gpus.get(i)?;
        if g.lost {
            return None;
        }
        if g.files.as_ref().is_some_and(|f| !f.present()) {
            self.gpus[i].lost = true;
            self.note_once(
                i,
                "lost",
                "its device directory is gone (fell off the bus, or unbound): its figures stop \
                 here"
                    .into(),
            );
            return None;
        }
        let pids = self.listing_for(i);
        let now = self.start.elapsed().as_secs_f64();
        let mut r = GpuReading {
            missing: absent_on_amd(),
            ..GpuReading::default()
        };
        let mut notes: Vec<(&'static str, String)> = Vec::new();
        let g = &mut self.gpus[i];
        match &g.files {
            None => {
                for f in [figure::MEMORY, figure::UTILIZATION] {
                    r.missing.push(Missing {
                        figure: f,
                        why: NoData::not_supported("no device files for this GPU"),
                    });
                }
            }
            Some(files) => {
                let mut get = |name: &'static str, fig: &'static str| match files.number(name) {
                    Ok(v) => Some(v),
                    Err(e) => {
                        let why = if e.is_missing() {
                            NoData::not_supported(format!("the GPU has no {name}"))
                        } else {
                            NoData::not_sampled(e.to_string())
                        };
                        notes.push((fig, e.to_string()));
                        r.missing.push(Missing { figure: fig, why });
                        None
                    }
                };
                r.used = get("mem_info_vram_used", figure::MEMORY);
                r.utilization =
                    get("gpu_busy_percent", figure::UTILIZATION).map(|u| u.min(100) as u32);
                let power = match files.power_uw() {
                    Some(Ok(uw)) => Some(uw),
                    Some(Err(e)) => {
                        notes.push(("power", e.to_string()));
                        None
                    }
                    None => None,
                };
                r.power_mw = power.map(|uw| uw / 1000);
                match &mut g.energy {
                    Energy::Accumulator => {
                        match files
                            .gpu_metrics()
                            .map_err(|e| e.to_string())
                            .and_then(|b| metrics::parse_energy_mj(&b).map_err(|e| e.to_string()))
                        {
                            Ok((_, mj)) => r.energy_mj = Some(mj),
                            Err(e) => {
                                notes.push((figure::ENERGY, e.clone()));
                                r.missing.push(Missing {
                                    figure: figure::ENERGY,
                                    why: NoData::not_sampled(e),
                                });
                            }
                        }
                    }
                    Energy::Integral(acc) => match power {
                        Some(uw) => r.energy_mj = Some(acc.add(now, uw)),
                        None => r.missing.push(Missing {
                            figure: figure::ENERGY,
                            why: NoData::not_sampled("the power reading failed"),
                        }),
                    },
                    Energy::None => {}
                }
            }
        }
        if let EnergyOrigin::None { why } = &g.origin {
            r.missing.push(Missing {
                figure: figure::ENERGY,
                why: NoData::not_supported(why.clone()),
            });
        }
        let gpu_id = g.gpu_id;
        match pids {
            Err((missing, e)) => {
                let why = if missing {
                    NoData::not_supported("this kernel has no KFD process files")
                } else {
                    NoData::not_sampled(e.clone())
                };
                notes.push((figure::PROCESS_MEMORY, e));
                for f in [figure::PROCESS_MEMORY, figure::CU_OCCUPANCY] {
                    r.missing.push(Missing {
                        figure: f,
                        why: why.clone(),
                    });
                }
            }
            Ok(pids) => {
                let p = procs::read_gpu(&self.root.join(procs::PROC), &pids, gpu_id);
                r.processes = p.on.iter().map(|o| (o.pid, Some(o.vram))).collect();
                if p.with_files > 0 && p.without_cu == p.with_files {
                    r.missing.push(Missing {
                        figure: figure::CU_OCCUPANCY,
                        why: NoData::not_supported(
                            "this kernel gives no cu_occupancy for this GPU's processes",
                        ),
                    });
                } else {
                    r.process_cu_occupancy = Some(
                        p.on.iter()
                            .filter_map(|o| o.cu.map(|c| (o.pid, c)))
                            .collect(),
                    );
                }
                if let Some(first) = p.problems.first() {
                    notes.push(("kfd", first.clone()));
                }
            }
        }
        for (kind, what) in notes {
            self.note_once(i, kind, what);
        }
        Some(r)
    }
}

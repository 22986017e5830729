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
//!
//! A compute partition of a partitioned GPU ([`partition`]) has no device figures: they are the
//! whole GPU's. Its id carries its number, and its processes' figures are its own.
//!
//! Processes: see [`procs`]; once told the tracked processes
//! ([`GpuSource::track_processes`]), the source reads only their files, and of the others only
//! enough to say whether a GPU is shared.

pub(crate) mod device;
pub(crate) mod energy;
pub mod files;
pub mod metrics;
pub(crate) mod parse;
pub(crate) mod partition;
pub mod procs;
mod sources;
pub(crate) mod topology;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_flood;
#[cfg(test)]
mod tests_partition;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::figures::{NoData, figure};
use super::{GpuInfo, GpuReading, GpuSource, Missing, Vendor};
use device::DeviceFiles;
use energy::{EnergyOrigin, PowerIntegral};
use partition::Partition;
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
    /// The compute partition it is, on a partitioned GPU: then no device file is read.
    partition: Option<Partition>,
    energy: Energy,
    origin: EnergyOrigin,
    lost: bool,
}

/// The KFD process listing shared by the devices' reads of one sample.
struct Listing {
    /// The pids, or whether the directory is missing and what went wrong.
    pids: Result<procs::Listing, (bool, String)>,
    at: Instant,
    /// Devices read from this listing.
    served: Vec<bool>,
    /// Files of processes outside the tracked ones that this sample may still read.
    outside_left: usize,
}

/// AMD GPUs read from the kernel's files under a root.
pub struct AmdSource {
    root: PathBuf,
    devices: Vec<GpuInfo>,
    gpus: Vec<Gpu>,
    listing: Option<Listing>,
    /// The tracked processes, ascending; `None` until told: then every listed one is read.
    tracked: Option<Vec<u32>>,
    /// The most entries of KFD's process directory listed a sample ([`procs::MAX_KFD_ENTRIES`]).
    kfd_cap: usize,
    /// KFD per-process files opened since the start.
    kfd_reads: u64,
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
        let mut located = Vec::new();
        for (index, k) in topo.gpus.iter().enumerate() {
            let mut note = |s: String| problems.push(format!("AMD GPU {index}: {s}"));
            located.push(match k.render_minor {
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
            });
        }
        let parts = partition::find(&topo.gpus, &located);
        for (index, (k, (files, part))) in topo
            .gpus
            .iter()
            .zip(located.into_iter().zip(parts))
            .enumerate()
        {
            let mut note = |s: String| problems.push(format!("AMD GPU {index}: {s}"));
            // A partition's name, memory size and unique id are its device's.
            let device_files = match part.as_ref().and_then(|p| p.device) {
                Some(d) if d != index => topo
                    .gpus
                    .get(d)
                    .and_then(|g| g.render_minor)
                    .and_then(|m| device::locate(root, m).ok()),
                _ => files.clone(),
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
            let unique = device_files
                .as_ref()
                .and_then(|f| f.unique_id())
                .or(k.unique_id);
            let mut uuid = match &pci {
                Some(p) => parse::uuid_of(unique, p),
                None => parse::uuid_of(unique, &format!("kfd-gpu-{}", k.gpu_id)),
            };
            let memory_total = match device_files
                .as_ref()
                .map(|f| f.number("mem_info_vram_total"))
            {
                Some(Ok(b)) => b,
                Some(Err(e)) => {
                    note(format!("memory size unknown (0): {e}"));
                    0
                }
                None => 0,
            };
            let name = device_files
                .as_ref()
                .and_then(|f| f.product_name())
                .unwrap_or_else(|| parse::fallback_name(&k.name));
            let (energy, origin) = match &part {
                Some(p) => {
                    let why = p.why_no_device_figures(pci.as_deref());
                    note(why.clone());
                    uuid = p.id(&uuid);
                    (Energy::None, EnergyOrigin::None { why })
                }
                None => choose_energy(files.as_ref()),
            };
            if part.is_none()
                && let EnergyOrigin::IntegratedPower { .. } | EnergyOrigin::None { .. } = origin
            {
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
                partition: part,
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
            tracked: None,
            kfd_cap: procs::MAX_KFD_ENTRIES,
            kfd_reads: 0,
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

    /// KFD per-process files opened since the start (for tests and the cost bench).
    pub fn kfd_files_read(&self) -> u64 {
        self.kfd_reads
    }

    /// Lists at most `cap` entries of KFD's process directory a sample, and reads at most as
    /// many files of processes outside the tracked ones (tests; the default is
    /// [`procs::MAX_KFD_ENTRIES`]).
    pub fn set_kfd_cap(&mut self, cap: usize) {
        self.kfd_cap = cap;
        self.listing = None;
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
    fn listing_for(&mut self, i: usize) -> Result<procs::Listing, (bool, String)> {
        let stale = match &self.listing {
            None => true,
            Some(l) => l.served.get(i).copied().unwrap_or(true) || l.at.elapsed() > LISTING_MAX_AGE,
        };
        if stale {
            self.listing = Some(Listing {
                pids: procs::list(&self.root, self.kfd_cap)
                    .map_err(|e| (e.is_missing(), e.to_string())),
                at: Instant::now(),
                served: vec![false; self.gpus.len()],
                outside_left: self.kfd_cap,
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

    fn track_processes(&mut self, main: u32, members: &std::collections::HashSet<u32>) {
        let mut t: Vec<u32> = members.iter().copied().collect();
        if main != 0 {
            t.push(main);
        }
        t.sort_unstable();
        t.dedup();
        self.tracked = Some(t);
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
        let device_files = match &g.partition {
            Some(p) => {
                let why = p.why_no_device_figures(self.devices[i].pci_bus_id.as_deref());
                for f in [figure::MEMORY, figure::UTILIZATION] {
                    r.missing.push(Missing {
                        figure: f,
                        why: NoData::not_supported(why.clone()),
                    });
                }
                None
            }
            None => Some(&g.files),
        };
        match device_files {
            // A partition: its reading says why above.
            None => {}
            Some(None) => {
                for f in [figure::MEMORY, figure::UTILIZATION] {
                    r.missing.push(Missing {
                        figure: f,
                        why: NoData::not_supported("no device files for this GPU"),
                    });
                }
            }
            Some(Some(files)) => {
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
            Ok(listing) => {
                let proc_dir = self.root.join(procs::PROC);
                let own = match &self.tracked {
                    Some(t) => procs::tracked_in(&listing, t),
                    None => listing.pids.clone(),
                };
                let mut p = procs::read_gpu(&proc_dir, &own, gpu_id);
                self.kfd_reads += p.reads as u64;
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
                let mut seen_all = !listing.cut;
                if let Some(t) = &self.tracked {
                    let budget = match self.listing.as_mut() {
                        Some(l) => &mut l.outside_left,
                        None => &mut 0,
                    };
                    let o = procs::first_outside(&proc_dir, &listing.pids, t, gpu_id, budget);
                    self.kfd_reads += o.reads as u64;
                    p.problems.extend(o.problems);
                    match o.found {
                        Some(found) => {
                            p.on.push(found);
                            seen_all = true;
                        }
                        None => seen_all &= o.complete,
                    }
                }
                if !seen_all {
                    notes.push((
                        "kfd-cap",
                        format!(
                            "more KFD processes on the node than a sample looks at (it lists at \
                             most {} entries of {} and reads at most as many files of processes \
                             outside the tracked ones): whether another process uses this GPU \
                             is unknown at such samples, and a GPU found unshared there may be \
                             shared; the tracked processes' own figures are read in full",
                            self.kfd_cap,
                            procs::PROC
                        ),
                    ));
                }
                r.processes = p.on.iter().map(|o| (o.pid, Some(o.vram))).collect();
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

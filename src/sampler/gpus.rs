//! Per-GPU and whole-machine GPU figures accumulated over samples.

use crate::history::GpuObservation;
use std::collections::{BTreeMap, HashMap, HashSet};

use super::stats::PercentAcc;
use crate::gpu::figures::{EccCounts, GpuDepth, NoData, Spread, XidError, figure};
use crate::gpu::{GpuInfo, GpuReading, GpuSource};
use crate::tracking_file::Timepoint;
use crate::units::{MemUnit, Units};
use crate::usage::{GpuUsage, GpuUtilization, MaxGpuRam};

/// Most Xid errors a GPU's figures keep (a failing GPU can raise one per sample); the rest are
/// counted in a note.
pub const MAX_XIDS_KEPT: usize = 50;

/// Most processes outside the tracked set whose job is asked per sample (each is a small file
/// read); any beyond are counted as outside the job, so that a crowd on a shared GPU never
/// passes for the job's own.
pub const MAX_JOB_LOOKUPS: usize = 256;

/// Whether a process outside the tracked set belongs to the tracked set's job (another step of
/// it): `Some(true)` it does, `Some(false)` it does not, `None` unknown (it ended meanwhile).
pub type InJob<'a> = dyn FnMut(u32) -> Option<bool> + 'a;

#[derive(Debug, Clone)]
struct DeviceAcc {
    info: GpuInfo,
    selected: bool,
    max_used: u64,
    max_tracked: u64,
    /// The tracked processes' memory at the latest reading (`None`: the driver gave none of it).
    last_tracked: Option<u64>,
    /// The most processes outside the tracked set seen on the device at once.
    others_max: u32,
    /// Whether those processes were told apart by job ([`InJob`]) at some sample.
    scoped: bool,
    /// The most processes of the job's other steps seen on the device at once.
    job_others_max: u32,
    /// The most processes outside the job seen on the device at once.
    outside_max: u32,
    /// The most memory of the job's processes (the tracked ones and the job's other steps')
    /// on the device at once.
    max_job_mem: u64,
    util: PercentAcc,
    /// The tracked processes' summed SM share.
    proc_util: PercentAcc,
    /// The tracked processes' CU occupancy (AMD), percent.
    cu_occ: PercentAcc,
    /// The same at the latest reading.
    last_cu_occ: Option<f64>,
    energy_first: Option<u64>,
    energy_last: Option<u64>,
    /// Power over the latest interval between two readings of the energy counter, watts.
    last_power_w: Option<f64>,
    /// The temperature at the latest reading, degrees Celsius.
    last_temperature_c: Option<u32>,
    /// Readings of the energy counter: one reading measures nothing.
    energy_readings: u32,
    lost: bool,
    /// Readings that gave the device's memory in use.
    memory_readings: u32,
    /// GPM's SM active, SM occupancy, tensor active, DRAM bandwidth.
    gpm: [PercentAcc; 4],
    gpm_readings: u32,
    /// Seconds in each clock event reason, and readings of the reasons.
    throttle: BTreeMap<&'static str, f64>,
    throttle_readings: u32,
    ecc_first: Option<(u64, u64)>,
    ecc_last: Option<(u64, u64)>,
    xids: Vec<XidError>,
    /// Xid errors past [`MAX_XIDS_KEPT`], counted only.
    xids_dropped: u64,
    /// Why a figure had no value, the first time it had none.
    missing: BTreeMap<&'static str, NoData>,
}

impl DeviceAcc {
    fn new(info: GpuInfo, selected: bool) -> DeviceAcc {
        DeviceAcc {
            info,
            selected,
            max_used: 0,
            max_tracked: 0,
            last_tracked: None,
            others_max: 0,
            scoped: false,
            job_others_max: 0,
            outside_max: 0,
            max_job_mem: 0,
            util: PercentAcc::default(),
            proc_util: PercentAcc::default(),
            cu_occ: PercentAcc::default(),
            last_cu_occ: None,
            energy_first: None,
            energy_last: None,
            last_power_w: None,
            last_temperature_c: None,
            energy_readings: 0,
            lost: false,
            memory_readings: 0,
            gpm: Default::default(),
            gpm_readings: 0,
            throttle: BTreeMap::new(),
            throttle_readings: 0,
            ecc_first: None,
            ecc_last: None,
            xids: Vec::new(),
            xids_dropped: 0,
            missing: BTreeMap::new(),
        }
    }

    /// Adds the figures beyond memory and utilization of one reading that stands for `weight`
    /// seconds.
    fn add_depth(&mut self, r: &GpuReading, weight: f64) {
        for m in &r.missing {
            self.missing
                .entry(m.figure)
                .or_insert_with(|| m.why.clone());
        }
        if r.used.is_some() {
            self.memory_readings += 1;
        }
        if let Some(g) = r.gpm {
            let vals = [
                g.sm_active,
                g.sm_occupancy,
                g.tensor_active,
                g.dram_bandwidth,
            ];
            for (acc, v) in self.gpm.iter_mut().zip(vals) {
                if let Some(v) = v {
                    acc.add(v.clamp(0.0, 100.0), weight);
                }
            }
            self.gpm_readings += 1;
        }
        if let Some(bits) = r.throttle {
            self.throttle_readings += 1;
            for name in crate::gpu::figures::throttle_names(bits) {
                *self.throttle.entry(name).or_default() += weight;
            }
        }
        if let Some(e) = r.ecc {
            self.ecc_first.get_or_insert(e);
            self.ecc_last = Some(e);
        }
    }

    /// The figures beyond memory and utilization, each with a value or why it has none.
    fn depth(&self) -> GpuDepth {
        let mut no_data = BTreeMap::new();
        let mut why = |fig: &'static str, sampled: bool, short: &str| {
            if sampled {
                return;
            }
            let nd = self.missing.get(fig).cloned().unwrap_or_else(|| {
                NoData::not_sampled(if self.lost {
                    format!("the GPU was lost before any reading {short}")
                } else {
                    format!("no reading {short} (the run ended before the sampler read it)")
                })
            });
            no_data.insert(fig.to_string(), nd);
        };
        why(figure::MEMORY, self.memory_readings > 0, "of its memory");
        why(
            figure::UTILIZATION,
            !self.util.is_empty(),
            "of its utilization",
        );
        why(
            figure::PROCESS_UTILIZATION,
            !self.proc_util.is_empty(),
            "of its processes' utilization",
        );
        if self.info.vendor == crate::gpu::Vendor::Amd {
            why(
                figure::CU_OCCUPANCY,
                !self.cu_occ.is_empty(),
                "of its processes' CU occupancy",
            );
        }
        why(
            figure::ENERGY,
            self.energy_readings >= 2,
            "of energy at two samples",
        );
        why(
            figure::SM_ACTIVITY,
            self.gpm_readings > 0,
            "of GPM (it needs two samples)",
        );
        why(
            figure::THROTTLE,
            self.throttle_readings > 0,
            "of clock event reasons",
        );
        why(figure::ECC, self.ecc_first.is_some(), "of ECC counters");
        if let Some(nd) = self.missing.get(figure::XID) {
            no_data.insert(figure::XID.to_string(), nd.clone());
        }
        if let Some(nd) = self.missing.get(figure::PROCESS_MEMORY) {
            no_data.insert(figure::PROCESS_MEMORY.to_string(), nd.clone());
        }
        let spread = |a: &PercentAcc| {
            (self.gpm_readings > 0 && !a.is_empty()).then(|| Spread {
                mean: a.mean(),
                max: a.max(),
            })
        };
        GpuDepth {
            process_utilization_percent: (!self.proc_util.is_empty()).then(|| Spread {
                mean: self.proc_util.mean(),
                max: self.proc_util.max(),
            }),
            cu_occupancy_percent: (!self.cu_occ.is_empty()).then(|| Spread {
                mean: self.cu_occ.mean(),
                max: self.cu_occ.max(),
            }),
            sm_active_percent: spread(&self.gpm[0]),
            sm_occupancy_percent: spread(&self.gpm[1]),
            tensor_active_percent: spread(&self.gpm[2]),
            dram_bandwidth_percent: spread(&self.gpm[3]),
            throttle_seconds: (self.throttle_readings > 0).then(|| {
                self.throttle
                    .iter()
                    .map(|(k, v)| (k.to_string(), (v * 1000.0).round() / 1000.0))
                    .collect()
            }),
            xid_errors: (!no_data.contains_key(figure::XID)).then(|| self.xids.clone()),
            ecc_errors: match (self.ecc_first, self.ecc_last) {
                (Some(a), Some(b)) => Some(EccCounts {
                    corrected: b.0.saturating_sub(a.0),
                    uncorrected: b.1.saturating_sub(a.1),
                }),
                _ => None,
            },
            no_data,
        }
    }
}

/// A device's figures at the latest sample ([`GpuAccumulator::latest`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LatestGpu {
    /// Who made it.
    pub vendor: crate::gpu::Vendor,
    /// NVML index.
    pub index: u32,
    /// `GPU-...` or `MIG-...` UUID.
    pub uuid: String,
    /// Memory size, bytes.
    pub memory_total: u64,
    /// Memory of the tracked processes, bytes (`None`: the driver did not say).
    pub tracked_memory: Option<u64>,
    /// Utilization, percent.
    pub utilization_percent: Option<f64>,
    /// GPM's SM activity, percent, where measured.
    pub sm_active_percent: Option<f64>,
    /// The tracked processes' CU occupancy (AMD), percent, where measured.
    pub cu_occupancy_percent: Option<f64>,
    /// Energy since the first reading, joules.
    pub energy_joules: Option<f64>,
    /// Power over the interval between the latest two readings of the energy counter, watts.
    pub power_watts: Option<f64>,
    /// The temperature at the latest reading, degrees Celsius.
    pub temperature_celsius: Option<u32>,
}

/// GPU figures over a run.
#[derive(Debug, Default, Clone)]
pub struct GpuAccumulator {
    select: Option<Vec<String>>,
    devices: Option<Vec<DeviceAcc>>,
    system_max: u64,
    main_max: u64,
    descendants_max: u64,
    combined_max: u64,
    util: PercentAcc,
    /// Each device's reading at the latest sample, for the timeline.
    last: Vec<GpuObservation>,
    /// Devices lost at the latest sample.
    lost_now: Vec<usize>,
}

impl GpuAccumulator {
    /// An accumulator counting `select`ed GPUs (all when `None`) in utilization.
    pub fn new(select: Option<Vec<String>>) -> Self {
        GpuAccumulator {
            select,
            ..Default::default()
        }
    }

    /// `nvml` once a source was read, else `none`.
    pub fn source_name(&self) -> &'static str {
        use crate::gpu::Vendor;
        let Some(d) = self.devices.as_deref() else {
            return "none";
        };
        let has = |v| d.iter().any(|d| d.info.vendor == v);
        match (has(Vendor::Nvidia), has(Vendor::Amd)) {
            (true, true) => "nvml+amd",
            (false, true) => "amd",
            _ => "nvml",
        }
    }

    /// Total GPU memory, GPU count and selected count, as known now.
    pub fn static_info(&self) -> (u64, u32, u32) {
        let d = self.devices.as_deref().unwrap_or(&[]);
        (
            d.iter().map(|d| d.info.memory_total).sum(),
            d.len() as u32,
            d.iter().filter(|d| d.selected).count() as u32,
        )
    }

    /// Reads every device of `src` once. `weight`: the seconds the readings stand for in the
    /// means ([`super::core::sample_weight`]). `in_job`, where the tracked set is one step of a
    /// job, tells the processes of the job's other steps on a device from other jobs'.
    #[allow(clippy::too_many_arguments)]
    pub fn sample(
        &mut self,
        src: &mut dyn GpuSource,
        main: u32,
        members: &HashSet<u32>,
        mut in_job: Option<&mut InJob>,
        weight: f64,
        u: &Units,
        tp: &mut Timepoint,
        notes: &mut Vec<String>,
    ) {
        src.track_processes(main, members);
        let select = self.select.clone();
        let devices = self.devices.get_or_insert_with(|| {
            src.devices()
                .iter()
                .map(|d| {
                    let selected = select.as_ref().is_none_or(|s| s.contains(&d.uuid));
                    DeviceAcc::new(d.clone(), selected)
                })
                .collect()
        });
        self.last.clear();
        self.lost_now.clear();
        let (mut system, mut main_b, mut desc_b) = (0u64, 0u64, 0u64);
        let mut util_sum = 0.0;
        // Each process's job, asked once per sample, and at most MAX_JOB_LOOKUPS of them.
        let mut verdicts: HashMap<u32, Option<bool>> = HashMap::new();
        for (i, d) in devices.iter_mut().enumerate() {
            if d.lost {
                self.last.push(GpuObservation {
                    lost: true,
                    ..GpuObservation::default()
                });
                continue;
            }
            let Some(r) = src.read(i) else {
                d.lost = true;
                self.lost_now.push(i);
                self.last.push(GpuObservation {
                    lost: true,
                    ..GpuObservation::default()
                });
                notes.push(format!(
                    "GPU {} ({}) was lost during the run; its figures stop there",
                    d.info.index, d.info.uuid
                ));
                continue;
            };
            d.add_depth(&r, weight);
            self.last.push(GpuObservation {
                memory_bytes: r.used,
                utilization_percent: r.utilization.map(f64::from),
                energy_mj: r.energy_mj,
                sm_active_percent: r.gpm.and_then(|g| g.sm_active),
                throttle: r.throttle,
                xid: None,
                lost: false,
            });
            let used = r.used.unwrap_or(0);
            system += used;
            d.max_used = d.max_used.max(used);
            let mut tracked = 0;
            // Processes on the GPU that are not the tracked ones. Where the job can be asked
            // (below), one that ended before it was asked is left out: the driver's list can
            // outlive a process (a holder of the step's own, killed between the tree's read
            // and the list's, made a MIG instance "shared" in a CI run).
            if in_job.is_none() {
                let others = r
                    .processes
                    .iter()
                    .filter(|(pid, _)| *pid != main && !members.contains(pid))
                    .count();
                d.others_max = d.others_max.max(others as u32);
            }
            if let Some(samples) = &r.process_utilization {
                let own: u32 = samples
                    .iter()
                    .filter(|(pid, _)| *pid == main || members.contains(pid))
                    .map(|(_, u)| *u)
                    .sum();
                d.proc_util.add(f64::from(own.min(100)), weight);
            }
            // CU occupancy: the tracked processes' compute units with waves in flight, over
            // the device's (a process absent from the list has none).
            d.last_cu_occ = None;
            if let (Some(cus), Some(all)) = (&r.process_cu_occupancy, d.info.compute_units)
                && all > 0
            {
                let own: u64 = cus
                    .iter()
                    .filter(|(pid, _)| *pid == main || members.contains(pid))
                    .map(|(_, n)| u64::from(*n))
                    .sum();
                let pct = (100.0 * own as f64 / f64::from(all)).min(100.0);
                d.cu_occ.add(pct, weight);
                d.last_cu_occ = Some(pct);
            }
            let mut unknown = false;
            for (pid, mem) in &r.processes {
                // Memory the driver cannot report is left out, never guessed.
                let Some(b) = mem else {
                    unknown |= *pid == main || members.contains(pid);
                    continue;
                };
                if *pid == main {
                    main_b += b;
                    tracked += b;
                } else if members.contains(pid) {
                    desc_b += b;
                    tracked += b;
                }
            }
            d.max_tracked = d.max_tracked.max(tracked);
            if let Some(in_job) = in_job.as_mut() {
                let (mut job_others, mut outside, mut job_mem) = (0u32, 0u32, 0u64);
                for (pid, mem) in r.processes.iter() {
                    if *pid == main || members.contains(pid) {
                        continue;
                    }
                    let n = verdicts.len();
                    let verdict = *verdicts.entry(*pid).or_insert_with(|| {
                        if n < MAX_JOB_LOOKUPS {
                            in_job(*pid)
                        } else {
                            Some(false)
                        }
                    });
                    match verdict {
                        Some(true) => {
                            job_others += 1;
                            job_mem = job_mem.saturating_add(mem.unwrap_or(0));
                        }
                        Some(false) => outside += 1,
                        // Ended before its job was read: neither the job's nor another's.
                        None => {}
                    }
                }
                d.scoped = true;
                d.others_max = d.others_max.max(job_others + outside);
                d.job_others_max = d.job_others_max.max(job_others);
                d.outside_max = d.outside_max.max(outside);
                d.max_job_mem = d.max_job_mem.max(tracked.saturating_add(job_mem));
            }
            d.last_tracked = (tracked > 0 || !unknown).then_some(tracked);
            if let Some(pct) = r.utilization {
                d.util.add(f64::from(pct), weight);
                if d.selected {
                    util_sum += f64::from(pct);
                }
            }
            // Power as the energy counter measured it over the interval since the previous
            // reading: a mean over the interval, which no instantaneous reading between two
            // samples can miss a spike of.
            d.last_power_w = match (r.energy_mj, d.energy_last) {
                (Some(e), Some(prev)) if weight > 0.0 && e >= prev => {
                    Some((e - prev) as f64 / 1000.0 / weight)
                }
                _ => None,
            };
            d.last_temperature_c = r.temperature_c;
            if let Some(e) = r.energy_mj {
                d.energy_first.get_or_insert(e);
                d.energy_last = Some(e);
                d.energy_readings = d.energy_readings.saturating_add(1);
            }
        }
        let xids = src.take_xids();
        if !xids.is_empty() {
            let at = chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            for (i, xid) in xids {
                if let Some(d) = devices.get_mut(i) {
                    if d.xids.len() < MAX_XIDS_KEPT {
                        d.xids.push(XidError {
                            at: at.clone(),
                            xid,
                        });
                    } else {
                        d.xids_dropped += 1;
                    }
                }
                if let Some(o) = self.last.get_mut(i) {
                    o.xid = Some(xid);
                }
            }
        }
        let n_sel = devices.iter().filter(|d| d.selected).count() as f64;
        self.system_max = self.system_max.max(system);
        self.main_max = self.main_max.max(main_b);
        self.descendants_max = self.descendants_max.max(desc_b);
        self.combined_max = self.combined_max.max(main_b + desc_b);
        if n_sel > 0.0 {
            self.util.add(util_sum, weight);
        }
        let g = |b: u64| u.gpu_ram.from_bytes(b);
        tp.values[4] = g(main_b);
        tp.values[5] = g(desc_b);
        tp.values[6] = g(main_b + desc_b);
        tp.values[7] = g(system);
        tp.values[8] = util_sum;
        tp.values[9] = if n_sel > 0.0 { util_sum / n_sel } else { 0.0 };
    }

    /// Each device's reading at the latest sample (empty before the first).
    pub fn last_readings(&self) -> &[GpuObservation] {
        &self.last
    }

    /// UUIDs and NVML indices of the devices read (empty before the first reading).
    pub fn devices_seen(&self) -> (Vec<String>, Vec<u32>) {
        let d = self.devices.as_deref().unwrap_or(&[]);
        (
            d.iter().map(|d| d.info.uuid.clone()).collect(),
            d.iter().map(|d| d.info.index).collect(),
        )
    }

    /// Each device's figures as of the latest sample, in the source's order; lost devices are
    /// left out. Cheap: no figure is recomputed over the run.
    pub fn latest(&self) -> Vec<LatestGpu> {
        let d = self.devices.as_deref().unwrap_or(&[]);
        d.iter()
            .zip(&self.last)
            .filter(|(d, _)| !d.lost)
            .map(|(d, o)| LatestGpu {
                vendor: d.info.vendor,
                index: d.info.index,
                uuid: d.info.uuid.clone(),
                memory_total: d.info.memory_total,
                tracked_memory: d.last_tracked,
                utilization_percent: o.utilization_percent,
                sm_active_percent: o.sm_active_percent,
                cu_occupancy_percent: d.last_cu_occ,
                energy_joules: match (d.energy_first, d.energy_last) {
                    (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1000.0),
                    _ => None,
                },
                power_watts: d.last_power_w,
                temperature_celsius: d.last_temperature_c,
            })
            .collect()
    }

    /// Devices (indices) lost at the latest sample.
    pub fn lost_at_last_sample(&self) -> &[usize] {
        &self.lost_now
    }

    /// Final figures: per-GPU entries, the `max_gpu_ram` block, `gpu_utilization`, and notes.
    pub fn finish(&self, u: &Units) -> (Vec<GpuUsage>, MaxGpuRam, GpuUtilization, Vec<String>) {
        let g = |b: u64| u.gpu_ram.from_bytes(b);
        let devices = self.devices.as_deref().unwrap_or(&[]);
        let capacity: u64 = devices.iter().map(|d| d.info.memory_total).sum();
        let n_sel = devices.iter().filter(|d| d.selected).count() as u32;
        let mut notes = Vec::new();
        for d in devices.iter().filter(|d| d.xids_dropped > 0) {
            notes.push(format!(
                "GPU {} ({}) reported {} more Xid error(s) than the {MAX_XIDS_KEPT} kept",
                d.info.index, d.info.uuid, d.xids_dropped
            ));
        }
        if devices.iter().any(|d| d.util.is_empty() && !d.lost) {
            notes.push(
                "a GPU did not report utilization (MIG instances, for one, do not)".to_string(),
            );
        }
        let gpus = devices
            .iter()
            .map(|d| GpuUsage {
                vendor: d.info.vendor,
                index: d.info.index,
                pci_bus_id: d.info.pci_bus_id.clone(),
                uuid: d.info.uuid.clone(),
                name: d.info.name.clone(),
                selected: d.selected,
                unit: u.gpu_ram,
                memory_total: g(d.info.memory_total),
                max_used: g(d.max_used),
                max_tracked: g(d.max_tracked),
                mean_utilization_percent: (!d.util.is_empty()).then(|| d.util.mean()),
                max_utilization_percent: (!d.util.is_empty()).then(|| d.util.max()),
                energy_joules: match (d.energy_first, d.energy_last) {
                    (Some(a), Some(b)) if d.energy_readings >= 2 => {
                        Some(b.saturating_sub(a) as f64 / 1000.0)
                    }
                    _ => None,
                },
                lost: d.lost,
                other_processes: d.others_max,
                other_step_processes: d.scoped.then_some(d.job_others_max),
                outside_job_processes: d.scoped.then_some(d.outside_max),
                max_job_memory: d.scoped.then(|| g(d.max_job_mem)),
                depth: d.depth(),
            })
            .collect();
        let max = MaxGpuRam {
            unit: MemUnit::Gigabytes,
            system_capacity: g(capacity),
            system: g(self.system_max),
            main: g(self.main_max),
            descendants: g(self.descendants_max),
            combined: g(self.combined_max),
        };
        let util = GpuUtilization {
            system_gpu_count: devices.len() as u32,
            n_expected_gpus: n_sel,
            gpu_percentages: self.util.finish(f64::from(n_sel)),
        };
        (gpus, max, util, notes)
    }
}

#[cfg(test)]
mod tests;

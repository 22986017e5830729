//! Per-GPU and whole-machine GPU figures accumulated over samples.

use crate::history::GpuObservation;
use std::collections::HashSet;

use super::stats::PercentAcc;
use crate::gpu::{GpuInfo, GpuSource};
use crate::tracking_file::Timepoint;
use crate::units::{MemUnit, Units};
use crate::usage::{GpuUsage, GpuUtilization, MaxGpuRam};

#[derive(Debug, Clone)]
struct DeviceAcc {
    info: GpuInfo,
    selected: bool,
    max_used: u64,
    max_tracked: u64,
    util: PercentAcc,
    energy_first: Option<u64>,
    energy_last: Option<u64>,
    /// Readings of the energy counter: one reading measures nothing.
    energy_readings: u32,
    lost: bool,
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
        if self.devices.is_some() {
            "nvml"
        } else {
            "none"
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
    /// means ([`super::core::sample_weight`]).
    #[allow(clippy::too_many_arguments)]
    pub fn sample(
        &mut self,
        src: &mut dyn GpuSource,
        main: u32,
        members: &HashSet<u32>,
        weight: f64,
        u: &Units,
        tp: &mut Timepoint,
        notes: &mut Vec<String>,
    ) {
        let select = self.select.clone();
        let devices = self.devices.get_or_insert_with(|| {
            src.devices()
                .iter()
                .map(|d| DeviceAcc {
                    info: d.clone(),
                    selected: select.as_ref().is_none_or(|s| s.contains(&d.uuid)),
                    max_used: 0,
                    max_tracked: 0,
                    util: PercentAcc::default(),
                    energy_first: None,
                    energy_last: None,
                    energy_readings: 0,
                    lost: false,
                })
                .collect()
        });
        self.last.clear();
        self.lost_now.clear();
        let (mut system, mut main_b, mut desc_b) = (0u64, 0u64, 0u64);
        let mut util_sum = 0.0;
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
            self.last.push(GpuObservation {
                memory_bytes: r.used,
                utilization_percent: r.utilization.map(f64::from),
                energy_mj: r.energy_mj,
                lost: false,
            });
            let used = r.used.unwrap_or(0);
            system += used;
            d.max_used = d.max_used.max(used);
            let mut tracked = 0;
            for (pid, mem) in &r.processes {
                // Memory the driver cannot report is left out, never guessed.
                let Some(b) = mem else { continue };
                if *pid == main {
                    main_b += b;
                    tracked += b;
                } else if members.contains(pid) {
                    desc_b += b;
                    tracked += b;
                }
            }
            d.max_tracked = d.max_tracked.max(tracked);
            if let Some(pct) = r.utilization {
                d.util.add(f64::from(pct), weight);
                if d.selected {
                    util_sum += f64::from(pct);
                }
            }
            if let Some(e) = r.energy_mj {
                d.energy_first.get_or_insert(e);
                d.energy_last = Some(e);
                d.energy_readings = d.energy_readings.saturating_add(1);
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
        if devices.iter().any(|d| d.util.is_empty() && !d.lost) {
            notes.push(
                "a GPU did not report utilization (MIG instances, for one, do not)".to_string(),
            );
        }
        let gpus = devices
            .iter()
            .map(|d| GpuUsage {
                index: d.info.index,
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
mod tests {
    use super::*;
    use crate::gpu::GpuReading;

    /// One GPU whose utilization is the next of `pcts` at each reading.
    struct Fake {
        devices: Vec<GpuInfo>,
        pcts: Vec<u32>,
    }

    impl GpuSource for Fake {
        fn devices(&self) -> &[GpuInfo] {
            &self.devices
        }
        fn read(&mut self, _: usize) -> Option<GpuReading> {
            Some(GpuReading {
                used: Some(1),
                utilization: Some(self.pcts.remove(0)),
                energy_mj: None,
                processes: Vec::new(),
            })
        }
    }

    #[test]
    fn utilization_means_weigh_each_reading_by_the_time_it_stands_for() {
        let info = GpuInfo {
            index: 0,
            minor: Some(0),
            uuid: "GPU-0".into(),
            name: "G".into(),
            memory_total: 10,
        };
        let mut src = Fake {
            devices: vec![info],
            pcts: vec![100, 0, 90],
        };
        let mut acc = GpuAccumulator::new(None);
        let u = Units::default();
        let interval = std::time::Duration::from_secs(1);
        // Samples 1 s (the first), 3 s (backed off) and 0.5 s (a mark) apart.
        for since in [None, Some(3.0), Some(0.5)] {
            let w = super::super::core::sample_weight(since, interval);
            let mut tp = Timepoint::default();
            acc.sample(
                &mut src,
                1,
                &HashSet::new(),
                w,
                &u,
                &mut tp,
                &mut Vec::new(),
            );
        }
        let (gpus, _, util, _) = acc.finish(&u);
        let mean = (100.0 + 0.0 * 3.0 + 90.0 * 0.5) / 4.5;
        assert_eq!(gpus[0].mean_utilization_percent, Some(mean));
        assert_eq!(util.gpu_percentages.mean_sum_percent, mean);
        assert_eq!(gpus[0].max_utilization_percent, Some(100.0));
    }
}

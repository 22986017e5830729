//! The GPU figures' accumulation over samples.

use super::*;

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
            ..GpuReading::default()
        })
    }
}

#[test]
fn utilization_means_weigh_each_reading_by_the_time_it_stands_for() {
    let info = GpuInfo {
        vendor: crate::gpu::Vendor::Nvidia,
        pci_bus_id: None,
        compute_units: None,
        index: 0,
        minor: Some(0),
        uuid: "GPU-0".into(),
        name: "G".into(),
        memory_total: 10,
        mig: None,
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
            None,
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

/// One GPU that answers `reading` at every sample.
struct Same(Vec<GpuInfo>, GpuReading);

impl GpuSource for Same {
    fn devices(&self) -> &[GpuInfo] {
        &self.0
    }
    fn read(&mut self, _: usize) -> Option<GpuReading> {
        Some(self.1.clone())
    }
}

fn depth_after(samples: usize, reading: GpuReading) -> GpuDepth {
    usage_after(samples, reading).depth
}

fn usage_after(samples: usize, reading: GpuReading) -> crate::usage::GpuUsage {
    let info = GpuInfo {
        vendor: crate::gpu::Vendor::Nvidia,
        pci_bus_id: None,
        compute_units: None,
        index: 0,
        minor: None,
        uuid: "GPU-0".into(),
        name: "G".into(),
        memory_total: 10,
        mig: None,
    };
    let mut src = Same(vec![info], reading);
    let mut acc = GpuAccumulator::new(None);
    let u = Units::default();
    for _ in 0..samples {
        let mut tp = Timepoint::default();
        let mut notes = Vec::new();
        acc.sample(
            &mut src,
            1,
            &HashSet::new(),
            None,
            1.0,
            &u,
            &mut tp,
            &mut notes,
        );
    }
    acc.finish(&u).0.pop().expect("one GPU")
}

#[test]
fn on_a_gpu_others_use_the_runs_own_share_and_the_others_are_counted() {
    // The run's main process is pid 1; pids 7 and 8 are someone else's.
    let shared = GpuReading {
        used: Some(600),
        utilization: Some(90),
        processes: vec![(1, Some(100)), (7, Some(200)), (8, None)],
        process_utilization: Some(vec![(1, 30), (7, 50), (8, 10)]),
        ..GpuReading::default()
    };
    let g = usage_after(3, shared);
    assert_eq!(g.other_processes, 2);
    // Figures in gigabytes: only pid 1's 100 bytes are the run's.
    assert_eq!((g.max_tracked * 1e9).round(), 100.0);
    assert_eq!((g.max_used * 1e9).round(), 600.0);
    let own = g.depth.process_utilization_percent.expect("measured");
    assert_eq!((own.mean, own.max), (30.0, 30.0));
    assert_eq!(g.mean_utilization_percent, Some(90.0));
}

#[test]
fn a_step_tells_its_jobs_other_steps_on_a_gpu_from_other_jobs() {
    // The step's process is pid 1; pids 7 and 9 are the job's other steps' (9 with memory the
    // driver cannot tell), pid 8 another job's, pid 10 ended before its job could be read.
    let reading = GpuReading {
        used: Some(1000),
        processes: vec![
            (1, Some(100)),
            (7, Some(200)),
            (8, Some(300)),
            (9, None),
            (10, Some(50)),
        ],
        ..GpuReading::default()
    };
    let info = GpuInfo::for_test(0, None);
    let mut src = Same(vec![info], reading);
    let mut acc = GpuAccumulator::new(None);
    let u = Units {
        gpu_ram: crate::units::MemUnit::Bytes,
        ..Units::default()
    };
    let mut asked = Vec::new();
    let mut in_job = |pid: u32| {
        asked.push(pid);
        match pid {
            7 | 9 => Some(true),
            8 => Some(false),
            _ => None,
        }
    };
    let mut tp = Timepoint::default();
    acc.sample(
        &mut src,
        1,
        &HashSet::new(),
        Some(&mut in_job),
        1.0,
        &u,
        &mut tp,
        &mut Vec::new(),
    );
    let g = acc.finish(&u).0.pop().expect("one GPU");
    assert_eq!(
        asked,
        [7, 8, 9, 10],
        "only processes outside the step are asked"
    );
    // Pid 10 ended before the job was asked (the driver's list outlives a process): no
    // one's, and no sign that another process shares the GPU.
    assert_eq!(g.other_processes, 3);
    assert_eq!(g.other_step_processes, Some(2));
    assert_eq!(g.outside_job_processes, Some(1));
    // The job's memory: its own 100 bytes and the other steps' known 200, at one reading.
    assert_eq!(g.max_tracked, 100.0);
    assert_eq!(g.max_job_memory, Some(300.0));
    // A run that is not a job's step tells none of it.
    let plain = usage_after(
        1,
        GpuReading {
            processes: vec![(1, Some(100)), (7, Some(200))],
            ..GpuReading::default()
        },
    );
    assert_eq!(plain.other_processes, 1);
    assert_eq!(
        (plain.other_step_processes, plain.outside_job_processes),
        (None, None)
    );
    assert_eq!(plain.max_job_memory, None);
}

#[test]
fn past_the_lookup_bound_a_process_counts_as_outside_the_job() {
    let processes: Vec<(u32, Option<u64>)> = (0..MAX_JOB_LOOKUPS as u32 + 10)
        .map(|p| (100 + p, Some(1)))
        .collect();
    let reading = GpuReading {
        used: Some(1),
        processes,
        ..GpuReading::default()
    };
    let mut src = Same(vec![GpuInfo::for_test(0, None)], reading);
    let mut acc = GpuAccumulator::new(None);
    let u = Units::default();
    let mut asked = 0;
    let mut in_job = |_| {
        asked += 1;
        Some(true)
    };
    let mut tp = Timepoint::default();
    acc.sample(
        &mut src,
        1,
        &HashSet::new(),
        Some(&mut in_job),
        1.0,
        &u,
        &mut tp,
        &mut Vec::new(),
    );
    let g = acc.finish(&u).0.pop().expect("one GPU");
    assert_eq!(asked, MAX_JOB_LOOKUPS);
    assert_eq!(g.other_step_processes, Some(MAX_JOB_LOOKUPS as u32));
    assert_eq!(g.outside_job_processes, Some(10));
}
#[test]
fn a_figure_is_measured_zero_not_supported_or_not_sampled_and_never_a_false_zero() {
    use crate::gpu::figures::{NOT_SAMPLED, NOT_SUPPORTED};
    use crate::gpu::{GpmReading, Missing};
    // Measured zero: a value of 0 and no "no data".
    let zero = GpuReading {
        used: Some(0),
        utilization: Some(0),
        energy_mj: Some(5),
        gpm: Some(GpmReading {
            sm_active: Some(0.0),
            ..GpmReading::default()
        }),
        throttle: Some(0),
        ecc: Some((0, 0)),
        // Another process ran (pid 7 is none of the run's): the run's own share is 0.
        process_utilization: Some(vec![(7, 60)]),
        ..GpuReading::default()
    };
    let d = depth_after(2, zero.clone());
    assert_eq!(d.sm_active_percent.map(|s| s.max), Some(0.0));
    assert_eq!(d.process_utilization_percent.map(|s| s.max), Some(0.0));
    assert_eq!(d.throttle_seconds, Some(Default::default()));
    assert_eq!(d.ecc_errors.map(|e| e.corrected), Some(0));
    assert_eq!(d.xid_errors, Some(vec![]));
    assert!(d.no_data.is_empty(), "{:?}", d.no_data);
    // Not supported: null, and the driver's reason.
    let unsupported = GpuReading {
        gpm: None,
        missing: vec![Missing {
            figure: figure::SM_ACTIVITY,
            why: NoData::not_supported("this GPU has no GPM"),
        }],
        ..zero.clone()
    };
    let d = depth_after(2, unsupported);
    assert_eq!(d.sm_active_percent, None);
    assert_eq!(d.no_data[figure::SM_ACTIVITY].kind, NOT_SUPPORTED);
    assert_eq!(d.no_data[figure::SM_ACTIVITY].why, "this GPU has no GPM");
    // Not sampled: no reading at all, or a single one where a figure needs two.
    let d = GpuDepth::unsampled("the step ended before its first GPU reading");
    for f in [
        figure::MEMORY,
        figure::UTILIZATION,
        figure::ENERGY,
        figure::SM_ACTIVITY,
    ] {
        assert_eq!(d.no_data[f].kind, NOT_SAMPLED, "{f}");
    }
    let first = GpuReading { gpm: None, ..zero };
    let d = depth_after(1, first);
    assert_eq!(d.no_data[figure::ENERGY].kind, NOT_SAMPLED);
    assert_eq!(d.no_data[figure::SM_ACTIVITY].kind, NOT_SAMPLED);
    assert!(!d.no_data.contains_key(figure::UTILIZATION));
}

#[test]
fn the_latest_figures_are_the_last_readings_with_energy_since_the_first() {
    let info = GpuInfo {
        vendor: crate::gpu::Vendor::Nvidia,
        pci_bus_id: None,
        compute_units: None,
        index: 3,
        minor: None,
        uuid: "GPU-3".into(),
        name: "G".into(),
        memory_total: 10,
        mig: None,
    };
    let reading = |util, energy_mj, mine: Option<u64>| GpuReading {
        used: Some(600),
        utilization: Some(util),
        energy_mj: Some(energy_mj),
        // pid 1 is the run's, pid 7 someone else's.
        processes: vec![(1, mine), (7, Some(200))],
        // The temperature follows the utilization, so each reading has its own.
        temperature_c: Some(30 + util / 2),
        ..GpuReading::default()
    };
    let mut acc = GpuAccumulator::new(None);
    assert!(acc.latest().is_empty(), "no reading yet");
    let u = Units::default();
    let sample = |acc: &mut GpuAccumulator, r: GpuReading| {
        let mut src = Same(vec![info.clone()], r);
        let mut tp = Timepoint::default();
        acc.sample(
            &mut src,
            1,
            &HashSet::new(),
            None,
            1.0,
            &u,
            &mut tp,
            &mut Vec::new(),
        );
    };
    sample(&mut acc, reading(80, 5_000, Some(100)));
    sample(&mut acc, reading(20, 7_500, Some(300)));
    let l = acc.latest();
    assert_eq!(
        l,
        vec![LatestGpu {
            vendor: crate::gpu::Vendor::Nvidia,
            index: 3,
            uuid: "GPU-3".into(),
            memory_total: 10,
            tracked_memory: Some(300),
            utilization_percent: Some(20.0),
            sm_active_percent: None,
            cu_occupancy_percent: None,
            energy_joules: Some(2.5),
            // 2.5 J over the 1 s between the two readings.
            power_watts: Some(2.5),
            // The latest reading's, not the first's (70).
            temperature_celsius: Some(40),
        }]
    );
    // The driver does not say the run's process's memory: unknown, not 0.
    sample(&mut acc, reading(20, 7_500, None));
    assert_eq!(acc.latest()[0].tracked_memory, None);
    // The counter did not move over the last second: no power, while the energy stays.
    assert_eq!(acc.latest()[0].power_watts, Some(0.0));
    assert_eq!(acc.latest()[0].energy_joules, Some(2.5));
}

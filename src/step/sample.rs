//! One sample of a step: its processes (a bounded number per sample), its cgroups, and its
//! GPUs through NVML, narrowed to the devices Slurm allocated.

use std::time::Instant;

use super::procs;
use super::setup::StepSetup;
use super::state::{Acc, Inner, Work};
use crate::cgroup::{CgroupError, CgroupReading};
use crate::gpu::{GpuInfo, GpuReading, GpuSource, LazyGpu};
use crate::gres::Target;
use crate::history::Observation;
use crate::proc::ProcFs;
use crate::sampler::Timepoint;
use crate::sampler::core::sample_weight;
use crate::sampler::procsum::ProcSum;
use crate::units::{MemUnit, TimeUnit, Units};

/// A GPU source restricted to the step's allocated devices.
struct Allocated {
    inner: Box<dyn GpuSource>,
    map: Vec<usize>,
    devices: Vec<GpuInfo>,
}

impl GpuSource for Allocated {
    fn devices(&self) -> &[GpuInfo] {
        &self.devices
    }
    fn read(&mut self, i: usize) -> Option<GpuReading> {
        self.inner.read(*self.map.get(i)?)
    }
    fn track_processes(&mut self, main: u32, members: &std::collections::HashSet<u32>) {
        self.inner.track_processes(main, members);
    }
    fn take_problems(&mut self) -> Vec<String> {
        self.inner.take_problems()
    }
    fn take_xids(&mut self) -> Vec<(usize, u64)> {
        // Another job's GPU's errors are not this step's news.
        self.inner
            .take_xids()
            .into_iter()
            .filter_map(|(i, x)| Some((self.map.iter().position(|&m| m == i)?, x)))
            .collect()
    }
}

/// Slurm's GPU indices mapped to NVML devices (position in `devices`). `targets` is Slurm's
/// index → target table ([`crate::gres::GpuOrder::targets`]): index `a` is the whole GPU or
/// MIG instance `targets[a]`. Without a table (`None`: the order is unknown) the index is taken
/// for a whole GPU's minor number, or for NVML's index where NVML gives no minors: the old
/// assumption, which the record's `gpu_mapping` then names.
pub fn map_allocated(
    alloc: &[u32],
    devices: &[GpuInfo],
    targets: Option<&[Option<Target>]>,
) -> Vec<(u32, usize)> {
    let by_minor = devices.iter().all(|d| d.minor.is_some());
    let whole = |d: &GpuInfo| d.mig.is_none();
    alloc
        .iter()
        .filter_map(|&a| {
            let found = match targets {
                Some(table) => {
                    let t = (*table.get(a as usize)?)?;
                    devices.iter().position(|d| t.is(d))
                }
                None if by_minor => devices.iter().position(|d| whole(d) && d.minor == Some(a)),
                None => devices.iter().position(|d| whole(d) && d.index == a),
            };
            found.map(|i| (a, i))
        })
        .collect()
}

pub(super) fn sample(
    inner: &Inner,
    procfs: &ProcFs,
    acc: &mut Acc,
    work: &mut Work,
    gpu: &mut LazyGpu,
) {
    let t0 = Instant::now();
    let s = &inner.setup;
    let (tasks, step_cg, job_cg) = {
        let sh = inner.lock();
        (
            sh.tasks
                .iter()
                .filter(|t| !t.ended)
                .map(|t| (t.pid, t.cgroup.clone()))
                .collect::<Vec<_>>(),
            sh.step_cgroup.clone(),
            sh.job_cgroup.clone(),
        )
    };
    let job_reading = job_cg.as_ref().and_then(|c| c.read().ok());
    // The processes: a bounded number read per sample, in turns (see `procs`).
    let budget = s.interval.mul_f64(procs::PROCESS_TIME_SHARE);
    let found = work.procs.sample(procfs, &tasks, budget);
    acc.most_processes = acc.most_processes.max(found.members.len());
    if found.partial() {
        acc.partial_samples += 1;
    }
    if found.walk_cut {
        acc.note(format!(
            "tasks without a cgroup of their own are walked at most {} processes deep per \
             sample: processes beyond were not seen",
            procs::MAX_PROCESSES_WALKED
        ));
    }
    let mut all_members = found.members.clone();
    let mut step_procs = ProcSum::default();
    for t in &found.tasks {
        step_procs.merge(&t.procs);
    }
    let (step_mem, cpu_sum) = (step_procs.mem, step_procs.cpu);
    acc.sampled_peak_rss.update(step_mem, 0);
    let step_reading = match step_cg.as_ref().map(|c| c.read()) {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            if let Some(e) = cgroup_fault(e, !tasks.is_empty()) {
                acc.cgroup_misses += 1;
                if acc.cgroup_first_miss.is_none() {
                    acc.cgroup_first_miss =
                        Some(format!("{}: {e}", chrono::Local::now().format("%H:%M:%S")));
                }
            }
            None
        }
        None => None,
    };
    if let Some(cg) = &step_cg {
        if let Ok(p) = cg.procs() {
            all_members.extend(p);
        }
    }
    let pressure = step_cg
        .as_ref()
        .map(|c| (crate::clock::unix_now(), c.pressure()));
    // CPU: the cgroup's counter when there is one, else the tasks' sampled sum.
    let cpu_now = step_reading
        .and_then(|r| r.cpu_ns)
        .map_or(cpu_sum, |ns| ns as f64 / 1e9);
    let now = Instant::now();
    let since_previous = work
        .last_cpu
        .map(|(t, _)| now.duration_since(t).as_secs_f64());
    let mut cores_busy = None;
    if let (Some((_, c)), Some(dt)) = (work.last_cpu, since_previous) {
        acc.max_cpu.interval(cpu_now - c, dt);
        cores_busy = (dt > 0.0).then(|| ((cpu_now - c) / dt).max(0.0));
    }
    work.last_cpu = Some((now, cpu_now));

    let (step_known, pressure_now) = {
        let mut sh = inner.lock();
        let mut pressure_now = None;
        if let Some((unix, p)) = pressure.clone() {
            sh.pressure.observe(unix, p.clone(), false);
            pressure_now = Some(sh.pressure.shown(p));
        }
        if let Some(r) = step_reading {
            sh.last_step = Some(r);
            if sh.final_step.is_none() {
                sh.step_needed.observe(&r);
            }
        }
        // Not after the last task ended: that reading is final.
        if let Some(r) = job_reading.filter(|_| sh.tasks.iter().any(|t| !t.ended)) {
            sh.job_reading = Some(r);
            sh.job_needed.observe(&r);
        }
        for f in &found.tasks {
            if let Some(t) = sh.tasks.iter_mut().find(|t| t.pid == f.pid) {
                let f = f.procs;
                t.peak_rss.update(f.mem, f.hwm);
                t.largest_hwm = t.largest_hwm.max(f.hwm);
                t.cpu_sampled = t.cpu_sampled.max(f.cpu);
                // A task listed with no process (it ended between its exit and this sample, or
                // its processes are not in its cgroup yet) was not seen: no count of nothing.
                // Its threads are known only from processes read (a large step is read in
                // turns, and a short task may end before its turn).
                if f.processes > 0 {
                    t.max_processes = Some(t.max_processes.unwrap_or(0).max(f.processes));
                }
                if f.read > 0 {
                    t.max_threads = Some(t.max_threads.unwrap_or(0).max(f.threads));
                }
                acc.largest_hwm = acc.largest_hwm.max(f.hwm);
            }
        }
        (sh.last_step, pressure_now)
    };
    // For the live state: as the record has them, as of this sample.
    let memory_now = step_known
        .and_then(|r| r.current)
        .or((!found.tasks.is_empty()).then(|| step_mem.total()));
    let sampled_peak = acc.sampled_peak_rss.total.max(acc.largest_hwm);
    let peak = step_known.and_then(|r| r.peak).unwrap_or(sampled_peak);
    acc.latest = super::state::Latest {
        memory_bytes: memory_now,
        memory_peak_bytes: Some(peak.max(memory_now.unwrap_or(0))),
        memory_limit_bytes: step_known
            .and_then(|r| r.limit)
            .or(job_reading.and_then(|r| r.limit)),
        cpu_seconds: Some(cpu_now),
        cores_busy,
        pressure: pressure_now,
    };

    let mut unavailable = None;
    if let Some(src) = gpu.get(false, &mut |m| unavailable = Some(m)) {
        // NVML may open descriptors at any call: those too are marked close-on-exec.
        let ((), marked) = crate::gpu::cloexec::marking(|| {
            gpu_sample(
                s,
                acc,
                src,
                &all_members,
                (job_cg.as_ref(), step_cg.as_ref()),
                procfs,
                sample_weight(since_previous, s.interval),
            )
        });
        acc.nvml_cloexec += marked as u64;
    }
    if let Some(m) = unavailable {
        acc.fault(format!("GPUs not tracked: {m}"));
    }
    observe(
        inner,
        acc,
        (step_reading, job_reading),
        step_mem.total(),
        cpu_now,
        pressure.and_then(|(_, p)| p.ok()),
    );
    let us = t0.elapsed().as_secs_f64() * 1e6;
    acc.samples += 1;
    acc.sample_us_total += us;
    acc.sample_us_max = acc.sample_us_max.max(us);
    acc.last_sample = Some(chrono::Local::now());
}

/// Adds the sample to the step's history. The memory alert of a batch step watches the job's
/// cgroup against the job's limit (every step of the job on the node); other steps their own.
fn observe(
    inner: &Inner,
    acc: &mut Acc,
    (step, job): (Option<CgroupReading>, Option<CgroupReading>),
    sampled: u64,
    cpu_now: f64,
    pressure: Option<crate::cgroup::pressure::PressureTotals>,
) {
    let unix = crate::clock::unix_now();
    let batch = inner.setup.step.id == "batch";
    let limit = step
        .and_then(|r| r.limit)
        .or(inner.setup.step.alloc_memory_bytes)
        .or(job.and_then(|r| r.limit));
    let (watched, watched_limit) = match job {
        Some(j) if batch && j.limit.is_some() => (j.current, j.limit),
        _ => (step.and_then(|r| r.current), limit),
    };
    // The GPUs go by Slurm's index in the step's events.
    let ids = acc
        .gpu_devices
        .iter()
        .map(|(a, d)| a.unwrap_or(d.index))
        .collect();
    let mut h = inner.history();
    h.set_memory_limit(watched_limit);
    acc.history.observe(
        &mut h,
        &acc.gpu,
        Some(ids),
        Observation {
            unix,
            memory_bytes: step.and_then(|r| r.current).unwrap_or(sampled),
            alert_memory_bytes: watched,
            cpu_seconds: Some(cpu_now),
            gpus: Vec::new(),
            oom_kills: step.and_then(|r| r.oom_kills),
            limit_hits: step.and_then(|r| r.limit_hits),
            pressure,
        },
    );
}

/// Whether a failed reading of the step's cgroup is a fault to count: `None` when it is not.
/// A cgroup directory that still holds a process cannot be removed, so one that is gone held
/// none: the step's tasks ended and Slurm removed it, a race with the step's last sample that
/// every short step may lose. Nor is any failure once no task is left. Anything else (the
/// directory there but its files missing or unreadable) is.
fn cgroup_fault(e: CgroupError, tasks_left: bool) -> Option<CgroupError> {
    match e {
        CgroupError::Gone(_) => None,
        e if tasks_left => Some(e),
        _ => None,
    }
}

/// Reads the step's GPUs once (narrowing the source to them at the first reading); the
/// readings stand for `weight` seconds. A process on them outside the step's known processes is
/// the job's own when it is in the job's cgroup (another step's, unless it is in the step's own
/// cgroup: a process of the step the sampler has not counted yet), else another job's.
fn gpu_sample(
    s: &StepSetup,
    acc: &mut Acc,
    src: &mut Box<dyn GpuSource>,
    all_members: &std::collections::HashSet<u32>,
    (job, step): (
        Option<&crate::cgroup::Cgroup>,
        Option<&crate::cgroup::Cgroup>,
    ),
    procfs: &ProcFs,
    weight: f64,
) {
    if !acc.gpu_opened {
        // First reading: narrow the source to the step's GPUs, once.
        acc.gpu_opened = true;
        acc.nvml_cloexec += src.descriptors_marked_cloexec() as u64;
        let table = s.gpu_order.targets(src.devices());
        let pairs = map_allocated(&s.step.alloc_gpus, src.devices(), table.as_deref());
        let source = s
            .gres_conf
            .as_ref()
            .map_or_else(|| "gres.conf".into(), |p| p.display().to_string());
        acc.notes.push(s.gpu_order.describe(&source));
        acc.gpu_mapping = Some(s.gpu_order.method().into());
        if pairs.len() < s.step.alloc_gpus.len() {
            acc.notes.push(format!(
                "Slurm allocated GPUs {:?} but NVML shows {} device(s); {} matched",
                s.step.alloc_gpus,
                src.devices().len(),
                pairs.len()
            ));
        }
        acc.gpu_devices = pairs
            .iter()
            .map(|&(a, i)| (Some(a), src.devices()[i].clone()))
            .collect();
        let full = std::mem::replace(src, Box::new(NoGpu));
        *src = Box::new(Allocated {
            devices: acc.gpu_devices.iter().map(|(_, d)| d.clone()).collect(),
            map: pairs.iter().map(|&(_, i)| i).collect(),
            inner: full,
        });
    }
    let units = Units {
        ram: MemUnit::Bytes,
        gpu_ram: MemUnit::Bytes,
        time: TimeUnit::Seconds,
    };
    let mut tp = Timepoint::default();
    let mut notes = Vec::new();
    let mut in_job = |pid| super::cgroups::in_job(job?, step, &s.cgroup_root, procfs, pid);
    acc.gpu.sample(
        src.as_mut(),
        0,
        all_members,
        job.is_some().then_some(&mut in_job as &mut _),
        weight,
        &units,
        &mut tp,
        &mut notes,
    );
    // The accumulator's notes say a GPU was lost or never reported: faults, as are the
    // queries a device failed.
    for n in notes.into_iter().chain(src.take_problems()) {
        acc.fault(n);
    }
}

struct NoGpu;

impl GpuSource for NoGpu {
    fn devices(&self) -> &[GpuInfo] {
        &[]
    }
    fn read(&mut self, _: usize) -> Option<GpuReading> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, minor: Option<u32>) -> GpuInfo {
        GpuInfo::for_test(index, minor)
    }

    /// Three GPUs, each reporting an Xid (79 + its index) at once.
    struct Xids(Vec<GpuInfo>);

    impl GpuSource for Xids {
        fn devices(&self) -> &[GpuInfo] {
            &self.0
        }
        fn read(&mut self, _: usize) -> Option<GpuReading> {
            None
        }
        fn take_xids(&mut self) -> Vec<(usize, u64)> {
            (0..self.0.len()).map(|i| (i, 79 + i as u64)).collect()
        }
    }

    #[test]
    fn a_step_sees_the_xid_errors_of_its_own_gpus_only() {
        let all = vec![gpu(0, None), gpu(1, None), gpu(2, None)];
        let mut a = Allocated {
            inner: Box::new(Xids(all.clone())),
            map: vec![2, 0],
            devices: vec![all[2].clone(), all[0].clone()],
        };
        assert_eq!(a.take_xids(), vec![(1, 79), (0, 81)]);
    }

    #[test]
    fn slurm_indices_map_through_the_minor_table() {
        // NVML index 0 is minor 7, index 1 is minor 4; Slurm's index 0 is the minor-4 file.
        let devs = [gpu(0, Some(7)), gpu(1, Some(4))];
        let g = |m: u32| Some(Target::Gpu(m));
        let table = [g(4), g(7)];
        assert_eq!(map_allocated(&[0], &devs, Some(&table)), vec![(0, 1)]);
        assert_eq!(
            map_allocated(&[1, 0], &devs, Some(&table)),
            vec![(1, 0), (0, 1)]
        );
        // Beyond the table, or a file with no minor, or a minor NVML lacks: not mapped.
        assert_eq!(map_allocated(&[2], &devs, Some(&table)), vec![]);
        assert_eq!(map_allocated(&[0], &devs, Some(&[None])), vec![]);
        assert_eq!(map_allocated(&[0], &devs, Some(&[g(5)])), vec![]);
        // A subset: gres.conf names /dev/nvidia[2-3] of four GPUs.
        let four = [
            gpu(0, Some(0)),
            gpu(1, Some(1)),
            gpu(2, Some(2)),
            gpu(3, Some(3)),
        ];
        let subset = [g(2), g(3)];
        assert_eq!(
            map_allocated(&[0, 1], &four, Some(&subset)),
            vec![(0, 2), (1, 3)]
        );
    }

    #[test]
    fn without_a_table_the_index_is_taken_for_the_minor() {
        let devs = [gpu(0, Some(1)), gpu(1, Some(0))];
        assert_eq!(map_allocated(&[0], &devs, None), vec![(0, 1)]);
        assert_eq!(map_allocated(&[1, 5], &devs, None), vec![(1, 0)]);
        let no_minor = [gpu(0, None), gpu(1, Some(0))];
        assert_eq!(map_allocated(&[1], &no_minor, None), vec![(1, 1)]);
        // A MIG instance (here sharing its parent's minor 1) is never taken for a whole GPU.
        let mut mig = gpu(2, Some(1));
        mig.mig = Some(crate::gpu::MigInfo {
            parent_uuid: "GPU-0".into(),
            parent_index: 0,
            profile: "1g.10gb".into(),
            gpu_instance_id: 1,
            compute_instance_id: 0,
            mig_index: 0,
        });
        assert_eq!(
            map_allocated(&[1], &[mig.clone(), devs[0].clone()], None),
            vec![(1, 1)]
        );
        let cap = crate::gres::Capability {
            gpu_minor: 1,
            gpu_instance: 1,
            compute_instance: None,
        };
        let t = [Some(Target::Mig(cap))];
        assert_eq!(
            map_allocated(&[0], &[devs[0].clone(), mig], Some(&t)),
            vec![(0, 1)]
        );
    }

    #[test]
    fn a_step_cgroup_removed_after_its_tasks_is_no_fault_but_one_without_its_files_is() {
        use crate::cgroup::Cgroup;
        use crate::cgroup::fixture::TempTree;
        let t = TempTree::new("sample-cg");
        let d = "system.slice/n1_slurmstepd.scope/job_7/step_batch";
        t.write(&format!("{d}/memory.current"), "4096\n")
            .write(&format!("{d}/cgroup.procs"), "");
        let cg = Cgroup::from_proc_cgroup(t.path(), &format!("0::/{d}\n")).unwrap();
        assert!(cg.read().is_ok());
        // Its usage file gone from a directory still there (another filesystem over it):
        // a fault while a task runs, none once no task is left.
        std::fs::remove_file(t.path().join(d).join("memory.current")).unwrap();
        let e = cg.read().unwrap_err();
        assert!(matches!(e, CgroupError::Io(..)), "{e}");
        assert!(cgroup_fault(e, true).is_some());
        assert!(cgroup_fault(cg.read().unwrap_err(), false).is_none());
        // The directory removed (Slurm does once the step's processes ended): never a fault,
        // even when the sampler has not yet been told that the tasks ended.
        std::fs::remove_dir_all(t.path().join(d)).unwrap();
        let e = cg.read().unwrap_err();
        assert!(matches!(e, CgroupError::Gone(_)), "{e}");
        assert!(cgroup_fault(e, true).is_none());
    }
}

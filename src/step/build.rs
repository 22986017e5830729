//! The step's record, built from what the sampler thread and the task callbacks gathered.

use super::procs;
use super::record::{SCHEMA, SCHEMA_VERSION, TaskRecord};
use super::record::{SamplerStats, StepCpu, StepGpu, StepMemory, StepRecord};
use super::state::{Acc, Inner};
use crate::cgroup::{Cgroup, CgroupReading};
use crate::gpu::Shared;
use crate::units::{MemUnit, TimeUnit, Units};

pub(super) fn rfc3339(t: chrono::DateTime<chrono::Local>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

/// OOM kills in the step. On v1 the kernel counts a kill in the victim's own memory cgroup (a
/// task's, when Slurm made one) even when the limit hit was the job's, and the counter is not
/// hierarchical: the step's count and its tasks' add up. On v2 `memory.events` of the step
/// already includes its children.
fn step_oom_kills(
    cg: Option<&Cgroup>,
    reading: Option<CgroupReading>,
    tasks: &[TaskRecord],
) -> Option<u64> {
    let own = reading.and_then(|r| r.oom_kills);
    match cg.map(|c| c.version) {
        Some(crate::cgroup::Version::V1) => {
            let in_tasks = tasks.iter().filter_map(|t| t.oom_kills).sum::<u64>();
            own.map(|o| o + in_tasks)
                .or((in_tasks > 0).then_some(in_tasks))
        }
        _ => own,
    }
}

/// Which sources read the step's GPUs ([`super::record::SamplerStats::gpu_source`]).
fn gpu_source(acc: &Acc) -> String {
    use crate::gpu::Vendor;
    if !acc.gpu_opened {
        return "none".into();
    }
    let has = |v| acc.gpu_devices.iter().any(|(_, d)| d.vendor == v);
    match (has(Vendor::Nvidia), has(Vendor::Amd)) {
        (true, true) => "nvml+amd",
        (false, true) => "amd",
        _ => "nvml",
    }
    .into()
}

/// Why a task's (or the step's sampled) memory is above the step cgroup's peak, when it is.
fn peak_note(m: &StepMemory, tasks: &[TaskRecord]) -> Option<String> {
    if m.peak_source == "sampled" {
        return None;
    }
    let (who, above) = tasks
        .iter()
        .map(|t| {
            let id = t
                .global_id
                .or(t.local_id)
                .map_or("?".into(), |i| i.to_string());
            (format!("task {id}'s"), t.peak_memory_bytes)
        })
        .chain([("the tasks' summed".to_string(), m.sampled_peak_rss_bytes)])
        .max_by_key(|(_, b)| *b)?;
    (above > m.peak_bytes).then(|| {
        format!(
            "{who} sampled resident memory ({}) is above the step cgroup's peak ({}): resident \
             memory counts shared file pages (libraries, files read before) that the kernel \
             charged to the cgroup that first touched them, not to this step",
            mib(above),
            mib(m.peak_bytes)
        )
    })
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

/// The record as known now; `complete` for the final one.
pub(super) fn build(inner: &Inner, acc: &Acc, complete: bool) -> StepRecord {
    let s = &inner.setup;
    let sh = inner.lock();
    let elapsed = inner.started.elapsed().as_secs_f64();
    let now = chrono::Local::now();
    let mut step = s.step.clone();
    step.start = rfc3339(inner.start_time);
    step.end = complete.then(|| rfc3339(now));
    step.elapsed_seconds = elapsed;

    let tasks: Vec<TaskRecord> = sh
        .tasks
        .iter()
        .map(|t| {
            let (exit_code, signal, core) = match t.status {
                Some(w) if libc::WIFEXITED(w) => (Some(libc::WEXITSTATUS(w)), None, false),
                Some(w) if libc::WIFSIGNALED(w) => {
                    (None, Some(libc::WTERMSIG(w)), libc::WCOREDUMP(w))
                }
                _ => (None, None, false),
            };
            let cg_cpu = t.final_cgroup.and_then(|r| r.cpu_ns);
            let cg_now = t
                .final_cgroup
                .or_else(|| t.cgroup.as_ref().and_then(|c| c.read().ok()));
            let cg_peak = cg_now.and_then(|r| r.peak);
            let sampled = t.peak_rss.total.max(t.largest_hwm);
            let (peak, source) = match cg_peak {
                Some(c) if c >= sampled => (c, "cgroup"),
                _ => (sampled, "sampled"),
            };
            TaskRecord {
                local_id: t.local_id,
                global_id: t.global_id,
                pid: t.pid,
                ended: t.ended,
                exit_code,
                signal,
                core_dumped: core,
                peak_memory_bytes: peak,
                peak_source: source.into(),
                sampled_peak_rss_bytes: sampled,
                cgroup_peak_bytes: cg_peak,
                oom_kills: cg_now.and_then(|r| r.oom_kills),
                cpu_seconds: cg_cpu.map_or(t.cpu_sampled, |ns| ns as f64 / 1e9),
                cpu_source: if cg_cpu.is_some() {
                    "cgroup"
                } else {
                    "sampled"
                }
                .into(),
                max_threads: t.max_threads,
                max_processes: t.max_processes,
            }
        })
        .collect();

    let reading = sh.final_step.or(sh.last_step);
    let cg = sh.step_cgroup.as_ref();
    let sampled_peak = acc.sampled_peak_rss.total.max(acc.largest_hwm);
    let (peak, source, cache) = match (cg, reading.and_then(|r| r.peak)) {
        (Some(c), Some(p)) => (p, c.peak_source().to_string(), c.peak_includes_page_cache()),
        _ => (sampled_peak, "sampled".to_string(), false),
    };
    // Only where the step's own cgroup was found: a figure from another cgroup is not the
    // step's.
    let step_needed = cg.and(sh.step_needed.result());
    let job_needed = sh.job_needed.result();
    let memory = StepMemory {
        peak_bytes: peak,
        peak_source: source,
        peak_includes_page_cache: cache,
        sampled_peak_rss_bytes: sampled_peak,
        limit_bytes: reading.and_then(|r| r.limit),
        oom_kills: step_oom_kills(cg, reading, &tasks),
        limit_hits: reading.and_then(|r| r.limit_hits),
        cgroup: cg.map(|c| c.memory_dir.display().to_string()),
        cgroup_version: cg.map(|c| {
            match c.version {
                crate::cgroup::Version::V1 => "v1",
                crate::cgroup::Version::V2 => "v2",
            }
            .to_string()
        }),
        job_peak_bytes: sh.job_reading.and_then(|r| r.peak),
        job_limit_bytes: sh.job_reading.and_then(|r| r.limit),
        peak_note: None,
        needed_peak_bytes: step_needed.map(|(b, _)| b),
        needed_peak_source: step_needed.map(|(_, s)| s.as_str().to_string()),
        job_needed_peak_bytes: job_needed.map(|(b, _)| b),
        job_needed_peak_source: job_needed.map(|(_, s)| s.as_str().to_string()),
    };
    let memory = StepMemory {
        peak_note: peak_note(&memory, &tasks),
        ..memory
    };

    let task_cpu: f64 = tasks.iter().map(|t| t.cpu_seconds).sum();
    let (cpu_seconds, cpu_source) = match reading.and_then(|r| r.cpu_ns) {
        Some(ns) => (ns as f64 / 1e9, "cgroup"),
        None => (task_cpu, "sampled"),
    };
    let alloc_cpus = s
        .step
        .alloc_cpus
        .filter(|n| *n > 0)
        .unwrap_or_else(crate::proc::online_cpus);
    let mean_cores = if elapsed > 0.0 {
        cpu_seconds / elapsed
    } else {
        0.0
    };
    let cpu = StepCpu {
        seconds: cpu_seconds,
        source: cpu_source.into(),
        alloc_cpus,
        utilization_percent: 100.0 * mean_cores / f64::from(alloc_cpus),
        mean_cores,
        max_cores: acc
            .max_cpu
            .cores()
            .max(if acc.samples <= 1 { mean_cores } else { 0.0 }),
    };

    let units = Units {
        ram: MemUnit::Bytes,
        gpu_ram: MemUnit::Bytes,
        time: TimeUnit::Seconds,
    };
    let (usage, _, _, _) = acc.gpu.finish(&units);
    let shared = |others: u32| Shared::decide(step.gpu_shards, step.gpu_mps, others);
    // Which of the processes outside the step were the job's own (its other steps') and which
    // were not, where the sampler could tell.
    let shared_by = |g: &crate::usage::GpuUsage| {
        shared(g.other_processes).map(|sh| Shared {
            other_step_processes: g.other_step_processes,
            outside_job_processes: g.outside_job_processes,
            ..sh
        })
    };
    let gpus: Vec<StepGpu> = if usage.is_empty() {
        acc.gpu_devices
            .iter()
            .map(|(a, d)| StepGpu {
                slurm_index: *a,
                vendor: d.vendor,
                nvml_index: d.index,
                minor: d.minor,
                pci_bus_id: d.pci_bus_id.clone(),
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                memory_total_bytes: d.memory_total,
                mig: d.mig.clone(),
                shared: shared(0),
                depth: crate::gpu::figures::GpuDepth::unsampled(
                    "the step ended before its first GPU reading",
                ),
                ..StepGpu::default()
            })
            .collect()
    } else {
        usage
            .iter()
            .map(|g| {
                let dev = acc.gpu_devices.iter().find(|(_, d)| d.uuid == g.uuid);
                StepGpu {
                    slurm_index: dev.and_then(|(a, _)| *a),
                    vendor: dev.map_or(crate::gpu::Vendor::Nvidia, |(_, d)| d.vendor),
                    nvml_index: g.index,
                    minor: dev.and_then(|(_, d)| d.minor),
                    pci_bus_id: dev.and_then(|(_, d)| d.pci_bus_id.clone()),
                    uuid: g.uuid.clone(),
                    name: g.name.clone(),
                    memory_total_bytes: g.memory_total as u64,
                    peak_device_memory_bytes: g.max_used as u64,
                    peak_step_memory_bytes: g.max_tracked as u64,
                    peak_job_memory_bytes: g.max_job_memory.map(|b| b as u64),
                    mean_utilization_percent: g.mean_utilization_percent,
                    max_utilization_percent: g.max_utilization_percent,
                    energy_joules: g.energy_joules,
                    lost: g.lost,
                    idle: None,
                    mig: dev.and_then(|(_, d)| d.mig.clone()),
                    shared: shared_by(g),
                    depth: g.depth.clone(),
                }
            })
            .collect()
    };

    let mut notes = acc.notes.clone();
    if acc.partial_samples > 0 {
        notes.push(format!(
            "up to {} processes: at most {} processes are read per sample (and no more than {} % \
             of the interval spent reading them), the others at the next samples in turn; sums \
             use each process's latest reading ({} sample(s) read part of them)",
            acc.most_processes,
            procs::MAX_PROCESSES_PER_SAMPLE,
            procs::PROCESS_TIME_SHARE * 100.0,
            acc.partial_samples
        ));
    }
    notes.extend(acc.pace.note());
    let mut faults = acc.faults.clone();
    if let Some(first) = &acc.cgroup_first_miss {
        let f = format!(
            "the step's cgroup could not be read at {} of {} sample(s) (first at {first}): \
             those samples' memory and CPU are the processes' own, the exact peaks are as of \
             the last reading",
            acc.cgroup_misses, acc.samples
        );
        notes.push(f.clone());
        faults.push(f);
    }
    notes.extend(sh.notes.iter().cloned());
    if sh.step_cgroup.is_none() && !sh.tasks.is_empty() {
        notes.push("no cgroup found for the step: memory and CPU are sampled".into());
    }
    let sampler = SamplerStats {
        interval_seconds: s.interval.as_secs_f64(),
        samples: acc.samples,
        mean_sample_microseconds: if acc.samples > 0 {
            acc.sample_us_total / acc.samples as f64
        } else {
            0.0
        },
        max_sample_microseconds: acc.sample_us_max,
        cpu_seconds: acc.thread_cpu,
        gpu_source: gpu_source(acc),
        gpu_mapping: acc.gpu_mapping.clone(),
        interval_max_seconds: Some(acc.pace.max.as_secs_f64()),
        interval_last_seconds: Some(acc.pace.current.as_secs_f64()),
        overruns: Some(acc.pace.overruns),
        backoffs: Some(acc.pace.backoffs),
        partial_samples: Some(acc.partial_samples),
        last_sample: acc.last_sample.map(rfc3339),
        stopped: acc.stopped,
        nvml_opened: acc.nvml_opened.map(|t| t.as_str().to_string()),
        nvml_cloexec_descriptors: acc.nvml_opened.map(|_| acc.nvml_cloexec),
        notes,
        faults,
    };
    let crate::history::Story {
        timeline,
        events,
        events_dropped,
        idle,
    } = inner.history().finish(crate::clock::unix_now());
    let mut gpus = gpus;
    for g in &mut gpus {
        if let Some(i) = timeline.gpus.iter().position(|u| *u == g.uuid) {
            g.idle = idle.get(i).cloned().flatten();
        }
    }
    StepRecord {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        complete,
        written_at: rfc3339(now),
        tracker_version: env!("CARGO_PKG_VERSION").into(),
        job: s.job.clone(),
        step,
        tasks,
        memory,
        cpu,
        gpus,
        sampler,
        timeline: Some(timeline),
        events,
        events_dropped,
        pressure: Some(
            sh.pressure
                .figures(inner.start_time.timestamp_millis() as f64 / 1000.0),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: u32, peak: u64) -> TaskRecord {
        TaskRecord {
            global_id: Some(id),
            peak_memory_bytes: peak,
            ..TaskRecord::default()
        }
    }

    #[test]
    fn a_task_above_the_step_cgroups_peak_is_explained() {
        let m = StepMemory {
            peak_bytes: 5 << 20,
            peak_source: "cgroup v1 memory.max_usage_in_bytes".into(),
            sampled_peak_rss_bytes: 9 << 20,
            ..StepMemory::default()
        };
        let n = peak_note(&m, &[task(0, 10 << 20), task(1, 1 << 20)]).unwrap();
        assert!(n.starts_with("task 0's sampled resident memory (10.0 MiB) is above the step cgroup's peak (5.0 MiB)"), "{n}");
        assert!(n.contains("shared file pages"), "{n}");
        // Below the peak, or with a sampled peak (nothing to contradict): no note.
        assert_eq!(
            peak_note(&m, &[task(0, 4 << 20)]),
            Some(
                n.replace("task 0's", "the tasks' summed")
                    .replace("(10.0 MiB)", "(9.0 MiB)")
            )
        );
        let low = StepMemory {
            sampled_peak_rss_bytes: 1 << 20,
            ..m.clone()
        };
        assert_eq!(peak_note(&low, &[task(0, 4 << 20)]), None);
        let sampled = StepMemory {
            peak_source: "sampled".into(),
            ..m
        };
        assert_eq!(peak_note(&sampled, &[task(0, 10 << 20)]), None);
    }
}

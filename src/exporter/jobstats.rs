//! The series Princeton jobstats' node exporters would give for the same jobs (its cgroup
//! exporter's `cgroup_*`, its GPU exporter's `nvidia_gpu_*`), with the labels jobstats'
//! queries select on, computed from the same live states as our own series
//! (`gpu-tracker-exporter --jobstats`, docs/JOBSTATS.md).
//!
//! jobstats reads a job's cgroup on each node: one series per job and node, no `step` label.
//! Our live states are per step, so a job's steps on the node are added up (CPU seconds,
//! memory) or the largest taken (CPUs, the memory limit). A GPU that several steps of the job
//! hold is one GPU: the step with the latest reading speaks for it. `instance` is Prometheus'
//! own label (the scrape target, whose host part jobstats takes as the node's name); `cluster`
//! and `jobid` are written here. A figure we lack is left out, never written as 0: jobstats'
//! `cgroup_memory_rss_bytes` is the cgroup's RSS, ours is the job's `memory.current` (page
//! cache included, the only memory figure the live state carries). Its
//! `nvidia_gpu_power_usage_milliwatts` is NVML's power reading; ours is the mean power over the
//! latest sampling interval, from the energy counter (absent on GPUs without one, and until a
//! step has read it twice). `nvidia_gpu_temperature_celsius` is NVML's GPU sensor at the
//! step's latest reading (a MIG instance gives its GPU's).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::metrics::label_value;
use crate::gpu::Vendor;
use crate::step::live::{LiveGpu, LiveState};

/// A job on this node, its steps put together.
#[derive(Default)]
struct Job<'a> {
    cpu_seconds: Option<f64>,
    memory_bytes: Option<u64>,
    memory_limit: Option<u64>,
    cpus: Option<u32>,
    /// The job's user's uid.
    uid: u32,
    /// By UUID.
    gpus: BTreeMap<&'a str, JobGpu<'a>>,
}

/// One GPU of a job on this node.
struct JobGpu<'a> {
    /// The GPU as the step that wrote last saw it (the device's figures).
    latest: &'a LiveGpu,
    /// When that step wrote it.
    written_at: f64,
    /// The memory the job's processes use on it: every step's own, added up (a step sees only
    /// its processes: the batch step's memory is not the extern step's).
    memory_used: Option<u64>,
}

fn add<T: std::ops::Add<Output = T>>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x + y),
        (x, None) => x,
        (None, y) => y,
    }
}

/// The jobs of `states`, by (cluster, job id).
fn jobs(states: &[LiveState]) -> BTreeMap<(&str, u32), Job<'_>> {
    let mut jobs: BTreeMap<(&str, u32), Job> = BTreeMap::new();
    for s in states {
        let j = jobs.entry((s.cluster.as_str(), s.job_id)).or_default();
        j.cpu_seconds = add(j.cpu_seconds, s.cpu.seconds);
        j.memory_bytes = add(j.memory_bytes, s.memory.current_bytes);
        j.memory_limit = j.memory_limit.max(s.memory.limit_bytes);
        j.cpus = j.cpus.max(s.alloc_cpus);
        j.uid = s.uid;
        for g in s.gpus.iter().filter(|g| g.vendor == Vendor::Nvidia) {
            let e = j.gpus.entry(g.uuid.as_str()).or_insert(JobGpu {
                latest: g,
                written_at: s.written_at,
                memory_used: None,
            });
            e.memory_used = add(e.memory_used, g.memory_used_bytes);
            if s.written_at > e.written_at {
                e.latest = g;
                e.written_at = s.written_at;
            }
        }
    }
    jobs
}

/// A per-job family: name, help, value.
type JobFamily = (&'static str, &'static str, fn(&Job) -> Option<String>);
/// A per-GPU family: name, help, value.
type GpuFamily = (&'static str, &'static str, fn(&JobGpu) -> Option<String>);

/// One family: its head and samples.
fn family(out: &mut String, name: &str, help: &str, samples: &[(String, String)]) {
    // TYPE first: OpenMetrics wants it so, the text format takes either order.
    let _ = writeln!(out, "# TYPE {name} gauge");
    let _ = writeln!(out, "# HELP {name} {help}");
    for (labels, v) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {v}");
    }
}

/// jobstats' series of `states`, to put before the exposition's end: the same lines in either
/// format (gauges, no unit).
pub fn render(states: &[LiveState]) -> String {
    let jobs = jobs(states);
    let mut out = String::new();
    let job_labels = |(cluster, id): &(&str, u32)| {
        format!("cluster=\"{}\",jobid=\"{id}\"", label_value(cluster))
    };
    let per_job = |f: &dyn Fn(&Job) -> Option<String>| -> Vec<(String, String)> {
        jobs.iter()
            .filter_map(|(k, j)| f(j).map(|v| (job_labels(k), v)))
            .collect()
    };
    let cgroup: [JobFamily; 4] = [
        (
            "cgroup_cpu_total_seconds",
            "CPU seconds the job used on this node (gpu-tracker, jobstats' name)",
            |j| j.cpu_seconds.map(|v| format!("{v:?}")),
        ),
        (
            "cgroup_memory_rss_bytes",
            "Memory the job holds on this node, page cache included (gpu-tracker's memory.current, jobstats' name)",
            |j| j.memory_bytes.map(|v| v.to_string()),
        ),
        (
            "cgroup_memory_total_bytes",
            "The job's memory limit on this node (gpu-tracker, jobstats' name)",
            |j| j.memory_limit.map(|v| v.to_string()),
        ),
        (
            "cgroup_cpus",
            "CPUs allocated to the job on this node (gpu-tracker, jobstats' name)",
            |j| j.cpus.map(|v| v.to_string()),
        ),
    ];
    for (name, help, f) in cgroup {
        family(&mut out, name, help, &per_job(&f));
    }
    let gpu_samples = |f: &dyn Fn(&JobGpu) -> Option<String>| -> Vec<(String, String)> {
        let mut v = Vec::new();
        for (k, j) in &jobs {
            for (uuid, jg) in &j.gpus {
                let g = jg.latest;
                if let Some(x) = f(jg) {
                    let l = format!(
                        "{},minor_number=\"{}\",uuid=\"{}\"",
                        job_labels(k),
                        g.index,
                        label_value(uuid)
                    );
                    v.push((l, x));
                }
            }
        }
        v
    };
    let gpus: [GpuFamily; 5] = [
        (
            "nvidia_gpu_duty_cycle",
            "GPU utilization, percent (gpu-tracker, jobstats' name)",
            |g| g.latest.utilization_percent.map(|v| format!("{v:?}")),
        ),
        (
            "nvidia_gpu_memory_used_bytes",
            "GPU memory the job's processes use (gpu-tracker, jobstats' name)",
            |g| g.memory_used.map(|v| v.to_string()),
        ),
        (
            "nvidia_gpu_memory_total_bytes",
            "GPU memory size (gpu-tracker, jobstats' name)",
            |g| {
                let total = g.latest.memory_total_bytes;
                (total > 0).then(|| total.to_string())
            },
        ),
        (
            "nvidia_gpu_power_usage_milliwatts",
            "GPU power over the latest sampling interval, from the energy counter, milliwatts \
             (gpu-tracker, jobstats' name)",
            |g| {
                g.latest
                    .power_watts
                    .map(|w| format!("{:?}", (w * 1000.0).round()))
            },
        ),
        (
            "nvidia_gpu_temperature_celsius",
            "GPU temperature at the latest reading, degrees Celsius (gpu-tracker, jobstats' name)",
            |g| g.latest.temperature_celsius.map(|c| c.to_string()),
        ),
    ];
    for (name, help, f) in gpus {
        family(&mut out, name, help, &gpu_samples(&f));
    }
    // jobstats' older mapping: the job id (and its user's uid) is the value, the series has no
    // jobid label.
    let holders = |value: fn(u32, &Job) -> String| -> Vec<(String, String)> {
        jobs.iter()
            .flat_map(|((cluster, id), j)| {
                j.gpus.iter().map(move |(uuid, jg)| {
                    let l = format!(
                        "cluster=\"{}\",minor_number=\"{}\",uuid=\"{}\"",
                        label_value(cluster),
                        jg.latest.index,
                        label_value(uuid)
                    );
                    (l, value(*id, j))
                })
            })
            .collect()
    };
    family(
        &mut out,
        "nvidia_gpu_jobId",
        "The job holding the GPU (gpu-tracker, jobstats' older mapping)",
        &holders(|id, _| id.to_string()),
    );
    family(
        &mut out,
        "nvidia_gpu_jobUid",
        "The uid of the user whose job holds the GPU (gpu-tracker, jobstats' older mapping)",
        &holders(|_, j| j.uid.to_string()),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exporter::testing::state;

    fn gpu(index: u32, uuid: &str, util: Option<f64>) -> LiveGpu {
        LiveGpu {
            index,
            uuid: uuid.into(),
            memory_used_bytes: Some(1 << 30),
            memory_total_bytes: 80 << 30,
            utilization_percent: util,
            ..LiveGpu::default()
        }
    }

    #[test]
    fn a_job_s_steps_become_one_series_per_job_with_jobstats_labels() {
        let mut batch = state(42, "batch", 100.0);
        batch.cpu.seconds = Some(10.5);
        batch.memory.current_bytes = Some(1 << 30);
        batch.memory.limit_bytes = Some(4 << 30);
        batch.gpus = vec![gpu(0, "GPU-a", Some(97.0)), gpu(1, "GPU-b", Some(0.0))];
        let mut step0 = state(42, "0", 101.0);
        step0.cpu.seconds = Some(2.0);
        step0.memory.current_bytes = Some(1 << 29);
        // The same GPU, read later by the step: it speaks for it.
        step0.gpus = vec![gpu(0, "GPU-a", Some(99.0))];
        step0.gpus[0].power_watts = Some(312.4567);
        step0.gpus[0].temperature_celsius = Some(64);
        let mut other = state(7, "batch", 100.0);
        other.uid = 1234;
        let other_uid = other.uid;
        other.gpus = vec![gpu(2, "GPU-c", None)];
        let text = render(&[batch, step0, other]);
        let has = |l: &str| text.lines().any(|x| x == l);
        assert!(
            has("cgroup_cpu_total_seconds{cluster=\"c1\",jobid=\"42\"} 12.5"),
            "{text}"
        );
        assert!(
            has("cgroup_memory_rss_bytes{cluster=\"c1\",jobid=\"42\"} 1610612736"),
            "{text}"
        );
        assert!(has(
            "cgroup_memory_total_bytes{cluster=\"c1\",jobid=\"42\"} 4294967296"
        ));
        assert!(has("cgroup_cpus{cluster=\"c1\",jobid=\"42\"} 4"));
        assert!(has(
            "nvidia_gpu_duty_cycle{cluster=\"c1\",jobid=\"42\",minor_number=\"0\",uuid=\"GPU-a\"} 99.0"
        ));
        assert!(has(
            "nvidia_gpu_duty_cycle{cluster=\"c1\",jobid=\"42\",minor_number=\"1\",uuid=\"GPU-b\"} 0.0"
        ));
        assert!(has(
            "nvidia_gpu_memory_total_bytes{cluster=\"c1\",jobid=\"7\",minor_number=\"2\",uuid=\"GPU-c\"} 85899345920"
        ));
        assert!(has(
            "nvidia_gpu_jobId{cluster=\"c1\",minor_number=\"2\",uuid=\"GPU-c\"} 7"
        ));
        assert!(
            has(&format!(
                "nvidia_gpu_jobUid{{cluster=\"c1\",minor_number=\"2\",uuid=\"GPU-c\"}} {}",
                other_uid
            )),
            "{text}"
        );
        // What we lack is left out: job 7's GPU has no utilization, no job has a CPU figure or
        // a limit of job 7's, no step label anywhere.
        assert!(
            !text.contains("duty_cycle{cluster=\"c1\",jobid=\"7\""),
            "{text}"
        );
        assert!(!text.contains("cgroup_cpu_total_seconds{cluster=\"c1\",jobid=\"7\""));
        assert!(!text.contains("step="));
        assert_eq!(text.matches("nvidia_gpu_duty_cycle{").count(), 2);
        // Power where a step measured it (GPU-a), left out where none did.
        assert!(
            has(
                "nvidia_gpu_power_usage_milliwatts{cluster=\"c1\",jobid=\"42\",minor_number=\"0\",uuid=\"GPU-a\"} 312457.0"
            ),
            "{text}"
        );
        assert_eq!(
            text.matches("nvidia_gpu_power_usage_milliwatts{").count(),
            1
        );
        // The temperature likewise.
        assert!(
            has(
                "nvidia_gpu_temperature_celsius{cluster=\"c1\",jobid=\"42\",minor_number=\"0\",uuid=\"GPU-a\"} 64"
            ),
            "{text}"
        );
        assert_eq!(text.matches("nvidia_gpu_temperature_celsius{").count(), 1);
    }

    #[test]
    fn a_gpu_s_memory_is_every_step_s_own_added_up() {
        // The batch step holds 1 GiB on GPU-a; the extern step, written later, sees the same GPU
        // with none of its own processes on it: the job still uses 1 GiB there (it read 0 when
        // the last step to write spoke for the GPU's memory too).
        let mut batch = state(42, "batch", 100.0);
        batch.gpus = vec![gpu(0, "GPU-a", Some(37.0))];
        let mut ext = state(42, "extern", 101.0);
        let mut idle = gpu(0, "GPU-a", Some(38.0));
        idle.memory_used_bytes = Some(0);
        ext.gpus = vec![idle];
        let mut step0 = state(42, "0", 99.0);
        let mut half = gpu(0, "GPU-a", Some(36.0));
        half.memory_used_bytes = Some(1 << 29);
        step0.gpus = vec![half];
        let text = render(&[batch, ext, step0]);
        let has = |l: &str| text.lines().any(|x| x == l);
        assert!(
            has(
                "nvidia_gpu_memory_used_bytes{cluster=\"c1\",jobid=\"42\",minor_number=\"0\",uuid=\"GPU-a\"} 1610612736"
            ),
            "{text}"
        );
        // The device's figures are the latest step's.
        assert!(has(
            "nvidia_gpu_duty_cycle{cluster=\"c1\",jobid=\"42\",minor_number=\"0\",uuid=\"GPU-a\"} 38.0"
        ));
    }
}

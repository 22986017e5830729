//! Named job classes: one set of rules, evaluated once per job, each with a stable tag, a
//! threshold the site sets (`class_*` in the settings; 0 turns a class off) and a one-line
//! reason. The summary's advice, the listing's `CLASSES` column and the summary kept in Slurm's
//! database are built from them. docs/SUMMARY.md has the table.
//!
//! Each rule reads only figures the summary has. `time-over` (a completed job far under its time
//! limit, [`time_over`]) and `timeout` (its last run killed at its time limit) need the limit:
//! the records carry it where the plugin's job_prolog wrote the job's run
//! ([`crate::step::run`]), and the site report reads it, and Slurm's `TIMEOUT` state, from
//! Slurm's database. `failed` means a task of the job's last run exited non-zero or was killed,
//! other than by its time limit: a run that Slurm requeued is not a failure of the job.

use super::figures::JobClass;
use super::figures::{GpuSummary, Summary};
use crate::config::Config;
use crate::units::human_bytes;

/// The tags, in the order classes are given.
pub const TAGS: [&str; 12] = [
    "gpu-unused",
    "gpu-low",
    "gpu-idle-tail",
    "mem-over",
    "time-over",
    "cpu-low",
    "cpu-starved",
    "io-bound",
    "memory-throttled",
    "oom",
    "timeout",
    "failed",
];

/// Use-based classes (`gpu-low`, `gpu-idle-tail`, `cpu-low`) need a job at least this long
/// (seconds): start-up dominates shorter ones.
pub const MIN_ELAPSED_FOR_USE: f64 = 60.0;

/// Whether a completed job of `elapsed` seconds asked for far more time than it ran: under the
/// ratio of its time limit of `limit` seconds, and at least [`TIME_SLACK_SECONDS`] under it.
/// Only where Slurm's time limit is known (the records' run, or Slurm's database).
pub fn time_over(elapsed: f64, limit: f64, rules: &ClassRules) -> bool {
    super::runs::far_under_limit(elapsed, limit, rules.time_over_ratio)
}

/// `mem-over` needs at least this much memory unused, whatever the ratio: 100 MB of 1 GiB is
/// wasteful in ratio but not worth a note.
pub const MEMORY_SLACK_BYTES: u64 = 1 << 30;
/// `cpu-low` needs the cores the job kept busy at its most to be at most this share of those
/// allocated per node: a job that peaks near its allocation needs it.
const CPU_LOW_NEEDED_SHARE: f64 = 0.75;

/// The thresholds of the classes (the settings' `class_*` keys); 0 turns a class off.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassRules {
    /// `gpu-unused`: at least this many GPUs had no process of the job.
    pub gpu_unused_gpus: u32,
    /// `gpu-low`: a GPU's mean utilization under this percent ...
    pub gpu_low_percent: f64,
    /// ... or its mean SM activity, where measured, under this percent (0: not looked at).
    pub gpu_low_sm_percent: f64,
    /// `gpu-idle-tail`: a GPU busy, then idle to its last reading at least this many seconds.
    pub gpu_idle_tail_seconds: f64,
    /// `mem-over`: a node's peak under this fraction of the memory requested.
    pub mem_over_ratio: f64,
    /// `time-over`: a completed job's elapsed time under this fraction of its time limit.
    pub time_over_ratio: f64,
    /// `cpu-low`: CPU efficiency under this percent.
    pub cpu_low_percent: f64,
    /// `oom`: at least this many processes killed for memory.
    pub oom_kills: u64,
    /// `failed`: at least this many tasks exited non-zero or were killed.
    pub failed_tasks: u32,
    /// `cpu-starved`: some task waited for a core at least this percent of the time
    /// ([`super::pressure`]).
    pub cpu_starved_percent: f64,
    /// `io-bound`: ... for I/O.
    pub io_bound_percent: f64,
    /// `memory-throttled`: ... for memory.
    pub memory_throttled_percent: f64,
    /// The site's margins for the `--mem` and `--time` the advice suggests (`[advise]`).
    pub sizing: super::sizing::Sizing,
}

impl ClassRules {
    /// The rules the site's settings give.
    pub fn from_config(c: &Config) -> ClassRules {
        ClassRules {
            gpu_unused_gpus: c.class_gpu_unused_gpus,
            gpu_low_percent: c.class_gpu_low_percent,
            gpu_low_sm_percent: c.class_gpu_low_sm_percent,
            gpu_idle_tail_seconds: c.class_gpu_idle_tail_seconds,
            mem_over_ratio: c.class_mem_over_ratio,
            time_over_ratio: c.class_time_over_ratio,
            cpu_low_percent: c.class_cpu_low_percent,
            oom_kills: c.class_oom_kills,
            failed_tasks: c.class_failed_tasks,
            cpu_starved_percent: c.class_cpu_starved_percent,
            io_bound_percent: c.class_io_bound_percent,
            memory_throttled_percent: c.class_memory_throttled_percent,
            sizing: super::sizing::Sizing::of(&c.advise),
        }
    }
}

impl ClassRules {
    /// The thresholds of `cpu-starved`, `memory-throttled` and `io-bound`, percent, in that
    /// order (CPU, memory, I/O: [`crate::cgroup::pressure::RESOURCES`]).
    pub fn pressure_percents(&self) -> [f64; 3] {
        [
            self.cpu_starved_percent,
            self.memory_throttled_percent,
            self.io_bound_percent,
        ]
    }
}

impl Default for ClassRules {
    /// The built-in settings' rules.
    fn default() -> Self {
        ClassRules::from_config(&Config::default())
    }
}

/// `GPU 1 on n1`.
pub fn gpu_name(g: &GpuSummary) -> String {
    format!(
        "GPU {} on {}",
        g.slurm_index.map_or_else(|| "?".into(), |i| i.to_string()),
        g.node
    )
}

/// Whether no process of the job ever ran on `g`: none held memory on it nor had a share of
/// its utilization. On a GPU nobody else used, the device's own utilization and SM activity
/// are the job's too, so any of it counts as the job's; on a shared GPU they are not (another
/// job's load never makes this job's GPU "used"). A GPU never read is not judged.
pub fn gpu_unused(g: &GpuSummary) -> bool {
    let own_process = g.job_peak_bytes > 0
        || g.depth
            .process_utilization_percent
            .is_some_and(|p| p.max > 0.0)
        || g.depth.cu_occupancy_percent.is_some_and(|p| p.max > 0.0);
    let read = g.memory_total_bytes > 0 || g.max_utilization_percent.is_some();
    let device_busy = g.max_utilization_percent.is_some_and(|u| u >= 1.0)
        || g.depth.sm_active_percent.is_some_and(|s| s.max >= 1.0);
    read && !own_process && (g.shared.is_some() || !device_busy)
}

/// Whether `g` was used, but little: mean utilization under the threshold, or mean SM activity
/// under its threshold where GPM measured it (a MIG instance, which has no utilization, by SM
/// activity alone). Never on a shared GPU: both figures are the device's, other jobs' load
/// included.
pub fn gpu_low(g: &GpuSummary, rules: &ClassRules) -> bool {
    if rules.gpu_low_percent <= 0.0 || g.shared.is_some() || gpu_unused(g) {
        return false;
    }
    let busy_low = g
        .mean_utilization_percent
        .is_some_and(|u| u < rules.gpu_low_percent);
    let sm_low = rules.gpu_low_sm_percent > 0.0
        && g.depth
            .sm_active_percent
            .is_some_and(|s| s.mean < rules.gpu_low_sm_percent);
    busy_low || sm_low
}

fn used_long_enough(s: &Summary) -> bool {
    s.elapsed_seconds >= MIN_ELAPSED_FOR_USE
}

/// The node that needed the most memory among those with a memory request: (requested,
/// needed). Needed is the peak the kernel could not reclaim where the records have it
/// ([`super::figures::NodeSummary::sizing_bytes`]), else the charged peak: page cache the
/// kernel gives back at the limit is no reason to ask for more.
pub fn largest_request_and_peak(s: &Summary) -> Option<(u64, u64)> {
    s.per_node
        .iter()
        .filter_map(|m| m.requested_bytes.map(|r| (r, m.sizing_bytes())))
        .max_by_key(|&(_, p)| p)
}

/// Whether the job asked for far more memory than it used (not after an OOM kill, and only
/// with every record final): the largest node's needed peak ([`largest_request_and_peak`])
/// under the ratio of its request, and at least [`MEMORY_SLACK_BYTES`] under it.
pub fn mem_over(s: &Summary, rules: &ClassRules) -> Option<(u64, u64)> {
    if rules.mem_over_ratio <= 0.0 || !s.oom.is_empty() || !s.complete {
        return None;
    }
    largest_request_and_peak(s).filter(|&(req, peak)| {
        (peak as f64) < rules.mem_over_ratio * req as f64
            && req.saturating_sub(peak) >= MEMORY_SLACK_BYTES
    })
}

/// CPUs allocated per node, and the cores the job needs (its busiest moment, rounded up), when
/// the job is `cpu-low`.
pub fn cpu_low(s: &Summary, rules: &ClassRules) -> Option<(u32, u32, f64)> {
    if rules.cpu_low_percent <= 0.0 || !used_long_enough(s) {
        return None;
    }
    let per_node = s.cpu.alloc_cpus / (s.nodes.len().max(1) as u32);
    let eff = s.cpu.efficiency_percent?;
    let needed = (s.cpu.max_cores.ceil() as u32).max(1);
    (per_node >= 2
        && eff < rules.cpu_low_percent
        && f64::from(needed) <= CPU_LOW_NEEDED_SHARE * f64::from(per_node))
    .then_some((per_node, needed, eff))
}

fn some_of(names: Vec<String>, what: &str) -> String {
    let more = names.len().saturating_sub(3);
    let mut t = names.into_iter().take(3).collect::<Vec<_>>().join(", ");
    if more > 0 {
        t.push_str(&format!(" and {more} more"));
    }
    format!("{t}: {what}")
}

/// The classes of the job `s` under `rules`, in the order of [`TAGS`].
pub fn classify(s: &Summary, rules: &ClassRules) -> Vec<JobClass> {
    let mut out = Vec::new();
    let mut add = |tag: &str, reason: String| {
        out.push(JobClass {
            tag: tag.into(),
            reason,
        })
    };

    let unused: Vec<String> = s
        .gpus
        .iter()
        .filter(|g| gpu_unused(g))
        .map(gpu_name)
        .collect();
    if rules.gpu_unused_gpus > 0 && unused.len() >= rules.gpu_unused_gpus as usize {
        add(
            "gpu-unused",
            some_of(unused, "no process of the job ran on it"),
        );
    }

    if used_long_enough(s) {
        let low: Vec<String> = s
            .gpus
            .iter()
            .filter(|g| gpu_low(g, rules))
            .map(|g| {
                let busy = g
                    .mean_utilization_percent
                    .map(|u| format!(" busy {u:.0}%"))
                    .unwrap_or_default();
                let sm = g
                    .depth
                    .sm_active_percent
                    .map(|x| format!(" SMs active {:.0}%", x.mean))
                    .unwrap_or_default();
                format!("{}{busy}{sm}", gpu_name(g))
            })
            .collect();
        if !low.is_empty() {
            add(
                "gpu-low",
                some_of(
                    low,
                    &format!(
                        "under {}% busy or {}% of SMs active on average",
                        rules.gpu_low_percent, rules.gpu_low_sm_percent
                    ),
                ),
            );
        }

        if rules.gpu_idle_tail_seconds > 0.0 {
            let tails: Vec<String> = s
                .gpu_idle
                .iter()
                .filter(|i| {
                    i.idle.ever_busy && i.idle.at_end_seconds >= rules.gpu_idle_tail_seconds
                })
                // Idle time is the device's utilization: not the job's on a shared GPU.
                .filter(|i| {
                    s.gpus
                        .iter()
                        .any(|g| g.uuid == i.uuid && g.node == i.node && g.shared.is_none())
                })
                .map(|i| {
                    format!(
                        "GPU {} on {} idle for its last {:.0} min",
                        i.index,
                        i.node,
                        i.idle.at_end_seconds / 60.0
                    )
                })
                .collect();
            if !tails.is_empty() {
                add(
                    "gpu-idle-tail",
                    some_of(
                        tails,
                        &format!(
                            "busy, then idle to the end for {:.0} min or more",
                            rules.gpu_idle_tail_seconds / 60.0
                        ),
                    ),
                );
            }
        }
    }

    if let Some((req, peak)) = mem_over(s, rules) {
        add(
            "mem-over",
            format!(
                "{} {} of the {} requested per node ({:.0}%, under {:.0}%)",
                if s.per_node.iter().any(|n| n.needed_peak_bytes.is_some()) {
                    "own memory peak"
                } else {
                    "peak"
                },
                human_bytes(peak),
                human_bytes(req),
                100.0 * peak as f64 / req as f64,
                100.0 * rules.mem_over_ratio
            ),
        );
    }

    if let Some((per_node, _, eff)) = cpu_low(s, rules) {
        add(
            "cpu-low",
            format!(
                "{eff:.0}% CPU efficiency of {per_node} cores per node (under {}%)",
                rules.cpu_low_percent
            ),
        );
    }

    for (tag, reason) in super::pressure::classes(s, rules.pressure_percents()) {
        add(tag, reason);
    }

    let kills = crate::units::saturating_sum(s.oom.iter().map(|o| o.kills));
    if rules.oom_kills > 0 && kills >= rules.oom_kills {
        add(
            "oom",
            format!("{kills} process(es) killed by the kernel for memory"),
        );
    }

    for (tag, reason) in super::runs::time_classes(s, rules.time_over_ratio) {
        add(tag, reason);
    }

    let failed = super::runs::failed_tasks(s);
    if rules.failed_tasks > 0 && failed >= rules.failed_tasks as usize {
        add(
            "failed",
            format!("{failed} task(s) exited non-zero or were killed"),
        );
    }
    out.sort_by_key(|c| TAGS.iter().position(|t| *t == c.tag));
    out
}

/// The rule's reason, for a class known only by its tag (read back from Slurm's database).
pub fn rule_of(tag: &str) -> &'static str {
    match tag {
        "gpu-unused" => "an allocated GPU on which no process of the job ran",
        "gpu-low" => "a GPU busy, or its SMs active, under the site's threshold",
        "gpu-idle-tail" => "a GPU busy, then idle to the end for long",
        "mem-over" => {
            "peak memory (page cache the kernel could reclaim left out) far under the memory requested"
        }
        "time-over" => "elapsed time far under the time limit",
        "timeout" => "killed at its time limit",
        "cpu-low" => "cores allocated, few used",
        "cpu-starved" => "tasks waited for a core much of the time",
        "io-bound" => "tasks waited for I/O much of the time",
        "memory-throttled" => "tasks stalled on memory much of the time",
        "oom" => "processes killed by the kernel for memory",
        "failed" => "tasks exited non-zero or were killed",
        _ => "a class of a later gpu-tracker",
    }
}

/// Whether `tag` looks like a class tag (lower-case letters, digits and `-`, at most 24
/// characters): what a stored summary may give back, including tags of later builds.
pub fn is_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 24
        && tag
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

impl Summary {
    /// Whether the job is in the class `tag`.
    pub fn has_class(&self, tag: &str) -> bool {
        self.classes.iter().any(|c| c.tag == tag)
    }

    /// The tags of the job's classes, comma-separated; `none` without any.
    pub fn class_tags(&self) -> String {
        self.class_tags_or(", ", "none")
    }

    /// The tags of the job's classes joined by `sep`; `none` without any.
    pub fn class_tags_or(&self, sep: &str, none: &str) -> String {
        if self.classes.is_empty() {
            return none.into();
        }
        let tags: Vec<&str> = self.classes.iter().map(|c| c.tag.as_str()).collect();
        tags.join(sep)
    }
}

#[cfg(test)]
#[path = "classes_tests.rs"]
mod tests;

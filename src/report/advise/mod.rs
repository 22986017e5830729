//! Advice before a job runs: what the user's own finished jobs "of the same job" used against
//! what they asked for, and the request that would have fitted them, with the site's margins.
//!
//! The same job is what a user would call it: the job name (`-J`), else the batch script's
//! path (Slurm then names the job after the script). The history is the user's own finished
//! jobs that gpu-tracker summarised, from Slurm's database (each job's `AdminComment`, written
//! only by the site's EpilogSlurmctld), kept in a cache in the user's home ([`history`]), in a
//! directory no other user can get at ([`own_dir`]); the note ([`note`]) is printed at
//! submission by `slurm/cli_filter.lua` ([`submit`]) and by `gpu-tracker-report --advise`.
//! Jobs of an array all count, as one job of many runs.

pub mod history;
pub mod note;
pub mod own_dir;
pub mod run;
pub mod submit;

use serde::{Deserialize, Serialize};

use super::advice::mem_option;
use super::runs::{slurm_duration, slurm_time};
use crate::config::AdviseConfig;
use crate::units::human_bytes;

/// What a user would call "the same job".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", content = "value", rename_all = "snake_case")]
pub enum Key {
    /// The job name.
    Name(String),
    /// The batch script's absolute path, for a job with no name of its own.
    Script(String),
}

impl Key {
    /// Whether `run` is a run of this job.
    pub fn matches(&self, run: &PastRun) -> bool {
        match self {
            Key::Name(n) => run.name == *n,
            Key::Script(p) => run.script.as_deref() == Some(p.as_str()),
        }
    }

    /// What was matched, for people: `named "train"`, `of script /home/u/train.sh`.
    pub fn describe(&self) -> String {
        match self {
            Key::Name(n) => format!("named \"{}\"", crate::text::clean_text(n, 100)),
            Key::Script(p) => format!("of script {}", crate::text::clean_text(p, 200)),
        }
    }

    /// A short text that tells keys apart, for the cache's list of submissions.
    pub fn id(&self) -> String {
        match self {
            Key::Name(n) => format!("n:{n}"),
            Key::Script(p) => format!("s:{p}"),
        }
    }
}

/// One finished run of one of the user's jobs, as the advice uses it: from Slurm's database
/// (ids, name, script, state, end, time limit) and gpu-tracker's stored summary (the rest).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PastRun {
    /// Its own job id.
    pub job: u32,
    /// The array's job id, for an array task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<u32>,
    /// Job name.
    pub name: String,
    /// The batch script's absolute path, where Slurm's database says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// When it ended, Unix seconds.
    pub end: i64,
    /// Slurm's state: `COMPLETED`, `TIMEOUT`, `OUT_OF_MEMORY`, `FAILED`.
    pub state: String,
    /// Wall-clock seconds.
    pub elapsed: f64,
    /// Its time limit, seconds; `None`: none or not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Memory it needed on its busiest node, bytes (page cache left out; the charged peak
    /// where the kernel killed a process of it for memory).
    pub mem_needed: u64,
    /// Its charged memory peak on that node, bytes.
    pub mem_peak: u64,
    /// Memory it asked for per node, bytes; 0: no limit.
    pub mem_asked: u64,
    /// CPUs it was given.
    pub cpus: u32,
    /// Most cores busy at once.
    pub cores: f64,
    /// GPUs it was given.
    pub gpus: u32,
    /// GPUs some process of it ran on.
    pub gpus_used: u32,
    /// The largest peak memory of its processes on one GPU, bytes.
    pub gpu_mem: u64,
    /// That kind of GPU's memory, bytes (the largest of its GPUs).
    pub gpu_size: u64,
    /// The highest mean utilization of one of its GPUs, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util: Option<f64>,
    /// The kernel killed some of its processes for memory.
    pub oom: bool,
}

impl PastRun {
    /// It ran into its time limit.
    pub fn timed_out(&self) -> bool {
        self.state.starts_with("TIMEOUT")
    }
}

/// What the job being submitted asks for, where the submission says it (`None`: Slurm's
/// default, which the past jobs most likely got too).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Request {
    /// Memory per node, bytes.
    pub mem: Option<u64>,
    /// Time limit, seconds.
    pub time: Option<u64>,
    /// CPUs of the whole job.
    pub cpus: Option<u32>,
    /// GPUs of the whole job.
    pub gpus: Option<u32>,
}

/// What the past runs used, at most, against what they (or this submission) asked.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Used {
    /// Memory needed on a node, bytes (what sizing uses).
    pub mem_needed: u64,
    /// Memory asked per node, bytes (this submission's, else the most a past job asked); 0:
    /// not known.
    pub mem_asked: u64,
    /// Longest run, seconds.
    pub elapsed: f64,
    /// Time limit (this submission's, else the longest a past job had), seconds.
    pub limit: Option<u64>,
    /// Most cores busy at once.
    pub cores: f64,
    /// CPUs asked.
    pub cpus: u32,
    /// Most GPUs a run put a process on.
    pub gpus_used: u32,
    /// GPUs asked.
    pub gpus: u32,
    /// Largest GPU memory peak on one GPU, bytes.
    pub gpu_mem: u64,
    /// Highest mean GPU utilization, percent.
    pub gpu_util: Option<f64>,
    /// Runs that reached their time limit.
    pub timeouts: usize,
    /// Runs with a process killed for memory.
    pub ooms: usize,
}

/// The request that would have fitted every past run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Suggestion {
    /// `--mem=`.
    pub mem: Option<String>,
    /// `--time=`.
    pub time: Option<String>,
    /// `--cpus-per-task=` for a one-task job, or CPUs over the job.
    pub cpus: Option<u32>,
    /// `--gres=` (`gpu:N`), or `none` when no run used its GPU.
    pub gres: Option<String>,
    /// Smaller GPU types or MIG profiles of the site that the runs' GPU memory and use fit.
    pub smaller_gpus: Vec<String>,
    /// The options, as typed.
    pub options: String,
}

/// The advice for one submission.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// What was matched.
    pub key: Key,
    /// Past jobs matched (an array counts once).
    pub jobs: usize,
    /// Their runs (each array task one).
    pub runs: usize,
    /// The first and last run's end, Unix seconds.
    pub first_end: i64,
    /// ...
    pub last_end: i64,
    /// What they used.
    pub used: Used,
    /// What would have fitted them.
    pub suggestion: Suggestion,
    /// What would change against the request, one phrase each; empty: nothing (no note).
    pub changes: Vec<String>,
}

/// The runs of `history` that `key` matches, newest first.
pub fn matching<'a>(history: &'a [PastRun], key: &Key) -> Vec<&'a PastRun> {
    let mut runs: Vec<&PastRun> = history.iter().filter(|r| key.matches(r)).collect();
    runs.sort_by_key(|r| std::cmp::Reverse((r.end, r.job)));
    runs
}

/// Memory a run's request had to cover: its need, or its charge where the kernel killed a
/// process of it for memory (the limit counts the charge).
fn sizing_bytes(r: &PastRun) -> u64 {
    if r.oom {
        r.mem_peak.max(r.mem_needed)
    } else {
        r.mem_needed
    }
}

/// The advice from `runs` (those of one key) for a submission asking `req`; `None` with no
/// runs.
pub fn advise(key: &Key, runs: &[&PastRun], req: &Request, cfg: &AdviseConfig) -> Option<Advice> {
    if runs.is_empty() {
        return None;
    }
    let mut jobs: Vec<u32> = runs.iter().map(|r| r.array.unwrap_or(r.job)).collect();
    jobs.sort_unstable();
    jobs.dedup();
    let max_u = |f: fn(&PastRun) -> u64| runs.iter().map(|r| f(r)).max().unwrap_or(0);
    let max_f = |f: fn(&PastRun) -> f64| runs.iter().map(|r| f(r)).fold(0.0, f64::max);
    let used = Used {
        mem_needed: max_u(sizing_bytes),
        mem_asked: req.mem.unwrap_or_else(|| max_u(|r| r.mem_asked)),
        elapsed: max_f(|r| r.elapsed),
        limit: req
            .time
            .or_else(|| runs.iter().filter_map(|r| r.limit).max()),
        cores: max_f(|r| r.cores),
        cpus: req
            .cpus
            .unwrap_or_else(|| runs.iter().map(|r| r.cpus).max().unwrap_or(0)),
        gpus_used: runs.iter().map(|r| r.gpus_used).max().unwrap_or(0),
        gpus: req
            .gpus
            .unwrap_or_else(|| runs.iter().map(|r| r.gpus).max().unwrap_or(0)),
        gpu_mem: max_u(|r| r.gpu_mem),
        gpu_util: runs.iter().filter_map(|r| r.gpu_util).reduce(f64::max),
        timeouts: runs.iter().filter(|r| r.timed_out()).count(),
        ooms: runs.iter().filter(|r| r.oom).count(),
    };
    let (suggestion, changes) = suggest(runs, &used, cfg);
    Some(Advice {
        key: key.clone(),
        jobs: jobs.len(),
        runs: runs.len(),
        first_end: runs.iter().map(|r| r.end).min().unwrap_or(0),
        last_end: runs.iter().map(|r| r.end).max().unwrap_or(0),
        used,
        suggestion,
        changes,
    })
}

/// A request this far under what was asked is worth a note (a quarter less) ...
const WORTH: f64 = 0.75;
/// ... when it also saves at least this much memory per node, bytes ...
const WORTH_BYTES: f64 = 512.0 * 1024.0 * 1024.0;
/// ... or time, seconds.
const WORTH_SECONDS: f64 = 600.0;

/// The request that fits `runs` with the margins of `cfg`, and what it changes against
/// `used`'s asked figures.
fn suggest(runs: &[&PastRun], used: &Used, cfg: &AdviseConfig) -> (Suggestion, Vec<String>) {
    let mut s = Suggestion::default();
    let mut changes = Vec::new();
    let mut options = Vec::new();
    if used.mem_needed > 0 {
        let want = (used.mem_needed as f64 * cfg.mem_margin)
            .ceil()
            .min(u64::MAX as f64) as u64;
        let opt = mem_option(want);
        let bytes = super::advice::mem_option_bytes(&opt);
        let asked = used.mem_asked as f64;
        let far_under = (bytes as f64) < asked * WORTH && asked - bytes as f64 >= WORTH_BYTES;
        let short = used.ooms > 0 && bytes > used.mem_asked;
        if used.mem_asked > 0 && (far_under || short) {
            changes.push(format!(
                "memory {opt} instead of {}{}",
                mem_text(used.mem_asked),
                if short {
                    format!(
                        " ({} of {} run(s) killed for memory)",
                        used.ooms,
                        runs.len()
                    )
                } else {
                    String::new()
                }
            ));
        }
        options.push(format!("--mem={opt}"));
        s.mem = Some(opt);
    }
    if used.elapsed > 0.0 {
        let want = (used.elapsed * cfg.time_margin).max(cfg.min_time_minutes * 60.0);
        let minutes = (want / 60.0).ceil().min(1e9) as u64;
        let t = slurm_time(minutes * 60);
        match used.limit {
            Some(limit) if used.timeouts > 0 && (minutes * 60) as f64 > limit as f64 => {
                changes.push(format!(
                    "time {t} instead of {} ({} of {} run(s) reached the limit)",
                    slurm_duration(limit as f64),
                    used.timeouts,
                    runs.len()
                ));
            }
            Some(limit)
                if ((minutes * 60) as f64) < limit as f64 * WORTH
                    && (limit - minutes * 60) as f64 >= WORTH_SECONDS =>
            {
                changes.push(format!(
                    "time {t} instead of {}",
                    slurm_duration(limit as f64)
                ));
            }
            _ => {}
        }
        options.push(format!("--time={t}"));
        s.time = Some(t);
    }
    if used.cpus > 1 && used.cores > 0.0 {
        let want = (used.cores * 1.25)
            .ceil()
            .max(1.0)
            .min(f64::from(used.cpus)) as u32;
        if f64::from(want) <= f64::from(used.cpus) * 0.5 {
            changes.push(format!(
                "{want} CPU(s) instead of {} (at most {:.1} busy)",
                used.cpus, used.cores
            ));
            options.push(format!("--cpus-per-task={want}"));
            s.cpus = Some(want);
        }
    }
    if used.gpus > 0 {
        if used.gpus_used == 0 {
            changes.push(format!(
                "no GPU instead of {} (no run put a process on one)",
                used.gpus
            ));
            s.gres = Some("none".into());
        } else {
            let g = format!("gpu:{}", used.gpus_used);
            if used.gpus_used < used.gpus {
                changes.push(format!(
                    "{} GPU(s) instead of {}",
                    used.gpus_used, used.gpus
                ));
            }
            options.push(format!("--gres={g}"));
            s.gres = Some(g);
            s.smaller_gpus = smaller_gpus(runs, used, cfg);
            if !s.smaller_gpus.is_empty() {
                changes.push(format!("a smaller GPU: {}", s.smaller_gpus.join(" or ")));
            }
        }
    }
    s.options = options.join(" ");
    (s, changes)
}

/// The site's GPU types and MIG profiles (`advise.gpu_types`) smaller than the GPUs the runs
/// had, whose memory holds every run's GPU peak with the memory margin and whose share of a
/// GPU's compute is at least the busiest GPU's mean utilization. Each as `--gres=...`.
fn smaller_gpus(runs: &[&PastRun], used: &Used, cfg: &AdviseConfig) -> Vec<String> {
    let Some(util) = used.gpu_util else {
        return Vec::new();
    };
    let had = runs.iter().map(|r| r.gpu_size).filter(|s| *s > 0).min();
    let need = used.gpu_mem as f64 * cfg.mem_margin;
    cfg.gpu_types
        .iter()
        .filter(|t| {
            let bytes = t.memory_gib * f64::from(1u32 << 30);
            bytes >= need && util <= t.compute_percent && had.is_some_and(|h| bytes < h as f64)
        })
        .map(|t| format!("--gres={}", t.gres))
        .collect()
}

/// Bytes as `--mem` takes them where they are whole, else as a size.
fn mem_text(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    if bytes % MIB == 0 {
        let m = bytes / MIB;
        if m % 1024 == 0 {
            format!("{}G", m / 1024)
        } else {
            format!("{m}M")
        }
    } else {
        human_bytes(bytes)
    }
}

#[cfg(test)]
mod cache_tests;
#[cfg(test)]
mod tests;

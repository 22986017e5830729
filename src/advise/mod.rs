//! Advice before a job runs: what the user's own finished jobs "of the same job" used against
//! what they asked for, and the request that would have fitted them, with the site's margins
//! (the one sizing rule, [`crate::report::sizing`]). A run stopped at a limit (killed for
//! memory, out of time) says only that it needed more than that limit: for that resource the
//! advice says the need is unknown, and its request is a guess, never a fit.
//!
//! The same job is what a user would call it: the job name (`-J`), else the batch script's
//! path (Slurm then names the job after the script). The history is the user's own finished
//! jobs that gpu-tracker summarised, from Slurm's database (each job's `AdminComment`, written
//! only by the site's EpilogSlurmctld), kept in a cache in the user's home ([`history`]), in a
//! directory no other user can get at ([`own_dir`]); the note ([`note`]) is printed at
//! submission by `slurm/cli_filter.lua` ([`submit`]) and by `gpu-tracker-report --advise`.
//! Each task of an array is a run of its own, and counts as evidence as a job does.

pub mod history;
pub(crate) mod note;
pub(crate) mod own_dir;
pub mod run;
pub(crate) mod submit;

use serde::{Deserialize, Serialize};

use crate::config::AdviseConfig;
use crate::report::sizing::{Evidence, GUESS_RULE, Sizing};
use crate::units::human_bytes;
use crate::units::slurm_duration;

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
    /// When it was submitted, Unix seconds (0: not known).
    #[serde(default)]
    pub submit: i64,
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

/// What the past runs used, at most, against what they (or this submission) asked. A run
/// stopped at a limit counts only in that limit's `*_at_least` for that resource.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Used {
    /// Memory needed on a node, bytes: the most a run that was not killed for memory needed
    /// (what sizing uses); 0: every run was.
    pub mem_needed: u64,
    /// The highest memory limit a run killed for memory hit, bytes (its charged peak where
    /// it had none): its need was more, by an amount not known. `None`: no run was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_at_least: Option<u64>,
    /// Memory asked per node, bytes (this submission's, else the most a past job asked); 0:
    /// not known.
    pub mem_asked: u64,
    /// Longest run that did not run out of time, seconds; 0: every run did.
    pub elapsed: f64,
    /// The longest time limit a run that ran out of time had, seconds: its need was more.
    /// `None`: no run ran out of time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_at_least: Option<u64>,
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

/// The request that would have fitted every past run, or, for a resource some run was
/// stopped at the limit of, a guess ([`GUESS_RULE`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Suggestion {
    /// `--mem=`.
    pub mem: Option<String>,
    /// `mem` is a guess: some run was killed for memory.
    pub mem_guess: bool,
    /// `--time=`.
    pub time: Option<String>,
    /// `time` is a guess: some run ran out of time.
    pub time_guess: bool,
    /// How a guess is made, where one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guess_rule: Option<&'static str>,
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

/// What `runs` say about their memory (bytes on a node) and their time (seconds): a run
/// killed for memory was stopped at its request (its charge where it asked none), one out of
/// time at its time limit (its elapsed time where the limit is not known).
pub fn evidence(runs: &[&PastRun]) -> (Evidence, Evidence) {
    let (mut mem, mut time) = (Evidence::default(), Evidence::default());
    for r in runs {
        if r.oom {
            let limit = if r.mem_asked > 0 {
                r.mem_asked
            } else {
                r.mem_peak.max(r.mem_needed)
            };
            mem.stopped_at(limit as f64);
        } else {
            mem.measured(r.mem_needed as f64);
        }
        if r.timed_out() {
            time.stopped_at(r.limit.map_or(r.elapsed, |l| l as f64));
        } else {
            time.measured(r.elapsed);
        }
    }
    (mem, time)
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
    let (mem, time) = evidence(runs);
    let used = Used {
        mem_needed: mem.measured as u64,
        mem_at_least: (mem.stopped > 0).then_some(mem.at_least as u64),
        mem_asked: req.mem.unwrap_or_else(|| max_u(|r| r.mem_asked)),
        elapsed: time.measured,
        time_at_least: (time.stopped > 0).then_some(time.at_least.round() as u64),
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
    let (suggestion, changes) = suggest(runs, &used, (&mem, &time), cfg);
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

/// The request that fits `runs` with the margins of `cfg` (a guess for a resource some run
/// was stopped at the limit of), and what it changes against `used`'s asked figures.
fn suggest(
    runs: &[&PastRun],
    used: &Used,
    (mem, time): (&Evidence, &Evidence),
    cfg: &AdviseConfig,
) -> (Suggestion, Vec<String>) {
    let sizing = Sizing::of(cfg);
    let mut s = Suggestion::default();
    let mut changes = Vec::new();
    let mut options = Vec::new();
    if let Some(m) = sizing.mem(mem) {
        let asked = used.mem_asked as f64;
        let bytes = m.value as f64;
        if m.guess {
            // Only ever more than was asked: what they needed is not known.
            if used.mem_asked > 0 && m.value > used.mem_asked {
                changes.push(format!(
                    "memory {} instead of {} (a guess: {} of {} run(s) killed at a {} memory limit; how much more they needed is not known)",
                    m.option,
                    mem_text(used.mem_asked),
                    mem.stopped,
                    runs.len(),
                    mem_text(mem.at_least as u64)
                ));
            }
        } else if used.mem_asked > 0 && bytes < asked * WORTH && asked - bytes >= WORTH_BYTES {
            changes.push(format!(
                "memory {} instead of {}",
                m.option,
                mem_text(used.mem_asked)
            ));
        }
        options.push(format!("--mem={}", m.option));
        s.mem_guess = m.guess;
        s.mem = Some(m.option);
    }
    if let Some(t) = sizing.time(time) {
        match used.limit {
            Some(limit) if t.guess && t.value > limit => {
                changes.push(format!(
                    "time {} instead of {} (a guess: {} of {} run(s) ran out of a {} limit; how much more they needed is not known)",
                    t.option,
                    slurm_duration(limit as f64),
                    time.stopped,
                    runs.len(),
                    slurm_duration(time.at_least)
                ));
            }
            Some(limit)
                if !t.guess
                    && (t.value as f64) < limit as f64 * WORTH
                    && limit.saturating_sub(t.value) as f64 >= WORTH_SECONDS =>
            {
                changes.push(format!(
                    "time {} instead of {}",
                    t.option,
                    slurm_duration(limit as f64)
                ));
            }
            _ => {}
        }
        options.push(format!("--time={}", t.option));
        s.time_guess = t.guess;
        s.time = Some(t.option);
    }
    if s.mem_guess || s.time_guess {
        s.guess_rule = Some(GUESS_RULE);
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
mod honest_tests;
#[cfg(test)]
mod tests;

//! The site report: `gpu-tracker-report --by user|account|partition`, one row per group of
//! finished jobs, worst first, from the summaries kept in Slurm's database (the spool only for
//! what the database lacks).
//!
//! Each job becomes one [`JobFacts`] (from its stored summary, or from its records in the
//! spool), and each group adds its jobs' facts up ([`Group`]). Nothing here runs a command:
//! `db.rs` asks `sacct`, `render.rs` prints; the sums and their order are pure code, tested on
//! made-up jobs.
//!
//! The hours: a job's GPU-hours are its GPUs times its elapsed time; "no process" GPU-hours are
//! those of GPUs no process of the job ever ran on (the `gpu-unused` rule); idle GPU-hours are
//! the GPUs' idle time (utilization under the idle threshold, the summary's idle figure), the
//! unused GPUs' whole time included. Memory GiB-hours are the memory requested, and the peak
//! used, times elapsed: the peak is what a request must cover, so "used" is the peak held for
//! the whole job.

pub(crate) mod collect;
pub(crate) mod render;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use chrono::{DateTime, FixedOffset};
use serde::Serialize;

use super::classes::{self, ClassRules};
use super::figures::Summary;
use super::stored::Stored;
use crate::slurm::ended::Owner;

/// What the site report's JSON says it is.
pub const SCHEMA: &str = "gpu-tracker/site-report";
/// Its version: fields are added, never change meaning.
pub const SCHEMA_VERSION: u32 = 1;

const GIB: f64 = (1u64 << 30) as f64;

/// What the rows are: one per user, account or partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupBy {
    /// Slurm's user name.
    User,
    /// Slurm's account.
    Account,
    /// The partition the job ran in.
    Partition,
}

impl GroupBy {
    /// The group a job of `owner` belongs to.
    pub fn key_of(self, owner: &Owner) -> &str {
        let k = match self {
            GroupBy::User => &owner.user,
            GroupBy::Account => &owner.account,
            GroupBy::Partition => &owner.partition,
        };
        if k.is_empty() { "(none)" } else { k }
    }

    /// Reads `user`, `account` or `partition`.
    pub fn parse(s: &str) -> Result<GroupBy, String> {
        match s {
            "user" => Ok(GroupBy::User),
            "account" => Ok(GroupBy::Account),
            "partition" => Ok(GroupBy::Partition),
            _ => Err(format!("{s:?}: --by takes user, account or partition")),
        }
    }

    /// The word, as `--by` takes it.
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::User => "user",
            GroupBy::Account => "account",
            GroupBy::Partition => "partition",
        }
    }
}

/// Where a job's figures came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The summary stored in Slurm's database (the job's `AdminComment`).
    Database,
    /// The job's records in the spool.
    Spool,
}

/// The figures of one finished job that the site report adds up.
#[derive(Debug, Clone, PartialEq)]
pub struct JobFacts {
    /// Where they came from.
    pub source: Source,
    /// Elapsed seconds.
    pub elapsed_seconds: f64,
    /// CPU seconds of every step.
    pub cpu_seconds: f64,
    /// CPUs allocated, over the nodes with records.
    pub alloc_cpus: u32,
    /// GPUs allocated.
    pub gpus: usize,
    /// Mean GPU utilization over the job's GPUs, where reported.
    pub gpu_utilization_percent: Option<f64>,
    /// GPUs no process of the job ran on.
    pub unused_gpus: usize,
    /// The GPUs' idle seconds added up; `None` where not kept (summaries of earlier builds).
    pub idle_gpu_seconds: Option<f64>,
    /// Memory requested, over the nodes (0: no limit).
    pub memory_requested_bytes: u64,
    /// Peak memory, over the nodes.
    pub memory_peak_bytes: u64,
    /// Memory used, over the nodes: what the job needed (page cache the kernel could reclaim
    /// left out), or the charged peak where the summary has no such figure (summaries stored
    /// by earlier builds). The memory-used column.
    pub memory_used_bytes: u64,
    /// A task failed, or Slurm ended the job as failed (timeout, node failure).
    pub failed: bool,
    /// A process was killed for memory, or Slurm ended the job out of memory.
    pub oom: bool,
    /// The job's class tags.
    pub classes: Vec<String>,
}

impl JobFacts {
    /// From a summary stored in Slurm's database. Summaries of earlier builds, which kept no
    /// classes or GPU use, get those their figures show under the built-in rules, as when such
    /// a summary is shown (idle time stays unknown).
    pub fn from_stored(st: &Stored) -> JobFacts {
        let (mem, req, gpus, _, util) = st.totals;
        let (classes, unused) = match (&st.classes, st.gpu_use) {
            (Some(cl), Some((unused, _))) => (cl.clone(), unused as usize),
            _ => {
                let s = st.to_summary("", 0, None, &ClassRules::default());
                let unused = s.gpus.iter().filter(|g| classes::gpu_unused(g)).count();
                let tags = match &st.classes {
                    Some(cl) => cl.clone(),
                    None => s.classes.iter().map(|c| c.tag.clone()).collect(),
                };
                (tags, st.gpu_use.map_or(unused, |g| g.0 as usize))
            }
        };
        let classes: Vec<String> = classes.into_iter().filter(|t| classes::is_tag(t)).collect();
        JobFacts {
            source: Source::Database,
            elapsed_seconds: st.elapsed.max(0.0),
            cpu_seconds: st.cpu.0.max(0.0),
            alloc_cpus: st.cpu.1,
            gpus,
            gpu_utilization_percent: (util >= 0.0).then_some(util),
            unused_gpus: unused.min(gpus),
            idle_gpu_seconds: st.gpu_use.map(|g| g.1.max(0.0)),
            memory_requested_bytes: req,
            memory_peak_bytes: mem,
            memory_used_bytes: st.memory_needed.map_or(mem, |n| n.min(mem)),
            failed: st.failed_tasks > 0 || classes.iter().any(|t| t == "failed"),
            oom: st.oom_kills > 0 || classes.iter().any(|t| t == "oom"),
            classes,
        }
    }

    /// From a job's summary made from its records in the spool (classes already set).
    pub fn from_summary(s: &Summary) -> JobFacts {
        let classes: Vec<String> = s.classes.iter().map(|c| c.tag.clone()).collect();
        JobFacts {
            source: Source::Spool,
            elapsed_seconds: s.elapsed_seconds.max(0.0),
            cpu_seconds: s.cpu.seconds.max(0.0),
            alloc_cpus: s.cpu.alloc_cpus,
            gpus: s.totals.gpus,
            gpu_utilization_percent: s.totals.gpu_mean_utilization_percent,
            unused_gpus: s.gpus.iter().filter(|g| classes::gpu_unused(g)).count(),
            idle_gpu_seconds: Some(s.gpu_idle.iter().fold(0.0, |t, i| t + i.idle.idle_seconds)),
            memory_requested_bytes: s.totals.memory_requested_bytes.unwrap_or(0),
            memory_peak_bytes: s.totals.memory_peak_bytes,
            memory_used_bytes: s
                .totals
                .memory_needed_bytes
                .map_or(s.totals.memory_peak_bytes, |n| {
                    n.min(s.totals.memory_peak_bytes)
                }),
            failed: s.steps.iter().any(|st| !st.failed.is_empty())
                || classes.iter().any(|t| t == "failed"),
            oom: !s.oom.is_empty() || classes.iter().any(|t| t == "oom"),
            classes,
        }
    }

    /// Slurm's end state of the job counts too: a job Slurm ended as failed (`FAILED`,
    /// `TIMEOUT`, `NODE_FAIL`, `BOOT_FAIL`, `DEADLINE`) or out of memory is counted so, whatever
    /// its tasks' figures say; a `TIMEOUT` is in the `timeout` class, as the job's summary
    /// puts a job its records show killed at its time limit.
    pub fn with_state(mut self, state: &str) -> JobFacts {
        let word = state.split_whitespace().next().unwrap_or_default();
        if word == "TIMEOUT" && !self.classes.iter().any(|t| t == "timeout") {
            self.classes.push("timeout".into());
            let order = |t: &String| {
                crate::report::classes::TAGS
                    .iter()
                    .position(|x| x == t)
                    .unwrap_or(usize::MAX)
            };
            self.classes.sort_by_key(order);
        }
        match word {
            "FAILED" | "TIMEOUT" | "NODE_FAIL" | "BOOT_FAIL" | "DEADLINE" => self.failed = true,
            "OUT_OF_MEMORY" => self.oom = true,
            _ => {}
        }
        self
    }
}

/// The jobs of one group, added up.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Group {
    /// The user, account or partition.
    pub group: String,
    /// Jobs with figures.
    pub jobs: u64,
    /// Finished jobs of the group with no figures (not tracked, or records out of reach).
    pub without_figures: u64,
    /// GPU-hours allocated.
    pub gpu_hours: f64,
    /// GPU-hours of GPUs no process of the job ran on.
    pub gpu_hours_unused: f64,
    /// GPU-hours idle, the unused GPUs' included.
    pub gpu_hours_idle: f64,
    /// Jobs with GPUs whose idle time was not kept (summaries of earlier builds): their
    /// unused GPU-hours count as idle, their other idle time is missing.
    pub jobs_idle_unknown: u64,
    /// Mean GPU utilization, weighted by GPU-hours; `None` where no GPU reported one.
    pub gpu_utilization_percent: Option<f64>,
    /// CPU time over elapsed × CPUs allocated, over the group's jobs.
    pub cpu_efficiency_percent: Option<f64>,
    /// Memory requested × elapsed, GiB-hours.
    pub memory_requested_gib_hours: f64,
    /// Memory used × elapsed, GiB-hours: the memory the job needed (page cache the kernel
    /// could reclaim left out), else its charged peak ([`JobFacts::memory_used_bytes`]).
    pub memory_used_gib_hours: f64,
    /// Jobs that failed.
    pub failed_jobs: u64,
    /// Jobs with a process killed for memory.
    pub oom_jobs: u64,
    /// Jobs per class tag.
    pub classes: BTreeMap<String, u64>,
    /// Jobs per source of their figures.
    pub sources: Sources,
    #[serde(skip)]
    sums: Sums,
}

/// Jobs per source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Sources {
    /// From Slurm's database.
    pub database: u64,
    /// From the spool.
    pub spool: u64,
}

/// What the means are made of.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sums {
    util_weighted: f64,
    util_gpu_hours: f64,
    cpu_seconds: f64,
    cpu_alloc_seconds: f64,
}

impl Group {
    fn add(&mut self, j: &JobFacts) {
        let hours = j.elapsed_seconds / 3600.0;
        let gpu_hours = j.gpus as f64 * hours;
        self.jobs += 1;
        self.gpu_hours += gpu_hours;
        let unused = j.unused_gpus as f64 * hours;
        self.gpu_hours_unused += unused;
        match j.idle_gpu_seconds {
            // The idle time counted over the GPUs' readings: never more than their hours, and
            // never less than the unused GPUs' whole time.
            Some(idle) => {
                self.gpu_hours_idle += (idle / 3600.0).clamp(unused, gpu_hours.max(unused))
            }
            None => {
                self.gpu_hours_idle += unused;
                if j.gpus > 0 {
                    self.jobs_idle_unknown += 1;
                }
            }
        }
        if let Some(u) = j.gpu_utilization_percent.filter(|_| gpu_hours > 0.0) {
            self.sums.util_weighted += u * gpu_hours;
            self.sums.util_gpu_hours += gpu_hours;
        }
        if j.alloc_cpus > 0 {
            self.sums.cpu_seconds += j.cpu_seconds;
            self.sums.cpu_alloc_seconds += j.elapsed_seconds * f64::from(j.alloc_cpus);
        }
        self.memory_requested_gib_hours += j.memory_requested_bytes as f64 / GIB * hours;
        self.memory_used_gib_hours += j.memory_used_bytes as f64 / GIB * hours;
        self.failed_jobs += u64::from(j.failed);
        self.oom_jobs += u64::from(j.oom);
        for t in &j.classes {
            *self.classes.entry(t.clone()).or_default() += 1;
        }
        match j.source {
            Source::Database => self.sources.database += 1,
            Source::Spool => self.sources.spool += 1,
        }
    }

    fn finish(&mut self) {
        let s = self.sums;
        self.gpu_utilization_percent =
            (s.util_gpu_hours > 0.0).then(|| round1(s.util_weighted / s.util_gpu_hours));
        self.cpu_efficiency_percent = (s.cpu_alloc_seconds > 0.0)
            .then(|| round1(100.0 * s.cpu_seconds / s.cpu_alloc_seconds));
    }

    /// Memory asked for and never used, GiB-hours.
    pub fn memory_unused_gib_hours(&self) -> f64 {
        (self.memory_requested_gib_hours - self.memory_used_gib_hours).max(0.0)
    }
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// How many jobs came from where, over the whole report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct JobCounts {
    /// Jobs with figures.
    pub counted: u64,
    /// Of which from Slurm's database.
    pub from_database: u64,
    /// Of which from the spool.
    pub from_spool: u64,
    /// Finished jobs with no figures: not tracked, or no record the caller could read.
    pub without_figures: u64,
    /// Of those, jobs whose spool records exist but were not readable by the caller.
    pub unreadable: u64,
}

/// The site report, built one job at a time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SiteReport {
    /// `gpu-tracker/site-report`.
    pub schema: &'static str,
    /// Its version.
    pub schema_version: u32,
    /// What the rows are.
    pub by: GroupBy,
    /// Jobs that ended at or after this time (RFC 3339) ...
    #[serde(serialize_with = "rfc3339")]
    pub since: DateTime<FixedOffset>,
    /// ... and before this one.
    #[serde(serialize_with = "rfc3339")]
    pub until: DateTime<FixedOffset>,
    /// Whose jobs: every user's, or the caller's alone.
    pub scope: String,
    /// The `sacct` calls made (0: Slurm's database was not read).
    pub sacct_calls: u32,
    /// Jobs by where their figures came from.
    pub jobs: JobCounts,
    /// The rows, worst first.
    pub groups: Vec<Group>,
    /// What people should know: the database could not be read, a summary was damaged, ...
    pub notes: Vec<String>,
    #[serde(skip)]
    by_key: BTreeMap<String, Group>,
}

impl SiteReport {
    /// An empty report of `by` over [`since`, `until`).
    pub fn new(
        by: GroupBy,
        since: DateTime<FixedOffset>,
        until: DateTime<FixedOffset>,
    ) -> SiteReport {
        SiteReport {
            schema: SCHEMA,
            schema_version: SCHEMA_VERSION,
            by,
            since,
            until,
            scope: String::new(),
            sacct_calls: 0,
            jobs: JobCounts::default(),
            groups: Vec::new(),
            notes: Vec::new(),
            by_key: BTreeMap::new(),
        }
    }

    fn group(&mut self, owner: &Owner) -> &mut Group {
        let key = self.by.key_of(owner);
        if !self.by_key.contains_key(key) {
            let g = Group {
                group: key.to_string(),
                ..Group::default()
            };
            self.by_key.insert(key.to_string(), g);
        }
        self.by_key.get_mut(key).expect("inserted above")
    }

    /// Adds one job with figures.
    pub fn add(&mut self, owner: &Owner, j: &JobFacts) {
        self.jobs.counted += 1;
        match j.source {
            Source::Database => self.jobs.from_database += 1,
            Source::Spool => self.jobs.from_spool += 1,
        }
        self.group(owner).add(j);
    }

    /// Counts a finished job that has no figures (`unreadable`: its records exist but the
    /// caller may not read them).
    pub fn add_without_figures(&mut self, owner: &Owner, unreadable: bool) {
        self.jobs.without_figures += 1;
        self.jobs.unreadable += u64::from(unreadable);
        self.group(owner).without_figures += 1;
    }

    /// Closes the sums and puts the rows in order, worst first: the most idle GPU-hours, then
    /// the most GPU-hours with no process, then the most memory asked for and not used
    /// (GiB-hours), then the most failed and OOM-killed jobs; groups with no job with figures
    /// last; ties by name.
    pub fn finish(&mut self) {
        let mut groups: Vec<Group> = std::mem::take(&mut self.by_key).into_values().collect();
        for g in &mut groups {
            g.finish();
        }
        groups.sort_by(|a, b| {
            (b.jobs > 0)
                .cmp(&(a.jobs > 0))
                .then(b.gpu_hours_idle.total_cmp(&a.gpu_hours_idle))
                .then(b.gpu_hours_unused.total_cmp(&a.gpu_hours_unused))
                .then(
                    b.memory_unused_gib_hours()
                        .total_cmp(&a.memory_unused_gib_hours()),
                )
                .then((b.failed_jobs + b.oom_jobs).cmp(&(a.failed_jobs + a.oom_jobs)))
                .then(a.group.cmp(&b.group))
        });
        self.groups = groups;
    }
}

fn rfc3339<S: serde::Serializer>(t: &DateTime<FixedOffset>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339())
}

/// The classes a job gets from its spool records, under the site's rules.
pub fn spool_facts(mut s: Summary, rules: &ClassRules) -> JobFacts {
    s.set_classes(rules);
    JobFacts::from_summary(&s)
}

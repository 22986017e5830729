//! Reading a job's records back: loading them from the spool (with every problem named), the
//! job summary, its classes and advice, and the text, JSON, one-line and chart renderings that
//! the end-of-job summary and `gpu-tracker-report` print; the summary kept in Slurm's database,
//! an array's summary and the site report; `gpu-tracker-report`'s commands ([`cmd`]).
//!
//! Reading needs no privileges: a user sees the records the file permissions (the POSIX ACL the
//! plugin grants) let them read, root sees all.
//!
//! Nothing in the spool is trusted ([`safe_read`]): a job directory or record that is a
//! symbolic link, not a regular file, larger than a record can be, owned by someone other than
//! its job directory's owner, or hard-linked elsewhere is refused unread and named as a
//! [`Problem`]; the job's other records are still used.

pub(crate) mod advice;
pub(crate) mod array;
pub mod classes;
pub mod cmd;
pub mod epilog;
pub mod figures;
pub(crate) mod fold;
pub(crate) mod gpu_shared;
pub(crate) mod gpu_text;
pub mod jobstats;
pub mod jobstats_store;
pub(crate) mod listing;
mod load;
pub(crate) mod memory;
#[cfg(test)]
mod memory_tests;
mod merge;
pub(crate) mod nodes;
pub mod plot;
pub mod pressure;
pub(crate) mod runs;
pub(crate) mod site;
pub(crate) mod sizing;
pub mod stored;
pub mod story;
pub(crate) mod summary;
pub(crate) mod text;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::step::record::StepRecord;
use crate::step::safe_read;
pub use figures::Summary;
pub use load::{
    JobRecords, LoadError, Problem, Visit, load_job, load_job_limited, revisit_job, visit_job,
};

/// The job directory of `job_id` in the spool at `root`.
pub fn job_dir(root: &Path, job_id: u32) -> PathBuf {
    root.join(job_id.to_string())
}

/// Sort key of a step id: batch, interactive, extern, then numbered steps in order.
pub fn step_order(id: &str) -> (u8, u64) {
    match id {
        "batch" => (0, 0),
        "interactive" => (1, 0),
        "extern" => (3, 0),
        n => (2, n.parse().unwrap_or(u64::MAX)),
    }
}

/// Job ids that have a directory in the spool, smallest first (directories the caller cannot
/// read are listed too: the spool itself is world-readable).
/// A cluster without a directory yet has no jobs. An entry named like a job that is not a
/// directory (a symbolic link: never followed) is left out; [`job_entries`] names them.
pub fn job_ids(root: &Path) -> io::Result<Vec<u32>> {
    Ok(job_entries(root)?.ids)
}

/// The entries of a cluster's spool named like jobs (a job id as Slurm writes it: digits, no
/// sign, no leading zero).
#[derive(Debug, Default)]
pub struct JobEntries {
    /// Ids with a real directory (not a link to one), smallest first.
    pub ids: Vec<u32>,
    /// Entries named like a job that are not a directory, with what they are (`a symbolic
    /// link`, ...): never followed, read or removed.
    pub refused: Vec<(PathBuf, &'static str)>,
}

/// The job directories of the spool at `root`, judged by the type the directory gives (a link
/// is not followed). A missing `root` has none.
pub fn job_entries(root: &Path) -> io::Result<JobEntries> {
    let entries = match fs::read_dir(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(JobEntries::default()),
        r => r?,
    };
    let mut out = JobEntries::default();
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.parse::<u32>().ok().filter(|id| id.to_string() == n))
        else {
            continue;
        };
        match e.file_type() {
            Ok(t) if t.is_dir() => out.ids.push(id),
            Ok(t) => out.refused.push((e.path(), safe_read::kind_of(&t))),
            Err(_) => {}
        }
    }
    out.ids.sort_unstable();
    out.refused.sort();
    Ok(out)
}

/// The JSON document `gpu-tracker-report --format json` prints: the job's summary, every
/// readable record, and the problems. Documented in `slurm/RECORD.md`.
#[derive(Debug, Serialize)]
pub struct JobDocument<'a> {
    /// Always `gpu-tracker/job`.
    pub schema: &'static str,
    /// Version of this document's format.
    pub schema_version: u32,
    /// The merged figures (bytes, seconds, percent, joules).
    pub summary: &'a Summary,
    /// The step records as the plugin wrote them.
    pub records: &'a [StepRecord],
    /// Records that could not be used, and incomplete ones.
    pub problems: &'a [Problem],
}

/// Value of [`JobDocument::schema`].
pub const JOB_SCHEMA: &str = "gpu-tracker/job";
/// Value of [`JobDocument::schema_version`].
pub const JOB_SCHEMA_VERSION: u32 = 2;

impl JobRecords {
    /// Only the records of step `step` (`batch`, `0`, ...), with their problems.
    pub fn only_step(mut self, step: &str) -> JobRecords {
        self.records.retain(|r| r.step.id == step);
        let prefix = format!(".{step}.json");
        self.problems.retain(|p| p.file().ends_with(&prefix));
        self.left_out = 0;
        self
    }

    /// The summary of these records: of step `step` alone ([`Summary::of_step`]), or of the
    /// job; it says how many records were left out, and from which step none were written.
    pub fn summary(&self, step: Option<&str>) -> Summary {
        let mut s = match step {
            Some(st) => Summary::of_step(&self.records, st),
            None => Summary::from_records(&self.records),
        };
        s.records_left_out = self.left_out as u64;
        s.steps_not_recorded_from = self.steps_not_recorded_from;
        s
    }

    /// The merged JSON document, pretty, newline-terminated.
    pub fn to_json(&self, summary: &Summary) -> String {
        let doc = JobDocument {
            schema: JOB_SCHEMA,
            schema_version: JOB_SCHEMA_VERSION,
            summary,
            records: &self.records,
            problems: &self.problems,
        };
        let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// A job's summary read from the spool ([`job_summary`]), and what was wrong with its records.
#[derive(Debug)]
pub struct JobSummary {
    /// The summary (empty when no record was taken).
    pub summary: Summary,
    /// The records taken.
    pub records: usize,
    /// Every problem found in the records read (incomplete ones too).
    pub problems: Vec<Problem>,
}

/// The summary of job `job_id` (of step `step` alone, when given) in the spool at `root`, its
/// records read one at a time ([`visit_job`]: at most `max_records`, the rest counted) and
/// merged as they come ([`fold::JobFold`]): never more than one record is held. Only records
/// that `keep` takes count. A job with marks has its records read twice (the phases need the
/// marks of all of them first).
pub fn job_summary(
    root: &Path,
    job_id: u32,
    step: Option<&str>,
    max_records: usize,
    keep: impl Fn(&StepRecord) -> bool,
) -> Result<JobSummary, LoadError> {
    let mut f = match step {
        Some(_) => fold::JobFold::of_step(),
        None => fold::JobFold::new(),
    };
    let visit = visit_job(root, job_id, step, max_records, |r| {
        if keep(&r) {
            f.add(&r);
        }
    })?;
    let mut phases = Vec::new();
    if let Some(mut p) = f.phases() {
        revisit_job(root, job_id, &visit.names, |r| {
            if keep(&r) {
                p.add(&r);
            }
        })?;
        phases = p.finish();
    }
    let records = f.records();
    let mut summary = f.finish(phases);
    summary.records_left_out = visit.left_out as u64;
    summary.steps_not_recorded_from = visit.steps_not_recorded_from;
    let mut problems = visit.problems;
    if let Some(st) = step {
        summary.only_step = Some(st.to_string());
        let suffix = format!(".{st}.json");
        problems.retain(|p| p.file().ends_with(&suffix));
    }
    Ok(JobSummary {
        summary,
        records,
        problems,
    })
}

/// The summary printed at the end of a job (all of its steps) or of an interactive step
/// (`step`): waits up to `wait` for records still being finished (a step's record lands just
/// after its tasks end), then renders what is there. `None` when there is no record at all.
/// At most `max_records` records are read ([`job_summary`]).
///
/// Only the records of job instance `instance` count: a directory held by another job with
/// the same id (which the plugin would have moved aside) gives `None`, and each record must
/// name the instance's user and, where both are known, its submission token. The job is classed
/// under the site's `rules`.
pub fn end_of_job_text(
    root: &Path,
    instance: &crate::step::spool::Instance,
    step: Option<&str>,
    max_records: usize,
    wait: std::time::Duration,
    co2_grams_per_kwh: f64,
    rules: &classes::ClassRules,
) -> Option<String> {
    end_of_job_look(
        root,
        instance,
        step,
        max_records,
        wait,
        co2_grams_per_kwh,
        rules,
    )
    .map(|(text, _)| text)
}

/// [`end_of_job_text`], and whether every record it read was final (`false`: the text is of
/// records still being written, as at the bound of `wait`).
pub fn end_of_job_look(
    root: &Path,
    instance: &crate::step::spool::Instance,
    step: Option<&str>,
    max_records: usize,
    wait: std::time::Duration,
    co2_grams_per_kwh: f64,
    rules: &classes::ClassRules,
) -> Option<(String, bool)> {
    let begun = std::time::Instant::now();
    let deadline = begun + wait;
    let job_id = instance.job_id;
    let keep = |r: &StepRecord| {
        r.job.uid == instance.uid
            && r.job.cluster.as_deref().unwrap_or_default() == instance.cluster
            && match (&r.job.submit_token, instance.token.as_str()) {
                (Some(t), mine) if !mine.is_empty() => t == mine,
                _ => true,
            }
    };
    loop {
        let held = crate::step::spool::read_instance(&job_dir(root, job_id), None)
            .is_some_and(|i| instance.same_job(&i));
        let j = held
            .then(|| job_summary(root, job_id, step, max_records, keep).ok())
            .flatten();
        let settled = j.as_ref().is_some_and(|j| {
            j.records > 0
                && j.problems
                    .iter()
                    .all(|p| !matches!(p, Problem::Incomplete { .. }))
        });
        if settled || std::time::Instant::now() >= deadline {
            let mut j = j.filter(|j| j.records > 0)?;
            j.summary.set_co2(co2_grams_per_kwh);
            j.summary.set_classes(rules);
            let text = text::render(&j.summary, &j.problems, &text::TextOptions::default());
            return Some((
                crate::step::record::terminal_safe(&text).into_owned(),
                settled,
            ));
        }
        // A step's final record usually lands within milliseconds of its tasks' end: look
        // often at first (every 10 ms for 1 s), then every 100 ms. Each look reads the job's
        // records again (at most `max_records`).
        let pause = if begun.elapsed() < std::time::Duration::from_secs(1) {
            10
        } else {
            100
        };
        std::thread::sleep(std::time::Duration::from_millis(pause));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_sort_batch_first_then_by_number() {
        let mut ids = vec!["10", "extern", "2", "batch"];
        ids.sort_by_key(|i| step_order(i));
        assert_eq!(ids, vec!["batch", "2", "10", "extern"]);
    }
}

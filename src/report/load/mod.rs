//! Reading a job's records from the spool: one at a time, each judged safe before it is read
//! ([`safe_read`]), and at most a bound of them.
//!
//! A job may have tens of thousands of steps (Slurm's `MaxStepCount` is 40,000 by default), and
//! the end-of-job summary is read as root inside slurmstepd: every record read costs time and
//! memory there. So at most `max_summary_records` records of a job are read ([`visit_job`]):
//! those of the batch, interactive and extern steps first (they see the whole job), then the
//! numbered steps in order, node by node; the others are counted and left out, and the summary
//! says so. Records are handed over one at a time, so a caller that folds them
//! ([`super::fold`]) never holds more than one. A job whose steps past `max_step_records` were
//! not recorded at all has a marker in its directory ([`STEPS_LEFT_OUT_FILE`]), which the
//! summary shows too.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{job_dir, step_order};
use crate::step::record::{RecordError, StepRecord};
use crate::step::safe_read::{self, JobDir, MAX_INSTANCE_BYTES, MAX_RECORD_BYTES, Refusal};
use crate::step::spool::{INSTANCE_FILE, Instance};

use crate::step::spool::{STEPS_LEFT_OUT_FILE, StepsLeftOut};

/// What went wrong with one record file.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// The step is still running, or its slurmstepd ended without writing the final record.
    Incomplete {
        /// The record's file name.
        file: String,
        /// When the checkpoint was written.
        written_at: String,
    },
    /// Not a record (truncated, edited, not JSON).
    Corrupt {
        /// The file name.
        file: String,
        /// The parser's message.
        error: String,
    },
    /// Written by a newer gpu-tracker.
    FutureVersion {
        /// The file name.
        file: String,
        /// Its format version.
        version: u32,
    },
    /// Not readable by the caller, or refused unread (`refused`).
    Unreadable {
        /// The file name.
        file: String,
        /// The system's message, or why the file was refused.
        error: String,
        /// The file was not read because it is not what the plugin writes: a symbolic link
        /// (never followed), a FIFO, socket, device or directory, larger than a record can be
        /// ([`safe_read::MAX_RECORD_BYTES`]), owned by someone other than its job directory's
        /// owner, or with more than one hard link. Absent from the JSON when false.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        refused: bool,
    },
}

impl Problem {
    /// The record file it is about.
    pub fn file(&self) -> &str {
        match self {
            Problem::Incomplete { file, .. }
            | Problem::Corrupt { file, .. }
            | Problem::FutureVersion { file, .. }
            | Problem::Unreadable { file, .. } => file,
        }
    }

    /// One line for people.
    pub fn message(&self) -> String {
        match self {
            Problem::Incomplete { file, written_at } => format!(
                "{file}: incomplete (step still running, or killed before its final record; last written {written_at})"
            ),
            Problem::Corrupt { file, error } => format!("{file}: corrupt record: {error}"),
            Problem::FutureVersion { file, version } => format!(
                "{file}: written in record format {version}, newer than this gpu-tracker-report understands ({}); update gpu-tracker",
                crate::step::record::SCHEMA_VERSION
            ),
            Problem::Unreadable {
                file,
                error,
                refused: false,
            } => format!("{file}: cannot read: {error}"),
            Problem::Unreadable {
                file,
                error,
                refused: true,
            } => format!("{file}: refused: {error}"),
        }
    }
}

/// The records of one job that could be read, and what could not.
#[derive(Debug, Clone, Default)]
pub struct JobRecords {
    /// The job id.
    pub job_id: u32,
    /// Readable records (including incomplete ones), ordered by node then step.
    pub records: Vec<StepRecord>,
    /// Every problem found.
    pub problems: Vec<Problem>,
    /// Records in the job's directory that were not read: past the bound on how many are
    /// (`max_summary_records`).
    pub left_out: usize,
    /// The first step number whose record was not written (`max_step_records`), when the job
    /// had more steps.
    pub steps_not_recorded_from: Option<u32>,
}

/// What reading a job's directory found besides its records ([`visit_job`]).
#[derive(Debug, Clone, Default)]
pub struct Visit {
    /// Every problem found in the records read.
    pub problems: Vec<Problem>,
    /// The records handed over.
    pub records: usize,
    /// Entries named like records that were not read: past the bound.
    pub left_out: usize,
    /// The first step number whose record was not written, from the job's marker.
    pub steps_not_recorded_from: Option<u32>,
    /// The entries read, in the order read: [`revisit_job`] reads the same again.
    pub names: Vec<OsString>,
}

/// Why a job's records could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// No directory for the job in the spool.
    #[error("no records of job {0} in {1}")]
    NoRecords(u32, PathBuf),
    /// The job's directory exists but the caller may not read it.
    #[error("records of job {0} exist but are not readable by you ({1})")]
    Denied(u32, PathBuf),
    /// The job's entry in the spool is not a directory (a symbolic link, which is never
    /// followed, or a file): nothing in it was read.
    #[error("{1}: refused: {2}")]
    Refused(u32, PathBuf, String),
    /// Another I/O error.
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] io::Error),
}

/// Loads the records of `job_id` from the spool of one cluster (`<spool_dir>/<cluster>`), at
/// most [`crate::config::DEFAULT_MAX_SUMMARY_RECORDS`] of them ([`load_job_limited`]).
pub fn load_job(root: &Path, job_id: u32) -> Result<JobRecords, LoadError> {
    load_job_limited(root, job_id, crate::config::DEFAULT_MAX_SUMMARY_RECORDS)
}

/// Loads the records of `job_id` from the spool of one cluster (`<spool_dir>/<cluster>`), at
/// most `max_records` of them ([`visit_job`]), ordered by node then step. Where the directory
/// names its job instance (`instance.json`, which the plugin writes), a record of any other
/// job or user in it is left out.
pub fn load_job_limited(
    root: &Path,
    job_id: u32,
    max_records: usize,
) -> Result<JobRecords, LoadError> {
    let mut records = Vec::new();
    let v = visit_job(root, job_id, None, max_records, |r| records.push(r))?;
    records.sort_by(|a, b| {
        (a.step.node.as_str(), step_order(&a.step.id))
            .cmp(&(b.step.node.as_str(), step_order(&b.step.id)))
    });
    Ok(JobRecords {
        job_id,
        records,
        problems: v.problems,
        left_out: v.left_out,
        steps_not_recorded_from: v.steps_not_recorded_from,
    })
}

/// The node and step a record's file name says (`<node>.<step>.json`, or
/// `<node>.<step>.run<k>.json` in a requeued job's run k: [`crate::step::run::split_run`]); the
/// whole name as the node, and no step, for another name.
fn node_and_step(name: &str) -> (&str, &str) {
    let stem = name.strip_suffix(".json").unwrap_or(name);
    let (stem, _run) = crate::step::run::split_run(stem);
    stem.rsplit_once('.').unwrap_or((stem, ""))
}

/// Opens job `job_id`'s directory in the spool at `root`.
fn open_job(root: &Path, job_id: u32) -> Result<JobDir, LoadError> {
    let path = job_dir(root, job_id);
    match JobDir::open(&path) {
        Ok(d) => Ok(d),
        Err(Refusal::Unsafe(why)) => Err(LoadError::Refused(job_id, path, why)),
        Err(Refusal::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
            Err(LoadError::NoRecords(job_id, root.to_path_buf()))
        }
        Err(Refusal::Io(e)) if e.kind() == io::ErrorKind::PermissionDenied => {
            Err(LoadError::Denied(job_id, path))
        }
        Err(Refusal::Io(e)) => Err(LoadError::Io(path, e)),
    }
}

fn unusable(file: &str, r: Refusal) -> Problem {
    Problem::Unreadable {
        file: file.to_string(),
        refused: matches!(r, Refusal::Unsafe(_)),
        error: match r {
            Refusal::Unsafe(why) => why,
            Refusal::Io(e) => e.to_string(),
        },
    }
}

/// Reads the records of `job_id` in the spool at `root` one at a time and hands each to `each`
/// (incomplete ones too, each also named as a [`Problem`]): those of step `step` only, when
/// given, and at most `max_records`, chosen in step order (batch, interactive, extern, then by
/// number; node by node within a step) and handed over node by node, then in step order.
///
/// The job directory is opened without following a link, and each record is read only when
/// [`safe_read`] finds it safe; every other entry named like a record becomes a [`Problem`].
/// Where the directory names its job instance (`instance.json`), a record of another job or
/// user in it is not handed over.
pub fn visit_job(
    root: &Path,
    job_id: u32,
    step: Option<&str>,
    max_records: usize,
    mut each: impl FnMut(StepRecord),
) -> Result<Visit, LoadError> {
    let dir = open_job(root, job_id)?;
    let path = dir.path().to_path_buf();
    let entries = match dir.entries() {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(LoadError::Denied(job_id, path));
        }
        Err(e) => return Err(LoadError::Io(path, e)),
    };
    let mut visit = Visit::default();
    let instance = read_instance(&dir, &mut visit.problems);
    visit.steps_not_recorded_from = dir
        .read(OsStr::new(STEPS_LEFT_OUT_FILE), MAX_INSTANCE_BYTES)
        .ok()
        .and_then(|b| serde_json::from_slice::<StepsLeftOut>(&b).ok())
        .map(|m| m.max_step_records);
    let mut named: Vec<(OsString, std::fs::FileType)> = entries
        .into_iter()
        .filter(|(name, _)| {
            name.to_str().is_some_and(|n| {
                n.ends_with(".json")
                    && !n.starts_with('.')
                    && n != INSTANCE_FILE
                    && step.is_none_or(|st| node_and_step(n).1 == st)
            })
        })
        .collect();
    // Chosen: the steps that see the whole job first (batch, interactive, extern), then the
    // numbered ones in order; handed over node by node.
    let key = |name: &OsString| {
        let (node, step) = node_and_step(name.to_str().unwrap_or_default());
        let order = step_order(step);
        (order.0 == 2, order, node.to_string())
    };
    named.sort_by_cached_key(|(name, _)| key(name));
    visit.left_out = named.len().saturating_sub(max_records);
    named.truncate(max_records);
    named.sort_by_cached_key(|(name, _)| {
        let (_, order, node) = key(name);
        (node, order)
    });
    for (name, kind) in named {
        // A FIFO, socket or device is refused without being opened; a link is not followed.
        if let Some(why) = safe_read::refuse_type(&kind) {
            let shown = name.to_string_lossy().into_owned();
            visit.problems.push(unusable(&shown, Refusal::Unsafe(why)));
            continue;
        }
        if read_one(
            &dir,
            &name,
            instance.as_ref(),
            &mut visit.problems,
            &mut each,
        ) {
            visit.records += 1;
        }
        visit.names.push(name);
    }
    Ok(visit)
}

/// Reads again the records [`visit_job`] read (`names`, in that order), for a second pass
/// over the same records (the phases of a job with marks): the problems are not counted again.
pub fn revisit_job(
    root: &Path,
    job_id: u32,
    names: &[OsString],
    mut each: impl FnMut(StepRecord),
) -> Result<(), LoadError> {
    let dir = open_job(root, job_id)?;
    let instance = read_instance(&dir, &mut Vec::new());
    for name in names {
        read_one(&dir, name, instance.as_ref(), &mut Vec::new(), &mut each);
    }
    Ok(())
}

/// The job instance the directory names, if it names one.
fn read_instance(dir: &JobDir, problems: &mut Vec<Problem>) -> Option<Instance> {
    match dir.read(OsStr::new(INSTANCE_FILE), MAX_INSTANCE_BYTES) {
        Ok(bytes) => match serde_json::from_slice::<Instance>(&bytes) {
            Ok(i) => Some(i),
            Err(e) => {
                problems.push(Problem::Corrupt {
                    file: INSTANCE_FILE.into(),
                    error: e.to_string(),
                });
                None
            }
        },
        Err(r) if r.is_not_found() => None,
        Err(r) => {
            problems.push(unusable(INSTANCE_FILE, r));
            None
        }
    }
}

/// Reads record `name` and hands it to `each` when it is one of `instance`'s; what is wrong
/// with it goes to `problems`. Whether it was handed over.
fn read_one(
    dir: &JobDir,
    name: &OsStr,
    instance: Option<&Instance>,
    problems: &mut Vec<Problem>,
    each: &mut impl FnMut(StepRecord),
) -> bool {
    let shown = name.to_string_lossy().into_owned();
    let bytes = match dir.read(name, MAX_RECORD_BYTES) {
        Ok(b) => b,
        // Removed meanwhile (a purge).
        Err(r) if r.is_not_found() => return false,
        Err(r) => {
            problems.push(unusable(&shown, r));
            return false;
        }
    };
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            problems.push(Problem::Corrupt {
                file: shown,
                error: format!("not UTF-8 text: {}", e.utf8_error()),
            });
            return false;
        }
    };
    match StepRecord::from_json(&text) {
        Ok(r) if instance.is_some_and(|i| r.job.id != i.job_id || r.job.uid != i.uid) => false,
        Ok(r) => {
            if !r.complete {
                problems.push(Problem::Incomplete {
                    file: shown,
                    written_at: r.written_at.clone(),
                });
            }
            each(r);
            true
        }
        Err(RecordError::Corrupt(error)) => {
            problems.push(Problem::Corrupt { file: shown, error });
            false
        }
        Err(RecordError::FutureVersion(version)) => {
            problems.push(Problem::FutureVersion {
                file: shown,
                version,
            });
            false
        }
    }
}

#[cfg(test)]
mod tests;

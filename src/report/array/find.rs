//! Finding an array's tasks in the spool. The spool has one directory per job id and nothing
//! indexed by array, so the tasks are found by reading one record's job header in each job
//! directory that could hold one: Slurm gives an array's tasks job ids from the array's own id
//! up (the array's own id is one of its tasks), so directories below it are never opened.
//!
//! Cost: one listing of the cluster's spool, then, for each job directory whose id is at least
//! the array's, one directory listing and one record read (at most
//! [`safe_read::MAX_RECORD_BYTES`], usually a few kilobytes). A directory the caller may not
//! read is counted and skipped: its records are someone else's. The tasks found are then
//! loaded whole ([`load_job`]) as a single job is.

use std::ffi::OsStr;
use std::io;
use std::path::Path;

use serde::Deserialize;

use crate::report::{JobRecords, LoadError, job_dir, job_ids, load_job};
use crate::step::safe_read::{self, JobDir, MAX_RECORD_BYTES};

/// The part of a record that says which job it is.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JobHeader {
    /// The job id.
    pub id: u32,
    /// The user id.
    pub uid: u32,
    /// The array's own id, for an array task.
    #[serde(default)]
    pub array_job_id: Option<u32>,
    /// The task's index, for an array task.
    #[serde(default)]
    pub array_task_id: Option<u32>,
}

#[derive(Deserialize)]
struct Head {
    job: JobHeader,
}

/// The job header of the first readable record of job directory `job_id` (by file name),
/// `Err` when the directory cannot be opened or listed, `Ok(None)` when no record in it can
/// be read.
pub fn header(root: &Path, job_id: u32) -> io::Result<Option<JobHeader>> {
    let dir = JobDir::open(&job_dir(root, job_id)).map_err(|r| match r {
        safe_read::Refusal::Io(e) => e,
        safe_read::Refusal::Unsafe(why) => io::Error::other(why),
    })?;
    for (name, kind) in dir.entries()? {
        let Some(n) = name.to_str() else { continue };
        if !n.ends_with(".json")
            || n.starts_with('.')
            || n == crate::step::spool::INSTANCE_FILE
            || safe_read::refuse_type(&kind).is_some()
        {
            continue;
        }
        let Ok(bytes) = dir.read(OsStr::new(n), MAX_RECORD_BYTES) else {
            continue;
        };
        if let Ok(h) = serde_json::from_slice::<Head>(&bytes) {
            if h.job.id == job_id {
                return Ok(Some(h.job));
            }
        }
    }
    Ok(None)
}

/// The job ids of array `array`'s tasks in the spool at `root`, smallest first, and how many
/// directories that could have held one were not readable by the caller.
#[derive(Debug, Default, PartialEq)]
pub struct ArrayTasks {
    /// Job ids of the tasks.
    pub job_ids: Vec<u32>,
    /// Job directories at or above the array's id that could not be read.
    pub unreadable: usize,
}

/// Finds array `array`'s tasks: the job directories at or above `array` whose records name
/// `array` as their array (see the module's comment for the cost).
pub fn find_tasks(root: &Path, array: u32) -> io::Result<ArrayTasks> {
    let mut out = ArrayTasks::default();
    for id in job_ids(root)?.into_iter().filter(|i| *i >= array) {
        match header(root, id) {
            Ok(Some(h)) if h.array_job_id == Some(array) && h.array_task_id.is_some() => {
                out.job_ids.push(id)
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(_) => out.unreadable += 1,
        }
    }
    Ok(out)
}

/// The job id of array task `<array>_<task>`: the first job directory at or above `array` whose
/// records say they are that task (one header read each, as [`find_tasks`]; the array's own id
/// is often its last task's, so it is read first). `Ok(None)` when no directory the caller can
/// read holds it.
pub fn find_task(root: &Path, array: u32, task: u32) -> io::Result<Option<u32>> {
    for id in job_ids(root)?.into_iter().filter(|i| *i >= array) {
        if let Ok(Some(h)) = header(root, id) {
            if h.array_job_id == Some(array) && h.array_task_id == Some(task) {
                return Ok(Some(id));
            }
        }
    }
    Ok(None)
}

/// Whether `job_id` given alone means array `job_id` as a whole: its own records say it is
/// that array's task (Slurm gives one task the array's own id), or it has no directory and
/// some task of that array has. A directory the caller may not read is not an array: the
/// report then says it is not readable, as for any job.
pub fn is_array(root: &Path, job_id: u32) -> io::Result<bool> {
    match header(root, job_id) {
        Ok(Some(h)) => Ok(h.array_job_id == Some(job_id) && h.array_task_id.is_some()),
        Ok(None) => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Ok(!find_tasks(root, job_id)?.job_ids.is_empty())
        }
        Err(_) => Ok(false),
    }
}

/// Array `array`'s tasks, loaded: the records of each, and why a task directory could not be
/// loaded.
#[derive(Debug, Default)]
pub struct LoadedArray {
    /// Each task's records, by job id.
    pub tasks: Vec<JobRecords>,
    /// Tasks that could not be loaded, by job id.
    pub skipped: Vec<(u32, LoadError)>,
    /// Job directories at or above the array's id the caller may not read (for a user,
    /// mostly other users' jobs; for root, a sign of trouble).
    pub unreadable: usize,
}

/// Finds and loads array `array`'s tasks. A task's records that name another array (a
/// directory reused meanwhile) are left out.
pub fn load_array(root: &Path, array: u32) -> io::Result<LoadedArray> {
    let found = find_tasks(root, array)?;
    let mut out = LoadedArray::default();
    for id in found.job_ids {
        match load_job(root, id) {
            Ok(mut j) => {
                j.records.retain(|r| r.job.array_job_id == Some(array));
                if !j.records.is_empty() {
                    out.tasks.push(j);
                }
            }
            Err(LoadError::NoRecords(..)) => {}
            Err(e) => out.skipped.push((id, e)),
        }
    }
    out.unreadable = found.unreadable;
    Ok(out)
}

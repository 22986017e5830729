//! Reading a job's records back: loading them from the spool (with every problem named), the
//! job summary and its advice, and the text, JSON and one-line renderings that the end-of-job
//! summary and `gpu-tracker-report` print.
//!
//! Reading needs no privileges: a user sees the records the file permissions (the POSIX ACL the
//! plugin grants) let them read, root sees all.
//!
//! Nothing in the spool is trusted ([`safe_read`]): a job directory or record that is a
//! symbolic link, not a regular file, larger than a record can be, owned by someone other than
//! its job directory's owner, or hard-linked elsewhere is refused unread and named as a
//! [`Problem`]; the job's other records are still used.

pub mod advice;
pub mod args;
pub mod array;
pub mod classes;
pub mod epilog;
pub mod figures;
pub mod gpu_shared;
pub mod gpu_text;
pub mod listing;
pub mod nodes;
pub mod plot;
pub mod settings;
pub mod site;
pub mod slurmctl;
pub mod slurmdb;
pub mod stored;
pub mod story;
pub mod summary;
pub mod text;

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::step::record::{RecordError, StepRecord};
use crate::step::safe_read;
pub use figures::Summary;

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

/// The job directory of `job_id` in the spool at `root`.
pub fn job_dir(root: &Path, job_id: u32) -> PathBuf {
    root.join(job_id.to_string())
}

/// Loads every record of `job_id` from the spool of one cluster (`<spool_dir>/<cluster>`).
/// Where the directory names its job instance (`instance.json`, which the plugin writes), a
/// record of any other job or user in it is left out.
///
/// The job directory is opened without following a link, and each record is read only when
/// [`safe_read`] finds it safe; every other entry named like a record becomes a [`Problem`].
pub fn load_job(root: &Path, job_id: u32) -> Result<JobRecords, LoadError> {
    use safe_read::{JobDir, MAX_INSTANCE_BYTES, MAX_RECORD_BYTES, Refusal};
    let path = job_dir(root, job_id);
    let dir = match JobDir::open(&path) {
        Ok(d) => d,
        Err(Refusal::Unsafe(why)) => return Err(LoadError::Refused(job_id, path, why)),
        Err(Refusal::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
            return Err(LoadError::NoRecords(job_id, root.to_path_buf()));
        }
        Err(Refusal::Io(e)) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(LoadError::Denied(job_id, path));
        }
        Err(Refusal::Io(e)) => return Err(LoadError::Io(path, e)),
    };
    let entries = match dir.entries() {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(LoadError::Denied(job_id, path));
        }
        Err(e) => return Err(LoadError::Io(path, e)),
    };
    let mut out = JobRecords {
        job_id,
        ..JobRecords::default()
    };
    let unusable = |file: &str, r: Refusal| Problem::Unreadable {
        file: file.to_string(),
        refused: matches!(r, Refusal::Unsafe(_)),
        error: match r {
            Refusal::Unsafe(why) => why,
            Refusal::Io(e) => e.to_string(),
        },
    };
    let instance_file = crate::step::spool::INSTANCE_FILE;
    let instance = match dir.read(OsStr::new(instance_file), MAX_INSTANCE_BYTES) {
        Ok(bytes) => match serde_json::from_slice::<crate::step::spool::Instance>(&bytes) {
            Ok(i) => Some(i),
            Err(e) => {
                out.problems.push(Problem::Corrupt {
                    file: instance_file.into(),
                    error: e.to_string(),
                });
                None
            }
        },
        Err(r) if r.is_not_found() => None,
        Err(r) => {
            out.problems.push(unusable(instance_file, r));
            None
        }
    };
    for (name, kind) in entries {
        let Ok(name) = name.into_string() else {
            continue;
        };
        if !name.ends_with(".json") || name.starts_with('.') || name == instance_file {
            continue;
        }
        // A FIFO, socket or device is refused without being opened; a link is not followed.
        if let Some(why) = safe_read::refuse_type(&kind) {
            out.problems.push(unusable(&name, Refusal::Unsafe(why)));
            continue;
        }
        let bytes = match dir.read(OsStr::new(&name), MAX_RECORD_BYTES) {
            Ok(b) => b,
            // Removed meanwhile (a purge).
            Err(r) if r.is_not_found() => continue,
            Err(r) => {
                out.problems.push(unusable(&name, r));
                continue;
            }
        };
        let text = match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => {
                out.problems.push(Problem::Corrupt {
                    file: name,
                    error: format!("not UTF-8 text: {}", e.utf8_error()),
                });
                continue;
            }
        };
        match StepRecord::from_json(&text) {
            Ok(r)
                if instance
                    .as_ref()
                    .is_some_and(|i| r.job.id != i.job_id || r.job.uid != i.uid) => {}
            Ok(r) => {
                if !r.complete {
                    out.problems.push(Problem::Incomplete {
                        file: name.clone(),
                        written_at: r.written_at.clone(),
                    });
                }
                out.records.push(r);
            }
            Err(RecordError::Corrupt(error)) => {
                out.problems.push(Problem::Corrupt { file: name, error })
            }
            Err(RecordError::FutureVersion(version)) => out.problems.push(Problem::FutureVersion {
                file: name,
                version,
            }),
        }
    }
    out.records.sort_by(|a, b| {
        (a.step.node.as_str(), step_order(&a.step.id))
            .cmp(&(b.step.node.as_str(), step_order(&b.step.id)))
    });
    Ok(out)
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
        self
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

/// The summary printed at the end of a job (all of its steps) or of an interactive step
/// (`step`): waits up to `wait` for records still being finished (a step's record lands just
/// after its tasks end), then renders what is there. `None` when there is no record at all.
///
/// Only the records of job instance `instance` count: a directory held by another job with
/// the same id (which the plugin would have moved aside) gives `None`, and each record must
/// name the instance's user and, where both are known, its submission token. The job is classed
/// under the site's `rules`.
pub fn end_of_job_text(
    root: &Path,
    instance: &crate::step::spool::Instance,
    step: Option<&str>,
    wait: std::time::Duration,
    co2_grams_per_kwh: f64,
    rules: &classes::ClassRules,
) -> Option<String> {
    let begun = std::time::Instant::now();
    let deadline = begun + wait;
    let job_id = instance.job_id;
    loop {
        let held = crate::step::spool::read_instance(&job_dir(root, job_id), None)
            .is_some_and(|i| instance.same_job(&i));
        let j = held
            .then(|| load_job(root, job_id).ok())
            .flatten()
            .map(|mut j| {
                j.records.retain(|r| {
                    r.job.uid == instance.uid
                        && r.job.cluster.as_deref().unwrap_or_default() == instance.cluster
                        && match (&r.job.submit_token, instance.token.as_str()) {
                            (Some(t), mine) if !mine.is_empty() => t == mine,
                            _ => true,
                        }
                });
                j
            });
        let j = j.map(|j| match step {
            Some(st) => j.only_step(st),
            None => j,
        });
        let settled = j.as_ref().is_some_and(|j| {
            !j.records.is_empty()
                && j.problems
                    .iter()
                    .all(|p| !matches!(p, Problem::Incomplete { .. }))
        });
        if settled || std::time::Instant::now() >= deadline {
            let j = j.filter(|j| !j.records.is_empty())?;
            let mut s = match step {
                Some(st) => Summary::of_step(&j.records, st),
                None => Summary::from_records(&j.records),
            };
            s.set_co2(co2_grams_per_kwh);
            s.set_classes(rules);
            let text = text::render(&s, &j.problems, &text::TextOptions::default());
            return Some(crate::step::record::terminal_safe(&text).into_owned());
        }
        // A step's final record usually lands within milliseconds of its tasks' end: look
        // often at first (every 10 ms for 1 s), then every 100 ms. Each look reads a few small
        // files.
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
    use crate::cgroup::fixture::TempTree;
    use crate::step::record::tests_support::record;

    #[test]
    fn loads_records_and_names_every_problem() {
        let t = TempTree::new("load");
        let mut a = record("n1", "batch");
        a.job.id = 5;
        let mut b = record("n1", "0");
        b.job.id = 5;
        b.complete = false;
        t.write("5/n1.batch.json", &a.to_json())
            .write("5/n1.0.json", &b.to_json())
            .write(
                "5/n1.1.json",
                "{\"schema\": \"gpu-tracker/step\", \"schema_vers",
            )
            .write(
                "5/n1.2.json",
                &a.to_json().replace(
                    &format!("\"schema_version\":{}", crate::step::record::SCHEMA_VERSION),
                    "\"schema_version\":99",
                ),
            );
        let j = load_job(t.path(), 5).unwrap();
        assert_eq!(j.records.len(), 2);
        assert_eq!(j.records[0].step.id, "batch");
        assert!(
            j.problems
                .iter()
                .any(|p| matches!(p, Problem::Incomplete { file, .. } if file == "n1.0.json"))
        );
        assert!(
            j.problems
                .iter()
                .any(|p| matches!(p, Problem::Corrupt { file, .. } if file == "n1.1.json"))
        );
        assert!(
            j.problems
                .iter()
                .any(|p| matches!(p, Problem::FutureVersion { version: 99, .. }))
        );
        assert!(matches!(
            load_job(t.path(), 6),
            Err(LoadError::NoRecords(6, _))
        ));
        let only = j.only_step("0");
        assert_eq!(only.records.len(), 1);
        assert_eq!(only.problems.len(), 1);
        assert_eq!(job_ids(t.path()).unwrap(), vec![5]);
    }

    #[test]
    fn unsafe_entries_are_refused_unread_and_the_rest_is_loaded() {
        use std::os::unix::fs::symlink;
        let t = TempTree::new("load-unsafe");
        let mut good = record("n1", "batch");
        good.job.id = 5;
        let mut other = record("elsewhere", "0");
        other.job.id = 5;
        t.write("5/n1.batch.json", &good.to_json())
            .write("outside/r.json", &other.to_json())
            .write("outside/linked.json", &other.to_json());
        let dir = t.path().join("5");
        symlink(t.path().join("outside/r.json"), dir.join("n1.0.json")).unwrap();
        assert!(
            std::process::Command::new("mkfifo")
                .arg(dir.join("n1.1.json"))
                .status()
                .unwrap()
                .success()
        );
        fs::File::create(dir.join("n1.2.json"))
            .unwrap()
            .set_len(4 << 30)
            .unwrap();
        fs::hard_link(t.path().join("outside/linked.json"), dir.join("n1.3.json")).unwrap();
        symlink(t.path().join("outside/r.json"), dir.join("instance.json")).unwrap();
        let started = std::time::Instant::now();
        let j = load_job(t.path(), 5).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(j.records.len(), 1);
        assert_eq!(j.records[0].step.node, "n1");
        let refused: Vec<(&str, &str)> = j
            .problems
            .iter()
            .map(|p| match p {
                Problem::Unreadable {
                    file,
                    error,
                    refused: true,
                } => (file.as_str(), error.as_str()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(refused.len(), 5, "{refused:?}");
        assert!(refused[0].0 == "instance.json" && refused[0].1.contains("symbolic link"));
        assert!(refused[1].0 == "n1.0.json" && refused[1].1.contains("symbolic link"));
        assert!(refused[2].0 == "n1.1.json" && refused[2].1.contains("FIFO"));
        assert!(refused[3].0 == "n1.2.json" && refused[3].1.contains("4294967296 bytes"));
        assert!(refused[4].0 == "n1.3.json" && refused[4].1.contains("2 hard links"));
        assert_eq!(
            j.problems[1].message(),
            "n1.0.json: refused: a symbolic link; not followed"
        );
        let json = j.to_json(&Summary::from_records(&j.records));
        assert!(json.contains("\"refused\": true"), "{json}");
        assert!(json.contains("\"classes\": ["), "always present: {json}");
        // A job directory that is a link is refused as a whole.
        symlink(&dir, t.path().join("6")).unwrap();
        assert!(matches!(
            load_job(t.path(), 6),
            Err(LoadError::Refused(6, ..))
        ));
    }

    #[test]
    fn steps_sort_batch_first_then_by_number() {
        let mut ids = vec!["10", "extern", "2", "batch"];
        ids.sort_by_key(|i| step_order(i));
        assert_eq!(ids, vec!["batch", "2", "10", "extern"]);
    }
}

//! `gpu-tracker-report --store-admin-comment JOBID`, run by the site's EpilogSlurmctld as
//! SlurmUser (through sudo where that is not root): the summary of the job that just ended
//! into Slurm's database ([`crate::slurm::db::store`]).
//!
//! A job directory holds whatever records were written under its id, and ids come round (after
//! `MaxJobId`, or when the controller's state is reset): only records of the job Slurm names
//! are stored, those of its user that began after it started ([`is_this_jobs`]). Who the job's
//! user is and when it started come from Slurm ([`whose`]): the variables slurmctld gives
//! EpilogSlurmctld, else the controller (`squeue`).

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use super::LoadError;
use super::classes::ClassRules;
use super::jobstats_store;
use crate::config::Config;
use crate::slurm::ctld::{self, JobStart};
use crate::slurm::db;
use crate::step::record::StepRecord;

/// How far before the job's start (on the controller's clock) a record's start may be and still
/// count as the job's: the nodes' clocks and the controller's differ a little.
pub const CLOCK_SLACK_SECONDS: i64 = 30;

/// How long [`store_job`] waits for records still being finished: EpilogSlurmctld may start
/// before the last node's slurmstepd has written its final record.
pub const STORE_WAIT: Duration = Duration::from_secs(30);

/// When a record's step began, Unix seconds; `None` when it does not say.
fn began(r: &StepRecord) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(&r.step.start)
        .ok()
        .map(|t| t.timestamp())
}

/// Whether record `r`, found under job id `job_id`, is of the job `job`: its user's, begun at
/// most [`CLOCK_SLACK_SECONDS`] before it started. A record of another user, or one that began
/// before the job did, is of another job that had this id.
pub fn is_this_jobs(r: &StepRecord, job_id: u32, job: &JobStart) -> bool {
    r.job.id == job_id
        && r.job.uid == job.uid
        && began(r).is_some_and(|t| t >= job.start.saturating_sub(CLOCK_SLACK_SECONDS))
}

/// Whether `--store-admin-comment` runs for another user: started through sudo (`SUDO_UID` in
/// its environment, which sudo always sets) or with real and effective user ids that differ (a
/// setuid wrapper). Then it takes nothing from its caller's environment ([`FIXED_ENVIRONMENT`]):
/// a `SLURM_CONF` of the caller's would make Slurm's commands, run as root, parse (and quote) a
/// file of the caller's choosing, and `GPU_TRACKER_*` would choose the spool and settings.
pub fn runs_for_another_user(sudo_uid_set: bool, uid: u32, euid: u32) -> bool {
    sudo_uid_set || uid != euid
}

/// The whole environment of a run for another user ([`runs_for_another_user`]): a `PATH` of
/// root's directories, nothing else. Slurm's commands then read slurm.conf where they were built
/// to (`/etc/slurm/slurm.conf` in Debian's and RHEL's packages), and the report its settings
/// through it (plugstack.conf's `config=`, else `/etc/slurm/gpu-tracker.toml`).
pub const FIXED_ENVIRONMENT: &[(&str, &str)] = &[(
    "PATH",
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
)];

/// At the start of `main`, while the process has one thread: when `args` (the program's, its
/// name first) ask for `--store-admin-comment` and the run is for another user
/// ([`runs_for_another_user`]), the environment becomes [`FIXED_ENVIRONMENT`], and what a
/// failed Slurm command says on stderr goes to the system log, never to the caller
/// ([`crate::slurm::command::send_child_stderr_to_syslog`]). Returns whether it did.
pub fn fix_environment_for_another_user(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let storing = args
        .skip(1)
        .any(|a| a.as_encoded_bytes().starts_with(b"--store-admin-comment"));
    let sudo = std::env::var_os("SUDO_UID").is_some();
    if !(storing && runs_for_another_user(sudo, crate::sys::uid(), crate::sys::euid())) {
        return false;
    }
    crate::sys::replace_environment_at_start(FIXED_ENVIRONMENT);
    crate::slurm::command::send_child_stderr_to_syslog();
    true
}

/// Whose job `job_id` is and when it started, as Slurm gives them: the variables slurmctld gives
/// EpilogSlurmctld ([`ctld::start_from_env`]; Slurm 23.02 and later), else the controller
/// (`squeue`, which still holds the job while its EpilogSlurmctld runs), which must then agree
/// with the `SLURM_JOB_UID` slurmctld gave. `Err(why)` when neither can say.
pub fn whose(job_id: u32) -> Result<JobStart, String> {
    let env = |k: &str| std::env::var(k).ok();
    if let Some(j) = ctld::start_from_env(job_id, env) {
        return Ok(j);
    }
    let given_uid = ctld::uid_from_env(job_id, env);
    match ctld::job_start(job_id)? {
        Some(j) if given_uid.is_none_or(|u| u == j.uid) => Ok(j),
        Some(j) => Err(format!(
            "slurmctld gave user id {} and squeue shows {}",
            given_uid.unwrap_or_default(),
            j.uid
        )),
        None => Err(
            "neither slurmctld's variables nor squeue give its start time: which records are \
             its cannot be told"
                .into(),
        ),
    }
}

/// What [`store_job`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The summary is in Slurm's database.
    Stored {
        /// The job as Slurm names it (`A_T` for an array task).
        job: String,
        /// The stored text's length.
        bytes: usize,
        /// Every record was final.
        complete: bool,
        /// Records of another job with this id, left out.
        left_out: usize,
        /// What else happened ([`jobstats_store::Plan::Store`]), empty when nothing.
        note: String,
    },
    /// Nothing to store, and why (for people).
    Nothing(String),
}

/// Stores the summary of job `job_id` from the spool `root` (settings `cfg`) in Slurm's
/// database. `whose` says whose the job is and when it started ([`whose`]); it is asked only
/// when the spool has records under the id (the script runs for every job, tracked or not).
/// Records are read one at a time, at most `max_summary_records` ([`super::job_summary`]), and
/// only those of this job ([`is_this_jobs`]) count. Waits up to [`STORE_WAIT`] for records that
/// are not final yet.
pub fn store_job(
    cfg: &Config,
    root: &Path,
    job_id: u32,
    whose: impl FnOnce() -> Result<JobStart, String>,
) -> Result<Outcome, String> {
    let deadline = Instant::now() + STORE_WAIT;
    let max = cfg.max_summary_records as usize;
    match super::job_summary(root, job_id, None, max, |_| true) {
        Ok(r) if r.records == 0 => {
            return Ok(Outcome::Nothing(format!(
                "job {job_id} has no readable record"
            )));
        }
        Ok(_) => {}
        Err(LoadError::NoRecords(..)) => {
            return Ok(Outcome::Nothing(format!(
                "job {job_id} has no records here"
            )));
        }
        Err(e) => return Err(e.to_string()),
    }
    let job = whose().map_err(|e| format!("job {job_id}: {e}"))?;
    let (summary, left_out) = loop {
        // Records of another job, each counted once (a job with marks is read twice).
        let others = RefCell::new(HashSet::new());
        let keep = |r: &StepRecord| {
            let mine = is_this_jobs(r, job_id, &job);
            if !mine {
                others.borrow_mut().insert((
                    r.step.node.clone(),
                    r.step.id.clone(),
                    r.step.start.clone(),
                ));
            }
            mine
        };
        let r = match super::job_summary(root, job_id, None, max, keep) {
            Ok(r) => r,
            Err(LoadError::NoRecords(..)) => {
                return Err(format!("job {job_id}: its records were removed"));
            }
            Err(e) => return Err(e.to_string()),
        };
        let left_out = others.borrow().len();
        if r.records == 0 {
            return Ok(Outcome::Nothing(format!(
                "the {left_out} record(s) under job {job_id} are of another job with this id \
                 (not of uid {}, or begun before the job started at {})",
                job.uid, job.start
            )));
        }
        if r.summary.complete || Instant::now() >= deadline {
            break (r.summary, left_out);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let mut summary = summary;
    summary.set_classes(&ClassRules::from_config(cfg));
    let job =
        crate::slurm::command::job_ref(job_id, summary.array_job_id.zip(summary.array_task_id));
    // The comment there now and what sacctmgr keeps decide the text (docs/JOBSTATS.md).
    let existing = jobstats_store::existing_comment(&job);
    let keeps_case = cfg.admin_comment.format == crate::config::CommentFormat::GpuTracker
        || jobstats_store::sacctmgr_keeps_case();
    let (text, note) = match jobstats_store::plan(
        &summary,
        &cfg.admin_comment,
        existing.as_deref(),
        keeps_case,
    ) {
        jobstats_store::Plan::Store { text, note } => (text, note),
        jobstats_store::Plan::Keep(why) => {
            return Ok(Outcome::Nothing(format!("job {job}: {why}")));
        }
    };
    db::store(&job, &text).map_err(|e| format!("job {job}: {e}"))?;
    Ok(Outcome::Stored {
        job,
        bytes: text.len(),
        complete: summary.complete,
        left_out,
        note,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::record::tests_support::record;

    fn at(node: &str, uid: u32, start: &str) -> StepRecord {
        let mut r = record(node, "batch");
        r.job.uid = uid;
        r.step.start = start.into();
        r
    }

    #[test]
    fn only_records_of_the_job_s_user_begun_after_it_started_are_its() {
        // The job: uid 1001, started 2026-11-23T10:00:00Z.
        let job = JobStart {
            uid: 1001,
            start: 1_795_428_000,
        };
        let id = record("n1", "batch").job.id;
        let records = [
            at("mine", 1001, "2026-11-23T10:00:05+00:00"),
            // 20 s before, on a node whose clock is behind: within the slack.
            at("skewed", 1001, "2026-11-23T09:59:40+00:00"),
            // Another user's job with the same id, and an earlier job of the same user.
            at("theirs", 1002, "2026-11-23T10:00:05+00:00"),
            at("earlier", 1001, "2026-11-20T08:00:00+00:00"),
            at("undated", 1001, "not a time"),
        ];
        let nodes: Vec<&str> = records
            .iter()
            .filter(|r| is_this_jobs(r, id, &job))
            .map(|r| r.step.node.as_str())
            .collect();
        assert_eq!(nodes, vec!["mine", "skewed"]);
        // Another id's record is not this job's either.
        assert!(!records.iter().any(|r| is_this_jobs(r, id + 1, &job)));
        // A job that started after every record: none is its.
        let later = JobStart {
            start: job.start + 3600,
            ..job
        };
        assert!(!is_this_jobs(
            &at("mine", 1001, "2026-11-23T10:00:05Z"),
            id,
            &later
        ));
    }
}

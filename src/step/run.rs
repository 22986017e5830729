//! The run of a job a step belongs to: which run it is (a requeued job runs again under the same
//! id), when the run started and the time limit Slurm gave it.
//!
//! No SPANK item gives the time limit, and slurmstepd's `S_SLURM_RESTART_COUNT` is always 0 (it
//! reads a field of the step that slurmstepd never sets). slurmd's prolog environment has both,
//! from the job's signed credential: `SLURM_JOB_RESTART_COUNT` (22.05 on), `SLURM_JOB_START_TIME`
//! and `SLURM_JOB_END_TIME` (23.02 on). The plugin's `job_prolog` callback, which slurmd runs as
//! root on each node before the run's first step there, reads them and writes a run file
//! ([`RunFile`]) into `<spool>/<cluster>/.runs/<jobid>.json` (root only), for every job whose
//! steps may be tracked; each step of the run reads it at its start ([`accept`]) and copies the
//! run into its record (`job.run`). The job's environment is never read: the user writes it.
//!
//! A run file names its job instance (job id, user, and the submission token the plugin gave the
//! job: a reused job id is another job) and, from 23.02, the run's start as the credential
//! says. A step takes it only where all of these are its own ([`StepClaim`]); a step that
//! cannot tie itself to a run (no run file of its job, or one of an earlier run) is named by its
//! own start ([`record_file_name`]), so its record never replaces another run's.
//!
//! Records of a job's first run are `<node>.<step>.json`; those of run k > 1 (restart count
//! k - 1) are `<node>.<step>.run<k>.json`, so a requeued job's second run keeps the first's
//! records; those of a step of unknown run are `<node>.<step>.run-<unix start>.json`
//! ([`record_file_name`], [`split_run`]).

use serde::{Deserialize, Serialize};

/// A time limit at least this long is Slurm's "unlimited": slurmctld sets the end of a job with
/// no time limit a year after its start.
pub const UNLIMITED_SECONDS: u64 = 365 * 24 * 3600;

/// Directory, under a cluster's spool, of the run files (root only).
pub const RUNS_DIR: &str = ".runs";

/// Largest run file read back, bytes.
pub const MAX_RUN_FILE_BYTES: u64 = 4 << 10;

/// The run of the job a record's step belongs to (`job.run` in the record).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Times Slurm had started the job before this run (0: the first run; a requeued job's
    /// second run is 1).
    pub restart_count: u32,
    /// When the run started, as Slurm's credential says (23.02 on), else when the plugin's
    /// `job_prolog` ran on the node (just after the start). RFC 3339.
    pub start: Option<String>,
    /// The run's time limit in seconds; `None`: unlimited or unknown (`time_limit_unknown`).
    pub time_limit_seconds: Option<u64>,
    /// Why `time_limit_seconds` is `None`: `unlimited`, or what kept the limit from being read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_unknown: Option<String>,
    /// Where the figures come from: `credential` (slurmd's prolog environment) or `squeue`
    /// (the time limit asked of the controller, on Slurm releases whose credential lacks it).
    pub source: String,
}

/// What a run file holds: the run, and which job instance it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFile {
    /// Slurm's job id.
    pub job_id: u32,
    /// The job's user id (from SPANK's `S_JOB_UID`).
    pub uid: u32,
    /// The job's submission token as the prolog saw it (the plugin sets it at submission, in
    /// the job's environment and in the prolog's as `SPANK_SLURM_GPU_TRACKER_SUBMIT`); absent
    /// for a job submitted without the plugin (and in files of earlier builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The run's start as the job's credential says (`SLURM_JOB_START_TIME`, 23.02 on), Unix
    /// seconds; absent where slurmd did not give it (22.05: `run.start` is the prolog's time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_start_unix: Option<i64>,
    /// When the file was written, Unix seconds.
    pub written_unix: i64,
    /// The run.
    pub run: RunInfo,
}

/// What a step knows of its own job when it looks for its run: a run file is its run only
/// where it names all of this ([`accept`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StepClaim {
    /// The job id (SPANK's `S_JOB_ID`).
    pub job_id: u32,
    /// The job's user (`S_JOB_UID`).
    pub uid: u32,
    /// The job's submission token from its environment (`None`: submitted without the plugin).
    pub token: Option<String>,
    /// The run's start as the step was told it (`None`: not told). Only an srun step is:
    /// `SLURM_JOB_START_TIME` in the environment srun passed on, which slurmstepd wrote into
    /// the batch script's environment from the credential (23.02 on). Read from the job's
    /// environment, so it only ever refuses the job its own run: what it says is checked
    /// against the credential's start in the file, never taken for it.
    pub job_start: Option<i64>,
    /// The run's restart count as the step was told it (`None`: not told): slurmstepd writes
    /// `SLURM_RESTART_COUNT` into the batch script's environment for runs after the first, and
    /// srun passes it on. Read from the job's environment, so, like `job_start`, it only ever
    /// refuses a file: Slurm 22.05's slurmd skips the prolog of a run that starts on a node
    /// which still remembers the job's earlier run (a quick requeue), leaving that run's file,
    /// which the new run's steps must not take for theirs (its record would replace the
    /// earlier run's).
    pub restart_count: Option<u32>,
    /// When the step started, Unix seconds.
    pub now: i64,
    /// A run file written before this time is an earlier run's: the extern step under
    /// `PrologFlags=RunInJob` starts before its run's prolog, which that step itself runs.
    pub not_before: Option<i64>,
}

/// The start time in a prolog environment (`SLURM_JOB_START_TIME`, from the credential: 23.02
/// on), Unix seconds.
pub fn credential_start(get: impl Fn(&str) -> Option<String>) -> Option<i64> {
    get("SLURM_JOB_START_TIME")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|t| *t > 0)
}

/// RFC 3339 time, in the node's offset, of Unix second `t`.
fn rfc3339(t: i64) -> Option<String> {
    chrono::DateTime::from_timestamp(t, 0).map(|d| d.with_timezone(&chrono::Local).to_rfc3339())
}

/// The run from slurmd's prolog environment (`get` reads one variable) at Unix time `now`. The
/// time limit is `None` with a reason where the environment lacks the end time (Slurm 22.05):
/// [`RunInfo::with_squeue_limit`] fills it then.
pub fn from_prolog_env(get: impl Fn(&str) -> Option<String>, now: i64) -> RunInfo {
    let num = |name: &str| get(name).and_then(|v| v.trim().parse::<i64>().ok());
    let restart_count = num("SLURM_JOB_RESTART_COUNT")
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0);
    let start = credential_start(&get);
    let end = num("SLURM_JOB_END_TIME").filter(|t| *t > 0);
    let (time_limit_seconds, time_limit_unknown) = match (start, end) {
        (Some(s), Some(e)) if e > s => {
            let limit = (e - s) as u64;
            if limit >= UNLIMITED_SECONDS {
                (None, Some("unlimited".to_string()))
            } else {
                (Some(limit), None)
            }
        }
        (Some(_), Some(_)) => (
            None,
            Some("the credential's end time is not after its start".into()),
        ),
        _ => (
            None,
            Some("slurmd gave no job end time (before Slurm 23.02)".into()),
        ),
    };
    RunInfo {
        restart_count,
        start: rfc3339(start.unwrap_or(now)),
        time_limit_seconds,
        time_limit_unknown,
        source: "credential".into(),
    }
}

impl RunInfo {
    /// The run with its time limit taken from `squeue -o %l`'s answer `answer` (`Err`: squeue
    /// could not be asked, with why).
    pub fn with_squeue_limit(mut self, answer: Result<String, String>) -> RunInfo {
        match answer.and_then(|a| parse_time_limit(&a)) {
            Ok(Some(s)) => {
                self.time_limit_seconds = Some(s);
                self.time_limit_unknown = None;
            }
            Ok(None) => self.time_limit_unknown = Some("unlimited".into()),
            Err(why) => self.time_limit_unknown = Some(format!("squeue: {why}")),
        }
        self.source = "squeue".into();
        self
    }

    /// When the run started, Unix seconds.
    pub fn start_unix(&self) -> Option<i64> {
        let s = self.start.as_deref()?;
        chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.timestamp())
    }
}

/// A time limit as Slurm prints it (`squeue -o %l`: `MM:SS`, `HH:MM:SS`, `D-HH:MM:SS`, `D-HH`,
/// `D-HH:MM`, or `UNLIMITED`): `Ok(None)` for unlimited.
pub fn parse_time_limit(text: &str) -> Result<Option<u64>, String> {
    let t = text.trim();
    let bad = || {
        format!(
            "not a time limit: {:?}",
            t.chars().take(40).collect::<String>()
        )
    };
    if t.eq_ignore_ascii_case("UNLIMITED") || t.eq_ignore_ascii_case("INFINITE") {
        return Ok(None);
    }
    let num = |s: &str| -> Result<u64, String> {
        if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<u64>().map_err(|_| bad())
    };
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (num(d)?, Some(r)),
        None => (0, None),
    };
    let parts: Vec<&str> = rest.unwrap_or(t).split(':').collect();
    let (h, m, s) = match (rest.is_some(), parts.as_slice()) {
        (true, [h]) => (num(h)?, 0, 0),
        (true, [h, m]) => (num(h)?, num(m)?, 0),
        (_, [h, m, s]) => (num(h)?, num(m)?, num(s)?),
        (false, [m, s]) => (0, num(m)?, num(s)?),
        (false, [m]) => (0, num(m)?, 0),
        _ => return Err(bad()),
    };
    Ok(Some(days * 86_400 + h * 3600 + m * 60 + s))
}

/// How old a run file without a token may be when a step takes it: its prolog ran when the
/// step reached the node, seconds before.
pub const TOKENLESS_FRESH_SECONDS: i64 = 300;

/// The run in `file`, when it is the run of the step that `claim` describes: the same job id,
/// user and submission token (a reused job id is another job); a file without a token (its
/// prolog was given none: Slurm 22.05's prolog on a node other than the batch node, or a job
/// submitted by an earlier build) only while fresh ([`TOKENLESS_FRESH_SECONDS`]); the same start
/// and restart count, where both the step and the file know them; not written after the step's start by more than the
/// clocks may differ, nor before `claim.not_before`; and not of a run that had ended (by its
/// time limit) over an hour before the step started.
///
/// The prolog of each run rewrites the file before the run's first step on the node starts, so
/// an earlier run's file is left only where this run's prolog did not write (it failed, or
/// slurmd did not run it, as 22.05's slurmd may not for a quick requeue) or runs later (the extern step under RunInJob: `not_before`).
pub fn accept(file: RunFile, claim: &StepClaim) -> Option<RunInfo> {
    // A file with a token is this submission's only with the step's token. Slurm 22.05 hands
    // the job's control variables only to the prolog of the batch node: another node's prolog,
    // run when the job's first step reaches it, writes no token, and its file is taken only
    // while fresh (written at most TOKENLESS_FRESH_SECONDS before the step started).
    let token_ok = match (&file.token, &claim.token) {
        (Some(_), _) => file.token == claim.token,
        (None, _) => claim.now - file.written_unix <= TOKENLESS_FRESH_SECONDS,
    };
    if file.job_id != claim.job_id
        || file.uid != claim.uid
        || !token_ok
        || file.written_unix > claim.now + 300
        || claim.not_before.is_some_and(|t| file.written_unix < t)
        || matches!((claim.job_start, file.job_start_unix), (Some(a), Some(b)) if a != b)
        || claim
            .restart_count
            .is_some_and(|c| c != file.run.restart_count)
    {
        return None;
    }
    let ended = match (file.run.start_unix(), file.run.time_limit_seconds) {
        (Some(s), Some(l)) => {
            s.saturating_add(i64::try_from(l).unwrap_or(i64::MAX)) < claim.now - 3600
        }
        _ => false,
    };
    (!ended).then_some(file.run)
}

/// Which run a step's record belongs to, for its file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordRun {
    /// The run with this restart count (0: the first run).
    Known(u32),
    /// Not known: the step could not tie itself to a run. Named by the step's start (Unix
    /// seconds), a name no other run's step has.
    Unknown {
        /// When the step started.
        started_unix: i64,
    },
}

/// The file name of the record of `step` on `node` (already file-safe) in run `run`.
pub fn record_file_name(node: &str, step: &str, run: RecordRun) -> String {
    match run {
        RecordRun::Known(0) => format!("{node}.{step}.json"),
        RecordRun::Known(k) => format!("{node}.{step}.run{}.json", u64::from(k) + 1),
        RecordRun::Unknown { started_unix } => {
            format!("{node}.{step}.run-{}.json", started_unix.max(0))
        }
    }
}

/// A record file name's stem (`<node>.<step>`, `<node>.<step>.run<k>` or
/// `<node>.<step>.run-<unix>`) without its run, and the run's number (1 for the first, 0 for a
/// step of unknown run). A step is never `run<k>` or `run-<unix>`, so a node name with dots
/// cannot be taken for a run.
pub fn split_run(stem: &str) -> (&str, u32) {
    let digits = |k: &str, max: usize| {
        !k.is_empty() && k.len() <= max && k.bytes().all(|b| b.is_ascii_digit())
    };
    if let Some((rest, last)) = stem.rsplit_once('.')
        && let Some(k) = last.strip_prefix("run")
    {
        if let Some(t) = k.strip_prefix('-')
            && digits(t, 20)
        {
            return (rest, 0);
        }
        if digits(k, 6)
            && let Ok(k) = k.parse::<u32>()
            && k >= 2
        {
            return (rest, k);
        }
    }
    (stem, 1)
}

/// For tests: an environment lookup over `pairs`, as a prolog or a step would see them.
#[cfg(test)]
pub(crate) fn env_of<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::env_of as env;

    #[test]
    fn the_credentials_times_give_the_limit_and_a_year_is_unlimited() {
        let r = from_prolog_env(
            env(&[
                ("SLURM_JOB_RESTART_COUNT", "1"),
                ("SLURM_JOB_START_TIME", "1800000000"),
                ("SLURM_JOB_END_TIME", "1800000060"),
            ]),
            1_800_000_002,
        );
        assert_eq!(r.restart_count, 1);
        assert_eq!(r.time_limit_seconds, Some(60));
        assert_eq!(r.start_unix(), Some(1_800_000_000));
        assert_eq!(r.source, "credential");
        let year = from_prolog_env(
            env(&[
                ("SLURM_JOB_START_TIME", "1800000000"),
                ("SLURM_JOB_END_TIME", "1831536000"),
            ]),
            1_800_000_002,
        );
        assert_eq!(year.time_limit_seconds, None);
        assert_eq!(year.time_limit_unknown.as_deref(), Some("unlimited"));
        assert_eq!(year.restart_count, 0);
    }

    #[test]
    fn without_an_end_time_the_limit_is_unknown_until_squeue_says() {
        let r = from_prolog_env(env(&[("SLURM_JOB_RESTART_COUNT", "0")]), 1_800_000_002);
        assert_eq!(r.time_limit_seconds, None);
        assert!(r.time_limit_unknown.as_deref().unwrap().contains("23.02"));
        assert_eq!(r.start_unix(), Some(1_800_000_002), "the prolog's own time");
        let asked = r.clone().with_squeue_limit(Ok("2:00:00\n".into()));
        assert_eq!(
            (asked.time_limit_seconds, asked.source.as_str()),
            (Some(7200), "squeue")
        );
        assert_eq!(asked.time_limit_unknown, None);
        let failed = r.with_squeue_limit(Err("timed out after 2 s".into()));
        assert_eq!(failed.time_limit_seconds, None);
        assert_eq!(
            failed.time_limit_unknown.as_deref(),
            Some("squeue: timed out after 2 s")
        );
    }

    #[test]
    fn slurm_time_limits_parse_in_every_form_slurm_prints() {
        for (text, secs) in [
            ("1:00", Some(60)),
            ("0:30", Some(30)),
            ("2:00:00", Some(7200)),
            ("1-00:00:00", Some(86_400)),
            ("2-12", Some(2 * 86_400 + 12 * 3600)),
            ("1-01:30", Some(86_400 + 3600 + 1800)),
            ("5", Some(300)),
            ("UNLIMITED", None),
        ] {
            assert_eq!(parse_time_limit(text), Ok(secs), "{text}");
        }
        for bad in ["", "INVALID", "1:2:3:4", "-1:00", "1:x", "99999999999:00"] {
            assert!(parse_time_limit(bad).is_err(), "{bad}");
        }
    }

    fn claim(now: i64) -> StepClaim {
        StepClaim {
            job_id: 7,
            uid: 1001,
            token: Some("1800000000.000000001.42".into()),
            job_start: None,
            restart_count: None,
            now,
            not_before: None,
        }
    }

    fn file(start: i64, limit: Option<u64>) -> RunFile {
        RunFile {
            job_id: 7,
            uid: 1001,
            token: Some("1800000000.000000001.42".into()),
            job_start_unix: Some(start),
            written_unix: start + 1,
            run: RunInfo {
                start: rfc3339(start),
                time_limit_seconds: limit,
                time_limit_unknown: limit.is_none().then(|| "unlimited".into()),
                ..RunInfo::default()
            },
        }
    }

    #[test]
    fn a_run_file_is_taken_only_for_its_own_job_user_and_time() {
        let f = file(1_800_000_000, Some(60));
        let now = 1_800_000_010;
        assert_eq!(accept(f.clone(), &claim(now)), Some(f.run.clone()));
        assert_eq!(
            accept(
                f.clone(),
                &StepClaim {
                    job_id: 8,
                    ..claim(now)
                }
            ),
            None
        );
        assert_eq!(
            accept(
                f.clone(),
                &StepClaim {
                    uid: 1002,
                    ..claim(now)
                }
            ),
            None
        );
        // Written long after the step started: not a file this step could have read.
        assert_eq!(accept(f.clone(), &claim(1_800_000_000 - 400)), None);
        // Its run ended (at its limit) long before this step started: another run's.
        assert_eq!(accept(f, &claim(1_800_000_000 + 7200)), None);
    }

    #[test]
    fn a_run_file_of_another_submission_is_refused_whatever_its_limit() {
        let now = 1_800_000_010;
        for limit in [Some(60), None] {
            // A reused job id: the same user's earlier job, another token.
            let mut other = file(1_800_000_000, limit);
            other.token = Some("1700000000.000000001.7".into());
            assert_eq!(accept(other, &claim(now)), None, "{limit:?}");
            // A file whose prolog was given no token (22.05 on a node other than the batch
            // node; a job submitted without the plugin or by an earlier build): taken while
            // fresh, its prolog run as the step reached the node...
            let mut none = file(1_800_000_000, limit);
            none.token = None;
            assert!(accept(none.clone(), &claim(now)).is_some(), "{limit:?}");
            let untokened = StepClaim {
                token: None,
                ..claim(now)
            };
            assert!(accept(none.clone(), &untokened).is_some(), "{limit:?}");
            // ... and never once older: an earlier job of this id, by either step.
            let later = now + TOKENLESS_FRESH_SECONDS + 1;
            assert_eq!(accept(none.clone(), &claim(later)), None, "{limit:?}");
            let untokened_later = StepClaim {
                token: None,
                ..claim(later)
            };
            assert_eq!(accept(none, &untokened_later), None, "{limit:?}");
        }
    }

    #[test]
    fn a_run_file_of_another_start_is_refused_by_a_step_told_its_start() {
        let now = 1_800_000_010;
        let told = |t| StepClaim {
            job_start: Some(t),
            ..claim(now)
        };
        for limit in [Some(60), None] {
            let f = file(1_800_000_000, limit);
            assert!(
                accept(f.clone(), &told(1_800_000_000)).is_some(),
                "{limit:?}"
            );
            // The run before (a requeue: same job and token) started at another time.
            assert_eq!(accept(f.clone(), &told(1_800_000_005)), None, "{limit:?}");
            // A file without the credential's start (22.05) is judged by the rest.
            let mut old_release = f;
            old_release.job_start_unix = None;
            assert!(accept(old_release, &told(1_800_000_005)).is_some());
        }
    }

    #[test]
    fn a_run_file_of_another_restart_count_is_refused_by_a_step_told_its_count() {
        // Slurm 22.05 after a quick requeue: no prolog ran for run 2, so the file is run 1's,
        // same job, token and (no) credential start. The step of run 2 is told 1.
        let now = 1_800_000_010;
        let told = |c| StepClaim {
            restart_count: Some(c),
            ..claim(now)
        };
        let run1 = file(1_800_000_000, None);
        assert_eq!(accept(run1.clone(), &told(1)), None);
        assert!(accept(run1.clone(), &told(0)).is_some());
        // A step told nothing (the first run: Slurm sets no count) judges by the rest.
        assert!(accept(run1.clone(), &claim(now)).is_some());
        let mut run2 = run1;
        run2.run.restart_count = 1;
        assert_eq!(
            accept(run2.clone(), &told(1)).map(|r| r.restart_count),
            Some(1)
        );
    }

    #[test]
    fn an_old_run_file_is_refused_even_when_the_limit_is_unlimited() {
        // The run before this one (a requeue: same job, same token), unlimited, written a
        // month ago; the step is the extern step under RunInJob, started before its own run's
        // prolog: nothing written before it started is its run.
        let old = file(1_800_000_000, None);
        let now = 1_800_000_000 + 30 * 86_400;
        let extern_step = StepClaim {
            not_before: Some(now),
            ..claim(now)
        };
        assert_eq!(accept(old.clone(), &extern_step), None);
        // What its run's prolog writes after it started is taken.
        let mut fresh = file(now - 1, None);
        fresh.written_unix = now + 1;
        assert!(accept(fresh, &extern_step).is_some());
    }

    #[test]
    fn the_credentials_start_is_read_where_slurmd_gives_it() {
        let at = |v: &'static str| move |k: &str| (k == "SLURM_JOB_START_TIME").then(|| v.into());
        assert_eq!(credential_start(at("1800000000")), Some(1_800_000_000));
        assert_eq!(credential_start(at("0")), None);
        assert_eq!(credential_start(at("x")), None);
        assert_eq!(credential_start(|_: &str| None), None);
    }

    #[test]
    fn later_runs_have_their_own_record_names() {
        let name = |k| record_file_name("n1", "batch", RecordRun::Known(k));
        assert_eq!(name(0), "n1.batch.json");
        assert_eq!(name(1), "n1.batch.run2.json");
        assert_eq!(split_run("n1.batch.run2"), ("n1.batch", 2));
        assert_eq!(split_run("n1.batch"), ("n1.batch", 1));
        // A node named like a run is still a node: its step follows it.
        assert_eq!(split_run("n1.run3.batch"), ("n1.run3.batch", 1));
        assert_eq!(
            split_run("n1.0.run1"),
            ("n1.0.run1", 1),
            "run 1 has no suffix"
        );
        assert_eq!(split_run("n1.0.runx"), ("n1.0.runx", 1));
    }

    #[test]
    fn a_step_of_unknown_run_never_takes_another_runs_name() {
        let unknown = |t| record_file_name("n1", "0", RecordRun::Unknown { started_unix: t });
        let a = unknown(1_800_000_000);
        assert_eq!(a, "n1.0.run-1800000000.json");
        // Neither run 1's nor run 2's name, nor that of a step of unknown run started later.
        for other in [
            record_file_name("n1", "0", RecordRun::Known(0)),
            record_file_name("n1", "0", RecordRun::Known(1)),
            unknown(1_800_000_120),
        ] {
            assert_ne!(a, other);
        }
        // The report still finds its node and step.
        assert_eq!(split_run("n1.0.run-1800000000"), ("n1.0", 0));
        assert_eq!(split_run("n1.0.run-"), ("n1.0.run-", 1));
    }
}

//! The run of a job a step belongs to: which run it is (a requeued job runs again under the same
//! id), when the run started and the time limit Slurm gave it.
//!
//! No SPANK item gives the time limit, and slurmstepd's `S_SLURM_RESTART_COUNT` is always 0 (it
//! reads a field of the step that slurmstepd never sets). slurmd's prolog environment has both,
//! from the job's signed credential: `SLURM_JOB_RESTART_COUNT` (22.05 on), `SLURM_JOB_START_TIME`
//! and `SLURM_JOB_END_TIME` (23.02 on). The plugin's `job_prolog` callback, which slurmd runs as
//! root on each node before the run's first step there, reads them and writes a run file
//! ([`RunFile`]) into `<spool>/<cluster>/.runs/<jobid>.json` (root only); each step of the run
//! reads it at its start ([`accept`]) and copies the run into its record (`job.run`). The job's
//! environment is never read: the user writes it.
//!
//! Records of a job's first run are `<node>.<step>.json`; those of run k > 1 (restart count
//! k - 1) are `<node>.<step>.run<k>.json`, so a requeued job's second run keeps the first's
//! records ([`record_file_name`], [`split_run`]).

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

/// What a run file holds: the run, and whose job it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFile {
    /// Slurm's job id.
    pub job_id: u32,
    /// The job's user id (from SPANK's `S_JOB_UID`).
    pub uid: u32,
    /// When the file was written, Unix seconds.
    pub written_unix: i64,
    /// The run.
    pub run: RunInfo,
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
    let start = num("SLURM_JOB_START_TIME").filter(|t| *t > 0);
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

/// A run file of job `job_id`, user `uid`, read by a step that starts at Unix time `now`: its run,
/// when it is that job's current run. A file of another user's job with the same id, or of a run
/// that had ended (by its time limit) over an hour before, is an earlier job's (the prolog that
/// would have replaced it did not run: slurmd started before the plugin was installed).
pub fn accept(file: RunFile, job_id: u32, uid: u32, now: i64) -> Option<RunInfo> {
    if file.job_id != job_id || file.uid != uid || file.written_unix > now + 300 {
        return None;
    }
    let ended = match (file.run.start_unix(), file.run.time_limit_seconds) {
        (Some(s), Some(l)) => s.saturating_add(i64::try_from(l).unwrap_or(i64::MAX)) < now - 3600,
        _ => false,
    };
    (!ended).then_some(file.run)
}

/// The file name of the record of `step` on `node` (already file-safe) in run `restart_count`.
pub fn record_file_name(node: &str, step: &str, restart_count: u32) -> String {
    if restart_count == 0 {
        format!("{node}.{step}.json")
    } else {
        format!("{node}.{step}.run{}.json", u64::from(restart_count) + 1)
    }
}

/// A record file name's stem (`<node>.<step>` or `<node>.<step>.run<k>`) without its run, and
/// the run's number (1 for the first). A step is never `run<k>`, so a node name with dots
/// cannot be taken for a run.
pub fn split_run(stem: &str) -> (&str, u32) {
    if let Some((rest, last)) = stem.rsplit_once('.')
        && let Some(k) = last.strip_prefix("run")
        && !k.is_empty()
        && k.len() <= 6
        && k.bytes().all(|b| b.is_ascii_digit())
        && let Ok(k) = k.parse::<u32>()
        && k >= 2
    {
        return (rest, k);
    }
    (stem, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

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

    #[test]
    fn a_run_file_is_taken_only_for_its_own_job_user_and_time() {
        let run = RunInfo {
            start: rfc3339(1_800_000_000),
            time_limit_seconds: Some(60),
            ..RunInfo::default()
        };
        let file = RunFile {
            job_id: 7,
            uid: 1001,
            written_unix: 1_800_000_001,
            run: run.clone(),
        };
        assert_eq!(accept(file.clone(), 7, 1001, 1_800_000_010), Some(run));
        assert_eq!(accept(file.clone(), 8, 1001, 1_800_000_010), None);
        assert_eq!(accept(file.clone(), 7, 1002, 1_800_000_010), None);
        // Its run ended (at its limit) long before this step started: another job's.
        assert_eq!(accept(file.clone(), 7, 1001, 1_800_000_000 + 7200), None);
        let mut unlimited = file;
        unlimited.run.time_limit_seconds = None;
        assert!(accept(unlimited, 7, 1001, 1_800_000_000 + 7200).is_some());
    }

    #[test]
    fn later_runs_have_their_own_record_names() {
        assert_eq!(record_file_name("n1", "batch", 0), "n1.batch.json");
        assert_eq!(record_file_name("n1", "batch", 1), "n1.batch.run2.json");
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
}

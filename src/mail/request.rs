//! What slurmctld hands `MailProg`, read into a typed request: its argv (`-s SUBJECT
//! RECIPIENT`) and the job's facts in its environment (`job_common_env_vars` and
//! `_build_mail_env` in Slurm's sources; docs/MAIL.md lists them per release).
//!
//! Trust: slurmctld builds MailProg's whole environment. The job's SPANK control variables come
//! first and only with a `SPANK_` prefix, then slurmctld's own (`SLURM_JOB_ID`, ...) replace
//! any of the same name, so the ids and the mail type are Slurm's. The subject, the job name
//! (`SLURM_JOB_NAME`), the comment and the recipient hold text the user chose.

use std::collections::BTreeMap;

/// The variable a user sets at submission to leave the summary out of their mails
/// (`GPU_TRACKER_MAIL=off`); the plugin passes it to the job's control environment, which
/// slurmctld gives MailProg as [`SPANK_OPT_OUT_VAR`].
pub const OPT_OUT_VAR: &str = "GPU_TRACKER_MAIL";
/// [`OPT_OUT_VAR`] as MailProg sees it.
pub const SPANK_OPT_OUT_VAR: &str = "SPANK_GPU_TRACKER_MAIL";
/// What the plugin records at submission of the job's `--gpu-track` (`on` or `off`; absent
/// when the option was not given), as MailProg sees it.
pub const SPANK_TRACK_VAR: &str = "SPANK_GPU_TRACKER_TRACK";
/// The submission's token (the plugin's `SLURM_GPU_TRACKER_SUBMIT`), as MailProg sees it.
pub const SPANK_TOKEN_VAR: &str = "SPANK_SLURM_GPU_TRACKER_SUBMIT";

/// What the plugin puts in a new job's control environment at submission for its mails (sbatch,
/// salloc, srun keep it with the job in slurmctld, which gives it MailProg with the `SPANK_`
/// prefix): the user's [`OPT_OUT_VAR`] when it is `off`, and whether `--gpu-track` (`option`:
/// its value, `""` when bare) asked for tracking.
pub fn submission_env(
    option: Option<&str>,
    opt_out: Option<&str>,
) -> Vec<(&'static str, &'static str)> {
    let mut vars = Vec::new();
    if opt_out.is_some_and(|v| v.trim().eq_ignore_ascii_case("off")) {
        vars.push((OPT_OUT_VAR, "off"));
    }
    match option {
        Some("off") => vars.push(("GPU_TRACKER_TRACK", "off")),
        Some(_) => vars.push(("GPU_TRACKER_TRACK", "on")),
        None => {}
    }
    vars
}

/// MailProg's environment, by name (values read lossily as UTF-8).
#[derive(Debug, Clone, Default)]
pub struct Env(BTreeMap<String, String>);

impl Env {
    /// This process's environment.
    pub fn of_process() -> Env {
        Env(std::env::vars_os()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect())
    }

    /// An environment of `pairs` (for tests).
    pub fn of<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Env {
        Env(pairs
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    /// The value of `name`, when set and not empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn number(&self, name: &str) -> Option<u32> {
        self.get(name).and_then(|v| v.trim().parse().ok())
    }
}

/// Which job a mail is about, from Slurm's ids (the environment), checked against the subject
/// slurmctld wrote (`mail_job_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A job of its own (`Slurm Job_id=J Name=...`).
    Job(u32),
    /// One task of an array, for `--mail-type=...,ARRAY_TASKS` (`Slurm Array Task Job_id=A_T
    /// (J) Name=...`).
    ArrayTask {
        /// The array's job id.
        array: u32,
        /// The task id.
        task: u32,
        /// The task's own job id.
        job: u32,
    },
    /// A whole array, once all its tasks ended (`Slurm Array Summary Job_id=A_* (J) Name=...`).
    Array(u32),
}

impl Target {
    /// The id `gpu-tracker-report` and `sacct -j` take for it.
    pub fn job_ref(self) -> String {
        match self {
            Target::Job(j) => j.to_string(),
            Target::ArrayTask { array, task, .. } => format!("{array}_{task}"),
            Target::Array(a) => a.to_string(),
        }
    }
}

/// What `--gpu-track` was at submission, as the plugin recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackAsked {
    /// `--gpu-track` or `--gpu-track=SECONDS`.
    On,
    /// `--gpu-track=off`.
    Off,
    /// Not given (the site's `track_all` decides), or the plugin did not run at submission.
    Unknown,
}

/// One run of MailProg, as slurmctld asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct MailRequest {
    /// The subject as slurmctld wrote it (raw: it holds the job's name).
    pub subject: String,
    /// The recipient as given (raw: the job's `--mail-user`, else its user's name).
    pub recipient: String,
    /// slurmctld's word for the mail's type (`SLURM_JOB_MAIL_TYPE`: "Ended", "Began", ...);
    /// `None` when not run by slurmctld.
    pub mail_type: Option<String>,
    /// The job the mail is about; `None` when the ids are missing or do not match the subject.
    pub target: Option<Target>,
    /// The job's user id (`SLURM_JOB_UID`).
    pub uid: Option<u32>,
    /// The job's user name (`SLURM_JOB_USER`).
    pub user: Option<String>,
    /// The job's name (`SLURM_JOB_NAME`: the user's text).
    pub job_name: Option<String>,
    /// The cluster's name (`SLURM_CLUSTER_NAME`).
    pub cluster: Option<String>,
    /// The submission's token, when the plugin ran at submission.
    pub token: Option<String>,
    /// The user left the summary out of this job's mails (`GPU_TRACKER_MAIL=off`).
    pub opted_out: bool,
    /// `--gpu-track` at submission.
    pub track: TrackAsked,
}

/// Why argv is not slurmctld's `-s SUBJECT RECIPIENT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected -s SUBJECT RECIPIENT (as slurmctld runs MailProg), got {0} argument(s)")]
pub struct UsageError(pub usize);

impl MailRequest {
    /// Reads `args` (without the program's name) and `env`.
    pub fn parse(args: &[String], env: &Env) -> Result<MailRequest, UsageError> {
        let [s, subject, recipient] = args else {
            return Err(UsageError(args.len()));
        };
        if s != "-s" {
            return Err(UsageError(args.len()));
        }
        let word = |name| env.get(name).map(str::to_string);
        Ok(MailRequest {
            subject: subject.clone(),
            recipient: recipient.clone(),
            mail_type: word("SLURM_JOB_MAIL_TYPE"),
            target: target(subject, env),
            uid: env.number("SLURM_JOB_UID"),
            user: word("SLURM_JOB_USER"),
            job_name: word("SLURM_JOB_NAME"),
            cluster: word("SLURM_CLUSTER_NAME"),
            token: word(SPANK_TOKEN_VAR),
            opted_out: env
                .get(SPANK_OPT_OUT_VAR)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("off")),
            track: match env.get(SPANK_TRACK_VAR).map(str::trim) {
                Some("on") => TrackAsked::On,
                Some("off") => TrackAsked::Off,
                _ => TrackAsked::Unknown,
            },
        })
    }
}

/// The job of the mail: the subject's form and ids (slurmctld writes them before the job's
/// name, so no name can change them) must agree with the environment's.
fn target(subject: &str, env: &Env) -> Option<Target> {
    let job = env.number("SLURM_JOB_ID")?;
    let array = env.number("SLURM_ARRAY_JOB_ID");
    if let Some(rest) = subject.strip_prefix("Slurm Array Summary Job_id=") {
        let (a, rest) = number(rest)?;
        let (j, _) = number(rest.strip_prefix("_* (")?)?;
        // The array's meta record, whose job id is the array's: SLURM_ARRAY_JOB_ID is set
        // once its last task ran (an array whose tasks never ran has none).
        return (array.unwrap_or(job) == a && j == job).then_some(Target::Array(a));
    }
    if let Some(rest) = subject.strip_prefix("Slurm Array Task Job_id=") {
        let (a, rest) = number(rest)?;
        let (t, rest) = number(rest.strip_prefix('_')?)?;
        let (j, _) = number(rest.strip_prefix(" (")?)?;
        let same = Some(a) == array && j == job && env.number("SLURM_ARRAY_TASK_ID") == Some(t);
        return same.then_some(Target::ArrayTask {
            array: a,
            task: t,
            job,
        });
    }
    let rest = subject.strip_prefix("Slurm Job_id=")?;
    let (j, rest) = number(rest)?;
    (j == job && rest.starts_with(" Name=")).then_some(Target::Job(j))
}

/// The decimal number `text` starts with, and what follows it.
fn number(text: &str) -> Option<(u32, &str)> {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    Some((text[..end].parse().ok()?, &text[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    /// The variables slurmctld 22.05 gives MailProg for a job's END mail (job_common_env_vars
    /// and _build_mail_env at slurm-22-05-8-1): no SLURM_JOB_START_TIME, _END_TIME or _QOS yet.
    fn env_22_05() -> Vec<(&'static str, &'static str)> {
        vec![
            ("SLURM_JOB_ACCOUNT", "root"),
            ("SLURM_JOB_DERIVED_EC", "0"),
            ("SLURM_JOB_EXIT_CODE2", "0:0"),
            ("SLURM_JOB_EXIT_CODE", "0"),
            ("SLURM_CLUSTER_NAME", "local"),
            ("SLURM_JOB_GID", "1001"),
            ("SLURM_JOB_GROUP", "alice"),
            ("SLURM_JOBID", "41"),
            ("SLURM_JOB_ID", "41"),
            ("SLURM_JOB_NAME", "train"),
            ("SLURM_JOB_NODELIST", "n1"),
            ("SLURM_JOB_PARTITION", "debug"),
            ("SLURM_JOB_RESTART_COUNT", "0"),
            ("SLURM_JOB_UID", "1001"),
            ("SLURM_JOB_USER", "alice"),
            ("SLURM_JOB_OVERSUBSCRIBE", "OK"),
            ("SLURM_JOB_WORK_DIR", "/home/alice"),
            ("SLURM_JOB_STATE", "COMPLETED"),
            ("SLURM_JOB_MAIL_TYPE", "Ended"),
            ("SLURM_JOB_RUN_TIME", "00:00:05"),
            ("SLURM_JOB_EXIT_CODE_MAX", "0"),
            ("SPANK_SLURM_GPU_TRACKER_SUBMIT", "1764400000.000000001.77"),
        ]
    }

    /// 26.05 adds SLURM_JOB_START_TIME, _END_TIME (from 24.11), SLURM_JOB_QOS, _EXCLUSIVE and
    /// _SLUID; none changes what the request is.
    fn env_26_05() -> Vec<(&'static str, &'static str)> {
        let mut e = env_22_05();
        e.extend([
            ("SLURM_JOB_START_TIME", "1764400000"),
            ("SLURM_JOB_END_TIME", "1764400005"),
            ("SLURM_JOB_QOS", "normal"),
            ("SLURM_JOB_EXCLUSIVE", "NO"),
            ("SLURM_JOB_SLUID", "s0000000000001"),
        ]);
        e
    }

    #[test]
    fn a_job_end_mail_reads_the_same_on_every_release() {
        let subject = "Slurm Job_id=41 Name=train Ended, Run time 00:00:05, COMPLETED, ExitCode 0";
        for env in [env_22_05(), env_26_05()] {
            let r = MailRequest::parse(&args(&["-s", subject, "alice"]), &Env::of(env)).unwrap();
            assert_eq!(r.target, Some(Target::Job(41)));
            assert_eq!(r.mail_type.as_deref(), Some("Ended"));
            assert_eq!((r.uid, r.user.as_deref()), (Some(1001), Some("alice")));
            assert_eq!(r.recipient, "alice");
            assert_eq!(r.token.as_deref(), Some("1764400000.000000001.77"));
            assert!(!r.opted_out);
            assert_eq!(r.track, TrackAsked::Unknown);
        }
    }

    #[test]
    fn arrays_are_told_from_their_subject_and_ids() {
        // Task 3 (job 53) of array 50, with --mail-type=END,ARRAY_TASKS: its own mail.
        let with = |job: &'static str, task: &'static str| {
            let mut env = env_22_05();
            env.retain(|(k, _)| *k != "SLURM_JOB_ID");
            env.extend([
                ("SLURM_JOB_ID", job),
                ("SLURM_ARRAY_JOB_ID", "50"),
                ("SLURM_ARRAY_TASK_ID", task),
            ]);
            Env::of(env)
        };
        let task = "Slurm Array Task Job_id=50_3 (53) Name=sweep Ended, Run time 00:00:01, COMPLETED, ExitCode 0";
        let r = MailRequest::parse(&args(&["-s", task, "a@b.c"]), &with("53", "3")).unwrap();
        assert_eq!(
            r.target,
            Some(Target::ArrayTask {
                array: 50,
                task: 3,
                job: 53
            })
        );
        assert_eq!(r.target.unwrap().job_ref(), "50_3");
        // The array's one mail: the variables are its meta record's, whose job id is the
        // array's and whose task is the last one that ran.
        let meta = with("50", "7");
        let sum =
            "Slurm Array Summary Job_id=50_* (50) Name=sweep Ended, COMPLETED, ExitCode [0-0]";
        let r = MailRequest::parse(&args(&["-s", sum, "a@b.c"]), &meta).unwrap();
        assert_eq!(r.target, Some(Target::Array(50)));
        let r = MailRequest::parse(
            &args(&["-s", sum, "a@b.c"]),
            &Env::of([("SLURM_JOB_ID", "50")]),
        );
        assert_eq!(r.unwrap().target, Some(Target::Array(50)));
        // Ids the environment does not confirm name no job: no summary is looked for.
        for other in [
            "Slurm Array Summary Job_id=51_* (50) Name=x Ended",
            "Slurm Array Summary Job_id=50_* (53) Name=x Ended",
            "Slurm Array Task Job_id=50_4 (53) Name=x Ended",
        ] {
            let env = if other.contains("Task") {
                with("53", "3")
            } else {
                meta.clone()
            };
            let r = MailRequest::parse(&args(&["-s", other, "a@b.c"]), &env).unwrap();
            assert_eq!(r.target, None, "{other}");
        }
    }

    #[test]
    fn a_name_cannot_change_the_job_and_a_missing_id_is_no_job() {
        let env = Env::of(env_22_05());
        // The job name is user text after the ids: it cannot move them.
        let s = "Slurm Job_id=41 Name=Slurm Job_id=7 Name=x Ended";
        let r = MailRequest::parse(&args(&["-s", s, "alice"]), &env).unwrap();
        assert_eq!(r.target, Some(Target::Job(41)));
        let s = "Slurm Job_id=7 Name=x Ended";
        let r = MailRequest::parse(&args(&["-s", s, "alice"]), &env).unwrap();
        assert_eq!(r.target, None);
        let r = MailRequest::parse(&args(&["-s", "hello", "alice"]), &Env::default()).unwrap();
        assert_eq!((r.target, r.mail_type), (None, None));
    }

    #[test]
    fn the_users_choices_come_from_the_spank_variables() {
        let mut env = env_22_05();
        env.extend([
            ("SPANK_GPU_TRACKER_MAIL", " OFF "),
            ("SPANK_GPU_TRACKER_TRACK", "off"),
        ]);
        let r = MailRequest::parse(&args(&["-s", "x", "alice"]), &Env::of(env)).unwrap();
        assert!(r.opted_out);
        assert_eq!(r.track, TrackAsked::Off);
        // Without the prefix (not something slurmctld passes on from a job) it means nothing.
        let mut env = env_22_05();
        env.push(("GPU_TRACKER_MAIL", "off"));
        let r = MailRequest::parse(&args(&["-s", "x", "alice"]), &Env::of(env)).unwrap();
        assert!(!r.opted_out);
    }

    #[test]
    fn the_submission_passes_on_the_users_choices_under_the_names_mailprog_reads() {
        assert_eq!(submission_env(None, None), vec![]);
        assert_eq!(
            submission_env(Some(""), Some("Off")),
            vec![("GPU_TRACKER_MAIL", "off"), ("GPU_TRACKER_TRACK", "on")]
        );
        assert_eq!(
            submission_env(Some("off"), Some("on")),
            vec![("GPU_TRACKER_TRACK", "off")]
        );
        // slurmctld adds `SPANK_` to what the plugin sets: the names MailProg reads.
        for (name, _) in submission_env(Some("5"), Some("off")) {
            let seen = format!("SPANK_{name}");
            assert!(
                [SPANK_OPT_OUT_VAR, SPANK_TRACK_VAR].contains(&seen.as_str()),
                "{seen}"
            );
        }
    }

    #[test]
    fn only_slurmctlds_argv_is_taken() {
        let env = Env::default();
        for a in [
            &["alice"][..],
            &["-s", "subject"],
            &["-x", "subject", "alice"],
            &["-s", "subject", "alice", "bob"],
        ] {
            assert!(MailRequest::parse(&args(a), &env).is_err(), "{a:?}");
        }
    }
}

//! Whole-program tests of `gpu-tracker-mail`, run as slurmctld runs MailProg: `-s SUBJECT
//! RECIPIENT`, only the job's variables in its environment, a fake `sacct` first in PATH (as in
//! tests/report_fake_slurm.rs).
//!
//! The "mailer" here is a recording shell script that saves its arguments and its standard
//! input: a test double for the shape of the mailer's call (argv and stdin) only. It delivers
//! nothing; delivery through a real mail server is the real-Slurm tests' (tests/slurm/).

mod common;

use common::TempDir;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpu_tracker::step::record::*;

/// A settings file, a recording mailer and fake Slurm commands in a temp dir.
struct Site {
    dir: TempDir,
}

/// The bound the tests' settings set (`mail.wait_seconds`).
const WAIT_SECONDS: u64 = 2;

impl Site {
    fn new(tag: &str) -> Site {
        let dir = TempDir::new(tag);
        std::fs::create_dir_all(dir.join("spool")).unwrap();
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let s = Site { dir };
        let mailer = s.dir.join("mailer");
        s.script(
            &mailer,
            &format!(
                "printf '%s\\n' \"$@\" > '{0}/argv'\ncat > '{0}/stdin'",
                s.dir.path().display()
            ),
        );
        std::fs::write(
            s.dir.join("gpu-tracker.toml"),
            format!(
                "spool_dir = {:?}\n[mail]\nwait_seconds = {WAIT_SECONDS}\nmailer = {:?}\n\
                 footer = \"Help: https://example.org/gpu\"\n",
                s.dir.join("spool").to_str().unwrap(),
                mailer.to_str().unwrap(),
            ),
        )
        .unwrap();
        // sacct logs each call, then answers from the file `sacct-rows`.
        s.command(
            "sacct",
            &format!(
                "echo \"$*\" >> '{0}/sacct.log'\ncat '{0}/sacct-rows' 2>/dev/null\nexit 0",
                s.dir.path().display()
            ),
        );
        s
    }

    fn script(&self, p: &PathBuf, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn command(&self, name: &str, body: &str) {
        self.script(&self.dir.join(&format!("bin/{name}")), body);
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// Runs the program as slurmctld would: `-s subject recipient`, the job's variables `env`
    /// and nothing else but PATH (the fake commands first) and the settings' path.
    fn mail(&self, subject: &str, recipient: &str, env: &[(&str, &str)]) -> Output {
        let path = format!("{}:/usr/bin:/bin", self.dir.join("bin").display());
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpu-tracker-mail"))
            .args(["-s", subject, recipient])
            .env_clear()
            .env("PATH", path)
            .env("GPU_TRACKER_CONFIG", self.dir.join("gpu-tracker.toml"))
            .env("SLURM_CONF", self.dir.join("no-slurm.conf"))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("gpu-tracker-mail still ran after 60 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    }

    /// `sacct` answers with job `job`'s row (task `task` of array `array`, when given) holding
    /// its stored summary, after any rows already there.
    fn stored(&self, job: u32, array: Option<(u32, u32)>, peak_gib: u64) {
        let r = record(job, array, peak_gib);
        let s = gpu_tracker::report::Summary::from_records(&[r]);
        let id = array.map_or(job.to_string(), |(a, t)| format!("{a}_{t}"));
        let row = format!(
            "{job}|{id}|1001|alice|{}\n",
            gpu_tracker::report::stored::Stored::of(&s).encode()
        );
        let mut rows = self.read("sacct-rows");
        rows.push_str(&row);
        std::fs::write(self.dir.join("sacct-rows"), rows).unwrap();
    }
}

/// A finished batch step of job `job` of uid 1001 that peaked at `peak_gib` GiB of 8.
fn record(job: u32, array: Option<(u32, u32)>, peak_gib: u64) -> StepRecord {
    let start = "2026-11-29T06:00:00Z";
    StepRecord {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        complete: true,
        written_at: start.into(),
        tracker_version: "0.1.0".into(),
        job: JobInfo {
            id: job,
            array_job_id: array.map(|a| a.0),
            array_task_id: array.map(|a| a.1),
            user: "alice".into(),
            uid: 1001,
            alloc_memory_bytes: Some(8 << 30),
            ..Default::default()
        },
        step: StepInfo {
            id: "batch".into(),
            kind: "batch".into(),
            node: "n1".into(),
            start: start.into(),
            end: Some(start.into()),
            elapsed_seconds: 600.0,
            ..Default::default()
        },
        tasks: vec![],
        memory: StepMemory {
            peak_bytes: peak_gib << 30,
            ..Default::default()
        },
        cpu: StepCpu::default(),
        gpus: vec![],
        sampler: SamplerStats::default(),
        timeline: None,
        events: Vec::new(),
        events_dropped: 0,
        pressure: None,
    }
}

/// The job's variables slurmctld gives MailProg for `word` (Slurm's mail type).
fn job_env(word: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("SLURM_JOB_ID", "41"),
        ("SLURM_JOBID", "41"),
        ("SLURM_JOB_UID", "1001"),
        ("SLURM_JOB_USER", "alice"),
        ("SLURM_JOB_NAME", "train"),
        ("SLURM_JOB_STATE", "COMPLETED"),
        ("SLURM_JOB_MAIL_TYPE", word),
        ("SLURM_JOB_EXIT_CODE_MAX", "0"),
    ]
}

const ENDED: &str = "Slurm Job_id=41 Name=train Ended, Run time 00:10:00, COMPLETED, ExitCode 0";

/// The message's headers (sendmail form): the lines before the first empty one.
fn headers(message: &str) -> Vec<String> {
    message
        .split("\n\n")
        .next()
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn body(message: &str) -> String {
    message
        .split_once("\n\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

#[test]
fn an_end_mail_gets_the_jobs_summary() {
    let site = Site::new("mail-end");
    site.stored(41, None, 2);
    let out = site.mail(ENDED, "alice", &job_env("Ended"));
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert_eq!(site.read("argv"), "-oi\n--\nalice\n");
    let m = site.read("stdin");
    assert!(headers(&m).contains(&format!("Subject: {ENDED}")), "{m}");
    assert!(headers(&m).contains(&"To: alice".to_string()), "{m}");
    let b = body(&m);
    // The summary as gpu-tracker-report 41 shows it from Slurm's database.
    assert!(b.contains("gpu-tracker summary of job 41"), "{b}");
    assert!(b.contains("Job name:      train"), "{b}");
    assert!(b.contains("peak 2.00 GiB of 8.00 GiB requested"), "{b}");
    // The advice, in the words of the end of the job's output.
    assert!(b.contains("Advice:") && b.contains("--mem=2560M"), "{b}");
    assert!(b.contains("Help: https://example.org/gpu"), "{b}");
    assert!(b.contains("GPU_TRACKER_MAIL=off"), "{b}");
    assert!(!b.contains("not stored yet"), "{b}");
    assert!(b.chars().all(|c| c == '\n' || !c.is_control()), "{b:?}");
}

#[test]
fn a_begin_mail_goes_untouched_and_slurm_is_not_asked() {
    let site = Site::new("mail-begin");
    site.stored(41, None, 2);
    let subject = "Slurm Job_id=41 Name=train Began, Queued time 00:00:01";
    let out = site.mail(subject, "alice@example.org", &job_env("Began"));
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert_eq!(site.read("argv"), "-oi\n--\nalice@example.org\n");
    let m = site.read("stdin");
    assert!(headers(&m).contains(&format!("Subject: {subject}")), "{m}");
    assert_eq!(body(&m), "\n", "Slurm's own empty body");
    assert_eq!(site.read("sacct.log"), "", "sacct asked for a BEGIN mail");
}

#[test]
fn a_summary_that_is_not_there_gives_the_plain_mail_and_one_line_within_the_bound() {
    let site = Site::new("mail-missing");
    // The job is in the database, with no summary (the EpilogSlurmctld has not stored it).
    std::fs::write(site.dir.join("sacct-rows"), "41|41|1001|alice|\n").unwrap();
    let t = Instant::now();
    let out = site.mail(ENDED, "alice", &job_env("Ended"));
    let took = t.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(
        took >= Duration::from_secs(WAIT_SECONDS),
        "gave up early: {took:?}"
    );
    assert!(took < Duration::from_secs(WAIT_SECONDS + 2), "{took:?}");
    let b = body(&site.read("stdin"));
    assert_eq!(b.lines().count(), 1, "{b}");
    assert!(b.contains("`gpu-tracker-report 41`"), "{b}");
    assert!(
        site.read("sacct.log").lines().count() >= 2,
        "asked once only"
    );
    assert!(common::stderr(&out).contains("no summary in the mail"));

    // A database that does not answer at all: the same, within the same bound.
    site.command("sacct", "exec sleep 60");
    let t = Instant::now();
    let out = site.mail(ENDED, "alice", &job_env("Ended"));
    let took = t.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(took < Duration::from_secs(WAIT_SECONDS + 2), "{took:?}");
    assert!(body(&site.read("stdin")).contains("`gpu-tracker-report 41`"));
}

#[test]
fn a_job_name_with_a_bcc_line_and_a_recipient_that_is_an_option_reach_no_header_or_option() {
    let site = Site::new("mail-inject");
    site.stored(41, None, 2);
    let subject = "Slurm Job_id=41 Name=x\nBcc: mallory@example.org\r\nX-Evil: 1 Ended, COMPLETED";
    let mut env = job_env("Ended");
    env.retain(|(k, _)| *k != "SLURM_JOB_NAME");
    env.push(("SLURM_JOB_NAME", "x\nBcc: mallory@example.org\r\nX-Evil: 1"));
    let out = site.mail(subject, "-oQ/tmp/x", &env);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    // The recipient that reads as an option is not passed: the mail goes to the job's user.
    assert_eq!(site.read("argv"), "-oi\n--\nalice\n");
    let m = site.read("stdin");
    let h = headers(&m);
    assert_eq!(h.len(), 6, "{h:?}");
    assert!(
        h.iter()
            .all(|l| !l.starts_with("Bcc") && !l.starts_with("X-Evil")),
        "{h:?}"
    );
    assert!(!m.contains('\r'));
    // Neither a recipient nor the job's user that is an address: nothing is sent.
    let mut env = job_env("Ended");
    env.retain(|(k, _)| *k != "SLURM_JOB_USER");
    std::fs::remove_file(site.dir.join("argv")).unwrap();
    let out = site.mail(ENDED, "--help", &env);
    assert_eq!(out.status.code(), Some(3), "{}", common::stderr(&out));
    assert_eq!(site.read("argv"), "");
}

#[test]
fn an_array_mail_gets_the_array_summary() {
    let site = Site::new("mail-array");
    site.stored(52, Some((50, 2)), 1);
    site.stored(50, Some((50, 0)), 3);
    site.stored(51, Some((50, 1)), 2);
    let subject =
        "Slurm Array Summary Job_id=50_* (50) Name=sweep Ended, COMPLETED, ExitCode [0-0]";
    let env = [
        ("SLURM_JOB_ID", "50"),
        ("SLURM_ARRAY_JOB_ID", "50"),
        ("SLURM_ARRAY_TASK_ID", "2"),
        ("SLURM_JOB_UID", "1001"),
        ("SLURM_JOB_USER", "alice"),
        ("SLURM_JOB_NAME", "sweep"),
        ("SLURM_JOB_MAIL_TYPE", "Ended"),
    ];
    let out = site.mail(subject, "alice", &env);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let b = body(&site.read("stdin"));
    assert!(
        b.contains("gpu-tracker summary of array 50 (3 task(s))"),
        "{b}"
    );
    assert!(b.contains("Job name:      sweep"), "{b}");
    assert!(b.contains("Next time:     --mem=3840M"), "{b}");
    assert!(!b.contains("not stored yet"), "{b}");
    assert!(
        site.read("sacct.log").contains("-j 50 "),
        "{}",
        site.read("sacct.log")
    );
}

#[test]
fn broken_settings_and_a_subject_of_no_job_still_send_the_plain_mail() {
    let site = Site::new("mail-broken");
    site.stored(41, None, 2);
    // A key the settings refuse, outside [mail]: the site's mailer is still the one used.
    let toml = site
        .read("gpu-tracker.toml")
        .replace("[mail]", "interval = -5\n[mail]");
    std::fs::write(site.dir.join("gpu-tracker.toml"), toml).unwrap();
    let out = site.mail(ENDED, "alice", &job_env("Ended"));
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(common::stderr(&out).contains("settings not usable"));
    assert_eq!(site.read("argv"), "-oi\n--\nalice\n");
    assert_eq!(body(&site.read("stdin")), "\n");
    // Ids that do not match the subject name no job: the plain mail, Slurm not asked.
    let site = Site::new("mail-nojob");
    let out = site.mail("Slurm Job_id=7 Name=x Ended", "alice", &job_env("Ended"));
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert_eq!(body(&site.read("stdin")), "\n");
    assert_eq!(site.read("sacct.log"), "");
}

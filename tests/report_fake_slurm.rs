//! Whole-program tests of how `gpu-tracker-report` talks to Slurm's commands, with fake
//! `scontrol`, `squeue`, `sacct` and `sacctmgr` first in PATH: a controller that hangs does not
//! hang the report; `--store-admin-comment` takes one job id and nothing else, stores only the
//! records of the job Slurm names (its user, begun after it started), and no settings error
//! shows a line of the file it could not use.

mod common;

use common::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A spool, settings naming it, and a directory of fake Slurm commands.
struct Fake {
    dir: TempDir,
}

impl Fake {
    fn new(tag: &str) -> Fake {
        let dir = TempDir::new(tag);
        std::fs::create_dir_all(dir.join("spool/t")).unwrap();
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::write(
            dir.join("gpu-tracker.toml"),
            format!("spool_dir = {:?}\n", dir.join("spool").to_str().unwrap()),
        )
        .unwrap();
        let f = Fake { dir };
        // By default Slurm knows nothing and stores whatever it is given.
        f.command("scontrol", "exit 1");
        f.command("squeue", "exit 0");
        f.command("sacct", "exit 0");
        let log = f.log();
        f.command(
            "sacctmgr",
            &format!(
                "printf '%s\\n' \"$@\" >> '{}'\necho ' Modified job(s)'",
                log.display()
            ),
        );
        f
    }

    /// Makes `name` a fake command running `body` (sh).
    fn command(&self, name: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        let p = self.dir.join(&format!("bin/{name}"));
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Where the fake sacctmgr writes its arguments, one a line.
    fn log(&self) -> PathBuf {
        self.dir.join("sacctmgr.log")
    }

    fn stored(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }

    /// Runs the report with `args` and the variables `env`, failed if it runs over 30 s.
    fn report(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let path = format!("{}:/usr/bin:/bin", self.dir.join("bin").display());
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpu-tracker-report"))
            .args(args)
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
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("gpu-tracker-report {args:?} still ran after 30 s: it hangs");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    }

    /// Job `job` of uid 1001 in the spool (cluster `default`: no slurm.conf), its batch step
    /// begun at `start` (RFC 3339).
    fn job(&self, job: u32, start: &str) {
        use gpu_tracker::step::record::*;
        let dir = self.dir.join(&format!("spool/default/{job}"));
        std::fs::create_dir_all(&dir).unwrap();
        let r = StepRecord {
            schema: SCHEMA.into(),
            schema_version: SCHEMA_VERSION,
            complete: true,
            written_at: start.into(),
            tracker_version: "0.1.0".into(),
            job: JobInfo {
                id: job,
                user: "alice".into(),
                uid: 1001,
                ..Default::default()
            },
            step: StepInfo {
                id: "batch".into(),
                kind: "batch".into(),
                node: "n1".into(),
                start: start.into(),
                end: Some(start.into()),
                elapsed_seconds: 60.0,
                ..Default::default()
            },
            tasks: vec![],
            memory: StepMemory::default(),
            cpu: StepCpu::default(),
            gpus: vec![],
            sampler: SamplerStats::default(),
            timeline: None,
            events: Vec::new(),
            events_dropped: 0,
            pressure: None,
        };
        std::fs::write(dir.join("n1.batch.json"), r.to_json()).unwrap();
    }
}

#[test]
fn a_controller_that_does_not_answer_does_not_hang_the_report() {
    let f = Fake::new("hung-controller");
    f.command("scontrol", "exec sleep 60");
    f.command("squeue", "exec sleep 60");
    let t = Instant::now();
    let out = f.report(&["999"], &[]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("unknown job 999"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(25), "{:?}", t.elapsed());
    // scontrol knows the job; squeue, asked whether it started, hangs.
    f.command("scontrol", "echo JobId=999");
    let t = Instant::now();
    let out = f.report(&["999"], &[]);
    assert_eq!(out.status.code(), Some(4), "{}", common::stderr(&out));
    assert!(t.elapsed() < Duration::from_secs(25), "{:?}", t.elapsed());
}

#[test]
fn store_admin_comment_takes_one_job_id_and_nothing_else() {
    let f = Fake::new("store-alone");
    // A file root can read and the caller cannot: its first line must never come out.
    let secret = f.dir.join("secret");
    std::fs::write(&secret, "root:$y$j9T$SECRETHASH:19000:0:99999:7:::\n").unwrap();
    let s = secret.to_str().unwrap();
    for args in [
        &["--store-admin-comment", "5", "--config", s][..],
        &["--config", s, "--store-admin-comment", "5"],
        &["--store-admin-comment", "5", "--spool", "/tmp"],
        &["--store-admin-comment", "5", "--cluster", "x"],
        &["--store-admin-comment", "5", "-f", "json"],
        &["--store-admin-comment", "5", "6"],
        &["--store-admin-comment", "5_1"],
        &["--store-admin-comment", "../5"],
    ] {
        let out = f.report(args, &[]);
        let all = format!("{}{}", common::stdout(&out), common::stderr(&out));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {all}");
        assert!(!all.contains("SECRETHASH"), "{args:?}: {all}");
    }
    assert!(f.stored().is_empty(), "{}", f.stored());
    // Alone, it runs.
    let out = f.report(&["--store-admin-comment=5"], &[]);
    assert_eq!(out.status.code(), Some(4), "{}", common::stderr(&out));
    assert!(common::stdout(&out).contains("no records"));
}

#[test]
fn a_settings_error_never_shows_the_file_s_text() {
    let f = Fake::new("settings-secret");
    let secret = f.dir.join("secret");
    for text in [
        "root:$y$j9T$SECRETHASH:19000:0:99999:7:::\n",
        "SECRETHASH = 1\n",
        "interval = \"SECRETHASH\"\n",
        "steps = [\"SECRETHASH\"]\n",
        "spool_dir = \"SECRETHASH\"\n",
        "\n\nlive_group = \"SECRETHASH x\"\n",
    ] {
        std::fs::write(&secret, text).unwrap();
        let out = f.report(&["--config", secret.to_str().unwrap(), "5"], &[]);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{text}: {err}");
        assert!(!err.contains("SECRETHASH"), "{text}: {err}");
        assert!(err.contains(secret.to_str().unwrap()), "{text}: {err}");
        assert!(err.contains("line "), "{text}: {err}");
    }
}

#[test]
fn only_records_of_the_job_slurm_names_are_stored() {
    let f = Fake::new("store-which");
    // Records of job 5, uid 1001, begun 2026-11-23T09:59:00Z (1795427940).
    f.job(5, "2026-11-23T09:59:00+00:00");
    let epilog = |uid: &'static str, start: &'static str| {
        vec![
            ("SLURM_SCRIPT_CONTEXT", "epilog_slurmctld"),
            ("SLURM_JOB_ID", "5"),
            ("SLURM_JOB_UID", uid),
            ("SLURM_JOB_START_TIME", start),
        ]
    };
    // Another user's job 5, or a job 5 that started after the records began: nothing stored.
    for env in [epilog("1002", "1795427900"), epilog("1001", "1795430000")] {
        let out = f.report(&["--store-admin-comment", "5"], &env);
        let said = common::stdout(&out);
        assert_eq!(out.status.code(), Some(4), "{env:?}: {said}");
        assert!(said.contains("nothing stored"), "{said}");
        assert!(f.stored().is_empty(), "{env:?}: {}", f.stored());
    }
    // The job's own records, begun 10 s after its start (or 20 s before, within the slack).
    for start in ["1795427930", "1795427960"] {
        let out = f.report(&["--store-admin-comment", "5"], &epilog("1001", start));
        assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
        assert!(
            f.stored().contains("AdminComment=JS1:H4sI"),
            "{}",
            f.stored()
        );
        std::fs::remove_file(f.log()).unwrap();
    }
    // Slurm 22.05 gives no start time: squeue's answer for the job, and no other.
    let env = &epilog("1001", "")[..3];
    for (rows, code) in [
        // Another job's row only; a row of another user than slurmctld gave; a start after
        // the records began.
        ("echo '6|1001|1795427900'", 1),
        ("echo '6|1001|1795427900'\necho '5|1002|1795427900'", 1),
        ("echo '5|1001|1795430000'", 4),
    ] {
        f.command("squeue", rows);
        let out = f.report(&["--store-admin-comment", "5"], env);
        let said = format!("{}{}", common::stdout(&out), common::stderr(&out));
        assert_eq!(out.status.code(), Some(code), "{rows}: {said}");
        assert!(said.contains("nothing stored"), "{rows}: {said}");
        assert!(f.stored().is_empty(), "{}", f.stored());
    }
    f.command("squeue", "echo '5|1001|1795427900'");
    let out = f.report(&["--store-admin-comment", "5"], env);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(f.stored().contains("AdminComment=JS1:H4sI"));
    std::fs::remove_file(f.log()).unwrap();
    // Neither says: nothing stored.
    f.command("squeue", "exit 1");
    let out = f.report(&["--store-admin-comment", "5"], &[]);
    assert_ne!(out.status.code(), Some(0), "{}", common::stdout(&out));
    assert!(f.stored().is_empty(), "{}", f.stored());
}

/// The form stored follows `[admin_comment]` and the Slurm release: jobstats' `JS1:` by
/// default, `gpu-tracker:1:` where `sacctmgr --version` is 22.05 (which lowercases what it
/// stores) or the site asks for it; another tool's comment already there is kept by default,
/// and carried inside ours when the site says `replace`.
#[test]
fn the_stored_form_follows_the_settings_and_another_tool_s_comment_is_not_overwritten() {
    let f = Fake::new("store-form");
    f.job(5, "2026-11-23T09:59:00+00:00");
    let env = [
        ("SLURM_SCRIPT_CONTEXT", "epilog_slurmctld"),
        ("SLURM_JOB_ID", "5"),
        ("SLURM_JOB_UID", "1001"),
        ("SLURM_JOB_START_TIME", "1795427930"),
    ];
    let sacctmgr = |version: &str| {
        format!(
            "[ \"$1\" = --version ] && {{ echo '{version}'; exit 0; }}\n\
             printf '%s\\n' \"$@\" >> '{}'\necho ' Modified job(s)'",
            f.log().display()
        )
    };
    let store = |f: &Fake| {
        let _ = std::fs::remove_file(f.log());
        let out = f.report(&["--store-admin-comment", "5"], &env);
        (out.status.code(), common::stdout(&out), f.stored())
    };
    f.command("sacctmgr", &sacctmgr("slurm 24.11.1"));
    let (code, _, stored) = store(&f);
    assert_eq!(code, Some(0));
    assert!(stored.contains("AdminComment=JS1:H4sI"), "{stored}");
    // Slurm 22.05: the old form, and the line says why.
    f.command("sacctmgr", &sacctmgr("slurm-wlm 22.05.8"));
    let (code, said, stored) = store(&f);
    assert_eq!(code, Some(0));
    assert!(stored.contains("AdminComment=gpu-tracker:1:{"), "{stored}");
    assert!(said.contains("lowercases"), "{said}");
    // Another tool's comment there: kept, nothing stored, and said.
    f.command("sacctmgr", &sacctmgr("slurm 24.11.1"));
    f.command("sacct", "echo '5|5|1001|alice|JS1:H4sItheirs'");
    let (code, said, stored) = store(&f);
    assert_eq!(code, Some(4), "{said}");
    assert!(
        said.contains("another tool's") && said.contains("kept"),
        "{said}"
    );
    assert!(stored.is_empty(), "{stored}");
    // Replace: ours, theirs inside.
    let toml = f.dir.join("gpu-tracker.toml");
    let mut cfg = std::fs::read_to_string(&toml).unwrap();
    cfg.push_str("[admin_comment]\nother = \"replace\"\n");
    std::fs::write(&toml, cfg).unwrap();
    let (code, said, stored) = store(&f);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("replaced"), "{said}");
    let text = stored
        .lines()
        .find_map(|l| l.strip_prefix("AdminComment="))
        .unwrap();
    let top = gpu_tracker::report::jobstats::decode_json(text)
        .unwrap()
        .unwrap();
    assert_eq!(top["gpu_tracker_replaced"], "JS1:H4sItheirs");
    assert_eq!(top["gpu_tracker"]["job"], 5);
}

/// Run through sudo (`SUDO_UID` set), `--store-admin-comment` takes nothing from its caller's
/// environment: not the caller's PATH (a fake `squeue` there is never run), not `SLURM_CONF`
/// (which Slurm's commands, run as root, would parse and quote), not `GPU_TRACKER_CONFIG` (the
/// caller's spool is not read), and what a failed command said never reaches the output.
#[test]
fn under_sudo_store_admin_comment_takes_nothing_from_the_caller() {
    let f = Fake::new("sudo-env");
    f.job(1234, "2026-11-28T10:00:00Z");
    let secret = f.dir.join("root-only");
    std::fs::write(&secret, "root:$y$SECRET-HASH-LINE:20000:0:99999:7:::\n").unwrap();
    let conf = f.dir.join("evil.conf");
    std::fs::write(&conf, format!("Include {}\n", secret.display())).unwrap();
    let ran = f.dir.join("fake-squeue-ran");
    // What Slurm's parser does with a file it rejects: it prints the file's lines on stderr.
    f.command(
        "squeue",
        &format!(
            "echo \"$SLURM_CONF\" > '{}'\ncat \"$SLURM_CONF\" {} >&2\nexit 1",
            ran.display(),
            secret.display()
        ),
    );
    let env = [
        ("SUDO_UID", "1000"),
        ("SUDO_USER", "slurm"),
        ("SLURM_CONF", conf.to_str().unwrap()),
    ];
    let out = f.report(&["--store-admin-comment", "1234"], &env);
    let all = format!("{}{}", common::stdout(&out), common::stderr(&out));
    assert!(!ran.exists(), "the caller's squeue was run: {all}");
    assert!(!all.contains("SECRET-HASH-LINE"), "{all}");
    assert!(
        f.stored().is_empty(),
        "the caller's spool was read and stored: {all}"
    );
    // Without sudo (root's own run, as where SlurmUser is root), the same environment is used:
    // that is what makes the check above mean something.
    let own = f.report(&["--store-admin-comment", "1234"], &env[2..]);
    let all = format!("{}{}", common::stdout(&own), common::stderr(&own));
    assert!(ran.exists(), "{all}");
    // Where Debian's Slurm is installed, the real squeue with the caller's SLURM_CONF: its
    // parser's complaint must not reach the output either.
    if Path::new("/usr/bin/squeue").exists() {
        std::fs::remove_dir_all(f.dir.join("bin")).unwrap();
        std::fs::create_dir_all(f.dir.join("bin")).unwrap();
        let out = f.report(&["--store-admin-comment", "1234"], &env);
        let all = format!("{}{}", common::stdout(&out), common::stderr(&out));
        assert!(!all.contains("SECRET-HASH-LINE"), "{all}");
    }
}

/// Slurm 22.05's sacctmgr exits 1 with "Nothing modified" (stdout) and "Request didn't affect
/// anything" (stderr) for a job slurmdbd does not have yet: an array task that ended within a
/// second or two, before slurmctld's queue reached slurmdbd. The store asks again, as it does
/// where sacctmgr exits 0 with the same words, and the summary is stored on the third try.
#[test]
fn a_job_the_database_does_not_have_yet_is_asked_for_again_when_sacctmgr_exits_1() {
    let f = Fake::new("store-later");
    f.job(5, "2026-11-23T09:59:00+00:00");
    let count = f.dir.join("sacctmgr.count");
    f.command(
        "sacctmgr",
        &format!(
            "[ \"$1\" = --version ] && {{ echo 'slurm 22.05.8'; exit 0; }}\n\
             n=$(cat '{c}' 2>/dev/null || echo 0); n=$((n + 1)); echo $n > '{c}'\n\
             printf '%s\\n' \"$@\" >> '{log}'\n\
             if [ $n -le 2 ]; then\n\
               echo ' Nothing modified'\n\
               echo \"sacctmgr: accounting_storage/slurmdbd: acct_storage_p_modify_job: Request \
             didn't affect anything or your user doesn't have privilege to perform this action\" >&2\n\
               exit 1\n\
             fi\n\
             echo ' Modified job(s)'",
            c = count.display(),
            log = f.log().display()
        ),
    );
    let env = [
        ("SLURM_SCRIPT_CONTEXT", "epilog_slurmctld"),
        ("SLURM_JOB_ID", "5"),
        ("SLURM_JOB_UID", "1001"),
        ("SLURM_JOB_START_TIME", "1795427930"),
    ];
    let out = f.report(&["--store-admin-comment", "5"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert_eq!(std::fs::read_to_string(&count).unwrap().trim(), "3");
    assert!(f.stored().contains("AdminComment=gpu-tracker:1:"));
}

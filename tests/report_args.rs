//! Whole-program tests of `gpu-tracker-report`'s numbers: ages, dates and the settings file's
//! `retention_days` out of range are refused with one clear line and the tool's usual exit
//! status (2: bad command line, 1: settings not usable), never a panic (101).
//!
//! And of its reading of a hostile spool: job ids that are paths, and entries of a job
//! directory that are links, FIFOs, huge, hard-linked or someone else's are refused (one line
//! each, exit 6), without hanging or reading through them, while the job's good record is
//! still shown; a job directory that is a link is never followed, listed or purged.
//!
//! And of where it finds its settings without `GPU_TRACKER_CONFIG` (through slurm.conf and
//! plugstack.conf, as Slurm hands them to the plugin), and of what it says of a job it finds no
//! records of.

mod common;

use common::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A settings file with a spool of its own in a temp dir, and `extra` settings lines.
struct Site {
    dir: TempDir,
}

impl Site {
    fn new(tag: &str, extra: &str) -> Site {
        let dir = TempDir::new(tag);
        let spool = dir.join("spool");
        std::fs::create_dir(&spool).unwrap();
        std::fs::write(
            dir.join("gpu-tracker.toml"),
            format!("spool_dir = {:?}\n{extra}\n", spool.to_str().unwrap()),
        )
        .unwrap();
        Site { dir }
    }

    fn report(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_gpu-tracker-report"))
            .args(args)
            .env("GPU_TRACKER_CONFIG", self.dir.join("gpu-tracker.toml"))
            .env_remove("GPU_TRACKER_SPOOL")
            .output()
            .unwrap()
    }

    /// Runs the report on cluster `t` of the spool with `args`, killed and failed if it runs
    /// longer than 20 s (a reader blocked on a FIFO).
    fn report_in_time(&self, args: &[&std::ffi::OsStr]) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpu-tracker-report"))
            .arg("--cluster")
            .arg("t")
            .args(args)
            .env("GPU_TRACKER_CONFIG", self.dir.join("gpu-tracker.toml"))
            .env_remove("GPU_TRACKER_SPOOL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("gpu-tracker-report {args:?} still ran after 20 s: it hangs");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    }

    /// The spool of cluster `t`.
    fn cluster(&self) -> PathBuf {
        self.dir.join("spool/t")
    }
}

fn os(args: &[&str]) -> Vec<std::ffi::OsString> {
    args.iter().map(|a| a.into()).collect()
}

fn run_report(site: &Site, args: &[&str]) -> Output {
    let a = os(args);
    let refs: Vec<&std::ffi::OsStr> = a.iter().map(|a| a.as_os_str()).collect();
    site.report_in_time(&refs)
}

/// A complete record of job `job` (user alice, uid 1001), step `step` on `node`, named
/// `name`, as the plugin writes it.
fn record_json(job: u32, node: &str, step: &str, name: &str) -> String {
    use gpu_tracker::step::record::*;
    StepRecord {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        complete: true,
        written_at: "2026-11-23T10:00:00+00:00".into(),
        tracker_version: "0.1.0".into(),
        job: JobInfo {
            id: job,
            name: Some(name.into()),
            user: "alice".into(),
            uid: 1001,
            ..Default::default()
        },
        step: StepInfo {
            id: step.into(),
            kind: if step == "batch" { "batch" } else { "srun" }.into(),
            node: node.into(),
            start: "2026-11-23T09:59:00+00:00".into(),
            end: Some("2026-11-23T10:00:00+00:00".into()),
            elapsed_seconds: 60.0,
            ..Default::default()
        },
        tasks: vec![TaskRecord {
            pid: 77,
            ended: true,
            exit_code: Some(0),
            ..Default::default()
        }],
        memory: StepMemory::default(),
        cpu: StepCpu::default(),
        gpus: vec![],
        sampler: SamplerStats::default(),
        timeline: None,
        events: Vec::new(),
        events_dropped: 0,
        pressure: None,
    }
    .to_json()
}

/// Makes job directory `dir` of job `job` as the plugin does: its instance file and a good
/// batch record from node `goodnode`.
fn good_job(dir: &Path, job: u32) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("instance.json"),
        format!("{{\"cluster\": \"t\", \"job_id\": {job}, \"uid\": 1001, \"token\": \"\"}}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("goodnode.batch.json"),
        record_json(job, "goodnode", "batch", "good-job"),
    )
    .unwrap();
}

fn mkfifo(p: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// Every path under `dir` with its size and modification time.
fn tree(dir: &Path) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                todo.push(e.path());
            }
            out.push((e.path(), m.len(), m.modified().ok()));
        }
    }
    out.sort();
    out
}

/// Asserts a refusal: exit `code`, one line on stderr naming `names` (the option or key and the
/// range), and no panic.
fn refused(out: &Output, code: i32, names: &[&str], what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert_ne!(out.status.code(), Some(101), "{what}: {err}");
    assert_eq!(out.status.code(), Some(code), "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
    assert!(err.starts_with("gpu-tracker-report: "), "{what}: {err}");
    for n in names {
        assert!(err.contains(n), "{what}: {n:?} not in {err}");
    }
}

#[test]
fn older_than_out_of_range_is_a_usage_error() {
    let site = Site::new("older", "");
    for v in ["1e300", "nan", "inf", "-1", "36526"] {
        let out = site.report(&["--purge", &format!("--older-than={v}")]);
        refused(&out, 2, &["--older-than", "from 0 to 36525"], v);
    }
    // The bound itself is accepted: the purge runs and finds nothing to remove.
    let out = site.report(&["--purge", "--older-than", "36525"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("removed the records of 0 job(s)"),
        "{err}"
    );
}

#[test]
fn since_out_of_range_is_a_usage_error() {
    let site = Site::new("since", "");
    for v in [
        "99999999d",
        "1e30h",
        "9223372036854775807h",
        "-5d",
        "36526d",
    ] {
        let out = site.report(&["--all", &format!("--since={v}")]);
        refused(&out, 2, &["--since", "36525 days (100 years)"], v);
    }
    for v in ["0001-01-01", "-262143-01-01"] {
        let out = site.report(&["--all", &format!("--since={v}")]);
        refused(&out, 2, &["--since", "1970-01-01 to 9999-12-31"], v);
    }
    for v in ["36525d", "2999-01-01"] {
        let out = site.report(&["--all", "--since", v]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{v}: {err}");
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("JOBID"));
    }
}

#[test]
fn retention_days_out_of_range_makes_the_settings_unusable() {
    for v in ["1e308", "nan", "36526"] {
        let site = Site::new("retention", &format!("retention_days = {v}"));
        let out = site.report(&["--purge"]);
        refused(
            &out,
            1,
            &["`retention_days`", "36525", "gpu-tracker.toml"],
            v,
        );
    }
    let site = Site::new("retention-ok", "retention_days = 36525");
    let out = site.report(&["--purge"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
}

#[test]
fn job_ids_that_are_paths_or_too_large_are_usage_errors_that_touch_nothing() {
    use std::os::unix::ffi::OsStrExt;
    let site = Site::new("spec", "");
    good_job(&site.cluster().join("1"), 1);
    // What `../../etc` would reach from the cluster's spool, were it taken as a path.
    good_job(&site.dir.join("etc"), 1);
    let before = tree(site.dir.path());
    let mut args: Vec<std::ffi::OsString> = os(&[
        "../../etc",
        "../1",
        "1/../../x",
        "1.batch/../x",
        "1/",
        "4294967296",
        "99999999999999999999",
        "",
        "-1",
    ]);
    args.push(std::ffi::OsStr::from_bytes(b"1\xff").to_os_string());
    for a in &args {
        let out = site.report_in_time(&[a.as_os_str()]);
        refused(&out, 2, &[], &format!("{a:?}"));
        assert!(out.stdout.is_empty(), "{a:?}");
    }
    assert_eq!(tree(site.dir.path()), before, "a file was made or changed");
    // The largest id is an id.
    let out = run_report(&site, &["4294967295"]);
    assert_ne!(out.status.code(), Some(2), "{}", common::stderr(&out));
}

#[test]
fn hostile_entries_of_a_job_directory_are_refused_and_the_good_record_is_shown() {
    let site = Site::new("hostile", "");
    let job = site.cluster().join("5");
    good_job(&job, 5);
    let outside = site.dir.join("outside");
    std::fs::create_dir(&outside).unwrap();
    // A link to a valid record (of this job id, so only not following it keeps it out).
    std::fs::write(
        outside.join("secret.json"),
        record_json(5, "secretnode", "0", "SECRET-LINKED"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.join("secret.json"), job.join("node.0.json")).unwrap();
    // A FIFO that no one writes: opening it for reading would block for ever.
    mkfifo(&job.join("node.1.json"));
    // 4 GiB, sparse: refused on its size, never read.
    std::fs::File::create(job.join("node.2.json"))
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    // A valid record with a second link elsewhere.
    std::fs::write(
        outside.join("hardlinked.json"),
        record_json(5, "hardnode", "3", "SECRET-HARDLINK"),
    )
    .unwrap();
    std::fs::hard_link(outside.join("hardlinked.json"), job.join("node.3.json")).unwrap();
    let mut expected = vec![
        ("node.0.json", "refused: a symbolic link; not followed"),
        ("node.1.json", "refused: a FIFO, not a regular file"),
        (
            "node.2.json",
            "refused: 4294967296 bytes, larger than a record can be",
        ),
        ("node.3.json", "refused: 2 hard links to it"),
    ];
    // A valid record of another owner than the directory's: only root can make one.
    if gpu_tracker::sys::euid() == 0 {
        let theirs = job.join("node.4.json");
        std::fs::write(
            &theirs,
            record_json(5, "foreignnode", "4", "SECRET-FOREIGN"),
        )
        .unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        expected.push(("node.4.json", "refused: owned by uid 65534, not by uid 0"));
    } else {
        eprintln!("note: not root: a record of another owner cannot be made; that part skipped");
    }

    let started = Instant::now();
    let out = run_report(&site, &["5"]);
    let (stdout, stderr) = (common::stdout(&out), common::stderr(&out));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "slow: {:?}",
        started.elapsed()
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(6), "{stdout}\n{stderr}");
    assert!(stdout.contains("goodnode"), "{stdout}");
    for secret in ["secretnode", "SECRET", "hardnode", "foreignnode"] {
        assert!(!stdout.contains(secret), "{secret} shown:\n{stdout}");
        assert!(!stderr.contains(secret), "{secret} shown:\n{stderr}");
    }
    // One line on stderr per refused entry, and a note for each in the summary.
    assert_eq!(stderr.lines().count(), expected.len(), "{stderr}");
    for (file, why) in &expected {
        let line = format!("gpu-tracker-report: job 5: {file}: {why}");
        assert!(
            stderr.lines().any(|l| l.starts_with(&line)),
            "{line}\n{stderr}"
        );
        assert!(
            stdout.contains(&format!("Note:          {file}: {why}")),
            "{file}\n{stdout}"
        );
    }

    let out = run_report(&site, &["5", "--format", "json"]);
    assert_eq!(out.status.code(), Some(6), "{}", common::stderr(&out));
    let doc = common::json(&out);
    let records = doc["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{doc:#}");
    assert_eq!(records[0]["step"]["node"], "goodnode");
    let problems = doc["problems"].as_array().unwrap();
    assert_eq!(problems.len(), expected.len(), "{doc:#}");
    for (p, (file, why)) in problems.iter().zip(&expected) {
        assert_eq!(p["kind"], "unreadable", "{p}");
        assert_eq!(p["refused"], true, "{p}");
        assert_eq!(p["file"], *file, "{p}");
        let error = p["error"].as_str().unwrap();
        assert!(
            error.starts_with(why.trim_start_matches("refused: ")),
            "{p}"
        );
    }

    // The batch step alone has no problem.
    let out = run_report(&site, &["5.batch"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    // The listing shows the job from its good record, and does not hang either.
    let out = run_report(&site, &["--all"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(common::stdout(&out).lines().any(|l| l.starts_with("5 ")));
    // Nothing was removed or changed outside.
    assert!(
        std::fs::symlink_metadata(job.join("node.0.json"))
            .unwrap()
            .is_symlink()
    );
    assert!(outside.join("secret.json").exists());
}

#[test]
fn a_job_directory_that_is_a_link_is_never_followed() {
    let site = Site::new("linkdir", "");
    good_job(&site.cluster().join("5"), 5);
    // Job 7's "directory" is a link to a real job directory elsewhere.
    let outside = site.dir.join("outside/7");
    good_job(&outside, 7);
    std::fs::write(
        outside.join("goodnode.batch.json"),
        record_json(7, "linkednode", "batch", "SECRET-LINKED-DIR"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, site.cluster().join("7")).unwrap();

    let out = run_report(&site, &["7"]);
    refused(
        &out,
        1,
        &["/spool/t/7", "refused", "a symbolic link"],
        "job 7",
    );
    assert!(out.stdout.is_empty());

    let out = run_report(&site, &["--all", "--format", "json"]);
    let stdout = common::stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(!stdout.contains("linkednode"), "{stdout}");
    assert_eq!(common::json(&out)["jobs"].as_array().unwrap().len(), 1);

    // A purge of everything leaves the link and what it points at alone, and says so.
    let out = run_report(&site, &["--purge", "--older-than", "0"]);
    let stderr = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("/spool/t/7: a symbolic link, not a job directory; left alone"),
        "{stderr}"
    );
    assert!(
        !site.cluster().join("5").exists(),
        "the real job directory is purged"
    );
    assert!(
        std::fs::symlink_metadata(site.cluster().join("7"))
            .unwrap()
            .is_symlink()
    );
    assert!(outside.join("goodnode.batch.json").exists());
    assert!(outside.join("instance.json").exists());
}

/// A site as `slurm/local-cluster.sh` lays it out, with no `GPU_TRACKER_CONFIG`: slurm.conf
/// names its plugstack, which includes a `.d` directory holding the plugin's line with
/// `config=`; the settings file there names the spool. (What the report says of a job that
/// neither the spool nor Slurm has is tested on the real clusters: tests/slurm/report.rs.)
struct SlurmSite {
    dir: TempDir,
}

impl SlurmSite {
    fn new(tag: &str) -> SlurmSite {
        let dir = TempDir::new(tag);
        let d = dir.path().display().to_string();
        let write = |rel: &str, text: String| {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(
            "etc/slurm.conf",
            format!(
                "ClusterName=t\nSlurmctldHost=localhost\nPlugStackConfig={d}/etc/plugstack.conf\n"
            ),
        );
        write(
            "etc/plugstack.conf",
            "# SPANK plugins\ninclude plugstack.conf.d/*.conf\n".into(),
        );
        write(
            "etc/plugstack.conf.d/10-other.conf",
            "optional /usr/lib/slurm/other_plugin.so x=1\n".into(),
        );
        write(
            "etc/plugstack.conf.d/20-gpu-tracker.conf",
            format!("optional {d}/lib/gpu_tracker.so config={d}/etc/gpu-tracker.toml\n"),
        );
        write(
            "etc/gpu-tracker.toml",
            format!("spool_dir = \"{d}/spool\"\n"),
        );
        SlurmSite { dir }
    }

    /// Runs the report with `SLURM_CONF` and no `GPU_TRACKER_CONFIG`.
    fn report(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_gpu-tracker-report"))
            .args(args)
            .env("SLURM_CONF", self.dir.join("etc/slurm.conf"))
            .env_remove("GPU_TRACKER_CONFIG")
            .env_remove("GPU_TRACKER_SPOOL")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

#[test]
fn the_settings_are_found_through_slurm_conf_and_plugstack_as_the_plugin_gets_them() {
    let site = SlurmSite::new("through-slurm");
    good_job(&site.dir.join("spool/t/5"), 5);
    let out = site.report(&["5"]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        common::stdout(&out).contains("good-job"),
        "{}",
        common::stdout(&out)
    );
    assert!(err.is_empty(), "{err}");
    // The listing reads the same spool.
    let out = site.report(&["--all", "--format", "json"]);
    assert_eq!(common::json(&out)["jobs"].as_array().unwrap().len(), 1);
}

/// `--check-node` on a node whose plugstack names a plugin that is not there: the check says
/// so, line by line, and exits 1; the report's own settings (`GPU_TRACKER_CONFIG`,
/// `GPU_TRACKER_SPOOL`) neither stop it nor change what it reads.
#[test]
fn the_node_check_fails_where_the_plugin_is_missing() {
    let dir = TempDir::new("check-node");
    let so = dir.join("lib/gpu_tracker.so");
    std::fs::write(
        dir.join("slurm.conf"),
        format!(
            "ClusterName=c\nPlugStackConfig={}\n",
            dir.join("plugstack.conf").display()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gpu-tracker-report"))
            .args(args)
            .env("SLURM_CONF", dir.join("slurm.conf"))
            .env("GPU_TRACKER_CONFIG", dir.join("no-such.toml"))
            .env("GPU_TRACKER_SPOOL", dir.join("spool"))
            .output()
            .unwrap()
    };
    // No plugstack.conf: Slurm reads it as empty, and no line loads the plugin.
    let out = run(&["--check-node"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.starts_with("ok    slurm.conf: "), "{text}");
    assert!(
        text.contains("FAIL  plugstack: no line loads the gpu-tracker plugin"),
        "{text}"
    );
    std::fs::write(
        dir.join("plugstack.conf"),
        format!("optional {} config=/x.toml\n", so.display()),
    )
    .unwrap();
    let out = run(&["--check", "-f", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tracks"], false);
    let checks = v["checks"].as_array().unwrap();
    assert_eq!(checks[1]["name"], "plugstack");
    assert_eq!(checks[1]["status"], "ok");
    assert_eq!(checks[2]["name"], "plugin file");
    assert_eq!(checks[2]["status"], "fail");
    let said = checks[2]["said"].as_str().unwrap();
    assert!(said.contains("gpu_tracker.so: No such file"), "{said}");
    assert!(
        checks[2]["fix"]
            .as_str()
            .unwrap()
            .contains("install the plugin")
    );
}

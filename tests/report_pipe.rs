//! Whole-program tests of `gpu-tracker-report` writing to a reader that goes away
//! (`gpu-tracker-report --all | head -1`): every mode takes the closed pipe as the end of its
//! output and exits 0, without a panic or a message; the output cut after one line is larger
//! than a pipe holds, so the program is still writing when its reader leaves.

mod common;

use common::ReportSite as Site;
use gpu_tracker::history::{AlertRules, GpuObservation, Observation, Recorder};
use gpu_tracker::step::record::*;
use std::io::BufRead;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const GIB: u64 = 1 << 30;
/// Jobs in the listing: some 100 bytes a line, well over a pipe's 64 KiB.
const LISTED: u32 = 1000;
/// The job with the long timeline: eight nodes of four GPUs, 240 buckets each.
const LONG: u32 = 9000;
/// An array of three tasks (jobs 5001 to 5003); its own id is the last task's, as Slurm gives
/// it.
const ARRAY: u32 = 5001;
/// A job whose records are not in the spool, only its summary in (fake) Slurm's database.
const STORED: u32 = 7777;

/// The batch record of job `job` on `node`, of array task `task` of [`ARRAY`] when given; with
/// a timeline of `secs` seconds of four GPUs when `secs` is not 0.
fn record(job: u32, node: &str, task: Option<u32>, secs: u32) -> StepRecord {
    let start = 1_795_000_000.0;
    let mut h = Recorder::new(start, 1.0, AlertRules::default());
    h.set_gpus(
        (0..4).map(|g| format!("GPU-{g}")).collect(),
        vec![0, 1, 2, 3],
    );
    for t in 0..=secs {
        let x = f64::from(t);
        h.observe(&Observation {
            unix: start + x,
            memory_bytes: GIB + u64::from(t % 97) * (1 << 20),
            cpu_seconds: Some(x * 1.5),
            gpus: (0..4)
                .map(|g| GpuObservation {
                    memory_bytes: Some(GIB * (g + 1)),
                    utilization_percent: Some((x * 7.0 + g as f64 * 13.0) % 100.0),
                    ..GpuObservation::default()
                })
                .collect(),
            ..Observation::default()
        });
    }
    if secs > 0 {
        h.mark(start + f64::from(secs) / 2.0, "second-half");
    }
    let story = h.finish(start + f64::from(secs));
    StepRecord {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        complete: true,
        written_at: "2026-11-23T10:00:00+00:00".into(),
        tracker_version: "0.1.0".into(),
        job: JobInfo {
            id: job,
            array_job_id: task.map(|_| ARRAY),
            array_task_id: task,
            name: Some(format!("job-with-a-name-of-some-length-{job}")),
            user: "alice".into(),
            uid: 1001,
            ..Default::default()
        },
        step: StepInfo {
            id: "batch".into(),
            kind: "batch".into(),
            node: node.into(),
            start: "2026-11-23T09:00:00+00:00".into(),
            end: Some("2026-11-23T10:00:00+00:00".into()),
            elapsed_seconds: f64::from(secs.max(60)),
            ..Default::default()
        },
        tasks: vec![TaskRecord {
            pid: 77,
            ended: true,
            exit_code: Some(0),
            ..Default::default()
        }],
        memory: StepMemory {
            peak_bytes: 3 * GIB,
            ..Default::default()
        },
        cpu: StepCpu {
            seconds: 90.0,
            alloc_cpus: 2,
            ..Default::default()
        },
        gpus: vec![],
        sampler: SamplerStats::default(),
        timeline: (secs > 0).then_some(story.timeline),
        events: story.events,
        events_dropped: 0,
        pressure: None,
    }
}

/// Writes `rec` into its job's directory (with the instance file) as `NODE.batch.json`.
fn add(site: &Site, rec: &StepRecord) {
    let job = rec.job.id;
    let dir = site.dir.join(&format!("spool/t/{job}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("instance.json"),
        format!("{{\"cluster\": \"t\", \"job_id\": {job}, \"uid\": 1001, \"token\": \"\"}}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("{}.batch.json", rec.step.node)),
        rec.to_json(),
    )
    .unwrap();
}

/// The spool: [`LISTED`] small jobs, the [`LONG`] job, the [`ARRAY`]; fake Slurm commands in
/// `bin/` (`sacct` answers for [`STORED`], the rest know nothing).
fn site() -> Site {
    let site = Site::new("pipe");
    for job in 1..=LISTED {
        add(&site, &record(job, "n1", None, 0));
    }
    for n in 0..8 {
        add(&site, &record(LONG, &format!("node-{n}"), None, 3600));
    }
    for (job, task) in [(5002, 0), (5003, 1), (ARRAY, 2)] {
        add(&site, &record(job, "n1", Some(task), 0));
    }
    let bin = site.dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let summary = gpu_tracker::report::Summary::from_records(&[record(STORED, "n1", None, 0)]);
    let row = format!(
        "{STORED}|{STORED}|1001|alice|{}\n",
        gpu_tracker::report::stored::Stored::of(&summary).encode()
    );
    std::fs::write(site.dir.join("sacct-rows"), row).unwrap();
    let sacct = format!(
        "case \"$*\" in *AdminComment*) cat '{}';; *JobName*) echo stored-job;; esac\nexit 0",
        site.dir.join("sacct-rows").display()
    );
    for (name, body) in [
        ("sacct", sacct.as_str()),
        ("scontrol", "exit 1"),
        ("squeue", "exit 0"),
        ("sacctmgr", "exit 0"),
    ] {
        use std::os::unix::fs::PermissionsExt;
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    site
}

/// The report with `args` on the test's spool, its Slurm commands the fake ones, its user's
/// files under the site's directory.
fn command(site: &Site, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpu-tracker-report"));
    // The modes that take nothing else.
    if !matches!(args.first(), Some(&"--store-admin-comment" | &"--advice")) {
        c.args(["--cluster", "t"]);
    }
    c.args(args)
        .env("GPU_TRACKER_CONFIG", site.dir.join("gpu-tracker.toml"))
        .env_remove("GPU_TRACKER_SPOOL");
    let path = format!(
        "{}:{}",
        site.dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    c.env("PATH", path)
        .env("HOME", site.dir.path())
        .env("XDG_CONFIG_HOME", site.dir.join("config"))
        .env("XDG_CACHE_HOME", site.dir.join("cache"))
        .env("SLURM_CONF", site.dir.join("no-slurm.conf"))
        .stdin(Stdio::null());
    c
}

/// Waits for `child` at most 60 s (a program that hangs on its closed output fails the test);
/// its status and its stderr.
fn finish(mut child: std::process::Child, what: &str) -> (ExitStatus, String) {
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running 60 s after its reader went away");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, reader.join().unwrap())
}

/// Runs `args` with stdout a pipe whose reader reads one line, then goes away.
fn cut_after_one_line(site: &Site, args: &[&str]) -> (ExitStatus, String) {
    let mut child = command(site, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    assert!(!first.is_empty(), "{args:?}: no output at all");
    drop(lines);
    finish(child, &format!("{args:?}"))
}

/// Runs `args` with stdout a pipe whose reader was gone before the program started: its
/// first write fails, whatever its size. Run first with a reader, it must print something.
fn closed_from_the_start(site: &Site, args: &[&str]) -> (ExitStatus, String) {
    let read = command(site, args).output().unwrap();
    assert!(
        !read.stdout.is_empty() && !String::from_utf8_lossy(&read.stderr).contains("panicked"),
        "{args:?}: {read:?}"
    );
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: both descriptors were just made by pipe() and are owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    let child = command(site, args)
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    finish(child, &format!("{args:?}"))
}

/// Status 0, and neither a panic nor a message about the pipe.
fn ended_quietly(args: &[&str], (status, stderr): (ExitStatus, String)) {
    assert_eq!(
        status.code(),
        Some(0),
        "{args:?}: {status}; stderr: {stderr}"
    );
    for bad in ["panicked", "Broken pipe", "os error 32"] {
        assert!(!stderr.contains(bad), "{args:?}: stderr: {stderr}");
    }
}

#[test]
fn a_listing_or_a_long_timeline_cut_after_one_line_ends_with_status_0() {
    let site = site();
    let long = LONG.to_string();
    for args in [
        &["--all"][..],
        &["--all", "--format", "json"],
        &["--timeline", "csv", &long],
        &["--timeline", "json", &long],
        &["--format", "json", &long],
    ] {
        ended_quietly(args, cut_after_one_line(&site, args));
    }
}

#[test]
fn every_mode_ends_with_status_0_when_its_reader_is_gone_before_it_writes() {
    let site = site();
    let plot = site.dir.join("long.svg");
    let (long, array, stored) = (LONG.to_string(), ARRAY.to_string(), STORED.to_string());
    for args in [
        &["--all"][..],
        &["--user", "alice"],
        &[&long],
        &["--tasks", "--ru", "gigabytes", &long],
        &["--format", "json", &long],
        &["--timeline", "csv", &long],
        &["--events", "csv", &long],
        &["--events", "json", &long],
        &["--plot", plot.to_str().unwrap(), &long],
        &[&array],
        &["--format", "json", &array],
        &["5001_0"],
        &[&stored],
        &["--format", "json", &stored],
        &["--by", "user"],
        &["--by", "account", "--format", "csv"],
        &["--purge", "--older-than", "36525"],
        &["--advise", "train"],
        &["--advise", "train", "--format", "json"],
    ] {
        ended_quietly(args, closed_from_the_start(&site, args));
    }
    // Job 12 is not in the spool of cluster `default` (no slurm.conf): a line saying nothing
    // was stored, status 4 when it is read.
    let args = ["--store-admin-comment", "12"];
    ended_quietly(&args, closed_from_the_start(&site, &args));
    let args = ["--advice", "on"];
    ended_quietly(&args, closed_from_the_start(&site, &args));
}

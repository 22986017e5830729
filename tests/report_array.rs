//! Whole-program tests of `gpu-tracker-report ARRAYID`: an array's tasks in the spool are
//! summarised together (counts, spreads, outliers, the next submission's requests), as text
//! and JSON; `ARRAYID_TASK` still shows one task; a user who is not the owner is refused.

mod common;

use gpu_tracker::step::record::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Output;

const GIB: u64 = 1 << 30;

use common::ReportSite as Site;

impl Site {
    fn cluster(&self) -> PathBuf {
        self.dir.join("spool/t")
    }

    /// Runs the report on cluster `t` with `args`, as user `uid` when given.
    fn report(&self, args: &[&str], uid: Option<u32>) -> Output {
        let mut c = self.command(args);
        if let Some(u) = uid {
            c.uid(u).gid(u);
        }
        c.output().unwrap()
    }
}

/// One task of an array: its job id, task id, seconds, peak memory, CPU seconds (of 2 CPUs),
/// GPU memory, exit code and OOM kills.
struct Task {
    job: u32,
    task: Option<u32>,
    elapsed: f64,
    peak: u64,
    cpu: f64,
    gpu_mem: u64,
    exit: i32,
    oom: u64,
}

/// The batch record of `t` (user alice, uid 1001) in array 100, as the plugin writes it,
/// with its job directory and instance file.
fn write_task(root: &Path, t: &Task) {
    let rec = StepRecord {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        complete: true,
        written_at: "2026-11-23T10:00:00+00:00".into(),
        tracker_version: "0.1.0".into(),
        job: JobInfo {
            id: t.job,
            array_job_id: t.task.map(|_| 100),
            array_task_id: t.task,
            name: Some("sweep".into()),
            user: "alice".into(),
            uid: 1001,
            ..Default::default()
        },
        step: StepInfo {
            id: "batch".into(),
            kind: "batch".into(),
            node: "n1".into(),
            start: "2026-11-23T09:00:00+00:00".into(),
            end: Some("2026-11-23T10:00:00+00:00".into()),
            elapsed_seconds: t.elapsed,
            ..Default::default()
        },
        tasks: vec![TaskRecord {
            pid: 77,
            ended: true,
            exit_code: Some(t.exit),
            ..Default::default()
        }],
        memory: StepMemory {
            peak_bytes: t.peak,
            oom_kills: Some(t.oom),
            ..Default::default()
        },
        cpu: StepCpu {
            seconds: t.cpu,
            alloc_cpus: 2,
            ..Default::default()
        },
        gpus: vec![StepGpu {
            slurm_index: Some(0),
            uuid: format!("GPU-{}", t.job),
            name: "Test GPU".into(),
            memory_total_bytes: 16 * GIB,
            peak_device_memory_bytes: t.gpu_mem,
            peak_step_memory_bytes: t.gpu_mem,
            mean_utilization_percent: Some(60.0),
            ..Default::default()
        }],
        sampler: SamplerStats::default(),
        timeline: None,
        events: Vec::new(),
        events_dropped: 0,
        pressure: None,
    };
    let dir = root.join(t.job.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("instance.json"),
        format!(
            "{{\"cluster\": \"t\", \"job_id\": {}, \"uid\": 1001, \"token\": \"\"}}\n",
            t.job
        ),
    )
    .unwrap();
    std::fs::write(dir.join("n1.batch.json"), rec.to_json()).unwrap();
}

/// Array 100 of five tasks of different sizes (task 4 has the array's own id, as Slurm gives
/// the last task), job 99 before it and job 106 of no array after it.
fn array_site() -> Site {
    let site = Site::new("array");
    let root = site.cluster();
    let t = |job, task, elapsed, peak_gib: f64, exit, oom| Task {
        job,
        task,
        elapsed,
        peak: (peak_gib * GIB as f64) as u64,
        cpu: elapsed,
        gpu_mem: 2 * GIB,
        exit,
        oom,
    };
    for task in [
        t(99, None, 5000.0, 40.0, 0, 0),
        t(101, Some(0), 600.0, 2.0, 0, 0),
        t(102, Some(1), 660.0, 2.5, 0, 0),
        t(103, Some(2), 540.0, 2.2, 1, 0),
        t(104, Some(3), 620.0, 7.5, 137, 1),
        t(100, Some(4), 1800.0, 2.1, 0, 0),
        t(106, None, 9000.0, 50.0, 0, 0),
    ] {
        write_task(&root, &task);
    }
    site
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn an_array_id_summarises_every_task_as_text_and_json() {
    let site = array_site();
    let out = site.report(&["100"], None);
    let shown = text(&out);
    println!("{shown}");
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    for want in [
        "gpu-tracker summary of array 100 (5 task(s))",
        "Job name:      sweep",
        "Tasks:         5 found: 3 completed, 2 failed, 1 OOM-killed",
        "  Elapsed            00:09:00     00:10:20     00:30:00",
        "  Peak memory        2.00 GiB     2.20 GiB     7.50 GiB",
        "Outliers:      task 3 (job 104): peak memory 7.50 GiB, 3.4x the median 2.20 GiB",
        "task 4 (job 100): elapsed 00:30:00, 2.9x the median 00:10:20",
        // Task 3 was killed for memory at 7.5 GiB: what it needed is not known, the --mem a
        // guess of twice that (15 GiB); 30 min × 1.5 = 45 min; one GPU each.
        "Next time:     --mem=15G --time=00:45:00 --gres=gpu:1 (a guess for memory: 1 of 5 task(s) killed at their 7.50 GiB limit, how much more they needed is not known; twice the limit hit, or the other tasks' largest peak 2.50 GiB + 20% where more; longest task 00:30:00 + 50%, whole minutes, at least 10 minutes; most GPUs a task used)",
    ] {
        assert!(shown.contains(want), "missing {want:?} in\n{shown}");
    }
    assert!(
        !shown.contains("job 99") && !shown.contains("job 106"),
        "{shown}"
    );

    let with_tasks = text(&site.report(&["100", "--tasks"], None));
    assert!(
        with_tasks
            .contains("       3        104     00:10:20     7.50 GiB     50%     1  OOM-killed"),
        "{with_tasks}"
    );

    let out = site.report(&["100", "--format", "json"], None);
    assert_eq!(out.status.code(), Some(0));
    let doc = common::json(&out);
    assert_eq!(doc["schema"], "gpu-tracker/array");
    let a = &doc["array"];
    assert_eq!(a["array_job_id"], 100);
    assert_eq!(a["tasks_found"], 5);
    assert_eq!(a["failed"], 2);
    assert_eq!(a["oom_killed"], 1);
    assert_eq!(a["elapsed_seconds"]["median"], 620.0);
    assert_eq!(a["gpu_memory_bytes"]["max"], (2 * GIB) as f64);
    assert_eq!(a["right_size"]["mem"], "15G");
    assert_eq!(a["right_size"]["mem_guess"], true);
    assert_eq!(a["right_size"]["time_guess"], false);
    assert_eq!(a["right_size"]["time"], "00:45:00");
    assert_eq!(a["right_size"]["gres"], "gpu:1");
    let ids: Vec<u64> = a["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 4]);
    assert_eq!(a["outliers"].as_array().unwrap().len(), 2);
}

#[test]
fn an_array_task_and_a_plain_job_still_show_one_job() {
    let site = array_site();
    for (arg, head) in [
        ("100_4", "gpu-tracker summary of job 100 (array 100_4)"),
        ("100_3", "gpu-tracker summary of job 104 (array 100_3)"),
        ("101", "gpu-tracker summary of job 101 (array 100_0)"),
        ("99", "gpu-tracker summary of job 99\n"),
        (
            "100.batch",
            "gpu-tracker summary of job 100 (array 100_4), step batch",
        ),
    ] {
        let out = site.report(&[arg], None);
        let shown = text(&out);
        assert!(shown.contains(head), "{arg}: {shown}");
        assert!(!shown.contains("summary of array"), "{arg}: {shown}");
    }
    let out = site.report(&["100_3", "--format", "json"], None);
    assert_eq!(common::json(&out)["schema"], "gpu-tracker/job");
}

#[test]
fn only_the_owner_and_root_see_an_array() {
    if gpu_tracker::sys::euid() != 0 {
        eprintln!("note: not root: the other user's view cannot be made; skipped");
        return;
    }
    let site = array_site();
    // As the plugin leaves them: each job directory its owner's alone.
    for job in [99, 100, 101, 102, 103, 104, 106] {
        let dir = site.cluster().join(job.to_string());
        for f in ["", "instance.json", "n1.batch.json"] {
            std::os::unix::fs::chown(dir.join(f), Some(1001), Some(1001)).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let out = site.report(&["100"], Some(1001));
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(text(&out).contains("5 found"), "{}", text(&out));
    let out = site.report(&["100"], Some(65534));
    assert_eq!(out.status.code(), Some(8), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("not readable by you"),
        "{}",
        common::stderr(&out)
    );
    assert!(!text(&out).contains("sweep"));
    let out = site.report(&["100", "--format", "json"], Some(65534));
    assert_eq!(out.status.code(), Some(8));
    assert!(out.stdout.is_empty());
    assert!(text(&site.report(&["100"], None)).contains("5 found"));
}

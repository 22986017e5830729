//! What a flood on a step's phase-mark socket costs the step's sampler thread:
//! `cargo bench --bench mark_flood`.
//!
//! Starts the plugin's step tracker (without Slurm or GPUs) on one sleeping task, floods its
//! mark socket with datagrams that are no mark, as fast as the socket takes them (the job's own
//! user may do this; no other user can reach the socket), sends three marks through the flood,
//! and prints the CPU the sampler thread used (the record's `cpu_seconds`) and the datagrams
//! sent. The goal: under 0.15 s in a 3 s flood (the inbox takes at most one batch of 64
//! datagrams per 100 ms: some milliseconds in 3 s). Options: `--seconds 3`, `--runs 3`.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gpu_tracker::gres::GpuOrder;
use gpu_tracker::step::record::{JobInfo, StepInfo};
use gpu_tracker::step::spool::Spool;
use gpu_tracker::step::{StepSetup, StepTracker};

/// The goal, CPU seconds of the sampler thread per second of flood.
const GOAL_PER_SECOND: f64 = 0.05;

struct Args {
    seconds: f64,
    runs: usize,
}

fn args() -> Args {
    let mut a = Args {
        seconds: 3.0,
        runs: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--seconds" => a.seconds = v().parse().expect("seconds"),
            "--runs" => a.runs = v().parse::<usize>().expect("a count").max(1),
            // What `cargo bench` passes on.
            "--bench" => {}
            "--help" | "-h" => {
                println!("mark_flood [--seconds 3] [--runs 3]");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// A batch step of job 77 on node n1 without GPUs, its mark socket in `dir`.
fn setup(dir: &Path) -> StepSetup {
    StepSetup {
        job: JobInfo {
            id: 77,
            uid: gpu_tracker::sys::euid(),
            user: "bench".into(),
            ..JobInfo::default()
        },
        step: StepInfo {
            id: "batch".into(),
            kind: "batch".into(),
            node: "n1".into(),
            local_tasks: Some(1),
            ..StepInfo::default()
        },
        interval: Duration::from_secs(5),
        checkpoint_interval: None,
        spool: Spool::open(&dir.join("spool")).expect("a spool in the temporary directory"),
        nvml_library: None,
        amd_root: dir.join("no-amd"),
        cgroup_root: dir.join("no-cgroups"),
        proc_root: PathBuf::from("/proc"),
        gpu_order: GpuOrder::Unknown("a bench".into()),
        gres_conf: None,
        alerts: gpu_tracker::history::AlertRules::default(),
        mark_socket: Some(dir.join("77.n1.batch.sock")),
        warn_user: false,
        live: None,
        record_run: gpu_tracker::step::run::RecordRun::Known(0),
        memory_detail: gpu_tracker::sampler::MemoryDetail::Status,
    }
}

/// One flood of `seconds`: the sampler thread's CPU seconds, the datagrams sent, the marks
/// that arrived.
fn flood(dir: &Path, seconds: f64) -> (f64, u64, usize) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("a temporary directory");
    let t = StepTracker::start(setup(dir)).expect("the step tracker starts");
    let mut task = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("sleep");
    t.task_started(Some(0), Some(0), task.id());
    let stop = AtomicBool::new(false);
    let sent = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let sock = UnixDatagram::unbound().expect("a socket");
            let _ = sock.set_write_timeout(Some(Duration::from_millis(50)));
            let path = dir.join("77.n1.batch.sock");
            while !stop.load(Ordering::Relaxed) {
                if sock.send_to(b"garbage", &path).is_ok() {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let t0 = Instant::now();
        for name in ["load", "train", "save"] {
            std::thread::sleep(Duration::from_secs_f64(seconds / 6.0));
            let _ = gpu_tracker::history::mark::send_to(&dir.join("77.n1."), name);
        }
        std::thread::sleep(Duration::from_secs_f64(seconds).saturating_sub(t0.elapsed()));
        stop.store(true, Ordering::Relaxed);
    });
    let _ = task.kill();
    let _ = task.wait();
    t.task_ended(task.id(), Some(9));
    let (rec, _) = t.finish();
    let marks = rec.events.iter().filter(|e| e.kind == "mark").count();
    (rec.sampler.cpu_seconds, sent.load(Ordering::Relaxed), marks)
}

fn main() {
    let a = args();
    let dir = std::env::temp_dir().join(format!("gt-mark-flood-{}", std::process::id()));
    let mut cpu = Vec::new();
    println!(
        "a {} s flood of datagrams that are no mark on a step's mark socket, {} runs:",
        a.seconds, a.runs
    );
    for _ in 0..a.runs {
        let (c, sent, marks) = flood(&dir, a.seconds);
        println!(
            "  {sent:>9} datagrams: the sampler thread used {:7.3} ms of CPU; {marks} of 3 marks \
             arrived",
            c * 1e3
        );
        cpu.push(c);
    }
    let _ = std::fs::remove_dir_all(&dir);
    cpu.sort_by(f64::total_cmp);
    let median = cpu[cpu.len() / 2];
    let goal = GOAL_PER_SECOND * a.seconds;
    println!(
        "  median: {:.3} ms of CPU (goal: under {:.0} ms){}",
        median * 1e3,
        goal * 1e3,
        if median < goal { "" } else { ": OVER THE GOAL" }
    );
}

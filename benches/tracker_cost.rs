//! What the library's [`Tracker`] costs the process it tracks from inside (the Python API's
//! `with Tracker():`): `cargo bench --bench tracker_cost`.
//!
//! The calling thread sleeps while the tracker samples, so the process's CPU time
//! (`CLOCK_PROCESS_CPUTIME_ID`) over the block is the tracker's: its start, its samples, its last
//! sample and its figures. Each run is a fresh tracker around `thread::sleep` of the block's
//! length, at the sleep time given; the bench prints the median CPU of an empty block (the fixed
//! cost), of the long block, and their difference per sample. By default no GPU is looked for
//! (`no_gpu`): NVML's and the driver's own cost are not the library's. Options: `--block 5`, `--sleep-time 0.1`,
//! `--runs 9`, `--gpus` (look for GPUs as the Python API does: on a machine without, the
//! cost of finding none), `--rss-mb 0` (a heap of that many MB, touched, held by the process while it is
//! tracked: the main process's page tables are what `smaps_rollup` walks), `--churn-mb 0` (the
//! calling thread allocates, touches and frees that many MB every 200 ms through the block, so
//! the process's memory keeps moving past the split's tolerance; its own CPU is left out).

use std::time::{Duration, Instant};

use gpu_tracker::sampler::EndInfo;
use gpu_tracker::{Tracker, TrackerOptions};

struct Args {
    block: f64,
    sleep_time: f64,
    runs: usize,
    rss_mb: usize,
    churn_mb: usize,
    gpus: bool,
}

fn args() -> Args {
    let mut a = Args {
        block: 5.0,
        sleep_time: 0.1,
        runs: 9,
        rss_mb: 0,
        churn_mb: 0,
        gpus: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--block" => a.block = v().parse().expect("seconds"),
            "--sleep-time" => a.sleep_time = v().parse().expect("seconds"),
            "--runs" => a.runs = v().parse().expect("a count"),
            "--rss-mb" => a.rss_mb = v().parse().expect("megabytes"),
            "--churn-mb" => a.churn_mb = v().parse().expect("megabytes"),
            "--gpus" => a.gpus = true,
            "--bench" => {}
            "--help" | "-h" => {
                println!(
                    "tracker_cost [--block 5] [--sleep-time 0.1] [--runs 9] [--gpus] [--rss-mb 0] \
                     [--churn-mb 0]"
                );
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// CPU seconds of `clock`.
fn cpu(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// The process's CPU seconds (every thread).
fn process_cpu() -> f64 {
    cpu(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The block: a sleep, or `churn_mb` allocated, touched and freed every 200 ms.
fn block_of(block: f64, churn_mb: usize) {
    let end = Instant::now() + Duration::from_secs_f64(block);
    if churn_mb == 0 {
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        return;
    }
    while Instant::now() < end {
        let v: Vec<u8> = vec![1; churn_mb * 1_000_000];
        std::hint::black_box(&v);
        let pause =
            || Duration::from_millis(100).min(end.saturating_duration_since(Instant::now()));
        std::thread::sleep(pause());
        drop(v);
        std::thread::sleep(pause());
    }
}

/// One tracked block: CPU seconds, wall seconds added, samples taken.
fn tracked(block: f64, sleep_time: f64, gpus: bool, churn_mb: usize) -> (f64, f64, u32) {
    let mut opts = TrackerOptions::default()
        .sleep_time(sleep_time)
        .disable_logs();
    if !gpus {
        opts = opts.no_gpu();
    }
    let (c0, w0) = (process_cpu(), Instant::now());
    let t = Tracker::start(opts).expect("the tracker starts");
    // The churn's own CPU is the calling thread's during the block: left out.
    let b0 = cpu(libc::CLOCK_THREAD_CPUTIME_ID);
    block_of(block, churn_mb);
    let churn = cpu(libc::CLOCK_THREAD_CPUTIME_ID) - b0;
    let (usage, story) = t
        .stop_with_story(EndInfo::default())
        .expect("the tracker stops");
    let cpu = process_cpu() - c0 - churn;
    let wall = w0.elapsed().as_secs_f64() - block;
    std::hint::black_box(usage);
    let samples = story.timeline.buckets.iter().map(|b| b.samples).sum();
    (cpu, wall, samples)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let a = args();
    let heap: Vec<u8> = vec![1; a.rss_mb * 1_000_000];
    std::hint::black_box(&heap);
    // One run first: the library's lazy statics and the page cache are not what is measured.
    tracked(0.0, a.sleep_time, a.gpus, 0);
    let mut empty = Vec::new();
    let mut long = Vec::new();
    let mut empty_wall = Vec::new();
    let mut taken = Vec::new();
    for _ in 0..a.runs {
        let (c, w, _) = tracked(0.0, a.sleep_time, a.gpus, 0);
        empty.push(c);
        empty_wall.push(w);
        let (c, _, n) = tracked(a.block, a.sleep_time, a.gpus, a.churn_mb);
        long.push(c);
        taken.push(f64::from(n));
    }
    let due = (a.block / a.sleep_time).round().max(1.0);
    // Samples in the block beyond the empty block's first and last.
    let samples = (median(taken) - 2.0).max(1.0);
    let (e, l) = (median(empty.clone()), median(long.clone()));
    println!(
        "tracker in process, sleep_time {} s, heap {} MB, churn {} MB, GPUs {}, medians of {} \
         runs:",
        a.sleep_time,
        a.rss_mb,
        a.churn_mb,
        if a.gpus { "looked for" } else { "off" },
        a.runs
    );
    println!(
        "  empty block:        {:8.3} ms CPU, {:8.3} ms wall added",
        e * 1e3,
        median(empty_wall) * 1e3
    );
    println!("  {:4} s block:       {:8.3} ms CPU", a.block, l * 1e3);
    println!(
        "  per sample:         {:8.1} µs CPU ({} samples taken, {} due; a sampler whose samples \
         cost more than a tenth of the interval lengthens it)",
        (l - e) / samples * 1e6,
        samples,
        due
    );
    println!(
        "  share of a core:    {:8.2} % over the block",
        (l - e) / a.block * 100.0
    );
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{:.2}", x * 1e3))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "  runs, ms CPU: empty [{}]; block [{}]",
        fmt(&empty),
        fmt(&long)
    );
}

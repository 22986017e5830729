//! The cost of one sample at 1, 100, 1000 and 5000 processes: `cargo bench --bench sample_cost`.
//!
//! For each count N, a shell starts N sleeping children; then the command-line tool's sampler
//! (`gpu-tracker -e`, private/shared split from `smaps_rollup`) and the plugin's per-process
//! reader (`step::procs`, the bound of a step's sample) each take samples of that tree at the
//! interval given, and the bench prints the median wall and CPU time of one sample, per process,
//! and what was read. The plugin's reader reads in turns within a time budget
//! (`step::procs`): it is warmed up until it has read every process twice, as in a step that
//! has run for a while. The tree is walked through `children` files (no cgroup), the costlier
//! listing. Last, the step's three pressure stall files (see `pressure_row`). Options:
//! `--procs 1,100,1000,5000`, `--samples 30`, `--interval 0.1`, `--out FILE.json`.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use gpu_tracker::proc::ProcFs;
use gpu_tracker::sampler::{Sampler, SamplerOptions, Target};
use gpu_tracker::step::procs::ProcReader;
use gpu_tracker::sys;

struct Args {
    procs: Vec<usize>,
    samples: usize,
    interval: f64,
    out: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        procs: vec![1, 100, 1000, 5000],
        samples: 30,
        interval: 0.1,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--procs" => {
                a.procs = v()
                    .split(',')
                    .map(|n| n.parse().expect("a count"))
                    .collect()
            }
            "--samples" => a.samples = v().parse().expect("a count"),
            "--interval" => a.interval = v().parse().expect("seconds"),
            "--out" => a.out = Some(v()),
            // What `cargo bench` passes on.
            "--bench" => {}
            "--help" | "-h" => {
                println!(
                    "sample_cost [--procs 1,100,1000,5000] [--samples 30] [--interval 0.1] \
                     [--out FILE.json]"
                );
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// A shell with `n - 1` sleeping children (n processes in all), in a group of its own.
fn tree_of(n: usize) -> Child {
    let child = Command::new("sh")
        .args([
            "-c",
            &if n <= 1 {
                "exec sleep 600".to_string()
            } else {
                format!("i=1; while [ $i -lt {n} ]; do sleep 600 & i=$((i+1)); done; wait")
            },
        ])
        .process_group(0)
        .spawn()
        .expect("sh");
    let kids = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .map(|s| s.split_whitespace().count())
            .unwrap_or(0)
    };
    let t = Instant::now();
    while kids(child.id()) + 1 < n && t.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn end(mut c: Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", c.id())])
        .status();
    let _ = c.wait();
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Times `samples` calls of `one`, `interval` apart: medians of wall and CPU time (µs).
fn time(samples: usize, interval: Duration, mut one: impl FnMut()) -> (f64, f64) {
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        let (t, c) = (Instant::now(), sys::thread_cpu_seconds());
        one();
        wall.push(t.elapsed().as_secs_f64() * 1e6);
        cpu.push((sys::thread_cpu_seconds() - c) * 1e6);
        std::thread::sleep(interval);
    }
    (median(wall), median(cpu))
}

fn main() {
    let a = args();
    // As `gpu-tracker -e` does: the descriptors it may keep open follow its limit.
    sys::raise_nofile_limit();
    let interval = Duration::from_secs_f64(a.interval);
    let mut rows = Vec::new();
    println!(
        "{:>6}  {:>8}  {:>12} {:>12} {:>10}  {:>12} {:>10}  reads per process and sample",
        "procs", "sampler", "wall µs", "CPU µs", "CPU µs/p", "first µs", ""
    );
    for &n in &a.procs {
        let tree = tree_of(n);
        let root = tree.id();
        let target = Target {
            main: root,
            tree_roots: vec![root],
            exclude: vec![],
            cgroup: None,
            in_process: false,
        };
        for kind in ["cli", "plugin"] {
            let first_t = Instant::now();
            let (wall, cpu, listed, reads);
            if kind == "cli" {
                let opts = SamplerOptions {
                    interval,
                    ..SamplerOptions::default()
                };
                let mut s = Sampler::new(opts, target.clone());
                s.sample(None);
                let first = first_t.elapsed().as_secs_f64() * 1e6;
                let before = s.read_counts();
                (wall, cpu) = time(a.samples, interval, || {
                    s.sample(None);
                });
                let after = s.read_counts();
                listed = n;
                reads = reads_json(before, after, a.samples, first);
            } else {
                let procfs = ProcFs::default();
                let mut r = ProcReader::default();
                let tasks = [(root, None)];
                let budget = interval.mul_f64(gpu_tracker::step::procs::PROCESS_TIME_SHARE);
                let f = r.sample(&procfs, &tasks, budget);
                let first = first_t.elapsed().as_secs_f64() * 1e6;
                // It reads in turns: every process once before the timing, as in a step that
                // has run for a while.
                for _ in 0..1000 {
                    if r.counts().readings >= 2 * f.members.len() as u64 {
                        break;
                    }
                    r.sample(&procfs, &tasks, budget);
                }
                let before = r.counts();
                let mut read_per_sample = Vec::new();
                (wall, cpu) = time(a.samples, interval, || {
                    read_per_sample.push(r.sample(&procfs, &tasks, budget).read as f64);
                });
                let after = r.counts();
                listed = f.members.len();
                let mut j = reads_json(before, after, a.samples, first);
                j.push_str(&format!(
                    ", \"processes_read_per_sample\": {}",
                    median(read_per_sample)
                ));
                reads = j;
            }
            let per = cpu / listed.max(1) as f64;
            println!("{n:>6}  {kind:>8}  {wall:>12.0} {cpu:>12.0} {per:>10.2}  {reads}",);
            rows.push(format!(
                "{{\"procs\": {n}, \"sampler\": \"{kind}\", \"listed\": {listed}, \
                 \"median_us\": {wall:.1}, \"median_cpu_us\": {cpu:.1}, \
                 \"per_process_us\": {per:.3}, \"samples\": {}, {reads}}}",
                a.samples
            ));
        }
        end(tree);
    }
    rows.extend(pressure_row(a.samples, interval));
    let json = format!("[\n  {}\n]\n", rows.join(",\n  "));
    if let Some(p) = a.out {
        std::fs::write(&p, json).expect("writing the results");
        println!("written to {p}");
    }
}

/// The step's pressure stall reading: `cpu.pressure`, `memory.pressure` and `io.pressure`
/// read as the plugin reads them at every sample. The kernel writes a cgroup's files with the
/// same code as the machine's `/proc/pressure/*`, which this machine has even where its
/// cgroups are v1: a directory of links to those stands for the step's cgroup. `None` (and a
/// line saying so) without `/proc/pressure`.
fn pressure_row(samples: usize, interval: Duration) -> Option<String> {
    use gpu_tracker::cgroup::{Cgroup, Version};
    let dir = std::env::temp_dir().join(format!("gpu-tracker-psi-bench.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).ok()?;
    for r in ["cpu", "memory", "io"] {
        std::os::unix::fs::symlink(
            format!("/proc/pressure/{r}"),
            dir.join(format!("{r}.pressure")),
        )
        .ok()?;
    }
    let cg = Cgroup {
        version: Version::V2,
        memory_dir: dir.clone(),
        cpu_dir: None,
    };
    let ok = cg.pressure();
    let row = match ok {
        Ok(_) => {
            let (wall, cpu) = time(samples, interval, || {
                std::hint::black_box(cg.pressure().ok());
            });
            println!(
                "{:>6}  {:>8}  {wall:>12.1} {cpu:>12.1}  3 files",
                "-", "pressure"
            );
            Some(format!(
                "{{\"sampler\": \"pressure\", \"files\": 3, \"median_us\": {wall:.1}, \
                 \"median_cpu_us\": {cpu:.1}, \"samples\": {samples}}}"
            ))
        }
        Err(e) => {
            println!("pressure: not measured: {e}");
            None
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    row
}

fn reads_json(
    b: gpu_tracker::proc::watch::WatchCounts,
    a: gpu_tracker::proc::watch::WatchCounts,
    samples: usize,
    first_us: f64,
) -> String {
    let per = |x: u64, y: u64| (x - y) as f64 / samples as f64;
    format!(
        "\"first_sample_us\": {first_us:.0}, \"per_sample\": {{\"readings\": {:.1}, \"stat\": {:.1}, \
         \"status\": {:.1}, \"smaps_rollup\": {:.1}, \"opened\": {:.1}, \"kept_reads\": {:.1}}}",
        per(a.readings, b.readings),
        per(a.stat_reads, b.stat_reads),
        per(a.status_reads, b.status_reads),
        per(a.smaps_reads, b.smaps_reads),
        per(a.files.opened, b.files.opened),
        per(a.files.kept_reads, b.files.kept_reads),
    )
}

//! The cost of reading AMD GPUs once per sample: `cargo bench --bench amd_sample_cost`.
//!
//! A fixture tree of 8 simulated MI300X (`tests/simamd.py --once`) gets 100 KFD processes, each
//! with the files of every GPU (KFD makes them for every GPU a process may use), holding VRAM
//! and running waves on one of them; then the AMD source (`gpu::amd::AmdSource`) reads all 8
//! GPUs once per sample, a new KFD listing each time, as a step's sample does. The bench prints
//! the median wall and CPU time of one such sample next to the sampler's budget at the plugin's
//! default interval: the share of the interval a sample may cost before the interval is
//! lengthened (`sampler::pace::OVERRUN_SHARE`) and the share its process reads may take
//! (`step::procs::PROCESS_TIME_SHARE`). The 100 processes are the step's, as the sampler tells
//! the source. `--outside N` adds N KFD processes outside the step that hold nothing (a user
//! who starts thousands of processes that open `/dev/kfd`). Options: `--gpus 8`, `--procs 100`,
//! `--outside 0`, `--samples 200`, `--out FILE.json`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use gpu_tracker::gpu::GpuSource;
use gpu_tracker::gpu::amd::AmdSource;
use gpu_tracker::sys;

struct Args {
    gpus: usize,
    procs: usize,
    outside: usize,
    samples: usize,
    out: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        gpus: 8,
        procs: 100,
        outside: 0,
        samples: 200,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--gpus" => a.gpus = v().parse().expect("a count"),
            "--procs" => a.procs = v().parse().expect("a count"),
            "--outside" => a.outside = v().parse().expect("a count"),
            "--samples" => a.samples = v().parse().expect("a count"),
            "--out" => a.out = Some(v()),
            // What `cargo bench` passes on.
            "--bench" => {}
            "--help" | "-h" => {
                println!(
                    "amd_sample_cost [--gpus 8] [--procs 100] [--outside 0] [--samples 200] \
                     [--out FILE.json]"
                );
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The gpu_id of each GPU node of the tree, in node order.
fn gpu_ids(root: &Path) -> Vec<u32> {
    let nodes = root.join("sys/class/kfd/kfd/topology/nodes");
    let mut ids: Vec<(u32, u32)> = std::fs::read_dir(&nodes)
        .expect("the simulated topology")
        .filter_map(|e| {
            let e = e.ok()?;
            let n: u32 = e.file_name().to_str()?.parse().ok()?;
            let id: u32 = std::fs::read_to_string(e.path().join("gpu_id"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            (id != 0).then_some((n, id))
        })
        .collect();
    ids.sort();
    ids.into_iter().map(|(_, id)| id).collect()
}

/// `procs` KFD processes from pid `first`, each with every GPU's files, using GPU `k % gpus`
/// (`uses`) or none.
fn add_processes(root: &Path, ids: &[u32], first: usize, procs: usize, uses: bool) {
    for k in 0..procs {
        let dir = root.join(format!("sys/class/kfd/kfd/proc/{}", first + k));
        for (g, id) in ids.iter().enumerate() {
            let uses = uses && k % ids.len() == g;
            std::fs::create_dir_all(dir.join(format!("stats_{id}"))).unwrap();
            let vram: u64 = if uses { 8 << 30 } else { 0 };
            std::fs::write(dir.join(format!("vram_{id}")), format!("{vram}\n")).unwrap();
            std::fs::write(dir.join(format!("sdma_{id}")), "0\n").unwrap();
            let cu = if uses { 120 } else { 0 };
            std::fs::write(
                dir.join(format!("stats_{id}/cu_occupancy")),
                format!("{cu}\n"),
            )
            .unwrap();
        }
    }
}

fn main() {
    let a = args();
    let root: PathBuf =
        std::env::temp_dir().join(format!("gpu-tracker-amd-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let minors: Vec<String> = (0..a.gpus).map(|i| (128 + i).to_string()).collect();
    let sim = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/simamd.py");
    let st = Command::new("python3")
        .arg(&sim)
        .args(["--root", root.to_str().unwrap(), "--once"])
        .args(["--render-minors", &minors.join(",")])
        .status()
        .expect("python3 runs tests/simamd.py");
    assert!(st.success(), "simamd.py failed");
    let ids = gpu_ids(&root);
    assert_eq!(ids.len(), a.gpus);
    add_processes(&root, &ids, 200_000, a.procs, true);
    add_processes(&root, &ids, 1_000, a.outside, false);

    let mut s = AmdSource::open(&root).expect("the fixture opens");
    let step: std::collections::HashSet<u32> = (0..a.procs).map(|k| 200_000 + k as u32).collect();
    s.track_processes(0, &step);
    let n = s.devices().len();
    let sample = |s: &mut AmdSource| {
        let mut seen = 0;
        for i in 0..n {
            seen += s.read(i).expect("a device").processes.len();
        }
        seen
    };
    // Once before timing: the first reading of each file is not what a running step pays.
    assert_eq!(sample(&mut s), a.procs, "each process on one GPU");
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..a.samples {
        let (t, c) = (Instant::now(), sys::thread_cpu_seconds());
        std::hint::black_box(sample(&mut s));
        wall.push(t.elapsed().as_secs_f64() * 1e6);
        cpu.push((sys::thread_cpu_seconds() - c) * 1e6);
    }
    let (wall, cpu) = (median(wall), median(cpu));
    let interval = gpu_tracker::config::Config::default().interval;
    let budget = interval * gpu_tracker::sampler::pace::OVERRUN_SHARE * 1e6;
    let procs_share = interval * gpu_tracker::step::procs::PROCESS_TIME_SHARE * 1e6;
    let files = s.kfd_files_read() / (a.samples as u64 + 1) + a.gpus as u64 * 4;
    println!(
        "{} AMD GPUs, {} KFD processes of the step and {} outside it ({files} files read per \
         sample): median {wall:.0} µs wall, {cpu:.0} µs CPU per sample (of {} samples)",
        a.gpus, a.procs, a.outside, a.samples
    );
    println!(
        "budget at the default interval ({interval} s): {budget:.0} µs per sample before the \
         interval is lengthened (OVERRUN_SHARE {:.0} %), {procs_share:.0} µs for reading \
         processes (PROCESS_TIME_SHARE {:.0} %): {:.1} % and {:.1} % of them",
        gpu_tracker::sampler::pace::OVERRUN_SHARE * 100.0,
        gpu_tracker::step::procs::PROCESS_TIME_SHARE * 100.0,
        wall / budget * 100.0,
        wall / procs_share * 100.0,
    );
    if let Some(p) = a.out {
        let json = format!(
            "{{\"gpus\": {}, \"procs\": {}, \"outside\": {}, \"samples\": {}, \
             \"median_us\": {wall:.1}, \
             \"median_cpu_us\": {cpu:.1}, \"budget_us\": {budget:.0}, \
             \"process_budget_us\": {procs_share:.0}}}\n",
            a.gpus, a.procs, a.outside, a.samples
        );
        std::fs::write(&p, json).expect("writing the results");
        println!("written to {p}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

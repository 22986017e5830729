//! The cost of one scrape of `gpu-tracker-exporter`: `cargo bench --bench exporter_scrape`.
//!
//! Writes N live state files (default 100 running steps, 4 GPUs each, as the plugin writes
//! them) into a temporary directory, then times full scrapes (open and judge each file, read,
//! parse, render the OpenMetrics text) as the exporter answers `GET /metrics`, and prints the
//! median, minimum and maximum. The goal: under 5 ms at 100 steps. Options: `--steps 100`,
//! `--gpus 4`, `--runs 200`.

use std::time::Instant;

use gpu_tracker::exporter::Exporter;
use gpu_tracker::exporter::metrics::Format;
use gpu_tracker::step::live::{
    LiveCpu, LiveGpu, LiveMemory, LivePressure, LiveStall, LiveState, SCHEMA, SCHEMA_VERSION,
};

struct Args {
    steps: usize,
    gpus: usize,
    runs: usize,
}

fn args() -> Args {
    let mut a = Args {
        steps: 100,
        gpus: 4,
        runs: 200,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || {
            it.next()
                .unwrap_or_else(|| panic!("{k} needs a value"))
                .parse::<usize>()
                .expect("a count")
        };
        match k.as_str() {
            "--steps" => a.steps = v(),
            "--gpus" => a.gpus = v(),
            "--runs" => a.runs = v().max(1),
            // What `cargo bench` passes on.
            "--bench" => {}
            "--help" | "-h" => {
                println!("exporter_scrape [--steps 100] [--gpus 4] [--runs 200]");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// A step as the plugin writes it, with every figure present.
fn state(i: usize, gpus: usize, now: f64) -> LiveState {
    LiveState {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        cluster: "bench".into(),
        job_id: 100_000 + i as u32,
        step: if i % 2 == 0 {
            "batch".into()
        } else {
            "0".into()
        },
        user: format!("user{:03}", i % 37),
        uid: 10_000 + (i % 37) as u32,
        node: "gpu-node-017".into(),
        stepd_pid: 40_000 + i as u32,
        written_at: now,
        started_at: now - 3600.0,
        interval_seconds: 5.0,
        alloc_cpus: Some(16),
        memory: LiveMemory {
            current_bytes: Some(12_345_678_901),
            peak_bytes: Some(23_456_789_012),
            limit_bytes: Some(64 << 30),
        },
        cpu: LiveCpu {
            seconds: Some(45_678.123_456),
            cores_busy: Some(11.987_654),
        },
        pressure: Some(LivePressure {
            unavailable: None,
            cpu: Some(LiveStall {
                some_us: 123_456_789,
                full_us: Some(23_456_789),
            }),
            memory: Some(LiveStall {
                some_us: 3_456_789,
                full_us: Some(1_234_567),
            }),
            io: Some(LiveStall {
                some_us: 45_678_901,
                full_us: Some(12_345_678),
            }),
        }),
        gpus: (0..gpus)
            .map(|g| LiveGpu {
                vendor: gpu_tracker::gpu::Vendor::Nvidia,
                cu_occupancy_percent: None,
                index: g as u32,
                uuid: format!("GPU-{i:08x}-1111-2222-3333-{g:012x}"),
                memory_used_bytes: Some(71_234_567_890),
                memory_total_bytes: 85_899_345_920,
                utilization_percent: Some(97.0),
                sm_active_percent: Some(63.218_75),
                energy_joules: Some(1_234_567.891),
                power_watts: Some(312.5),
                temperature_celsius: Some(67),
            })
            .collect(),
    }
}

fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}

fn main() {
    let a = args();
    let dir =
        std::env::temp_dir().join(format!("gpu-tracker-bench-exporter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let now = gpu_tracker::clock::unix_now();
    let mut bytes = 0;
    for i in 0..a.steps {
        let s = state(i, a.gpus, now);
        let json = serde_json::to_vec(&s).expect("JSON");
        bytes += json.len();
        let name = format!("bench.{}.{}.gpu-node-017.json", s.job_id, s.step);
        std::fs::write(dir.join(name), json).expect("a state file");
    }
    let mut e = Exporter::new(dir.clone());
    // Once untimed: the directory and files in the page cache, as on a node scraped every 15 s.
    let first = e.scrape(Format::OpenMetrics).text;
    let series = first.lines().filter(|l| !l.starts_with('#')).count();
    let mut times: Vec<f64> = (0..a.runs)
        .map(|_| {
            let t = Instant::now();
            let text = e.scrape(Format::OpenMetrics).text;
            let d = t.elapsed().as_secs_f64();
            assert!(text.ends_with("# EOF\n"));
            d
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    println!(
        "exporter scrape: {} steps x {} GPUs ({} bytes of state, mean {} per file), {} series, \
         {} bytes of text",
        a.steps,
        a.gpus,
        bytes,
        bytes / a.steps.max(1),
        series,
        first.len()
    );
    println!(
        "  {} scrapes: median {}, min {}, max {} (goal: under 5 ms at 100 steps)",
        a.runs,
        ms(median),
        ms(times[0]),
        ms(times[times.len() - 1])
    );
}

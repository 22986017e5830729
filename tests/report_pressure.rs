//! Whole-program tests of the pressure stall figures (cgroup v2 PSI) in `gpu-tracker-report`'s
//! story: a job whose record has them gets each phase's share of time stalled in its JSON,
//! the stall columns in `--timeline csv` and `json`, and a pressure panel in `--plot`; a job
//! whose node had none (cgroup v1) gets `null`s, empty cells and no panel: never 0.
//!
//! `GPU_TRACKER_TEST_PLOT=/path/job.png` also draws the job with pressure there (how the
//! picture of the pressure panel is made).

mod common;

use gpu_tracker::cgroup::pressure::{PressureTotals, Stall};
use gpu_tracker::history::{AlertRules, GpuObservation, Observation, Recorder};
use gpu_tracker::step::record::*;
use std::path::PathBuf;
use std::process::Output;

const GIB: u64 = 1 << 30;
/// The job's start, Unix seconds.
const START: f64 = 1_795_000_000.0;

use common::ReportSite as Site;

impl Site {
    /// Writes `rec` as its job's batch record on node `gpu-1`, with the job's directory and
    /// instance file.
    fn add(&self, rec: &StepRecord) {
        let job = rec.job.id;
        let dir = self.dir.join(&format!("spool/t/{job}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("instance.json"),
            format!("{{\"cluster\": \"t\", \"job_id\": {job}, \"uid\": 1001, \"token\": \"\"}}\n"),
        )
        .unwrap();
        std::fs::write(dir.join("gpu-1.batch.json"), rec.to_json()).unwrap();
    }

    fn report(&self, args: &[&str]) -> Output {
        let out = self.command(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn stdout(&self, args: &[&str]) -> String {
        String::from_utf8(self.report(args).stdout).unwrap()
    }
}

/// Per second of a 3-minute job, what the tasks waited for in the second up to `t`:
/// `[cpu, memory, io]` stall seconds. Loading (0..40 s) waits for I/O with the GPU idle; training (40..150 s) now and
/// then for a core; saving (150..180 s) for memory and I/O.
fn waits(t: u32) -> [f64; 3] {
    match t {
        0..40 => [0.05, 0.0, 0.6],
        40..150 => [0.1 + 0.08 * (f64::from(t) / 9.0).sin(), 0.0, 0.02],
        _ => [0.02, 0.3, 0.4],
    }
}

/// Job `job`'s batch record: one GPU, the three phases marked; its cgroup's pressure counters
/// read at every sample when `psi`, else never (cgroup v1).
fn job(job: u32, psi: bool) -> StepRecord {
    let secs = 180;
    let mut h = Recorder::new(START, 1.0, AlertRules::default());
    h.set_gpus(vec!["GPU-77".into()], vec![0]);
    h.set_memory_limit(Some(16 * GIB));
    let mut stall = [0u64; 3];
    let mut cpu = 0.0;
    for t in 0..=secs {
        let (cores, mem_gib, util, gpu_gib) = match t {
            0..40 => (1.0, 1.0 + 5.0 * f64::from(t) / 40.0, 0.0, 0.5),
            40..150 => (3.5, 12.0, 92.0, 30.0),
            _ => (1.0, 8.0, 5.0, 30.0),
        };
        if t > 0 {
            cpu += cores;
            for (s, w) in stall.iter_mut().zip(waits(t)) {
                *s += (w * 1e6) as u64;
            }
        }
        let totals = |us: u64| Stall {
            some_us: us,
            full_us: Some(us / 3),
        };
        h.observe(&Observation {
            unix: START + f64::from(t),
            memory_bytes: (mem_gib * GIB as f64) as u64,
            cpu_seconds: Some(cpu),
            gpus: vec![GpuObservation {
                memory_bytes: Some((gpu_gib * GIB as f64) as u64),
                utilization_percent: Some(util),
                ..GpuObservation::default()
            }],
            pressure: psi.then(|| PressureTotals {
                cpu: totals(stall[0]),
                memory: totals(stall[1]),
                io: totals(stall[2]),
            }),
            ..Observation::default()
        });
    }
    for (t, name) in [(0.0, "load"), (40.0, "train"), (150.0, "save")] {
        h.mark(START + t, name);
    }
    let story = h.finish(START + f64::from(secs));
    StepRecord {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        complete: true,
        written_at: "2026-11-18T10:03:00+00:00".into(),
        tracker_version: "0.1.0".into(),
        job: JobInfo {
            id: job,
            name: Some("train".into()),
            user: "alice".into(),
            uid: 1001,
            ..Default::default()
        },
        step: StepInfo {
            id: "batch".into(),
            kind: "batch".into(),
            node: "gpu-1".into(),
            start: "2026-11-18T10:00:00+00:00".into(),
            end: Some("2026-11-18T10:03:00+00:00".into()),
            elapsed_seconds: f64::from(secs),
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
        gpus: vec![StepGpu {
            slurm_index: Some(0),
            uuid: "GPU-77".into(),
            name: "Test GPU".into(),
            memory_total_bytes: 80 * GIB,
            idle: story.idle[0].clone(),
            ..Default::default()
        }],
        sampler: SamplerStats::default(),
        timeline: Some(story.timeline),
        events: story.events,
        events_dropped: 0,
        pressure: None,
    }
}

fn phase_shares(site: &Site, job: &str) -> Vec<[serde_json::Value; 3]> {
    let j: serde_json::Value =
        serde_json::from_str(&site.stdout(&["--format", "json", job])).unwrap();
    let phases = j["summary"]["phases"].as_array().expect("phases").clone();
    phases
        .iter()
        .map(|p| ["cpu", "memory", "io"].map(|r| p[format!("{r}_stall_percent").as_str()].clone()))
        .collect()
}

/// The texts of an SVG's `<text>` elements.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}

#[test]
fn pressure_reaches_the_phases_the_timeline_and_the_plot_and_its_absence_stays_no_data() {
    let site = Site::new("pressure");
    site.add(&job(501, true));
    site.add(&job(502, false));

    // Phases: the share of their time stalled. Load waited 60% of its time for I/O.
    let with = phase_shares(&site, "501");
    assert_eq!(with.len(), 3);
    let num = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    assert!((num(&with[0][2]) - 60.0).abs() < 1.0, "{with:?}");
    assert!((num(&with[1][0]) - 10.0).abs() < 2.0, "{with:?}");
    assert!((num(&with[2][1]) - 30.0).abs() < 1.0, "{with:?}");
    assert!(with.iter().flatten().all(|v| v.is_number()), "{with:?}");
    let without = phase_shares(&site, "502");
    assert!(without.iter().flatten().all(|v| v.is_null()), "{without:?}");

    // The timeline: stall columns last, figures where measured, empty cells where not.
    let csv = site.stdout(&["--timeline", "csv", "501"]);
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let io = col("io_stall_some_percent");
    let row: Vec<&str> = csv.lines().nth(11).unwrap().split(',').collect();
    assert_eq!(row[io], "60", "{}", csv.lines().nth(11).unwrap());
    let csv = site.stdout(&["--timeline", "csv", "502"]);
    let row: Vec<&str> = csv.lines().nth(11).unwrap().split(',').collect();
    assert_eq!(row[io], "");
    assert_eq!(row[col("stall_seconds")], "");
    let j: serde_json::Value =
        serde_json::from_str(&site.stdout(&["--timeline", "json", "501"])).unwrap();
    let b = &j["steps"][0]["timeline"]["buckets"][10];
    assert_eq!(b["stall_percent"]["io"][0], 60.0, "{b}");
    let j: serde_json::Value =
        serde_json::from_str(&site.stdout(&["--timeline", "json", "502"])).unwrap();
    let b = &j["steps"][0]["timeline"]["buckets"][10];
    assert!(b["stall"].is_null() && b["stall_percent"].is_null(), "{b}");

    // The plot: a pressure panel with CPU, memory and I/O, only where there are figures.
    let title = "Pressure stall (% of time some task waited)";
    for (job, panel) in [("501", true), ("502", false)] {
        let svg = site.dir.join(&format!("{job}.svg"));
        site.report(&[job, "--plot", svg.to_str().unwrap()]);
        let texts = svg_texts(&std::fs::read_to_string(&svg).unwrap());
        for want in [title, "CPU", "memory", "I/O"] {
            assert_eq!(
                texts.iter().any(|t| t == want),
                panel,
                "{want} in {texts:?}"
            );
        }
        assert!(texts.iter().any(|t| t == "GPU utilization (%)"));
    }
    if let Some(png) = std::env::var_os("GPU_TRACKER_TEST_PLOT") {
        let png = PathBuf::from(png);
        site.report(&["501", "--plot", png.to_str().unwrap()]);
    }
}

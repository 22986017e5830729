//! AMD GPUs on a real cluster: the AMD node of the test cluster (partition `amd`,
//! slurm/cluster/setup.sh) has two SIMULATED AMD Instinct MI300X, named in gres.conf by render
//! nodes (`renderD128`, `renderD129`). `tests/simamd.py` keeps their kernel files (KFD, amdgpu,
//! hwmon) under the cluster's simulated root, which the plugin reads through the same readers
//! as a real node's `/` (the test-only setting `amd_root`): a process with `SIMAMD<i>_HOLD` on
//! its command line holds 1 GiB of VRAM on Slurm's GPU i and keeps it 60 % busy.
//!
//! One job on both GPUs, GPU 0 held for a while, GPU 1 never touched: the held GPU's 1 GiB,
//! busy %, CU occupancy and energy, and the other's `gpu-unused`, in the record, the summary in
//! the job's output, the report's JSON, the exporter's live figures and the site report.

use std::process::Command;
use std::time::{Duration, Instant};

use gpu_tracker::gpu::Vendor;
use gpu_tracker::gpu::figures::figure;
use serde_json::Value;

use crate::records::*;
use crate::support::*;

const GIB: u64 = 1 << 30;

/// `gpu-tracker-exporter --once` over the cluster's live directory, as root: the exposition
/// text of every running step.
fn exporter_once() -> String {
    let out = Command::new(program(
        "gpu-tracker-exporter",
        env!("CARGO_BIN_EXE_gpu-tracker-exporter"),
    ))
    .arg("--once")
    .arg("--live-dir")
    .arg(state_dir().join("live"))
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of the exporter's series `family` of job `id`'s Slurm GPU `gpu`, if there is one.
fn series(text: &str, family: &str, id: u32, gpu: u32) -> Option<(String, f64)> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| {
            l.contains(&format!("jobid=\"{id}\"")) && l.contains(&format!(",gpu=\"{gpu}\""))
        })
        .find_map(|l| {
            let (labels, v) = l.rsplit_once(' ')?;
            Some((labels.to_string(), v.parse().ok()?))
        })
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up --nodes 2) and root: tests/run-all.sh"]
fn a_job_on_two_simulated_amd_gpus_shows_the_held_ones_figures_and_the_others_idleness() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    cluster();
    // The site report's period, as the site test's: from a few seconds before submission. A run
    // right after another may count that one's job too (it is alike: one GPU used, one not).
    let since = (chrono::Local::now() - chrono::TimeDelta::seconds(5))
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    let h = hog();
    // The holder holds the GPU at least 8 s and until the test has read the live figures (or
    // 90 s have passed): on a busy guest a fixed hold can end before the sampler and the
    // simulator have both seen it.
    let release = Release::new("amd");
    let wait = release.wait_then_kill_holder(180, "0.5");
    let script = format!(
        "#!/bin/bash\n#SBATCH -p amd --gres=gpu:mi300x:2 --gpu-track=0.5 --mem=1G\n\
         sleep 1\n\
         {h} --mb 20 --hold-ms 600000 --marker SIMAMD0_HOLD &\n\
         holder=$!\n\
         sleep 8\n\
         {wait}\
         sleep 1\n"
    );
    let id = submit("amd", &script);
    wait_started(id);

    // Live: the exporter serves the held GPU's 1 GiB, labelled as AMD's, while the job runs.
    // Every figure below is read from one scrape, the first that shows the GPU held.
    let started = Instant::now();
    let text = loop {
        let polled = Instant::now();
        let text = exporter_once();
        let held = |family, at_least: f64| {
            series(&text, family, id, 0).is_some_and(|(_, v)| v >= at_least)
        };
        if held("gpu_tracker_gpu_memory_bytes", GIB as f64)
            && held("gpu_tracker_gpu_cu_occupancy_ratio", f64::MIN_POSITIVE)
        {
            break text;
        }
        let ours: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(&format!("jobid=\"{id}\"")))
            .collect();
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the held AMD GPU's memory and CU occupancy from the exporter: not within 60 s; \
             the last scrape's series of job {id}:\n{}",
            ours.join("\n")
        );
        poll_pause(Duration::from_millis(200), polled.elapsed());
    };
    release.release();
    let (labels, _) = series(&text, "gpu_tracker_gpu_memory_bytes", id, 0).unwrap();
    assert!(labels.contains("vendor=\"amd\""), "{labels}");
    let busy = series(&text, "gpu_tracker_gpu_utilization_ratio", id, 0);
    assert!(
        busy.is_some_and(|(_, v)| (0.0..=1.0).contains(&v)),
        "{text}"
    );
    assert!(
        series(&text, "gpu_tracker_gpu_memory_bytes", id, 1).is_some_and(|(_, v)| v == 0.0),
        "{text}"
    );
    // The held GPU's CUs are occupied by the job's holder; the other's by nothing.
    assert!(
        series(&text, "gpu_tracker_gpu_cu_occupancy_ratio", id, 0).is_some_and(|(_, v)| v > 0.0),
        "{text}"
    );
    assert!(
        series(&text, "gpu_tracker_gpu_cu_occupancy_ratio", id, 1).is_some_and(|(_, v)| v == 0.0),
        "{text}"
    );

    let job = wait_job(USER, "amd", id);
    drop(release);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);

    // The record: both GPUs, by their render nodes, read from the kernel's AMD files.
    let r = final_records(id, &["batch"]).remove("batch").unwrap();
    assert_eq!(r.sampler.gpu_source, "amd", "{:?}", r.sampler);
    assert_eq!(r.sampler.gpu_mapping.as_deref(), Some("gres_conf_files"));
    let mut gpus = r.gpus.clone();
    gpus.sort_by_key(|g| g.slurm_index);
    assert_eq!(gpus.len(), 2, "{gpus:?}");
    let (held, idle) = (&gpus[0], &gpus[1]);
    for (g, i, minor) in [(held, 0, 128), (idle, 1, 129)] {
        assert_eq!(g.vendor, Vendor::Amd, "{g:?}");
        assert_eq!(g.slurm_index, Some(i), "{g:?}");
        assert_eq!(g.minor, Some(minor), "{g:?}");
        assert!(g.pci_bus_id.is_some(), "{g:?}");
        assert!(g.name.contains("MI300X"), "{g:?}");
        assert!(g.memory_total_bytes >= 128 * GIB, "{g:?}");
        assert!(g.energy_joules.is_some_and(|e| e > 0.0), "{g:?}");
        // What AMD's kernel files do not give is "no data" with why, never 0.
        assert!(g.depth.sm_active_percent.is_none(), "{g:?}");
        assert!(g.depth.no_data.contains_key(figure::SM_ACTIVITY), "{g:?}");
    }
    assert_eq!(held.peak_step_memory_bytes, GIB, "{held:?}");
    assert!(held.peak_device_memory_bytes >= GIB, "{held:?}");
    let max = held.max_utilization_percent.unwrap();
    let mean = held.mean_utilization_percent.unwrap();
    assert!((max - 60.0).abs() < 1e-9, "{held:?}");
    assert!(
        mean > 20.0 && mean < 60.0,
        "held for 8 s or more, with 2 s idle: {held:?}"
    );
    let cu = held.depth.cu_occupancy_percent.expect("CU occupancy");
    assert!(cu.max > 0.0, "{cu:?}");
    assert!(
        held.energy_joules > idle.energy_joules,
        "a busy GPU draws more: {held:?} {idle:?}"
    );
    assert_eq!(idle.peak_step_memory_bytes, 0, "{idle:?}");
    assert_eq!(idle.max_utilization_percent, Some(0.0), "{idle:?}");
    assert_eq!(
        idle.depth.cu_occupancy_percent.map(|c| c.max),
        Some(0.0),
        "{idle:?}"
    );

    // The summary in the job's output.
    let out = output_with_summary(USER, "amd", id);
    let sum = summary_of(&out);
    let line0 = sum
        .lines()
        .find(|l| l.starts_with("GPU 0:"))
        .unwrap_or_else(|| panic!("{sum}"));
    assert!(
        line0.contains("MI300X") && line0.contains("renderD128 at "),
        "{line0}"
    );
    assert!(sum.contains("1.00 GiB by the job's processes"), "{sum}");
    assert!(
        sum.contains("CU occupancy of the job's processes mean"),
        "{sum}"
    );
    let classes = sum
        .lines()
        .find(|l| l.starts_with("Classes:"))
        .unwrap_or_else(|| panic!("{sum}"));
    assert!(classes.contains("gpu-unused"), "{classes}");
    assert!(sum.contains("was allocated but idle"), "{sum}");

    // The report's JSON.
    let (code, json, err) = report_as(USER, &[&id.to_string(), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&json).unwrap();
    let gs = v["summary"]["gpus"].as_array().unwrap();
    let g0 = gs
        .iter()
        .find(|g| g["slurm_index"] == 0)
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(g0["vendor"], "amd", "{g0}");
    assert_eq!(g0["render_minor"], 128, "{g0}");
    assert_eq!(g0["job_peak_bytes"], GIB, "{g0}");
    assert!(
        g0["energy_joules"].as_f64().is_some_and(|e| e > 0.0),
        "{g0}"
    );

    // The site report, from Slurm's database: the amd partition's one job, a GPU unused.
    wait_end_in_database(id);
    let stored = stored_comment(id);
    assert!(is_summary(&stored), "{stored:?}");
    let (code, site, err) = report_as(
        "root",
        &["--by", "partition", "--since", &since, "-f", "json"],
    );
    assert_eq!(code, 0, "{err}");
    let site: Value = serde_json::from_str(&site).unwrap();
    let row = site["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group"] == "amd")
        .unwrap_or_else(|| panic!("{site:#}"));
    let jobs = row["jobs"].as_u64().unwrap();
    assert!(jobs >= 1, "{row:#}");
    assert_eq!(row["classes"]["gpu-unused"], jobs, "{row:#}");
    let gpu_h = row["gpu_hours"].as_f64().unwrap();
    let unused_h = row["gpu_hours_unused"].as_f64().unwrap();
    assert!(gpu_h > 0.0 && unused_h > 0.0 && unused_h < gpu_h, "{row:#}");
}

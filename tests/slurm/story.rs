//! A job's story: phases marked with `gpu-tracker mark`, alerts and the warning lines they
//! print, an idle GPU, and what the report makes of them (phases, timeline and events exports,
//! plots).

use std::path::PathBuf;
use std::sync::OnceLock;

use gpu_tracker::step::record::StepRecord;

use crate::records::*;
use crate::support::*;

/// `gpu-tracker`, copied where the test user's jobs can run it (for `gpu-tracker mark`).
fn tracker_bin() -> PathBuf {
    static COPIED: OnceLock<PathBuf> = OnceLock::new();
    COPIED
        .get_or_init(|| {
            let dst = state_dir().join("bin/gpu-tracker");
            std::fs::copy(
                program("gpu-tracker", env!("CARGO_BIN_EXE_gpu-tracker")),
                dst.with_extension("new"),
            )
            .unwrap();
            std::fs::rename(dst.with_extension("new"), &dst).unwrap();
            dst
        })
        .clone()
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_job_in_three_phases_with_an_alert_and_an_idle_gpu_tells_its_story() {
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    cluster();
    let h = hog();
    let gt = tracker_bin();
    // Slurm's GPU 0 (minor 4) idles 3 s after NVML opens, then works to the end; GPU 1 (minor
    // 7) never works. (Times count from NVML's start, not the job's phases: a slow machine
    // stretches the job, so GPU 0 never idles again and the test holds at any speed. So the
    // utilization follows these timelines alone, not the cluster's compute_marker.)
    let mut scenario: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(state_dir().join("simulated-gpus.json")).unwrap(),
    )
    .unwrap();
    for d in scenario["devices"].as_array_mut().unwrap() {
        d["utilization"] = if d["minor"] == 4 {
            serde_json::json!([{"at_ms": 0, "gpu": 0, "memory": 0},
                               {"at_ms": 3000, "gpu": 80, "memory": 30}])
        } else {
            serde_json::json!([{"at_ms": 0, "gpu": 0, "memory": 0}])
        };
    }
    let nvml = nvml_copy(
        "story",
        serde_json::json!({"devices": scenario["devices"], "compute_marker": null}),
        false,
    );
    let conf = state_dir().join("gpu-tracker.toml");
    let with_nvml = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(
        &conf,
        format!(
            "{with_nvml}alert_memory_percent = 50\nalert_gpu_idle_seconds = 5\n\
             gpu_idle_percent = 5\nwarn_user = true\n"
        ),
    )
    .unwrap();
    let gt = gt.display();
    // The train step's holder holds its 130 MiB and GPU 0 until the checkpoints show what the
    // test reads of train: the batch step's memory alert, the step's own memory, and GPU 0 at
    // work in the step's own NVML (3 s after its start). A fixed 3.5 s hold could end on a
    // loaded guest before a sample had seen it. From a script: the marker on no other command
    // line (the fake gives each process that names it 1 GiB on GPU 0).
    let release = Release::new("story");
    let hold = state_dir().join("jobs").join(USER).join("story-hold.sh");
    std::fs::write(
        &hold,
        format!(
            "#!/bin/bash\n{h} --mb 130 --hold-ms 600000 --marker SIMGPU0_HOLD &\nholder=$!\n\
             {}exit 0\n",
            release.wait_then_kill_holder(120, "1")
        ),
    )
    .unwrap();
    let script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track=0.5 --gres=gpu:2 --mem=200M\n\
         echo mark=$GPU_TRACKER_MARK\n\
         d=${{GPU_TRACKER_MARK%/}}\n\
         ls -a \"${{d%/*}}\" >/dev/null 2>&1 && echo marks-top=listed || echo marks-top=denied\n\
         echo marks-own=$(ls \"$d\" | tr '\\n' ' ')\n\
         {gt} mark load\nsleep 3\n\
         {gt} mark train\nsrun bash {}\n\
         {gt} mark save\nsleep 2\n",
        hold.display()
    );
    let id = submit("story", &script);
    wait_started(id);
    let train_seen = || {
        let alert = record_now(id, "batch")
            .is_some_and(|b| b.events.iter().any(|e| e.kind == "alert_memory"));
        let step = record_now(id, "0").is_some_and(|r| {
            let held = r.timeline.as_ref().is_some_and(|t| {
                t.buckets
                    .iter()
                    .any(|b| b.memory_bytes.max >= 120.0 * 1048576.0)
            });
            let working = r.gpus.iter().any(|g| {
                g.slurm_index == Some(0)
                    && g.peak_step_memory_bytes >= 1 << 30
                    && g.max_utilization_percent.is_some_and(|u| u >= 80.0)
            });
            held && working
        });
        alert && step
    };
    wait_until(
        "checkpoints of train: the alert, the step's memory, GPU 0 at work",
        std::time::Duration::from_secs(120),
        train_seen,
    );
    release.release();
    let job = wait_job(USER, "story", id);
    drop(nvml);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    // The node's directory of mark sockets names no job to anyone but root; the job's own
    // directory shows its user the batch step's socket.
    assert!(
        job.output.contains("marks-top=denied") && job.output.contains("marks-own=batch.sock"),
        "{}",
        job.output
    );
    let id = job.id;
    let recs = final_records(id, &["batch", "0"]);
    let batch = &recs["batch"];
    let kinds = |r: &StepRecord, k: &str| -> Vec<gpu_tracker::history::Event> {
        r.events.iter().filter(|e| e.kind == k).cloned().collect()
    };
    // The three marks reach the batch step, in order, with their times.
    let marks: Vec<(String, f64)> = kinds(batch, "mark")
        .iter()
        .map(|e| (e.name.clone().unwrap(), e.t))
        .collect();
    assert_eq!(
        marks.iter().map(|m| m.0.as_str()).collect::<Vec<_>>(),
        ["load", "train", "save"],
        "{:?}",
        batch.events
    );
    assert!(marks[1].1 - marks[0].1 >= 2.9, "{marks:?}");
    assert!(marks[2].1 - marks[1].1 >= 3.4, "{marks:?}");
    // Alerts: the job's memory above half its limit (the batch step watches the job), and
    // Slurm's GPU 1 idle 5 s in a row; each also as one line in the job's output.
    let mem_alerts = kinds(batch, "alert_memory");
    assert_eq!(mem_alerts.len(), 1, "{:?}", batch.events);
    assert!(mem_alerts[0].value.unwrap() >= 50.0);
    let idle_alerts = kinds(batch, "alert_gpu_idle");
    assert_eq!(
        idle_alerts.iter().map(|e| e.gpu).collect::<Vec<_>>(),
        [Some(1)],
        "{:?}",
        batch.events
    );
    assert!(
        job.output
            .contains(&format!("gpu-tracker: warning: job {id}: memory at"))
            && job
                .output
                .contains(&format!("gpu-tracker: warning: job {id}: GPU 1 idle")),
        "{}",
        job.output
    );
    assert_eq!(kinds(batch, "task_start").len(), 1);
    assert_eq!(kinds(batch, "task_exit")[0].value, Some(0.0));
    // Timelines: bounded buckets of the interval, both GPUs, the step's 130 MiB.
    let tl = batch.timeline.as_ref().unwrap();
    assert_eq!(tl.bucket_seconds, 0.5);
    assert_eq!(tl.gpus.len(), 2);
    // Every sample is in the timeline (a slow machine samples less often: the sampler
    // lengthens its interval when samples cost more than a tenth of it).
    let in_buckets: u32 = tl.buckets.iter().map(|b| b.samples).sum();
    assert_eq!(u64::from(in_buckets), batch.sampler.samples, "{tl:?}");
    assert!(tl.buckets.len() >= 4, "{}", tl.buckets.len());
    let s0 = recs["0"].timeline.as_ref().unwrap();
    let peak0 = s0
        .buckets
        .iter()
        .map(|b| b.memory_bytes.max)
        .fold(0.0, f64::max);
    assert!(peak0 >= 120.0 * 1048576.0, "{peak0}");
    // Idle GPUs: Slurm's GPU 1 never worked; GPU 0 idled about 3 s at the start.
    let idle = |i: u32| {
        batch
            .gpus
            .iter()
            .find(|g| g.slurm_index == Some(i))
            .and_then(|g| g.idle.clone())
            .unwrap()
    };
    assert!(!idle(1).ever_busy);
    assert!(idle(1).share_percent() > 90.0, "{:?}", idle(1));
    let g0 = idle(0);
    assert!(g0.ever_busy, "{g0:?}");
    // Within two intervals of the truth (3 s), as the sampler's interval went.
    let imax = batch.sampler.interval_max_seconds.unwrap_or(0.5);
    assert!(
        g0.at_start_seconds <= 4.5 && g0.at_start_seconds >= 3.0 - 2.0 * imax - 0.5,
        "{g0:?} {imax}"
    );
    assert!(g0.at_end_seconds < 1.0, "{g0:?}");
    // The summary in the job's output: phases, idle GPUs, events.
    let out = output_with_summary(USER, "story", id);
    let summary = summary_of(&out);
    for want in ["Phases:", "GPU idle:", "Events:", "never busy"] {
        assert!(summary.contains(want), "{want}:\n{summary}");
    }
    for phase in ["load", "train", "save"] {
        assert!(
            summary.lines().any(|l| l.trim_start().starts_with(phase)),
            "{phase}:\n{summary}"
        );
    }
    // The phases' figures: train holds the 130 MiB, load and save do not.
    let (code, json, err) = report_as(USER, &[&id.to_string(), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let mut phases = v["summary"]["phases"].as_array().unwrap().clone();
    // A slow machine samples the job before its first mark: that time is a phase of its own,
    // before the job's three.
    if phases
        .first()
        .is_some_and(|p| p["name"] == "(before the first mark)")
    {
        phases.remove(0);
    }
    let names: Vec<&str> = phases.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, ["load", "train", "save"], "{phases:?}");
    let peak = |i: usize| phases[i]["memory_peak_bytes"].as_u64().unwrap();
    assert!(peak(1) >= 120 << 20, "{phases:?}");
    assert!(peak(0) < 100 << 20 && peak(2) < 100 << 20, "{phases:?}");
    // Slurm's GPU 0 (the fake gives the marked process 1 GiB on it) works in train only.
    // A phase lists the GPUs some sample in it measured: on a slow guest no sample of the batch
    // step may have measured the GPUs during load (its sampler's interval lengthened, or NVML
    // opened after the first mark), and then load lists none; train always lists GPU 0.
    let gpu0 = |i: usize| -> Option<serde_json::Value> {
        let gpus = phases[i]["gpus"].as_array().unwrap();
        let g = gpus.iter().find(|g| g["index"] == 0).cloned();
        assert!(
            g.is_some() || gpus.is_empty(),
            "{phases:?}\n{:?}\n{:?}",
            batch.sampler,
            tl.buckets.iter().take(12).collect::<Vec<_>>()
        );
        g
    };
    assert!(gpu0(1).is_some(), "{phases:?}");
    // (A phase's figures are as precise as half a bucket: the fake counts srun's own command
    // line, which names the marker, at once, and on a slow guest the sample taken at the mark
    // can fall in load's last bucket; so load is compared, not bounded.)
    let gmem = |i: usize| gpu0(i).map(|g| g["memory_peak_bytes"].as_u64().unwrap());
    assert!(gmem(1) >= Some(1 << 30) && gmem(1) > gmem(0), "{phases:?}");
    let util = |i: usize| gpu0(i).map(|g| g["utilization_mean_percent"].as_f64().unwrap());
    // (Each step opens its own fake NVML, whose times count from its own start: the train
    // step sees GPU 0 idle for its first 3 s, which lowers the phase's mean; and on a slow
    // guest GPU 0 may start working before load ends, or before load starts: a 24.11 guest
    // busy with another job's load reached the first mark 6 s into the job, after the batch
    // step's NVML had had GPU 0 idle its 3 s, and load's mean was already 80 %. Load is
    // compared where it saw the GPU idle at all.)
    assert!(util(1) >= Some(30.0), "{phases:?}");
    assert!(util(0) >= Some(79.0) || util(1) > util(0), "{phases:?}");
    // Exports, as the job's user.
    let (code, csv, err) = report_as(USER, &[&id.to_string(), "--timeline", "csv"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = csv.lines().collect();
    assert!(rows[0].starts_with("node,step,t_start,t_end,samples,memory_min_bytes"));
    let cols = rows[0].split(',').count();
    assert!(rows.iter().all(|r| r.split(',').count() == cols));
    let node = node();
    for step in ["batch", "0"] {
        let n = rows
            .iter()
            .filter(|r| r.starts_with(&format!("{node},{step},")))
            .count();
        assert!(n >= 2, "{step}: {n} rows\n{csv}");
    }
    assert!(rows.iter().any(|r| r.contains(",1,GPU-11111111-")), "{csv}");
    let (code, json, _) = report_as(USER, &[&id.to_string(), "--timeline", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["steps"].as_array().unwrap().len(), 2);
    let (code, ev, _) = report_as(USER, &[&id.to_string(), "--events", "csv"]);
    assert_eq!(code, 0);
    assert_eq!(
        ev.lines().next(),
        Some("t,node,step,kind,task,gpu,name,value,detail")
    );
    for want in [
        ",mark,,,load,",
        ",mark,,,train,",
        ",mark,,,save,",
        ",alert_memory,",
        ",alert_gpu_idle,,1,",
    ] {
        assert!(ev.contains(want), "{want}:\n{ev}");
    }
    assert_eq!(
        ev.matches(",mark,").count(),
        3,
        "a mark both steps received is listed once:\n{ev}"
    );
    let (code, json, _) = report_as(USER, &[&id.to_string(), "--events", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["events"].as_array().unwrap().len() >= 7);
    // Plots, drawn by the job's user into their own directory.
    let dir = state_dir().join("jobs").join(USER);
    let svg = dir.join(format!("story-{id}.svg"));
    let (code, out, err) = report_as(
        USER,
        &[&id.to_string(), "--plot", &svg.display().to_string()],
    );
    assert_eq!(code, 0, "{out}{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    for want in [
        "Memory",
        "CPU",
        "GPU memory",
        "GPU utilization",
        "load",
        "train",
        "save",
        "GPU 0",
        "GPU 1",
        "memory ",
    ] {
        assert!(text.contains(want), "{want} is not in the SVG");
    }
    let png = dir.join(format!("story-{id}.png"));
    let (code, _, err) = report_as(
        USER,
        &[&id.to_string(), "--plot", &png.display().to_string()],
    );
    assert_eq!(code, 0, "{err}");
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000);
    // Another user gets none of it.
    let (code, _, _) = report_as("gtuser2", &[&id.to_string(), "--timeline", "csv"]);
    assert_ne!(code, 0);
}

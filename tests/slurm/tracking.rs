//! What a tracked step records: every task of every step with its peak and exit code, only the
//! steps that ask, the interval the job chose (and the values refused at submission), the job's
//! GPU and no other, an OOM kill, and the checkpoints of a running step.

use std::process::Command;
use std::time::{Duration, Instant};

use gpu_tracker::step::record::StepRecord;

use crate::records::*;
use crate::support::*;

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_tracked_batch_job_records_every_task_of_every_step() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    // Step 0: task 1 holds 300 MB for 100 ms and exits 3; step 1: both tasks exit 0.
    let script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track\n#SBATCH -n 2 --mem=1G\n\
         srun -n 2 bash -c 'if [ $SLURM_PROCID = 1 ]; then exec {h} --mb 300 --hold-ms 100 --exit 3; else sleep 1; fi'\n\
         srun -n 2 {h} --mb 20 --hold-ms 300\n\
         echo done\n"
    );
    let job = run_job("two-steps", &script);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let recs = final_records(job.id, &["0", "1", "batch"]);
    assert_eq!(
        recs.keys().collect::<Vec<_>>(),
        ["0", "1", "batch"],
        "one record per step"
    );
    for (step, r) in &recs {
        assert!(r.complete, "step {step} record is final");
        assert_eq!(r.job.id, job.id);
        assert_eq!(r.job.user, USER);
        assert_eq!(r.step.node, node());
        assert_eq!(r.sampler.interval_seconds, 1.0, "the site's interval");
        assert!(r.step.end.is_some());
        assert_eq!(
            r.memory.cgroup_version.as_deref(),
            Some(cgroup_version()),
            "{:?}",
            r.memory
        );
        assert_eq!(r.memory.limit_bytes, Some(1 << 30), "--mem=1G");
        // The step's cgroup as found from a task, the job's right above it (26.05 names the
        // job's directory by an opaque id, not job_<id>), and the job's own peak counter.
        let cg = r.memory.cgroup.as_deref().unwrap_or_default();
        let step_dir = if step == "batch" {
            "step_batch"
        } else {
            &format!("step_{step}")
        };
        let wanted = match cgroup_version() {
            "v2" => format!("/{step_dir}/user"),
            _ => format!("/job_{}/{step_dir}", job.id),
        };
        assert!(
            cg.ends_with(&wanted),
            "step {step} cgroup {cg}, wanted .../{wanted}"
        );
        // Exact peaks from the counters, never the sampled fallback.
        let counter = match cgroup_version() {
            "v2" => "cgroup v2 memory.peak",
            _ => "cgroup v1 memory.max_usage_in_bytes",
        };
        assert_eq!(r.memory.peak_source, counter, "step {step}");
        assert!(
            r.memory
                .job_peak_bytes
                .is_some_and(|p| p >= r.memory.peak_bytes),
            "step {step}: the job cgroup's peak covers the step's: {:?}",
            r.memory
        );
        assert_eq!(
            r.memory.job_limit_bytes,
            Some(1 << 30),
            "--mem=1G on the job"
        );
    }
    let s0 = &recs["0"];
    assert_eq!(s0.tasks.len(), 2);
    let by_id = |r: &StepRecord, g: u32| {
        r.tasks
            .iter()
            .find(|t| t.global_id == Some(g))
            .unwrap()
            .clone()
    };
    let (t0, t1) = (by_id(s0, 0), by_id(s0, 1));
    assert_eq!((t0.exit_code, t1.exit_code), (Some(0), Some(3)));
    // 300 MB (1e6 bytes) held for 100 ms with samples every second: exact all the same.
    assert!(
        (300_000_000..340_000_000).contains(&t1.peak_memory_bytes),
        "{t1:?}"
    );
    assert!(t0.peak_memory_bytes < 50_000_000, "{t0:?}");
    assert!(
        s0.memory.peak_bytes >= 300_000_000 && s0.memory.peak_includes_page_cache,
        "{:?}",
        s0.memory
    );
    let s1 = &recs["1"];
    assert_eq!(s1.tasks.len(), 2);
    for t in &s1.tasks {
        assert_eq!(t.exit_code, Some(0));
        assert!(
            (20_000_000..60_000_000).contains(&t.peak_memory_bytes),
            "{t:?}"
        );
        assert!(t.ended && t.pid > 0);
    }
    let b = &recs["batch"];
    assert_eq!(b.step.kind, "batch");
    assert_eq!(b.tasks.len(), 1);
    assert_eq!(b.tasks[0].exit_code, Some(0));
    assert!(job.output.contains("done"));
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn only_steps_that_ask_are_tracked() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    // No flag on the job: no record for the batch step or a plain srun step; an srun step
    // that asks is tracked on its own.
    let job = run_job(
        "untracked",
        "#!/bin/bash\nsrun true\nsrun --gpu-track=0.5 sleep 1\necho fine\n",
    );
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let recs = final_records(job.id, &["1"]);
    std::thread::sleep(Duration::from_millis(500));
    let recs = if recs.len() == 1 {
        records(job.id)
    } else {
        recs
    };
    assert_eq!(recs.keys().collect::<Vec<_>>(), ["1"], "{:?}", recs.keys());
    assert_eq!(recs["1"].sampler.interval_seconds, 0.5);
    let plain = run_job("untracked-plain", "#!/bin/bash\necho fine\n");
    assert_eq!(plain.state, "COMPLETED");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !job_spool_dir(plain.id).exists(),
        "a job that did not ask leaves nothing in the spool"
    );
}

fn notes_say_lengthened(notes: &[String]) -> bool {
    notes
        .iter()
        .any(|n| n.contains("the interval was lengthened"))
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn the_option_sets_the_interval() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let job = run_job(
        "interval",
        "#!/bin/bash\n#SBATCH --gpu-track=0.5\nsleep 3\n",
    );
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let r = &final_records(job.id, &["batch"])["batch"];
    assert_eq!(r.sampler.interval_seconds, 0.5);
    // About 6 samples in 3 s at 0.5 s (1 s would give about 3), unless samples cost more than
    // a tenth of it (software emulation under load) and the record says it lengthened it.
    if r.sampler.backoffs == Some(0) {
        assert!(r.sampler.samples >= 5, "{:?}", r.sampler);
    } else {
        let longest = r.sampler.interval_max_seconds.unwrap();
        assert!(longest > 0.5 && longest <= 4.0, "{:?}", r.sampler);
        assert!(r.sampler.samples >= 3, "{:?}", r.sampler);
        assert!(notes_say_lengthened(&r.sampler.notes), "{:?}", r.sampler);
    }
}

/// `sbatch`/`srun` run as the test user with `args`: (success, stderr).
fn submit_tool(tool: &str, args: &[&str]) -> (bool, String) {
    cluster();
    let out = Command::new("runuser")
        .args(["-u", USER, "--", tool])
        .args(args)
        .env("SLURM_CONF", slurm_conf())
        .current_dir(state_dir().join("jobs").join(USER))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn an_interval_out_of_range_is_refused_at_submission() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    for value in ["1e19", "1e300", "-1", "nan", "inf", "0"] {
        let opt = format!("--gpu-track={value}");
        let (ok, err) = submit_tool("sbatch", &[&opt, "-o", "/dev/null", "--wrap", "true"]);
        assert!(!ok, "sbatch {opt} was accepted");
        assert!(
            err.contains("--gpu-track") && err.contains(value),
            "{opt}: {err}"
        );
        let (ok, err) = submit_tool("srun", &[&opt, "true"]);
        assert!(!ok, "srun {opt} was accepted");
        assert!(err.contains("--gpu-track"), "{opt}: {err}");
    }
    // The largest interval accepted still tracks: the record keeps it.
    let (ok, err) = submit_tool("srun", &["--gpu-track=86400", "true"]);
    assert!(ok, "{err}");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_gpu_job_records_its_gpu_and_only_its_gpu() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    // SIMULATED GPUs: the fake NVML gives a process 1 GiB on Slurm's GPU 0 (2 GiB on GPU 1) when
    // its command line holds SIMGPU<i>_HOLD. The job runs a holder for each GPU; only the allocated
    // one may appear in the record.
    let script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track=0.5 --gres=gpu:1\n\
         echo gpus=$SLURM_JOB_GPUS\n\
         {h} --hold-ms 6000 --marker SIMGPU0_HOLD &\n\
         {h} --hold-ms 6000 --marker SIMGPU1_HOLD &\n\
         wait\n"
    );
    let job = run_job("gpu", &script);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let idx: u32 = job
        .output
        .lines()
        .find_map(|l| l.strip_prefix("gpus="))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let r = &final_records(job.id, &["batch"])["batch"];
    assert_eq!(r.step.alloc_gpus, vec![idx]);
    assert_eq!(r.sampler.gpu_source, "nvml", "{:?}", r.sampler);
    assert_eq!(r.gpus.len(), 1, "{:?}", r.gpus);
    let g = &r.gpus[0];
    // gres.conf lists simgpu0 (minor 4) then simgpu1 (minor 7); NVML's index 0 is minor 7:
    // neither index equals the minor, so only index -> file -> minor -> NVML device finds them.
    let (uuid, mem, minor, nvml_index) = if idx == 0 {
        ("GPU-00000000-5151-4d55-8000-000000000000", 1u64 << 30, 4, 1)
    } else {
        ("GPU-11111111-5151-4d55-8000-111111111111", 2u64 << 30, 7, 0)
    };
    assert_eq!(g.uuid, uuid);
    assert_eq!(g.slurm_index, Some(idx));
    assert_eq!((g.minor, g.nvml_index), (Some(minor), nvml_index), "{g:?}");
    assert_eq!(
        r.sampler.gpu_mapping.as_deref(),
        Some("gres_conf_files"),
        "{:?}",
        r.sampler.notes
    );
    assert!(g.name.contains("SIMULATED"));
    assert_eq!(g.peak_step_memory_bytes, mem, "{g:?}");
    assert_eq!(g.peak_device_memory_bytes, mem + (256 << 20), "{g:?}");
    assert!(g.energy_joules.unwrap_or(0.0) > 0.0, "{g:?}");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_step_killed_for_memory_records_the_oom_kill() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    let script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track --mem=200M\nsrun {h} --mb 400 --hold-ms 500\necho after\n"
    );
    let job = run_job("oom", &script);
    assert!(
        ["OUT_OF_MEMORY", "FAILED", "COMPLETED"].contains(&job.state.as_str()),
        "{} {}",
        job.state,
        job.output
    );
    let recs = final_records(job.id, &["0"]);
    let s = &recs["0"];
    assert!(s.complete);
    assert_eq!(s.memory.limit_bytes, Some(200 << 20));
    assert!(s.memory.oom_kills.unwrap_or(0) >= 1, "{:?}", s.memory);
    assert_eq!(s.tasks.len(), 1);
    assert_eq!(s.tasks[0].signal, Some(9), "{:?}", s.tasks[0]);
    assert!(
        s.memory.peak_bytes >= 190 << 20,
        "the peak reached the limit: {:?}",
        s.memory
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_running_step_has_an_incomplete_record_at_each_checkpoint() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    // The cluster's settings checkpoint every 5 s.
    let h = hog();
    let id = submit(
        "checkpoint",
        &format!("#!/bin/bash\n#SBATCH --gpu-track\n{h} --mb 50 --hold-ms 9000\n"),
    );
    let path = job_spool_dir(id).join(format!("{}.batch.json", node()));
    wait_started(id);
    let started = Instant::now();
    // The first record is written before the task starts; the checkpoints every 5 s, with the
    // 50 MB in them.
    let checkpoint = loop {
        let polled = Instant::now();
        if let Ok(text) = std::fs::read_to_string(&path) {
            let r = StepRecord::from_json(&text).unwrap();
            assert!(!r.complete, "{r:?}");
            assert!(r.step.end.is_none());
            if r.tasks
                .first()
                .is_some_and(|t| t.sampled_peak_rss_bytes >= 50_000_000)
            {
                break r;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no checkpoint");
        poll_pause(Duration::from_millis(200), polled.elapsed());
    };
    assert_eq!(job_field(id, "JobState").as_deref(), Some("RUNNING"));
    assert!(!checkpoint.complete);
    let recs = final_records(id, &["batch"]);
    assert!(recs["batch"].complete);
    assert!(recs["batch"].step.elapsed_seconds >= 9.0);
}

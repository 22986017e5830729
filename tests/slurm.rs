//! End-to-end tests of the SPANK plugin on a real Slurm: `slurmctld`, `slurmd` and `munge` from
//! Debian's packages, brought up by `slurm/local-cluster.sh up`, with jobs submitted by the
//! ordinary user `gtuser`. No part of Slurm is mocked; the GPUs are SIMULATED (spare device files
//! in gres.conf, the test fake NVML library behind them).
//!
//! They are `#[ignore]`d in a plain `cargo test` (they need root and the cluster); `tests/run-all.sh`
//! brings the cluster up and runs them with `--include-ignored`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{OnceLock, RwLock};
use std::time::{Duration, Instant};

use gpu_tracker::step::record::StepRecord;

const USER: &str = "gtuser";

/// Tests that rewrite the plugin's settings hold this for writing; the others for reading.
static SETTINGS: RwLock<()> = RwLock::new(());

fn state_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("GPU_TRACKER_CLUSTER_DIR")
            .unwrap_or_else(|_| "/var/tmp/gpu-tracker-cluster".into()),
    )
}

fn slurm_conf() -> PathBuf {
    state_dir().join("slurm.conf")
}

/// Checks once that the cluster answers and the plugin is installed; copies the test program
/// where the test user can run it.
fn cluster() -> &'static Path {
    static READY: OnceLock<PathBuf> = OnceLock::new();
    READY.get_or_init(|| {
        let ping = Command::new("scontrol")
            .arg("ping")
            .env("SLURM_CONF", slurm_conf())
            .output()
            .expect("scontrol not found: run slurm/local-cluster.sh up");
        assert!(
            String::from_utf8_lossy(&ping.stdout).contains("UP"),
            "slurmctld does not answer: run slurm/local-cluster.sh up"
        );
        let stack = std::fs::read_to_string(state_dir().join("plugstack.conf")).unwrap();
        assert!(
            stack.contains("gpu_tracker.so"),
            "the plugin is not installed: {stack}"
        );
        let bin = state_dir().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let hog = bin.join("hog");
        std::fs::copy(common::hog(), bin.join("hog.new")).unwrap();
        std::fs::rename(bin.join("hog.new"), &hog).unwrap();
        hog
    })
}

fn hog() -> String {
    cluster().display().to_string()
}

struct Job {
    id: u32,
    state: String,
    output: String,
}

fn job_field(id: u32, key: &str) -> Option<String> {
    let out = Command::new("scontrol")
        .args(["show", "job", "-o", &id.to_string()])
        .env("SLURM_CONF", slurm_conf())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")).map(str::to_string))
}

/// Submits `script` as the test user; returns the job id.
fn submit(name: &str, script: &str) -> u32 {
    cluster();
    let dir = state_dir().join("jobs").join(USER);
    let path = dir.join(format!("{name}.sh"));
    std::fs::write(&path, script).unwrap();
    let out = Command::new("runuser")
        .args(["-u", USER, "--", "sbatch", "--parsable", "-J", name, "-o"])
        .arg(dir.join(format!("{name}-%j.out")))
        .arg(&path)
        .env("SLURM_CONF", slurm_conf())
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sbatch failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Submits `script` as the test user, waits for the job to end, returns its state and output.
fn run_job(name: &str, script: &str) -> Job {
    let id = submit(name, script);
    let dir = state_dir().join("jobs").join(USER);
    let started = Instant::now();
    let state = loop {
        let st = job_field(id, "JobState").unwrap_or_default();
        if !matches!(
            st.as_str(),
            "PENDING" | "CONFIGURING" | "RUNNING" | "COMPLETING" | ""
        ) {
            break st;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "job {id} still {st}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = std::fs::read_to_string(dir.join(format!("{name}-{id}.out"))).unwrap_or_default();
    Job { id, state, output }
}

/// The job's records once the steps named are there and final (slurmstepd writes them in its
/// `exit`, which can come just after the job is reported ended).
fn final_records(id: u32, steps: &[&str]) -> BTreeMap<String, StepRecord> {
    let started = Instant::now();
    loop {
        let recs = records(id);
        let done = steps
            .iter()
            .all(|s| recs.get(*s).is_some_and(|r| r.complete));
        if done || started.elapsed() > Duration::from_secs(15) {
            return recs;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn records(id: u32) -> BTreeMap<String, StepRecord> {
    let dir = state_dir().join("spool/gpu-tracker").join(id.to_string());
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return BTreeMap::new();
    };
    rd.flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap();
            let rec = StepRecord::from_json(&text)
                .unwrap_or_else(|err| panic!("{}: {err}\n{text}", e.path().display()));
            (rec.step.id.clone(), rec)
        })
        .collect()
}

fn node() -> String {
    let conf = std::fs::read_to_string(slurm_conf()).unwrap();
    conf.lines()
        .find_map(|l| l.strip_prefix("NodeName="))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string()
}

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
            Some("v1"),
            "{:?}",
            r.memory
        );
        assert_eq!(r.memory.limit_bytes, Some(1 << 30), "--mem=1G");
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
        !state_dir()
            .join("spool/gpu-tracker")
            .join(plain.id.to_string())
            .exists(),
        "a job that did not ask leaves nothing in the spool"
    );
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
    // About 6 samples in 3 s at 0.5 s (1 s would give about 3).
    assert!(r.sampler.samples >= 5, "{:?}", r.sampler);
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_gpu_job_records_its_gpu_and_only_its_gpu() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    // SIMULATED GPUs: the fake NVML gives a process 1 GiB on GPU 0 (2 GiB on GPU 1) when its
    // command line holds SIMGPU<i>_HOLD. The job runs a holder for each GPU; only the allocated
    // one may appear in the record.
    let script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track=0.5 --gres=gpu:1\n\
         echo gpus=$SLURM_JOB_GPUS\n\
         {h} --hold-ms 2500 --marker SIMGPU0_HOLD &\n\
         {h} --hold-ms 2500 --marker SIMGPU1_HOLD &\n\
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
    let (uuid, mem) = if idx == 0 {
        ("GPU-00000000-5151-4d55-8000-000000000000", 1u64 << 30)
    } else {
        ("GPU-11111111-5151-4d55-8000-111111111111", 2u64 << 30)
    };
    assert_eq!(g.uuid, uuid);
    assert_eq!(g.slurm_index, Some(idx));
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

/// Restores the cluster's settings file when dropped.
struct Restore(PathBuf, String);

impl Drop for Restore {
    fn drop(&mut self) {
        std::fs::write(&self.0, &self.1).unwrap();
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_broken_settings_file_leaves_jobs_running_untracked_and_says_why() {
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    cluster();
    let conf = state_dir().join("gpu-tracker.toml");
    let good = std::fs::read_to_string(&conf).unwrap();
    let _restore = Restore(conf.clone(), good.clone());
    std::fs::write(&conf, format!("{good}\nspool_dri = \"/tmp\"\n")).unwrap();
    let log = state_dir().join("log/slurmd.log");
    let before = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let job = run_job(
        "broken-settings",
        "#!/bin/bash\n#SBATCH --gpu-track\nsrun echo step-ran\necho batch-ran\n",
    );
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    assert!(
        job.output.contains("step-ran") && job.output.contains("batch-ran"),
        "{}",
        job.output
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(records(job.id).is_empty());
    let text = std::fs::read(&log).unwrap();
    let new = String::from_utf8_lossy(&text[before as usize..]);
    let lines: Vec<&str> = new.lines().filter(|l| l.contains("gpu-tracker:")).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("settings not usable") && l.contains("spool_dri")),
        "slurmd's log says why: {lines:?}"
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
    let path = state_dir()
        .join("spool/gpu-tracker")
        .join(id.to_string())
        .join(format!("{}.batch.json", node()));
    let started = Instant::now();
    let checkpoint = loop {
        if let Ok(text) = std::fs::read_to_string(&path) {
            break StepRecord::from_json(&text).unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no checkpoint");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(!checkpoint.complete, "{checkpoint:?}");
    assert!(checkpoint.step.end.is_none());
    assert_eq!(job_field(id, "JobState").as_deref(), Some("RUNNING"));
    assert!(checkpoint.tasks[0].sampled_peak_rss_bytes >= 50_000_000);
    let recs = final_records(id, &["batch"]);
    assert!(recs["batch"].complete);
    assert!(recs["batch"].step.elapsed_seconds >= 9.0);
}

/// Runs `sh -c script` as `user`; returns whether it succeeded.
fn as_user_ok(user: &str, script: &str) -> bool {
    Command::new("runuser")
        .args(["-u", user, "--", "sh", "-c", script])
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn records_are_readable_by_their_user_only_and_writable_by_no_user() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let job = run_job("private", "#!/bin/bash\n#SBATCH --gpu-track\necho hi\n");
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let recs = final_records(job.id, &["batch"]);
    assert!(
        recs["batch"].sampler.notes.is_empty(),
        "{:?}",
        recs["batch"].sampler.notes
    );
    let dir = state_dir()
        .join("spool/gpu-tracker")
        .join(job.id.to_string());
    let file = dir.join(format!("{}.batch.json", node()));
    let f = file.display();
    let d = dir.display();
    assert!(
        as_user_ok(USER, &format!("grep -q gpu-tracker/step {f}")),
        "the job's user reads it"
    );
    assert!(
        as_user_ok(USER, &format!("ls {d} >/dev/null")),
        "and lists the job's directory"
    );
    assert!(
        !as_user_ok(USER, &format!("echo x >> {f}")),
        "but cannot change it"
    );
    assert!(
        !as_user_ok(USER, &format!("touch {d}/extra.json")),
        "or add files"
    );
    assert!(!as_user_ok(USER, &format!("rm -f {f}")) || file.exists());
    assert!(file.exists());
    assert!(
        !as_user_ok("gtuser2", &format!("cat {f}")),
        "another user cannot read it"
    );
    assert!(
        !as_user_ok("gtuser2", &format!("ls {d}")),
        "or list the job's directory"
    );
}

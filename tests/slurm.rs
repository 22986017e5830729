//! End-to-end tests of the SPANK plugin on a real Slurm: `slurmctld`, `slurmd` and `munge` from
//! Debian's packages, brought up by `slurm/local-cluster.sh up`, with jobs submitted by the
//! ordinary user `gtuser`. No part of Slurm is mocked; the GPUs are SIMULATED (spare device files
//! in gres.conf, the test fake NVML library behind them).
//!
//! They are `#[ignore]`d in a plain `cargo test` (they need root and the cluster); `tests/run-all.sh`
//! brings the cluster up and runs them with `--include-ignored`.

mod common;
// Faults, load and hostile input (issue 14): in tests/slurm/.
#[path = "slurm/faults.rs"]
mod faults;
#[path = "slurm/hostile.rs"]
mod hostile;

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
    submit_as(USER, name, script, &[])
}

/// Submits `script` as `user` with extra sbatch arguments; returns the job id. The output goes
/// to `<state>/jobs/<user>/<name>-<jobid>.out` unless `extra` names another.
fn submit_as(user: &str, name: &str, script: &str, extra: &[&str]) -> u32 {
    submit_with_env(user, name, script, extra, &[])
}

/// [`submit_as`] with variables set in sbatch's environment (exported to the job, as a user
/// would).
fn submit_with_env(
    user: &str,
    name: &str,
    script: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> u32 {
    cluster();
    let dir = state_dir().join("jobs").join(user);
    let path = dir.join(format!("{name}.sh"));
    std::fs::write(&path, script).unwrap();
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", user, "--", "env"]);
    cmd.args(env.iter().map(|(k, v)| format!("{k}={v}")));
    cmd.args(["sbatch", "--parsable", "-J", name]);
    if !extra.contains(&"-o") {
        cmd.arg("-o").arg(dir.join(format!("{name}-%j.out")));
    }
    let out = cmd
        .args(extra)
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
    wait_job(USER, name, id)
}

/// Job states before the job has started ("" while `scontrol` does not show it yet).
const QUEUED: [&str; 3] = ["PENDING", "CONFIGURING", ""];

/// Waits (at most 300 s) while job `id` is in one of `states`; returns the state it reached.
fn wait_while_in(id: u32, states: &[&str]) -> String {
    let started = Instant::now();
    loop {
        let st = job_field(id, "JobState").unwrap_or_default();
        if !states.contains(&st.as_str()) {
            return st;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "job {id} still {st}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits (as long as [`wait_job`] would) for job `id` to leave the queue: other tests' jobs
/// may hold the node's CPUs or memory. A test's bound on what the job does is counted from
/// here, not from its submission.
fn wait_started(id: u32) {
    wait_while_in(id, &QUEUED);
}

/// Waits for job `id` to end; returns its state and output.
fn wait_job(user: &str, name: &str, id: u32) -> Job {
    let dir = state_dir().join("jobs").join(user);
    let state = wait_while_in(id, &["PENDING", "CONFIGURING", "", "RUNNING", "COMPLETING"]);
    let output = std::fs::read_to_string(dir.join(format!("{name}-{id}.out"))).unwrap_or_default();
    Job { id, state, output }
}

/// The job's records once the steps named are there and final (slurmstepd writes them in its
/// `exit`, which can come just after the job is reported ended). Every final record of the job
/// must pass [`assert_consistent`].
fn final_records(id: u32, steps: &[&str]) -> BTreeMap<String, StepRecord> {
    let started = Instant::now();
    loop {
        let recs = records(id);
        let done = steps
            .iter()
            .all(|s| recs.get(*s).is_some_and(|r| r.complete));
        if done || started.elapsed() > Duration::from_secs(15) {
            assert_consistent(id, &all_records(id));
            return recs;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every record of job `id` in the cluster's spool, from every node.
fn all_records(id: u32) -> Vec<StepRecord> {
    let Ok(rd) = std::fs::read_dir(job_spool_dir(id)) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.ends_with(".json") && n != "instance.json"
        })
        .filter_map(|e| StepRecord::from_json(&std::fs::read_to_string(e.path()).ok()?).ok())
        .collect()
}

/// Slurm's account of job `id` (`sacct -P`, this job and its steps): step id (`batch`, `0`,
/// ...; the job itself as ``) → (nodes, tasks). Empty without accounting; waits up to 20 s for
/// the steps named to be there (slurmdbd hears of steps after they end).
fn sacct_steps(id: u32, steps: &[&str]) -> BTreeMap<String, (u32, u32)> {
    let conf = std::fs::read_to_string(slurm_conf()).unwrap_or_default();
    if !conf.contains("accounting_storage/slurmdbd") {
        return BTreeMap::new();
    }
    let started = Instant::now();
    loop {
        let out = Command::new("sacct")
            .args([
                "-n",
                "-P",
                "-j",
                &id.to_string(),
                "-o",
                "JobID,NNodes,NTasks",
            ])
            .env("SLURM_CONF", slurm_conf())
            .output()
            .unwrap();
        let got: BTreeMap<String, (u32, u32)> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                let step = f.first()?.strip_prefix(&id.to_string())?;
                let step = step.strip_prefix('.').unwrap_or(step).to_string();
                Some((
                    step,
                    (f.get(1)?.parse().ok()?, f.get(2)?.parse().unwrap_or(0)),
                ))
            })
            .collect();
        if steps.iter().all(|s| got.contains_key(*s)) || started.elapsed() > Duration::from_secs(20)
        {
            return got;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// What every final record must obey: a task's memory above its step's peak is explained in
/// the record; no task was seen with 0 threads; the counts are Slurm's (the job's nodes, node
/// list and tasks as `scontrol` has them; each step's nodes and tasks as `sacct` has them,
/// where the cluster keeps accounting; the batch step runs one task on one node).
fn assert_consistent(id: u32, recs: &[StepRecord]) {
    let job_nodes = job_field(id, "NumNodes").and_then(|n| n.parse::<u32>().ok());
    let node_list = job_field(id, "NodeList");
    let job_tasks = job_field(id, "NumTasks").and_then(|n| n.parse::<u32>().ok());
    let steps: Vec<&str> = recs
        .iter()
        .filter(|r| r.complete)
        .map(|r| r.step.id.as_str())
        .collect();
    let acct = sacct_steps(id, &steps);
    for r in recs.iter().filter(|r| r.complete) {
        let at = format!("job {id} step {} on {}", r.step.id, r.step.node);
        assert_eq!(r.job.id, id, "{at}");
        let m = &r.memory;
        for t in &r.tasks {
            assert!(
                t.peak_memory_bytes <= m.peak_bytes || m.peak_note.is_some(),
                "{at}: task {:?} peaks at {} above the step's {} with no word on why",
                t.global_id,
                t.peak_memory_bytes,
                m.peak_bytes
            );
            assert_ne!(t.max_threads, Some(0), "{at}: a task seen with no thread");
            assert_ne!(
                t.max_processes,
                Some(0),
                "{at}: a task seen with no process"
            );
        }
        assert!(
            m.sampled_peak_rss_bytes <= m.peak_bytes || m.peak_note.is_some(),
            "{at}: sampled {} above the peak {} with no word on why",
            m.sampled_peak_rss_bytes,
            m.peak_bytes
        );
        if let Some(job_peak) = m.job_peak_bytes {
            assert!(
                job_peak >= m.peak_bytes,
                "{at}: job cgroup {job_peak} below the step's"
            );
        }
        assert_eq!(
            r.tasks.len() as u32,
            r.step.local_tasks.unwrap_or(0),
            "{at}: tasks recorded against Slurm's local task count"
        );
        if r.step.kind == "batch" {
            assert_eq!(
                (r.step.nodes, r.step.total_tasks),
                (Some(1), Some(1)),
                "{at}"
            );
            // (scontrol forgets a job MinJobAge after it ended, or when its id was reset.)
            if job_nodes.is_some() {
                assert_eq!(r.job.nodes, job_nodes, "{at}: the job's nodes");
            }
            if node_list.as_ref().is_some_and(|l| !l.is_empty()) {
                assert_eq!(r.job.node_list, node_list, "{at}: the job's node list");
            }
            // Known where the job asked for a number of tasks (Slurm shows 1 per node else).
            if r.job.tasks.is_some() && job_tasks.is_some() {
                assert_eq!(r.job.tasks, job_tasks, "{at}: the job's tasks");
            }
        }
        if let Some(&(nodes, tasks)) = acct.get(&r.step.id) {
            assert_eq!(r.step.nodes, Some(nodes), "{at}: nodes, as sacct has them");
            assert_eq!(
                r.step.total_tasks,
                Some(tasks),
                "{at}: tasks, as sacct has them"
            );
        }
    }
}

/// The spool of the test cluster (`ClusterName=gputrack`): `<spool_dir>/<cluster>`.
fn cluster_spool() -> PathBuf {
    state_dir().join("spool/gpu-tracker/gputrack")
}

/// The directory of job `id`'s records.
fn job_spool_dir(id: u32) -> PathBuf {
    cluster_spool().join(id.to_string())
}

fn records(id: u32) -> BTreeMap<String, StepRecord> {
    let dir = job_spool_dir(id);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return BTreeMap::new();
    };
    rd.flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.ends_with(".json") && n != "instance.json"
        })
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

/// The cgroup interface of this machine as Slurm uses it: `v2` where /sys/fs/cgroup is the
/// unified hierarchy (the test guests of slurm/vm.sh), else `v1` (Debian 12's Slurm 22.05 here).
fn cgroup_version() -> &'static str {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
        && !Path::new("/sys/fs/cgroup/memory").is_dir()
    {
        "v2"
    } else {
        "v1"
    }
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
    let path = job_spool_dir(id).join(format!("{}.batch.json", node()));
    wait_started(id);
    let started = Instant::now();
    // The first record is written before the task starts; the checkpoints every 5 s, with the
    // 50 MB in them.
    let checkpoint = loop {
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
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(job_field(id, "JobState").as_deref(), Some("RUNNING"));
    assert!(!checkpoint.complete);
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
    // Nothing went wrong (notes may still say a slow guest's sample lengthened the interval).
    assert!(
        recs["batch"].sampler.faults.is_empty(),
        "{:?}",
        recs["batch"].sampler.notes
    );
    let dir = job_spool_dir(job.id);
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

// ---------------------------------------------------------------------------------------------
// The end-of-job summary and gpu-tracker-report.

const RULE: &str = "==============================================================================";

/// The job's output once its summary has been appended (the batch step writes it in its
/// `exit`, which can come just after the job is reported ended).
fn output_with_summary(user: &str, name: &str, id: u32) -> String {
    let path = state_dir()
        .join("jobs")
        .join(user)
        .join(format!("{name}-{id}.out"));
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if text.trim_end().ends_with(RULE) || started.elapsed() > Duration::from_secs(15) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The summary at the end of an output: from the rule that opens it.
fn summary_of(output: &str) -> &str {
    let open = output
        .find(&format!("{RULE}\ngpu-tracker summary"))
        .unwrap_or_else(|| panic!("no summary in the job's output:\n{output}"));
    &output[open..]
}

/// `gpu-tracker-report ARGS` run as `user` with the cluster's settings: (exit code, stdout,
/// stderr).
fn report_as(user: &str, args: &[&str]) -> (i32, String, String) {
    cluster();
    static COPIED: OnceLock<PathBuf> = OnceLock::new();
    let bin = COPIED.get_or_init(|| {
        let dst = state_dir().join("bin/gpu-tracker-report");
        std::fs::copy(
            env!("CARGO_BIN_EXE_gpu-tracker-report"),
            dst.with_extension("new"),
        )
        .unwrap();
        std::fs::rename(dst.with_extension("new"), &dst).unwrap();
        dst
    });
    let out = Command::new("runuser")
        .args(["-u", user, "--", "env"])
        .arg(format!("SLURM_CONF={}", slurm_conf().display()))
        .arg(format!(
            "GPU_TRACKER_CONFIG={}",
            state_dir().join("gpu-tracker.toml").display()
        ))
        .arg(bin)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_batch_jobs_output_ends_with_its_summary_and_the_report_shows_the_same() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    let dir = state_dir().join("jobs").join(USER);
    // The holder runs from a script so that the marker is on the holder's command line only
    // (the fake NVML gives 1 GiB on SIMULATED GPU 0 to each process whose command line has it).
    std::fs::write(
        dir.join("hold-gpu0.sh"),
        format!("#!/bin/bash\nexec {h} --mb 100 --hold-ms 1500 --marker SIMGPU0_HOLD\n"),
    )
    .unwrap();
    let script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track=0.5 --mem=2G --gres=gpu:2\n\
         srun -n1 bash {}\n\
         srun -n1 bash -c 'exit 3'\n\
         echo script-done\n",
        dir.join("hold-gpu0.sh").display()
    );
    // A job name with a terminal escape in it: the summary must not pass it on.
    let name = "summary\x1b[2Jjob";
    let id = submit_as(USER, "summary", &script, &["-J", name]);
    let job = wait_job(USER, "summary", id);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let output = output_with_summary(USER, "summary", id);
    assert!(output.contains("script-done"));
    let sum = summary_of(&output);
    assert!(
        sum.trim_end().ends_with(RULE),
        "the output ends with it: {sum}"
    );
    assert!(!output.contains('\x1b'), "no control character: {sum}");
    assert!(sum.contains("Job name:      summary?[2Jjob"), "{sum}");
    assert!(sum.contains(&format!("gpu-tracker summary of job {id}\n")));
    let uid = Command::new("id")
        .args(["-u", USER])
        .output()
        .unwrap()
        .stdout;
    let uid = String::from_utf8_lossy(&uid).trim().to_string();
    assert!(
        sum.contains(&format!("User:          gtuser (uid {uid})")),
        "{sum}"
    );
    assert!(sum.contains("3 step record(s), all final"), "{sum}");
    assert!(
        sum.contains("of 2.00 GiB requested (")
            && sum.contains("[job cgroup, page cache included]"),
        "the job's own peak, all steps together: {sum}"
    );
    // Both GPUs, with UUID and model; GPU 0 held 1 GiB by the job's holder, GPU 1 idle.
    assert!(
        sum.contains("SIMULATED GPU 0 (test fake) (GPU-00000000-5151-4d55-8000-000000000000)"),
        "{sum}"
    );
    assert!(
        sum.contains(
            "memory: 1.00 GiB by the job's processes, 1.25 GiB in use on the device (of 16.00 GiB)"
        ),
        "{sum}"
    );
    assert!(sum.contains("utilization: mean 37%, max 37%"), "{sum}");
    assert!(sum.contains("utilization: mean 0%, max 0%"), "{sum}");
    // Per step: the failing task with its exit code.
    let step1 = sum
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap();
    assert!(step1.contains("task 0 exit code 3"), "{step1}");
    // Advice: the idle GPU by UUID, a smaller --mem (the job peaked near 100 MB of 2 GiB).
    assert!(
        sum.contains("GPU 1 on ")
            && sum.contains("(GPU-11111111-5151-4d55-8000-111111111111) was allocated but idle"),
        "{sum}"
    );
    assert!(sum.contains("--gres=gpu:1 per node"), "{sum}");
    assert!(sum.contains("for example --mem=256M"), "{sum}");

    // The report, as the job's user: the same summary, exit 0.
    let (code, text, err) = report_as(USER, &[&id.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(text, sum, "the report prints what the job's output got");
    // Units and per-task rows.
    let (code, text, _) = report_as(
        USER,
        &[
            &id.to_string(),
            "--ru",
            "megabytes",
            "--tu",
            "seconds",
            "--tasks",
        ],
    );
    assert_eq!(code, 0);
    assert!(text.contains(" MB of 2147.484 MB requested"), "{text}");
    assert!(text.contains(" seconds"), "{text}");
    assert!(text.contains("    task 0     pid "), "{text}");
    // One step.
    let (code, text, _) = report_as(USER, &[&format!("{id}.1")]);
    assert_eq!(code, 0);
    assert!(
        text.contains(&format!("summary of job {id}, step 1")),
        "{text}"
    );
    assert!(text.contains("1 step record(s)"), "{text}");
    assert!(
        text.contains("[largest step"),
        "the step's own peak, not the job's: {text}"
    );
    // JSON: one document with the summary and every record.
    let (code, json, _) = report_as(USER, &[&id.to_string(), "--format", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["schema"], "gpu-tracker/job");
    assert_eq!(v["schema_version"], gpu_tracker::report::JOB_SCHEMA_VERSION);
    assert_eq!(v["summary"]["job_id"], id);
    assert_eq!(v["records"].as_array().unwrap().len(), 3);
    assert_eq!(v["problems"].as_array().unwrap().len(), 0);
    let codes: Vec<&str> = v["summary"]["advice"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["code"].as_str().unwrap())
        .collect();
    assert!(
        codes.contains(&"gpu-idle") && codes.contains(&"memory-over-requested"),
        "{codes:?}"
    );
    assert_eq!(v["summary"]["gpus"][0]["job_peak_bytes"], 1u64 << 30);

    // Another user sees nothing of it: a distinct exit code and no figures.
    let (code, text, err) = report_as("gtuser2", &[&id.to_string()]);
    assert_eq!(code, 8, "{text}{err}");
    assert!(
        text.is_empty() && err.contains("not readable by you"),
        "{text}{err}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn an_oom_job_and_a_job_that_used_its_request_get_the_advice_they_should() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    let id = submit(
        "oom-summary",
        &format!("#!/bin/bash\n#SBATCH --gpu-track --mem=200M\nsrun {h} --mb 400 --hold-ms 500\n"),
    );
    wait_job(USER, "oom-summary", id);
    let output = output_with_summary(USER, "oom-summary", id);
    let sum = summary_of(&output);
    let oom = sum
        .lines()
        .find(|l| l.starts_with("OOM kills:"))
        .unwrap_or_else(|| panic!("{sum}"));
    assert!(
        oom.contains("step 0 on ") && oom.contains("(limit 200.0 MiB)"),
        "{oom}"
    );
    assert!(
        sum.contains("Step 0 on ") && sum.contains("was killed for memory"),
        "{sum}"
    );
    assert!(sum.contains("of its 200 MiB limit"), "{sum}");
    assert!(sum.contains("for example --mem=512M"), "{sum}");
    assert!(
        !sum.contains("Request less"),
        "no smaller request after an OOM kill: {sum}"
    );
    assert!(sum.contains("task 0 killed by SIGKILL"), "{sum}");

    // A job that used what it asked for: no advice.
    let id = submit(
        "fits",
        &format!("#!/bin/bash\n#SBATCH --gpu-track --mem=300M\n{h} --mb 200 --hold-ms 300\n"),
    );
    wait_job(USER, "fits", id);
    let output = output_with_summary(USER, "fits", id);
    let sum = summary_of(&output);
    assert!(
        sum.contains("Advice:        none; the job used what it asked for."),
        "{sum}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn array_tasks_have_their_own_summaries_and_are_found_by_array_id() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    let first = submit_as(
        USER,
        "array",
        &format!(
            "#!/bin/bash\n#SBATCH --gpu-track --array=1-2\n{h} --mb $((SLURM_ARRAY_TASK_ID * 50)) --hold-ms 300\n"
        ),
        &[
            "-o",
            &state_dir()
                .join("jobs")
                .join(USER)
                .join("array-%A_%a.out")
                .display()
                .to_string(),
        ],
    );
    // The array's id is its first job's; each task has a job id of its own.
    for task in [1u32, 2] {
        let spec = format!("{first}_{task}");
        let started = Instant::now();
        let path = state_dir()
            .join("jobs")
            .join(USER)
            .join(format!("array-{spec}.out"));
        let output = loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.trim_end().ends_with(RULE) {
                break text;
            }
            // From the submission: the task may wait for the node as long as wait_job allows.
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "{spec}: {text}"
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        let sum = summary_of(&output);
        assert!(sum.contains(&format!("(array {spec})")), "{sum}");
        let (code, text, err) = report_as(USER, &[&spec, "--format", "json"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["summary"]["array_job_id"], first);
        assert_eq!(v["summary"]["array_task_id"], task);
        let peak = v["records"][0]["tasks"][0]["peak_memory_bytes"]
            .as_u64()
            .unwrap();
        let want = 50_000_000 * u64::from(task);
        assert!((want..want + 30_000_000).contains(&peak), "{spec}: {peak}");
    }
    let (code, _, err) = report_as(USER, &[&format!("{first}_7")]);
    assert_eq!(code, 3, "no task 7: {err}");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn the_admin_listing_shows_every_users_jobs_to_root_and_only_their_own_to_a_user() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let script = "#!/bin/bash\n#SBATCH --gpu-track --mem=2G\nsleep 1\n";
    let mine = submit_as(USER, "listing", script, &[]);
    let theirs = submit_as("gtuser2", "listing", script, &[]);
    wait_job(USER, "listing", mine);
    wait_job("gtuser2", "listing", theirs);
    final_records(mine, &["batch"]);
    final_records(theirs, &["batch"]);
    let line = |text: &str, id: u32| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
            .map(str::to_string)
    };
    let (code, all, err) = report_as("root", &["--all", "--since", "1h"]);
    assert_eq!(code, 0, "{err}");
    assert!(all.starts_with("JOBID"), "{all}");
    let l = line(&all, mine).unwrap_or_else(|| panic!("{all}"));
    assert!(
        l.contains(" gtuser ") && l.contains("/2.00G") && l.contains("memory-over-requested"),
        "{l}"
    );
    assert!(line(&all, theirs).unwrap().contains(" gtuser2 "), "{all}");
    let (_, by_user, _) = report_as("root", &["--user", "gtuser2", "--since", "1h"]);
    assert!(
        line(&by_user, theirs).is_some() && line(&by_user, mine).is_none(),
        "{by_user}"
    );
    // A user lists only their own jobs, whatever they ask for.
    let (code, own, _) = report_as(USER, &["--all", "--since", "1h"]);
    assert_eq!(code, 0);
    assert!(
        line(&own, mine).is_some() && line(&own, theirs).is_none(),
        "{own}"
    );
    let (_, other, _) = report_as(USER, &["--user", "gtuser2"]);
    assert!(line(&other, theirs).is_none(), "{other}");
    // --since in the future hides them.
    let (_, none, _) = report_as("root", &["--all", "--since", "2999-01-01"]);
    assert_eq!(none.lines().count(), 1, "{none}");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn the_report_gives_each_problem_its_own_exit_code_and_still_shows_what_it_can() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    // Unknown to Slurm and to the spool.
    let (code, _, err) = report_as(USER, &["3999999"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("unknown job 3999999"), "{err}");
    let (code, _, _) = report_as(USER, &["12x"]);
    assert_eq!(code, 2);
    // Known to Slurm, not tracked.
    let plain = run_job("not-tracked", "#!/bin/bash\necho plain\n");
    let (code, _, err) = report_as(USER, &[&plain.id.to_string()]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(&format!(
            "job {}: no gpu-tracker records of it in ",
            plain.id
        )) && err.contains("Check that it was submitted with --gpu-track"),
        "{err}"
    );
    // Pending (held): not started, which is not "not tracked".
    let held = submit_as(
        USER,
        "held",
        "#!/bin/bash\n#SBATCH --gpu-track\ntrue\n",
        &["-H"],
    );
    let (code, _, err) = report_as(USER, &[&held.to_string()]);
    let cancelled = Command::new("runuser")
        .args(["-u", USER, "--", "scancel", &held.to_string()])
        .env("SLURM_CONF", slurm_conf())
        .status()
        .unwrap();
    assert!(cancelled.success());
    assert_eq!(code, 9, "{err}");
    assert!(
        err.contains(&format!(
            "job {held} has not started yet (PENDING, JobHeldUser)"
        )),
        "{err}"
    );
    // A running step: its checkpoint is shown, marked incomplete.
    let h = hog();
    let running = submit(
        "running",
        &format!("#!/bin/bash\n#SBATCH --gpu-track\n{h} --mb 30 --hold-ms 6000\n"),
    );
    let submitted = Instant::now();
    let mut began: Option<Instant> = None;
    let (code, text, _) = loop {
        let r = report_as(USER, &[&running.to_string()]);
        let state = job_field(running, "JobState").unwrap_or_default();
        if began.is_none() && !QUEUED.contains(&state.as_str()) {
            began = Some(Instant::now());
        }
        // Before the first record: not started while the job waits for the node (other tests'
        // jobs may hold it), briefly untracked until slurmstepd's plugin makes the job's
        // directory, then 5 with no record yet.
        if r.0 == 5 && r.1.is_empty() {
            assert!(r.2.contains("no record is written yet"), "{r:?}");
        } else if r.0 == 9 {
            assert!(r.2.contains("has not started yet"), "{r:?}");
        } else if r.0 != 4 {
            break r;
        }
        match began {
            Some(b) => assert!(b.elapsed() < Duration::from_secs(30), "{state}: {r:?}"),
            None => assert!(
                submitted.elapsed() < Duration::from_secs(300),
                "{state}: {r:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(code, 5, "{text}");
    assert!(
        text.contains("INCOMPLETE: still running or killed before its final record: batch"),
        "{text}"
    );
    wait_job(USER, "running", running);
    final_records(running, &["batch"]);
    assert_eq!(report_as(USER, &[&running.to_string()]).0, 0);
    // A corrupt record and one from a newer gpu-tracker (put there by root): the good one is
    // still shown; the exit code names the worse problem.
    let dir = job_spool_dir(running);
    let good = std::fs::read_to_string(dir.join(format!("{}.batch.json", node()))).unwrap();
    std::fs::write(dir.join("othernode.batch.json"), &good[..good.len() / 2]).unwrap();
    let (code, text, err) = report_as("root", &[&running.to_string()]);
    assert_eq!(code, 6, "{err}");
    assert!(
        text.contains("gpu-tracker summary of job")
            && text.contains("othernode.batch.json: corrupt record"),
        "{text}"
    );
    let mut future: serde_json::Value = serde_json::from_str(&good).unwrap();
    future["schema_version"] = 99.into();
    std::fs::write(dir.join("future.batch.json"), future.to_string()).unwrap();
    let (code, text, _) = report_as("root", &[&running.to_string(), "--format", "json"]);
    assert_eq!(code, 7);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["records"].as_array().unwrap().len(), 1);
    let kinds: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["future_version", "corrupt"]);
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_job_whose_output_is_a_symlink_to_a_root_file_leaves_that_file_untouched() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let victim = state_dir().join("root-owned-victim");
    std::fs::write(&victim, "root's data\n").unwrap();
    let before = std::fs::metadata(&victim).unwrap();
    let dir = state_dir().join("jobs").join(USER);
    let link = dir.join("victim-link.out");
    let _ = std::fs::remove_file(&link);
    assert!(as_user_ok(
        USER,
        &format!("ln -s {} {}", victim.display(), link.display())
    ));
    let link_arg = link.display().to_string();
    let id = submit_as(
        USER,
        "symlinked",
        "#!/bin/bash\n#SBATCH --gpu-track\necho job-ran\n",
        &["-o", &link_arg],
    );
    wait_job(USER, "symlinked", id);
    std::thread::sleep(Duration::from_secs(2));
    let after = std::fs::metadata(&victim).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's data\n");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (after.uid(), after.mode(), after.mtime()),
        (before.uid(), before.mode(), before.mtime())
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn an_interactive_srun_prints_its_summary_on_the_terminal() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    cluster();
    let out = Command::new("runuser")
        .args([
            "-u",
            USER,
            "--",
            "srun",
            "--gpu-track",
            "--mem=500M",
            &h,
            "--mb",
            "80",
            "--hold-ms",
            "300",
        ])
        .env("SLURM_CONF", slurm_conf())
        .current_dir(state_dir().join("jobs").join(USER))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let sum = summary_of(&err);
    assert!(sum.contains(", step 0\n"), "{sum}");
    assert!(sum.contains("1 step record(s), all final"), "{sum}");
    assert!(sum.contains("of 500.0 MiB requested"), "{sum}");
    // An untracked srun prints nothing of ours.
    let out = Command::new("runuser")
        .args(["-u", USER, "--", "srun", "true"])
        .env("SLURM_CONF", slurm_conf())
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("gpu-tracker"));
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn purge_removes_old_records_only_and_only_for_root() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    cluster();
    let spool = cluster_spool();
    let old = spool.join("3999998");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(old.join("vm.batch.json"), "{}").unwrap();
    for p in [old.join("vm.batch.json"), old.clone()] {
        assert!(
            Command::new("touch")
                .args(["-h", "-d", "2020-01-01"])
                .arg(&p)
                .status()
                .unwrap()
                .success()
        );
    }
    let recent = run_job("recent", "#!/bin/bash\n#SBATCH --gpu-track\ntrue\n");
    final_records(recent.id, &["batch"]);
    // A user cannot purge.
    let (code, _, err) = report_as(USER, &["--purge", "--older-than", "30"]);
    assert_eq!(code, 1, "{err}");
    assert!(old.exists());
    let (code, out, err) = report_as("root", &["--purge", "--older-than", "30"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!old.exists(), "{out}");
    assert!(spool.join(recent.id.to_string()).exists());
}

// ---------------------------------------------------------------------------------------------
// Security: nothing a job controls may steer what root records, shows or waits for.

/// The line of job `id` in root's listing of the last hour.
fn root_listing_line(id: u32) -> String {
    let (_, list, _) = report_as("root", &["--all", "--since", "1h"]);
    list.lines()
        .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("job {id} not in root's listing:\n{list}"))
}

fn scontrol(args: &[&str]) {
    let st = Command::new("scontrol")
        .args(args)
        .env("SLURM_CONF", slurm_conf())
        .status()
        .unwrap();
    assert!(st.success(), "scontrol {args:?}");
}

/// Copies directory `from` to `to` as root (modes and ACLs kept), then rewrites the job id in
/// every record and instance file there: what the spool holds when a job id comes round again.
fn plant_as_job(from: &Path, to: &Path, id: u32) {
    if to.exists() {
        return;
    }
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
    for e in std::fs::read_dir(to).unwrap().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        if let Some(j) = v.pointer_mut("/job/id") {
            *j = id.into();
        }
        if let Some(j) = v.pointer_mut("/job_id") {
            *j = id.into();
        }
        // Written in place: the file keeps its owner, mode and ACL.
        std::fs::write(e.path(), serde_json::to_string_pretty(&v).unwrap()).unwrap();
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_reused_job_id_never_shows_the_earlier_jobs_records() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    // gtuser2's job: a step whose command line holds a password.
    let secret = "password=hunter2-for-gtuser2";
    let a_script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track --mem=1G\nsrun --gpu-track sh -c 'sleep 1' {secret}\n"
    );
    let a = submit_as("gtuser2", "reuse-a", &a_script, &[]);
    assert_eq!(wait_job("gtuser2", "reuse-a", a).state, "COMPLETED");
    let a_recs = final_records(a, &["batch", "0"]);
    assert!(
        a_recs["0"]
            .step
            .command
            .as_deref()
            .unwrap_or("")
            .contains(secret)
    );
    let a_dir = job_spool_dir(a);
    // gtuser's job gets an id; before it runs, the spool is made to hold gtuser2's records
    // under that id, as after MaxJobId wraps or slurmctld's state is reset: in this cluster's
    // directory, and where a plugin of another cluster sharing the spool put them.
    let b = submit_as(
        USER,
        "reuse-b",
        "#!/bin/bash\n#SBATCH --gpu-track --mem=1G\nsleep 1\n",
        &["--hold"],
    );
    let spool = state_dir().join("spool/gpu-tracker");
    plant_as_job(&a_dir, &job_spool_dir(b), b);
    plant_as_job(&a_dir, &spool.join(b.to_string()), b);
    let other = spool.join("othercluster").join(b.to_string());
    plant_as_job(&a_dir, &other, b);
    // Another cluster's record of ITS job b, by the same user.
    let mut theirs = final_records(b, &[])
        .into_values()
        .next()
        .unwrap_or_else(|| {
            StepRecord::from_json(
                &std::fs::read_to_string(other.join(format!("{}.batch.json", node()))).unwrap(),
            )
            .unwrap()
        });
    theirs.step.node = "othernode".into();
    theirs.job.uid = Command::new("id")
        .args(["-u", USER])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().parse().unwrap())
        .unwrap();
    std::fs::write(
        spool.join(b.to_string()).join("othernode.batch.json"),
        theirs.to_json(),
    )
    .unwrap();
    std::fs::write(other.join("othernode.batch.json"), theirs.to_json()).unwrap();
    scontrol(&["release", &b.to_string()]);
    let job = wait_job(USER, "reuse-b", b);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let recs = final_records(b, &["batch"]);
    let out = output_with_summary(USER, "reuse-b", b);
    let summary = summary_of(&out);
    assert!(!summary.contains("hunter2"), "{summary}");
    assert!(!summary.contains("othernode"), "{summary}");
    // Only gtuser's own batch step is this job's.
    assert_eq!(recs.keys().collect::<Vec<_>>(), ["batch"], "{recs:?}");
    assert_eq!(recs["batch"].job.user, USER);
    for who in [USER, "root"] {
        let (code, text, err) = report_as(who, &[&b.to_string()]);
        assert_eq!(code, 0, "{who}: {text}{err}");
        assert!(
            !text.contains("hunter2") && !text.contains("othernode"),
            "{who}: {text}"
        );
        let (_, json, _) = report_as(who, &[&b.to_string(), "--format", "json"]);
        assert!(
            !json.contains("hunter2") && !json.contains("gtuser2"),
            "{who}: {json}"
        );
    }
    let line = root_listing_line(b);
    assert!(
        line.contains(" gtuser ") && !line.contains("gtuser2"),
        "{line}"
    );
    // The earlier records were moved aside for the admin: root only.
    let stale = cluster_spool().join(".stale");
    let moved: Vec<PathBuf> = std::fs::read_dir(&stale)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{b}-"))
        })
        .collect();
    assert_eq!(moved.len(), 1, "{moved:?}");
    let kept = std::fs::read_dir(&moved[0]).unwrap().count();
    assert!(
        kept >= 3,
        "the earlier job's records are kept for the admin"
    );
    for user in [USER, "gtuser2"] {
        assert!(
            !as_user_ok(user, &format!("ls {}", moved[0].display())),
            "{user}"
        );
    }
    // The other cluster's directory is left as it was.
    assert!(other.join("othernode.batch.json").exists());
    assert!(other.join(format!("{}.0.json", node())).exists());
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_jobs_environment_cannot_choose_its_node_user_or_gpus() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let long_list = (0..700)
        .map(|i| format!("{i}-{}", i + 900))
        .collect::<Vec<_>>()
        .join(",");
    assert!(long_list.len() >= 4096);
    let script = "#!/bin/bash\n#SBATCH --gpu-track --mem=1G\n\
                  export SLURM_JOB_GPUS=1 SLURM_STEP_GPUS=0,1\n\
                  srun --gpu-track sh -c 'sleep 1'\n";
    let id = submit_with_env(
        USER,
        "forged",
        script,
        &["-J", "forged\u{202e}gnp.exe"],
        &[
            ("SLURMD_NODENAME", "evil\u{1b}]2;owned\u{7}\u{1b}[31m"),
            ("SLURM_JOB_USER", "gtuser2"),
            ("USER", "gtuser2"),
            ("SLURM_JOB_GPUS", "1"),
            ("SLURM_STEP_GPUS", &long_list),
        ],
    );
    let job = wait_job(USER, "forged", id);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let recs = final_records(id, &["batch", "0"]);
    let mut names: Vec<String> = std::fs::read_dir(job_spool_dir(id))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let n = node();
    let mut expected = [
        "instance.json".to_string(),
        format!("{n}.0.json"),
        format!("{n}.batch.json"),
    ];
    expected.sort();
    assert_eq!(names, expected);
    for (step, r) in &recs {
        assert_eq!(r.step.node, n, "{step}");
        assert_eq!(r.job.user, USER, "{step}");
        assert!(
            r.step.alloc_gpus.is_empty(),
            "{step}: {:?}",
            r.step.alloc_gpus
        );
        assert!(
            r.gpus.is_empty(),
            "{step}: tracked a GPU the job was never given"
        );
    }
    let out = output_with_summary(USER, "forged", id);
    let summary = summary_of(&out);
    for (who, text) in [
        ("summary", summary.to_string()),
        ("root's report", report_as("root", &[&id.to_string()]).1),
        (
            "root's listing",
            report_as("root", &["--all", "--since", "1h"]).1,
        ),
        (
            "root's json",
            report_as("root", &[&id.to_string(), "-f", "json"]).1,
        ),
    ] {
        assert!(
            !text
                .chars()
                .any(|c| c == '\u{1b}' || c == '\u{7}' || c == '\u{202e}'),
            "{who} prints a terminal control: {text:?}"
        );
    }
    let line = root_listing_line(id);
    assert!(
        line.contains(" gtuser ") && !line.contains("gtuser2"),
        "{line}"
    );
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

/// Runs a tracked job while `change` holds (undone by the returned guard's drop) and returns
/// it with the slurmd log lines of the plugin written meanwhile.
fn job_with_untrusted(name: &str, change: impl FnOnce()) -> (Job, Vec<String>) {
    let log = state_dir().join("log/slurmd.log");
    let before = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    change();
    let job = run_job(
        name,
        "#!/bin/bash\n#SBATCH --gpu-track\nsrun echo step-ran\necho batch-ran\n",
    );
    std::thread::sleep(Duration::from_secs(1));
    let text = std::fs::read(&log).unwrap();
    let lines = String::from_utf8_lossy(&text[before as usize..])
        .lines()
        .filter(|l| l.contains("gpu-tracker:"))
        .map(str::to_string)
        .collect();
    (job, lines)
}

struct Mode(PathBuf, u32);

impl Drop for Mode {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(self.1)).unwrap();
    }
}

fn mode_of(p: &Path) -> Mode {
    use std::os::unix::fs::PermissionsExt;
    Mode(
        p.to_path_buf(),
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777,
    )
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn settings_a_user_could_write_are_refused_and_the_job_runs_untracked() {
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    cluster();
    let conf = state_dir().join("gpu-tracker.toml");
    let good = std::fs::read_to_string(&conf).unwrap();
    let _restore = Restore(conf.clone(), good.clone());
    let check = |what: &str, job: &Job, lines: &[String]| {
        assert_eq!(job.state, "COMPLETED", "{what}: {}", job.output);
        assert!(
            job.output.contains("step-ran") && job.output.contains("batch-ran"),
            "{what}: {}",
            job.output
        );
        assert!(records(job.id).is_empty(), "{what}: tracked anyway");
        assert!(
            lines.iter().any(|l| l.contains("not trusted")),
            "{what}: slurmd's log says why: {lines:?}"
        );
    };
    // 1. The settings file is group-writable.
    {
        let _m = mode_of(&conf);
        let (job, lines) = job_with_untrusted("untrusted-conf", || chmod(&conf, 0o664));
        check("group-writable settings", &job, &lines);
    }
    // 2. The NVIDIA library it names is the user's file.
    let lib = state_dir()
        .join("jobs")
        .join(USER)
        .join("libnvidia-ml.so.1");
    std::fs::copy(common::fake_nvml(), &lib).unwrap();
    let uid: u32 = String::from_utf8_lossy(
        &Command::new("id")
            .args(["-u", USER])
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .parse()
    .unwrap();
    std::os::unix::fs::chown(&lib, Some(uid), None).unwrap();
    std::fs::write(
        &conf,
        good.lines()
            .map(|l| {
                if l.starts_with("nvml_library") {
                    format!("nvml_library = \"{}\"", lib.display())
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let (job, lines) = job_with_untrusted("untrusted-nvml", || {});
    check("a user's NVIDIA library", &job, &lines);
    std::fs::write(&conf, &good).unwrap();
    // 3. A directory above the spool is world-writable (without the sticky bit).
    let spool_parent = state_dir().join("spool");
    {
        let _m = mode_of(&spool_parent);
        let (job, lines) = job_with_untrusted("untrusted-spool", || chmod(&spool_parent, 0o777));
        check("a world-writable directory above the spool", &job, &lines);
    }
    // Put right, jobs are tracked again.
    let job = run_job("trusted-again", "#!/bin/bash\n#SBATCH --gpu-track\ntrue\n");
    assert!(!final_records(job.id, &["batch"]).is_empty());
}

/// A mounted `tests/hangfs.py` (a FUSE passthrough whose writes hang or take 0 bytes on
/// demand); unmounted, with any held write released, on drop.
struct HangFs {
    mnt: PathBuf,
    control: PathBuf,
    child: std::process::Child,
}

impl HangFs {
    fn mount() -> HangFs {
        use std::os::unix::fs::PermissionsExt;
        let base = state_dir().join(format!("hangfs-{}", std::process::id()));
        let (backing, mnt, control) =
            (base.join("backing"), base.join("mnt"), base.join("control"));
        for d in [&backing, &mnt, &control] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::set_permissions(&backing, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hangfs.py");
        let child = Command::new("/usr/bin/python3")
            .arg(script)
            .arg("--control")
            .args([&control, &backing, &mnt])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("python3 tests/hangfs.py (apt-get install python3-pyfuse3 fuse3)");
        let started = Instant::now();
        while !std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .contains(&mnt.display().to_string())
        {
            assert!(
                // Python and trio start slowly in an emulated guest under load.
                started.elapsed() < Duration::from_secs(120),
                "hangfs did not mount"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        HangFs {
            mnt,
            control,
            child,
        }
    }
}

impl Drop for HangFs {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.control.join("hang"));
        let _ = std::fs::remove_file(self.control.join("zero"));
        std::thread::sleep(Duration::from_millis(500));
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn an_output_file_that_stops_answering_does_not_hold_the_job() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    cluster();
    let fs = HangFs::mount();
    for mode in ["hang", "zero"] {
        let out = fs.mnt.join(format!("{mode}-%j.out"));
        let id = submit_as(
            USER,
            &format!("stuck-{mode}"),
            "#!/bin/bash\n#SBATCH --gpu-track\necho started\nsleep 3\n",
            &["-o", &out.display().to_string()],
        );
        let file = fs.mnt.join(format!("{mode}-{id}.out"));
        wait_started(id);
        let started = Instant::now();
        while !std::fs::read_to_string(&file)
            .unwrap_or_default()
            .contains("started")
        {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "job {id} never wrote"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // The job's own output is written; from now on the file stops answering.
        std::fs::write(fs.control.join(mode), "").unwrap();
        let ended = Instant::now();
        let state = loop {
            let st = job_field(id, "JobState").unwrap_or_default();
            if !matches!(st.as_str(), "PENDING" | "RUNNING" | "COMPLETING" | "") {
                break st;
            }
            assert!(
                ended.elapsed() < Duration::from_secs(60),
                "{mode}: job {id} still {st} a minute after its output stopped answering"
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(state, "COMPLETED", "{mode}");
        let recs = final_records(id, &["batch"]);
        assert!(
            recs["batch"].complete,
            "{mode}: the record is written all the same"
        );
        let notes = &recs["batch"].sampler.notes;
        assert!(
            notes
                .iter()
                .any(|n| n.contains("fuse") && n.contains("no summary")),
            "{mode}: the record says why there is no summary: {notes:?}"
        );
        std::fs::remove_file(fs.control.join(mode)).unwrap();
    }
}

/// The simulated GPUs' fake NVML in a directory of its own with `fake-nvml-scenario.json`
/// beside it (the cluster's scenario plus `extra` keys, and `device_file` per device when
/// `files`), named by the settings until drop. Returns the guard and the directory.
struct NvmlCopy(#[allow(dead_code)] Restore, PathBuf);

fn nvml_copy(tag: &str, extra: serde_json::Value, files: bool) -> NvmlCopy {
    nvml_copy_edited(tag, files, |scenario| {
        for (k, v) in extra.as_object().unwrap() {
            scenario[k] = v.clone();
        }
    })
}

/// [`nvml_copy`] with the scenario changed by `edit`.
fn nvml_copy_edited(tag: &str, files: bool, edit: impl FnOnce(&mut serde_json::Value)) -> NvmlCopy {
    let dir = state_dir().join("lib").join(format!("nvml-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        state_dir().join("lib/simulated-nvml/libnvidia-ml.so.1"),
        dir.join("libnvidia-ml.so.1"),
    )
    .unwrap();
    let mut scenario: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(state_dir().join("simulated-gpus.json")).unwrap(),
    )
    .unwrap();
    if files {
        std::fs::write(dir.join("nvidiactl"), "").unwrap();
        scenario["control_file"] = dir.join("nvidiactl").display().to_string().into();
        for d in scenario["devices"].as_array_mut().unwrap() {
            let f = dir.join(format!("nvidia{}", d["minor"]));
            std::fs::write(&f, "").unwrap();
            d["device_file"] = f.display().to_string().into();
        }
    }
    edit(&mut scenario);
    std::fs::write(
        dir.join("fake-nvml-scenario.json"),
        serde_json::to_string_pretty(&scenario).unwrap(),
    )
    .unwrap();
    let conf = state_dir().join("gpu-tracker.toml");
    let good = std::fs::read_to_string(&conf).unwrap();
    let lib = dir.join("libnvidia-ml.so.1");
    let text: Vec<String> = good
        .lines()
        .map(|l| {
            if l.starts_with("nvml_library") {
                format!("nvml_library = \"{}\"", lib.display())
            } else {
                l.to_string()
            }
        })
        .collect();
    std::fs::write(&conf, text.join("\n") + "\n").unwrap();
    NvmlCopy(Restore(conf, good), dir)
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn no_task_inherits_a_descriptor_of_nvml() {
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    cluster();
    let nvml = nvml_copy("fds", serde_json::json!({}), true);
    let d = nvml.1.display().to_string();
    let home = state_dir().join("jobs").join(USER);
    let te = home.join("te.sh");
    std::fs::write(
        &te,
        "#!/bin/bash\nls -l /proc/$$/fd > \"$(dirname \"$0\")/fd-te-$SLURM_JOB_ID-$SLURM_STEP_ID-$$\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&te, std::fs::Permissions::from_mode(0o755)).unwrap();
    let h = home.display();
    let script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track=0.2 --gres=gpu:1 -n 2\n\
         ls -l /proc/$$/fd > {h}/fd-batch-$SLURM_JOB_ID\n\
         srun -n 2 --gres=gpu:1 --task-epilog={te} bash -c \
         'ls -l /proc/$$/fd > {h}/fd-task-$SLURM_JOB_ID-$SLURM_PROCID; sleep 2'\n",
        te = te.display()
    );
    let job = run_job("nvml-fds", &script);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let recs = final_records(job.id, &["batch", "0"]);
    let mut listings = 0;
    for e in std::fs::read_dir(&home).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("fd-") && name.contains(&format!("-{}", job.id)) {
            listings += 1;
            let text = std::fs::read_to_string(e.path()).unwrap();
            assert!(
                !text.contains(&d),
                "{name} holds NVML's descriptors:\n{text}"
            );
        }
    }
    assert!(
        listings >= 5,
        "batch, 2 tasks and 2 task epilogs list their descriptors"
    );
    for step in ["batch", "0"] {
        let s = &recs[step].sampler;
        assert_eq!(s.gpu_source, "nvml", "{step}: {s:?}");
        assert_eq!(s.nvml_opened.as_deref(), Some("after_last_task"), "{step}");
        assert!(
            s.nvml_cloexec_descriptors.unwrap_or(0) >= 3,
            "{step}: {s:?}"
        );
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_hung_nvml_or_slow_samples_never_hold_the_step() {
    let _g = SETTINGS.write().unwrap_or_else(|p| p.into_inner());
    cluster();
    let h = hog();
    // 1. NVML hangs 1.5 s into the step, for 30 s (finite, so an unfixed plugin recovers).
    {
        let _nvml = nvml_copy(
            "hang",
            serde_json::json!({"hang": {"call": "nvmlDeviceGetUtilizationRates",
                                        "after_ms": 1500, "for_ms": 30000}}),
            false,
        );
        let started = Instant::now();
        let job = run_job(
            "nvml-hang",
            &format!(
                "#!/bin/bash\n#SBATCH --gpu-track=0.2 --gres=gpu:1\n\
                 srun --gpu-track=0.2 --gres=gpu:1 {h} --hold-ms 4000\n"
            ),
        );
        let took = started.elapsed();
        assert_eq!(job.state, "COMPLETED", "{}", job.output);
        assert!(
            took < Duration::from_secs(25),
            "the job took {took:?}: a step waited for a hung NVML call"
        );
        let recs = final_records(job.id, &["batch", "0"]);
        for step in ["batch", "0"] {
            let r = &recs[step];
            assert!(r.complete, "{step}");
            assert_eq!(r.sampler.stopped, Some(false), "{step}: {:?}", r.sampler);
            assert!(
                r.sampler
                    .notes
                    .iter()
                    .any(|n| n.contains("did not stop within 5 s")),
                "{step}: {:?}",
                r.sampler.notes
            );
        }
        let out = output_with_summary(USER, "nvml-hang", job.id);
        summary_of(&out);
    }
    // 2. Every GPU reading takes 30 ms at a 0.1 s interval: the sampler backs off.
    {
        let _nvml = nvml_copy(
            "slow",
            serde_json::json!({"delays_ms": {"nvmlDeviceGetUtilizationRates": 30}}),
            false,
        );
        let job = run_job(
            "nvml-slow",
            &format!("#!/bin/bash\n#SBATCH --gpu-track=0.1 --gres=gpu:1\n{h} --hold-ms 5000\n"),
        );
        assert_eq!(job.state, "COMPLETED", "{}", job.output);
        let s = &final_records(job.id, &["batch"])["batch"].sampler;
        assert_eq!(s.interval_seconds, 0.1);
        assert!(s.interval_max_seconds.unwrap_or(0.0) >= 0.4, "{s:?}");
        assert!(
            s.overruns.unwrap_or(0) >= 2 && s.backoffs.unwrap_or(0) >= 2,
            "{s:?}"
        );
        assert!(s.samples <= 25, "{s:?}");
        assert!(s.notes.iter().any(|n| n.contains("lengthened")), "{s:?}");
    }
}

/// The second node of the test cluster (`slurm/local-cluster.sh up --nodes 3
/// --node-local-spool`, as tests/run-all.sh brings it up): it shares the first node's spool.
fn shared_spool_node() -> String {
    format!("{}-2", node())
}

/// The third node: it keeps its records in a node-local spool (its own mount namespace, where
/// another directory is mounted over the spool), as on a cluster whose nodes have their own
/// disks.
fn local_spool_node() -> String {
    format!("{}-3", node())
}

/// Fails with how to bring them up unless the cluster has the nodes the multi-node tests use.
fn need_nodes() {
    cluster();
    let out = Command::new("sinfo")
        .args(["-h", "-N", "-p", "multi", "-o", "%N %T"])
        .env("SLURM_CONF", slurm_conf())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    for n in [node(), shared_spool_node(), local_spool_node()] {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().next() == Some(n.as_str())),
            "node {n} is not in partition multi ({text}): bring the cluster up with \
             slurm/local-cluster.sh up --nodes 3 --node-local-spool --accounting"
        );
    }
}

/// `CMD` run as root in node `node`'s mount namespace (slurm/local-cluster.sh on-node).
fn on_node(node: &str, cmd: &[&str]) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm/local-cluster.sh");
    let out = Command::new(script)
        .args(["on-node", node, "--"])
        .args(cmd)
        .env("GPU_TRACKER_CLUSTER_DIR", state_dir())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// One busy task and one sleeping task, on two nodes: `srun -n2 --ntasks-per-node=1`.
const UNEVEN_STEP: &str = "srun -n2 --ntasks-per-node=1 bash -c 'if [ \"$SLURM_PROCID\" = 0 ]; \
     then end=$((SECONDS + 4)); while [ $SECONDS -lt $end ]; do :; done; else sleep 4; fi'";

/// Runs a tracked batch job named `name` on nodes `n1` and `n2` whose one step is
/// [`UNEVEN_STEP`]; returns its id once it completed and its records are final.
fn run_uneven_job(name: &str, n1: &str, n2: &str) -> u32 {
    let script = format!("#!/bin/bash\n#SBATCH --gpu-track=0.2\n{UNEVEN_STEP}\n");
    let nodes = format!("{n1},{n2}");
    let id = submit_as(
        USER,
        name,
        &script,
        &["-p", "multi", "-N2", "-n2", "-w", &nodes],
    );
    let job = wait_job(USER, name, id);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    final_records(id, &["batch", "0"]);
    id
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_two_node_job_shows_each_node_and_names_the_one_far_below() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    need_nodes();
    let (n1, n2) = (node(), shared_spool_node());
    let id = run_uneven_job("two-nodes", &n1, &n2);
    let mut files: Vec<String> = std::fs::read_dir(job_spool_dir(id))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut want = vec![
        "instance.json".to_string(),
        format!("{n1}.0.json"),
        format!("{n1}.batch.json"),
        format!("{n2}.0.json"),
    ];
    want.sort();
    assert_eq!(files, want, "a record per node and step");
    let recs = all_records(id);
    assert!(recs.iter().all(|r| r.complete && r.job.nodes == Some(2)));

    let output = output_with_summary(USER, "two-nodes", id);
    let sum = summary_of(&output);
    assert!(
        sum.contains(&format!("Nodes:         {n1},{n2}\n")),
        "{sum}"
    );
    assert!(sum.contains("Per node:"), "{sum}");
    let row = |n: &str| {
        sum.lines()
            .find(|l| l.split_whitespace().next() == Some(n))
            .unwrap_or_else(|| panic!("no row for {n}: {sum}"))
            .to_string()
    };
    let eff = |n: &str| -> f64 {
        row(n)
            .split_whitespace()
            .nth(1)
            .unwrap()
            .trim_end_matches('%')
            .parse()
            .unwrap()
    };
    assert!(eff(&n1) >= 30.0, "the busy node: {}", row(&n1));
    assert!(eff(&n2) <= 5.0, "the sleeping node: {}", row(&n2));
    assert!(row("total").contains('%'), "{sum}");
    assert!(
        sum.contains(&format!("Imbalance:\n  * node {n2}: CPU efficiency ")),
        "{sum}"
    );
    assert!(
        sum.contains(&format!("  * step 0 task 1 on {n2}: ")),
        "{sum}"
    );
    assert!(
        !sum.contains("Not seen:"),
        "both nodes share the spool: {sum}"
    );
    // The report says the same, later, to the job's user.
    let (code, text, err) = report_as(USER, &[&id.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains(&row(&n2)), "{text}");
    assert!(
        text.contains(&format!("node {n2}: CPU efficiency")),
        "{text}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_node_with_its_own_spool_is_named_in_the_summary_with_how_to_read_it() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    need_nodes();
    let (n1, n3) = (node(), local_spool_node());
    let script = "#!/bin/bash\n#SBATCH --gpu-track=0.2\nsrun -n2 --ntasks-per-node=1 sleep 1\n";
    let nodes = format!("{n1},{n3}");
    let id = submit_as(
        USER,
        "local-spool",
        script,
        &["-p", "multi", "-N2", "-n2", "-w", &nodes],
    );
    let job = wait_job(USER, "local-spool", id);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    final_records(id, &["batch", "0"]);
    let output = output_with_summary(USER, "local-spool", id);
    let sum = summary_of(&output);
    assert!(
        sum.contains(&format!("Nodes:         {n1} (1 of 2 nodes)\n")),
        "{sum}"
    );
    assert!(
        sum.contains(&format!(
            "Not seen:      {n3}: no record of it in this spool."
        )),
        "{sum}"
    );
    assert!(
        sum.contains(&format!("\"gpu-tracker-report {id}\" on {n3}")),
        "{sum}"
    );
    // The host's spool has no record of the node; the node's own has its step.
    let here = job_spool_dir(id).join(format!("{n3}.0.json"));
    assert!(!here.exists());
    let dir = job_spool_dir(id);
    let (ok, listing) = on_node(&n3, &["ls", dir.to_str().unwrap()]);
    assert!(ok, "{listing}");
    assert!(listing.contains(&format!("{n3}.0.json")), "{listing}");
    assert!(!listing.contains(&format!("{n1}.batch.json")), "{listing}");
}

/// The job's `AdminComment` in Slurm's database, once it is there (EpilogSlurmctld stores it
/// after the job ends).
fn stored_comment(id: u32) -> String {
    let started = Instant::now();
    loop {
        let out = Command::new("sacct")
            .args([
                "-n",
                "-X",
                "-P",
                "-j",
                &id.to_string(),
                "-o",
                "AdminComment",
            ])
            .env("SLURM_CONF", slurm_conf())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if text.starts_with("gpu-tracker:") || started.elapsed() > Duration::from_secs(90) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_job_whose_spool_records_are_gone_is_read_from_slurms_database() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    need_nodes();
    let (n1, n2) = (node(), shared_spool_node());
    let id = run_uneven_job("from-db", &n1, &n2);
    let comment = stored_comment(id);
    assert!(
        comment.starts_with("gpu-tracker:1:{"),
        "AdminComment: {comment:?}"
    );
    assert!(comment.len() <= 4000, "{} bytes", comment.len());

    // The spool loses the job (a purge, a node-local disk out of reach, a lost disk).
    std::fs::remove_dir_all(job_spool_dir(id)).unwrap();
    let (code, text, err) = report_as(USER, &[&id.to_string()]);
    assert_eq!(code, 0, "{text}{err}");
    assert!(
        text.contains(&format!("gpu-tracker summary of job {id}\n")),
        "{text}"
    );
    assert!(text.contains("Source:        Slurm's database"), "{text}");
    assert!(text.contains("User:          gtuser (uid "), "{text}");
    assert!(text.contains("Job name:      from-db"), "{text}");
    for n in [&n1, &n2] {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().next() == Some(n.as_str())),
            "a row for {n}: {text}"
        );
    }
    assert!(
        text.contains(&format!("node {n2}: CPU efficiency")),
        "{text}"
    );
    let (code, json, err) = report_as(USER, &[&id.to_string(), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["summary"]["per_node"].as_array().map(Vec::len), Some(2));
    assert!(
        doc["summary"]["source"]
            .as_str()
            .unwrap()
            .contains("Slurm's database")
    );
    // Slurm's rules decide who reads it: the cluster hides jobs from other users.
    let (code, text, _) = report_as("gtuser2", &[&id.to_string()]);
    assert_ne!(code, 0, "{text}");
    assert!(!text.contains("Per node"), "{text}");
}

/// `gpu-tracker`, copied where the test user's jobs can run it (for `gpu-tracker mark`).
fn tracker_bin() -> PathBuf {
    static COPIED: OnceLock<PathBuf> = OnceLock::new();
    COPIED
        .get_or_init(|| {
            let dst = state_dir().join("bin/gpu-tracker");
            std::fs::copy(env!("CARGO_BIN_EXE_gpu-tracker"), dst.with_extension("new")).unwrap();
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
    // stretches the job, so GPU 0 never idles again and the test holds at any speed.)
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
        serde_json::json!({"devices": scenario["devices"]}),
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
    let script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track=0.5 --gres=gpu:2 --mem=200M\n\
         echo mark=$GPU_TRACKER_MARK\n\
         {gt} mark load\nsleep 3\n\
         {gt} mark train\nsrun {h} --mb 130 --hold-ms 3500 --marker SIMGPU0_HOLD\n\
         {gt} mark save\nsleep 2\n"
    );
    let job = run_job("story", &script);
    drop(nvml);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
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
    let phases = v["summary"]["phases"].as_array().unwrap();
    let peak = |i: usize| phases[i]["memory_peak_bytes"].as_u64().unwrap();
    assert_eq!(phases.len(), 3, "{phases:?}");
    assert!(peak(1) >= 120 << 20, "{phases:?}");
    assert!(peak(0) < 100 << 20 && peak(2) < 100 << 20, "{phases:?}");
    // Slurm's GPU 0 (the fake gives the marked process 1 GiB on it) works in train only.
    let gpu0 = |i: usize| {
        phases[i]["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["index"] == 0)
            .cloned()
            .unwrap()
    };
    // (A phase's figures are as precise as half a bucket: the fake counts srun's own command
    // line, which names the marker, at once, and on a slow guest the sample taken at the mark
    // can fall in load's last bucket; so load is compared, not bounded.)
    let gmem = |i: usize| gpu0(i)["memory_peak_bytes"].as_u64().unwrap();
    assert!(gmem(1) >= 1 << 30 && gmem(1) > gmem(0), "{phases:?}");
    let util = |i: usize| gpu0(i)["utilization_mean_percent"].as_f64().unwrap();
    // (Each step opens its own fake NVML, whose times count from its own start: the train
    // step sees GPU 0 idle for its first 3 s, which lowers the phase's mean; and on a slow
    // guest GPU 0 may start working before load ends.)
    assert!(util(1) >= 30.0 && util(1) > util(0), "{phases:?}");
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

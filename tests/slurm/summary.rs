//! The end-of-job summary: at the end of a batch job's output (and the same from
//! `gpu-tracker-report`, in text and JSON), its advice after an OOM kill or none, one for each
//! task of an array, and on the terminal of an interactive `srun`.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_batch_jobs_output_ends_with_its_summary_and_the_report_shows_the_same() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    let dir = state_dir().join("jobs").join(USER);
    // The holder runs from a script so that the marker is on the holder's command line only
    // (the fake NVML gives 1 GiB on SIMULATED GPU 0 to each process whose command line has it,
    // and the device its 37 % while one that also says SIMGPU_COMPUTE is on it). It holds until
    // the checkpoints show it (step 0's memory, the batch step's 37 %), and the script goes on
    // past its steps until the batch step has read GPU 0 idle again: a loaded guest once opened
    // the batch step's NVML 4.2 s into the job, after a holder of 1.5 s had ended, and the
    // batch step, whose mean the summary shows, read 0 % throughout.
    let held = Release::new("summary-held");
    let idle = Release::new("summary-idle");
    std::fs::write(
        dir.join("hold-gpu0.sh"),
        format!(
            "#!/bin/bash\n\
             {h} --mb 100 --hold-ms 600000 --marker SIMGPU0_HOLD_SIMGPU_COMPUTE &\n\
             holder=$!\n{}exit 0\n",
            held.wait_then_kill_holder(120, "1")
        ),
    )
    .unwrap();
    let script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track=0.5 --mem=2G --gres=gpu:2\n\
         srun -n1 bash {}\n\
         srun -n1 bash -c 'exit 3'\n\
         {}\
         echo script-done\n",
        dir.join("hold-gpu0.sh").display(),
        idle.wait(120, "1")
    );
    // A job name with a terminal escape in it: the summary must not pass it on.
    let name = "summary\x1b[2Jjob";
    let id = submit_as(USER, "summary", &script, &["-J", name]);
    wait_started(id);
    let gpu0 = |step: &str| {
        crate::records::record_now(id, step).and_then(|r| {
            r.gpus
                .into_iter()
                .find(|g| g.uuid == "GPU-00000000-5151-4d55-8000-000000000000")
        })
    };
    wait_until(
        "checkpoints with the holder on GPU 0",
        Duration::from_secs(120),
        || {
            gpu0("0").is_some_and(|g| g.peak_step_memory_bytes == 1 << 30)
                && gpu0("batch")
                    .is_some_and(|g| g.max_utilization_percent.is_some_and(|m| m >= 37.0))
        },
    );
    held.release();
    wait_until(
        "a checkpoint of the batch step with GPU 0 idle again",
        Duration::from_secs(120),
        || gpu0("batch").is_some_and(|g| g.mean_utilization_percent.is_some_and(|m| m < 36.0)),
    );
    idle.release();
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
    // GPU 0 busy while the holder computed, idle before and after it (the mean is the batch
    // step's, which outlived it); GPU 1, which nothing ran on, idle throughout.
    let util: Vec<&str> = sum
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("utilization: mean "))
        .collect();
    assert_eq!(util.len(), 2, "{sum}");
    let mean0: f64 = util[0].split('%').next().unwrap().parse().unwrap();
    assert!(
        util[0].contains(", max 37%") && mean0 > 0.0 && mean0 < 37.0,
        "{sum}"
    );
    assert!(util[1].starts_with("0%, max 0%"), "{sum}");
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
    // The classes behind that advice: a GPU no process of the job touched, far too much --mem,
    // and the failed task.
    let classes = sum
        .lines()
        .find(|l| l.starts_with("Classes:"))
        .unwrap_or_else(|| panic!("no Classes line:\n{sum}"));
    for tag in ["gpu-unused", "mem-over", "failed"] {
        assert!(classes.contains(tag), "{tag} not in {classes:?}");
    }

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

/// A job whose batch script and its `srun` step hold one GPU at once: each step sees the other's
/// holder on it, and knows it for the job's own by the job's cgroup. The summary does not call
/// the GPU shared, and counts both holders as the job's GPU memory.
#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_gpu_held_by_the_batch_script_and_its_srun_step_is_not_shared_with_others() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    let dir = state_dir().join("jobs").join(USER);
    // A holder of the job's GPU for $1 ms, its marker built at run time (SIMGPU<i>_HOLD: 1 GiB
    // on Slurm's GPU 0, 2 GiB on GPU 1) so that no other command line holds it.
    let holder = dir.join("hold-own-gpu.sh");
    std::fs::write(
        &holder,
        format!(
            "#!/bin/bash\ni=${{SLURM_STEP_GPUS:-$SLURM_JOB_GPUS}}\n\
             exec {h} --mb 20 --hold-ms $1 --marker SIMGPU${{i}}_HOLD\n"
        ),
    )
    .unwrap();
    // Each step's holder holds until both steps' checkpoints show both holders: fixed holds (9 s
    // and 5 s) could end on a busy guest before each step's sampler had read the GPU while both
    // were on it.
    let release = Release::new("both-hold");
    let until = dir.join("hold-own-gpu-until.sh");
    std::fs::write(
        &until,
        format!(
            "#!/bin/bash\nbash {} 600000 &\nholder=$!\n{}exit 0\n",
            holder.display(),
            release.wait_then_kill_holder(120, "1")
        ),
    )
    .unwrap();
    let until = until.display();
    let script = format!(
        "#!/bin/bash\n#SBATCH --gpu-track=0.5 --gres=gpu:1\n\
         echo gpus=$SLURM_JOB_GPUS\n\
         bash {until} &\n\
         sleep 1\n\
         srun -n1 bash {until}\n\
         wait\n"
    );
    let id = submit("both-hold", &script);
    wait_started(id);
    let both_seen = |step: &str| {
        crate::records::record_now(id, step).is_some_and(|r| {
            r.gpus.first().is_some_and(|g| {
                g.peak_step_memory_bytes > 0
                    && g.peak_job_memory_bytes == Some(2 * g.peak_step_memory_bytes)
                    && g.shared
                        .as_ref()
                        .is_some_and(|sh| sh.other_step_processes == Some(1))
            })
        })
    };
    wait_until(
        "both steps' checkpoints with both holders on the GPU",
        Duration::from_secs(120),
        || both_seen("batch") && both_seen("0"),
    );
    release.release();
    let job = wait_job(USER, "both-hold", id);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let idx: u32 = job
        .output
        .lines()
        .find_map(|l| l.strip_prefix("gpus="))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let per_holder: u64 = if idx == 0 { 1 << 30 } else { 2 << 30 };
    let recs = crate::records::final_records(job.id, &["batch", "0"]);
    for step in ["batch", "0"] {
        let g = &recs[step].gpus[0];
        assert_eq!(g.slurm_index, Some(idx), "{step}: {g:?}");
        assert_eq!(g.peak_step_memory_bytes, per_holder, "{step}: {g:?}");
        // Both holders at once, the job's own.
        assert_eq!(
            g.peak_job_memory_bytes,
            Some(2 * per_holder),
            "{step}: {g:?}"
        );
        // The step's record still says the device's figures are not its alone, and why.
        let sh = g.shared.as_ref().expect("the other step's holder");
        assert_eq!(sh.by, "other_processes", "{step}: {sh:?}");
        assert_eq!(sh.other_step_processes, Some(1), "{step}: {sh:?}");
        assert_eq!(sh.outside_job_processes, Some(0), "{step}: {sh:?}");
    }
    let out = output_with_summary(USER, "both-hold", job.id);
    let sum = summary_of(&out);
    assert!(
        !sum.contains("shared with"),
        "not shared with others:\n{sum}"
    );
    let mem = if idx == 0 { "2.00 GiB" } else { "4.00 GiB" };
    assert!(
        sum.contains(&format!("memory: {mem} by the job's processes")),
        "{sum}"
    );
    let (code, json, err) = report_as(USER, &[&job.id.to_string(), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let g = &v["summary"]["gpus"][0];
    assert!(g["shared"].is_null(), "{g}");
    assert_eq!(g["job_peak_bytes"], 2 * per_holder, "{g}");
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
    // The job's limit counts the batch step too, so the kernel may also kill there (seen once
    // on 26.05): step 0's line is looked for among the OOM lines, and the advice sizes from it.
    let oom = sum
        .lines()
        .find(|l| l.starts_with("OOM kills:     step 0 on "))
        .unwrap_or_else(|| panic!("{sum}"));
    assert!(oom.contains("(limit 200.0 MiB)"), "{oom}");
    // One figure, one wording: the OOM line and the advice both say 200.0 MiB.
    let advice = sum
        .lines()
        .find(|l| l.contains(" killed for memory:"))
        .unwrap_or_else(|| panic!("{sum}"));
    assert!(
        advice.starts_with("  * Step 0 on ") || advice.starts_with("  * Steps 0 and batch on "),
        "{advice}"
    );
    assert!(advice.contains("of its 200.0 MiB limit"), "{advice}");
    assert!(advice.contains("for example --mem=512M"), "{advice}");
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

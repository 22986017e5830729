//! `gpu-tracker-report` beyond one job's summary: the admin listing, an exit code for each
//! problem, purge, and an array summarised over its tasks.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::records::*;
use crate::support::*;

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
    // The user set no GPU_TRACKER_CONFIG (report_as passes SLURM_CONF only): the message says
    // which spool was read and that its settings were found through slurm.conf and the
    // plugin's line in plugstack.conf, as the plugin got them.
    let settings = state_dir().join("gpu-tracker.toml");
    let stack = plugin_line().file;
    for part in [
        format!("spool_dir of {}", settings.display()),
        format!("named by config= at {}:", stack.display()),
        format!("found through {} (SLURM_CONF)", slurm_conf().display()),
    ] {
        assert!(err.contains(&part), "{part:?} not in {err}");
    }
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
    // A running step: its checkpoint is shown, marked incomplete. It runs 6 s here, 30 s in
    // an emulated guest, where one report and one scontrol take seconds (6 s ended before a
    // poll saw it running, in CI).
    let h = hog();
    let hold = hold_ms(6_000, 30_000);
    let running = submit(
        "running",
        &format!("#!/bin/bash\n#SBATCH --gpu-track\n{h} --mb 30 --hold-ms {hold}\n"),
    );
    let submitted = Instant::now();
    let mut began: Option<Instant> = None;
    let (code, text, _) = loop {
        let polled = Instant::now();
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
            Some(b) => assert!(
                b.elapsed() < Duration::from_millis(hold + 24_000),
                "{state}: {r:?}"
            ),
            None => assert!(
                submitted.elapsed() < Duration::from_secs(300),
                "{state}: {r:?}"
            ),
        }
        poll_pause(Duration::from_millis(300), polled.elapsed());
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

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn an_array_id_summarises_its_tasks_and_sizes_the_next_submission() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    let h = hog();
    // Task i holds (i + 1) × 50 MB.
    let array = submit_as(
        USER,
        "arraysum",
        &format!(
            "#!/bin/bash\n#SBATCH --gpu-track --mem=1G --array=0-3\n{h} --mb $(( (SLURM_ARRAY_TASK_ID + 1) * 50 )) --hold-ms 300\n"
        ),
        &[],
    );
    let id = array.to_string();
    let started = Instant::now();
    let doc = loop {
        let polled = Instant::now();
        let (code, text, err) = report_as(USER, &[&id, "--format", "json"]);
        if code == 0 {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            if v["array"]["tasks_found"] == 4 && v["array"]["incomplete"] == 0 {
                break v;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{code}: {text} {err}"
        );
        poll_pause(Duration::from_millis(500), polled.elapsed());
    };
    assert_eq!(doc["schema"], "gpu-tracker/array");
    let a = &doc["array"];
    assert_eq!(a["completed"], 4, "{a}");
    for (i, t) in a["tasks"].as_array().unwrap().iter().enumerate() {
        assert_eq!(t["task_id"], i as u64);
        let peak = t["peak_memory_bytes"].as_u64().unwrap();
        let want = 50_000_000 * (i as u64 + 1);
        assert!(
            (want..want + 30_000_000).contains(&peak),
            "task {i}: {peak}"
        );
    }
    // At most 230 MB × 1.2: 256 MiB, or 512 MiB past it; no GPU asked, no --gres.
    let mem = a["right_size"]["mem"].as_str().unwrap();
    assert!(matches!(mem, "256M" | "512M"), "{a}");
    assert!(a["right_size"]["gres"].is_null(), "{a}");
    let (code, text, err) = report_as(USER, &[&id]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains(&format!("gpu-tracker summary of array {array} (4 task(s))"))
            && text.contains("4 found: 4 completed, 0 failed, 0 OOM-killed")
            && text.contains(&format!("Next time:     --mem={mem} --time=00:10:00")),
        "{text}"
    );
    // One task is still one task.
    let (code, text, _) = report_as(USER, &[&format!("{array}_2")]);
    assert_eq!(code, 0);
    assert!(text.contains(&format!("(array {array}_2)")), "{text}");
    assert!(!text.contains("summary of array"), "{text}");
    // Another user sees none of it; root sees it all.
    let (code, text, _) = report_as("gtuser2", &[&id]);
    assert_ne!(code, 0, "{text}");
    assert!(!text.contains("summary of array"), "{text}");
    let (code, text, _) = report_as("root", &[&id]);
    assert_eq!(code, 0);
    assert!(text.contains("4 found"), "{text}");
}

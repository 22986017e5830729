//! The records of a job in the cluster's spool, and the check every final record a test reads
//! passes against what Slurm says of the job ([`assert_consistent`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use gpu_tracker::step::record::StepRecord;

use crate::support::{job_field, node, poll_pause, slurm_conf, state_dir};

/// The spool of the test cluster (`ClusterName=gputrack`): `<spool_dir>/<cluster>`.
pub(crate) fn cluster_spool() -> PathBuf {
    state_dir().join("spool/gpu-tracker/gputrack")
}

/// The directory of job `id`'s records.
pub(crate) fn job_spool_dir(id: u32) -> PathBuf {
    cluster_spool().join(id.to_string())
}

/// The records of job `id` in the cluster's spool by step id, as they are now (a record that
/// does not parse fails the test).
pub(crate) fn records(id: u32) -> BTreeMap<String, StepRecord> {
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

/// Every record of job `id` in the cluster's spool, from every node.
pub(crate) fn all_records(id: u32) -> Vec<StepRecord> {
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

/// The record of `step` of job `id` as it is now (a checkpoint or the final one).
pub(crate) fn record_now(id: u32, step: &str) -> Option<StepRecord> {
    let text =
        std::fs::read_to_string(job_spool_dir(id).join(format!("{}.{step}.json", node()))).ok()?;
    StepRecord::from_json(&text).ok()
}

/// The job's records once the steps named are there and final (slurmstepd writes them in its
/// `exit`, which can come just after the job is reported ended). Every final record of the job
/// must pass [`assert_consistent`].
pub(crate) fn final_records(id: u32, steps: &[&str]) -> BTreeMap<String, StepRecord> {
    let started = Instant::now();
    loop {
        let polled = Instant::now();
        let recs = records(id);
        let done = steps
            .iter()
            .all(|s| recs.get(*s).is_some_and(|r| r.complete));
        if done || started.elapsed() > Duration::from_secs(15) {
            assert_consistent(id, &all_records(id));
            return recs;
        }
        poll_pause(Duration::from_millis(100), polled.elapsed());
    }
}

/// Slurm's account of job `id` (`sacct -P`, this job and its steps): step id (`batch`, `0`,
/// ...; the job itself as ``) → (nodes, tasks). Empty without accounting; waits up to 20 s for
/// the steps named to be there (slurmdbd hears of steps after they end).
pub(crate) fn sacct_steps(id: u32, steps: &[&str]) -> BTreeMap<String, (u32, u32)> {
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
pub(crate) fn assert_consistent(id: u32, recs: &[StepRecord]) {
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

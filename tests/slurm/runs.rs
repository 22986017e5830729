//! The run file the plugin's job prolog writes on each node of a job's run (slurm/RECORD.md):
//! written for a job tracked only in its srun steps, so a requeued job's runs keep their own
//! records; and, on 22.05, the time limit asked of the controller on the job's first node only.

use std::time::Duration;

use gpu_tracker::step::record::StepRecord;

use super::nodes::{local_spool_node, need_nodes, on_node};
use crate::records::{cluster_spool, job_spool_dir};
use crate::support::*;

/// A record file of job `id` in the shared spool, parsed.
fn record_file(id: u32, name: &str) -> StepRecord {
    let path = job_spool_dir(id).join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    StepRecord::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()))
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_job_tracked_by_srun_alone_keeps_each_runs_records_when_requeued() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    // No --gpu-track for the job: only its srun step asks. The first run waits to be requeued.
    let script = "#!/bin/bash\n#SBATCH --requeue\n\
         srun --gpu-track=0.5 bash -c 'echo run-${SLURM_RESTART_COUNT:-0}; \
         if [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then sleep 300; fi'\n\
         echo srun-requeue-done\n";
    let id = submit("runs-srun-requeue", script);
    wait_started(id);
    let first = format!("{}.0.json", node());
    let rec = job_spool_dir(id).join(&first);
    wait_until(
        "the first run's srun record",
        Duration::from_secs(60),
        || rec.exists(),
    );
    let requeued_at = chrono::Utc::now().timestamp();
    scontrol(&["requeue", &id.to_string()]);
    wait_until(
        "the job back in the queue",
        Duration::from_secs(120),
        || job_field(id, "JobState").as_deref() == Some("PENDING"),
    );
    // As in needed.rs: the new credential a second younger than the first's revocation.
    std::thread::sleep(Duration::from_secs(2));
    scontrol(&["update", &format!("jobid={id}"), "starttime=now"]);
    let job = wait_job(USER, "runs-srun-requeue", id);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    assert!(job.output.contains("srun-requeue-done"), "{}", job.output);
    // The job had a run file although it was not tracked at its level...
    let run_file = cluster_spool().join(format!(".runs/{id}.json"));
    assert!(run_file.exists(), "{}", run_file.display());
    // ...so each run's srun step has its own record: the first run's is still the first run's
    // (started before the requeue), and the second run's is beside it.
    let names: Vec<String> = std::fs::read_dir(job_spool_dir(id))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let run_text = std::fs::read_to_string(&run_file).unwrap_or_default();
    let why = format!("the spool holds {names:?}; the run file: {run_text}");
    let started = |r: &StepRecord| {
        chrono::DateTime::parse_from_rfc3339(&r.step.start)
            .unwrap_or_else(|e| panic!("{e}: {}", r.step.start))
            .timestamp()
    };
    let r1 = record_file(id, &first);
    assert_eq!(
        r1.job.run.as_ref().map(|r| r.restart_count),
        Some(0),
        "{why}"
    );
    assert!(
        started(&r1) <= requeued_at,
        "the first run's record was replaced: {why}"
    );
    let later: Vec<&String> = names
        .iter()
        .filter(|n| *n != &first && n.starts_with(&format!("{}.0.", node())))
        .collect();
    assert_eq!(later.len(), 1, "{why}");
    let r2 = record_file(id, later[0]);
    assert!(started(&r2) > requeued_at, "{why}");
    let second = format!("{}.0.run2.json", node());
    if later[0] == &second {
        // The run's prolog wrote its run file: the record says which run it was.
        assert_eq!(
            r2.job.run.as_ref().map(|r| r.restart_count),
            Some(1),
            "{why}"
        );
    } else {
        // Slurm 22.05's slurmd skips the prolog of a run that starts while it still remembers
        // the job's first (a quick requeue): the step, told its restart count by srun, refuses
        // the first run's file and is named as a step of unknown run, never as the first run.
        assert_eq!(cgroup_version(), "v1", "only 22.05 skips the prolog: {why}");
        assert!(later[0].contains(".run-"), "{why}");
        assert!(r2.job.run.is_none(), "{why}");
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn only_the_first_node_of_a_job_asks_the_controller_for_its_time_limit() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    need_nodes();
    // The first node shares this machine's spool; the other keeps its own: each node's run
    // file is its own prolog's.
    let other = local_spool_node();
    let nodes = format!("{},{other}", node());
    let script = "#!/bin/bash\n#SBATCH --gpu-track=0.5 -t 5\nsrun -N2 -n2 true\n";
    let id = submit_as(
        USER,
        "runs-two-nodes",
        script,
        &["-p", "multi", "-N2", "-n2", "-w", &nodes],
    );
    let job = wait_job(USER, "runs-two-nodes", id);
    assert_eq!(job.state, "COMPLETED", "{}", job.output);
    let path = cluster_spool().join(format!(".runs/{id}.json"));
    let here: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let (ok, text) = on_node(&other, &["cat", &path.to_string_lossy()]);
    assert!(ok, "{text}");
    let there: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(here["run"]["time_limit_seconds"], 300, "{here}");
    if cgroup_version() == "v2" {
        // 24.11 and 26.05: the credential has the end time on every node; no question.
        for v in [&here, &there] {
            assert_eq!(v["run"]["source"], "credential", "{v}");
            assert_eq!(v["run"]["time_limit_seconds"], 300, "{v}");
        }
    } else {
        // 22.05: the first node asked squeue; the other did not (its prolog environment has
        // SLURM_NODELIST, not SLURM_JOB_NODELIST).
        assert_eq!(here["run"]["source"], "squeue", "{here}");
        assert_eq!(there["run"]["source"], "credential", "{there}");
        assert!(
            there["run"]["time_limit_unknown"]
                .as_str()
                .is_some_and(|w| w.contains("first node only")),
            "{there}"
        );
    }
}

//! Jobs on two nodes of the three-node test cluster: a row per node and the one far below named,
//! a node with its own spool named in the summary, and a job whose spool records are gone read
//! back from Slurm's database.

use std::path::Path;
use std::process::Command;

use crate::records::*;
use crate::support::*;

/// The second node of the test cluster (`slurm/local-cluster.sh up --nodes 3
/// --node-local-spool`, as tests/run-all.sh brings it up): it shares the first node's spool.
fn shared_spool_node() -> String {
    format!("{}-2", node())
}

/// The third node: it keeps its records in a node-local spool (its own mount namespace, where
/// another directory is mounted over the spool), as on a cluster whose nodes have their own
/// disks.
pub(crate) fn local_spool_node() -> String {
    format!("{}-3", node())
}

/// Fails with how to bring them up unless the cluster has the nodes the multi-node tests use.
pub(crate) fn need_nodes() {
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
pub(crate) fn on_node(node: &str, cmd: &[&str]) -> (bool, String) {
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
    // The busy task spins 4 s of a job that lasts longer (start-up, the sleeping node's
    // task, the end); on a loaded 2-CPU guest it gets a share of a core: 22 % was seen.
    assert!(eff(&n1) >= 15.0, "the busy node: {}", row(&n1));
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

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up) and root: tests/run-all.sh"]
fn a_job_whose_spool_records_are_gone_is_read_from_slurms_database() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    need_nodes();
    let (n1, n2) = (node(), shared_spool_node());
    let id = run_uneven_job("from-db", &n1, &n2);
    let comment = stored_comment(id);
    assert!(is_summary(&comment), "AdminComment: {comment:?}");
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

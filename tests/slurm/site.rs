//! The site report (`gpu-tracker-report --by user|account|partition`) from Slurm's database:
//! as root and as a user, with a job the database has no summary of taken from the spool, and
//! again once the jobs' spool records are gone.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::records::*;
use crate::support::*;

/// An account of this test's own, so that the jobs other tests run at the same time stay out
/// of its row.
const ACCOUNT: &str = "gtsite";

fn sacctmgr(args: &[&str]) -> String {
    let out = Command::new("sacctmgr")
        .args(args)
        .env("SLURM_CONF", slurm_conf())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Puts both test users into [`ACCOUNT`] (once) and waits until slurmctld knows it.
fn account_for_both_users() {
    sacctmgr(&["-i", "add", "account", ACCOUNT, "Cluster=gputrack"]);
    sacctmgr(&[
        "-i",
        "add",
        "user",
        "gtuser,gtuser2",
        &format!("Account={ACCOUNT}"),
        "Cluster=gputrack",
    ]);
    wait_until(
        "slurmctld to know the test account",
        Duration::from_secs(60),
        || {
            let out = Command::new("scontrol")
                .args([
                    "show",
                    "assoc_mgr",
                    "flags=assoc",
                    &format!("accounts={ACCOUNT}"),
                ])
                .env("SLURM_CONF", slurm_conf())
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            text.contains("UserName=gtuser(") && text.contains("UserName=gtuser2(")
        },
    );
}

/// `--by GROUP -f json` over the test's period, as `user`.
fn site(user: &str, by: &str, since: &str) -> Value {
    let (code, out, err) = report_as(user, &["--by", by, "--since", since, "-f", "json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The row of `group`, if any.
fn row<'a>(report: &'a Value, group: &str) -> Option<&'a Value> {
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group"] == group)
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
#[ignore = "needs the local Slurm cluster with accounting (tests/run-all.sh) and root"]
fn the_site_report_groups_jobs_from_slurms_database_for_root_and_for_a_user() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    account_for_both_users();
    let since = (chrono::Local::now() - chrono::TimeDelta::seconds(5))
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    let acct = format!("--account={ACCOUNT}");
    // gtuser: two GPUs the job only slept on (both SIMULATED GPUs read idle, as real ones: no
    // process of the job on them, nothing computing) and far too much --mem; then a failing
    // task. Job a sleeps until a checkpoint shows both GPUs read: a GPU never read is not
    // judged, and on a loaded guest a fixed 2 s job could end before its first GPU reading.
    let read = Release::new("site-a");
    let a = submit_as(
        USER,
        "site-a",
        &format!(
            "#!/bin/bash\n#SBATCH --gpu-track --mem=2G --gres=gpu:2\n{}",
            read.wait(120, "1")
        ),
        &[&acct],
    );
    let b = submit_as(
        USER,
        "site-b",
        "#!/bin/bash\n#SBATCH --gpu-track --mem=1G\nexit 3\n",
        &[&acct],
    );
    // gtuser2: far too much --mem and --time.
    let c = submit_as(
        "gtuser2",
        "site-c",
        "#!/bin/bash\n#SBATCH --gpu-track --mem=2G --time=2:00:00\nsleep 1\n",
        &[&acct],
    );
    wait_until(
        "a checkpoint of job a with both GPUs read",
        std::time::Duration::from_secs(120),
        || {
            crate::records::record_now(a, "batch").is_some_and(|r| {
                r.gpus.len() == 2 && r.gpus.iter().all(|g| g.mean_utilization_percent.is_some())
            })
        },
    );
    read.release();
    assert_eq!(wait_job(USER, "site-a", a).state, "COMPLETED");
    assert_eq!(wait_job(USER, "site-b", b).state, "FAILED");
    assert_eq!(wait_job("gtuser2", "site-c", c).state, "COMPLETED");
    for id in [a, b, c] {
        wait_end_in_database(id);
        let stored = stored_comment(id);
        if !is_summary(&stored) {
            // What the EpilogSlurmctld said of it (the local cluster keeps its lines).
            let log = std::fs::read_to_string(state_dir().join("log/epilog-slurmctld.log"))
                .unwrap_or_default();
            let said: Vec<&str> = log
                .lines()
                .filter(|l| l.contains(&format!("job {id}")))
                .collect();
            panic!("job {id}: no summary stored ({stored:?}); the epilog said: {said:?}");
        }
        assert!(is_summary(&stored), "job {id}: {stored:?}");
    }

    // Root: every user's jobs; the test account's row holds exactly these three.
    let all = site("root", "account", &since);
    assert_eq!(all["schema"], "gpu-tracker/site-report");
    assert_eq!(all["scope"], "every user's jobs");
    assert!(n(&all["sacct_calls"]) >= 1);
    let g = row(&all, ACCOUNT).unwrap_or_else(|| panic!("{all:#}"));
    assert_eq!(n(&g["jobs"]), 3, "{g:#}");
    assert_eq!(n(&g["sources"]["database"]), 3, "{g:#}");
    assert_eq!(n(&g["failed_jobs"]), 1, "{g:#}");
    assert_eq!(n(&g["classes"]["gpu-unused"]), 1, "{g:#}");
    assert_eq!(n(&g["classes"]["mem-over"]), 2, "{g:#}");
    assert_eq!(n(&g["classes"]["failed"]), 1, "{g:#}");
    // Slurm's time limit, which only the database has: job c asked for 2 hours.
    assert_eq!(n(&g["classes"]["time-over"]), 1, "{g:#}");
    // Job a alone had GPUs: two, neither used.
    let gpu_h = g["gpu_hours"].as_f64().unwrap();
    let unused_h = g["gpu_hours_unused"].as_f64().unwrap();
    assert!(gpu_h > 0.0 && (gpu_h - unused_h).abs() < 1e-9, "{g:#}");
    assert!(g["gpu_hours_idle"].as_f64().unwrap() >= unused_h, "{g:#}");
    let req = g["memory_requested_gib_hours"].as_f64().unwrap();
    let used = g["memory_used_gib_hours"].as_f64().unwrap();
    assert!(req > 0.0 && used > 0.0 && used < req / 4.0, "{g:#}");
    let by_user = site("root", "user", &since);
    for u in [USER, "gtuser2"] {
        assert!(row(&by_user, u).is_some(), "no row of {u}: {by_user:#}");
    }
    let (code, text, _) = report_as("root", &["--by", "user", "--since", &since]);
    assert_eq!(code, 0);
    assert!(
        text.starts_with("gpu-tracker site report by user\n"),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("gtuser2 "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("mem-over"), "{line}");

    // A user: their own jobs only, whatever the database holds of others'.
    let own = site(USER, "user", &since);
    assert!(
        own["scope"].as_str().unwrap().starts_with("your own jobs"),
        "{own:#}"
    );
    assert!(
        row(&own, USER).is_some() && row(&own, "gtuser2").is_none(),
        "{own:#}"
    );
    let own = site(USER, "account", &since);
    assert_eq!(n(&row(&own, ACCOUNT).unwrap()["jobs"]), 2, "{own:#}");
    let (code, csv, _) = report_as(USER, &["--by", "partition", "--since", &since, "-f", "csv"]);
    assert_eq!(code, 0);
    assert!(
        csv.starts_with("partition,jobs,without_figures,gpu_hours,"),
        "{csv}"
    );

    // A job the database holds no summary of (another tool's comment): from the spool.
    sacctmgr(&[
        "-i",
        "modify",
        "job",
        "where",
        &format!("jobid={c}"),
        "set",
        "AdminComment=another-tool",
    ]);
    wait_until("the comment to change", Duration::from_secs(30), || {
        !is_summary(&stored_comment_now(c))
    });
    let mixed = site("root", "account", &since);
    let g = row(&mixed, ACCOUNT).unwrap();
    assert_eq!(
        (
            n(&g["jobs"]),
            n(&g["sources"]["database"]),
            n(&g["sources"]["spool"])
        ),
        (3, 2, 1),
        "{g:#}"
    );
    assert_eq!(
        n(&g["classes"]["mem-over"]),
        2,
        "the spool's job classed alike: {g:#}"
    );
    assert_eq!(n(&g["classes"]["time-over"]), 1, "{g:#}");

    // The spool loses the jobs: the database's summaries still give the same figures; the job
    // it has none of is counted without figures.
    for id in [a, b, c] {
        std::fs::remove_dir_all(job_spool_dir(id)).unwrap();
    }
    let gone = site("root", "account", &since);
    let g = row(&gone, ACCOUNT).unwrap();
    assert_eq!((n(&g["jobs"]), n(&g["without_figures"])), (2, 1), "{g:#}");
    assert_eq!(g["gpu_hours"].as_f64().unwrap(), gpu_h, "{g:#}");
    assert_eq!(n(&g["classes"]["gpu-unused"]), 1, "{g:#}");
    let own = site(USER, "user", &since);
    let mine = row(&own, USER).unwrap();
    assert!(
        n(&mine["sources"]["database"]) >= 2 && row(&own, "gtuser2").is_none(),
        "{own:#}"
    );
}

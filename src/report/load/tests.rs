//! Reading a job's records: problems named, unsafe entries refused, the bounds.

use super::*;
use crate::cgroup::fixture::TempTree;
use crate::report::{Summary, classes, end_of_job_text, job_ids, job_summary};
use crate::step::record::tests_support::record;
use std::fs;

#[test]
fn loads_records_and_names_every_problem() {
    let t = TempTree::new("load");
    let mut a = record("n1", "batch");
    a.job.id = 5;
    let mut b = record("n1", "0");
    b.job.id = 5;
    b.complete = false;
    t.write("5/n1.batch.json", &a.to_json())
        .write("5/n1.0.json", &b.to_json())
        .write(
            "5/n1.1.json",
            "{\"schema\": \"gpu-tracker/step\", \"schema_vers",
        )
        .write(
            "5/n1.2.json",
            &a.to_json().replace(
                &format!("\"schema_version\":{}", crate::step::record::SCHEMA_VERSION),
                "\"schema_version\":99",
            ),
        );
    let j = load_job(t.path(), 5).unwrap();
    assert_eq!(j.records.len(), 2);
    assert_eq!(j.records[0].step.id, "batch");
    assert!(
        j.problems
            .iter()
            .any(|p| matches!(p, Problem::Incomplete { file, .. } if file == "n1.0.json"))
    );
    assert!(
        j.problems
            .iter()
            .any(|p| matches!(p, Problem::Corrupt { file, .. } if file == "n1.1.json"))
    );
    assert!(
        j.problems
            .iter()
            .any(|p| matches!(p, Problem::FutureVersion { version: 99, .. }))
    );
    assert!(matches!(
        load_job(t.path(), 6),
        Err(LoadError::NoRecords(6, _))
    ));
    let only = j.only_step("0");
    assert_eq!(only.records.len(), 1);
    assert_eq!(only.problems.len(), 1);
    assert_eq!(job_ids(t.path()).unwrap(), vec![5]);
}

#[test]
fn unsafe_entries_are_refused_unread_and_the_rest_is_loaded() {
    use std::os::unix::fs::symlink;
    let t = TempTree::new("load-unsafe");
    let mut good = record("n1", "batch");
    good.job.id = 5;
    let mut other = record("elsewhere", "0");
    other.job.id = 5;
    t.write("5/n1.batch.json", &good.to_json())
        .write("outside/r.json", &other.to_json())
        .write("outside/linked.json", &other.to_json());
    let dir = t.path().join("5");
    symlink(t.path().join("outside/r.json"), dir.join("n1.0.json")).unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(dir.join("n1.1.json"))
            .status()
            .unwrap()
            .success()
    );
    fs::File::create(dir.join("n1.2.json"))
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    fs::hard_link(t.path().join("outside/linked.json"), dir.join("n1.3.json")).unwrap();
    symlink(t.path().join("outside/r.json"), dir.join("instance.json")).unwrap();
    let started = std::time::Instant::now();
    let j = load_job(t.path(), 5).unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(j.records.len(), 1);
    assert_eq!(j.records[0].step.node, "n1");
    let refused: Vec<(&str, &str)> = j
        .problems
        .iter()
        .map(|p| match p {
            Problem::Unreadable {
                file,
                error,
                refused: true,
            } => (file.as_str(), error.as_str()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(refused.len(), 5, "{refused:?}");
    assert!(refused[0].0 == "instance.json" && refused[0].1.contains("symbolic link"));
    assert!(refused[1].0 == "n1.0.json" && refused[1].1.contains("symbolic link"));
    assert!(refused[2].0 == "n1.1.json" && refused[2].1.contains("FIFO"));
    assert!(refused[3].0 == "n1.2.json" && refused[3].1.contains("4294967296 bytes"));
    assert!(refused[4].0 == "n1.3.json" && refused[4].1.contains("2 hard links"));
    assert_eq!(
        j.problems[1].message(),
        "n1.0.json: refused: a symbolic link; not followed"
    );
    let json = j.to_json(&Summary::from_records(&j.records));
    assert!(json.contains("\"refused\": true"), "{json}");
    assert!(json.contains("\"classes\": ["), "always present: {json}");
    // A job directory that is a link is refused as a whole.
    symlink(&dir, t.path().join("6")).unwrap();
    assert!(matches!(
        load_job(t.path(), 6),
        Err(LoadError::Refused(6, ..))
    ));
}

#[test]
fn the_summary_of_a_job_of_thousands_of_steps_reads_a_bounded_number_and_says_so() {
    let t = TempTree::new("many-steps");
    let inst = crate::step::spool::Instance {
        cluster: String::new(),
        job_id: 42,
        uid: 1001,
        token: String::new(),
    };
    t.write("42/instance.json", &serde_json::to_string(&inst).unwrap());
    t.write("42/n1.batch.json", &record("n1", "batch").to_json());
    t.write("42/n1.extern.json", &record("n1", "extern").to_json());
    for i in 0..5000 {
        t.write(
            &format!("42/n1.{i}.json"),
            &record("n1", &i.to_string()).to_json(),
        );
    }
    let text = end_of_job_text(
        t.path(),
        &inst,
        None,
        1000,
        std::time::Duration::ZERO,
        0.0,
        &classes::ClassRules::default(),
    )
    .unwrap();
    let line = text.lines().find(|l| l.starts_with("Records:")).unwrap();
    assert_eq!(
        line,
        "Records:       1000 of 5002 step records read, all final; the rest left out \
         (max_summary_records)"
    );
    // The batch and extern steps (they see the whole job), then the first steps by number.
    assert!(
        text.contains("\n  batch ") && text.contains("\n  extern "),
        "{text}"
    );
    assert!(
        text.contains("\n  997 ") && !text.contains("\n  998 "),
        "{text}"
    );
    let j = load_job_limited(t.path(), 42, 1000).unwrap();
    assert_eq!((j.records.len(), j.left_out), (1000, 4002));
    assert_eq!(j.records[0].step.id, "batch");
    assert_eq!(j.records[998].step.id, "997");
    assert_eq!(j.records[999].step.id, "extern");
    // One step's summary (an srun's) reads that step's record, wherever it lies.
    let text = end_of_job_text(
        t.path(),
        &inst,
        Some("4500"),
        1000,
        std::time::Duration::ZERO,
        0.0,
        &classes::ClassRules::default(),
    )
    .unwrap();
    assert!(
        text.contains("\nRecords:       1 step record(s), all final\n"),
        "{text}"
    );
    // Only the instance's user's records count.
    let mut other = record("n1", "4501");
    other.job.uid = 1002;
    t.write("42/n1.4501.json", &other.to_json());
    let j = job_summary(t.path(), 42, Some("4501"), 1000, |r| r.job.uid == 1001).unwrap();
    assert_eq!((j.records, j.summary.steps.len()), (0, 0));
}

#[test]
fn steps_past_max_step_records_are_noted_once_and_the_summary_says_so() {
    use crate::step::spool::Spool;
    let t = TempTree::new("steps-left-out");
    let spool = Spool::open(&t.path().join("spool")).unwrap();
    let inst = Instance {
        cluster: String::new(),
        job_id: 42,
        uid: 1001,
        token: String::new(),
    };
    // The first step past the bound claims the directory and says so; a later one (with
    // another bound, after a change of the settings) leaves the note as it was.
    let note = spool.note_steps_left_out(&inst, 1000).unwrap();
    spool.note_steps_left_out(&inst, 5).unwrap();
    assert_eq!(
        fs::read_to_string(&note).unwrap(),
        "{\"max_step_records\":1000}\n"
    );
    spool
        .write(
            42,
            "n1.batch.json",
            record("n1", "batch").to_json().as_bytes(),
        )
        .unwrap();
    let root = spool.root();
    let j = load_job(root, 42).unwrap();
    assert_eq!(j.steps_not_recorded_from, Some(1000));
    assert!(j.problems.is_empty(), "{:?}", j.problems);
    let text = end_of_job_text(
        root,
        &inst,
        None,
        1000,
        std::time::Duration::ZERO,
        0.0,
        &classes::ClassRules::default(),
    )
    .unwrap();
    assert!(
        text.contains(
            "\n               steps numbered 1000 and above were not recorded \
             (max_step_records)\n"
        ),
        "{text}"
    );
    let json = j.to_json(&j.summary(None));
    assert!(json.contains("\"steps_not_recorded_from\": 1000"), "{json}");
}

#[test]
fn a_requeued_jobs_runs_are_all_read_under_the_jobs_instance() {
    use crate::step::run::RunInfo;
    let t = TempTree::new("load-runs");
    let run = |restart_count| {
        let mut r = record("n1.x", "batch");
        r.job.id = 9;
        r.job.run = Some(RunInfo {
            restart_count,
            time_limit_seconds: Some(3600),
            ..RunInfo::default()
        });
        r
    };
    let mut other_user = run(2);
    other_user.job.uid = 1002;
    t.write(
        "9/instance.json",
        "{\"cluster\": \"c\", \"job_id\": 9, \"uid\": 1001, \"token\": \"1.2\"}",
    )
    .write("9/n1.x.batch.json", &run(0).to_json())
    .write("9/n1.x.batch.run2.json", &run(1).to_json())
    .write("9/n1.x.batch.run3.json", &other_user.to_json());
    let j = load_job(t.path(), 9).unwrap();
    let runs: Vec<u32> = j
        .records
        .iter()
        .map(|r| r.job.run.as_ref().unwrap().restart_count)
        .collect();
    assert_eq!(runs.len(), 2, "another user's record is left out");
    assert!(runs.contains(&0) && runs.contains(&1));
    // The step a file name says is the step, whatever the run.
    assert_eq!(node_and_step("n1.x.batch.run2.json"), ("n1.x", "batch"));
    assert_eq!(j.only_step("batch").records.len(), 2);
}

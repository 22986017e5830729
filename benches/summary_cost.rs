//! The cost of a job's end-of-job summary over many step records: `cargo bench --bench
//! summary_cost`.
//!
//! Writes a spool holding one job of N step records (`--records 20000`; each the 5.7 KB record
//! of `fuzz/seeds/record/batch_two_gpus_timeline.json`, two GPUs and a timeline of six
//! buckets, renumbered as steps 0, 1, ...), then builds the summary the batch step appends to
//! the job's output (`report::end_of_job_text`, as slurmstepd runs it) in a fresh process and
//! prints its wall and CPU time and peak resident memory (`ru_maxrss`), and the same for the process
//! before it read anything. `--max-summary-records N` reads at most N records (default: the
//! setting's default). `--keep DIR` writes the spool there and keeps it, for
//! `/usr/bin/time -v gpu-tracker-report --spool DIR 812` with `SLURM_CONF` naming a slurm.conf
//! with `ClusterName=hpc`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gpu_tracker::report::classes::ClassRules;
use gpu_tracker::step::spool::Instance;
use gpu_tracker::sys::{self, Who};

const TEMPLATE: &str = include_str!("../fuzz/seeds/record/batch_two_gpus_timeline.json");
const JOB: u32 = 812;
const CLUSTER: &str = "hpc";

fn instance() -> Instance {
    Instance {
        cluster: CLUSTER.into(),
        job_id: JOB,
        uid: 1001,
        token: "c0ffee12".into(),
    }
}

/// Writes `n` step records of job [`JOB`] under `root/<cluster>/<job>/`.
fn write_spool(root: &Path, n: usize) {
    let dir = root.join(CLUSTER).join(JOB.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("instance.json"),
        serde_json::to_string(&instance()).unwrap(),
    )
    .unwrap();
    let mut rec: serde_json::Value = serde_json::from_str(TEMPLATE).unwrap();
    rec["step"]["kind"] = "srun".into();
    for i in 0..n {
        rec["step"]["id"] = i.to_string().into();
        std::fs::write(
            dir.join(format!("gpu01.{i}.json")),
            serde_json::to_vec(&rec).unwrap(),
        )
        .unwrap();
    }
}

/// In a fresh process: the summary of the job in the spool at `root`, at most `max_records`
/// records read, timed.
fn measure(root: &Path, max_records: usize) {
    let at_start = sys::rusage(Who::SelfProcess);
    let started = Instant::now();
    let text = gpu_tracker::report::end_of_job_text(
        &root.join(CLUSTER),
        &instance(),
        None,
        max_records,
        Duration::ZERO,
        0.0,
        &ClassRules::default(),
    )
    .expect("a summary");
    let took = started.elapsed();
    let at_end = sys::rusage(Who::SelfProcess);
    let records = text
        .lines()
        .find(|l| l.contains("Records:"))
        .unwrap_or("(no Records: line)")
        .trim()
        .to_string();
    println!(
        "summary: {:.2} s ({:.2} s of CPU), peak RSS {:.1} MB (before reading: {:.1} MB), {} \
         lines of text; {records}",
        took.as_secs_f64(),
        at_end.cpu_seconds - at_start.cpu_seconds,
        at_end.maxrss_bytes as f64 / 1e6,
        at_start.maxrss_bytes as f64 / 1e6,
        text.lines().count()
    );
}

fn main() {
    let mut records = 20_000;
    let mut keep: Option<PathBuf> = None;
    let mut max_records = gpu_tracker::config::DEFAULT_MAX_SUMMARY_RECORDS;
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--records" => records = v().parse().expect("a count"),
            "--keep" => keep = Some(PathBuf::from(v())),
            "--max-summary-records" => max_records = v().parse().expect("a count"),
            "--measure" => return measure(Path::new(&v()), max_records),
            // What `cargo bench` passes on.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    let root = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("gpu-tracker-summary-cost-{}", std::process::id()))
    });
    let started = Instant::now();
    write_spool(&root, records);
    println!(
        "{records} records written to {} in {:.1} s",
        root.display(),
        started.elapsed().as_secs_f64()
    );
    let status = Command::new(std::env::current_exe().unwrap())
        .arg("--max-summary-records")
        .arg(max_records.to_string())
        .arg("--measure")
        .arg(&root)
        .status()
        .unwrap();
    assert!(status.success());
    if keep.is_none() {
        std::fs::remove_dir_all(&root).unwrap();
    }
}

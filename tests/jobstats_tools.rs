//! The tools built around Princeton jobstats, installed from PyPI, read gpu-tracker's `JS1:`
//! AdminComment: `reportseff` shows the figures gpu-tracker's own summary has,
//! `job_defense_shield --zero-util-gpu-hours` names the job whose second GPU sat idle and not
//! the one that used both, `--low-gpu-efficiency` reports our GPUs' mean, and its decoder gives our CPU and GPU seconds. Slurm is a fake `sacct` here, which prints the comment with
//! the fields each tool asks for; tests/slurm/jobstats.rs does it on the real cluster.
//!
//! The tools live in a private virtual environment under the target directory
//! (`target/jobstats-tools-venv`, made once: `python3 -m venv`, `pip install` of the pinned
//! versions below), as python/ci-test installs pytest.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::TempDir;
use gpu_tracker::report::figures::Summary;
use gpu_tracker::report::jobstats::{self, Js1};
use gpu_tracker::report::stored::Stored;
use gpu_tracker::step::record::*;

/// The tools' versions, as PyPI has them on 2026-11-29.
const TOOLS: &[&str] = &["reportseff==2.10.3", "job-defense-shield==1.3.4"];

const GIB: u64 = 1 << 30;

/// The virtual environment with the tools; made on first use, with a lock so that tests in
/// parallel make it once.
fn venv() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target");
    let venv = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or(target)
        .join("jobstats-tools-venv");
    static MADE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let ready = venv.join("ready");
    if !*made && !ready.exists() {
        let run = |cmd: &mut Command| {
            let out = cmd.output().expect("python3 with venv");
            assert!(
                out.status.success(),
                "{cmd:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
        run(Command::new(venv.join("bin/pip"))
            .args(["install", "-q"])
            .args(TOOLS));
        std::fs::write(&ready, TOOLS.join("\n")).unwrap();
    }
    *made = true;
    venv
}

/// A finished job 77 on n1: 4 CPUs busy 120 s of its 60 s (50 %), 1 GiB of its 4 GiB limit,
/// two 16 GiB GPUs: one at 80 % with 8 GiB, one at `second` % (with 1 GiB, nothing at 0 %).
fn summary_with(second: f64) -> Summary {
    let start = "2026-11-29T10:00:00+00:00";
    let r = StepRecord {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        complete: true,
        written_at: start.into(),
        tracker_version: "0.1.0".into(),
        job: JobInfo {
            id: 77,
            user: "alice".into(),
            uid: 1001,
            alloc_memory_bytes: Some(4 * GIB),
            ..Default::default()
        },
        step: StepInfo {
            id: "batch".into(),
            kind: "batch".into(),
            node: "n1".into(),
            start: start.into(),
            end: Some(start.into()),
            elapsed_seconds: 60.0,
            alloc_cpus: Some(4),
            ..Default::default()
        },
        tasks: vec![],
        memory: StepMemory {
            job_peak_bytes: Some(GIB),
            ..Default::default()
        },
        cpu: StepCpu {
            seconds: 120.0,
            alloc_cpus: 4,
            ..Default::default()
        },
        gpus: [
            (0, 80.0, 8 * GIB),
            (1, second, if second > 0.0 { GIB } else { 0 }),
        ]
        .into_iter()
        .map(|(i, util, used)| StepGpu {
            slurm_index: Some(i),
            uuid: format!("GPU-{i}"),
            memory_total_bytes: 16 * GIB,
            peak_step_memory_bytes: used,
            mean_utilization_percent: Some(util),
            max_utilization_percent: Some(util),
            ..StepGpu::default()
        })
        .collect(),
        sampler: SamplerStats::default(),
        timeline: None,
        events: Vec::new(),
        events_dropped: 0,
        pressure: None,
    };
    Summary::from_records(&[r])
}

/// Job 77 with its second GPU idle.
fn summary() -> Summary {
    summary_with(0.0)
}

/// A fake `sacct` (and `scontrol show partition`) in `dir`: `sacct` answers `--helpformat` and prints one row of job 77 with the
/// fields `--format=` (or `-o`) asks for, joined by the `--delimiter` asked for (`|` by
/// default), `AdminComment` being `comment`. TotalCPU is 30 s where the comment says 120: a
/// tool that shows 50 % read the comment.
fn fake_sacct(dir: &Path, comment: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        r#"#!/usr/bin/env python3
import sys
args = sys.argv[1:]
if "--helpformat" in args:
    print("JobID JobIDRaw State AllocCPUS TotalCPU Elapsed Timelimit ReqMem MaxRSS NNodes NTasks Partition AdminComment User Account")
    sys.exit(0)
row = {{"JobIDRaw": "77", "JobID": "77", "State": "COMPLETED", "AllocCPUS": "4",
       "TotalCPU": "00:30.000", "Elapsed": "00:01:00", "ElapsedRaw": "60", "Timelimit": "00:10:00",
       "ReqMem": "4G", "NNodes": "1", "NTasks": "1", "Partition": "debug", "User": "alice",
       "Account": "physics", "AllocTRES": "billing=4,cpu=4,gres/gpu=2,mem=4G,node=1",
       "NodeList": "n1", "Cluster": "c1", "QOS": "normal", "JobName": "train",
       "AdminComment": {comment:?}}}
fields, delim = [], "|"
for i, a in enumerate(args):
    if a.startswith("--format="): fields = a.split("=", 1)[1].split(",")
    elif a in ("-o", "--format"): fields = args[i + 1].split(",")
    elif a.startswith("--delimiter="): delim = a.split("=", 1)[1]
    elif a == "-d" or a == "--delimiter": delim = args[i + 1]
lower = {{k.lower(): v for k, v in row.items()}}
vals = [lower.get(f.split("%")[0].lower(), "") for f in fields]
end = delim if "--parsable" in args or "-p" in args else ""
print(delim.join(vals) + end)
"#
    );
    // reportseff asks for the partitions' time limits too.
    let partitions = "#!/bin/sh\necho 'PartitionName=debug'\necho '   MaxTime=UNLIMITED'\n";
    for (name, text) in [("sacct", script.as_str()), ("scontrol", partitions)] {
        let p = bin.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

fn tool(venv: &Path, bin: &Path, name: &str, args: &[&str]) -> String {
    let path = format!(
        "{}:{}:/usr/bin:/bin",
        bin.display(),
        venv.join("bin").display()
    );
    common::said_ok(
        Command::new(venv.join("bin").join(name))
            .args(args)
            .env("PATH", path),
        &format!("{name} {args:?}"),
    )
}

#[test]
fn reportseff_shows_the_figures_of_our_summary() {
    let venv = venv();
    let s = summary();
    let comment = jobstats::encode(&Js1::of(&s), &Stored::of(&s).bounded_json(), None);
    let dir = TempDir::new("jobstats-reportseff");
    let bin = fake_sacct(dir.path(), &comment);
    let said = tool(
        &venv,
        &bin,
        "reportseff",
        &[
            "--no-color",
            "--parsable",
            "--format=JobID,CPUEff,MemEff,GPUEff,GPUMem",
            "77",
        ],
    );
    let row = said
        .lines()
        .find(|l| l.starts_with("77|"))
        .unwrap_or_else(|| panic!("no row of job 77: {said}"));
    // Our figures: CPU 120 s of 4 CPUs over 60 s, 1 of 4 GiB, GPUs at 80 and 0 % (mean 40),
    // GPU memory 8 of 16 GiB and 0 (mean 25).
    assert_eq!(s.cpu.efficiency_percent, Some(50.0));
    assert_eq!(s.totals.gpu_mean_utilization_percent, Some(40.0));
    assert_eq!(row, "77|50.0|25.0|40.0|25.0", "{said}");
    // Per GPU (-g): the idle one shows 0.
    let said = tool(
        &venv,
        &bin,
        "reportseff",
        &[
            "--no-color",
            "--parsable",
            "-g",
            "--format=JobID,GPUEff",
            "77",
        ],
    );
    assert!(said.contains("|80.0") && said.contains("|0.0"), "{said}");
}

#[test]
fn job_defense_shield_decodes_our_summary_as_its_own() {
    // job_defense_shield's own decoder and the figures its alerts are made of
    // (efficiency.py: get_stats_dict, cpu_efficiency, gpu_efficiency, num_gpus_with_zero_util).
    let venv = venv();
    let s = summary();
    let comment = jobstats::encode(&Js1::of(&s), &Stored::of(&s).bounded_json(), None);
    let code = "import sys\n\
                from job_defense_shield.efficiency import *\n\
                d = get_stats_dict(sys.argv[1])\n\
                print(sorted(d['nodes']['n1']['gpu_utilization'].items()))\n\
                print(cpu_efficiency(d, 60, '77', 'c1', verbose=False))\n\
                print(gpu_efficiency(d, 60, '77', 'c1', verbose=False))\n\
                print(num_gpus_with_zero_util(d, '77', 'c1', verbose=False))\n";
    let out = Command::new(venv.join("bin/python"))
        .args(["-c", code, &comment])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = said.lines();
    assert_eq!(lines.next(), Some("[('0', 80.0), ('1', 0.0)]"), "{said}");
    // (CPU seconds used, CPU seconds allocated, error code 0)
    assert_eq!(lines.next(), Some("(120.0, 240, 0)"), "{said}");
    // (GPU seconds used, GPU seconds allocated, error code 0): 80 % of 60 s, of 2 x 60 s.
    assert_eq!(lines.next(), Some("(48.0, 120, 0)"), "{said}");
    // The zero-utilization alerts' count: the second GPU, idle.
    assert_eq!(lines.next(), Some("(1, 0)"), "{said}");
}

#[test]
fn job_defense_shield_names_the_job_whose_second_gpu_sat_idle() {
    // job_defense_shield itself, `--zero-util-gpu-hours` with a minimal configuration, over a
    // fake sacct with two 2-hour jobs of 2 GPUs: 77 left its second GPU idle, 78 used both.
    let venv = venv();
    let dir = TempDir::new("jobstats-jds");
    let d = dir.path();
    for (id, second) in [(77, 0.0), (78, 55.0)] {
        let s = summary_with(second);
        let text = jobstats::encode(&Js1::of(&s), &Stored::of(&s).bounded_json(), None);
        std::fs::write(d.join(format!("c{id}")), text).unwrap();
    }
    let bin = d.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let sacct = format!(
        r#"#!/usr/bin/env python3
import sys, time
args = sys.argv[1:]
fields = args[args.index("-o") + 1].split(",")
now = int(time.time())
for jid in ("77", "78"):
    row = {{"jobid": jid, "jobidraw": jid, "user": "alice", "cluster": "c1", "account": "physics",
           "partition": "gpu", "cputimeraw": "28800", "elapsedraw": "7200", "timelimitraw": "180",
           "nnodes": "1", "ncpus": "4", "alloctres": "billing=4,cpu=4,gres/gpu=2,mem=4G,node=1",
           "submit": str(now - 8000), "eligible": str(now - 8000), "start": str(now - 7300),
           "end": str(now - 100), "qos": "normal", "state": "COMPLETED", "jobname": "train",
           "admincomment": open("{dir}/c" + jid).read()}}
    print("|".join(row[f] for f in fields))
"#,
        dir = d.display()
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let p = bin.join("sacct");
        std::fs::write(&p, sacct).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = d.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "violation-logs-path: {v}/violations\nemail-files-path: {v}/email\n\
             email-domain-name: \"@example.org\"\nsender: admin@example.org\n\
             reply-to: admin@example.org\nreport-emails: []\n\
             zero-util-gpu-hours-1:\n  cluster: c1\n  partitions: [\"*\"]\n  min_run_time: 0\n  \
             gpu_hours_threshold_user: 0\n  gpu_hours_threshold_admin: 0\n\
             low-gpu-efficiency-1:\n  cluster: c1\n  partitions: [\"*\"]\n  min_run_time: 0\n  \
             eff_thres_pct: 80\n  eff_target_pct: 90\n  proportion_thres_pct: 0\n  \
             absolute_thres_hours: 0\n  num_top_users: 10\n",
            v = d.display()
        ),
    )
    .unwrap();
    let said = tool(
        &venv,
        &bin,
        "job_defense_shield",
        &[
            "--config-file",
            config.to_str().unwrap(),
            "--zero-util-gpu-hours",
        ],
    );
    let table: Vec<&str> = said
        .lines()
        .skip_while(|l| !l.contains("GPU-hours at 0% Utilization"))
        .collect();
    let rows: Vec<&str> = table
        .iter()
        .copied()
        .filter(|l| l.contains("alice"))
        .collect();
    // One user row: 2 GPU-hours at 0 % (one GPU for 2 hours), one job, job 77.
    assert_eq!(rows.len(), 1, "{said}");
    let cells: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(cells, ["1", "alice", "2", "1", "77", "0"], "{said}");
    // The low GPU efficiency report: 8 GPU-hours, at 54 % (80, 0, 80 and 55 over 4 GPUs), in
    // 2 jobs, every job with a summary (coverage 1.0).
    let said = tool(
        &venv,
        &bin,
        "job_defense_shield",
        &[
            "--config-file",
            config.to_str().unwrap(),
            "--low-gpu-efficiency",
        ],
    );
    let row = said
        .lines()
        .skip_while(|l| !l.contains("Low GPU Efficiencies"))
        .find(|l| l.contains("alice"))
        .unwrap_or_else(|| panic!("{said}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        ["1", "alice", "8", "100", "54", "2", "0", "4.0", "1.0", "0"],
        "{said}"
    );
}

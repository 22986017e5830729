//! jobstats' tools on the local cluster's slurmdbd: `reportseff` (installed from PyPI, see
//! [`reportseff`]) reads a tracked job's
//! `AdminComment` through the real `sacct`, and shows the efficiency gpu-tracker's own summary
//! has. Where `sacctmgr` lowercases what it stores (Slurm 22.05, this host), the summary is
//! stored in the `gpu-tracker:1:` form, which reportseff passes over: the test asserts that
//! instead, and the guests (24.11, 26.05) assert reportseff's figures.

use std::path::PathBuf;
use std::process::Command;

use gpu_tracker::report::stored::Stored;

use crate::support::*;

/// reportseff, as a command to which its arguments are added. The test guests reach no registry
/// and cannot run the host's virtual environment (its Python is the host's): slurm/vm.sh puts
/// reportseff and click, pure Python, in `target/reportseff-py` (pip install --target), which
/// the guest's own python3 runs. On the host, the tools' virtual environment, made by
/// tests/jobstats_tools.rs's rule (python3 -m venv, pip install of the pinned versions) where
/// it is not there yet.
fn reportseff() -> Command {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target");
    let pure = target.join("reportseff-py");
    if pure.join("reportseff").is_dir() {
        let mut cmd = Command::new("python3");
        cmd.args([
            "-c",
            "import sys; from reportseff.console import main; sys.argv[0] = 'reportseff'; \
             sys.exit(main())",
        ])
        .env("PYTHONPATH", pure);
        return cmd;
    }
    let venv = target.join("jobstats-tools-venv");
    if !venv.join("bin/reportseff").exists() {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap()
            .success()
            && Command::new(venv.join("bin/pip"))
                .args(["install", "-q", "reportseff==2.10.3"])
                .status()
                .unwrap()
                .success();
        assert!(ok, "reportseff could not be installed from PyPI");
    }
    Command::new(venv.join("bin/reportseff"))
}

fn sacctmgr_keeps_case() -> bool {
    let out = Command::new("sacctmgr")
        .arg("--version")
        .env("SLURM_CONF", slurm_conf())
        .output()
        .unwrap();
    gpu_tracker::report::jobstats::sacctmgr_keeps_case(String::from_utf8_lossy(&out.stdout).trim())
}

/// reportseff's row for job `id`: JobID, CPUEff, MemEff, GPUEff, GPUMem.
fn reportseff_row(id: u32) -> Vec<String> {
    let out = reportseff()
        .args([
            "--no-color",
            "--parsable",
            "--format=JobID,CPUEff,MemEff,GPUEff,GPUMem",
            &id.to_string(),
        ])
        .env("SLURM_CONF", slurm_conf())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said.lines()
        .find(|l| l.starts_with(&format!("{id}|")))
        .unwrap_or_else(|| panic!("no row of job {id}: {said}"))
        .split('|')
        .map(str::to_string)
        .collect()
}

/// reportseff's figure `shown` is ours within its one decimal.
fn close(shown: &str, ours: f64, what: &str) {
    close_within(shown, ours, 0.15, what);
}

fn close_within(shown: &str, ours: f64, within: f64, what: &str) {
    let v: f64 = shown
        .parse()
        .unwrap_or_else(|_| panic!("{what}: {shown:?}"));
    assert!(
        (v - ours).abs() <= within,
        "{what}: reportseff {v}, ours {ours} (within {within})"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/local-cluster.sh up --accounting), root and PyPI: tests/run-all.sh"]
fn reportseff_reads_a_tracked_jobs_admin_comment() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    // The cluster's EpilogSlurmctld runs the report report_as installs: this build's.
    let (code, _, err) = report_as(USER, &["--version"]);
    assert_eq!(code, 0, "{err}");
    let h = hog();
    // A GPU job computing on GPU 0 with GPU 1 idle, and a CPU job.
    let gpu = submit_as(
        USER,
        "js-gpu",
        &format!(
            "#!/bin/bash\n#SBATCH --gpu-track --mem=1G --gres=gpu:2\n\
             exec -a SIMGPU0_HOLD_SIMGPU_COMPUTE {h} --mb 200 --hold-ms 4000 \
             --marker SIMGPU0_HOLD_SIMGPU_COMPUTE\n"
        ),
        &[],
    );
    let cpu = submit_as(
        USER,
        "js-cpu",
        &format!("#!/bin/bash\n#SBATCH --gpu-track --mem=512M\n{h} --mb 100 --hold-ms 3000\n"),
        &[],
    );
    for (id, name) in [(gpu, "js-gpu"), (cpu, "js-cpu")] {
        let job = wait_job(USER, name, id);
        assert_eq!(job.state, "COMPLETED", "{}", job.output);
        wait_end_in_database(id);
    }
    let keeps_case = sacctmgr_keeps_case();
    for (id, gpus) in [(gpu, 2usize), (cpu, 0)] {
        let comment = stored_comment(id);
        assert!(is_summary(&comment), "job {id}: {comment:?}");
        let row = reportseff_row(id);
        if !keeps_case {
            // 22.05: our old form, which reportseff passes over (no GPU figure of ours).
            assert!(comment.starts_with("gpu-tracker:1:{"), "{comment}");
            assert_eq!(row[3], "---", "{row:?}");
            continue;
        }
        assert!(comment.starts_with("JS1:H4sI"), "{comment}");
        let s = Stored::decode(&comment)
            .unwrap()
            .to_summary(USER, 0, None, &Default::default());
        assert_eq!(s.totals.gpus, gpus);
        // What gpu-tracker-report shows of the job, from the same stored summary.
        let (code, text, err) = report_as(USER, &[&id.to_string()]);
        assert_eq!(code, 0, "{text}{err}");
        // jobstats' total_time is whole seconds (as its own epilog writes it from sacct's
        // Elapsed, Slurm's whole-second start and end), and reportseff divides by it: for a job
        // of a few seconds that moves the figure by up to a second's share (16.0 against our
        // 15.46 for about 7 s on 24.11; one run in five here failed at half a second's).
        let ours = s.cpu.efficiency_percent.unwrap();
        let rounding = ours / s.elapsed_seconds.round().max(1.0);
        close_within(&row[1], ours, rounding + 0.15, "CPU efficiency");
        let node = &s.per_node[0];
        let mem = 100.0 * node.sizing_bytes() as f64 / node.requested_bytes.unwrap() as f64;
        close(&row[2], mem, "memory efficiency");
        if gpus > 0 {
            let mean = s.totals.gpu_mean_utilization_percent.unwrap();
            close(&row[3], mean, "GPU efficiency");
            assert!(
                s.gpus
                    .iter()
                    .any(|g| g.mean_utilization_percent == Some(0.0))
            );
        } else {
            assert_eq!(row[3], "---", "{row:?}");
        }
    }
}

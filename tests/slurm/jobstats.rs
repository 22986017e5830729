//! jobstats' tools on the local cluster's slurmdbd, installed from PyPI (see [`tools`]):
//! `reportseff` reads a tracked job's `AdminComment` through the real `sacct` and shows the
//! efficiency gpu-tracker's own summary has, and `job_defense_shield`'s reports (0 % GPU-hours,
//! low GPU efficiency, excess CPU memory, the usage overview) are made of our figures. Where
//! `sacctmgr` lowercases what it stores (Slurm 22.05, this host), the summary is stored in the
//! `gpu-tracker:1:` form, which reportseff passes over and on which job_defense_shield stops:
//! the test asserts the first and skips the second, and the guests (24.11, 26.05) assert every
//! tool's figures.

use std::path::PathBuf;
use std::process::Command;

use gpu_tracker::report::figures::Summary;
use gpu_tracker::report::stored::Stored;

use crate::support::*;

/// One of jobstats' tools (`reportseff` or `job_defense_shield`), as a command to which its
/// arguments are added. The test guests reach no registry and cannot run the host's virtual
/// environment (its Python is the host's): slurm/vm.sh puts both in `target/jobstats-py` (pip
/// install --target; job_defense_shield's pandas, numpy and PyYAML are the guest's Debian
/// packages), which the guest's own python3 runs. On the host, the tools' virtual environment,
/// made by tests/jobstats_tools.rs's rule (python3 -m venv, pip install of the pinned versions)
/// where it is not there yet.
fn tool(name: &str) -> Command {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target");
    let pure = target.join("jobstats-py");
    if pure.join(name).is_dir() {
        let main = match name {
            "reportseff" => "reportseff.console",
            _ => "job_defense_shield.job_defense_shield",
        };
        let mut cmd = Command::new("python3");
        cmd.arg("-c")
            .arg(format!(
                "import sys; from {main} import main; sys.argv[0] = '{name}'; sys.exit(main())"
            ))
            .env("PYTHONPATH", pure);
        return cmd;
    }
    let venv = target.join("jobstats-tools-venv");
    if !venv.join("bin").join(name).exists() {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap()
            .success()
            && Command::new(venv.join("bin/pip"))
                .args([
                    "install",
                    "-q",
                    "reportseff==2.10.3",
                    "job-defense-shield==1.3.4",
                ])
                .status()
                .unwrap()
                .success();
        assert!(ok, "jobstats' tools could not be installed from PyPI");
    }
    Command::new(venv.join("bin").join(name))
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
    let out = tool("reportseff")
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
fn jobstats_tools_read_tracked_jobs_from_slurmdbd() {
    let _g = SETTINGS.read().unwrap_or_else(|p| p.into_inner());
    // The cluster's EpilogSlurmctld runs the report report_as installs: this build's.
    let (code, _, err) = report_as(USER2, &["--version"]);
    assert_eq!(code, 0, "{err}");
    // job_defense_shield reads every job of a time window: this test's jobs are the second
    // test user's, which the guests' tests, run one at a time, leave alone meanwhile.
    let since = sacct_time(-5);
    let h = hog();
    // A GPU job computing on GPU 0 with GPU 1 idle, one computing on both, and a CPU job.
    let gpu_job = |name: &str, marker: &str| {
        submit_as(
            USER2,
            name,
            &format!(
                "#!/bin/bash\n#SBATCH --gpu-track --mem=1G --gres=gpu:2\n\
                 exec -a {marker} {h} --mb 200 --hold-ms 4000 --marker {marker}\n"
            ),
            &[],
        )
    };
    let gpu = gpu_job("js-gpu", "SIMGPU0_HOLD_SIMGPU_COMPUTE");
    let both = gpu_job("js-gpu2", "SIMGPU0_HOLD_SIMGPU1_HOLD_SIMGPU_COMPUTE");
    let cpu = submit_as(
        USER2,
        "js-cpu",
        &format!("#!/bin/bash\n#SBATCH --gpu-track --mem=512M\n{h} --mb 100 --hold-ms 3000\n"),
        &[],
    );
    for (id, name) in [(gpu, "js-gpu"), (both, "js-gpu2"), (cpu, "js-cpu")] {
        let job = wait_job(USER2, name, id);
        assert_eq!(job.state, "COMPLETED", "{}", job.output);
        wait_end_in_database(id);
    }
    let keeps_case = sacctmgr_keeps_case();
    let mut stored = Vec::new();
    for (id, gpus) in [(gpu, 2usize), (both, 2), (cpu, 0)] {
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
            .to_summary(USER2, 0, None, &Default::default());
        assert_eq!(s.totals.gpus, gpus);
        // What gpu-tracker-report shows of the job, from the same stored summary.
        let (code, text, err) = report_as(USER2, &[&id.to_string()]);
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
            let idle = s
                .gpus
                .iter()
                .filter(|g| g.mean_utilization_percent == Some(0.0))
                .count();
            assert_eq!(idle, usize::from(id == gpu), "job {id}: {text}");
        } else {
            assert_eq!(row[3], "---", "{row:?}");
        }
        stored.push((id, s));
    }
    if keeps_case {
        job_defense_shield_reads(&since, gpu, both, &stored);
    }
}

/// A time `offset` seconds from now as `sacct -S` and job_defense_shield's `-S` take it.
fn sacct_time(offset: i64) -> String {
    (chrono::Local::now() + chrono::Duration::seconds(offset))
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

/// The cluster's name, as slurm.conf gives it and slurmdbd stores it.
fn cluster_name() -> String {
    let conf = std::fs::read_to_string(slurm_conf()).unwrap();
    conf.lines()
        .find_map(|l| l.strip_prefix("ClusterName="))
        .expect("ClusterName in slurm.conf")
        .trim()
        .to_string()
}

/// The cells of the row of `who` in the table titled `title` of a report of
/// job_defense_shield's, from `who`'s own cell on (the index cell, where there is one, left
/// out).
fn report_row(said: &str, title: &str, who: &str) -> Vec<String> {
    said.lines()
        .skip_while(|l| !l.contains(title))
        .find_map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            let at = cells.iter().position(|c| *c == who)?;
            Some(cells[at..].iter().map(|c| c.to_string()).collect())
        })
        .unwrap_or_else(|| panic!("no row of {who} in {title:?}: {said}"))
}

/// job_defense_shield 1.3.4 itself, with a minimal configuration, over the real `sacct` and the
/// AdminComments our EpilogSlurmctld stored for the jobs since `since` (this test's): the 0 %
/// GPU-hours report names job `idle` (its second GPU sat idle) and not `both`; the low GPU
/// efficiency report gives the efficiency our figures make; the excess CPU memory report counts
/// the three jobs, every one with a summary it could read; the usage overview has the cluster.
fn job_defense_shield_reads(since: &str, idle: u32, both: u32, stored: &[(u32, Summary)]) {
    let dir = crate::common::TempDir::new("jobstats-jds");
    let d = dir.path();
    let config = d.join("config.yaml");
    let rule = format!(
        "  cluster: {}\n  partitions: [\"*\"]\n  min_run_time: 0\n",
        cluster_name()
    );
    std::fs::write(
        &config,
        format!(
            "violation-logs-path: {v}/violations\nemail-files-path: {v}/email\n\
             email-domain-name: \"@example.org\"\nsender: admin@example.org\n\
             reply-to: admin@example.org\nreport-emails: []\n\
             zero-util-gpu-hours-1:\n{rule}  gpu_hours_threshold_user: 0\n  \
             gpu_hours_threshold_admin: 0\n  max_num_jobid_admin: 1000\n\
             low-gpu-efficiency-1:\n{rule}  eff_thres_pct: 101\n  eff_target_pct: 90\n  \
             proportion_thres_pct: 0\n  absolute_thres_hours: 0\n  num_top_users: 100\n\
             excess-cpu-memory-1:\n{rule}  tb_hours_threshold: 0\n  ratio_threshold: 1\n  \
             mean_ratio_threshold: 1\n  median_ratio_threshold: 1\n  num_top_users: 100\n  \
             show_all_users: true\n",
            v = d.display()
        ),
    )
    .unwrap();
    let run = |report: &str| {
        crate::common::said_ok(
            tool("job_defense_shield")
                .args([
                    "--config-file",
                    config.to_str().unwrap(),
                    "-S",
                    since,
                    report,
                ])
                .env("SLURM_CONF", slurm_conf()),
            report,
        )
    };
    // User, GPU-hours at 0 %, jobs, their ids.
    let said = run("--zero-util-gpu-hours");
    let row = report_row(&said, "GPU-hours at 0% Utilization", USER2);
    let ids: Vec<&str> = row[3].trim_end_matches('+').split(',').collect();
    assert!(ids.contains(&idle.to_string().as_str()), "{said}");
    assert!(!ids.contains(&both.to_string().as_str()), "{said}");
    // User, GPU-hours, proportion, efficiency (%), jobs, interactive, cores, coverage. The
    // efficiency is jobstats' rule over our figures: each GPU's mean utilization, weighted by
    // sacct's ElapsedRaw of its job.
    let said = run("--low-gpu-efficiency");
    let row = report_row(&said, "Low GPU Efficiencies", USER2);
    let (mut used, mut total) = (0.0, 0.0);
    for (id, s) in stored.iter().filter(|(_, s)| s.totals.gpus > 0) {
        let elapsed: f64 = sacct_own_field(*id, "ElapsedRaw").parse().unwrap();
        for g in &s.gpus {
            used += elapsed * g.mean_utilization_percent.unwrap() / 100.0;
            total += elapsed;
        }
    }
    let eff: f64 = row[3].parse().unwrap_or_else(|_| panic!("{said}"));
    assert!(
        (eff - 100.0 * used / total).abs() <= 1.0,
        "ours {}: {said}",
        100.0 * used / total
    );
    assert_eq!((row[4].as_str(), row[7].as_str()), ("2", "1.0"), "{said}");
    // User, unused and used TB-hours, ratios (overall, mean, median), proportion, CPU-hours,
    // jobs: the three jobs, each read from its summary (a job without one is left out).
    let said = run("--excess-cpu-memory");
    let row = report_row(&said, "Users Allocating Excess CPU Memory", USER2);
    assert_eq!(row[8], "3", "{said}");
    // Cluster, users, CPU-hours, GPU-hours.
    let said = run("--usage-overview");
    let row = report_row(&said, "Usage Overview by Cluster", &cluster_name());
    assert!(row[1].parse::<u32>().is_ok_and(|n| n >= 1), "{said}");
}

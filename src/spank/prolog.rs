//! The job's run as Slurm gave it, written before the run's steps start: `slurm_spank_job_prolog`
//! runs in `slurmstepd spank prolog`, a process slurmd starts as root on each node of the job
//! before the run's first step there (only where slurmd saw the symbol when it started: restart
//! slurmd after installing the plugin). Its environment is slurmd's, built from the job's signed
//! credential: the job's own variables reach it only prefixed `SPANK_`. It writes the run file
//! ([`crate::step::run`]) that the run's steps copy into their records.
//!
//! Only a job that the plugin tracks gets a run file: the job's `--gpu-track` reaches this process
//! in its SPANK environment, and the settings decide as in slurmstepd.
//!
//! This process is not slurmstepd's step daemon: starting a command here is safe. On Slurm
//! releases whose credential has no end time (22.05), the time limit is asked of the controller
//! with `squeue`, on the job's first node only (one question per run, not one per node), for at
//! most [`SQUEUE_DEADLINE`]. Nothing here fails or holds the job: every problem is one log line.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::ffi::{self, Spank, spank_item};
use crate::config::Config;
use crate::slurmconf::{self, SlurmConf};
use crate::step::run::{self, RunFile};
use crate::step::spool::Spool;
use crate::trust;

/// How long the `squeue` that asks for the time limit may take.
pub(super) const SQUEUE_DEADLINE: Duration = Duration::from_secs(2);

/// Writes the run file of the job whose prolog this is.
pub(super) fn write_run_file(sp: Spank, config_path: &Path) -> Result<(), String> {
    let job_id = sp
        .u32_item(spank_item::S_JOB_ID)
        .ok_or("job_prolog: no job id from SPANK")?;
    let uid = sp
        .u32_item(spank_item::S_JOB_UID)
        .ok_or("job_prolog: no user id from SPANK")?;
    // Root writes where the settings say: they must be root's alone.
    trust::check_root_trusted(config_path, "settings file")?;
    let cfg = Config::load(config_path).map_err(|e| format!("settings not usable: {e}"))?;
    // Only a job the plugin will track gets a run file (and, on 22.05, a question to the
    // controller): a site that tracks on request pays nothing for its other jobs.
    let option = sp.getopt(&super::option::OPTION);
    if matches!(
        cfg.decide(option.as_deref()),
        Ok(crate::config::Tracking::Off)
    ) {
        return Ok(());
    }
    trust::check_root_trusted_dir(&cfg.spool_dir, "spool_dir")?;
    let slurm_conf = SlurmConf::read(&slurmconf::path_from_env()).unwrap_or_default();
    let cluster = slurmconf::cluster_dir_name(slurm_conf.cluster_name.as_deref());
    let now = crate::clock::unix_now() as i64;
    let env = |name: &str| std::env::var(name).ok();
    let mut info = run::from_prolog_env(env, now);
    if info.time_limit_seconds.is_none() && info.time_limit_unknown.as_deref() != Some("unlimited")
    {
        info = if first_node() {
            info.with_squeue_limit(squeue_limit(job_id))
        } else {
            other_node(info)
        };
    }
    let file = RunFile {
        job_id,
        uid,
        written_unix: now,
        run: info,
    };
    let spool = Spool::open(&cfg.spool_dir)
        .and_then(|s| s.for_cluster(&cluster))
        .map_err(|e| format!("job_prolog: spool: {e}"))?;
    spool
        .write_run(&file)
        .map_err(|e| format!("job_prolog: job {job_id}: run file not written: {e}"))?;
    Ok(())
}

/// The run of a node other than the job's first on a release without the end time (22.05):
/// its time limit is not asked for there, and the reason says so.
fn other_node(mut info: run::RunInfo) -> run::RunInfo {
    info.time_limit_unknown = Some(
        "slurmd gave no job end time (before Slurm 23.02); asked of the controller on the \
         job's first node only"
            .into(),
    );
    info
}

/// Whether this node is the first of the job's (slurmd's `SLURMD_NODENAME` and
/// `SLURM_JOB_NODELIST`); yes when either is missing.
fn first_node() -> bool {
    let (Ok(me), Ok(list)) = (
        std::env::var("SLURMD_NODENAME"),
        std::env::var("SLURM_JOB_NODELIST"),
    ) else {
        return true;
    };
    crate::gres::parse::expand_hostlist(&list)
        .first()
        .is_none_or(|first| *first == me)
}

/// The job's time limit as `squeue -h -j <id> -o %l` prints it. The prolog's environment has no
/// `PATH`: the system's directories are searched.
fn squeue_limit(job_id: u32) -> Result<String, String> {
    let mut cmd = Command::new("squeue");
    cmd.args(["-h", "-j", &job_id.to_string(), "-o", "%l"]);
    if std::env::var_os("PATH").is_none() {
        cmd.env("PATH", "/usr/bin:/bin:/usr/local/bin");
    }
    let out = crate::report::slurmdb::run(&mut cmd, SQUEUE_DEADLINE)?;
    let first = out.lines().next().unwrap_or_default().trim().to_string();
    if first.is_empty() {
        return Err("no answer".into());
    }
    ffi::log_debug(&format!(
        "gpu-tracker: job_prolog: job {job_id}: squeue says time limit {first:?}"
    ));
    Ok(first)
}

//! The job's run as Slurm gave it, written before the run's steps start: `slurm_spank_job_prolog`
//! runs in `slurmstepd spank prolog`, a process slurmd starts as root on each node of the job
//! before the run's first step there (only where slurmd saw the symbol when it started: restart
//! slurmd after installing the plugin). Its environment is slurmd's, built from the job's signed
//! credential: the job's own variables reach it only prefixed `SPANK_`. It writes the run file
//! ([`crate::step::run`]) that the run's steps copy into their records.
//!
//! Every job whose steps may be tracked gets a run file, for each of its runs: one tracked at
//! the job's level (its `--gpu-track` reaches this process in its SPANK environment, and the
//! settings decide as in slurmstepd; with `track_all`, every job that did not say `off`), and,
//! where the settings track srun steps, any other job too, since its steps may say
//! `srun --gpu-track`. The file names the job's submission token (the plugin passes it to the
//! prolog at submission, `SPANK_SLURM_GPU_TRACKER_SUBMIT`) and the run's start as the
//! credential says (23.02 on), so that a step takes only its own run's.
//!
//! This process is not slurmstepd's step daemon: starting a command here is safe. On Slurm
//! releases whose credential has no end time (22.05), the time limit of a job tracked at its
//! level is asked of the controller with `squeue`, on the job's first node only (one question
//! per run, not one per node), for at most [`SQUEUE_DEADLINE`]. The job's node list is
//! `SLURM_NODELIST`, which slurmd sets in every release (22.05 to 26.05; `SLURM_JOB_NODELIST`
//! only from 23.11). Nothing here fails or holds the job: every problem is one log line.

use std::path::Path;
use std::time::Duration;

use super::ffi::{self, Spank, spank_item};
use crate::config::slurmconf::{self, SlurmConf};
use crate::config::{Config, StepKind};
use crate::slurm::ctld;
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
    let option = sp.getopt(&super::option::OPTION);
    let plan = plan(&cfg, option.as_deref());
    if plan == Plan::Nothing {
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
        info = match plan {
            Plan::File { ask_limit: true } if first_node(env) => {
                info.with_squeue_limit(squeue_limit(job_id))
            }
            Plan::File { ask_limit: true } => other_node(info),
            _ => not_asked(info),
        };
    }
    let file = RunFile {
        job_id,
        uid,
        token: env(super::option::SPANK_SUBMIT_TOKEN_VAR).filter(|t| super::option::valid_token(t)),
        job_start_unix: run::credential_start(env),
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

/// What the prolog does for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// No step of the job can be tracked: nothing (a site that tracks on request pays nothing
    /// for its other jobs).
    Nothing,
    /// A run file; `ask_limit`: the job is tracked at its level, and on 22.05 its time limit is
    /// asked of the controller.
    File {
        /// Ask `squeue` for the time limit where the credential lacks it (first node only).
        ask_limit: bool,
    },
}

/// What the prolog does for a job whose `--gpu-track` is `option`, under settings `cfg`.
fn plan(cfg: &Config, option: Option<&str>) -> Plan {
    match cfg.decide(option) {
        Ok(crate::config::Tracking::On { .. }) => Plan::File { ask_limit: true },
        // Too short an interval: slurmstepd tracks at the shortest allowed.
        Err(_) if option.is_some() => Plan::File { ask_limit: true },
        // Not at the job's level; its srun steps may still say `--gpu-track`.
        _ if cfg.tracks(StepKind::Srun) => Plan::File { ask_limit: false },
        _ => Plan::Nothing,
    }
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

/// The run of a job not tracked at its level, on a release without the end time (22.05).
fn not_asked(mut info: run::RunInfo) -> run::RunInfo {
    info.time_limit_unknown = Some(
        "slurmd gave no job end time (before Slurm 23.02); asked of the controller only for \
         a job tracked from its start"
            .into(),
    );
    info
}

/// Whether this node is the first of the job's, from the prolog's environment (`get`):
/// slurmd's `SLURMD_NODENAME` and the job's node list, `SLURM_NODELIST` (every release) or
/// `SLURM_JOB_NODELIST` (23.11 on); yes when either is missing.
fn first_node(get: impl Fn(&str) -> Option<String>) -> bool {
    let Some(me) = get("SLURMD_NODENAME") else {
        return true;
    };
    let Some(list) = get("SLURM_NODELIST").or_else(|| get("SLURM_JOB_NODELIST")) else {
        return true;
    };
    crate::gres::parse::expand_hostlist(&list)
        .first()
        .is_none_or(|first| *first == me)
}

/// [`ctld::time_limit`], logged.
fn squeue_limit(job_id: u32) -> Result<String, String> {
    let limit = ctld::time_limit(job_id, SQUEUE_DEADLINE)?;
    ffi::log_debug(&format!(
        "gpu-tracker: job_prolog: job {job_id}: squeue says time limit {limit:?}"
    ));
    Ok(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::step::run::env_of as env;

    #[test]
    fn the_first_node_is_found_in_each_releases_prolog_environment() {
        // 22.05 and 23.02: SLURM_NODELIST only (prep_script_slurmd.c's _build_env).
        let slurm_22_05 = |me| [("SLURMD_NODENAME", me), ("SLURM_NODELIST", "gpu[1-3]")];
        assert!(first_node(env(&slurm_22_05("gpu1"))));
        assert!(!first_node(env(&slurm_22_05("gpu2"))));
        // 23.11 to 26.05: both, the same list.
        let later = |me| {
            [
                ("SLURMD_NODENAME", me),
                ("SLURM_NODELIST", "gpu[1-3]"),
                ("SLURM_JOB_NODELIST", "gpu[1-3]"),
            ]
        };
        assert!(first_node(env(&later("gpu1"))));
        assert!(!first_node(env(&later("gpu3"))));
        // The job's name only: still read.
        assert!(!first_node(env(&[
            ("SLURMD_NODENAME", "gpu2"),
            ("SLURM_JOB_NODELIST", "gpu[1-3]"),
        ])));
        // Without a node list or a name, this node asks (one question at most per node).
        assert!(first_node(env(&[("SLURMD_NODENAME", "gpu2")])));
        assert!(first_node(env(&[("SLURM_NODELIST", "gpu[1-3]")])));
    }

    #[test]
    fn every_job_whose_steps_may_be_tracked_gets_a_run_file() {
        let on_request = Config::default();
        let asked = Plan::File { ask_limit: true };
        let file_only = Plan::File { ask_limit: false };
        assert_eq!(plan(&on_request, Some("")), asked);
        assert_eq!(
            plan(&on_request, Some("0.01")),
            asked,
            "tracked at the least interval"
        );
        // Not tracked at its level: its steps may say `srun --gpu-track`.
        assert_eq!(plan(&on_request, None), file_only);
        assert_eq!(plan(&on_request, Some("off")), file_only);
        let all = Config {
            track_all: true,
            ..Config::default()
        };
        assert_eq!(plan(&all, None), asked);
        assert_eq!(plan(&all, Some("off")), file_only);
        // A site that tracks no srun step: only jobs tracked at their level.
        let batch_only = Config {
            steps: vec![StepKind::Batch],
            ..Config::default()
        };
        assert_eq!(plan(&batch_only, None), Plan::Nothing);
        assert_eq!(plan(&batch_only, Some("off")), Plan::Nothing);
        assert_eq!(plan(&batch_only, Some("")), asked);
    }
}

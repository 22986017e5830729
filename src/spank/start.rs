//! Starting to track a step in slurmstepd: the settings and what root may trust of them, the
//! step's facts, the spool, the phase-mark sockets and the live state, then the step's tracker.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ffi::{self, Spank, spank_item};
use super::{facts, state};
use crate::config::{Config, StepKind, Tracking};
use crate::gres::GpuOrder;
use crate::history::mark_dir;
use crate::step::spool::Spool;
use crate::step::{LiveSetup, StepSetup, StepTracker};
use crate::step::{record, run};
use crate::trust;

/// Reads the step's facts and starts tracking it, when the job asked (or the site tracks all).
pub(super) fn start_step(
    sp: Spank,
    config_path: &Path,
    option: Option<&str>,
) -> Result<(), String> {
    // Root reads the settings, loads the library they name and writes where they say: each
    // must be root's alone, or a user who can change it runs code as root in every step.
    let untrusted = |e: String| format!("{e}; tracking off");
    if std::fs::symlink_metadata(config_path).is_err_and(|e| e.kind() == ErrorKind::NotFound) {
        return Err(format!(
            "settings file {} is missing; tracking off",
            config_path.display()
        ));
    }
    trust::check_root_trusted(config_path, "settings file").map_err(untrusted)?;
    let cfg =
        Config::load(config_path).map_err(|e| format!("settings not usable, tracking off: {e}"))?;
    if cfg.nvml_library.contains('/') {
        // A bare name is found by the dynamic loader in the system's directories.
        trust::check_root_trusted(Path::new(&cfg.nvml_library), "nvml_library")
            .map_err(untrusted)?;
    }
    trust::check_root_trusted_dir(&cfg.spool_dir, "spool_dir").map_err(untrusted)?;
    if cfg.amd_root != "/" {
        // A simulated node (tests): its figures are believed only from root's own directory.
        trust::check_root_trusted_dir(Path::new(&cfg.amd_root), "amd_root").map_err(untrusted)?;
    }
    let interval = match cfg.decide(option) {
        Ok(Tracking::Off) => return Ok(()),
        Ok(Tracking::On { interval }) => interval,
        // Too short for this site: track at the shortest interval allowed rather than not at all.
        Err(_) if option.is_some() => cfg.min_interval,
        Err(e) => return Err(e),
    };
    let step_id = sp
        .u32_item(spank_item::S_JOB_STEPID)
        .ok_or("no step id from SPANK")?;
    let kind = facts::step_kind(step_id);
    if !cfg.tracks(kind) {
        return Ok(());
    }
    let job_id = sp
        .u32_item(spank_item::S_JOB_ID)
        .ok_or("no job id from SPANK")?;
    let (mut job, step) = facts::job_and_step(sp, step_id, kind, job_id);
    let uid = job.uid;
    let (gpu_order, gres_conf) = if step.alloc_gpus.is_empty() {
        (GpuOrder::Unknown("no GPUs allocated".into()), None)
    } else {
        facts::gpu_order(&cfg, &step.node)
    };
    let cluster = job.cluster.clone().unwrap_or_default();
    let spool = Spool::open(&cfg.spool_dir)
        .and_then(|s| s.for_cluster(&cluster))
        .map_err(|e| format!("spool: {e}"))?
        .readable_by(uid);
    // The run, with its time limit, as this run's job_prolog wrote it from Slurm's credential;
    // a step that cannot tie itself to its run is named by its own start.
    let now = crate::clock::unix_now() as i64;
    let claim = run::StepClaim {
        job_id,
        uid,
        token: job.submit_token.clone(),
        job_start: (kind == StepKind::Srun)
            .then(|| sp.getenv("SLURM_JOB_START_TIME"))
            .flatten()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .filter(|t| *t > 0),
        restart_count: sp
            .getenv("SLURM_RESTART_COUNT")
            .and_then(|c| c.trim().parse::<u32>().ok()),
        now,
        // Under RunInJob the extern step starts before its run's prolog (which it runs).
        not_before: (kind == StepKind::Extern && prolog_runs_in_job()).then_some(now),
    };
    job.run = spool.read_run(job_id).and_then(|f| run::accept(f, &claim));
    let record_run = match &job.run {
        Some(r) => run::RecordRun::Known(r.restart_count),
        None => run::RecordRun::Unknown { started_unix: now },
    };
    if !record::is_recorded(step_id, cfg.max_step_records) {
        // Past the job's bound on step records: not tracked, and its directory says so once
        // (the summary and the report show it). A job may have 40,000 steps.
        let instance = crate::step::spool::Instance {
            cluster: cluster.clone(),
            job_id,
            uid,
            token: job.submit_token.clone().unwrap_or_default(),
        };
        match spool.note_steps_left_out(&instance, cfg.max_step_records) {
            Ok(_) => ffi::log_debug(&format!(
                "gpu-tracker: job {job_id} step {step_id} not tracked: past max_step_records \
                 ({})",
                cfg.max_step_records
            )),
            Err(e) => ffi::log_info(&format!(
                "gpu-tracker: job {job_id} step {step_id} not tracked (past max_step_records), \
                 and the job's directory could not say so: {e}"
            )),
        }
        return Ok(());
    }
    let setup = StepSetup {
        job,
        step,
        interval: Duration::from_secs_f64(interval),
        checkpoint_interval: (cfg.checkpoint_interval > 0.0)
            .then(|| Duration::from_secs_f64(cfg.checkpoint_interval)),
        spool,
        nvml_library: (!cfg.nvml_library.is_empty()).then(|| PathBuf::from(&cfg.nvml_library)),
        amd_root: PathBuf::from(&cfg.amd_root),
        cgroup_root: PathBuf::from(crate::cgroup::DEFAULT_ROOT),
        proc_root: PathBuf::from(crate::proc::DEFAULT_ROOT),
        gpu_order,
        gres_conf,
        alerts: cfg.alert_rules(),
        mark_socket: None,
        warn_user: cfg.warn_user,
        live: live_setup(&cfg),
        record_run,
        memory_detail: cfg.memory_detail,
    };
    // The job's own directory of sockets on this node, listable by its user only.
    let mark_job_dir = match mark_dir(&cfg.mark_dir) {
        Ok(Some(top)) => match mark_dir::job_dir(&top, job_id, &setup.step.node, setup.job.uid) {
            Ok(d) => Some(d),
            Err(e) => {
                ffi::log_info(&format!("gpu-tracker: phase marks off: {e}"));
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            ffi::log_info(&format!("gpu-tracker: phase marks off: {e}"));
            None
        }
    };
    let mark_prefix = mark_job_dir.as_deref().map(mark_dir::prefix_of);
    let mut setup = setup;
    setup.mark_socket = mark_job_dir
        .as_ref()
        .map(|d| d.join(format!("{}.sock", record::file_safe(&setup.step.id))));
    let name = setup.record_name();
    let instance = setup.instance();
    let tracker = StepTracker::start(setup)?;
    if let Some(p) = &mark_prefix {
        // `gpu-tracker mark` in the step's tasks finds the sockets of the job on this node.
        if let Err(e) = sp.setenv(crate::history::mark::ENV, &p.display().to_string()) {
            ffi::log_debug(&format!(
                "gpu-tracker: phase marks: cannot set the variable: {e}"
            ));
        }
    }
    if let Some(to) = tracker.moved_aside() {
        // For the admin only: not copied into the new job's output.
        ffi::log_info(&format!(
            "gpu-tracker: job {job_id}: the spool held records of an earlier job with this id \
             (another user's, or before a reset); moved them to {} (root only)",
            to.display()
        ));
    }
    ffi::log_debug(&format!(
        "gpu-tracker: tracking job {job_id} step {} every {interval} s into {}",
        record::step_name(step_id),
        name
    ));
    let mut st = state();
    st.tracker = Some(tracker);
    st.spool_dir = Some(cfg.spool_dir.join(&cluster));
    st.instance = Some(instance);
    st.summary = cfg.summary;
    st.co2_grams_per_kwh = cfg.co2_grams_per_kwh;
    st.class_rules = Some(crate::report::classes::ClassRules::from_config(&cfg));
    st.max_summary_records = cfg.max_summary_records as usize;
    st.mark_job_dir = mark_job_dir;
    Ok(())
}

/// Whether slurm.conf's `PrologFlags` has `RunInJob` (the extern step runs the prolog).
fn prolog_runs_in_job() -> bool {
    crate::config::slurmconf::SlurmConf::read(&crate::config::slurmconf::path_from_env())
        .is_ok_and(|c| c.prolog_runs_in_job)
}

/// The directory of the phase-mark sockets, made when missing ([`mark_dir::prepare_top`]):
/// `None` when the settings turn marks off. Root binds sockets there, so it must be root's and
/// writable by no one else, and nobody else may list it.
fn mark_dir(dir: &str) -> Result<Option<PathBuf>, String> {
    if dir.is_empty() {
        return Ok(None);
    }
    let dir = PathBuf::from(dir);
    mark_dir::prepare_top(&dir)?;
    trust::check_root_trusted_dir(&dir, "mark_dir")?;
    Ok(Some(dir))
}

/// Where the step's live state goes (`None`: the settings turn it off; a `live_dir` that meets
/// the spool or the mark sockets is a problem, so nothing is written). The group is looked up
/// here, in `init_post_opt`, before slurmstepd forks a task: a lookup may take locks (NSS) that
/// a task forked meanwhile would inherit held. The directory is made and checked by the sampler
/// thread before each write.
fn live_setup(cfg: &Config) -> Option<LiveSetup> {
    if cfg.live_dir.is_empty() {
        return None;
    }
    let (gid, problem) = match cfg.live_group.as_str() {
        "" => (None, None),
        g => match crate::sys::group_id(g) {
            Some(gid) => (Some(gid), None),
            None => (None, Some(format!("live_group {g:?}: no such group"))),
        },
    };
    // A settings error that costs the live files only: the step is tracked all the same.
    let conflict = cfg.live_dir_conflict();
    if let Some(why) = &conflict {
        ffi::log_info(&format!("gpu-tracker: live state off: {why}"));
    }
    let problem = conflict.or(problem);
    Some(LiveSetup {
        dir: PathBuf::from(&cfg.live_dir),
        gid,
        interval: Duration::from_secs_f64(cfg.live_interval_seconds),
        problem,
    })
}

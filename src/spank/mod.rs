//! The SPANK plugin: the thin layer between Slurm and [`crate::step`].
//!
//! Built with `--features spank` into `libgpu_tracker.so`, installed by the admin and named in
//! `plugstack.conf`:
//!
//! ```text
//! optional /usr/lib/x86_64-linux-gnu/slurm/gpu_tracker.so config=/etc/slurm/gpu-tracker.toml
//! ```
//!
//! The same file is loaded by sbatch/salloc (allocator context: registers `--gpu-track` and
//! checks its value), srun (local: the same) and slurmstepd (remote: tracks the step); in
//! slurmd's prolog (job_script) it writes the job's run, with its time limit, for the run's steps
//! (`prolog.rs`). In every other context it does nothing. Every callback catches panics and errors, logs one
//! `gpu-tracker:` line, and returns success: tracking never fails a job. The only refusal is of
//! a malformed `--gpu-track` value at submission, before anything runs.

mod facts;
mod ffi;
mod option;
mod prolog;
mod start;
mod summary;

use std::ffi::{c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use crate::config;
use crate::step::StepTracker;
use crate::step::spool::Instance;
use ffi::{Spank, spank_context, spank_item, spank_t};

/// `plugin_name`, checked by Slurm's plugin loader.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static plugin_name: [u8; 12] = *b"gpu_tracker\0";

/// `plugin_type`: must be "spank".
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static plugin_type: [u8; 6] = *b"spank\0";

/// `plugin_version`: the installed Slurm's `SLURM_VERSION_NUMBER` (major and minor must match
/// the running Slurm's).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static plugin_version: u32 = ffi::SLURM_VERSION_NUMBER;

/// `spank_plugin_version`: this plugin's own version, for Slurm's logs.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static spank_plugin_version: u32 = 1;

/// Plugin state in this process (one slurmstepd serves one step).
struct State {
    /// `config=` from plugstack.conf (`None`: the default path).
    config_path: Option<PathBuf>,
    /// The value of `--gpu-track`: `None` when not given, `Some("")` for the bare flag.
    option: Option<String>,
    tracker: Option<StepTracker>,
    /// Where the tracked step's records go, and whether the site wants end-of-job summaries.
    spool_dir: Option<PathBuf>,
    summary: bool,
    /// The site's grams of CO2 per kWh for the summary's emissions line (0: none).
    co2_grams_per_kwh: f64,
    /// The site's job class thresholds for the summary (`None`: the built-in ones).
    class_rules: Option<crate::report::classes::ClassRules>,
    /// Step records the job's summary reads (`max_summary_records`).
    max_summary_records: usize,
    /// In `srun` (local context): the job and step it launched, from `local_user_init`.
    launched: Option<(u32, u32)>,
    /// The tracked step's job instance: the end-of-job summary covers its records only.
    instance: Option<Instance>,
    /// The job's directory of mark sockets on this node, removed when its last step ends.
    mark_job_dir: Option<PathBuf>,
}

static STATE: Mutex<State> = Mutex::new(State {
    config_path: None,
    option: None,
    tracker: None,
    spool_dir: None,
    summary: false,
    co2_grams_per_kwh: 0.0,
    class_rules: None,
    max_summary_records: crate::config::DEFAULT_MAX_SUMMARY_RECORDS,
    launched: None,
    instance: None,
    mark_job_dir: None,
});

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs a callback body: panics and errors become one log line; the result is always success
/// for Slurm, except where `may_fail` (option checks at submission).
fn guard(name: &str, may_fail: bool, body: impl FnOnce() -> Result<(), String>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(msg)) => {
            ffi::log_error(&format!("gpu-tracker: {msg}"));
            if may_fail { -1 } else { 0 }
        }
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("unknown panic");
            ffi::log_error(&format!(
                "gpu-tracker: internal error in {name} ({what}); this step is not tracked"
            ));
            0
        }
    }
}

fn in_context(wanted: &[spank_context]) -> bool {
    wanted.contains(&ffi::context())
}

/// Keeps Rust's default panic message off stderr: in a batch step, slurmstepd's stderr is the
/// job's output file. `guard` logs the panic instead.
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::panic::set_hook(Box::new(|_| {})));
}

/// `slurm_spank_init`: registers `--gpu-track` (allocator, local, remote) and reads the
/// `config=` argument.
///
/// # Safety
/// Called by SPANK with a valid handle and argument vector.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_init(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    // SAFETY: SPANK passes `ac` valid strings in `av`.
    let args = unsafe { ffi::args(ac, av) };
    guard("init", false, || {
        use spank_context::*;
        if !in_context(&[S_CTX_ALLOCATOR, S_CTX_LOCAL, S_CTX_REMOTE, S_CTX_JOB_SCRIPT]) {
            return Ok(());
        }
        quiet_panics();
        let mut st = state();
        for a in &args {
            match a.split_once('=') {
                Some(("config", p)) => st.config_path = Some(PathBuf::from(p)),
                _ => ffi::log_error(&format!(
                    "gpu-tracker: unknown plugstack.conf argument {a:?} (expected config=PATH)"
                )),
            }
        }
        drop(st);
        if in_context(&[S_CTX_JOB_SCRIPT]) {
            // The prolog and epilog take no option: only the settings' path is wanted there.
            return Ok(());
        }
        Spank::new(sp)
            .register(&option::OPTION)
            .map_err(|e| format!("cannot register --gpu-track: {e}"))
    })
}

/// `slurm_spank_init_post_opt` (remote, root): starts tracking the step if it asked.
///
/// # Safety
/// Called by SPANK with a valid handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_init_post_opt(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("init_post_opt", false, || {
        use spank_context::*;
        // At submission (sbatch, salloc, or srun outside an allocation): a token for the new
        // job, which its steps carry in their environment, so records of this job are never
        // mixed with those of an earlier job of the same user that had the same id.
        let new_job = in_context(&[S_CTX_ALLOCATOR])
            || (in_context(&[S_CTX_LOCAL]) && std::env::var_os("SLURM_JOB_ID").is_none());
        if new_job {
            let token = option::new_token();
            ffi::set_submission_env(option::SUBMIT_TOKEN_VAR, &token);
            // The job's prolog writes it into the run file, which the job's steps take only
            // with their own token (a reused job id is another job).
            if let Err(e) = Spank::new(sp).job_control_setenv(option::SUBMIT_TOKEN_VAR, &token) {
                ffi::log_debug(&format!(
                    "gpu-tracker: the submission token is not passed to the prolog: {e}"
                ));
            }
            // For the job's mails (gpu-tracker-mail, docs/MAIL.md): the user's
            // GPU_TRACKER_MAIL=off, and whether --gpu-track asked for tracking.
            let asked = state().option.clone();
            let opt_out = std::env::var(crate::mail::OPT_OUT_VAR).ok();
            for (name, value) in crate::mail::submission_env(asked.as_deref(), opt_out.as_deref()) {
                if let Err(e) = Spank::new(sp).job_control_setenv(name, value) {
                    ffi::log_debug(&format!(
                        "gpu-tracker: {name} is not passed to the job's mails: {e}"
                    ));
                }
            }
            return Ok(());
        }
        if !in_context(&[S_CTX_REMOTE]) {
            return Ok(());
        }
        let (path, option) = {
            let st = state();
            let path = st.config_path.clone();
            (
                path.unwrap_or_else(|| PathBuf::from(config::DEFAULT_PATH)),
                st.option.clone(),
            )
        };
        start::start_step(Spank::new(sp), &path, option.as_deref())
    })
}

fn task_pid(sp: Spank) -> Result<u32, String> {
    sp.int_item(spank_item::S_TASK_PID)
        .and_then(|p| u32::try_from(p).ok())
        .ok_or_else(|| "no task pid from SPANK".to_string())
}

/// `slurm_spank_task_post_fork` (remote, root, in slurmstepd): the task's pid and ids.
///
/// # Safety
/// Called by SPANK with a valid handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_task_post_fork(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("task_post_fork", false, || {
        let st = state();
        let Some(t) = st.tracker.as_ref() else {
            return Ok(());
        };
        let sp = Spank::new(sp);
        let pid = task_pid(sp)?;
        let local = sp
            .int_item(spank_item::S_TASK_ID)
            .and_then(|i| u32::try_from(i).ok());
        let global = sp.u32_item(spank_item::S_TASK_GLOBAL_ID);
        t.task_started(local, global, pid);
        Ok(())
    })
}

/// `slurm_spank_task_exit` (remote, root): the task's exit status and final cgroup counters.
///
/// # Safety
/// Called by SPANK with a valid handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_task_exit(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("task_exit", false, || {
        let st = state();
        let Some(t) = st.tracker.as_ref() else {
            return Ok(());
        };
        let sp = Spank::new(sp);
        let pid = task_pid(sp)?;
        t.task_ended(pid, sp.int_item(spank_item::S_TASK_EXIT_STATUS));
        Ok(())
    })
}

/// `slurm_spank_local_user_init` (`srun`, as the user): remembers the job and step launched
/// (SPANK gives them here, not at `exit`).
///
/// # Safety
/// Called by SPANK with a valid handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_local_user_init(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("local_user_init", false, || {
        if !in_context(&[spank_context::S_CTX_LOCAL]) {
            return Ok(());
        }
        let sp = Spank::new(sp);
        if let (Some(job), Some(step)) = (
            sp.u32_item(spank_item::S_JOB_ID),
            sp.u32_item(spank_item::S_JOB_STEPID),
        ) {
            state().launched = Some((job, step));
        }
        Ok(())
    })
}

/// `slurm_spank_exit`. Remote (slurmstepd, root): stops the sampler and writes the final
/// record; the batch step then appends the job's summary to the job's output through the
/// descriptor slurmstepd already holds (never by path). Local (`srun` outside a batch job, as the
/// user): prints the step's summary on the user's terminal.
///
/// # Safety
/// Called by SPANK with a valid handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_exit(
    _sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("exit", false, || {
        if in_context(&[spank_context::S_CTX_LOCAL]) {
            return summary::srun_summary();
        }
        summary::finish_step()
    })
}

/// `slurm_spank_job_prolog` (job_script context: `slurmstepd spank prolog`, root, on each node
/// of the job before the run's first step there): writes the run's time limit and restart count
/// for its steps (`prolog.rs`). Never fails the job: a problem is one log line.
///
/// # Safety
/// Called by SPANK with a valid handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_job_prolog(
    sp: spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    // SAFETY: SPANK passes `ac` valid strings in `av`.
    let args = unsafe { ffi::args(ac, av) };
    guard("job_prolog", false, || {
        if !in_context(&[spank_context::S_CTX_JOB_SCRIPT]) {
            return Ok(());
        }
        quiet_panics();
        // Slurm calls no `slurm_spank_init` before the job_prolog (its own stack, in a process
        // of its own): the settings' path comes with this call's arguments.
        let path =
            config::config_argument(&args).unwrap_or_else(|| PathBuf::from(config::DEFAULT_PATH));
        if std::fs::symlink_metadata(&path).is_err() {
            // No settings on this node: the plugin does nothing here, as in slurmstepd.
            return Ok(());
        }
        prolog::write_run_file(Spank::new(sp), &path)
    })
}

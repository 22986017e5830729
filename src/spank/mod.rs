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
//! checks its value), srun (local: the same) and slurmstepd (remote: tracks the step). In every
//! other context it does nothing. Every callback catches panics and errors, logs one
//! `gpu-tracker:` line, and returns success: tracking never fails a job. The only refusal is of
//! a malformed `--gpu-track` value at submission, before anything runs.

mod ffi;

use std::ffi::{c_char, c_int};
use std::io::ErrorKind;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::config::{self, Config, StepKind, Tracking};
use crate::gres::{self, GpuOrder};
use crate::slurmconf::{self, SlurmConf};
use crate::step::record::{self, JobInfo, StepInfo};
use crate::step::spool::{Instance, Spool};
use crate::step::{StepSetup, StepTracker};
use crate::trust;
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
    /// In `srun` (local context): the job and step it launched, from `local_user_init`.
    launched: Option<(u32, u32)>,
    /// The tracked step's job instance: the end-of-job summary covers its records only.
    instance: Option<Instance>,
}

static STATE: Mutex<State> = Mutex::new(State {
    config_path: None,
    option: None,
    tracker: None,
    spool_dir: None,
    summary: false,
    launched: None,
    instance: None,
});

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

static OPTION: ffi::OptionSpec = ffi::OptionSpec::new(
    c"gpu-track",
    c"[SECONDS|off]",
    c"Track this job's memory, CPU and GPU use (gpu-tracker); sample every SECONDS \
      (default: the site's interval); off: do not track where the site tracks every job.",
    option_cb,
);

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
        if !in_context(&[S_CTX_ALLOCATOR, S_CTX_LOCAL, S_CTX_REMOTE]) {
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
        Spank::new(sp)
            .register(&OPTION)
            .map_err(|e| format!("cannot register --gpu-track: {e}"))
    })
}

/// The `--gpu-track` callback: checks the value (a bad one refuses the submission with a clear
/// message) and remembers it.
unsafe extern "C" fn option_cb(_val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    // SAFETY: SPANK passes null or a valid C string.
    let mut value = unsafe { ffi::optarg(optarg) }.unwrap_or_default();
    // sbatch exports a bare `--gpu-track` to the job's environment as the text "(null)" (a NULL
    // printed with %s, seen on 22.05), and srun steps inside the job read it back from there.
    if value == "(null)" {
        value.clear();
    }
    guard("option", remote == 0, || {
        config::parse_track_option(&value)?;
        state().option = Some(value);
        Ok(())
    })
}

fn step_kind(step_id: u32) -> StepKind {
    match step_id {
        record::STEP_BATCH => StepKind::Batch,
        record::STEP_EXTERN => StepKind::Extern,
        record::STEP_INTERACTIVE => StepKind::Interactive,
        _ => StepKind::Srun,
    }
}

/// The most GPU indices one node's list may hold, and the largest index taken: far above any
/// node built, far below what a hostile list could make the plugin allocate.
const MAX_NODE_GPUS: usize = 256;

/// Slurm's GPU index list (`0,2` or `0-3`), as numbers, sorted, without repeats. `None` for a
/// list that is malformed or names more than [`MAX_NODE_GPUS`] devices or an index at or above
/// it: Slurm never writes such a list, so it was not Slurm's.
fn parse_index_list(s: &str) -> Option<Vec<u32>> {
    let max = MAX_NODE_GPUS as u32;
    let mut out = Vec::new();
    if s.len() > 4096 {
        return None;
    }
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let a = part.parse::<u32>().ok()?;
                (a, a)
            }
        };
        if a > b || b >= max || out.len() + (b - a) as usize >= MAX_NODE_GPUS {
            return None;
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// The step's GPUs as Slurm allocated them: the one variable slurmstepd writes for this kind
/// of step, and only where it writes it. slurmstepd's step setup (before SPANK's
/// `init_post_opt`) has Slurm's `gpu` GRES plugin set `SLURM_JOB_GPUS` for a batch or
/// interactive step and `SLURM_STEP_GPUS` for an srun step, or REMOVE it when the step has no
/// GPU (`gres_common_gpu_set_env`, 22.05 to 26.05); nothing writes either for the extern step,
/// nor anywhere the plugin is not loaded (`GresTypes` without `gpu`). Everywhere else the
/// variable is whatever the user exported, so it is not read.
fn allocated_gpus(sp: Spank, kind: StepKind, slurm_conf: &SlurmConf) -> Vec<u32> {
    let var = match kind {
        StepKind::Batch | StepKind::Interactive => "SLURM_JOB_GPUS",
        StepKind::Srun => "SLURM_STEP_GPUS",
        StepKind::Extern => return Vec::new(),
    };
    if !slurm_conf.has_gpu_gres() {
        return Vec::new();
    }
    let Some(text) = sp.getenv(var) else {
        return Vec::new();
    };
    parse_index_list(&text).unwrap_or_else(|| {
        ffi::log_error(&format!(
            "gpu-tracker: {var} is not a GPU list Slurm writes ({} bytes); no GPU is tracked",
            text.len()
        ));
        Vec::new()
    })
}

/// The job environment variable holding the submission's token (see
/// [`crate::step::spool::Instance`]). A `SLURM_` name: sbatch passes those on also with
/// `--export=NONE`.
const SUBMIT_TOKEN_VAR: &str = "SLURM_GPU_TRACKER_SUBMIT";

/// A token as the plugin makes them: digits and dots, at most 40 characters.
/// More nodes than any Slurm cluster has: a larger `SLURM_JOB_NUM_NODES` is not Slurm's.
const MAX_JOB_NODES: u32 = 1 << 20;

/// Whether `l` can be a Slurm hostlist as Slurm writes it: at most 4 KiB of node-name
/// characters, brackets, commas and dashes.
fn valid_hostlist(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 4096
        && l.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"[],-._".contains(&b))
}

fn valid_token(t: &str) -> bool {
    !t.is_empty() && t.len() <= 40 && t.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// A new submission token: the time of submission (seconds and nanoseconds) and the pid.
fn new_token() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{}.{:09}.{}",
        now.as_secs(),
        now.subsec_nanos(),
        std::process::id()
    )
}

fn short_hostname() -> String {
    crate::sys::hostname()
}

fn mb_to_bytes(mb: Option<u64>) -> Option<u64> {
    mb.filter(|m| *m > 0).map(|m| m.saturating_mul(1 << 20))
}

/// The order of this node's GPUs in Slurm's numbering, from gres.conf. The file is found from
/// the settings, else from slurmstepd's OWN environment's `SLURM_CONF` (slurmd sets it for
/// itself, configless too, and slurmstepd inherits it), never the job's: a job must not choose
/// which file the plugin trusts.
fn gpu_order(cfg: &Config, node: &str) -> (GpuOrder, Option<PathBuf>) {
    let setting = (!cfg.gres_conf.is_empty()).then(|| PathBuf::from(&cfg.gres_conf));
    let slurm_conf = std::env::var_os("SLURM_CONF").map(PathBuf::from);
    let paths = gres::candidates(setting.as_deref(), slurm_conf.as_deref());
    match gres::read_node_gres(&paths, node) {
        Ok(Some((path, conf))) => {
            let order = GpuOrder::from_conf(&conf, |p| gres::minor_of(Path::new(p)));
            (order, Some(path))
        }
        Ok(None) => {
            let tried: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            let why = format!("no gres.conf found (tried {})", tried.join(", "));
            (GpuOrder::Unknown(why), None)
        }
        Err(e) => (
            GpuOrder::Unknown(format!("gres.conf not readable: {e}")),
            None,
        ),
    }
}

/// Reads the step's facts and starts tracking it, when the job asked (or the site tracks all).
fn start_step(sp: Spank, config_path: &Path, option: Option<&str>) -> Result<(), String> {
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
    let kind = step_kind(step_id);
    if !cfg.tracks(kind) {
        return Ok(());
    }
    let job_id = sp
        .u32_item(spank_item::S_JOB_ID)
        .ok_or("no job id from SPANK")?;
    let uid = sp.u32_item(spank_item::S_JOB_UID).unwrap_or(u32::MAX);
    // Slurm gives the job id and NO_VAL (0xfffffffe) as array ids of a job that is no array task.
    let array_task = sp
        .u32_item(spank_item::S_JOB_ARRAY_TASK_ID)
        .filter(|t| *t < 0xffff_fffe);
    let array_job = array_task
        .and(sp.u32_item(spank_item::S_JOB_ARRAY_ID))
        .filter(|a| *a != 0);
    // Identity comes from what Slurm vouches for, never from the job's environment, which
    // the user sets at submission (and which the plugin reads before slurmstepd writes its
    // own variables): the user from S_JOB_UID (Slurm's signed credential), the node from
    // slurmstepd's own environment (slurmstepd sets SLURMD_NODENAME there from slurmd's
    // configuration before plugins load), the cluster from slurm.conf.
    let slurm_conf = SlurmConf::read(&slurmconf::path_from_env()).unwrap_or_default();
    let hostname = short_hostname();
    let node = std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| hostname.clone());
    let gpus = allocated_gpus(sp, kind, &slurm_conf);
    let job = JobInfo {
        id: job_id,
        array_job_id: array_job,
        array_task_id: array_job.and(array_task),
        user: crate::sys::user_name(uid).unwrap_or_default(),
        uid,
        gid: sp.u32_item(spank_item::S_JOB_GID).unwrap_or(u32::MAX),
        // Slurm overwrites both in the batch step's environment (env_array_for_batch_job); in
        // srun's steps they are what srun was told. Figures for the job's own user only.
        nodes: sp
            .getenv("SLURM_JOB_NUM_NODES")
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| (1..=MAX_JOB_NODES).contains(n)),
        node_list: sp
            .getenv("SLURM_JOB_NODELIST")
            .filter(|l| valid_hostlist(l)),
        // 0 when the job asked for no task count.
        tasks: (kind == StepKind::Batch)
            .then(|| sp.u32_item(spank_item::S_JOB_TOTAL_TASK_COUNT))
            .flatten()
            .filter(|n| *n > 0),
        alloc_memory_bytes: mb_to_bytes(sp.u64_item(spank_item::S_JOB_ALLOC_MEM)),
        alloc_cores: sp.str_item(spank_item::S_JOB_ALLOC_CORES),
        name: sp
            .getenv("SLURM_JOB_NAME")
            .map(|n| record::clean_text(&n, 100)),
        cluster: Some(slurmconf::cluster_dir_name(
            slurm_conf.cluster_name.as_deref(),
        )),
        submit_token: sp.getenv(SUBMIT_TOKEN_VAR).filter(|t| valid_token(t)),
    };
    let step = StepInfo {
        id: record::step_name(step_id),
        kind: kind.as_str().into(),
        node,
        hostname,
        node_index: sp.u32_item(spank_item::S_JOB_NODEID),
        // In slurmstepd S_JOB_NNODES is the step's node count (0 in the batch step).
        nodes: match kind {
            StepKind::Batch => Some(1),
            _ => sp.u32_item(spank_item::S_JOB_NNODES).filter(|n| *n > 0),
        },
        alloc_cpus: sp.u16_item(spank_item::S_JOB_NCPUS).map(u32::from),
        alloc_cores: sp.str_item(spank_item::S_STEP_ALLOC_CORES),
        alloc_memory_bytes: mb_to_bytes(sp.u64_item(spank_item::S_STEP_ALLOC_MEM)),
        alloc_gpus: gpus,
        local_tasks: sp.u32_item(spank_item::S_JOB_LOCAL_TASK_COUNT),
        // The batch step runs one task, the script; Slurm answers with the job's task count.
        total_tasks: match kind {
            StepKind::Batch => Some(1),
            _ => sp.u32_item(spank_item::S_JOB_TOTAL_TASK_COUNT),
        },
        command: sp
            .argv()
            .filter(|a| !a.is_empty())
            .map(|a| record::clean_text(&a.join(" "), 200)),
        ..StepInfo::default()
    };
    let (gpu_order, gres_conf) = if step.alloc_gpus.is_empty() {
        (GpuOrder::Unknown("no GPUs allocated".into()), None)
    } else {
        gpu_order(&cfg, &step.node)
    };
    let cluster = job.cluster.clone().unwrap_or_default();
    let spool = Spool::open(&cfg.spool_dir)
        .and_then(|s| s.for_cluster(&cluster))
        .map_err(|e| format!("spool: {e}"))?
        .readable_by(uid);
    let setup = StepSetup {
        job,
        step,
        interval: Duration::from_secs_f64(interval),
        checkpoint_interval: (cfg.checkpoint_interval > 0.0)
            .then(|| Duration::from_secs_f64(cfg.checkpoint_interval)),
        spool,
        nvml_library: (!cfg.nvml_library.is_empty()).then(|| PathBuf::from(&cfg.nvml_library)),
        cgroup_root: PathBuf::from(crate::cgroup::DEFAULT_ROOT),
        proc_root: PathBuf::from(crate::proc::DEFAULT_ROOT),
        gpu_order,
        gres_conf,
        alerts: cfg.alert_rules(),
        mark_socket: None,
        warn_user: cfg.warn_user,
    };
    let mark_prefix = match mark_dir(&cfg.mark_dir) {
        Ok(Some(dir)) => {
            Some(dir.join(format!("{job_id}.{}.", record::file_safe(&setup.step.node))))
        }
        Ok(None) => None,
        Err(e) => {
            ffi::log_info(&format!("gpu-tracker: phase marks off: {e}"));
            None
        }
    };
    let mut setup = setup;
    setup.mark_socket = mark_prefix
        .as_ref()
        .map(|p| PathBuf::from(format!("{}{}.sock", p.display(), setup.step.id)));
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
    Ok(())
}

/// The directory of the phase-mark sockets, made when missing: `None` when the settings turn
/// marks off. Root binds sockets there, so it must be root's and writable by no one else.
fn mark_dir(dir: &str) -> Result<Option<PathBuf>, String> {
    if dir.is_empty() {
        return Ok(None);
    }
    let dir = PathBuf::from(dir);
    if std::fs::symlink_metadata(&dir).is_err() {
        use std::os::unix::fs::DirBuilderExt;
        // Only the last component is made: its parent (/run) must be there.
        if let Err(e) = std::fs::DirBuilder::new().mode(0o755).create(&dir)
            && e.kind() != std::io::ErrorKind::AlreadyExists
        {
            return Err(format!("cannot make mark_dir {}: {e}", dir.display()));
        }
    }
    let m = std::fs::symlink_metadata(&dir).map_err(|e| format!("mark_dir: {e}"))?;
    use std::os::unix::fs::MetadataExt;
    if !m.is_dir() || m.uid() != 0 || m.mode() & 0o022 != 0 {
        return Err(format!(
            "mark_dir {} must be a directory of root's that no one else can write to",
            dir.display()
        ));
    }
    trust::check_root_trusted_dir(&dir, "mark_dir")?;
    Ok(Some(dir))
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
            ffi::set_submission_env(SUBMIT_TOKEN_VAR, &new_token());
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
        start_step(Spank::new(sp), &path, option.as_deref())
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

/// How long the batch step waits for other steps' records to be final before it writes the
/// job's summary (a step's record lands just after its tasks end).
const BATCH_SUMMARY_WAIT: Duration = Duration::from_secs(3);
/// How long `srun` waits for its step's record before printing the summary.
const SRUN_SUMMARY_WAIT: Duration = Duration::from_secs(5);

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
            return srun_summary();
        }
        let (tracker, spool_dir, summary, instance) = {
            let mut st = state();
            (
                st.tracker.take(),
                st.spool_dir.take(),
                st.summary,
                st.instance.take(),
            )
        };
        let Some(t) = tracker else {
            return Ok(());
        };
        // The summary goes to the job's output unless that is on a FUSE filesystem: a FUSE
        // daemon that stops answering would hold slurmstepd (and the job, in COMPLETING) for
        // ever, whatever the deadline, since the kernel waits for it uninterruptibly.
        let is_batch = t.is_batch();
        let fuse_output = (is_batch && summary)
            .then(|| crate::sys::fd_filesystem_type(2))
            .flatten()
            .filter(|fs| crate::sys::is_fuse(fs));
        if let Some(fs) = &fuse_output {
            t.note(format!(
                "the job's output is on a {fs} filesystem: no summary was appended to it \
                 (gpu-tracker-report shows it)"
            ));
        }
        let (rec, written) = t.finish();
        // What went wrong while recording, in one line for the admin (the record has it too).
        if !rec.sampler.faults.is_empty() {
            ffi::log_info(&format!(
                "gpu-tracker: job {} step {}: recorded with faults: {}",
                rec.job.id,
                rec.step.id,
                record::terminal_safe(&rec.sampler.faults.join("; "))
            ));
        }
        match written {
            Ok(path) => ffi::log_debug(&format!("gpu-tracker: wrote {}", path.display())),
            Err(e) => ffi::log_error(&format!(
                "gpu-tracker: job {} step {}: record not written: {e}",
                rec.job.id, rec.step.id
            )),
        }
        if rec.step.id != "batch" || !summary {
            return Ok(());
        }
        if let Some(fs) = fuse_output {
            // Not an error line: slurmstepd copies those to its stderr, the job's output, the
            // very file that may not answer. The record's notes say it too.
            ffi::log_debug(&format!(
                "gpu-tracker: job {}: summary not written: the job's output is on a {fs} \
                 filesystem, which could hold the step for ever",
                rec.job.id
            ));
            return Ok(());
        }
        let (Some(root), Some(instance)) = (spool_dir, instance) else {
            return Ok(());
        };
        let Some(text) = crate::report::end_of_job_text(&root, &instance, None, BATCH_SUMMARY_WAIT)
        else {
            return Ok(());
        };
        // slurmstepd's descriptor 2 is the batch script's stderr file (the job's output file
        // unless --error names another), opened by Slurm for the user and open until now.
        // Bounded (a deadline; a write that takes nothing is an error). A failure is logged at
        // info level: an error line would go to slurmstepd's stderr, the file that failed.
        if let Err(e) =
            crate::sys::write_to_job_output(2, format!("\n{text}").as_bytes(), rec.job.uid)
        {
            ffi::log_info(&format!(
                "gpu-tracker: job {}: summary not written to the job's output: {e}",
                rec.job.id
            ));
        }
        Ok(())
    })
}

/// The step's summary on the terminal of an `srun --gpu-track` run outside a batch script (in a
/// batch script the job's summary covers the step).
fn srun_summary() -> Result<(), String> {
    if std::env::var("ENVIRONMENT").is_ok_and(|e| e == "BATCH") {
        return Ok(());
    }
    let (path, option, launched) = {
        let st = state();
        (
            st.config_path
                .clone()
                .unwrap_or_else(|| PathBuf::from(config::DEFAULT_PATH)),
            st.option.clone(),
            st.launched,
        )
    };
    let Some((job, step)) = launched else {
        return Ok(());
    };
    let Ok(cfg) = Config::load(&path) else {
        return Ok(());
    };

    let on = matches!(cfg.decide(option.as_deref()), Ok(Tracking::On { .. }))
        || option.as_deref().is_some_and(|o| o != "off");
    if !on || !cfg.summary || !cfg.tracks(StepKind::Srun) {
        return Ok(());
    }
    let name = record::step_name(step);
    // srun runs as the user: it reads what the user may read, of the job it launched.
    let cluster = slurmconf::this_cluster_dir();
    let instance = Instance {
        cluster: cluster.clone(),
        job_id: job,
        uid: crate::sys::uid(),
        token: std::env::var(SUBMIT_TOKEN_VAR)
            .ok()
            .filter(|t| valid_token(t))
            .unwrap_or_default(),
    };
    let root = cfg.spool_dir.join(&cluster);
    let text = crate::report::end_of_job_text(&root, &instance, Some(&name), SRUN_SUMMARY_WAIT)
        .unwrap_or_else(|| {
            format!(
                "gpu-tracker: no record of job {job} step {name} readable on this host; run gpu-tracker-report {job}.{name} on the node\n"
            )
        });
    use std::io::Write;
    let _ = std::io::stderr().write_all(text.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_index_lists() {
        assert_eq!(parse_index_list("0"), Some(vec![0]));
        assert_eq!(parse_index_list("2,0"), Some(vec![0, 2]));
        assert_eq!(parse_index_list("1-3,7"), Some(vec![1, 2, 3, 7]));
        assert_eq!(parse_index_list(""), Some(vec![]));
        assert_eq!(parse_index_list("x,1"), None);
        assert_eq!(parse_index_list("3-1"), None);
        assert_eq!(parse_index_list("0-255"), Some((0..256).collect()));
        assert_eq!(parse_index_list("0-256"), None);
        assert_eq!(parse_index_list("7-4000000000"), None);
        let many = vec!["0-200"; 300].join(",");
        assert_eq!(parse_index_list(&many), None);
    }

    #[test]
    fn submit_tokens_are_checked() {
        assert!(valid_token(&new_token()));
        assert!(!valid_token(""));
        assert!(!valid_token("1.2\u{1b}[31m"));
        assert!(!valid_token(&"1".repeat(41)));
    }
}

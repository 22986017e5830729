//! Tracking one Slurm job step on one node, as the SPANK plugin drives it inside slurmstepd.
//! Nothing here knows SPANK: the plugin hands over plain facts (ids, pids, exit statuses) and
//! this module does the rest, so it is tested without Slurm.
//!
//! Lifecycle (see `../shared/DESIGN.md` section 2 for why):
//! - [`StepTracker::start`] (from `init_post_opt`, root): checks the spool, writes a first
//!   (incomplete) record, starts the sampler thread.
//! - [`StepTracker::task_started`] (from `task_post_fork`, root): records the task and its
//!   cgroup. Cheap: one small file read and a lock. Once the step's last local task is started
//!   (no task fork can race it then: see [`nvml_gate`]), the sampler thread opens NVML on a
//!   thread of its own, if the step has GPUs, and marks the descriptors NVML opened
//!   close-on-exec.
//! - [`StepTracker::task_ended`] (from `task_exit`, root): the task's exit status and the final
//!   counters of its cgroup, and of the step's cgroup after the last task (Slurm removes the
//!   cgroups before `exit`).
//! - [`StepTracker::finish`] (from `exit`): stops the thread, waits for it at most
//!   [`FINISH_DEADLINE`], writes the final record. A thread that does not stop in time (an NVML
//!   call that never returns) is left behind: the record is built from the figures of its last
//!   sample and says so.
//!
//! The thread starts no process (slurmstepd reaps any child with `wait3(-1)`), takes no lock a
//! forked task could need, and rewrites the record (marked incomplete) every checkpoint interval.
//! Its cost is bounded: each sample reads a bounded number of processes ([`procs`]), and the
//! interval lengthens while samples cost more than a tenth of it ([`crate::sampler::pace`]).

mod build;
mod cgroups;
pub mod nvml_gate;
pub mod procs;
pub mod record;
pub mod safe_read;
mod sample;
pub mod spool;

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cgroup::{Cgroup, CgroupReading};
use crate::gpu::{GpuConfig, GpuInfo, LazyGpu};
use crate::gres::GpuOrder;
use crate::history::mark::Inbox;
use crate::history::{AlertRules, Event, Recorder};
use crate::proc::ProcFs;
use crate::sampler::gpus::GpuAccumulator;
use crate::sampler::pace::Pace;
use crate::sys;
use procs::ProcReader;
use record::{JobInfo, StepInfo, StepRecord};
use spool::Spool;

use build::build;
use cgroups::job_cgroup_of;
pub use cgroups::step_cgroup_of;
pub use sample::map_allocated;
use sample::sample;

/// What the plugin knows when a step starts.
#[derive(Debug, Clone)]
pub struct StepSetup {
    /// The job.
    pub job: JobInfo,
    /// The step (start, end and elapsed are filled in here).
    pub step: StepInfo,
    /// Time between samples.
    pub interval: Duration,
    /// Time between rewrites of the running step's record; `None`: only the final record.
    pub checkpoint_interval: Option<Duration>,
    /// The spool.
    pub spool: Spool,
    /// The NVIDIA library; `None` turns GPUs off.
    pub nvml_library: Option<PathBuf>,
    /// Where the cgroup filesystem is.
    pub cgroup_root: PathBuf,
    /// Where procfs is.
    pub proc_root: PathBuf,
    /// How Slurm's GPU indices on this node map to device files (from gres.conf).
    pub gpu_order: GpuOrder,
    /// The gres.conf `gpu_order` was read from (`None`: none found).
    pub gres_conf: Option<PathBuf>,
    /// When alerts fire.
    pub alerts: AlertRules,
    /// Where to listen for phase marks (`None`: marks off); its directory must be root's.
    pub mark_socket: Option<PathBuf>,
    /// Write alert lines to the job's stderr (descriptor 2 of a batch step's slurmstepd).
    pub warn_user: bool,
}

impl StepSetup {
    /// The record's file name: `<node>.<step>.json`, the node name cut to letters, digits,
    /// `-`, `_` and `.` (a file name is shown on terminals).
    pub fn record_name(&self) -> String {
        format!(
            "{}.{}.json",
            record::file_safe(&self.step.node),
            self.step.id
        )
    }

    /// The job instance the records belong to.
    pub fn instance(&self) -> spool::Instance {
        spool::Instance {
            cluster: self.job.cluster.clone().unwrap_or_default(),
            job_id: self.job.id,
            uid: self.job.uid,
            token: self.job.submit_token.clone().unwrap_or_default(),
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Task {
    local_id: Option<u32>,
    global_id: Option<u32>,
    pid: u32,
    cgroup: Option<Cgroup>,
    ended: bool,
    status: Option<i32>,
    final_cgroup: Option<CgroupReading>,
    peak_rss: u64,
    largest_hwm: u64,
    cpu_sampled: f64,
    /// `None` until a sample sees the task.
    max_threads: Option<u64>,
    max_processes: Option<u64>,
}

#[derive(Debug, Default)]
struct Shared {
    tasks: Vec<Task>,
    step_cgroup: Option<Cgroup>,
    final_step: Option<CgroupReading>,
    /// The job's cgroup on this node (the `job_*` above the step's), memory only.
    job_cgroup: Option<Cgroup>,
    /// Its latest reading: at every sample, and when the step's last task ended.
    job_reading: Option<CgroupReading>,
    last_step: Option<CgroupReading>,
    stop: bool,
    notes: Vec<String>,
    /// The sampler thread has returned (or panicked).
    sampler_done: bool,
    /// It panicked.
    sampler_failed: bool,
    /// Task events (Unix time, event) for the sampler thread to record.
    events: Vec<(f64, Event)>,
}

/// How long [`StepTracker::finish`] (and `Drop`) wait for the sampler thread to stop. A sample
/// takes milliseconds; this is for a driver call that never returns. Slurm waits for `exit`
/// before it reports the step complete, so a stuck thread must not hold it: 5 s is far above a
/// sample's cost, far below Slurm's own kill timeouts (`UnkillableStepTimeout`: 60 s).
pub const FINISH_DEADLINE: Duration = Duration::from_secs(5);

/// How soon after a task starts the sampler reads it: time for slurmstepd to start the step's
/// other tasks and let them exec, so that one sample sees them all.
const NEW_TASK_SAMPLE_DELAY: Duration = Duration::from_millis(20);

/// How often the sampler thread looks for phase marks between samples (one non-blocking
/// `recvmsg`): a mark's sample comes this late at most.
const MARK_POLL: Duration = Duration::from_millis(100);

/// Most alert lines one step writes to the job's stderr.
pub const WARN_LINES: usize = 10;

/// Now, in Unix seconds (kept here for the binaries: [`crate::clock::unix_now`]).
pub use crate::clock::unix_now;

fn task_name(id: Option<u32>) -> String {
    id.map_or_else(|| "?".into(), |i| i.to_string())
}

/// What the sampler thread accumulates: the figures the record is built from. A copy is
/// published after every sample, for a `finish` that cannot wait for the thread.
#[derive(Clone)]
struct Acc {
    samples: u64,
    sample_us_total: f64,
    sample_us_max: f64,
    sampled_peak_rss: u64,
    largest_hwm: u64,
    max_cores: f64,
    gpu: GpuAccumulator,
    gpu_opened: bool,
    gpu_mapping: Option<String>,
    gpu_devices: Vec<(Option<u32>, GpuInfo)>,
    thread_cpu: f64,
    notes: Vec<String>,
    /// The notes that say something went wrong (see [`Acc::fault`]).
    faults: Vec<String>,
    /// Samples at which the step's cgroup could not be read, and the first failure.
    cgroup_misses: u64,
    cgroup_first_miss: Option<String>,
    pace: Pace,
    /// Samples that read only part of the processes.
    partial_samples: u64,
    /// Most processes listed at one sample.
    most_processes: usize,
    /// When and why NVML was opened.
    nvml_opened: Option<nvml_gate::Trigger>,
    /// Descriptors of NVML marked close-on-exec.
    nvml_cloexec: u64,
    /// When the latest sample was taken.
    last_sample: Option<chrono::DateTime<chrono::Local>>,
    /// `Some(false)`: the thread did not stop by the deadline (final records only).
    stopped: Option<bool>,
    /// The history knows the GPUs' UUIDs.
    gpus_named: bool,
}

impl Acc {
    fn new(interval: Duration) -> Acc {
        Acc {
            samples: 0,
            sample_us_total: 0.0,
            sample_us_max: 0.0,
            sampled_peak_rss: 0,
            largest_hwm: 0,
            max_cores: 0.0,
            gpu: GpuAccumulator::default(),
            gpu_opened: false,
            gpu_mapping: None,
            gpu_devices: Vec::new(),
            thread_cpu: 0.0,
            notes: Vec::new(),
            faults: Vec::new(),
            cgroup_misses: 0,
            cgroup_first_miss: None,
            pace: Pace::new(interval),
            partial_samples: 0,
            most_processes: 0,
            nvml_opened: None,
            nvml_cloexec: 0,
            last_sample: None,
            stopped: None,
            gpus_named: false,
        }
    }

    fn note(&mut self, n: String) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }

    /// A note that says something went wrong: kept in the record's `faults` too, and logged
    /// when the step ends.
    fn fault(&mut self, n: String) {
        if !self.faults.contains(&n) {
            self.faults.push(n.clone());
        }
        self.note(n);
    }
}

/// What the sampler thread keeps for itself between samples.
#[derive(Default)]
struct Work {
    last_cpu: Option<(Instant, f64)>,
    procs: ProcReader,
}

struct Inner {
    setup: StepSetup,
    started: Instant,
    start_time: chrono::DateTime<chrono::Local>,
    shared: Mutex<Shared>,
    /// The step over time: timeline, events, idle GPUs. Updated in place by the sampler thread
    /// (never held across a `/proc` or NVML call), read by the record's builder: not copied
    /// at every sample like `figures`.
    history: Mutex<Recorder>,
    wake: Condvar,
    /// The sampler's figures as of its latest sample. Never held across a `/proc` or NVML call.
    figures: Mutex<Acc>,
    /// Whether the final record is written; held while any record is written, so no checkpoint
    /// of a thread that comes back late replaces the final record.
    final_written: Mutex<bool>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic elsewhere never takes the data with it: the figures stay usable.
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, acc: &Acc) {
        *self.figures.lock().unwrap_or_else(|p| p.into_inner()) = acc.clone();
    }

    fn history(&self) -> MutexGuard<'_, Recorder> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn figures(&self) -> Acc {
        self.figures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// One tracked step. See the module documentation for the order of calls.
pub struct StepTracker {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
    /// Where an earlier job instance's directory was moved at start, if one was in the way.
    moved_aside: Option<PathBuf>,
}

impl StepTracker {
    /// Starts tracking: checks that the record can be written, writes a first (incomplete)
    /// record, then starts the sampler thread.
    pub fn start(setup: StepSetup) -> Result<StepTracker, String> {
        let mut shared = Shared::default();
        let claim = setup
            .spool
            .claim_job_dir(&setup.instance())
            .map_err(|e| format!("spool: {e}"))?;
        if let Some(e) = claim.not_shared {
            // Still writable by root: track, and say the user cannot read the records.
            shared
                .notes
                .push(format!("records are readable by root only: {e}"));
        }
        // Marks are taken from the job's user (and root) only; a socket that cannot be made
        // turns marks off for the step, not tracking.
        let inbox = match &setup.mark_socket {
            Some(p) => match Inbox::bind(p, setup.job.uid) {
                Ok(i) => Some(i),
                Err(e) => {
                    shared.notes.push(format!(
                        "phase marks are off for this step: cannot listen at {}: {e}",
                        p.display()
                    ));
                    None
                }
            },
            None => None,
        };
        let start_unix = unix_now();
        let inner = Arc::new(Inner {
            figures: Mutex::new(Acc::new(setup.interval)),
            history: Mutex::new(Recorder::new(
                start_unix,
                setup.interval.as_secs_f64(),
                setup.alerts,
            )),
            setup,
            started: Instant::now(),
            start_time: chrono::Local::now(),
            shared: Mutex::new(shared),
            wake: Condvar::new(),
            final_written: Mutex::new(false),
        });
        // A first (incomplete) record before any task starts: whoever reads the job's records
        // (the batch step's summary, srun's, the report) knows of every step from then on, even
        // one whose tasks end before its first sample and whose final record is still being
        // written when the batch script ends. A failure is the record's fault, not the step's.
        let start_fault = write(
            &inner,
            &build(&inner, &Acc::new(inner.setup.interval), false),
        )
        .err()
        .map(|e| format!("the step's first record was not written: {e}"));
        let thread_inner = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("gpu-tracker".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(&thread_inner, inbox, start_fault)
                }));
                let mut sh = thread_inner.lock();
                sh.sampler_done = true;
                sh.sampler_failed = r.is_err();
                drop(sh);
                thread_inner.wake.notify_all();
            })
            .map_err(|e| format!("cannot start the sampler thread: {e}"))?;
        Ok(StepTracker {
            inner,
            thread: Some(thread),
            moved_aside: claim.moved_aside,
        })
    }

    /// Whether this is a batch step.
    pub fn is_batch(&self) -> bool {
        self.inner.setup.step.id == "batch"
    }

    /// Adds a line to the record's notes.
    pub fn note(&self, text: String) {
        let mut sh = self.inner.lock();
        if !sh.notes.contains(&text) {
            sh.notes.push(text);
        }
    }

    /// Where the directory of an earlier job with this id was moved at start (for the log).
    pub fn moved_aside(&self) -> Option<&std::path::Path> {
        self.moved_aside.as_deref()
    }

    /// A task was started (its pid is in its cgroup by now).
    pub fn task_started(&self, local_id: Option<u32>, global_id: Option<u32>, pid: u32) {
        let s = &self.inner.setup;
        let procfs = ProcFs::new(&s.proc_root);
        let text = procfs.pid_cgroup(pid).ok();
        let cgroup = text
            .as_deref()
            .and_then(|t| Cgroup::from_proc_cgroup(&s.cgroup_root, t).ok());
        // The step's cgroup is found once, from the first task (each task costs slurmstepd's
        // launch path a file read, not a directory walk).
        let known = self.inner.lock().step_cgroup.is_some();
        let step_cg = if known {
            None
        } else {
            text.as_deref()
                .and_then(|t| step_cgroup_of(&s.cgroup_root, t))
        };
        let mut sh = self.inner.lock();
        if sh.step_cgroup.is_none() {
            sh.job_cgroup = step_cg.as_ref().and_then(job_cgroup_of);
            sh.step_cgroup = step_cg;
        }
        // A task cgroup is the task's own only when it is below the step's.
        let own = cgroup.filter(|c| {
            sh.step_cgroup
                .as_ref()
                .is_some_and(|st| c.memory_dir != st.memory_dir)
        });
        sh.tasks.push(Task {
            local_id,
            global_id,
            pid,
            cgroup: own,
            ..Task::default()
        });
        let id = global_id.or(local_id);
        sh.events.push((
            unix_now(),
            Event {
                task: id,
                ..Event::new(
                    "task_start",
                    format!("task {} started (pid {pid})", task_name(id)),
                )
            },
        ));
        drop(sh);
        self.inner.wake.notify_all();
    }

    /// A task ended with wait status `status` (as `waitpid` gives it). Reads the final counters
    /// of its cgroup, and of the step's after the last task.
    pub fn task_ended(&self, pid: u32, status: Option<i32>) {
        let expected = self.inner.setup.step.local_tasks;
        let mut sh = self.inner.lock();
        if let Some(t) = sh.tasks.iter_mut().find(|t| t.pid == pid && !t.ended) {
            t.ended = true;
            t.status = status;
            t.final_cgroup = t.cgroup.as_ref().and_then(|c| c.read().ok());
            let id = t.global_id.or(t.local_id);
            let (value, how) = match status {
                Some(w) if libc::WIFEXITED(w) => (
                    Some(f64::from(libc::WEXITSTATUS(w))),
                    format!("exited with code {}", libc::WEXITSTATUS(w)),
                ),
                Some(w) if libc::WIFSIGNALED(w) => (
                    None,
                    format!(
                        "was killed by signal {}",
                        sys::signal_name(libc::WTERMSIG(w))
                    ),
                ),
                _ => (None, "ended".to_string()),
            };
            sh.events.push((
                unix_now(),
                Event {
                    t: 0.0,
                    kind: "task_exit".into(),
                    task: id,
                    gpu: None,
                    name: None,
                    value,
                    detail: format!("task {} {how}", task_name(id)),
                },
            ));
        }
        let ended = sh.tasks.iter().filter(|t| t.ended).count() as u32;
        let all = expected.map_or(sh.tasks.iter().all(|t| t.ended), |n| ended >= n);
        if all {
            if let Some(r) = sh.step_cgroup.as_ref().and_then(|c| c.read().ok()) {
                sh.final_step = Some(r);
            }
            if let Some(r) = sh.job_cgroup.as_ref().and_then(|c| c.read().ok()) {
                sh.job_reading = Some(r);
            }
        }
    }

    /// Stops the thread (waiting for it at most [`FINISH_DEADLINE`]) and writes the final
    /// record. Returns the record and where it went.
    pub fn finish(mut self) -> (StepRecord, Result<PathBuf, String>) {
        let stopped = self.stop_thread(FINISH_DEADLINE);
        let mut acc = self.inner.figures();
        if self.inner.lock().sampler_failed {
            acc.fault("the sampler thread failed; figures are incomplete".into());
        }
        if !stopped {
            let end = acc.last_sample.map_or_else(
                || "the step's start (no sample was taken)".to_string(),
                |t| t.format("%H:%M:%S").to_string(),
            );
            acc.fault(format!(
                "the sampler did not stop within {} s (an NVML call hung?); figures end at {end}",
                FINISH_DEADLINE.as_secs()
            ));
            // The thread may yet come back into this library's code: keep it mapped after
            // slurmstepd's dlclose (it dies with slurmstepd).
            let _ = sys::pin_this_object();
        }
        acc.stopped = Some(stopped);
        let rec = build(&self.inner, &acc, true);
        let mut done = self
            .inner
            .final_written
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let written = write(&self.inner, &rec);
        *done = true;
        (rec, written)
    }

    /// Asks the thread to stop and waits for it at most `deadline`; joins it if it stopped,
    /// else leaves it detached. Returns whether it stopped.
    fn stop_thread(&mut self, deadline: Duration) -> bool {
        let Some(thread) = self.thread.take() else {
            return true;
        };
        let until = Instant::now() + deadline;
        let mut sh = self.inner.lock();
        sh.stop = true;
        self.inner.wake.notify_all();
        while !sh.sampler_done {
            let now = Instant::now();
            if now >= until {
                break;
            }
            sh = self
                .inner
                .wake
                .wait_timeout(sh, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let done = sh.sampler_done;
        drop(sh);
        if done {
            // It has returned from its work: the join is immediate.
            let _ = thread.join();
        }
        done
    }
}

impl Drop for StepTracker {
    fn drop(&mut self) {
        if self.thread.is_some() && !self.stop_thread(FINISH_DEADLINE) {
            let _ = sys::pin_this_object();
        }
    }
}

fn write(inner: &Inner, rec: &StepRecord) -> Result<PathBuf, String> {
    let s = &inner.setup;
    s.spool
        .write(s.job.id, &s.record_name(), rec.to_json().as_bytes())
        .map_err(|e| e.to_string())
}

/// Writes a checkpoint, unless the final record is written already.
fn write_checkpoint(inner: &Inner, rec: &StepRecord) -> Result<(), String> {
    let done = inner
        .final_written
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if *done {
        return Ok(());
    }
    write(inner, rec).map(|_| ())
}

/// The sampler thread: opens NVML once no task fork can race it, samples at the pace the
/// samples' cost allows, checkpoints, and publishes its figures after every sample.
fn run(inner: &Inner, mut inbox: Option<Inbox>, start_fault: Option<String>) {
    let s = &inner.setup;
    let procfs = ProcFs::new(&s.proc_root);
    let mut acc = Acc::new(s.interval);
    if let Some(f) = start_fault {
        acc.fault(f);
    }
    let mut work = Work::default();
    let mut gpu = LazyGpu::none();
    // The NVML library to open once every task is started.
    let mut nvml_pending = match &s.nvml_library {
        _ if s.step.alloc_gpus.is_empty() => None,
        Some(lib) => Some(lib.clone()),
        None => {
            acc.note("GPU tracking is off in the site's settings".into());
            None
        }
    };
    // The file slurmstepd runs: a task still running it has not been let go (see nvml_gate).
    let stepd_exe = nvml_gate::exe_of(&s.proc_root, "self").ok();
    let mut next_checkpoint = s.checkpoint_interval.map(|d| Instant::now() + d);
    let mut next_sample = Instant::now();
    let mut tasks_seen = 0;
    let mut tasks_scheduled = 0;
    // Alert lines go to the job's stderr from the batch step only, where the admin allows it,
    // never to a FUSE filesystem (a daemon that stops answering would hold the thread), and at
    // most WARN_LINES of them.
    let mut warn_left = if s.warn_user
        && s.step.id == "batch"
        && !sys::fd_filesystem_type(2).is_some_and(|fs| sys::is_fuse(&fs))
    {
        WARN_LINES
    } else {
        0
    };
    loop {
        let (pids, all_ended) = {
            let mut sh = inner.lock();
            loop {
                if sh.stop {
                    break;
                }
                if !sh.events.is_empty() {
                    let mut h = inner.history();
                    for (t, e) in sh.events.drain(..) {
                        h.event(t, e);
                    }
                }
                // A mark ends a phase: sample at once, so the phase ends with a reading.
                if let Some(ib) = inbox.as_mut() {
                    let marks = ib.receive(unix_now());
                    if !marks.is_empty() {
                        let mut h = inner.history();
                        for (t, name) in marks {
                            h.mark(t, &name);
                        }
                        next_sample = Instant::now();
                    }
                }
                // New tasks are sampled soon, not an interval later: a short task would
                // otherwise end unseen (no thread or process count).
                if sh.tasks.len() != tasks_scheduled {
                    tasks_scheduled = sh.tasks.len();
                    next_sample = next_sample.min(Instant::now() + NEW_TASK_SAMPLE_DELAY);
                }
                // A new task may be the last one NVML waits for.
                if nvml_pending.is_some() && sh.tasks.len() != tasks_seen {
                    break;
                }
                let now = Instant::now();
                let due = next_checkpoint.map_or(next_sample, |c| c.min(next_sample));
                if now >= due && !sh.tasks.is_empty() {
                    break;
                }
                let mut wait = if sh.tasks.is_empty() {
                    Duration::from_millis(200)
                } else {
                    due - now
                };
                if inbox.is_some() {
                    wait = wait.min(MARK_POLL);
                }
                sh = inner
                    .wake
                    .wait_timeout(sh, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            if sh.stop {
                break;
            }
            let pids: Vec<u32> = sh.tasks.iter().map(|t| t.pid).collect();
            (pids, sh.tasks.iter().all(|t| t.ended))
        };
        tasks_seen = pids.len();
        if let Some(lib) = nvml_pending.clone() {
            let released = |p| nvml_gate::released(&s.proc_root, p, stepd_exe);
            if let Some(trigger) = nvml_gate::may_open(s.step.local_tasks, &pids, released) {
                nvml_pending = None;
                if all_ended {
                    acc.note("GPUs not read: the step's tasks ended before NVML was opened".into());
                } else {
                    gpu = crate::gpu::open_lazily(&GpuConfig {
                        nvml_lib: Some(lib),
                        disabled: false,
                    });
                    acc.nvml_opened = Some(trigger);
                }
            }
        }
        let now = Instant::now();
        if now >= next_sample {
            let t0 = Instant::now();
            sample(inner, &procfs, &mut acc, &mut work, &mut gpu);
            acc.pace.after_sample(t0.elapsed());
            next_sample = now + acc.pace.current;
            acc.thread_cpu = sys::thread_cpu_seconds();
            let alerts = inner.history().take_alerts();
            for a in alerts.into_iter().take(warn_left) {
                warn_left -= 1;
                let line = format!("gpu-tracker: warning: job {}: {a}\n", s.job.id);
                if sys::write_to_job_output(2, line.as_bytes(), s.job.uid).is_err() {
                    warn_left = 0;
                }
            }
            inner.publish(&acc);
        }
        if let Some(c) = next_checkpoint.filter(|c| now >= *c) {
            let rec = build(inner, &acc, false);
            if let Err(e) = write_checkpoint(inner, &rec) {
                acc.fault(format!("a checkpoint was not written: {e}"));
            }
            next_checkpoint = s.checkpoint_interval.map(|d| c + d);
        }
    }
    let events: Vec<(f64, Event)> = inner.lock().events.drain(..).collect();
    for (t, e) in events {
        inner.history().event(t, e);
    }
    if let Some(ib) = inbox.as_mut() {
        for (t, name) in ib.receive(unix_now()) {
            inner.history().mark(t, &name);
        }
        if ib.refused > 0 {
            acc.note(format!(
                "{} phase mark(s) refused: sent by another user, or not a mark",
                ib.refused
            ));
        }
    }
    // One last sample unless the tasks are gone already: catches a late GPU reading.
    let any_live = inner.lock().tasks.iter().any(|t| !t.ended);
    if any_live {
        sample(inner, &procfs, &mut acc, &mut work, &mut gpu);
    }
    let mut unavailable = None;
    let _ = gpu.get(false, &mut |m| unavailable = Some(m));
    if let Some(m) = unavailable {
        acc.fault(format!("GPUs not tracked: {m}"));
    }
    if !gpu.is_settled() {
        // The thread opening NVML is still in it; it may come back into this library's code
        // after slurmstepd's dlclose: keep the library mapped (the thread dies with slurmstepd).
        acc.fault("GPUs not read: NVML was still starting when the step ended".into());
        let _ = sys::pin_this_object();
    }
    acc.thread_cpu = sys::thread_cpu_seconds();
    inner.publish(&acc);
}

//! Tracking one Slurm job step on one node, as the SPANK plugin drives it inside slurmstepd.
//! Nothing here knows SPANK: the plugin hands over plain facts (ids, pids, exit statuses) and
//! this module does the rest, so it is tested without Slurm.
//!
//! Lifecycle (see `../shared/DESIGN.md` section 2 for why):
//! - [`StepTracker::start`] (from `init_post_opt`, root): checks the spool, starts the sampler
//!   thread.
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
//! interval lengthens while samples cost more than a tenth of it ([`pace`]).

pub mod nvml_gate;
pub mod pace;
pub mod procs;
pub mod record;
pub mod spool;

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cgroup::{Cgroup, CgroupReading};
use crate::gpu::{GpuConfig, GpuInfo, GpuReading, GpuSource, LazyGpu};
use crate::gres::GpuOrder;
use crate::proc::ProcFs;
use crate::sampler::Timepoint;
use crate::sampler::gpus::GpuAccumulator;
use crate::sys;
use crate::units::{MemUnit, TimeUnit, Units};
use pace::Pace;
use procs::ProcReader;
use record::{JobInfo, SamplerStats, StepCpu, StepGpu, StepInfo, StepMemory, StepRecord};
use record::{SCHEMA, SCHEMA_VERSION, TaskRecord};
use spool::Spool;

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
    max_threads: u64,
    max_processes: u64,
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
}

/// How long [`StepTracker::finish`] (and `Drop`) wait for the sampler thread to stop. A sample
/// takes milliseconds; this is for a driver call that never returns. Slurm waits for `exit`
/// before it reports the step complete, so a stuck thread must not hold it: 5 s is far above a
/// sample's cost, far below Slurm's own kill timeouts (`UnkillableStepTimeout`: 60 s).
pub const FINISH_DEADLINE: Duration = Duration::from_secs(5);

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
            pace: Pace::new(interval),
            partial_samples: 0,
            most_processes: 0,
            nvml_opened: None,
            nvml_cloexec: 0,
            last_sample: None,
            stopped: None,
        }
    }

    fn note(&mut self, n: String) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
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

/// The cgroup of a step, from one of its task's `/proc/<pid>/cgroup`: the path is cut after
/// its `step_*` component (Slurm's task cgroups sit below it). On v2 the step's `user` child
/// is taken when there is one: it holds the tasks but not slurmstepd itself.
pub fn step_cgroup_of(cgroup_root: &std::path::Path, proc_cgroup: &str) -> Option<Cgroup> {
    let cut: String = crate::cgroup::parse::parse_proc_cgroup(proc_cgroup)
        .into_iter()
        .map(|l| {
            let comps: Vec<&str> = l.path.split('/').collect();
            let path = match comps.iter().rposition(|c| c.starts_with("step_")) {
                Some(i) => comps[..=i].join("/"),
                None => l.path.clone(),
            };
            format!("{}:{}:{path}\n", l.hierarchy, l.controllers.join(","))
        })
        .collect();
    let mut cg = Cgroup::from_proc_cgroup(cgroup_root, &cut).ok()?;
    if cg.version == crate::cgroup::Version::V2 {
        let user = cg.memory_dir.join("user");
        if user.join("memory.current").exists() {
            cg.cpu_dir = Some(user.clone());
            cg.memory_dir = user;
        }
    }
    Some(cg)
}

/// The job's cgroup on this node: the parent of the step's `step_*` directory, memory counters
/// only. Never recognised by name: Slurm 26.05 names it by an opaque id (`SLURM_JOB_SLUID`),
/// not `job_<id>`.
fn job_cgroup_of(step: &Cgroup) -> Option<Cgroup> {
    let step_dir = step.memory_dir.ancestors().find(|d| {
        d.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("step_"))
    })?;
    let dir = step_dir.parent()?;
    dir.join(match step.version {
        crate::cgroup::Version::V1 => "memory.usage_in_bytes",
        crate::cgroup::Version::V2 => "memory.current",
    })
    .exists()
    .then(|| Cgroup {
        version: step.version,
        memory_dir: dir.to_path_buf(),
        cpu_dir: None,
    })
}

impl StepTracker {
    /// Starts tracking: checks that the record can be written, then starts the sampler thread.
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
        let inner = Arc::new(Inner {
            figures: Mutex::new(Acc::new(setup.interval)),
            setup,
            started: Instant::now(),
            start_time: chrono::Local::now(),
            shared: Mutex::new(shared),
            wake: Condvar::new(),
            final_written: Mutex::new(false),
        });
        let thread_inner = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("gpu-tracker".into())
            .spawn(move || {
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&thread_inner)));
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
            acc.note("the sampler thread failed; figures are incomplete".into());
        }
        if !stopped {
            let end = acc.last_sample.map_or_else(
                || "the step's start (no sample was taken)".to_string(),
                |t| t.format("%H:%M:%S").to_string(),
            );
            acc.note(format!(
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
fn run(inner: &Inner) {
    let s = &inner.setup;
    let procfs = ProcFs::new(&s.proc_root);
    let mut acc = Acc::new(s.interval);
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
    let mut announced = false;
    let mut tasks_seen = 0;
    loop {
        let (pids, all_ended) = {
            let mut sh = inner.lock();
            loop {
                if sh.stop {
                    break;
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
                let wait = if sh.tasks.is_empty() {
                    Duration::from_millis(200)
                } else {
                    due - now
                };
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
            inner.publish(&acc);
        }
        // A first (incomplete) record right after the first sample: the end-of-job summary
        // then knows of every step, even one whose final record is still being written.
        let first = acc.samples >= 1 && !announced;
        announced |= first;
        if let Some(c) = next_checkpoint
            .filter(|c| now >= *c)
            .or(first.then_some(now))
        {
            let rec = build(inner, &acc, false);
            if let Err(e) = write_checkpoint(inner, &rec) {
                acc.note(format!("a checkpoint was not written: {e}"));
            }
            if !first {
                next_checkpoint = s.checkpoint_interval.map(|d| c + d);
            }
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
        acc.note(format!("GPUs not tracked: {m}"));
    }
    if !gpu.is_settled() {
        // The thread opening NVML is still in it; it may come back into this library's code
        // after slurmstepd's dlclose: keep the library mapped (the thread dies with slurmstepd).
        acc.note("GPUs not read: NVML was still starting when the step ended".into());
        let _ = sys::pin_this_object();
    }
    acc.thread_cpu = sys::thread_cpu_seconds();
    inner.publish(&acc);
}

/// A GPU source restricted to the step's allocated devices.
struct Allocated {
    inner: Box<dyn GpuSource>,
    map: Vec<usize>,
    devices: Vec<GpuInfo>,
}

impl GpuSource for Allocated {
    fn devices(&self) -> &[GpuInfo] {
        &self.devices
    }
    fn read(&mut self, i: usize) -> Option<GpuReading> {
        self.inner.read(*self.map.get(i)?)
    }
}

/// Slurm's GPU indices mapped to NVML devices (position in `devices`). `minors` is Slurm's
/// index → minor number table ([`GpuOrder::minors`]): index `a` is the device whose minor is
/// `minors[a]`. Without a table (`None`: the order is unknown) the index is taken for the minor
/// number, or for NVML's index where NVML gives no minors: the old assumption, which the
/// record's `gpu_mapping` then names.
pub fn map_allocated(
    alloc: &[u32],
    devices: &[GpuInfo],
    minors: Option<&[Option<u32>]>,
) -> Vec<(u32, usize)> {
    let by_minor = devices.iter().all(|d| d.minor.is_some());
    alloc
        .iter()
        .filter_map(|&a| {
            let found = match minors {
                Some(table) => {
                    let m = (*table.get(a as usize)?)?;
                    devices.iter().position(|d| d.minor == Some(m))
                }
                None if by_minor => devices.iter().position(|d| d.minor == Some(a)),
                None => devices.iter().position(|d| d.index == a),
            };
            found.map(|i| (a, i))
        })
        .collect()
}

fn sample(inner: &Inner, procfs: &ProcFs, acc: &mut Acc, work: &mut Work, gpu: &mut LazyGpu) {
    let t0 = Instant::now();
    let s = &inner.setup;
    let (tasks, step_cg, job_cg) = {
        let sh = inner.lock();
        (
            sh.tasks
                .iter()
                .filter(|t| !t.ended)
                .map(|t| (t.pid, t.cgroup.clone()))
                .collect::<Vec<_>>(),
            sh.step_cgroup.clone(),
            sh.job_cgroup.clone(),
        )
    };
    let job_reading = job_cg.as_ref().and_then(|c| c.read().ok());
    // The processes: a bounded number read per sample, in turns (see `procs`).
    let budget = s.interval.mul_f64(procs::PROCESS_TIME_SHARE);
    let found = work.procs.sample(procfs, &tasks, budget);
    acc.most_processes = acc.most_processes.max(found.members.len());
    if found.partial() {
        acc.partial_samples += 1;
    }
    if found.walk_cut {
        acc.note(format!(
            "tasks without a cgroup of their own are walked at most {} processes deep per \
             sample: processes beyond were not seen",
            procs::MAX_PROCESSES_WALKED
        ));
    }
    let mut all_members = found.members.clone();
    let step_private: u64 = found.tasks.iter().map(|t| t.private).sum();
    let step_shared = found.tasks.iter().map(|t| t.shared).max().unwrap_or(0);
    let cpu_sum: f64 = found.tasks.iter().map(|t| t.cpu).sum();
    acc.sampled_peak_rss = acc.sampled_peak_rss.max(step_private + step_shared);
    let step_reading = step_cg.as_ref().and_then(|c| c.read().ok());
    if let Some(cg) = &step_cg {
        if let Ok(p) = cg.procs() {
            all_members.extend(p);
        }
    }
    // CPU: the cgroup's counter when there is one, else the tasks' sampled sum.
    let cpu_now = step_reading
        .and_then(|r| r.cpu_ns)
        .map_or(cpu_sum, |ns| ns as f64 / 1e9);
    let now = Instant::now();
    if let Some((t, c)) = work.last_cpu {
        let dt = now.duration_since(t).as_secs_f64();
        if dt >= s.interval.as_secs_f64() / 2.0 {
            acc.max_cores = acc.max_cores.max((cpu_now - c).max(0.0) / dt);
        }
    }
    work.last_cpu = Some((now, cpu_now));

    {
        let mut sh = inner.lock();
        if step_reading.is_some() {
            sh.last_step = step_reading;
        }
        // Not after the last task ended: that reading is final.
        if job_reading.is_some() && sh.tasks.iter().any(|t| !t.ended) {
            sh.job_reading = job_reading;
        }
        for f in &found.tasks {
            if let Some(t) = sh.tasks.iter_mut().find(|t| t.pid == f.pid) {
                t.peak_rss = t.peak_rss.max(f.private + f.shared).max(f.hwm);
                t.largest_hwm = t.largest_hwm.max(f.hwm);
                t.cpu_sampled = t.cpu_sampled.max(f.cpu);
                t.max_threads = t.max_threads.max(f.threads);
                t.max_processes = t.max_processes.max(f.processes);
                acc.largest_hwm = acc.largest_hwm.max(f.hwm);
            }
        }
    }

    let mut unavailable = None;
    if let Some(src) = gpu.get(false, &mut |m| unavailable = Some(m)) {
        // NVML may open descriptors at any call: those too are marked close-on-exec.
        let ((), marked) = crate::gpu::cloexec::marking(|| gpu_sample(s, acc, src, &all_members));
        acc.nvml_cloexec += marked as u64;
    }
    if let Some(m) = unavailable {
        acc.notes.push(format!("GPUs not tracked: {m}"));
    }
    let us = t0.elapsed().as_secs_f64() * 1e6;
    acc.samples += 1;
    acc.sample_us_total += us;
    acc.sample_us_max = acc.sample_us_max.max(us);
    acc.last_sample = Some(chrono::Local::now());
}

/// Reads the step's GPUs once (narrowing the source to them at the first reading).
fn gpu_sample(
    s: &StepSetup,
    acc: &mut Acc,
    src: &mut Box<dyn GpuSource>,
    all_members: &std::collections::HashSet<u32>,
) {
    if !acc.gpu_opened {
        // First reading: narrow the source to the step's GPUs, once.
        acc.gpu_opened = true;
        acc.nvml_cloexec += src.descriptors_marked_cloexec() as u64;
        let nvml: Vec<(u32, Option<u32>)> =
            src.devices().iter().map(|d| (d.index, d.minor)).collect();
        let table = s.gpu_order.minors(&nvml);
        let pairs = map_allocated(&s.step.alloc_gpus, src.devices(), table.as_deref());
        let source = s
            .gres_conf
            .as_ref()
            .map_or_else(|| "gres.conf".into(), |p| p.display().to_string());
        acc.notes.push(s.gpu_order.describe(&source));
        acc.gpu_mapping = Some(s.gpu_order.method().into());
        if pairs.len() < s.step.alloc_gpus.len() {
            acc.notes.push(format!(
                "Slurm allocated GPUs {:?} but NVML shows {} device(s); {} matched",
                s.step.alloc_gpus,
                src.devices().len(),
                pairs.len()
            ));
        }
        acc.gpu_devices = pairs
            .iter()
            .map(|&(a, i)| (Some(a), src.devices()[i].clone()))
            .collect();
        let full = std::mem::replace(src, Box::new(NoGpu));
        *src = Box::new(Allocated {
            devices: acc.gpu_devices.iter().map(|(_, d)| d.clone()).collect(),
            map: pairs.iter().map(|&(_, i)| i).collect(),
            inner: full,
        });
    }
    let units = Units {
        ram: MemUnit::Bytes,
        gpu_ram: MemUnit::Bytes,
        time: TimeUnit::Seconds,
    };
    let mut tp = Timepoint::default();
    let mut notes = Vec::new();
    acc.gpu.sample(
        src.as_mut(),
        0,
        all_members,
        acc.pace.current.as_secs_f64(),
        &units,
        &mut tp,
        &mut notes,
    );
    for n in notes {
        acc.note(n);
    }
}

struct NoGpu;

impl GpuSource for NoGpu {
    fn devices(&self) -> &[GpuInfo] {
        &[]
    }
    fn read(&mut self, _: usize) -> Option<GpuReading> {
        None
    }
}

fn rfc3339(t: chrono::DateTime<chrono::Local>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

/// OOM kills in the step. On v1 the kernel counts a kill in the victim's own memory cgroup (a
/// task's, when Slurm made one) even when the limit hit was the job's, and the counter is not
/// hierarchical: the step's count and its tasks' add up. On v2 `memory.events` of the step
/// already includes its children.
fn step_oom_kills(
    cg: Option<&Cgroup>,
    reading: Option<CgroupReading>,
    tasks: &[TaskRecord],
) -> Option<u64> {
    let own = reading.and_then(|r| r.oom_kills);
    match cg.map(|c| c.version) {
        Some(crate::cgroup::Version::V1) => {
            let in_tasks = tasks.iter().filter_map(|t| t.oom_kills).sum::<u64>();
            own.map(|o| o + in_tasks)
                .or((in_tasks > 0).then_some(in_tasks))
        }
        _ => own,
    }
}

/// The record as known now; `complete` for the final one.
fn build(inner: &Inner, acc: &Acc, complete: bool) -> StepRecord {
    let s = &inner.setup;
    let sh = inner.lock();
    let elapsed = inner.started.elapsed().as_secs_f64();
    let now = chrono::Local::now();
    let mut step = s.step.clone();
    step.start = rfc3339(inner.start_time);
    step.end = complete.then(|| rfc3339(now));
    step.elapsed_seconds = elapsed;

    let tasks: Vec<TaskRecord> = sh
        .tasks
        .iter()
        .map(|t| {
            let (exit_code, signal, core) = match t.status {
                Some(w) if libc::WIFEXITED(w) => (Some(libc::WEXITSTATUS(w)), None, false),
                Some(w) if libc::WIFSIGNALED(w) => {
                    (None, Some(libc::WTERMSIG(w)), libc::WCOREDUMP(w))
                }
                _ => (None, None, false),
            };
            let cg_cpu = t.final_cgroup.and_then(|r| r.cpu_ns);
            let cg_now = t
                .final_cgroup
                .or_else(|| t.cgroup.as_ref().and_then(|c| c.read().ok()));
            let cg_peak = cg_now.and_then(|r| r.peak);
            let sampled = t.peak_rss.max(t.largest_hwm);
            let (peak, source) = match cg_peak {
                Some(c) if c >= sampled => (c, "cgroup"),
                _ => (sampled, "sampled"),
            };
            TaskRecord {
                local_id: t.local_id,
                global_id: t.global_id,
                pid: t.pid,
                ended: t.ended,
                exit_code,
                signal,
                core_dumped: core,
                peak_memory_bytes: peak,
                peak_source: source.into(),
                sampled_peak_rss_bytes: sampled,
                cgroup_peak_bytes: cg_peak,
                oom_kills: cg_now.and_then(|r| r.oom_kills),
                cpu_seconds: cg_cpu.map_or(t.cpu_sampled, |ns| ns as f64 / 1e9),
                cpu_source: if cg_cpu.is_some() {
                    "cgroup"
                } else {
                    "sampled"
                }
                .into(),
                max_threads: t.max_threads,
                max_processes: t.max_processes,
            }
        })
        .collect();

    let reading = sh.final_step.or(sh.last_step);
    let cg = sh.step_cgroup.as_ref();
    let sampled_peak = acc.sampled_peak_rss.max(acc.largest_hwm);
    let (peak, source, cache) = match (cg, reading.and_then(|r| r.peak)) {
        (Some(c), Some(p)) => (p, c.peak_source().to_string(), c.peak_includes_page_cache()),
        _ => (sampled_peak, "sampled".to_string(), false),
    };
    let memory = StepMemory {
        peak_bytes: peak,
        peak_source: source,
        peak_includes_page_cache: cache,
        sampled_peak_rss_bytes: sampled_peak,
        limit_bytes: reading.and_then(|r| r.limit),
        oom_kills: step_oom_kills(cg, reading, &tasks),
        limit_hits: reading.and_then(|r| r.limit_hits),
        cgroup: cg.map(|c| c.memory_dir.display().to_string()),
        cgroup_version: cg.map(|c| {
            match c.version {
                crate::cgroup::Version::V1 => "v1",
                crate::cgroup::Version::V2 => "v2",
            }
            .to_string()
        }),
        job_peak_bytes: sh.job_reading.and_then(|r| r.peak),
        job_limit_bytes: sh.job_reading.and_then(|r| r.limit),
    };

    let task_cpu: f64 = tasks.iter().map(|t| t.cpu_seconds).sum();
    let (cpu_seconds, cpu_source) = match reading.and_then(|r| r.cpu_ns) {
        Some(ns) => (ns as f64 / 1e9, "cgroup"),
        None => (task_cpu, "sampled"),
    };
    let alloc_cpus = s
        .step
        .alloc_cpus
        .filter(|n| *n > 0)
        .unwrap_or_else(crate::proc::online_cpus);
    let mean_cores = if elapsed > 0.0 {
        cpu_seconds / elapsed
    } else {
        0.0
    };
    let cpu = StepCpu {
        seconds: cpu_seconds,
        source: cpu_source.into(),
        alloc_cpus,
        utilization_percent: 100.0 * mean_cores / f64::from(alloc_cpus),
        mean_cores,
        max_cores: acc
            .max_cores
            .max(if acc.samples <= 1 { mean_cores } else { 0.0 }),
    };

    let units = Units {
        ram: MemUnit::Bytes,
        gpu_ram: MemUnit::Bytes,
        time: TimeUnit::Seconds,
    };
    let (usage, _, _, _) = acc.gpu.finish(&units);
    let gpus: Vec<StepGpu> = if usage.is_empty() {
        acc.gpu_devices
            .iter()
            .map(|(a, d)| StepGpu {
                slurm_index: *a,
                nvml_index: d.index,
                minor: d.minor,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                memory_total_bytes: d.memory_total,
                ..StepGpu::default()
            })
            .collect()
    } else {
        usage
            .iter()
            .map(|g| {
                let dev = acc.gpu_devices.iter().find(|(_, d)| d.uuid == g.uuid);
                StepGpu {
                    slurm_index: dev.and_then(|(a, _)| *a),
                    nvml_index: g.index,
                    minor: dev.and_then(|(_, d)| d.minor),
                    uuid: g.uuid.clone(),
                    name: g.name.clone(),
                    memory_total_bytes: g.memory_total as u64,
                    peak_device_memory_bytes: g.max_used as u64,
                    peak_step_memory_bytes: g.max_tracked as u64,
                    mean_utilization_percent: g.mean_utilization_percent,
                    max_utilization_percent: g.max_utilization_percent,
                    energy_joules: g.energy_joules,
                    lost: g.lost,
                }
            })
            .collect()
    };

    let mut notes = acc.notes.clone();
    if acc.partial_samples > 0 {
        notes.push(format!(
            "up to {} processes: at most {} processes are read per sample (and no more than {} % \
             of the interval spent reading them), the others at the next samples in turn; sums \
             use each process's latest reading ({} sample(s) read part of them)",
            acc.most_processes,
            procs::MAX_PROCESSES_PER_SAMPLE,
            procs::PROCESS_TIME_SHARE * 100.0,
            acc.partial_samples
        ));
    }
    notes.extend(acc.pace.note());
    notes.extend(sh.notes.iter().cloned());
    if sh.step_cgroup.is_none() && !sh.tasks.is_empty() {
        notes.push("no cgroup found for the step: memory and CPU are sampled".into());
    }
    let sampler = SamplerStats {
        interval_seconds: s.interval.as_secs_f64(),
        samples: acc.samples,
        mean_sample_microseconds: if acc.samples > 0 {
            acc.sample_us_total / acc.samples as f64
        } else {
            0.0
        },
        max_sample_microseconds: acc.sample_us_max,
        cpu_seconds: acc.thread_cpu,
        gpu_source: if acc.gpu_opened { "nvml" } else { "none" }.into(),
        gpu_mapping: acc.gpu_mapping.clone(),
        interval_max_seconds: Some(acc.pace.max.as_secs_f64()),
        interval_last_seconds: Some(acc.pace.current.as_secs_f64()),
        overruns: Some(acc.pace.overruns),
        backoffs: Some(acc.pace.backoffs),
        partial_samples: Some(acc.partial_samples),
        last_sample: acc.last_sample.map(rfc3339),
        stopped: acc.stopped,
        nvml_opened: acc.nvml_opened.map(|t| t.as_str().to_string()),
        nvml_cloexec_descriptors: acc.nvml_opened.map(|_| acc.nvml_cloexec),
        notes,
    };
    StepRecord {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        complete,
        written_at: rfc3339(now),
        tracker_version: env!("CARGO_PKG_VERSION").into(),
        job: s.job.clone(),
        step,
        tasks,
        memory,
        cpu,
        gpus,
        sampler,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;

    fn gpu(index: u32, minor: Option<u32>) -> GpuInfo {
        GpuInfo {
            index,
            minor,
            uuid: format!("GPU-{index}"),
            name: "G".into(),
            memory_total: 1,
        }
    }

    #[test]
    fn slurm_indices_map_through_the_minor_table() {
        // NVML index 0 is minor 7, index 1 is minor 4; Slurm's index 0 is the minor-4 file.
        let devs = [gpu(0, Some(7)), gpu(1, Some(4))];
        let table = [Some(4), Some(7)];
        assert_eq!(map_allocated(&[0], &devs, Some(&table)), vec![(0, 1)]);
        assert_eq!(
            map_allocated(&[1, 0], &devs, Some(&table)),
            vec![(1, 0), (0, 1)]
        );
        // Beyond the table, or a file with no minor, or a minor NVML lacks: not mapped.
        assert_eq!(map_allocated(&[2], &devs, Some(&table)), vec![]);
        assert_eq!(map_allocated(&[0], &devs, Some(&[None])), vec![]);
        assert_eq!(map_allocated(&[0], &devs, Some(&[Some(5)])), vec![]);
        // A subset: gres.conf names /dev/nvidia[2-3] of four GPUs.
        let four = [
            gpu(0, Some(0)),
            gpu(1, Some(1)),
            gpu(2, Some(2)),
            gpu(3, Some(3)),
        ];
        let subset = [Some(2), Some(3)];
        assert_eq!(
            map_allocated(&[0, 1], &four, Some(&subset)),
            vec![(0, 2), (1, 3)]
        );
    }

    #[test]
    fn without_a_table_the_index_is_taken_for_the_minor() {
        let devs = [gpu(0, Some(1)), gpu(1, Some(0))];
        assert_eq!(map_allocated(&[0], &devs, None), vec![(0, 1)]);
        assert_eq!(map_allocated(&[1, 5], &devs, None), vec![(1, 0)]);
        let no_minor = [gpu(0, None), gpu(1, Some(0))];
        assert_eq!(map_allocated(&[1], &no_minor, None), vec![(1, 1)]);
    }

    #[test]
    fn the_step_cgroup_is_found_above_a_task() {
        let t = TempTree::new("stepcg");
        let step = "memory/slurm_n1/uid_1000/job_7/step_3";
        t.write(&format!("{step}/memory.usage_in_bytes"), "1\n")
            .write(&format!("{step}/task_0/memory.usage_in_bytes"), "1\n");
        let proc = "11:memory:/slurm_n1/uid_1000/job_7/step_3/task_0\n0::/\n";
        let cg = step_cgroup_of(t.path(), proc).unwrap();
        assert_eq!(cg.memory_dir, t.path().join(step));
        let v2 = "system.slice/n1_slurmstepd.scope/job_7/step_3";
        t.write(&format!("{v2}/memory.current"), "1\n")
            .write(&format!("{v2}/user/memory.current"), "1\n")
            .write(&format!("{v2}/user/task_0/memory.current"), "1\n");
        let cg = step_cgroup_of(t.path(), &format!("0::/{v2}/user/task_0\n")).unwrap();
        assert_eq!(cg.memory_dir, t.path().join(v2).join("user"));
        t.write(
            "system.slice/n1_slurmstepd.scope/job_7/memory.current",
            "1\n",
        );
        let job = job_cgroup_of(&cg).unwrap();
        assert_eq!(
            job.memory_dir,
            t.path().join("system.slice/n1_slurmstepd.scope/job_7")
        );
        // Slurm 26.05: the job's directory has an opaque name, and `user/task_special` beside
        // the tasks.
        let v26 = "system.slice/n1_slurmstepd.scope/s1H9M83SWQ0100/step_batch";
        t.write(
            "system.slice/n1_slurmstepd.scope/s1H9M83SWQ0100/memory.current",
            "1\n",
        )
        .write(&format!("{v26}/memory.current"), "1\n")
        .write(&format!("{v26}/user/memory.current"), "1\n")
        .write(&format!("{v26}/user/task_special/memory.current"), "0\n")
        .write(&format!("{v26}/user/task_0/memory.current"), "1\n");
        let cg = step_cgroup_of(t.path(), &format!("0::/{v26}/user/task_0\n")).unwrap();
        assert_eq!(cg.memory_dir, t.path().join(v26).join("user"));
        let job = job_cgroup_of(&cg).unwrap();
        assert_eq!(
            job.memory_dir,
            t.path()
                .join("system.slice/n1_slurmstepd.scope/s1H9M83SWQ0100")
        );
        // No cgroup where none exists: a step directory at the top of the hierarchy.
        let top = Cgroup {
            version: crate::cgroup::Version::V2,
            memory_dir: t.path().join("nowhere/step_0"),
            cpu_dir: None,
        };
        assert!(job_cgroup_of(&top).is_none());
    }
}

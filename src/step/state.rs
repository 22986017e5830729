//! What the step's tracker and its sampler thread share: the tasks as the plugin reports them,
//! the sampler's figures, the step's history, and the writing of its record.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::nvml_gate;
use super::procs::ProcReader;
use super::record::StepRecord;
use super::setup::StepSetup;
use crate::cgroup::needed::NeededPeak;
use crate::cgroup::pressure::{PressureTotals, Unavailable};
use crate::cgroup::{Cgroup, CgroupReading};
use crate::gpu::GpuInfo;
use crate::history::mark::Inbox;
use crate::history::{Event, Recorder};
use crate::sampler::MemoryDetail;
use crate::sampler::core::{CpuMax, HistoryFeed, RssPeak};
use crate::sampler::gpus::GpuAccumulator;
use crate::sampler::pace::Pace;
use crate::sys::Wake;

/// A task of the step, as the plugin reported it and the samples saw it.
#[derive(Debug, Clone, Default)]
pub(super) struct Task {
    pub(super) local_id: Option<u32>,
    pub(super) global_id: Option<u32>,
    pub(super) pid: u32,
    pub(super) cgroup: Option<Cgroup>,
    pub(super) ended: bool,
    pub(super) status: Option<i32>,
    pub(super) final_cgroup: Option<CgroupReading>,
    pub(super) peak_rss: RssPeak,
    pub(super) largest_hwm: u64,
    pub(super) cpu_sampled: f64,
    /// `None` until a sample sees the task.
    pub(super) max_threads: Option<u64>,
    pub(super) max_processes: Option<u64>,
}

/// What the plugin's callbacks and the sampler thread share, under [`Inner::lock`].
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) tasks: Vec<Task>,
    pub(super) step_cgroup: Option<Cgroup>,
    pub(super) final_step: Option<CgroupReading>,
    /// The job's cgroup on this node (the `job_*` above the step's), memory only.
    pub(super) job_cgroup: Option<Cgroup>,
    /// Its latest reading: at every sample, and when the step's last task ended.
    pub(super) job_reading: Option<CgroupReading>,
    pub(super) last_step: Option<CgroupReading>,
    /// The step cgroup's pressure stall counters (cgroup v2), up to the final reading.
    pub(super) pressure: crate::history::pressure::PressureWatch,
    /// The peak of what the kernel could not reclaim, over the step cgroup's readings (until
    /// the final one) and over the job cgroup's (those `job_reading` takes).
    pub(super) step_needed: NeededPeak,
    pub(super) job_needed: NeededPeak,
    pub(super) stop: bool,
    pub(super) notes: Vec<String>,
    /// The sampler thread has returned (or panicked).
    pub(super) sampler_done: bool,
    /// It panicked.
    pub(super) sampler_failed: bool,
    /// Task events (Unix time, event) for the sampler thread to record.
    pub(super) events: Vec<(f64, Event)>,
}

/// The step's memory, CPU and pressure as of the latest sample: what its live state shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Latest {
    /// Memory in use: the step cgroup's (page cache included), else its processes' sampled sum.
    pub(super) memory_bytes: Option<u64>,
    /// Peak memory as the record has it (the cgroup's counter, else the sampled peak).
    pub(super) memory_peak_bytes: Option<u64>,
    /// The step cgroup's memory limit, else the job's.
    pub(super) memory_limit_bytes: Option<u64>,
    /// CPU seconds used by the step so far.
    pub(super) cpu_seconds: Option<f64>,
    /// Cores busy over the latest interval.
    pub(super) cores_busy: Option<f64>,
    /// The step cgroup's pressure stall counters: the last good reading (the final one once
    /// the last task ended), else why the latest failed; `None` without a step cgroup.
    pub(super) pressure: Option<Result<PressureTotals, Unavailable>>,
}

/// What the sampler thread accumulates: the figures the record is built from. A copy is
/// published after every sample, for a `finish` that cannot wait for the thread.
#[derive(Clone)]
pub(super) struct Acc {
    pub(super) samples: u64,
    pub(super) sample_us_total: f64,
    pub(super) sample_us_max: f64,
    pub(super) sampled_peak_rss: RssPeak,
    pub(super) largest_hwm: u64,
    /// The busiest interval's CPU use.
    pub(super) max_cpu: CpuMax,
    pub(super) gpu: GpuAccumulator,
    pub(super) gpu_opened: bool,
    pub(super) gpu_mapping: Option<String>,
    pub(super) gpu_devices: Vec<(Option<u32>, GpuInfo)>,
    pub(super) thread_cpu: f64,
    pub(super) notes: Vec<String>,
    /// The notes that say something went wrong (see [`Acc::fault`]).
    pub(super) faults: Vec<String>,
    /// Samples at which the step's cgroup could not be read, and the first failure.
    pub(super) cgroup_misses: u64,
    pub(super) cgroup_first_miss: Option<String>,
    pub(super) pace: Pace,
    /// Samples that read only part of the processes.
    pub(super) partial_samples: u64,
    /// Most processes listed at one sample.
    pub(super) most_processes: usize,
    /// When and why NVML was opened.
    pub(super) nvml_opened: Option<nvml_gate::Trigger>,
    /// Descriptors of NVML marked close-on-exec.
    pub(super) nvml_cloexec: u64,
    /// When the latest sample was taken.
    pub(super) last_sample: Option<chrono::DateTime<chrono::Local>>,
    /// `Some(false)`: the thread did not stop by the deadline (final records only).
    pub(super) stopped: Option<bool>,
    /// What the step's history was told so far.
    pub(super) history: HistoryFeed,
    /// Memory, CPU and pressure at the latest sample.
    pub(super) latest: Latest,
}

impl Acc {
    /// Nothing yet, at `interval`.
    pub(super) fn new(interval: Duration) -> Acc {
        Acc {
            samples: 0,
            sample_us_total: 0.0,
            sample_us_max: 0.0,
            sampled_peak_rss: RssPeak::default(),
            largest_hwm: 0,
            max_cpu: CpuMax::new(interval),
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
            history: HistoryFeed::default(),
            latest: Latest::default(),
        }
    }

    /// A note for the record, once.
    pub(super) fn note(&mut self, n: String) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }

    /// A note that says something went wrong: kept in the record's `faults` too, and logged
    /// when the step ends.
    pub(super) fn fault(&mut self, n: String) {
        if !self.faults.contains(&n) {
            self.faults.push(n.clone());
        }
        self.note(n);
    }
}

/// What the sampler thread keeps for itself between samples.
pub(super) struct Work {
    pub(super) last_cpu: Option<(Instant, f64)>,
    pub(super) procs: ProcReader,
}

impl Work {
    /// Nothing read yet of the processes under `proc_root`, their split read as `detail` says.
    pub(super) fn new(proc_root: &std::path::Path, detail: MemoryDetail) -> Work {
        Work {
            last_cpu: None,
            procs: ProcReader::new(proc_root, detail),
        }
    }
}

/// The step's tracker: setup, shared state, figures and history.
pub(super) struct Inner {
    pub(super) setup: StepSetup,
    pub(super) started: Instant,
    pub(super) start_time: chrono::DateTime<chrono::Local>,
    pub(super) shared: Mutex<Shared>,
    /// The step over time: timeline, events, idle GPUs. Updated in place by the sampler thread
    /// (never held across a `/proc` or NVML call), read by the record's builder: not copied
    /// at every sample like `figures`.
    pub(super) history: Mutex<Recorder>,
    /// Wakes whoever waits for the shared state to change: the sampler thread for a new task
    /// or a stop (when it has no mark socket to wait on), `finish` for the thread's end.
    pub(super) wake: Condvar,
    /// Wakes a sampler thread waiting on its mark socket (see [`Inner::wait`]).
    pub(super) wake_fd: Option<Wake>,
    /// The sampler's figures as of its latest sample. Never held across a `/proc` or NVML call.
    pub(super) figures: Mutex<Acc>,
    /// Whether the final record is written; held while any record is written, so no checkpoint
    /// of a thread that comes back late replaces the final record.
    pub(super) final_written: Mutex<bool>,
}

impl Inner {
    /// Tells the sampler thread (and any other waiter) that the shared state changed.
    pub(super) fn notify(&self) {
        self.wake.notify_all();
        if let Some(w) = &self.wake_fd {
            w.wake();
        }
    }

    /// The sampler thread's wait: releases `sh` until [`Inner::notify`], `timeout`, or a
    /// datagram on `marks`, whichever comes first (`marks` is `None` while the inbox rests:
    /// see [`Inbox::resting`]). Without a [`Wake`] (no mark socket: see `StepTracker::start`),
    /// on the condition variable alone.
    pub(super) fn wait<'a>(
        &'a self,
        sh: MutexGuard<'a, Shared>,
        timeout: Duration,
        marks: Option<&Inbox>,
    ) -> MutexGuard<'a, Shared> {
        if let Some(w) = &self.wake_fd {
            // A notify between the caller's look at `sh` and this wait leaves the descriptor
            // readable: the wait returns at once and the caller looks again.
            drop(sh);
            let fds: Vec<_> = marks.iter().map(|ib| ib.as_fd()).collect();
            if w.wait_with(&fds, timeout).is_ok() {
                return self.lock();
            }
            return self
                .wake
                .wait_timeout(self.lock(), timeout)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        self.wake
            .wait_timeout(sh, timeout)
            .unwrap_or_else(|p| p.into_inner())
            .0
    }

    /// The shared state.
    pub(super) fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic elsewhere never takes the data with it: the figures stay usable.
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `acc` the figures as of the latest sample.
    pub(super) fn publish(&self, acc: &Acc) {
        *self.figures.lock().unwrap_or_else(|p| p.into_inner()) = acc.clone();
    }

    /// The step's history.
    pub(super) fn history(&self) -> MutexGuard<'_, Recorder> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The figures as of the latest sample.
    pub(super) fn figures(&self) -> Acc {
        self.figures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Writes `rec` to the spool; returns where.
    pub(super) fn write(&self, rec: &StepRecord) -> Result<PathBuf, String> {
        let s = &self.setup;
        s.spool
            .write(s.job.id, &s.record_name(), rec.to_json().as_bytes())
            .map_err(|e| e.to_string())
    }

    /// Writes a checkpoint, unless the final record is written already.
    pub(super) fn write_checkpoint(&self, rec: &StepRecord) -> Result<(), String> {
        let done = self.final_written.lock().unwrap_or_else(|p| p.into_inner());
        if *done {
            return Ok(());
        }
        self.write(rec).map(|_| ())
    }
}

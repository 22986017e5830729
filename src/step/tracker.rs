//! The step's tracker as the plugin drives it: start, tasks started and ended, finish.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::build::build;
use super::cgroups::{job_cgroup_of, step_cgroup_of};
use super::live::Identity;
use super::live_writer::{self, LiveWriter, SharedLive};
use super::record::StepRecord;
use super::setup::StepSetup;
use super::state::{Acc, Inner, Shared, Task};
use super::thread::run;
use crate::cgroup::Cgroup;
use crate::clock::unix_now;
use crate::history::mark::Inbox;
use crate::history::{Event, Recorder};
use crate::proc::ProcFs;
use crate::sys;
use crate::sys::Wake;

/// How long [`StepTracker::finish`] (and `Drop`) wait for the sampler thread to stop. A sample
/// takes milliseconds; this is for a driver call that never returns. Slurm waits for `exit`
/// before it reports the step complete, so a stuck thread must not hold it: 5 s is far above a
/// sample's cost, far below Slurm's own kill timeouts (`UnkillableStepTimeout`: 60 s).
pub const FINISH_DEADLINE: Duration = Duration::from_secs(5);

fn task_name(id: Option<u32>) -> String {
    id.map_or_else(|| "?".into(), |i| i.to_string())
}

/// One tracked step. See the module documentation for the order of calls.
pub struct StepTracker {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
    /// Where an earlier job instance's directory was moved at start, if one was in the way.
    moved_aside: Option<PathBuf>,
    /// The step's live state file, written by the thread, removed when the step ends.
    live: SharedLive,
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
        // The thread waits on the socket and a wake of its own together (see `Inner::wait`).
        let inbox = match &setup.mark_socket {
            Some(p) => match Inbox::bind(p, setup.job.uid).and_then(|i| Ok((i, Wake::new()?))) {
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
        let (inbox, wake_fd) = inbox.unzip();
        let start_unix = unix_now();
        let live: SharedLive = setup.live.clone().map(|l| {
            let s = &setup;
            Arc::new(Mutex::new(LiveWriter::new(
                l,
                Identity {
                    cluster: s.job.cluster.clone().unwrap_or_default(),
                    job_id: s.job.id,
                    step: s.step.id.clone(),
                    user: s.job.user.clone(),
                    uid: s.job.uid,
                    node: s.step.node.clone(),
                    stepd_pid: std::process::id(),
                    started_at: start_unix,
                    alloc_cpus: s.step.alloc_cpus.filter(|n| *n > 0),
                },
            )))
        });
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
            wake_fd,
            final_written: Mutex::new(false),
        });
        // A first (incomplete) record before any task starts: whoever reads the job's records
        // (the batch step's summary, srun's, the report) knows of every step from then on, even
        // one whose tasks end before its first sample and whose final record is still being
        // written when the batch script ends. A failure is the record's fault, not the step's.
        let start_fault = inner
            .write(&build(&inner, &Acc::new(inner.setup.interval), false))
            .err()
            .map(|e| format!("the step's first record was not written: {e}"));
        let thread_inner = Arc::clone(&inner);
        let thread_live = live.clone();
        let thread = std::thread::Builder::new()
            .name("gpu-tracker".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(&thread_inner, inbox, start_fault, thread_live)
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
            live,
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
        self.inner.notify();
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
                sh.step_needed.observe(&r);
            }
            if let Some(p) = sh.step_cgroup.as_ref().map(|c| c.pressure()) {
                sh.pressure.observe(unix_now(), p, true);
            }
            if let Some(r) = sh.job_cgroup.as_ref().and_then(|c| c.read().ok()) {
                sh.job_reading = Some(r);
                sh.job_needed.observe(&r);
            }
        }
    }

    /// Stops the thread (waiting for it at most [`FINISH_DEADLINE`]) and writes the final
    /// record. Returns the record and where it went.
    pub fn finish(mut self) -> (StepRecord, Result<PathBuf, String>) {
        let stopped = self.stop_thread(FINISH_DEADLINE);
        // The step's series end with it.
        live_writer::close(&self.live);
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
        let written = self.inner.write(&rec);
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
        self.inner.notify();
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
        live_writer::close(&self.live);
    }
}

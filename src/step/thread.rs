//! The step's sampler thread: waits for tasks, opens NVML once no task fork can race it,
//! samples at the pace the samples' cost allows, records phase marks and task events,
//! checkpoints, publishes its figures after every sample, and keeps the step's live state.

use std::time::{Duration, Instant};

use super::build::build;
use super::live_writer;
use super::nvml_gate;
use super::sample::sample;
use super::state::{Acc, Inner, Work};
use crate::clock::unix_now;
use crate::gpu::{GpuConfig, LazyGpu};
use crate::history::Event;
use crate::history::mark::Inbox;
use crate::proc::ProcFs;
use crate::sampler::pace::Schedule;
use crate::sys;

/// How soon after a task starts the sampler reads it: time for slurmstepd to start the step's
/// other tasks and let them exec, so that one sample sees them all.
const NEW_TASK_SAMPLE_DELAY: Duration = Duration::from_millis(20);

/// Most alert lines one step writes to the job's stderr.
pub const WARN_LINES: usize = 10;

/// The sampler thread: opens NVML once no task fork can race it, samples at the pace the
/// samples' cost allows, checkpoints, and publishes its figures after every sample.
pub(super) fn run(
    inner: &Inner,
    mut inbox: Option<Inbox>,
    start_fault: Option<String>,
    live: live_writer::SharedLive,
) {
    let s = &inner.setup;
    let procfs = ProcFs::new(&s.proc_root);
    let mut acc = Acc::new(s.interval);
    if let Some(f) = start_fault {
        acc.fault(f);
    }
    let mut work = Work::new(&s.proc_root, s.memory_detail);
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
    let mut schedule = Schedule::new(Instant::now());
    let mut tasks_seen = 0;
    let mut tasks_scheduled = 0;
    // Alert lines go to the job's stderr from the batch step only, where the admin allows it,
    // and at most WARN_LINES of them. What descriptor 2 is, is checked at each write: when the
    // thread starts it is still the /dev/null slurmd gave slurmstepd.
    let mut warn_left = if s.warn_user && s.step.id == "batch" {
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
                        schedule.at_once(Instant::now());
                    }
                }
                // New tasks are sampled soon, not an interval later: a short task would
                // otherwise end unseen (no thread or process count).
                if sh.tasks.len() != tasks_scheduled {
                    tasks_scheduled = sh.tasks.len();
                    schedule.by(Instant::now() + NEW_TASK_SAMPLE_DELAY);
                }
                // A new task may be the last one NVML waits for.
                if nvml_pending.is_some() && sh.tasks.len() != tasks_seen {
                    break;
                }
                let now = Instant::now();
                let due = next_checkpoint.map_or(schedule.due(), |c| c.min(schedule.due()));
                if now >= due && !sh.tasks.is_empty() {
                    break;
                }
                let wait = if sh.tasks.is_empty() {
                    Duration::from_millis(200)
                } else {
                    due - now
                };
                // Until then, a new task, a stop, or a mark on the socket; while the inbox
                // rests after a batch, not the socket (a flood would keep the thread busy).
                let (wait, marks) = match inbox.as_ref().map(|ib| (ib, ib.resting())) {
                    Some((_, Some(rest))) => (wait.min(rest), None),
                    Some((ib, None)) => (wait, Some(ib)),
                    None => (wait, None),
                };
                sh = inner.wait(sh, wait, marks);
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
                        mig: true,
                        brand: s.gpu_order.brand_for(&s.step.alloc_gpus),
                        amd_root: Some(s.amd_root.clone()),
                    });
                    acc.nvml_opened = Some(trigger);
                }
            }
        }
        let now = Instant::now();
        if schedule.is_due(now) {
            let t0 = Instant::now();
            sample(inner, &procfs, &mut acc, &mut work, &mut gpu);
            schedule.sampled(&mut acc.pace, now, t0.elapsed());
            acc.thread_cpu = sys::thread_cpu_seconds();
            let alerts = inner.history().take_alerts();
            for a in alerts.into_iter().take(warn_left) {
                warn_left -= 1;
                let line = format!("gpu-tracker: warning: job {}: {a}\n", s.job.id);
                // The checks of the summary's write, on the descriptor as it is now: the
                // user's own plain file, not on FUSE, within a deadline.
                if let Err(e) = sys::write_to_job_output(2, line.as_bytes(), s.job.uid) {
                    warn_left = 0;
                    acc.note(format!("no more warning lines in the job's output: {e}"));
                }
            }
            inner.publish(&acc);
            // What the sample took, serialized for the exporter: no reading of its own.
            live_writer::after_sample(&live, &mut acc);
        }
        if let Some(c) = next_checkpoint.filter(|c| now >= *c) {
            let rec = build(inner, &acc, false);
            if let Err(e) = inner.write_checkpoint(&rec) {
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
        for (t, name) in ib.receive_now(unix_now()) {
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

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixDatagram;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use crate::gres::GpuOrder;
    use crate::step::record::{JobInfo, StepInfo, StepRecord};
    use crate::step::spool::Spool;
    use crate::step::{StepSetup, StepTracker};

    /// A batch step of job 77 on node n1 without GPUs, its mark socket in `dir`.
    fn setup(dir: &std::path::Path) -> StepSetup {
        StepSetup {
            job: JobInfo {
                id: 77,
                uid: crate::sys::euid(),
                user: "tester".into(),
                ..JobInfo::default()
            },
            step: StepInfo {
                id: "batch".into(),
                kind: "batch".into(),
                node: "n1".into(),
                local_tasks: Some(1),
                ..StepInfo::default()
            },
            interval: Duration::from_secs(5),
            checkpoint_interval: None,
            spool: Spool::open(&dir.join("spool")).unwrap(),
            nvml_library: None,
            amd_root: dir.join("no-amd"),
            cgroup_root: dir.join("no-cgroups"),
            proc_root: PathBuf::from("/proc"),
            gpu_order: GpuOrder::Unknown("a test".into()),
            gres_conf: None,
            alerts: crate::history::AlertRules::default(),
            mark_socket: Some(dir.join("77.n1.batch.sock")),
            warn_user: false,
            live: None,
            record_run: crate::step::run::RecordRun::Known(0),
            memory_detail: crate::sampler::MemoryDetail::Status,
        }
    }

    #[test]
    fn marks_still_arrive_through_a_flood_on_the_mark_socket() {
        let dir = std::env::temp_dir().join(format!("gt-flood-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = setup(&dir);
        // Checkpoints show which marks have come in.
        s.checkpoint_interval = Some(Duration::from_millis(200));
        let t = StepTracker::start(s.clone()).unwrap();
        let record = s.spool.job_dir(77).unwrap().join(s.record_name());
        let mut task = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        t.task_started(Some(0), Some(0), task.id());
        std::thread::sleep(Duration::from_millis(300));
        // Datagrams that are no mark, as fast as the socket takes them, for 3 s (the job's
        // own user may do this; no other user can reach the socket).
        let stop = AtomicBool::new(false);
        let flood = 3.0;
        std::thread::scope(|s| {
            s.spawn(|| {
                let sock = UnixDatagram::unbound().unwrap();
                sock.set_write_timeout(Some(Duration::from_millis(50)))
                    .unwrap();
                let path = dir.join("77.n1.batch.sock");
                while !stop.load(Ordering::Relaxed) {
                    let _ = sock.send_to(b"garbage", &path);
                }
            });
            let t0 = Instant::now();
            for name in ["load", "train", "save"] {
                std::thread::sleep(Duration::from_millis(500));
                crate::history::mark::send_to(&dir.join("77.n1."), name).unwrap();
            }
            std::thread::sleep(Duration::from_secs_f64(flood) - t0.elapsed());
            stop.store(true, Ordering::Relaxed);
        });
        // The marks come out of the queue behind the flood.
        let marks_in = || {
            std::fs::read_to_string(&record)
                .ok()
                .and_then(|t| StepRecord::from_json(&t).ok())
                .is_some_and(|r| r.events.iter().filter(|e| e.kind == "mark").count() == 3)
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !marks_in() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = task.kill();
        let _ = task.wait();
        t.task_ended(task.id(), Some(9));
        let (rec, _) = t.finish();
        // What the flood costs the sampler thread is measured by `cargo bench --bench
        // mark_flood` (docs/COSTS.md); here, that the marks still arrive.
        let marks: Vec<&str> = rec
            .events
            .iter()
            .filter(|e| e.kind == "mark")
            .filter_map(|e| e.name.as_deref())
            .collect();
        assert_eq!(marks, ["load", "train", "save"], "{:?}", rec.events);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

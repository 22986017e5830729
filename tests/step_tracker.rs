//! The step tracker (what the SPANK plugin drives inside slurmstepd), without Slurm: real task
//! processes, the real NVML path into a private copy of the fake `libnvidia-ml.so.1` (its
//! scenario beside it, so tests run in parallel without touching the environment), and the
//! record it writes.
//!
//! What is checked: NVML is opened only once every local task has been started, and leaves no
//! descriptor to a child exec'd after it; a hung NVML call does not hold `finish` (nor `Drop`)
//! past its deadline, and the record says so; slow samples lengthen the interval, and the
//! record says so; a step with more processes than one sample reads is read in turns.

mod common;
#[path = "step_tracker/fixture.rs"]
mod fixture;

use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::wait_for;
use fixture::*;
use gpu_tracker::step::StepTracker;
use gpu_tracker::step::record::StepRecord;
use serde_json::{Value, json};

#[test]
fn nvml_is_opened_only_after_the_last_local_task_started() {
    let _g = DESCRIPTORS.read().unwrap_or_else(|p| p.into_inner());
    let fx = Fixture::new("nvml-late", Some(2), 100, json!({}));
    let t = StepTracker::start(fx.setup.clone()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        open_on(&fx.control()).is_empty(),
        "NVML was opened before any task was started (slurmstepd may still be forking)"
    );
    let (a, b) = (sleeper(), sleeper());
    t.task_started(Some(0), Some(0), a.id());
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        open_on(&fx.control()).is_empty(),
        "NVML was opened with one of two tasks started"
    );
    t.task_started(Some(1), Some(1), b.id());
    assert!(
        wait_for(Duration::from_secs(5), || !open_on(&fx.control())
            .is_empty()),
        "NVML not opened after the last task started"
    );
    std::thread::sleep(Duration::from_millis(300));
    end(&t, a);
    end(&t, b);
    let (r, written) = t.finish();
    written.unwrap();
    assert_eq!(r.sampler.gpu_source, "nvml", "{:?}", r.sampler);
    assert_eq!(r.gpus.len(), 1);
    assert_eq!(r.gpus[0].uuid, UUID);
    let v = value(&r);
    assert_eq!(v["sampler"]["nvml_opened"], "after_last_task", "{v:#}");
}

#[test]
fn a_child_exec_d_after_nvml_opened_inherits_none_of_its_descriptors() {
    let _g = DESCRIPTORS.write().unwrap_or_else(|p| p.into_inner());
    let fx = Fixture::new("nvml-cloexec", Some(1), 100, json!({}));
    let t = StepTracker::start(fx.setup.clone()).unwrap();
    let task = sleeper();
    t.task_started(Some(0), Some(0), task.id());
    // The fake opens the control file at init and the device's file with its handle, both
    // without O_CLOEXEC.
    assert!(
        wait_for(Duration::from_secs(5), || !open_on(&fx.control())
            .is_empty()
            && !open_on(&fx.device()).is_empty()),
        "NVML was not opened"
    );
    // Marking them comes right after opening: give it a moment (it never comes, unfixed).
    wait_for(Duration::from_secs(2), || {
        open_on(&fx.control()).into_iter().all(|c| c)
            && open_on(&fx.device()).into_iter().all(|c| c)
    });
    // What slurmstepd does for a task epilog: fork and exec.
    let out = Command::new("ls")
        .args(["-l", "/proc/self/fd/"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{listing}");
    for f in [fx.control(), fx.device()] {
        assert!(
            !listing.contains(f.to_str().unwrap()),
            "the child holds {}:\n{listing}",
            f.display()
        );
    }
    // Let a sample read the GPU: it records what was marked.
    std::thread::sleep(Duration::from_millis(500));
    end(&t, task);
    let (r, _) = t.finish();
    let v = value(&r);
    assert!(
        v["sampler"]["nvml_cloexec_descriptors"].as_u64() >= Some(2),
        "{:#}",
        v["sampler"]
    );
}

#[test]
fn finish_returns_within_its_deadline_when_an_nvml_call_hangs() {
    let _g = DESCRIPTORS.read().unwrap_or_else(|p| p.into_inner());
    let hang = json!({"hang": {"call": "nvmlDeviceGetUtilizationRates", "after_ms": 500}});
    let fx = Fixture::new("nvml-hang", Some(1), 100, hang);
    let t = StepTracker::start(fx.setup.clone()).unwrap();
    let task = sleeper();
    t.task_started(Some(0), Some(0), task.id());
    std::thread::sleep(Duration::from_millis(1500));
    end(&t, task);
    let Some((r, written, took)) = finish_within(t, Duration::from_secs(8)) else {
        panic!("finish did not return within 8 s: it waits for a sampler stuck in NVML");
    };
    assert!(took < Duration::from_secs(7), "{took:?}");
    assert!(
        took >= Duration::from_secs(4),
        "it waited for the sampler: {took:?}"
    );
    assert!(r.complete);
    let v = value(&r);
    assert_eq!(v["sampler"]["stopped"], false, "{:#}", v["sampler"]);
    let n = notes(&v);
    assert!(
        n.contains("the sampler did not stop within 5 s") && n.contains("figures end at"),
        "{n}"
    );
    assert!(r.sampler.samples >= 1, "samples before the hang count");
    assert_eq!(r.tasks.len(), 1);
    assert!(r.tasks[0].ended);
    // The same record is on disk.
    let on_disk = std::fs::read_to_string(written.unwrap()).unwrap();
    assert_eq!(StepRecord::from_json(&on_disk).unwrap(), r);
}

#[test]
fn dropping_a_tracker_whose_sampler_hangs_returns_within_the_deadline() {
    let _g = DESCRIPTORS.read().unwrap_or_else(|p| p.into_inner());
    let hang = json!({"hang": {"call": "nvmlDeviceGetTotalEnergyConsumption", "after_ms": 300}});
    let fx = Fixture::new("nvml-hang-drop", Some(1), 100, hang);
    let t = StepTracker::start(fx.setup.clone()).unwrap();
    let mut task = sleeper();
    t.task_started(Some(0), Some(0), task.id());
    std::thread::sleep(Duration::from_millis(1000));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(t);
        let _ = tx.send(());
    });
    let dropped = rx.recv_timeout(Duration::from_secs(8));
    let _ = task.kill();
    let _ = task.wait();
    assert!(dropped.is_ok(), "Drop waited for a sampler stuck in NVML");
}

#[test]
fn a_sampler_that_comes_back_late_does_not_overwrite_the_final_record() {
    let _g = DESCRIPTORS.read().unwrap_or_else(|p| p.into_inner());
    // Stuck for 7 s, then answering again: past finish's deadline, and with checkpoints due.
    let hang = json!({"hang": {"call": "nvmlDeviceGetUtilizationRates", "after_ms": 500,
                               "for_ms": 7000}});
    let mut fx = Fixture::new("nvml-late-return", Some(1), 100, hang);
    fx.setup.checkpoint_interval = Some(Duration::from_millis(200));
    let t = StepTracker::start(fx.setup.clone()).unwrap();
    let task = sleeper();
    t.task_started(Some(0), Some(0), task.id());
    assert!(
        wait_for(Duration::from_secs(10), || !open_on(&fx.control())
            .is_empty()),
        "NVML was not opened"
    );
    // Into the hang, which begins 500 ms after NVML's init.
    std::thread::sleep(Duration::from_millis(1000));
    end(&t, task);
    let Some((r, written, took)) = finish_within(t, Duration::from_secs(8)) else {
        panic!("finish did not return within 8 s");
    };
    assert!(
        took < Duration::from_secs(6),
        "finish waited out the hang: {took:?}"
    );
    let path = written.unwrap();
    // The hang ends about 7.5 s after init; the thread then samples, checkpoints if it may,
    // sees the stop and ends, shutting NVML down, which closes the fake's control file.
    assert!(
        wait_for(Duration::from_secs(30), || open_on(&fx.control())
            .is_empty()),
        "the sampler never came back from the hang"
    );
    let on_disk = StepRecord::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(on_disk.complete, "a checkpoint replaced the final record");
    assert_eq!(on_disk, r);
}

#[test]
fn slow_samples_lengthen_the_interval_and_the_record_says_so() {
    let _g = DESCRIPTORS.read().unwrap_or_else(|p| p.into_inner());
    // Each sample waits 30 ms in NVML: 30 % of the 100 ms asked for.
    let slow = json!({"delays_ms": {"nvmlDeviceGetUtilizationRates": 30}});
    let mut fx = Fixture::new("slow", Some(1), 100, slow);
    // Checkpoints show how far the sampler is.
    fx.setup.checkpoint_interval = Some(Duration::from_millis(200));
    let t = StepTracker::start(fx.setup.clone()).unwrap();
    let task = sleeper();
    t.task_started(Some(0), Some(0), task.id());
    // Lengthened twice (100 -> 200 -> 400 ms), then four samples at the pace it settled on.
    let mut lengthened_at = None;
    let settled = wait_for(Duration::from_secs(30), || {
        let Some(r) = on_disk(&fx) else { return false };
        match lengthened_at {
            None if r.sampler.backoffs >= Some(2) => lengthened_at = Some(r.sampler.samples),
            Some(n) => return r.sampler.samples >= n + 4,
            None => {}
        }
        false
    });
    end(&t, task);
    let (r, _) = t.finish();
    let v = value(&r);
    let s = &v["sampler"];
    assert!(settled, "the interval was not lengthened twice: {s:#}");
    assert_eq!(r.sampler.interval_seconds, 0.1);
    assert!(r.sampler.max_sample_microseconds >= 30_000.0, "{s:#}");
    // Over 10 % of the interval: 30 ms > 10 ms, > 20 ms; at 400 ms it is under (800 ms, the
    // ceiling of 8 times the one asked for, if the machine adds 10 ms to a sample).
    let max = s["interval_max_seconds"].as_f64().unwrap_or(0.0);
    assert!(max == 0.4 || max == 0.8, "{s:#}");
    assert!(s["backoffs"].as_u64() >= Some(2), "{s:#}");
    assert!(s["overruns"].as_u64() >= Some(2), "{s:#}");
    // Since it settled, the samples are at least 400 ms apart (unfixed: 100 ms, 30 % of a
    // core): the timeline's 100 ms buckets hold them 300 ms apart at the least.
    let tl = r.timeline.as_ref().unwrap();
    assert_eq!(tl.bucket_seconds, 0.1, "{tl:?}");
    let times: Vec<f64> = tl
        .buckets
        .iter()
        .flat_map(|b| std::iter::repeat_n(b.t, b.samples as usize))
        .collect();
    let last = &times[times.len().saturating_sub(4)..];
    assert!(
        last.len() == 4 && last.windows(2).all(|w| w[1] - w[0] >= 0.25),
        "samples at {times:?}"
    );
    assert!(notes(&v).contains("lengthened"), "{s:#}");
    assert_eq!(r.gpus.len(), 1, "GPU figures are still there");
    assert!(r.gpus[0].mean_utilization_percent.is_some());
}

#[test]
fn a_step_with_more_processes_than_a_sample_reads_is_read_in_turns() {
    let _g = DESCRIPTORS.read().unwrap_or_else(|p| p.into_inner());
    use std::os::unix::process::CommandExt;
    let mut fx = Fixture::new("many", Some(1), 100, json!({}));
    fx.setup.step.alloc_gpus.clear();
    let t = StepTracker::start(fx.setup.clone()).unwrap();
    // One task of 601 processes: a shell and 600 sleeping children.
    let mut task = Command::new("sh")
        .args(["-c", "for i in $(seq 600); do sleep 60 & done; wait"])
        .process_group(0)
        .spawn()
        .unwrap();
    let children = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .map(|s| s.split_whitespace().count())
            .unwrap_or(0)
    };
    assert!(wait_for(Duration::from_secs(20), || children(task.id()) == 600));
    t.task_started(Some(0), Some(0), task.id());
    std::thread::sleep(Duration::from_millis(2500));
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", task.id())])
        .status();
    let st = task.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    t.task_ended(task.id(), Some(st.into_raw()));
    let (r, _) = t.finish();
    let v = value(&r);
    let s = &v["sampler"];
    assert_eq!(
        r.tasks[0].max_processes,
        Some(601),
        "every process is counted"
    );
    assert!(s["partial_samples"].as_u64() >= Some(1), "{s:#}");
    assert!(
        notes(&v).contains("at most 500 processes are read per sample"),
        "{s:#}"
    );
    // That the turns cover every process, and the count bound, are checked by the unit tests
    // of step::procs; here, that the step's record says what was done.
}

#[test]
fn an_nvml_that_never_finishes_starting_holds_nothing() {
    let _g = DESCRIPTORS.read().unwrap_or_else(|p| p.into_inner());
    let hang = json!({"hang": {"call": "nvmlInit_v2"}});
    let fx = Fixture::new("nvml-init-hang", Some(1), 100, hang);
    let t = StepTracker::start(fx.setup.clone()).unwrap();
    let task = sleeper();
    t.task_started(Some(0), Some(0), task.id());
    std::thread::sleep(Duration::from_millis(800));
    end(&t, task);
    let Some((r, _, took)) = finish_within(t, Duration::from_secs(8)) else {
        panic!("finish did not return within 8 s");
    };
    // The sampler itself never waits for NVML: it stops at once.
    assert!(took < Duration::from_secs(2), "{took:?}");
    let v = value(&r);
    assert_eq!(v["sampler"]["stopped"], true);
    assert_eq!(r.sampler.gpu_source, "none");
    assert!(r.sampler.samples >= 3, "{:#}", v["sampler"]);
    assert!(
        notes(&v).contains("NVML was still starting when the step ended"),
        "{:#}",
        v["sampler"]
    );
}

#[test]
fn a_short_task_started_after_the_first_sample_is_still_seen() {
    let _g = DESCRIPTORS.read().unwrap_or_else(|p| p.into_inner());
    // A long interval: without a sample soon after each task starts, the second task would
    // live and die between two samples and be recorded with no thread count at all.
    let mut f = Fixture::new("short-task", Some(2), 5_000, json!({}));
    f.setup.step.alloc_gpus.clear();
    let t = StepTracker::start(f.setup.clone()).unwrap();
    let first = sleeper();
    t.task_started(Some(0), Some(0), first.id());
    std::thread::sleep(Duration::from_millis(200));
    let mut second = Command::new("sleep").arg("0.3").spawn().unwrap();
    t.task_started(Some(1), Some(1), second.id());
    let st = second.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    t.task_ended(second.id(), Some(st.into_raw()));
    end(&t, first);
    let (r, _) = t.finish();
    assert_eq!(r.tasks.len(), 2);
    assert_eq!(r.tasks[1].max_threads, Some(1), "{:?}", r.tasks[1]);
    assert_eq!(r.tasks[1].max_processes, Some(1));
    assert!(r.sampler.samples >= 2, "{:?}", r.sampler);
}

#[test]
fn the_record_tells_when_tasks_ran_a_phase_began_and_the_gpu_was_lost() {
    let _g = DESCRIPTORS.read().unwrap_or_else(|p| p.into_inner());
    let f = Fixture::new("story", Some(1), 100, json!({}));
    // The GPU falls off the bus 700 ms after NVML opens.
    let path = f.dir.join("lib").join("fake-nvml-scenario.json");
    let mut scn: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    scn["devices"][0]["lost_after_ms"] = json!(700);
    std::fs::write(&path, scn.to_string()).unwrap();
    let t = StepTracker::start(f.setup.clone()).unwrap();
    let task = sleeper();
    t.task_started(Some(0), Some(0), task.id());
    std::thread::sleep(Duration::from_millis(300));
    let prefix = f.dir.join("4242.n1.");
    let sent = gpu_tracker::history::mark::send_to(&prefix, "second half");
    assert_eq!(sent.unwrap(), 1);
    std::thread::sleep(Duration::from_millis(1200));
    end(&t, task);
    let (r, _) = t.finish();
    assert!(
        !f.dir.join("4242.n1.0.sock").exists(),
        "the socket goes with the step"
    );
    let kinds: Vec<&str> = r.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["task_start", "mark", "gpu_lost", "task_exit"],
        "{:?}",
        r.events
    );
    let mark = &r.events[1];
    assert_eq!(mark.name.as_deref(), Some("second half"));
    assert!((0.2..1.0).contains(&mark.t), "{mark:?}");
    assert_eq!(r.events[2].gpu, Some(0));
    assert!(r.events[3].detail.contains("SIGKILL"), "{:?}", r.events[3]);
    let tl = r.timeline.as_ref().unwrap();
    assert_eq!(tl.gpus, [UUID]);
    assert!(tl.buckets.len() >= 8, "{tl:?}");
    // Readings before the loss, none after.
    assert!(tl.buckets.iter().any(|b| {
        b.gpus
            .first()
            .is_some_and(|g| g.utilization_percent.is_some())
    }));
    assert!(
        tl.buckets
            .last()
            .unwrap()
            .gpus
            .iter()
            .all(|g| g.utilization_percent.is_none())
    );
    let idle = r.gpus[0].idle.as_ref().unwrap();
    assert!(idle.ever_busy && idle.idle_seconds == 0.0, "{idle:?}");
}

#[test]
fn a_step_has_a_record_before_its_first_task_so_one_that_ends_at_once_is_never_missed() {
    let _g = DESCRIPTORS.read().unwrap_or_else(|p| p.into_inner());
    // A long interval: the task below starts and ends before any sample is taken.
    let mut f = Fixture::new("first-record", Some(1), 5_000, json!({}));
    f.setup.step.alloc_gpus.clear();
    let t = StepTracker::start(f.setup.clone()).unwrap();
    let path = f
        .setup
        .spool
        .job_dir(f.setup.job.id)
        .unwrap()
        .join(f.setup.record_name());
    // Before any task: the record is there, marked incomplete, with nothing measured yet.
    let first = StepRecord::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(!first.complete);
    assert!(first.step.end.is_none());
    assert_eq!(first.sampler.samples, 0);
    assert!(first.sampler.faults.is_empty(), "{:?}", first.sampler);
    let mut c = Command::new("true").spawn().unwrap();
    t.task_started(Some(0), Some(0), c.id());
    let st = c.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    t.task_ended(c.id(), Some(st.into_raw()));
    let (r, written) = t.finish();
    assert_eq!(written.unwrap(), path);
    assert!(r.complete);
    let last = StepRecord::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(last.complete);
    assert_eq!(last.tasks.len(), 1);
    assert_eq!(last.tasks[0].exit_code, Some(0), "{:?}", last.tasks[0]);
}

/// This process's threads named `name` (as `/proc` shows it: 15 characters at most).
fn threads_named(name: &str) -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Context switches of thread `tid` of this process: one per sleep at least.
fn switches(tid: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    s.lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn the_sampler_thread_sleeps_between_samples_and_wakes_for_a_mark() {
    // Alone, so that the one new sampler thread is this test's.
    let _g = DESCRIPTORS.write().unwrap_or_else(|p| p.into_inner());
    let f = Fixture::new("sleeps", Some(1), 5000, json!({}));
    let before: Vec<String> = threads_named("gpu-tracker");
    let t = StepTracker::start(f.setup.clone()).unwrap();
    let task = sleeper();
    t.task_started(Some(0), Some(0), task.id());
    // A thread starts with its creator's name and renames itself a moment later: the NVML
    // opener, which the sampler starts, reads "gpu-tracker" for that moment. Wait for it.
    let new_ones = || -> Vec<String> {
        threads_named("gpu-tracker")
            .into_iter()
            .filter(|t| !before.contains(t))
            .collect()
    };
    let mut mine = new_ones();
    let deadline = Instant::now() + Duration::from_secs(3);
    while mine.len() != 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        mine = new_ones();
    }
    assert_eq!(mine.len(), 1, "{mine:?}");
    // After the first sample, nothing to do for 5 s: the thread sleeps (it used to wake ten
    // times a second to look for marks).
    std::thread::sleep(Duration::from_millis(700));
    let start = switches(&mine[0]);
    std::thread::sleep(Duration::from_millis(1500));
    let woke = switches(&mine[0]) - start;
    let sent = gpu_tracker::history::mark::send_to(&f.dir.join("4242.n1."), "two");
    assert_eq!(sent.unwrap(), 1);
    std::thread::sleep(Duration::from_millis(300));
    end(&t, task);
    let (r, _) = t.finish();
    assert!(woke <= 2, "{woke} wakeups in 1.5 s");
    let marks: Vec<_> = r.events.iter().filter(|e| e.kind == "mark").collect();
    assert_eq!(marks.len(), 1, "{:?}", r.events);
    // The mark's sample comes at once, not at the next one due (5 s after the first).
    let tl = r.timeline.as_ref().unwrap();
    let samples: u32 = tl.buckets.iter().map(|b| b.samples).sum();
    assert!(samples >= 2, "{tl:?}");
}

#[test]
fn a_running_steps_live_state_is_kept_for_the_exporter_and_removed_when_it_ends() {
    use gpu_tracker::step::LiveSetup;
    use gpu_tracker::step::live::{self, Parsed};
    let _g = DESCRIPTORS.read().unwrap_or_else(|p| p.into_inner());
    let mut f = Fixture::new("live", Some(1), 100, json!({}));
    let dir = f.dir.join("live");
    f.setup.live = Some(LiveSetup {
        dir: dir.clone(),
        gid: None,
        interval: Duration::from_secs(1),
        problem: None,
    });
    let t = StepTracker::start(f.setup.clone()).unwrap();
    let c = sleeper();
    t.task_started(Some(0), Some(0), c.id());
    let file = dir.join("default.4242.0.n1.json");
    let read = || match live::parse(&std::fs::read(&file).ok()?) {
        Parsed::State(s) => Some(*s),
        _ => None,
    };
    // The first write follows the first sample; the GPU is in the one after NVML opened.
    assert!(
        wait_for(Duration::from_secs(5), || read()
            .is_some_and(|s| !s.gpus.is_empty())),
        "no live state with the GPU in {}",
        dir.display()
    );
    let s = read().unwrap();
    assert_eq!(
        (s.job_id, s.step.as_str(), s.node.as_str()),
        (4242, "0", "n1")
    );
    assert_eq!(
        (s.user.as_str(), s.stepd_pid),
        ("tester", std::process::id())
    );
    assert_eq!(s.interval_seconds, 1.0);
    assert!(
        s.cpu.seconds.is_some() && s.memory.current_bytes.is_some(),
        "{s:?}"
    );
    // No step cgroup here (no cgroup root): no pressure counters, and no reason made up.
    assert_eq!(s.pressure, None);
    let g = &s.gpus[0];
    assert_eq!((g.index, g.uuid.as_str()), (0, UUID));
    assert_eq!(g.memory_total_bytes, 1 << 30);
    assert_eq!(g.utilization_percent, Some(50.0));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o7777, 0o700);
    assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o7777, 0o600);
    end(&t, c);
    let (r, written) = t.finish();
    written.unwrap();
    // The step's series end with it: nothing is left in the directory but the mark that says
    // the plugin made it.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, [".gpu-tracker-live"]);
    assert!(
        !r.sampler.faults.iter().any(|f| f.contains("live")),
        "{:?}",
        r.sampler.faults
    );
}

//! Tracking on a background thread: the library API ([`Tracker`], [`TrackerGuard`]) and the loop
//! the `gpu-tracker` command runs.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::unix_now;
use crate::gpu::{self, GpuConfig, LazyGpu};
use crate::history::mark::Inbox;
use crate::history::{AlertRules, Recorder, Story};
use crate::sampler::{EndInfo, MemoryDetail, Sampler, SamplerOptions, Target};
use crate::sys::Wake;
use crate::tracking_file::{TrackingFile, TrackingFileError};
use crate::units::Units;
use crate::usage::ResourceUsage;

/// The smallest sleep time accepted, as in `gpu_tracker`.
pub const MIN_SLEEP_TIME: f64 = crate::units::MIN_INTERVAL_SECONDS;

/// A failure to start or finish tracking.
#[derive(Debug, thiserror::Error)]
pub enum TrackerError {
    /// An option has a value that cannot work.
    #[error("{0}")]
    InvalidOption(String),
    /// The tracking file could not be made.
    #[error(transparent)]
    TrackingFile(#[from] TrackingFileError),
    /// The sampling thread could not start.
    #[error("could not start the sampling thread: {0}")]
    Thread(#[source] std::io::Error),
    /// The sampling thread panicked (a bug): no figures.
    #[error("the sampling thread failed; no figures were kept")]
    Panicked,
}

/// Where warnings go.
pub type LogFn = Arc<dyn Fn(&str) + Send + Sync>;

/// Options of a tracking session, with the names and defaults of `gpu_tracker`'s `Tracker`.
#[derive(Clone)]
pub struct TrackerOptions {
    /// Seconds between samples (at least 0.1).
    pub sleep_time: f64,
    /// Units of the result.
    pub units: Units,
    /// Cores expected to be used: denominator of CPU hardware percentages.
    pub n_expected_cores: Option<u32>,
    /// GPUs whose utilization is tracked (all when `None`).
    pub gpu_uuids: Option<Vec<String>>,
    /// How the private/shared memory split is read.
    pub memory_detail: MemoryDetail,
    /// Where NVML is, or that GPUs are skipped.
    pub gpu: GpuConfig,
    /// Per-sample CSV file.
    pub tracking_file: Option<PathBuf>,
    /// Replace an existing tracking file.
    pub overwrite: bool,
    /// Where warnings go; `None` drops them (`--disable-logs`).
    pub log: Option<LogFn>,
    /// When alerts fire (kept as events in the [`Story`]).
    pub alerts: AlertRules,
    /// Where phase marks (`gpu-tracker mark`) come in: a socket the caller bound before it
    /// started what is tracked, so that no early mark finds nobody listening.
    pub marks: Option<Arc<Mutex<Inbox>>>,
}

impl std::fmt::Debug for TrackerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackerOptions")
            .field("sleep_time", &self.sleep_time)
            .field("units", &self.units)
            .field("n_expected_cores", &self.n_expected_cores)
            .field("gpu_uuids", &self.gpu_uuids)
            .field("tracking_file", &self.tracking_file)
            .finish_non_exhaustive()
    }
}

impl Default for TrackerOptions {
    fn default() -> Self {
        TrackerOptions {
            sleep_time: 1.0,
            units: Units::default(),
            n_expected_cores: None,
            gpu_uuids: None,
            memory_detail: MemoryDetail::SmapsRollup,
            gpu: GpuConfig {
                nvml_lib: std::env::var_os("GPU_TRACKER_NVML_LIB").map(PathBuf::from),
                disabled: false,
                mig: false,
                brand: None,
                amd_root: None,
            },
            tracking_file: None,
            overwrite: false,
            log: Some(Arc::new(|m: &str| eprintln!("gpu-tracker: warning: {m}"))),
            alerts: AlertRules::default(),
            marks: None,
        }
    }
}

impl TrackerOptions {
    /// Sets the sleep time in seconds.
    pub fn sleep_time(mut self, seconds: f64) -> Self {
        self.sleep_time = seconds;
        self
    }
    /// Sets the units.
    pub fn units(mut self, units: Units) -> Self {
        self.units = units;
        self
    }
    /// Sets the expected cores.
    pub fn n_expected_cores(mut self, n: u32) -> Self {
        self.n_expected_cores = Some(n);
        self
    }
    /// Skips GPUs.
    pub fn no_gpu(mut self) -> Self {
        self.gpu.disabled = true;
        self
    }
    /// Drops warnings.
    pub fn disable_logs(mut self) -> Self {
        self.log = None;
        self
    }

    /// Checks the values, with the messages the CLI prints.
    pub fn validate(&self) -> Result<(), TrackerError> {
        if !self.sleep_time.is_finite() || self.sleep_time < MIN_SLEEP_TIME {
            return Err(TrackerError::InvalidOption(format!(
                "sleep time of {} is invalid: it must be at least {MIN_SLEEP_TIME} seconds",
                self.sleep_time
            )));
        }
        if self.n_expected_cores == Some(0) {
            return Err(TrackerError::InvalidOption(
                "the number of expected cores must be at least 1".into(),
            ));
        }
        if let Some(u) = &self.gpu_uuids {
            if u.is_empty() || u.iter().any(|s| s.trim().is_empty()) {
                return Err(TrackerError::InvalidOption(
                    "the GPU UUID list has an empty entry".into(),
                ));
            }
        }
        Ok(())
    }

    fn sampler_options(&self) -> SamplerOptions {
        SamplerOptions {
            interval: Duration::from_secs_f64(self.sleep_time),
            memory_detail: self.memory_detail,
            n_expected_cores: self.n_expected_cores,
            gpu_uuids: self.gpu_uuids.clone(),
            units: self.units,
            ..SamplerOptions::default()
        }
    }
}

#[derive(Default)]
struct StopState {
    end: Option<EndInfo>,
}

struct Stop {
    state: Mutex<StopState>,
    /// Held by the sampler thread for each sample, and by whoever reaps the command's
    /// processes ([`Tracker::hold_samples`]): a process reaped in the middle of a sample would
    /// be counted twice, once in `/proc` as a zombie and once in the reaped children's usage.
    sampling: Mutex<()>,
    cv: Condvar,
    /// Wakes a sampler thread that waits on the mark socket (`None`: no socket, or no wake
    /// could be made; then it waits on `cv` alone, and a mark waits for the next sample).
    wake: Option<Wake>,
}

impl Stop {
    fn new(opts: &TrackerOptions) -> Stop {
        Stop {
            state: Mutex::new(StopState::default()),
            sampling: Mutex::new(()),
            cv: Condvar::new(),
            wake: opts.marks.as_ref().and_then(|_| Wake::new().ok()),
        }
    }

    /// Tells the sampler thread to stop, however it waits.
    fn signal(&self, end: EndInfo) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.end = Some(end);
        self.cv.notify_all();
        if let Some(w) = &self.wake {
            w.wake();
        }
    }
}

/// A tracking session running on its own thread. Dropping it stops it and discards the figures;
/// [`Tracker::stop`] returns them.
pub struct Tracker {
    stop: Arc<Stop>,
    handle: Option<JoinHandle<(ResourceUsage, Story)>>,
}

impl Tracker {
    /// Starts tracking the calling process and its descendants.
    pub fn start(opts: TrackerOptions) -> Result<Tracker, TrackerError> {
        let sources = Sources::open(&opts)?;
        Tracker::start_opened(opts, None, sources)
    }

    /// Starts tracking with what [`Sources::open`] opened: the calling process and its
    /// descendants, or (`pid`) another process and its descendants, nothing of the caller's
    /// counted (the Python API's `process_id=`).
    pub fn start_opened(
        opts: TrackerOptions,
        pid: Option<u32>,
        sources: Sources,
    ) -> Result<Tracker, TrackerError> {
        let target = match pid {
            None => this_process(),
            Some(pid) => Target {
                main: pid,
                tree_roots: vec![pid],
                exclude: vec![],
                cgroup: None,
                in_process: false,
            },
        };
        Tracker::start_for(opts, target, sources.gpu, sources.tracking_file)
    }

    /// Starts tracking `target`, with GPUs from `gpu` and samples written to `tf` (the
    /// `gpu-tracker` command uses this; `opts.tracking_file` is not opened here).
    pub fn start_for(
        opts: TrackerOptions,
        target: Target,
        gpu: LazyGpu,
        tf: Option<TrackingFile>,
    ) -> Result<Tracker, TrackerError> {
        opts.validate()?;
        let stop = Arc::new(Stop::new(&opts));
        let s2 = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("gpu-tracker-sampler".into())
            .spawn(move || run(opts, target, gpu, tf, &s2))
            .map_err(TrackerError::Thread)?;
        Ok(Tracker {
            stop,
            handle: Some(handle),
        })
    }

    /// Holds off the next sample until the guard is dropped (a sample under way finishes
    /// first). Reap a child of the tracked command while holding it: a sample then sees the
    /// child either in `/proc` or in the reaped children's usage, never in both.
    pub fn hold_samples(&self) -> std::sync::MutexGuard<'_, ()> {
        self.stop.sampling.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops tracking and returns the figures.
    pub fn stop(self) -> Result<ResourceUsage, TrackerError> {
        self.stop_with(EndInfo::default())
    }

    /// Stops tracking, with what `wait4` told about the command, and returns the figures.
    pub fn stop_with(self, end: EndInfo) -> Result<ResourceUsage, TrackerError> {
        self.stop_with_story(end).map(|(u, _)| u)
    }

    /// As [`Tracker::stop_with`], with the run over time: timeline, events, idle GPUs.
    pub fn stop_with_story(mut self, end: EndInfo) -> Result<(ResourceUsage, Story), TrackerError> {
        self.signal(end);
        let h = self.handle.take().ok_or(TrackerError::Panicked)?;
        h.join().map_err(|_| TrackerError::Panicked)
    }

    /// Turns the tracker into a guard that stops it when dropped and hands the figures to
    /// `on_stop`.
    pub fn guard<F: FnOnce(ResourceUsage) + Send + 'static>(self, on_stop: F) -> TrackerGuard {
        TrackerGuard {
            tracker: Some(self),
            on_stop: Some(Box::new(on_stop)),
        }
    }

    fn signal(&self, end: EndInfo) {
        self.stop.signal(end);
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.signal(EndInfo::default());
            let _ = h.join();
        }
    }
}

/// Stops a [`Tracker`] when dropped and passes its figures to a callback: tracks a scope.
///
/// ```
/// use gpu_tracker::{Tracker, TrackerOptions};
/// use std::sync::mpsc;
///
/// let (tx, rx) = mpsc::channel();
/// {
///     let _guard = Tracker::start(TrackerOptions::default().sleep_time(0.1).no_gpu())
///         .unwrap()
///         .guard(move |usage| tx.send(usage).unwrap());
///     std::thread::sleep(std::time::Duration::from_millis(150));
/// }
/// let usage = rx.recv().unwrap();
/// assert!(usage.compute_time.time > 0.0);
/// ```
pub struct TrackerGuard {
    tracker: Option<Tracker>,
    on_stop: Option<Box<dyn FnOnce(ResourceUsage) + Send>>,
}

impl Drop for TrackerGuard {
    fn drop(&mut self) {
        if let (Some(t), Some(f)) = (self.tracker.take(), self.on_stop.take()) {
            if let Ok(u) = t.stop() {
                f(u);
            }
        }
    }
}

/// What a session reads and writes, opened before it starts: the GPUs and the tracking file.
pub struct Sources {
    gpu: LazyGpu,
    tracking_file: Option<TrackingFile>,
}

impl Sources {
    /// Checks the options, creates the tracking file, and opens the GPUs: at once when
    /// `gpu_uuids` names some (an unknown UUID is an [`TrackerError::InvalidOption`]), else
    /// lazily on the sampler thread.
    pub fn open(opts: &TrackerOptions) -> Result<Sources, TrackerError> {
        opts.validate()?;
        let gpu = gpu::open_checked(&opts.gpu, opts.gpu_uuids.as_deref())
            .map_err(TrackerError::InvalidOption)?;
        let tracking_file = match &opts.tracking_file {
            Some(p) => Some(TrackingFile::create(p, opts.overwrite)?),
            None => None,
        };
        Ok(Sources { gpu, tracking_file })
    }

    /// The GPUs and the tracking file, for a tracker started another way
    /// ([`crate::launch::Launch::run`]).
    pub fn into_parts(self) -> (LazyGpu, Option<TrackingFile>) {
        (self.gpu, self.tracking_file)
    }
}

/// The calling process and its descendants, tracked from inside it.
fn this_process() -> Target {
    let me = std::process::id();
    Target {
        main: me,
        tree_roots: vec![me],
        exclude: vec![],
        cgroup: None,
        in_process: true,
    }
}

fn run(
    opts: TrackerOptions,
    target: Target,
    mut gpu: LazyGpu,
    mut tf: Option<TrackingFile>,
    stop: &Stop,
) -> (ResourceUsage, Story) {
    let log = opts.log.clone();
    let warn = |m: &str| {
        if let Some(l) = &log {
            l(m);
        }
    };
    let in_process = target.in_process;
    let mut sampler = Sampler::new(opts.sampler_options(), target);
    let interval = Duration::from_secs_f64(opts.sleep_time);
    let mut story = Recorder::new(unix_now(), opts.sleep_time, opts.alerts);
    let inbox = opts.marks.clone();
    // The thread waits on the socket itself (a descriptor of its own: the inbox stays free).
    let mark_fd = inbox.as_ref().and_then(|m| {
        m.lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_clone_fd()
            .ok()
    });
    let receive = |inbox: &Option<Arc<Mutex<Inbox>>>| {
        inbox.as_ref().map_or_else(Vec::new, |m| {
            m.lock()
                .unwrap_or_else(|p| p.into_inner())
                .receive(unix_now())
        })
    };
    // Rows wait here until the GPU count is known: the static row comes first in the file.
    let mut pending_rows = Vec::new();
    let mut static_written = false;
    // The interval asked for, lengthened while samples cost more than a tenth of it (a tree of
    // thousands of processes, a slow driver): said in the notes (`sampler::pace`).
    let mut pace = crate::sampler::pace::Pace::new(interval);
    let mut schedule = crate::sampler::pace::Schedule::new(std::time::Instant::now());
    let end = loop {
        let started = std::time::Instant::now();
        let mut unavailable = None;
        let _ = gpu.get(false, &mut |m| unavailable = Some(m));
        let gpu_known = gpu.is_settled();
        let tp = {
            let _no_reap = stop.sampling.lock().unwrap_or_else(|p| p.into_inner());
            sampler.sample(gpu.get(false, &mut |_| {}))
        };
        sampler.record(&mut story, unix_now());
        if let Some(m) = unavailable {
            warn(&format!("no GPU figures: {m}"));
            sampler.note(format!("no GPU figures: {m}"));
        }
        if let Some(f) = tf.as_mut() {
            pending_rows.push(tp);
            if gpu_known || pending_rows.len() > 50 {
                let r = write_rows(
                    f,
                    &mut sampler,
                    &mut static_written,
                    &mut pending_rows,
                    &opts,
                );
                if let Err(e) = r {
                    warn(&e.to_string());
                    sampler.note(format!("tracking file abandoned: {e}"));
                    tf = None;
                }
            }
        }
        // Wait for the next sample, a stop, or a phase mark: a mark ends a phase with a
        // sample. Samples start an interval apart, whatever each cost.
        schedule.sampled(&mut pace, started, started.elapsed());
        let mut st = stop.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let now = std::time::Instant::now();
            if st.end.is_some() || schedule.is_due(now) {
                break;
            }
            let mut waited = false;
            // While the inbox rests after a batch, not on the socket (see Inbox::resting).
            let rest = inbox
                .as_ref()
                .and_then(|m| m.lock().unwrap_or_else(|p| p.into_inner()).resting());
            let wait = rest.map_or(schedule.due() - now, |r| r.min(schedule.due() - now));
            if let (Some(fd), Some(w)) = (&mark_fd, &stop.wake) {
                // A stop signalled before this wait leaves the wake readable: no stop is lost.
                drop(st);
                let fds: Vec<_> = rest.is_none().then(|| fd.as_fd()).into_iter().collect();
                waited = w.wait_with(&fds, wait).is_ok();
                st = stop.state.lock().unwrap_or_else(|p| p.into_inner());
            }
            if !waited {
                st = stop
                    .cv
                    .wait_timeout_while(st, wait, |s| s.end.is_none())
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            let marks = receive(&inbox);
            if !marks.is_empty() {
                for (t, name) in marks {
                    story.mark(t, &name);
                }
                schedule.at_once(std::time::Instant::now());
                break;
            }
        }
        if let Some(end) = st.end.take() {
            break end;
        }
    };
    let last = inbox.as_ref().map_or_else(Vec::new, |m| {
        m.lock()
            .unwrap_or_else(|p| p.into_inner())
            .receive_now(unix_now())
    });
    for (t, name) in last {
        story.mark(t, &name);
    }
    if let Some(n) = pace.note() {
        sampler.note(n);
    }
    // A last reading: of the process itself when tracking a block of code; of the devices only
    // when the command has ended (its processes are gone).
    // A command that ends before NVML answered still says why it has no GPU figures, on
    // stderr as in the loop.
    let src = gpu.get(true, &mut |m| {
        warn(&format!("no GPU figures: {m}"));
        sampler.note(format!("no GPU figures: {m}"));
    });
    if in_process {
        let tp = sampler.sample(src);
        sampler.record(&mut story, unix_now());
        if let Some(f) = tf.as_mut() {
            pending_rows.push(tp);
            let _ = write_rows(
                f,
                &mut sampler,
                &mut static_written,
                &mut pending_rows,
                &opts,
            );
        }
    } else if let Some(f) = tf.as_mut() {
        let _ = write_rows(
            f,
            &mut sampler,
            &mut static_written,
            &mut pending_rows,
            &opts,
        );
    }
    let story = story.finish(unix_now());
    (sampler.finish(end), story)
}

fn write_rows(
    f: &mut TrackingFile,
    sampler: &mut Sampler,
    static_written: &mut bool,
    rows: &mut Vec<crate::sampler::Timepoint>,
    opts: &TrackerOptions,
) -> Result<(), TrackingFileError> {
    if !*static_written {
        let s = sampler.static_data(opts.units);
        f.write_static(&s)?;
        *static_written = true;
    }
    for r in rows.drain(..) {
        f.write_row(&r)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Context switches of thread `tid` of this process: one per sleep at least.
    fn switches(tid: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        s.lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .sum()
    }

    #[test]
    fn the_sampler_sleeps_between_samples_and_wakes_for_a_mark_or_a_stop() {
        let dir = std::env::temp_dir().join(format!("gt-tracker-wait-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let inbox = Inbox::bind(&dir.join("t.sock"), crate::sys::euid()).unwrap();
        let opts = TrackerOptions {
            sleep_time: 5.0,
            marks: Some(Arc::new(Mutex::new(inbox))),
            ..TrackerOptions::default().no_gpu().disable_logs()
        };
        let target = this_process();
        let stop = Arc::new(Stop::new(&opts));
        assert!(stop.wake.is_some());
        let s2 = Arc::clone(&stop);
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            // "PID/task/TID": this thread's own entry.
            let me = std::fs::read_link("/proc/thread-self").unwrap();
            tx.send(me.file_name().unwrap().to_string_lossy().into_owned())
                .unwrap();
            run(opts, target, LazyGpu::none(), None, &s2)
        });
        let tid = rx.recv().unwrap();
        // After the first sample, nothing to do for 5 s: the thread sleeps (it used to wake
        // ten times a second to look for marks).
        std::thread::sleep(Duration::from_millis(500));
        let before = switches(&tid);
        std::thread::sleep(Duration::from_millis(1500));
        let woke = switches(&tid) - before;
        assert!(woke <= 2, "{woke} wakeups in 1.5 s");
        // A mark wakes it: the phase ends with a sample, long before the next one is due.
        crate::history::mark::send_to(&dir.join("t."), "two").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let t = std::time::Instant::now();
        stop.signal(EndInfo::default());
        let (_, story) = h.join().unwrap();
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        let _ = std::fs::remove_dir_all(&dir);
        let marks: Vec<_> = story.events.iter().filter(|e| e.kind == "mark").collect();
        assert_eq!(marks.len(), 1, "{:?}", story.events);
        assert!((1.5..3.0).contains(&marks[0].t), "{:?}", marks[0]);
        // The first sample, the mark's, and the last (of the process itself, at the stop).
        let samples: u32 = story.timeline.buckets.iter().map(|b| b.samples).sum();
        assert_eq!(samples, 3, "{:?}", story.timeline);
    }

    #[test]
    fn no_sample_is_taken_while_samples_are_held() {
        let opts = TrackerOptions::default()
            .sleep_time(0.1)
            .no_gpu()
            .disable_logs();
        let tracker = Tracker::start(opts).unwrap();
        std::thread::sleep(Duration::from_millis(150));
        {
            let _held = tracker.hold_samples();
            // Twenty samples would be due in these 2 s.
            std::thread::sleep(Duration::from_secs(2));
        }
        std::thread::sleep(Duration::from_millis(350));
        let (_, story) = tracker.stop_with_story(EndInfo::default()).unwrap();
        let samples: u32 = story.timeline.buckets.iter().map(|b| b.samples).sum();
        // Before the hold (2), the one that waited for it, after it (about 3), and the last.
        assert!(
            (3..=10).contains(&samples),
            "{samples} samples: {:?}",
            story.timeline
        );
    }
}

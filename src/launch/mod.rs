//! A command run under tracking from its start to its end, as `gpu-tracker -e` runs it: the
//! process made ready for it (descriptor table, child subreaper, Ctrl-C left to the command), a
//! cgroup of its own, the phase-mark socket named to it, `sh -c` started, termination signals
//! relayed to it, every descendant reaped between two samples, and its start and exit as
//! events of the run ([`Launch`], [`Finished`]). `gpu-tracker`'s command line is in [`cmd`].
//!
//! The tracking itself is the library's [`Tracker`] on its sampler thread; this is what stands
//! around it when the tracked command is a child of this process.

pub mod cmd;
mod mark_dir;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::cgroup::own::OwnCgroup;
use crate::clock::unix_now;
use crate::gpu::LazyGpu;
use crate::history::mark::{self, Inbox};
use crate::history::{Event, Story};
use crate::proc::files::FdLimit;
use crate::sampler::{EndInfo, Target};
use crate::sys::{self, ExitStatus};
use crate::tracker::{LogFn, Sources, TrackerError};
use crate::tracking_file::TrackingFile;
use crate::usage::ResourceUsage;
use crate::{Tracker, TrackerOptions};

use mark_dir::MarkDir;

/// A failure of the tracker itself while the command ran (not the command's own). Each says
/// its cause in its own words (no `source`): [`cmd::chain`] words a chain once.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The tracker's process could not leave SIGINT and SIGQUIT to the command.
    #[error("ignoring SIGINT in the tracker: {0}")]
    Signals(std::io::Error),
    /// `/bin/sh` could not be started.
    #[error("starting /bin/sh: {0}")]
    Spawn(std::io::Error),
    /// Waiting for the command's processes failed.
    #[error("waiting for the command: {0}")]
    Wait(std::io::Error),
    /// The tracker could not start, or its sampling thread failed.
    #[error(transparent)]
    Tracker(#[from] TrackerError),
}

/// Grows this process's descriptor table to where the sampler keeps its `/proc` files (from
/// [`FdLimit::min_fd`] up, the same for any share of the limit it keeps; see `proc::files`).
/// Call it first, while the process has one thread: growing the table once there are threads
/// makes the kernel wait for an RCU grace period, 10 ms and more, which fell on the last
/// milliseconds of a short command (its first sample comes after it ended).
pub fn grow_descriptor_table() {
    let hard = sys::nofile_limit().1;
    let _ = sys::grow_fd_table(FdLimit::for_soft_limit(hard).min_fd);
}

/// A command to run under tracking: made before the tracker's options, whose phase-mark inbox
/// ([`Launch::marks`]) is bound here, so that the command's first mark finds it listening.
pub struct Launch {
    command: String,
    log: Option<LogFn>,
    /// A directory of this user's own for the mark socket; `None`: marks are off.
    mark_dir: Option<MarkDir>,
    marks: Option<Arc<Mutex<Inbox>>>,
    /// Give the command a cgroup of its own (else the combined peak is sampled).
    own_cgroup: bool,
    cgroup_root: PathBuf,
    proc_root: PathBuf,
}

/// How a launched command ended, and what it used.
#[derive(Debug)]
pub struct Finished {
    /// The command's process (`sh -c`).
    pub pid: u32,
    /// How it ended.
    pub status: ExitStatus,
    /// Its figures.
    pub usage: ResourceUsage,
    /// Its run over time, its `task_start` first and its `task_exit` last among the events.
    pub story: Story,
    /// When the tracking ended, Unix seconds.
    pub ended_unix: f64,
}

impl Finished {
    /// Seconds from the start of the timeline to the end of the tracking.
    pub fn elapsed(&self) -> f64 {
        self.ended_unix - self.story.timeline.start_unix
    }

    /// The status to exit with, as a shell gives it (128 + signal for a killed command).
    pub fn exit_code(&self) -> u8 {
        self.status.shell_code().clamp(0, 255) as u8
    }
}

/// The status as `gpu_tracker` shows it (the code, or minus the signal) and the words that
/// follow it (` (killed by SIGTERM, core dumped)`, or nothing).
pub fn status_words(status: ExitStatus) -> (i32, String) {
    match status {
        ExitStatus::Exited(c) => (c, String::new()),
        ExitStatus::Signaled { signal, core } => (
            -signal,
            format!(
                " (killed by {}{})",
                sys::signal_name(signal),
                if core { ", core dumped" } else { "" }
            ),
        ),
    }
}

impl Launch {
    /// A launch of `command` (run by `sh -c`), warnings to `log`. Makes the phase-mark socket
    /// in a private directory of its own; without it marks are off, which `log` is told.
    pub fn new(command: &str, log: Option<LogFn>) -> Launch {
        let mark_dir = MarkDir::create();
        let marks = mark_dir.as_ref().and_then(|d| {
            match Inbox::bind(&d.path().join("command.sock"), sys::euid()) {
                Ok(i) => Some(Arc::new(Mutex::new(i))),
                Err(e) => {
                    if let Some(l) = &log {
                        l(&format!("phase marks are off: {e}"));
                    }
                    None
                }
            }
        });
        Launch {
            command: command.to_string(),
            log,
            mark_dir,
            marks,
            own_cgroup: true,
            cgroup_root: PathBuf::from(crate::cgroup::DEFAULT_ROOT),
            proc_root: PathBuf::from(crate::proc::DEFAULT_ROOT),
        }
    }

    /// The inbox of the command's phase marks, for [`TrackerOptions::marks`].
    pub fn marks(&self) -> Option<Arc<Mutex<Inbox>>> {
        self.marks.clone()
    }

    /// Whether the command gets a cgroup of its own (the default), whose counters give the
    /// combined peak; without one it is sampled.
    pub fn own_cgroup(mut self, yes: bool) -> Launch {
        self.own_cgroup = yes;
        self
    }

    /// Runs the command under a [`Tracker`] with `opts`, GPUs from `gpu` and samples written to
    /// `tracking`, until the command's process ends; its orphaned descendants are reaped on the
    /// way. Makes this process a child subreaper, leaves SIGINT and SIGQUIT to the command (as
    /// `time(1)` does) and relays SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 to it, for the rest of
    /// the process's life.
    pub fn run(
        mut self,
        opts: TrackerOptions,
        gpu: LazyGpu,
        tracking: Option<TrackingFile>,
    ) -> Result<Finished, LaunchError> {
        let own_cg = self.own_cgroup.then(|| self.make_cgroup()).flatten();
        let me = std::process::id();
        // Orphaned descendants come back to us instead of init, so they stay tracked.
        let _ = sys::set_child_subreaper();
        sys::set_interactive_signals(libc::SIG_IGN).map_err(LaunchError::Signals)?;
        let prefix = self
            .mark_dir
            .as_ref()
            .map(|d| d.path().join("").into_os_string())
            .unwrap_or_default();
        let env: Vec<(&str, &std::ffi::OsStr)> = if self.mark_dir.is_some() {
            vec![(mark::ENV, prefix.as_os_str())]
        } else {
            Vec::new()
        };
        let started_unix = unix_now();
        let child = sys::spawn_shell(&self.command, own_cg.as_ref().map(|c| c.join()), &env)
            .map_err(LaunchError::Spawn)?;
        let pid = child.id();
        let _ = sys::forward_signals_to(pid);

        let mut cgroup = own_cg.as_ref().map(|c| c.cgroup().clone());
        if let Some(cg) = &cgroup {
            // The child joined before exec; if it could not, the cgroup would measure nothing.
            if !cg.procs().map(|p| p.contains(&pid)).unwrap_or(false) {
                cgroup = None;
            }
        }
        let target = Target {
            main: pid,
            tree_roots: vec![me],
            exclude: vec![me],
            cgroup,
            in_process: false,
        };
        let tracker = Tracker::start_for(opts, target, gpu, tracking)?;
        let (status, end) = reap(&tracker, pid, &self.proc_root)?;
        let (usage, mut story) = tracker.stop_with_story(end)?;
        drop(self.mark_dir.take());
        if let Some(c) = own_cg {
            if let Err(e) = c.remove() {
                self.warn(&format!("could not remove the command's cgroup: {e}"));
            }
        }
        let ended_unix = unix_now();
        add_task_events(&mut story, pid, status, started_unix, ended_unix);
        Ok(Finished {
            pid,
            status,
            usage,
            story,
            ended_unix,
        })
    }

    /// [`Launch::run`] with what [`Sources::open`] opened from `opts` (the GPUs, the tracking
    /// file): the whole launch from the options alone, as the Python package would make it.
    pub fn run_opened(
        self,
        opts: TrackerOptions,
        sources: Sources,
    ) -> Result<Finished, LaunchError> {
        let (gpu, tracking) = sources.into_parts();
        self.run(opts, gpu, tracking)
    }

    fn make_cgroup(&self) -> Option<OwnCgroup> {
        OwnCgroup::create(&self.cgroup_root, &self.proc_root)
            .map_err(|why| self.warn(&format!("combined peak will be sampled: {why}")))
            .ok()
    }

    fn warn(&self, message: &str) {
        if let Some(l) = &self.log {
            l(message);
        }
    }
}

/// Reaps until the main process `pid` ends; orphans re-parented to us are reaped on the way,
/// each between two samples, never during one ([`Tracker::hold_samples`]). Main is looked at
/// once more as a zombie: its own CPU time, apart from its children's.
fn reap(
    tracker: &Tracker,
    pid: u32,
    proc_root: &Path,
) -> Result<(ExitStatus, EndInfo), LaunchError> {
    let procfs = crate::proc::ProcFs::new(proc_root);
    let tps = crate::proc::ticks_per_second() as f64;
    loop {
        let ended = sys::wait_any_ended().map_err(LaunchError::Wait)?;
        let _no_sample = tracker.hold_samples();
        let own = (ended as u32 == pid)
            .then(|| procfs.pid_stat(pid).ok())
            .flatten()
            .map(|st| st.own_ticks() as f64 / tps);
        let (p, how, ru) = sys::wait4(ended).map_err(LaunchError::Wait)?;
        if p as u32 == pid {
            let end = EndInfo {
                main: Some(ru),
                children: Some(sys::rusage(sys::Who::Children)),
                main_own_cpu: own,
            };
            return Ok((how, end));
        }
    }
}

/// The command's start, first of the events, and its exit, last.
fn add_task_events(story: &mut Story, pid: u32, status: ExitStatus, started: f64, ended: f64) {
    let t0 = story.timeline.start_unix;
    let (shown, note) = status_words(status);
    let mut start = Event::new("task_start", format!("the command started (pid {pid})"));
    start.t = (started - t0).max(0.0);
    start.task = Some(0);
    story.events.insert(0, start);
    let mut exit = Event::new(
        "task_exit",
        format!("the command exited with status {shown}{note}"),
    );
    exit.t = (ended - t0).max(0.0);
    exit.task = Some(0);
    exit.value = match status {
        ExitStatus::Exited(c) => Some(f64::from(c)),
        ExitStatus::Signaled { .. } => None,
    };
    story.events.push(exit);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_shown_as_gpu_tracker_shows_it() {
        assert_eq!(status_words(ExitStatus::Exited(3)), (3, String::new()));
        let killed = ExitStatus::Signaled {
            signal: libc::SIGSEGV,
            core: true,
        };
        assert_eq!(
            status_words(killed),
            (-11, " (killed by SIGSEGV, core dumped)".into())
        );
    }

    #[test]
    fn the_commands_start_comes_first_and_its_exit_last() {
        let mut story = crate::history::Recorder::new(100.0, 1.0, Default::default()).finish(100.0);
        story.events.push(Event::new("mark", "a phase".into()));
        let killed = ExitStatus::Signaled {
            signal: libc::SIGKILL,
            core: false,
        };
        add_task_events(&mut story, 42, killed, 99.5, 103.0);
        let kinds: Vec<&str> = story.events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["task_start", "mark", "task_exit"]);
        let (start, exit) = (&story.events[0], &story.events[2]);
        assert_eq!((start.t, start.task), (0.0, Some(0)));
        assert_eq!(start.detail, "the command started (pid 42)");
        assert_eq!((exit.t, exit.value), (3.0, None));
        assert_eq!(
            exit.detail,
            "the command exited with status -9 (killed by SIGKILL)"
        );
        assert!(exit.important());
    }
}

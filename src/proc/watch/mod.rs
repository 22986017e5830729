//! Reading processes sample after sample, each file only when what it tells can have changed.
//!
//! What a process costs per sample (measured on a 2-core VM with 1000 sleeping processes, kept
//! descriptors, see [`super::files`]): `schedstat` 2 µs, `statm` 2 µs, `stat` 5 µs, `status`
//! 10 µs, `smaps_rollup` 40 to 60 µs for a small process and milliseconds for one of gigabytes
//! (the kernel walks its page tables). Reading all five at every sample made a step of 1000
//! processes cost a core. The rules, for one process at one sample:
//!
//! - `schedstat` and `statm`: always (`schedstat` only while the process has one thread).
//!   Together they tell whether the process ran since the last sample (its main thread's run
//!   time moved) and its resident memory now, exact. A process that ran and whose `stat`, read
//!   anyway, shows the resident count of its last sample keeps its `statm` for up to
//!   [`REFRESH`] (a move smaller than the kernel's per-CPU batches is read then).
//! - `stat` (CPU times, threads, parent): when the process ran, is new, has more than one
//!   thread (`schedstat` speaks of the main thread only), or the kernel keeps no run time. A
//!   process that did not run has the CPU times it had: reusing them is exact.
//! - `status` (`VmHWM`, the kernel's peak): when the process is new, or ran and either its
//!   memory changed or a second has passed since the last read. The peak only grows while the
//!   process runs, and never hides for long: a spike between two samples of a process that
//!   ran with no visible change is read within a second; one that ends before is in its
//!   parent's `wait4` figures (for the command itself, the tracker's).
//! - `smaps_rollup` (the private/shared split, when asked for): when the process is new, its
//!   resident or shared memory moved by more than [`split_tolerance`] since the last read, a
//!   process beside it started or ended (its parent's or its children's sharing changes; the
//!   parent is marked), or it ran and [`SPLIT_REFRESH`] has passed. A smaller move (an
//!   interpreter's heap breathing, a tracker's own thread in the process it tracks) moves the
//!   last split by `statm`'s change, as a deferred read does, and is counted the same way. The
//!   caller may defer it ([`Watch::read`]'s `smaps_allowed`), when reading it would cost too
//!   much of the interval; and a read that cost more than [`SPLIT_PACED_FROM`] of CPU is not
//!   made again for that process before its cost over [`SPLIT_TIME_SHARE`] has passed (a walk
//!   of a process of gigabytes takes tens to hundreds of milliseconds, and holds the process's
//!   memory map locked meanwhile). A deferred split is the last one moved by the change in
//!   `statm` (new anonymous pages as private, new file pages as shared), counted in
//!   [`WatchCounts::splits_estimated`], and read when it may be. The total (private + shared)
//!   is always `statm`'s, exact.
//! - `children` of each thread (the process's children; any thread may fork): the `task`
//!   directory is listed, then each thread's file read, but for a tracker inside the process it
//!   tracks when `stat` says two threads: its own and the main thread, whose file is the one
//!   read (a sampler thread forks nothing). Cost, median per sample of a sleeping process at
//!   0.1 s on the 2-core VM (`cargo bench --bench tracker_cost`): 172 to 188 µs with this and
//!   the `statm` rule above, 197 to 203 µs before; the wakeup alone is about 65 µs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::files::{FdLimit, FileCounts, PidFile, ProcFiles};
use super::parse::{self, MemSplit, PidStat, Statm};
use super::{ProcError, ProcFs};

/// A process that did not run reads its memory (`statm`) and children again after this long; one
/// that ran reads its peak (`status`) again after this long even if its memory looks unchanged.
pub const REFRESH: Duration = Duration::from_secs(1);
/// A process that ran reads its private/shared split again after this long.
pub const SPLIT_REFRESH: Duration = Duration::from_secs(30);

/// Share of the sampling thread's CPU time that one process's `smaps_rollup` reads may take:
/// a read that cost more than [`SPLIT_PACED_FROM`] is not made again for that process before
/// its cost divided by this share has passed (a 60 ms walk of a process of 4 GB waits 1.2 s; its
/// split is estimated meanwhile). The sampler holds the reads of one sample to this share of the
/// interval too.
pub const SPLIT_TIME_SHARE: f64 = 0.05;

/// The CPU time of a `smaps_rollup` read from which the process's next read waits (see
/// [`SPLIT_TIME_SHARE`]): a process of some hundreds of megabytes. Cheaper reads come again
/// as the rules say.
pub const SPLIT_PACED_FROM: Duration = Duration::from_millis(10);

/// How far a process's resident or shared memory may move from the reading of its split before
/// `smaps_rollup` is read again: 1 % of its resident memory, at least 256 KiB. Reading the split
/// walks the page tables (a millisecond for a Python interpreter of 30 MB); the split it keeps
/// meanwhile is off by at most this much, and the total is `statm`'s, exact.
pub fn split_tolerance(resident: u64) -> u64 {
    (resident / 100).max(256 * 1024)
}

/// One process at one sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Its `stat` fields (read now, or unchanged since).
    pub stat: PidStat,
    /// Its resident memory now.
    pub memory: Statm,
    /// Its private/shared split (see [`Reading::split_exact`]).
    pub split: MemSplit,
    /// Whether the split is `smaps_rollup`'s, read now or still valid; false where it was
    /// estimated or taken from `statm`.
    pub split_exact: bool,
    /// Its peak resident memory (`VmHWM`), bytes; never below its resident memory now.
    pub hwm: u64,
    /// Whether this is its first reading.
    pub first: bool,
}

/// What the watch has read since the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchCounts {
    /// Process readings.
    pub readings: u64,
    /// Readings that read `stat`.
    pub stat_reads: u64,
    /// Readings that read `statm`.
    pub statm_reads: u64,
    /// Readings that read `status`.
    pub status_reads: u64,
    /// Readings that read `smaps_rollup`.
    pub smaps_reads: u64,
    /// Readings whose split was estimated: reading it was deferred, or the memory moved by less
    /// than [`split_tolerance`] since it was read.
    pub splits_estimated: u64,
    /// The files layer's counts.
    pub files: FileCounts,
}

/// A process's last `smaps_rollup` split.
#[derive(Debug, Clone, Copy)]
struct LastSplit {
    split: MemSplit,
    /// The `statm` it was read with.
    at_read: Statm,
    /// When it was read.
    when: Instant,
    /// Not read again before this (its cost, see [`SPLIT_TIME_SHARE`]).
    next: Instant,
}

#[derive(Debug, Clone)]
struct Known {
    runtime: Option<u64>,
    stat: PidStat,
    memory: Statm,
    memory_at: Instant,
    hwm: u64,
    status_at: Instant,
    /// The last `smaps_rollup` split.
    split: Option<LastSplit>,
    /// A process beside it started or ended: its split is read again.
    neighbours_changed: bool,
    /// Its children when last listed, with its run time then and when.
    children: Option<(Vec<u32>, Option<u64>, Instant)>,
}

/// Reads processes sample after sample; see the module's rules.
#[derive(Debug)]
pub struct Watch {
    files: ProcFiles,
    procfs: ProcFs,
    page: u64,
    smaps: bool,
    known: HashMap<u32, Known>,
    /// Run times read in this sample (with whether the file was opened again).
    runtimes: HashMap<u32, (Option<u64>, bool)>,
    counts: WatchCounts,
    smaps_error: Option<String>,
    /// See [`SPLIT_PACED_FROM`] (tests lower it).
    paced_from: Duration,
    /// This process's id (a tracker inside the process it tracks leaves its own thread out).
    own_pid: u32,
    /// The calling thread's id, once asked, with the thread it was asked from.
    own_tid: Option<(std::thread::ThreadId, u32)>,
    /// A `stat` read in this sample before the process's reading ([`Watch::children`] of this
    /// process), with whether its file was opened again: the reading takes it.
    early_stat: Option<(u32, PidStat, bool)>,
}

impl Watch {
    /// A watch of the procfs at `root`; `smaps`: read the private/shared split from
    /// `smaps_rollup` (else it is `statm`'s, anonymous as private).
    pub fn new(root: impl Into<PathBuf>, smaps: bool, limit: FdLimit) -> Watch {
        let root = root.into();
        Watch {
            files: ProcFiles::new(root.clone(), limit),
            procfs: ProcFs::new(root),
            page: crate::sys::page_size(),
            smaps,
            known: HashMap::new(),
            runtimes: HashMap::new(),
            counts: WatchCounts::default(),
            smaps_error: None,
            paced_from: SPLIT_PACED_FROM,
            own_pid: std::process::id(),
            own_tid: None,
            early_stat: None,
        }
    }

    /// What was read since the start.
    pub fn counts(&self) -> WatchCounts {
        WatchCounts {
            files: self.files.counts(),
            ..self.counts
        }
    }

    /// `/proc/stat` and `/proc/meminfo` through kept descriptors.
    pub fn machine(&mut self) -> (Option<super::CpuTotals>, Option<super::MemInfo>) {
        let cpu = self
            .files
            .read_machine(false)
            .ok()
            .and_then(|b| parse::parse_cpu_totals(&String::from_utf8_lossy(b)).ok());
        let mem = self
            .files
            .read_machine(true)
            .ok()
            .and_then(|b| parse::parse_meminfo(b).ok());
        (cpu, mem)
    }

    /// The first failure to read a split from `smaps_rollup` (the split is `statm`'s then).
    pub fn take_smaps_error(&mut self) -> Option<String> {
        self.smaps_error.take()
    }

    /// The run time of `pid`'s main thread, read once per sample (see [`Watch::end_sample`]).
    fn runtime(&mut self, pid: u32) -> Result<(Option<u64>, bool), ProcError> {
        if let Some(r) = self.runtimes.get(&pid) {
            return Ok(*r);
        }
        let r = match self.files.read(pid, PidFile::Schedstat) {
            Ok(r) => (parse::parse_schedstat_runtime(r.bytes), r.reopened),
            Err(e) if e.is_gone() => return Err(e),
            // No schedstat here: `stat` tells.
            Err(_) => (None, false),
        };
        self.runtimes.insert(pid, r);
        Ok(r)
    }

    /// Children of `pid`'s threads. For a process known to have one thread: the list it had
    /// when it has not run since (only a parent that runs forks or reaps), read again at least
    /// every [`REFRESH`]; else its main thread's kept `children` file. Other processes list
    /// their threads through kept files ([`ProcFiles::thread_children`]), leaving out the
    /// calling thread where it is one of theirs (a tracker inside the process it tracks).
    pub fn children(&mut self, pid: u32, now: Instant) -> Result<Option<Vec<u32>>, ProcError> {
        if self.known.get(&pid).is_some_and(|k| k.stat.threads == 1) {
            if let Ok((runtime, false)) = self.runtime(pid) {
                let k = self.known.get(&pid).ok_or(ProcError::Gone(pid))?;
                if let Some((list, at_runtime, at)) = &k.children {
                    if runtime.is_some()
                        && *at_runtime == runtime
                        && now.duration_since(*at) < REFRESH
                    {
                        return Ok(Some(list.clone()));
                    }
                }
                if let Ok(r) = self.files.read(pid, PidFile::Children) {
                    if !r.reopened {
                        let list = parse::parse_pid_list(&String::from_utf8_lossy(r.bytes));
                        if let Some(k) = self.known.get_mut(&pid) {
                            k.children = Some((list.clone(), runtime, now));
                        }
                        return Ok(Some(list));
                    }
                }
            }
        }
        if pid != self.own_pid {
            return self.files.thread_children(pid, None, now);
        }
        // A tracker inside the process it tracks. With two threads, its main thread alive
        // (the process's state is its main thread's), they are the main thread and this one:
        // the main thread's `children` file says all, without listing the `task` directory.
        // A third thread (a thread pool, a loader) brings the listing back.
        let me = self.own_tid();
        if me != pid {
            let stat = self.stat_early(pid).ok();
            if let Some(tids) = stat.and_then(|st| threads_known(&st, pid, me)) {
                return self.files.children_of_threads(pid, tids, Some(me), now);
            }
        }
        self.files.thread_children(pid, Some(me), now)
    }

    /// The calling thread's id: asked of the kernel once per thread (a watch is read from one
    /// thread, the sampler's).
    fn own_tid(&mut self) -> u32 {
        let thread = std::thread::current().id();
        match self.own_tid {
            Some((t, tid)) if t == thread => tid,
            _ => {
                let tid = crate::sys::gettid();
                self.own_tid = Some((thread, tid));
                tid
            }
        }
    }

    /// Reads `pid`'s `stat` now, for its reading later in this sample to take.
    fn stat_early(&mut self, pid: u32) -> Result<PidStat, ProcError> {
        let keep = self.known.contains_key(&pid);
        let r = self.files.read_keeping(pid, PidFile::Stat, keep)?;
        let reopened = r.reopened;
        let stat = parse::parse_pid_stat(r.bytes)
            .map_err(|e| ProcError::Parse(PathBuf::from(format!("{pid}/stat")), e))?;
        self.early_stat = Some((pid, stat, reopened));
        Ok(stat)
    }

    /// Reads process `pid` now. `smaps_allowed`: whether its split may be read from
    /// `smaps_rollup` this time if it needs to be.
    pub fn read(
        &mut self,
        pid: u32,
        now: Instant,
        smaps_allowed: bool,
    ) -> Result<Reading, ProcError> {
        self.counts.readings += 1;
        // A process of several threads reads `stat` at every sample anyway, and its main
        // thread's run time tells nothing more: no `schedstat` for it.
        let several = self.known.get(&pid).is_some_and(|k| k.stat.threads != 1);
        let (runtime, reopened) = if several {
            (None, false)
        } else {
            self.runtime(pid)?
        };
        let mut prev = self.known.remove(&pid).filter(|_| !reopened);
        let ran = match &prev {
            None => true,
            Some(k) => runtime.is_none() || k.runtime != runtime || k.stat.threads != 1,
        };
        let early = self.early_stat.take().filter(|(p, ..)| *p == pid);
        let stat = if ran {
            self.counts.stat_reads += 1;
            let (stat, reopened) = match early {
                Some((_, stat, reopened)) => (stat, reopened),
                None => {
                    // Kept open once the process is seen running, not for its first reading.
                    let r = self
                        .files
                        .read_keeping(pid, PidFile::Stat, prev.is_some())?;
                    let path = || PathBuf::from(format!("{pid}/stat"));
                    let stat =
                        parse::parse_pid_stat(r.bytes).map_err(|e| ProcError::Parse(path(), e))?;
                    (stat, r.reopened)
                }
            };
            if reopened {
                // Its kept file had stopped answering: this may be another process.
                prev = None;
            }
            stat
        } else {
            prev.as_ref().map(|k| k.stat).ok_or(ProcError::Gone(pid))?
        };
        if prev
            .as_ref()
            .is_some_and(|k| k.stat.starttime != stat.starttime)
        {
            // Another process under the same pid.
            prev = None;
        }
        let (memory, memory_at) = match &prev {
            Some(k) if !ran && now.duration_since(k.memory_at) < REFRESH => (k.memory, k.memory_at),
            // `stat`, read now, says its resident memory has not moved since the last sample.
            // Its count is compared with its own last one, not with `statm`'s: kernels with
            // per-CPU counters give `stat` the quick sum and `statm` the exact one, which
            // differ by a few pages. Read again within REFRESH all the same: a move smaller
            // than the per-CPU batches, and the file/anonymous split.
            Some(k)
                if ran
                    && stat.rss_pages == k.stat.rss_pages
                    && now.duration_since(k.memory_at) < REFRESH =>
            {
                (k.memory, k.memory_at)
            }
            _ => {
                self.counts.statm_reads += 1;
                let r = self.files.read(pid, PidFile::Statm)?;
                let m = parse::parse_statm(r.bytes, self.page)
                    .map_err(|e| ProcError::Parse(PathBuf::from(format!("{pid}/statm")), e))?;
                (m, now)
            }
        };
        let first = prev.is_none();
        let changed = prev.as_ref().is_none_or(|k| k.memory != memory);
        let (hwm, status_at) = match &prev {
            Some(k) if !(ran && (changed || now.duration_since(k.status_at) >= REFRESH)) => {
                (k.hwm.max(memory.resident), k.status_at)
            }
            _ => {
                self.counts.status_reads += 1;
                // Read at most once a second: not worth a descriptor.
                let r = self.files.read_keeping(pid, PidFile::Status, false)?;
                let hwm = parse::parse_pid_status(r.bytes)
                    .ok()
                    .and_then(|s| s.hwm)
                    .unwrap_or(0);
                let old = prev.as_ref().map_or(0, |k| k.hwm);
                (hwm.max(old).max(memory.resident), now)
            }
        };
        let (split, split_exact, kept_split) =
            self.split(pid, prev.as_ref(), memory, ran, now, smaps_allowed)?;
        // A change beside it that a deferred read has not seen yet is still to be read.
        let neighbours_changed =
            !split_exact && prev.as_ref().is_some_and(|k| k.neighbours_changed);
        let children = prev.and_then(|k| k.children);
        self.known.insert(
            pid,
            Known {
                runtime,
                stat,
                memory,
                memory_at,
                hwm,
                status_at,
                split: kept_split,
                neighbours_changed,
                children,
            },
        );
        if first {
            // Its parent now shares pages with it.
            if let Some(k) = self.known.get_mut(&stat.ppid) {
                k.neighbours_changed = true;
            }
        }
        Ok(Reading {
            stat,
            memory,
            split,
            split_exact,
            hwm,
            first,
        })
    }

    fn split(
        &mut self,
        pid: u32,
        prev: Option<&Known>,
        memory: Statm,
        ran: bool,
        now: Instant,
        allowed: bool,
    ) -> Result<(MemSplit, bool, Option<LastSplit>), ProcError> {
        if !self.smaps {
            return Ok((memory.split(), false, None));
        }
        let last = prev.and_then(|k| k.split);
        let stale = match (prev, last) {
            (Some(k), Some(l)) => {
                let tolerance = split_tolerance(memory.resident);
                k.neighbours_changed
                    || memory.resident.abs_diff(l.at_read.resident) > tolerance
                    || memory.shared.abs_diff(l.at_read.shared) > tolerance
                    || (ran && now.duration_since(l.when) >= SPLIT_REFRESH)
            }
            _ => true,
        };
        match last {
            Some(l) if !stale && l.at_read == memory => return Ok((l.split, true, last)),
            // Close enough; deferred by the caller; or its last read was costly.
            Some(l) if !stale || !allowed || now < l.next => {
                self.counts.splits_estimated += 1;
                return Ok((estimate(l.split, l.at_read, memory), false, last));
            }
            _ => {}
        }
        self.counts.smaps_reads += 1;
        // The walk's cost as this thread's CPU time: a thread preempted meanwhile is not
        // charged for it.
        let cpu0 = crate::sys::thread_cpu_seconds();
        let read = self.procfs.pid_smaps_rollup(pid);
        let cost = Duration::from_secs_f64((crate::sys::thread_cpu_seconds() - cpu0).max(0.0));
        match read {
            Ok(split) => {
                let wait = if cost >= self.paced_from {
                    cost.div_f64(SPLIT_TIME_SHARE)
                } else {
                    Duration::ZERO
                };
                let last = LastSplit {
                    split,
                    at_read: memory,
                    when: now,
                    next: now + wait,
                };
                Ok((split, true, Some(last)))
            }
            Err(e) if e.is_gone() => Err(e),
            Err(e) => {
                if self.smaps_error.is_none() {
                    self.smaps_error = Some(e.to_string());
                }
                Ok((memory.split(), false, None))
            }
        }
    }

    /// Ends a sample (the next one reads run times again): forgets the processes that `listed` no longer holds, and marks the parents
    /// of those, whose private/shared split changes with them (those of processes that started
    /// are marked as they are first read). A process listed but not read this sample (a caller
    /// that reads in turns) is kept as it was.
    pub fn end_sample(&mut self, listed: impl Fn(u32) -> bool) {
        let mut parents = Vec::new();
        let gone: Vec<u32> = self
            .known
            .iter()
            .filter(|(pid, _)| !listed(**pid))
            .map(|(pid, k)| {
                parents.push(k.stat.ppid);
                *pid
            })
            .collect();
        for pid in &gone {
            self.known.remove(pid);
            self.files.forget(*pid);
        }
        self.files.retain(&listed);
        // The next sample reads run times again.
        self.runtimes.clear();
        self.early_stat = None;
        for p in parents {
            if let Some(k) = self.known.get_mut(&p) {
                k.neighbours_changed = true;
            }
        }
    }
}

/// The threads of `pid` known from its `stat` alone, read from thread `me` of it: with two
/// threads and its main thread alive (a process's state is its main thread's), they are the main
/// thread and `me`. `None` where they must be listed.
fn threads_known(stat: &PidStat, pid: u32, me: u32) -> Option<Vec<u32>> {
    (me != pid && stat.threads == 2 && stat.state != 'Z').then(|| vec![pid])
}

/// The split last read, moved by what `statm` says changed since: new file-backed pages as
/// shared, new anonymous ones as private; the total is `statm`'s.
fn estimate(s: MemSplit, at_read: Statm, now: Statm) -> MemSplit {
    let shared = (s.shared as i128 + now.shared as i128 - at_read.shared as i128)
        .clamp(0, now.resident as i128) as u64;
    MemSplit {
        private: now.resident - shared,
        shared,
    }
}

#[cfg(test)]
mod tests;

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
//!   time moved) and its resident memory now, exact.
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
//!   last split by `statm`'s change, as a deferred read does, and is counted the same way. The caller may defer it ([`Watch::read`]'s
//!   `smaps_allowed`), when reading it would cost too much of the interval: the split is then
//!   the last one moved by the change in `statm` (new anonymous pages as private, new file
//!   pages as shared), counted in [`WatchCounts::splits_estimated`], and read first next time.
//!   The total (private + shared) is always `statm`'s, exact.

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

#[derive(Debug, Clone)]
struct Known {
    runtime: Option<u64>,
    stat: PidStat,
    memory: Statm,
    memory_at: Instant,
    hwm: u64,
    status_at: Instant,
    /// The last `smaps_rollup` split, the `statm` it was read with, and when.
    split: Option<(MemSplit, Statm, Instant)>,
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
    /// This process's id (a tracker inside the process it tracks leaves its own thread out).
    own_pid: u32,
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
            own_pid: std::process::id(),
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
        let me = (pid == self.own_pid).then(crate::sys::gettid);
        self.files.thread_children(pid, me, now)
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
        let stat = if ran {
            self.counts.stat_reads += 1;
            // Kept open once the process is seen running, not for its first reading.
            let r = self
                .files
                .read_keeping(pid, PidFile::Stat, prev.is_some())?;
            if r.reopened {
                // Its kept file had stopped answering: this may be another process.
                prev = None;
            }
            let path = || PathBuf::from(format!("{pid}/stat"));
            parse::parse_pid_stat(r.bytes).map_err(|e| ProcError::Parse(path(), e))?
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
            // `stat`, read now, says its resident memory has not moved: `statm` counts the
            // same pages. Read again within REFRESH all the same, for the file/anonymous split.
            Some(k)
                if ran
                    && stat.rss_pages.saturating_mul(self.page) == k.memory.resident
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
                neighbours_changed: false,
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

    #[allow(clippy::type_complexity)]
    fn split(
        &mut self,
        pid: u32,
        prev: Option<&Known>,
        memory: Statm,
        ran: bool,
        now: Instant,
        allowed: bool,
    ) -> Result<(MemSplit, bool, Option<(MemSplit, Statm, Instant)>), ProcError> {
        if !self.smaps {
            return Ok((memory.split(), false, None));
        }
        let last = prev.and_then(|k| k.split);
        let stale = match (prev, last) {
            (Some(k), Some((_, at_read, when))) => {
                let tolerance = split_tolerance(memory.resident);
                k.neighbours_changed
                    || memory.resident.abs_diff(at_read.resident) > tolerance
                    || memory.shared.abs_diff(at_read.shared) > tolerance
                    || (ran && now.duration_since(when) >= SPLIT_REFRESH)
            }
            _ => true,
        };
        match last {
            Some((s, at_read, _)) if !stale && at_read == memory => return Ok((s, true, last)),
            Some((s, at_read, _)) if !stale => {
                self.counts.splits_estimated += 1;
                return Ok((estimate(s, at_read, memory), false, last));
            }
            Some((s, at_read, _)) if !allowed => {
                self.counts.splits_estimated += 1;
                return Ok((estimate(s, at_read, memory), false, last));
            }
            _ => {}
        }
        self.counts.smaps_reads += 1;
        match self.procfs.pid_smaps_rollup(pid) {
            Ok(s) => Ok((s, true, Some((s, memory, now)))),
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
        for p in parents {
            if let Some(k) = self.known.get_mut(&p) {
                k.neighbours_changed = true;
            }
        }
    }
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
mod tests {
    use super::*;
    use std::process::Command;

    fn watch(smaps: bool) -> Watch {
        Watch::new(
            "/proc",
            smaps,
            FdLimit {
                max_kept: 64,
                min_fd: 0,
            },
        )
    }

    #[test]
    fn a_sleeping_process_costs_two_small_reads() {
        let mut child = Command::new("sleep").arg("20").spawn().unwrap();
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(100));
        let mut w = watch(true);
        let t0 = Instant::now();
        let first = w.read(pid, t0, true).unwrap();
        assert!(first.first && first.split_exact);
        assert_eq!(first.split.total(), first.memory.resident);
        assert!(first.hwm >= first.memory.resident && first.stat.threads == 1);
        w.end_sample(|p| p != 0);
        let before = w.counts();
        for k in 1..=5 {
            let r = w.read(pid, t0 + REFRESH * k, true).unwrap();
            assert_eq!(
                (r.stat, r.split, r.hwm),
                (first.stat, first.split, first.hwm)
            );
            assert!(!r.first && r.split_exact);
            w.end_sample(|p| p != 0);
        }
        let after = w.counts();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(after.readings - before.readings, 5);
        assert_eq!(
            after.stat_reads, before.stat_reads,
            "it did not run: no stat"
        );
        assert_eq!(after.status_reads, before.status_reads);
        assert_eq!(after.smaps_reads, before.smaps_reads);
        assert_eq!(after.files.kept_reads - before.files.kept_reads, 10);
        // Gone: an error that says so, and forgotten at the end of the sample.
        assert!(w.read(pid, Instant::now(), true).unwrap_err().is_gone());
        w.end_sample(|p| p != pid);
        assert_eq!(w.files.held(), 0);
    }

    #[test]
    fn a_process_that_grows_is_read_again_and_its_peak_is_the_kernels() {
        // Grows 64 MB, keeps it for a while.
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import time,sys; time.sleep(0.3); b=bytearray(64*10**6); \
                 sys.stdout.write('x'); sys.stdout.flush(); time.sleep(5)",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut w = watch(true);
        let t0 = Instant::now();
        let small = w.read(pid, t0, true).unwrap();
        w.end_sample(|p| p != 0);
        let mut out = child.stdout.take().unwrap();
        let mut byte = [0u8; 1];
        std::io::Read::read_exact(&mut out, &mut byte).unwrap();
        // Deferred: the split is estimated from statm's change, the total exact.
        let est = w.read(pid, t0 + Duration::from_millis(10), false).unwrap();
        w.end_sample(|p| p != 0);
        let big = w.read(pid, t0 + Duration::from_millis(20), true).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(big.memory.resident > small.memory.resident + 60_000_000);
        assert!(big.hwm >= big.memory.resident);
        assert!(!est.split_exact && big.split_exact);
        assert_eq!(est.split.total(), est.memory.resident);
        assert!(
            est.split.private > small.split.private + 60_000_000,
            "new anonymous pages count as private: {est:?}"
        );
        assert!(big.split.private > small.split.private + 60_000_000);
        assert_eq!(w.counts().splits_estimated, 1);
        assert_eq!(w.counts().smaps_reads, 2);
    }

    #[test]
    fn a_small_move_is_estimated_and_a_large_one_read_again() {
        // Says it has started, writes 150 KB (under the tolerance), then 64 MB (over it), saying
        // when after each.
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import time,sys; sys.stdout.write('s'); sys.stdout.flush(); time.sleep(0.5); \
                 a=b'x'*150000; sys.stdout.write('a'); sys.stdout.flush(); time.sleep(0.5); \
                 b=bytearray(64*10**6); sys.stdout.write('b'); sys.stdout.flush(); time.sleep(5)",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut out = child.stdout.take().unwrap();
        let mut byte = [0u8; 1];
        let mut w = watch(true);
        std::io::Read::read_exact(&mut out, &mut byte).unwrap();
        let t0 = Instant::now();
        let first = w.read(pid, t0, true).unwrap();
        w.end_sample(|p| p != 0);
        std::io::Read::read_exact(&mut out, &mut byte).unwrap();
        let small = w.read(pid, t0 + Duration::from_millis(10), true).unwrap();
        w.end_sample(|p| p != 0);
        let reads = w.counts().smaps_reads;
        std::io::Read::read_exact(&mut out, &mut byte).unwrap();
        let big = w.read(pid, t0 + Duration::from_millis(20), true).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        let moved = small.memory.resident.abs_diff(first.memory.resident);
        assert!(
            moved > 0 && moved <= split_tolerance(small.memory.resident),
            "{first:?} {small:?}"
        );
        assert_eq!(
            small.split.total(),
            small.memory.resident,
            "the total is statm's"
        );
        assert_eq!(reads, 1, "a small move reads no split: {:?}", w.counts());
        assert!(!small.split_exact);
        assert!(big.split_exact && big.split.private > first.split.private + 60_000_000);
        assert_eq!(w.counts().smaps_reads, 2);
    }

    #[test]
    fn a_new_child_makes_its_parent_read_its_split_again() {
        let mut sh = Command::new("sh")
            .args(["-c", "read x; sleep 5"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = sh.id();
        std::thread::sleep(Duration::from_millis(100));
        let mut w = watch(true);
        let t0 = Instant::now();
        w.read(pid, t0, true).unwrap();
        w.end_sample(|p| p != 0);
        let smaps = w.counts().smaps_reads;
        std::io::Write::write_all(sh.stdin.as_mut().unwrap(), b"go\n").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let kids = w.children(pid, t0).unwrap().unwrap();
        assert_eq!(kids.len(), 1, "{kids:?}");
        w.read(pid, t0, true).unwrap();
        let kid = w.read(kids[0], t0, true).unwrap();
        assert!(kid.first);
        w.end_sample(|p| p != 0);
        let again = w.counts().smaps_reads;
        w.read(pid, t0, true).unwrap();
        w.end_sample(|p| p != 0);
        let _ = Command::new("kill").arg(kids[0].to_string()).status();
        sh.wait().unwrap();
        // The parent (and the new child) at the sample it appeared; the parent once more after.
        assert!(again > smaps);
        assert_eq!(w.counts().smaps_reads, again + 1);
    }

    #[test]
    fn without_smaps_the_split_is_statms() {
        let me = std::process::id();
        let mut w = watch(false);
        let r = w.read(me, Instant::now(), true).unwrap();
        assert!(!r.split_exact);
        assert_eq!(r.split, r.memory.split());
        assert_eq!(w.counts().smaps_reads, 0);
    }

    #[test]
    fn an_estimate_keeps_the_total_and_moves_each_side_by_its_change() {
        let mb = 1_000_000;
        let s = MemSplit {
            private: 10 * mb,
            shared: 5 * mb,
        };
        let at = Statm {
            resident: 15 * mb,
            shared: 6 * mb,
        };
        let grown = estimate(
            s,
            at,
            Statm {
                resident: 115 * mb,
                shared: 6 * mb,
            },
        );
        assert_eq!((grown.private, grown.shared), (110 * mb, 5 * mb));
        let files = estimate(
            s,
            at,
            Statm {
                resident: 25 * mb,
                shared: 16 * mb,
            },
        );
        assert_eq!((files.private, files.shared), (10 * mb, 15 * mb));
        let shrunk = estimate(
            s,
            at,
            Statm {
                resident: mb,
                shared: 0,
            },
        );
        assert_eq!(shrunk.total(), mb);
    }
}

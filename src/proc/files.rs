//! Per-process `/proc` files kept open between samples.
//!
//! Opening a `/proc/<pid>` file costs more than reading it: on the machines measured, reading
//! `statm` took 8 µs through `open`, `read`, `close` and 2 µs with `pread` on a descriptor kept
//! open. So the sampler keeps the small files it reads at every sample open, within a budget of
//! descriptors ([`FdLimit`]): past it, files are opened and closed at each read as before.
//!
//! A kept descriptor names one process, never a pid: once that process has been reaped, reads
//! fail with `ESRCH`, and the file is opened again by path (the pid may have been reused; the
//! caller learns it from [`Read::reopened`]). Descriptors are moved to numbers at or above
//! [`FdLimit::min_fd`], away from the low numbers that the program around the sampler uses
//! (slurmstepd, for the plugin), and are close-on-exec.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{ProcError, parse};
use crate::sys;

/// The per-process files that can be kept open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PidFile {
    /// `stat`: CPU times, threads, parent, start time.
    Stat,
    /// `statm`: resident memory.
    Statm,
    /// `schedstat`: run time of the main thread, to tell whether the process ran.
    Schedstat,
    /// `status`: the peak resident memory (`VmHWM`).
    Status,
    /// `task/<pid>/children`: children of the main thread.
    Children,
}

const KINDS: usize = 5;

impl PidFile {
    fn index(self) -> usize {
        self as usize
    }

    fn relative(self, pid: u32) -> String {
        match self {
            PidFile::Stat => "stat".into(),
            PidFile::Statm => "statm".into(),
            PidFile::Schedstat => "schedstat".into(),
            PidFile::Status => "status".into(),
            PidFile::Children => format!("task/{pid}/children"),
        }
    }
}

/// How many descriptors may be kept open, and from which number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// Most descriptors kept open at once (0: none, every read opens its file).
    pub max_kept: usize,
    /// Kept descriptors are numbered at least this.
    pub min_fd: i32,
}

/// A process whose open-file limit is below this keeps no descriptor open: it has none to
/// spare.
pub const MIN_SOFT_LIMIT: u64 = 4096;
/// At most this share of the open-file limit is kept open.
pub const LIMIT_SHARE: u64 = 4;
/// Never more than this many descriptors kept, whatever the limit.
pub const MAX_KEPT: u64 = 32768;

impl FdLimit {
    /// Keeps nothing open.
    pub const NONE: FdLimit = FdLimit {
        max_kept: 0,
        min_fd: 0,
    };

    /// The budget for this process's current limit `soft`: a quarter of it (at most
    /// [`MAX_KEPT`]), numbered from half of it (at most 8192) up, and nothing below
    /// [`MIN_SOFT_LIMIT`]. The process keeps three quarters of its descriptors for itself.
    pub fn for_soft_limit(soft: u64) -> FdLimit {
        FdLimit::for_share(soft, LIMIT_SHARE)
    }

    /// As [`FdLimit::for_soft_limit`], keeping one `share`th of the limit.
    fn for_share(soft: u64, share: u64) -> FdLimit {
        if soft < MIN_SOFT_LIMIT {
            return FdLimit::NONE;
        }
        FdLimit {
            max_kept: (soft / share).min(MAX_KEPT) as usize,
            min_fd: (soft / 2).min(8192) as i32,
        }
    }

    /// The budget for this process as it runs now: a quarter of its limit, for a sampler
    /// inside another program (slurmstepd).
    pub fn from_rlimit() -> FdLimit {
        FdLimit::for_soft_limit(sys::nofile_limit().0)
    }

    /// The budget of a program that does nothing but sample (`gpu-tracker -e`): half of its
    /// limit, raised to the hard limit first ([`sys::raise_nofile_limit`]).
    pub fn for_sampler_program() -> FdLimit {
        FdLimit::for_share(sys::raise_nofile_limit(), 2)
    }
}

/// What one read returned.
#[derive(Debug)]
pub struct Read<'a> {
    /// The file's contents.
    pub bytes: &'a [u8],
    /// Whether a kept descriptor had stopped answering (its process reaped) and the file was
    /// opened again by path: what was read may be another process's under the same pid.
    pub reopened: bool,
}

/// Counts since the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileCounts {
    /// Files opened by path.
    pub opened: u64,
    /// Reads through a kept descriptor.
    pub kept_reads: u64,
    /// Most descriptors held at once.
    pub most_kept: usize,
}

/// The files of the processes being sampled.
#[derive(Debug)]
pub struct ProcFiles {
    root: PathBuf,
    limit: FdLimit,
    kept: HashMap<u32, [Option<File>; KINDS]>,
    /// `/proc/stat` and `/proc/meminfo`, read at every sample.
    machine: [Option<File>; 2],
    /// The `task` directory and threads' `children` files of processes of several threads.
    tasks: HashMap<u32, TaskFiles>,
    held: usize,
    buf: Buf,
    /// The buffer `task` directories are listed through.
    dir_buf: Vec<u8>,
    counts: FileCounts,
}

/// A thread's kept `children` file is opened again after this long: a thread that ended and
/// whose id a new thread of the same process took within one interval is read rightly again
/// within this time (a kept file of an ended thread reads empty).
pub const THREAD_FILE_REFRESH: Duration = Duration::from_secs(1);

/// The kept files of one process of several threads.
#[derive(Debug, Default)]
struct TaskFiles {
    /// `task/`, listed again at every sample.
    dir: Option<File>,
    /// `task/<tid>/children` of each thread, and when it was opened.
    threads: HashMap<u32, (File, Instant)>,
}

impl TaskFiles {
    fn held(&self) -> usize {
        usize::from(self.dir.is_some()) + self.threads.len()
    }
}

/// What reading one thread's `children` file found.
enum ThreadChildren {
    /// Its children (none for a thread that has ended).
    Listed,
    /// The thread has ended.
    Ended,
    /// The kernel keeps no `children` files (`CONFIG_PROC_CHILDREN` unset).
    NoFiles,
}

/// The buffer files are read into: grown when a file needs more, never cleared, so a read
/// does not zero it again first (at every sample that was most of the time a small file's read
/// spent in the program rather than the kernel).
#[derive(Debug, Default)]
struct Buf {
    data: Vec<u8>,
    len: usize,
}

impl Buf {
    /// The most a read asks for at first; more as the file needs it.
    const FIRST: usize = 8192;

    /// Reads a whole `/proc` file from offset 0. A file of one record (`stat`, `statm`,
    /// `schedstat`, `status`) answers one read with all it has when the buffer is large
    /// enough, so a short read is its end; a list (`children`) comes a kernel buffer at a
    /// time, and only an empty read ends it.
    fn fill(&mut self, f: &File, one_record: bool) -> io::Result<()> {
        self.len = 0;
        loop {
            if self.data.len() - self.len < Self::FIRST / 2 {
                let grown = (self.data.len() * 2).max(Self::FIRST);
                self.data.resize(grown, 0);
            }
            let room = self.data.len() - self.len;
            let n = f.read_at(&mut self.data[self.len..], self.len as u64)?;
            self.len += n;
            if n == 0 || (one_record && n < room) {
                return Ok(());
            }
        }
    }

    /// What the last [`Buf::fill`] read.
    fn bytes(&self) -> &[u8] {
        &self.data[..self.len]
    }
}

/// The thread ids an open `task` directory lists, through the reused buffer `buf`.
fn list_tids(d: &File, buf: &mut Vec<u8>) -> io::Result<Vec<u32>> {
    let mut tids = Vec::new();
    let mut entries = sys::list_dir_reusing(d, std::mem::take(buf))?;
    for e in entries.by_ref() {
        if let Some(tid) = std::str::from_utf8(&e?.name)
            .ok()
            .and_then(|n| n.parse().ok())
        {
            tids.push(tid);
        }
    }
    *buf = entries.into_buffer();
    Ok(tids)
}

fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

impl ProcFiles {
    /// Files under the procfs at `root`, keeping at most what `limit` allows open.
    pub fn new(root: impl Into<PathBuf>, limit: FdLimit) -> ProcFiles {
        ProcFiles {
            root: root.into(),
            limit,
            kept: HashMap::new(),
            machine: [None, None],
            tasks: HashMap::new(),
            held: 0,
            buf: Buf::default(),
            dir_buf: Vec::new(),
            counts: FileCounts::default(),
        }
    }

    /// Counts since the start.
    pub fn counts(&self) -> FileCounts {
        self.counts
    }

    /// Descriptors held now.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Reads `/proc/stat` (`meminfo`: false) or `/proc/meminfo` (true), kept open.
    pub fn read_machine(&mut self, meminfo: bool) -> Result<&[u8], ProcError> {
        let slot = usize::from(meminfo);
        let path = self.root.join(if meminfo { "meminfo" } else { "stat" });
        if self.machine[slot].is_none() {
            let f = File::open(&path).map_err(|e| ProcError::Io(path.clone(), e))?;
            self.counts.opened += 1;
            self.machine[slot] = Some(f);
        }
        let f = self.machine[slot].as_ref().ok_or(ProcError::Gone(0))?;
        self.buf
            .fill(f, false)
            .map_err(|e| ProcError::Io(path, e))?;
        Ok(self.buf.bytes())
    }

    /// Reads `file` of process `pid` and keeps it open when the budget allows. A process that
    /// no longer exists is [`ProcError::Gone`].
    pub fn read(&mut self, pid: u32, file: PidFile) -> Result<Read<'_>, ProcError> {
        self.read_keeping(pid, file, true)
    }

    /// As [`ProcFiles::read`]; `keep`: whether a file opened now may be kept open (a file read
    /// seldom is not worth a descriptor).
    pub fn read_keeping(
        &mut self,
        pid: u32,
        file: PidFile,
        keep: bool,
    ) -> Result<Read<'_>, ProcError> {
        let mut reopened = false;
        if let Some(f) = self.kept.get(&pid).and_then(|k| k[file.index()].as_ref()) {
            match self.buf.fill(f, file != PidFile::Children) {
                Ok(()) => {
                    self.counts.kept_reads += 1;
                    return Ok(Read {
                        bytes: self.buf.bytes(),
                        reopened: false,
                    });
                }
                Err(e) if is_gone(&e) => {
                    // That process is reaped: none of its kept files answers any more.
                    self.forget(pid);
                    reopened = true;
                }
                Err(e) => {
                    return Err(ProcError::Io(
                        self.root.join(pid.to_string()).join(file.relative(pid)),
                        e,
                    ));
                }
            }
        }
        let path = self.root.join(pid.to_string()).join(file.relative(pid));
        let f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if is_gone(&e) => return Err(ProcError::Gone(pid)),
            Err(e) => return Err(ProcError::Io(path, e)),
        };
        self.counts.opened += 1;
        match self.buf.fill(&f, file != PidFile::Children) {
            Ok(()) => {}
            Err(e) if is_gone(&e) => return Err(ProcError::Gone(pid)),
            Err(e) => return Err(ProcError::Io(path, e)),
        }
        if keep && self.held < self.limit.max_kept {
            self.keep(pid, file, f);
        }
        Ok(Read {
            bytes: self.buf.bytes(),
            reopened,
        })
    }

    /// `f` moved to a number at or above the budget's lowest, if the budget has room for one
    /// more descriptor and a number is free up there.
    fn movable(&self, f: File) -> Option<File> {
        if self.held >= self.limit.max_kept {
            return None;
        }
        if self.limit.min_fd <= 0 {
            return Some(f);
        }
        // No number free up there: keep nothing rather than take a low one.
        sys::move_fd_at_least(f.into(), self.limit.min_fd)
            .ok()
            .map(File::from)
    }

    fn count_kept(&mut self) {
        self.held += 1;
        self.counts.most_kept = self.counts.most_kept.max(self.held);
    }

    fn keep(&mut self, pid: u32, file: PidFile, f: File) {
        let Some(f) = self.movable(f) else {
            return;
        };
        let slot = &mut self.kept.entry(pid).or_default()[file.index()];
        if slot.replace(f).is_none() {
            self.count_kept();
        }
    }

    /// Closes the files kept for `pid`.
    pub fn forget(&mut self, pid: u32) {
        if let Some(k) = self.kept.remove(&pid) {
            self.held -= k.iter().filter(|f| f.is_some()).count();
        }
        if let Some(t) = self.tasks.remove(&pid) {
            self.held -= t.held();
        }
    }

    /// Closes the files kept for every process but those `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        let gone: Vec<u32> = self
            .kept
            .keys()
            .chain(self.tasks.keys())
            .copied()
            .filter(|p| !keep(*p))
            .collect();
        for p in gone {
            self.forget(p);
        }
    }

    /// Direct children of every thread of `pid` but `skip` (the calling thread, when it is one
    /// of `pid`'s: a sampler thread inside the process it tracks forks nothing). `None` when
    /// the kernel keeps no `children` files. The `task` directory and each thread's `children`
    /// file are kept open within the budget: a sample lists the directory again and reads each
    /// file with one call, instead of opening them all by path.
    pub fn thread_children(
        &mut self,
        pid: u32,
        skip: Option<u32>,
        now: Instant,
    ) -> Result<Option<Vec<u32>>, ProcError> {
        let tids = self.threads_of(pid)?;
        self.children_of_threads(pid, tids, skip, now)
    }

    /// As [`ProcFiles::thread_children`], for threads `tids` of `pid` known without listing
    /// its `task` directory (threads not in `tids` lose their kept files).
    pub fn children_of_threads(
        &mut self,
        pid: u32,
        tids: Vec<u32>,
        skip: Option<u32>,
        now: Instant,
    ) -> Result<Option<Vec<u32>>, ProcError> {
        // Made here where the threads were not listed: it keeps their files.
        let t = self.tasks.entry(pid).or_default();
        let before = t.threads.len();
        t.threads.retain(|tid, _| tids.contains(tid));
        self.held -= before - t.threads.len();
        let mut out = Vec::new();
        for tid in tids {
            if Some(tid) == skip {
                continue;
            }
            match self.read_thread_children(pid, tid, now)? {
                ThreadChildren::Listed => out.extend(parse::parse_pid_list(
                    &String::from_utf8_lossy(self.buf.bytes()),
                )),
                ThreadChildren::Ended => {}
                ThreadChildren::NoFiles => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// The ids of `pid`'s threads, through its kept `task` directory where there is one. A
    /// kept directory that lists nothing belongs to a process that is reaped (the pid may be
    /// another's now): it is closed and the path opened again.
    fn threads_of(&mut self, pid: u32) -> Result<Vec<u32>, ProcError> {
        if let Some(d) = self.tasks.get(&pid).and_then(|t| t.dir.as_ref()) {
            match list_tids(d, &mut self.dir_buf) {
                Ok(tids) if !tids.is_empty() => {
                    self.counts.kept_reads += 1;
                    return Ok(tids);
                }
                _ => self.forget(pid),
            }
        }
        let path = self.root.join(pid.to_string()).join("task");
        let d = match File::open(&path) {
            Ok(d) => d,
            Err(e) if is_gone(&e) => return Err(ProcError::Gone(pid)),
            Err(e) => return Err(ProcError::Io(path, e)),
        };
        self.counts.opened += 1;
        let tids = match list_tids(&d, &mut self.dir_buf) {
            Ok(t) if !t.is_empty() => t,
            Ok(_) => return Err(ProcError::Gone(pid)),
            Err(e) if is_gone(&e) => return Err(ProcError::Gone(pid)),
            Err(e) => return Err(ProcError::Io(path, e)),
        };
        if let Some(d) = self.movable(d) {
            self.tasks.entry(pid).or_default().dir = Some(d);
            self.count_kept();
        }
        Ok(tids)
    }

    /// Reads thread `tid`'s `children` file into the buffer, through a kept descriptor younger
    /// than [`THREAD_FILE_REFRESH`] where there is one.
    fn read_thread_children(
        &mut self,
        pid: u32,
        tid: u32,
        now: Instant,
    ) -> Result<ThreadChildren, ProcError> {
        let kept = self.tasks.get_mut(&pid).and_then(|t| {
            let fresh = t
                .threads
                .get(&tid)
                .is_some_and(|(_, at)| now.saturating_duration_since(*at) < THREAD_FILE_REFRESH);
            if fresh {
                return t.threads.get(&tid).map(|(f, _)| f);
            }
            if t.threads.remove(&tid).is_some() {
                self.held -= 1;
            }
            None
        });
        if let Some(f) = kept {
            match self.buf.fill(f, false) {
                Ok(()) => {
                    self.counts.kept_reads += 1;
                    return Ok(ThreadChildren::Listed);
                }
                Err(e) if is_gone(&e) => return Ok(ThreadChildren::Ended),
                Err(e) => return Err(ProcError::Io(self.thread_path(pid, tid), e)),
            }
        }
        let path = self.thread_path(pid, tid);
        let f = match File::open(&path) {
            Ok(f) => f,
            // Either the thread just ended, or the kernel has no such file at all.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(if path.parent().is_some_and(|p| p.exists()) {
                    ThreadChildren::NoFiles
                } else {
                    ThreadChildren::Ended
                });
            }
            Err(e) if is_gone(&e) => return Ok(ThreadChildren::Ended),
            Err(e) => return Err(ProcError::Io(path, e)),
        };
        self.counts.opened += 1;
        match self.buf.fill(&f, false) {
            Ok(()) => {}
            Err(e) if is_gone(&e) => return Ok(ThreadChildren::Ended),
            Err(e) => return Err(ProcError::Io(path, e)),
        }
        if let Some(f) = self.movable(f) {
            if let Some(t) = self.tasks.get_mut(&pid) {
                t.threads.insert(tid, (f, now));
                self.count_kept();
            }
        }
        Ok(ThreadChildren::Listed)
    }

    fn thread_path(&self, pid: u32, tid: u32) -> PathBuf {
        self.root
            .join(pid.to_string())
            .join("task")
            .join(tid.to_string())
            .join("children")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn the_budget_follows_the_limit() {
        assert_eq!(FdLimit::for_soft_limit(1024), FdLimit::NONE);
        let l = FdLimit::for_soft_limit(20000);
        assert_eq!((l.max_kept, l.min_fd), (5000, 8192));
        let l = FdLimit::for_soft_limit(1 << 20);
        assert_eq!((l.max_kept, l.min_fd), (32768, 8192));
        let l = FdLimit::for_soft_limit(4096);
        assert_eq!((l.max_kept, l.min_fd), (1024, 2048));
        assert!(l.min_fd as usize + l.max_kept <= 4096);
    }

    fn runtime(b: &[u8]) -> u64 {
        crate::proc::parse::parse_schedstat_runtime(b).unwrap_or(0)
    }

    #[test]
    fn a_kept_file_reads_fresh_numbers_and_a_reaped_process_is_gone() {
        let mut child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let limit = FdLimit {
            max_kept: 8,
            min_fd: 100,
        };
        let mut files = ProcFiles::new("/proc", limit);
        let first = runtime(files.read(pid, PidFile::Schedstat).unwrap().bytes);
        assert_eq!(files.held(), 1);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let r = files.read(pid, PidFile::Schedstat).unwrap();
        assert!(!r.reopened);
        let second = runtime(r.bytes);
        assert!(
            second > first,
            "a spinning process ran: {first} then {second}"
        );
        assert_eq!((files.counts().opened, files.counts().kept_reads), (1, 1));
        // The kept descriptor was moved up, away from the low numbers.
        let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|&fd| {
                std::fs::read_link(format!("/proc/self/fd/{fd}"))
                    .is_ok_and(|t| t.ends_with(format!("{pid}/schedstat")))
            })
            .collect();
        assert!(fds.len() == 1 && fds[0] >= 100, "{fds:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        // Reaped: the kept file fails, the path is gone.
        assert!(files.read(pid, PidFile::Schedstat).unwrap_err().is_gone());
        assert_eq!(files.held(), 0);
    }

    #[test]
    fn children_of_every_thread_are_read_through_kept_files_and_the_caller_can_be_left_out() {
        use std::sync::mpsc;
        let me = std::process::id();
        // A thread of this process starts a child (the child is that thread's, not the main
        // thread's) and waits to be told to end.
        let (tx, rx) = mpsc::channel();
        let (end_tx, end_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let child = Command::new("sleep").arg("30").spawn().unwrap();
            tx.send((crate::sys::gettid(), child)).unwrap();
            let _ = end_rx.recv();
        });
        let (tid, mut child) = rx.recv().unwrap();
        let limit = FdLimit {
            max_kept: 64,
            min_fd: 100,
        };
        let mut files = ProcFiles::new("/proc", limit);
        let t0 = Instant::now();
        let first = files.thread_children(me, None, t0).unwrap().unwrap();
        assert!(first.contains(&child.id()), "{first:?}");
        let opened = files.counts().opened;
        assert!(
            files.held() >= 2,
            "the task directory and a file per thread"
        );
        let second = files.thread_children(me, None, t0).unwrap().unwrap();
        assert!(second.contains(&child.id()), "{second:?}");
        assert!(files.counts().kept_reads >= 2, "{:?}", files.counts());
        // The thread that started it, left out, takes its children with it.
        let skipped = files.thread_children(me, Some(tid), t0).unwrap().unwrap();
        assert!(!skipped.contains(&child.id()), "{skipped:?}");
        // Past the refresh, each thread's file is opened again.
        let later = t0 + THREAD_FILE_REFRESH;
        let again = files.thread_children(me, None, later).unwrap().unwrap();
        assert!(again.contains(&child.id()), "{again:?}");
        assert!(files.counts().opened > opened, "{:?}", files.counts());
        child.kill().unwrap();
        child.wait().unwrap();
        let reaped = files.thread_children(me, None, later).unwrap().unwrap();
        assert!(!reaped.contains(&child.id()), "{reaped:?}");
        // An ended thread's file is closed at the next listing.
        end_tx.send(()).unwrap();
        thread.join().unwrap();
        files.thread_children(me, None, later).unwrap();
        assert!(
            !files.tasks[&me].threads.contains_key(&tid),
            "the ended thread's file is kept"
        );
        assert_eq!(files.held(), 1 + files.tasks[&me].threads.len());
        files.forget(me);
        assert_eq!(files.held(), 0);
        assert!(
            ProcFiles::new("/proc", FdLimit::NONE)
                .thread_children(u32::MAX - 1, None, later)
                .unwrap_err()
                .is_gone()
        );
    }

    #[test]
    fn past_the_budget_files_are_read_and_closed() {
        let me = std::process::id();
        let mut files = ProcFiles::new("/proc", FdLimit::NONE);
        for _ in 0..3 {
            let r = files.read(me, PidFile::Stat).unwrap();
            assert!(r.bytes.starts_with(format!("{me} (").as_bytes()));
        }
        assert_eq!(files.held(), 0);
        assert_eq!(files.counts().opened, 3);
        let mut files = ProcFiles::new(
            "/proc",
            FdLimit {
                max_kept: 2,
                min_fd: 0,
            },
        );
        for f in [
            PidFile::Stat,
            PidFile::Statm,
            PidFile::Status,
            PidFile::Stat,
        ] {
            files.read(me, f).unwrap();
        }
        assert_eq!((files.held(), files.counts().kept_reads), (2, 1));
        files.retain(|p| p != me);
        assert_eq!(files.held(), 0);
    }
}

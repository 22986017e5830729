//! Reading `/proc`: a thin I/O layer over [`parse`], rooted at a directory so tests can point it
//! at a fixture tree. Every error names the file it came from.

pub mod files;
pub(crate) mod parse;
pub mod watch;

use std::io;
use std::path::{Path, PathBuf};

pub use parse::{CpuTotals, MemInfo, MemSplit, PidStat, PidStatus, Statm};

/// Where procfs is mounted on a real machine.
pub const DEFAULT_ROOT: &str = "/proc";

/// A failure to read one `/proc` file.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The process no longer exists (or its file vanished while read): normal while sampling.
    #[error("process {0} is gone")]
    Gone(u32),
    /// The file could not be read.
    #[error("reading {0}: {1}")]
    Io(PathBuf, #[source] io::Error),
    /// The file's contents were not understood.
    #[error("parsing {0}: {1}")]
    Parse(PathBuf, #[source] parse::ParseError),
}

impl ProcError {
    /// True when the process simply went away: callers skip it quietly.
    pub fn is_gone(&self) -> bool {
        matches!(self, ProcError::Gone(_))
    }
}

/// Reader of one procfs tree.
#[derive(Debug, Clone)]
pub struct ProcFs {
    root: PathBuf,
}

impl Default for ProcFs {
    fn default() -> Self {
        ProcFs::new(DEFAULT_ROOT)
    }
}

impl ProcFs {
    /// A reader of the procfs mounted (or laid out as a fixture) at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ProcFs { root: root.into() }
    }

    /// The root this reader reads under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn pid_file(&self, pid: u32, name: &str) -> PathBuf {
        self.root.join(pid.to_string()).join(name)
    }

    fn read_pid_file(&self, pid: u32, name: &str) -> Result<(PathBuf, Vec<u8>), ProcError> {
        let path = self.pid_file(pid, name);
        match std::fs::read(&path) {
            Ok(b) => Ok((path, b)),
            // ENOENT: gone before open; ESRCH: gone while reading; empty: a zombie's smaps.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) =>
            {
                Err(ProcError::Gone(pid))
            }
            Err(e) => Err(ProcError::Io(path, e)),
        }
    }

    /// `/proc/<pid>/stat`.
    pub fn pid_stat(&self, pid: u32) -> Result<PidStat, ProcError> {
        let (path, b) = self.read_pid_file(pid, "stat")?;
        parse::parse_pid_stat(&b).map_err(|e| ProcError::Parse(path, e))
    }

    /// `/proc/<pid>/status`.
    pub fn pid_status(&self, pid: u32) -> Result<PidStatus, ProcError> {
        let (path, b) = self.read_pid_file(pid, "status")?;
        parse::parse_pid_status(&b).map_err(|e| ProcError::Parse(path, e))
    }

    /// `/proc/<pid>/smaps_rollup` (needs the right to ptrace-read the process). An empty file
    /// means the process has no memory left (exiting): reported as gone.
    pub fn pid_smaps_rollup(&self, pid: u32) -> Result<MemSplit, ProcError> {
        let (path, b) = self.read_pid_file(pid, "smaps_rollup")?;
        if b.is_empty() {
            return Err(ProcError::Gone(pid));
        }
        parse::parse_smaps_rollup(&b).map_err(|e| ProcError::Parse(path, e))
    }

    /// `/proc/<pid>/cgroup`, raw.
    pub fn pid_cgroup(&self, pid: u32) -> Result<String, ProcError> {
        let (path, b) = self.read_pid_file(pid, "cgroup")?;
        String::from_utf8(b)
            .map_err(|_| ProcError::Parse(path, parse::ParseError("not UTF-8".into())))
    }

    /// Direct children of `pid`, from every thread's `children` file. `None` when the kernel
    /// lacks `CONFIG_PROC_CHILDREN`; then callers scan every process instead.
    pub fn children(&self, pid: u32) -> Result<Option<Vec<u32>>, ProcError> {
        let task_dir = self.pid_file(pid, "task");
        let rd = match std::fs::read_dir(&task_dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ProcError::Gone(pid)),
            Err(e) => return Err(ProcError::Io(task_dir, e)),
        };
        let mut out = Vec::new();
        for ent in rd.flatten() {
            let path = ent.path().join("children");
            match std::fs::read_to_string(&path) {
                Ok(s) => out.extend(parse::parse_pid_list(&s)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // Either the thread just ended, or the file does not exist at all.
                    if ent.path().exists() {
                        return Ok(None);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(ProcError::Io(path, e)),
            }
        }
        Ok(Some(out))
    }

    /// Every pid, with its parent: the slow path used where `children` files do not exist.
    pub fn all_parents(&self) -> Result<Vec<(u32, u32)>, ProcError> {
        let rd = std::fs::read_dir(&self.root).map_err(|e| ProcError::Io(self.root.clone(), e))?;
        let mut out = Vec::new();
        for ent in rd.flatten() {
            let Some(pid) = ent.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            match self.pid_stat(pid) {
                Ok(st) => out.push((pid, st.ppid)),
                Err(e) if e.is_gone() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Machine-wide CPU time (`/proc/stat`).
    pub fn cpu_totals(&self) -> Result<CpuTotals, ProcError> {
        let path = self.root.join("stat");
        let s = std::fs::read_to_string(&path).map_err(|e| ProcError::Io(path.clone(), e))?;
        parse::parse_cpu_totals(&s).map_err(|e| ProcError::Parse(path, e))
    }

    /// Machine memory (`/proc/meminfo`).
    pub fn meminfo(&self) -> Result<MemInfo, ProcError> {
        let path = self.root.join("meminfo");
        let b = std::fs::read(&path).map_err(|e| ProcError::Io(path.clone(), e))?;
        parse::parse_meminfo(&b).map_err(|e| ProcError::Parse(path, e))
    }
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of CPU times in `/proc`.
pub fn ticks_per_second() -> u64 {
    crate::sys::clock_ticks()
}

/// Number of CPUs online, as `psutil.cpu_count()` reports it.
pub fn online_cpus() -> u32 {
    crate::sys::online_cpus()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_its_machine() {
        let p = ProcFs::default();
        let me = std::process::id();
        let st = p.pid_stat(me).unwrap();
        assert!(st.threads >= 1);
        let status = p.pid_status(me).unwrap();
        assert!(status.hwm.unwrap() >= status.rss.unwrap());
        assert!(p.meminfo().unwrap().total > 0);
        assert!(p.cpu_totals().unwrap().total > 0);
    }

    #[test]
    fn a_missing_process_is_gone_not_an_error() {
        let dir = std::env::temp_dir().join(format!("gpu-tracker-procfix-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("77")).unwrap();
        std::fs::write(dir.join("77/stat"), "garbage").unwrap();
        let p = ProcFs::new(&dir);
        assert!(p.pid_stat(78).unwrap_err().is_gone());
        let e = p.pid_stat(77).unwrap_err();
        assert!(!e.is_gone());
        assert!(e.to_string().contains("77/stat"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

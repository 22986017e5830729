//! Reading a process's cgroup (v1 or v2): peak memory counters that catch every spike, OOM kills,
//! CPU time, and the processes inside. Readers take the cgroup filesystem root as a parameter so
//! tests run on fixture trees; the cgroup of a process is found from `/proc/<pid>/cgroup`, never
//! by building Slurm's path (its layout changes between releases).

mod member;
pub(crate) mod needed;
pub mod own;
pub(crate) mod parse;
pub mod pressure;

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Where the cgroup filesystem is mounted on a real machine.
pub const DEFAULT_ROOT: &str = "/sys/fs/cgroup";

/// Which cgroup interface a cgroup belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Version {
    /// Legacy per-controller hierarchies (`/sys/fs/cgroup/memory/...`).
    #[serde(rename = "v1")]
    V1,
    /// The unified hierarchy.
    #[serde(rename = "v2")]
    V2,
}

/// A failure to read a cgroup file.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// The cgroup directory is gone (its processes ended and it was removed).
    #[error("cgroup {0} is gone")]
    Gone(PathBuf),
    /// A file could not be read or written.
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] io::Error),
    /// No memory cgroup could be found for the process.
    #[error("no memory cgroup found in {0}")]
    NotFound(String),
}

/// The cgroup of a process, as far as memory and CPU accounting go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    /// Interface.
    pub version: Version,
    /// Directory holding the memory files (`memory.current` or `memory.usage_in_bytes`).
    pub memory_dir: PathBuf,
    /// Directory holding CPU accounting (`cpu.stat` on v2, `cpuacct.usage` on v1), if mounted.
    pub cpu_dir: Option<PathBuf>,
}

/// One reading of a cgroup's memory and CPU counters, in bytes and nanoseconds. Every field is
/// optional: kernels and configurations differ.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CgroupReading {
    /// Memory charged now (includes page cache).
    pub current: Option<u64>,
    /// Highest memory charged since the cgroup was made (`memory.peak`, v2 on kernel 5.19+, or
    /// `memory.max_usage_in_bytes`, v1). Includes page cache.
    pub peak: Option<u64>,
    /// Memory limit, if any.
    pub limit: Option<u64>,
    /// Anonymous memory now (`anon` / `total_rss`).
    pub anon: Option<u64>,
    /// Page cache now (`file` / `total_cache`).
    pub file: Option<u64>,
    /// Memory charged now that the kernel could reclaim at the limit: file pages on the file
    /// LRU lists, and on v2 reclaimable slab ([`parse::reclaimable_v2`]).
    pub reclaimable: Option<u64>,
    /// Processes killed by the OOM killer in this cgroup (`oom_kill`).
    pub oom_kills: Option<u64>,
    /// Times the limit was hit (v1 `memory.failcnt`, v2 `max` events).
    pub limit_hits: Option<u64>,
    /// CPU time used by every process that ever ran in the cgroup, in nanoseconds.
    pub cpu_ns: Option<u64>,
}

impl CgroupReading {
    /// Memory charged now that the kernel could not reclaim: `current` less `reclaimable`
    /// (anonymous memory, shmem and tmpfs, unevictable and kernel memory), at least 0 (the two
    /// files are not read at one instant).
    pub fn needed(&self) -> Option<u64> {
        Some(self.current?.saturating_sub(self.reclaimable?))
    }
}

fn read_opt(path: &Path) -> Result<Option<String>, CgroupError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CgroupError::Io(path.to_path_buf(), e)),
    }
}

impl Cgroup {
    /// The cgroup of a process, from the contents of its `/proc/<pid>/cgroup`, with the cgroup
    /// filesystem at `root`. Prefers the v1 memory hierarchy when one is mounted (hybrid hosts).
    pub fn from_proc_cgroup(root: &Path, proc_cgroup: &str) -> Result<Cgroup, CgroupError> {
        let lines = parse::parse_proc_cgroup(proc_cgroup);
        let rel = |p: &str| p.trim_start_matches('/').to_string();
        let v1 = |ctrl: &str| {
            lines
                .iter()
                .find(|l| l.hierarchy != 0 && l.controllers.iter().any(|c| c == ctrl))
        };
        if let Some(mem) = v1("memory") {
            let memory_dir = root.join("memory").join(rel(&mem.path));
            if memory_dir.is_dir() {
                let cpu_dir = v1("cpuacct").and_then(|l| {
                    // Mounted as `cpuacct` or as the joint `cpu,cpuacct` directory.
                    let name = l.controllers.join(",");
                    [root.join(name), root.join("cpuacct")]
                        .into_iter()
                        .map(|d| d.join(rel(&l.path)))
                        .find(|d| d.join("cpuacct.usage").exists())
                });
                return Ok(Cgroup {
                    version: Version::V1,
                    memory_dir,
                    cpu_dir,
                });
            }
        }
        if let Some(uni) = lines.iter().find(|l| l.hierarchy == 0) {
            let dir = root.join(rel(&uni.path));
            if dir.join("memory.current").exists() {
                return Ok(Cgroup {
                    version: Version::V2,
                    cpu_dir: Some(dir.clone()),
                    memory_dir: dir,
                });
            }
        }
        Err(CgroupError::NotFound(
            proc_cgroup.trim().replace('\n', "; "),
        ))
    }

    /// The cgroup of process `pid`, reading `/proc` at `proc_root`.
    pub fn of_pid(cgroup_root: &Path, proc_root: &Path, pid: u32) -> Result<Cgroup, CgroupError> {
        let path = proc_root.join(pid.to_string()).join("cgroup");
        let s = std::fs::read_to_string(&path).map_err(|e| CgroupError::Io(path, e))?;
        Cgroup::from_proc_cgroup(cgroup_root, &s)
    }

    /// Reads every counter. Fails with `Gone` when the cgroup directory was removed.
    pub fn read(&self) -> Result<CgroupReading, CgroupError> {
        if !self.memory_dir.is_dir() {
            return Err(CgroupError::Gone(self.memory_dir.clone()));
        }
        let m = |name: &str| read_opt(&self.memory_dir.join(name));
        // The usage file is in every memory cgroup but the root: without it the directory is
        // not (or no longer) the cgroup, say another filesystem mounted over it.
        let usage = match self.version {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        };
        if m(usage)?.is_none() {
            let path = self.memory_dir.join(usage);
            return Err(CgroupError::Io(path, io::ErrorKind::NotFound.into()));
        }
        let mut r = CgroupReading::default();
        match self.version {
            Version::V1 => {
                r.current = m("memory.usage_in_bytes")?.and_then(|s| parse::parse_single(&s));
                r.peak = m("memory.max_usage_in_bytes")?.and_then(|s| parse::parse_single(&s));
                r.limit = m("memory.limit_in_bytes")?
                    .and_then(|s| parse::parse_single(&s))
                    .and_then(parse::v1_limit);
                if let Some(stat) = m("memory.stat")? {
                    r.anon = parse::keyed(&stat, "total_rss");
                    r.file = parse::keyed(&stat, "total_cache");
                    r.reclaimable = parse::reclaimable_v1(&stat);
                }
                r.oom_kills = m("memory.oom_control")?.and_then(|s| parse::keyed(&s, "oom_kill"));
                r.limit_hits = m("memory.failcnt")?.and_then(|s| parse::parse_single(&s));
                if let Some(cpu) = &self.cpu_dir {
                    r.cpu_ns =
                        read_opt(&cpu.join("cpuacct.usage"))?.and_then(|s| parse::parse_single(&s));
                }
            }
            Version::V2 => {
                r.current = m("memory.current")?.and_then(|s| parse::parse_single(&s));
                r.peak = m("memory.peak")?.and_then(|s| parse::parse_single(&s));
                r.limit = m("memory.max")?.and_then(|s| parse::parse_single(&s));
                if let Some(stat) = m("memory.stat")? {
                    r.anon = parse::keyed(&stat, "anon");
                    r.file = parse::keyed(&stat, "file");
                    r.reclaimable = parse::reclaimable_v2(&stat);
                }
                if let Some(ev) = m("memory.events")? {
                    r.oom_kills = parse::keyed(&ev, "oom_kill");
                    r.limit_hits = parse::keyed(&ev, "max");
                }
                if let Some(cpu) = &self.cpu_dir {
                    r.cpu_ns = read_opt(&cpu.join("cpu.stat"))?
                        .and_then(|s| parse::keyed(&s, "usage_usec"))
                        .map(|us| us * 1000);
                }
            }
        }
        Ok(r)
    }

    /// Every process in this cgroup and the cgroups below it (Slurm's v1 step cgroups keep
    /// their processes in per-task children).
    pub fn procs(&self) -> Result<Vec<u32>, CgroupError> {
        self.procs_of(&self.tree_dirs())
    }

    /// The cgroup's directory and those nested in it (a job may make cgroups of its own).
    pub fn tree_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        let mut stack = vec![self.memory_dir.clone()];
        while let Some(dir) = stack.pop() {
            if let Ok(rd) = std::fs::read_dir(&dir) {
                stack.extend(
                    rd.flatten()
                        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                        .map(|e| e.path()),
                );
            }
            dirs.push(dir);
        }
        dirs
    }

    /// The processes in `dirs` (from [`Cgroup::tree_dirs`], perhaps a while ago: a nested
    /// cgroup removed since is skipped), sorted. The cgroup itself gone is an error.
    pub fn procs_of(&self, dirs: &[PathBuf]) -> Result<Vec<u32>, CgroupError> {
        let mut out = Vec::new();
        for dir in dirs {
            if let Some(s) = read_opt(&dir.join("cgroup.procs"))? {
                out.extend(parse::parse_procs(&s));
            } else if *dir == self.memory_dir {
                return Err(CgroupError::Gone(dir.clone()));
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Whether the peak counter counts page cache as well as process memory. It does on both
    /// interfaces; reports say so next to every cgroup peak.
    pub fn peak_includes_page_cache(&self) -> bool {
        true
    }

    /// Name of the file the peak comes from, for reports.
    pub fn peak_source(&self) -> &'static str {
        match self.version {
            Version::V1 => "cgroup v1 memory.max_usage_in_bytes",
            Version::V2 => "cgroup v2 memory.peak",
        }
    }
}

#[cfg(test)]
pub(crate) mod fixture {
    //! Fixture cgroup trees with real file contents.
    use std::path::{Path, PathBuf};

    /// A temporary directory removed on drop.
    pub struct TempTree(pub PathBuf);

    impl TempTree {
        pub fn new(tag: &str) -> TempTree {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "gpu-tracker-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            TempTree(p)
        }
        pub fn write(&self, rel: &str, contents: &str) -> &Self {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, contents).unwrap();
            self
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
        /// Makes a FIFO at `rel` (no writer ever opens it) and returns its path.
        pub fn fifo(&self, rel: &str) -> PathBuf {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            let made = std::process::Command::new("mkfifo").arg(&p).status();
            assert!(made.unwrap().success(), "mkfifo {}", p.display());
            p
        }
    }

    /// Runs `f` on a thread of its own and returns its result, or `None` when it has not
    /// returned within `limit` (the thread is then left blocked: a test that reads a FIFO).
    pub fn within<T: Send + 'static>(
        limit: std::time::Duration,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(limit).ok()
    }

    impl Drop for TempTree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::TempTree;
    use super::*;

    const V1_STEP: &str = "memory/slurm_n1/uid_1000/job_7/step_0";

    fn v1_tree() -> TempTree {
        let t = TempTree::new("cg1");
        t.write(&format!("{V1_STEP}/memory.usage_in_bytes"), "104857600\n")
            .write(
                &format!("{V1_STEP}/memory.max_usage_in_bytes"),
                "315621376\n",
            )
            .write(&format!("{V1_STEP}/memory.limit_in_bytes"), "536870912\n")
            .write(
                &format!("{V1_STEP}/memory.stat"),
                "cache 0\nrss 0\ntotal_cache 4194304\ntotal_rss 100663296\n\
                 total_inactive_file 3145728\ntotal_active_file 1048576\n",
            )
            .write(
                &format!("{V1_STEP}/memory.oom_control"),
                "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
            )
            .write(&format!("{V1_STEP}/memory.failcnt"), "12\n")
            .write(&format!("{V1_STEP}/cgroup.procs"), "")
            .write(&format!("{V1_STEP}/task_0/cgroup.procs"), "101\n102\n")
            .write(&format!("{V1_STEP}/task_1/cgroup.procs"), "103\n")
            .write(
                "cpu,cpuacct/slurm_n1/uid_1000/job_7/step_0/cpuacct.usage",
                "2500000000\n",
            );
        t
    }

    const V1_PROC: &str = "11:memory:/slurm_n1/uid_1000/job_7/step_0/task_0\n\
        3:cpu,cpuacct:/slurm_n1/uid_1000/job_7/step_0\n0::/\n";

    #[test]
    fn v1_step_cgroup_from_a_task_pid() {
        let t = v1_tree();
        let proc = V1_PROC.replace("/task_0", "");
        let cg = Cgroup::from_proc_cgroup(t.path(), &proc).unwrap();
        assert_eq!(cg.version, Version::V1);
        let r = cg.read().unwrap();
        assert_eq!(r.current, Some(104_857_600));
        assert_eq!(r.peak, Some(315_621_376));
        assert_eq!(r.limit, Some(536_870_912));
        assert_eq!(r.anon, Some(100_663_296));
        assert_eq!(r.file, Some(4_194_304));
        // Charged 100 MiB, of which the 4 MiB on the file lists could be reclaimed.
        assert_eq!(r.reclaimable, Some(4_194_304));
        assert_eq!(r.needed(), Some(100_663_296));
        assert_eq!(r.oom_kills, Some(1));
        assert_eq!(r.limit_hits, Some(12));
        assert_eq!(r.cpu_ns, Some(2_500_000_000));
        assert_eq!(cg.procs().unwrap(), vec![101, 102, 103]);
        assert!(cg.peak_source().contains("max_usage_in_bytes"));
    }

    #[test]
    fn v1_unlimited_and_missing_files_are_none() {
        let t = TempTree::new("cg1b");
        t.write("memory/a/memory.usage_in_bytes", "5\n")
            .write("memory/a/memory.limit_in_bytes", "9223372036854771712\n");
        let cg = Cgroup::from_proc_cgroup(t.path(), "4:memory:/a\n").unwrap();
        let r = cg.read().unwrap();
        assert_eq!(r.current, Some(5));
        assert_eq!(r.limit, None);
        assert_eq!(r.peak, None);
        assert_eq!(r.oom_kills, None);
        // No memory.stat: what could be reclaimed is unknown, and so is what was needed.
        assert_eq!((r.reclaimable, r.needed()), (None, None));
        assert_eq!(cg.cpu_dir, None);
    }

    #[test]
    fn v2_step_cgroup() {
        let t = TempTree::new("cg2");
        let d = "system.slice/n1_slurmstepd.scope/job_7/step_0";
        t.write(&format!("{d}/memory.current"), "52428800\n")
            .write(&format!("{d}/memory.peak"), "367001600\n")
            .write(&format!("{d}/memory.max"), "max\n")
            .write(
                &format!("{d}/memory.stat"),
                "anon 41943040\nfile 10485760\nshmem 0\ninactive_file 2097152\n\
                 active_file 8388608\nslab_reclaimable 1048576\n",
            )
            .write(
                &format!("{d}/memory.events"),
                "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n",
            )
            .write(
                &format!("{d}/cpu.stat"),
                "usage_usec 1250000\nuser_usec 1000000\n",
            )
            .write(&format!("{d}/cgroup.procs"), "")
            .write(&format!("{d}/slurm/cgroup.procs"), "90\n")
            .write(&format!("{d}/user/task_0/cgroup.procs"), "91\n");
        let proc = format!("0::/{d}/user/task_0\n");
        // The task's own cgroup first: its parent is found by the caller walking up.
        let cg = Cgroup::from_proc_cgroup(t.path(), &format!("0::/{d}\n")).unwrap();
        assert_eq!(cg.version, Version::V2);
        let r = cg.read().unwrap();
        assert_eq!(r.current, Some(52_428_800));
        assert_eq!(r.peak, Some(367_001_600));
        assert_eq!(r.limit, None);
        assert_eq!(r.anon, Some(41_943_040));
        assert_eq!(r.file, Some(10_485_760));
        assert_eq!(r.reclaimable, Some(11_534_336));
        assert_eq!(r.needed(), Some(52_428_800 - 11_534_336));
        assert_eq!(r.oom_kills, Some(1));
        assert_eq!(r.limit_hits, Some(3));
        assert_eq!(r.cpu_ns, Some(1_250_000_000));
        assert_eq!(cg.procs().unwrap(), vec![90, 91]);
        // A task cgroup without memory files of its own is not taken.
        assert!(Cgroup::from_proc_cgroup(t.path(), &proc).is_err());
    }

    #[test]
    fn a_removed_cgroup_reads_as_gone() {
        let t = v1_tree();
        let cg = Cgroup::from_proc_cgroup(t.path(), "4:memory:/slurm_n1/uid_1000/job_7/step_0\n")
            .unwrap();
        std::fs::remove_dir_all(t.path().join("memory")).unwrap();
        assert!(matches!(cg.read(), Err(CgroupError::Gone(_))));
        assert!(matches!(cg.procs(), Err(CgroupError::Gone(_))));
    }
}

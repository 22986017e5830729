//! The processes of a step's tasks, read within a bound per sample.
//!
//! A process is read through [`crate::proc::watch`]: two small kept-open files when it did not
//! run (about 4 µs), more when it did. A step of thousands of processes could still make one
//! sample long, so each sample lists every process
//! (cheap: a task's cgroup lists them in one file), then reads at most
//! [`MAX_PROCESSES_PER_SAMPLE`] of them, and stops earlier once reading has taken
//! [`PROCESS_TIME_SHARE`] of the interval (after [`MIN_PROCESSES_PER_SAMPLE`], so a slow
//! `/proc` still moves on).
//! The next sample goes on where this one stopped, in pid order, round the list: every process
//! is read within `ceil(n / read per sample)` samples. A task's sums (resident memory, threads,
//! CPU: [`crate::sampler::procsum`], as for `gpu-tracker -e`) use each of its processes' latest
//! reading; its process count is the listing's, exact.
//! The exact figures (the cgroups' peak, CPU and OOM counters) are the kernel's and read in full
//! at every sample elsewhere: this bound touches only the sampled ones.
//!
//! A task without a cgroup of its own is listed by walking its process tree, at most
//! [`MAX_PROCESSES_WALKED`] processes per sample over all tasks.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::cgroup::Cgroup;
use crate::proc::ProcFs;
use crate::proc::files::FdLimit;
use crate::proc::watch::{Watch, WatchCounts};
use crate::sampler::MemoryDetail;
use crate::sampler::Target;
use crate::sampler::procsum::{ProcReading, ProcSum, sum_groups};
use crate::sampler::tree;

/// Most processes read (`stat` and `status`) in one sample.
pub const MAX_PROCESSES_PER_SAMPLE: usize = 500;
/// Fewest processes read in one sample, whatever the time.
pub const MIN_PROCESSES_PER_SAMPLE: usize = 32;
/// Share of the interval asked for that one sample may spend reading processes (listing them
/// is not counted: see [`MAX_PROCESSES_WALKED`]).
pub const PROCESS_TIME_SHARE: f64 = 0.05;
/// Most processes visited in one sample when walking process trees (tasks without a cgroup).
pub const MAX_PROCESSES_WALKED: usize = 2000;

/// One task's figures at one sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TaskFigures {
    /// The task's pid.
    pub pid: u32,
    /// Its processes: every one listed is counted (`processes`), exact; memory, CPU and
    /// threads are those of the ones with a reading, this sample's or an earlier one's
    /// (`read`: fewer while a large step is read in turns; 0 for a task listed but not read
    /// yet, whose thread count is unknown, not 0).
    pub procs: ProcSum,
}

/// What one sample found.
#[derive(Debug, Default)]
pub struct Found {
    /// Per task, in the order asked.
    pub tasks: Vec<TaskFigures>,
    /// Every process listed.
    pub members: HashSet<u32>,
    /// Processes read this sample.
    pub read: usize,
    /// Whether a process tree walk stopped at [`MAX_PROCESSES_WALKED`].
    pub walk_cut: bool,
}

impl Found {
    /// Whether some listed process was not read this sample.
    pub fn partial(&self) -> bool {
        self.read < self.members.len()
    }
}

/// Reads the tasks' processes in turns over samples.
#[derive(Debug)]
pub struct ProcReader {
    latest: HashMap<u32, ProcReading>,
    /// The last pid read: the next sample starts after it.
    cursor: u32,
    watch: Watch,
}

impl Default for ProcReader {
    fn default() -> Self {
        ProcReader::new(crate::proc::DEFAULT_ROOT, MemoryDetail::Status)
    }
}

impl ProcReader {
    /// A reader of the procfs at `root`, keeping what files this process's open-file limit
    /// allows open between samples ([`crate::proc::files`]), each process's private/shared
    /// split read as `detail` says.
    pub fn new(root: impl Into<std::path::PathBuf>, detail: MemoryDetail) -> ProcReader {
        ProcReader {
            latest: HashMap::new(),
            cursor: 0,
            watch: Watch::new(
                root,
                detail == MemoryDetail::SmapsRollup,
                FdLimit::from_rlimit(),
            ),
        }
    }

    /// What the reader has read since the start.
    pub fn counts(&self) -> WatchCounts {
        self.watch.counts()
    }

    /// One sample of `tasks` (pid, its own cgroup if any), spending at most `budget` on reads
    /// beyond the first [`MIN_PROCESSES_PER_SAMPLE`].
    pub fn sample(
        &mut self,
        procfs: &ProcFs,
        tasks: &[(u32, Option<Cgroup>)],
        budget: Duration,
    ) -> Found {
        let tps = crate::proc::ticks_per_second() as f64;
        let mut found = Found::default();
        // pid -> the task that lists it first.
        let mut owner: HashMap<u32, usize> = HashMap::new();
        let mut walk_left = MAX_PROCESSES_WALKED;
        let now = Instant::now();
        for (i, (pid, cg)) in tasks.iter().enumerate() {
            let listed = match cg.as_ref().and_then(|c| c.procs().ok()) {
                Some(pids) => pids,
                None => {
                    let target = Target {
                        main: *pid,
                        tree_roots: vec![*pid],
                        exclude: vec![],
                        cgroup: None,
                        in_process: false,
                    };
                    let watch = &mut self.watch;
                    let (pids, complete) = tree::members_with(
                        procfs,
                        &target,
                        walk_left,
                        &mut |c| c.procs(),
                        &mut |p| watch.children(p, now),
                    );
                    walk_left = walk_left.saturating_sub(pids.len());
                    found.walk_cut |= !complete;
                    pids
                }
            };
            for p in listed {
                owner.entry(p).or_insert(i);
            }
        }
        let mut pids: Vec<u32> = owner.keys().copied().collect();
        pids.sort_unstable();
        let start = pids.partition_point(|&p| p <= self.cursor);
        let t0 = Instant::now();
        let mut gone = HashSet::new();
        for k in 0..pids.len() {
            let n = found.read;
            if n >= MAX_PROCESSES_PER_SAMPLE
                || (n >= MIN_PROCESSES_PER_SAMPLE && t0.elapsed() >= budget)
            {
                break;
            }
            let p = pids[(start + k) % pids.len()];
            found.read += 1;
            self.cursor = p;
            match self.watch.read(p, now, false) {
                Ok(r) => {
                    self.latest.insert(p, ProcReading::of(&r, tps));
                }
                Err(_) => {
                    self.latest.remove(&p);
                    gone.insert(p);
                }
            }
        }
        self.watch
            .end_sample(|p| owner.contains_key(&p) && !gone.contains(&p));
        self.latest.retain(|p, _| owner.contains_key(p));
        // Gone before it could be read: neither listed nor counted.
        owner.retain(|p, _| !gone.contains(p));
        found.members = owner.keys().copied().collect();
        let sums = sum_groups(
            tasks.len(),
            owner.iter().map(|(p, &i)| (i, self.latest.get(p))),
        );
        found.tasks = tasks
            .iter()
            .zip(sums)
            .map(|((pid, _), procs)| TaskFigures { pid: *pid, procs })
            .collect();
        found.read -= gone.len();
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};

    /// A shell with `n` sleeping children, in a process group of its own.
    fn sleepers(n: usize) -> Child {
        use std::os::unix::process::CommandExt;
        Command::new("sh")
            .args([
                "-c",
                &format!("for i in $(seq {n}); do sleep 20 & done; wait"),
            ])
            .process_group(0)
            .spawn()
            .unwrap()
    }

    fn kill_group(mut c: Child) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", c.id())])
            .status();
        let _ = c.wait();
    }

    fn count_children(pid: u32) -> usize {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .map(|s| s.split_whitespace().count())
            .unwrap_or(0)
    }

    #[test]
    fn a_large_task_is_read_in_turns_and_counted_in_full() {
        let n = MAX_PROCESSES_PER_SAMPLE + 100;
        let task = sleepers(n);
        let t = std::time::Instant::now();
        while count_children(task.id()) < n && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let procfs = ProcFs::default();
        let mut r = ProcReader::default();
        let tasks = [(task.id(), None)];
        // Time is no limit here: the count is.
        let first = r.sample(&procfs, &tasks, Duration::from_secs(60));
        let second = r.sample(&procfs, &tasks, Duration::from_secs(60));
        // No time at all: only the minimum.
        let third = r.sample(&procfs, &tasks, Duration::ZERO);
        kill_group(task);
        assert_eq!(first.tasks[0].procs.processes, n as u64 + 1);
        assert_eq!(first.read, MAX_PROCESSES_PER_SAMPLE);
        assert!(first.partial() && !first.walk_cut);
        // The second sample reads the rest first: every process has a reading now.
        assert_eq!(second.read, MAX_PROCESSES_PER_SAMPLE);
        assert_eq!(
            second.tasks[0].procs.threads,
            n as u64 + 1,
            "one thread each"
        );
        assert!(second.tasks[0].procs.mem.private > first.tasks[0].procs.mem.private);
        assert_eq!(third.read, MIN_PROCESSES_PER_SAMPLE);
        assert_eq!(third.tasks[0].procs.threads, n as u64 + 1);
        assert_eq!(first.tasks[0].procs.read, MAX_PROCESSES_PER_SAMPLE as u64);
        assert_eq!(second.tasks[0].procs.read, n as u64 + 1);
    }

    #[test]
    fn tasks_listed_but_not_read_yet_say_so() {
        // More one-process tasks than a sample with no time left reads: the rest are listed
        // (a process each) with no reading, so no thread count (seen on a slow guest: a task
        // of a 256-task step recorded with 0 threads).
        let n = MIN_PROCESSES_PER_SAMPLE + 8;
        let kids: Vec<Child> = (0..n)
            .map(|_| Command::new("sleep").arg("20").spawn().unwrap())
            .collect();
        let tasks: Vec<(u32, Option<Cgroup>)> = kids.iter().map(|c| (c.id(), None)).collect();
        let mut r = ProcReader::default();
        let f = r.sample(&ProcFs::default(), &tasks, Duration::ZERO);
        for mut c in kids {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert_eq!(f.read, MIN_PROCESSES_PER_SAMPLE);
        assert!(f.tasks.iter().all(|t| t.procs.processes == 1));
        let unread: Vec<&TaskFigures> = f.tasks.iter().filter(|t| t.procs.read == 0).collect();
        assert_eq!(unread.len(), n - MIN_PROCESSES_PER_SAMPLE);
        assert!(unread.iter().all(|t| t.procs.threads == 0));
        assert!(
            f.tasks
                .iter()
                .filter(|t| t.procs.read == 1)
                .all(|t| t.procs.threads == 1)
        );
    }

    #[test]
    fn the_split_is_read_as_the_memory_detail_setting_says() {
        // `memory_detail = "smaps_rollup"` reads each process's smaps_rollup; the default reads
        // statm only (the setting was once parsed and ignored: the plugin never read smaps).
        let task = sleepers(2);
        let t = std::time::Instant::now();
        while count_children(task.id()) < 2 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let procfs = ProcFs::default();
        let mut exact = ProcReader::new(crate::proc::DEFAULT_ROOT, MemoryDetail::SmapsRollup);
        let mut cheap = ProcReader::new(crate::proc::DEFAULT_ROOT, MemoryDetail::Status);
        let tasks = [(task.id(), None)];
        let e = exact.sample(&procfs, &tasks, Duration::from_secs(5));
        let c = cheap.sample(&procfs, &tasks, Duration::from_secs(5));
        kill_group(task);
        assert_eq!(e.tasks[0].procs.processes, 3);
        assert_eq!(c.tasks[0].procs.processes, 3);
        assert_eq!(exact.counts().smaps_reads, 3, "{:?}", exact.counts());
        assert_eq!(cheap.counts().smaps_reads, 0, "{:?}", cheap.counts());
        assert!(cheap.counts().statm_reads >= 3, "{:?}", cheap.counts());
    }

    #[test]
    fn a_small_task_is_read_whole() {
        let task = sleepers(3);
        let t = std::time::Instant::now();
        while count_children(task.id()) < 3 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let procfs = ProcFs::default();
        let mut r = ProcReader::default();
        let f = r.sample(&procfs, &[(task.id(), None)], Duration::from_secs(1));
        let id = task.id();
        kill_group(task);
        assert_eq!((f.read, f.tasks[0].procs.processes), (4, 4));
        assert!(!f.partial());
        assert!(f.members.contains(&id));
        assert!(f.tasks[0].procs.hwm > 0 && f.tasks[0].procs.threads == 4);
    }
}

//! When the step's tracker may open NVML inside slurmstepd.
//!
//! Opening NVML (`dlopen`, init, a handle per device) opens the driver's device files, maybe
//! without close-on-exec. A task forked meanwhile would keep descriptors of every GPU of the
//! node across its `exec`, past the devices cgroup; and a fork while this thread holds the
//! loader's lock can leave the child blocked on that lock for ever. So NVML is opened only once
//! slurmstepd has forked every task of the step. What Slurm's source says (slurmstepd's
//! `mgr.c`, same order in 22.05.8, 24.11.5 and 26.05.3):
//!
//! - `_fork_all_tasks` forks every local task first, in one loop (`_fork_child_with_wait_info`,
//!   22.05: line 1922; 24.11: 2303; 26.05: 2247), which ends before the comment "All tasks are
//!   now forked" (22.05: 2004; 24.11: 2385; 26.05: 2341); the children wait before `exec`.
//! - Then, in a second loop over the same tasks, it calls `task_post_fork` for each in turn
//!   (22.05: 2075; 24.11: 2445; 26.05: 2401), directly or (`contain_spank`) in a
//!   `clone(CLONE_VM)` child.
//! - Only after that loop does it let the tasks `exec` (22.05: 2100; 24.11: 2473; 26.05: 2429).
//! - The batch step goes through the same `_fork_all_tasks` with one task
//!   (`slurmstepd_job.c`: `node_tasks = 1`, 22.05: 526; 24.11: 522; 26.05: 511).
//! - The extern step does not (`_spawn_job_container`): it calls `task_post_fork` with no task
//!   (22.05: 1172; 24.11: 1492; 26.05: 1440), where `S_TASK_PID` fails (`ESPANK_NOT_TASK`), so
//!   the plugin records no task and the tracker never opens NVML for it.
//!
//! So when the number of `task_post_fork` calls reaches `S_JOB_LOCAL_TASK_COUNT` (the step's
//! `node_tasks`, 22.05 `plugstack.c`: 2024; 24.11 `spank.c`: 2048; 26.05: 2057), no task of the
//! step is left to fork. When that count is unknown, the tracker waits instead until every task
//! it knows has left slurmstepd's image (it has run `exec`, or ended), which Slurm allows only
//! after the last `task_post_fork`. Forks that come later (a task epilog, a prolog run in the
//! job) are covered by marking NVML's descriptors close-on-exec ([`crate::gpu::cloexec`]).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Why NVML was opened when it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Every local task of the step had been started (`S_JOB_LOCAL_TASK_COUNT` reached).
    AfterLastTask,
    /// The task count was unknown; every task started had been let go by slurmstepd.
    AfterTasksReleased,
}

impl Trigger {
    /// The name the record uses (`sampler.nvml_opened`).
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::AfterLastTask => "after_last_task",
            Trigger::AfterTasksReleased => "after_tasks_released",
        }
    }
}

/// Whether NVML may be opened now, for a step of `local_tasks` tasks on this node (`None`:
/// unknown) of which `started` have been started; `released` says whether a task has left
/// slurmstepd's image.
pub fn may_open(
    local_tasks: Option<u32>,
    started: &[u32],
    released: impl Fn(u32) -> bool,
) -> Option<Trigger> {
    if started.is_empty() {
        return None;
    }
    match local_tasks {
        Some(n) => (started.len() >= n as usize).then_some(Trigger::AfterLastTask),
        None => started
            .iter()
            .all(|&p| released(p))
            .then_some(Trigger::AfterTasksReleased),
    }
}

/// The file (device, inode) a process runs, through `<proc_root>/<pid>/exe`.
pub fn exe_of(proc_root: &Path, pid: &str) -> io::Result<(u64, u64)> {
    let m = std::fs::metadata(proc_root.join(pid).join("exe"))?;
    Ok((m.dev(), m.ino()))
}

/// Whether task `pid` has left slurmstepd's image (`stepd`: the file slurmstepd runs): it runs
/// another file, or it is gone (a zombie's `exe` is gone too). Unknown cases count as not
/// released.
pub fn released(proc_root: &Path, pid: u32, stepd: Option<(u64, u64)>) -> bool {
    match exe_of(proc_root, &pid.to_string()) {
        Ok(exe) => stepd.is_some_and(|s| s != exe),
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_a_task_count_only_the_last_task_opens_the_gate() {
        let never = |_| false;
        assert_eq!(may_open(Some(2), &[], never), None);
        assert_eq!(may_open(Some(2), &[10], never), None);
        assert_eq!(may_open(Some(2), &[10], |_| true), None, "count, not exec");
        assert_eq!(
            may_open(Some(2), &[10, 11], never),
            Some(Trigger::AfterLastTask)
        );
    }

    #[test]
    fn without_one_every_task_must_have_left_slurmstepd() {
        assert_eq!(may_open(None, &[], |_| true), None);
        assert_eq!(may_open(None, &[10, 11], |p| p == 10), None);
        assert_eq!(
            may_open(None, &[10, 11], |_| true),
            Some(Trigger::AfterTasksReleased)
        );
        assert_eq!(Trigger::AfterTasksReleased.as_str(), "after_tasks_released");
    }

    #[test]
    fn a_process_is_released_once_it_runs_another_file_or_is_gone() {
        let proc = Path::new("/proc");
        let me = exe_of(proc, "self").unwrap();
        // This process stands for a task forked from slurmstepd that has not run exec yet.
        assert!(!released(proc, std::process::id(), Some(me)));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(released(proc, child.id(), Some(me)));
        assert!(!released(proc, child.id(), None), "unknown: not released");
        child.kill().unwrap();
        // Ended, not yet reaped: a zombie has no exe.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(released(proc, child.id(), Some(me)));
        child.wait().unwrap();
        assert!(released(proc, child.id(), Some(me)));
    }
}

//! Whether a process is inside a cgroup (in it or in one below it), from the process's own
//! `/proc/<pid>/cgroup`: the kernel's word, which no process can change for itself, and which
//! needs no walk of the cgroup's tree. Used to tell a job's own processes on a GPU (another
//! step's) from other jobs'.

use std::path::{Component, Path, PathBuf};

use super::{Cgroup, Version, parse};

impl Cgroup {
    /// Whether the process whose `/proc/<pid>/cgroup` reads `proc_cgroup` is in this cgroup or
    /// a cgroup below it, the cgroup filesystem being at `root`. The process's path is taken
    /// from the hierarchy this cgroup was found on (v1's memory controller, else the unified
    /// one), so both sides name directories of one tree; a path that does not fit (none on that
    /// hierarchy, or `..` in it: a cgroup outside the reader's cgroup namespace) is outside.
    pub fn holds(&self, root: &Path, proc_cgroup: &str) -> bool {
        process_dir(root, self.version, proc_cgroup)
            .is_some_and(|d| d.starts_with(&self.memory_dir))
    }
}

/// The directory of the process's cgroup on the hierarchy of `version`, under `root`.
fn process_dir(root: &Path, version: Version, proc_cgroup: &str) -> Option<PathBuf> {
    let lines = parse::parse_proc_cgroup(proc_cgroup);
    let (base, line) = match version {
        Version::V1 => (
            root.join("memory"),
            lines
                .iter()
                .find(|l| l.hierarchy != 0 && l.controllers.iter().any(|c| c == "memory"))?,
        ),
        Version::V2 => (root.to_path_buf(), lines.iter().find(|l| l.hierarchy == 0)?),
    };
    let rel = Path::new(line.path.trim_start_matches('/'));
    // The kernel writes `..` for a cgroup outside the reader's cgroup namespace: such a path
    // names no directory below the root, so the process is in none of the reader's cgroups.
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(base.join(rel))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn cg(version: Version, dir: &str) -> Cgroup {
        Cgroup {
            version,
            memory_dir: PathBuf::from("/cg").join(dir),
            cpu_dir: None,
        }
    }

    #[test]
    fn a_process_is_held_by_its_cgroup_and_the_cgroups_above_it_only() {
        let root = Path::new("/cg");
        let job = cg(Version::V1, "memory/slurm_n1/uid_1000/job_7");
        let task = "11:memory:/slurm_n1/uid_1000/job_7/step_0/task_0\n3:cpu,cpuacct:/x\n0::/\n";
        assert!(job.holds(root, task));
        // Component-wise: job_70 is not inside job_7.
        assert!(!job.holds(root, &task.replace("job_7", "job_70")));
        // Another hierarchy's path is not the memory one's.
        assert!(!job.holds(
            root,
            "3:cpu,cpuacct:/slurm_n1/uid_1000/job_7/step_0\n0::/\n"
        ));
        let v2 = cg(Version::V2, "system.slice/n1_slurmstepd.scope/job_7");
        let proc = "0::/system.slice/n1_slurmstepd.scope/job_7/step_batch/user/task_0\n";
        assert!(v2.holds(root, proc));
        assert!(!v2.holds(root, "0::/system.slice/n1_slurmstepd.scope/system\n"));
        // A path climbing out is refused, however it would resolve.
        assert!(!v2.holds(
            root,
            "0::/system.slice/n1_slurmstepd.scope/job_7/../job_8/step_0\n"
        ));
        // A process outside the reader's cgroup namespace (the kernel writes `/..` first).
        assert!(!v2.holds(
            root,
            "0::/../system.slice/n1_slurmstepd.scope/job_7/step_0\n"
        ));
        assert!(!v2.holds(root, ""));
    }
}

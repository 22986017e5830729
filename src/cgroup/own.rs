//! A cgroup of the command's own, so the tracker can read an exact peak for the whole process
//! tree. Made below the tracker's own cgroup, never beside it: the command stays inside every
//! limit that applied to the tracker (a Slurm job's, a systemd slice's).
//!
//! Possible on cgroup v1 with write access to the tracker's memory cgroup (root), and on v2 when
//! the tracker sits in the root cgroup (containers). Elsewhere the caller falls back to sampling
//! and says so.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::{Cgroup, Version};

/// A child cgroup made for one tracked command; removed again by [`OwnCgroup::remove`].
#[derive(Debug)]
pub struct OwnCgroup {
    cgroup: Cgroup,
    parent_procs: PathBuf,
    /// What a child writes to, to join: v1's `tasks`, v2's `cgroup.procs`.
    join: File,
}

impl OwnCgroup {
    /// Makes `<own memory cgroup>/gpu-tracker.<pid>`. The error says why it was not possible.
    pub fn create(cgroup_root: &Path, proc_root: &Path) -> Result<OwnCgroup, String> {
        let me = std::process::id();
        let own = Cgroup::of_pid(cgroup_root, proc_root, me).map_err(|e| e.to_string())?;
        let name = format!("gpu-tracker.{me}");
        let (dir, peak_file) = match own.version {
            Version::V1 => (own.memory_dir.join(&name), "memory.max_usage_in_bytes"),
            Version::V2 => {
                // Anywhere but the root, v2 forbids enabling controllers for children of a
                // cgroup that holds processes, and the tracker itself is one.
                if own.memory_dir != cgroup_root {
                    return Err(format!(
                        "cgroup v2: {} holds this process, so no child cgroup with memory \
                         accounting can be made below it",
                        own.memory_dir.display()
                    ));
                }
                (own.memory_dir.join(&name), "memory.peak")
            }
        };
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let cleanup = |msg: String| {
            let _ = std::fs::remove_dir(&dir);
            msg
        };
        if !dir.join(peak_file).exists() {
            return Err(cleanup(format!("{} has no {peak_file}", dir.display())));
        }
        // v1 moves a single thread without the kernel's global lock (see sys::CgroupJoin);
        // v2 moves threads alone only inside threaded subtrees.
        let join_file = match own.version {
            Version::V1 => "tasks",
            Version::V2 => "cgroup.procs",
        };
        let join = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(join_file))
            .map_err(|e| cleanup(format!("open {}/{join_file}: {e}", dir.display())))?;
        Ok(OwnCgroup {
            cgroup: Cgroup {
                version: own.version,
                cpu_dir: (own.version == Version::V2).then(|| dir.clone()),
                memory_dir: dir,
            },
            parent_procs: own.memory_dir.join("cgroup.procs"),
            join,
        })
    }

    /// The cgroup, for reading.
    pub fn cgroup(&self) -> &Cgroup {
        &self.cgroup
    }

    /// How a child joins the new cgroup between fork and exec ([`crate::sys::join_cgroup`]), so
    /// that nothing it does escapes the accounting.
    pub fn join(&self) -> crate::sys::CgroupJoin {
        let fd = self.join.as_raw_fd();
        match self.cgroup.version {
            Version::V1 => crate::sys::CgroupJoin::Tasks(fd),
            Version::V2 => crate::sys::CgroupJoin::Procs(fd),
        }
    }

    /// Moves any process still inside back to the parent cgroup, then removes the cgroup.
    pub fn remove(self) -> Result<(), String> {
        let pids = self.cgroup.procs().unwrap_or_default();
        if !pids.is_empty() {
            let mut parent = std::fs::OpenOptions::new()
                .write(true)
                .open(&self.parent_procs)
                .map_err(|e| format!("open {}: {e}", self.parent_procs.display()))?;
            for pid in pids {
                // One pid per write: the kernel takes one per write(2).
                let _ = parent.write_all(pid.to_string().as_bytes());
            }
        }
        drop(self.join);
        std::fs::remove_dir(&self.cgroup.memory_dir)
            .map_err(|e| format!("rmdir {}: {e}", self.cgroup.memory_dir.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where this process may make cgroups (root on cgroup v1, as in tests/run-all.sh): a
    /// child spawned to join lands in the new cgroup, through v1's `tasks` file.
    #[test]
    fn a_spawned_child_joins_the_new_cgroup() {
        let root = Path::new(crate::cgroup::DEFAULT_ROOT);
        let Ok(own) = OwnCgroup::create(root, Path::new(crate::proc::DEFAULT_ROOT)) else {
            eprintln!("note: no cgroup of its own can be made here; skipped");
            return;
        };
        if own.cgroup().version == Version::V1 {
            assert!(matches!(own.join(), crate::sys::CgroupJoin::Tasks(_)));
        }
        let mut child = crate::sys::spawn_shell("sleep 5", Some(own.join()), &[]).unwrap();
        let pid = child.id();
        let inside = own.cgroup().procs().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        own.remove().unwrap();
        assert!(inside.contains(&pid), "{pid} not in {inside:?}");
    }
}

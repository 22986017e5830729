//! A cgroup of the command's own, so the tracker can read an exact peak for the whole process
//! tree. Made below the tracker's own cgroup, never beside it: the command stays inside every
//! limit that applied to the tracker (a Slurm job's, a systemd slice's).
//!
//! Possible on cgroup v1 with write access to the tracker's memory cgroup (root), and on v2 when
//! the tracker sits in the root cgroup (containers). Elsewhere the caller falls back to sampling
//! and says so.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use super::{Cgroup, Version};

/// A child cgroup made for one tracked command; removed again by [`OwnCgroup::remove`].
#[derive(Debug)]
pub struct OwnCgroup {
    cgroup: Cgroup,
    parent_procs: PathBuf,
    procs: File,
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
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .map_err(|e| cleanup(format!("open {}/cgroup.procs: {e}", dir.display())))?;
        Ok(OwnCgroup {
            cgroup: Cgroup {
                version: own.version,
                cpu_dir: (own.version == Version::V2).then(|| dir.clone()),
                memory_dir: dir,
            },
            parent_procs: own.memory_dir.join("cgroup.procs"),
            procs,
        })
    }

    /// The cgroup, for reading.
    pub fn cgroup(&self) -> &Cgroup {
        &self.cgroup
    }

    /// The open `cgroup.procs` of the new cgroup: a child writes its own pid to it between fork
    /// and exec ([`crate::sys::join_cgroup`]), so nothing it does escapes the accounting.
    pub fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
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
        drop(self.procs);
        std::fs::remove_dir(&self.cgroup.memory_dir)
            .map_err(|e| format!("rmdir {}: {e}", self.cgroup.memory_dir.display()))
    }
}

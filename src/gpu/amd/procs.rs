//! The processes KFD knows (`sys/class/kfd/kfd/proc/<pid>/`): only those that opened
//! `/dev/kfd` (ROCm, HIP) are there, named by host pid. For each GPU (by `gpu_id`) a process
//! has `vram_<gpu_id>` (bytes of VRAM it holds there) and, where the kernel can count it,
//! `stats_<gpu_id>/cu_occupancy` (its compute units with waves in flight now: the waves over
//! the most a CU holds, rounded up).
//!
//! One listing of the directory serves every GPU of a sample (see [`super::AmdSource`]); then
//! each GPU reads two small files per listed process. No process's fdinfo is read.

use std::path::{Path, PathBuf};

use super::files::{self, FileProblem};
use super::parse;

/// The KFD processes' directory, under a root.
pub const PROC: &str = "sys/class/kfd/kfd/proc";

/// The pids KFD lists under `root`, in ascending order. `Missing` when the directory is not
/// there (a kernel without KFD's per-process files).
pub fn list(root: &Path) -> Result<Vec<u32>, FileProblem> {
    let dir = root.join(PROC);
    let rd = std::fs::read_dir(&dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            FileProblem::Missing(dir.clone())
        } else {
            FileProblem::Unreadable(dir.clone(), e)
        }
    })?;
    let mut pids: Vec<u32> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| parse::parse_pid(e.file_name().as_encoded_bytes()))
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// One process on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnGpu {
    /// Host pid.
    pub pid: u32,
    /// VRAM it holds on the GPU, bytes.
    pub vram: u64,
    /// Its compute units with waves in flight, where the kernel gives it.
    pub cu: Option<u32>,
}

/// What one GPU's processes are.
#[derive(Debug, Default, PartialEq)]
pub struct GpuProcs {
    /// The processes that use the GPU: VRAM held or waves in flight. A process that opened
    /// KFD holds a file for every GPU it may use, with 0 for those it does not: it is left out
    /// of those, as NVML leaves out a GPU a process made no context on.
    pub on: Vec<OnGpu>,
    /// Processes with a `vram_<gpu_id>` file (using the GPU or not).
    pub with_files: usize,
    /// Of those, how many lacked `cu_occupancy` (a kernel without it).
    pub without_cu: usize,
    /// Files that could not be read or held garbage (not absent ones: a process that ended
    /// since the listing takes its files away).
    pub problems: Vec<String>,
}

/// Reads the KFD files of GPU `gpu_id` for each of `pids` under `proc_dir` (`root/PROC`).
pub fn read_gpu(proc_dir: &Path, pids: &[u32], gpu_id: u32) -> GpuProcs {
    let vram_name = format!("vram_{gpu_id}");
    let cu_name: PathBuf = [format!("stats_{gpu_id}"), "cu_occupancy".to_string()]
        .iter()
        .collect();
    let mut out = GpuProcs::default();
    let mut at = proc_dir.to_path_buf();
    for &pid in pids {
        at.push(pid.to_string());
        at.push(&vram_name);
        let vram = files::read_number(&at);
        at.pop();
        let vram = match vram {
            Ok(v) => v,
            // Not on this GPU, or ended since the listing.
            Err(FileProblem::Missing(_)) => {
                at.pop();
                continue;
            }
            Err(e) => {
                out.problems.push(e.to_string());
                at.pop();
                continue;
            }
        };
        at.push(&cu_name);
        let cu = files::read_number(&at);
        at.pop();
        at.pop();
        let cu = match cu {
            Ok(c) => u32::try_from(c).ok(),
            // A process that ended between the two reads is not there to count.
            Err(FileProblem::Missing(_)) if !at.is_dir() => {
                at.pop();
                continue;
            }
            Err(FileProblem::Missing(_)) => {
                out.without_cu += 1;
                None
            }
            Err(e) => {
                out.problems.push(e.to_string());
                None
            }
        };
        at.pop();
        out.with_files += 1;
        if vram > 0 || cu.is_some_and(|c| c > 0) {
            out.on.push(OnGpu { pid, vram, cu });
        }
    }
    out
}

//! The processes KFD knows (`sys/class/kfd/kfd/proc/<pid>/`): only those that opened
//! `/dev/kfd` (ROCm, HIP) are there, named by host pid. For each GPU (by `gpu_id`) a process
//! has `vram_<gpu_id>` (bytes of VRAM it holds there) and, where the kernel can count it,
//! `stats_<gpu_id>/cu_occupancy` (its compute units with waves in flight now: the waves over
//! the most a CU holds, rounded up).
//!
//! Anyone can start processes that open `/dev/kfd`, so the directory may hold thousands of
//! entries, and a sample must not cost in proportion to them. One listing of at most
//! [`MAX_KFD_ENTRIES`] entries serves every GPU of a sample (see [`super::AmdSource`]). Once the
//! source knows the tracked processes, it reads the two files of those only ([`read_gpu`]), and
//! of the others only `vram_<gpu_id>`, one after another, until one holds VRAM on the GPU: the
//! GPU is shared, and the test stops there ([`first_outside`]). At most [`MAX_KFD_ENTRIES`]
//! such files are read a sample, all GPUs together. No process's fdinfo is read.

use std::path::{Path, PathBuf};

use super::files::{self, FileProblem};
use super::parse;

/// The KFD processes' directory, under a root.
pub const PROC: &str = "sys/class/kfd/kfd/proc";

/// The most entries of [`PROC`] listed a sample, and the most `vram_<gpu_id>` files of
/// processes outside the tracked ones read a sample (all GPUs together). Past either, whether
/// another process uses a GPU is unknown, and the source says so.
pub const MAX_KFD_ENTRIES: usize = 1024;

/// The pids of one listing of [`PROC`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// Pids, ascending.
    pub pids: Vec<u32>,
    /// Whether the directory held more entries than were listed.
    pub cut: bool,
}

/// The pids KFD lists under `root`, at most `cap` entries of the directory, in ascending order.
/// `Missing` when the directory is not there (a kernel without KFD's per-process files).
pub fn list(root: &Path, cap: usize) -> Result<Listing, FileProblem> {
    let dir = root.join(PROC);
    let rd = std::fs::read_dir(&dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            FileProblem::Missing(dir.clone())
        } else {
            FileProblem::Unreadable(dir.clone(), e)
        }
    })?;
    let mut out = Listing::default();
    for (n, e) in rd.enumerate() {
        if n == cap {
            out.cut = true;
            break;
        }
        if let Some(pid) = e
            .ok()
            .and_then(|e| parse::parse_pid(e.file_name().as_encoded_bytes()))
        {
            out.pids.push(pid);
        }
    }
    out.pids.sort_unstable();
    Ok(out)
}

/// The pids of `tracked` (ascending) worth reading: those in a whole listing, or all of them
/// when the listing was cut (one past it may be there).
pub fn tracked_in(listing: &Listing, tracked: &[u32]) -> Vec<u32> {
    if listing.cut {
        return tracked.to_vec();
    }
    tracked
        .iter()
        .copied()
        .filter(|p| listing.pids.binary_search(p).is_ok())
        .collect()
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
    /// Files opened (absent ones included).
    pub reads: usize,
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
        out.reads += 1;
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
        out.reads += 1;
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

/// What the test "does a process outside the tracked ones use this GPU" found.
#[derive(Debug, Default, PartialEq)]
pub struct Outside {
    /// The first such process (in pid order) holding VRAM on the GPU.
    pub found: Option<OnGpu>,
    /// Whether every listed process outside the tracked ones was looked at (when none was
    /// found): `false` when the budget ran out first.
    pub complete: bool,
    /// Files that could not be read or held garbage.
    pub problems: Vec<String>,
    /// Files opened.
    pub reads: usize,
}

/// Looks for a process of `listed` outside `tracked` (both ascending) that holds VRAM on GPU
/// `gpu_id`, reading only its `vram_<gpu_id>`, and stops at the first; at most `budget` files,
/// which it takes from.
pub fn first_outside(
    proc_dir: &Path,
    listed: &[u32],
    tracked: &[u32],
    gpu_id: u32,
    budget: &mut usize,
) -> Outside {
    let vram_name = format!("vram_{gpu_id}");
    let mut out = Outside {
        complete: true,
        ..Outside::default()
    };
    for &pid in listed {
        if tracked.binary_search(&pid).is_ok() {
            continue;
        }
        if *budget == 0 {
            out.complete = false;
            break;
        }
        *budget -= 1;
        out.reads += 1;
        let path: PathBuf = [proc_dir, Path::new(&pid.to_string()), Path::new(&vram_name)]
            .iter()
            .collect();
        match files::read_number(&path) {
            Ok(vram) if vram > 0 => {
                out.found = Some(OnGpu {
                    pid,
                    vram,
                    cu: None,
                });
                break;
            }
            // Holds nothing here, is not on this GPU, or ended since the listing.
            Ok(_) | Err(FileProblem::Missing(_)) => {}
            Err(e) => out.problems.push(e.to_string()),
        }
    }
    out
}

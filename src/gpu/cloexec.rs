//! Descriptors a driver library leaves open without close-on-exec. NVML opens the driver's
//! device files (`/dev/nvidiactl`, `/dev/nvidia<N>`, ...) and may do so without `O_CLOEXEC`:
//! inside slurmstepd, every process it later forks and execs (a task epilog, a prolog run in the
//! job) would inherit descriptors of GPUs the job was not given, past the devices cgroup. The
//! fix is to compare this process's descriptors before and after the library's work and mark
//! the new ones close-on-exec.
//!
//! Descriptors are told apart by number AND by the file they are open on: another thread may
//! close a descriptor meanwhile and the library's `open` get its number. Other threads of the
//! process may open descriptors during that window too; they get the flag as well. That is
//! harmless for the programs this runs in: a descriptor meant for a child is put in place with
//! `dup2` in the child, which clears the flag on the copy.

use std::collections::BTreeMap;

use crate::sys;

/// This process's open descriptors, each with the (device, inode) of what it is open on.
pub type Descriptors = BTreeMap<i32, (u64, u64)>;

/// The descriptors open in this process now (empty if `/proc/self/fd` cannot be read).
pub fn descriptors() -> Descriptors {
    let Ok(rd) = std::fs::read_dir("/proc/self/fd") else {
        return Descriptors::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let fd = e.file_name().to_str()?.parse().ok()?;
            // The open file itself (pipes and sockets too), asked of the descriptor: cheaper
            // than following its link under /proc.
            Some((fd, sys::fd_identity(fd)?))
        })
        .collect()
}

/// Marks close-on-exec every descriptor open now that was not open on the same file in
/// `before`. Returns how many lacked the flag (those a child could have inherited).
pub fn mark_new(before: &Descriptors) -> usize {
    mark(
        descriptors()
            .into_iter()
            .filter(|(fd, id)| before.get(fd) != Some(id))
            .map(|(fd, _)| fd),
    )
}

/// Marks close-on-exec each of `fds`; returns how many lacked the flag. Descriptors closed
/// meanwhile are skipped.
fn mark(fds: impl Iterator<Item = i32>) -> usize {
    fds.filter(|fd| sys::set_cloexec(*fd).unwrap_or(false))
        .count()
}

/// Runs `f` and marks close-on-exec the descriptors it left open. Returns its result and how
/// many descriptors were marked.
pub fn marking<T>(f: impl FnOnce() -> T) -> (T, usize) {
    marking_unless(f, |_| false)
}

/// As [`marking`], without looking again where `opened_nothing` says of `f`'s result that it
/// cannot have left a descriptor open (a library that failed to load).
pub fn marking_unless<T>(
    f: impl FnOnce() -> T,
    opened_nothing: impl FnOnce(&T) -> bool,
) -> (T, usize) {
    let before = descriptors();
    let r = f();
    if opened_nothing(&r) {
        return (r, 0);
    }
    (r, mark_new(&before))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Whether descriptor `fd` of this process is close-on-exec, from `/proc/self/fdinfo`.
    fn cloexec(fd: i32) -> bool {
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
        let flags = info.lines().find_map(|l| l.strip_prefix("flags:")).unwrap();
        u32::from_str_radix(flags.trim(), 8).unwrap() & libc::O_CLOEXEC as u32 != 0
    }

    #[test]
    fn open_descriptors_are_listed_and_only_unflagged_ones_counted() {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open("/proc/self/status").unwrap();
        let fd = f.as_raw_fd();
        let id = f.metadata().map(|m| (m.dev(), m.ino())).unwrap();
        assert_eq!(descriptors().get(&fd), Some(&id));
        // Rust opens with O_CLOEXEC: nothing to mark. A closed descriptor is skipped.
        assert!(cloexec(fd));
        assert_eq!(mark([fd, -1].into_iter()), 0);
        assert!(cloexec(fd));
    }
}

//! Files and descriptors: close-on-exec, duplicates, `*at` calls, renames, and which
//! filesystem a descriptor is on.

/// Renames `from` to `to` unless `to` exists (`renameat2` with `RENAME_NOREPLACE`): an
/// existing `to` gives `AlreadyExists` and is left alone, also an empty directory.
pub fn rename_noreplace(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &std::path::Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: both paths are valid NUL-terminated strings that outlive the call; AT_FDCWD
    // makes them relative to the working directory (they are absolute here).
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The filesystem type (`ext4`, `nfs4`, `fuse.sshfs`, ...) of the file open on descriptor `fd`
/// of this process, from the kernel's tables (`/proc/self/fdinfo`'s `mnt_id`, then
/// `/proc/self/mountinfo`): nothing is asked of the filesystem itself, which may not answer.
///
/// `Err(why)` when it cannot be told: fdinfo or mountinfo cannot be read, or the descriptor's
/// mount is not in this process's mount table. A mount that was lazily unmounted
/// (`umount -l`, `fusermount3 -u -z`) after the file was opened, or one of another mount
/// namespace (a file opened through `/proc/<pid>/root/...`), is in no table this process can
/// read, and may be a FUSE filesystem whose daemon stops answering: callers treat such a
/// descriptor as one they must not write to.
pub fn fd_filesystem_type(fd: i32) -> Result<String, String> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .map_err(|e| format!("/proc/self/fdinfo/{fd}: {e}"))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    filesystem_type_of(&info, &mounts)
}

/// [`fd_filesystem_type`] from the texts of a descriptor's fdinfo and of a mountinfo.
pub fn filesystem_type_of(fdinfo: &str, mountinfo: &str) -> Result<String, String> {
    let mnt_id = fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .ok_or("fdinfo names no mount")?;
    mountinfo
        .lines()
        .find_map(|l| {
            (l.split(' ').next()? == mnt_id).then_some(())?;
            // After the optional fields comes "-", then the filesystem type.
            l.split(" - ")
                .nth(1)?
                .split(' ')
                .next()
                .filter(|t| !t.is_empty())
                .map(str::to_string)
        })
        .ok_or_else(|| {
            format!(
                "mount {mnt_id} is in no mount table of this process (unmounted lazily, or of \
                 another mount namespace)"
            )
        })
}

/// Whether a filesystem of type `fstype` is served by a user-space daemon (FUSE): once such a
/// daemon has taken a write, the kernel waits for its answer uninterruptibly, so a daemon that
/// stops answering keeps the writing process, and slurmstepd with it, from ever exiting.
pub fn is_fuse(fstype: &str) -> bool {
    fstype == "fuse" || fstype == "fuseblk" || fstype.starts_with("fuse.")
}

/// A close-on-exec duplicate of descriptor `fd` (`fcntl(F_DUPFD_CLOEXEC)`), numbered `min` or
/// above.
fn dup_cloexec_from(fd: i32, min: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: F_DUPFD_CLOEXEC takes an integer (the lowest new number); it only reads `fd`.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` is a descriptor just made by fcntl, open and owned by nobody else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(new) })
}

/// A close-on-exec duplicate of descriptor `fd`, at the lowest free number.
pub(super) fn dup_cloexec(fd: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    dup_cloexec_from(fd, 0)
}

/// Takes an exclusive advisory lock (`flock`) on `file` without waiting: `Ok(false)` when
/// another open file holds it. Dropping the file (or its last duplicate) lets it go.
pub fn try_lock(file: &std::fs::File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor `file` owns; it changes no memory.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// The (device, inode) of the file descriptor `fd` is open on; `None` if it is not open.
pub fn fd_identity(fd: i32) -> Option<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is writable memory of a `stat`; fstat fills it or fails (EBADF) and
    // touches nothing else.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Some((st.st_dev, st.st_ino))
}

/// Sets close-on-exec on descriptor `fd`. Returns whether it was newly set (`false`: it was
/// set already). An error (`EBADF`: the descriptor was closed meanwhile) changes nothing.
pub fn set_cloexec(fd: i32) -> std::io::Result<bool> {
    // SAFETY: F_GETFD takes no argument and only reads the descriptor's flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if flags & libc::FD_CLOEXEC != 0 {
        return Ok(false);
    }
    // SAFETY: F_SETFD takes an int of descriptor flags; it touches nothing but the descriptor.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(true)
}

/// Grows this process's descriptor table to hold descriptor number `fd`, opening nothing
/// there for long. Once threads share the table, growing it makes the kernel wait for an RCU
/// grace period (`expand_fdtable` in fs/file.c), ten milliseconds or more on a busy machine;
/// while the process has one thread it costs microseconds, and the table never shrinks. The
/// soft open-file limit is raised for the moment when `fd` is above it (up to the hard limit),
/// then set back, so that processes started later get the limit they would have had.
pub fn grow_fd_table(fd: i32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let Ok(need) = u64::try_from(fd).map(|f| f + 1) else {
        return Err(std::io::ErrorKind::InvalidInput.into());
    };
    let (soft, hard) = super::nofile_limit();
    if need > hard {
        return Err(std::io::ErrorKind::InvalidInput.into());
    }
    if need > soft {
        super::process::set_nofile_limit(need, hard)?;
    }
    let grown = std::fs::File::open("/dev/null").and_then(|f| dup_cloexec_from(f.as_raw_fd(), fd));
    if need > soft {
        let _ = super::process::set_nofile_limit(soft, hard);
    }
    grown.map(drop)
}

/// Moves `fd` to the lowest free descriptor number at or above `min` (close-on-exec), so that
/// descriptors kept for long leave the low numbers to the code around them.
pub fn move_fd_at_least(
    fd: std::os::fd::OwnedFd,
    min: i32,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    dup_cloexec_from(fd.as_raw_fd(), min)
}

/// `openat(dir, name, flags)`: a file opened relative to an open directory.
pub fn openat(
    dir: &std::fs::File,
    name: &std::ffi::CStr,
    flags: libc::c_int,
) -> std::io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: `name` is NUL-terminated and `dir` an open descriptor for the call's duration.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and nothing else owns it.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// `openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)`: a new file
/// made in an open directory, never through a link and never one that was there
/// (`AlreadyExists`).
pub fn create_at(
    dir: &std::fs::File,
    name: &std::ffi::CStr,
    mode: libc::mode_t,
) -> std::io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `name` is NUL-terminated and `dir` an open descriptor for the call's duration;
    // O_CREAT reads the mode, passed as the variadic argument (promoted to an unsigned int).
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and nothing else owns it.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// `renameat(dir, from, dir, to)`: renames an entry of an open directory within it (replacing
/// `to`).
pub fn rename_at(
    dir: &std::fs::File,
    from: &std::ffi::CStr,
    to: &std::ffi::CStr,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let d = dir.as_raw_fd();
    // SAFETY: both names are NUL-terminated and `dir` an open descriptor for the call's duration.
    if unsafe { libc::renameat(d, from.as_ptr(), d, to.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `unlinkat(dir, name, 0)`: removes a non-directory entry of an open directory (a symbolic
/// link itself, never what it points at).
pub fn unlinkat(dir: &std::fs::File, name: &std::ffi::CStr) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `name` is NUL-terminated and `dir` an open descriptor for the call's duration.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `openat(dir, name, flags, mode)`: [`openat`] with the mode a file made by `O_CREAT` gets.
pub fn openat_mode(
    dir: &std::fs::File,
    name: &std::ffi::CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> std::io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: `name` is NUL-terminated and `dir` an open descriptor for the call's duration;
    // the mode is passed as the variadic argument (promoted to an unsigned int).
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and nothing else owns it.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// `mkdirat(dir, name, mode)`: makes a directory in an open directory (`AlreadyExists` where
/// any entry of that name is, a symbolic link included, which is not followed).
pub fn mkdirat(
    dir: &std::fs::File,
    name: &std::ffi::CStr,
    mode: libc::mode_t,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `name` is NUL-terminated and `dir` an open descriptor for the call's duration.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The target of the symbolic link open on `link` (opened with `O_PATH | O_NOFOLLOW`):
/// `readlinkat(link, "")`, so that the link read is the one opened, not one put at its path
/// since.
pub fn readlink_fd(link: &std::fs::File) -> std::io::Result<std::ffi::OsString> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStringExt;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: the empty name is NUL-terminated, `buf` is writable for its whole length, and
    // `link` an open descriptor for the call's duration.
    let n = unsafe {
        libc::readlinkat(
            link.as_raw_fd(),
            c"".as_ptr(),
            buf.as_mut_ptr().cast::<libc::c_char>(),
            buf.len(),
        )
    };
    let Ok(n) = usize::try_from(n) else {
        return Err(std::io::Error::last_os_error());
    };
    if n >= buf.len() {
        return Err(std::io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf.truncate(n);
    Ok(std::ffi::OsString::from_vec(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filesystem_types_come_from_the_kernels_tables() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(fd_filesystem_type(f.as_raw_fd()).as_deref(), Ok("proc"));
        let e = fd_filesystem_type(987_654).unwrap_err();
        assert!(e.starts_with("/proc/self/fdinfo/987654: "), "{e}");
        assert!(is_fuse("fuse.sshfs") && is_fuse("fuseblk") && !is_fuse("nfs4"));
    }

    #[test]
    fn the_threads_descriptor_is_a_close_on_exec_duplicate() {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        let d = dup_cloexec(f.as_raw_fd()).unwrap();
        assert_ne!(d.as_raw_fd(), f.as_raw_fd());
        let flags = |fd: i32| -> u32 {
            let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
            let l = info.lines().find(|l| l.starts_with("flags:")).unwrap();
            u32::from_str_radix(l["flags:".len()..].trim(), 8).unwrap()
        };
        assert_ne!(flags(d.as_raw_fd()) & libc::O_CLOEXEC as u32, 0);
        assert_eq!(
            flags(f.as_raw_fd()) & libc::O_CLOEXEC as u32,
            libc::O_CLOEXEC as u32
        );
    }

    #[test]
    fn close_on_exec_is_set_once() {
        use std::os::fd::AsRawFd;
        let (r, _w) = std::io::pipe().unwrap();
        let fd = r.as_raw_fd();
        let cloexec = || {
            let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
            let flags = info.lines().find_map(|l| l.strip_prefix("flags:")).unwrap();
            u32::from_str_radix(flags.trim(), 8).unwrap() & libc::O_CLOEXEC as u32 != 0
        };
        assert!(!set_cloexec(fd).unwrap(), "std opens with O_CLOEXEC");
        // SAFETY: F_SETFD with 0 clears the descriptor flags of a pipe this test owns.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
        assert!(!cloexec());
        assert!(set_cloexec(fd).unwrap());
        assert!(cloexec());
        assert!(!set_cloexec(fd).unwrap());
        assert!(set_cloexec(-1).is_err());
    }

    #[test]
    fn the_table_grows_and_the_limit_stays() {
        use std::os::fd::AsRawFd;
        let before = crate::sys::nofile_limit();
        let at = i32::try_from(before.1.min(4096)).unwrap() - 1;
        grow_fd_table(at).unwrap();
        assert_eq!(crate::sys::nofile_limit(), before);
        // The kernel's table (its size is in /proc/self/status as FDSize) now holds `at`.
        let size = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("FDSize:")
                    .map(|v| v.trim().parse::<i32>().unwrap())
            })
            .unwrap();
        assert!(size > at, "FDSize {size}");
        // Nothing is left open up there.
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(f.as_raw_fd() < at);
        assert!(!std::path::Path::new(&format!("/proc/self/fd/{at}")).exists());
        let too_far = i32::try_from(before.1.min(i32::MAX as u64)).unwrap();
        assert!(grow_fd_table(too_far).is_err());
    }
}

//! Safe wrappers over the few libc calls the library needs. Every `unsafe` block of the library
//! outside the FFI modules lives here, one per call.

/// CPU time and peak RSS from `getrusage`/`wait4`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rusage {
    /// User + system CPU seconds.
    pub cpu_seconds: f64,
    /// Peak resident set size in bytes (`ru_maxrss`): for children, that of the largest one.
    pub maxrss_bytes: u64,
}

impl From<&libc::rusage> for Rusage {
    fn from(r: &libc::rusage) -> Self {
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Rusage {
            cpu_seconds: tv(r.ru_utime) + tv(r.ru_stime),
            maxrss_bytes: (r.ru_maxrss.max(0) as u64) * 1024,
        }
    }
}

/// Which resource usage [`rusage`] reads.
#[derive(Debug, Clone, Copy)]
pub enum Who {
    /// The calling process.
    SelfProcess,
    /// Every child the process has waited for, and their waited-for descendants.
    Children,
    /// The calling thread.
    Thread,
}

/// `getrusage(2)`.
pub fn rusage(who: Who) -> Rusage {
    let w = match who {
        Who::SelfProcess => libc::RUSAGE_SELF,
        Who::Children => libc::RUSAGE_CHILDREN,
        Who::Thread => libc::RUSAGE_THREAD,
    };
    // SAFETY: `ru` is a plain C struct for which all-zero bytes are valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; `w` is a valid selector.
    let rc = unsafe { libc::getrusage(w, &mut ru) };
    if rc == 0 {
        Rusage::from(&ru)
    } else {
        Rusage::default()
    }
}

/// CPU time of the calling thread, in seconds, at nanosecond resolution.
pub fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc == 0 {
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    } else {
        0.0
    }
}

/// The effective user id of the process (all threads share it: glibc's `seteuid` changes it
/// for every thread).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Gives user `uid` read access to `path` (and search access, for a directory) with a POSIX
/// access ACL, on top of its mode: group and others keep no access. Replaces any ACL there.
pub fn grant_user_read(path: &std::path::Path, uid: u32, dir: bool) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    // The kernel's xattr form of an access ACL: a version, then (tag, perm, id) entries sorted
    // by tag (USER_OBJ, USER, GROUP_OBJ, MASK, OTHER).
    const VERSION: u32 = 2;
    const USER_OBJ: u16 = 0x01;
    const USER: u16 = 0x02;
    const GROUP_OBJ: u16 = 0x04;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;
    const UNDEFINED_ID: u32 = u32::MAX;
    let (owner, read) = if dir { (7u16, 5u16) } else { (6u16, 4u16) };
    let mut buf = VERSION.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (USER_OBJ, owner, UNDEFINED_ID),
        (USER, read, uid),
        (GROUP_OBJ, 0, UNDEFINED_ID),
        (MASK, read, UNDEFINED_ID),
        (OTHER, 0, UNDEFINED_ID),
    ] {
        buf.extend_from_slice(&tag.to_le_bytes());
        buf.extend_from_slice(&perm.to_le_bytes());
        buf.extend_from_slice(&id.to_le_bytes());
    }
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: both strings are NUL-terminated, and `buf` is valid for `buf.len()` bytes.
    let rc = unsafe {
        libc::lsetxattr(
            c_path.as_ptr(),
            c"system.posix_acl_access".as_ptr(),
            buf.as_ptr().cast(),
            buf.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Appends `text` to the file already open on descriptor `fd` (the job's output, inherited by
/// slurmstepd), without opening any path. Refuses unless the descriptor is a regular file owned
/// by `uid` with one link: a file Slurm opened for that user, not one a user pointed at
/// something of root's.
pub fn write_to_job_output(fd: i32, text: &[u8], uid: u32) -> Result<(), String> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer; fstat only reads `fd`'s metadata.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(format!(
            "descriptor {fd}: {}",
            std::io::Error::last_os_error()
        ));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(format!("descriptor {fd} is not a regular file"));
    }
    if st.st_uid != uid {
        return Err(format!(
            "descriptor {fd} is a file owned by uid {}, not the job's user ({uid})",
            st.st_uid
        ));
    }
    if st.st_nlink != 1 {
        return Err(format!(
            "descriptor {fd} is a file with {} links",
            st.st_nlink
        ));
    }
    let mut rest = text;
    while !rest.is_empty() {
        // SAFETY: `rest` is valid for `rest.len()` bytes; write only reads it.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("descriptor {fd}: {e}"));
        }
        rest = &rest[usize::try_from(n).unwrap_or(rest.len()).min(rest.len())..];
    }
    Ok(())
}

/// The kernel id of the calling thread.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// Makes the calling process a child subreaper: orphaned descendants are re-parented to it
/// instead of init, so they stay in the tracked tree.
pub fn set_child_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes one integer argument; others are ignored.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// How a waited-for child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It called exit with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled {
        /// The signal.
        signal: i32,
        /// Whether it dumped core.
        core: bool,
    },
}

impl ExitStatus {
    /// The exit code a shell would give: the code, or 128 + signal.
    pub fn shell_code(&self) -> i32 {
        match *self {
            ExitStatus::Exited(c) => c,
            ExitStatus::Signaled { signal, .. } => 128 + signal,
        }
    }
}

/// Name of a signal (`SIGKILL`), or its number.
pub fn signal_name(sig: i32) -> String {
    let known = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGXCPU, "SIGXCPU"),
    ];
    known
        .iter()
        .find(|(n, _)| *n == sig)
        .map(|(_, s)| s.to_string())
        .unwrap_or_else(|| format!("signal {sig}"))
}

/// Waits until some child has ended, without reaping it, and returns its pid. While it is not
/// reaped, its `/proc/<pid>/stat` still holds its final CPU times, its own apart from its
/// children's, which `wait4`'s usage adds together.
pub fn wait_any_ended() -> std::io::Result<i32> {
    loop {
        // SAFETY: all-zero bytes are a valid siginfo_t.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable siginfo_t; the id is ignored with P_ALL.
        let rc = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        // SAFETY: waitid succeeded with WEXITED, so the kernel filled the child fields.
        return Ok(unsafe { info.si_pid() });
    }
}

/// `wait4(pid, ...)`, blocking, retried on EINTR. `pid` -1 waits for any child. Returns the
/// pid that ended, how, and its resource usage (own plus its waited-for descendants).
pub fn wait4(pid: i32) -> std::io::Result<(i32, ExitStatus, Rusage)> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: all-zero bytes are a valid rusage.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `status` and `ru` are valid, writable locals.
        let got = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if got < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        let how = if libc::WIFEXITED(status) {
            ExitStatus::Exited(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            ExitStatus::Signaled {
                signal: libc::WTERMSIG(status),
                core: libc::WCOREDUMP(status),
            }
        } else {
            continue; // stopped/continued: not reported without WUNTRACED
        };
        return Ok((got, how, Rusage::from(&ru)));
    }
}

/// Pid that [`forward_signals_to`] relays termination signals to.
static FORWARD_TO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn relay_signal(sig: libc::c_int) {
    // A signal handler must not unwind into the kernel's frame; kill cannot panic, but the
    // guard keeps the promise every extern "C" function of the project makes.
    let _ = std::panic::catch_unwind(|| {
        let pid = FORWARD_TO.load(std::sync::atomic::Ordering::Relaxed);
        if pid > 0 {
            // SAFETY: kill is async-signal-safe and takes plain integers.
            unsafe { libc::kill(pid, sig) };
        }
    });
}

/// Relays SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 received by this process to `pid`, so that
/// `kill <tracker>` (or a batch system's) reaches the tracked command, and the tracker lives on
/// to report.
pub fn forward_signals_to(pid: u32) -> std::io::Result<()> {
    FORWARD_TO.store(pid as i32, std::sync::atomic::Ordering::Relaxed);
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2] {
        // SAFETY: all-zero bytes are a valid sigaction; the fields set below are valid.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = relay_signal as *const () as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        // SAFETY: `sa` is a valid sigaction and the handler is async-signal-safe.
        let rc = unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sets SIGINT and SIGQUIT to `disposition` (`libc::SIG_IGN` or `libc::SIG_DFL`). The tracker
/// ignores them, as `time(1)` does: Ctrl-C goes to the whole foreground process group, so the
/// command gets it and the tracker stays to report. Async-signal-safe (used in pre-exec too).
pub fn set_interactive_signals(disposition: libc::sighandler_t) -> std::io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGQUIT] {
        // SAFETY: signal with SIG_IGN/SIG_DFL installs no code; it is async-signal-safe.
        if unsafe { libc::signal(sig, disposition) } == libc::SIG_ERR {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Spawns `sh -c <command>` (see [`crate::shell`]), the child first joining the cgroup whose `cgroup.procs` is open as
/// `cgroup_procs` (so nothing it starts escapes the accounting) and restoring SIGINT/SIGQUIT.
pub fn spawn_shell(
    command: &str,
    cgroup_procs: Option<std::os::fd::RawFd>,
) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c").arg(crate::shell::shell_script(command));
    let hook = move || {
        if let Some(fd) = cgroup_procs {
            crate::cgroup::own::join_self(fd)?;
        }
        set_interactive_signals(libc::SIG_DFL)
    };
    // SAFETY: the hook runs between fork and exec and only makes async-signal-safe calls
    // (getpid, write, signal); it allocates nothing.
    unsafe { cmd.pre_exec(hook) };
    cmd.spawn()
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

/// Keeps the object holding this code (the plugin's `.so` inside slurmstepd) mapped until the
/// process ends, whatever `dlclose` is called later: for a thread left running in it. Fails
/// where the object cannot be looked up again by its name (the main program, say).
pub fn pin_this_object() -> std::io::Result<()> {
    // SAFETY: all-zero bytes are a valid `Dl_info` (null pointers) for dladdr to fill.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let addr = pin_this_object as fn() -> std::io::Result<()> as *const libc::c_void;
    // SAFETY: `addr` is an address inside this object; `info` is a valid, writable Dl_info.
    let found = unsafe { libc::dladdr(addr, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return Err(std::io::Error::other("dladdr found no object"));
    }
    let flags = libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE;
    // SAFETY: `dli_fname` is the loader's NUL-terminated name of a loaded object; with
    // RTLD_NOLOAD dlopen loads nothing new and runs no initializer, it only marks the object.
    let handle = unsafe { libc::dlopen(info.dli_fname, flags) };
    if handle.is_null() {
        return Err(std::io::Error::other("dlopen(RTLD_NOLOAD) found no object"));
    }
    // The reference taken here is never dropped: the object stays for the process's life.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_output_is_written_only_to_the_users_own_plain_file() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("gt-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out");
        let f = std::fs::File::create(&path).unwrap();
        let me = f.metadata().unwrap().uid();
        write_to_job_output(f.as_raw_fd(), b"summary\n", me).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "summary\n");
        // Someone else's file (as a root-owned target is to a job's user), or a second link.
        let e = write_to_job_output(f.as_raw_fd(), b"x", me + 1).unwrap_err();
        assert!(e.contains("owned by uid"), "{e}");
        std::fs::hard_link(&path, dir.join("link")).unwrap();
        let e = write_to_job_output(f.as_raw_fd(), b"x", me).unwrap_err();
        assert!(e.contains("2 links"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "summary\n");
        let null = std::fs::File::options()
            .write(true)
            .open("/dev/null")
            .unwrap();
        assert!(write_to_job_output(null.as_raw_fd(), b"x", me).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn shell_codes() {
        assert_eq!(ExitStatus::Exited(3).shell_code(), 3);
        let s = ExitStatus::Signaled {
            signal: libc::SIGKILL,
            core: false,
        };
        assert_eq!(s.shell_code(), 137);
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(64), "signal 64");
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
    fn own_usage_is_positive() {
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        assert!(rusage(Who::SelfProcess).maxrss_bytes > 0);
        assert!(thread_cpu_seconds() > 0.0);
    }
}

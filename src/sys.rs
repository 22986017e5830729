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

/// The real user id of the process.
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

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

/// The login name of user `uid` from the system's user database (`None`: no such user, or
/// the lookup failed).
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: an all-zero passwd is a valid value for getpwuid_r to overwrite.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: `pw`, `buf` (with its true length) and `found` are valid for writes for the call.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points at a NUL-terminated string inside `buf`, alive here.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    Some(name.to_string_lossy().into_owned())
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

/// How long [`write_to_job_output`] waits for the job's output to take the summary.
pub const JOB_OUTPUT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// The filesystem type (`ext4`, `nfs4`, `fuse.sshfs`, ...) of the file open on descriptor `fd`
/// of this process, from the kernel's tables (`/proc/self/fdinfo`'s `mnt_id`, then
/// `/proc/self/mountinfo`): nothing is asked of the filesystem itself, which may not answer.
pub fn fd_filesystem_type(fd: i32) -> Option<String> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    let mnt_id = info
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))?
        .trim()
        .to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split(' ');
        (f.next()? == mnt_id).then_some(())?;
        // After the optional fields comes "-", then the filesystem type.
        let mut rest = l.split(" - ").nth(1)?.split(' ');
        rest.next().map(str::to_string)
    })
}

/// Whether a filesystem of type `fstype` is served by a user-space daemon (FUSE): once such a
/// daemon has taken a write, the kernel waits for its answer uninterruptibly, so a daemon that
/// stops answering keeps the writing process, and slurmstepd with it, from ever exiting.
pub fn is_fuse(fstype: &str) -> bool {
    fstype == "fuse" || fstype == "fuseblk" || fstype.starts_with("fuse.")
}

/// [`write_to_job_output_within`] with the deadline [`JOB_OUTPUT_DEADLINE`].
pub fn write_to_job_output(fd: i32, text: &[u8], uid: u32) -> Result<(), String> {
    write_to_job_output_within(fd, text, uid, JOB_OUTPUT_DEADLINE)
}

/// Appends `text` to the file already open on descriptor `fd` (the job's output, inherited by
/// slurmstepd), without opening any path. Refuses unless the descriptor is a regular file owned
/// by `uid` with one link: a file Slurm opened for that user, not one a user pointed at
/// something of root's.
///
/// Bounded: a write that takes nothing (returns 0) is an error, and the checks and the writes
/// run on a helper thread that the caller waits for at most `deadline`. The file may be on a
/// network or FUSE filesystem that stops answering, and then `fstat` or `write` stays blocked
/// in the kernel; the caller returns at the deadline with an error all the same. The thread
/// holds only its own copy of the text and its own duplicate of the descriptor (close-on-exec),
/// so the caller may close `fd`; the thread ends, and closes the duplicate, when the kernel lets
/// it go. Until then the process cannot finish exiting: a FUSE request already taken by its
/// daemon is waited for uninterruptibly, even by a killed process (tests/hangfs.py shows it).
pub fn write_to_job_output_within(
    fd: i32,
    text: &[u8],
    uid: u32,
    deadline: std::time::Duration,
) -> Result<(), String> {
    write_fd_within(fd, text, deadline, move |fd| check_job_output(fd, uid))
}

/// Checks that descriptor `fd` is a regular file owned by `uid` with one link.
fn check_job_output(fd: std::os::fd::BorrowedFd<'_>, uid: u32) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let fd = fd.as_raw_fd();
    // SAFETY: an all-zero `stat` is a valid value to be overwritten by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer; fstat only reads `fd`'s metadata.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err("not a regular file".into());
    }
    if st.st_uid != uid {
        return Err(format!(
            "a file owned by uid {}, not the job's user ({uid})",
            st.st_uid
        ));
    }
    if st.st_nlink != 1 {
        return Err(format!("a file with {} links", st.st_nlink));
    }
    Ok(())
}

/// `check`s descriptor `fd`, then writes all of `text` to it, on a helper thread given its own
/// duplicate of `fd`; waits for it at most `deadline`.
fn write_fd_within(
    fd: i32,
    text: &[u8],
    deadline: std::time::Duration,
    check: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> Result<(), String> + Send + 'static,
) -> Result<(), String> {
    use std::os::fd::{AsFd, AsRawFd};
    let own = dup_cloexec(fd).map_err(|e| format!("descriptor {fd}: {e}"))?;
    let text = text.to_vec();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("gpu-tracker-out".into())
        .spawn(move || {
            let fd = own.as_fd();
            let done = check(fd).and_then(|()| {
                write_all_with(&text, |buf| {
                    // SAFETY: `buf` is valid for `buf.len()` bytes; write only reads it, and
                    // `fd` is open: the thread owns it.
                    let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
                    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
                })
                .map_err(|e| e.to_string())
            });
            // The caller may have stopped waiting: then nobody needs the result.
            let _ = tx.send(done);
        })
        .map_err(|e| format!("descriptor {fd}: no thread to write with: {e}"))?;
    match rx.recv_timeout(deadline) {
        Ok(done) => done.map_err(|e| format!("descriptor {fd}: {e}")),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(format!(
            "the job's output did not accept the summary within {} s: the write to descriptor {fd} is \
             still blocked in the kernel (a network or FUSE filesystem that does not answer?)",
            deadline.as_secs_f64()
        )),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(format!(
            "descriptor {fd}: the writing thread ended without a result"
        )),
    }
}

/// Writes all of `text` through `write` (one `write(2)`-like call: bytes taken, or an error),
/// retrying on EINTR. Taking 0 bytes of a non-empty buffer is an error, not a reason to retry.
fn write_all_with(
    text: &[u8],
    mut write: impl FnMut(&[u8]) -> std::io::Result<usize>,
) -> std::io::Result<()> {
    let mut rest = text;
    while !rest.is_empty() {
        match write(rest) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    format!(
                        "write took 0 bytes, {} of {} left unwritten",
                        rest.len(),
                        text.len()
                    ),
                ));
            }
            Ok(n) => rest = &rest[n.min(rest.len())..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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

fn dup_cloexec(fd: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    dup_cloexec_from(fd, 0)
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
    env: &[(&str, &std::ffi::OsStr)],
) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c").arg(crate::shell::shell_script(command));
    for (k, v) in env {
        cmd.env(k, v);
    }
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

/// This machine's short host name (up to the first dot); empty when unknown.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().split('.').next().unwrap_or("").to_string())
        .unwrap_or_default()
}

/// Asks the kernel to attach the sender's credentials to every datagram `sock` receives (for
/// [`recv_with_sender`]).
pub fn pass_credentials(sock: &std::os::unix::net::UnixDatagram) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: SO_PASSCRED takes an int; `on` lives across the call and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one datagram into `buf` without waiting, with the uid the kernel vouches for (the
/// socket has [`pass_credentials`] on). `Ok(None)`: nothing is waiting. A datagram without
/// credentials (which a socket with `SO_PASSCRED` never gets) comes with uid `None`.
pub fn recv_with_sender(
    sock: &std::os::unix::net::UnixDatagram,
    buf: &mut [u8],
) -> std::io::Result<Option<(usize, Option<u32>)>> {
    use std::os::fd::AsRawFd;
    // Room for one SCM_CREDENTIALS message, 8-byte aligned as cmsghdr needs.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: all-zero bytes are a valid msghdr (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` points at `iov` (over `buf`) and `control`, both alive and writable for the
    // call; MSG_DONTWAIT makes it return at once.
    let n = unsafe {
        libc::recvmsg(
            sock.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        };
    }
    let mut uid = None;
    // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR reads its control fields only.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: a non-null header from CMSG_FIRSTHDR/CMSG_NXTHDR lies inside `control`.
        let (level, kind) = unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type) };
        if level == libc::SOL_SOCKET && kind == libc::SCM_CREDENTIALS {
            // SAFETY: an SCM_CREDENTIALS message carries one `ucred`; it may be unaligned.
            let cred: libc::ucred =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
            uid = Some(cred.uid);
        }
        // SAFETY: `cmsg` is a header inside `msg`'s control buffer (see above).
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    Ok(Some((n as usize, uid)))
}

/// This process's open-file limit: (soft, hard).
pub fn nofile_limit() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    if rc == 0 {
        (lim.rlim_cur, lim.rlim_max)
    } else {
        (0, 0)
    }
}

/// Raises this process's soft open-file limit to its hard one; returns the soft limit now.
/// Processes started before the call keep the limit they had.
pub fn raise_nofile_limit() -> u64 {
    let (soft, hard) = nofile_limit();
    if hard > soft {
        let lim = libc::rlimit {
            rlim_cur: hard,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads one rlimit we own; raising soft up to hard needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
            return hard;
        }
    }
    soft
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

/// The size of a memory page, in bytes.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions and only reads a constant.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u64 } else { 4096 }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filesystem_types_come_from_the_kernels_tables() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(fd_filesystem_type(f.as_raw_fd()).as_deref(), Some("proc"));
        assert_eq!(fd_filesystem_type(987_654), None);
        assert!(is_fuse("fuse.sshfs") && is_fuse("fuseblk") && !is_fuse("nfs4"));
    }

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
    fn a_write_that_takes_nothing_is_an_error_not_a_loop() {
        let mut calls = 0;
        let e = write_all_with(b"summary", |_| {
            calls += 1;
            Ok(0)
        })
        .unwrap_err();
        assert_eq!(calls, 1);
        assert_eq!(e.kind(), std::io::ErrorKind::WriteZero);
        assert!(e.to_string().contains("7 of 7 left"), "{e}");
        // Short writes and EINTR go on; what was taken is not written again.
        let mut got = Vec::new();
        let mut interrupted = false;
        write_all_with(b"0123456789", |buf| {
            if !interrupted {
                interrupted = true;
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(3);
            got.extend_from_slice(&buf[..n]);
            Ok(n)
        })
        .unwrap();
        assert_eq!(got, b"0123456789");
        let e = write_all_with(b"x", |_| {
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        })
        .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        write_all_with(b"", |_| panic!("nothing to write")).unwrap();
    }

    /// A socket whose send buffer is full: the next blocking write to it blocks.
    fn full_socket() -> (
        std::os::unix::net::UnixStream,
        std::os::unix::net::UnixStream,
    ) {
        use std::io::Write;
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let chunk = [b'.'; 4096];
        loop {
            match (&a).write(&chunk) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        a.set_nonblocking(false).unwrap();
        (a, b)
    }

    #[test]
    fn a_blocked_write_returns_at_the_deadline_and_finishes_on_its_own_descriptor() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let (a, mut b) = full_socket();
        let t0 = std::time::Instant::now();
        let e = write_fd_within(
            a.as_raw_fd(),
            b"summary",
            std::time::Duration::from_millis(300),
            |_| Ok(()),
        )
        .unwrap_err();
        let took = t0.elapsed();
        assert!(
            e.starts_with(
                "the job's output did not accept the summary within 0.3 s: the write to descriptor"
            ),
            "{e}"
        );
        assert!(took >= std::time::Duration::from_millis(300), "{took:?}");
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
        // The caller closes its descriptor; the thread writes through its own duplicate once
        // the reader makes room, then closes it: the reader sees the text, then the end.
        drop(a);
        b.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let mut all = Vec::new();
        b.read_to_end(&mut all).unwrap();
        assert!(all.ends_with(b"....summary"));
    }

    #[test]
    fn the_checks_run_before_anything_is_written() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = write_fd_within(
            a.as_raw_fd(),
            b"summary",
            std::time::Duration::from_secs(10),
            |_| Err("refused".into()),
        )
        .unwrap_err();
        assert_eq!(e, format!("descriptor {}: refused", a.as_raw_fd()));
        drop(a);
        let mut all = Vec::new();
        b.read_to_end(&mut all).unwrap();
        assert!(all.is_empty());
        // A descriptor that is not open.
        let e =
            write_to_job_output_within(-1, b"x", 0, std::time::Duration::from_secs(1)).unwrap_err();
        assert!(e.starts_with("descriptor -1: "), "{e}");
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

    /// A mounted tests/hangfs.py in a temporary directory, stopped and removed on drop.
    struct HangFs {
        base: std::path::PathBuf,
        child: std::process::Child,
    }

    impl HangFs {
        fn mount() -> HangFs {
            let base = std::env::temp_dir().join(format!("gt-hangfs-unit-{}", std::process::id()));
            for d in ["backing", "mnt", "control"] {
                std::fs::create_dir_all(base.join(d)).unwrap();
            }
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hangfs.py");
            let child = std::process::Command::new("/usr/bin/python3")
                .arg(script)
                .arg("--control")
                .args([base.join("control"), base.join("backing"), base.join("mnt")])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("run tests/hangfs.py (apt-get install python3-pyfuse3 fuse3)");
            let mnt = base.join("mnt").display().to_string();
            let t0 = std::time::Instant::now();
            while !std::fs::read_to_string("/proc/self/mounts")
                .unwrap()
                .contains(&mnt)
            {
                assert!(t0.elapsed().as_secs() < 120, "hangfs did not mount");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            HangFs { base, child }
        }
    }

    impl Drop for HangFs {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(self.base.join("control/hang"));
            let _ = std::fs::remove_file(self.base.join("control/zero"));
            // SAFETY: kill with a child's pid and SIGTERM has no memory effects.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let _ = self.child.wait();
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    /// Against a real FUSE file that stops answering (tests/hangfs.py, which needs root and
    /// Debian's python3-pyfuse3; `tests/run-all.sh` runs it).
    #[test]
    #[ignore = "mounts tests/hangfs.py: needs root and python3-pyfuse3 (tests/run-all.sh)"]
    fn hangfs_hang_and_zero() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        use std::time::{Duration, Instant};
        let fs = HangFs::mount();
        let mnt = fs.base.join("mnt");
        let control = fs.base.join("control");
        let path = mnt.join(format!("out-{}", std::process::id()));
        let f = std::fs::File::options()
            .create_new(true)
            .append(true)
            .open(&path)
            .unwrap();
        let uid = f.metadata().unwrap().uid();
        write_to_job_output_within(f.as_raw_fd(), b"one\n", uid, Duration::from_secs(2)).unwrap();

        std::fs::write(control.join("hang"), "").unwrap();
        let t0 = Instant::now();
        let e = write_to_job_output_within(f.as_raw_fd(), b"two\n", uid, Duration::from_secs(2))
            .unwrap_err();
        let took = t0.elapsed();
        eprintln!("hang: after {took:?}: {e}");
        assert!(e.contains("did not accept the summary within 2 s"), "{e}");
        assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(4));
        std::fs::remove_file(control.join("hang")).unwrap();
        // The blocked thread's "two" goes through now.
        let t0 = Instant::now();
        while !std::fs::read_to_string(&path).unwrap().contains("two") {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the blocked write never ended"
            );
            std::thread::sleep(Duration::from_millis(50));
        }

        std::fs::write(control.join("zero"), "").unwrap();
        let e = write_to_job_output_within(f.as_raw_fd(), b"three\n", uid, Duration::from_secs(2))
            .unwrap_err();
        eprintln!("zero: {e}");
        assert!(e.contains("write took 0 bytes"), "{e}");
        std::fs::remove_file(control.join("zero")).unwrap();

        write_to_job_output_within(f.as_raw_fd(), b"four\n", uid, Duration::from_secs(2)).unwrap();
        // "three" was refused.
        let text = std::fs::read_to_string(&path).unwrap();
        eprintln!("file: {text:?}");
        assert_eq!(text, "one\ntwo\nfour\n");
        std::fs::remove_file(&path).unwrap();
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

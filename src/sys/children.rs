//! The tracked command and its descendants: spawning it, waiting for it, signals.

use super::process::Rusage;

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

/// How a spawned child joins a cgroup of its own between fork and exec (see [`spawn_shell`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupJoin {
    /// Writes the child's pid to this open `cgroup.procs` (cgroup v2).
    Procs(std::os::fd::RawFd),
    /// Writes `0`, the writing thread, to this open cgroup v1 `tasks` file. Just after fork
    /// the child has one thread, so that moves the whole process. The kernel moves the calling
    /// thread alone without taking its global lock on thread groups (`cgroup_procs_write_start`,
    /// seen on Linux 6.18), while moving a process takes it, and taking it waits for an RCU
    /// grace period when no other move came just before: 5 to 15 ms here, before the command
    /// started. A kernel that takes the lock all the same is only as slow as before.
    Tasks(std::os::fd::RawFd),
}

/// Moves the calling process into the cgroup of `join`. Async-signal-safe: meant for the child
/// between fork and exec, so it allocates nothing.
pub fn join_cgroup(join: CgroupJoin) -> std::io::Result<()> {
    let (fd, pid) = match join {
        // SAFETY: getpid has no preconditions and cannot fail.
        CgroupJoin::Procs(fd) => (fd, unsafe { libc::getpid() } as u32),
        CgroupJoin::Tasks(fd) => (fd, 0),
    };
    let mut buf = [0u8; 10];
    let mut n = pid;
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let digits = &buf[i..];
    // SAFETY: `digits` is a valid readable slice for its length; write does not keep the pointer.
    let w = unsafe { libc::write(fd, digits.as_ptr().cast(), digits.len()) };
    if w == digits.len() as isize {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Spawns `sh -c <command>` (see [`crate::shell`]), the child first joining the cgroup of
/// `cgroup` (so nothing it starts escapes the accounting) and restoring SIGINT/SIGQUIT.
pub fn spawn_shell(
    command: &str,
    cgroup: Option<CgroupJoin>,
    env: &[(&str, &std::ffi::OsStr)],
) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c").arg(crate::shell::shell_script(command));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let hook = move || {
        if let Some(join) = cgroup {
            join_cgroup(join)?;
        }
        set_interactive_signals(libc::SIG_DFL)
    };
    // SAFETY: the hook runs between fork and exec and only makes async-signal-safe calls
    // (getpid, write, signal); it allocates nothing.
    unsafe { cmd.pre_exec(hook) };
    cmd.spawn()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

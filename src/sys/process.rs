//! Facts about this process and its threads: ids, resource usage, limits, the host name,
//! and keeping the plugin's object mapped.

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

/// The version of the C library this process runs on (`gnu_get_libc_version`), such as
/// `2.36`: the node's glibc, which every program and plugin on it loads. Empty where this
/// program is not built for glibc.
#[cfg(not(target_env = "gnu"))]
pub fn glibc_version() -> String {
    String::new()
}

/// The version of the C library this process runs on (`gnu_get_libc_version`), such as
/// `2.36`: the node's glibc, which every program and plugin on it loads.
#[cfg(target_env = "gnu")]
pub fn glibc_version() -> String {
    // SAFETY: gnu_get_libc_version has no preconditions and returns a static, NUL-terminated
    // string that lives as long as the process.
    let p = unsafe { libc::gnu_get_libc_version() };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: `p` is the non-null static string above.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// The real user id of the process.
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The kernel id of the calling thread. Through the system call, not glibc's `gettid`
/// wrapper: that one exists only from glibc 2.30, and the packages run on glibc 2.28 (RHEL 8).
pub fn gettid() -> u32 {
    // SAFETY: SYS_gettid takes no arguments, has no preconditions and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
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
    if hard > soft && set_nofile_limit(hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// Sets this process's open-file limit to (`soft`, `hard`).
pub(super) fn set_nofile_limit(soft: u64, hard: u64) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads one rlimit we own; a soft limit up to hard needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `sysconf(name)`, or `default` where the system has no positive answer.
fn sysconf_or(name: libc::c_int, default: u64) -> u64 {
    // SAFETY: sysconf has no preconditions and only reads a value of the system's.
    let v = unsafe { libc::sysconf(name) };
    if v > 0 { v as u64 } else { default }
}

/// The size of a memory page, in bytes.
pub fn page_size() -> u64 {
    sysconf_or(libc::_SC_PAGESIZE, 4096)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of CPU times in `/proc`.
pub fn clock_ticks() -> u64 {
    sysconf_or(libc::_SC_CLK_TCK, 100)
}

/// Number of CPUs online (`sysconf(_SC_NPROCESSORS_ONLN)`), at least 1.
pub fn online_cpus() -> u32 {
    u32::try_from(sysconf_or(libc::_SC_NPROCESSORS_ONLN, 1)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

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

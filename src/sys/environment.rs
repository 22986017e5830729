//! The process's own environment, replaced whole, and lines for the system log: for a program
//! run for another user (through sudo), which must take nothing from its caller's environment
//! and show nothing a child said.

/// Replaces this process's whole environment by `vars`: every variable it inherited is
/// removed first.
///
/// Only for the start of `main`, before any thread exists: the C library's `getenv` is not safe
/// against a concurrent change, which is why Rust makes these calls `unsafe`.
pub fn replace_environment_at_start(vars: &[(&str, &str)]) {
    let inherited: Vec<std::ffi::OsString> = std::env::vars_os().map(|(k, _)| k).collect();
    for k in inherited {
        // SAFETY: called at the start of `main`, while the process has one thread: nothing can
        // read the environment while it changes.
        unsafe { std::env::remove_var(&k) };
    }
    for (k, v) in vars {
        // SAFETY: as above: one thread, at the start of `main`.
        unsafe { std::env::set_var(k, v) };
    }
}

/// Writes `line` to the system log (`syslog(3)`, facility user, priority notice), tagged `tag`.
/// Characters that could steer a terminal or split the line are the caller's to remove.
pub fn syslog_line(tag: &str, line: &str) {
    let tag = std::ffi::CString::new(tag.replace('\0', "")).unwrap_or_default();
    let msg = std::ffi::CString::new(line.replace('\0', "")).unwrap_or_default();
    // SAFETY: `tag` is NUL-terminated and outlives the log call below (closelog forgets it);
    // openlog only keeps the pointer.
    unsafe { libc::openlog(tag.as_ptr(), libc::LOG_PID, libc::LOG_USER) };
    // SAFETY: the format is the literal "%s" and `msg` the one NUL-terminated argument it reads.
    unsafe { libc::syslog(libc::LOG_NOTICE, c"%s".as_ptr(), msg.as_ptr()) };
    // SAFETY: closelog takes no argument; it drops the tag pointer kept by openlog.
    unsafe { libc::closelog() };
}

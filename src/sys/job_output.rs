//! Appending the end-of-job summary to the job's output, through a descriptor already open,
//! checked and bounded in time.

use super::fd::dup_cloexec;

/// How long [`write_to_job_output`] waits for the job's output to take the summary.
pub const JOB_OUTPUT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

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
///
/// Never on FUSE: whether the descriptor is on a FUSE filesystem is found from the kernel's
/// tables at each call ([`super::fd_filesystem_type`]), without asking the filesystem, and such
/// a file is refused before anything touches it; so is a file whose filesystem those tables do
/// not name (a lazily unmounted mount, another mount namespace's, unreadable tables).
pub fn write_to_job_output_within(
    fd: i32,
    text: &[u8],
    uid: u32,
    deadline: std::time::Duration,
) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let own = dup_cloexec(fd).map_err(|e| format!("descriptor {fd}: {e}"))?;
    // Asked of the duplicate the helper thread writes to: the very file, whatever `fd` is
    // made to point at meanwhile.
    match super::fd_filesystem_type(own.as_raw_fd()) {
        Ok(fs) if super::is_fuse(&fs) => {
            return Err(format!(
                "descriptor {fd}: the job's output is on a {fs} filesystem, which could hold \
                 the step for ever: not written"
            ));
        }
        Ok(_) => {}
        // Fail closed: a filesystem nobody can name may be a FUSE one that stops answering.
        Err(why) => {
            return Err(format!(
                "descriptor {fd}: the job's output's filesystem cannot be told ({why}): not \
                 written"
            ));
        }
    }
    write_own_within(own, fd, text, deadline, move |fd| check_job_output(fd, uid))
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

/// [`write_own_within`] on a new duplicate of `fd`, without the refusal of FUSE files (the
/// tests of the deadline use a FUSE file that hangs).
#[cfg(test)]
fn write_fd_within(
    fd: i32,
    text: &[u8],
    deadline: std::time::Duration,
    check: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> Result<(), String> + Send + 'static,
) -> Result<(), String> {
    let own = dup_cloexec(fd).map_err(|e| format!("descriptor {fd}: {e}"))?;
    write_own_within(own, fd, text, deadline, check)
}

/// `check`s `own`, a duplicate of descriptor `fd`, then writes all of `text` to it, on a
/// helper thread that takes `own`; waits for it at most `deadline`.
fn write_own_within(
    own: std::os::fd::OwnedFd,
    fd: i32,
    text: &[u8],
    deadline: std::time::Duration,
    check: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> Result<(), String> + Send + 'static,
) -> Result<(), String> {
    use std::os::fd::{AsFd, AsRawFd};
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

    /// A mounted tests/hangfs.py in a temporary directory, stopped and removed on drop.
    struct HangFs {
        base: std::path::PathBuf,
        child: std::process::Child,
    }

    impl HangFs {
        fn mount(tag: &str) -> HangFs {
            let base =
                std::env::temp_dir().join(format!("gt-hangfs-unit-{tag}-{}", std::process::id()));
            for d in ["backing", "mnt", "control"] {
                std::fs::create_dir_all(base.join(d)).unwrap();
            }
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hangfs.py");
            let log = base.join("hangfs.log");
            let mut child = std::process::Command::new("/usr/bin/python3")
                .arg(script)
                .arg("--control")
                .args([base.join("control"), base.join("backing"), base.join("mnt")])
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("run /usr/bin/python3 tests/hangfs.py (tests/run-all.sh installs python3)");
            let mnt = base.join("mnt").display().to_string();
            let t0 = std::time::Instant::now();
            while !std::fs::read_to_string("/proc/self/mounts")
                .unwrap()
                .contains(&mnt)
            {
                // A script that cannot start (no pyfuse3, no /dev/fuse) says why at once.
                if let Some(rc) = child.try_wait().unwrap() {
                    let why = std::fs::read_to_string(&log).unwrap_or_default();
                    panic!(
                        "tests/hangfs.py exited ({rc}) before mounting; tests/run-all.sh installs fuse3 and python3-pyfuse3 and skips this test where /dev/fuse is missing:\n{why}"
                    );
                }
                assert!(
                    t0.elapsed().as_secs() < 120,
                    "hangfs did not mount in 120 s"
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            HangFs { base, child }
        }

        /// A new file at `path` (on the mount) open for appending, and its owner.
        fn new_output(&self, path: &std::path::Path) -> (std::fs::File, u32) {
            use std::os::unix::fs::MetadataExt;
            let f = std::fs::File::options()
                .create_new(true)
                .append(true)
                .open(path)
                .unwrap();
            let uid = f.metadata().unwrap().uid();
            (f, uid)
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
        let fs = HangFs::mount("hang");
        let mnt = fs.base.join("mnt");
        let control = fs.base.join("control");
        let path = mnt.join(format!("out-{}", std::process::id()));
        let f = std::fs::File::options()
            .create_new(true)
            .append(true)
            .open(&path)
            .unwrap();
        let uid = f.metadata().unwrap().uid();
        // The checks and the deadline, past the refusal of FUSE files (a network filesystem
        // can hang as well).
        let within = |text: &[u8], deadline| {
            write_fd_within(f.as_raw_fd(), text, deadline, move |fd| {
                check_job_output(fd, uid)
            })
        };
        within(b"one\n", Duration::from_secs(2)).unwrap();

        std::fs::write(control.join("hang"), "").unwrap();
        let t0 = Instant::now();
        let e = within(b"two\n", Duration::from_secs(2)).unwrap_err();
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
        let e = within(b"three\n", Duration::from_secs(2)).unwrap_err();
        eprintln!("zero: {e}");
        assert!(e.contains("write took 0 bytes"), "{e}");
        std::fs::remove_file(control.join("zero")).unwrap();

        within(b"four\n", Duration::from_secs(2)).unwrap();
        // "three" was refused.
        let text = std::fs::read_to_string(&path).unwrap();
        eprintln!("file: {text:?}");
        assert_eq!(text, "one\ntwo\nfour\n");
        std::fs::remove_file(&path).unwrap();
    }

    /// The job's output on a FUSE file (tests/hangfs.py): nothing is written, whatever the
    /// file did when the step started, and a file that hangs costs no wait.
    #[test]
    #[ignore = "mounts tests/hangfs.py: needs root and python3-pyfuse3 (tests/run-all.sh)"]
    fn hangfs_a_job_output_on_fuse_is_never_written() {
        use std::os::fd::AsRawFd;
        use std::time::{Duration, Instant};
        let fs = HangFs::mount("refuse");
        let path = fs.base.join("mnt/out");
        let (f, uid) = fs.new_output(&path);
        let e = write_to_job_output(f.as_raw_fd(), b"warning\n", uid).unwrap_err();
        assert!(e.contains("on a fuse"), "{e}");
        std::fs::write(fs.base.join("control/hang"), "").unwrap();
        let t0 = Instant::now();
        let e = write_to_job_output(f.as_raw_fd(), b"warning\n", uid).unwrap_err();
        assert!(e.contains("on a fuse"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        std::fs::remove_file(fs.base.join("control/hang")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }

    /// The job's output on a FUSE file that was lazily unmounted after it was opened
    /// (`umount -l`, as `fusermount3 -u -z` does): the descriptor's mount is in no mount table,
    /// its filesystem cannot be told, and nothing is written, with no wait, even while the
    /// daemon does not answer.
    #[test]
    #[ignore = "mounts tests/hangfs.py: needs root and python3-pyfuse3 (tests/run-all.sh)"]
    fn hangfs_a_lazily_unmounted_job_output_is_never_written() {
        use std::os::fd::AsRawFd;
        use std::time::{Duration, Instant};
        let fs = HangFs::mount("lazy");
        let path = fs.base.join("mnt/out");
        let (f, uid) = fs.new_output(&path);
        let unmounted = std::process::Command::new("umount")
            .arg("-l")
            .arg(fs.base.join("mnt"))
            .status()
            .unwrap();
        assert!(unmounted.success());
        std::fs::write(fs.base.join("control/hang"), "").unwrap();
        let t0 = Instant::now();
        let e =
            write_to_job_output_within(f.as_raw_fd(), b"summary\n", uid, Duration::from_secs(5))
                .unwrap_err();
        assert!(e.contains("cannot be told"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        std::fs::remove_file(fs.base.join("control/hang")).unwrap();
        assert_eq!(
            std::fs::read_to_string(fs.base.join("backing/out")).unwrap(),
            ""
        );
    }

    #[test]
    fn a_filesystem_is_named_only_from_a_mount_in_the_table() {
        use crate::sys::filesystem_type_of;
        let mountinfo = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                         98 22 0:51 / /home/u/mnt rw,nosuid,nodev - fuse.hangfs hangfs rw\n";
        let fdinfo = |id: &str| format!("pos:\t0\nflags:\t02102001\nmnt_id:\t{id}\nino:\t5\n");
        assert_eq!(
            filesystem_type_of(&fdinfo("22"), mountinfo).unwrap(),
            "ext4"
        );
        assert_eq!(
            filesystem_type_of(&fdinfo("98"), mountinfo).unwrap(),
            "fuse.hangfs"
        );
        // Lazily unmounted, or of another mount namespace: not in the table.
        let e = filesystem_type_of(&fdinfo("99"), mountinfo).unwrap_err();
        assert!(e.contains("mount 99 is in no mount table"), "{e}");
        // An id that is a prefix of another's is not that mount.
        assert!(filesystem_type_of(&fdinfo("2"), mountinfo).is_err());
        assert!(filesystem_type_of("pos:\t0\n", mountinfo).is_err());
        assert!(filesystem_type_of(&fdinfo("22"), "").is_err());
    }
}

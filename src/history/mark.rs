//! Phase marks: `gpu-tracker mark NAME` (or [`send`] from Rust, or one datagram from any
//! language) tells the tracker of the step that a phase named NAME begins.
//!
//! The tracker listens on a Unix datagram socket ([`Inbox`]); the environment variable
//! [`ENV`] in the job (or the command run by `gpu-tracker -e`) holds a path prefix, and every
//! socket `<prefix>*.sock` belongs to a tracker of that job on this node (the batch step and
//! every `srun` step running there). A mark costs the job one `sendto` per socket: no file is
//! written, nothing waits for an answer.
//!
//! The datagram is text: `gpu-tracker-mark 1\n<unix seconds>\n<name>`. Only the job's user
//! (and root) can send one: the socket file is theirs, mode 0600, and sending to a Unix socket
//! needs write permission on it. The kernel also tells the tracker who sent each datagram
//! (`SO_PASSCRED`): should the user open their socket to others, marks of any other user are
//! still dropped. A time more than an hour old or in the future is replaced by the time of
//! receipt. Names are cut to [`MAX_NAME`] characters, control characters removed.
//!
//! A flood costs the receiving thread little: [`Inbox::receive`] reads at most
//! [`MAX_PER_RECEIVE`] datagrams, then nothing for [`RECEIVE_FLOOR`] ([`Inbox::resting`] says
//! how long the thread should not wait on the socket). A queue kept full (only the job's own
//! user can fill it) costs the sender: `gpu-tracker mark` waits at most [`SEND_TIMEOUT`] for
//! room, then gives up.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The environment variable naming the prefix of the trackers' sockets.
pub const ENV: &str = "GPU_TRACKER_MARK";
/// First line of a mark datagram.
pub const MAGIC: &str = "gpu-tracker-mark 1";
/// Longest phase name kept, in characters.
pub const MAX_NAME: usize = 64;
/// Most datagrams taken from the socket per call of [`Inbox::receive`] (the rest wait).
pub const MAX_PER_RECEIVE: usize = 64;
/// Least time between two receives that found datagrams: a flood costs the receiving thread
/// one batch of at most [`MAX_PER_RECEIVE`] non-blocking reads per this time.
pub const RECEIVE_FLOOR: Duration = Duration::from_millis(100);
/// Longest a mark waits for room in a tracker's queue (full when its own job floods it).
pub const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// The datagram for a mark named `name` at `unix` seconds.
pub fn encode(unix: f64, name: &str) -> Vec<u8> {
    format!("{MAGIC}\n{unix:.6}\n{name}").into_bytes()
}

/// The mark in a datagram: its time (that of receipt, `now`, when the sender's is not
/// believable) and name. `None`: not a mark, or an empty name.
pub fn decode(data: &[u8], now: f64) -> Option<(f64, String)> {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.splitn(3, '\n');
    if lines.next()? != MAGIC {
        return None;
    }
    let t = lines
        .next()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t <= now + 0.5 && *t >= now - 3600.0)
        .unwrap_or(now)
        .min(now);
    let name = crate::text::clean_text(lines.next()?.trim(), MAX_NAME);
    (!name.is_empty()).then_some((t, name))
}

/// The receiving end: a datagram socket a tracker owns, removed when dropped.
#[derive(Debug)]
pub struct Inbox {
    sock: UnixDatagram,
    path: PathBuf,
    uid: u32,
    /// Until when [`Inbox::receive`] reads nothing (see [`RECEIVE_FLOOR`]).
    rest_until: Option<Instant>,
    /// Datagrams dropped: from another user, or not a mark.
    pub refused: u64,
}

impl Inbox {
    /// Binds a socket at `path` that takes marks from `uid` (and root): the socket file is
    /// made `uid`'s, mode 0600, so that no other user can send to it. A stale socket left at
    /// `path` by a tracker that died is replaced; any other file there is an error. The
    /// directory must be one that only the caller can write to.
    pub fn bind(path: &Path, uid: u32) -> io::Result<Inbox> {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)?,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ));
            }
            Err(_) => {}
        }
        let sock = UnixDatagram::bind(path)?;
        let inbox = Inbox {
            sock,
            path: path.to_path_buf(),
            uid,
            rest_until: None,
            refused: 0,
        };
        // Sending needs write permission on the socket file: the job's user has it, no other
        // user (root needs none). The directory is the caller's alone, so the path is the
        // socket just bound. Until these two calls a sender of the process's umask may reach
        // it; the credentials checked on receipt still refuse its marks.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        if uid != crate::sys::euid() {
            std::os::unix::fs::lchown(path, Some(uid), None)?;
        }
        crate::sys::pass_credentials(&inbox.sock)?;
        inbox.sock.set_nonblocking(true)?;
        Ok(inbox)
    }

    /// Where the socket is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Another descriptor of the socket: to wait for marks (see [`crate::sys`]) without
    /// holding the inbox.
    pub fn try_clone_fd(&self) -> io::Result<OwnedFd> {
        self.sock.try_clone().map(OwnedFd::from)
    }

    /// The marks waiting, oldest first, without waiting for more: at most
    /// [`MAX_PER_RECEIVE`] datagrams read, and none for [`RECEIVE_FLOOR`] after a call that
    /// read any. `now` is the Unix time.
    pub fn receive(&mut self, now: f64) -> Vec<(f64, String)> {
        if self.resting().is_some() {
            return Vec::new();
        }
        self.receive_now(now)
    }

    /// How long [`Inbox::receive`] still reads nothing: meanwhile a waiting datagram is no
    /// reason to wake (`None`: wait on the socket).
    pub fn resting(&self) -> Option<Duration> {
        let left = self.rest_until?.checked_duration_since(Instant::now())?;
        (!left.is_zero()).then_some(left)
    }

    /// [`Inbox::receive`] without the floor: the last batch when the tracker stops.
    pub fn receive_now(&mut self, now: f64) -> Vec<(f64, String)> {
        let mut out = Vec::new();
        let mut buf = [0u8; 512];
        let mut read = 0;
        for _ in 0..MAX_PER_RECEIVE {
            match crate::sys::recv_with_sender(&self.sock, &mut buf) {
                Ok(Some((n, uid))) => {
                    read += 1;
                    let allowed = uid.is_some_and(|u| u == self.uid || u == 0);
                    match decode(&buf[..n.min(buf.len())], now) {
                        Some(m) if allowed => out.push(m),
                        _ => self.refused += 1,
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
        if read > 0 {
            self.rest_until = Some(Instant::now() + RECEIVE_FLOOR);
        }
        out
    }
}

impl AsFd for Inbox {
    /// Readable when a datagram waits.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Why a mark was not delivered.
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    /// No tracker's environment: the variable is not set.
    #[error(
        "not inside a tracked job or `gpu-tracker -e` ({ENV} is not set): the mark goes nowhere"
    )]
    NotTracked,
    /// The variable is set but no tracker listens.
    #[error("no tracker is listening at {0}* (the step has ended, or tracking is off)")]
    NoListener(String),
    /// A tracker's socket is there but did not take the mark: another user's (permission
    /// denied), or its queue stayed full for [`SEND_TIMEOUT`].
    #[error("not delivered to {0}: {1}")]
    NotDelivered(String, io::Error),
    /// The name is empty once cleaned.
    #[error("a phase name must have at least one printable character")]
    EmptyName,
}

/// Sends a mark named `name` to every tracker of this job on this node (see the module
/// documentation). Returns how many received it.
pub fn send(name: &str) -> Result<usize, MarkError> {
    clean_name(name)?;
    let prefix = std::env::var_os(ENV)
        .filter(|p| !p.is_empty())
        .ok_or(MarkError::NotTracked)?;
    send_to(Path::new(&prefix), name)
}

/// The name as sent: without control or invisible characters, trimmed, at most [`MAX_NAME`]
/// characters.
fn clean_name(name: &str) -> Result<String, MarkError> {
    let kept: String = name
        .chars()
        .filter(|c| !crate::text::is_unsafe_on_terminal(*c))
        .collect();
    let clean = crate::text::clean_text(kept.trim(), MAX_NAME);
    if clean.is_empty() {
        return Err(MarkError::EmptyName);
    }
    Ok(clean)
}

/// [`send`] with the prefix given.
pub fn send_to(prefix: &Path, name: &str) -> Result<usize, MarkError> {
    let clean = clean_name(name)?;
    let now = crate::clock::unix_now();
    let data = encode(now, &clean);
    let lossy = prefix.to_string_lossy().into_owned();
    let (dir, start) = match lossy.rsplit_once('/') {
        Some((d, s)) => (if d.is_empty() { "/" } else { d }, s),
        None => (".", lossy.as_str()),
    };
    let mut sent = 0;
    let mut failed = None;
    if let (Ok(entries), Ok(sock)) = (std::fs::read_dir(dir), UnixDatagram::unbound()) {
        // A tracker whose queue is full (its job floods it) is not waited for long.
        let _ = sock.set_write_timeout(Some(SEND_TIMEOUT));
        for e in entries.flatten() {
            let n = e.file_name();
            let n = n.to_string_lossy();
            if !(n.starts_with(start) && n.ends_with(".sock")) {
                continue;
            }
            match sock.send_to(&data, e.path()) {
                Ok(_) => sent += 1,
                // A stale socket (its tracker was killed) or one just removed: nobody listens.
                Err(err)
                    if matches!(
                        err.kind(),
                        io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
                    ) => {}
                Err(err) => failed = failed.or(Some((e.path(), err))),
            }
        }
    }
    if sent == 0 {
        return Err(match failed {
            Some((path, err)) => MarkError::NotDelivered(path.display().to_string(), err),
            None => MarkError::NoListener(lossy),
        });
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gt-mark-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn marks_reach_every_socket_of_the_prefix_and_no_other() {
        let d = tmp("prefix");
        let me = crate::sys::euid();
        let mut a = Inbox::bind(&d.join("7.vm.batch.sock"), me).unwrap();
        let mut b = Inbox::bind(&d.join("7.vm.0.sock"), me).unwrap();
        let mut other = Inbox::bind(&d.join("8.vm.batch.sock"), me).unwrap();
        assert_eq!(send_to(&d.join("7.vm."), " train\u{1b}[2J ").unwrap(), 2);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            + 0.1;
        let got = a.receive(now);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, "train[2J");
        assert!(got[0].0 < now, "the sender's time is kept");
        assert_eq!(b.receive(now).len(), 1);
        assert!(other.receive(now).is_empty());
        assert!(a.receive_now(now).is_empty(), "drained");
        drop(a);
        assert!(!d.join("7.vm.batch.sock").exists(), "removed on drop");
        assert!(matches!(
            send_to(&d.join("9."), "x"),
            Err(MarkError::NoListener(_))
        ));
        assert!(matches!(
            send_to(&d.join("7."), "\n"),
            Err(MarkError::EmptyName)
        ));
    }

    #[test]
    fn marks_of_another_user_and_garbage_are_refused() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let d = tmp("uid");
        let me = crate::sys::euid();
        let s = UnixDatagram::unbound().unwrap();
        if me == 0 {
            // The socket is its user's alone (tests/cli.rs sends as other users); should they
            // open it to all, another user's marks are still refused: here uid 1 listens and
            // root sends, whose marks are always taken.
            let mut inbox = Inbox::bind(&d.join("s.sock"), 1).unwrap();
            let m = std::fs::symlink_metadata(inbox.path()).unwrap();
            assert_eq!((m.uid(), m.mode() & 0o777), (1, 0o600));
            std::fs::set_permissions(inbox.path(), std::fs::Permissions::from_mode(0o666)).unwrap();
            s.send_to(&encode(1.0, "x"), inbox.path()).unwrap();
            assert_eq!(inbox.receive(10.0).len(), 1);
        }
        let mut mine = Inbox::bind(&d.join("m.sock"), me).unwrap();
        s.send_to(b"hello", mine.path()).unwrap();
        assert!(mine.receive(10.0).is_empty());
        assert_eq!(mine.refused, 1);
        // A file in the way is not replaced.
        std::fs::write(d.join("f.sock"), "x").unwrap();
        assert!(Inbox::bind(&d.join("f.sock"), me).is_err());
        assert_eq!(std::fs::read_to_string(d.join("f.sock")).unwrap(), "x");
    }

    #[test]
    fn a_receive_that_read_anything_is_followed_by_a_rest() {
        let d = tmp("floor");
        let me = crate::sys::euid();
        let mut inbox = Inbox::bind(&d.join("s.sock"), me).unwrap();
        let s = UnixDatagram::unbound().unwrap();
        assert!(inbox.receive(10.0).is_empty());
        assert_eq!(inbox.resting(), None, "nothing read: no rest");
        for _ in 0..5 {
            s.send_to(b"flood", inbox.path()).unwrap();
        }
        assert!(inbox.receive(10.0).is_empty());
        assert_eq!(inbox.refused, 5);
        let rest = inbox.resting().expect("a rest after a batch");
        assert!(
            rest <= RECEIVE_FLOOR && rest > RECEIVE_FLOOR / 2,
            "{rest:?}"
        );
        // A mark during the rest waits for its end.
        s.send_to(&encode(9.0, "late"), inbox.path()).unwrap();
        assert!(inbox.receive(10.0).is_empty());
        std::thread::sleep(rest);
        assert_eq!(inbox.resting(), None);
        assert_eq!(inbox.receive(10.0), [(9.0, "late".to_string())]);
        // The last batch, when the tracker stops, reads whatever the rest.
        s.send_to(&encode(9.5, "last"), inbox.path()).unwrap();
        assert!(inbox.resting().is_some());
        assert_eq!(inbox.receive_now(10.0), [(9.5, "last".to_string())]);
        // At most one batch per call.
        s.set_nonblocking(true).unwrap();
        let queued = (0..2 * MAX_PER_RECEIVE)
            .filter(|_| s.send_to(b"flood", inbox.path()).is_ok())
            .count();
        let before = inbox.refused;
        inbox.receive_now(10.0);
        assert_eq!(
            inbox.refused - before,
            queued.min(MAX_PER_RECEIVE) as u64,
            "{queued} queued"
        );
    }

    #[test]
    fn times_are_believed_only_when_plausible() {
        let now = 1000.0 * 3600.0;
        assert_eq!(
            decode(&encode(now - 5.0, "a"), now),
            Some((now - 5.0, "a".into()))
        );
        assert_eq!(decode(&encode(now + 60.0, "a"), now).unwrap().0, now);
        assert_eq!(decode(&encode(now - 7200.0, "a"), now).unwrap().0, now);
        assert_eq!(
            decode(b"gpu-tracker-mark 1\nnan\nb", now),
            Some((now, "b".into()))
        );
        assert_eq!(decode(b"gpu-tracker-mark 2\n1\nb", now), None);
        assert_eq!(decode(b"gpu-tracker-mark 1\n1\n  ", now), None);
        let long = "x".repeat(500);
        assert_eq!(
            decode(&encode(now, &long), now).unwrap().1.chars().count(),
            MAX_NAME + 1
        );
    }
}

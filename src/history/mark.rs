//! Phase marks: `gpu-tracker mark NAME` (or [`send`] from Rust, or one datagram from any
//! language) tells the tracker of the step that a phase named NAME begins.
//!
//! The tracker listens on a Unix datagram socket ([`Inbox`]); the environment variable
//! [`ENV`] in the job (or the command run by `gpu-tracker -e`) holds a path prefix, and every
//! socket `<prefix>*.sock` belongs to a tracker of that job on this node (the batch step and
//! every `srun` step running there). A mark costs the job one `sendto` per socket: no file is
//! written, nothing waits for an answer.
//!
//! The datagram is text: `gpu-tracker-mark 1\n<unix seconds>\n<name>`. The kernel tells the
//! tracker who sent it (`SO_PASSCRED`): marks of users other than the job's (and root) are
//! dropped, so the socket may be writable by all while the plugin, as root, never writes
//! through a path a user controls. A time more than an hour old or in the future is replaced
//! by the time of receipt. Names are cut to [`MAX_NAME`] characters, control characters
//! removed.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

/// The environment variable naming the prefix of the trackers' sockets.
pub const ENV: &str = "GPU_TRACKER_MARK";
/// First line of a mark datagram.
pub const MAGIC: &str = "gpu-tracker-mark 1";
/// Longest phase name kept, in characters.
pub const MAX_NAME: usize = 64;
/// Most marks taken from the socket per call of [`Inbox::receive`] (the rest wait).
const MAX_PER_RECEIVE: usize = 64;

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
    /// Datagrams dropped: from another user, or not a mark.
    pub refused: u64,
}

impl Inbox {
    /// Binds a socket at `path` that takes marks from `uid` (and root). A stale socket left at
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
            refused: 0,
        };
        // Sending needs write permission on the socket file; who may send is checked on
        // receipt from the kernel's credentials.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
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

    /// The marks waiting, oldest first, without waiting for more. `now` is the Unix time.
    pub fn receive(&mut self, now: f64) -> Vec<(f64, String)> {
        let mut out = Vec::new();
        let mut buf = [0u8; 512];
        for _ in 0..MAX_PER_RECEIVE {
            match crate::sys::recv_with_sender(&self.sock, &mut buf) {
                Ok(Some((n, uid))) => {
                    let allowed = uid.is_some_and(|u| u == self.uid || u == 0);
                    match decode(&buf[..n.min(buf.len())], now) {
                        Some(m) if allowed => out.push(m),
                        _ => self.refused += 1,
                    }
                }
                Ok(None) | Err(_) => break,
            }
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
    if let (Ok(entries), Ok(sock)) = (std::fs::read_dir(dir), UnixDatagram::unbound()) {
        for e in entries.flatten() {
            let n = e.file_name();
            let n = n.to_string_lossy();
            if n.starts_with(start) && n.ends_with(".sock") && sock.send_to(&data, e.path()).is_ok()
            {
                sent += 1;
            }
        }
    }
    if sent == 0 {
        return Err(MarkError::NoListener(lossy));
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
        assert!(a.receive(now).is_empty(), "drained");
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
        let d = tmp("uid");
        let me = crate::sys::euid();
        let mut inbox = Inbox::bind(&d.join("s.sock"), me.wrapping_add(1)).unwrap();
        let s = UnixDatagram::unbound().unwrap();
        s.send_to(&encode(1.0, "x"), inbox.path()).unwrap();
        let got = inbox.receive(10.0);
        if me == 0 {
            // Root's marks are always taken.
            assert_eq!(got.len(), 1);
        } else {
            assert!(got.is_empty());
            assert_eq!(inbox.refused, 1);
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

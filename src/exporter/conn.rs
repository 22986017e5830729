//! One connection, from the moment it has its slot to its close, within one deadline.
//!
//! A connection has [`CONNECTION_DEADLINE`] in all, counted from when the server gave it its
//! slot (the time it waited for one, while every slot was busy, is not its client's doing):
//! its request head must arrive within [`HEAD_DEADLINE`] of that and [`MAX_HEAD_BYTES`] (408
//! or 431 otherwise); its whole answer must be written within [`WRITE_DEADLINE`] of its first
//! byte, or the connection is reset, its unsent bytes dropped; the server then takes what the
//! client still sends for at most [`LINGER`] (closing with unread bytes would reset the
//! connection and could lose the answer on its way), all within the one deadline. No read or
//! write waits past it, however slowly a client sends or reads. The metrics' answer is the
//! shared one (`answers.rs`): a connection holds a reference to it, never a copy. Where the
//! connection is ([`Progress`]) is shared with the server, which may end a connection early to
//! make room for another (`serve.rs`).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::answers::{Answers, Rendered};
use super::http::{self, Request, Route};

/// Longest a client may take, from its connection's slot, to send its request head.
pub const HEAD_DEADLINE: Duration = Duration::from_millis(1500);
/// Longest a connection lasts, head, answer and linger together: Prometheus's default scrape
/// timeout, past which its scrape is lost anyway.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);
/// Longest the writing of a whole answer may take: a client that reads it slowly or not at all
/// holds its slot and its answer no longer. Prometheus reads megabytes in well under a second.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// Longest the server waits, after its answer, for the client to close.
pub const LINGER: Duration = Duration::from_millis(200);
/// Largest request head read.
pub const MAX_HEAD_BYTES: usize = 8 << 10;
/// Most bytes of an answer given to one write.
const WRITE_CHUNK: usize = 64 << 10;
/// Most bytes taken while lingering.
const MAX_LINGER_BYTES: usize = 64 << 10;

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for its request head.
    Head = 0,
    /// Its answer being made.
    Answer = 1,
    /// Its answer being written.
    Write = 2,
    /// Answered, waiting a moment for the client to close.
    Linger = 3,
}

/// A connection's progress, shared with the server.
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    phase: AtomicU8,
    heard: AtomicUsize,
    /// When its answer last went out, in milliseconds from `started`.
    moved_ms: AtomicU64,
}

impl Progress {
    /// The progress of a connection that got its slot at `started`: none yet.
    pub fn new(started: Instant) -> Progress {
        Progress {
            started,
            phase: AtomicU8::new(Phase::Head as u8),
            heard: AtomicUsize::new(0),
            moved_ms: AtomicU64::new(0),
        }
    }

    /// Where the connection is.
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            0 => Phase::Head,
            1 => Phase::Answer,
            2 => Phase::Write,
            _ => Phase::Linger,
        }
    }

    /// Bytes of the request head read so far.
    pub fn heard(&self) -> usize {
        self.heard.load(Ordering::Relaxed)
    }

    /// How long its answer has not moved, while [`Phase::Write`]: the client does not read.
    pub fn still_for(&self) -> Duration {
        let moved = self.started + Duration::from_millis(self.moved_ms.load(Ordering::Relaxed));
        moved.elapsed()
    }

    /// Moves it to `p`.
    pub(super) fn set(&self, p: Phase) {
        if p == Phase::Write {
            self.moved();
        }
        self.phase.store(p as u8, Ordering::Relaxed);
    }

    fn moved(&self) {
        let ms = self.started.elapsed().as_millis();
        self.moved_ms
            .store(u64::try_from(ms).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

const INDEX: &str = "<html><head><title>gpu-tracker-exporter</title></head><body>\
<a href=\"/metrics\">gpu-tracker-exporter: the running Slurm steps' figures</a></body></html>\n";

/// An answer to write.
#[derive(Debug)]
pub enum Reply {
    /// The shared answer to `GET /metrics` (its head only for `HEAD`).
    Metrics {
        /// The answer.
        answer: Arc<Rendered>,
        /// Its head only.
        head_only: bool,
    },
    /// A small answer of its own: another route, or an error.
    Own(Vec<u8>),
}

impl Reply {
    /// Its bytes, in the order they are written.
    pub fn parts(&self) -> [&[u8]; 2] {
        match self {
            Reply::Metrics { answer, head_only } => {
                let body: &[u8] = if *head_only { &[] } else { &answer.body };
                [&answer.head, body]
            }
            Reply::Own(bytes) => [bytes, &[]],
        }
    }
}

/// The answer to `req`; the shared answer of `answers` for [`Route::Metrics`], in the format
/// the request asks for (500 when it could not be rendered).
pub fn answer(req: &Request, answers: &Answers) -> Reply {
    let (status, kind, body, extra) = match req.route {
        Route::Metrics => match answers.get(req.format) {
            Some(answer) => {
                return Reply::Metrics {
                    answer,
                    head_only: req.head_only,
                };
            }
            // Its rendering failed (a bug); the next one is tried anew.
            None => (
                "500 Internal Server Error",
                "text/plain",
                "the rendering failed\n",
                "",
            ),
        },
        Route::Index => ("200 OK", "text/html; charset=utf-8", INDEX, ""),
        Route::NotFound => ("404 Not Found", "text/plain", "not found\n", ""),
        Route::MethodNotAllowed => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET and HEAD\n",
            "Allow: GET, HEAD\r\n",
        ),
        Route::BadRequest => ("400 Bad Request", "text/plain", "bad request\n", ""),
    };
    Reply::Own(http::response(status, kind, extra, body, req.head_only))
}

/// Why no request head was read.
enum HeadError {
    TooLarge,
    TimedOut,
    Io,
}

/// Time left until `until`; `None` when it has passed.
fn left(until: Instant) -> Option<Duration> {
    Some(until.saturating_duration_since(Instant::now())).filter(|d| !d.is_zero())
}

/// Reads a request head (up to the empty line) by `until`, at most [`MAX_HEAD_BYTES`].
fn read_head(s: &mut TcpStream, until: Instant, progress: &Progress) -> Result<Vec<u8>, HeadError> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        let wait = left(until).ok_or(HeadError::TimedOut)?;
        s.set_read_timeout(Some(wait)).map_err(|_| HeadError::Io)?;
        let n = match s.read(&mut buf) {
            Ok(0) => return Err(HeadError::Io),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HeadError::TimedOut);
            }
            Err(_) => return Err(HeadError::Io),
        };
        head.extend_from_slice(&buf[..n]);
        progress.heard.store(head.len(), Ordering::Relaxed);
        let ended =
            |h: &[u8]| h.windows(4).any(|w| w == b"\r\n\r\n") || h.windows(2).any(|w| w == b"\n\n");
        if ended(&head) {
            return Ok(head);
        }
        if head.len() >= MAX_HEAD_BYTES {
            return Err(HeadError::TooLarge);
        }
    }
}

/// Writes all of `bytes` by `until`: each write waits only for what is left of the time, so a
/// client that reads a byte at a time cannot stretch it. Written [`WRITE_CHUNK`] at a time, so
/// that `progress` says when the answer last moved.
fn write_by(
    s: &mut TcpStream,
    mut bytes: &[u8],
    until: Instant,
    progress: &Progress,
) -> io::Result<()> {
    while !bytes.is_empty() {
        let wait = left(until).ok_or(io::ErrorKind::TimedOut)?;
        s.set_write_timeout(Some(wait))?;
        match s.write(&bytes[..bytes.len().min(WRITE_CHUNK)]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                bytes = &bytes[n..];
                progress.moved();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Takes what the client still sends until it closes, `until`, or [`MAX_LINGER_BYTES`].
fn linger(s: &mut TcpStream, until: Instant) {
    let mut rest = [0u8; 4096];
    let mut taken = 0;
    while taken < MAX_LINGER_BYTES {
        let Some(wait) = left(until) else {
            return;
        };
        if s.set_read_timeout(Some(wait)).is_err() {
            return;
        }
        match s.read(&mut rest) {
            Ok(0) => return,
            Ok(n) => taken += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Answers one connection, which got its slot at `started`, then closes it (by dropping it):
/// all within [`CONNECTION_DEADLINE`] of `started`, its head within [`HEAD_DEADLINE`], its
/// answer within [`WRITE_DEADLINE`] of its first byte. A connection whose answer could not be
/// written whole is reset: the kernel drops what it still held of it.
pub fn handle(
    mut s: TcpStream,
    started: Instant,
    answers: &Answers,
    progress: &Progress,
) -> io::Result<()> {
    let until = started + CONNECTION_DEADLINE;
    let reply = match read_head(&mut s, (started + HEAD_DEADLINE).min(until), progress) {
        Ok(head) => {
            progress.set(Phase::Answer);
            answer(&http::parse_request(&head), answers)
        }
        Err(HeadError::TooLarge) => Reply::Own(http::response(
            "431 Request Header Fields Too Large",
            "text/plain",
            "",
            "request head too large\n",
            false,
        )),
        Err(HeadError::TimedOut) => Reply::Own(http::response(
            "408 Request Timeout",
            "text/plain",
            "",
            "request timeout\n",
            false,
        )),
        Err(HeadError::Io) => return Ok(()),
    };
    progress.set(Phase::Write);
    let write_until = (Instant::now() + WRITE_DEADLINE).min(until);
    let written = reply
        .parts()
        .into_iter()
        .try_for_each(|part| write_by(&mut s, part, write_until, progress));
    // The shared answer is let go before the linger.
    drop(reply);
    if let Err(e) = written {
        // Else the kernel would go on holding, and trying to send, the rest for minutes.
        let _ = crate::sys::reset_on_close(s.as_fd());
        return Err(e);
    }
    s.shutdown(Shutdown::Write)?;
    progress.set(Phase::Linger);
    linger(&mut s, (Instant::now() + LINGER).min(until));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exporter::metrics::Format;
    use std::net::TcpListener;

    fn exporter() -> (crate::cgroup::fixture::TempTree, Answers) {
        let t = crate::cgroup::fixture::TempTree::new("exporter-conn");
        let e = crate::exporter::Exporter::new(t.path().join("none"));
        (t, Answers::new(e).unwrap())
    }

    /// The bytes [`answer`] writes.
    fn answer_bytes(req: &Request, answers: &Answers) -> Vec<u8> {
        answer(req, answers).parts().concat()
    }

    fn request(route: Route, head_only: bool, format: Format) -> Request {
        Request {
            route,
            head_only,
            format,
        }
    }

    #[test]
    fn answers_carry_their_length_type_and_close() {
        let (_t, e) = exporter();
        let text = String::from_utf8(answer_bytes(
            &request(Route::Metrics, false, Format::OpenMetrics),
            &e,
        ))
        .unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        let kind = Format::OpenMetrics.content_type();
        assert!(head.contains(&format!("Content-Type: {kind}\r\n")));
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert!(head.contains("\r\nVary: Accept\r\n"));
        assert!(head.ends_with("Connection: close"), "{head}");
        assert!(body.ends_with("# EOF\n"));
        let plain = String::from_utf8(answer_bytes(
            &request(Route::Metrics, false, Format::Text),
            &e,
        ))
        .unwrap();
        assert!(plain.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
        assert!(!plain.contains("# EOF"));
        let only = answer_bytes(&request(Route::Metrics, true, Format::Text), &e);
        assert!(String::from_utf8(only).unwrap().ends_with("\r\n\r\n"));
        let nf = answer_bytes(&request(Route::NotFound, false, Format::Text), &e);
        assert!(
            String::from_utf8(nf)
                .unwrap()
                .starts_with("HTTP/1.1 404 Not Found\r\n")
        );
        let na = answer_bytes(&request(Route::MethodNotAllowed, false, Format::Text), &e);
        assert!(
            String::from_utf8(na)
                .unwrap()
                .contains("Allow: GET, HEAD\r\n")
        );
    }

    /// What the server answers `sent` (a client that then stops sending), on a real socket.
    fn exchange(sent: &[u8]) -> String {
        let (_t, e) = exporter();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).unwrap();
        client.write_all(sent).unwrap();
        let (conn, _) = listener.accept().unwrap();
        let now = Instant::now();
        let _ = handle(conn, now, &e, &Progress::new(now));
        let mut got = String::new();
        let _ = client.read_to_string(&mut got);
        got
    }

    #[test]
    fn oversized_and_garbage_requests_get_an_error_not_a_panic() {
        let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000));
        assert!(exchange(huge.as_bytes()).starts_with("HTTP/1.1 431 "));
        assert!(exchange(b"\x00\xff\xfe garbage\r\n\r\n").starts_with("HTTP/1.1 400 "));
        let ok = exchange(b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n");
        assert!(
            ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.ends_with("# EOF\n"),
            "{ok}"
        );
    }

    #[test]
    fn a_connection_ends_by_its_deadline_whatever_the_client_does() {
        let (_t, e) = exporter();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let (conn, _) = listener.accept().unwrap();
        // Accepted long ago: its deadline has passed, and the answer is not written.
        let t0 = Instant::now();
        let long_ago = t0 - CONNECTION_DEADLINE - Duration::from_secs(1);
        let p = Progress::new(long_ago);
        let r = handle(conn, long_ago, &e, &p);
        assert!(r.is_err(), "{r:?}");
        assert!(
            t0.elapsed() < Duration::from_millis(500),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(p.phase(), Phase::Write);
        assert!(p.still_for() < Duration::from_millis(500));
    }
}

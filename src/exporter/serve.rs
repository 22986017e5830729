//! A small HTTP/1.1 server for Prometheus's scrapes, on std's `TcpListener`: one connection at a
//! time (a scrape takes milliseconds), each closed after its answer.
//!
//! `GET /metrics` (or `HEAD`) answers the exposition; `GET /` a one-line pointer to it; another
//! path 404, another method 405. A request head is read for at most [`HEAD_DEADLINE`] in all
//! and [`MAX_HEAD_BYTES`]: a client that sends less, slower or more is answered 408 or 431 (or
//! dropped) and cannot hold the next scrape for longer. Nothing a client sends is echoed,
//! logged or kept.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::Exporter;
use super::metrics::CONTENT_TYPE;

/// Longest a client may take to send its request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// Longest an answer may take to be sent.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// Longest the server waits, after its answer, for the client to close.
pub const LINGER: Duration = Duration::from_millis(200);
/// Largest request head read.
pub const MAX_HEAD_BYTES: usize = 8 << 10;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/metrics`.
    Metrics,
    /// `/`.
    Index,
    /// Another path.
    NotFound,
    /// A method other than GET and HEAD.
    MethodNotAllowed,
    /// Not an HTTP request line.
    BadRequest,
}

/// The route of a request head (pure), and whether it asks for the head only (`HEAD`).
pub fn route(head: &[u8]) -> (Route, bool) {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Ok(line) = std::str::from_utf8(line) else {
        return (Route::BadRequest, false);
    };
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return (Route::BadRequest, false);
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return (Route::BadRequest, false);
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return (Route::MethodNotAllowed, false);
    }
    let path = target.split('?').next().unwrap_or(target);
    let r = match path {
        "/metrics" => Route::Metrics,
        "/" => Route::Index,
        _ => Route::NotFound,
    };
    (r, head_only)
}

const INDEX: &str = "<html><head><title>gpu-tracker-exporter</title></head><body>\
<a href=\"/metrics\">gpu-tracker-exporter: the running Slurm steps' figures</a></body></html>\n";

/// The whole answer to `r`; a scrape of `exporter` for [`Route::Metrics`].
pub fn answer(r: Route, head_only: bool, exporter: &mut Exporter) -> Vec<u8> {
    let (status, kind, body, extra) = match r {
        Route::Metrics => ("200 OK", CONTENT_TYPE, exporter.scrape().text, ""),
        Route::Index => ("200 OK", "text/html; charset=utf-8", INDEX.to_string(), ""),
        Route::NotFound => ("404 Not Found", "text/plain", "not found\n".into(), ""),
        Route::MethodNotAllowed => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET and HEAD\n".into(),
            "Allow: GET, HEAD\r\n",
        ),
        Route::BadRequest => ("400 Bad Request", "text/plain", "bad request\n".into(), ""),
    };
    response(status, kind, extra, &body, head_only)
}

fn response(status: &str, kind: &str, extra: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{extra}\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// Why no request head was read.
enum HeadError {
    TooLarge,
    TimedOut,
    Io,
}

/// Reads a request head (up to the empty line) within [`HEAD_DEADLINE`] and [`MAX_HEAD_BYTES`].
fn read_head(s: &mut TcpStream) -> Result<Vec<u8>, HeadError> {
    let until = Instant::now() + HEAD_DEADLINE;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::TimedOut);
        }
        s.set_read_timeout(Some(left)).map_err(|_| HeadError::Io)?;
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

/// Answers one connection, then closes it.
pub fn handle(mut s: TcpStream, exporter: &mut Exporter) -> io::Result<()> {
    s.set_write_timeout(Some(WRITE_DEADLINE))?;
    let bytes = match read_head(&mut s) {
        Ok(head) => {
            let (r, head_only) = route(&head);
            answer(r, head_only, exporter)
        }
        Err(HeadError::TooLarge) => response(
            "431 Request Header Fields Too Large",
            "text/plain",
            "",
            "request head too large\n",
            false,
        ),
        Err(HeadError::TimedOut) => response(
            "408 Request Timeout",
            "text/plain",
            "",
            "request timeout\n",
            false,
        ),
        Err(HeadError::Io) => return Ok(()),
    };
    s.write_all(&bytes)?;
    s.shutdown(Shutdown::Write)?;
    // Closing with unread bytes (the rest of a head too large) would reset the connection and
    // could lose the answer on its way: take what the client still sends, briefly.
    s.set_read_timeout(Some(LINGER))?;
    let mut rest = [0u8; 4096];
    let mut taken = 0;
    while taken < MAX_HEAD_BYTES * 8 {
        match s.read(&mut rest) {
            Ok(0) | Err(_) => break,
            Ok(n) => taken += n,
        }
    }
    Ok(())
}

/// Answers connections on `listener` one after another, for ever. Returns only on an error of
/// the listener itself; a client's error ends that client's connection only.
pub fn serve(listener: &TcpListener, exporter: &mut Exporter) -> io::Error {
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                let _ = handle(s, exporter);
            }
            // Gone before it was taken, or a signal.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted | io::ErrorKind::Interrupted
                ) => {}
            // Out of descriptors or memory for a moment: wait, then go on.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                ) =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_routed_by_method_and_path() {
        let r = |h: &str| route(h.as_bytes());
        assert_eq!(
            r("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            (Route::Metrics, false)
        );
        assert_eq!(r("GET /metrics?x=1 HTTP/1.0\n\n"), (Route::Metrics, false));
        assert_eq!(r("HEAD /metrics HTTP/1.1\r\n\r\n"), (Route::Metrics, true));
        assert_eq!(r("GET / HTTP/1.1\r\n\r\n"), (Route::Index, false));
        assert_eq!(r("GET /metricsx HTTP/1.1\r\n\r\n").0, Route::NotFound);
        assert_eq!(r("GET /../etc/passwd HTTP/1.1\r\n\r\n").0, Route::NotFound);
        assert_eq!(
            r("POST /metrics HTTP/1.1\r\n\r\n").0,
            Route::MethodNotAllowed
        );
        for bad in [
            "",
            "GET\r\n\r\n",
            "GET /metrics\r\n\r\n",
            "GET  /metrics HTTP/1.1\r\n\r\n",
            "GET metrics HTTP/1.1\r\n\r\n",
            "GET /metrics SPDY/3\r\n\r\n",
        ] {
            assert_eq!(r(bad).0, Route::BadRequest, "{bad:?}");
        }
        assert_eq!(route(b"GET /\xff HTTP/1.1\r\n\r\n").0, Route::BadRequest);
    }

    #[test]
    fn answers_carry_their_length_type_and_close() {
        let t = crate::cgroup::fixture::TempTree::new("exporter-serve");
        let mut e = Exporter::new(t.path().join("none"));
        let text = String::from_utf8(answer(Route::Metrics, false, &mut e)).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")));
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert!(head.ends_with("Connection: close"), "{head}");
        assert!(body.ends_with("# EOF\n"));
        let only = String::from_utf8(answer(Route::Metrics, true, &mut e)).unwrap();
        assert!(only.ends_with("\r\n\r\n"));
        let nf = String::from_utf8(answer(Route::NotFound, false, &mut e)).unwrap();
        assert!(nf.starts_with("HTTP/1.1 404 Not Found\r\n"));
        let na = String::from_utf8(answer(Route::MethodNotAllowed, false, &mut e)).unwrap();
        assert!(na.contains("Allow: GET, HEAD\r\n"));
    }

    /// What the server answers `sent` (a client that then stops sending), on a real socket.
    fn exchange(sent: &[u8]) -> String {
        let t = crate::cgroup::fixture::TempTree::new("exporter-sock");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).unwrap();
        client.write_all(sent).unwrap();
        let (conn, _) = listener.accept().unwrap();
        let mut e = Exporter::new(t.path().join("none"));
        let _ = handle(conn, &mut e);
        let mut got = String::new();
        let _ = client.read_to_string(&mut got);
        got
    }

    #[test]
    fn oversized_and_garbage_requests_get_an_error_not_a_panic() {
        let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000));
        assert!(exchange(huge.as_bytes()).starts_with("HTTP/1.1 431 "));
        assert!(exchange(b"\x00\xff\xfe garbage\r\n\r\n").starts_with("HTTP/1.1 400 "));
        let ok = exchange(b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(
            ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.ends_with("# EOF\n"),
            "{ok}"
        );
    }
}

//! The exporter's HTTP/1.1 server for Prometheus's scrapes, on std's `TcpListener`.
//!
//! Every job on a node can reach the exporter's port, so no client may hold another back:
//! connections are served at once, each on a thread of its own, at most [`MAX_CONNECTIONS`]
//! at a time, each within one deadline from the moment it has its slot to its close (`conn.rs`:
//! 1.5 s for its request head, 5 s to write its answer, 10 s in all). `GET /metrics` (or
//! `HEAD`) answers the exposition in the format the client asks for; `GET /` a one-line pointer
//! to it; another path 404, another method 405. Each connection is closed after its answer.
//!
//! When [`MAX_CONNECTIONS`] are open, a new connection makes room: the server ends the one
//! that is of least use ([`victim`]): one already answered and lingering, else the oldest that
//! has sent nothing at all, else the oldest still sending its head, else the oldest whose
//! client has left its answer unread for [`WRITE_STALL`]. A connection whose answer is being
//! made or read is never ended; when every one is, the new one waits (accepted, or in the
//! kernel's queue) until one ends, by its deadline at the latest, and its own deadlines start
//! only then. Prometheus sends its request the moment it connects, so its scrape is answered
//! even while the slots are full of connections that send nothing or drip.
//! Threads, descriptors and memory stay bounded: one thread (with a small stack), two
//! descriptors, one request head and a 256 KiB send buffer in the kernel per connection; the
//! answers are rendered at most once a second per format and shared by the connections that
//! write them (`answers.rs`), never copied for one, and never rendered under a lock a write
//! holds.

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::Exporter;
use super::answers::Answers;
use super::conn::{self, Phase, Progress};

/// Most connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a client may leave its answer unread before its connection may be ended to make
/// room: Prometheus reads its answer as it comes.
pub const WRITE_STALL: Duration = Duration::from_secs(1);
/// The kernel's send buffer of a connection (it doubles it): what a client that does not read
/// can make the exporter hold in the kernel, and plenty for Prometheus's scrape on a LAN.
const SEND_BUFFER_BYTES: usize = 128 << 10;
/// A connection thread's stack: a scrape parses and renders, with no deep recursion.
const STACK_BYTES: usize = 512 << 10;

/// What the server knows of an open connection when it must end one.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    /// Where it is.
    pub phase: Phase,
    /// When it got its slot.
    pub started: Instant,
    /// Whether its client has sent anything (read or waiting to be read).
    pub heard: bool,
    /// How long its answer has not moved ([`Phase::Write`] only).
    pub still_for: Duration,
    /// Whether it is being ended already.
    pub ending: bool,
}

/// The connection to end to make room for a new one (pure), by its index in `open`: the oldest
/// lingering one (answered already), else the oldest that has sent nothing, else the oldest
/// still sending its head, else the oldest whose client has not read its answer for
/// [`WRITE_STALL`]. Never one whose answer is being made or read, nor one being ended already.
pub fn victim(open: &[Candidate]) -> Option<usize> {
    open.iter()
        .enumerate()
        .filter(|(_, c)| !c.ending)
        .filter_map(|(i, c)| {
            let rank = match (c.phase, c.heard) {
                (Phase::Linger, _) => 0,
                (Phase::Head, false) => 1,
                (Phase::Head, true) => 2,
                (Phase::Write, _) if c.still_for >= WRITE_STALL => 3,
                (Phase::Write | Phase::Answer, _) => return None,
            };
            Some((rank, c.started, i))
        })
        .min()
        .map(|(_, _, i)| i)
}

/// An open connection, as the server keeps it.
struct Slot {
    id: u64,
    started: Instant,
    /// The same socket as the thread's: shut down to end the connection.
    stream: TcpStream,
    progress: Arc<Progress>,
    ending: bool,
}

/// What the server's threads share.
struct Shared {
    answers: Answers,
    slots: Mutex<Vec<Slot>>,
    /// Signalled when a connection ends.
    freed: Condvar,
}

impl Shared {
    fn new(exporter: Exporter) -> io::Result<Shared> {
        Ok(Shared {
            answers: Answers::new(exporter)?,
            slots: Mutex::new(Vec::with_capacity(MAX_CONNECTIONS)),
            freed: Condvar::new(),
        })
    }

    fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        // No code panics while holding it; were one to, the list is still whole.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until fewer than [`MAX_CONNECTIONS`] are open, ending one where one may be ended.
    fn make_room(&self) {
        let mut slots = self.slots();
        while slots.len() >= MAX_CONNECTIONS {
            let open: Vec<Candidate> = slots
                .iter()
                .map(|s| Candidate {
                    phase: s.progress.phase(),
                    started: s.started,
                    // Bytes in the kernel's queue count: a request that arrived with its
                    // connection is heard even before its thread reads it.
                    heard: s.progress.heard() > 0
                        || crate::sys::bytes_waiting(s.stream.as_fd()).map_or(true, |n| n > 0),
                    still_for: s.progress.still_for(),
                    ending: s.ending,
                })
                .collect();
            if let Some(i) = victim(&open) {
                slots[i].ending = true;
                // Its thread's read or write returns at once; the thread then frees the slot.
                let _ = slots[i].stream.shutdown(Shutdown::Both);
            }
            slots = self
                .freed
                .wait_timeout(slots, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// Frees a connection's slot when its thread ends, even by a panic.
struct SlotGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.shared.slots().retain(|s| s.id != self.id);
        self.shared.freed.notify_all();
    }
}

/// Serves connection `s`, given its slot at `started`, on a thread of its own.
fn start(shared: &Arc<Shared>, s: TcpStream, started: Instant, id: u64) {
    // Else the kernel grows it up to its own bound (4 MiB by default) for each client that
    // leaves its answer unread, and charges it to the exporter's memory.
    let _ = crate::sys::set_send_buffer(s.as_fd(), SEND_BUFFER_BYTES);
    let Ok(stream) = s.try_clone() else {
        // Out of descriptors: this connection is closed unanswered.
        return;
    };
    let progress = Arc::new(Progress::new(started));
    shared.slots().push(Slot {
        id,
        started,
        stream,
        progress: progress.clone(),
        ending: false,
    });
    let guard = SlotGuard {
        shared: shared.clone(),
        id,
    };
    let spawned = std::thread::Builder::new()
        .name("gpu-tracker-exporter-conn".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            let _ = conn::handle(s, started, &guard.shared.answers, &progress);
            drop(guard);
        });
    if spawned.is_err() {
        // No thread to be had now (the guard, dropped with the closure, freed the slot).
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Answers connections on `listener` for ever, at most [`MAX_CONNECTIONS`] at once. Returns
/// only on an error of the listener itself, or when no thread can be had for the renderings at
/// the start; a client's error ends that client's connection only.
pub fn serve(listener: &TcpListener, exporter: Exporter) -> io::Error {
    match Shared::new(exporter) {
        Ok(shared) => accept(listener, &Arc::new(shared)),
        Err(e) => e,
    }
}

/// [`serve`]'s loop, with what its connections share.
fn accept(listener: &TcpListener, shared: &Arc<Shared>) -> io::Error {
    let mut id = 0;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                shared.make_room();
                // Its deadlines count from here: the time it waited for a slot, in the
                // kernel's queue or here, is not its client's.
                let started = Instant::now();
                id += 1;
                start(shared, s, started, id);
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
    use std::io::{Read, Write};

    #[test]
    fn a_whole_request_that_waited_for_a_slot_is_answered_not_timed_out() {
        let t = crate::cgroup::fixture::TempTree::new("exporter-serve-wait");
        let shared = Arc::new(Shared::new(Exporter::new(t.path().join("none"))).unwrap());
        // Every slot held by a connection whose answer is being made: none may be ended.
        let side = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peers = Vec::new();
        for id in 0..MAX_CONNECTIONS as u64 {
            peers.push(TcpStream::connect(side.local_addr().unwrap()).unwrap());
            let progress = Arc::new(Progress::new(Instant::now()));
            progress.set(Phase::Answer);
            shared.slots().push(Slot {
                id: u64::MAX - id,
                started: Instant::now(),
                stream: side.accept().unwrap().0,
                progress,
                ending: false,
            });
        }
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = shared.clone();
        // It accepts for ever; the test's end ends it.
        std::thread::spawn(move || accept(&listener, &server));
        let mut client = TcpStream::connect(addr).unwrap();
        client.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        // Its whole request waits, accepted, for longer than a head may take.
        std::thread::sleep(conn::HEAD_DEADLINE + Duration::from_millis(500));
        shared.slots().clear();
        shared.freed.notify_all();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = String::new();
        client.read_to_string(&mut got).unwrap();
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(got.contains("\ngpu_tracker_exporter_steps 0\n"), "{got}");
    }

    #[test]
    fn room_is_made_by_ending_the_connection_of_least_use() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let c = |phase, ms, heard, ending| Candidate {
            phase,
            started: at(ms),
            heard,
            still_for: Duration::ZERO,
            ending,
        };
        // Lingering first, oldest first.
        let open = [
            c(Phase::Head, 0, false, false),
            c(Phase::Linger, 30, true, false),
            c(Phase::Linger, 20, true, false),
        ];
        assert_eq!(victim(&open), Some(2));
        // Then the oldest silent one, before any that has sent something, however old.
        let open = [
            c(Phase::Head, 0, true, false),
            c(Phase::Head, 20, false, false),
            c(Phase::Head, 10, false, false),
            c(Phase::Answer, 5, true, false),
        ];
        assert_eq!(victim(&open), Some(2));
        // Then the oldest still sending its head.
        let open = [
            c(Phase::Head, 10, true, false),
            c(Phase::Head, 5, true, false),
            c(Phase::Head, 1, false, true),
        ];
        assert_eq!(victim(&open), Some(1));
        // Never one being answered, nor one being ended.
        let open = [
            c(Phase::Answer, 0, true, false),
            c(Phase::Linger, 0, true, true),
        ];
        assert_eq!(victim(&open), None);
        assert_eq!(victim(&[]), None);
        // Then the oldest whose client has left its answer unread for a while.
        let stuck = |ms, still| Candidate {
            still_for: Duration::from_millis(still),
            ..c(Phase::Write, ms, true, false)
        };
        let open = [
            c(Phase::Answer, 0, true, false),
            stuck(1, 999),
            stuck(30, 1000),
            stuck(20, 5000),
        ];
        assert_eq!(victim(&open), Some(3));
        let open = [stuck(20, 5000), c(Phase::Head, 40, true, false)];
        assert_eq!(victim(&open), Some(1));
    }
}

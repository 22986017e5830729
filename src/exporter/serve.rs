//! The exporter's HTTP/1.1 server for Prometheus's scrapes, on std's `TcpListener`.
//!
//! Every job on a node can reach the exporter's port, so no client may hold another back:
//! connections are served at once, each on a thread of its own, at most [`MAX_CONNECTIONS`]
//! at a time, each within one deadline from its accept to its close (`conn.rs`: 1.5 s for its
//! request head, 10 s in all). `GET /metrics` (or `HEAD`) answers the exposition in the format
//! the client asks for; `GET /` a one-line pointer to it; another path 404, another method 405.
//! Each connection is closed after its answer.
//!
//! When [`MAX_CONNECTIONS`] are open, a new connection makes room: the server ends the one
//! that is of least use ([`victim`]): one already answered and lingering, else the oldest that
//! has sent nothing at all, else the oldest still sending its head, else the oldest whose
//! client has left its answer unread for [`WRITE_STALL`]. A connection whose answer is being
//! made or read is never ended; when every one is, the new one waits (in the kernel's queue)
//! until one ends, by its deadline at the latest. Prometheus sends its request the moment it connects, so its
//! scrape is answered even while the slots are full of connections that send nothing or drip.
//! Threads, descriptors and memory stay bounded: one thread (with a small stack), two
//! descriptors, one request head and a 256 KiB send buffer in the kernel per connection, and
//! its answer while it is written.

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::Exporter;
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
    /// When it was accepted.
    pub accepted: Instant,
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
            Some((rank, c.accepted, i))
        })
        .min()
        .map(|(_, _, i)| i)
}

/// An open connection, as the server keeps it.
struct Slot {
    id: u64,
    accepted: Instant,
    /// The same socket as the thread's: shut down to end the connection.
    stream: TcpStream,
    progress: Arc<Progress>,
    ending: bool,
}

/// What the server's threads share.
struct Shared {
    exporter: Mutex<Exporter>,
    slots: Mutex<Vec<Slot>>,
    /// Signalled when a connection ends.
    freed: Condvar,
}

impl Shared {
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
                    accepted: s.accepted,
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

/// Serves connection `s`, accepted at `accepted`, on a thread of its own.
fn start(shared: &Arc<Shared>, s: TcpStream, accepted: Instant, id: u64) {
    // Else the kernel grows it up to its own bound (4 MiB by default) for each client that
    // leaves its answer unread, and charges it to the exporter's memory.
    let _ = crate::sys::set_send_buffer(s.as_fd(), SEND_BUFFER_BYTES);
    let Ok(stream) = s.try_clone() else {
        // Out of descriptors: this connection is closed unanswered.
        return;
    };
    let progress = Arc::new(Progress::new(accepted));
    shared.slots().push(Slot {
        id,
        accepted,
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
            let _ = conn::handle(s, accepted, &guard.shared.exporter, &progress);
            drop(guard);
        });
    if spawned.is_err() {
        // No thread to be had now (the guard, dropped with the closure, freed the slot).
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Answers connections on `listener` for ever, at most [`MAX_CONNECTIONS`] at once. Returns
/// only on an error of the listener itself; a client's error ends that client's connection only.
pub fn serve(listener: &TcpListener, exporter: Exporter) -> io::Error {
    let shared = Arc::new(Shared {
        exporter: Mutex::new(exporter),
        slots: Mutex::new(Vec::with_capacity(MAX_CONNECTIONS)),
        freed: Condvar::new(),
    });
    let mut id = 0;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                let accepted = Instant::now();
                shared.make_room();
                id += 1;
                start(&shared, s, accepted, id);
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
    fn room_is_made_by_ending_the_connection_of_least_use() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let c = |phase, ms, heard, ending| Candidate {
            phase,
            accepted: at(ms),
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

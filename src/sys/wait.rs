//! Waiting on descriptors: a sampler thread sleeps until its next sample, a phase mark on its
//! socket, or a word from another thread ([`Wake`]), whichever comes first, instead of waking
//! up every few milliseconds to look.
//!
//! The one `unsafe` call here is `poll(2)`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Waits until one of `fds` has something to read, or `timeout` has passed. An interrupted
/// wait (a signal) returns early: callers look at their state again and wait anew.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<()> {
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // Rounded up: a wait cut short by rounding down would wake the thread before it is due,
    // for nothing (1 ms more is within a sample's jitter).
    let ms = timeout
        .as_micros()
        .div_ceil(1000)
        .min(libc::c_int::MAX as u128) as libc::c_int;
    // SAFETY: `polled` is a live, writable array of `polled.len()` pollfd structs for the call;
    // the descriptors are borrowed, so open, for as long as `fds` is.
    let rc = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// A word from one thread to another that waits with [`wait_readable`]: [`Wake::wake`] makes
/// [`Wake::fd`] readable until [`Wake::drain`]. A wake sent before the wait begins is not lost
/// (the descriptor stays readable), so the waiter may look at its state, then wait.
#[derive(Debug)]
pub struct Wake {
    tx: UnixDatagram,
    rx: UnixDatagram,
}

impl Wake {
    /// A new pair of connected sockets (close-on-exec, as std makes them).
    pub fn new() -> io::Result<Wake> {
        let (tx, rx) = UnixDatagram::pair()?;
        tx.set_nonblocking(true)?;
        rx.set_nonblocking(true)?;
        Ok(Wake { tx, rx })
    }

    /// Makes the descriptor readable. A full buffer means it is readable already: not an error.
    pub fn wake(&self) {
        let _ = self.tx.send(&[1]);
    }

    /// Reads every wake waiting, so that the next wait sleeps.
    pub fn drain(&self) {
        let mut buf = [0u8; 16];
        while self.rx.recv(&mut buf).is_ok() {}
    }

    /// What the waiter waits on.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.rx.as_fd()
    }

    /// Waits until this is woken, one of `others` has something to read, or `timeout` has
    /// passed; then drains the wakes, so that the next wait sleeps.
    pub fn wait_with(&self, others: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<()> {
        let mut fds = others.to_vec();
        fds.push(self.fd());
        let r = wait_readable(&fds, timeout);
        self.drain();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_wait_ends_at_its_timeout_at_a_wake_or_at_a_datagram() {
        let w = Wake::new().unwrap();
        let t = Instant::now();
        wait_readable(&[w.fd()], Duration::from_millis(50)).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(50));
        // A wake sent before the wait: the wait returns at once, until drained.
        w.wake();
        w.wake();
        let t = Instant::now();
        wait_readable(&[w.fd()], Duration::from_secs(10)).unwrap();
        wait_readable(&[w.fd()], Duration::from_secs(10)).unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
        w.drain();
        let t = Instant::now();
        wait_readable(&[w.fd()], Duration::from_millis(30)).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(30), "drained");
        // Another descriptor of the set becoming readable ends the wait too.
        let (a, b) = UnixDatagram::pair().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            a.send(b"x").unwrap();
        });
        let t = Instant::now();
        wait_readable(&[w.fd(), b.as_fd()], Duration::from_secs(10)).unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
        sender.join().unwrap();
    }
}

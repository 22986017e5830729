//! Stream sockets: how much a peer has sent that is not read yet, how much the kernel may hold
//! of what is sent, and dropping what it holds when the socket is closed.
//!
//! The `unsafe` calls here are `ioctl(FIONREAD)` and `setsockopt(SO_SNDBUF, SO_LINGER)`.

use std::os::fd::{AsRawFd, BorrowedFd};

/// Bytes waiting to be read on socket `fd` (`FIONREAD`), without reading them or waiting.
pub fn bytes_waiting(fd: BorrowedFd<'_>) -> std::io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int; `n` lives across the call, and `fd` is borrowed, so open.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Sets socket `fd`'s send buffer to `bytes` (`SO_SNDBUF`; the kernel doubles it for its own
/// bookkeeping, and no longer grows it by itself).
pub fn set_send_buffer(fd: BorrowedFd<'_>, bytes: usize) -> std::io::Result<()> {
    let n = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: SO_SNDBUF takes an int; `n` lives across the call and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&n as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes the close of socket `fd` a reset (`SO_LINGER` on, 0 s): the kernel drops at once
/// what it holds of what was sent and not yet acknowledged, instead of holding it, and trying
/// to send it, for as long as a peer that does not read keeps its window shut.
pub fn reset_on_close(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: SO_LINGER takes a struct linger; `l` lives across the call and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn bytes_sent_and_not_read_are_counted() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        assert_eq!(bytes_waiting(s.as_fd()).unwrap(), 0);
        c.write_all(b"GET /").unwrap();
        c.flush().unwrap();
        let t0 = std::time::Instant::now();
        while bytes_waiting(s.as_fd()).unwrap() < 5 {
            assert!(t0.elapsed().as_secs() < 5, "the bytes never arrived");
            std::thread::yield_now();
        }
        assert_eq!(bytes_waiting(s.as_fd()).unwrap(), 5);
    }

    /// Bytes a socket takes, without waiting, for a peer that does not read.
    fn taken_unread(send_buffer: Option<usize>) -> usize {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        if let Some(b) = send_buffer {
            set_send_buffer(s.as_fd(), b).unwrap();
        }
        s.set_nonblocking(true).unwrap();
        let chunk = vec![0u8; 64 << 10];
        let mut sent = 0;
        // A moment for the window to open as far as it will.
        for _ in 0..50 {
            while let Ok(n) = s.write(&chunk) {
                sent += n;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        sent
    }

    #[test]
    fn a_small_send_buffer_holds_less_for_a_client_that_does_not_read() {
        let small = taken_unread(Some(64 << 10));
        let grown = taken_unread(None);
        assert!(
            small < 1 << 20,
            "{small} bytes taken with a 64 KiB send buffer"
        );
        assert!(
            small < grown,
            "{small} with a 64 KiB send buffer, {grown} without"
        );
    }

    #[test]
    fn a_socket_closed_with_unsent_bytes_after_reset_on_close_is_reset() {
        use std::io::{ErrorKind, Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        // More than the peer's window: some stays in the sender's queue.
        let chunk = vec![0u8; 64 << 10];
        for _ in 0..200 {
            if s.write(&chunk).is_err() {
                break;
            }
        }
        reset_on_close(s.as_fd()).unwrap();
        drop(s);
        peer.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let end = loop {
            match peer.read(&mut buf) {
                Ok(0) => break None,
                Ok(_) => {}
                Err(e) => break Some(e.kind()),
            }
        };
        assert_eq!(end, Some(ErrorKind::ConnectionReset));
    }
}

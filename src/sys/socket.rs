//! Unix datagram sockets that learn the sender's uid from the kernel.

/// Asks the kernel to attach the sender's credentials to every datagram `sock` receives (for
/// [`recv_with_sender`]).
pub fn pass_credentials(sock: &std::os::unix::net::UnixDatagram) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: SO_PASSCRED takes an int; `on` lives across the call and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one datagram into `buf` without waiting, with the uid the kernel vouches for (the
/// socket has [`pass_credentials`] on). `Ok(None)`: nothing is waiting. A datagram without
/// credentials (which a socket with `SO_PASSCRED` never gets) comes with uid `None`.
pub fn recv_with_sender(
    sock: &std::os::unix::net::UnixDatagram,
    buf: &mut [u8],
) -> std::io::Result<Option<(usize, Option<u32>)>> {
    use std::os::fd::AsRawFd;
    // Room for one SCM_CREDENTIALS message, 8-byte aligned as cmsghdr needs.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: all-zero bytes are a valid msghdr (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` points at `iov` (over `buf`) and `control`, both alive and writable for the
    // call; MSG_DONTWAIT makes it return at once.
    let n = unsafe {
        libc::recvmsg(
            sock.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        };
    }
    let mut uid = None;
    // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR reads its control fields only.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: a non-null header from CMSG_FIRSTHDR/CMSG_NXTHDR lies inside `control`.
        let (level, kind) = unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type) };
        if level == libc::SOL_SOCKET && kind == libc::SCM_CREDENTIALS {
            // SAFETY: an SCM_CREDENTIALS message carries one `ucred`; it may be unaligned.
            let cred: libc::ucred =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
            uid = Some(cred.uid);
        }
        // SAFETY: `cmsg` is a header inside `msg`'s control buffer (see above).
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    Ok(Some((n as usize, uid)))
}

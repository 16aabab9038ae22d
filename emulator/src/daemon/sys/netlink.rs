//! A netlink socket that reports address changes (the GID table follows them).

use super::cvt::{cvt, own};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// A nonblocking rtnetlink socket subscribed to IPv4 and IPv6 address changes
/// (RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR, rtnetlink(7)).
pub fn netlink_addr_watch() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    let fd = own(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    })?;
    // SAFETY: sockaddr_nl is plain data; all-zero is a valid value.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_groups = (libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
    // SAFETY: `sa` is a valid sockaddr_nl of the given length.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
}

/// Reads and discards everything queued on a nonblocking socket (notifications that are
/// only a cue to look again); an overrun (ENOBUFS) counts as something read.
pub fn drain_socket(fd: RawFd) {
    let mut buf = [0u8; 8192];
    for _ in 0..64 {
        // SAFETY: reads at most `buf.len()` bytes into a local buffer.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 && io::Error::last_os_error().raw_os_error() != Some(libc::ENOBUFS) {
            return;
        }
    }
}

//! Batched UDP I/O: recvmmsg(2) and sendmmsg(2) with the socket addresses the kernel uses.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::RawFd;

use emu_core::ECN_MASK;

use super::udp::ECN_ECT0;

/// A socket address as the kernel takes it.
fn sockaddr_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// The address the kernel filled in, if it is IPv4 or IPv6.
fn socket_addr_from(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::from((
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Buffers for receiving a batch of datagrams with one recvmmsg(2).
#[derive(Debug)]
pub struct RecvBatch {
    pub bufs: Vec<Vec<u8>>,
    /// Length of datagram `i` (valid for `i < count`); `None` if it was truncated.
    pub lens: Vec<Option<usize>>,
    pub srcs: Vec<Option<SocketAddr>>,
    /// The IPv4 TOS / IPv6 traffic class octet of datagram `i`, when the socket reports it
    /// (`IP_RECVTOS` / `IPV6_RECVTCLASS`).
    pub tos: Vec<Option<u8>>,
    /// The local address datagram `i` arrived on when the backend reports it per
    /// datagram (the xdp backend's sockets serve every address of a device); `None`: the
    /// address the batch was received on.
    pub dsts: Vec<Option<SocketAddr>>,
    names: Vec<libc::sockaddr_storage>,
    /// Ancillary data per datagram (8-byte aligned for `cmsghdr`).
    controls: Vec<[u64; CONTROL_WORDS]>,
}

/// Room for one TOS or traffic class control message (and then some).
const CONTROL_WORDS: usize = 8;

/// The TOS / traffic class octet from a received message's control messages.
fn tos_of(h: &libc::msghdr) -> Option<u8> {
    // SAFETY: the kernel filled `msg_control` up to `msg_controllen`; CMSG_FIRSTHDR and
    // CMSG_NXTHDR stay within it and return null at its end.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let (level, kind) = ((*c).cmsg_level, (*c).cmsg_type);
            let data = libc::CMSG_DATA(c);
            if level == libc::IPPROTO_IP && kind == libc::IP_TOS {
                return Some(*data);
            }
            if level == libc::IPPROTO_IPV6 && kind == libc::IPV6_TCLASS {
                let v = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                return Some(v as u8);
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

impl RecvBatch {
    pub fn new(count: usize, size: usize) -> RecvBatch {
        RecvBatch {
            bufs: vec![vec![0u8; size]; count],
            lens: vec![None; count],
            srcs: vec![None; count],
            tos: vec![None; count],
            dsts: vec![None; count],
            controls: vec![[0; CONTROL_WORDS]; count],
            // SAFETY: sockaddr_storage is plain old data; all zeroes is valid.
            names: vec![unsafe { std::mem::zeroed() }; count],
        }
    }
}

/// Receives up to a batch of datagrams without blocking; returns how many arrived.
pub fn recv_batch(fd: RawFd, b: &mut RecvBatch) -> io::Result<usize> {
    let mut iovs: Vec<libc::iovec> = b
        .bufs
        .iter_mut()
        .map(|buf| libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        })
        .collect();
    let mut hdrs: Vec<libc::mmsghdr> = iovs
        .iter_mut()
        .zip(b.names.iter_mut())
        .zip(b.controls.iter_mut())
        .map(|((iov, name), control)| {
            // SAFETY: mmsghdr is plain old data; all zeroes is valid.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen =
                std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = control.as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = std::mem::size_of_val(control) as _;
            h
        })
        .collect();
    // SAFETY: every header points at a live buffer and name of `b`, for the call only.
    let n = unsafe {
        libc::recvmmsg(
            fd,
            hdrs.as_mut_ptr(),
            hdrs.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    let n = n as usize;
    for (i, h) in hdrs.iter().take(n).enumerate() {
        b.lens[i] = (h.msg_hdr.msg_flags & libc::MSG_TRUNC == 0).then_some(h.msg_len as usize);
        b.srcs[i] = socket_addr_from(&b.names[i]);
        b.dsts[i] = None;
        b.tos[i] = tos_of(&h.msg_hdr);
    }
    Ok(n)
}

/// One datagram to send.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    pub dst: SocketAddr,
    /// The IPv4 TOS / IPv6 traffic class octet without its ECN bits (DSCP << 2); it leaves
    /// with ECT(0) added.
    pub traffic_class: u8,
    pub payload: &'a [u8],
}

/// Fills `control` with one `IP_TOS` (IPv4) or `IPV6_TCLASS` (IPv6) control message
/// carrying `tos`, and points `h` at it. Both take an `int` (ip(7), ipv6(7)).
fn set_tos(h: &mut libc::msghdr, control: &mut [u64; CONTROL_WORDS], ipv6: bool, tos: u8) {
    let (level, kind) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
    } else {
        (libc::IPPROTO_IP, libc::IP_TOS)
    };
    let value = libc::c_int::from(tos);
    h.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE of an int (24 bytes on Linux) fits the 64-byte, 8-byte aligned
    // `control`; CMSG_FIRSTHDR is then non-null and its data lies within `control`.
    unsafe {
        h.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as _;
        let c = libc::CMSG_FIRSTHDR(h);
        (*c).cmsg_level = level;
        (*c).cmsg_type = kind;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), value);
    }
}

/// Sends datagrams with one sendmmsg(2) (more if the kernel takes fewer); stops at the
/// first error other than an interrupted call. Returns how many were sent. A datagram
/// whose traffic class is not 0 carries its TOS / traffic class (with ECT(0)) in a control
/// message; the others leave with the socket's default, ECT(0) alone.
pub fn send_batch(fd: RawFd, msgs: &[Outgoing<'_>]) -> io::Result<usize> {
    let mut names: Vec<(libc::sockaddr_storage, libc::socklen_t)> =
        msgs.iter().map(|m| sockaddr_of(m.dst)).collect();
    let mut iovs: Vec<libc::iovec> = msgs
        .iter()
        .map(|m| libc::iovec {
            iov_base: m.payload.as_ptr() as *mut libc::c_void,
            iov_len: m.payload.len(),
        })
        .collect();
    let marked = msgs.iter().filter(|m| m.traffic_class & !ECN_MASK != 0);
    let mut controls: Vec<[u64; CONTROL_WORDS]> = vec![[0; CONTROL_WORDS]; marked.count()];
    let mut free_controls = controls.iter_mut();
    let mut hdrs: Vec<libc::mmsghdr> = iovs
        .iter_mut()
        .zip(names.iter_mut())
        .zip(msgs)
        .map(|((iov, (name, len)), m)| {
            // SAFETY: mmsghdr is plain old data; all zeroes is valid.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = *len;
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
            let dscp = m.traffic_class & !ECN_MASK;
            if dscp != 0 {
                if let Some(control) = free_controls.next() {
                    set_tos(&mut h.msg_hdr, control, m.dst.is_ipv6(), dscp | ECN_ECT0);
                }
            }
            h
        })
        .collect();
    let mut sent = 0;
    while sent < hdrs.len() {
        // SAFETY: the headers point at live names and payloads for the call only.
        let n = unsafe {
            libc::sendmmsg(
                fd,
                hdrs[sent..].as_mut_ptr(),
                (hdrs.len() - sent) as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return if sent > 0 { Ok(sent) } else { Err(e) };
        }
        if n == 0 {
            break;
        }
        sent += n as usize;
    }
    Ok(sent)
}

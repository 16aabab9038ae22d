//! The two headers of rsocket.c's datagram service, byte for byte, so a peer running
//! rdma-core's rsockets reads ours:
//!
//! - `struct ds_header` leads every UD SEND: version (4 or 6), its own length (8 or 24),
//!   then the sender's port and address in network order (IPv6 adds the flow info).
//!   The receiver reports that address as the datagram's source.
//! - `struct ds_udp_header` leads the datagrams sent on the kernel UDP socket while the
//!   peer's QP is not yet known: tag `0x55555555`, version, op (`RS_OP_DATA` carries a
//!   payload, `RS_OP_CTRL` only announces a QP), length (16 or 28), the sender's QP
//!   number (24 bits) and its address.
//!
//! Parsing checks every length before it reads; a buffer that fails the checks is
//! refused with `None` (the datagram is dropped, as rsocket.c drops it).
use core::ffi::c_int;
use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// `DS_IPV4_HDR_LEN`, `DS_IPV6_HDR_LEN`.
pub const IPV4_HDR_LEN: usize = 8;
pub const IPV6_HDR_LEN: usize = 24;
/// `DS_UDP_TAG`, `DS_UDP_IPV4_HDR_LEN`, `DS_UDP_IPV6_HDR_LEN`.
pub const UDP_TAG: u32 = 0x5555_5555;
pub const UDP_IPV4_HDR_LEN: usize = 16;
pub const UDP_IPV6_HDR_LEN: usize = 28;
/// rsocket.c's `RS_OP_DATA` and `RS_OP_CTRL` (the values of its `enum`).
pub const OP_DATA: u8 = 0;
pub const OP_CTRL: u8 = 7;
/// `sizeof(struct ibv_grh)`: what a UD receive writes before the payload.
pub const GRH_LEN: usize = 40;

/// `ds_format_hdr`: the `ds_header` naming `addr`.
pub fn ds_header(addr: &SocketAddr) -> Vec<u8> {
    match addr {
        SocketAddr::V4(a) => {
            let mut h = vec![4, IPV4_HDR_LEN as u8];
            h.extend_from_slice(&a.port().to_be_bytes());
            h.extend_from_slice(&a.ip().octets());
            h
        }
        SocketAddr::V6(a) => {
            let mut h = vec![6, IPV6_HDR_LEN as u8];
            h.extend_from_slice(&a.port().to_be_bytes());
            h.extend_from_slice(&a.flowinfo().to_be_bytes());
            h.extend_from_slice(&a.ip().octets());
            h
        }
    }
}

/// Parses the `ds_header` at the start of `b` (`ds_valid_recv` + `ds_set_src`): the
/// source it names and the header's length.
pub fn parse_ds_header(b: &[u8]) -> Option<(SocketAddr, usize)> {
    let port = u16::from_be_bytes([*b.get(2)?, *b.get(3)?]);
    match (b.first()?, b.get(1)?) {
        (4, 8) if b.len() >= IPV4_HDR_LEN => {
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Some((SocketAddr::V4(SocketAddrV4::new(ip, port)), IPV4_HDR_LEN))
        }
        (6, 24) if b.len() >= IPV6_HDR_LEN => {
            let flow = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&b[8..24]);
            let a = SocketAddrV6::new(Ipv6Addr::from(ip), port, flow, 0);
            Some((SocketAddr::V6(a), IPV6_HDR_LEN))
        }
        _ => None,
    }
}

/// `ds_sendv_udp`'s header: `op` from the QP numbered `qpn`, bound to `local`.
pub fn udp_header(op: u8, qpn: u32, local: &SocketAddr) -> Vec<u8> {
    let (version, len) = match local {
        SocketAddr::V4(_) => (4, UDP_IPV4_HDR_LEN),
        SocketAddr::V6(_) => (6, UDP_IPV6_HDR_LEN),
    };
    let mut h = UDP_TAG.to_be_bytes().to_vec();
    h.extend_from_slice(&[version, op, len as u8, 0]);
    h.extend_from_slice(&(qpn & 0xff_ffff).to_be_bytes());
    match local.ip() {
        IpAddr::V4(ip) => h.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => h.extend_from_slice(&ip.octets()),
    }
    h
}

/// A `ds_udp_header` as `udp_svc_valid_udp_hdr` accepts it from `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    pub op: u8,
    pub qpn: u32,
    /// Where the payload starts.
    pub len: usize,
}

pub fn parse_udp_header(b: &[u8], from: &SocketAddr) -> Option<UdpHeader> {
    if b.len() < UDP_IPV4_HDR_LEN || u32::from_be_bytes([b[0], b[1], b[2], b[3]]) != UDP_TAG {
        return None;
    }
    let len = usize::from(b[6]);
    let ok = match (b[4], from) {
        (4, SocketAddr::V4(_)) => len == UDP_IPV4_HDR_LEN,
        (6, SocketAddr::V6(_)) => len == UDP_IPV6_HDR_LEN && b.len() >= UDP_IPV6_HDR_LEN,
        _ => false,
    };
    ok.then(|| UdpHeader {
        op: b[5],
        qpn: u32::from_be_bytes([b[8], b[9], b[10], b[11]]) & 0xff_ffff,
        len,
    })
}

/// A `struct sockaddr` from C as an address; None for other families or short lengths.
///
/// # Safety
/// `addr` is NULL or points to `len` readable bytes.
pub unsafe fn from_sockaddr(addr: *const sockaddr, len: socklen_t) -> Option<SocketAddr> {
    if addr.is_null() {
        return None;
    }
    let len = len as usize;
    if len < core::mem::size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: at least the family is readable (the caller's contract, length checked).
    let family = unsafe { (addr as *const libc::sa_family_t).read_unaligned() };
    match c_int::from(family) {
        libc::AF_INET if len >= core::mem::size_of::<sockaddr_in>() => {
            // SAFETY: `len` bytes readable, enough for a sockaddr_in.
            let a = unsafe { (addr as *const sockaddr_in).read_unaligned() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len >= core::mem::size_of::<sockaddr_in6>() => {
            // SAFETY: `len` bytes readable, enough for a sockaddr_in6.
            let a = unsafe { (addr as *const sockaddr_in6).read_unaligned() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                u32::from_be(a.sin6_flowinfo),
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The C form of `a` and its length.
pub fn to_sockaddr(a: &SocketAddr) -> (sockaddr_storage, socklen_t) {
    // SAFETY: plain old data; all zeroes is a valid sockaddr_storage.
    let mut s: sockaddr_storage = unsafe { core::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v) => {
            let sin = sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { (&mut s as *mut sockaddr_storage as *mut sockaddr_in).write(sin) };
            core::mem::size_of::<sockaddr_in>()
        }
        SocketAddr::V6(v) => {
            let sin6 = sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: v.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v.ip().octets(),
                },
                sin6_scope_id: v.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { (&mut s as *mut sockaddr_storage as *mut sockaddr_in6).write(sin6) };
            core::mem::size_of::<sockaddr_in6>()
        }
    };
    (s, len as socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ds_header_ipv4_is_rsocket_c_layout() {
        let a: SocketAddr = "10.1.2.3:7174".parse().unwrap();
        let h = ds_header(&a);
        assert_eq!(h, [4, 8, 0x1c, 0x06, 10, 1, 2, 3]);
        assert_eq!(parse_ds_header(&h), Some((a, 8)));
    }

    #[test]
    fn ds_header_ipv6_round_trips_and_short_buffers_are_refused() {
        let a = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 9, 7, 0));
        let h = ds_header(&a);
        assert_eq!(h.len(), 24);
        assert_eq!(parse_ds_header(&h), Some((a, 24)));
        assert_eq!(parse_ds_header(&h[..23]), None);
        assert_eq!(parse_ds_header(&[4, 24, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(parse_ds_header(&[]), None);
    }

    #[test]
    fn udp_header_matches_family_and_tag() {
        let local: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        let h = udp_header(OP_DATA, 0x1234_5678, &local);
        assert_eq!(
            h[..12],
            [0x55, 0x55, 0x55, 0x55, 4, 0, 16, 0, 0, 0x34, 0x56, 0x78]
        );
        let from: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let p = parse_udp_header(&h, &from).unwrap();
        assert_eq!((p.op, p.qpn, p.len), (OP_DATA, 0x34_5678, 16));
        let from6: SocketAddr = "[::1]:1".parse().unwrap();
        assert_eq!(parse_udp_header(&h, &from6), None);
        let mut bad = h.clone();
        bad[0] = 0;
        assert_eq!(parse_udp_header(&bad, &from), None);
        assert_eq!(parse_udp_header(&h[..15], &from), None);
    }

    #[test]
    fn sockaddr_round_trips() {
        for s in ["10.0.0.1:80", "[2001:db8::5]:443"] {
            let a: SocketAddr = s.parse().unwrap();
            let (c, len) = to_sockaddr(&a);
            // SAFETY: a sockaddr_storage of `len` bytes.
            let back = unsafe { from_sockaddr(&c as *const _ as *const sockaddr, len) };
            assert_eq!(back, Some(a));
        }
    }
}

//! Socket options: integers, and IP multicast membership and sending for UD multicast
//! groups (see `crate::daemon::devices::mcast`).

use super::cvt::{cvt, own};
use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// Sets an integer socket option.
pub fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        )
    })
    .map(|_| ())
}

/// Sets a socket option from a plain C struct.
fn setsockopt_struct<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: passes a pointer to a live, initialised `T` and its size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as u32,
        )
    })
    .map(|_| ())
}

/// Joins (`join`) or leaves the IP multicast `group` on interface `ifindex`
/// (IP_ADD_MEMBERSHIP / IP_DROP_MEMBERSHIP with `ip_mreqn`, IPV6_ADD_MEMBERSHIP /
/// IPV6_DROP_MEMBERSHIP with `ipv6_mreq`).
pub fn mcast_membership(
    fd: RawFd,
    group: std::net::IpAddr,
    ifindex: u32,
    join: bool,
) -> io::Result<()> {
    match group {
        std::net::IpAddr::V4(g) => {
            let m = libc::ip_mreqn {
                imr_multiaddr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(g.octets()),
                },
                imr_address: libc::in_addr { s_addr: 0 },
                imr_ifindex: ifindex as libc::c_int,
            };
            let name = if join {
                libc::IP_ADD_MEMBERSHIP
            } else {
                libc::IP_DROP_MEMBERSHIP
            };
            setsockopt_struct(fd, libc::IPPROTO_IP, name, &m)
        }
        std::net::IpAddr::V6(g) => {
            let m = libc::ipv6_mreq {
                ipv6mr_multiaddr: libc::in6_addr {
                    s6_addr: g.octets(),
                },
                ipv6mr_interface: ifindex,
            };
            let name = if join {
                libc::IPV6_ADD_MEMBERSHIP
            } else {
                libc::IPV6_DROP_MEMBERSHIP
            };
            setsockopt_struct(fd, libc::IPPROTO_IPV6, name, &m)
        }
    }
}

/// Makes an unconnected UDP socket send multicast out of interface `ifindex`
/// (IP_MULTICAST_IF / IPV6_MULTICAST_IF), with `ttl` (IP_MULTICAST_TTL /
/// IPV6_MULTICAST_HOPS), looped back to local listeners (IP_MULTICAST_LOOP /
/// IPV6_MULTICAST_LOOP), as a host's other processes expect.
pub fn mcast_sender(fd: RawFd, v6: bool, ifindex: u32, ttl: u8) -> io::Result<()> {
    if v6 {
        setsockopt_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MULTICAST_IF,
            ifindex as libc::c_int,
        )?;
        setsockopt_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MULTICAST_HOPS,
            libc::c_int::from(ttl),
        )?;
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_LOOP, 1)
    } else {
        let m = libc::ip_mreqn {
            imr_multiaddr: libc::in_addr { s_addr: 0 },
            imr_address: libc::in_addr { s_addr: 0 },
            imr_ifindex: ifindex as libc::c_int,
        };
        setsockopt_struct(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_IF, &m)?;
        setsockopt_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_TTL,
            libc::c_int::from(ttl),
        )?;
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_LOOP, 1)
    }
}

/// A nonblocking UDP socket bound to `addr` with SO_REUSEADDR, so several listeners (two
/// daemons on one host) can bind one multicast group address and port.
pub fn udp_bind_reuse(addr: std::net::SocketAddr) -> io::Result<std::net::UdpSocket> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain syscall; the result is checked and owned at once.
    let fd = own(unsafe {
        libc::socket(
            family,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    match addr {
        std::net::SocketAddr::V4(a) => {
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a live sockaddr_in and its size.
            cvt(unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as u32,
                )
            })?;
        }
        std::net::SocketAddr::V6(a) => {
            let sa = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: a live sockaddr_in6 and its size.
            cvt(unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_in6).cast(),
                    std::mem::size_of::<libc::sockaddr_in6>() as u32,
                )
            })?;
        }
    }
    Ok(std::net::UdpSocket::from(fd))
}

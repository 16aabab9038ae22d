//! UD multicast in the daemon: the `AttachMcast` / `DetachMcast` requests, and the IP
//! multicast groups each device's interface joins while a QP is attached to them.
//!
//! As rxe does with `dev_mc_add`, the device joins the group's IP address on its
//! interface when the first QP attaches and leaves it when the last one detaches (or its
//! client goes away). A RoCE v2 MGID names its IP group directly: an IPv4-mapped MGID
//! (`::ffff:239.1.2.3`) is the IPv4 group, any other (`ff0e::...`) the IPv6 one.
//!
//! Each joined group gets its own socket bound to `group:4791` (SO_REUSEADDR, so another
//! daemon on the host can listen too): the kernel then hands it exactly the datagrams
//! addressed to the group, and the group address it is bound to is the destination the
//! core needs for the ICRC (which covers the IP destination). Sending needs nothing
//! special: the unicast sockets send to a group address out of the device's interface
//! (IP_MULTICAST_IF) and loop it back to local listeners (IP_MULTICAST_LOOP), this daemon
//! included, so the local path never short-circuits multicast.

use crate::daemon::devices::device::ServedDevice;
use crate::daemon::link::datagram::{BoundSocket, MCAST_BASE, ROCE_V2_PORT};
use crate::daemon::sys::{self, Epoll};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::AsRawFd;

/// The IP group a RoCE v2 MGID names.
fn group_ip(mgid: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(mgid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Opens a socket bound to `group:4791` that joined `group` on interface `ifindex`.
fn open_group_socket(group: IpAddr, ifindex: u32) -> std::io::Result<BoundSocket> {
    let addr = match group {
        IpAddr::V4(_) => SocketAddr::new(group, ROCE_V2_PORT),
        IpAddr::V6(g) => {
            // Interface- and link-local scopes (ff01::/16, ff02::/16, any flags) need the
            // interface to bind.
            let scope = if g.segments()[0] & 0xff0f <= 0xff02 {
                ifindex
            } else {
                0
            };
            SocketAddr::V6(SocketAddrV6::new(g, ROCE_V2_PORT, 0, scope))
        }
    };
    let socket = sys::udp_bind_reuse(addr)?;
    sys::mcast_membership(socket.as_raw_fd(), group, ifindex, true)?;
    let _ = sys::setsockopt_int(
        socket.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUF,
        4 << 20,
    );
    Ok(BoundSocket {
        socket,
        local: SocketAddr::new(group, ROCE_V2_PORT),
    })
}

/// `AttachMcast` / `DetachMcast` of QP `qpn` on device `d`. A group the interface cannot
/// join fails the attach with the socket's errno (rxe returns what `dev_mc_add` returns)
/// and leaves nothing attached. `token` gives the epoll token of the device's multicast
/// socket slot `i` (the engine owns the token space).
pub(in crate::daemon) fn mcast_verb(
    d: &mut ServedDevice,
    epoll: &Epoll,
    token: impl Fn(usize) -> u64,
    qpn: u32,
    gid: [u8; 16],
    lid: u16,
    attach: bool,
) -> Result<(), i32> {
    let was_member = d.nic.mcast_groups().contains(&gid);
    if attach {
        d.nic.attach_mcast(qpn, gid, lid)?;
    } else {
        d.nic.detach_mcast(qpn, gid, lid)?;
    }
    if let Err(e) = sync_mcast(d, epoll, &token) {
        if attach && !was_member {
            let _ = d.nic.detach_mcast(qpn, gid, lid);
            let _ = sync_mcast(d, epoll, &token);
            return Err(e.raw_os_error().unwrap_or(libc::EINVAL));
        }
    }
    Ok(())
}

/// Joins the IP groups device `d` has attached QPs for and leaves the others. The first
/// error (a group that could not be joined) is returned after the rest is done.
pub(in crate::daemon) fn sync_mcast(
    d: &mut ServedDevice,
    epoll: &Epoll,
    token: impl Fn(usize) -> u64,
) -> std::io::Result<()> {
    let wanted: Vec<IpAddr> = d.nic.mcast_groups().into_iter().map(group_ip).collect();
    let ifindex = d.netdev.index;
    let stale: Vec<usize> = d
        .port()
        .mcast
        .joined()
        .filter(|(_, ip)| !wanted.contains(ip))
        .map(|(i, _)| i)
        .collect();
    for i in stale {
        if let Some(s) = d.port_mut().mcast.slots[i].take() {
            epoll.remove(s.socket.as_raw_fd());
            let _ = sys::mcast_membership(s.socket.as_raw_fd(), s.local.ip(), ifindex, false);
            tracing::debug!(device = d.name(), group = %s.local.ip(), "left multicast group");
        }
    }
    let mut result = Ok(());
    for group in wanted {
        if d.port().mcast.joined().any(|(_, ip)| ip == group) {
            continue;
        }
        let slot = match d.port().mcast.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None if d.port().mcast.slots.len() < 0x10000 - MCAST_BASE => {
                d.port_mut().mcast.slots.push(None);
                d.port_mut().mcast.slots.len() - 1
            }
            None => {
                result = result.and(Err(std::io::Error::from_raw_os_error(libc::ENOMEM)));
                continue;
            }
        };
        let opened = open_group_socket(group, ifindex).and_then(|s| {
            epoll.add(s.socket.as_raw_fd(), token(MCAST_BASE + slot))?;
            Ok(s)
        });
        match opened {
            Ok(s) => {
                tracing::debug!(device = d.name(), %group, "joined multicast group");
                d.port_mut().mcast.slots[slot] = Some(s);
            }
            Err(e) => {
                tracing::info!(device = d.name(), %group, error = %e, "cannot join multicast group");
                result = result.and(Err(e));
            }
        }
    }
    result
}

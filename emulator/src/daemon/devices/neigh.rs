//! The next hop's link-layer address, from the kernel (rtnetlink, RFC 3549): the route to
//! a destination (`RTM_GETROUTE`: on-link, or through which gateway), then that hop's
//! entry in the neighbour table (`RTM_GETNEIGH`, ARP for IPv4, neighbour discovery for
//! IPv6). A backend that writes its own Ethernet header (`packet.rs`) needs both; when the
//! table has no entry yet, the kernel is asked to resolve it by sending it one empty UDP
//! datagram to the discard port (RFC 863), which makes it resolve the next hop.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// How long a learned address is used before the table is asked again.
const FRESH: Duration = Duration::from_secs(5);
/// How long a destination that could not be resolved is not asked for again (its packets
/// are lost meanwhile; the transport retransmits).
const RETRY_AFTER: Duration = Duration::from_millis(200);
/// How long the engine waits for the kernel to resolve a new destination.
const RESOLVE_WAIT: Duration = Duration::from_millis(50);

// rtnetlink message types and attributes (linux/rtnetlink.h, linux/neighbour.h).
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTA_DST: u16 = 1;
const RTA_GATEWAY: u16 = 5;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// Neighbour states with a usable address: REACHABLE, STALE, DELAY, PROBE, NOARP,
/// PERMANENT.
const NUD_VALID: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;
const NLMSG_HDR_LEN: usize = 16;

/// Link-layer addresses of next hops on one interface, cached.
#[derive(Debug)]
pub struct Neighbours {
    ifindex: u32,
    known: HashMap<IpAddr, ([u8; 6], Instant)>,
    failed: HashMap<IpAddr, Instant>,
    /// Destinations resolved by asking the kernel, and ones given up on.
    pub resolved: u64,
    pub unresolved: u64,
}

impl Neighbours {
    pub fn new(ifindex: u32) -> Neighbours {
        Neighbours {
            ifindex,
            known: HashMap::new(),
            failed: HashMap::new(),
            resolved: 0,
            unresolved: 0,
        }
    }

    /// The Ethernet address packets to `dst` go to: the multicast address of a group,
    /// else the next hop's from the kernel's table. A destination never seen is resolved
    /// first when the table has none (the engine waits up to [`RESOLVE_WAIT`] once); a
    /// known one is looked up again every [`FRESH`] without waiting, and keeps its old
    /// address while the kernel re-resolves it. `None` when it cannot be learned now.
    pub fn mac_for(&mut self, dst: IpAddr, now: Instant) -> Option<[u8; 6]> {
        if let Some(m) = multicast_mac(dst) {
            return Some(m);
        }
        let old = self.known.get(&dst).copied();
        if let Some((mac, at)) = old {
            if now.duration_since(at) < FRESH {
                return Some(mac);
            }
        }
        if self
            .failed
            .get(&dst)
            .is_some_and(|&t| now.duration_since(t) < RETRY_AFTER)
        {
            return old.map(|(m, _)| m);
        }
        let hop = next_hop(dst).unwrap_or(dst);
        let mut mac = neighbour(self.ifindex, hop).ok().flatten();
        if mac.is_none() {
            solicit(dst, self.ifindex);
            if old.is_none() {
                let start = Instant::now();
                while mac.is_none() && start.elapsed() < RESOLVE_WAIT {
                    std::thread::sleep(Duration::from_millis(1));
                    mac = neighbour(self.ifindex, hop).ok().flatten();
                }
                if mac.is_some() {
                    self.resolved += 1;
                }
            }
        }
        match mac {
            Some(m) => {
                self.failed.remove(&dst);
                self.known.insert(dst, (m, now));
                Some(m)
            }
            None => {
                self.failed.insert(dst, now);
                if old.is_none() {
                    self.unresolved += 1;
                    tracing::debug!(%dst, %hop, "next hop not resolved");
                }
                old.map(|(m, _)| m)
            }
        }
    }
}

/// The Ethernet address of an IP multicast group (RFC 1112 6.4; RFC 2464 7).
pub fn multicast_mac(dst: IpAddr) -> Option<[u8; 6]> {
    match dst {
        IpAddr::V4(v4) if v4.is_multicast() => {
            let o = v4.octets();
            Some([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]])
        }
        IpAddr::V6(v6) if v6.is_multicast() => {
            let o = v6.octets();
            Some([0x33, 0x33, o[12], o[13], o[14], o[15]])
        }
        _ => None,
    }
}

/// Makes the kernel resolve the next hop to `dst`: one empty datagram to its discard port.
fn solicit(dst: IpAddr, ifindex: u32) {
    let (bind, to): (SocketAddr, SocketAddr) = match dst {
        IpAddr::V4(_) => (
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            SocketAddr::new(dst, 9),
        ),
        IpAddr::V6(v6) => {
            let scope = if v6.segments()[0] & 0xffc0 == 0xfe80 {
                ifindex
            } else {
                0
            };
            (
                SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
                SocketAddr::V6(SocketAddrV6::new(v6, 9, 0, scope)),
            )
        }
    };
    if let Ok(s) = UdpSocket::bind(bind) {
        let _ = s.send_to(&[], to);
    }
}

/// An rtnetlink socket.
fn netlink() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the descriptor is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let tv = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    // SAFETY: passes a live timeval and its size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        );
    }
    Ok(fd)
}

/// Sends one request and calls `each(type, payload)` for every message of the answer
/// until it is complete (a single answer, or a dump's NLMSG_DONE).
fn query(request: &[u8], dump: bool, mut each: impl FnMut(u16, &[u8])) -> io::Result<()> {
    let fd = netlink()?;
    // SAFETY: sends the live request buffer; the kernel is the default destination.
    let sent = unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: receives into the live buffer, at most its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut at = &buf[..n as usize];
        while at.len() >= NLMSG_HDR_LEN {
            let len = u32::from_ne_bytes([at[0], at[1], at[2], at[3]]) as usize;
            let kind = u16::from_ne_bytes([at[4], at[5]]);
            if len < NLMSG_HDR_LEN || len > at.len() {
                return Ok(());
            }
            match kind {
                NLMSG_DONE => return Ok(()),
                NLMSG_ERROR => {
                    let errno = at
                        .get(16..20)
                        .map_or(0, |e| i32::from_ne_bytes([e[0], e[1], e[2], e[3]]));
                    return if errno == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(-errno))
                    };
                }
                _ => each(kind, &at[NLMSG_HDR_LEN..len]),
            }
            if !dump {
                return Ok(());
            }
            at = &at[align4(len).min(at.len())..];
        }
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// The attributes (type, value) after a fixed header of `fixed` octets.
fn attrs(payload: &[u8], fixed: usize) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = payload.get(fixed..).unwrap_or_default();
    std::iter::from_fn(move || {
        if at.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([at[0], at[1]]));
        let kind = u16::from_ne_bytes([at[2], at[3]]);
        if len < 4 || len > at.len() {
            return None;
        }
        let value = &at[4..len];
        at = &at[align4(len).min(at.len())..];
        Some((kind, value))
    })
}

fn header(kind: u16, flags: u16, body_len: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(NLMSG_HDR_LEN + body_len);
    m.extend_from_slice(&((NLMSG_HDR_LEN + body_len) as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it
    m
}

fn family(a: IpAddr) -> u8 {
    match a {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

fn octets(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// The gateway the route to `dst` goes through, `None` when `dst` is on-link (or the
/// kernel has no route).
pub fn next_hop(dst: IpAddr) -> Option<IpAddr> {
    let addr = octets(dst);
    let attr_len = 4 + addr.len();
    let mut m = header(
        RTM_GETROUTE,
        libc::NLM_F_REQUEST as u16,
        12 + align4(attr_len),
    );
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    m.extend_from_slice(&[family(dst), (addr.len() * 8) as u8, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    m.extend_from_slice(&RTA_DST.to_ne_bytes());
    m.extend_from_slice(&addr);
    m.resize(NLMSG_HDR_LEN + 12 + align4(attr_len), 0);
    let mut gateway = None;
    query(&m, false, |kind, payload| {
        if kind != RTM_NEWROUTE {
            return;
        }
        gateway = attrs(payload, 12)
            .find(|(k, _)| *k == RTA_GATEWAY)
            .and_then(|(_, v)| ip_of(v));
    })
    .ok()?;
    gateway
}

fn ip_of(v: &[u8]) -> Option<IpAddr> {
    match v.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::new(v[0], v[1], v[2], v[3]))),
        16 => <[u8; 16]>::try_from(v).ok().map(|o| IpAddr::V6(o.into())),
        _ => None,
    }
}

/// The link-layer address the kernel's neighbour table holds for `hop` on interface
/// `ifindex`, if its entry is usable.
pub fn neighbour(ifindex: u32, hop: IpAddr) -> io::Result<Option<[u8; 6]>> {
    let mut m = header(
        RTM_GETNEIGH,
        (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16,
        12,
    );
    // struct ndmsg: family, pad, pad, ifindex, state, flags, type.
    m.extend_from_slice(&[family(hop), 0, 0, 0]);
    m.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    m.extend_from_slice(&[0; 4]);
    let mut found = None;
    query(&m, true, |kind, payload| {
        if kind != RTM_NEWNEIGH || payload.len() < 12 || found.is_some() {
            return;
        }
        let index = u32::from_ne_bytes([payload[4], payload[5], payload[6], payload[7]]);
        let state = u16::from_ne_bytes([payload[8], payload[9]]);
        if index != ifindex || state & NUD_VALID == 0 {
            return;
        }
        let mut dst = None;
        let mut mac = None;
        for (k, v) in attrs(payload, 12) {
            match k {
                NDA_DST => dst = ip_of(v),
                NDA_LLADDR => mac = <[u8; 6]>::try_from(v).ok(),
                _ => {}
            }
        }
        if dst == Some(hop) {
            found = mac;
        }
    })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multicast_groups_map_to_their_ethernet_addresses() {
        let v4: IpAddr = "239.129.2.3".parse().unwrap();
        assert_eq!(multicast_mac(v4), Some([0x01, 0x00, 0x5e, 0x01, 2, 3]));
        let v6: IpAddr = "ff02::1:ff00:1234".parse().unwrap();
        assert_eq!(
            multicast_mac(v6),
            Some([0x33, 0x33, 0xff, 0x00, 0x12, 0x34])
        );
        assert_eq!(multicast_mac("10.0.0.1".parse().unwrap()), None);
    }

    #[test]
    fn the_kernel_answers_route_and_neighbour_queries() {
        // Loopback is on-link and has no neighbour entries: both queries must succeed
        // and find nothing rather than fail or misparse.
        assert_eq!(next_hop(IpAddr::V4(Ipv4Addr::LOCALHOST)), None);
        let lo = crate::daemon::devices::netdev::lookup("lo").expect("lo");
        assert_eq!(
            neighbour(lo.index, IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("dump"),
            None
        );
    }
}

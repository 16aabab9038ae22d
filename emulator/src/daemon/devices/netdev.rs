//! What a device learns from its network interface: addresses (→ GID table), MTU
//! (→ port MTU), index, MAC (→ node GUID), as rxe derives them.

use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One network interface as the daemon sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netdev {
    pub name: String,
    pub index: u32,
    pub mtu: u32,
    pub mac: [u8; 6],
    /// Addresses in the order the kernel lists them.
    pub addrs: Vec<IpAddr>,
}

/// Headers rxe subtracts from the netdev MTU before choosing the IB MTU
/// (Ethernet + IPv6 + UDP + BTH + the largest extension headers + ICRC; rxe's
/// `RXE_MAX_HDR_LENGTH`).
pub const ROCE_MAX_HDR_LEN: u32 = 80;

/// The IB MTU (bytes, 256..=4096) rxe would choose for a netdev MTU: the largest IB MTU
/// not above `netdev_mtu - 80`, at least 256.
pub fn ib_mtu_for(netdev_mtu: u32) -> u32 {
    let room = netdev_mtu.saturating_sub(ROCE_MAX_HDR_LEN);
    [4096, 2048, 1024, 512]
        .into_iter()
        .find(|&m| room >= m)
        .unwrap_or(256)
}

/// IPv4-mapped IPv6 addresses as IPv4 (how sockets and GIDs name them): the core's
/// rule, under the name the daemon's CM code uses.
pub use emu_core::addr::canonical_ip as canonical;

/// A GID as RoCE v2 forms it from an IP address: IPv6 as is, IPv4 mapped (`::ffff:a.b.c.d`).
pub fn gid_of(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address a GID names (IPv4 for mapped GIDs).
pub fn addr_of_gid(gid: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

fn is_link_local(a: &Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// The GID table order: IPv6 link-local first (rxe's default GID), then IPv4-mapped, then
/// the other IPv6 addresses. All RoCE v2.
pub fn gid_table(addrs: &[IpAddr]) -> Vec<IpAddr> {
    let ll = addrs
        .iter()
        .filter(|a| matches!(a, IpAddr::V6(v6) if is_link_local(v6)));
    let v4 = addrs.iter().filter(|a| a.is_ipv4());
    let v6 = addrs
        .iter()
        .filter(|a| matches!(a, IpAddr::V6(v6) if !is_link_local(v6)));
    let mut out: Vec<IpAddr> = Vec::new();
    for a in ll.chain(v4).chain(v6) {
        if !out.contains(a) {
            out.push(*a);
        }
    }
    out
}

/// A node GUID from a MAC (EUI-64, as rxe does), or from the device name when the MAC is
/// all zero (loopback), so that two devices never share one.
pub fn node_guid(mac: [u8; 6], name: &str) -> u64 {
    if mac == [0; 6] {
        return fnv1a(name) | (0x02 << 56);
    }
    eui48(mac)
}

/// `addrconf_addr_eui48`: the modified EUI-64 of a MAC (the universal/local bit flipped,
/// `ff:fe` in the middle).
pub fn eui48(mac: [u8; 6]) -> u64 {
    let [a, b, c, d, e, f] = mac;
    u64::from_be_bytes([a ^ 0x02, b, c, 0xff, 0xfe, d, e, f])
}

/// The MAC back from [`eui48`]'s EUI-64.
pub fn mac_of_eui48(guid: u64) -> [u8; 6] {
    let [a, b, c, _, _, d, e, f] = guid.to_be_bytes();
    [a ^ 0x02, b, c, d, e, f]
}

/// A locally administered unicast MAC for an interface that has none (loopback, tun), as
/// `eth_random_addr` makes one; from `seed` and the device's name, so two devices of one
/// daemon never share it.
pub fn fabricated_mac(seed: u64, name: &str) -> [u8; 6] {
    let h = (seed ^ fnv1a(name)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let [a, b, c, d, e, f, _, _] = h.to_be_bytes();
    [(a & 0xfe) | 0x02, b, c, d, e, f]
}

/// FNV-1a of a name.
fn fnv1a(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Looks up an interface by name.
pub fn lookup(name: &str) -> io::Result<Netdev> {
    let sys = format!("/sys/class/net/{name}");
    if name.contains('/') || !std::path::Path::new(&sys).exists() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no network interface {name:?}"),
        ));
    }
    let read = |f: &str| std::fs::read_to_string(format!("{sys}/{f}")).unwrap_or_default();
    let mtu = read("mtu").trim().parse().unwrap_or(1500);
    let index = read("ifindex").trim().parse().unwrap_or(0);
    let mut mac = [0u8; 6];
    for (m, part) in mac.iter_mut().zip(read("address").trim().split(':')) {
        *m = u8::from_str_radix(part, 16).unwrap_or(0);
    }
    Ok(Netdev {
        name: name.to_string(),
        index,
        mtu,
        mac,
        addrs: addresses(name)?,
    })
}

/// The IPv4 and IPv6 addresses of an interface (getifaddrs).
fn addresses(name: &str) -> io::Result<Vec<IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, valid until freeifaddrs;
        // ifa_name is a NUL-terminated string, ifa_addr (when non-null) points at a sockaddr
        // whose family tells its real type.
        unsafe {
            let ifa = &*cur;
            if !ifa.ifa_addr.is_null() && CStr::from_ptr(ifa.ifa_name).to_bytes() == name.as_bytes()
            {
                match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                            sin.sin_addr.s_addr,
                        ))));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        out.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            cur = ifa.ifa_next;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ib_mtu_follows_rxe_derivation() {
        assert_eq!(ib_mtu_for(1500), 1024);
        assert_eq!(ib_mtu_for(9000), 4096);
        assert_eq!(ib_mtu_for(65536), 4096);
        assert_eq!(ib_mtu_for(2200), 2048);
        assert_eq!(ib_mtu_for(100), 256);
    }

    #[test]
    fn gid_table_puts_link_local_first_then_ipv4_mapped() {
        let addrs: Vec<IpAddr> = vec![
            "2001:db8::1".parse().unwrap(),
            "10.0.0.1".parse().unwrap(),
            "fe80::1".parse().unwrap(),
        ];
        let t = gid_table(&addrs);
        assert_eq!(t, vec![addrs[2], addrs[1], addrs[0]]);
        assert_eq!(gid_of(addrs[1])[10..], [0xff, 0xff, 10, 0, 0, 1]);
        assert_eq!(addr_of_gid(gid_of(addrs[1])), addrs[1]);
    }

    #[test]
    fn loopback_is_found_with_its_addresses() {
        let lo = lookup("lo").expect("lo exists");
        assert!(lo.addrs.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert!(lookup("no-such-if0").is_err());
        assert!(lookup("../x").is_err());
    }
}

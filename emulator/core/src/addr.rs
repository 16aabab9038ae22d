//! IP addresses as the transport names them: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`,
//! as dual-stack sockets report IPv4 peers) is the IPv4 address it maps, so that the ICRC,
//! the GID table and the CM compare one form.

use std::net::{IpAddr, SocketAddr};

/// `ip` with an IPv4-mapped IPv6 address turned into its IPv4 address; any other address
/// as it is.
///
/// ```
/// use emu_core::addr::canonical_ip;
/// let mapped: std::net::IpAddr = "::ffff:10.0.0.1".parse().unwrap();
/// assert_eq!(canonical_ip(mapped), "10.0.0.1".parse::<std::net::IpAddr>().unwrap());
/// ```
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// [`canonical_ip`] for a socket address; the port is kept.
pub fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(canonical_ip(a.ip()), a.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_mapped_addresses_change() {
        let cases = [
            ("[::ffff:192.0.2.7]:4791", "192.0.2.7:4791"),
            ("192.0.2.7:4791", "192.0.2.7:4791"),
            ("[2001:db8::1]:4791", "[2001:db8::1]:4791"),
            // IPv4-compatible (deprecated, `::a.b.c.d`) is not mapped: kept as IPv6.
            ("[::192.0.2.7]:1", "[::192.0.2.7]:1"),
        ];
        for (from, to) in cases {
            let (from, to): (SocketAddr, SocketAddr) = (from.parse().unwrap(), to.parse().unwrap());
            assert_eq!(canonical(from), to, "{from}");
        }
    }
}

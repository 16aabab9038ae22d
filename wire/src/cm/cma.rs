//! What RDMA CM (librdmacm / the kernel's rdma_cm) puts inside CM messages.
//!
//! The service ID of an IP-addressed connection is `0x0000_0000_01PP_pppp`: the prefix
//! 0x01, the port space PP (0x06 TCP, 0x11 UDP, 0x3f IB) and the 16-bit port
//! (rdma-core `RDMA_IB_IP_PS_*`). The private data of a REQ or SIDR_REQ starts with the
//! 36-octet CMA header (the kernel's `struct cma_hdr`):
//!
//! ```text
//!  0 cma_version (0) | 1 ip_version << 4 | 2..4 source port
//!  4..20 source address | 20..36 destination address
//! ```
//! where an IPv4 address sits in the last 4 octets of its 16 (the first 12 are zero).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{be16, Error, Result};

/// Length of the CMA header.
pub const CMA_HEADER_LEN: usize = 36;
/// The CMA header version.
pub const CMA_VERSION: u8 = 0;

/// An RDMA CM port space (`enum rdma_ucm_port_space`, low octet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// RDMA_PS_TCP (0x0106): reliable connected QPs.
    Tcp,
    /// RDMA_PS_UDP (0x0111): UD QPs.
    Udp,
    /// RDMA_PS_IB (0x013f): any QP type.
    Ib,
    /// Any other value.
    Unknown(u8),
}

impl PortSpace {
    /// The octet in the service ID.
    pub fn code(self) -> u8 {
        match self {
            PortSpace::Tcp => 0x06,
            PortSpace::Udp => 0x11,
            PortSpace::Ib => 0x3f,
            PortSpace::Unknown(v) => v,
        }
    }

    /// From the octet in the service ID.
    pub fn from_code(v: u8) -> PortSpace {
        match v {
            0x06 => PortSpace::Tcp,
            0x11 => PortSpace::Udp,
            0x3f => PortSpace::Ib,
            v => PortSpace::Unknown(v),
        }
    }
}

/// An IB service ID (IBA 12.7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ServiceId(pub u64);

impl ServiceId {
    const IP_PREFIX: u64 = 0x0000_0000_0100_0000;
    const IP_MASK: u64 = 0xffff_ffff_ff00_0000;

    /// The service ID RDMA CM uses for `port` in `space`.
    pub fn rdma_ip(space: PortSpace, port: u16) -> ServiceId {
        ServiceId(Self::IP_PREFIX | (u64::from(space.code()) << 16) | u64::from(port))
    }

    /// Port space and port, if this is an RDMA CM IP service ID.
    pub fn as_rdma_ip(self) -> Option<(PortSpace, u16)> {
        if self.0 & Self::IP_MASK != Self::IP_PREFIX {
            return None;
        }
        Some((PortSpace::from_code((self.0 >> 16) as u8), self.0 as u16))
    }
}

/// The RDMA CM IP private-data header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHeader {
    /// Source port of the active side.
    pub src_port: u16,
    /// Source address.
    pub src: IpAddr,
    /// Destination address (same family as `src`).
    pub dst: IpAddr,
}

fn addr(b: &[u8], v6: bool) -> IpAddr {
    if v6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[..16]);
        IpAddr::V6(Ipv6Addr::from(a))
    } else {
        IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))
    }
}

fn put_addr(b: &mut [u8], a: IpAddr) {
    match a {
        IpAddr::V4(v4) => {
            b[..12].fill(0);
            b[12..16].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => b[..16].copy_from_slice(&v6.octets()),
    }
}

impl CmaHeader {
    /// Parses the header at the start of a REQ's private data.
    pub fn parse(b: &[u8]) -> Result<CmaHeader> {
        if b.len() < CMA_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let ip_version = b[1] >> 4;
        if b[0] != CMA_VERSION || !(ip_version == 4 || ip_version == 6) {
            return Err(Error::BadCmaHeader(b[0], ip_version));
        }
        let v6 = ip_version == 6;
        Ok(CmaHeader {
            src_port: be16(&b[2..4]),
            src: addr(&b[4..20], v6),
            dst: addr(&b[20..36], v6),
        })
    }

    /// Writes the header into `b[..36]`. A mixed-family pair is written as IPv6 with
    /// the IPv4 address mapped.
    pub fn emit(&self, b: &mut [u8]) {
        let (src, dst) = match (self.src, self.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => (self.src, self.dst),
            _ => (IpAddr::V6(to_v6(self.src)), IpAddr::V6(to_v6(self.dst))),
        };
        b[0] = CMA_VERSION;
        b[1] = if src.is_ipv4() { 4 << 4 } else { 6 << 4 };
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        put_addr(&mut b[4..20], src);
        put_addr(&mut b[20..36], dst);
    }
}

fn to_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_id_of_tcp_port_space() {
        let s = ServiceId::rdma_ip(PortSpace::Tcp, 7174);
        assert_eq!(s.0, 0x0000_0000_0106_1c06);
        assert_eq!(s.as_rdma_ip(), Some((PortSpace::Tcp, 7174)));
        assert_eq!(ServiceId(0x1234).as_rdma_ip(), None);
    }

    #[test]
    fn ipv4_header_puts_address_in_last_four_octets() {
        let h = CmaHeader {
            src_port: 0x1234,
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        };
        let mut b = [0u8; CMA_HEADER_LEN];
        h.emit(&mut b);
        assert_eq!(&b[..4], &[0, 0x40, 0x12, 0x34]);
        assert_eq!(&b[16..20], &[10, 0, 0, 1]);
        assert_eq!(CmaHeader::parse(&b).unwrap(), h);
    }

    #[test]
    fn bad_ip_version_is_rejected() {
        let b = [0u8; CMA_HEADER_LEN];
        assert_eq!(CmaHeader::parse(&b), Err(Error::BadCmaHeader(0, 0)));
    }
}

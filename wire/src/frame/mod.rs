//! Whole frames: Ethernet / IPv4 or IPv6 / UDP or TCP around RoCE v2 and iWARP.
//!
//! The Ethernet, IP, UDP and TCP headers are smoltcp's (`smoltcp::wire`); this module
//! only chains them and finds what RoCE and iWARP need: the IB transport packet (BTH
//! through ICRC) of a UDP datagram to port 4791, and the raw IP and UDP headers the
//! ICRC covers. Every length comes from the IP and UDP length fields, never from the end
//! of the frame, which Ethernet pads to 60 octets.
//!
//! [`parse`] reads a frame; [`build_udp`], [`build_roce`] and [`build_tcp`] write one
//! (for the daemon's capture feature, the raw backends and tests).

use std::net::{IpAddr, SocketAddr};

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
    UdpPacket, UdpRepr,
};

use crate::roce::{self, icrc, PacketRepr, ROCE_V2_UDP_PORT};

/// Length of an Ethernet II header.
pub const ETHERNET_HEADER_LEN: usize = 14;
/// The 802.1Q tag protocol identifier.
pub const VLAN_TPID: u16 = 0x8100;
/// Length of a UDP header.
pub const UDP_HEADER_LEN: usize = 8;

/// Why a frame could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// Shorter than an Ethernet header.
    Ethernet,
    /// An EtherType other than IPv4 or IPv6.
    UnsupportedEtherType(u16),
    /// The IPv4 header is truncated or inconsistent (smoltcp's checks).
    Ipv4,
    /// The IPv6 header is truncated or its payload length runs past the frame.
    Ipv6,
    /// The UDP header is truncated or its length is inconsistent.
    Udp,
    /// The TCP header is truncated or inconsistent.
    Tcp,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Ethernet => write!(f, "truncated Ethernet header"),
            Error::UnsupportedEtherType(t) => write!(f, "unsupported EtherType {t:#06x}"),
            Error::Ipv4 => write!(f, "malformed IPv4 header"),
            Error::Ipv6 => write!(f, "malformed IPv6 header"),
            Error::Udp => write!(f, "malformed UDP header"),
            Error::Tcp => write!(f, "malformed TCP header"),
        }
    }
}

impl std::error::Error for Error {}

/// The IP layer of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpHeader<'a> {
    /// IPv4.
    V4 {
        /// The raw header, options included.
        header: &'a [u8],
        /// The parsed fields.
        repr: Ipv4Repr,
        /// Identification.
        ident: u16,
        /// DSCP and ECN octet.
        tos: u8,
    },
    /// IPv6.
    V6 {
        /// The raw 40-octet header.
        header: &'a [u8],
        /// The parsed fields.
        repr: Ipv6Repr,
        /// Traffic class.
        traffic_class: u8,
        /// Flow label.
        flow_label: u32,
    },
}

impl IpHeader<'_> {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpHeader::V4 { repr, .. } => IpAddr::V4(repr.src_addr),
            IpHeader::V6 { repr, .. } => IpAddr::V6(repr.src_addr),
        }
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpHeader::V4 { repr, .. } => IpAddr::V4(repr.dst_addr),
            IpHeader::V6 { repr, .. } => IpAddr::V6(repr.dst_addr),
        }
    }
}

/// TCP header fields a decoder needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpInfo {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number (meaningful when `ack` is set).
    pub ack_number: u32,
    /// SYN flag.
    pub syn: bool,
    /// ACK flag.
    pub ack: bool,
    /// FIN flag.
    pub fin: bool,
    /// RST flag.
    pub rst: bool,
    /// PSH flag.
    pub psh: bool,
    /// Window.
    pub window: u16,
}

/// The transport layer of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport<'a> {
    /// UDP.
    Udp {
        /// The raw 8-octet header.
        header: &'a [u8],
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
        /// Checksum (0 = none, as RoCE NICs send over IPv4).
        checksum: u16,
        /// Payload, as long as the UDP length says.
        payload: &'a [u8],
    },
    /// TCP.
    Tcp {
        /// Header fields.
        info: TcpInfo,
        /// Payload.
        payload: &'a [u8],
    },
    /// Another IP protocol.
    Other {
        /// The IP protocol number.
        protocol: u8,
        /// The IP payload.
        payload: &'a [u8],
    },
}

/// A parsed frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Ethernet addresses and EtherType (0x8100 for a VLAN-tagged frame).
    pub ethernet: EthernetRepr,
    /// The 802.1Q tag control information (PCP, DEI, VLAN ID) of a tagged frame.
    pub vlan: Option<u16>,
    /// IP layer.
    pub ip: IpHeader<'a>,
    /// Transport layer.
    pub transport: Transport<'a>,
}

impl<'a> Frame<'a> {
    /// The IB transport packet (BTH through ICRC) when this is RoCE v2 (UDP to 4791).
    pub fn roce(&self) -> Option<&'a [u8]> {
        match self.transport {
            Transport::Udp {
                dst_port, payload, ..
            } if dst_port == ROCE_V2_UDP_PORT => Some(payload),
            _ => None,
        }
    }

    /// Checks the ICRC of a RoCE v2 frame against its real IP and UDP headers; `None` if
    /// this is not RoCE, or an IPv4 header with options (the ICRC covers 20 octets).
    pub fn verify_icrc(&self) -> Option<bool> {
        let ib = self.roce()?;
        let Transport::Udp { header, .. } = self.transport else {
            return None;
        };
        let udp: &[u8; 8] = header.try_into().ok()?;
        match self.ip {
            IpHeader::V4 { header, .. } => {
                let ip: &[u8; 20] = header.try_into().ok()?;
                Some(icrc::verify_ipv4(ip, udp, ib))
            }
            IpHeader::V6 { header, .. } => {
                let ip: &[u8; 40] = header.try_into().ok()?;
                Some(icrc::verify_ipv6(ip, udp, ib))
            }
        }
    }
}

/// Parses an Ethernet II frame carrying IPv4 or IPv6.
pub fn parse(frame: &[u8]) -> Result<Frame<'_>, Error> {
    let eth = EthernetFrame::new_checked(frame).map_err(|_| Error::Ethernet)?;
    let ethernet = EthernetRepr::parse(&eth).map_err(|_| Error::Ethernet)?;
    let (ethertype, vlan, l3) = if ethernet.ethertype == EthernetProtocol::Unknown(VLAN_TPID) {
        // IEEE 802.1Q: TCI (16), then the inner EtherType.
        let tag = frame
            .get(ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + 4)
            .ok_or(Error::Ethernet)?;
        let tci = u16::from_be_bytes([tag[0], tag[1]]);
        let inner = EthernetProtocol::from(u16::from_be_bytes([tag[2], tag[3]]));
        (inner, Some(tci), &frame[ETHERNET_HEADER_LEN + 4..])
    } else {
        (ethernet.ethertype, None, &frame[ETHERNET_HEADER_LEN..])
    };
    let (ip, protocol, l4) = match ethertype {
        EthernetProtocol::Ipv4 => {
            let p = Ipv4Packet::new_checked(l3).map_err(|_| Error::Ipv4)?;
            let caps = ChecksumCapabilities::ignored();
            let repr = Ipv4Repr::parse(&p, &caps).map_err(|_| Error::Ipv4)?;
            let hlen = usize::from(p.header_len());
            let total = usize::from(p.total_len());
            let ip = IpHeader::V4 {
                header: &l3[..hlen],
                repr,
                ident: p.ident(),
                tos: (p.dscp() << 2) | p.ecn(),
            };
            (ip, repr.next_header, &l3[hlen..total])
        }
        EthernetProtocol::Ipv6 => {
            let p = Ipv6Packet::new_checked(l3).map_err(|_| Error::Ipv6)?;
            let repr = Ipv6Repr::parse(&p).map_err(|_| Error::Ipv6)?;
            let ip = IpHeader::V6 {
                header: &l3[..40],
                repr,
                traffic_class: p.traffic_class(),
                flow_label: p.flow_label(),
            };
            (
                ip,
                repr.next_header,
                &l3[40..40 + usize::from(p.payload_len())],
            )
        }
        other => return Err(Error::UnsupportedEtherType(u16::from(other))),
    };
    let transport = match protocol {
        IpProtocol::Udp => {
            let u = UdpPacket::new_checked(l4).map_err(|_| Error::Udp)?;
            let len = usize::from(u.len());
            Transport::Udp {
                header: &l4[..UDP_HEADER_LEN],
                src_port: u.src_port(),
                dst_port: u.dst_port(),
                checksum: u.checksum(),
                payload: &l4[UDP_HEADER_LEN..len],
            }
        }
        IpProtocol::Tcp => {
            let t = TcpPacket::new_checked(l4).map_err(|_| Error::Tcp)?;
            let hlen = usize::from(t.header_len());
            Transport::Tcp {
                info: TcpInfo {
                    src_port: t.src_port(),
                    dst_port: t.dst_port(),
                    seq: t.seq_number().0 as u32,
                    ack_number: t.ack_number().0 as u32,
                    syn: t.syn(),
                    ack: t.ack(),
                    fin: t.fin(),
                    rst: t.rst(),
                    psh: t.psh(),
                    window: t.window_len(),
                },
                payload: &l4[hlen..],
            }
        }
        other => Transport::Other {
            protocol: u8::from(other),
            payload: l4,
        },
    };
    Ok(Frame {
        ethernet,
        vlan,
        ip,
        transport,
    })
}

/// Link and network addresses of a frame to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameAddrs {
    /// Ethernet source.
    pub eth_src: [u8; 6],
    /// Ethernet destination.
    pub eth_dst: [u8; 6],
    /// IP source (the family of `src` decides IPv4 or IPv6; `dst` must match).
    pub src: IpAddr,
    /// IP destination.
    pub dst: IpAddr,
}

/// Writes Ethernet + IP headers for `payload_len` octets of `protocol`; returns the
/// frame buffer and the offset where the IP payload starts.
fn ip_frame(
    addrs: &FrameAddrs,
    protocol: IpProtocol,
    payload_len: usize,
    ident: u16,
) -> (Vec<u8>, usize) {
    let caps = ChecksumCapabilities::default();
    let (ethertype, ip_len) = match addrs.src {
        IpAddr::V4(_) => (EthernetProtocol::Ipv4, 20),
        IpAddr::V6(_) => (EthernetProtocol::Ipv6, 40),
    };
    let total = (ETHERNET_HEADER_LEN + ip_len + payload_len).max(60);
    let mut buf = vec![0u8; total];
    let eth = EthernetRepr {
        src_addr: EthernetAddress(addrs.eth_src),
        dst_addr: EthernetAddress(addrs.eth_dst),
        ethertype,
    };
    eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
    let l3 = &mut buf[ETHERNET_HEADER_LEN..];
    match (addrs.src, addrs.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let repr = Ipv4Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: protocol,
                payload_len,
                hop_limit: 64,
            };
            let mut p = Ipv4Packet::new_unchecked(&mut l3[..]);
            repr.emit(&mut p, &caps);
            p.set_ident(ident);
            p.fill_checksum();
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let repr = Ipv6Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: protocol,
                payload_len,
                hop_limit: 64,
            };
            repr.emit(&mut Ipv6Packet::new_unchecked(&mut l3[..]));
        }
        _ => panic!("FrameAddrs with mixed address families"),
    }
    (buf, ETHERNET_HEADER_LEN + ip_len)
}

fn ip_address(a: IpAddr) -> IpAddress {
    match a {
        IpAddr::V4(v4) => IpAddress::Ipv4(v4),
        IpAddr::V6(v6) => IpAddress::Ipv6(v6),
    }
}

/// Builds an Ethernet / IP / UDP frame around `payload`. Over IPv4 the UDP checksum is
/// 0 (what RoCE NICs and rxe send) and the IP ID is `ip_id` with DF set; over IPv6 the
/// UDP checksum is computed (IPv6 requires it). Frames shorter than 60 octets are
/// padded with zeros, as Ethernet does.
///
/// # Panics
/// If `addrs.src` and `addrs.dst` are of different families.
pub fn build_udp(
    addrs: &FrameAddrs,
    src_port: u16,
    dst_port: u16,
    ip_id: u16,
    payload: &[u8],
) -> Vec<u8> {
    let (mut buf, at) = ip_frame(
        addrs,
        IpProtocol::Udp,
        UDP_HEADER_LEN + payload.len(),
        ip_id,
    );
    let caps = if addrs.src.is_ipv4() {
        ChecksumCapabilities::ignored()
    } else {
        ChecksumCapabilities::default()
    };
    let repr = UdpRepr { src_port, dst_port };
    repr.emit(
        &mut UdpPacket::new_unchecked(&mut buf[at..at + UDP_HEADER_LEN + payload.len()]),
        &ip_address(addrs.src),
        &ip_address(addrs.dst),
        payload.len(),
        |p| p.copy_from_slice(payload),
        &caps,
    );
    buf
}

/// Builds a RoCE v2 frame carrying `packet`, with its ICRC computed over the frame's
/// own IP and UDP headers (so it verifies whatever the IP ID).
pub fn build_roce(
    addrs: &FrameAddrs,
    udp_src_port: u16,
    ip_id: u16,
    packet: &PacketRepr<'_>,
) -> Vec<u8> {
    let mut ib = vec![0u8; packet.buffer_len()];
    packet.emit(&mut roce::Packet::new_unchecked(&mut ib[..]));
    let mut frame = build_udp(addrs, udp_src_port, ROCE_V2_UDP_PORT, ip_id, &ib);
    let ip_len = if addrs.src.is_ipv4() { 20 } else { 40 };
    let udp_at = ETHERNET_HEADER_LEN + ip_len;
    let ib_at = udp_at + UDP_HEADER_LEN;
    let ib_end = ib_at + ib.len();
    let mut udp = [0u8; 8];
    udp.copy_from_slice(&frame[udp_at..ib_at]);
    let covered = &frame[ib_at..ib_end - roce::ICRC_LEN];
    let value = if addrs.src.is_ipv4() {
        let mut ip = [0u8; 20];
        ip.copy_from_slice(&frame[ETHERNET_HEADER_LEN..udp_at]);
        icrc::compute_ipv4(&ip, &udp, covered)
    } else {
        let mut ip = [0u8; 40];
        ip.copy_from_slice(&frame[ETHERNET_HEADER_LEN..udp_at]);
        icrc::compute_ipv6(&ip, &udp, covered)
    };
    roce::Packet::new_unchecked(&mut frame[ib_at..ib_end]).set_icrc(value);
    if !addrs.src.is_ipv4() {
        UdpPacket::new_unchecked(&mut frame[udp_at..ib_end])
            .fill_checksum(&ip_address(addrs.src), &ip_address(addrs.dst));
    }
    frame
}

/// Builds the frame a kernel UDP socket would send for a datagram (the daemon's capture
/// of its own traffic): IP ID 0 and DF, UDP checksum 0 over IPv4, Ethernet addresses
/// 02:00:00:00:00:00 (no real link layer exists behind a kernel socket). An IB packet
/// whose ICRC was computed with `icrc::for_udp4`/`for_udp6` verifies in this frame. A
/// mixed pair of families is written as IPv6 with the IPv4 address mapped.
pub fn build_datagram(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
    let (s, d) = match (src.ip(), dst.ip()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (IpAddr::V4(a), IpAddr::V4(b)),
        (a, b) => (IpAddr::V6(to_v6(a)), IpAddr::V6(to_v6(b))),
    };
    let addrs = FrameAddrs {
        eth_src: [0x02, 0, 0, 0, 0, 0],
        eth_dst: [0x02, 0, 0, 0, 0, 0],
        src: s,
        dst: d,
    };
    build_udp(&addrs, src.port(), dst.port(), 0, payload)
}

fn to_v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Builds an Ethernet / IP / TCP frame (no TCP options) carrying `payload`. The
/// control flags are taken from `info` (SYN, FIN, RST or PSH, at most one; ACK if set).
pub fn build_tcp(addrs: &FrameAddrs, info: &TcpInfo, payload: &[u8]) -> Vec<u8> {
    let control = if info.syn {
        TcpControl::Syn
    } else if info.fin {
        TcpControl::Fin
    } else if info.rst {
        TcpControl::Rst
    } else if info.psh {
        TcpControl::Psh
    } else {
        TcpControl::None
    };
    let repr = TcpRepr {
        src_port: info.src_port,
        dst_port: info.dst_port,
        control,
        seq_number: TcpSeqNumber(info.seq as i32),
        ack_number: info.ack.then_some(TcpSeqNumber(info.ack_number as i32)),
        window_len: info.window,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let len = repr.header_len() + payload.len();
    let (mut buf, at) = ip_frame(addrs, IpProtocol::Tcp, len, 0);
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut buf[at..at + len]),
        &ip_address(addrs.src),
        &ip_address(addrs.dst),
        &ChecksumCapabilities::default(),
    );
    buf
}

#[cfg(test)]
mod tests;

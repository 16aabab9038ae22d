//! Where a received RoCE v2 datagram goes: QP1 traffic (the GSI, IBA ch. 13) to the
//! device's CM agent, everything else to the transport ([`crate::Device::handle_datagram`],
//! which checks the ICRC of what it gets itself).
//!
//! A packet to QP1 gets the ICRC check every received packet gets (IBTA Annex A17; over
//! IPv4 an IP ID that makes it match is solved for, as rxe sends non-zero IDs) and must be
//! a GSI MAD ([`super::gsi::decapsulate`]); otherwise it is dropped, and the caller counts
//! it.

use crate::addr::canonical;
use std::net::SocketAddr;

use wire::roce::{bth, icrc};

use super::gsi;

/// What to do with a received RoCE v2 UDP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rx<'a> {
    /// Not for QP1: the transport's ([`crate::Device::handle_datagram`]).
    Transport,
    /// A CM MAD for the agent ([`super::CmAgent::handle_mad`]), with the addresses in the
    /// form the agent uses (IPv4-mapped IPv6 as IPv4).
    Gsi {
        /// The sender.
        src: SocketAddr,
        /// The local address it arrived on.
        dst: SocketAddr,
        /// The 256-octet MAD.
        mad: &'a [u8],
    },
    /// A QP1 packet that must not reach the agent.
    Dropped(GsiDrop),
}

/// Why a QP1 packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsiDrop {
    /// Its ICRC does not verify (or the two addresses are of different families).
    BadIcrc,
    /// It is not a UD SEND_ONLY with the GSI Q_Key carrying one MAD.
    NotAMad,
}

/// Routes `payload`, a RoCE v2 UDP payload (BTH through ICRC) from `src` that arrived
/// on `dst` (the local address, `IP_PKTINFO`).
pub fn route(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Rx<'_> {
    if !to_gsi(payload) {
        return Rx::Transport;
    }
    let (src, dst) = (canonical(src), canonical(dst));
    if !icrc_ok(src, dst, payload) {
        return Rx::Dropped(GsiDrop::BadIcrc);
    }
    match gsi::decapsulate(payload) {
        Some(mad) => Rx::Gsi { src, dst, mad },
        None => Rx::Dropped(GsiDrop::NotAMad),
    }
}

/// Whether `payload` (BTH through ICRC) is addressed to QP1, whose ICRC [`route`] checks.
pub fn to_gsi(payload: &[u8]) -> bool {
    bth::Packet::new_checked(payload).is_ok_and(|h| h.dest_qp() == gsi::GSI_QPN)
}

fn icrc_ok(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> bool {
    match (src, dst) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => !matches!(
            icrc::verify_udp4_any_id(*s.ip(), *d.ip(), s.port(), d.port(), payload),
            icrc::IcrcCheck::Invalid
        ),
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            icrc::verify_udp6(*s.ip(), *d.ip(), s.port(), d.port(), payload)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv6Addr};
    use wire::roce::Psn;

    const PORT: u16 = gsi::ROCE_V2_PORT;

    fn addrs() -> (SocketAddr, SocketAddr) {
        (
            "10.0.0.1:4791".parse().unwrap(),
            "10.0.0.2:4791".parse().unwrap(),
        )
    }

    fn gsi_packet(mad: &[u8; wire::cm::MAD_LEN]) -> Vec<u8> {
        let (s, d) = addrs();
        let mut buf = vec![0u8; gsi::GSI_PACKET_LEN];
        gsi::encapsulate_from(s.ip(), d.ip(), PORT, Psn::new(5), mad, &mut buf);
        buf
    }

    #[test]
    fn qp1_packet_with_a_good_icrc_goes_to_the_agent() {
        let mad = [7u8; wire::cm::MAD_LEN];
        let buf = gsi_packet(&mad);
        let (s, d) = addrs();
        assert_eq!(
            route(s, d, &buf),
            Rx::Gsi {
                src: s,
                dst: d,
                mad: &mad[..]
            }
        );
        // As a dual-stack socket reports them: IPv4-mapped, handed on as IPv4.
        let mapped = |a: SocketAddr| match a.ip() {
            IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), a.port()),
            IpAddr::V6(_) => a,
        };
        assert!(matches!(
            route(mapped(s), mapped(d), &buf),
            Rx::Gsi { src, dst, .. } if src == s && dst == d
        ));
    }

    #[test]
    fn qp1_packet_with_a_bad_icrc_is_dropped() {
        let mut buf = gsi_packet(&[7u8; wire::cm::MAD_LEN]);
        let (s, d) = addrs();
        // The ICRC covers the UDP source port.
        let other_port = SocketAddr::new(s.ip(), gsi::GSI_UDP_SRC_PORT);
        assert_eq!(route(other_port, d, &buf), Rx::Dropped(GsiDrop::BadIcrc));
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), PORT);
        assert_eq!(route(v6, d, &buf), Rx::Dropped(GsiDrop::BadIcrc));
        buf[40] ^= 1;
        assert_eq!(route(s, d, &buf), Rx::Dropped(GsiDrop::BadIcrc));
    }

    #[test]
    fn qp1_packet_that_is_not_a_mad_is_dropped() {
        let mut buf = gsi_packet(&[7u8; wire::cm::MAD_LEN]);
        // Cut short (no room for a MAD): its own ICRC still matches what is left.
        let (s, d) = addrs();
        let covered = bth::HEADER_LEN + 8 + 16;
        buf.truncate(covered + wire::roce::ICRC_LEN);
        let crc = icrc::for_udp4(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            PORT,
            PORT,
            &buf[..covered],
        );
        wire::roce::packet::Packet::new_unchecked(&mut buf[..]).set_icrc(crc);
        assert_eq!(route(s, d, &buf), Rx::Dropped(GsiDrop::NotAMad));
    }

    #[test]
    fn other_packets_go_to_the_transport() {
        let mut buf = gsi_packet(&[7u8; wire::cm::MAD_LEN]);
        bth::Packet::new_unchecked(&mut buf[..]).set_dest_qp(wire::roce::Qpn(0x11));
        let (s, d) = addrs();
        // Whatever its ICRC: the transport checks it.
        assert_eq!(route(s, d, &buf), Rx::Transport);
        assert_eq!(route(s, d, &buf[..8]), Rx::Transport);
    }
}

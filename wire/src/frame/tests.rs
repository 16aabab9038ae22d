use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;
use crate::roce::packet::{Body, Header};
use crate::roce::{DethRepr, Psn, Qkey, Qpn};

fn addrs(v6: bool) -> FrameAddrs {
    let (src, dst) = if v6 {
        (
            IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2)),
        )
    } else {
        (
            IpAddr::V4(Ipv4Addr::new(192, 168, 1, 1)),
            IpAddr::V4(Ipv4Addr::new(192, 168, 1, 2)),
        )
    };
    FrameAddrs {
        eth_src: [2, 0, 0, 0, 0, 1],
        eth_dst: [2, 0, 0, 0, 0, 2],
        src,
        dst,
    }
}

fn ud_packet(payload: &[u8]) -> PacketRepr<'_> {
    PacketRepr {
        header: Header::new(Qpn(1), Psn::new(7)),
        body: Body::Ud {
            deth: DethRepr {
                qkey: Qkey(0x8001_0000),
                src_qp: Qpn(1),
            },
            imm: None,
        },
        payload,
    }
}

#[test]
fn roce_frame_round_trips_and_its_icrc_verifies() {
    for v6 in [false, true] {
        let payload = [0x5au8; 37];
        let repr = ud_packet(&payload);
        let f = build_roce(&addrs(v6), 0xc000, 0x1234, &repr);
        let parsed = parse(&f).unwrap();
        assert_eq!(parsed.ip.src(), addrs(v6).src);
        assert_eq!(parsed.verify_icrc(), Some(true));
        let ib = parsed.roce().unwrap();
        assert_eq!(ib.len(), repr.buffer_len());
        let p = crate::roce::Packet::new_checked(ib).unwrap();
        assert_eq!(PacketRepr::parse(&p).unwrap(), repr);
    }
}

#[test]
fn short_roce_frame_is_padded_and_ib_found_from_udp_length() {
    let f = build_roce(&addrs(false), 1, 0, &ud_packet(&[]));
    assert_eq!(f.len(), 14 + 20 + 8 + 12 + 8 + 4);
    let mut padded = f.clone();
    padded.resize(80, 0xee);
    let parsed = parse(&padded).unwrap();
    assert_eq!(parsed.roce().unwrap().len(), 24);
    assert_eq!(parsed.verify_icrc(), Some(true));
}

#[test]
fn corrupted_roce_payload_fails_icrc() {
    let mut f = build_roce(&addrs(false), 1, 0, &ud_packet(b"hello"));
    let n = f.len();
    f[n - 6] ^= 1;
    assert_eq!(parse(&f).unwrap().verify_icrc(), Some(false));
}

#[test]
fn tcp_frame_round_trips() {
    let info = TcpInfo {
        src_port: 40000,
        dst_port: 7174,
        seq: 0xffff_fff0,
        ack_number: 99,
        ack: true,
        psh: true,
        window: 512,
        ..TcpInfo::default()
    };
    let f = build_tcp(&addrs(true), &info, b"abc");
    let parsed = parse(&f).unwrap();
    match parsed.transport {
        Transport::Tcp { info: got, payload } => {
            assert_eq!(got, info);
            assert_eq!(payload, b"abc");
        }
        other => panic!("not TCP: {other:?}"),
    }
}

#[test]
fn truncated_and_foreign_frames_are_errors() {
    assert_eq!(parse(&[0u8; 10]), Err(Error::Ethernet));
    let mut arp = vec![0u8; 60];
    arp[12] = 0x08;
    arp[13] = 0x06;
    assert_eq!(parse(&arp), Err(Error::UnsupportedEtherType(0x0806)));
    let f = build_roce(&addrs(false), 1, 0, &ud_packet(&[1u8; 100]));
    assert_eq!(parse(&f[..40]), Err(Error::Ipv4));
    let f6 = build_roce(&addrs(true), 1, 0, &ud_packet(&[1u8; 100]));
    assert_eq!(parse(&f6[..70]), Err(Error::Ipv6));
}

#[test]
fn datagram_frame_matches_the_icrc_a_kernel_socket_sender_computes() {
    use std::net::SocketAddr;
    let repr = ud_packet(b"captured");
    let mut ib = vec![0u8; repr.buffer_len()];
    repr.emit(&mut crate::roce::Packet::new_unchecked(&mut ib[..]));
    let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let n = ib.len() - 4;
    let v = crate::roce::icrc::for_udp4(s, d, 50000, 4791, &ib[..n]);
    crate::roce::Packet::new_unchecked(&mut ib[..]).set_icrc(v);
    let f = build_datagram(
        SocketAddr::from((s, 50000)),
        SocketAddr::from((d, 4791)),
        &ib,
    );
    let parsed = parse(&f).unwrap();
    assert_eq!(parsed.roce(), Some(&ib[..]));
    assert_eq!(parsed.verify_icrc(), Some(true));
}

#[test]
fn vlan_tagged_roce_frame_parses_with_its_tag() {
    let f = build_roce(&addrs(false), 7, 0, &ud_packet(b"tagged"));
    let mut tagged = f[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x20, 0x05]);
    tagged.extend_from_slice(&f[12..]);
    let parsed = parse(&tagged).unwrap();
    assert_eq!(parsed.vlan, Some(0x2005));
    assert_eq!(parsed.verify_icrc(), Some(true));
    assert_eq!(parse(&tagged[..16]), Err(Error::Ethernet));
}

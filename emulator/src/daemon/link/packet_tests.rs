//! The packet backend's tests: frames it writes, frames it accepts, GSO super-frames.

use super::*;
use crate::daemon::link::vnet::VNET_GSO_UDP_L4;
use wire::roce::{Body, Header, Packet, PacketRepr, Psn, Qpn, Request, SendSeg};

fn link() -> PacketLink {
    PacketLink {
        netdev: "veth0".into(),
        ifindex: 1,
        mac: [0x02, 1, 2, 3, 4, 5],
        loopback: false,
        slots: Vec::new(),
        next_id: Cell::new(0x1234),
        neigh: RefCell::new(Neighbours::new(1)),
        frames: RefCell::new(Vec::new()),
        counters: Cell::new(PacketCounters::default()),
    }
}

/// A RoCE packet from `src` to `dst` with its ICRC computed for IP ID 0, as the core
/// hands it out.
fn core_packet(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let payload = [7u8; 40];
    let repr = PacketRepr {
        header: Header::new(Qpn(17), Psn::new(5)),
        body: Body::RcRequest(Request::Send(SendSeg::Only)),
        payload: &payload,
    };
    let mut buf = vec![0; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    let mut p = Packet::new_unchecked(&mut buf[..]);
    let c = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            icrc::for_udp4(s, d, src.port(), dst.port(), p.icrc_covered())
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            icrc::for_udp6(s, d, src.port(), dst.port(), p.icrc_covered())
        }
        _ => unreachable!(),
    };
    p.set_icrc(c);
    buf
}

#[test]
fn ipv4_frames_carry_the_promised_header_and_a_valid_icrc() {
    let l = link();
    let src: SocketAddr = "10.1.0.1:49153".parse().unwrap();
    let dst: SocketAddr = "10.1.0.2:4791".parse().unwrap();
    let pkt = core_packet(src, dst);
    let mut buf = Vec::new();
    assert!(l.emit(&mut buf, [0x02, 9, 9, 9, 9, 9], src, dst, 0, &pkt));
    let f = frame::parse(&buf).expect("frame parses");
    assert_eq!(f.ethernet.src_addr.0, [0x02, 1, 2, 3, 4, 5]);
    assert_eq!(f.ethernet.dst_addr.0, [0x02, 9, 9, 9, 9, 9]);
    let IpHeader::V4 {
        header, ident, tos, ..
    } = f.ip
    else {
        panic!("not IPv4")
    };
    assert_eq!(ident, 0x1234);
    assert_eq!(tos, 0b10, "DSCP 0, ECT(0)");
    assert_eq!(header[6] & 0x40, 0x40, "DF");
    assert_eq!(header[8], 64, "TTL");
    assert!(Ipv4Packet::new_unchecked(header).verify_checksum());
    let Transport::Udp {
        checksum,
        src_port,
        payload,
        ..
    } = f.transport
    else {
        panic!("not UDP")
    };
    assert_eq!((checksum, src_port), (0, 49153));
    assert_eq!(payload.len(), pkt.len());
    assert_eq!(f.verify_icrc(), Some(true));
    // The next frame takes the next ID and still verifies.
    assert!(l.emit(&mut buf, [0x02, 9, 9, 9, 9, 9], src, dst, 0, &pkt));
    let f = frame::parse(&buf).unwrap();
    assert!(matches!(f.ip, IpHeader::V4 { ident: 0x1235, .. }));
    assert_eq!(f.verify_icrc(), Some(true));
    let r = accept(&buf, dst.ip(), 1).ok().expect("accepted");
    assert_eq!(&buf[r.at..r.at + r.len], &buf[buf.len() - pkt.len()..]);
    assert_eq!((r.src, r.tos), (src, 0b10));
}

#[test]
fn frames_carry_the_traffic_class_dscp_with_ect0_and_still_verify() {
    let l = link();
    for (src, dst) in [
        ("10.1.0.1:49153", "10.1.0.2:4791"),
        ("[fd00::1]:50000", "[fd00::2]:4791"),
    ] {
        let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let pkt = core_packet(src, dst);
        let mut buf = Vec::new();
        // DSCP 24 with stray ECN bits: the ECN field is the backend's own.
        assert!(l.emit(&mut buf, [0x02, 9, 9, 9, 9, 9], src, dst, 0x63, &pkt));
        let f = frame::parse(&buf).expect("frame parses");
        assert_eq!(f.verify_icrc(), Some(true));
        let r = accept(&buf, dst.ip(), 1).ok().expect("accepted");
        assert_eq!(r.tos, (24 << 2) | 0b10, "DSCP 24, ECT(0)");
    }
}

#[test]
fn ipv6_frames_carry_a_udp_checksum_and_a_valid_icrc() {
    let l = link();
    let src: SocketAddr = "[fd00::1]:50000".parse().unwrap();
    let dst: SocketAddr = "[fd00::2]:4791".parse().unwrap();
    let pkt = core_packet(src, dst);
    let mut buf = Vec::new();
    assert!(l.emit(&mut buf, [0x02, 9, 9, 9, 9, 9], src, dst, 0, &pkt));
    let f = frame::parse(&buf).expect("frame parses");
    let IpHeader::V6 {
        traffic_class,
        header,
        ..
    } = f.ip
    else {
        panic!("not IPv6")
    };
    assert_eq!(traffic_class, 0b10);
    assert_eq!(header[7], 64);
    let udp = UdpPacket::new_unchecked(&buf[54..]);
    assert_ne!(udp.checksum(), 0);
    let v6 = |a: &str| IpAddress::Ipv6(a.parse().unwrap());
    let (s, d) = (v6("fd00::1"), v6("fd00::2"));
    assert!(udp.verify_checksum(&s, &d));
    assert_eq!(f.verify_icrc(), Some(true));
}

#[test]
fn corrupted_or_misaddressed_frames_are_refused() {
    let l = link();
    let src: SocketAddr = "10.1.0.1:49153".parse().unwrap();
    let dst: SocketAddr = "10.1.0.2:4791".parse().unwrap();
    let mut buf = Vec::new();
    assert!(l.emit(
        &mut buf,
        [0x02, 9, 9, 9, 9, 9],
        src,
        dst,
        0,
        &core_packet(src, dst)
    ));
    assert!(matches!(
        accept(&buf, "10.1.0.3".parse().unwrap(), 1),
        Err(Refused::Malformed)
    ));
    let n = buf.len();
    buf[n - 10] ^= 0x01;
    assert!(matches!(accept(&buf, dst.ip(), 1), Err(Refused::Icrc)));
    assert!(matches!(
        accept(&buf[..20], dst.ip(), 1),
        Err(Refused::Malformed)
    ));
}

#[test]
fn a_gso_super_frame_is_cut_into_segments_that_each_verify() {
    let src: SocketAddr = "10.1.0.1:49153".parse().unwrap();
    let dst: SocketAddr = "10.1.0.2:4791".parse().unwrap();
    // The kernel's super-frame: one IP (ID 0) and UDP header over three packets, the
    // second and third with their ICRCs computed for IDs 1 and 2 (as mmsg sends them).
    let pkt = core_packet(src, dst);
    let mut payload = pkt.clone();
    for k in 1..3 {
        let mut p = pkt.clone();
        let end = p.len();
        let moved = super::super::mmsg::tests_shift_icrc_id(&p, k);
        p[end - ICRC_LEN..].copy_from_slice(&moved);
        payload.extend_from_slice(&p);
    }
    let l = link();
    l.next_id.set(0);
    let mut buf = Vec::new();
    assert!(l.emit(&mut buf, [0x02, 9, 9, 9, 9, 9], src, dst, 0, &payload));
    let mut vnet = [0u8; VNET_HDR_LEN];
    vnet[1] = VNET_GSO_UDP_L4;
    vnet[4..6].copy_from_slice(&(pkt.len() as u16).to_le_bytes());
    let size = gso_size_of(&vnet).expect("a UDP GSO super-frame");
    assert_eq!(size, pkt.len());
    let got = accept_segments(&mut buf, dst.ip(), 1, size)
        .ok()
        .expect("every segment verifies");
    assert_eq!(got.len(), 3);
    for r in &got {
        // Each moved back to ID 0: the packet the core made.
        assert_eq!(&buf[r.at..r.at + r.len], &pkt[..]);
        assert_eq!(r.src, src);
    }
    // A corrupted segment refuses the frame.
    let mut bad = Vec::new();
    l.next_id.set(0);
    assert!(l.emit(&mut bad, [0x02, 9, 9, 9, 9, 9], src, dst, 0, &payload));
    let n = bad.len();
    bad[n - 10] ^= 1;
    assert!(matches!(
        accept_segments(&mut bad, dst.ip(), 1, size),
        Err(Refused::Icrc)
    ));
}

#[test]
fn the_filters_end_in_accept_then_drop_and_jump_inside() {
    for addr in ["10.1.0.2", "fe80::1"] {
        let prog = roce_filter(addr.parse().unwrap());
        let n = prog.len();
        assert_eq!((prog[n - 2].code, prog[n - 2].k), (RET_K, ACCEPT));
        assert_eq!((prog[n - 1].code, prog[n - 1].k), (RET_K, 0));
        for (i, ins) in prog.iter().enumerate() {
            if ins.code == JEQ_K || ins.code == JSET_K {
                let far = i + 1 + usize::from(ins.jt.max(ins.jf));
                assert_eq!(far, n - 1, "instruction {i} jumps to the drop");
            }
        }
    }
}

//! The notification point (RoCE v2 Annex A17.9.3): a packet that arrived marked
//! Congestion Experienced makes the receiving QP send a CNP to its peer QP, at most one per
//! QP per CNP interval; the CNP is BTH opcode 0x81 with BECN set, PSN 0, 16 zero octets and
//! a valid ICRC, sent on the QP's own path. The peer's reaction point takes it (DCQCN,
//! tested in `dcqcn.rs`).
use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;
use wire::roce::{Body, Packet, PacketRepr};

/// A marked datagram for QP `qpn` of node 1, as node 0 would send it.
fn marked(f: &Fabric, qpn: Qpn) -> (Vec<u8>, std::net::SocketAddr, std::net::SocketAddr) {
    let mut payload = vec![0u8; 32];
    payload[0] = 0x0a; // RC RDMA WRITE Only
    payload[5..8].copy_from_slice(&qpn.0.to_be_bytes()[1..]);
    (
        payload,
        std::net::SocketAddr::new(f.nodes[0].ip, 49152),
        std::net::SocketAddr::new(f.nodes[1].ip, 4791),
    )
}

fn counters(f: &Fabric, node: usize) -> Counters {
    *f.nodes[node].dev.counters()
}

#[test]
fn a_marked_packet_sends_one_cnp_per_interval_to_the_peer_qp() {
    let mut f = Fabric::new(3, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    assert!(f.run(Duration::from_secs(1)));
    let (payload, src, dst) = marked(&f, b.qpn);
    let d = Datagram {
        src,
        dst,
        payload: &payload,
    };
    let t0 = f.now;
    let a_ip = f.nodes[0].ip;
    let mut buf = Vec::new();
    let n = &mut f.nodes[1];
    n.dev.congestion_experienced(t0, &d);
    let t = n
        .dev
        .poll_transmit(t0, &mut n.mem, &mut buf)
        .expect("a CNP");
    let cnp = buf[..t.len].to_vec();
    let pkt = Packet::new_checked(&cnp[..]).unwrap();
    let repr = PacketRepr::parse(&pkt).unwrap();
    assert!(matches!(repr.body, Body::Cnp), "{repr:?}");
    assert_eq!(cnp[0], 0x81);
    assert!(repr.header.becn && !repr.header.fecn);
    assert_eq!(repr.header.dest_qp, a.qpn);
    assert_eq!(repr.header.psn.value(), 0);
    assert_eq!(cnp.len(), 12 + 16 + 4);
    assert!(cnp[12..28].iter().all(|&b| b == 0));
    assert_eq!(t.dst.ip(), a_ip);
    assert_eq!(t.dst.port(), 4791);
    // Within the interval: counted, not answered.
    n.dev
        .congestion_experienced(t0 + Duration::from_micros(10), &d);
    assert!(n.dev.poll_transmit(t0, &mut n.mem, &mut buf).is_none());
    n.dev
        .congestion_experienced(t0 + Duration::from_micros(60), &d);
    assert!(n.dev.poll_transmit(t0, &mut n.mem, &mut buf).is_some());
    let c = counters(&f, 1);
    assert_eq!((c.np_ecn_marked, c.np_cnp_sent), (3, 2));
    // The sender takes the CNP (a valid ICRC, its own QP) and hands it to DCQCN.
    let n0 = &mut f.nodes[0];
    n0.dev.handle_datagram(
        t0,
        &Datagram {
            src: t.src,
            dst: t.dst,
            payload: &cnp,
        },
        &mut n0.mem,
    );
    let c = counters(&f, 0);
    assert_eq!(
        (
            c.rp_cnp_handled,
            c.rp_cnp_ignored,
            c.icrc_errors,
            c.unknown_qp
        ),
        (1, 0, 0, 0)
    );
}

#[test]
fn marked_packets_for_unconnected_or_unknown_qps_send_nothing() {
    let mut f = Fabric::new(4, 2, Mtu::Mtu1024, LinkModel::default());
    let ud = ConnOpts {
        qp_type: QpType::Ud,
        ..ConnOpts::default()
    };
    let (_, b) = connect(&mut f, &ud);
    assert!(f.run(Duration::from_secs(1)));
    let mut buf = Vec::new();
    for qpn in [b.qpn, Qpn(0xabcd)] {
        let (payload, src, dst) = marked(&f, qpn);
        let now = f.now;
        let n = &mut f.nodes[1];
        n.dev.congestion_experienced(
            now,
            &Datagram {
                src,
                dst,
                payload: &payload,
            },
        );
        assert!(n.dev.poll_transmit(now, &mut n.mem, &mut buf).is_none());
    }
    assert_eq!(counters(&f, 1).np_cnp_sent, 0);
    // Too short to hold a BTH: ignored.
    let now = f.now;
    let n = &mut f.nodes[1];
    n.dev.congestion_experienced(
        now,
        &Datagram {
            src: "10.0.0.1:1".parse().unwrap(),
            dst: "10.0.0.2:4791".parse().unwrap(),
            payload: &[0x0a; 5],
        },
    );
    assert_eq!(counters(&f, 1).np_ecn_marked, 0);
}

//! The traffic class of a QP's path reaches every packet the QP sends: requests carry the
//! requester's `grh.traffic_class`, ACKs the responder QP's own, CNPs the device's CNP
//! DSCP. The byte is the IP TOS / IPv6 traffic class without ECN (the backend adds ECT(0)),
//! and the ICRC masks it (IBA Annex A17.4.3.1), so a packet sent with any DSCP verifies.
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;
use wire::roce::icrc;

/// Takes the next packet `node` wants to send, with its bytes.
fn next_transmit(f: &mut Fabric, node: usize) -> Option<(Transmit, Vec<u8>)> {
    let now = f.now;
    let mut buf = Vec::new();
    let n = &mut f.nodes[node];
    let t = n.dev.poll_transmit(now, &mut n.mem, &mut buf)?;
    buf.truncate(t.len);
    Some((t, buf))
}

/// Hands `bytes` to `node` as if they arrived from `t.src`.
fn deliver(f: &mut Fabric, node: usize, t: &Transmit, bytes: &[u8]) {
    let now = f.now;
    let n = &mut f.nodes[node];
    let d = Datagram {
        src: t.src,
        dst: t.dst,
        payload: bytes,
    };
    n.dev.handle_datagram(now, &d, &mut n.mem);
}

/// Whether `bytes` verify as the IPv4 packet a kernel UDP socket sends with TOS `tos`.
fn icrc_verifies_with_tos(t: &Transmit, bytes: &[u8], tos: u8) -> bool {
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (t.src.ip(), t.dst.ip()) else {
        return false;
    };
    let ib_len = bytes.len() - 4;
    let mut ip = icrc::udp4_ip_header(src, dst, 0, ib_len);
    ip[1] = tos;
    let udp = icrc::udp_header(t.src.port(), t.dst.port(), ib_len);
    icrc::verify_ipv4(&ip, &udp, bytes)
}

/// One RDMA WRITE from `a` (node 0) to `b` (node 1): the request and `b`'s ACK, with
/// their bytes.
fn write_and_ack(f: &mut Fabric, a: &End, b: &End) -> [(Transmit, Vec<u8>); 2] {
    let now = f.now;
    let n = &mut f.nodes[0];
    n.dev
        .post_send(now, a.qpn, write_wr(1, a, b, 100), &mut n.mem)
        .expect("post_send");
    let (req, bytes) = next_transmit(f, 0).expect("the WRITE");
    assert_eq!(bytes[0], 0x0a, "RC RDMA WRITE Only");
    deliver(f, 1, &req, &bytes);
    let ack = next_transmit(f, 1).expect("the ACK");
    assert_eq!(ack.1[0], 0x11, "RC Acknowledge");
    [(req, bytes), ack]
}

#[test]
fn requests_and_acks_carry_the_path_traffic_class_without_ecn_bits() {
    let mut f = Fabric::new(5, 2, Mtu::Mtu1024, LinkModel::default());
    let o = ConnOpts {
        // DSCP 24 with both ECN bits set: the ECN bits are the backend's, not the QP's.
        traffic_class: 0x63,
        ..ConnOpts::default()
    };
    let (a, b) = connect(&mut f, &o);
    let [(req, req_bytes), (ack, ack_bytes)] = write_and_ack(&mut f, &a, &b);
    assert_eq!(req.traffic_class, 0x60);
    // ECT(0) on a DSCP 24 packet, as the backend sends it: the ICRC still holds.
    assert!(icrc_verifies_with_tos(&req, &req_bytes, 0x60 | 0b10));
    assert!(icrc_verifies_with_tos(&req, &req_bytes, 0xff));
    assert_eq!(ack.traffic_class, 0x60);
    assert!(icrc_verifies_with_tos(&ack, &ack_bytes, 0x62));
    assert_eq!(f.nodes[1].dev.counters().icrc_errors, 0);
}

#[test]
fn acks_take_the_responder_qp_traffic_class() {
    let mut f = Fabric::new(6, 2, Mtu::Mtu1024, LinkModel::default());
    let a_opts = ConnOpts {
        traffic_class: 96,
        ..ConnOpts::default()
    };
    let b_opts = ConnOpts {
        traffic_class: 32,
        ..ConnOpts::default()
    };
    let a = make_end(&mut f, 0, &a_opts);
    let b = make_end(&mut f, 1, &b_opts);
    bring_up(&mut f, &a, Some((&b, 1100)), &a_opts, 100);
    bring_up(&mut f, &b, Some((&a, 100)), &b_opts, 1100);
    let [(req, _), (ack, _)] = write_and_ack(&mut f, &a, &b);
    assert_eq!((req.traffic_class, ack.traffic_class), (96, 32));
}

#[test]
fn cnps_leave_with_the_device_cnp_dscp_whatever_the_qp_traffic_class() {
    let mut f = Fabric::new(7, 2, Mtu::Mtu1024, LinkModel::default());
    let o = ConnOpts {
        traffic_class: 96,
        ..ConnOpts::default()
    };
    let (_, b) = connect(&mut f, &o);
    assert!(f.run(Duration::from_secs(1)));
    assert_eq!(f.nodes[1].dev.cnp_dscp(), CNP_DSCP);
    let mut payload = vec![0u8; 32];
    payload[0] = 0x0a; // RC RDMA WRITE Only
    payload[5..8].copy_from_slice(&b.qpn.0.to_be_bytes()[1..]);
    let d = Datagram {
        src: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 49152),
        dst: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4791),
        payload: &payload,
    };
    let t0 = f.now;
    f.nodes[1].dev.congestion_experienced(t0, &d);
    let (cnp, bytes) = next_transmit(&mut f, 1).expect("a CNP");
    assert_eq!(bytes[0], 0x81);
    assert_eq!(cnp.traffic_class, 48 << 2);
    assert!(icrc_verifies_with_tos(&cnp, &bytes, (48 << 2) | 0b10));
    // A device set to another DSCP uses it for the next CNP.
    f.nodes[1].dev.set_cnp_dscp(26);
    f.nodes[1]
        .dev
        .congestion_experienced(t0 + Duration::from_millis(1), &d);
    let (cnp, _) = next_transmit(&mut f, 1).expect("a second CNP");
    assert_eq!(cnp.traffic_class, 26 << 2);
}

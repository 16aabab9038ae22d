//! What leaves and what is let in: addresses, ports, ICRC with IP ID 0; bad ICRCs are
//! dropped and counted, rxe's non-zero IP IDs are solved and counted.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;
use wire::roce::icrc::{self, IcrcCheck};

#[test]
fn packets_leave_from_the_sgid_to_the_dgid_port_4791_with_an_id0_icrc() {
    let mut f = Fabric::new(5, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let mut wr = SendWr::new(WrId(1), WrOpcode::RdmaWrite);
    wr.sg_list = vec![Sge { addr: a.base, length: 100, lkey: a.mr.lkey }];
    wr.rdma = RdmaInfo { remote_addr: b.base, rkey: b.mr.rkey };
    let now = f.now;
    let n = &mut f.nodes[0];
    n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    let mut buf = Vec::new();
    let t = n.dev.poll_transmit(now, &mut n.mem, &mut buf).unwrap();
    assert_eq!(t.src.ip(), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    assert_eq!(t.dst, SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4791));
    assert!(t.src.port() >= 0xc000, "source port from the QP-pair hash");
    let (SocketAddr::V4(s), SocketAddr::V4(d)) = (t.src, t.dst) else { panic!() };
    let pkt = &buf[..t.len];
    assert_eq!(icrc::verify_udp4_any_id(*s.ip(), *d.ip(), s.port(), d.port(), pkt), IcrcCheck::Valid);
    // Deliver a corrupted copy: dropped and counted; then the good one.
    let mut bad = pkt.to_vec();
    bad[20] ^= 4;
    let nb = &mut f.nodes[1];
    nb.dev.handle_datagram(now, &Datagram { src: t.src, dst: t.dst, payload: &bad }, &mut nb.mem);
    assert_eq!(nb.dev.counters().icrc_errors, 1);
    assert_eq!(nb.dev.counters().rcvd_pkts, 0);
    nb.dev.handle_datagram(now, &Datagram { src: t.src, dst: t.dst, payload: pkt }, &mut nb.mem);
    assert_eq!(nb.dev.counters().rcvd_pkts, 1);
    assert!(f.run(Duration::from_secs(1)));
    assert_eq!(f.nodes[0].dev.poll_completion().unwrap().1.status, WcStatus::Success);
}

#[test]
fn a_fixed_udp_source_port_is_used_when_the_backend_cannot_vary_it() {
    let mut cfg = node_config(0, Mtu::Mtu1024, 1);
    cfg.udp_src_port = Some(4791);
    let mut f = Fabric::new(5, 2, Mtu::Mtu1024, LinkModel::default());
    f.nodes[0].dev = Device::new(cfg);
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let mut wr = SendWr::new(WrId(1), WrOpcode::RdmaWrite);
    wr.sg_list = vec![Sge { addr: a.base, length: 1, lkey: a.mr.lkey }];
    wr.rdma = RdmaInfo { remote_addr: b.base, rkey: b.mr.rkey };
    let now = f.now;
    let n = &mut f.nodes[0];
    n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    let mut buf = Vec::new();
    assert_eq!(n.dev.poll_transmit(now, &mut n.mem, &mut buf).unwrap().src.port(), 4791);
}

#[test]
fn a_nonzero_ip_id_is_solved_and_counted() {
    let mut f = Fabric::new(5, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let mut wr = SendWr::new(WrId(1), WrOpcode::RdmaWrite);
    wr.sg_list = vec![Sge { addr: a.base, length: 8, lkey: a.mr.lkey }];
    wr.rdma = RdmaInfo { remote_addr: b.base, rkey: b.mr.rkey };
    let now = f.now;
    let n = &mut f.nodes[0];
    n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    let mut buf = Vec::new();
    let t = n.dev.poll_transmit(now, &mut n.mem, &mut buf).unwrap();
    let (SocketAddr::V4(s), SocketAddr::V4(d)) = (t.src, t.dst) else { panic!() };
    // Re-sign the packet as rxe would, with IP ID 0x1234.
    let ib = t.len - 4;
    let ip = icrc::udp4_ip_header(*s.ip(), *d.ip(), 0x1234, ib);
    let c = icrc::compute_ipv4(&ip, &icrc::udp_header(s.port(), 4791, ib), &buf[..ib]);
    buf[ib..t.len].copy_from_slice(&c.to_le_bytes());
    let nb = &mut f.nodes[1];
    nb.dev.handle_datagram(now, &Datagram { src: t.src, dst: t.dst, payload: &buf[..t.len] }, &mut nb.mem);
    assert_eq!(nb.dev.counters().icrc_solved_id, 1);
    assert_eq!(nb.dev.counters().rcvd_pkts, 1);
}

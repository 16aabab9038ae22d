//! What leaves and what is let in: addresses, ports, ICRC with IP ID 0; bad ICRCs are
//! dropped and counted, rxe's non-zero IP IDs are solved and counted.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;
use wire::roce::icrc::{self, IcrcCheck};

/// Two connected nodes and the first packet of a 100-byte WRITE from node 0 to node 1,
/// its ICRC left to the caller when `defer` is set.
fn first_write_packet(defer: bool) -> (Fabric, Transmit, Vec<u8>) {
    let mut f = Fabric::new(5, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let mut wr = SendWr::new(WrId(1), WrOpcode::RdmaWrite);
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: 100,
        lkey: a.mr.lkey,
    }];
    wr.rdma = RdmaInfo {
        remote_addr: b.base,
        rkey: b.mr.rkey,
    };
    let now = f.now;
    let n = &mut f.nodes[0];
    n.dev.defer_icrc(defer);
    n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    let mut buf = Vec::new();
    let t = n.dev.poll_transmit(now, &mut n.mem, &mut buf).unwrap();
    (f, t, buf)
}

#[test]
fn packets_leave_from_the_sgid_to_the_dgid_port_4791_with_an_id0_icrc() {
    let (mut f, t, buf) = first_write_packet(false);
    let now = f.now;
    assert_eq!(t.src.ip(), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    assert_eq!(
        t.dst,
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4791)
    );
    assert!(t.src.port() >= 0xc000, "source port from the QP-pair hash");
    let (SocketAddr::V4(s), SocketAddr::V4(d)) = (t.src, t.dst) else {
        panic!()
    };
    let pkt = &buf[..t.len];
    assert_eq!(
        icrc::verify_udp4_any_id(*s.ip(), *d.ip(), s.port(), d.port(), pkt),
        IcrcCheck::Valid
    );
    // Deliver a corrupted copy: dropped and counted; then the good one.
    let mut bad = pkt.to_vec();
    bad[20] ^= 4;
    let nb = &mut f.nodes[1];
    nb.dev.handle_datagram(
        now,
        &Datagram {
            src: t.src,
            dst: t.dst,
            payload: &bad,
        },
        &mut nb.mem,
    );
    assert_eq!(nb.dev.counters().icrc_errors, 1);
    assert_eq!(nb.dev.counters().rcvd_pkts, 0);
    nb.dev.handle_datagram(
        now,
        &Datagram {
            src: t.src,
            dst: t.dst,
            payload: pkt,
        },
        &mut nb.mem,
    );
    assert_eq!(nb.dev.counters().rcvd_pkts, 1);
    assert!(f.run(Duration::from_secs(1)));
    assert_eq!(
        f.nodes[0].dev.poll_completion().unwrap().1.status,
        WcStatus::Success
    );
}

#[test]
fn a_fixed_udp_source_port_is_used_when_the_backend_cannot_vary_it() {
    let mut cfg = node_config(0, Mtu::Mtu1024, 1);
    cfg.udp_src_port = Some(4791);
    let mut f = Fabric::new(5, 2, Mtu::Mtu1024, LinkModel::default());
    f.nodes[0].dev = Device::new(cfg);
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let mut wr = SendWr::new(WrId(1), WrOpcode::RdmaWrite);
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: 1,
        lkey: a.mr.lkey,
    }];
    wr.rdma = RdmaInfo {
        remote_addr: b.base,
        rkey: b.mr.rkey,
    };
    let now = f.now;
    let n = &mut f.nodes[0];
    n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    let mut buf = Vec::new();
    assert_eq!(
        n.dev
            .poll_transmit(now, &mut n.mem, &mut buf)
            .unwrap()
            .src
            .port(),
        4791
    );
}

#[test]
fn a_nonzero_ip_id_is_solved_and_counted() {
    let mut f = Fabric::new(5, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let mut wr = SendWr::new(WrId(1), WrOpcode::RdmaWrite);
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: 8,
        lkey: a.mr.lkey,
    }];
    wr.rdma = RdmaInfo {
        remote_addr: b.base,
        rkey: b.mr.rkey,
    };
    let now = f.now;
    let n = &mut f.nodes[0];
    n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    let mut buf = Vec::new();
    let t = n.dev.poll_transmit(now, &mut n.mem, &mut buf).unwrap();
    let (SocketAddr::V4(s), SocketAddr::V4(d)) = (t.src, t.dst) else {
        panic!()
    };
    // Re-sign the packet as rxe would, with IP ID 0x1234.
    let ib = t.len - 4;
    let ip = icrc::udp4_ip_header(*s.ip(), *d.ip(), 0x1234, ib);
    let c = icrc::compute_ipv4(&ip, &icrc::udp_header(s.port(), 4791, ib), &buf[..ib]);
    buf[ib..t.len].copy_from_slice(&c.to_le_bytes());
    let nb = &mut f.nodes[1];
    nb.dev.handle_datagram(
        now,
        &Datagram {
            src: t.src,
            dst: t.dst,
            payload: &buf[..t.len],
        },
        &mut nb.mem,
    );
    assert_eq!(nb.dev.counters().icrc_solved_id, 1);
    assert_eq!(nb.dev.counters().rcvd_pkts, 1);
}

#[test]
fn an_unspecified_destination_and_v4_mapped_addresses_still_verify() {
    let mut f = Fabric::new(5, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let mut wr = SendWr::new(WrId(1), WrOpcode::RdmaWrite);
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: 8,
        lkey: a.mr.lkey,
    }];
    wr.rdma = RdmaInfo {
        remote_addr: b.base,
        rkey: b.mr.rkey,
    };
    let now = f.now;
    let n = &mut f.nodes[0];
    n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    let mut buf = Vec::new();
    let t = n.dev.poll_transmit(now, &mut n.mem, &mut buf).unwrap();
    let SocketAddr::V4(s) = t.src else { panic!() };
    let mapped = SocketAddr::new(IpAddr::V6(s.ip().to_ipv6_mapped()), s.port());
    let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 4791);
    let nb = &mut f.nodes[1];
    nb.dev.handle_datagram(
        now,
        &Datagram {
            src: mapped,
            dst: any,
            payload: &buf[..t.len],
        },
        &mut nb.mem,
    );
    assert_eq!(nb.dev.counters().icrc_errors, 0);
    assert_eq!(nb.dev.counters().rcvd_pkts, 1);
}

#[test]
fn the_ack_timeout_is_4096ns_times_2_to_the_timeout_and_rnr_waits_the_rnr_timer() {
    let o = ConnOpts {
        timeout: 10,
        ..ConnOpts::default()
    };
    let mut f = Fabric::new(5, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &o);
    let mut wr = SendWr::new(WrId(1), WrOpcode::Send);
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: 8,
        lkey: a.mr.lkey,
    }];
    let now = f.now;
    let n = &mut f.nodes[0];
    n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    let mut buf = Vec::new();
    let t = n.dev.poll_transmit(now, &mut n.mem, &mut buf).unwrap();
    assert_eq!(
        n.dev.poll_timeout(),
        Some(now + Duration::from_nanos(4096 << 10))
    );
    // B has no receive WQE: RNR NAK with B's min_rnr_timer (code 1 = 10 µs in the sim).
    let nb = &mut f.nodes[1];
    nb.dev.handle_datagram(
        now,
        &Datagram {
            src: t.src,
            dst: t.dst,
            payload: &buf[..t.len],
        },
        &mut nb.mem,
    );
    let r = nb.dev.poll_transmit(now, &mut nb.mem, &mut buf).unwrap();
    let later = now + Duration::from_micros(3);
    let na = &mut f.nodes[0];
    na.dev.handle_datagram(
        later,
        &Datagram {
            src: r.src,
            dst: r.dst,
            payload: &buf[..r.len],
        },
        &mut na.mem,
    );
    assert_eq!(na.dev.counters().rnr_naks_rcvd, 1);
    assert_eq!(
        na.dev.poll_timeout(),
        Some(later + Duration::from_micros(10))
    );
    assert!(
        na.dev.poll_transmit(later, &mut na.mem, &mut buf).is_none(),
        "nothing before the RNR timer"
    );
    na.dev
        .handle_timeout(later + Duration::from_micros(10), &mut na.mem);
    assert!(
        na.dev.poll_transmit(later, &mut na.mem, &mut buf).is_some(),
        "retried after it"
    );
    let _ = b;
}

#[test]
fn inline_data_is_copied_at_post_time_and_a_fence_waits_for_reads() {
    let mut f = Fabric::new(5, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let sa = AddrSpace(a.client.0);
    f.nodes[0]
        .mem
        .slice_mut(sa, a.base, 4)
        .copy_from_slice(b"old!");
    let now = f.now;
    // READ, then a fenced inline WRITE.
    let mut rd = SendWr::new(WrId(1), WrOpcode::RdmaRead);
    rd.sg_list = vec![Sge {
        addr: a.base + 1024,
        length: 16,
        lkey: a.mr.lkey,
    }];
    rd.rdma = RdmaInfo {
        remote_addr: b.base,
        rkey: b.mr.rkey,
    };
    let mut wr = SendWr::new(WrId(2), WrOpcode::RdmaWrite);
    wr.send_flags = SendFlags::SIGNALED | SendFlags::INLINE | SendFlags::FENCE;
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: 4,
        lkey: Lkey(0),
    }];
    wr.rdma = RdmaInfo {
        remote_addr: b.base + 64,
        rkey: b.mr.rkey,
    };
    let n = &mut f.nodes[0];
    n.dev.post_send(now, a.qpn, rd, &mut n.mem).unwrap();
    n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    n.mem.slice_mut(sa, a.base, 4).copy_from_slice(b"new!");
    let mut buf = Vec::new();
    let t = n.dev.poll_transmit(now, &mut n.mem, &mut buf).unwrap();
    assert_eq!(buf[0], 0x0c, "the READ request");
    assert!(
        n.dev.poll_transmit(now, &mut n.mem, &mut buf).is_none(),
        "the fenced WRITE waits"
    );
    let _ = t;
    f.pump();
    assert!(f.run(Duration::from_secs(1)));
    let sb = AddrSpace(b.client.0);
    assert_eq!(f.nodes[1].mem.slice(sb, b.base + 64, 4), b"old!");
    let ids: Vec<_> = std::iter::from_fn(|| f.nodes[0].dev.poll_completion())
        .map(|(_, w)| (w.wr_id.0, w.status))
        .collect();
    assert_eq!(ids, [(1, WcStatus::Success), (2, WcStatus::Success)]);
}

#[test]
fn a_deferred_icrc_is_left_to_the_caller_and_unsealed_packets_are_only_let_in_as_such() {
    let (mut f, t, buf) = first_write_packet(true);
    let now = f.now;
    let (SocketAddr::V4(s), SocketAddr::V4(d)) = (t.src, t.dst) else {
        panic!()
    };
    let unsealed = buf[..t.len].to_vec();
    assert_eq!(unsealed[t.len - 4..], [0; 4], "the ICRC is not written");
    let check = |p: &[u8]| icrc::verify_udp4_any_id(*s.ip(), *d.ip(), s.port(), d.port(), p);
    assert_eq!(check(&unsealed), IcrcCheck::Invalid);
    let mut sealed = unsealed.clone();
    seal_icrc(&mut sealed, t.src, t.dst);
    assert_eq!(check(&sealed), IcrcCheck::Valid);
    // Unsealed through the checked door: dropped and counted. Through the unsealed one:
    // taken. The sealed copy is then a duplicate, ACKed and not executed twice.
    let nb = &mut f.nodes[1];
    let dg = |payload| Datagram {
        src: t.src,
        dst: t.dst,
        payload,
    };
    nb.dev.handle_datagram(now, &dg(&unsealed), &mut nb.mem);
    assert_eq!(
        (nb.dev.counters().icrc_errors, nb.dev.counters().rcvd_pkts),
        (1, 0)
    );
    nb.dev
        .handle_unsealed_datagram(now, &dg(&unsealed), &mut nb.mem);
    assert_eq!(
        (nb.dev.counters().icrc_errors, nb.dev.counters().rcvd_pkts),
        (1, 1)
    );
    nb.dev.handle_datagram(now, &dg(&sealed), &mut nb.mem);
    assert_eq!(
        (nb.dev.counters().icrc_errors, nb.dev.counters().rcvd_pkts),
        (1, 2)
    );
    assert_eq!(nb.dev.counters().duplicate_requests, 1);
}

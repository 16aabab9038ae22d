//! The request packets rxe sent in real perftest runs, fed to our responder set up with
//! the same QPN, PSN and rkey: accepted as rxe accepted them (no NAK where rxe sent
//! none), READ responses with the same opcodes, PSNs and lengths, atomic ACKs and ACKs
//! with the same PSNs.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Instant;

use emu_core::*;
use wire::roce::{Body, Opcode, Packet, PacketRepr, Request, WriteSeg};

struct Frame {
    src: SocketAddr,
    dst: SocketAddr,
    ib: Vec<u8>,
}

fn frames(name: &str) -> Vec<Frame> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/corpora/rxe")
        .join(name);
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let d = p.unwrap().data.into_owned();
        if d.len() < 42 || d[12..14] != [8, 0] || d[23] != 17 {
            continue;
        }
        let ip = &d[14..];
        let udp = &ip[20..];
        if u16::from_be_bytes([udp[2], udp[3]]) != 4791 {
            continue;
        }
        let ulen = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
        let a = |o: usize| IpAddr::V4(Ipv4Addr::new(ip[o], ip[o + 1], ip[o + 2], ip[o + 3]));
        out.push(Frame {
            src: SocketAddr::new(a(12), u16::from_be_bytes([udp[0], udp[1]])),
            dst: SocketAddr::new(a(16), 4791),
            ib: udp[8..ulen].to_vec(),
        });
    }
    out
}

/// (opcode, PSN, payload length) of a packet.
fn summary(ib: &[u8]) -> (u8, u32, usize) {
    let p = Packet::new_checked(ib).unwrap();
    (p.opcode().0, p.bth().psn().value(), p.payload().len())
}

fn replay(name: &str) {
    let fr = frames(name);
    // The requester sends the first request; the responder is its destination.
    let first = &fr[0];
    let req_ip = first.src.ip();
    let resp_ip = first.dst.ip();
    let p0 = Packet::new_checked(&first.ib[..]).unwrap();
    let resp_qpn = p0.bth().dest_qp();
    let first_psn = p0.bth().psn();
    let rxe_out: Vec<&Frame> = fr.iter().filter(|f| f.src.ip() == resp_ip).collect();
    let req_qpn = Packet::new_checked(&rxe_out[0].ib[..])
        .unwrap()
        .bth()
        .dest_qp();
    let requests: Vec<&Frame> = fr.iter().filter(|f| f.src.ip() == req_ip).collect();
    // The rkey and address range the requests use.
    let (mut lo, mut hi, mut rkey) = (u64::MAX, 0u64, 0u32);
    let mut sends = 0;
    for f in &requests {
        let p = Packet::new_checked(&f.ib[..]).unwrap();
        let repr = PacketRepr::parse(&p).unwrap();
        match repr.body {
            Body::RcRequest(Request::Write(WriteSeg::First(r) | WriteSeg::Only(r)))
            | Body::RcRequest(Request::Read(r)) => {
                lo = lo.min(r.va);
                hi = hi.max(r.va + u64::from(r.dma_len));
                rkey = r.rkey.0;
            }
            Body::RcRequest(Request::CompareSwap(a) | Request::FetchAdd(a)) => {
                lo = lo.min(a.va);
                hi = hi.max(a.va + 8);
                rkey = a.rkey.0;
            }
            Body::RcRequest(Request::Send(_)) => sends += 1,
            _ => {}
        }
    }
    let gid = |ip| Gid::from_ip(ip);
    let cfg = DeviceConfig {
        name: "replay".into(),
        gids: vec![gid(resp_ip)],
        active_mtu: Mtu::Mtu4096,
        udp_src_port: None,
        limits: DeviceLimits::default(),
        seed: 1,
    };
    let mut dev = Device::new(cfg);
    let mut mem = VecMemory::new();
    let client = ClientId(1);
    let space = AddrSpace(1);
    let now = Instant::now();
    let pd = dev.alloc_pd(client).unwrap();
    let acc = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    if rkey != 0 {
        mem.add_region(space, lo, (hi - lo) as usize);
        dev.reg_mr_with_key(pd, lo, hi - lo, lo, acc, space, rkey)
            .unwrap();
    }
    let recv_base = 0x7000_0000u64;
    mem.add_region(space, recv_base, 1 << 20);
    let rmr = dev
        .reg_mr(pd, recv_base, 1 << 20, recv_base, acc, space)
        .unwrap();
    let (cq, _) = dev.create_cq(client, 4096).unwrap();
    dev.set_next_qpn(resp_qpn);
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 1024,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
    };
    let (qpn, _) = dev.create_qp(client, &init).unwrap();
    assert_eq!(qpn, resp_qpn);
    use QpAttrMask as M;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: acc,
        ..QpAttr::default()
    };
    dev.modify_qp(
        now,
        qpn,
        &a,
        M::STATE | M::PORT | M::PKEY_INDEX | M::ACCESS_FLAGS,
    )
    .unwrap();
    a.qp_state = QpState::Rtr;
    a.ah_attr = AhAttr {
        grh: GlobalRoute {
            dgid: gid(req_ip),
            ..Default::default()
        },
        is_global: true,
        port_num: 1,
        ..Default::default()
    };
    a.path_mtu = Mtu::Mtu1024 as u32;
    a.dest_qp_num = req_qpn;
    a.rq_psn = first_psn;
    a.max_dest_rd_atomic = 128;
    a.min_rnr_timer = 12;
    dev.modify_qp(
        now,
        qpn,
        &a,
        M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER,
    )
    .unwrap();
    for i in 0..sends.max(1) {
        let sge = Sge {
            addr: recv_base + (i as u64 % 64) * 8192,
            length: 8192,
            lkey: rmr.lkey,
        };
        dev.post_recv(
            qpn,
            RecvWr {
                wr_id: WrId(i as u64),
                sg_list: vec![sge],
            },
        )
        .unwrap();
    }
    let mut ours = Vec::new();
    let mut buf = Vec::new();
    for f in &requests {
        let d = Datagram {
            src: f.src,
            dst: f.dst,
            payload: &f.ib,
        };
        dev.handle_datagram(now, &d, &mut mem);
        while let Some(t) = dev.poll_transmit(now, &mut mem, &mut buf) {
            assert_eq!(t.dst.ip(), req_ip);
            ours.push(summary(&buf[..t.len]));
        }
    }
    assert_eq!(
        dev.counters().icrc_errors,
        0,
        "{name}: every captured ICRC verifies"
    );
    assert_eq!(dev.counters().malformed, 0);
    let theirs: Vec<_> = rxe_out.iter().map(|f| summary(&f.ib)).collect();
    let naks = |v: &[(u8, u32, usize)], ib: &[&[u8]]| {
        let _ = v;
        ib.iter()
            .filter(|b| b[0] == 0x11 && b[12] & 0x60 != 0)
            .count()
    };
    let their_ib: Vec<&[u8]> = rxe_out.iter().map(|f| &f.ib[..]).collect();
    assert_eq!(naks(&theirs, &their_ib), 0);
    // Same opcodes, PSNs and lengths, ACKs included (rxe ACKs where the AckReq bit asks).
    assert_eq!(ours, theirs, "{name}");
    let _ = Opcode::CNP;
}

#[test]
fn rxe_write_bw_requests_are_acked_as_rxe_acked_them() {
    replay("rdma_write_bw.pcap");
}

#[test]
fn rxe_read_bw_requests_get_the_same_read_responses() {
    replay("rdma_read_bw.pcap");
}

#[test]
fn rxe_send_bw_requests_are_acked_as_rxe_acked_them() {
    replay("rdma_send_bw.pcap");
}

#[test]
fn rxe_atomic_bw_requests_get_atomic_acks_with_the_same_psns() {
    replay("rdma_atomic_bw.pcap");
}

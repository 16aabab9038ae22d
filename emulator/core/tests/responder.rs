//! Scripted responder behaviour: one NAK per sequence error, duplicates re-ACKed,
//! duplicate atomics replayed from the resource cache (not executed twice), ACK
//! coalescing.

use std::net::SocketAddr;

use emu_core::sim::*;
use emu_core::*;
use wire::roce::{
    icrc, AtomicEthRepr, Body, Header, NakCode, Packet, PacketRepr, Request, Response, SendSeg,
    Syndrome,
};

struct Rig {
    f: Fabric,
    a: End,
    b: End,
    src: SocketAddr,
    dst: SocketAddr,
    /// Collect B's replies after each request.
    drain: bool,
}

fn rig() -> Rig {
    let mut f = Fabric::new(9, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    for i in 0..8 {
        let sge = Sge {
            addr: b.base + i * 1024,
            length: 1024,
            lkey: b.mr.lkey,
        };
        f.nodes[1]
            .dev
            .post_recv(
                b.qpn,
                RecvWr {
                    wr_id: WrId(i),
                    sg_list: vec![sge],
                },
            )
            .unwrap();
    }
    let src = SocketAddr::new(f.nodes[0].ip, 0xc001);
    let dst = SocketAddr::new(f.nodes[1].ip, 4791);
    Rig {
        f,
        a,
        b,
        src,
        dst,
        drain: true,
    }
}

impl Rig {
    /// Sends one request to B (PSN offset from A's initial PSN 100) and returns B's replies.
    fn request(
        &mut self,
        psn: u32,
        body: Body,
        payload: &[u8],
        ack_req: bool,
    ) -> Vec<(u32, Response)> {
        let mut header = Header::new(self.b.qpn, Psn::new(100 + psn));
        header.ack_req = ack_req;
        let repr = PacketRepr {
            header,
            body,
            payload,
        };
        let mut buf = vec![0; repr.buffer_len()];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        repr.emit(&mut p);
        let (SocketAddr::V4(s), SocketAddr::V4(d)) = (self.src, self.dst) else {
            panic!()
        };
        let c = icrc::for_udp4(*s.ip(), *d.ip(), s.port(), d.port(), p.icrc_covered());
        p.set_icrc(c);
        let now = self.f.now;
        let n = &mut self.f.nodes[1];
        n.dev.handle_datagram(
            now,
            &Datagram {
                src: self.src,
                dst: self.dst,
                payload: &buf,
            },
            &mut n.mem,
        );
        if !self.drain {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut b = Vec::new();
        while let Some(t) = n.dev.poll_transmit(now, &mut n.mem, &mut b) {
            let p = Packet::new_checked(&b[..t.len]).unwrap();
            let r = PacketRepr::parse(&p).unwrap();
            if let Body::RcResponse(resp) = r.body {
                out.push((r.header.psn.value() - 100, resp));
            }
        }
        out
    }
}

fn send_only() -> Body {
    Body::RcRequest(Request::Send(SendSeg::Only))
}

fn syndrome(r: &Response) -> Syndrome {
    match r {
        Response::Ack(a) | Response::AtomicAck(a, _) => a.syndrome,
        _ => panic!("not an ACK"),
    }
}

#[test]
fn a_gap_gets_exactly_one_sequence_nak() {
    let mut r = rig();
    assert_eq!(r.request(0, send_only(), b"x", true).len(), 1);
    // PSN 1 is lost; 2, 3 and 4 arrive.
    let n1 = r.request(2, send_only(), b"x", true);
    let n2 = r.request(3, send_only(), b"x", true);
    let n3 = r.request(4, send_only(), b"x", true);
    assert_eq!(n1.len(), 1);
    assert_eq!(n1[0].0, 1, "the NAK names the expected PSN");
    assert_eq!(syndrome(&n1[0].1), Syndrome::Nak(NakCode::PsnSequenceError));
    assert!(n2.is_empty() && n3.is_empty(), "one NAK per sequence error");
    // The missing packet arrives: accepted and ACKed; a new gap NAKs again.
    assert_eq!(r.request(1, send_only(), b"x", true)[0].0, 1);
    assert_eq!(r.request(5, send_only(), b"x", true).len(), 1);
}

#[test]
fn duplicates_are_re_acked_and_not_delivered_twice() {
    let mut r = rig();
    r.request(0, send_only(), b"one", true);
    r.request(1, send_only(), b"two", true);
    let dup = r.request(0, send_only(), b"one", true);
    assert_eq!(dup.len(), 1);
    assert_eq!(dup[0].0, 1, "re-ACK of the latest PSN");
    assert!(matches!(syndrome(&dup[0].1), Syndrome::Ack(_)));
    let mut recvs = 0;
    while r.f.nodes[1].dev.poll_completion().is_some() {
        recvs += 1;
    }
    assert_eq!(recvs, 2);
}

#[test]
fn a_duplicate_atomic_is_replayed_not_executed_again() {
    let mut r = rig();
    let a = AtomicEthRepr {
        va: r.b.base + 4096,
        rkey: r.b.mr.rkey,
        swap_add: 5,
        compare: 0,
    };
    let first = r.request(0, Body::RcRequest(Request::FetchAdd(a)), &[], true);
    let again = r.request(0, Body::RcRequest(Request::FetchAdd(a)), &[], true);
    let orig = |v: &[(u32, Response)]| match v[0].1 {
        Response::AtomicAck(_, x) => x.orig_data,
        _ => panic!(),
    };
    assert_eq!((orig(&first), orig(&again)), (0, 0));
    let got = r.f.nodes[1]
        .mem
        .slice(AddrSpace(r.b.client.0), r.b.base + 4096, 8);
    assert_eq!(u64::from_le_bytes(got.try_into().unwrap()), 5, "added once");
    let _ = r.a;
}

#[test]
fn acks_go_where_ackreq_asks_and_coalesce_while_unsent() {
    let mut r = rig();
    assert!(r.request(0, send_only(), b"x", false).is_empty());
    let acks = r.request(1, send_only(), b"x", true);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].0, 1);
    // Three AckReq packets before the device gets to transmit: one ACK, the latest.
    r.drain = false;
    for psn in 2..5 {
        r.request(psn, send_only(), b"x", true);
    }
    r.drain = true;
    let acks = r.request(5, send_only(), b"x", false);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].0, 4);
}

//! How the requester counts sequence NAKs against its retries (IBA 9.7.5.1.2, C9-114 ff.).
//!
//! A responder NAKs a gap once; only a timeout says that the retransmission was lost too.
//! So a sequence NAK for the PSN the requester is already going back from (a duplicate on
//! the wire, or a NAK sent before the go-back arrived) costs no retry and starts no second
//! go-back, as rxe's `started_retry`. Counting each copy made a QP with faults injected
//! (duplication at a few per cent) exhaust `retry_cnt` with no packet lost twice.

use std::net::SocketAddr;
use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;
use wire::roce::{
    icrc, AethRepr, Body, CreditCode, Header, Msn, NakCode, Packet, PacketRepr, Response, Syndrome,
};

const WRITES: u64 = 4;
const LEN: u32 = 1024;

/// A connected pair whose requester A allows one retry, with `WRITES` one-packet WRITEs
/// posted on A and their first transmission lost.
fn rig() -> (Fabric, End, End) {
    let mut f = Fabric::new(31, 2, Mtu::Mtu1024, LinkModel::default());
    let o = ConnOpts {
        retry_cnt: 1,
        timeout: 14,
        ..ConnOpts::default()
    };
    let (a, b) = connect(&mut f, &o);
    let now = f.now;
    let n = &mut f.nodes[a.node];
    for i in 0..WRITES {
        n.mem
            .slice_mut(
                AddrSpace(a.client.0),
                a.base + i * u64::from(LEN),
                LEN as usize,
            )
            .fill(i as u8 + 1);
        let wr = write(&a, &b, i, i * u64::from(LEN));
        n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    }
    let lost = drain(&mut f, a.node).len() as u64;
    assert_eq!(lost, WRITES, "one packet per WRITE, all dropped");
    (f, a, b)
}

/// A signaled one-packet WRITE `id` from `a`'s buffer at `at` to `b`'s at `at`.
fn write(a: &End, b: &End, id: u64, at: u64) -> SendWr {
    let mut wr = SendWr::new(WrId(id), WrOpcode::RdmaWrite);
    wr.send_flags = SendFlags::SIGNALED;
    wr.sg_list = vec![Sge {
        addr: a.base + at,
        length: LEN,
        lkey: a.mr.lkey,
    }];
    wr.rdma = RdmaInfo {
        remote_addr: b.base + at,
        rkey: b.mr.rkey,
    };
    wr
}

/// Hands A a sequence NAK from B for `psn`, as B's device would build it.
fn nak_to_a(f: &mut Fabric, a: &End, psn: u32) {
    aeth_to_a(f, a, psn, Syndrome::Nak(NakCode::PsnSequenceError));
}

/// Hands A an acknowledgement from B for `psn` with `syndrome`.
fn aeth_to_a(f: &mut Fabric, a: &End, psn: u32, syndrome: Syndrome) {
    let src = SocketAddr::new(f.nodes[1].ip, 0xc002);
    let dst = SocketAddr::new(f.nodes[0].ip, 4791);
    let repr = PacketRepr {
        header: Header::new(a.qpn, Psn::new(psn)),
        body: Body::RcResponse(Response::Ack(AethRepr {
            syndrome,
            msn: Msn(0),
        })),
        payload: &[],
    };
    let mut buf = vec![0; repr.buffer_len()];
    let mut p = Packet::new_unchecked(&mut buf[..]);
    repr.emit(&mut p);
    let (SocketAddr::V4(s), SocketAddr::V4(d)) = (src, dst) else {
        panic!("the fabric's nodes have IPv4 addresses")
    };
    let c = icrc::for_udp4(*s.ip(), *d.ip(), s.port(), d.port(), p.icrc_covered());
    p.set_icrc(c);
    let now = f.now;
    let n = &mut f.nodes[a.node];
    n.dev.handle_datagram(
        now,
        &Datagram {
            src,
            dst,
            payload: &buf,
        },
        &mut n.mem,
    );
}

/// Every datagram `node` has to send now, as (source, destination, bytes).
fn drain(f: &mut Fabric, node: usize) -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
    let now = f.now;
    let n = &mut f.nodes[node];
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = n.dev.poll_transmit(now, &mut n.mem, &mut buf) {
        out.push((t.src, t.dst, buf[..t.len].to_vec()));
    }
    out
}

fn deliver(f: &mut Fabric, node: usize, (src, dst, bytes): &(SocketAddr, SocketAddr, Vec<u8>)) {
    let now = f.now;
    let n = &mut f.nodes[node];
    let d = Datagram {
        src: *src,
        dst: *dst,
        payload: bytes,
    };
    n.dev.handle_datagram(now, &d, &mut n.mem);
}

/// Runs the fabric idle and checks that every WRITE completed and B holds its bytes.
fn all_written(f: &mut Fabric, a: &End, b: &End) {
    assert!(f.run(Duration::from_secs(30)), "the fabric never went idle");
    let mut done = Vec::new();
    while let Some((_, wc)) = f.nodes[a.node].dev.poll_completion() {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        done.push(wc.wr_id.0);
    }
    assert_eq!(done, (0..WRITES).collect::<Vec<_>>());
    for i in 0..WRITES {
        let got = f.nodes[b.node].mem.slice(
            AddrSpace(b.client.0),
            b.base + i * u64::from(LEN),
            LEN as usize,
        );
        assert!(got.iter().all(|&x| x == i as u8 + 1), "WRITE {i}'s bytes");
    }
}

#[test]
fn duplicated_sequence_naks_cost_one_retry() {
    let (mut f, a, b) = rig();
    // B saw none of A's packets; the NAK for A's first PSN arrives five times. One retry
    // is spent on the first copy; the other four are the same request to go back.
    for _ in 0..5 {
        nak_to_a(&mut f, &a, 100);
    }
    all_written(&mut f, &a, &b);
    let c = f.nodes[a.node].dev.counters();
    assert_eq!(c.seq_naks_rcvd, 5);
    assert_eq!(c.retry_exceeded, 0);
}

#[test]
fn a_sequence_nak_after_progress_is_a_new_gap() {
    let (mut f, a, b) = rig();
    // The first go-back from PSN 100 spends the one retry; the WRITEs then get through.
    nak_to_a(&mut f, &a, 100);
    all_written(&mut f, &a, &b);
    // A new gap after progress has its retry again.
    let now = f.now;
    let n = &mut f.nodes[a.node];
    let wr = write(&a, &b, 9, 0);
    n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    drain(&mut f, a.node);
    let next = 100 + WRITES as u32;
    nak_to_a(&mut f, &a, next);
    nak_to_a(&mut f, &a, next);
    assert!(f.run(Duration::from_secs(30)), "the fabric never went idle");
    let (_, wc) = f.nodes[a.node].dev.poll_completion().expect("a completion");
    assert_eq!((wc.wr_id, wc.status), (WrId(9), WcStatus::Success));
}

#[test]
fn a_sequence_nak_with_no_retry_left_ends_the_wr() {
    let (mut f, a, _b) = rig();
    // The timeout fires and spends the one retry going back from PSN 100; that
    // retransmission is lost as well.
    let now = f.now;
    let n = &mut f.nodes[a.node];
    n.dev
        .handle_timeout(now + Duration::from_secs(1), &mut n.mem);
    drain(&mut f, a.node);
    // A NAK for the same PSN is the NAK the first transmission caused: not a new retry.
    nak_to_a(&mut f, &a, 100);
    assert!(f.nodes[a.node].dev.poll_completion().is_none());
    // The second timeout has none left.
    let n = &mut f.nodes[a.node];
    n.dev
        .handle_timeout(now + Duration::from_secs(2), &mut n.mem);
    let (_, wc) = n.dev.poll_completion().expect("a completion");
    assert_eq!((wc.wr_id, wc.status), (WrId(0), WcStatus::RetryExcErr));
}

/// A go-back lands inside a WR (a sequence NAK for its second packet), and before that
/// packet is resent an ACK completes the WR: it leaves the send queue, and what follows
/// is sent from its own first packet. The go-back's position inside the retired WR used
/// to carry over to the next one: a two-packet WRITE followed by a one-packet WRITE sent
/// a MIDDLE packet without payload at the PSN after the second WRITE, which the responder
/// NAKs as an invalid request (seen with rsockets on a link that reorders: the sequence
/// NAK was older than the ACK behind it).
#[test]
fn an_ack_that_retires_the_wr_being_resent_restarts_at_the_next_wr() {
    let mut f = Fabric::new(32, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let now = f.now;
    let n = &mut f.nodes[a.node];
    n.mem
        .slice_mut(AddrSpace(a.client.0), a.base, 3 * LEN as usize)
        .fill(7);
    let mut w0 = write(&a, &b, 0, 0);
    w0.sg_list[0].length = 2 * LEN;
    let w1 = write(&a, &b, 1, 2 * u64::from(LEN));
    n.dev.post_send(now, a.qpn, w0, &mut n.mem).unwrap();
    n.dev.post_send(now, a.qpn, w1, &mut n.mem).unwrap();
    let sent = drain(&mut f, a.node);
    assert_eq!(
        sent.len(),
        3,
        "PSNs 100 and 101 for the first WRITE, 102 for the second"
    );
    for d in &sent {
        deliver(&mut f, b.node, d);
    }
    // B has all three (its expected PSN is 103). A meets the sequence NAK for 101 first
    // and goes back into the first WRITE, then the ACK for 101 retires that WRITE.
    nak_to_a(&mut f, &a, 101);
    aeth_to_a(&mut f, &a, 101, Syndrome::Ack(CreditCode::INVALID));
    let resent = drain(&mut f, a.node);
    assert!(!resent.is_empty(), "the second WRITE is sent again");
    for d in &resent {
        let p = Packet::new_checked(&d.2[..]).expect("a RoCE packet");
        assert_eq!(
            p.bth().psn(),
            Psn::new(102),
            "resent from the second WRITE's first packet"
        );
    }
    for d in &resent {
        deliver(&mut f, b.node, d);
    }
    assert!(f.run(Duration::from_secs(30)), "the fabric never went idle");
    let mut done = Vec::new();
    while let Some((_, wc)) = f.nodes[a.node].dev.poll_completion() {
        done.push((wc.wr_id.0, wc.status));
    }
    assert_eq!(done, [(0, WcStatus::Success), (1, WcStatus::Success)]);
    assert_eq!(f.nodes[b.node].dev.counters().duplicate_requests, 1);
}

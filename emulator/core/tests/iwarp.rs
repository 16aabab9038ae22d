//! The iWARP engine between two ends over a simulated, randomly chunked byte stream.

mod iwarp_common;

use emu_core::iwarp::{
    IwarpConfig, IwarpEvent, RtrKind, RtrOffer, Stags, RECV_WAIT, RX_STALL_TIMEOUT,
};
use emu_core::{
    AccessFlags, AtomicInfo, Lkey, RdmaInfo, RecvWr, Rkey, SendFlags, SendWr, Sge, WcFlags,
    WcOpcode, WcStatus, WrId, WrOpcode,
};
use iwarp_common::*;
use proptest::prelude::*;
use std::time::Duration;
use wire::iwarp::deframer::{Deframed, Deframer};
use wire::iwarp::fpdu::{self, FpduConfig};
use wire::iwarp::mpa::{IrdOrd, MpaFrameKind, MpaRepr, MpaRevision};
use wire::iwarp::rdmap::{RdmapMessage, ReadRequest};
use wire::iwarp::{Stag, TerminateError};

const MEM: u64 = 4 << 20;

fn sge(addr: u64, len: u32) -> Sge {
    Sge {
        addr,
        length: len,
        lkey: Lkey(0x100),
    }
}

fn send_wr(id: u64, op: WrOpcode, addr: u64, len: u32) -> SendWr {
    let mut wr = SendWr::new(WrId(id), op);
    wr.sg_list = vec![sge(addr, len)];
    wr
}

fn rdma_wr(id: u64, op: WrOpcode, addr: u64, len: u32, raddr: u64, rkey: u32) -> SendWr {
    let mut wr = send_wr(id, op, addr, len);
    wr.rdma = RdmaInfo {
        remote_addr: raddr,
        rkey: Rkey(rkey),
    };
    wr
}

fn fill(p: &mut Node, addr: u64, len: usize, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    p.mem.slice_mut(SPACE, addr, len).copy_from_slice(&data);
    data
}

fn connected(cfg_a: IwarpConfig, cfg_b: IwarpConfig, seed: u64) -> Pair {
    let mut p = Pair::new(cfg_a, cfg_b, MEM, seed);
    p.run();
    assert!(p.established(), "a {:?} b {:?}", p.a.events, p.b.events);
    p
}

fn ok_wcs(n: &Node) -> Vec<(u64, WcStatus, WcOpcode, u32)> {
    n.wcs
        .iter()
        .map(|c| (c.wc.wr_id.0, c.wc.status, c.wc.opcode, c.wc.byte_len))
        .collect()
}

/// A Send, a Write and a Read of `len` octets from a to b; memory compared.
fn exchange(p: &mut Pair, len: u32) {
    let src = BASE;
    let dst = BASE + MEM / 2;
    let d1 = fill(&mut p.a, src, len as usize, 1);
    p.b.post_recv(10, dst, len.max(1));
    p.a.conn
        .post_send(send_wr(1, WrOpcode::Send, src, len))
        .unwrap();
    p.run();
    assert_eq!(p.b.mem.slice(SPACE, dst, len as usize), &d1[..]);
    let d2 = fill(&mut p.a, src, len as usize, 2);
    p.a.conn
        .post_send(rdma_wr(2, WrOpcode::RdmaWrite, src, len, dst, 0x100))
        .unwrap();
    p.run();
    assert_eq!(p.b.mem.slice(SPACE, dst, len as usize), &d2[..]);
    let d3 = fill(&mut p.b, BASE + 8, len as usize, 3);
    p.a.conn
        .post_send(rdma_wr(3, WrOpcode::RdmaRead, dst, len, BASE + 8, 0x100))
        .unwrap();
    p.run();
    assert_eq!(p.a.mem.slice(SPACE, dst, len as usize), &d3[..]);
    let a = ok_wcs(&p.a);
    assert_eq!(
        &a[a.len() - 3..],
        &[
            (1, WcStatus::Success, WcOpcode::Send, len),
            (2, WcStatus::Success, WcOpcode::RdmaWrite, len),
            (3, WcStatus::Success, WcOpcode::RdmaRead, len),
        ]
    );
    assert_eq!(
        ok_wcs(&p.b).last().copied(),
        Some((10, WcStatus::Success, WcOpcode::Recv, len))
    );
    assert!(p.a.guards_intact(MEM) && p.b.guards_intact(MEM));
}

#[test]
fn mpa_negotiation_every_combination_connects_and_moves_data() {
    let offers = [
        RtrOffer {
            send: false,
            write: true,
            read: false,
        },
        RtrOffer {
            send: false,
            write: false,
            read: true,
        },
        RtrOffer {
            send: true,
            write: false,
            read: false,
        },
        RtrOffer::ALL,
    ];
    let mut seed = 1;
    for rev_a in [1u8, 2] {
        for rev_b in [1u8, 2] {
            for bits in 0..16u8 {
                for p2p in [false, true] {
                    for offer in offers {
                        if (rev_a == 1 || !p2p) && offer != RtrOffer::ALL {
                            continue;
                        }
                        let a = IwarpConfig {
                            revision: rev_a,
                            crc: bits & 1 != 0,
                            markers: bits & 2 != 0,
                            peer_to_peer: p2p,
                            rtr: offer,
                            ..IwarpConfig::default()
                        };
                        let b = IwarpConfig {
                            revision: rev_b,
                            crc: bits & 4 != 0,
                            markers: bits & 8 != 0,
                            private_data: Vec::new(),
                            ..IwarpConfig::default()
                        };
                        seed += 1;
                        let mut p = connected(a.clone(), b.clone(), seed);
                        let na = p.a.conn.negotiated().unwrap().clone();
                        let nb = p.b.conn.negotiated().unwrap().clone();
                        assert_eq!(na.crc, a.crc || b.crc);
                        assert_eq!(nb.crc, na.crc);
                        assert_eq!(na.markers_tx, b.markers);
                        assert_eq!(na.markers_rx, a.markers);
                        assert_eq!(nb.markers_tx, a.markers);
                        let rev = if rev_a == 2 && rev_b == 2 { 2 } else { 1 };
                        assert_eq!(na.revision, rev);
                        let want_rtr = if rev == 2 && p2p {
                            offer.pick(RtrOffer::ALL)
                        } else {
                            None
                        };
                        assert_eq!(na.rtr, want_rtr);
                        assert_eq!(nb.rtr, want_rtr);
                        assert_eq!(na.private_data, b"reply-pd");
                        exchange(&mut p, 1000);
                        assert!(p.a.terminated().is_none() && p.b.terminated().is_none());
                    }
                }
            }
        }
    }
}

#[test]
fn each_rtr_kind_is_used_as_offered() {
    for (offer, kind) in [
        (
            RtrOffer {
                send: true,
                write: false,
                read: false,
            },
            RtrKind::Send,
        ),
        (
            RtrOffer {
                send: false,
                write: false,
                read: true,
            },
            RtrKind::Read,
        ),
        (RtrOffer::ALL, RtrKind::Write),
    ] {
        let a = IwarpConfig {
            rtr: offer,
            ..IwarpConfig::default()
        };
        let mut p = connected(a, IwarpConfig::default(), 5);
        assert_eq!(p.a.conn.negotiated().unwrap().rtr, Some(kind));
        // The responder may send first once the RTR arrived.
        p.a.post_recv(7, BASE, 64);
        fill(&mut p.b, BASE + 100, 10, 9);
        p.b.conn
            .post_send(send_wr(1, WrOpcode::Send, BASE + 100, 10))
            .unwrap();
        p.run();
        assert_eq!(
            ok_wcs(&p.a),
            vec![(7, WcStatus::Success, WcOpcode::Recv, 10)]
        );
        // The RTR consumed no receive WR and produced no completion.
        assert!(p.b.wcs.iter().all(|c| c.wc.opcode != WcOpcode::Recv));
    }
}

#[test]
fn no_common_rtr_option_falls_back_to_client_server_mode() {
    let a = IwarpConfig {
        rtr: RtrOffer {
            send: true,
            write: false,
            read: false,
        },
        ..IwarpConfig::default()
    };
    let b = IwarpConfig {
        rtr: RtrOffer {
            send: false,
            write: true,
            read: false,
        },
        ..IwarpConfig::default()
    };
    let mut p = Pair::new(a, b, MEM, 3);
    p.run();
    // The responder found no common kind and answered without peer-to-peer mode.
    assert_eq!(p.a.conn.negotiated().unwrap().rtr, None);
    assert!(p.established());
}

#[test]
fn reject_carries_private_data_to_the_initiator() {
    let a = IwarpConfig {
        private_data: b"hello from a".to_vec(),
        ..IwarpConfig::default()
    };
    let mut p = Pair::new(a, IwarpConfig::default(), MEM, 4);
    p.b.answer = Some(Err(b"go away".to_vec()));
    p.run();
    let req = p.b.events.iter().find_map(|e| match e {
        IwarpEvent::ConnectRequest(o) => Some(o.clone()),
        _ => None,
    });
    assert_eq!(req.unwrap().private_data, b"hello from a");
    assert!(p.a.events.contains(&IwarpEvent::Rejected {
        private_data: b"go away".to_vec()
    }));
    assert!(p.a.conn.is_closed() && p.b.conn.is_closed());
    assert!(p.a.conn.wants_close() && p.b.conn.wants_close());
}

#[test]
fn mpa_timeout_fails_the_exchange() {
    let mut p = Pair::new(IwarpConfig::default(), IwarpConfig::default(), MEM, 4);
    let t = p.a.conn.poll_timeout().unwrap();
    p.a.conn.handle_timeout(t);
    assert_eq!(p.a.conn.poll_event(), Some(IwarpEvent::MpaTimeout));
    assert!(p.a.conn.is_closed());
}

#[test]
fn garbage_instead_of_a_reply_fails_mpa() {
    let mut p = Pair::new(IwarpConfig::default(), IwarpConfig::default(), MEM, 4);
    p.a.conn.handle_stream(
        p.now,
        b"HTTP/1.1 200 OK\r\n\r\n",
        &mut p.a.keys,
        &mut p.a.mem,
    );
    assert!(matches!(
        p.a.conn.poll_event(),
        Some(IwarpEvent::MpaFailed(_))
    ));
}

#[test]
fn send_write_read_of_every_size_up_to_1_mib() {
    for (i, len) in [0u32, 1, 3, 17, 1000, 1443, 4096, 65_539, 300_001, 1 << 20]
        .into_iter()
        .enumerate()
    {
        for crc_markers in [false, true] {
            let cfg = IwarpConfig {
                crc: crc_markers,
                markers: crc_markers,
                ..IwarpConfig::default()
            };
            let mut p = connected(cfg.clone(), cfg, 100 + i as u64);
            p.max_chunk = 70_000;
            // Every size both with payload in runs of 64 KiB and FPDU by FPDU.
            let runs = (i % 2 == 0) ^ crc_markers;
            (p.a.mem.runs, p.b.mem.runs) = (runs, runs);
            exchange(&mut p, len);
        }
    }
}

/// Where an access is a system call (the daemon's `/proc/PID/mem`), a Write's and a Read
/// Response's payload is read in runs of 64 KiB, not one FPDU at a time, and a Write is
/// placed at the data sink in runs too; into mapped memory one access per FPDU, as a run
/// would only add a copy.
#[test]
fn payload_is_read_in_runs_where_memory_asks_for_them() {
    let len = 256 << 10;
    let (src, dst) = (BASE, BASE + MEM / 2);
    for runs in [true, false] {
        let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 41);
        (p.a.mem.runs, p.b.mem.runs) = (runs, runs);
        let data = fill(&mut p.a, src, len as usize, 9);
        let before = p.a.mem.reads;
        let placed_before = p.b.mem.writes;
        p.a.conn
            .post_send(rdma_wr(1, WrOpcode::RdmaWrite, src, len, dst, 0x100))
            .unwrap();
        p.run();
        let write_reads = p.a.mem.reads - before;
        let write_writes = p.b.mem.writes - placed_before;
        assert_eq!(p.b.mem.slice(SPACE, dst, len as usize), &data[..]);
        let back = fill(&mut p.b, src, len as usize, 5);
        let before = p.b.mem.reads;
        p.a.conn
            .post_send(rdma_wr(2, WrOpcode::RdmaRead, dst, len, src, 0x100))
            .unwrap();
        p.run();
        let response_reads = p.b.mem.reads - before;
        assert_eq!(p.a.mem.slice(SPACE, dst, len as usize), &back[..]);
        // A Send is placed into its receive WR's buffer the same way.
        let data = fill(&mut p.a, src, len as usize, 3);
        p.b.post_recv(10, dst, len);
        let placed_before = p.b.mem.writes;
        p.a.conn
            .post_send(send_wr(3, WrOpcode::Send, src, len))
            .unwrap();
        p.run();
        let send_writes = p.b.mem.writes - placed_before;
        assert_eq!(p.b.mem.slice(SPACE, dst, len as usize), &data[..]);
        let fpdus = u64::from(len).div_ceil(emu_core::iwarp::mulpdu(1460, false) as u64);
        if runs {
            // Four runs, and one more because FPDUs straddle the runs' edges.
            assert!(write_reads <= 5 && response_reads <= 5, "runs of 64 KiB");
            assert!(
                write_writes <= 5 && send_writes <= 5,
                "placed in runs: {write_writes} and {send_writes} writes"
            );
        } else {
            assert!(
                write_reads >= fpdus
                    && response_reads >= fpdus
                    && write_writes >= fpdus
                    && send_writes >= fpdus,
                "one access per FPDU"
            );
        }
    }
}

/// A Send whose receive WR's second buffer has a key the data sink does not know: held in
/// a run or placed FPDU by FPDU, the receive completes with LOC_PROT_ERR and the sink
/// terminates (DDP catastrophic), with the first buffer filled and nothing written where
/// the bad key points.
#[test]
fn a_send_into_a_bad_second_buffer_fails_alike_with_runs_or_without() {
    let (src, first, second) = (BASE, BASE + MEM / 2, BASE + MEM / 2 + (256 << 10));
    for runs in [true, false] {
        let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 43);
        (p.a.mem.runs, p.b.mem.runs) = (runs, runs);
        let data = fill(&mut p.a, src, 96 << 10, 7);
        let untouched = p.b.mem.slice(SPACE, second, 64 << 10).to_vec();
        p.b.conn
            .post_recv(RecvWr {
                wr_id: WrId(20),
                sg_list: vec![
                    Sge {
                        addr: first,
                        length: 32 << 10,
                        lkey: Lkey(0x100),
                    },
                    Sge {
                        addr: second,
                        length: 64 << 10,
                        lkey: Lkey(0x999),
                    },
                ],
            })
            .unwrap();
        p.a.conn
            .post_send(send_wr(4, WrOpcode::Send, src, 96 << 10))
            .unwrap();
        p.run();
        let recv: Vec<_> = ok_wcs(&p.b).into_iter().filter(|w| w.0 == 20).collect();
        assert_eq!(
            recv.first().map(|w| w.1),
            Some(WcStatus::LocProtErr),
            "runs {runs}: {recv:?}"
        );
        assert_eq!(
            p.b.terminated(),
            Some((TerminateError::DdpCatastrophic, true)),
            "runs {runs}"
        );
        assert_eq!(p.b.mem.slice(SPACE, first, 32 << 10), &data[..32 << 10]);
        assert_eq!(p.b.mem.slice(SPACE, second, 64 << 10), &untouched[..]);
        assert!(p.b.guards_intact(MEM));
    }
}

/// A Write whose STag the data sink invalidates half-way through: the sink terminates
/// (invalid STag) and writes nothing into the region after the invalidation, with its
/// payload placed FPDU by FPDU or held in runs (a held run's range is checked again when
/// it is placed).
#[test]
fn nothing_is_written_after_the_sinks_stag_is_invalidated_mid_write() {
    let len = 256 << 10;
    let (src, dst) = (BASE, BASE + MEM / 2);
    for runs in [true, false] {
        let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 44);
        (p.a.mem.runs, p.b.mem.runs) = (runs, runs);
        fill(&mut p.a, src, len as usize, 5);
        p.a.conn
            .post_send(rdma_wr(1, WrOpcode::RdmaWrite, src, len, dst, 0x100))
            .unwrap();
        let mut stream = Vec::new();
        while p
            .a
            .conn
            .poll_stream_transmit(&mut stream, &mut p.a.keys, &mut p.a.mem)
            > 0
        {}
        assert!(stream.len() > len as usize, "the whole Write is out");
        let (first, rest) = stream.split_at(100 << 10);
        p.b.conn
            .handle_stream(p.now, first, &mut p.b.keys, &mut p.b.mem);
        p.b.keys.invalidate(0x100, PD).unwrap();
        let writes = p.b.mem.writes;
        p.b.conn
            .handle_stream(p.now, rest, &mut p.b.keys, &mut p.b.mem);
        p.run();
        assert_eq!(
            p.b.mem.writes, writes,
            "runs {runs}: written after invalidation"
        );
        assert_eq!(
            p.b.terminated(),
            Some((TerminateError::DdpTaggedInvalidStag, true)),
            "runs {runs}"
        );
        assert!(p.b.guards_intact(MEM));
    }
}

#[test]
fn segments_respect_the_mulpdu() {
    let cfg = IwarpConfig {
        mss: 536,
        ..IwarpConfig::default()
    };
    let mut p = connected(cfg.clone(), cfg, 7);
    let start = p.log_a.len();
    exchange(&mut p, 5000);
    // Every FPDU a sent is at most MULPDU + framing long.
    let mulpdu = emu_core::iwarp::mulpdu(536, false);
    let mut d = wire::iwarp::Deframer::in_full_operation(FpduConfig::default());
    d.read(&p.log_a[start..]);
    let mut n = 0;
    while let Some(Ok(wire::iwarp::Deframed::Fpdu { ulpdu, .. })) = d.pop() {
        assert!(ulpdu.len() <= mulpdu);
        n += 1;
    }
    assert!(n > 10);
}

#[test]
fn send_with_invalidate_invalidates_the_stag() {
    let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 8);
    p.b.keys.register(
        0x200,
        PD,
        SPACE,
        BASE + 0x1000,
        0x1000,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    p.b.post_recv(5, BASE, 100);
    let mut wr = send_wr(1, WrOpcode::SendWithInv, BASE, 8);
    wr.invalidate_rkey = Rkey(0x200);
    wr.send_flags |= SendFlags::SOLICITED;
    p.a.conn.post_send(wr).unwrap();
    p.run();
    let c = p.b.wcs[0];
    assert_eq!(c.wc.status, WcStatus::Success);
    assert_eq!(c.wc.wc_flags, WcFlags::WITH_INV);
    assert_eq!(c.wc.imm_data, 0x200);
    assert!(c.solicited);
    // A Write to the invalidated STag is refused.
    p.a.conn
        .post_send(rdma_wr(
            2,
            WrOpcode::RdmaWrite,
            BASE,
            8,
            BASE + 0x1000,
            0x200,
        ))
        .unwrap();
    p.run();
    assert_eq!(
        p.b.terminated(),
        Some((TerminateError::DdpTaggedInvalidStag, true))
    );
    assert_eq!(
        p.a.terminated(),
        Some((TerminateError::DdpTaggedInvalidStag, false))
    );
}

/// A Terminate seen by one side: (error, sent by it).
type Seen = Option<(TerminateError, bool)>;
/// A named way to provoke a Terminate, and the cause it must carry.
type Case = (&'static str, Box<dyn FnOnce(&mut Pair)>, TerminateError);

/// Runs `prep` on a fresh connection; returns (b's Terminate, a's, a's WC statuses).
/// Steps time to each deadline of either end (a Send waiting for a receive WR, a stalled
/// FPDU) until none is left.
fn settle(p: &mut Pair) {
    for _ in 0..16 {
        let next = [p.a.conn.poll_timeout(), p.b.conn.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = next else {
            return;
        };
        p.now = p.now.max(t);
        p.a.conn.handle_timeout(p.now);
        p.b.conn.handle_timeout(p.now);
        p.run();
    }
    panic!("deadlines keep coming");
}

fn terminate_case(prep: impl FnOnce(&mut Pair)) -> (Seen, Seen, Vec<WcStatus>) {
    let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 9);
    p.b.keys.register(
        0x300,
        PD,
        SPACE,
        BASE,
        0x1000,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    );
    p.b.keys.register(
        0x500,
        PD,
        SPACE,
        BASE,
        0x1000,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    p.b.keys.register(
        0x400,
        emu_core::PdHandle(99),
        SPACE,
        BASE,
        0x1000,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    );
    prep(&mut p);
    p.run();
    settle(&mut p);
    assert!(p.a.conn.is_closed() && p.b.conn.is_closed());
    assert!(p.a.guards_intact(MEM) && p.b.guards_intact(MEM));
    (
        p.b.terminated(),
        p.a.terminated(),
        p.a.wcs.iter().map(|c| c.wc.status).collect(),
    )
}

#[test]
fn terminate_for_each_error_class_has_its_layer_type_and_code() {
    use TerminateError as T;
    let cases: Vec<Case> = vec![
        (
            "write bad stag",
            Box::new(|p| {
                p.a.conn
                    .post_send(rdma_wr(1, WrOpcode::RdmaWrite, BASE, 8, BASE, 0x999))
                    .unwrap()
            }),
            T::DdpTaggedInvalidStag,
        ),
        (
            "write out of bounds",
            Box::new(|p| {
                p.a.conn
                    .post_send(rdma_wr(
                        1,
                        WrOpcode::RdmaWrite,
                        BASE,
                        8,
                        BASE + MEM - 4,
                        0x100,
                    ))
                    .unwrap()
            }),
            T::DdpTaggedBaseBounds,
        ),
        (
            "write without remote write right",
            Box::new(|p| {
                p.a.conn
                    .post_send(rdma_wr(1, WrOpcode::RdmaWrite, BASE, 8, BASE, 0x300))
                    .unwrap()
            }),
            T::RdmapAccessRights,
        ),
        (
            "write to another PD",
            Box::new(|p| {
                p.a.conn
                    .post_send(rdma_wr(1, WrOpcode::RdmaWrite, BASE, 8, BASE, 0x400))
                    .unwrap()
            }),
            T::DdpTaggedStagNotAssociated,
        ),
        (
            "read bad stag",
            Box::new(|p| {
                p.a.conn
                    .post_send(rdma_wr(1, WrOpcode::RdmaRead, BASE, 8, BASE, 0x999))
                    .unwrap()
            }),
            T::RdmapInvalidStag,
        ),
        (
            "read out of bounds",
            Box::new(|p| {
                p.a.conn
                    .post_send(rdma_wr(1, WrOpcode::RdmaRead, BASE, 8, BASE - 8, 0x100))
                    .unwrap()
            }),
            T::RdmapBaseBounds,
        ),
        (
            "read without remote read right",
            Box::new(|p| {
                p.a.conn
                    .post_send(rdma_wr(1, WrOpcode::RdmaRead, BASE, 8, BASE, 0x500))
                    .unwrap()
            }),
            T::RdmapAccessRights,
        ),
        (
            "read of another PD",
            Box::new(|p| {
                p.a.conn
                    .post_send(rdma_wr(1, WrOpcode::RdmaRead, BASE, 8, BASE, 0x400))
                    .unwrap()
            }),
            T::RdmapStagNotAssociated,
        ),
        (
            "send without a posted receive",
            Box::new(|p| {
                p.a.conn
                    .post_send(send_wr(1, WrOpcode::Send, BASE, 8))
                    .unwrap()
            }),
            T::DdpUntaggedNoBuffer,
        ),
        (
            "send longer than the receive buffer",
            Box::new(|p| {
                p.b.post_recv(1, BASE, 4);
                p.a.conn
                    .post_send(send_wr(1, WrOpcode::Send, BASE, 3000))
                    .unwrap()
            }),
            T::DdpUntaggedTooLong,
        ),
        (
            "send with invalidate of an unknown stag",
            Box::new(|p| {
                p.b.post_recv(1, BASE, 64);
                let mut wr = send_wr(1, WrOpcode::SendWithInv, BASE, 8);
                wr.invalidate_rkey = Rkey(0x777);
                p.a.conn.post_send(wr).unwrap()
            }),
            T::RdmapProtectionCannotInvalidate,
        ),
    ];
    for (name, prep, want) in cases {
        let (b, a, _) = terminate_case(prep);
        assert_eq!(b, Some((want, true)), "{name}: sender of Terminate");
        assert_eq!(a, Some((want, false)), "{name}: receiver of Terminate");
    }
}

#[test]
fn failed_read_completes_with_remote_access_error_and_flushes_the_rest() {
    let (_, _, st) = terminate_case(|p| {
        p.a.conn
            .post_send(rdma_wr(1, WrOpcode::RdmaRead, BASE, 8, BASE, 0x999))
            .unwrap();
        p.a.conn
            .post_send(send_wr(2, WrOpcode::Send, BASE, 8))
            .unwrap();
    });
    // The Send after the Read was handed to the stream, but completes after the Read.
    assert_eq!(st[0], WcStatus::RemAccessErr);
}

/// Feeds one raw ULPDU, framed as the connection negotiated (CRC off, markers off).
fn inject(p: &mut Pair, ulpdu: &[u8]) {
    let cfg = FpduConfig::default();
    let mut b = vec![0u8; fpdu::wire_len(ulpdu.len(), cfg, 0)];
    fpdu::emit(ulpdu, cfg, 0, &mut b);
    p.b.conn
        .handle_stream(p.now, &b, &mut p.b.keys, &mut p.b.mem);
}

fn raw_case(ulpdu: Vec<u8>) -> Option<(TerminateError, bool)> {
    let a = IwarpConfig {
        peer_to_peer: false,
        ..IwarpConfig::default()
    };
    let mut p = connected(a, IwarpConfig::default(), 11);
    p.b.post_recv(1, BASE, 64);
    inject(&mut p, &ulpdu);
    p.run();
    p.b.terminated()
}

fn msg(m: RdmapMessage<'_>) -> Vec<u8> {
    let mut u = vec![0u8; m.buffer_len()];
    m.emit(&mut u);
    u
}

#[test]
fn malformed_segments_get_their_terminate() {
    use TerminateError as T;
    let send = |msn| {
        msg(RdmapMessage::Send {
            last: true,
            solicited: false,
            invalidate: None,
            msn,
            mo: 0,
            payload: b"x",
        })
    };
    let mut bad_msn = send(5);
    assert_eq!(raw_case(send(1)), None);
    assert_eq!(
        raw_case(std::mem::take(&mut bad_msn)),
        Some((T::DdpUntaggedMsnRange, true))
    );
    let mut v = send(1);
    v[0] = (v[0] & !3) | 2;
    assert_eq!(raw_case(v), Some((T::DdpUntaggedInvalidVersion, true)));
    let mut v = msg(RdmapMessage::Write {
        last: true,
        stag: Stag(0x100),
        offset: BASE,
        payload: b"x",
    });
    v[0] &= !3;
    assert_eq!(raw_case(v), Some((T::DdpTaggedInvalidVersion, true)));
    let mut v = send(1);
    v[1] = (2 << 6) | 3;
    assert_eq!(raw_case(v), Some((T::RdmapInvalidVersion, true)));
    let mut v = send(1);
    v[9] = 7;
    assert_eq!(raw_case(v), Some((T::DdpUntaggedInvalidQn, true)));
    let v = msg(RdmapMessage::ReadResponse {
        last: true,
        stag: Stag(0x100),
        offset: BASE,
        payload: b"unasked",
    });
    assert_eq!(raw_case(v), Some((T::RdmapUnexpectedOpcode, true)));
    let mut v = send(1);
    v[1] = (1 << 6) | 0xe;
    assert_eq!(raw_case(v), Some((T::RdmapUnexpectedOpcode, true)));
}

#[test]
fn read_requests_beyond_ird_terminate_with_msn_range() {
    let b = IwarpConfig {
        ird: 2,
        ..IwarpConfig::default()
    };
    let a = IwarpConfig {
        peer_to_peer: false,
        ord: 2,
        ..IwarpConfig::default()
    };
    let mut p = connected(a, b, 12);
    let mut bytes = Vec::new();
    for msn in 1..=3u32 {
        let u = msg(RdmapMessage::ReadRequest {
            msn,
            request: ReadRequest {
                sink_stag: Stag(1),
                sink_offset: 0,
                size: 8,
                src_stag: Stag(0x100),
                src_offset: BASE,
            },
        });
        let cfg = FpduConfig::default();
        let mut f = vec![0u8; fpdu::wire_len(u.len(), cfg, 0)];
        fpdu::emit(&u, cfg, 0, &mut f);
        bytes.extend_from_slice(&f);
    }
    // All three arrive before b could answer any.
    p.b.conn
        .handle_stream(p.now, &bytes, &mut p.b.keys, &mut p.b.mem);
    p.run();
    assert_eq!(
        p.b.terminated(),
        Some((TerminateError::DdpUntaggedMsnRange, true))
    );
}

#[test]
fn ord_limits_outstanding_reads_to_the_peer_ird() {
    // The responder's ORD is limited by the initiator's IRD (RFC 6581 §5).
    let a = IwarpConfig {
        ird: 2,
        ..IwarpConfig::default()
    };
    let b = IwarpConfig {
        ord: 8,
        ..IwarpConfig::default()
    };
    let mut p = connected(a, b, 13);
    assert_eq!(p.b.conn.negotiated().unwrap().ord, 2);
    for i in 0..10u64 {
        p.b.conn
            .post_send(rdma_wr(
                i,
                WrOpcode::RdmaRead,
                BASE + i * 64,
                64,
                BASE,
                0x100,
            ))
            .unwrap();
    }
    let mut out = Vec::new();
    p.b.conn
        .poll_stream_transmit(&mut out, &mut p.b.keys, &mut p.b.mem);
    let mut d = wire::iwarp::Deframer::in_full_operation(FpduConfig::default());
    d.read(&out);
    let mut reads = 0;
    while let Some(Ok(wire::iwarp::Deframed::Fpdu { ulpdu, .. })) = d.pop() {
        if let Ok(RdmapMessage::ReadRequest { .. }) = RdmapMessage::parse(ulpdu) {
            reads += 1;
        }
    }
    assert_eq!(reads, 2);
    p.b_to_a.extend_from_slice(&out);
    p.run();
    assert_eq!(p.b.wcs.len(), 10);
    assert!(p.b.wcs.iter().all(|c| c.wc.status == WcStatus::Success));
    assert!(p.a.terminated().is_none());
}

#[test]
fn responder_ird_covers_the_initiator_ord_like_siw() {
    let a = IwarpConfig {
        ord: 40,
        ..IwarpConfig::default()
    };
    let b = IwarpConfig {
        ird: 4,
        ..IwarpConfig::default()
    };
    let p = connected(a, b, 14);
    assert_eq!(p.b.conn.negotiated().unwrap().ird, 40);
    assert_eq!(p.a.conn.negotiated().unwrap().ord, 40);
}

#[test]
fn reply_ord_above_our_ird_gets_insufficient_ird() {
    let a = IwarpConfig {
        ird: 4,
        ..IwarpConfig::default()
    };
    let mut p = Pair::new(a, IwarpConfig::default(), MEM, 32);
    let reply = mpa_frame(
        MpaFrameKind::Reply,
        IrdOrd {
            ird: 4,
            ord: 16,
            ..IrdOrd::default()
        },
    );
    p.a.conn
        .handle_stream(p.now, &reply, &mut p.a.keys, &mut p.a.mem);
    let mut events = Vec::new();
    while let Some(e) = p.a.conn.poll_event() {
        events.push(e);
    }
    assert!(events.contains(&IwarpEvent::Terminated {
        error: TerminateError::MpaInsufficientIrd,
        local: true
    }));
}

#[test]
fn crc_error_terminates_with_mpa_crc() {
    let cfg = IwarpConfig {
        crc: true,
        peer_to_peer: false,
        ..IwarpConfig::default()
    };
    let mut p = connected(cfg.clone(), cfg, 14);
    let u = msg(RdmapMessage::Write {
        last: true,
        stag: Stag(0x100),
        offset: BASE,
        payload: b"abcd",
    });
    let c = FpduConfig {
        crc: true,
        markers: false,
    };
    let mut f = vec![0u8; fpdu::wire_len(u.len(), c, 0)];
    fpdu::emit(&u, c, 0, &mut f);
    f[5] ^= 0x40;
    p.b.conn
        .handle_stream(p.now, &f, &mut p.b.keys, &mut p.b.mem);
    p.run();
    assert_eq!(p.b.terminated(), Some((TerminateError::MpaCrc, true)));
    assert_eq!(p.b.conn.counters().crc_errors, 1);
    assert_eq!(p.b.mem.slice(SPACE, BASE, 4), &[0, 0, 0, 0]);
}

#[test]
fn close_flushes_outstanding_work() {
    let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 15);
    p.b.post_recv(1, BASE, 64);
    p.b.post_recv(2, BASE, 64);
    p.b.conn.close();
    p.b.poll_for_test();
    assert_eq!(p.b.wcs.len(), 2);
    assert!(p.b.wcs.iter().all(|c| c.wc.status == WcStatus::WrFlushErr));
    assert!(p.b.events.contains(&IwarpEvent::Closed));
}

trait PollForTest {
    fn poll_for_test(&mut self);
}

impl PollForTest for Node {
    fn poll_for_test(&mut self) {
        while let Some(e) = self.conn.poll_event() {
            self.events.push(e);
        }
        while let Some(c) = self.conn.poll_completion() {
            self.wcs.push(c);
        }
    }
}

#[test]
fn extensions_atomics_and_immediate_data_between_rdma_emu_ends() {
    let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 16);
    assert!(p.a.conn.negotiated().unwrap().extensions);
    p.b.mem
        .slice_mut(SPACE, BASE + 64, 8)
        .copy_from_slice(&40u64.to_le_bytes());
    let mut wr = send_wr(1, WrOpcode::AtomicFetchAndAdd, BASE, 8);
    wr.atomic = AtomicInfo {
        remote_addr: BASE + 64,
        compare_add: 2,
        swap: 0,
        rkey: Rkey(0x100),
    };
    p.a.conn.post_send(wr).unwrap();
    let mut wr = send_wr(2, WrOpcode::AtomicCmpAndSwp, BASE + 8, 8);
    wr.atomic = AtomicInfo {
        remote_addr: BASE + 64,
        compare_add: 42,
        swap: 7,
        rkey: Rkey(0x100),
    };
    p.a.conn.post_send(wr).unwrap();
    p.run();
    assert_eq!(p.a.mem.slice(SPACE, BASE, 8), &40u64.to_le_bytes());
    assert_eq!(p.a.mem.slice(SPACE, BASE + 8, 8), &42u64.to_le_bytes());
    assert_eq!(p.b.mem.slice(SPACE, BASE + 64, 8), &7u64.to_le_bytes());
    p.b.post_recv(20, BASE + 200, 100);
    p.b.post_recv(21, BASE + 300, 100);
    fill(&mut p.a, BASE + 1000, 50, 4);
    let mut wr = rdma_wr(
        3,
        WrOpcode::RdmaWriteWithImm,
        BASE + 1000,
        50,
        BASE + 500,
        0x100,
    );
    wr.imm_data = 0xaabb_ccdd;
    p.a.conn.post_send(wr).unwrap();
    let mut wr = send_wr(4, WrOpcode::SendWithImm, BASE + 1000, 20);
    wr.imm_data = 0x1122_3344;
    p.a.conn.post_send(wr).unwrap();
    p.run();
    let w: Vec<_> =
        p.b.wcs
            .iter()
            .map(|c| {
                (
                    c.wc.wr_id.0,
                    c.wc.opcode,
                    c.wc.byte_len,
                    c.wc.imm_data,
                    c.wc.wc_flags,
                )
            })
            .collect();
    assert_eq!(
        w,
        vec![
            (
                20,
                WcOpcode::RecvRdmaWithImm,
                50,
                0xaabb_ccdd,
                WcFlags::WITH_IMM
            ),
            (21, WcOpcode::Recv, 20, 0x1122_3344, WcFlags::WITH_IMM),
        ]
    );
    assert_eq!(p.a.wcs.len(), 4);
    assert!(p.a.wcs.iter().all(|c| c.wc.status == WcStatus::Success));
}

#[test]
fn extensions_off_when_the_peer_does_not_offer_them() {
    let b = IwarpConfig {
        extensions: false,
        ..IwarpConfig::default()
    };
    let mut p = connected(IwarpConfig::default(), b, 17);
    assert!(!p.a.conn.negotiated().unwrap().extensions);
    let mut wr = send_wr(1, WrOpcode::AtomicFetchAndAdd, BASE, 8);
    wr.atomic.rkey = Rkey(0x100);
    p.a.conn.post_send(wr).unwrap();
    p.run();
    assert_eq!(p.a.wcs[0].wc.status, WcStatus::LocQpOpErr);
}

#[test]
fn device_key_table_serves_as_stags() {
    use emu_core::iwarp::{StagError, Stags};
    use emu_core::{AddrSpace, ClientId, Device, DeviceConfig, DeviceLimits, Gid, Mtu};
    let mut dev = Device::new(DeviceConfig {
        name: "siw0".into(),
        gids: vec![Gid::default()],
        active_mtu: Mtu::Mtu1024,
        udp_src_port: None,
        limits: DeviceLimits::default(),
        seed: 1,
    });
    let pd = dev.alloc_pd(ClientId(1)).unwrap();
    let k = dev
        .reg_mr(
            pd,
            0x1000,
            0x1000,
            0x1000,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            AddrSpace(1),
        )
        .unwrap();
    let st = k.rkey.0;
    assert!(dev
        .resolve(st, pd, 0, 0x1000, 16, AccessFlags::REMOTE_WRITE, true)
        .is_ok());
    assert_eq!(
        dev.resolve(st, pd, 0, 0x1ff8, 16, AccessFlags::REMOTE_WRITE, true),
        Err(StagError::BaseBounds)
    );
    assert_eq!(
        dev.resolve(st, pd, 0, 0x1000, 16, AccessFlags::REMOTE_READ, true),
        Err(StagError::Access)
    );
    dev.invalidate(st, pd).unwrap();
    assert_eq!(
        dev.resolve(st, pd, 0, 0x1000, 16, AccessFlags::REMOTE_WRITE, true),
        Err(StagError::Invalid)
    );
}

/// A scripted workload; returns what each side ended with.
fn workload(seed: u64, max_chunk: usize, ops: &[(u8, u32)]) -> (Vec<u8>, Vec<u8>, String) {
    let cfg = IwarpConfig {
        crc: seed.is_multiple_of(2),
        markers: seed.is_multiple_of(3),
        ..IwarpConfig::default()
    };
    let mut p = Pair::new(cfg.clone(), cfg, 1 << 20, seed);
    p.max_chunk = max_chunk;
    p.run();
    for (i, (kind, len)) in ops.iter().enumerate() {
        let len = len % 200_000;
        let i = i as u64;
        fill(&mut p.a, BASE, len as usize, i as u8);
        match kind % 3 {
            0 => {
                p.b.post_recv(i, BASE + (1 << 19), len.max(1));
                p.a.conn
                    .post_send(send_wr(i, WrOpcode::Send, BASE, len))
                    .unwrap();
            }
            1 => {
                p.a.conn
                    .post_send(rdma_wr(
                        i,
                        WrOpcode::RdmaWrite,
                        BASE,
                        len,
                        BASE + (1 << 19),
                        0x100,
                    ))
                    .unwrap()
            }
            _ => {
                p.a.conn
                    .post_send(rdma_wr(
                        i,
                        WrOpcode::RdmaRead,
                        BASE + (1 << 19),
                        len,
                        BASE,
                        0x100,
                    ))
                    .unwrap()
            }
        }
        p.run();
    }
    let a = p.a.mem.slice(SPACE, BASE, 1 << 20).to_vec();
    let b = p.b.mem.slice(SPACE, BASE, 1 << 20).to_vec();
    (a, b, format!("{:?} {:?}", ok_wcs(&p.a), ok_wcs(&p.b)))
}

#[test]
fn inline_send_reads_the_owners_memory_without_a_key() {
    let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 34);
    let d = fill(&mut p.a, BASE + 0x500, 40, 5);
    p.b.post_recv(1, BASE, 64);
    let mut wr = SendWr::new(WrId(1), WrOpcode::Send);
    wr.send_flags |= SendFlags::INLINE;
    wr.sg_list = vec![Sge {
        addr: BASE + 0x500,
        length: 40,
        lkey: Lkey(0xdead),
    }];
    p.a.conn.post_send(wr.clone()).unwrap();
    p.run();
    assert_eq!(p.b.mem.slice(SPACE, BASE, 40), &d[..]);
    assert_eq!(p.a.wcs[0].wc.status, WcStatus::Success);
    wr.sg_list[0].length = 600;
    assert_eq!(p.a.conn.post_send(wr), Err(emu_core::Errno::EINVAL));
}

#[test]
fn peer_closing_the_stream_flushes_and_closes() {
    let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 33);
    p.b.post_recv(1, BASE, 64);
    p.a.conn
        .post_send(rdma_wr(1, WrOpcode::RdmaRead, BASE, 8, BASE, 0x100))
        .unwrap();
    p.b.conn.handle_stream_closed(p.now);
    p.a.conn.handle_stream_closed(p.now);
    p.run();
    assert_eq!(p.a.wcs[0].wc.status, WcStatus::WrFlushErr);
    assert_eq!(p.b.wcs[0].wc.status, WcStatus::WrFlushErr);
    assert!(p.a.events.contains(&IwarpEvent::Closed));
    assert!(p.a.conn.wants_close() && p.b.conn.wants_close());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn arbitrary_bytes_during_mpa_never_panic(
        initiator in any::<bool>(),
        prefix in proptest::collection::vec(any::<u8>(), 0..24),
        garbage in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let now = std::time::Instant::now();
        let cfg = IwarpConfig::default();
        let conn = if initiator {
            emu_core::iwarp::Connection::initiator(now, cfg)
        } else {
            emu_core::iwarp::Connection::responder(now, cfg)
        };
        let mut n = Node::new(conn, 1 << 12);
        // A valid key, so the parser goes past it at times.
        let key: &[u8] = if initiator { b"MPA ID Rep Frame" } else { b"MPA ID Req Frame" };
        let mut bytes = key[..prefix.len().min(16)].to_vec();
        bytes.extend_from_slice(&prefix);
        bytes.extend_from_slice(&garbage);
        for chunk in bytes.chunks(7) {
            n.conn.handle_stream(now, chunk, &mut n.keys, &mut n.mem);
            while let Some(e) = n.conn.poll_event() {
                if let IwarpEvent::ConnectRequest(_) = e {
                    let _ = n.conn.accept(b"x");
                }
            }
            let mut out = Vec::new();
            n.conn.poll_stream_transmit(&mut out, &mut n.keys, &mut n.mem);
        }
        prop_assert!(n.guards_intact(1 << 12));
    }

    #[test]
    fn chunking_does_not_change_results(
        seed in 1u64..1000,
        chunk in 1usize..5000,
        ops in proptest::collection::vec((0u8..3, 0u32..200_000), 1..5),
    ) {
        let whole = workload(seed, 0, &ops);
        let chunked = workload(seed, chunk, &ops);
        prop_assert!(whole == chunked);
    }

    #[test]
    fn arbitrary_bytes_never_panic_nor_write_outside_registered_memory(
        crc in any::<bool>(),
        markers in any::<bool>(),
        garbage in proptest::collection::vec(any::<u8>(), 0..4000),
        frames in proptest::collection::vec(
            (any::<u8>(), any::<u8>(), any::<u32>(), any::<u32>(),
             proptest::collection::vec(any::<u8>(), 0..300)),
            0..20),
    ) {
        let cfg = IwarpConfig { crc, markers, peer_to_peer: false, ..IwarpConfig::default() };
        let mut p = Pair::new(cfg.clone(), cfg, 1 << 16, 21);
        p.run();
        p.b.post_recv(1, BASE, 100);
        // Well-framed but arbitrary DDP segments first, then raw garbage.
        let c = FpduConfig { crc, markers: false };
        let mut bytes = Vec::new();
        for (ctl, ulp, w1, w2, body) in frames {
            let mut u = vec![ctl, ulp];
            u.extend_from_slice(&w1.to_be_bytes());
            u.extend_from_slice(&w2.to_be_bytes());
            u.extend_from_slice(&(w1 ^ w2).to_be_bytes());
            u.extend_from_slice(&BASE.to_be_bytes());
            u.extend_from_slice(&body);
            let mut f = vec![0u8; fpdu::wire_len(u.len(), c, 0)];
            fpdu::emit(&u, c, 0, &mut f);
            bytes.extend_from_slice(&f);
        }
        if !markers {
            p.b.conn.handle_stream(p.now, &bytes, &mut p.b.keys, &mut p.b.mem);
        }
        p.b.conn.handle_stream(p.now, &garbage, &mut p.b.keys, &mut p.b.mem);
        p.run();
        prop_assert!(p.b.guards_intact(1 << 16));
    }
}

fn mpa_frame(kind: MpaFrameKind, w: IrdOrd) -> Vec<u8> {
    let r = MpaRepr {
        kind,
        markers: false,
        crc: false,
        reject: false,
        reserved_flags: 0,
        revision: MpaRevision::V2(w),
        private_data: b"",
    };
    let mut v = vec![0u8; r.buffer_len()];
    r.emit(&mut v);
    v
}

#[test]
fn reply_choosing_an_rtr_kind_not_offered_gets_no_matching_rtr() {
    let a = IwarpConfig {
        rtr: RtrOffer {
            send: true,
            write: false,
            read: false,
        },
        ..IwarpConfig::default()
    };
    let mut p = Pair::new(a, IwarpConfig::default(), MEM, 30);
    let reply = mpa_frame(
        MpaFrameKind::Reply,
        IrdOrd {
            ird: 4,
            ord: 4,
            peer_to_peer: true,
            rtr_write: true,
            ..IrdOrd::default()
        },
    );
    p.a.conn
        .handle_stream(p.now, &reply, &mut p.a.keys, &mut p.a.mem);
    let mut out = Vec::new();
    p.a.conn
        .poll_stream_transmit(&mut out, &mut p.a.keys, &mut p.a.mem);
    let mut events = Vec::new();
    while let Some(e) = p.a.conn.poll_event() {
        events.push(e);
    }
    assert!(events.contains(&IwarpEvent::Terminated {
        error: TerminateError::MpaNoMatchingRtr,
        local: true
    }));
    // The Terminate follows the Request on the wire.
    let (layer, etype, code) = TerminateError::MpaNoMatchingRtr.fields();
    let t = &out[out.len() - 8..out.len() - 4];
    assert_eq!(t[0], (layer.bits() << 4) | etype);
    assert_eq!(t[1], code);
    assert!(p.a.conn.wants_close());
}

#[test]
fn first_fpdu_that_is_not_the_rtr_gets_no_matching_rtr() {
    let now = std::time::Instant::now();
    let mut b = Node::new(
        emu_core::iwarp::Connection::responder(now, IwarpConfig::default()),
        MEM,
    );
    let req = mpa_frame(
        MpaFrameKind::Request,
        IrdOrd {
            ird: 4,
            ord: 4,
            peer_to_peer: true,
            rtr_write: true,
            ..IrdOrd::default()
        },
    );
    b.conn.handle_stream(now, &req, &mut b.keys, &mut b.mem);
    assert!(matches!(
        b.conn.poll_event(),
        Some(IwarpEvent::ConnectRequest(_))
    ));
    b.conn.accept(b"").unwrap();
    b.post_recv(1, BASE, 64);
    let u = msg(RdmapMessage::Send {
        last: true,
        solicited: false,
        invalidate: None,
        msn: 1,
        mo: 0,
        payload: b"too early",
    });
    let cfg = FpduConfig::default();
    let mut f = vec![0u8; fpdu::wire_len(u.len(), cfg, 0)];
    fpdu::emit(&u, cfg, 0, &mut f);
    b.conn.handle_stream(now, &f, &mut b.keys, &mut b.mem);
    let mut events = Vec::new();
    while let Some(e) = b.conn.poll_event() {
        events.push(e);
    }
    assert!(events.contains(&IwarpEvent::Terminated {
        error: TerminateError::MpaNoMatchingRtr,
        local: true
    }));
}

#[test]
fn terminate_carries_the_offending_ddp_and_read_request_headers() {
    let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 31);
    let start = p.log_b.len();
    p.a.conn
        .post_send(rdma_wr(1, WrOpcode::RdmaRead, BASE, 8, BASE, 0x999))
        .unwrap();
    p.run();
    let mut d = wire::iwarp::Deframer::in_full_operation(FpduConfig::default());
    d.read(&p.log_b[start..]);
    let Some(Ok(wire::iwarp::Deframed::Fpdu { ulpdu, .. })) = d.pop() else {
        panic!("no FPDU from b");
    };
    let RdmapMessage::Terminate { msn, terminate } = RdmapMessage::parse(ulpdu).unwrap() else {
        panic!("not a Terminate");
    };
    assert_eq!(msn, 1);
    assert_eq!(terminate.error, TerminateError::RdmapInvalidStag);
    assert!(terminate.segment_length_valid);
    let (seg_len, hdr) = terminate.ddp.unwrap();
    assert_eq!(usize::from(seg_len), 18 + 28);
    assert_eq!(hdr.len(), 18);
    assert_eq!(&hdr[6..10], &[0, 0, 0, 1], "queue 1");
    let rr = terminate.rdmap_header.unwrap();
    assert_eq!(&rr[16..20], &0x999u32.to_be_bytes(), "source STag");
}

/// Throughput of the engine pair alone (no TCP): `cargo test --release -p emu-core
/// --test iwarp engine_throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn engine_throughput() {
    for (mss, crc) in [(1460, false), (1460, true), (65_483, false), (65_483, true)] {
        let cfg = IwarpConfig {
            mss,
            crc,
            ..IwarpConfig::default()
        };
        let mut p = connected(cfg.clone(), cfg, 40);
        p.max_chunk = 0;
        p.record = false;
        let t = std::time::Instant::now();
        let n = 200u64;
        for i in 0..n {
            p.a.conn
                .post_send(rdma_wr(
                    i,
                    WrOpcode::RdmaWrite,
                    BASE,
                    1 << 20,
                    BASE + (2 << 20),
                    0x100,
                ))
                .unwrap();
        }
        p.run();
        let s = t.elapsed().as_secs_f64();
        println!(
            "mss {mss} crc {crc}: {:.2} GB/s of 1 MiB Writes",
            (n << 20) as f64 / s / 1e9
        );
    }
}

/// The Terminate errors in what `from` sent since its last transmit, parsed from the wire.
fn sent_terminates(from: &mut Node) -> (Vec<u8>, Vec<TerminateError>) {
    let mut out = Vec::new();
    from.conn
        .poll_stream_transmit(&mut out, &mut from.keys, &mut from.mem);
    let mut d = Deframer::in_full_operation(FpduConfig::default());
    d.read(&out);
    let mut errors = Vec::new();
    while let Some(Ok(Deframed::Fpdu { ulpdu, .. })) = d.pop() {
        if let Ok(RdmapMessage::Terminate { terminate, .. }) = RdmapMessage::parse(ulpdu) {
            errors.push(terminate.error);
        }
    }
    (out, errors)
}

fn recv_wcs(n: &Node) -> Vec<(u64, WcStatus, u32)> {
    n.wcs
        .iter()
        .filter(|c| c.wc.opcode == WcOpcode::Recv)
        .map(|c| (c.wc.wr_id.0, c.wc.status, c.wc.byte_len))
        .collect()
}

#[test]
fn send_waits_for_a_receive_posted_after_it_arrived() {
    // A driver that takes receive WRs from a ring may hand them over after the peer's
    // Send arrived (perftest posts its receives, then tells the peer to start).
    let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 21);
    let d1 = fill(&mut p.a, BASE, 3000, 7);
    let d2 = fill(&mut p.a, BASE + 4096, 100, 8);
    p.a.conn
        .post_send(send_wr(1, WrOpcode::Send, BASE, 3000))
        .unwrap();
    p.a.conn
        .post_send(send_wr(2, WrOpcode::Send, BASE + 4096, 100))
        .unwrap();
    p.run();
    assert!(p.b.conn.is_waiting_for_recv());
    assert_eq!(p.b.conn.poll_timeout(), Some(p.now + RECV_WAIT));
    assert_eq!(p.b.terminated(), None);
    assert!(recv_wcs(&p.b).is_empty());
    // Half the wait later the receives arrive; the held Send and the one behind it land.
    p.now += RECV_WAIT / 2;
    p.b.conn.handle_timeout(p.now);
    p.b.post_recv(10, BASE + MEM / 2, 4096);
    p.b.post_recv(11, BASE + MEM / 2 + 4096, 4096);
    p.b.conn
        .handle_stream(p.now, &[], &mut p.b.keys, &mut p.b.mem);
    p.run();
    assert!(!p.b.conn.is_waiting_for_recv());
    assert_eq!(p.b.conn.poll_timeout(), None);
    assert_eq!(p.b.terminated(), None);
    assert_eq!(
        recv_wcs(&p.b),
        vec![(10, WcStatus::Success, 3000), (11, WcStatus::Success, 100)]
    );
    assert_eq!(p.b.mem.slice(SPACE, BASE + MEM / 2, 3000), &d1[..]);
    assert_eq!(p.b.mem.slice(SPACE, BASE + MEM / 2 + 4096, 100), &d2[..]);
    assert!(p.a.conn.is_established() && p.b.conn.is_established());
}

#[test]
fn send_without_a_receive_terminates_when_the_wait_ends() {
    let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 22);
    p.a.conn
        .post_send(send_wr(1, WrOpcode::Send, BASE, 8))
        .unwrap();
    p.run();
    let start = p.now;
    p.b.conn
        .handle_timeout(start + RECV_WAIT - Duration::from_millis(1));
    assert!(p.b.conn.is_established() && p.b.conn.is_waiting_for_recv());
    p.b.conn.handle_timeout(start + RECV_WAIT);
    let (bytes, sent) = sent_terminates(&mut p.b);
    assert_eq!(sent, vec![TerminateError::DdpUntaggedNoBuffer]);
    assert!(p.b.conn.is_closed() && !p.b.conn.is_waiting_for_recv());
    p.a.conn
        .handle_stream(p.now, &bytes, &mut p.a.keys, &mut p.a.mem);
    p.run();
    assert_eq!(
        p.a.terminated(),
        Some((TerminateError::DdpUntaggedNoBuffer, false))
    );
}

#[test]
fn zero_recv_wait_terminates_a_send_without_a_receive_at_once() {
    let mut p = connected(IwarpConfig::default(), IwarpConfig::default(), 23);
    p.b.conn.set_recv_wait(Duration::ZERO);
    p.a.conn
        .post_send(send_wr(1, WrOpcode::Send, BASE, 8))
        .unwrap();
    p.run();
    assert_eq!(
        p.b.terminated(),
        Some((TerminateError::DdpUntaggedNoBuffer, true))
    );
    assert_eq!(
        p.a.terminated(),
        Some((TerminateError::DdpUntaggedNoBuffer, false))
    );
}

/// The first `cut` octets of an FPDU carrying a 100-octet Send, framed as negotiated.
fn partial_send_fpdu(cut: usize) -> Vec<u8> {
    let u = msg(RdmapMessage::Send {
        last: true,
        solicited: false,
        invalidate: None,
        msn: 1,
        mo: 0,
        payload: &[0x5a; 100],
    });
    let cfg = FpduConfig::default();
    let mut b = vec![0u8; fpdu::wire_len(u.len(), cfg, 0)];
    fpdu::emit(&u, cfg, 0, &mut b);
    assert!(cut < b.len());
    b.truncate(cut);
    b
}

#[test]
fn peer_stopping_mid_fpdu_gets_a_terminate_after_the_stall_timeout() {
    let a = IwarpConfig {
        peer_to_peer: false,
        ..IwarpConfig::default()
    };
    let mut p = connected(a, IwarpConfig::default(), 24);
    p.b.post_recv(10, BASE, 4096);
    assert_eq!(p.b.conn.poll_timeout(), None);
    let half = partial_send_fpdu(60);
    let t0 = p.now;
    p.b.conn
        .handle_stream(t0, &half[..40], &mut p.b.keys, &mut p.b.mem);
    assert_eq!(p.b.conn.poll_timeout(), Some(t0 + RX_STALL_TIMEOUT));
    // Another octet restarts the clock; a call with no octets does not.
    let t1 = t0 + RX_STALL_TIMEOUT / 2;
    p.b.conn
        .handle_stream(t1, &half[40..], &mut p.b.keys, &mut p.b.mem);
    p.b.conn.handle_stream(
        t1 + Duration::from_secs(1),
        &[],
        &mut p.b.keys,
        &mut p.b.mem,
    );
    let deadline = t1 + RX_STALL_TIMEOUT;
    assert_eq!(p.b.conn.poll_timeout(), Some(deadline));
    p.b.conn.handle_timeout(deadline - Duration::from_millis(1));
    assert!(p.b.conn.is_established());
    p.b.conn.handle_timeout(deadline);
    let (bytes, sent) = sent_terminates(&mut p.b);
    // RFC 5044 §8: layer LLP, "TCP connection closed, terminated or lost".
    assert_eq!(sent, vec![TerminateError::MpaTcpLost]);
    p.run();
    assert!(p.b.conn.is_closed() && p.b.conn.wants_close());
    assert_eq!(p.b.conn.poll_timeout(), None);
    assert_eq!(p.b.terminated(), Some((TerminateError::MpaTcpLost, true)));
    assert_eq!(recv_wcs(&p.b), vec![(10, WcStatus::WrFlushErr, 0)]);
    assert!(p.b.events.contains(&IwarpEvent::Closed));
    p.a.conn
        .handle_stream(p.now, &bytes, &mut p.a.keys, &mut p.a.mem);
    p.run();
    assert_eq!(p.a.terminated(), Some((TerminateError::MpaTcpLost, false)));
}

#[test]
fn whole_fpdus_and_a_waiting_send_set_no_stall_timer() {
    let a = IwarpConfig {
        peer_to_peer: false,
        ..IwarpConfig::default()
    };
    let mut p = connected(a, IwarpConfig::default(), 25);
    p.b.post_recv(10, BASE + MEM / 2, 4096);
    p.a.conn
        .post_send(send_wr(1, WrOpcode::Send, BASE, 3000))
        .unwrap();
    p.run();
    assert_eq!(p.b.conn.poll_timeout(), None);
    assert_eq!(recv_wcs(&p.b), vec![(10, WcStatus::Success, 3000)]);
    // Input held for a receive WR is our doing, not the peer's: only the wait is timed.
    p.b.conn
        .set_rx_stall_timeout(Some(Duration::from_millis(10)));
    p.a.conn
        .post_send(send_wr(2, WrOpcode::Send, BASE, 3000))
        .unwrap();
    p.run();
    assert!(p.b.conn.is_waiting_for_recv());
    assert_eq!(p.b.conn.poll_timeout(), Some(p.now + RECV_WAIT));
}

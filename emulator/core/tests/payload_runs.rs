//! A message's payload moves in runs of 64 KiB: the requester reads it ahead of its
//! packets and the responder places a WRITE's middle packets together, one memory access
//! per run instead of one per packet. Never bytes of one WR for another, never an ACK
//! before the bytes it covers are in memory, and a fault still ends the WR in error.

use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

/// A signaled `op` (an RDMA WRITE, with immediate or not, or an RDMA READ into `from`)
/// of `len` bytes between `from` (under `lkey`) and `to` (under `rkey`).
fn write_wr(
    id: u64,
    op: WrOpcode,
    (from, lkey): (u64, Lkey),
    len: u32,
    (to, rkey): (u64, Rkey),
) -> SendWr {
    let mut wr = SendWr::new(WrId(id), op);
    wr.send_flags = SendFlags::SIGNALED;
    wr.sg_list = vec![Sge {
        addr: from,
        length: len,
        lkey,
    }];
    wr.rdma = RdmaInfo {
        remote_addr: to,
        rkey,
    };
    wr
}

/// Posts `wr` on `a`'s QP.
fn post(f: &mut Fabric, a: &End, wr: SendWr) {
    let now = f.now;
    let n = &mut f.nodes[a.node];
    n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
}

/// Posts a signaled RDMA WRITE of `len` bytes from `a`'s buffer at `from` to `b`'s at
/// `to`.
fn post_write(f: &mut Fabric, a: &End, b: &End, id: u64, from: u64, to: u64, len: u32) {
    post_op(f, (a, b), id, WrOpcode::RdmaWrite, (from, to), len);
}

/// Posts a signaled `op` of `len` bytes between `a`'s buffer at `from` and `b`'s at `to`.
fn post_op(f: &mut Fabric, (a, b): (&End, &End), id: u64, op: WrOpcode, at: (u64, u64), len: u32) {
    let (from, to) = at;
    let wr = write_wr(
        id,
        op,
        (a.base + from, a.mr.lkey),
        len,
        (b.base + to, b.mr.rkey),
    );
    post(f, a, wr);
}

/// Registers `[at, at + len)` of `e`'s client with `access`, of which only the first
/// `mapped` bytes are memory: the rest is registered and unmapped.
fn mr_with_a_hole(
    f: &mut Fabric,
    e: &End,
    at: u64,
    len: u64,
    mapped: usize,
    access: AccessFlags,
) -> MrKeys {
    let n = &mut f.nodes[e.node];
    n.mem.add_region(AddrSpace(e.client.0), at, mapped);
    n.dev
        .reg_mr(e.pd, at, len, at, access, AddrSpace(e.client.0))
        .unwrap()
}

/// Two nodes at MTU 1024 whose memory stands for the daemon's `/proc/PID/mem`: each access
/// is a system call, so payload moves in runs ([`Memory::prefers_runs`]).
fn fabric(seed: u64, link: LinkModel) -> Fabric {
    let mut f = Fabric::new(seed, 2, Mtu::Mtu1024, link);
    for n in &mut f.nodes {
        n.mem.runs = true;
    }
    f
}

/// Runs the fabric idle and takes `a`'s one completion, which must be a success.
fn complete_one(f: &mut Fabric, a: &End) {
    assert!(f.run(Duration::from_secs(30)), "the fabric never went idle");
    let (_, wc) = f.nodes[a.node].dev.poll_completion().expect("a completion");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
}

/// 5 % loss, 2 % duplication, 5 % reordering.
fn lossy() -> LinkModel {
    LinkModel {
        loss: 0.05,
        duplicate: 0.02,
        reorder: 0.05,
        ..LinkModel::default()
    }
}

/// Runs a lossy fabric idle: `a` has `n` completions, all successes, and resent packets
/// on the way (else the link exercised nothing).
fn all_succeed_after_resends(f: &mut Fabric, a: &End, n: usize) {
    assert!(
        f.run(Duration::from_secs(120)),
        "the fabric never went idle"
    );
    let mut done = 0;
    while let Some((_, wc)) = f.nodes[a.node].dev.poll_completion() {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        done += 1;
    }
    assert_eq!(done, n);
    assert!(
        f.nodes[a.node].dev.counters().retransmitted_pkts > 0,
        "the link lost nothing: go-back-N was not exercised"
    );
}

fn fill(f: &mut Fabric, e: &End, at: u64, len: usize, seed: u8) {
    let m = f.nodes[e.node]
        .mem
        .slice_mut(AddrSpace(e.client.0), e.base + at, len);
    for (i, b) in m.iter_mut().enumerate() {
        *b = seed.wrapping_add((i * 7 + i / 251) as u8);
    }
}

fn bytes(f: &Fabric, e: &End, at: u64, len: usize) -> Vec<u8> {
    f.nodes[e.node]
        .mem
        .slice(AddrSpace(e.client.0), e.base + at, len)
        .to_vec()
}

/// A 256 KiB WRITE at MTU 1024 is 256 packets. Where memory asks for runs, its payload is
/// read in four accesses of 64 KiB and placed in four; into mapped memory (the daemon's
/// shared MRs) a run would only be one more copy of every byte, so there it is read and
/// placed one packet at a time. Either way it arrives whole.
#[test]
fn a_long_message_is_read_and_placed_in_accesses_of_64_kib() {
    for runs in [true, false] {
        let mut f = fabric(3, LinkModel::default());
        for n in &mut f.nodes {
            n.mem.runs = runs;
        }
        let (a, b) = connect(&mut f, &ConnOpts::default());
        let len = 256 * 1024;
        fill(&mut f, &a, 0, len, 1);
        let before = f.nodes[a.node].mem.reads;
        let placed_before = f.nodes[b.node].mem.writes;
        post_write(&mut f, &a, &b, 1, 0, 0, len as u32);
        complete_one(&mut f, &a);
        let want = if runs { 4 } else { 256 };
        let reads = f.nodes[a.node].mem.reads - before;
        assert_eq!(reads, want, "payload reads for 256 packets, runs: {runs}");
        let writes = f.nodes[b.node].mem.writes - placed_before;
        assert_eq!(writes, want, "payload writes for 256 packets, runs: {runs}");
        assert_eq!(bytes(&f, &b, 0, len), bytes(&f, &a, 0, len));
    }
}

/// A 256 KiB RDMA READ at MTU 1024: the responder reads its source and the requester
/// places the responses in four runs of 64 KiB each where memory asks for runs, and once
/// per response packet with mapped memory.
#[test]
fn a_long_read_response_is_read_in_runs_of_64_kib() {
    for runs in [true, false] {
        let mut f = fabric(9, LinkModel::default());
        for n in &mut f.nodes {
            n.mem.runs = runs;
        }
        let (a, b) = connect(&mut f, &ConnOpts::default());
        let len = 256 * 1024;
        fill(&mut f, &b, 0, len, 7);
        let before = f.nodes[b.node].mem.reads;
        let placed_before = f.nodes[a.node].mem.writes;
        post_op(&mut f, (&a, &b), 1, WrOpcode::RdmaRead, (0, 0), len as u32);
        complete_one(&mut f, &a);
        let reads = f.nodes[b.node].mem.reads - before;
        assert_eq!(reads, if runs { 4 } else { 256 }, "runs: {runs}");
        let writes = f.nodes[a.node].mem.writes - placed_before;
        assert_eq!(writes, if runs { 4 } else { 256 }, "runs: {runs}");
        assert_eq!(bytes(&f, &a, 0, len), bytes(&f, &b, 0, len));
    }
}

/// The same buffer sent again after its WR completed and the application changed it:
/// the second WRITE carries the new bytes, not the ones read ahead for the first.
#[test]
fn a_buffer_changed_after_completion_is_read_again() {
    let mut f = fabric(4, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let len = 96 * 1024;
    for round in 0..3u8 {
        fill(&mut f, &a, 0, len, round.wrapping_mul(37));
        post_write(&mut f, &a, &b, u64::from(round), 0, 0, len as u32);
        complete_one(&mut f, &a);
        assert_eq!(
            bytes(&f, &b, 0, len),
            bytes(&f, &a, 0, len),
            "round {round}"
        );
    }
}

/// Under loss, duplication and reordering, go-back-N rebuilds packets from the middle of
/// messages, and messages of several WRs are in flight at once: every byte still lands
/// where its own WR put it.
#[test]
fn retransmissions_of_interleaved_messages_carry_their_own_bytes() {
    let mut f = fabric(5, lossy());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    // Eight WRITEs of 80 KiB from eight parts of the buffer, each to its own place.
    let len = 80 * 1024;
    for k in 0..8u64 {
        fill(&mut f, &a, k * len as u64, len, k as u8 * 29 + 3);
        post_write(
            &mut f,
            &a,
            &b,
            k,
            k * len as u64,
            k * len as u64,
            len as u32,
        );
    }
    all_succeed_after_resends(&mut f, &a, 8);
    let all = 8 * len;
    assert_eq!(bytes(&f, &b, 0, all), bytes(&f, &a, 0, all));
}

/// READs under loss, duplication and reordering: responses lost in the middle of a held
/// run make the requester ask again from the first missing one, and every byte still
/// lands where its own READ put it.
#[test]
fn reads_under_loss_place_every_byte_once_in_its_place() {
    let mut f = fabric(11, lossy());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let len = 80 * 1024;
    for k in 0..6u64 {
        fill(&mut f, &b, k * len as u64, len, k as u8 * 13 + 1);
        let at = k * len as u64;
        post_op(
            &mut f,
            (&a, &b),
            k,
            WrOpcode::RdmaRead,
            (at, at),
            len as u32,
        );
    }
    all_succeed_after_resends(&mut f, &a, 6);
    let all = 6 * len;
    assert_eq!(bytes(&f, &a, 0, all), bytes(&f, &b, 0, all));
}

/// A fault inside a later part of the message is met at the packet where it lies: the
/// packets before it were built from memory and the WR completes in error.
#[test]
fn an_unreadable_page_ends_the_wr_in_error_at_its_own_packet() {
    let mut f = fabric(6, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    // An MR whose last 4 KiB are registered but unmapped.
    let at = 0x80_0000;
    let mr = mr_with_a_hole(
        &mut f,
        &a,
        at,
        64 * 1024,
        60 * 1024,
        AccessFlags::LOCAL_WRITE,
    );
    let wr = write_wr(
        9,
        WrOpcode::RdmaWrite,
        (at, mr.lkey),
        64 * 1024,
        (b.base, b.mr.rkey),
    );
    post(&mut f, &a, wr);
    let now = f.now;
    let n = &mut f.nodes[a.node];
    let mut buf = Vec::new();
    let mut sent = 0;
    while n.dev.poll_transmit(now, &mut n.mem, &mut buf).is_some() {
        sent += 1;
    }
    assert_eq!(sent, 60, "the packets before the unmapped page leave");
    assert!(f.run(Duration::from_secs(30)));
    let (_, wc) = f.nodes[a.node].dev.poll_completion().expect("a completion");
    assert_eq!(wc.status, WcStatus::LocProtErr, "{wc:?}");
}

/// A READ whose source ends in 4 KiB that are registered but unmapped: the run read
/// faults, the responder falls back to each packet's own bytes, sends the 60 packets
/// before the hole and NAKs the one in it (remote operational error). The sink's bytes
/// are undefined after an error completion (the requester held these in a run and drops
/// them).
#[test]
fn a_read_source_that_faults_is_met_at_its_own_packet() {
    let mut f = fabric(10, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    remote_op_error_at_hole(&mut f, &a, &b, WrOpcode::RdmaRead, access, |f| {
        let src = f.nodes[b.node]
            .mem
            .slice_mut(AddrSpace(b.client.0), HOLED, 60 * 1024);
        for (i, x) in src.iter_mut().enumerate() {
            *x = (i % 253) as u8;
        }
    });
    let sent = f.nodes[b.node].dev.counters().sent_pkts;
    assert_eq!(
        sent, 61,
        "60 response packets before the unmapped page, then the NAK"
    );
}

/// Where [`remote_op_error_at_hole`] registers its MR.
const HOLED: u64 = 0x90_0000;

/// Registers 64 KiB of `b`'s at [`HOLED`] with `access`, of which the last 4 KiB are
/// unmapped, lets `prepare` fill it, and runs a 64 KiB `op` (RDMA WRITE or READ) from
/// `a` against it: the WR must end in a remote operational error.
fn remote_op_error_at_hole(
    f: &mut Fabric,
    a: &End,
    b: &End,
    op: WrOpcode,
    access: AccessFlags,
    prepare: impl FnOnce(&mut Fabric),
) {
    let mr = mr_with_a_hole(f, b, HOLED, 64 * 1024, 60 * 1024, access);
    prepare(f);
    let wr = write_wr(4, op, (a.base, a.mr.lkey), 64 * 1024, (HOLED, mr.rkey));
    post(f, a, wr);
    assert!(f.run(Duration::from_secs(30)), "the fabric never went idle");
    let (_, wc) = f.nodes[a.node].dev.poll_completion().expect("a completion");
    assert_eq!(wc.status, WcStatus::RemOpErr, "{wc:?}");
}

/// The responder's MR ends in 4 KiB that are registered but unmapped. A 64 KiB WRITE into
/// it is held until its last packet and faults there: the WR completes as a remote
/// operational error, as when the fault was met packet by packet, and the responder's QP
/// answers nothing more.
#[test]
fn a_held_write_that_faults_is_naked_before_any_ack() {
    let mut f = fabric(8, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    remote_op_error_at_hole(&mut f, &a, &b, WrOpcode::RdmaWrite, access, |f| {
        fill(f, &a, 0, 64 * 1024, 5);
    });
}

/// A WRITE with immediate whose last packet finds no receive WQE is RNR NAKed; the NAK
/// acknowledges the packets before it, so their payload is in memory before it leaves.
/// Once a receive is posted the retried last packet completes the message.
#[test]
fn an_rnr_nak_at_the_last_packet_follows_the_placement_of_the_rest() {
    let mut f = fabric(9, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let len = 32 * 1024;
    fill(&mut f, &a, 0, len, 11);
    let op = WrOpcode::RdmaWriteWithImm;
    post_op(&mut f, (&a, &b), 5, op, (0, 0), len as u32);
    // Run until the first RNR NAK has left the responder.
    let mut steps = 0;
    while f.nodes[b.node].dev.counters().rnr_naks_sent == 0 {
        assert!(f.step(), "idle before the RNR NAK");
        steps += 1;
        assert!(steps < 100_000);
    }
    // Every packet before the last is in memory already.
    let before_last = len - 1024;
    assert_eq!(bytes(&f, &b, 0, before_last), bytes(&f, &a, 0, before_last));
    f.nodes[b.node]
        .dev
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: WrId(77),
                sg_list: Vec::new(),
            },
        )
        .unwrap();
    complete_one(&mut f, &a);
    assert_eq!(bytes(&f, &b, 0, len), bytes(&f, &a, 0, len));
}

/// Posts a signaled SEND of `len` bytes from `a`'s buffer and a receive of `room` bytes
/// at `b`'s buffer, split over two SGEs at `split`.
fn send_into(f: &mut Fabric, a: &End, b: &End, len: u32, room: u32, split: u32) {
    let sg_list = vec![
        Sge {
            addr: b.base,
            length: split,
            lkey: b.mr.lkey,
        },
        Sge {
            addr: b.base + u64::from(split),
            length: room - split,
            lkey: b.mr.lkey,
        },
    ];
    f.nodes[b.node]
        .dev
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: WrId(50),
                sg_list,
            },
        )
        .unwrap();
    let mut wr = SendWr::new(WrId(6), WrOpcode::Send);
    wr.send_flags = SendFlags::SIGNALED;
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: len,
        lkey: a.mr.lkey,
    }];
    post(f, a, wr);
}

/// A 256 KiB SEND at MTU 1024 into a receive of two SGEs (100 KiB and the rest): its
/// runs are placed in one access per run and SGE, and it arrives whole.
#[test]
fn a_long_send_is_placed_in_runs_across_its_sges() {
    let mut f = fabric(10, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let len = 256 * 1024;
    fill(&mut f, &a, 0, len as usize, 21);
    let before = f.nodes[b.node].mem.writes;
    send_into(&mut f, &a, &b, len, len, 100 * 1024);
    complete_one(&mut f, &a);
    let (_, wc) = f.nodes[b.node].dev.poll_completion().expect("a receive");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(wc.byte_len, len);
    // Runs of 64 KiB: [0, 64) [64, 128) [128, 192) [192, 256) KiB, the second split at
    // 100 KiB.
    assert_eq!(f.nodes[b.node].mem.writes - before, 5);
    let n = len as usize;
    assert_eq!(bytes(&f, &b, 0, n), bytes(&f, &a, 0, n));
}

/// A SEND longer than its receive fails at the packet that overflows, held or not: the
/// receive completes with a length error and the sender with a remote invalid request.
#[test]
fn a_send_too_long_for_its_receive_fails_as_before() {
    let mut f = fabric(11, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    send_into(&mut f, &a, &b, 48 * 1024, 40 * 1024, 8 * 1024);
    assert!(f.run(Duration::from_secs(30)), "the fabric never went idle");
    let (_, wc) = f.nodes[b.node].dev.poll_completion().expect("a receive");
    assert_eq!(wc.status, WcStatus::LocLenErr, "{wc:?}");
    let (_, wc) = f.nodes[a.node].dev.poll_completion().expect("a completion");
    assert_eq!(wc.status, WcStatus::RemInvReqErr, "{wc:?}");
}

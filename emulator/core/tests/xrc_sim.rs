//! XRC (IBA annex A14) in the simulator: an initiator on one node sends, writes and reads to a
//! target on the other, whose Sends land in the XRC SRQ each request's XRCETH names and
//! complete on that SRQ's CQ. Under a lossy, duplicating, reordering fabric every WR
//! completes once with success and memory equals a model; an SRQ of another domain or
//! none is NAKed Invalid Request; an XRC request at an RC QP is dropped and counted.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

const B_WRITE: u64 = 0;
const B_READ_SRC: u64 = 384 << 10;
const B_RECV: u64 = 512 << 10;
const A_READ: u64 = 256 << 10;

/// The XRC objects of a run: the initiator on node 0, the target side on node 1.
struct Xrc {
    /// Node 0's PD, CQ and MR (the RC QP `make_end` made stays in RESET).
    a: End,
    ini: Qpn,
    /// Node 1's PD, CQs and MR; its RC QP is an RC peer for the wrong-transport test.
    b: End,
    xrcd: XrcdHandle,
    srq: SrqHandle,
    /// An XRC SRQ of another domain of node 1.
    foreign: SrqHandle,
    tgt: Qpn,
}

fn setup(f: &mut Fabric, o: &ConnOpts) -> Xrc {
    let a = make_end(f, 0, o);
    let b = make_end(f, 1, o);
    let cap = QpCap {
        max_send_wr: o.depth,
        max_send_sge: 4,
        max_inline_data: 64,
        ..QpCap::default()
    };
    let init = QpInitAttr {
        pd: a.pd,
        send_cq: a.scq,
        recv_cq: a.scq,
        srq: None,
        cap,
        qp_type: QpType::XrcSend,
        sq_sig_all: false,
    };
    let d = &mut f.nodes[0].dev;
    let (ini, got) = d.create_qp(a.client, &init).expect("XRC INI");
    assert_eq!((got.max_recv_wr, got.max_recv_sge), (0, 0));
    let d = &mut f.nodes[1].dev;
    let xrcd = d.open_xrcd(b.client);
    let other = d.open_xrcd(b.client);
    let attr = SrqAttr {
        max_wr: o.depth,
        max_sge: 4,
        srq_limit: 0,
    };
    let srq = d
        .create_xrc_srq(b.client, b.pd, xrcd, b.rcq, attr)
        .expect("XRC SRQ");
    let foreign = d
        .create_xrc_srq(b.client, b.pd, other, b.rcq, attr)
        .expect("XRC SRQ");
    let tgt = d.create_xrc_tgt_qp(b.client, xrcd).expect("XRC TGT");
    Xrc {
        a,
        ini,
        b,
        xrcd,
        srq,
        foreign,
        tgt,
    }
}

/// INIT, RTR, RTS of one QP towards `dest` on node `peer` with the masks its type needs.
fn bring(
    f: &mut Fabric,
    node: usize,
    qpn: Qpn,
    peer: usize,
    dest: Qpn,
    psns: (u32, u32),
    o: &ConnOpts,
) {
    use QpAttrMask as M;
    let now = f.now;
    let d = &mut f.nodes[node].dev;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: o.access,
        ..QpAttr::default()
    };
    let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    d.modify_qp(now, qpn, &a, init).expect("INIT");
    let dgid = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1 + peer as u8)));
    a.qp_state = QpState::Rtr;
    a.ah_attr = AhAttr {
        grh: GlobalRoute {
            dgid,
            hop_limit: 64,
            ..Default::default()
        },
        is_global: true,
        port_num: 1,
        ..Default::default()
    };
    a.path_mtu = o.mtu as u32;
    a.dest_qp_num = dest;
    a.rq_psn = Psn::new(psns.0);
    a.max_dest_rd_atomic = o.rd_atomic;
    a.min_rnr_timer = 1;
    let (_, init_attr) = d.query_qp(qpn).expect("query");
    let path = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
    let responder = M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    let requester = M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    let (rtr, rts) = match init_attr.qp_type {
        // The kernel's qp_state_table: no responder attributes for an initiator, no
        // requester attributes but the PSN and timeout for a target.
        QpType::XrcSend => (path, requester),
        QpType::XrcRecv => (path | responder, M::TIMEOUT),
        _ => (path | responder, requester),
    };
    d.modify_qp(now, qpn, &a, M::STATE | rtr).expect("RTR");
    a.qp_state = QpState::Rts;
    a.sq_psn = Psn::new(psns.1);
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = o.rd_atomic;
    d.modify_qp(now, qpn, &a, M::STATE | M::SQ_PSN | rts)
        .expect("RTS");
}

/// Connects the initiator to `dest` on node 1 (the target, or an RC QP).
fn connect_xrc(f: &mut Fabric, x: &Xrc, dest: Qpn, psn: u32, o: &ConnOpts) {
    let (pa, pb) = (psn & Psn::MASK, psn.wrapping_add(1000) & Psn::MASK);
    bring(f, 0, x.ini, 1, dest, (pb, pa), o);
    bring(f, 1, dest, 0, x.ini, (pa, pb), o);
}

fn send_to(x: &Xrc, id: u64, srqn: u32, off: u64, len: u32) -> SendWr {
    let mut wr = SendWr::new(WrId(id), WrOpcode::Send);
    wr.sg_list = vec![Sge {
        addr: x.a.base + off,
        length: len,
        lkey: x.a.mr.lkey,
    }];
    wr.ud.remote_qpn = Qpn(srqn);
    wr
}

fn completions(f: &mut Fabric, node: usize) -> Vec<(CqHandle, WorkCompletion)> {
    std::iter::from_fn(|| f.nodes[node].dev.poll_completion()).collect()
}

/// Posts receive `id` at `B_RECV + off` of node 1 to the XRC SRQ.
fn post_xrc_recv(f: &mut Fabric, x: &Xrc, id: u64, off: u64, len: u32) {
    let sge = Sge {
        addr: x.b.base + B_RECV + off,
        length: len,
        lkey: x.b.mr.lkey,
    };
    let rwr = RecvWr {
        wr_id: WrId(id),
        sg_list: vec![sge],
    };
    f.nodes[1].dev.post_srq_recv(x.srq, rwr).unwrap();
}

fn run_seed(seed: u64) {
    let mut rng = Rng::new(seed);
    let link = LinkModel::lossy(&mut rng);
    let mtu = [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][rng.below(3) as usize];
    let psn = start_psn(seed, &mut rng);
    let o = ConnOpts {
        mtu,
        timeout: 6,
        ..ConnOpts::default()
    };
    let mut f = Fabric::new(seed, 2, Mtu::Mtu4096, link);
    let x = setup(&mut f, &o);
    connect_xrc(&mut f, &x, x.tgt, psn, &o);
    let src: Vec<u8> = (0..256 << 10).map(|_| rng.next_u64() as u8).collect();
    f.nodes[0]
        .mem
        .slice_mut(AddrSpace(x.a.client.0), x.a.base, src.len())
        .copy_from_slice(&src);
    let read_src: Vec<u8> = (0..64 << 10).map(|_| rng.next_u64() as u8).collect();
    f.nodes[1]
        .mem
        .slice_mut(
            AddrSpace(x.b.client.0),
            x.b.base + B_READ_SRC,
            read_src.len(),
        )
        .copy_from_slice(&read_src);
    let mut reads = Vec::new();
    let mut read_off = 0u64;
    let mut model = vec![0u8; 256 << 10];
    let max_len = 3 * mtu.bytes() + 100;
    let nops = 4 + rng.below(16);
    let mut recvs = Vec::new();
    let mut recv_off = 0u64;
    for i in 0..nops {
        let off = rng.below(128 << 10);
        let len = rng.below(u64::from(max_len)) as u32;
        let mut wr = send_to(&x, i, x.srq.0, off, len);
        let kind = rng.below(3);
        if kind == 2 {
            // A READ through the target's responder, checked against B's memory.
            let from = rng.below(32 << 10);
            wr.opcode = WrOpcode::RdmaRead;
            wr.sg_list[0].addr = x.a.base + A_READ + read_off;
            wr.rdma = RdmaInfo {
                remote_addr: x.b.base + B_READ_SRC + from,
                rkey: x.b.mr.rkey,
            };
            let want = read_src[from as usize..(from + u64::from(len)) as usize].to_vec();
            reads.push((read_off, want));
            read_off += u64::from(len);
        } else if kind == 1 {
            // A WRITE, with immediate (which takes a receive from the SRQ) now and then.
            let imm = rng.chance(0.3);
            wr.opcode = if imm {
                WrOpcode::RdmaWriteWithImm
            } else {
                WrOpcode::RdmaWrite
            };
            wr.imm_data = i as u32;
            let dst = rng.below(128 << 10);
            wr.rdma = RdmaInfo {
                remote_addr: x.b.base + B_WRITE + dst,
                rkey: x.b.mr.rkey,
            };
            let (s, d) = (off as usize, dst as usize);
            model[d..d + len as usize].copy_from_slice(&src[s..s + len as usize]);
            if imm {
                post_xrc_recv(&mut f, &x, i, recv_off, max_len);
                recvs.push((
                    i,
                    WcOpcode::RecvRdmaWithImm,
                    recv_off,
                    vec![0; len as usize],
                ));
                recv_off += u64::from(max_len);
            }
        } else {
            post_xrc_recv(&mut f, &x, i, recv_off, max_len);
            let data = src[off as usize..(off + u64::from(len)) as usize].to_vec();
            recvs.push((i, WcOpcode::Recv, recv_off, data));
            recv_off += u64::from(max_len);
        }
        wr.send_flags = SendFlags::SIGNALED;
        let (now, n) = (f.now, &mut f.nodes[0]);
        n.dev.post_send(now, x.ini, wr, &mut n.mem).unwrap();
    }
    let ctx = format!("seed {seed} link {link:?} mtu {mtu:?} psn {psn:#x}");
    f.settle(Duration::from_secs(30), &ctx);
    let sends = completions(&mut f, 0);
    let ids: Vec<u64> = sends.iter().map(|(_, w)| w.wr_id.0).collect();
    assert_eq!(ids, (0..nops).collect::<Vec<_>>(), "{ctx} {sends:?}");
    assert!(
        sends
            .iter()
            .all(|(cq, w)| *cq == x.a.scq && w.status == WcStatus::Success),
        "{ctx} {sends:?}"
    );
    // Receives: in order, on the SRQ's CQ, naming the target QP, with the data sent.
    let got = completions(&mut f, 1);
    assert_eq!(got.len(), recvs.len(), "{ctx} {got:?}");
    for ((cq, wc), (id, op, off, data)) in got.iter().zip(&recvs) {
        let seen = (
            *cq,
            wc.wr_id.0,
            wc.status,
            wc.opcode,
            wc.byte_len,
            wc.qp_num,
        );
        let want = (
            x.b.rcq,
            *id,
            WcStatus::Success,
            *op,
            data.len() as u32,
            x.tgt,
        );
        assert_eq!(seen, want, "{ctx}");
        if *op == WcOpcode::Recv {
            let at = x.b.base + B_RECV + off;
            let placed = f.nodes[1]
                .mem
                .slice(AddrSpace(x.b.client.0), at, data.len());
            assert_eq!(placed, &data[..], "recv {id}: {ctx}");
        }
    }
    let written = f.nodes[1]
        .mem
        .slice(AddrSpace(x.b.client.0), x.b.base, 256 << 10);
    assert!(
        written == &model[..],
        "B's memory differs from the model: {ctx}"
    );
    for (off, want) in &reads {
        let at = x.a.base + A_READ + off;
        let got = f.nodes[0]
            .mem
            .slice(AddrSpace(x.a.client.0), at, want.len());
        assert!(got == &want[..], "READ at {off} differs: {ctx}");
    }
    assert_eq!(f.nodes[1].dev.counters().xrc_srq_errors, 0, "{ctx}");
}

#[test]
fn xrc_send_write_read_under_loss() {
    for seed in seed_range() {
        run_seed(seed);
    }
}

/// An XRC Send naming `srqn` (not an XRC SRQ of the target's domain) is NAKed Invalid
/// Request: the initiator's WR completes REM_INV_REQ_ERR, the target enters the error
/// state and counts it, and no receive is consumed.
fn bad_srq(srqn: impl Fn(&Xrc) -> u32) {
    let o = ConnOpts::default();
    let mut f = Fabric::new(7, 2, Mtu::Mtu4096, LinkModel::default());
    let x = setup(&mut f, &o);
    connect_xrc(&mut f, &x, x.tgt, 500, &o);
    for s in [x.srq, x.foreign] {
        let sge = Sge {
            addr: x.b.base + B_RECV,
            length: 4096,
            lkey: x.b.mr.lkey,
        };
        let rwr = RecvWr {
            wr_id: WrId(9),
            sg_list: vec![sge],
        };
        f.nodes[1].dev.post_srq_recv(s, rwr).unwrap();
    }
    let mut wr = send_to(&x, 1, srqn(&x), 0, 100);
    wr.send_flags = SendFlags::SIGNALED;
    let (now, n) = (f.now, &mut f.nodes[0]);
    n.dev.post_send(now, x.ini, wr, &mut n.mem).unwrap();
    f.settle(Duration::from_secs(5), "bad SRQ");
    let sends = completions(&mut f, 0);
    assert_eq!(sends.len(), 1, "{sends:?}");
    assert_eq!(sends[0].1.status, WcStatus::RemInvReqErr, "{sends:?}");
    let d = &f.nodes[1].dev;
    assert_eq!(d.counters().xrc_srq_errors, 1);
    assert_eq!(d.qp_counters(x.tgt).map(|c| c.xrc_srq_errors), Some(1));
    assert_eq!(d.query_qp(x.tgt).unwrap().0.qp_state, QpState::Err);
    assert_eq!(d.srq_outstanding(x.srq), Some(1));
    assert_eq!(d.srq_outstanding(x.foreign), Some(1));
    assert!(completions(&mut f, 1).is_empty());
}

#[test]
fn xrc_srq_of_another_domain_is_naked_invalid_request() {
    bad_srq(|x| x.foreign.0);
}

#[test]
fn xrc_unknown_srq_is_naked_invalid_request() {
    bad_srq(|_| 0xab_cdef);
}

#[test]
fn xrc_basic_srq_is_naked_invalid_request() {
    // A basic SRQ of the target's node is no XRC SRQ.
    let o = ConnOpts {
        use_srq: true,
        ..ConnOpts::default()
    };
    let mut f = Fabric::new(8, 2, Mtu::Mtu4096, LinkModel::default());
    let x = setup(&mut f, &o);
    connect_xrc(&mut f, &x, x.tgt, 500, &o);
    let mut wr = send_to(&x, 1, x.b.srq.expect("srq").0, 0, 10);
    wr.send_flags = SendFlags::SIGNALED;
    let (now, n) = (f.now, &mut f.nodes[0]);
    n.dev.post_send(now, x.ini, wr, &mut n.mem).unwrap();
    f.settle(Duration::from_secs(5), "basic SRQ");
    let sends = completions(&mut f, 0);
    assert_eq!(sends[0].1.status, WcStatus::RemInvReqErr, "{sends:?}");
    assert_eq!(f.nodes[1].dev.counters().xrc_srq_errors, 1);
}

#[test]
fn xrc_request_at_an_rc_qp_is_dropped_and_counted() {
    // The initiator connected to an RC QP: its XRC opcodes are not the RC QP's
    // transport, so they are silently dropped (counted) and the initiator retries out.
    let o = ConnOpts {
        retry_cnt: 1,
        timeout: 4,
        ..ConnOpts::default()
    };
    let mut f = Fabric::new(9, 2, Mtu::Mtu4096, LinkModel::default());
    let x = setup(&mut f, &o);
    connect_xrc(&mut f, &x, x.b.qpn, 500, &o);
    let mut wr = send_to(&x, 1, x.srq.0, 0, 10);
    wr.send_flags = SendFlags::SIGNALED;
    let (now, n) = (f.now, &mut f.nodes[0]);
    n.dev.post_send(now, x.ini, wr, &mut n.mem).unwrap();
    f.settle(Duration::from_secs(5), "XRC at RC");
    let sends = completions(&mut f, 0);
    assert_eq!(sends[0].1.status, WcStatus::RetryExcErr, "{sends:?}");
    let d = &f.nodes[1].dev;
    assert_eq!(d.qp_counters(x.b.qpn).map(|c| c.unknown_qp), Some(2));
    assert_eq!(d.query_qp(x.b.qpn).unwrap().0.qp_state, QpState::Rts);
}

#[test]
fn xrc_verbs_checks() {
    let o = ConnOpts::default();
    let mut f = Fabric::new(10, 2, Mtu::Mtu4096, LinkModel::default());
    let x = setup(&mut f, &o);
    let now = f.now;
    let n = &mut f.nodes[1];
    let d = &mut n.dev;
    let stranger = ClientId(999);
    // Only a client that has the domain open may put objects in it.
    let attr = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    assert_eq!(d.create_xrc_tgt_qp(stranger, x.xrcd), Err(Errno::EINVAL));
    assert_eq!(
        d.create_xrc_srq(stranger, x.b.pd, x.xrcd, x.b.rcq, attr),
        Err(Errno::EINVAL)
    );
    // A target has no send or receive queue.
    let rwr = RecvWr {
        wr_id: WrId(1),
        sg_list: Vec::new(),
    };
    assert_eq!(d.post_recv(x.tgt, rwr), Err(Errno::EINVAL));
    let wr = SendWr::new(WrId(1), WrOpcode::Send);
    assert!(d.post_send(now, x.tgt, wr, &mut n.mem).is_err());
    let d = &mut n.dev;
    // The last close waits for the SRQ and the target; a shared open closes freely.
    d.share_xrcd(x.xrcd, stranger).unwrap();
    assert_eq!(d.close_xrcd(x.xrcd, stranger), Ok(false));
    assert_eq!(d.close_xrcd(x.xrcd, x.b.client), Err(Errno::EBUSY));
    assert_eq!(
        d.destroy_cq(x.b.rcq),
        Err(Errno::EBUSY),
        "the XRC SRQs use it"
    );
    d.destroy_qp(x.tgt).unwrap();
    d.destroy_srq(x.srq).unwrap();
    assert_eq!(d.close_xrcd(x.xrcd, x.b.client), Ok(true));
    assert!(!d.xrcd_exists(x.xrcd));
    assert_eq!(d.close_xrcd(x.xrcd, x.b.client), Err(Errno::EINVAL));
    // A client's release closes its opens.
    let other = d.open_xrcd(x.b.client);
    d.release_client(now, x.b.client);
    assert!(!d.xrcd_exists(other));
}

/// XRC request opcodes (transport 0xA0 with RC's operations) and some of other transports.
const HOSTILE_OPCODES: &[u8] = &[
    0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
    0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xbc, 0xbd, 0x04, 0x0a, 0x11, 0x64,
];

/// A packet of a random XRC (or other) opcode at `tgt` near `psn`, random bytes after
/// the BTH but an XRCETH naming one of `srqs` most of the time and, after it, a RETH
/// aimed at the MR half the time.
fn hostile_packet(
    rng: &mut Rng,
    tgt: Qpn,
    psn: u32,
    srqs: &[u32],
    rkey: Rkey,
    base: u64,
) -> Vec<u8> {
    let op = HOSTILE_OPCODES[rng.below(HOSTILE_OPCODES.len() as u64) as usize];
    let payload = rng.below(300) as usize;
    let n = (16 + 16 + 8 + payload + 3) & !3;
    let mut b: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
    b[0] = op;
    b[1] &= 0xf0;
    b[5..8].copy_from_slice(&tgt.0.to_be_bytes()[1..]);
    let p = psn.wrapping_add(rng.below(6) as u32).wrapping_sub(2) & 0xff_ffff;
    b[9..12].copy_from_slice(&p.to_be_bytes()[1..]);
    if rng.chance(0.8) {
        let srq = srqs[rng.below(srqs.len() as u64) as usize];
        b[12..16].copy_from_slice(&srq.to_be_bytes());
        b[12] = 0;
    }
    if rng.chance(0.5) {
        let va = base + rng.below(1 << 15);
        b[16..24].copy_from_slice(&va.to_be_bytes());
        b[24..28].copy_from_slice(&rkey.0.to_be_bytes());
        b[28..32].copy_from_slice(&(rng.below(1 << 12) as u32).to_be_bytes());
    }
    b
}

#[test]
fn arbitrary_packets_at_an_xrc_target_never_panic_nor_write_outside_mrs() {
    let (mut accepted, mut writes, mut naks) = (0, 0, 0);
    for seed in 0..80u64 {
        let mut rng = Rng::new(seed);
        let o = ConnOpts {
            mtu: Mtu::Mtu256,
            buf_len: 1 << 16,
            ..ConnOpts::default()
        };
        let mut f = Fabric::new(seed, 2, Mtu::Mtu1024, LinkModel::default());
        let x = setup(&mut f, &o);
        let psn = 500;
        connect_xrc(&mut f, &x, x.tgt, psn, &o);
        let ranges = vec![(AddrSpace(x.b.client.0), x.b.base, x.b.len)];
        let srqs = [x.srq.0, x.foreign.0, x.b.srq.map_or(1, |s| s.0), 0xff_ffff];
        // The target's expected PSN (connect_xrc gives the initiator's `psn` to it).
        let expected = psn;
        for _ in 0..400 {
            let d = &mut f.nodes[1].dev;
            if d.query_qp(x.tgt).unwrap().0.qp_state == QpState::Err {
                let reset = QpAttr {
                    qp_state: QpState::Reset,
                    ..QpAttr::default()
                };
                d.modify_qp(f.now, x.tgt, &reset, QpAttrMask::STATE)
                    .unwrap();
                bring(&mut f, 1, x.tgt, 0, x.ini, (psn, psn + 1000), &o);
            }
            for s in [x.srq, x.foreign] {
                if f.nodes[1].dev.srq_outstanding(s) < Some(4) {
                    let sge = Sge {
                        addr: x.b.base + rng.below(8) * 512,
                        length: 512,
                        lkey: x.b.mr.lkey,
                    };
                    let rwr = RecvWr {
                        wr_id: WrId(1),
                        sg_list: vec![sge],
                    };
                    f.nodes[1].dev.post_srq_recv(s, rwr).unwrap();
                }
            }
            let near = expected.wrapping_add(rng.below(8) as u32);
            let pkt = hostile_packet(&mut rng, x.tgt, near, &srqs, x.b.mr.rkey, x.b.base);
            inject(&mut f.nodes[1], f.now, &pkt, &ranges);
        }
        let c = f.nodes[1].dev.counters();
        accepted += c.rcvd_pkts;
        naks += c.xrc_srq_errors;
        writes += f.nodes[1].mem.writes;
    }
    eprintln!("accepted {accepted} writes {writes} XRC SRQ NAKs {naks}");
    // The packets reach the responder through the XRCETH checks, both ways.
    assert!(
        accepted > 1000 && writes > 10 && naks > 10,
        "accepted {accepted} writes {writes} XRC SRQ NAKs {naks}"
    );
}

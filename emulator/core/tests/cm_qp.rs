//! The CM drives real QPs: the attributes of `init_qp_attr` take two RC QPs of the
//! simulated devices through INIT → RTR → RTS, and a SEND and an RDMA WRITE cross.

mod cm_util;

use std::time::Duration;

use cm_util::{ip, ready_qp, Net, SEC};
use emu_core::cm::{CmEvent, CmState, ConnId, ConnParams, PortSpace, Route, ServiceId};
use emu_core::sim::{make_end, ConnOpts, End, Fabric, LinkModel};
use emu_core::{
    AccessFlags, AddrSpace, ClientId, Mtu, QpAttrMask, QpState, RecvWr, SendWr, Sge, WcOpcode,
    WcStatus, WrId, WrOpcode,
};

fn ready(f: &mut Fabric, cm: &Net, node: usize, id: ConnId, e: &End) {
    ready_qp(f, node, &cm.agents[node], id, e.qpn);
}

#[test]
fn cm_negotiated_attributes_carry_send_and_write_between_real_qps() {
    let o = ConnOpts::default();
    let mut f = Fabric::new(21, 2, Mtu::Mtu1024, LinkModel::default());
    let a = make_end(&mut f, 0, &o);
    let b = make_end(&mut f, 1, &o);
    let mut cm = Net::new(21, 2, LinkModel::default());
    let svc = ServiceId::rdma_ip(PortSpace::Tcp, 18515);
    cm.agents[1].listen(svc, ClientId(2)).unwrap();
    let now = cm.now;
    let mut pa = ConnParams::rc(a.qpn);
    pa.responder_resources = 4;
    pa.initiator_depth = 4;
    let ca = cm.agents[0]
        .connect(now, ClientId(1), pa, Route::tcp(ip(0), ip(1), 50000, 18515))
        .unwrap();
    // Before an answer only INIT is known.
    assert!(cm.agents[0].init_qp_attr(ca, QpState::Rtr).is_err());
    assert!(cm.run_until(10 * SEC, |n| !n.events[1].is_empty()));
    let (cb, _) = cm.take(1).remove(0);
    // The passive side readies its QP from the REQ, then accepts (the CMA's order).
    ready(&mut f, &cm, 1, cb, &b);
    let mut pb = ConnParams::rc(b.qpn);
    pb.responder_resources = 4;
    pb.initiator_depth = 4;
    let now = cm.now;
    cm.agents[1].accept(now, cb, pb).unwrap();
    assert!(cm.run_until(10 * SEC, |n| !n.events[0].is_empty()));
    assert!(matches!(
        cm.take(0)[..],
        [(_, CmEvent::ConnectResponse { .. })]
    ));
    ready(&mut f, &cm, 0, ca, &a);
    let now = cm.now;
    cm.agents[0].establish(now, ca).unwrap();
    assert!(cm.run_until(10 * SEC, |n| !n.events[1].is_empty()));
    assert_eq!(cm.agents[1].state(cb), Some(CmState::Established));

    // What the QPs hold is what the CM negotiated.
    let (qa, _) = f.nodes[0].dev.query_qp(a.qpn).unwrap();
    let (qb, _) = f.nodes[1].dev.query_qp(b.qpn).unwrap();
    assert_eq!((qa.qp_state, qb.qp_state), (QpState::Rts, QpState::Rts));
    assert_eq!(qa.dest_qp_num, b.qpn);
    assert_eq!(qb.dest_qp_num, a.qpn);
    assert_eq!(qa.sq_psn, qb.rq_psn);
    assert_eq!(qb.sq_psn, qa.rq_psn);
    assert_eq!((qa.timeout, qa.retry_cnt, qa.rnr_retry), (17, 7, 7));
    assert_eq!((qa.max_rd_atomic, qb.max_dest_rd_atomic), (4, 4));
    // With responder resources the QP takes READ, atomics and both FLUSH types, as the
    // Linux CM gives a device with FLUSH.
    let remote = AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
        | AccessFlags::FLUSH_GLOBAL
        | AccessFlags::FLUSH_PERSISTENT;
    assert_eq!((qa.qp_access_flags, qb.qp_access_flags), (remote, remote));

    // A SEND and a WRITE cross.
    let now = f.now;
    f.nodes[1]
        .dev
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: WrId(7),
                sg_list: vec![Sge {
                    addr: b.base,
                    length: 64,
                    lkey: b.mr.lkey,
                }],
            },
        )
        .unwrap();
    f.nodes[0]
        .mem
        .slice_mut(AddrSpace(a.client.0), a.base, 5)
        .copy_from_slice(b"hello");
    let mut send = SendWr::new(WrId(1), WrOpcode::Send);
    send.sg_list = vec![Sge {
        addr: a.base,
        length: 5,
        lkey: a.mr.lkey,
    }];
    let mut write = SendWr::new(WrId(2), WrOpcode::RdmaWrite);
    write.sg_list = send.sg_list.clone();
    write.rdma.remote_addr = b.base + 4096;
    write.rdma.rkey = b.mr.rkey;
    for wr in [send, write] {
        let n = &mut f.nodes[0];
        n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    }
    assert!(f.run(Duration::from_secs(10)));
    let mut wcs = Vec::new();
    while let Some((_, wc)) = f.nodes[0].dev.poll_completion() {
        wcs.push((wc.wr_id.0, wc.status));
    }
    assert_eq!(wcs, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let (_, rwc) = f.nodes[1]
        .dev
        .poll_completion()
        .expect("receive completion");
    assert_eq!(
        (rwc.status, rwc.opcode, rwc.byte_len),
        (WcStatus::Success, WcOpcode::Recv, 5)
    );
    let mem = &f.nodes[1].mem;
    assert_eq!(mem.slice(AddrSpace(b.client.0), b.base, 5), b"hello");
    assert_eq!(mem.slice(AddrSpace(b.client.0), b.base + 4096, 5), b"hello");
    let _ = QpAttrMask::STATE;
}

//! XRC through the CM: an XRC initiator's REQ and a target's REP carry the fields the
//! Linux CM puts in them (`cm_format_req`, `cm_format_rep`: transport type 3 with extended
//! type 1, the target's QPN in the Local EE Context Number), both sides derive the QP
//! attributes of their half, which take real XRC QPs of the simulator to RTS (a Send
//! reaches the SRQ the REP named; one naming an unknown SRQ is NAKed Invalid Request),
//! and a REQ for a transport the CM does not serve gets REJ reason 9, counted.

mod cm_util;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use emu_core::cm::{
    reason, CmAgent, CmConfig, CmEvent, CmState, ConnId, ConnParams, PortSpace, Route, ServiceId,
};
use emu_core::sim::{make_end, ConnOpts, End, Fabric, LinkModel};
use emu_core::{
    ClientId, Gid, Mtu, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendFlags, SendWr,
    Sge, SrqAttr, WcStatus, WorkCompletion, WrId, WrOpcode,
};
use wire::cm::messages::Req;
use wire::cm::{CmMad, CmMessage};
use wire::roce::Qpn;

const INI: Qpn = Qpn(0x11);
const TGT: Qpn = Qpn(0x22);

fn ip(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))
}

fn agent(i: u8) -> CmAgent {
    CmAgent::new(CmConfig::new(
        0x0250_56ff_fe00_0000 + u64::from(i),
        vec![Gid::from_ip(ip(i))],
        Mtu::Mtu1024,
        7 + u64::from(i),
    ))
}

/// Moves every MAD `from` has queued to `to`; returns them.
fn deliver(now: Instant, from: &mut CmAgent, to: &mut CmAgent) -> Vec<[u8; 256]> {
    let mut out = Vec::new();
    while let Some(t) = from.poll_transmit() {
        to.handle_mad(now, t.src, t.dst, &t.mad);
        out.push(t.mad);
    }
    out
}

fn events(a: &mut CmAgent) -> Vec<(ConnId, CmEvent)> {
    std::iter::from_fn(|| a.poll_event().map(|(id, _, e)| (id, e))).collect()
}

fn xrc_params(qp_type: QpType, qpn: Qpn) -> ConnParams {
    let mut p = ConnParams::rc(qpn);
    p.qp_type = qp_type;
    p.responder_resources = 4;
    p.initiator_depth = 4;
    p
}

#[test]
fn xrc_req_and_rep_carry_the_linux_fields_and_each_half_gets_its_attributes() {
    let now = Instant::now();
    let (mut a, mut b) = (agent(1), agent(2));
    let svc = ServiceId::rdma_ip(PortSpace::Ib, 7471);
    b.listen(svc, ClientId(2)).unwrap();
    let route = Route {
        port_space: PortSpace::Ib,
        ..Route::tcp(ip(1), ip(2), 40000, 7471)
    };
    let mut pa = xrc_params(QpType::XrcSend, INI);
    pa.srq = true;
    pa.private_data = b"xrc".to_vec();
    let ca = a.connect(now, ClientId(1), pa, route).unwrap();

    let reqs = deliver(now, &mut a, &mut b);
    assert_eq!(reqs.len(), 1);
    let m = CmMad::parse(&reqs[0]).unwrap();
    let CmMessage::Req(r) = m.message else {
        panic!("not a REQ: {:?}", m.message.name());
    };
    assert_eq!(
        (r.transport_service_type, r.extended_transport_type),
        (3, 1)
    );
    assert_eq!(r.local_qpn, INI);
    // cm_format_req leaves these at 0 for an XRC initiator.
    assert_eq!(r.responder_resources, 0);
    assert_eq!((r.retry_count, r.rnr_retry_count), (0, 0));
    assert!(!r.srq);
    assert_eq!(r.initiator_depth, 4);
    assert_eq!(r.service_id, svc.0);

    let ev = events(&mut b);
    let [(
        cb,
        CmEvent::ConnectRequest {
            peer, private_data, ..
        },
    )] = &ev[..]
    else {
        panic!("{ev:?}");
    };
    let cb = *cb;
    assert_eq!(peer.qp_type, QpType::XrcRecv);
    assert_eq!(peer.qpn, INI);
    assert_eq!(&private_data[..3], b"xrc");

    // The target readies its QP from the REQ (as rdma_accept does), then answers.
    let mut pb = xrc_params(QpType::XrcRecv, TGT);
    pb.private_data = 0x0000_0abcu32.to_be_bytes().to_vec();
    b.accept(now, cb, pb).unwrap();
    let reps = deliver(now, &mut b, &mut a);
    assert_eq!(reps.len(), 1);
    let CmMessage::Rep(rep) = CmMad::parse(&reps[0]).unwrap().message else {
        panic!("not a REP");
    };
    // cm_format_rep for an XRC target.
    assert_eq!(rep.local_eecn, TGT.0);
    assert_eq!(rep.local_qpn, Qpn(0));
    assert!(rep.srq);
    assert_eq!(rep.initiator_depth, 0);
    assert!(!rep.end_to_end_flow_control);
    assert_eq!(&rep.private_data[..4], &[0, 0, 0x0a, 0xbc]);

    let ev = events(&mut a);
    let [(_, CmEvent::ConnectResponse { peer, private_data })] = &ev[..] else {
        panic!("{ev:?}");
    };
    // The initiator learns the target's QPN from the EE context number.
    assert_eq!(peer.qpn, TGT);
    assert_eq!(&private_data[..4], &[0, 0, 0x0a, 0xbc]);

    // Initiator: RTR without the responder attributes, RTS with the requester ones.
    let (rtr, m) = a.init_qp_attr(ca, QpState::Rtr).unwrap();
    assert_eq!(rtr.dest_qp_num, TGT);
    assert!(m.contains(QpAttrMask::DEST_QPN | QpAttrMask::AV | QpAttrMask::RQ_PSN));
    assert!(!m.contains(QpAttrMask::MAX_DEST_RD_ATOMIC));
    assert!(!m.contains(QpAttrMask::MIN_RNR_TIMER));
    let (rts_a, m) = a.init_qp_attr(ca, QpState::Rts).unwrap();
    assert!(m.contains(
        QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC
    ));
    // Target: the responder attributes, and only SQ_PSN and TIMEOUT at RTS.
    let (rtr_b, m) = b.init_qp_attr(cb, QpState::Rtr).unwrap();
    assert_eq!(rtr_b.dest_qp_num, INI);
    assert!(m.contains(QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER));
    let (rts_b, m) = b.init_qp_attr(cb, QpState::Rts).unwrap();
    assert_eq!(
        m,
        QpAttrMask::STATE | QpAttrMask::SQ_PSN | QpAttrMask::TIMEOUT
    );
    // The PSNs of the two halves agree.
    assert_eq!(rts_a.sq_psn, rtr_b.rq_psn);
    assert_eq!(rts_b.sq_psn, rtr.rq_psn);

    a.establish(now, ca).unwrap();
    deliver(now, &mut a, &mut b);
    assert_eq!(b.state(cb), Some(CmState::Established));
    assert_eq!(a.state(ca), Some(CmState::Established));
}

/// A REQ from an RC connect, rewritten with another transport type.
fn rewritten_req(transport: u8, extended: u8) -> (Vec<u8>, IpAddr, IpAddr) {
    let now = Instant::now();
    let mut a = agent(1);
    a.connect(
        now,
        ClientId(1),
        ConnParams::rc(INI),
        Route::tcp(ip(1), ip(2), 40000, 7471),
    )
    .unwrap();
    let t = a.poll_transmit().unwrap();
    let m = CmMad::parse(&t.mad).unwrap();
    let CmMessage::Req(r) = m.message else {
        panic!("not a REQ");
    };
    let bad = Req {
        transport_service_type: transport,
        extended_transport_type: extended,
        ..r
    };
    let mut out = vec![0u8; 256];
    CmMad {
        header: m.header,
        message: CmMessage::Req(bad),
    }
    .emit(&mut out);
    (out, t.src, t.dst)
}

#[test]
fn a_req_for_rd_or_an_unknown_extended_transport_gets_rej_9_counted() {
    let now = Instant::now();
    let mut b = agent(2);
    b.listen(ServiceId::rdma_ip(PortSpace::Tcp, 7471), ClientId(2))
        .unwrap();
    for (n, (transport, extended)) in [(2, 0), (3, 0), (3, 2), (3, 7)].into_iter().enumerate() {
        let (mad, src, dst) = rewritten_req(transport, extended);
        b.handle_mad(now, src, dst, &mad);
        let t = b.poll_transmit().expect("a REJ");
        assert_eq!((t.src, t.dst), (dst, src));
        let CmMessage::Rej(rej) = CmMad::parse(&t.mad).unwrap().message else {
            panic!("not a REJ");
        };
        assert_eq!(rej.reason, reason::INVALID_TRANSPORT_TYPE);
        assert_eq!(rej.message_rejected, 0);
        assert!(b.poll_transmit().is_none());
        // No connection, no event for the listener.
        assert!(b.poll_event().is_none());
        assert_eq!(b.connection_count(), 0);
        assert_eq!(b.counters().rx_bad_transport, n as u64 + 1);
    }
}

fn send(f: &mut Fabric, from: &End, ini: Qpn, id: u64, srqn: u32) {
    let mut wr = SendWr::new(WrId(id), WrOpcode::Send);
    wr.sg_list = vec![Sge {
        addr: from.base,
        length: 16,
        lkey: from.mr.lkey,
    }];
    wr.ud.remote_qpn = Qpn(srqn);
    wr.send_flags = SendFlags::SIGNALED;
    let (now, n) = (f.now, &mut f.nodes[from.node]);
    n.dev.post_send(now, ini, wr, &mut n.mem).unwrap();
    f.settle(Duration::from_secs(5), "xrc send");
}

fn completions(f: &mut Fabric, node: usize) -> Vec<WorkCompletion> {
    std::iter::from_fn(|| f.nodes[node].dev.poll_completion().map(|(_, wc)| wc)).collect()
}

#[test]
fn cm_attributes_connect_real_xrc_qps_and_an_unknown_srq_is_naked() {
    // Node 0 (10.0.0.1, agent 1): an XRC initiator; node 1 (10.0.0.2, agent 2): a domain,
    // an XRC SRQ and a target, as rdma_xclient and rdma_xserver make them.
    let o = ConnOpts::default();
    let mut f = Fabric::new(9, 2, Mtu::Mtu1024, LinkModel::default());
    let a = make_end(&mut f, 0, &o);
    let b = make_end(&mut f, 1, &o);
    let init = QpInitAttr {
        pd: a.pd,
        send_cq: a.scq,
        recv_cq: a.scq,
        srq: None,
        cap: QpCap {
            max_send_wr: 4,
            max_send_sge: 1,
            max_inline_data: 16,
            ..QpCap::default()
        },
        qp_type: QpType::XrcSend,
        sq_sig_all: false,
    };
    let (ini, _) = f.nodes[0].dev.create_qp(a.client, &init).unwrap();
    let d = &mut f.nodes[1].dev;
    let xrcd = d.open_xrcd(b.client);
    let attr = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq = d.create_xrc_srq(b.client, b.pd, xrcd, b.rcq, attr).unwrap();
    let tgt = d.create_xrc_tgt_qp(b.client, xrcd).unwrap();

    let now = f.now;
    let (mut ca_agent, mut cb_agent) = (agent(1), agent(2));
    cb_agent
        .listen(ServiceId::rdma_ip(PortSpace::Ib, 7471), ClientId(2))
        .unwrap();
    let route = Route {
        port_space: PortSpace::Ib,
        ..Route::tcp(ip(1), ip(2), 40000, 7471)
    };
    let ca = ca_agent
        .connect(now, ClientId(1), xrc_params(QpType::XrcSend, ini), route)
        .unwrap();
    deliver(now, &mut ca_agent, &mut cb_agent);
    let (cb, _) = events(&mut cb_agent).remove(0);
    let mut pb = xrc_params(QpType::XrcRecv, tgt);
    pb.private_data = srq.0.to_be_bytes().to_vec();
    cb_agent.accept(now, cb, pb).unwrap();
    cm_util::ready_qp(&mut f, 1, &cb_agent, cb, tgt);
    deliver(now, &mut cb_agent, &mut ca_agent);
    let ev = events(&mut ca_agent);
    let [(_, CmEvent::ConnectResponse { private_data, .. })] = &ev[..] else {
        panic!("{ev:?}");
    };
    // rdma_xclient: the SRQ number is the first four octets of the REP's private data.
    let srqn = u32::from_be_bytes(private_data[..4].try_into().unwrap());
    cm_util::ready_qp(&mut f, 0, &ca_agent, ca, ini);

    let rwr = RecvWr {
        wr_id: WrId(7),
        sg_list: vec![Sge {
            addr: b.base,
            length: 16,
            lkey: b.mr.lkey,
        }],
    };
    f.nodes[1].dev.post_srq_recv(srq, rwr).unwrap();
    send(&mut f, &a, ini, 1, srqn);
    let sent = completions(&mut f, 0);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].status, WcStatus::Success);
    let got = completions(&mut f, 1);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].wr_id, got[0].status), (WrId(7), WcStatus::Success));
    assert_eq!((got[0].byte_len, got[0].qp_num), (16, tgt));

    // A Send naming no SRQ of the target's domain: NAK Invalid Request, counted.
    send(&mut f, &a, ini, 2, 0x00ab_cdef);
    let sent = completions(&mut f, 0);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].status, WcStatus::RemInvReqErr);
    assert_eq!(f.nodes[1].dev.counters().xrc_srq_errors, 1);
    assert!(completions(&mut f, 1).is_empty());
}

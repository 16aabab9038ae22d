//! Two CM agents over a simulated fabric: the connection life cycle, rejects, losses,
//! timeouts, simultaneous disconnect, MRA, SIDR.

mod cm_util;

use std::time::Duration;

use cm_util::{ip, Net, SEC};
use emu_core::cm::{
    reason, sidr_status, CmEvent, CmState, ConnId, ConnParams, PortSpace, Route, ServiceId,
};
use emu_core::sim::LinkModel;
use emu_core::{ClientId, Qkey, Qpn};
use wire::cm::messages::attr;

const OWNER_A: ClientId = ClientId(1);
const OWNER_B: ClientId = ClientId(2);
const PORT: u16 = 7174;

fn service() -> ServiceId {
    ServiceId::rdma_ip(PortSpace::Tcp, PORT)
}

fn route() -> Route {
    Route::tcp(ip(0), ip(1), 40000, PORT)
}

fn params(qpn: u32, pd: &[u8]) -> ConnParams {
    let mut p = ConnParams::rc(Qpn(qpn));
    p.private_data = pd.to_vec();
    p
}

/// A consumer that accepts every request, establishes on every response, disconnects
/// once established (node 0) and answers every DREQ. Returns when both sides left time
/// wait.
fn full_life_cycle(net: &mut Net, limit: Duration) -> Result<(), String> {
    net.agents[1]
        .listen(service(), OWNER_B)
        .map_err(|e| e.to_string())?;
    let now = net.now;
    let a = net.agents[0]
        .connect(now, OWNER_A, params(0x11, b"hello"), route())
        .map_err(|e| e.to_string())?;
    let mut seen = [0usize; 2];
    let mut log = [Vec::new(), Vec::new()];
    let mut b_id = None;
    let done = |log: &[Vec<CmEvent>; 2]| log.iter().all(|l| l.contains(&CmEvent::TimewaitExit));
    let end = net.now + limit;
    while !done(&log) {
        if net.now > end || !net.step() {
            return Err(format!(
                "stuck at {:?}: {log:?}",
                [
                    net.agents[0].state(a),
                    b_id.and_then(|b| net.agents[1].state(b))
                ]
            ));
        }
        for node in 0..2 {
            while seen[node] < net.events[node].len() {
                let (id, ev) = net.events[node][seen[node]].clone();
                seen[node] += 1;
                let now = net.now;
                let ag = &mut net.agents[node];
                match &ev {
                    CmEvent::ConnectRequest { private_data, .. } => {
                        assert_eq!(&private_data[..5], b"hello");
                        b_id = Some(id);
                        ag.accept(now, id, params(0x22, b"welcome")).unwrap();
                    }
                    CmEvent::ConnectResponse { peer, private_data } => {
                        assert_eq!(peer.qpn, Qpn(0x22));
                        assert_eq!(&private_data[..7], b"welcome");
                        ag.establish(now, id).unwrap();
                        ag.disconnect(now, id, b"bye").unwrap();
                    }
                    CmEvent::Disconnected { .. } if ag.state(id) == Some(CmState::DreqRcvd) => {
                        ag.disconnect(now, id, &[]).unwrap();
                    }
                    _ => {}
                }
                log[node].push(ev);
            }
        }
    }
    // Node 0: response, disconnected, timewait exit. Node 1: request, established (RTU or
    // never, when the DREQ overtook a lost RTU), disconnected, timewait exit.
    let kinds = |l: &Vec<CmEvent>| -> Vec<&'static str> {
        l.iter()
            .map(|e| match e {
                CmEvent::ConnectRequest { .. } => "req",
                CmEvent::ConnectResponse { .. } => "rep",
                CmEvent::Established => "est",
                CmEvent::Disconnected { .. } => "disc",
                CmEvent::TimewaitExit => "tw",
                _ => "other",
            })
            .collect()
    };
    let k0 = kinds(&log[0]);
    let k1 = kinds(&log[1]);
    if k0 != ["rep", "disc", "tw"] {
        return Err(format!("active events {k0:?}"));
    }
    if k1 != ["req", "est", "disc", "tw"] && k1 != ["req", "disc", "tw"] {
        return Err(format!("passive events {k1:?}"));
    }
    Ok(())
}

#[test]
fn connect_accept_establish_disconnect_and_timewait() {
    let mut net = Net::new(1, 2, LinkModel::default());
    full_life_cycle(&mut net, 60 * SEC).unwrap();
    assert_eq!(net.agents[0].connection_count(), 0);
    assert_eq!(net.agents[1].connection_count(), 0);
    // Exactly the message sequence of a clean connection: REQ, RTU, DREQ from the
    // active side; REP, DREP from the passive side.
    assert_eq!(net.sent[0], [attr::REQ, attr::RTU, attr::DREQ]);
    assert_eq!(net.sent[1], [attr::REP, attr::DREP]);
    assert_eq!(net.agents[0].counters().tx_retries, 0);
}

#[test]
fn every_lost_handshake_message_is_recovered() {
    for (lost, count) in [
        (attr::REQ, 1),
        (attr::REQ, 3),
        (attr::REP, 1),
        (attr::REP, 2),
        (attr::RTU, 1),
        (attr::DREQ, 1),
        (attr::DREQ, 4),
        (attr::DREP, 1),
    ] {
        let mut net = Net::new(7, 2, LinkModel::default());
        net.drops.push((lost, count));
        full_life_cycle(&mut net, 600 * SEC)
            .unwrap_or_else(|e| panic!("lost {lost:#x} x{count}: {e}"));
        assert_eq!(net.drops[0].1, 0, "the drop happened");
    }
}

#[test]
fn handshake_completes_under_random_loss_duplication_and_reordering() {
    for seed in 0..200 {
        let link = LinkModel {
            loss: 0.25,
            duplicate: 0.1,
            reorder: 0.1,
            ..LinkModel::default()
        };
        let mut net = Net::new(seed, 2, link);
        full_life_cycle(&mut net, 3600 * SEC).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(net.agents[0].connection_count(), 0, "seed {seed}");
        assert_eq!(net.agents[1].connection_count(), 0, "seed {seed}");
    }
}

#[test]
fn reject_carries_reason_and_private_data() {
    let mut net = Net::new(2, 2, LinkModel::default());
    net.agents[1].listen(service(), OWNER_B).unwrap();
    let now = net.now;
    let a = net.agents[0]
        .connect(now, OWNER_A, params(0x11, b"let me in"), route())
        .unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[1].is_empty()));
    let (b, ev) = net.take(1).remove(0);
    assert!(matches!(ev, CmEvent::ConnectRequest { .. }));
    let now = net.now;
    net.agents[1]
        .reject(now, b, reason::CONSUMER_DEFINED, b"go away")
        .unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[0].is_empty()));
    let (id, ev) = net.take(0).remove(0);
    assert_eq!(id, a);
    let CmEvent::Rejected {
        reason,
        private_data,
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert_eq!(reason, 28);
    assert_eq!(&private_data[..7], b"go away");
    assert_eq!(private_data.len(), 148);
    assert_eq!(net.agents[0].state(a), None);
    assert_eq!(net.agents[1].state(b), None);
}

#[test]
fn connect_without_listener_is_rejected_with_invalid_service_id() {
    let mut net = Net::new(3, 2, LinkModel::default());
    let now = net.now;
    let a = net.agents[0]
        .connect(now, OWNER_A, params(0x11, &[]), route())
        .unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[0].is_empty()));
    let ev = net.take(0);
    assert!(
        matches!(ev[..], [(id, CmEvent::Rejected { reason: 8, .. })] if id == a),
        "{ev:?}"
    );
    // Well within one CM response timeout: the answer is immediate.
    assert_eq!(net.agents[0].counters().tx_retries, 0);
}

#[test]
fn peer_gone_is_unreachable_after_every_retry() {
    let mut net = Net::new(4, 2, LinkModel::default());
    net.down[1] = true;
    let start = net.now;
    let now = net.now;
    let a = net.agents[0]
        .connect(now, OWNER_A, params(0x11, &[]), route())
        .unwrap();
    assert!(net.run_until(3600 * SEC, |n| !n.events[0].is_empty()));
    assert_eq!(net.take(0), [(a, CmEvent::Unreachable)]);
    // 1 REQ + 15 retries, each after 2 × 4.096 µs × 2^16 + 4.096 µs × 2^20 ≈ 4.83 s.
    assert_eq!(net.sent[0].len(), 16);
    let per_try = emu_core::cm::iba_time(16) * 2 + emu_core::cm::iba_time(20);
    assert_eq!(net.now - start, per_try * 16);
    assert_eq!(net.agents[0].connection_count(), 0);
}

#[test]
fn passive_side_gives_up_when_the_rtu_never_comes() {
    let mut net = Net::new(5, 2, LinkModel::default());
    net.agents[1].listen(service(), OWNER_B).unwrap();
    let now = net.now;
    net.agents[0]
        .connect(now, OWNER_A, params(0x11, &[]), route())
        .unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[1].is_empty()));
    let (b, _) = net.take(1).remove(0);
    net.down[0] = true;
    let now = net.now;
    net.agents[1].accept(now, b, params(0x22, &[])).unwrap();
    assert!(net.run_until(3600 * SEC, |n| !n.events[1].is_empty()));
    assert_eq!(net.take(1), [(b, CmEvent::Unreachable)]);
}

#[test]
fn simultaneous_disconnect_gives_one_event_per_side() {
    let mut net = Net::new(6, 2, LinkModel::default());
    net.agents[1].listen(service(), OWNER_B).unwrap();
    let now = net.now;
    let a = net.agents[0]
        .connect(now, OWNER_A, params(0x11, &[]), route())
        .unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[1].is_empty()));
    let (b, _) = net.take(1).remove(0);
    let now = net.now;
    net.agents[1].accept(now, b, params(0x22, &[])).unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[0].is_empty()));
    net.take(0);
    let now = net.now;
    net.agents[0].establish(now, a).unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[1].is_empty()));
    assert_eq!(net.take(1), [(b, CmEvent::Established)]);
    // Both DREQs cross on the wire (as frames 91/92 of rdma_cm.pcap).
    let now = net.now;
    net.agents[0].disconnect(now, a, &[]).unwrap();
    net.agents[1].disconnect(now, b, &[]).unwrap();
    assert!(net.settle(60 * SEC));
    for (node, id) in [(0, a), (1, b)] {
        let ev: Vec<CmEvent> = net.take(node).into_iter().map(|(_, e)| e).collect();
        assert_eq!(
            ev,
            [
                CmEvent::Disconnected {
                    timed_out: false,
                    private_data: vec![0; 220]
                },
                CmEvent::TimewaitExit
            ],
            "node {node}"
        );
        assert_eq!(net.agents[node].state(id), None);
    }
    assert_eq!(net.sent[0], [attr::REQ, attr::RTU, attr::DREQ, attr::DREP]);
    assert_eq!(net.sent[1], [attr::REP, attr::DREQ, attr::DREP]);
}

#[test]
fn unanswered_dreq_disconnects_with_timeout() {
    let mut net = Net::new(8, 2, LinkModel::default());
    net.agents[1].listen(service(), OWNER_B).unwrap();
    let now = net.now;
    let a = net.agents[0]
        .connect(now, OWNER_A, params(0x11, &[]), route())
        .unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[1].is_empty()));
    let (b, _) = net.take(1).remove(0);
    let now = net.now;
    net.agents[1].accept(now, b, params(0x22, &[])).unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[0].is_empty()));
    let now = net.now;
    net.agents[0].establish(now, a).unwrap();
    net.take(0);
    net.down[1] = true;
    net.agents[0].disconnect(now, a, &[]).unwrap();
    assert!(net.run_until(3600 * SEC, |n| n.events[0].len() >= 2));
    let ev: Vec<CmEvent> = net.take(0).into_iter().map(|(_, e)| e).collect();
    assert_eq!(
        ev,
        [
            CmEvent::Disconnected {
                timed_out: true,
                private_data: vec![]
            },
            CmEvent::TimewaitExit
        ]
    );
}

#[test]
fn slow_accept_is_covered_by_mra() {
    let mut net = Net::new(9, 2, LinkModel::default());
    net.agents[1].listen(service(), OWNER_B).unwrap();
    let now = net.now;
    let a = net.agents[0]
        .connect(now, OWNER_A, params(0x11, &[]), route())
        .unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[1].is_empty()));
    let (b, _) = net.take(1).remove(0);
    // The consumer sits on the request for 5 minutes: the repeated REQ draws an MRA,
    // which makes the active side wait 4.096 µs × 2^24 (≈ 69 s) per try.
    let t0 = net.now;
    assert!(!net.run_until(300 * SEC, |n| !n.events[0].is_empty()));
    assert!(net.now - t0 >= 300 * SEC);
    assert!(net.sent[1].contains(&attr::MRA));
    assert!(matches!(
        net.agents[0].state(a),
        Some(CmState::MraReqRcvd | CmState::ReqSent)
    ));
    assert_eq!(net.agents[1].state(b), Some(CmState::MraReqSent));
    let now = net.now;
    net.agents[1].accept(now, b, params(0x22, &[])).unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[0].is_empty()));
    assert!(matches!(
        net.take(0)[..],
        [(_, CmEvent::ConnectResponse { .. })]
    ));
}

#[test]
fn rep_for_unknown_connection_is_rejected_and_stale_req_too() {
    let mut net = Net::new(10, 2, LinkModel::default());
    net.agents[1].listen(service(), OWNER_B).unwrap();
    let now = net.now;
    let a = net.agents[0]
        .connect(now, OWNER_A, params(0x11, &[]), route())
        .unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[1].is_empty()));
    let (b, _) = net.take(1).remove(0);
    // The active side forgets the connection (its process died): the CM answers with a
    // REJ (timeout) that ends the passive side too.
    let now = net.now;
    net.agents[0].destroy(now, a).unwrap();
    assert!(net.settle(60 * SEC));
    assert!(matches!(
        net.take(1)[..],
        [(id, CmEvent::Rejected { reason: 4, .. })] if id == b
    ));
    assert!(net.take(0).is_empty(), "no event for a destroyed id");
    assert_eq!(net.agents[1].connection_count(), 0);
}

#[test]
fn new_req_from_a_connected_qp_is_stale() {
    let mut net = Net::new(11, 2, LinkModel::default());
    net.agents[1].listen(service(), OWNER_B).unwrap();
    let now = net.now;
    let a = net.agents[0]
        .connect(now, OWNER_A, params(0x11, &[]), route())
        .unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[1].is_empty()));
    let (b, _) = net.take(1).remove(0);
    let now = net.now;
    net.agents[1].accept(now, b, params(0x22, &[])).unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[0].is_empty()));
    net.take(0);
    let now = net.now;
    net.agents[0].establish(now, a).unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[1].is_empty()));
    net.take(1);
    // The same QP connects again while the old connection still lives on node 1.
    let a2 = net.agents[0]
        .connect(now, OWNER_A, params(0x11, &[]), route())
        .unwrap();
    assert!(net.run_until(10 * SEC, |n| n
        .has(0, |e| matches!(e, CmEvent::Rejected { .. }))));
    let ev = net.take(0);
    assert!(ev
        .iter()
        .any(|(id, e)| *id == a2 && matches!(e, CmEvent::Rejected { reason: 10, .. })));
}

#[test]
fn sidr_resolves_qpn_and_qkey() {
    let mut net = Net::new(12, 2, LinkModel::default());
    let svc = ServiceId::rdma_ip(PortSpace::Udp, PORT);
    net.agents[1].listen(svc, OWNER_B).unwrap();
    net.drops.push((attr::SIDR_REP, 1));
    let mut r = route();
    r.port_space = PortSpace::Udp;
    let now = net.now;
    let a = net.agents[0].resolve_sidr(now, OWNER_A, r, b"ud?").unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[1].is_empty()));
    let (b, ev) = net.take(1).remove(0);
    let CmEvent::SidrRequest {
        service_id,
        private_data,
        cma,
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert_eq!(service_id, svc);
    assert_eq!(&private_data[..3], b"ud?");
    assert_eq!(cma.unwrap().src_port, 40000);
    let now = net.now;
    net.agents[1]
        .accept_sidr(now, b, Qpn(0x33), Qkey(0x0123_4567), b"ud!")
        .unwrap();
    // The first SIDR_REP is lost: the repeated SIDR_REQ gets it again, and no second
    // request event.
    assert!(net.run_until(60 * SEC, |n| !n.events[0].is_empty()));
    let (id, ev) = net.take(0).remove(0);
    assert_eq!(id, a);
    let CmEvent::SidrResolved {
        qpn,
        qkey,
        private_data,
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert_eq!((qpn, qkey), (Qpn(0x33), Qkey(0x0123_4567)));
    assert_eq!(&private_data[..3], b"ud!");
    assert!(net.settle(120 * SEC));
    assert!(net.take(1).is_empty());
    assert_eq!(net.agents[1].connection_count(), 0);
}

#[test]
fn sidr_without_listener_is_unsupported() {
    let mut net = Net::new(13, 2, LinkModel::default());
    let mut r = route();
    r.port_space = PortSpace::Udp;
    let now = net.now;
    net.agents[0].resolve_sidr(now, OWNER_A, r, &[]).unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[0].is_empty()));
    assert!(matches!(
        net.take(0)[..],
        [(_, CmEvent::SidrRejected { status, .. })] if status == sidr_status::UNSUPPORTED
    ));
}

#[test]
fn verbs_in_the_wrong_state_fail_with_einval() {
    let mut net = Net::new(14, 2, LinkModel::default());
    let now = net.now;
    let a = net.agents[0]
        .connect(now, OWNER_A, params(0x11, &[]), route())
        .unwrap();
    let ag = &mut net.agents[0];
    assert_eq!(
        ag.accept(now, a, params(1, &[])),
        Err(emu_core::Errno::EINVAL)
    );
    assert_eq!(ag.establish(now, a), Err(emu_core::Errno::EINVAL));
    assert_eq!(ag.disconnect(now, a, &[]), Err(emu_core::Errno::EINVAL));
    assert_eq!(
        ag.establish(now, ConnId(12345)),
        Err(emu_core::Errno::ENOENT)
    );
    assert_eq!(
        ag.connect(now, OWNER_A, params(1, &[0; 57]), route()),
        Err(emu_core::Errno::EINVAL)
    );
    assert!(ag.listen(service(), OWNER_A).is_ok());
    assert_eq!(ag.listen(service(), OWNER_B), Err(emu_core::Errno(98)));
}

#[test]
fn loopback_connection_on_one_agent() {
    // rping -s / rping -c on one host share one device, so one agent is both ends.
    let mut net = Net::new(15, 1, LinkModel::default());
    net.agents[0].listen(service(), OWNER_B).unwrap();
    let now = net.now;
    let a = net.agents[0]
        .connect(
            now,
            OWNER_A,
            params(0x11, b"me"),
            Route::tcp(ip(0), ip(0), 40000, PORT),
        )
        .unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[0].is_empty()));
    let (b, ev) = net.take(0).remove(0);
    assert_ne!(a, b);
    assert!(matches!(ev, CmEvent::ConnectRequest { .. }));
    let now = net.now;
    net.agents[0].accept(now, b, params(0x22, &[])).unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[0].is_empty()));
    assert!(matches!(
        net.take(0)[..],
        [(id, CmEvent::ConnectResponse { .. })] if id == a
    ));
    let now = net.now;
    net.agents[0].establish(now, a).unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[0].is_empty()));
    assert_eq!(net.take(0), [(b, CmEvent::Established)]);
    let now = net.now;
    net.agents[0].disconnect(now, a, &[]).unwrap();
    assert!(net.run_until(10 * SEC, |n| !n.events[0].is_empty()));
    let now = net.now;
    net.agents[0].disconnect(now, b, &[]).unwrap();
    assert!(net.settle(60 * SEC));
    let ev: Vec<(ConnId, CmEvent)> = net.take(0);
    let exits = ev
        .iter()
        .filter(|(_, e)| *e == CmEvent::TimewaitExit)
        .count();
    assert_eq!(exits, 2, "{ev:?}");
    assert_eq!(net.agents[0].connection_count(), 0);
}

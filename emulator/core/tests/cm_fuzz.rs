//! Random MADs, timer firings and verbs into CM agents in every state never panic, and
//! the agents keep answering afterwards.

mod cm_util;

use std::time::Duration;

use cm_util::{ip, Net, SEC};
use emu_core::cm::{CmEvent, ConnId, ConnParams, PortSpace, Route, ServiceId};
use emu_core::sim::LinkModel;
use emu_core::{ClientId, Qkey, Qpn};
use proptest::prelude::*;

/// Brings a pair of agents to scenario `stage`; returns every connection ID in play.
fn scenario(stage: u8, seed: u64) -> (Net, Vec<u32>) {
    let mut net = Net::new(seed, 2, LinkModel::default());
    let tcp = ServiceId::rdma_ip(PortSpace::Tcp, 7000);
    let udp = ServiceId::rdma_ip(PortSpace::Udp, 7000);
    net.agents[1].listen(tcp, ClientId(2)).unwrap();
    net.agents[1].listen(udp, ClientId(2)).unwrap();
    let mut ids = Vec::new();
    let now = net.now;
    if stage == 0 {
        return (net, ids);
    }
    if stage >= 8 {
        let mut r = Route::tcp(ip(0), ip(1), 1, 7000);
        r.port_space = PortSpace::Udp;
        let a = net.agents[0]
            .resolve_sidr(now, ClientId(1), r, b"x")
            .unwrap();
        ids.push(a.0);
        net.run_until(SEC, |n| !n.events[1].is_empty());
        if let Some((b, _)) = net.take(1).first().cloned() {
            ids.push(b.0);
            if stage >= 9 {
                let now = net.now;
                let _ = net.agents[1].accept_sidr(now, b, Qpn(5), Qkey(6), &[]);
            }
        }
        return (net, ids);
    }
    let a = net.agents[0]
        .connect(
            now,
            ClientId(1),
            ConnParams::rc(Qpn(0x11)),
            Route::tcp(ip(0), ip(1), 1, 7000),
        )
        .unwrap();
    ids.push(a.0);
    net.run_until(SEC, |n| !n.events[1].is_empty());
    let Some((b, _)) = net.take(1).first().cloned() else {
        return (net, ids);
    };
    ids.push(b.0);
    if stage == 2 {
        // The consumer is slow: MRA.
        net.run_until(30 * SEC, |n| {
            n.sent[1].contains(&wire::cm::messages::attr::MRA)
        });
        return (net, ids);
    }
    if stage >= 3 {
        let now = net.now;
        net.agents[1]
            .accept(now, b, ConnParams::rc(Qpn(0x22)))
            .unwrap();
    }
    if stage >= 4 {
        net.run_until(SEC, |n| !n.events[0].is_empty());
    }
    if stage >= 5 {
        let now = net.now;
        let _ = net.agents[0].establish(now, a);
        net.run_until(SEC, |n| n.has(1, |e| *e == CmEvent::Established));
    }
    if stage >= 6 {
        let now = net.now;
        let _ = net.agents[0].disconnect(now, a, &[]);
        net.run_until(SEC, |n| {
            n.has(1, |e| matches!(e, CmEvent::Disconnected { .. }))
        });
    }
    if stage >= 7 {
        let now = net.now;
        let _ = net.agents[1].disconnect(now, b, &[]);
        net.run_until(SEC, |n| {
            n.has(0, |e| matches!(e, CmEvent::Disconnected { .. }))
        });
    }
    (net, ids)
}

#[derive(Debug, Clone)]
enum Op {
    Mad {
        to: usize,
        attr: u16,
        ids: (usize, usize),
        body: Vec<u8>,
        header_ok: bool,
    },
    Raw(usize, Vec<u8>),
    Wait(u64),
    Verb(usize, u8, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, prop_oneof![0x10u16..0x19, any::<u16>()], (0..6usize, 0..6usize),
              proptest::collection::vec(any::<u8>(), 232), any::<bool>())
            .prop_map(|(to, attr, ids, body, header_ok)| Op::Mad { to, attr, ids, body, header_ok }),
        1 => (0..2usize, proptest::collection::vec(any::<u8>(), 0..300)).prop_map(|(t, b)| Op::Raw(t, b)),
        2 => (0u64..100_000).prop_map(Op::Wait),
        2 => (0..2usize, 0u8..8, 0..6usize).prop_map(|(n, v, i)| Op::Verb(n, v, i)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_input_in_every_state_never_panics(
        stage in 0u8..10,
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        let (mut net, ids) = scenario(stage, seed);
        let pick = |i: usize| if i < ids.len() { ids[i] } else { i as u32 * 0x0101_0101 };
        for op in ops {
            let now = net.now;
            match op {
                Op::Mad { to, attr, ids: (l, r), body, header_ok } => {
                    let mut m = [0u8; 256];
                    m[..4].copy_from_slice(&[1, 7, if header_ok { 2 } else { body[0] }, 3]);
                    m[8..16].copy_from_slice(&body[..8]);
                    m[16..18].copy_from_slice(&attr.to_be_bytes());
                    m[24..].copy_from_slice(&body);
                    m[24..28].copy_from_slice(&pick(l).to_be_bytes());
                    m[28..32].copy_from_slice(&pick(r).to_be_bytes());
                    net.agents[to].handle_mad(now, ip(1 - to), ip(to), &m);
                }
                Op::Raw(to, b) => net.agents[to].handle_mad(now, ip(1 - to), ip(to), &b),
                Op::Wait(ms) => {
                    net.now += Duration::from_millis(ms);
                    let now = net.now;
                    for a in &mut net.agents { a.handle_timeout(now); }
                }
                Op::Verb(n, v, i) => {
                    let id = ConnId(pick(i));
                    let a = &mut net.agents[n];
                    let _ = match v {
                        0 => a.accept(now, id, ConnParams::rc(Qpn(9))),
                        1 => a.reject(now, id, 28, b"no"),
                        2 => a.establish(now, id),
                        3 => a.disconnect(now, id, &[]),
                        4 => a.destroy(now, id),
                        5 => a.accept_sidr(now, id, Qpn(1), Qkey(2), &[]),
                        6 => a.init_qp_attr(id, emu_core::QpState::Rtr).map(|_| ()),
                        _ => { a.release_owner(now, ClientId(1 + n as u32)); Ok(()) }
                    };
                }
            }
            while net.agents.iter_mut().any(|a| a.poll_transmit().is_some()) {}
        }
        // Everything ends: all timers run out and the agents forget every connection.
        for _ in 0..200 {
            let Some(t) = net.agents.iter().filter_map(|a| a.poll_timeout()).min() else { break };
            net.now = net.now.max(t);
            let now = net.now;
            for a in &mut net.agents {
                a.handle_timeout(now);
                while a.poll_transmit().is_some() {}
                while a.poll_event().is_some() {}
            }
        }
        for a in &net.agents {
            prop_assert_eq!(a.poll_timeout(), None);
        }
    }
}

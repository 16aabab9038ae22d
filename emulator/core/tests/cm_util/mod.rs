//! A tiny fabric for CM agents, on the simulator's seeded generator and link model: MADs
//! travel wrapped in real GSI packets (BTH + DETH + MAD + ICRC), time jumps to the next
//! delivery or timer. Scripted drops by attribute ID; random loss, duplication and
//! reordering from `LinkModel`.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use emu_core::cm::{gsi, CmAgent, CmConfig, CmEvent, ConnId};
use emu_core::sim::{Fabric, LinkModel, Rng};
use emu_core::{Gid, Mtu, Psn, QpState, Qpn};

pub const SEC: Duration = Duration::from_secs(1);

pub fn ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1 + i as u8))
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Flying {
    at: Instant,
    seq: u64,
    to: usize,
    from: IpAddr,
    dst: IpAddr,
    bytes: Vec<u8>,
}

pub struct Net {
    pub agents: Vec<CmAgent>,
    pub now: Instant,
    pub link: LinkModel,
    pub seed: u64,
    rng: Rng,
    flying: BinaryHeap<Reverse<Flying>>,
    seq: u64,
    psn: Vec<u32>,
    /// Events seen per node, in order.
    pub events: Vec<Vec<(ConnId, CmEvent)>>,
    /// (attribute ID, how many more to drop).
    pub drops: Vec<(u16, u32)>,
    /// Attribute IDs of every MAD put on the wire, per sender.
    pub sent: Vec<Vec<u16>>,
    /// Nodes that are down (their packets vanish both ways).
    pub down: Vec<bool>,
}

impl Net {
    pub fn new(seed: u64, n: usize, link: LinkModel) -> Self {
        let agents = (0..n)
            .map(|i| {
                CmAgent::new(CmConfig::new(
                    0x0250_56ff_fe00_0000 + i as u64,
                    vec![Gid::from_ip(ip(i))],
                    Mtu::Mtu1024,
                    seed.wrapping_mul(31).wrapping_add(i as u64),
                ))
            })
            .collect();
        Net {
            agents,
            now: Instant::now(),
            link,
            seed,
            rng: Rng::new(seed),
            flying: BinaryHeap::new(),
            seq: 0,
            psn: vec![0; n],
            events: vec![Vec::new(); n],
            drops: Vec::new(),
            sent: vec![Vec::new(); n],
            down: vec![false; n],
        }
    }

    fn pump(&mut self) {
        for i in 0..self.agents.len() {
            while let Some(t) = self.agents[i].poll_transmit() {
                assert_eq!(t.src, ip(i), "MAD leaves from the node's own address");
                let attr = u16::from_be_bytes([t.mad[16], t.mad[17]]);
                self.sent[i].push(attr);
                let mut buf = [0u8; gsi::GSI_PACKET_LEN];
                self.psn[i] = self.psn[i].wrapping_add(1);
                gsi::encapsulate(t.src, t.dst, Psn::new(self.psn[i]), &t.mad, &mut buf);
                if let Some(d) = self.drops.iter_mut().find(|d| d.0 == attr && d.1 > 0) {
                    d.1 -= 1;
                    continue;
                }
                let Some(to) = (0..self.agents.len()).find(|&j| ip(j) == t.dst) else {
                    continue;
                };
                if self.down[i] || self.down[to] || self.rng.chance(self.link.loss) {
                    continue;
                }
                let copies = if self.rng.chance(self.link.duplicate) {
                    2
                } else {
                    1
                };
                for _ in 0..copies {
                    let mut at = self.now + self.link.delay;
                    if self.rng.chance(self.link.reorder) {
                        at += self.link.delay * (1 + self.rng.below(4) as u32);
                    }
                    self.seq += 1;
                    self.flying.push(Reverse(Flying {
                        at,
                        seq: self.seq,
                        to,
                        from: t.src,
                        dst: t.dst,
                        bytes: buf.to_vec(),
                    }));
                }
            }
            while let Some((id, _, ev)) = self.agents[i].poll_event() {
                self.events[i].push((id, ev));
            }
        }
    }

    /// One delivery or timer; false when nothing is left.
    pub fn step(&mut self) -> bool {
        self.pump();
        let pkt = self.flying.peek().map(|Reverse(p)| p.at);
        let timer = self.agents.iter().filter_map(|a| a.poll_timeout()).min();
        let ok = match (pkt, timer) {
            (None, None) => false,
            (Some(p), t) if t.is_none_or(|t| p <= t) => {
                let Some(Reverse(f)) = self.flying.pop() else {
                    return false;
                };
                self.now = self.now.max(f.at);
                let mad = gsi::decapsulate(&f.bytes).expect("a GSI packet");
                self.agents[f.to].handle_mad(self.now, f.from, f.dst, mad);
                true
            }
            (_, Some(t)) => {
                self.now = self.now.max(t);
                let now = self.now;
                for a in &mut self.agents {
                    if a.poll_timeout().is_some_and(|d| d <= now) {
                        a.handle_timeout(now);
                    }
                }
                true
            }
            (Some(_), None) => unreachable!(),
        };
        self.pump();
        ok
    }

    /// Steps until `done` holds (true) or `limit` simulated time passed / nothing is left.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Net) -> bool) -> bool {
        let end = self.now + limit;
        self.pump();
        loop {
            if done(self) {
                return true;
            }
            if self.now > end || !self.step() {
                return done(self);
            }
        }
    }

    /// Runs until nothing is left to happen (or `limit`).
    pub fn settle(&mut self, limit: Duration) -> bool {
        let end = self.now + limit;
        while self.now <= end {
            if !self.step() {
                return true;
            }
        }
        false
    }

    /// Takes the events of `node` seen so far.
    pub fn take(&mut self, node: usize) -> Vec<(ConnId, CmEvent)> {
        std::mem::take(&mut self.events[node])
    }

    pub fn has(&self, node: usize, f: impl Fn(&CmEvent) -> bool) -> bool {
        self.events[node].iter().any(|(_, e)| f(e))
    }
}

/// Takes QP `qpn` of simulated node `node` through INIT, RTR and RTS with the attributes
/// `agent` derives for connection `id` (what librdmacm does around connect and accept).
pub fn ready_qp(f: &mut Fabric, node: usize, agent: &CmAgent, id: ConnId, qpn: Qpn) {
    let now = f.now;
    for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
        let (attr, mask) = agent.init_qp_attr(id, st).unwrap();
        f.nodes[node]
            .dev
            .modify_qp(now, qpn, &attr, mask)
            .unwrap_or_else(|err| panic!("node {node} {st:?} {mask:?}: {err:?}"));
    }
}

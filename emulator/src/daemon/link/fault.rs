//! Fault injection on one device (`rdma-emu fault`, docs/faults.md): the packet rules
//! with their seeded generators, the packets they hold back (delay, reorder), the link
//! state, and the counters. `faulty.rs`'s `Faulty` layer takes a device's packets
//! through them.
//!
//! A rule sees RoCE packets as they leave the device (`tx`, before the socket or the local
//! path) and as they arrive (`rx`, after the socket, before the core). Each rule draws from
//! its own generator once per packet its filter matches, so the decisions depend only on
//! the seed and the sequence of matching packets. An RNR or NAK rule does not touch the
//! packet: it tells the core's responder to answer it with that response instead of
//! executing it, which keeps the responder's PSN state exact.

use emu_core::ForcedResponse;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use wire::client::fault::{Direction, FaultInfo, FaultKind, FaultRule, NakKind, PPM_ALL};
use wire::roce::{NakCode, Op, Opcode, TransportType};

/// How long a reordered packet waits at most for a packet to overtake it.
const REORDER_HOLD: Duration = Duration::from_millis(10);
/// Packets held at most per device (beyond it, delay and reorder let packets through).
const MAX_HELD: usize = 65_536;

/// One rule and its state.
#[derive(Debug)]
struct Rule {
    id: u32,
    rule: FaultRule,
    seed: u64,
    rng: u64,
    matched: u64,
    fired: u64,
    pattern: u64,
}

impl Rule {
    /// splitmix64: one draw per matching packet.
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Draws for one matching packet; whether the rule fires on it.
    fn decide(&mut self) -> bool {
        let draw = ((u128::from(self.next()) * u128::from(PPM_ALL)) >> 64) as u32;
        let exhausted = self.rule.count.is_some_and(|c| self.fired >= c);
        let fire = draw < self.rule.ppm && !exhausted;
        if self.matched < 64 && fire {
            self.pattern |= 1 << self.matched;
        }
        self.matched += 1;
        if fire {
            self.fired += 1;
        }
        fire
    }
}

/// The parts of a RoCE packet a filter looks at.
#[derive(Debug, Clone, Copy)]
struct PacketView {
    dir: Direction,
    src: SocketAddr,
    dst: SocketAddr,
    /// BTH opcode, `None` for datagrams too short to carry a BTH.
    opcode: Option<u8>,
    /// The BTH destination QP.
    dest_qpn: u32,
    /// The DETH source QP (UD).
    src_qpn: Option<u32>,
}

impl PacketView {
    fn new(dir: Direction, src: SocketAddr, dst: SocketAddr, bytes: &[u8]) -> PacketView {
        let (opcode, dest_qpn) = match bytes.get(..12) {
            Some(bth) => (
                Some(bth[0]),
                u32::from_be_bytes([0, bth[5], bth[6], bth[7]]),
            ),
            None => (None, 0),
        };
        let src_qpn = opcode
            .filter(|&op| Opcode(op).transport() == TransportType::Ud)
            .and_then(|_| bytes.get(16..20))
            .map(|q| u32::from_be_bytes([0, q[1], q[2], q[3]]));
        PacketView {
            dir,
            src,
            dst,
            opcode,
            dest_qpn,
            src_qpn,
        }
    }

    fn peer(&self) -> SocketAddr {
        match self.dir {
            Direction::Rx => self.src,
            Direction::Tx => self.dst,
        }
    }

    /// Whether a forced response can apply: an RC request that consumes a receive WQE
    /// (RNR), or that starts a message (NAK). The core checks the PSN.
    fn takes(&self, kind: FaultKind) -> bool {
        let forced = matches!(kind, FaultKind::Rnr | FaultKind::Nak(_));
        if !forced {
            return true;
        }
        let Some(op) = self.opcode.map(Opcode) else {
            return false;
        };
        if self.dir != Direction::Rx || op.transport() != TransportType::Rc {
            return false;
        }
        let wqe = matches!(
            op.op(),
            Op::SendFirst | Op::SendOnly | Op::SendOnlyImm | Op::SendOnlyInv | Op::WriteOnlyImm
        );
        let starts = matches!(
            op.op(),
            Op::WriteFirst | Op::WriteOnly | Op::ReadRequest | Op::CompareSwap | Op::FetchAdd
        );
        wqe || (starts && kind != FaultKind::Rnr)
    }
}

/// What the rules decided for one packet.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Fate {
    drop: bool,
    duplicate: bool,
    corrupt: bool,
    /// Hold until then (delay).
    hold_until: Option<Instant>,
    /// Let the next packet in the same direction pass first.
    reorder: bool,
    /// The responder's answer instead of executing the request (QPN, response).
    force: Option<(u32, ForcedResponse)>,
}

/// What one packet becomes on its way through the rules.
#[derive(Debug)]
pub(crate) enum Passage<'a> {
    /// Dropped, or held back ([`Faults::take_due`] gives it back when its time comes).
    Gone,
    /// It goes on now: borrowed unless corrupted.
    Through {
        bytes: Cow<'a, [u8]>,
        /// 1, or 2 when duplicated.
        copies: u8,
        /// The response the core's responder must give it (QPN, response), set right
        /// before each copy is delivered: the rules cannot reach into the core.
        force: Option<(u32, ForcedResponse)>,
    },
}

/// A packet held back by delay or reorder.
#[derive(Debug)]
pub(crate) struct Held {
    pub until: Instant,
    pub dir: Direction,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The traffic class a transmitted packet leaves with (0 for received ones).
    pub traffic_class: u8,
    pub bytes: Vec<u8>,
    /// Released as soon as a later packet in the same direction passed.
    reorder: bool,
}

/// Counters of what the rules did (in `rdma-emu stat`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FaultCounters {
    pub dropped: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub delayed: u64,
    pub reordered: u64,
    pub rnr_forced: u64,
    pub nak_forced: u64,
    pub link_down_drops: u64,
    /// Forced responses no request took (a duplicate or out-of-order PSN).
    pub forced_unused: u64,
}

/// The fault state of one device.
#[derive(Debug, Default)]
pub struct Faults {
    rules: Vec<Rule>,
    held: Vec<Held>,
    /// The port is down (`fault add DEV link down`): no packet passes either way.
    pub link_down: bool,
    pub(crate) counters: FaultCounters,
}

impl Faults {
    /// Whether packets need judging at all (the fast path skips everything otherwise).
    pub fn active(&self) -> bool {
        !self.rules.is_empty() || self.link_down || !self.held.is_empty()
    }

    /// Adds a rule with the id given; `seed` is used when the rule names none.
    pub(crate) fn add(&mut self, id: u32, rule: FaultRule, seed: u64) {
        let seed = rule.seed.unwrap_or(seed);
        self.rules.push(Rule {
            id,
            rule,
            seed,
            rng: seed,
            matched: 0,
            fired: 0,
            pattern: 0,
        });
    }

    /// Removes the rule `id` (every rule when `None`); the removed rules' descriptions.
    pub(crate) fn clear(&mut self, device: &str, id: Option<u32>) -> Vec<FaultInfo> {
        let mut removed = Vec::new();
        self.rules.retain(|r| {
            let hit = id.is_none_or(|i| i == r.id);
            if hit {
                removed.push(info(device, r));
            }
            !hit
        });
        removed
    }

    /// The rules as `fault list` shows them.
    pub(crate) fn list(&self, device: &str) -> Vec<FaultInfo> {
        self.rules.iter().map(|r| info(device, r)).collect()
    }

    /// Takes one packet through the rules (the caller checked [`Faults::active`]): judges
    /// it, corrupts, holds or drops it, and lets the reordered packets waiting in its
    /// direction follow it. `traffic_class` is what a held sent packet leaves with later;
    /// `dest_of` gives a local QP's remote QPN (to match `--qp` on sent packets: only the
    /// core knows which QP a packet belongs to).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn pass<'a>(
        &mut self,
        now: Instant,
        dir: Direction,
        src: SocketAddr,
        dst: SocketAddr,
        traffic_class: u8,
        bytes: &'a [u8],
        dest_of: &dyn Fn(u32) -> Option<u32>,
    ) -> Passage<'a> {
        let view = PacketView::new(dir, src, dst, bytes);
        let fate = self.judge(now, &view, dest_of);
        if fate.drop {
            return Passage::Gone;
        }
        let mut bytes = Cow::Borrowed(bytes);
        if fate.corrupt {
            corrupt(bytes.to_mut());
        }
        if fate.hold_until.is_some() || fate.reorder {
            match self.hold(now, &fate, &view, traffic_class, bytes.into_owned()) {
                Ok(()) => return Passage::Gone,
                Err(back) => bytes = Cow::Owned(back),
            }
        }
        self.passed(now, dir);
        Passage::Through {
            bytes,
            copies: 1 + u8::from(fate.duplicate),
            force: fate.force,
        }
    }

    /// The local QPs the rules' `--qp` filters name.
    pub(crate) fn filtered_qps(&self) -> impl Iterator<Item = u32> + '_ {
        self.rules.iter().filter_map(|r| r.rule.filter.qp)
    }

    /// A forced response no request took (a duplicate or out-of-order PSN).
    pub(crate) fn forced_unused(&mut self) {
        self.counters.forced_unused += 1;
    }

    /// Decides the fate of one packet. `dest_of` gives a local QP's remote QPN (to match
    /// `--qp` on packets the QP sends).
    fn judge(
        &mut self,
        now: Instant,
        p: &PacketView,
        dest_of: &dyn Fn(u32) -> Option<u32>,
    ) -> Fate {
        let mut fate = Fate::default();
        if self.link_down {
            self.counters.link_down_drops += 1;
            fate.drop = true;
            return fate;
        }
        for r in &mut self.rules {
            let f = &r.rule.filter;
            if f.dir.is_some_and(|d| d != p.dir)
                || f.addr.is_some_and(|a| a != p.peer().ip())
                || f.opcode
                    .is_some_and(|c| !p.opcode.is_some_and(|op| c.matches(op)))
                || !p.takes(r.rule.kind)
            {
                continue;
            }
            // One forced response per request: the first rule that fires gives it, the
            // later ones do not see the packet.
            if fate.force.is_some() && matches!(r.rule.kind, FaultKind::Rnr | FaultKind::Nak(_)) {
                continue;
            }
            if let Some(q) = f.qp {
                let ours = match p.dir {
                    Direction::Rx => p.opcode.is_some() && p.dest_qpn == q,
                    Direction::Tx => {
                        p.src_qpn == Some(q)
                            || (p.src_qpn.is_none() && dest_of(q) == Some(p.dest_qpn))
                    }
                };
                if !ours {
                    continue;
                }
            }
            if !r.decide() {
                continue;
            }
            match r.rule.kind {
                FaultKind::Drop => fate.drop = true,
                FaultKind::Duplicate => fate.duplicate = true,
                FaultKind::Corrupt => fate.corrupt = true,
                FaultKind::Reorder => fate.reorder = true,
                FaultKind::Delay(d) => {
                    let until = now + d;
                    fate.hold_until = Some(fate.hold_until.map_or(until, |t| t.max(until)));
                }
                FaultKind::Rnr => fate.force = Some((p.dest_qpn, ForcedResponse::Rnr)),
                FaultKind::Nak(k) => {
                    fate.force = Some((p.dest_qpn, ForcedResponse::Nak(nak_code(k))))
                }
            }
        }
        let c = &mut self.counters;
        if fate.drop {
            c.dropped += 1;
            return Fate {
                drop: true,
                ..Fate::default()
            };
        }
        c.duplicated += u64::from(fate.duplicate);
        c.corrupted += u64::from(fate.corrupt);
        c.delayed += u64::from(fate.hold_until.is_some());
        c.reordered += u64::from(fate.reorder);
        match fate.force {
            Some((_, ForcedResponse::Rnr)) => c.rnr_forced += 1,
            Some((_, ForcedResponse::Nak(_))) => c.nak_forced += 1,
            None => {}
        }
        fate
    }

    /// Holds a packet back (delay, reorder); false when the queue is full (the packet
    /// then passes now).
    fn hold(
        &mut self,
        now: Instant,
        fate: &Fate,
        p: &PacketView,
        traffic_class: u8,
        bytes: Vec<u8>,
    ) -> Result<(), Vec<u8>> {
        if self.held.len() >= MAX_HELD {
            return Err(bytes);
        }
        let until = fate.hold_until.unwrap_or(now + REORDER_HOLD);
        self.held.push(Held {
            until,
            dir: p.dir,
            src: p.src,
            dst: p.dst,
            traffic_class,
            bytes,
            reorder: fate.reorder && fate.hold_until.is_none(),
        });
        Ok(())
    }

    /// A packet passed in direction `dir`: reordered packets waiting in that direction
    /// may follow it now.
    fn passed(&mut self, now: Instant, dir: Direction) {
        for h in &mut self.held {
            if h.reorder && h.dir == dir {
                h.until = h.until.min(now);
                h.reorder = false;
            }
        }
    }

    /// Held packets whose time has come, in the order they were held.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<Held> {
        if self.held.iter().all(|h| h.until > now) {
            return Vec::new();
        }
        let (due, keep) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.until <= now);
        self.held = keep;
        due
    }

    /// When the next held packet is due.
    pub fn next_release(&self) -> Option<Instant> {
        self.held.iter().map(|h| h.until).min()
    }

    /// Counters for `rdma-emu stat`.
    pub(crate) fn counter_list(&self) -> [(&'static str, u64); 9] {
        let c = &self.counters;
        [
            ("fault_dropped", c.dropped),
            ("fault_duplicated", c.duplicated),
            ("fault_corrupted", c.corrupted),
            ("fault_delayed", c.delayed),
            ("fault_reordered", c.reordered),
            ("fault_rnr_forced", c.rnr_forced),
            ("fault_nak_forced", c.nak_forced),
            ("fault_forced_unused", c.forced_unused),
            ("link_down_drops", c.link_down_drops),
        ]
    }
}

fn nak_code(k: NakKind) -> NakCode {
    match k {
        NakKind::PsnSequenceError => NakCode::PsnSequenceError,
        NakKind::InvalidRequest => NakCode::InvalidRequest,
        NakKind::RemoteAccessError => NakCode::RemoteAccessError,
        NakKind::RemoteOperationalError => NakCode::RemoteOperationalError,
    }
}

fn info(device: &str, r: &Rule) -> FaultInfo {
    FaultInfo {
        id: r.id,
        device: device.to_string(),
        rule: r.rule,
        seed: r.seed,
        matched: r.matched,
        fired: r.fired,
        pattern: r.pattern,
    }
}

/// Flips one bit of the packet's ICRC (its last octet): the receiver must drop it.
fn corrupt(bytes: &mut [u8]) {
    if let Some(last) = bytes.last_mut() {
        *last ^= 0x01;
    }
}

/// The environment variable a daemon reads its initial faults from at start
/// (`DEVICE WORDS…` entries separated by `;`, as `rdma-emu fault add` takes them).
pub const FAULTS_ENV: &str = "RDMA_EMU_FAULTS";

/// A rule's seed when it names none: the daemon's seed and the rule's id, mixed, so the
/// same rules added in the same order to a daemon with the same seed draw the same.
pub(crate) fn default_seed(daemon_seed: u64, id: u32) -> u64 {
    let mut r = Rule {
        id,
        rule: FaultRule {
            kind: FaultKind::Drop,
            ppm: 0,
            filter: Default::default(),
            count: None,
            seed: None,
        },
        seed: 0,
        rng: daemon_seed ^ (u64::from(id) << 32),
        matched: 0,
        fired: 0,
        pattern: 0,
    };
    r.next()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> FaultRule {
        text.parse().unwrap()
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// An RC packet with this opcode to `qpn`.
    fn rc(op: u8, qpn: u32) -> Vec<u8> {
        let mut p = vec![0u8; 32];
        p[0] = op;
        p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        p
    }

    fn view(dir: Direction, bytes: &[u8]) -> PacketView {
        PacketView::new(dir, addr("10.0.0.1:1000"), addr("10.0.0.2:4791"), bytes)
    }

    fn pattern_of(text: &str, seed: u64, n: usize) -> Vec<bool> {
        let mut f = Faults::default();
        f.add(1, rule(text), seed);
        let now = Instant::now();
        let p = rc(0x04, 17);
        (0..n)
            .map(|_| f.judge(now, &view(Direction::Rx, &p), &|_| None).drop)
            .collect()
    }

    #[test]
    fn the_same_seed_gives_the_same_decisions_and_another_seed_others() {
        let a = pattern_of("drop 30%", 7, 2000);
        assert_eq!(a, pattern_of("drop 30%", 7, 2000));
        assert_ne!(a, pattern_of("drop 30%", 8, 2000));
        let fired = a.iter().filter(|&&d| d).count();
        assert!(
            (500..700).contains(&fired),
            "30% of 2000 fired {fired} times"
        );
        assert!(pattern_of("drop", 1, 100).iter().all(|&d| d));
        assert!(pattern_of("drop 0%", 1, 100).iter().all(|&d| !d));
    }

    #[test]
    fn count_stops_a_rule_and_the_pattern_records_the_first_decisions() {
        let mut f = Faults::default();
        f.add(3, rule("drop --count 2"), 1);
        let now = Instant::now();
        let p = rc(0x04, 17);
        let drops: Vec<bool> = (0..5)
            .map(|_| f.judge(now, &view(Direction::Rx, &p), &|_| None).drop)
            .collect();
        assert_eq!(drops, [true, true, false, false, false]);
        let l = f.list("rxe0");
        assert_eq!((l[0].matched, l[0].fired, l[0].pattern), (5, 2, 0b11));
    }

    #[test]
    fn filters_select_direction_qp_opcode_and_peer() {
        let mut f = Faults::default();
        f.add(
            1,
            rule("drop --dir rx --qp 17 --opcode send --addr 10.0.0.1"),
            1,
        );
        let now = Instant::now();
        let no_dest = |_| None;
        assert!(
            f.judge(now, &view(Direction::Rx, &rc(0x04, 17)), &no_dest)
                .drop
        );
        assert!(
            !f.judge(now, &view(Direction::Rx, &rc(0x04, 18)), &no_dest)
                .drop
        );
        assert!(
            !f.judge(now, &view(Direction::Rx, &rc(0x0a, 17)), &no_dest)
                .drop
        );
        assert!(
            !f.judge(now, &view(Direction::Tx, &rc(0x04, 17)), &no_dest)
                .drop
        );
        let other = PacketView::new(
            Direction::Rx,
            addr("10.0.0.9:1000"),
            addr("10.0.0.2:4791"),
            &rc(0x04, 17),
        );
        assert!(!f.judge(now, &other, &no_dest).drop);
        // Sent packets of local QP 5, whose peer is QP 40.
        let mut f = Faults::default();
        f.add(1, rule("drop --qp 5 --dir tx"), 1);
        let dest = |q| (q == 5).then_some(40);
        assert!(
            f.judge(now, &view(Direction::Tx, &rc(0x0a, 40)), &dest)
                .drop
        );
        assert!(
            !f.judge(now, &view(Direction::Tx, &rc(0x0a, 41)), &dest)
                .drop
        );
    }

    #[test]
    fn rnr_and_nak_force_a_response_only_on_requests_that_can_take_it() {
        let mut f = Faults::default();
        f.add(1, rule("rnr"), 1);
        f.add(2, rule("nak remote-access --opcode read"), 1);
        let now = Instant::now();
        let none = |_| None;
        let send = f.judge(now, &view(Direction::Rx, &rc(0x04, 17)), &none);
        assert_eq!(send.force, Some((17, ForcedResponse::Rnr)));
        // SEND Middle consumes no WQE; an ACK is no request.
        assert_eq!(
            f.judge(now, &view(Direction::Rx, &rc(0x01, 17)), &none)
                .force,
            None
        );
        assert_eq!(
            f.judge(now, &view(Direction::Rx, &rc(0x11, 17)), &none)
                .force,
            None
        );
        let read = f.judge(now, &view(Direction::Rx, &rc(0x0c, 17)), &none);
        assert_eq!(
            read.force,
            Some((17, ForcedResponse::Nak(NakCode::RemoteAccessError)))
        );
        assert_eq!(f.counters.rnr_forced, 1);
        assert_eq!(f.counters.nak_forced, 1);
        // UD packets take no forced response.
        assert_eq!(
            f.judge(now, &view(Direction::Rx, &rc(0x64, 17)), &none)
                .force,
            None
        );
    }

    #[test]
    fn held_packets_come_out_when_due_and_reordered_ones_after_the_next_packet() {
        let mut f = Faults::default();
        let now = Instant::now();
        let p = view(Direction::Tx, &rc(0x04, 1));
        let delay = Fate {
            hold_until: Some(now + Duration::from_millis(5)),
            ..Fate::default()
        };
        f.hold(now, &delay, &p, 0, vec![1]).unwrap();
        let reorder = Fate {
            reorder: true,
            ..Fate::default()
        };
        f.hold(now, &reorder, &p, 0, vec![2]).unwrap();
        assert!(f.take_due(now).is_empty());
        assert_eq!(f.next_release(), Some(now + Duration::from_millis(5)));
        f.passed(now, Direction::Rx);
        assert!(
            f.take_due(now).is_empty(),
            "another direction releases nothing"
        );
        f.passed(now, Direction::Tx);
        let due = f.take_due(now);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].bytes, [2]);
        let due = f.take_due(now + Duration::from_millis(5));
        assert_eq!(due[0].bytes, [1]);
        assert!(!f.active());
    }

    #[test]
    fn link_down_drops_everything_and_is_counted() {
        let mut f = Faults {
            link_down: true,
            ..Faults::default()
        };
        let now = Instant::now();
        assert!(
            f.judge(now, &view(Direction::Tx, &rc(0x04, 1)), &|_| None)
                .drop
        );
        assert!(
            f.judge(now, &view(Direction::Rx, &[0u8; 3]), &|_| None)
                .drop
        );
        assert_eq!(f.counters.link_down_drops, 2);
    }
}

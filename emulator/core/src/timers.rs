//! One timer table keyed by (QP, timer kind).

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// The kinds of per-QP timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    /// Local ACK timeout (IBA 9.7.6.1.1): 4.096 µs × 2^timeout after the oldest unacked
    /// packet was sent.
    Retransmit,
    /// End of the RNR wait the responder asked for (IBA 9.7.5.2.8).
    RnrWait,
    /// DCQCN: the end of an α update period.
    DcqcnAlpha,
    /// DCQCN: the rate-increase timer.
    DcqcnRate,
    /// DCQCN: the paced requester's next packet is due.
    Pace,
    /// The device's window of request packets in flight was full when this QP wanted to
    /// start a message: it tries again (`requester::DEVICE_WINDOW`).
    Window,
}

/// Deadlines by (QPN, kind), with an ordered index for the earliest.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    by_key: HashMap<(u32, TimerKind), Instant>,
    order: BTreeSet<(Instant, u32, TimerKind)>,
}

impl Timers {
    /// Arms (or re-arms) a timer.
    pub fn set(&mut self, qpn: u32, kind: TimerKind, at: Instant) {
        if let Some(old) = self.by_key.insert((qpn, kind), at) {
            self.order.remove(&(old, qpn, kind));
        }
        self.order.insert((at, qpn, kind));
    }

    /// Disarms a timer.
    pub fn cancel(&mut self, qpn: u32, kind: TimerKind) {
        if let Some(old) = self.by_key.remove(&(qpn, kind)) {
            self.order.remove(&(old, qpn, kind));
        }
    }

    /// Whether a timer is armed.
    pub fn is_set(&self, qpn: u32, kind: TimerKind) -> bool {
        self.by_key.contains_key(&(qpn, kind))
    }

    /// Disarms every timer of a QP.
    pub fn cancel_qp(&mut self, qpn: u32) {
        self.cancel(qpn, TimerKind::Retransmit);
        self.cancel(qpn, TimerKind::RnrWait);
        self.cancel_dcqcn(qpn);
    }

    /// Disarms a QP's reaction point timers.
    pub fn cancel_dcqcn(&mut self, qpn: u32) {
        self.cancel(qpn, TimerKind::DcqcnAlpha);
        self.cancel(qpn, TimerKind::DcqcnRate);
        self.cancel(qpn, TimerKind::Pace);
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.order.first().map(|(t, _, _)| *t)
    }

    /// Removes and returns one timer due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(u32, TimerKind)> {
        let &(t, q, k) = self.order.first()?;
        if t > now {
            return None;
        }
        self.order.remove(&(t, q, k));
        self.by_key.remove(&(q, k));
        Some((q, k))
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }
}

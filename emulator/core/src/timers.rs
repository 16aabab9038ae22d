//! One timer table keyed by (QP, timer kind).

use std::collections::BTreeSet;
use std::time::Instant;

use crate::types::U32Map;

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

/// How many kinds of timer a QP has.
const KINDS: usize = 6;
const _: () = assert!(TimerKind::Window as usize + 1 == KINDS);

impl TimerKind {
    /// Where this kind's deadline sits in a QP's row.
    const fn slot(self) -> usize {
        self as usize
    }
}

/// Deadlines by (QPN, kind), with an ordered index for the earliest.
///
/// A QP's deadlines are one row, looked up once by QPN with the core's cheap hasher:
/// the retransmit timer is re-armed and cancelled with every request and ACK.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    by_qp: U32Map<[Option<Instant>; KINDS]>,
    order: BTreeSet<(Instant, u32, TimerKind)>,
    armed: usize,
}

impl Timers {
    /// Arms (or re-arms) a timer.
    pub fn set(&mut self, qpn: u32, kind: TimerKind, at: Instant) {
        let row = self.by_qp.entry(qpn).or_default();
        match row[kind.slot()].replace(at) {
            Some(old) if old == at => return,
            Some(old) => {
                self.order.remove(&(old, qpn, kind));
            }
            None => self.armed += 1,
        }
        self.order.insert((at, qpn, kind));
    }

    /// Disarms a timer.
    pub fn cancel(&mut self, qpn: u32, kind: TimerKind) {
        if let Some(old) = self.take(qpn, kind) {
            self.order.remove(&(old, qpn, kind));
        }
    }

    /// Clears `qpn`'s `kind` deadline in its row (dropping a row left empty).
    fn take(&mut self, qpn: u32, kind: TimerKind) -> Option<Instant> {
        let row = self.by_qp.get_mut(&qpn)?;
        let old = row[kind.slot()].take()?;
        self.armed -= 1;
        if row.iter().all(Option::is_none) {
            self.by_qp.remove(&qpn);
        }
        Some(old)
    }

    /// Whether a timer is armed.
    pub fn is_set(&self, qpn: u32, kind: TimerKind) -> bool {
        self.by_qp
            .get(&qpn)
            .is_some_and(|row| row[kind.slot()].is_some())
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
        self.take(q, k);
        Some((q, k))
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.armed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rearming_moves_the_deadline_and_cancelling_forgets_it() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut t = Timers::default();
        t.set(7, TimerKind::Retransmit, ms(30));
        t.set(7, TimerKind::Pace, ms(20));
        t.set(9, TimerKind::Retransmit, ms(10));
        assert_eq!((t.len(), t.next()), (3, Some(ms(10))));
        // Re-armed later: the old deadline no longer fires.
        t.set(9, TimerKind::Retransmit, ms(40));
        t.set(9, TimerKind::Retransmit, ms(40));
        assert_eq!((t.len(), t.next()), (3, Some(ms(20))));
        assert_eq!(t.pop_due(ms(15)), None);
        assert_eq!(t.pop_due(ms(35)), Some((7, TimerKind::Pace)));
        assert_eq!(t.pop_due(ms(35)), Some((7, TimerKind::Retransmit)));
        assert_eq!(t.pop_due(ms(35)), None);
        assert!(!t.is_set(7, TimerKind::Retransmit) && t.is_set(9, TimerKind::Retransmit));
        t.cancel(9, TimerKind::RnrWait);
        assert_eq!(t.len(), 1);
        t.cancel_qp(9);
        assert_eq!((t.len(), t.next()), (0, None));
        assert!(t.by_qp.is_empty(), "rows of QPs without timers are dropped");
    }
}

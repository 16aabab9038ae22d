//! Link-level flow control as the transmitting NIC obeys it: IEEE 802.3 Annex 31B PAUSE
//! (every priority) and IEEE 802.1Qbb priority-based flow control (PFC, per priority).
//! The daemon parses the frames and says which priority stops until when
//! ([`Device::pause_priority`](crate::Device::pause_priority)); the core holds the
//! transmissions of connected QPs in that priority (nothing is dropped: the packets are
//! simply not built yet) and lets the others go on.
//!
//! A QP's priority is the standard mapping of its DSCP: DSCP >> 3, so traffic class 96
//! (DSCP 24) is priority 3 and CNPs (DSCP 48) priority 6. A QP's local ACK timer does not
//! expire during its priority's pause nor less than the timeout after the pause ended: a
//! timeout then restarts the timer from the pause's end instead of retransmitting (a
//! pause holds the packets the timer waits for, and a pause refreshed a moment late must
//! not count; real NICs retransmit after long PFC storms, which tests do not want).

use std::time::Instant;

use crate::attr::Counters;
use crate::objects::Objects;
use crate::qp::Qp;
use crate::timers::{TimerKind, Timers};
use crate::types::U32Map;

/// Priorities of 802.1Q (the PCP values) that PFC pauses one by one.
pub const PRIORITIES: usize = 8;

/// The 802.1Q priority of an IP TOS / traffic class octet: its DSCP's top three bits
/// (the default DSCP → priority mapping of ConnectX and of Linux's `dcb` tools).
pub fn priority_of(traffic_class: u8) -> u8 {
    traffic_class >> 5
}

/// Which priorities are paused, until when, and which QPs wait for them.
#[derive(Debug, Default)]
pub(crate) struct TxPause {
    until: [Option<Instant>; PRIORITIES],
    /// The end of each priority's latest pause (kept after it ended).
    last_end: [Option<Instant>; PRIORITIES],
    /// QPs found with something to send while their priority was paused.
    held: [Vec<u32>; PRIORITIES],
}

impl TxPause {
    /// When `priority`'s pause ends, if it is paused at `now`.
    pub fn paused_until(&self, now: Instant, priority: u8) -> Option<Instant> {
        self.until
            .get(usize::from(priority))
            .copied()
            .flatten()
            .filter(|&t| t > now)
    }

    /// Pauses `priority` until `until` (restarting any pause running); an `until` not
    /// after `now` resumes it. Returns the QPs to reschedule (those held, on resume).
    pub fn set(&mut self, now: Instant, priority: u8, until: Instant) -> Vec<u32> {
        let p = usize::from(priority);
        if p >= PRIORITIES {
            return Vec::new();
        }
        self.last_end[p] = Some(until.max(now));
        if until > now {
            self.until[p] = Some(until);
            Vec::new()
        } else {
            self.until[p] = None;
            std::mem::take(&mut self.held[p])
        }
    }

    /// The end of `priority`'s latest pause, running or over.
    pub fn last_end(&self, priority: u8) -> Option<Instant> {
        self.last_end.get(usize::from(priority)).copied().flatten()
    }

    /// Notes that `qpn` waits for `priority`.
    pub fn hold(&mut self, priority: u8, qpn: u32) {
        if let Some(h) = self.held.get_mut(usize::from(priority)) {
            if !h.contains(&qpn) {
                h.push(qpn);
            }
        }
    }

    /// The earliest end of a running pause.
    pub fn next_end(&self) -> Option<Instant> {
        self.until.iter().flatten().min().copied()
    }

    /// Ends the pauses due at `now`; returns the QPs to reschedule.
    pub fn expire(&mut self, now: Instant) -> Vec<u32> {
        let mut out = Vec::new();
        for p in 0..PRIORITIES {
            if self.until[p].is_some_and(|t| t <= now) {
                self.until[p] = None;
                out.append(&mut self.held[p]);
            }
        }
        out
    }
}

impl TxPause {
    /// The link partner asked (802.1Qbb PFC, or 802.3 PAUSE for every priority) that
    /// nothing be sent in `priority` until `until`; an `until` not after `now` (quanta 0)
    /// resumes at once. A new request replaces the running one. QPs that waited for the
    /// pause are scheduled again.
    pub fn pause(
        &mut self,
        now: Instant,
        priority: u8,
        until: Instant,
        qps: &mut U32Map<Qp>,
        o: &mut Objects,
    ) {
        tracing::trace!(
            priority,
            pause_us = (until.saturating_duration_since(now)).as_micros() as u64,
            "priority paused"
        );
        for qpn in self.set(now, priority, until) {
            tracing::debug!(qpn, "pause resumed: rescheduled");
            if let Some(qp) = qps.get_mut(&qpn) {
                o.schedule(qp);
            }
        }
    }

    /// Whether QP `qpn` must not transmit now because its priority is paused; if so it is
    /// noted to be rescheduled when the pause ends.
    pub fn held(&mut self, now: Instant, qpn: u32, qp: &mut Qp, counters: &mut Counters) -> bool {
        if self.until.iter().all(Option::is_none) {
            // Nothing is paused (the common case, asked once per packet).
            return false;
        }
        let Some(path) = qp.conn.as_ref().and_then(|c| c.path) else {
            return false;
        };
        let prio = priority_of(path.traffic_class);
        if self.paused_until(now, prio).is_none() {
            return false;
        }
        self.hold(prio, qpn);
        counters.pfc_held += 1;
        qp.counters.pfc_held += 1;
        true
    }

    /// Whether CNPs, which leave with DSCP `cnp_dscp`, must wait for a pause.
    pub fn cnp_paused(&self, now: Instant, cnp_dscp: u8) -> bool {
        self.paused_until(now, priority_of(cnp_dscp << 2)).is_some()
    }

    /// If QP `qpn`'s priority is paused at `now`, or its pause ended less than `timeout`
    /// ago, restarts its local ACK timer to run out `timeout` after the pause's end and
    /// says so: the timeout is not the peer's fault.
    pub fn ack_timeout_paused(
        &self,
        now: Instant,
        qpn: u32,
        timeout: std::time::Duration,
        qps: &U32Map<Qp>,
        timers: &mut Timers,
    ) -> bool {
        let Some(due) = qp_priority(qps, qpn)
            .and_then(|p| self.last_end(p))
            .map(|end| end + timeout)
            .filter(|&due| due > now)
        else {
            return false;
        };
        tracing::debug!(qpn, "ACK timeout during or just after a pause: restarted");
        timers.set(qpn, TimerKind::Retransmit, due);
        true
    }

    /// Ends the pauses due at `now` and reschedules the QPs that waited for them.
    pub fn expire_and_reschedule(&mut self, now: Instant, qps: &mut U32Map<Qp>, o: &mut Objects) {
        for qpn in self.expire(now) {
            tracing::debug!(qpn, "pause over: rescheduled");
            if let Some(qp) = qps.get_mut(&qpn) {
                o.schedule(qp);
            }
        }
    }
}

/// The priority QP `qpn`'s packets travel in (connected QPs with a path only).
fn qp_priority(qps: &U32Map<Qp>, qpn: u32) -> Option<u8> {
    let path = qps.get(&qpn)?.conn.as_ref()?.path?;
    Some(priority_of(path.traffic_class))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dscp_maps_to_its_top_three_bits() {
        assert_eq!(priority_of(0), 0);
        assert_eq!(priority_of(96), 3, "DSCP 24");
        assert_eq!(priority_of(48 << 2), 6, "CNP DSCP 48");
        assert_eq!(priority_of(0xff), 7);
    }

    #[test]
    fn a_pause_ends_at_its_time_and_hands_back_the_held_qps() {
        let t0 = Instant::now();
        let mut p = TxPause::default();
        assert!(p.set(t0, 3, t0 + Duration::from_millis(2)).is_empty());
        assert_eq!(p.paused_until(t0, 3), Some(t0 + Duration::from_millis(2)));
        assert_eq!(p.paused_until(t0, 2), None, "other priorities go on");
        p.hold(3, 17);
        p.hold(3, 17);
        p.hold(3, 18);
        assert_eq!(p.next_end(), Some(t0 + Duration::from_millis(2)));
        assert!(p.expire(t0 + Duration::from_millis(1)).is_empty());
        assert_eq!(p.expire(t0 + Duration::from_millis(2)), vec![17, 18]);
        assert_eq!(p.paused_until(t0, 3), None);
        assert_eq!(p.next_end(), None);
    }

    #[test]
    fn a_new_request_restarts_the_pause_and_zero_resumes_at_once() {
        let t0 = Instant::now();
        let mut p = TxPause::default();
        p.set(t0, 0, t0 + Duration::from_millis(1));
        p.hold(0, 5);
        p.set(t0, 0, t0 + Duration::from_millis(5));
        assert!(p.expire(t0 + Duration::from_millis(2)).is_empty());
        assert_eq!(p.set(t0 + Duration::from_millis(3), 0, t0), vec![5]);
        assert_eq!(p.paused_until(t0 + Duration::from_millis(3), 0), None);
        assert_eq!(
            p.last_end(0),
            Some(t0 + Duration::from_millis(3)),
            "the pause ended at the resume"
        );
        assert!(p.set(t0, 8, t0 + Duration::from_secs(1)).is_empty());
        assert_eq!(p.next_end(), None, "priority 8 does not exist");
    }
}

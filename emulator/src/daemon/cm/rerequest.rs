//! An active connection whose REQ found no listener tries again for a moment before
//! `rdma_connect` hears REJECTED.
//!
//! The passive side of the IB CM answers a REQ for a service ID nobody listens on with
//! REJ reason 8, "Invalid Service ID" (IBA 12.6.7, table 109), at once: the Linux CM does
//! it in `cm_match_req` and forgets the request (its remote comm ID and QPN are cleaned
//! up before the REJ leaves, so a later REQ from the same QP is a new request, not a
//! stale one). perftest's `-R` client connects a second time right after its first
//! connection's handshake, while the server closes its first listener and listens anew;
//! when the server is the slower of the two (a kernel peer under emulation, an
//! overloaded host), the second REQ arrives in that gap and the connection fails.
//! rdma-emu's own passive side holds such a REQ back for a while (`devices::parked::LISTEN_GRACE`);
//! against a peer that does not, the active side covers the same gap: a REJ with reason 8
//! that comes back within [`LISTENER_WAIT`] of `rdma_connect` is not reported; the daemon
//! sends a new REQ (new communication ID, same QP and parameters) after a short pause,
//! and only a REJ 8 after the wait reaches the application. Every REQ on the wire is a
//! complete, valid request and every REJ ends its own connection attempt as the IBA
//! says; what changes is only how soon "nobody listens" is final.

use emu_core::cm::{reason, ConnParams, Route};
use std::time::{Duration, Instant};

/// How long after `rdma_connect` a REJ "invalid service ID" still leads to another REQ.
/// perftest's own retry loop (10 × 100 ms, broken in the 4.5-0.17 that Debian 12 ships)
/// aims at the same gap; a server listening again within a second is what it expects.
/// Well under the 2 s in which a connection to a port nobody listens on is refused.
pub(super) const LISTENER_WAIT: Duration = Duration::from_secs(1);

/// The first pause before a new REQ; each further one doubles, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// What an active id needs to send its REQ again.
#[derive(Debug, Clone)]
pub(super) struct ReRequest {
    pub(super) params: ConnParams,
    pub(super) route: Route,
    /// When `rdma_connect` sent the first REQ.
    first: Instant,
    /// REQs sent again so far.
    repeats: u32,
    /// When the next REQ goes out, while one is waiting.
    due: Option<Instant>,
}

impl ReRequest {
    /// The first REQ of `rdma_connect` went out at `now`.
    pub(super) fn new(params: ConnParams, route: Route, now: Instant) -> ReRequest {
        ReRequest {
            params,
            route,
            first: now,
            repeats: 0,
            due: None,
        }
    }

    /// A REJ with `reason` answered the last REQ at `now`: when to send a new REQ, or
    /// `None` when the application must hear REJECTED (another reason, or the wait is
    /// over).
    pub(super) fn rejected(&mut self, now: Instant, reason: u16) -> Option<Instant> {
        if reason != reason::INVALID_SERVICE_ID
            || now.saturating_duration_since(self.first) >= LISTENER_WAIT
        {
            self.due = None;
            return None;
        }
        let pause = FIRST_PAUSE
            .saturating_mul(1 << self.repeats.min(8))
            .min(MAX_PAUSE);
        let at = now + pause;
        self.due = Some(at);
        Some(at)
    }

    /// When a new REQ is waiting to go out.
    pub(super) fn due(&self) -> Option<Instant> {
        self.due
    }

    /// The new REQ leaves now.
    pub(super) fn sent(&mut self) {
        self.due = None;
        self.repeats += 1;
    }

    /// REQs sent again so far.
    pub(super) fn repeats(&self) -> u32 {
        self.repeats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use emu_core::cm::PortSpace;
    use emu_core::QpType;
    use wire::roce::Qpn;

    fn attempt(now: Instant) -> ReRequest {
        let params = ConnParams {
            qp_type: QpType::Rc,
            qpn: Qpn(0x11),
            starting_psn: None,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: emu_core::Mtu::Mtu1024,
            srq: false,
            flow_control: true,
            private_data: Vec::new(),
        };
        let route = Route {
            local: "10.212.1.1".parse().unwrap(),
            remote: "10.212.1.2".parse().unwrap(),
            port_space: PortSpace::Tcp,
            src_port: 40000,
            dst_port: 18608,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: None,
        };
        ReRequest::new(params, route, now)
    }

    #[test]
    fn no_listener_yet_sends_the_req_again_with_growing_pauses_until_the_wait_ends() {
        let t0 = Instant::now();
        let mut r = attempt(t0);
        let mut now = t0 + Duration::from_millis(2);
        let mut pauses = Vec::new();
        while let Some(at) = r.rejected(now, reason::INVALID_SERVICE_ID) {
            assert_eq!(r.due(), Some(at));
            pauses.push((at - now).as_millis());
            r.sent();
            assert_eq!(r.due(), None);
            // The peer answers each REQ 2 ms later, still not listening.
            now = at + Duration::from_millis(2);
        }
        assert_eq!(&pauses[..5], &[10, 20, 40, 80, 100]);
        assert!(pauses[5..].iter().all(|&p| p == 100), "{pauses:?}");
        // Every REJ within the wait led to another REQ, the first one after it did not.
        assert!(now >= t0 + LISTENER_WAIT);
        assert!(now < t0 + LISTENER_WAIT + MAX_PAUSE + Duration::from_millis(2));
        assert_eq!(r.repeats() as usize, pauses.len());
        assert_eq!(r.due(), None);
    }

    #[test]
    fn other_reject_reasons_reach_the_application_at_once() {
        let t0 = Instant::now();
        for reason in [
            reason::CONSUMER_DEFINED,
            reason::STALE_CONN,
            reason::TIMEOUT,
            reason::INVALID_COMM_ID,
        ] {
            let mut r = attempt(t0);
            assert_eq!(r.rejected(t0 + Duration::from_millis(1), reason), None);
            assert_eq!(r.repeats(), 0);
        }
    }

    #[test]
    fn a_listener_missing_after_the_wait_is_final() {
        let t0 = Instant::now();
        let mut r = attempt(t0);
        assert_eq!(
            r.rejected(t0 + LISTENER_WAIT, reason::INVALID_SERVICE_ID),
            None
        );
        assert_eq!(r.due(), None);
    }
}

//! The reaction point at work on the device's QPs: a CNP cuts a QP's rate, its timers
//! raise it again, and its requests wait for their pace. The algorithm itself is in
//! `dcqcn.rs`; these handlers take the parameters, the QPs and the objects they touch.

use std::time::Instant;

use crate::dcqcn::{DcqcnParams, ReactionPoint};
use crate::objects::Objects;
use crate::qp::Qp;
use crate::timers::TimerKind;
use crate::types::U32Map;

/// A CNP for connected QP `qpn` arrived (RoCE v2 Annex A17.9.3): DCQCN cuts its rate,
/// or, with DCQCN off, it is counted and ignored.
pub(crate) fn handle_cnp(
    p: DcqcnParams,
    now: Instant,
    qpn: u32,
    qps: &mut U32Map<Qp>,
    o: &mut Objects,
) {
    let Some(qp) = qps.get_mut(&qpn) else {
        return;
    };
    if !p.enabled {
        o.counters.rp_cnp_ignored += 1;
        qp.counters.rp_cnp_ignored += 1;
        return;
    }
    o.counters.rp_cnp_handled += 1;
    qp.counters.rp_cnp_handled += 1;
    if qp.rp.is_none() {
        let start = match p.max_rate_mbps {
            0 => qp.tx_meter.rate(now),
            m => DcqcnParams::bps(m),
        };
        if start == 0 {
            // Nothing sent lately to slow down.
            return;
        }
        qp.rp = Some(Box::new(ReactionPoint::new(&p, now, start)));
    }
    let Some(rp) = qp.rp.as_mut() else {
        return;
    };
    if rp.on_cnp(&p, now) {
        o.counters.rp_rate_cuts += 1;
        qp.counters.rp_rate_cuts += 1;
        tracing::debug!(qpn, rate = rp.rc, alpha = rp.alpha, "DCQCN rate cut");
    }
    // Both increase sources and α's period restart from the cut (the paper's RP).
    o.timers
        .set(qpn, TimerKind::DcqcnRate, now + p.time_reset());
    if !o.timers.is_set(qpn, TimerKind::DcqcnAlpha) {
        o.timers
            .set(qpn, TimerKind::DcqcnAlpha, now + p.alpha_period());
    }
}

/// A reaction point timer fired.
pub(crate) fn timer(
    p: DcqcnParams,
    now: Instant,
    qpn: u32,
    kind: TimerKind,
    qps: &mut U32Map<Qp>,
    o: &mut Objects,
) {
    let Some(qp) = qps.get_mut(&qpn) else {
        return;
    };
    let Some(rp) = qp.rp.as_mut() else {
        return;
    };
    match kind {
        TimerKind::Pace => {
            o.schedule(qp);
            return;
        }
        TimerKind::DcqcnAlpha => {
            rp.on_alpha_timer(&p);
            o.timers
                .set(qpn, TimerKind::DcqcnAlpha, now + p.alpha_period());
        }
        _ => {
            rp.on_rate_timer(&p);
            o.timers
                .set(qpn, TimerKind::DcqcnRate, now + p.time_reset());
        }
    }
    if rp.recovered() {
        tracing::debug!(qpn, "DCQCN rate recovered: unpaced");
        qp.rp = None;
        o.timers.cancel_dcqcn(qpn);
        o.schedule(qp);
    }
}

/// Whether QP `qpn`'s next request packet must wait for its pace; if so the pace timer
/// is armed for when it is due.
pub(crate) fn paced_out(now: Instant, qpn: u32, qp: &mut Qp, o: &mut Objects) -> bool {
    let Some(due) = qp.rp.as_ref().map(|rp| rp.next_send) else {
        return false;
    };
    if due <= now || qp.conn.as_ref().is_some_and(|c| !c.resp.out.is_empty()) {
        // Due, or a response waits: responses are not paced.
        return false;
    }
    o.counters.rp_paced_holds += 1;
    qp.counters.rp_paced_holds += 1;
    o.timers.set(qpn, TimerKind::Pace, due);
    true
}

/// A request packet of `bytes` left QP `qpn`: metered, and paced when slowed down.
pub(crate) fn request_sent(
    p: DcqcnParams,
    now: Instant,
    qpn: u32,
    bytes: usize,
    qps: &mut U32Map<Qp>,
) {
    if let Some(qp) = qps.get_mut(&qpn) {
        qp.tx_meter.sent(now, bytes);
        if let Some(rp) = qp.rp.as_mut() {
            rp.on_sent(&p, now, bytes);
        }
    }
}

//! The completer (IBA 9.7.5.2): ACK/NAK handling, READ responses and atomic ACKs, the
//! local ACK timeout, RNR waits, go-back-N, in-order retirement, the error state and
//! flushing.

use std::time::Instant;

use wire::roce::{NakCode, Psn, Response, Syndrome};

use crate::attr::*;
use crate::memory::Memory;
use crate::objects::Objects;
use crate::pfc::TxPause;
use crate::qp::*;
use crate::timers::TimerKind;
use crate::types::*;
use wire::roce::Qpn;

use crate::dma::{place_read, scatter};

/// How far behind the oldest unacknowledged PSN a READ response may be and still count as
/// the answer to one of our retransmissions (older ones are dropped without effect).
const DUPLICATE_WINDOW: i32 = 1 << 22;

/// What the completer touches: the QPs and the objects their completions, events and
/// timers go to. Retiring a WR and moving a QP to the error state live here, as every
/// part that finishes a WR or fails a QP needs them.
#[derive(Debug)]
pub(crate) struct Completer<'a> {
    pub o: &'a mut Objects,
    pub qps: &'a mut U32Map<Qp>,
}

impl Completer<'_> {
    /// Retires finished WRs from the front of the send queue in order, reporting their
    /// completions; an error status moves the QP to the error state.
    pub(crate) fn retire(&mut self, qpn: u32) {
        let mut error = false;
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        while let Some(status) = qp.sq.front().and_then(|w| w.done) {
            let Some(w) = qp.sq.pop_front() else { break };
            if let Some(r) = qp.conn.as_mut().and_then(|c| c.req.as_mut()) {
                // A go-back may have left the cursor inside this WR (an ACK that came
                // behind a sequence NAK completed it): the next WR starts at its first
                // packet, not at the retired WR's packet offset.
                r.cursor = match r.cursor {
                    (0, _) => (0, 0),
                    (i, pkt) => (i - 1, pkt),
                };
            }
            if w.signaled || status != WcStatus::Success {
                let wc = WorkCompletion {
                    wr_id: w.wr.wr_id,
                    status,
                    opcode: w.wr.opcode.wc_opcode(),
                    byte_len: if status == WcStatus::Success {
                        w.len
                    } else {
                        0
                    },
                    qp_num: qp.qpn,
                    ..WorkCompletion::default()
                };
                self.o.push_wc(qp.init.send_cq, wc);
            }
            if status != WcStatus::Success {
                error = true;
                break;
            }
        }
        if qp.state == QpState::Sqd
            && qp.attr.en_sqd_async_notify
            && qp.sq.iter().all(|w| w.first_psn.is_none())
        {
            // Drained: raise SQ_DRAINED once.
            qp.attr.en_sqd_async_notify = false;
            self.o
                .events
                .push_back((qp.owner, AsyncEvent::SqDrained(qp.qpn)));
        }
        if error {
            self.enter_error(Qpn(qpn));
        } else if let Some(qp) = self.qps.get_mut(&qpn) {
            self.o.schedule(qp);
        }
    }

    /// Moves a QP to the error state and flushes every outstanding WR exactly once.
    pub(crate) fn enter_error(&mut self, qpn: Qpn) {
        let Some(qp) = self.qps.get_mut(&qpn.0) else {
            return;
        };
        if qp.state == QpState::Err {
            return;
        }
        qp.state = QpState::Err;
        qp.rp = None;
        self.o.timers.cancel_qp(qpn.0);
        if qp.init.srq.is_some() {
            self.o
                .events
                .push_back((qp.owner, AsyncEvent::QpLastWqeReached(qpn)));
        }
        self.flush(qpn);
    }

    /// Completes every queued WR of a QP in the error state with WR_FLUSH_ERR.
    pub(crate) fn flush(&mut self, qpn: Qpn) {
        let Some(qp) = self.qps.get_mut(&qpn.0) else {
            return;
        };
        let mut wcs = Vec::new();
        for w in qp.sq.drain(..) {
            // Completions are reported in order (IBA ch. 10): after an error every WR still
            // queued completes with a flush
            // error, even one the peer already executed.
            let status = match w.done {
                Some(s) if s != WcStatus::Success => s,
                _ => WcStatus::WrFlushErr,
            };
            wcs.push((
                qp.init.send_cq,
                WorkCompletion {
                    wr_id: w.wr.wr_id,
                    status,
                    opcode: w.wr.opcode.wc_opcode(),
                    qp_num: qpn,
                    ..WorkCompletion::default()
                },
            ));
        }
        if let Some(c) = qp.conn.as_mut() {
            c.resp.out.clear();
            if let Some(InProgress::Send { rwqe, .. }) = c.resp.cur.take() {
                qp.rq.push_front(rwqe);
            }
            if let Some(r) = c.req.as_mut() {
                r.cursor = (0, 0);
            }
        }
        for r in qp.rq.drain(..) {
            wcs.push((
                qp.init.recv_cq,
                WorkCompletion {
                    wr_id: r.wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: WcOpcode::Recv,
                    qp_num: qpn,
                    ..WorkCompletion::default()
                },
            ));
        }
        for (cq, wc) in wcs {
            self.o.push_wc(cq, wc);
        }
    }

    pub(crate) fn requester_mut(&mut self, qpn: u32) -> Option<&mut Requester> {
        self.qps.get_mut(&qpn)?.conn.as_mut()?.req.as_mut()
    }

    /// The local ACK timer of `qpn` ran out: retry from the oldest unacknowledged PSN, or
    /// fail the WR when the retries are spent; not while `pfc` pauses the QP's priority.
    pub(crate) fn ack_timeout(&mut self, now: Instant, qpn: u32, pfc: &TxPause) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let Some(req) = qp.conn.as_mut().and_then(|c| c.req.as_mut()) else {
            return;
        };
        if req.una == req.next_psn {
            return;
        }
        if let Some(t) = req.ack_timeout {
            if pfc.ack_timeout_paused(now, qpn, t, self.qps, &mut self.o.timers) {
                return;
            }
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let Some(req) = qp.conn.as_mut().and_then(|c| c.req.as_mut()) else {
            return;
        };
        tracing::debug!(
            qpn,
            psn = req.una.value(),
            next = req.next_psn.value(),
            "ACK timeout"
        );
        self.o.counters.ack_timeouts += 1;
        qp.counters.ack_timeouts += 1;
        if req.retry_left == 0 {
            self.o.counters.retry_exceeded += 1;
            qp.counters.retry_exceeded += 1;
            if let Some(w) = qp.sq.iter_mut().find(|w| w.done.is_none()) {
                w.done = Some(WcStatus::RetryExcErr);
            }
            self.retire(qpn);
            return;
        }
        req.retry_left -= 1;
        req.retried_at = Some(req.una);
        self.go_back(now, qpn);
    }

    /// Go-back-N: the next packet sent is the oldest unacknowledged one.
    pub(crate) fn go_back(&mut self, now: Instant, qpn: u32) {
        let _ = now;
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let Some(req) = qp.conn.as_mut().and_then(|c| c.req.as_mut()) else {
            return;
        };
        let una = req.una;
        let mut cursor = (qp.sq.len(), 0);
        for (i, w) in qp.sq.iter().enumerate() {
            match w.first_psn {
                Some(f) if w.done.is_none() => {
                    let d = una.distance(f);
                    if d >= 0 && (d as u32) < w.npkts {
                        cursor = (i, d as u32);
                        break;
                    }
                    if d < 0 {
                        cursor = (i, 0);
                        break;
                    }
                }
                None => {
                    cursor = (i, 0);
                    break;
                }
                _ => {}
            }
        }
        if cursor != req.cursor {
            self.o.counters.retransmitted_pkts += 1;
            qp.counters.retransmitted_pkts += 1;
        }
        req.cursor = cursor;
        self.o.schedule(qp);
    }

    /// Acknowledges every PSN up to and including `a`; returns whether `una` moved.
    fn ack_upto(&mut self, now: Instant, qpn: u32, a: Psn) -> bool {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return false;
        };
        let Some(req) = qp.conn.as_mut().and_then(|c| c.req.as_mut()) else {
            return false;
        };
        // Only PSNs in [una - 1, next_psn - 1] mean anything.
        if a.distance(req.una) < -1 || a.distance(req.next_psn) >= 0 {
            return false;
        }
        let mut new_una = a.wrapping_add(1);
        let mut gap = false;
        for w in qp.sq.iter_mut() {
            let (Some(first), Some(last)) = (w.first_psn, w.last_psn()) else {
                break;
            };
            if a.is_before(first) {
                break;
            }
            if w.done.is_none() && w.is_rd_atomic() {
                // Only responses complete a READ/atomic; `una` stays where they stopped.
                let d = req.una.distance(first);
                new_una = if d >= 0 && (d as u32) < w.npkts {
                    req.una
                } else {
                    first
                };
                // Acked past it: its responses were lost.
                gap = !a.is_before(last);
                break;
            }
            if a.is_before(last) {
                break;
            }
            if w.done.is_none() {
                w.done = Some(WcStatus::Success);
            }
        }
        let moved = new_una.distance(req.una) > 0;
        if moved {
            req.una = new_una;
        }
        if gap && req.gap_retried_at != Some(req.una) {
            req.gap_retried_at = Some(req.una);
            self.progress(now, qpn, moved);
            self.go_back(now, qpn);
        } else {
            self.progress(now, qpn, moved);
        }
        self.retire(qpn);
        moved
    }

    /// After `una` moved: reset the retry counters and the ACK timer.
    fn progress(&mut self, now: Instant, qpn: u32, moved: bool) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let (retry, rnr) = (qp.attr.retry_cnt, qp.attr.rnr_retry);
        let Some(req) = qp.conn.as_mut().and_then(|c| c.req.as_mut()) else {
            return;
        };
        if moved {
            req.retry_left = retry;
            req.rnr_left = rnr;
            req.retried_at = None;
            if req.una == req.next_psn {
                self.o.timers.cancel(qpn, TimerKind::Retransmit);
            } else if let Some(t) = req.ack_timeout {
                self.o.timers.set(qpn, TimerKind::Retransmit, now + t);
            }
        }
    }

    pub(crate) fn handle_response(
        &mut self,
        now: Instant,
        qpn: u32,
        psn: Psn,
        r: &Response,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) {
        if self.requester_mut(qpn).is_none() {
            return;
        }
        match r {
            Response::Ack(aeth) => match aeth.syndrome {
                Syndrome::Ack(_) => {
                    self.ack_upto(now, qpn, psn);
                }
                Syndrome::RnrNak(t) => {
                    self.ack_upto(now, qpn, psn.wrapping_sub(1));
                    self.o.counters.rnr_naks_rcvd += 1;
                    let Some(qp) = self.qps.get_mut(&qpn) else {
                        return;
                    };
                    qp.counters.rnr_naks_rcvd += 1;
                    let infinite = qp.attr.rnr_retry == 7;
                    let Some(req) = qp.conn.as_mut().and_then(|c| c.req.as_mut()) else {
                        return;
                    };
                    if req.una != psn {
                        return;
                    }
                    if req.rnr_left == 0 {
                        self.o.counters.rnr_retry_exceeded += 1;
                        if let Some(w) = qp.sq.iter_mut().find(|w| w.done.is_none()) {
                            w.done = Some(WcStatus::RnrRetryExcErr);
                        }
                        self.retire(qpn);
                        return;
                    }
                    if !infinite {
                        req.rnr_left -= 1;
                    }
                    req.rnr_waiting = true;
                    self.o.timers.cancel(qpn, TimerKind::Retransmit);
                    self.o
                        .timers
                        .set(qpn, TimerKind::RnrWait, now + t.duration());
                }
                Syndrome::Nak(code) => {
                    let moved = self.ack_upto(now, qpn, psn.wrapping_sub(1));
                    let Some(qp) = self.qps.get_mut(&qpn) else {
                        return;
                    };
                    let Some(req) = qp.conn.as_mut().and_then(|c| c.req.as_mut()) else {
                        return;
                    };
                    if req.una != psn {
                        return;
                    }
                    let status = match code {
                        NakCode::PsnSequenceError => {
                            self.o.counters.seq_naks_rcvd += 1;
                            qp.counters.seq_naks_rcvd += 1;
                            if !moved && req.retried_at == Some(psn) {
                                // Already going back from here: a duplicate NAK.
                                return;
                            }
                            if !moved && req.retry_left == 0 {
                                WcStatus::RetryExcErr
                            } else {
                                if !moved {
                                    req.retry_left -= 1;
                                }
                                req.retried_at = Some(psn);
                                self.go_back(now, qpn);
                                return;
                            }
                        }
                        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                        _ => WcStatus::RemOpErr,
                    };
                    if let Some(w) = qp.sq.iter_mut().find(|w| w.done.is_none()) {
                        w.done = Some(status);
                    }
                    self.retire(qpn);
                }
            },
            Response::ReadResponse(seg) => {
                self.ack_upto(now, qpn, psn.wrapping_sub(1));
                let _ = seg;
                self.read_response(now, qpn, psn, payload, mem);
            }
            Response::AtomicAck(_, orig) => {
                self.ack_upto(now, qpn, psn.wrapping_sub(1));
                let Some(qp) = self.qps.get_mut(&qpn) else {
                    return;
                };
                let pd = qp.init.pd;
                let Some(i) = qp.sq.iter().position(|w| w.done.is_none()) else {
                    return;
                };
                let w = &qp.sq[i];
                if !matches!(
                    w.wr.opcode,
                    WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
                ) || w.first_psn != Some(psn)
                {
                    return;
                }
                let status = match scatter(
                    &self.o.keys,
                    pd,
                    &w.wr.sg_list,
                    0,
                    &orig.orig_data.to_le_bytes(),
                    mem,
                ) {
                    Ok(()) => WcStatus::Success,
                    Err(s) => s,
                };
                let qp = self.qps.get_mut(&qpn).expect("present");
                qp.sq[i].done = Some(status);
                if let Some(req) = qp.conn.as_mut().and_then(|c| c.req.as_mut()) {
                    req.una = psn.wrapping_add(1);
                }
                self.progress(now, qpn, true);
                self.retire(qpn);
            }
        }
    }

    fn read_response(
        &mut self,
        now: Instant,
        qpn: u32,
        psn: Psn,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let pd = qp.init.pd;
        let Some(conn) = qp.conn.as_mut() else { return };
        let mtu = conn.mtu;
        let Some(req) = conn.req.as_mut() else { return };
        let Some(i) = qp.sq.iter().position(|w| w.done.is_none()) else {
            return;
        };
        let w = &qp.sq[i];
        let Some(first) = w.first_psn else { return };
        let placement = matches!(w.wr.opcode, WrOpcode::Flush | WrOpcode::AtomicWrite);
        if placement && psn == first && payload.is_empty() {
            // A FLUSH or ATOMIC WRITE answered with a zero-length READ response, as
            // Linux's rxe answers both (`send_read_response_ack`, seen from 6.12 in the
            // interop suite): as good as the ACK ours send.
            req.una = psn.wrapping_add(1);
            qp.sq[i].done = Some(WcStatus::Success);
            self.progress(now, qpn, true);
            self.retire(qpn);
            return;
        }
        if w.wr.opcode != WrOpcode::RdmaRead {
            return;
        }
        let idx = psn.distance(first);
        let expected = req.una;
        if psn.is_before(expected) && expected.distance(psn) < DUPLICATE_WINDOW {
            // The answer to a READ we re-sent after it had been answered: the responder
            // is alive but slow, still working through our retransmissions (it must
            // execute every duplicate READ again). Re-sending the whole window once more
            // on the next timeout would only lengthen its backlog (docs/interop.md,
            // "Findings"), so the ACK timer starts over; the retry budget is kept.
            self.o.counters.duplicate_responses += 1;
            qp.counters.duplicate_responses += 1;
            if let Some(t) = req.ack_timeout {
                self.o.timers.set(qpn, TimerKind::Retransmit, now + t);
            }
            return;
        }
        if psn != expected || idx < 0 || idx as u32 >= w.npkts {
            if expected.is_before(psn) && req.gap_retried_at != Some(expected) {
                // A lost READ response: ask again from the first missing one.
                req.gap_retried_at = Some(expected);
                self.go_back(now, qpn);
            }
            return;
        }
        let idx = idx as u32;
        let off = idx * mtu;
        let want = w.len.saturating_sub(off).min(mtu);
        let last = idx + 1 == w.npkts;
        let status = if payload.len() as u32 != want {
            Some(WcStatus::BadRespErr)
        } else {
            let held = &mut req.read_held;
            place_read(&self.o.keys, pd, w, held, off, payload, last, mem).err()
        };
        let qp = self.qps.get_mut(&qpn).expect("present");
        if let Some(s) = status {
            qp.sq[i].done = Some(s);
        } else if last {
            qp.sq[i].done = Some(WcStatus::Success);
        }
        if let Some(req) = qp.conn.as_mut().and_then(|c| c.req.as_mut()) {
            req.una = psn.wrapping_add(1);
        }
        self.progress(now, qpn, true);
        self.retire(qpn);
    }
}

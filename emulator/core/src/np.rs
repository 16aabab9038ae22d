//! The notification point of RoCE v2 congestion control (Annex A17.9.3): a datagram that
//! arrives marked Congestion Experienced is answered with a CNP to the QP that sent it,
//! at most one per local QP per CNP interval.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use wire::roce::{bth, Body, Header, Opcode, Psn, Qpn, ICRC_LEN};

use crate::attr::{Counters, Datagram, Transmit, CNP_DSCP};
use crate::qp::{Path, Qp};
use crate::types::{QpType, U32Map};

/// The notification point's default CNP interval per QP, as ConnectX's `min_time_between_cnps`.
pub const CNP_INTERVAL: Duration = Duration::from_micros(50);

/// CNPs owed and how they leave.
#[derive(Debug)]
pub(crate) struct NotificationPoint {
    /// CNPs waiting to leave: the path of the QP whose traffic was marked, and its peer QP.
    out: VecDeque<(Path, Qpn)>,
    /// At most one CNP per QP per this interval.
    pub interval: Duration,
    /// The DSCP CNPs leave with, whatever the notified QP's traffic class.
    pub dscp: u8,
}

impl Default for NotificationPoint {
    fn default() -> Self {
        NotificationPoint {
            out: VecDeque::new(),
            interval: CNP_INTERVAL,
            dscp: CNP_DSCP,
        }
    }
}

impl NotificationPoint {
    /// Datagram `d` arrived marked CE: queues a CNP for the connected QP (RC, UC) it was
    /// addressed to, unless that QP had one less than the interval ago.
    pub fn marked(
        &mut self,
        now: Instant,
        d: &Datagram<'_>,
        qps: &mut U32Map<Qp>,
        counters: &mut Counters,
    ) {
        let Ok(bth) = bth::Packet::new_checked(d.payload) else {
            return;
        };
        if bth.opcode() == Opcode::CNP {
            return;
        }
        let Some(qp) = qps.get_mut(&bth.dest_qp().0) else {
            return;
        };
        let Some(conn) = qp.conn.as_deref() else {
            return;
        };
        let Some(path) = conn.path.filter(|_| qp.qp_type != QpType::Ud) else {
            return;
        };
        counters.np_ecn_marked += 1;
        qp.counters.np_ecn_marked += 1;
        if qp
            .last_cnp
            .is_some_and(|t| now.saturating_duration_since(t) < self.interval)
        {
            return;
        }
        qp.last_cnp = Some(now);
        counters.np_cnp_sent += 1;
        qp.counters.np_cnp_sent += 1;
        self.out.push_back((path, conn.dest_qpn));
    }

    /// Writes the next waiting CNP into `buf` (its ICRC left to the caller).
    pub fn transmit(&mut self, buf: &mut Vec<u8>, counters: &mut Counters) -> Option<Transmit> {
        let (path, dest) = self.out.pop_front()?;
        let body = Body::Cnp;
        let total = body.header_len() + ICRC_LEN;
        buf.clear();
        buf.resize(total, 0);
        let mut header = Header::new(dest, Psn::new(0));
        header.becn = true;
        wire::roce::packet::emit_headers(&header, &body, 0, buf);
        counters.sent_pkts += 1;
        Some(Transmit {
            src: path.src,
            dst: path.dst,
            len: total,
            traffic_class: self.dscp << 2,
        })
    }
}

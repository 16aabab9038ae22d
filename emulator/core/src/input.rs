//! Datagram input: ICRC check (any-ID solver for IPv4, counted), parsing, dispatch to
//! the responder or the completer.

use std::net::SocketAddr;
use std::time::Instant;

use wire::roce::{icrc, Body, Packet, PacketRepr};

use crate::attr::*;
use crate::device::Device;
use crate::memory::Memory;
use crate::types::*;

impl Device {
    /// Dispatches one received RoCE v2 datagram (BTH through ICRC).
    pub fn handle_datagram(&mut self, now: Instant, d: &Datagram<'_>, mem: &mut dyn Memory) {
        let ok = match (d.src, d.dst) {
            (SocketAddr::V4(s), SocketAddr::V4(t)) => {
                match icrc::verify_udp4_any_id(*s.ip(), *t.ip(), s.port(), t.port(), d.payload) {
                    icrc::IcrcCheck::Valid => true,
                    icrc::IcrcCheck::ValidWithSolvedId(_) => {
                        self.o.counters.icrc_solved_id += 1;
                        true
                    }
                    icrc::IcrcCheck::Invalid => false,
                }
            }
            (SocketAddr::V6(s), SocketAddr::V6(t)) => {
                icrc::verify_udp6(*s.ip(), *t.ip(), s.port(), t.port(), d.payload)
            }
            _ => false,
        };
        if !ok {
            self.o.counters.icrc_errors += 1;
            return;
        }
        let Ok(p) = Packet::new_checked(d.payload) else {
            self.o.counters.malformed += 1;
            return;
        };
        let Ok(repr) = PacketRepr::parse(&p) else {
            self.o.counters.malformed += 1;
            return;
        };
        self.handle_packet(now, d, &repr, mem);
    }

    fn handle_packet(
        &mut self,
        now: Instant,
        d: &Datagram<'_>,
        repr: &PacketRepr<'_>,
        mem: &mut dyn Memory,
    ) {
        let qpn = repr.header.dest_qp.0;
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.o.counters.unknown_qp += 1;
            return;
        };
        let type_ok = matches!(
            (qp.qp_type, &repr.body),
            (QpType::Rc, Body::RcRequest(_) | Body::RcResponse(_))
                | (QpType::Uc, Body::Uc(_))
                | (QpType::Ud, Body::Ud { .. })
        );
        if !type_ok
            || !matches!(
                qp.state,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            )
        {
            self.o.counters.unknown_qp += 1;
            qp.counters.unknown_qp += 1;
            return;
        }
        self.o.counters.rcvd_pkts += 1;
        qp.counters.rcvd_pkts += 1;
        if qp.state == QpState::Rtr {
            if let Some(c) = qp.conn.as_mut() {
                if !c.resp.comm_est {
                    c.resp.comm_est = true;
                    self.o
                        .events
                        .push_back((qp.owner, AsyncEvent::CommEst(qp.qpn)));
                }
            }
        }
        match repr.body {
            Body::RcResponse(r) => {
                self.handle_response(now, qpn, repr.header.psn, &r, repr.payload, mem)
            }
            _ => self.handle_request(now, qpn, d, repr, mem),
        }
        if let Some(qp) = self.qps.get_mut(&qpn) {
            self.o.schedule(qp);
        }
    }
}

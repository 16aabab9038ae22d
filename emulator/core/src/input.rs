//! Datagram input: ICRC check (any-ID solver for IPv4, counted), parsing, dispatch to
//! the responder or the completer.

use crate::addr::canonical;
use std::net::SocketAddr;
use std::time::Instant;

use wire::roce::{icrc, Body, Packet, PacketRepr};

use crate::attr::*;
use crate::completer::Completer;
use crate::dcqcn::DcqcnParams;
use crate::mcast::{Groups, MULTICAST_QPN};
use crate::memory::Memory;
use crate::objects::Objects;
use crate::qp::Qp;
use crate::reaction;
use crate::responder::{ForcedResponse, ResponderParts};
use crate::types::*;

/// What received packets touch: the QPs and objects, the GIDs the ICRC is checked
/// against, the multicast groups, the forced response and the reaction point.
#[derive(Debug)]
pub(crate) struct InputParts<'a> {
    pub cfg: &'a DeviceConfig,
    pub o: &'a mut Objects,
    pub qps: &'a mut U32Map<Qp>,
    pub mcast: &'a Groups,
    pub forced: &'a mut Option<(u32, ForcedResponse)>,
    pub dcqcn: &'a DcqcnParams,
}

impl InputParts<'_> {
    fn responder(&mut self) -> ResponderParts<'_> {
        ResponderParts {
            o: self.o,
            qps: self.qps,
            forced: self.forced,
        }
    }

    /// Dispatches one received RoCE v2 datagram (BTH through ICRC).
    ///
    /// `d.dst` should carry the local IP the packet arrived on (`IP_PKTINFO`); when it is
    /// unspecified, each local GID of the same family is tried. IPv4-mapped IPv6 socket
    /// addresses count as IPv4. Packets whose ICRC does not verify are dropped and counted;
    /// without `sealed` (a packet of our own that never left) there is none to verify.
    pub(crate) fn handle_datagram(
        &mut self,
        now: Instant,
        d: &Datagram<'_>,
        sealed: bool,
        mem: &mut dyn Memory,
    ) {
        let src = canonical(d.src);
        let dst = canonical(d.dst);
        let ok = if !sealed {
            true
        } else if dst.ip().is_unspecified() {
            let candidates: Vec<SocketAddr> = self
                .cfg
                .gids
                .iter()
                .filter(|g| !g.is_zero())
                .map(|g| SocketAddr::new(g.to_ip(), dst.port()))
                .filter(|a| a.is_ipv4() == src.is_ipv4())
                .collect();
            candidates
                .into_iter()
                .any(|t| self.check_icrc(src, t, d.payload))
        } else {
            self.check_icrc(src, dst, d.payload)
        };
        let d = &Datagram {
            src,
            dst,
            payload: d.payload,
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

    fn check_icrc(&mut self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> bool {
        match (src, dst) {
            (SocketAddr::V4(s), SocketAddr::V4(t)) => {
                match icrc::verify_udp4_any_id(*s.ip(), *t.ip(), s.port(), t.port(), payload) {
                    icrc::IcrcCheck::Valid => true,
                    icrc::IcrcCheck::ValidWithSolvedId(_) => {
                        self.o.counters.icrc_solved_id += 1;
                        true
                    }
                    icrc::IcrcCheck::Invalid => false,
                }
            }
            (SocketAddr::V6(s), SocketAddr::V6(t)) => {
                icrc::verify_udp6(*s.ip(), *t.ip(), s.port(), t.port(), payload)
            }
            _ => false,
        }
    }

    fn handle_packet(
        &mut self,
        now: Instant,
        d: &Datagram<'_>,
        repr: &PacketRepr<'_>,
        mem: &mut dyn Memory,
    ) {
        let qpn = repr.header.dest_qp.0;
        if qpn == MULTICAST_QPN {
            let mut rx = ResponderParts {
                o: self.o,
                qps: self.qps,
                forced: self.forced,
            };
            self.mcast.handle_mcast(&mut rx, d, repr, mem);
            return;
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.o.counters.unknown_qp += 1;
            return;
        };
        if matches!(repr.body, Body::Cnp) && qp.qp_type != QpType::Ud {
            reaction::handle_cnp(*self.dcqcn, now, qpn, self.qps, self.o);
            return;
        }
        let type_ok = matches!(
            (qp.qp_type, &repr.body),
            (QpType::Rc, Body::RcRequest(_) | Body::RcResponse(_))
                | (QpType::Uc, Body::Uc(_))
                | (QpType::Ud, Body::Ud { .. })
                | (QpType::XrcSend, Body::XrcResponse(_))
                | (QpType::XrcRecv, Body::XrcRequest { .. })
        );
        // A transport the QP does not serve (an XRC opcode on an RC QP, an RC one on an XRC
        // half, a response at a target) is silently dropped (IBA 9.6.1.5), counted.
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
            Body::RcResponse(r) | Body::XrcResponse(r) => Completer {
                o: self.o,
                qps: self.qps,
            }
            .handle_response(now, qpn, repr.header.psn, &r, repr.payload, mem),
            _ => self.responder().handle_request(now, qpn, d, repr, mem),
        }
        if let Some(qp) = self.qps.get_mut(&qpn) {
            self.o.schedule(qp);
        }
    }
}

//! MPA connection setup (RFC 5044 §7, with the RFC 6581 enhancements): the Request and
//! Reply a [`Connection`] emits, the responder's accept and reject, the initiator's reading
//! of the Reply, the negotiated parameters that switch the stream to full operation, and
//! the MULPDU the negotiated framing allows (RFC 5044 §4.1). Before full operation a
//! connection exchanges nothing else; afterwards this file is not entered again.

use wire::iwarp::fpdu::FpduConfig;
use wire::iwarp::mpa::{IrdOrd, MpaFrameKind, MpaRepr, MpaRevision, MAX_PRIVATE_DATA};
use wire::iwarp::{Error as WireError, TerminateError};

use super::config::{IwarpEvent, MpaOffer, Negotiated, Role, RtrKind, RtrOffer};
use super::conn::{Connection, Phase};
use super::ext::EXT_FLAG;
use crate::types::Errno;

/// The reserved MPA flag bit Linux siw and Chelsio set in revision 2 frames
/// (`MPA_RR_FLAG_ENHANCED`): siw ignores the IRD/ORD word without it and refuses a
/// revision 2 Reply that lacks it.
pub(super) const ENHANCED_FLAG: u8 = 0x10;
/// The largest IRD a responder offers to match the initiator's ORD (rxe's and this
/// device's `max_qp_rd_atom`).
const MAX_IRD: u16 = 128;

/// The largest MULPDU (Maximum ULPDU) for an effective MSS of `emss` octets
/// (RFC 5044 §4.1: `EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)` with
/// markers, `EMSS - (6 + EMSS mod 4)` without), capped so the ULPDU_Length field holds
/// it and never below 64.
pub fn mulpdu(emss: u32, markers: bool) -> usize {
    let emss = u64::from(emss);
    let overhead = if markers {
        6 + 4 * emss.div_ceil(512) + emss % 4
    } else {
        6 + emss % 4
    };
    (emss.saturating_sub(overhead) as usize).clamp(64, 65532)
}

impl Connection {
    pub(super) fn emit_mpa(&mut self, repr: MpaRepr<'_>) {
        let at = self.out.len();
        self.out.resize(at + repr.buffer_len(), 0);
        repr.emit(&mut self.out[at..]);
    }

    /// Responder: accepts the MPA Request with `private_data` in the Reply.
    ///
    /// Errors: EINVAL when no Request is pending or the private data is too long.
    pub fn accept(&mut self, private_data: &[u8]) -> Result<(), Errno> {
        let offer = match (&self.phase, &self.offer) {
            (Phase::RequestPending, Some(o)) => o.clone(),
            _ => return Err(Errno::EINVAL),
        };
        let use_v2 = offer.ird_ord.is_some() && self.cfg.revision >= 2;
        if private_data.len() + if use_v2 { 4 } else { 0 } > MAX_PRIVATE_DATA {
            return Err(Errno::EINVAL);
        }
        // RFC 5044 §7.1: CRCs if either side asks; markers toward whoever asked.
        let crc = self.cfg.crc || offer.crc;
        let ext = self.cfg.extensions && offer.reserved_flags & EXT_FLAG != 0;
        let mut rtr = None;
        let rev = match offer.ird_ord {
            Some(w) if use_v2 => {
                // RFC 6581 §5: answer with our IRD and an ORD the initiator's IRD allows.
                // Like siw: our IRD covers the initiator's ORD (siw's initiator
                // terminates with "insufficient IRD" otherwise).
                self.ord = self.cfg.ord.min(w.ird);
                self.ird = self.cfg.ird.max(w.ord.min(MAX_IRD));
                if w.peer_to_peer && self.cfg.peer_to_peer {
                    rtr = RtrOffer {
                        send: w.rtr_send,
                        write: w.rtr_write,
                        read: w.rtr_read,
                    }
                    .pick(self.cfg.rtr);
                }
                MpaRevision::V2(IrdOrd {
                    ird: self.ird,
                    ord: self.ord,
                    peer_to_peer: rtr.is_some(),
                    rtr_send: rtr == Some(RtrKind::Send),
                    rtr_write: rtr == Some(RtrKind::Write),
                    rtr_read: rtr == Some(RtrKind::Read),
                })
            }
            _ => MpaRevision::V1,
        };
        self.emit_mpa(MpaRepr {
            kind: MpaFrameKind::Reply,
            markers: self.cfg.markers,
            crc,
            reject: false,
            reserved_flags: if ext { EXT_FLAG } else { 0 } | if use_v2 { ENHANCED_FLAG } else { 0 },
            revision: rev,
            private_data,
        });
        let neg = Negotiated {
            revision: rev.number(),
            crc,
            markers_tx: offer.markers,
            markers_rx: self.cfg.markers,
            ird: self.ird,
            ord: self.ord,
            rtr,
            extensions: ext,
            private_data: offer.private_data.clone(),
        };
        self.enter_full_operation(neg);
        // RFC 5044 §7.1.3 / RFC 6581 §4: the responder sends nothing until the first
        // FPDU (in peer-to-peer mode, the RTR) arrived.
        self.tx_ready = false;
        self.expect_rtr = rtr;
        Ok(())
    }

    /// Responder: rejects the MPA Request (R bit) with `private_data`; the connection
    /// is then over.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), Errno> {
        let offer = match (&self.phase, &self.offer) {
            (Phase::RequestPending, Some(o)) => o.clone(),
            _ => return Err(Errno::EINVAL),
        };
        let v2 = offer.ird_ord.is_some() && self.cfg.revision >= 2;
        if private_data.len() + if v2 { 4 } else { 0 } > MAX_PRIVATE_DATA {
            return Err(Errno::EINVAL);
        }
        let rev = if v2 {
            MpaRevision::V2(IrdOrd::default())
        } else {
            MpaRevision::V1
        };
        self.emit_mpa(MpaRepr {
            kind: MpaFrameKind::Reply,
            markers: false,
            crc: false,
            reject: true,
            reserved_flags: if v2 { ENHANCED_FLAG } else { 0 },
            revision: rev,
            private_data,
        });
        self.phase = Phase::Closed;
        self.deadline = None;
        self.close_wanted = true;
        self.flush_all();
        self.events.push_back(IwarpEvent::Closed);
        Ok(())
    }

    fn enter_full_operation(&mut self, neg: Negotiated) {
        self.tx_cfg = FpduConfig {
            crc: neg.crc,
            markers: neg.markers_tx,
        };
        if let Some(d) = self.deframer.as_mut() {
            d.set_config(FpduConfig {
                crc: neg.crc,
                markers: neg.markers_rx,
            });
        }
        self.mulpdu = super::mulpdu(self.cfg.mss, neg.markers_tx);
        self.ext = neg.extensions;
        self.phase = Phase::Rts;
        self.deadline = None;
        tracing::debug!(
            qpn = self.cfg.qpn.0,
            revision = neg.revision,
            crc = neg.crc,
            markers_tx = neg.markers_tx,
            markers_rx = neg.markers_rx,
            ird = neg.ird,
            ord = neg.ord,
            rtr = ?neg.rtr,
            extensions = neg.extensions,
            "iwarp: full operation"
        );
        self.neg = Some(neg.clone());
        self.events.push_back(IwarpEvent::Established(neg));
    }

    pub(super) fn on_request(&mut self, offer: MpaOffer) {
        if self.role != Role::Responder || self.phase != Phase::AwaitRequest {
            return;
        }
        self.offer = Some(offer.clone());
        self.phase = Phase::RequestPending;
        self.deadline = None;
        self.events.push_back(IwarpEvent::ConnectRequest(offer));
    }

    pub(super) fn on_reply(&mut self, reply: MpaOffer, reject: bool) {
        if self.phase != Phase::AwaitReply {
            return;
        }
        if reject {
            self.phase = Phase::Closed;
            self.deadline = None;
            self.close_wanted = true;
            self.flush_all();
            self.events.push_back(IwarpEvent::Rejected {
                private_data: reply.private_data,
            });
            self.events.push_back(IwarpEvent::Closed);
            return;
        }
        if reply.revision == 2 && self.cfg.revision < 2 {
            self.mpa_failed(WireError::BadMpaRevision(2));
            return;
        }
        let crc = self.cfg.crc || reply.crc;
        let ext = self.cfg.extensions && reply.reserved_flags & EXT_FLAG != 0;
        let mut rtr = None;
        let mut no_match = false;
        let mut insufficient_ird = false;
        if let Some(w) = reply.ird_ord {
            // RFC 6581 §5: our ORD may not exceed the responder's IRD.
            self.ord = self.cfg.ord.min(w.ird);
            self.ird = self.cfg.ird;
            // RFC 6581 §5 / siw: the responder's ORD must fit our IRD.
            insufficient_ird = w.ord > self.ird;
            if self.cfg.peer_to_peer && w.peer_to_peer {
                let picked = RtrOffer {
                    send: w.rtr_send,
                    write: w.rtr_write,
                    read: w.rtr_read,
                };
                rtr = picked.pick(self.cfg.rtr);
                no_match = rtr.is_none();
            }
        }
        let neg = Negotiated {
            revision: reply.revision,
            crc,
            markers_tx: reply.markers,
            markers_rx: self.cfg.markers,
            ird: self.ird,
            ord: self.ord,
            rtr,
            extensions: ext,
            private_data: reply.private_data,
        };
        self.enter_full_operation(neg);
        if insufficient_ird {
            self.send_terminate(TerminateError::MpaInsufficientIrd, None);
            return;
        }
        if no_match {
            // RFC 6581 §7: no RTR option both support.
            self.send_terminate(TerminateError::MpaNoMatchingRtr, None);
            return;
        }
        self.tx_ready = true;
        if let Some(kind) = rtr {
            self.emit_rtr(kind);
        }
    }

    pub(super) fn mpa_failed(&mut self, e: WireError) {
        if self.phase == Phase::Closed {
            return;
        }
        self.phase = Phase::Closed;
        self.deadline = None;
        self.close_wanted = true;
        self.flush_all();
        self.events.push_back(IwarpEvent::MpaFailed(e));
        self.events.push_back(IwarpEvent::Closed);
    }
}

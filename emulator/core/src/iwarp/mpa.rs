//! MPA (RFC 5044, with the RFC 6581 enhancements): the output byte stream ([`Stream`]:
//! MPA frames during setup, FPDUs framed as negotiated afterwards, the MULPDU of
//! RFC 5044 §4.1) and the setup decisions as pure functions of the configuration and the
//! peer's frame: the Request, the responder's accept and reject, the initiator's reading
//! of the Reply. The connection applies what they decide; before full operation it
//! exchanges nothing else.

use wire::iwarp::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use wire::iwarp::fpdu::{self, FpduConfig};
use wire::iwarp::mpa::{IrdOrd, MpaFrameKind, MpaRepr, MpaRevision, MAX_PRIVATE_DATA};
use wire::iwarp::rdmap::RdmapMessage;
use wire::iwarp::{Error as WireError, TerminateError};

use super::config::{IwarpConfig, MpaOffer, Negotiated, RtrKind, RtrOffer};
use super::ext::{ExtMessage, EXT_FLAG};
use crate::types::Errno;

/// The reserved MPA flag bit Linux siw and Chelsio set in revision 2 frames
/// (`MPA_RR_FLAG_ENHANCED`): siw ignores the IRD/ORD word without it and refuses a
/// revision 2 Reply that lacks it.
const ENHANCED_FLAG: u8 = 0x10;
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

/// The bytes for TCP to send, framed as the connection's phase requires: MPA frames
/// during setup, then FPDUs with the negotiated CRC and markers (markers depend on the
/// stream position, so the stream counts every octet it framed).
#[derive(Debug)]
pub(super) struct Stream {
    framing: FpduConfig,
    /// Octets framed since full operation began (the marker position).
    pos: u64,
    out: Vec<u8>,
    mulpdu: usize,
    fpdus: u64,
}

impl Stream {
    pub(super) fn new(mss: u32) -> Stream {
        Stream {
            framing: FpduConfig::default(),
            pos: 0,
            out: Vec::new(),
            mulpdu: mulpdu(mss, false),
            fpdus: 0,
        }
    }

    /// Switches to FPDU framing as `neg` decided.
    pub(super) fn full_operation(&mut self, neg: &Negotiated, mss: u32) {
        self.framing = FpduConfig {
            crc: neg.crc,
            markers: neg.markers_tx,
        };
        self.mulpdu = mulpdu(mss, neg.markers_tx);
    }

    pub(super) fn emit_mpa(&mut self, repr: &MpaRepr<'_>) {
        let at = self.out.len();
        self.out.resize(at + repr.buffer_len(), 0);
        repr.emit(&mut self.out[at..]);
    }

    /// Appends one FPDU carrying `ulpdu`.
    pub(super) fn emit_fpdu(&mut self, ulpdu: &[u8]) {
        let n = fpdu::wire_len(ulpdu.len(), self.framing, self.pos);
        let at = self.out.len();
        self.out.resize(at + n, 0);
        fpdu::emit(ulpdu, self.framing, self.pos, &mut self.out[at..]);
        self.pos += n as u64;
        self.fpdus += 1;
    }

    /// Appends one FPDU carrying `msg`; without markers the message is written in
    /// place (no ULPDU built apart and copied).
    pub(super) fn emit_msg(&mut self, msg: &RdmapMessage<'_>) {
        let len = msg.buffer_len();
        if self.framing.markers {
            let mut u = vec![0u8; len];
            msg.emit(&mut u);
            self.emit_fpdu(&u);
            return;
        }
        let n = fpdu::unmarked_len(len);
        let at = self.out.len();
        self.out.resize(at + n, 0);
        fpdu::emit_unmarked_with(len, self.framing.crc, &mut self.out[at..], |u| msg.emit(u));
        self.pos += n as u64;
        self.fpdus += 1;
    }

    /// Appends one FPDU carrying `head` (a Write, Send or Read Response whose payload is
    /// left empty) followed by `payload_len` octets that `gather` writes in place: the
    /// payload goes from application memory into the FPDU with no buffer between. If
    /// `gather` fails nothing is appended and its error is returned.
    pub(super) fn emit_msg_gathered<E>(
        &mut self,
        head: &RdmapMessage<'_>,
        payload_len: usize,
        gather: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let h = head.buffer_len();
        let len = h + payload_len;
        if self.framing.markers {
            let mut u = vec![0u8; len];
            head.emit(&mut u[..h]);
            gather(&mut u[h..])?;
            self.emit_fpdu(&u);
            return Ok(());
        }
        let n = fpdu::unmarked_len(len);
        let at = self.out.len();
        self.out.resize(at + n, 0);
        let mut filled = Ok(());
        fpdu::emit_unmarked_with(len, self.framing.crc, &mut self.out[at..], |u| {
            head.emit(&mut u[..h]);
            filled = gather(&mut u[h..]);
        });
        if filled.is_err() {
            self.out.truncate(at);
            return filled;
        }
        self.pos += n as u64;
        self.fpdus += 1;
        Ok(())
    }

    pub(super) fn emit_ext(&mut self, msg: &ExtMessage<'_>) {
        let mut u = Vec::new();
        msg.emit(&mut u);
        self.emit_fpdu(&u);
    }

    /// The most payload one DDP segment may carry (the MULPDU less its DDP header).
    pub(super) fn max_payload(&self, tagged: bool) -> usize {
        let h = if tagged {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        self.mulpdu - h
    }

    /// Frames straight into `buf` from now until [`Stream::give_back`]: what `buf` holds
    /// comes first, then what this stream framed before, then what it frames next. Saves
    /// a copy of every FPDU.
    pub(super) fn borrow_output(&mut self, buf: &mut Vec<u8>) {
        buf.append(&mut self.out);
        std::mem::swap(&mut self.out, buf);
    }

    /// Ends [`Stream::borrow_output`]: `buf` gets everything back, framed bytes included.
    pub(super) fn give_back(&mut self, buf: &mut Vec<u8>) {
        debug_assert!(buf.is_empty());
        std::mem::swap(&mut self.out, buf);
    }

    /// Octets in the output: framed and not yet given back (while the output is
    /// borrowed, what the borrowed buffer held before counts too).
    pub(super) fn len(&self) -> usize {
        self.out.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// FPDUs framed so far.
    pub(super) fn fpdus(&self) -> u64 {
        self.fpdus
    }
}

/// The peer's Request or Reply as the connection keeps it.
pub(super) fn offer_of(repr: &MpaRepr<'_>) -> MpaOffer {
    MpaOffer {
        revision: repr.revision.number(),
        crc: repr.crc,
        markers: repr.markers,
        ird_ord: match repr.revision {
            MpaRevision::V2(w) => Some(w),
            MpaRevision::V1 => None,
        },
        reserved_flags: repr.reserved_flags,
        private_data: repr.private_data.to_vec(),
    }
}

/// The initiator's MPA Request.
pub(super) fn request(cfg: &IwarpConfig) -> MpaRepr<'_> {
    let rev = if cfg.revision >= 2 {
        MpaRevision::V2(IrdOrd {
            ird: cfg.ird,
            ord: cfg.ord,
            peer_to_peer: cfg.peer_to_peer,
            rtr_send: cfg.peer_to_peer && cfg.rtr.send,
            rtr_write: cfg.peer_to_peer && cfg.rtr.write,
            rtr_read: cfg.peer_to_peer && cfg.rtr.read,
        })
    } else {
        MpaRevision::V1
    };
    MpaRepr {
        kind: MpaFrameKind::Request,
        markers: cfg.markers,
        crc: cfg.crc,
        reject: false,
        reserved_flags: if cfg.extensions { EXT_FLAG } else { 0 }
            | if cfg.revision >= 2 { ENHANCED_FLAG } else { 0 },
        revision: rev,
        private_data: &cfg.private_data,
    }
}

/// Responder: the Reply that accepts `offer` with `private_data`, and what it settles.
///
/// Errors: EINVAL when the private data is too long.
pub(super) fn accept<'a>(
    cfg: &IwarpConfig,
    offer: &MpaOffer,
    private_data: &'a [u8],
) -> Result<(MpaRepr<'a>, Negotiated), Errno> {
    let use_v2 = offer.ird_ord.is_some() && cfg.revision >= 2;
    if private_data.len() + if use_v2 { 4 } else { 0 } > MAX_PRIVATE_DATA {
        return Err(Errno::EINVAL);
    }
    // RFC 5044 §7.1: CRCs if either side asks; markers toward whoever asked.
    let crc = cfg.crc || offer.crc;
    let ext = cfg.extensions && offer.reserved_flags & EXT_FLAG != 0;
    let (mut ird, mut ord) = (cfg.ird, cfg.ord);
    let mut rtr = None;
    let rev = match offer.ird_ord {
        Some(w) if use_v2 => {
            // RFC 6581 §5: answer with our IRD and an ORD the initiator's IRD allows.
            // Like siw: our IRD covers the initiator's ORD (siw's initiator
            // terminates with "insufficient IRD" otherwise).
            ord = cfg.ord.min(w.ird);
            ird = cfg.ird.max(w.ord.min(MAX_IRD));
            if w.peer_to_peer && cfg.peer_to_peer {
                rtr = RtrOffer {
                    send: w.rtr_send,
                    write: w.rtr_write,
                    read: w.rtr_read,
                }
                .pick(cfg.rtr);
            }
            MpaRevision::V2(IrdOrd {
                ird,
                ord,
                peer_to_peer: rtr.is_some(),
                rtr_send: rtr == Some(RtrKind::Send),
                rtr_write: rtr == Some(RtrKind::Write),
                rtr_read: rtr == Some(RtrKind::Read),
            })
        }
        _ => MpaRevision::V1,
    };
    let reply = MpaRepr {
        kind: MpaFrameKind::Reply,
        markers: cfg.markers,
        crc,
        reject: false,
        reserved_flags: if ext { EXT_FLAG } else { 0 } | if use_v2 { ENHANCED_FLAG } else { 0 },
        revision: rev,
        private_data,
    };
    let neg = Negotiated {
        revision: rev.number(),
        crc,
        markers_tx: offer.markers,
        markers_rx: cfg.markers,
        ird,
        ord,
        rtr,
        extensions: ext,
        private_data: offer.private_data.clone(),
    };
    Ok((reply, neg))
}

/// Responder: the Reply (R bit) that rejects `offer` with `private_data`.
///
/// Errors: EINVAL when the private data is too long.
pub(super) fn reject<'a>(
    cfg: &IwarpConfig,
    offer: &MpaOffer,
    private_data: &'a [u8],
) -> Result<MpaRepr<'a>, Errno> {
    let v2 = offer.ird_ord.is_some() && cfg.revision >= 2;
    if private_data.len() + if v2 { 4 } else { 0 } > MAX_PRIVATE_DATA {
        return Err(Errno::EINVAL);
    }
    Ok(MpaRepr {
        kind: MpaFrameKind::Reply,
        markers: false,
        crc: false,
        reject: true,
        reserved_flags: if v2 { ENHANCED_FLAG } else { 0 },
        revision: if v2 {
            MpaRevision::V2(IrdOrd::default())
        } else {
            MpaRevision::V1
        },
        private_data,
    })
}

/// What the initiator makes of a Reply that did not reject it.
pub(super) enum ReplyVerdict {
    /// The Reply is not one this side can take.
    Failed(WireError),
    /// Full operation as `Negotiated` says; if a Terminate is given, it is sent at once
    /// (the parameters are known, but the connection cannot work with them).
    Established(Negotiated, Option<TerminateError>),
}

/// Initiator: reads the responder's accepting Reply.
pub(super) fn read_reply(cfg: &IwarpConfig, reply: MpaOffer) -> ReplyVerdict {
    if reply.revision == 2 && cfg.revision < 2 {
        return ReplyVerdict::Failed(WireError::BadMpaRevision(2));
    }
    let crc = cfg.crc || reply.crc;
    let ext = cfg.extensions && reply.reserved_flags & EXT_FLAG != 0;
    let (ird, mut ord) = (cfg.ird, cfg.ord);
    let mut rtr = None;
    let mut fault = None;
    if let Some(w) = reply.ird_ord {
        // RFC 6581 §5: our ORD may not exceed the responder's IRD.
        ord = cfg.ord.min(w.ird);
        // RFC 6581 §5 / siw: the responder's ORD must fit our IRD.
        if w.ord > ird {
            fault = Some(TerminateError::MpaInsufficientIrd);
        }
        if cfg.peer_to_peer && w.peer_to_peer {
            let picked = RtrOffer {
                send: w.rtr_send,
                write: w.rtr_write,
                read: w.rtr_read,
            };
            rtr = picked.pick(cfg.rtr);
            if rtr.is_none() && fault.is_none() {
                // RFC 6581 §7: no RTR option both support.
                fault = Some(TerminateError::MpaNoMatchingRtr);
            }
        }
    }
    let neg = Negotiated {
        revision: reply.revision,
        crc,
        markers_tx: reply.markers,
        markers_rx: cfg.markers,
        ird,
        ord,
        rtr,
        extensions: ext,
        private_data: reply.private_data,
    };
    ReplyVerdict::Established(neg, fault)
}

#[cfg(test)]
mod tests {
    use super::Stream;
    use wire::iwarp::ddp::Stag;
    use wire::iwarp::fpdu::FpduConfig;
    use wire::iwarp::rdmap::RdmapMessage;

    fn stream(crc: bool, markers: bool) -> Stream {
        let mut s = Stream::new(1460);
        s.framing = FpduConfig { crc, markers };
        s
    }

    fn write(payload: &[u8]) -> RdmapMessage<'_> {
        RdmapMessage::Write {
            last: true,
            stag: Stag(0x1234),
            offset: 0x10_0000,
            payload,
        }
    }

    #[test]
    fn a_gathered_message_is_framed_as_the_same_message_built_whole() {
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        for (crc, markers) in [(false, false), (true, false), (true, true), (false, true)] {
            let (mut whole, mut gathered) = (stream(crc, markers), stream(crc, markers));
            // A first message moves the marker position off zero.
            whole.emit_msg(&write(&payload[..100]));
            gathered.emit_msg(&write(&payload[..100]));
            whole.emit_msg(&write(&payload));
            let r: Result<(), ()> = gathered.emit_msg_gathered(&write(&[]), payload.len(), |p| {
                p.copy_from_slice(&payload);
                Ok(())
            });
            assert_eq!(r, Ok(()));
            assert_eq!(gathered.out, whole.out, "crc {crc}, markers {markers}");
            assert_eq!((gathered.pos, gathered.fpdus), (whole.pos, whole.fpdus));
        }
    }

    #[test]
    fn a_failed_gather_frames_nothing() {
        for markers in [false, true] {
            let mut s = stream(true, markers);
            s.emit_msg(&write(&[1, 2, 3]));
            let (out, pos, fpdus) = (s.out.clone(), s.pos, s.fpdus);
            let r = s.emit_msg_gathered(&write(&[]), 500, |p| {
                p[..10].fill(0xee);
                Err("fault")
            });
            assert_eq!(r, Err("fault"));
            assert_eq!((s.out.clone(), s.pos, s.fpdus), (out, pos, fpdus));
        }
    }
}

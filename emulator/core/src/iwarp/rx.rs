//! The receive side: DDP and RDMAP processing of each FPDU (RFC 5040 §5-§7,
//! RFC 5041 §5-§7), and the Terminates it sends. Placement into receive buffers and the
//! Terminate cause of each failure are `placement.rs`'s.

use wire::iwarp::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use wire::iwarp::rdmap::{RdmapMessage, ReadRequest, READ_REQUEST_LEN};
use wire::iwarp::{Stag, TerminateError, TerminateRepr};

use super::config::{IwarpEvent, Role, RtrKind};
use super::conn::{Connection, IrqEntry, OrqEntry, Phase, RxSend};
use super::ext::{AtomicOp, ExtError, ExtMessage};
use super::placement::{
    parse_error, remote_status, scatter, source_error, tagged_error, Offender, ScatterError,
};
use super::Stags;
use crate::memory::Memory;
use crate::types::{AccessFlags, WcFlags, WcOpcode, WcStatus};

impl Connection {
    /// Sends a Terminate (RFC 5040 §5.5 / §7) and puts the QP in error.
    pub(super) fn send_terminate(&mut self, error: TerminateError, offender: Option<Offender<'_>>) {
        if self.phase == Phase::Closed {
            return;
        }
        tracing::debug!(qpn = self.cfg.qpn.0, ?error, "iwarp: sending Terminate");
        if self.phase == Phase::Rts {
            let ddp_hdr = offender.and_then(|o| {
                let tagged = o.ulpdu.first().is_some_and(|c| c & 0x80 != 0);
                let hl = if tagged {
                    TAGGED_HEADER_LEN
                } else {
                    UNTAGGED_HEADER_LEN
                };
                o.ulpdu.get(..hl).map(|h| (o.ulpdu.len() as u16, h))
            });
            let rdmap_hdr = offender.filter(|o| o.rdmap).and_then(|o| {
                o.ulpdu
                    .get(UNTAGGED_HEADER_LEN..UNTAGGED_HEADER_LEN + READ_REQUEST_LEN)
            });
            let term = TerminateRepr {
                error,
                segment_length_valid: ddp_hdr.is_some(),
                ddp: ddp_hdr,
                rdmap_header: rdmap_hdr,
            };
            let msg = RdmapMessage::Terminate {
                msn: self.tx_msn[2],
                terminate: term,
            };
            self.tx_msn[2] = self.tx_msn[2].wrapping_add(1);
            let mut u = vec![0u8; msg.buffer_len()];
            msg.emit(&mut u);
            self.emit_fpdu(&u);
            self.counters.terminates_sent += 1;
        }
        self.events
            .push_back(IwarpEvent::Terminated { error, local: true });
        self.enter_error();
    }

    fn enter_error(&mut self) {
        self.phase = Phase::Closed;
        self.deadline = None;
        self.close_wanted = true;
        self.flush_all();
        self.events.push_back(IwarpEvent::Closed);
    }

    fn on_remote_terminate(&mut self, error: TerminateError) {
        tracing::debug!(qpn = self.cfg.qpn.0, ?error, "iwarp: Terminate received");
        self.counters.terminates_rcvd += 1;
        // The WR waiting for a response gets the remote error; the rest are flushed.
        if let Some(seq) = self.orq.front().and_then(|o| o.seq) {
            if let Some(e) = self.sq.get_mut((seq - self.sq_head_seq) as usize) {
                e.status = Some(remote_status(error));
            }
        }
        self.events.push_back(IwarpEvent::Terminated {
            error,
            local: false,
        });
        self.enter_error();
    }

    /// Emits the RFC 6581 RTR message of `kind` (initiator, first FPDU).
    pub(super) fn emit_rtr(&mut self, kind: RtrKind) {
        let msg = match kind {
            RtrKind::Write => RdmapMessage::Write {
                last: true,
                stag: Stag(0),
                offset: 0,
                payload: &[],
            },
            RtrKind::Send => {
                let msn = self.tx_msn[0];
                self.tx_msn[0] = msn.wrapping_add(1);
                RdmapMessage::Send {
                    last: true,
                    solicited: false,
                    invalidate: None,
                    msn,
                    mo: 0,
                    payload: &[],
                }
            }
            RtrKind::Read => {
                let msn = self.tx_msn[1];
                self.tx_msn[1] = msn.wrapping_add(1);
                self.orq.push_back(OrqEntry {
                    seq: None,
                    sink_stag: 0,
                    sink_to: 0,
                    size: 0,
                    atomic: None,
                });
                RdmapMessage::ReadRequest {
                    msn,
                    request: ReadRequest {
                        sink_stag: Stag(0),
                        sink_offset: 0,
                        size: 0,
                        src_stag: Stag(0),
                        src_offset: 0,
                    },
                }
            }
        };
        let mut u = vec![0u8; msg.buffer_len()];
        msg.emit(&mut u);
        self.emit_fpdu(&u);
    }

    /// Whether ULPDU `u` starts a well-formed message on untagged queue 0 (a Send of any
    /// kind, Send with Immediate, Immediate Data) that takes a receive WR (RFC 5041
    /// §5.3: the MSN names the next message; not the RFC 6581 zero-length Send RTR).
    pub(super) fn needs_recv(&self, u: &[u8]) -> bool {
        use super::ext::{OP_IMMEDIATE, OP_IMMEDIATE_SE, OP_SEND_IMM, OP_SEND_SE_IMM};
        if self.phase != Phase::Rts || self.rx_send.is_some() || u.len() < UNTAGGED_HEADER_LEN {
            return false;
        }
        let be32 = |r: std::ops::Range<usize>| {
            u.get(r)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(u32::from_be_bytes)
        };
        // DDP control: untagged, version 1; RDMAP control: version 1.
        if u[0] & 0x80 != 0 || u[0] & 0x03 != 1 || u[1] >> 6 != 1 {
            return false;
        }
        let opcode = u[1] & 0x0f;
        let takes_recv = match opcode {
            3..=6 => true,
            OP_IMMEDIATE | OP_IMMEDIATE_SE | OP_SEND_IMM | OP_SEND_SE_IMM => self.ext,
            _ => false,
        };
        let rtr = self.role == Role::Responder
            && !self.got_first
            && self.expect_rtr == Some(RtrKind::Send);
        takes_recv && !rtr && be32(6..10) == Some(0) && be32(10..14) == Some(self.rx_msn[0])
    }

    /// One FPDU's ULPDU (a DDP segment) in full operation.
    pub(super) fn on_ulpdu<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        u: &[u8],
        keys: &mut K,
        mem: &mut M,
    ) {
        if self.phase != Phase::Rts {
            return;
        }
        let first = !self.got_first;
        self.got_first = true;
        let off = Offender {
            ulpdu: u,
            rdmap: false,
        };
        let opcode = u.get(1).map_or(0, |c| c & 0x0f);
        if opcode >= 8 && u.len() > 1 && u[1] >> 6 == 1 && u[0] & 0x03 == 1 {
            if !self.ext {
                self.send_terminate(TerminateError::RdmapUnexpectedOpcode, Some(off));
                return;
            }
            if first && self.expect_rtr.is_some() {
                self.send_terminate(TerminateError::MpaNoMatchingRtr, Some(off));
                return;
            }
            if first && self.role == Role::Responder {
                self.tx_ready = true;
            }
            match ExtMessage::parse(u) {
                Ok(m) => self.on_ext(m, off, keys, mem),
                Err(ExtError::BadQueue) => {
                    self.send_terminate(TerminateError::DdpUntaggedInvalidQn, Some(off))
                }
                Err(_) => self.send_terminate(TerminateError::RdmapUnexpectedOpcode, Some(off)),
            }
            return;
        }
        let msg = match RdmapMessage::parse(u) {
            Ok(m) => m,
            Err(e) => {
                self.send_terminate(parse_error(e, u), Some(off));
                return;
            }
        };
        if first && self.role == Role::Responder {
            if let Some(kind) = self.expect_rtr.take() {
                let ok = match (kind, &msg) {
                    (RtrKind::Write, RdmapMessage::Write { payload, last, .. }) => {
                        payload.is_empty() && *last
                    }
                    (RtrKind::Send, RdmapMessage::Send { payload, last, .. }) => {
                        payload.is_empty() && *last
                    }
                    (RtrKind::Read, RdmapMessage::ReadRequest { request, .. }) => request.size == 0,
                    _ => false,
                };
                if !ok {
                    self.send_terminate(TerminateError::MpaNoMatchingRtr, Some(off));
                    return;
                }
                self.tx_ready = true;
                match msg {
                    RdmapMessage::Send { msn, .. } => {
                        if msn != self.rx_msn[0] {
                            self.send_terminate(TerminateError::DdpUntaggedMsnRange, Some(off));
                            return;
                        }
                        self.rx_msn[0] = msn.wrapping_add(1);
                        return;
                    }
                    RdmapMessage::Write { .. } => return,
                    // The zero-length Read is answered like any other Read.
                    _ => {}
                }
            }
            self.tx_ready = true;
        }
        match msg {
            RdmapMessage::Write {
                last,
                stag,
                offset,
                payload,
            } => self.on_tagged_write(last, stag, offset, payload, off, keys, mem),
            RdmapMessage::ReadResponse {
                last,
                stag,
                offset,
                payload,
            } => self.on_read_response(last, stag, offset, payload, off, keys, mem),
            RdmapMessage::Send {
                last,
                solicited,
                invalidate,
                msn,
                mo,
                payload,
            } => self.on_send(
                SendSeg {
                    last,
                    solicited,
                    invalidate,
                    imm: None,
                    msn,
                    mo,
                    payload,
                },
                off,
                keys,
                mem,
            ),
            RdmapMessage::ReadRequest { msn, request } => {
                self.on_read_request(msn, request, off, keys)
            }
            RdmapMessage::Terminate { terminate, .. } => self.on_remote_terminate(terminate.error),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_tagged_write<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        last: bool,
        stag: Stag,
        offset: u64,
        payload: &[u8],
        off: Offender<'_>,
        keys: &mut K,
        mem: &mut M,
    ) {
        if !payload.is_empty() {
            if offset.checked_add(payload.len() as u64).is_none() {
                self.send_terminate(TerminateError::DdpTaggedToWrap, Some(off));
                return;
            }
            let r = keys.resolve(
                stag.0,
                self.cfg.pd,
                self.cfg.qpn.0,
                offset,
                payload.len() as u64,
                AccessFlags::REMOTE_WRITE,
                true,
            );
            match r {
                Ok((space, host)) => {
                    if mem.write(space, host, payload).is_err() {
                        self.send_terminate(TerminateError::DdpCatastrophic, Some(off));
                        return;
                    }
                }
                Err(e) => {
                    self.send_terminate(tagged_error(e), Some(off));
                    return;
                }
            }
        }
        self.cur_write_len += payload.len() as u64;
        if last {
            self.last_write_len = std::mem::take(&mut self.cur_write_len);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_read_response<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        last: bool,
        stag: Stag,
        offset: u64,
        payload: &[u8],
        off: Offender<'_>,
        keys: &mut K,
        mem: &mut M,
    ) {
        // RFC 5040 §5.2: a Read Response nobody asked for.
        let Some(o) = self.orq.front().copied().filter(|o| o.atomic.is_none()) else {
            self.send_terminate(TerminateError::RdmapUnexpectedOpcode, Some(off));
            return;
        };
        if stag.0 != o.sink_stag {
            self.send_terminate(TerminateError::DdpTaggedInvalidStag, Some(off));
            return;
        }
        let rel = offset.wrapping_sub(o.sink_to);
        let end = rel.checked_add(payload.len() as u64);
        if offset < o.sink_to || end.is_none_or(|e| e > o.size) {
            self.send_terminate(TerminateError::DdpTaggedBaseBounds, Some(off));
            return;
        }
        if let Some(seq) = o.seq {
            let idx = (seq - self.sq_head_seq) as usize;
            let Some(e) = self.sq.get(idx) else {
                self.send_terminate(TerminateError::RdmapCatastrophicStream, Some(off));
                return;
            };
            if scatter(
                keys,
                mem,
                self.cfg.pd,
                self.cfg.qpn.0,
                &e.wr.sg_list,
                rel,
                payload,
            )
            .is_err()
            {
                if let Some(e) = self.sq.get_mut(idx) {
                    e.status = Some(WcStatus::LocProtErr);
                }
                self.send_terminate(TerminateError::RdmapCatastrophic, None);
                return;
            }
        }
        if last {
            self.orq.pop_front();
            if let Some(seq) = o.seq {
                if let Some(e) = self.sq.get_mut((seq - self.sq_head_seq) as usize) {
                    e.status = Some(WcStatus::Success);
                    e.byte_len = o.size as u32;
                }
                self.retire();
            }
        }
    }

    fn on_send<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        s: SendSeg<'_>,
        off: Offender<'_>,
        keys: &mut K,
        mem: &mut M,
    ) {
        // RFC 5041 §5.3 / §7.2: the MSN must name the message in progress (TCP keeps
        // order, so exactly the expected one).
        if s.msn != self.rx_msn[0] {
            self.send_terminate(TerminateError::DdpUntaggedMsnRange, Some(off));
            return;
        }
        if self.rx_send.is_none() {
            let Some(wr) = self.rq.pop_front() else {
                self.send_terminate(TerminateError::DdpUntaggedNoBuffer, Some(off));
                return;
            };
            self.rx_send = Some(RxSend { wr, len: 0 });
        }
        let Some(rx) = self.rx_send.as_mut() else {
            return;
        };
        let cap: u64 = rx.wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
        let end = u64::from(s.mo) + s.payload.len() as u64;
        if end > cap {
            let id = rx.wr.wr_id;
            self.rx_send = None;
            self.push_recv_wc(id, WcStatus::LocLenErr, WcOpcode::Recv, 0);
            self.send_terminate(TerminateError::DdpUntaggedTooLong, Some(off));
            return;
        }
        if scatter(
            keys,
            mem,
            self.cfg.pd,
            self.cfg.qpn.0,
            &rx.wr.sg_list,
            u64::from(s.mo),
            s.payload,
        )
        .is_err()
        {
            let id = rx.wr.wr_id;
            self.rx_send = None;
            self.push_recv_wc(id, WcStatus::LocProtErr, WcOpcode::Recv, 0);
            self.send_terminate(TerminateError::DdpCatastrophic, Some(off));
            return;
        }
        rx.len = rx.len.max(end);
        if !s.last {
            return;
        }
        let Some(rx) = self.rx_send.take() else {
            return;
        };
        self.rx_msn[0] = s.msn.wrapping_add(1);
        let mut flags = WcFlags::EMPTY;
        let mut imm_data = 0;
        if let Some(stag) = s.invalidate {
            // RFC 5040 §5.3: invalidate once the whole message is placed.
            if keys.invalidate(stag.0, self.cfg.pd).is_err() {
                self.push_recv_wc(rx.wr.wr_id, WcStatus::RemInvReqErr, WcOpcode::Recv, 0);
                self.send_terminate(TerminateError::RdmapProtectionCannotInvalidate, Some(off));
                return;
            }
            flags |= WcFlags::WITH_INV;
            imm_data = stag.0;
        }
        if let Some(imm) = s.imm {
            flags |= WcFlags::WITH_IMM;
            imm_data = imm;
        }
        self.push_recv(
            rx.wr.wr_id,
            WcOpcode::Recv,
            rx.len,
            flags,
            imm_data,
            s.solicited,
        );
    }

    fn push_recv(
        &mut self,
        wr_id: crate::types::WrId,
        opcode: WcOpcode,
        len: u64,
        flags: WcFlags,
        imm_data: u32,
        solicited: bool,
    ) {
        self.push_recv_wc(wr_id, WcStatus::Success, opcode, len as u32);
        if let Some(c) = self.completions.back_mut() {
            c.wc.wc_flags = flags;
            c.wc.imm_data = imm_data;
            c.solicited = solicited;
        }
    }

    fn on_read_request<K: Stags + ?Sized>(
        &mut self,
        msn: u32,
        req: ReadRequest,
        off: Offender<'_>,
        keys: &mut K,
    ) {
        let off = Offender { rdmap: true, ..off };
        // RFC 5040 §6.4 / RFC 5041 §7.2: more Read Requests than IRD, or an MSN
        // that is not the next, is outside the queue's MSN range.
        if msn != self.rx_msn[1] || self.irq.len() >= usize::from(self.ird.max(1)) {
            self.send_terminate(TerminateError::DdpUntaggedMsnRange, Some(off));
            return;
        }
        self.rx_msn[1] = msn.wrapping_add(1);
        let size = u64::from(req.size);
        let (space, host) = if size == 0 {
            (crate::types::AddrSpace(0), 0)
        } else {
            if req.src_offset.checked_add(size).is_none() {
                self.send_terminate(TerminateError::RdmapToWrap, Some(off));
                return;
            }
            match keys.resolve(
                req.src_stag.0,
                self.cfg.pd,
                self.cfg.qpn.0,
                req.src_offset,
                size,
                AccessFlags::REMOTE_READ,
                true,
            ) {
                Ok(r) => r,
                Err(e) => {
                    self.send_terminate(source_error(e), Some(off));
                    return;
                }
            }
        };
        self.irq.push_back(IrqEntry::Read {
            sink_stag: req.sink_stag.0,
            sink_to: req.sink_offset,
            space,
            host,
            size,
            sent: 0,
        });
    }

    fn on_ext<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        m: ExtMessage<'_>,
        off: Offender<'_>,
        keys: &mut K,
        mem: &mut M,
    ) {
        match m {
            ExtMessage::SendImm {
                last,
                solicited,
                msn,
                mo,
                imm,
                payload,
            } => self.on_send(
                SendSeg {
                    last,
                    solicited,
                    invalidate: None,
                    imm: Some(imm),
                    msn,
                    mo,
                    payload,
                },
                off,
                keys,
                mem,
            ),
            ExtMessage::Immediate {
                solicited,
                msn,
                imm,
            } => {
                if msn != self.rx_msn[0] || self.rx_send.is_some() {
                    self.send_terminate(TerminateError::DdpUntaggedMsnRange, Some(off));
                    return;
                }
                let Some(wr) = self.rq.pop_front() else {
                    self.send_terminate(TerminateError::DdpUntaggedNoBuffer, Some(off));
                    return;
                };
                self.rx_msn[0] = msn.wrapping_add(1);
                let len = self.last_write_len;
                self.push_recv(
                    wr.wr_id,
                    WcOpcode::RecvRdmaWithImm,
                    len,
                    WcFlags::WITH_IMM,
                    imm,
                    solicited,
                );
            }
            ExtMessage::AtomicRequest {
                msn,
                op,
                req_id,
                stag,
                to,
                data,
                compare,
            } => {
                if msn != self.rx_msn[1] || self.irq.len() >= usize::from(self.ird.max(1)) {
                    self.send_terminate(TerminateError::DdpUntaggedMsnRange, Some(off));
                    return;
                }
                self.rx_msn[1] = msn.wrapping_add(1);
                // RFC 7306 §5: the target is 8 octets, 8-aligned.
                if to % 8 != 0 {
                    self.send_terminate(TerminateError::RdmapBaseBounds, Some(off));
                    return;
                }
                let (space, host) = match keys.resolve(
                    stag,
                    self.cfg.pd,
                    self.cfg.qpn.0,
                    to,
                    8,
                    AccessFlags::REMOTE_ATOMIC,
                    true,
                ) {
                    Ok(r) => r,
                    Err(e) => {
                        self.send_terminate(source_error(e), Some(off));
                        return;
                    }
                };
                let mut b = [0u8; 8];
                if mem.read(space, host, &mut b).is_err() {
                    self.send_terminate(TerminateError::RdmapCatastrophic, Some(off));
                    return;
                }
                let original = u64::from_le_bytes(b);
                let new = match op {
                    AtomicOp::FetchAdd => original.wrapping_add(data),
                    AtomicOp::CmpSwap => {
                        if original == compare {
                            data
                        } else {
                            original
                        }
                    }
                };
                if new != original && mem.write(space, host, &new.to_le_bytes()).is_err() {
                    self.send_terminate(TerminateError::RdmapCatastrophic, Some(off));
                    return;
                }
                self.irq.push_back(IrqEntry::Atomic { req_id, original });
            }
            ExtMessage::AtomicResponse {
                msn,
                req_id,
                original,
            } => {
                let ok = msn == self.rx_msn[3]
                    && self.orq.front().is_some_and(|o| o.atomic == Some(req_id));
                if !ok {
                    self.send_terminate(TerminateError::RdmapUnexpectedOpcode, Some(off));
                    return;
                }
                self.rx_msn[3] = msn.wrapping_add(1);
                let Some(o) = self.orq.pop_front() else {
                    return;
                };
                let Some(seq) = o.seq else {
                    return;
                };
                let idx = (seq - self.sq_head_seq) as usize;
                let res = match self.sq.get(idx) {
                    Some(e) => scatter(
                        keys,
                        mem,
                        self.cfg.pd,
                        self.cfg.qpn.0,
                        &e.wr.sg_list,
                        0,
                        &original.to_le_bytes(),
                    ),
                    None => Err(ScatterError::Protection),
                };
                let status = match res {
                    Ok(()) => WcStatus::Success,
                    Err(_) => WcStatus::LocProtErr,
                };
                if let Some(e) = self.sq.get_mut(idx) {
                    e.status = Some(status);
                    e.byte_len = 8;
                }
                if status != WcStatus::Success {
                    self.send_terminate(TerminateError::RdmapCatastrophic, None);
                    return;
                }
                self.retire();
            }
        }
    }
}

/// One segment of an untagged queue 0 message.
pub(super) struct SendSeg<'a> {
    pub last: bool,
    pub solicited: bool,
    pub invalidate: Option<Stag>,
    pub imm: Option<u32>,
    pub msn: u32,
    pub mo: u32,
    pub payload: &'a [u8],
}

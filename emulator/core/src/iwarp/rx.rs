//! The receive side: DDP and RDMAP processing of each FPDU (RFC 5040 §5-§7,
//! RFC 5041 §5-§7). [`RecvSide`] owns the receive queue, the MSNs of the queues the peer
//! sends on, the message being reassembled and the RTR expected; its handler takes the
//! send side, the owed responses and the outbox it touches, and returns the Terminate it
//! decided on ([`Stop`]) for the connection to send. Placement into receive buffers and
//! the Terminate cause of each failure are `placement.rs`'s; what is held of a message
//! before it is placed (runs of up to 64 KiB) is `held.rs`'s. A QP on a shared receive
//! queue takes its receive WRs from the SRQ through the [`Stags`] table instead of its
//! own queue; a flush then completes only the receive in progress, and the SRQ's WRs
//! stay for the other QPs (siw's `siw_rq_flush`).

use std::collections::VecDeque;

use wire::iwarp::ddp::UNTAGGED_HEADER_LEN;
use wire::iwarp::rdmap::{RdmapMessage, ReadRequest};
use wire::iwarp::{Stag, TerminateError};

use super::config::{IwarpConfig, Negotiated, Role, RtrKind};
use super::ext::{AtomicOp, ExtError, ExtMessage};
use super::held::{Owner, RxSend, WriteRun};
use super::outbox::Outbox;
use super::placement::{
    parse_error, remote_status, scatter, source_error, tagged_error, Cite, ScatterError, Stop,
};
use super::tx::{Irq, IrqEntry, SendQueue};
use super::Stags;
use crate::attr::RecvWr;
use crate::memory::Memory;
use crate::types::{AccessFlags, PdHandle, SrqHandle, WcFlags, WcOpcode, WcStatus, WrId};

/// The data sink's state: receive WRs, reassembly of the message in progress, the MSNs
/// expected on each untagged queue, and the RFC 6581 RTR the responder waits for.
#[derive(Debug)]
pub(super) struct RecvSide {
    rq: VecDeque<RecvWr>,
    /// The SRQ receive WRs come from instead of `rq`.
    srq: Option<SrqHandle>,
    msns: [u32; 4],
    rx_send: Option<RxSend>,
    /// Octets of the tagged Write in progress, and of the last finished one (the length
    /// an Immediate Data message reports).
    cur_write_len: u64,
    last_write_len: u64,
    write_run: WriteRun,
    /// The held-octets buffer of the last finished Send, for the next one.
    spare_held: Vec<u8>,
    got_first: bool,
    expect_rtr: Option<RtrKind>,
    responder: bool,
    ext: bool,
    max_wr: u32,
}

impl RecvSide {
    pub(super) fn new(cfg: &IwarpConfig, role: Role) -> RecvSide {
        RecvSide {
            rq: VecDeque::new(),
            srq: cfg.srq,
            msns: [1; 4],
            rx_send: None,
            cur_write_len: 0,
            last_write_len: 0,
            write_run: WriteRun::default(),
            spare_held: Vec::new(),
            got_first: false,
            expect_rtr: None,
            responder: role == Role::Responder,
            ext: false,
            max_wr: cfg.max_recv_wr,
        }
    }

    /// Full operation as `neg` decided; the responder then waits for the RTR, if any.
    pub(super) fn full_operation(&mut self, neg: &Negotiated) {
        self.ext = neg.extensions;
        if self.responder {
            self.expect_rtr = neg.rtr;
        }
    }

    /// Queues `wr` (`ibv_post_recv`); on a closed connection it completes with
    /// WR_FLUSH_ERR. Errors: ENOMEM (queue full).
    pub(super) fn post(
        &mut self,
        wr: RecvWr,
        closed: bool,
        out: &mut Outbox,
    ) -> Result<(), crate::types::Errno> {
        if self.rq.len() >= self.max_wr as usize {
            return Err(crate::types::Errno::ENOMEM);
        }
        if closed {
            out.recv_wc(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
        } else {
            self.rq.push_back(wr);
        }
        Ok(())
    }

    /// Whether a receive WR is queued (on the QP's SRQ, if it has one).
    pub(super) fn has_recv<K: Stags + ?Sized>(&self, keys: &K) -> bool {
        match self.srq {
            None => !self.rq.is_empty(),
            Some(srq) => keys.srq_has_recv(srq),
        }
    }

    /// The next receive WR for a message, and the PD its SGEs belong to.
    fn take_recv<K: Stags + ?Sized>(
        &mut self,
        keys: &mut K,
        cfg: &IwarpConfig,
    ) -> Option<(RecvWr, PdHandle)> {
        match self.srq {
            None => self.rq.pop_front().map(|wr| (wr, cfg.pd)),
            Some(srq) => keys.take_srq_recv(srq),
        }
    }

    /// Completes every receive WR of the QP with WR_FLUSH_ERR (the QP is in error): the
    /// one in progress and its own queue; an SRQ's WRs are not the QP's.
    pub(super) fn flush(&mut self, out: &mut Outbox) {
        // A Write cut short is not placed further.
        self.write_run = WriteRun::default();
        if let Some(r) = self.rx_send.take() {
            out.recv_wc(r.wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
        }
        while let Some(r) = self.rq.pop_front() {
            out.recv_wc(r.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
        }
    }

    /// Places the octets the Send in progress holds; a buffer that cannot take them
    /// completes the receive WR in error (LOC_PROT_ERR) and terminates, as a segment
    /// placed at once would have.
    fn place_send_run<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        out: &mut Outbox,
        cfg: &IwarpConfig,
        keys: &K,
        mem: &mut M,
        cite: Cite,
    ) -> Result<(), Stop> {
        let Some(rx) = self.rx_send.as_mut() else {
            return Ok(());
        };
        if rx.place(keys, mem, cfg.qpn.0).is_err() {
            let id = rx.wr.wr_id;
            self.rx_send = None;
            out.recv_wc(id, WcStatus::LocProtErr, WcOpcode::Recv, 0);
            return Err(Stop::Terminate(TerminateError::DdpCatastrophic, cite));
        }
        Ok(())
    }

    /// Whether ULPDU `u` starts a well-formed message on untagged queue 0 (a Send of any
    /// kind, Send with Immediate, Immediate Data) that takes a receive WR (RFC 5041
    /// §5.3: the MSN names the next message; not the RFC 6581 zero-length Send RTR).
    pub(super) fn needs_recv(&self, u: &[u8]) -> bool {
        use super::ext::{OP_IMMEDIATE, OP_IMMEDIATE_SE, OP_SEND_IMM, OP_SEND_SE_IMM};
        if self.rx_send.is_some() || u.len() < UNTAGGED_HEADER_LEN {
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
        let rtr = self.responder && !self.got_first && self.expect_rtr == Some(RtrKind::Send);
        takes_recv && !rtr && be32(6..10) == Some(0) && be32(10..14) == Some(self.msns[0])
    }

    /// One FPDU's ULPDU (a DDP segment) in full operation.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_ulpdu<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        u: &[u8],
        send: &mut SendQueue,
        irq: &mut Irq,
        out: &mut Outbox,
        cfg: &IwarpConfig,
        keys: &mut K,
        mem: &mut M,
    ) -> Result<(), Stop> {
        let first = !self.got_first;
        self.got_first = true;
        let cite = Cite::Ddp;
        let opcode = u.get(1).map_or(0, |c| c & 0x0f);
        // A held run is placed before any ULPDU but the next segment of its Write
        // (tagged, RDMAP opcode 0: Write), which decides for itself.
        let tagged_write = u.first().is_some_and(|c| c & 0x80 != 0) && opcode == 0;
        let owner = Owner {
            pd: cfg.pd,
            qpn: cfg.qpn.0,
        };
        if !tagged_write {
            self.write_run.place(keys, owner, mem)?;
        }
        // The same for a Send's held octets and any ULPDU not on untagged queue 0.
        let queue0 =
            u.first().is_some_and(|c| c & 0x80 == 0) && u.get(6..10) == Some(&[0, 0, 0, 0][..]);
        if !queue0 {
            self.place_send_run(out, cfg, keys, mem, cite)?;
        }
        if opcode >= 8 && u.len() > 1 && u[1] >> 6 == 1 && u[0] & 0x03 == 1 {
            if !self.ext {
                return Err(Stop::Terminate(TerminateError::RdmapUnexpectedOpcode, cite));
            }
            if first && self.expect_rtr.is_some() {
                return Err(Stop::Terminate(TerminateError::MpaNoMatchingRtr, cite));
            }
            if first && self.responder {
                send.ready = true;
            }
            return match ExtMessage::parse(u) {
                Ok(m) => self.on_ext(m, cite, send, irq, out, cfg, keys, mem),
                Err(ExtError::BadQueue) => {
                    Err(Stop::Terminate(TerminateError::DdpUntaggedInvalidQn, cite))
                }
                Err(_) => Err(Stop::Terminate(TerminateError::RdmapUnexpectedOpcode, cite)),
            };
        }
        let msg = match RdmapMessage::parse(u) {
            Ok(m) => m,
            Err(e) => {
                return Err(Stop::Terminate(parse_error(e, u), cite));
            }
        };
        if first && self.responder {
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
                    return Err(Stop::Terminate(TerminateError::MpaNoMatchingRtr, cite));
                }
                send.ready = true;
                match msg {
                    RdmapMessage::Send { msn, .. } => {
                        if msn != self.msns[0] {
                            return Err(Stop::Terminate(TerminateError::DdpUntaggedMsnRange, cite));
                        }
                        self.msns[0] = msn.wrapping_add(1);
                        return Ok(());
                    }
                    RdmapMessage::Write { .. } => return Ok(()),
                    // The zero-length Read is answered like any other Read.
                    _ => {}
                }
            }
            send.ready = true;
        }
        match msg {
            RdmapMessage::Write {
                last,
                stag,
                offset,
                payload,
            } => self.on_tagged_write(
                TaggedSeg {
                    last,
                    stag,
                    offset,
                    payload,
                },
                cite,
                cfg,
                keys,
                mem,
            ),
            RdmapMessage::ReadResponse {
                last,
                stag,
                offset,
                payload,
            } => on_read_response(
                TaggedSeg {
                    last,
                    stag,
                    offset,
                    payload,
                },
                cite,
                send,
                out,
                cfg,
                keys,
                mem,
            ),
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
                cite,
                out,
                cfg,
                keys,
                mem,
            ),
            RdmapMessage::ReadRequest { msn, request } => {
                self.on_read_request(msn, request, irq, cfg, keys)
            }
            RdmapMessage::Terminate { terminate, .. } => {
                // The WR waiting for a response gets the remote error; the rest are
                // flushed with the connection.
                send.fail_oldest_request(remote_status(terminate.error));
                Err(Stop::Terminated(terminate.error))
            }
        }
    }

    fn on_tagged_write<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        seg: TaggedSeg<'_>,
        cite: Cite,
        cfg: &IwarpConfig,
        keys: &mut K,
        mem: &mut M,
    ) -> Result<(), Stop> {
        let TaggedSeg {
            last,
            stag,
            offset,
            payload,
        } = seg;
        let owner = Owner {
            pd: cfg.pd,
            qpn: cfg.qpn.0,
        };
        if !payload.is_empty() {
            if offset.checked_add(payload.len() as u64).is_none() {
                return Err(Stop::Terminate(TerminateError::DdpTaggedToWrap, cite));
            }
            let r = keys.resolve(
                stag.0,
                cfg.pd,
                cfg.qpn.0,
                offset,
                payload.len() as u64,
                AccessFlags::REMOTE_WRITE,
                true,
            );
            let (space, host) = match r {
                Ok(at) => at,
                Err(e) => {
                    self.write_run.place(keys, owner, mem)?;
                    return Err(Stop::Terminate(tagged_error(e), cite));
                }
            };
            self.write_run.take(
                keys,
                owner,
                (stag.0, offset),
                (space, host),
                payload,
                last,
                mem,
            )?;
        }
        self.cur_write_len += payload.len() as u64;
        if last {
            self.write_run.end_message(keys, owner, mem)?;
            self.last_write_len = std::mem::take(&mut self.cur_write_len);
        }
        Ok(())
    }

    fn on_send<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        s: SendSeg<'_>,
        cite: Cite,
        out: &mut Outbox,
        cfg: &IwarpConfig,
        keys: &mut K,
        mem: &mut M,
    ) -> Result<(), Stop> {
        // RFC 5041 §5.3 / §7.2: the MSN must name the message in progress (TCP keeps
        // order, so exactly the expected one).
        if s.msn != self.msns[0] {
            return Err(Stop::Terminate(TerminateError::DdpUntaggedMsnRange, cite));
        }
        if self.rx_send.is_none() {
            let Some((wr, pd)) = self.take_recv(keys, cfg) else {
                return Err(Stop::Terminate(TerminateError::DdpUntaggedNoBuffer, cite));
            };
            let held = std::mem::take(&mut self.spare_held);
            self.rx_send = Some(RxSend::new(wr, pd, held));
        }
        let Some(rx) = self.rx_send.as_mut() else {
            return Ok(());
        };
        let cap: u64 = rx.wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
        let end = u64::from(s.mo) + s.payload.len() as u64;
        if end > cap {
            let id = rx.wr.wr_id;
            self.rx_send = None;
            out.recv_wc(id, WcStatus::LocLenErr, WcOpcode::Recv, 0);
            return Err(Stop::Terminate(TerminateError::DdpUntaggedTooLong, cite));
        }
        let off = u64::from(s.mo);
        let placed = rx.take(keys, mem, cfg.qpn.0, off, s.payload, s.last);
        if placed.is_err() {
            let id = rx.wr.wr_id;
            self.rx_send = None;
            out.recv_wc(id, WcStatus::LocProtErr, WcOpcode::Recv, 0);
            return Err(Stop::Terminate(TerminateError::DdpCatastrophic, cite));
        }
        rx.len = rx.len.max(end);
        if !s.last {
            return Ok(());
        }
        let Some(mut rx) = self.rx_send.take() else {
            return Ok(());
        };
        if rx.held.capacity() > 0 {
            rx.held.clear();
            self.spare_held = std::mem::take(&mut rx.held);
        }
        self.msns[0] = s.msn.wrapping_add(1);
        let mut flags = WcFlags::EMPTY;
        let mut imm_data = 0;
        if let Some(stag) = s.invalidate {
            // RFC 5040 §5.3: invalidate once the whole message is placed.
            if keys.invalidate(stag.0, cfg.pd).is_err() {
                out.recv_wc(rx.wr.wr_id, WcStatus::RemInvReqErr, WcOpcode::Recv, 0);
                return Err(Stop::Terminate(
                    TerminateError::RdmapProtectionCannotInvalidate,
                    cite,
                ));
            }
            flags |= WcFlags::WITH_INV;
            imm_data = stag.0;
        }
        if let Some(imm) = s.imm {
            flags |= WcFlags::WITH_IMM;
            imm_data = imm;
        }
        push_recv(
            out,
            rx.wr.wr_id,
            WcOpcode::Recv,
            rx.len,
            (flags, imm_data),
            s.solicited,
        );
        Ok(())
    }

    fn on_read_request<K: Stags + ?Sized>(
        &mut self,
        msn: u32,
        req: ReadRequest,
        irq: &mut Irq,
        cfg: &IwarpConfig,
        keys: &mut K,
    ) -> Result<(), Stop> {
        let cite = Cite::Rdmap;
        // RFC 5040 §6.4 / RFC 5041 §7.2: more Read Requests than IRD, or an MSN
        // that is not the next, is outside the queue's MSN range.
        if msn != self.msns[1] || !irq.has_room() {
            return Err(Stop::Terminate(TerminateError::DdpUntaggedMsnRange, cite));
        }
        self.msns[1] = msn.wrapping_add(1);
        let size = u64::from(req.size);
        let (space, host) = if size == 0 {
            (crate::types::AddrSpace(0), 0)
        } else {
            if req.src_offset.checked_add(size).is_none() {
                return Err(Stop::Terminate(TerminateError::RdmapToWrap, cite));
            }
            match keys.resolve(
                req.src_stag.0,
                cfg.pd,
                cfg.qpn.0,
                req.src_offset,
                size,
                AccessFlags::REMOTE_READ,
                true,
            ) {
                Ok(r) => r,
                Err(e) => {
                    return Err(Stop::Terminate(source_error(e), cite));
                }
            }
        };
        irq.push(IrqEntry::Read {
            sink_stag: req.sink_stag.0,
            sink_to: req.sink_offset,
            space,
            host,
            size,
            sent: 0,
        });
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn on_ext<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        m: ExtMessage<'_>,
        cite: Cite,
        send: &mut SendQueue,
        irq: &mut Irq,
        out: &mut Outbox,
        cfg: &IwarpConfig,
        keys: &mut K,
        mem: &mut M,
    ) -> Result<(), Stop> {
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
                cite,
                out,
                cfg,
                keys,
                mem,
            ),
            ExtMessage::Immediate {
                solicited,
                msn,
                imm,
            } => {
                if msn != self.msns[0] || self.rx_send.is_some() {
                    return Err(Stop::Terminate(TerminateError::DdpUntaggedMsnRange, cite));
                }
                let Some((wr, _)) = self.take_recv(keys, cfg) else {
                    return Err(Stop::Terminate(TerminateError::DdpUntaggedNoBuffer, cite));
                };
                self.msns[0] = msn.wrapping_add(1);
                let len = self.last_write_len;
                push_recv(
                    out,
                    wr.wr_id,
                    WcOpcode::RecvRdmaWithImm,
                    len,
                    (WcFlags::WITH_IMM, imm),
                    solicited,
                );
                Ok(())
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
                if msn != self.msns[1] || !irq.has_room() {
                    return Err(Stop::Terminate(TerminateError::DdpUntaggedMsnRange, cite));
                }
                self.msns[1] = msn.wrapping_add(1);
                // RFC 7306 §5: the target is 8 octets, 8-aligned.
                if to % 8 != 0 {
                    return Err(Stop::Terminate(TerminateError::RdmapBaseBounds, cite));
                }
                let (space, host) = match keys.resolve(
                    stag,
                    cfg.pd,
                    cfg.qpn.0,
                    to,
                    8,
                    AccessFlags::REMOTE_ATOMIC,
                    true,
                ) {
                    Ok(r) => r,
                    Err(e) => {
                        return Err(Stop::Terminate(source_error(e), cite));
                    }
                };
                let mut b = [0u8; 8];
                if mem.read(space, host, &mut b).is_err() {
                    return Err(Stop::Terminate(TerminateError::RdmapCatastrophic, cite));
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
                    return Err(Stop::Terminate(TerminateError::RdmapCatastrophic, cite));
                }
                irq.push(IrqEntry::Atomic { req_id, original });
                Ok(())
            }
            ExtMessage::AtomicResponse {
                msn,
                req_id,
                original,
            } => {
                let ok = msn == self.msns[3]
                    && send.orq_front().is_some_and(|o| o.atomic == Some(req_id));
                if !ok {
                    return Err(Stop::Terminate(TerminateError::RdmapUnexpectedOpcode, cite));
                }
                self.msns[3] = msn.wrapping_add(1);
                let Some(seq) = send.orq_pop().and_then(|o| o.seq) else {
                    return Ok(());
                };
                let res = match send.wr(seq) {
                    Some(wr) => scatter(
                        keys,
                        mem,
                        cfg.pd,
                        cfg.qpn.0,
                        &wr.sg_list,
                        0,
                        &original.to_le_bytes(),
                    ),
                    None => Err(ScatterError::Protection),
                };
                let status = match res {
                    Ok(()) => WcStatus::Success,
                    Err(_) => WcStatus::LocProtErr,
                };
                send.finish(seq, status, Some(8));
                if status != WcStatus::Success {
                    return Err(Stop::Terminate(
                        TerminateError::RdmapCatastrophic,
                        Cite::Nothing,
                    ));
                }
                send.retire(out);
                Ok(())
            }
        }
    }
}

/// A Read Response segment: completes the oldest outstanding Read of the send side.
#[allow(clippy::too_many_arguments)]
fn on_read_response<K: Stags + ?Sized, M: Memory + ?Sized>(
    seg: TaggedSeg<'_>,
    cite: Cite,
    send: &mut SendQueue,
    out: &mut Outbox,
    cfg: &IwarpConfig,
    keys: &mut K,
    mem: &mut M,
) -> Result<(), Stop> {
    let TaggedSeg {
        last,
        stag,
        offset,
        payload,
    } = seg;
    // RFC 5040 §5.2: a Read Response nobody asked for.
    let Some(o) = send.orq_front().filter(|o| o.atomic.is_none()) else {
        return Err(Stop::Terminate(TerminateError::RdmapUnexpectedOpcode, cite));
    };
    if stag.0 != o.sink_stag {
        return Err(Stop::Terminate(TerminateError::DdpTaggedInvalidStag, cite));
    }
    let rel = offset.wrapping_sub(o.sink_to);
    let end = rel.checked_add(payload.len() as u64);
    if offset < o.sink_to || end.is_none_or(|e| e > o.size) {
        return Err(Stop::Terminate(TerminateError::DdpTaggedBaseBounds, cite));
    }
    if let Some(seq) = o.seq {
        let Some(wr) = send.wr(seq) else {
            return Err(Stop::Terminate(
                TerminateError::RdmapCatastrophicStream,
                cite,
            ));
        };
        if scatter(keys, mem, cfg.pd, cfg.qpn.0, &wr.sg_list, rel, payload).is_err() {
            send.finish(seq, WcStatus::LocProtErr, None);
            return Err(Stop::Terminate(
                TerminateError::RdmapCatastrophic,
                Cite::Nothing,
            ));
        }
    }
    if last {
        send.orq_pop();
        if let Some(seq) = o.seq {
            send.finish(seq, WcStatus::Success, Some(o.size as u32));
            send.retire(out);
        }
    }
    Ok(())
}

/// A successful receive completion with its flags.
fn push_recv(
    out: &mut Outbox,
    wr_id: WrId,
    opcode: WcOpcode,
    len: u64,
    (flags, imm_data): (WcFlags, u32),
    solicited: bool,
) {
    let c = out.recv_wc(wr_id, WcStatus::Success, opcode, len as u32);
    c.wc.wc_flags = flags;
    c.wc.imm_data = imm_data;
    c.solicited = solicited;
}

/// One segment of a tagged message (RDMA Write, Read Response).
struct TaggedSeg<'a> {
    last: bool,
    stag: Stag,
    offset: u64,
    payload: &'a [u8],
}

/// One segment of an untagged queue 0 message.
struct SendSeg<'a> {
    last: bool,
    solicited: bool,
    invalidate: Option<Stag>,
    imm: Option<u32>,
    msn: u32,
    mo: u32,
    payload: &'a [u8],
}

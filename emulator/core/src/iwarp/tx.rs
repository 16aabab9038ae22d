//! The transmit side: the send queue with its MSNs and outstanding requests
//! ([`SendQueue`]), the responses owed to the peer ([`Irq`]), and their segmentation into
//! FPDUs (RFC 5040 §5, RFC 5041 §5: segments no larger than the MULPDU). The receive
//! side completes what the peer answered through [`SendQueue`]'s methods.

use std::collections::VecDeque;

use wire::iwarp::rdmap::{RdmapMessage, ReadRequest};
use wire::iwarp::{Stag, TerminateError};

use super::config::{IwarpConfig, Negotiated, RtrKind};
use super::ext::{AtomicOp, ExtMessage};
use super::mpa::Stream;
use super::outbox::Outbox;
use super::Stags;
use crate::attr::{SendWr, WorkCompletion};
use crate::memory::{Ahead, Memory};
use crate::types::{AccessFlags, Errno, SendFlags, WcStatus, WrOpcode};

/// A send WR in the queue.
#[derive(Debug)]
struct SqEntry {
    wr: SendWr,
    seq: u64,
    /// Message length (gather list or inline data).
    total: u64,
    /// Octets handed to the stream.
    sent: u64,
    started: bool,
    msn: u32,
    /// Set when the WR is finished.
    status: Option<WcStatus>,
    byte_len: u32,
}

/// An outstanding Read Request or Atomic Request (ORD credit).
#[derive(Debug, Clone, Copy)]
pub(super) struct OrqEntry {
    /// The SQ entry's sequence number; `None` for the internal RTR read.
    pub seq: Option<u64>,
    pub sink_stag: u32,
    pub sink_to: u64,
    pub size: u64,
    /// `Some(id)` for an atomic.
    pub atomic: Option<u32>,
}

/// A response the data source owes (IRD credit).
#[derive(Debug, Clone, Copy)]
pub(super) enum IrqEntry {
    Read {
        sink_stag: u32,
        sink_to: u64,
        space: crate::types::AddrSpace,
        host: u64,
        size: u64,
        sent: u64,
    },
    Atomic {
        req_id: u32,
        original: u64,
    },
}

/// The Read and Atomic Responses this side owes, at most IRD of them (RFC 5040 §6.4):
/// the receive side admits requests, the transmit side answers them in order.
#[derive(Debug)]
pub(super) struct Irq {
    entries: VecDeque<IrqEntry>,
    ird: u16,
    /// The front Read Response's source octets, read ahead of its FPDUs where memory wants
    /// runs; keyed by the source address (`host`), dropped after its last FPDU.
    ahead: Ahead,
}

impl Irq {
    pub(super) fn new(cfg: &IwarpConfig) -> Irq {
        Irq {
            entries: VecDeque::new(),
            ird: cfg.ird,
            ahead: Ahead::default(),
        }
    }

    pub(super) fn full_operation(&mut self, neg: &Negotiated) {
        self.ird = neg.ird;
    }

    /// Whether one more request fits the IRD.
    pub(super) fn has_room(&self) -> bool {
        self.entries.len() < usize::from(self.ird.max(1))
    }

    pub(super) fn push(&mut self, e: IrqEntry) {
        self.entries.push_back(e);
    }

    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.ahead.forget();
    }

    /// One segment of the oldest owed response into `stream`; false when none is owed.
    fn respond<M: Memory + ?Sized>(
        &mut self,
        msns: &mut [u32; 4],
        stream: &mut Stream,
        mem: &mut M,
    ) -> Result<bool, TerminateError> {
        let max = stream.max_payload(true);
        let Some(front) = self.entries.front_mut() else {
            return Ok(false);
        };
        match *front {
            IrqEntry::Atomic { req_id, original } => {
                self.entries.pop_front();
                let msn = take_msn(msns, 3);
                stream.emit_ext(&ExtMessage::AtomicResponse {
                    msn,
                    req_id,
                    original,
                });
            }
            IrqEntry::Read {
                sink_stag,
                sink_to,
                space,
                host,
                size,
                ref mut sent,
            } => {
                let chunk = ((size - *sent) as usize).min(max);
                let off = *sent;
                *sent += chunk as u64;
                let last = *sent == size;
                let head = RdmapMessage::ReadResponse {
                    last,
                    stag: Stag(sink_stag),
                    offset: sink_to.wrapping_add(off),
                    payload: &[],
                };
                let src = (space, host, size);
                let ahead = &mut self.ahead;
                stream
                    .emit_msg_gathered(&head, chunk, |p| {
                        if p.is_empty() {
                            return Ok(());
                        }
                        ahead.read_run(mem, src, off, p)
                    })
                    .map_err(|_| TerminateError::RdmapCatastrophic)?;
                if last {
                    self.entries.pop_front();
                }
            }
        }
        Ok(true)
    }
}

/// The first `len` octets of `buf`, for a segment's payload: a buffer kept between
/// segments, grown (zero-filled) only for a segment longer than any before it, so that a
/// segment neither allocates nor clears what the gather then overwrites (the gather fills
/// all `len` octets or fails, and a failed segment is not sent).
fn sized(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if buf.len() < len {
        buf.resize(len, 0);
    }
    &mut buf[..len]
}

/// The next MSN of untagged queue `q` (0 Send, 1 Read Request, 2 Terminate, 3 Atomic
/// Response), advanced.
fn take_msn(msns: &mut [u32; 4], q: usize) -> u32 {
    let m = msns[q];
    msns[q] = m.wrapping_add(1);
    m
}

/// Octets generated per `poll_stream_transmit` call, at most (plus one FPDU).
pub(super) const TX_BUDGET: usize = 256 * 1024;

/// Reads `out.len()` octets at message offset `off` of the WR's data into `out`.
fn gather<K: Stags + ?Sized, M: Memory + ?Sized>(
    keys: &K,
    mem: &mut M,
    (pd, qpn, inline_space): (crate::types::PdHandle, u32, crate::types::AddrSpace),
    wr: &SendWr,
    mut off: u64,
    out: &mut [u8],
) -> Result<(), WcStatus> {
    if let Some(d) = &wr.inline_data {
        let s = off as usize;
        out.copy_from_slice(d.get(s..s + out.len()).ok_or(WcStatus::LocLenErr)?);
        return Ok(());
    }
    // IBV_SEND_INLINE not yet copied: the SGEs name the owner's memory, no lkey.
    let inline = wr.send_flags.contains(SendFlags::INLINE);
    let mut done = 0;
    for s in &wr.sg_list {
        if done == out.len() {
            break;
        }
        let sl = u64::from(s.length);
        if off >= sl {
            off -= sl;
            continue;
        }
        let n = ((sl - off) as usize).min(out.len() - done);
        let addr = s.addr.wrapping_add(off);
        let (space, host) = if inline {
            (inline_space, addr)
        } else {
            keys.resolve(s.lkey.0, pd, qpn, addr, n as u64, AccessFlags::EMPTY, false)
                .map_err(|_| WcStatus::LocProtErr)?
        };
        mem.read(space, host, &mut out[done..done + n])
            .map_err(|_| WcStatus::LocProtErr)?;
        done += n;
        off = 0;
    }
    if done == out.len() {
        Ok(())
    } else {
        Err(WcStatus::LocLenErr)
    }
}

/// [`gather`] for the next FPDU of `e` (`out.len()` octets at `e.sent`) through `ahead`
/// ([`Ahead::serve`]): the message read in runs where the memory asks for them.
fn gather_ahead<K: Stags + ?Sized, M: Memory + ?Sized>(
    keys: &K,
    mem: &mut M,
    at: (crate::types::PdHandle, u32, crate::types::AddrSpace),
    e: &SqEntry,
    ahead: &mut Ahead,
    out: &mut [u8],
) -> Result<(), WcStatus> {
    let wr = &e.wr;
    if wr.inline_data.is_some() || wr.send_flags.contains(SendFlags::INLINE) {
        return gather(keys, mem, at, wr, e.sent, out);
    }
    ahead.serve(
        mem,
        (e.seq, e.sent, e.total),
        out,
        |m| wants_runs(keys, m, at, wr, e.sent),
        |m, off, buf| gather(keys, m, at, wr, off, buf),
    )
}

/// Whether the memory under message offset `off` of `wr` wants its octets read in runs;
/// `false` when no SGE holds `off` or its key does not resolve (the read reports that).
fn wants_runs<K: Stags + ?Sized, M: Memory + ?Sized>(
    keys: &K,
    mem: &M,
    (pd, qpn, _): (crate::types::PdHandle, u32, crate::types::AddrSpace),
    wr: &SendWr,
    mut off: u64,
) -> bool {
    for s in &wr.sg_list {
        let sl = u64::from(s.length);
        if off >= sl {
            off -= sl;
            continue;
        }
        let at = s.addr.wrapping_add(off);
        return keys
            .resolve(s.lkey.0, pd, qpn, at, 1, AccessFlags::EMPTY, false)
            .is_ok_and(|(space, host)| mem.prefers_runs(space, host));
    }
    false
}

/// Checks every SGE of a WR names memory with `need` (before anything is sent).
fn check_sges<K: Stags + ?Sized>(
    keys: &K,
    pd: crate::types::PdHandle,
    qpn: u32,
    wr: &SendWr,
    need: AccessFlags,
) -> Result<(), WcStatus> {
    if wr.inline_data.is_some() || wr.send_flags.contains(SendFlags::INLINE) {
        return Ok(());
    }
    for s in &wr.sg_list {
        keys.resolve(s.lkey.0, pd, qpn, s.addr, u64::from(s.length), need, false)
            .map_err(|_| WcStatus::LocProtErr)?;
    }
    Ok(())
}

/// The requester's send side: the send queue, the MSNs of the untagged queues this side
/// sends on, and the Read and Atomic Requests awaiting their responses (ORQ).
#[derive(Debug)]
pub(super) struct SendQueue {
    sq: VecDeque<SqEntry>,
    /// Sequence number of the WR at the head of `sq`.
    head_seq: u64,
    /// Index in `sq` of the next WR to segment.
    cur: usize,
    msns: [u32; 4],
    orq: VecDeque<OrqEntry>,
    next_req_id: u32,
    ord: u16,
    ext: bool,
    /// May send FPDUs carrying work (responder: after the first FPDU / RTR arrived).
    pub(super) ready: bool,
    max_wr: u32,
    max_inline: u32,
    sig_all: bool,
    /// Payload of the WR being segmented, read ahead of its FPDUs where memory wants runs.
    ahead: Ahead,
    /// The payload of a Send with Immediate segment being framed (kept: one allocation,
    /// not one a segment; the other messages are gathered into their FPDU in place).
    payload: Vec<u8>,
}

impl SendQueue {
    pub(super) fn new(cfg: &IwarpConfig) -> SendQueue {
        SendQueue {
            sq: VecDeque::new(),
            head_seq: 0,
            cur: 0,
            msns: [1; 4],
            orq: VecDeque::new(),
            next_req_id: 1,
            ord: cfg.ord,
            ext: false,
            ready: false,
            max_wr: cfg.max_send_wr,
            max_inline: cfg.max_inline_data,
            sig_all: cfg.sq_sig_all,
            ahead: Ahead::default(),
            payload: Vec::new(),
        }
    }

    pub(super) fn full_operation(&mut self, neg: &Negotiated) {
        self.ord = neg.ord;
        self.ext = neg.extensions;
    }

    /// The next MSN of untagged queue `q`, advanced.
    pub(super) fn take_msn(&mut self, q: usize) -> u32 {
        take_msn(&mut self.msns, q)
    }

    /// Queues `wr` (`ibv_post_send`); on a closed connection it completes with
    /// WR_FLUSH_ERR.
    pub(super) fn post(&mut self, wr: SendWr, closed: bool, out: &mut Outbox) -> Result<(), Errno> {
        if matches!(wr.opcode, WrOpcode::BindMw) {
            return Err(Errno::EINVAL);
        }
        if self.sq.len() >= self.max_wr as usize {
            return Err(Errno::ENOMEM);
        }
        let total = match &wr.inline_data {
            Some(d) => {
                if d.len() > self.max_inline as usize {
                    return Err(Errno::EINVAL);
                }
                d.len() as u64
            }
            None => wr.sg_list.iter().map(|s| u64::from(s.length)).sum(),
        };
        if wr.send_flags.contains(SendFlags::INLINE) && total > u64::from(self.max_inline) {
            return Err(Errno::EINVAL);
        }
        if total > u64::from(u32::MAX >> 1) {
            return Err(Errno::EINVAL);
        }
        let seq = self.head_seq + self.sq.len() as u64;
        self.sq.push_back(SqEntry {
            wr,
            seq,
            total,
            sent: 0,
            started: false,
            msn: 0,
            status: closed.then_some(WcStatus::WrFlushErr),
            byte_len: 0,
        });
        self.retire(out);
        Ok(())
    }

    /// Moves finished WRs from the head of the queue to the send CQ, in order.
    pub(super) fn retire(&mut self, out: &mut Outbox) {
        while let Some(e) = self.sq.front() {
            let Some(status) = e.status else {
                break;
            };
            let e = self.sq.pop_front().expect("front exists");
            self.head_seq += 1;
            self.cur = self.cur.saturating_sub(1);
            let signaled = self.sig_all || e.wr.send_flags.contains(SendFlags::SIGNALED);
            if signaled || status != WcStatus::Success {
                out.send_wc(WorkCompletion {
                    wr_id: e.wr.wr_id,
                    status,
                    opcode: e.wr.opcode.wc_opcode(),
                    byte_len: e.byte_len,
                    ..WorkCompletion::default()
                });
            }
        }
    }

    /// Completes every unfinished WR with WR_FLUSH_ERR (the QP is in error).
    pub(super) fn flush(&mut self, out: &mut Outbox) {
        for e in self.sq.iter_mut() {
            if e.status.is_none() {
                e.status = Some(WcStatus::WrFlushErr);
            }
        }
        self.orq.clear();
        self.retire(out);
    }

    /// The oldest outstanding request.
    pub(super) fn orq_front(&self) -> Option<OrqEntry> {
        self.orq.front().copied()
    }

    pub(super) fn orq_pop(&mut self) -> Option<OrqEntry> {
        self.orq.pop_front()
    }

    /// The WR with sequence number `seq`, if still queued.
    pub(super) fn wr(&self, seq: u64) -> Option<&SendWr> {
        let idx = seq.checked_sub(self.head_seq)?;
        self.sq.get(usize::try_from(idx).ok()?).map(|e| &e.wr)
    }

    /// Finishes the WR with sequence number `seq` (it retires with the next `retire`).
    pub(super) fn finish(&mut self, seq: u64, status: WcStatus, byte_len: Option<u32>) {
        let Some(idx) = seq
            .checked_sub(self.head_seq)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return;
        };
        if let Some(e) = self.sq.get_mut(idx) {
            e.status = Some(status);
            if let Some(n) = byte_len {
                e.byte_len = n;
            }
        }
    }

    /// The WR waiting for the oldest response gets `status` (a Terminate from the peer);
    /// the rest are flushed with the connection.
    pub(super) fn fail_oldest_request(&mut self, status: WcStatus) {
        if let Some(seq) = self.orq.front().and_then(|o| o.seq) {
            self.finish(seq, status, None);
        }
    }

    /// Emits the RFC 6581 RTR message of `kind` (initiator, first FPDU).
    pub(super) fn emit_rtr(&mut self, kind: RtrKind, stream: &mut Stream) {
        let msg = match kind {
            RtrKind::Write => RdmapMessage::Write {
                last: true,
                stag: Stag(0),
                offset: 0,
                payload: &[],
            },
            RtrKind::Send => RdmapMessage::Send {
                last: true,
                solicited: false,
                invalidate: None,
                msn: self.take_msn(0),
                mo: 0,
                payload: &[],
            },
            RtrKind::Read => {
                self.orq.push_back(OrqEntry {
                    seq: None,
                    sink_stag: 0,
                    sink_to: 0,
                    size: 0,
                    atomic: None,
                });
                RdmapMessage::ReadRequest {
                    msn: self.take_msn(1),
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
        stream.emit_msg(&msg);
    }

    /// A send WR failed locally: it completes with `status`, and the connection
    /// terminates with the returned error.
    fn local_error(&mut self, idx: usize, status: WcStatus) -> TerminateError {
        if let Some(e) = self.sq.get_mut(idx) {
            e.status = Some(status);
        }
        if status == WcStatus::LocQpOpErr {
            TerminateError::RdmapOperationUnspecified
        } else {
            TerminateError::RdmapCatastrophic
        }
    }

    /// Generates one FPDU into `stream` (an owed response first, else the next segment of
    /// a send WR) or finishes one WR. `Ok(false)` when nothing can be sent now; an error
    /// is the Terminate the connection sends (a failed WR is already marked).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn segment<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        irq: &mut Irq,
        stream: &mut Stream,
        out: &mut Outbox,
        cfg: &IwarpConfig,
        keys: &mut K,
        mem: &mut M,
    ) -> Result<bool, TerminateError> {
        if !self.ready {
            return Ok(false);
        }
        if irq.respond(&mut self.msns, stream, mem)? {
            return Ok(true);
        }
        let idx = self.cur;
        let Some(e) = self.sq.get(idx) else {
            return Ok(false);
        };
        let (pd, qpn) = (cfg.pd, cfg.qpn.0);
        let opcode = e.wr.opcode;
        match opcode {
            WrOpcode::Send
            | WrOpcode::SendWithInv
            | WrOpcode::SendWithImm
            | WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm => {
                let imm_op = matches!(opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm);
                if imm_op && !self.ext {
                    return Err(self.local_error(idx, WcStatus::LocQpOpErr));
                }
                let tagged = matches!(opcode, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm);
                if !e.started {
                    if let Err(s) = check_sges(keys, pd, qpn, &e.wr, AccessFlags::EMPTY) {
                        return Err(self.local_error(idx, s));
                    }
                    let msn = if tagged { 0 } else { self.take_msn(0) };
                    let e = &mut self.sq[idx];
                    e.started = true;
                    e.msn = msn;
                }
                let e = &self.sq[idx];
                let chunk = ((e.total - e.sent) as usize).min(stream.max_payload(tagged));
                let last = e.sent + chunk as u64 == e.total;
                let solicited = e.wr.send_flags.contains(SendFlags::SOLICITED);
                let msg_off = e.sent;
                let msn = e.msn;
                let wr = &e.wr;
                let at = (pd, qpn, cfg.inline_space);
                let gathered = if opcode == WrOpcode::SendWithImm {
                    // The extension's message is built apart: its payload goes through
                    // the segment buffer.
                    let payload = sized(&mut self.payload, chunk);
                    let r = gather_ahead(keys, mem, at, e, &mut self.ahead, payload);
                    if r.is_ok() {
                        stream.emit_ext(&ExtMessage::SendImm {
                            last,
                            solicited,
                            msn,
                            mo: msg_off as u32,
                            imm: wr.imm_data,
                            payload: &self.payload[..chunk],
                        });
                    }
                    r
                } else {
                    let head = if tagged {
                        RdmapMessage::Write {
                            last,
                            stag: Stag(wr.rdma.rkey.0),
                            offset: wr.rdma.remote_addr.wrapping_add(msg_off),
                            payload: &[],
                        }
                    } else {
                        RdmapMessage::Send {
                            last,
                            solicited,
                            invalidate: (opcode == WrOpcode::SendWithInv)
                                .then_some(Stag(wr.invalidate_rkey.0)),
                            msn,
                            mo: msg_off as u32,
                            payload: &[],
                        }
                    };
                    let ahead = &mut self.ahead;
                    stream.emit_msg_gathered(&head, chunk, |p| {
                        gather_ahead(keys, mem, at, e, ahead, p)
                    })
                };
                if let Err(s) = gathered {
                    return Err(self.local_error(idx, s));
                }
                let imm = wr.imm_data;
                let e = &mut self.sq[idx];
                e.sent += chunk as u64;
                if last {
                    e.byte_len = e.total as u32;
                    e.status = Some(WcStatus::Success);
                    self.cur += 1;
                    if opcode == WrOpcode::RdmaWriteWithImm {
                        let msn = self.take_msn(0);
                        stream.emit_ext(&ExtMessage::Immediate {
                            solicited,
                            msn,
                            imm,
                        });
                    }
                    // Like siw: a Send or Write is complete once handed to the stream.
                    self.retire(out);
                }
                Ok(true)
            }
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                let atomic = opcode != WrOpcode::RdmaRead;
                if atomic && !self.ext {
                    return Err(self.local_error(idx, WcStatus::LocQpOpErr));
                }
                // RFC 5040 §6.4: at most ORD outstanding; a fenced WR waits for them all.
                if self.orq.len() >= usize::from(self.ord.max(1))
                    || (e.wr.send_flags.contains(SendFlags::FENCE) && !self.orq.is_empty())
                {
                    return Ok(false);
                }
                if let Err(s) = check_sges(keys, pd, qpn, &e.wr, AccessFlags::LOCAL_WRITE) {
                    return Err(self.local_error(idx, s));
                }
                if atomic && e.total < 8 {
                    return Err(self.local_error(idx, WcStatus::LocLenErr));
                }
                let (sink_stag, sink_to) =
                    e.wr.sg_list.first().map_or((0, 0), |s| (s.lkey.0, s.addr));
                let seq = e.seq;
                let msn = self.take_msn(1);
                if atomic {
                    let req_id = self.next_req_id;
                    self.next_req_id = req_id.wrapping_add(1);
                    let a = self.sq[idx].wr.atomic;
                    let (op, data, compare) = if opcode == WrOpcode::AtomicFetchAndAdd {
                        (AtomicOp::FetchAdd, a.compare_add, 0)
                    } else {
                        (AtomicOp::CmpSwap, a.swap, a.compare_add)
                    };
                    self.orq.push_back(OrqEntry {
                        seq: Some(seq),
                        sink_stag,
                        sink_to,
                        size: 8,
                        atomic: Some(req_id),
                    });
                    stream.emit_ext(&ExtMessage::AtomicRequest {
                        msn,
                        op,
                        req_id,
                        stag: a.rkey.0,
                        to: a.remote_addr,
                        data,
                        compare,
                    });
                } else {
                    let e = &self.sq[idx];
                    let size = e.total;
                    let req = ReadRequest {
                        sink_stag: Stag(sink_stag),
                        sink_offset: sink_to,
                        size: size as u32,
                        src_stag: Stag(e.wr.rdma.rkey.0),
                        src_offset: e.wr.rdma.remote_addr,
                    };
                    self.orq.push_back(OrqEntry {
                        seq: Some(seq),
                        sink_stag,
                        sink_to,
                        size,
                        atomic: None,
                    });
                    stream.emit_msg(&RdmapMessage::ReadRequest { msn, request: req });
                }
                self.sq[idx].started = true;
                self.cur += 1;
                Ok(true)
            }
            WrOpcode::LocalInv => {
                if keys.invalidate(e.wr.invalidate_rkey.0, pd).is_err() {
                    return Err(self.local_error(idx, WcStatus::LocProtErr));
                }
                self.sq[idx].status = Some(WcStatus::Success);
                self.cur += 1;
                self.retire(out);
                Ok(true)
            }
            // siw has neither FLUSH nor ATOMIC WRITE (RFC 5040 names no such message).
            WrOpcode::BindMw | WrOpcode::Flush | WrOpcode::AtomicWrite => {
                Err(self.local_error(idx, WcStatus::LocQpOpErr))
            }
        }
    }
}

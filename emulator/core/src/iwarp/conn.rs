//! The connection object: its state, the verbs (`post_send`, `post_recv`, `close`,
//! `terminate`), the stream input and the pollers. MPA negotiation is `mpa.rs`'s, the
//! transmit and receive paths `tx.rs`'s and `rx.rs`'s.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use wire::iwarp::deframer::{Deframed, Deframer};
use wire::iwarp::fpdu::{self, FpduConfig};
use wire::iwarp::mpa::{IrdOrd, MpaFrameKind, MpaRepr, MpaRevision};
use wire::iwarp::{Error as WireError, TerminateError};

use super::config::{
    Completion, IwarpConfig, IwarpCounters, IwarpEvent, MpaOffer, Negotiated, Role, RtrKind,
};
use super::ext::EXT_FLAG;
use super::mpa::{mulpdu, ENHANCED_FLAG};

/// How long a partial FPDU may wait for its next octet before the stream is declared
/// lost ([`Connection::set_rx_stall_timeout`]). Longer than TCP's first five
/// retransmissions (0.2 + 0.4 + 0.8 + 1.6 + 3.2 s), so a lossy path is not mistaken for
/// a peer that stopped mid-FPDU.
pub const RX_STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a Send that found no receive WR waits for one before the connection is
/// terminated for it ([`Connection::set_recv_wait`]): the wait of a NIC that fetches
/// receive WRs from a queue in host memory (a ring) after the application posted them.
pub const RECV_WAIT: Duration = Duration::from_secs(1);
use super::Stags;
use crate::attr::{RecvWr, SendWr, WorkCompletion};
use crate::memory::Memory;
use crate::types::{Errno, WcOpcode, WcStatus, WrOpcode};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    AwaitRequest,
    RequestPending,
    AwaitReply,
    Rts,
    Closed,
}

/// A send WR in the queue.
#[derive(Debug)]
pub(super) struct SqEntry {
    pub wr: SendWr,
    pub seq: u64,
    /// Message length (gather list or inline data).
    pub total: u64,
    /// Octets handed to the stream.
    pub sent: u64,
    pub started: bool,
    pub msn: u32,
    /// Set when the WR is finished.
    pub status: Option<WcStatus>,
    pub byte_len: u32,
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

/// The receive WR being filled by an untagged message on queue 0.
#[derive(Debug)]
pub(super) struct RxSend {
    pub wr: RecvWr,
    pub len: u64,
}

/// The iWARP transport engine of one RC QP over one byte stream.
#[derive(Debug)]
pub struct Connection {
    pub(super) cfg: IwarpConfig,
    pub(super) role: Role,
    pub(super) phase: Phase,
    pub(super) deframer: Option<Deframer>,
    pub(super) tx_cfg: FpduConfig,
    pub(super) tx_pos: u64,
    pub(super) out: Vec<u8>,
    pub(super) deadline: Option<Instant>,
    pub(super) offer: Option<MpaOffer>,
    pub(super) neg: Option<Negotiated>,
    pub(super) ext: bool,
    pub(super) ird: u16,
    pub(super) ord: u16,
    pub(super) mulpdu: usize,
    /// May send FPDUs carrying work (responder: after the first FPDU / RTR arrived).
    pub(super) tx_ready: bool,
    pub(super) expect_rtr: Option<RtrKind>,
    pub(super) got_first: bool,
    pub(super) sq: VecDeque<SqEntry>,
    pub(super) sq_head_seq: u64,
    pub(super) sq_cur: usize,
    pub(super) tx_msn: [u32; 4],
    pub(super) orq: VecDeque<OrqEntry>,
    pub(super) next_req_id: u32,
    pub(super) rq: VecDeque<RecvWr>,
    pub(super) rx_msn: [u32; 4],
    pub(super) rx_send: Option<RxSend>,
    pub(super) cur_write_len: u64,
    pub(super) last_write_len: u64,
    pub(super) irq: VecDeque<IrqEntry>,
    pub(super) completions: VecDeque<Completion>,
    pub(super) events: VecDeque<IwarpEvent>,
    pub(super) close_wanted: bool,
    pub(super) counters: IwarpCounters,
    /// A ULPDU (the first segment of an untagged queue 0 message) that found no receive
    /// WR, and until when it may wait for one; input stops meanwhile.
    pub(super) held: Option<(Vec<u8>, Instant)>,
    pub(super) recv_wait: Duration,
    /// When the deframer holds part of an FPDU: when its stream stalls.
    pub(super) rx_stall: Option<Instant>,
    pub(super) rx_stall_timeout: Option<Duration>,
}

impl Connection {
    fn new(now: Instant, cfg: IwarpConfig, role: Role) -> Connection {
        let deframer = match role {
            Role::Initiator => Deframer::expecting_reply(),
            Role::Responder => Deframer::expecting_request(),
        };
        let mulpdu = mulpdu(cfg.mss, false);
        Connection {
            role,
            phase: match role {
                Role::Initiator => Phase::AwaitReply,
                Role::Responder => Phase::AwaitRequest,
            },
            deframer: Some(deframer),
            tx_cfg: FpduConfig::default(),
            tx_pos: 0,
            out: Vec::new(),
            deadline: Some(now + cfg.mpa_timeout),
            offer: None,
            neg: None,
            ext: false,
            ird: cfg.ird,
            ord: cfg.ord,
            mulpdu,
            tx_ready: false,
            expect_rtr: None,
            got_first: false,
            sq: VecDeque::new(),
            sq_head_seq: 0,
            sq_cur: 0,
            tx_msn: [1; 4],
            orq: VecDeque::new(),
            next_req_id: 1,
            rq: VecDeque::new(),
            rx_msn: [1; 4],
            rx_send: None,
            cur_write_len: 0,
            last_write_len: 0,
            irq: VecDeque::new(),
            completions: VecDeque::new(),
            events: VecDeque::new(),
            close_wanted: false,
            counters: IwarpCounters::default(),
            held: None,
            recv_wait: RECV_WAIT,
            rx_stall: None,
            rx_stall_timeout: Some(RX_STALL_TIMEOUT),
            cfg,
        }
    }

    /// The side that sends the MPA Request (queued at once for transmission).
    ///
    /// # Panics
    /// If the private data (with the IRD/ORD word) exceeds 512 octets.
    pub fn initiator(now: Instant, cfg: IwarpConfig) -> Connection {
        let mut c = Connection::new(now, cfg, Role::Initiator);
        let rev = if c.cfg.revision >= 2 {
            MpaRevision::V2(IrdOrd {
                ird: c.cfg.ird,
                ord: c.cfg.ord,
                peer_to_peer: c.cfg.peer_to_peer,
                rtr_send: c.cfg.peer_to_peer && c.cfg.rtr.send,
                rtr_write: c.cfg.peer_to_peer && c.cfg.rtr.write,
                rtr_read: c.cfg.peer_to_peer && c.cfg.rtr.read,
            })
        } else {
            MpaRevision::V1
        };
        let pd = c.cfg.private_data.clone();
        c.emit_mpa(MpaRepr {
            kind: MpaFrameKind::Request,
            markers: c.cfg.markers,
            crc: c.cfg.crc,
            reject: false,
            reserved_flags: if c.cfg.extensions { EXT_FLAG } else { 0 }
                | if c.cfg.revision >= 2 {
                    ENHANCED_FLAG
                } else {
                    0
                },
            revision: rev,
            private_data: &pd,
        });
        c
    }

    /// The side that accepted the TCP connection: waits for the MPA Request.
    pub fn responder(now: Instant, cfg: IwarpConfig) -> Connection {
        Connection::new(now, cfg, Role::Responder)
    }

    /// Which end this is.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Whether the connection is in full operation.
    pub fn is_established(&self) -> bool {
        self.phase == Phase::Rts
    }

    /// Whether the connection is over (closed, rejected, terminated).
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// What the MPA exchange decided, once established.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.neg.as_ref()
    }

    /// Counters.
    pub fn counters(&self) -> IwarpCounters {
        self.counters
    }

    /// How long a partial FPDU may wait for its next octet in full operation before the
    /// connection sends a Terminate (LLP: TCP connection lost) and closes; `None` waits
    /// forever. Default [`RX_STALL_TIMEOUT`].
    pub fn set_rx_stall_timeout(&mut self, timeout: Option<Duration>) {
        self.rx_stall_timeout = timeout;
    }

    /// How long a Send that found the receive queue empty waits for a receive WR
    /// before the connection terminates for it (DDP: no buffer). Zero terminates at once,
    /// as a NIC does whose receive WRs are in place when `ibv_post_recv` returns.
    /// Default [`RECV_WAIT`].
    pub fn set_recv_wait(&mut self, wait: Duration) {
        self.recv_wait = wait;
    }

    /// Whether input stopped because a Send waits for a receive WR: the driver stops
    /// reading the stream, and after `post_recv` calls `handle_stream` with no bytes.
    pub fn is_waiting_for_recv(&self) -> bool {
        self.held.is_some()
    }

    /// The driver should close the TCP stream: the connection is over and every byte
    /// it had to send was taken by `poll_stream_transmit`.
    pub fn wants_close(&self) -> bool {
        self.close_wanted && self.out.is_empty()
    }

    /// Bytes the stream delivered, in order, chunked any way. Call with an empty slice
    /// after `accept` to process bytes that arrived before it.
    pub fn handle_stream<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        now: Instant,
        bytes: &[u8],
        keys: &mut K,
        mem: &mut M,
    ) {
        let Some(mut d) = self.deframer.take() else {
            return;
        };
        if self.phase != Phase::Closed {
            d.read(bytes);
        }
        if !bytes.is_empty() {
            self.rx_stall = None;
        }
        if let Some((u, until)) = self.held.take() {
            if self.rq.is_empty() {
                self.held = Some((u, until));
            } else {
                // A receive WR arrived: the stream's clock restarts with it.
                self.rx_stall = None;
                self.counters.rx_fpdus += 1;
                self.on_ulpdu(&u, keys, mem);
            }
        }
        while self.held.is_none()
            && self.phase != Phase::Closed
            && self.phase != Phase::RequestPending
        {
            match d.pop() {
                None => break,
                Some(Ok(Deframed::Mpa(repr))) => {
                    let offer = MpaOffer {
                        revision: repr.revision.number(),
                        crc: repr.crc,
                        markers: repr.markers,
                        ird_ord: match repr.revision {
                            MpaRevision::V2(w) => Some(w),
                            MpaRevision::V1 => None,
                        },
                        reserved_flags: repr.reserved_flags,
                        private_data: repr.private_data.to_vec(),
                    };
                    let reject = repr.reject;
                    match repr.kind {
                        MpaFrameKind::Request => self.on_request(offer),
                        MpaFrameKind::Reply => {
                            self.on_reply(offer, reject);
                            if let Some(n) = &self.neg {
                                d.set_config(FpduConfig {
                                    crc: n.crc,
                                    markers: n.markers_rx,
                                });
                            }
                        }
                    }
                }
                Some(Ok(Deframed::Fpdu { ulpdu, .. })) => {
                    if self.needs_recv(ulpdu) && self.rq.is_empty() && !self.recv_wait.is_zero() {
                        self.held = Some((ulpdu.to_vec(), now + self.recv_wait));
                        break;
                    }
                    self.counters.rx_fpdus += 1;
                    self.on_ulpdu(ulpdu, keys, mem);
                }
                Some(Err(e)) => self.on_stream_error(e),
            }
        }
        // MPA keeps no timer of its own: a peer that stopped in the middle of an FPDU is
        // timed here (not while input is held for a receive WR: that wait is ours).
        let partial = self.phase == Phase::Rts && self.held.is_none() && d.buffered() > 0;
        self.rx_stall = match (partial, self.rx_stall, self.rx_stall_timeout) {
            (true, Some(t), _) => Some(t),
            (true, None, Some(timeout)) => Some(now + timeout),
            _ => None,
        };
        self.deframer = Some(d);
    }

    fn on_stream_error(&mut self, e: WireError) {
        match (self.phase, e) {
            (Phase::Rts, WireError::BadCrc { .. }) => {
                // RFC 5044 §6: a CRC error loses the stream.
                self.counters.crc_errors += 1;
                self.send_terminate(TerminateError::MpaCrc, None);
            }
            (Phase::Rts, WireError::BadMarker { .. }) => {
                self.send_terminate(TerminateError::MpaMarker, None);
            }
            (Phase::Rts, WireError::UlpduTooShort(_)) => {
                self.send_terminate(TerminateError::DdpCatastrophic, None);
            }
            (Phase::Rts, _) => {
                self.send_terminate(TerminateError::MpaInvalidRequestReply, None);
            }
            (_, e) => self.mpa_failed(e),
        }
    }

    /// The peer closed (or reset) the TCP stream.
    pub fn handle_stream_closed(&mut self, _now: Instant) {
        if self.phase == Phase::Closed {
            return;
        }
        let was_rts = self.phase == Phase::Rts;
        self.phase = Phase::Closed;
        self.deadline = None;
        self.close_wanted = true;
        self.flush_all();
        if !was_rts {
            self.events
                .push_back(IwarpEvent::MpaFailed(WireError::Truncated));
        }
        self.events.push_back(IwarpEvent::Closed);
    }

    /// The next deadline, if any: the MPA negotiation timeout, the wait of a Send for a
    /// receive WR, a partial FPDU's stall timeout.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.deadline,
            self.held.as_ref().map(|h| h.1),
            self.rx_stall,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Time passed: fails the MPA exchange if its deadline is reached; terminates for a
    /// Send still without a receive WR (RFC 5041 §7.2: untagged buffer, no buffer
    /// available) or for a stream that stopped mid-FPDU (RFC 5044 §8, layer LLP: TCP
    /// connection closed, terminated or lost).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.held.as_ref().is_some_and(|h| now >= h.1) {
            if let Some((u, _)) = self.held.take() {
                tracing::debug!(qpn = self.cfg.qpn.0, "iwarp: no receive WR for a Send");
                let off = super::placement::Offender {
                    ulpdu: &u,
                    rdmap: false,
                };
                self.send_terminate(TerminateError::DdpUntaggedNoBuffer, Some(off));
            }
        }
        if self.rx_stall.is_some_and(|t| now >= t) {
            self.rx_stall = None;
            if self.phase == Phase::Rts {
                tracing::debug!(
                    qpn = self.cfg.qpn.0,
                    buffered = self.deframer.as_ref().map_or(0, Deframer::buffered),
                    "iwarp: stream stalled in the middle of an FPDU"
                );
                self.send_terminate(TerminateError::MpaTcpLost, None);
            }
        }
        if self.deadline.is_some_and(|d| now >= d) {
            self.deadline = None;
            if matches!(self.phase, Phase::AwaitReply | Phase::AwaitRequest) {
                self.phase = Phase::Closed;
                self.close_wanted = true;
                self.flush_all();
                self.events.push_back(IwarpEvent::MpaTimeout);
                self.events.push_back(IwarpEvent::Closed);
            }
        }
    }

    /// The next completion.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<IwarpEvent> {
        self.events.pop_front()
    }

    /// `ibv_post_send` on this QP. Errors: ENOMEM (queue full), EINVAL (bad opcode, inline
    /// data too long). On a closed connection the WR completes with WR_FLUSH_ERR.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), Errno> {
        if matches!(wr.opcode, WrOpcode::BindMw) {
            return Err(Errno::EINVAL);
        }
        if self.sq.len() >= self.cfg.max_send_wr as usize {
            return Err(Errno::ENOMEM);
        }
        let total = match &wr.inline_data {
            Some(d) => {
                if d.len() > self.cfg.max_inline_data as usize {
                    return Err(Errno::EINVAL);
                }
                d.len() as u64
            }
            None => wr.sg_list.iter().map(|s| u64::from(s.length)).sum(),
        };
        if wr.send_flags.contains(crate::types::SendFlags::INLINE)
            && total > u64::from(self.cfg.max_inline_data)
        {
            return Err(Errno::EINVAL);
        }
        if total > u64::from(u32::MAX >> 1) {
            return Err(Errno::EINVAL);
        }
        let seq = self.sq_head_seq + self.sq.len() as u64;
        let mut e = SqEntry {
            wr,
            seq,
            total,
            sent: 0,
            started: false,
            msn: 0,
            status: None,
            byte_len: 0,
        };
        if self.phase == Phase::Closed {
            e.status = Some(WcStatus::WrFlushErr);
        }
        self.sq.push_back(e);
        self.retire();
        Ok(())
    }

    /// `ibv_post_recv` on this QP. Errors: ENOMEM (queue full). On a closed connection
    /// the WR completes with WR_FLUSH_ERR.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), Errno> {
        if self.rq.len() >= self.cfg.max_recv_wr as usize {
            return Err(Errno::ENOMEM);
        }
        if self.phase == Phase::Closed {
            self.push_recv_wc(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
            return Ok(());
        }
        self.rq.push_back(wr);
        Ok(())
    }

    /// Closes the connection (`rdma_disconnect`: iWARP has no disconnect message, the
    /// TCP stream is closed). Outstanding WRs complete with WR_FLUSH_ERR.
    pub fn close(&mut self) {
        if self.phase == Phase::Closed {
            return;
        }
        self.phase = Phase::Closed;
        self.deadline = None;
        self.close_wanted = true;
        self.flush_all();
        self.events.push_back(IwarpEvent::Closed);
    }

    /// Sends a Terminate with `error` (after what is already queued) and closes.
    pub fn terminate(&mut self, error: TerminateError) {
        self.send_terminate(error, None);
    }

    /// Moves completed send WRs to the completion queue, in order.
    pub(super) fn retire(&mut self) {
        while let Some(e) = self.sq.front() {
            let Some(status) = e.status else {
                break;
            };
            let e = self.sq.pop_front().expect("front exists");
            self.sq_head_seq += 1;
            self.sq_cur = self.sq_cur.saturating_sub(1);
            let signaled =
                self.cfg.sq_sig_all || e.wr.send_flags.contains(crate::types::SendFlags::SIGNALED);
            if signaled || status != WcStatus::Success {
                self.completions.push_back(Completion {
                    cq: self.cfg.send_cq,
                    wc: WorkCompletion {
                        wr_id: e.wr.wr_id,
                        status,
                        opcode: e.wr.opcode.wc_opcode(),
                        byte_len: e.byte_len,
                        qp_num: self.cfg.qpn,
                        ..WorkCompletion::default()
                    },
                    solicited: false,
                });
            }
        }
    }

    pub(super) fn push_recv_wc(
        &mut self,
        wr_id: crate::types::WrId,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) {
        self.completions.push_back(Completion {
            cq: self.cfg.recv_cq,
            wc: WorkCompletion {
                wr_id,
                status,
                opcode,
                byte_len,
                qp_num: self.cfg.qpn,
                ..WorkCompletion::default()
            },
            solicited: false,
        });
    }

    /// Completes every outstanding WR with WR_FLUSH_ERR (the QP is in error).
    pub(super) fn flush_all(&mut self) {
        self.held = None;
        self.rx_stall = None;
        for e in self.sq.iter_mut() {
            if e.status.is_none() {
                e.status = Some(WcStatus::WrFlushErr);
            }
        }
        self.orq.clear();
        self.irq.clear();
        self.retire();
        if let Some(r) = self.rx_send.take() {
            self.push_recv_wc(r.wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
        }
        while let Some(r) = self.rq.pop_front() {
            self.push_recv_wc(r.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
        }
    }

    /// Appends one FPDU carrying `ulpdu` to the transmit buffer.
    pub(super) fn emit_fpdu(&mut self, ulpdu: &[u8]) {
        let n = fpdu::wire_len(ulpdu.len(), self.tx_cfg, self.tx_pos);
        let at = self.out.len();
        self.out.resize(at + n, 0);
        fpdu::emit(ulpdu, self.tx_cfg, self.tx_pos, &mut self.out[at..]);
        self.tx_pos += n as u64;
        self.counters.tx_fpdus += 1;
    }
}

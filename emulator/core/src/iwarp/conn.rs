//! The connection: the phase (MPA setup, full operation, closed), the input deframer and
//! the timers, composed with the parts that own the rest: the output [`Stream`]
//! (`mpa.rs`), the [`SendQueue`] and the owed responses [`Irq`] (`tx.rs`), the
//! [`RecvSide`] (`rx.rs`) and the [`Outbox`] of completions and events. The verbs, the
//! stream input and the pollers route to the part concerned, passing it the other parts
//! it touches; what a part decides (a Terminate to send, an MPA verdict) is applied
//! here, because it changes the phase and flushes every part.

use std::time::{Duration, Instant};

use wire::iwarp::deframer::{Deframed, Deframer};
use wire::iwarp::fpdu::FpduConfig;
use wire::iwarp::mpa::MpaFrameKind;
use wire::iwarp::rdmap::RdmapMessage;
use wire::iwarp::{Error as WireError, TerminateError};

use super::config::{
    Completion, IwarpConfig, IwarpCounters, IwarpEvent, MpaOffer, Negotiated, Role,
};
use super::mpa::{self, ReplyVerdict, Stream};
use super::outbox::Outbox;
use super::placement::{terminate_repr, Cite, Offender, Stop};
use super::rx::RecvSide;
use super::tx::{Irq, SendQueue, TX_BUDGET};

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
use crate::attr::{RecvWr, SendWr};
use crate::memory::Memory;
use crate::types::Errno;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitRequest,
    RequestPending,
    AwaitReply,
    Rts,
    Closed,
}

/// The iWARP transport engine of one RC QP over one byte stream.
#[derive(Debug)]
pub struct Connection {
    cfg: IwarpConfig,
    role: Role,
    phase: Phase,
    /// Input framing; taken out while a call parses from it.
    deframer: Option<Deframer>,
    /// The MPA negotiation's deadline.
    deadline: Option<Instant>,
    /// The peer's Request (responder, until accepted or rejected).
    offer: Option<MpaOffer>,
    neg: Option<Negotiated>,
    stream: Stream,
    send: SendQueue,
    irq: Irq,
    recv: RecvSide,
    outbox: Outbox,
    close_wanted: bool,
    /// Counters but `tx_fpdus`, which the stream counts.
    counters: IwarpCounters,
    /// A ULPDU (the first segment of an untagged queue 0 message) that found no receive
    /// WR, and until when it may wait for one; input stops meanwhile.
    held: Option<(Vec<u8>, Instant)>,
    recv_wait: Duration,
    /// When the deframer holds part of an FPDU: when its stream stalls.
    rx_stall: Option<Instant>,
    rx_stall_timeout: Option<Duration>,
}

impl Connection {
    fn new(now: Instant, cfg: IwarpConfig, role: Role) -> Connection {
        let deframer = match role {
            Role::Initiator => Deframer::expecting_reply(),
            Role::Responder => Deframer::expecting_request(),
        };
        Connection {
            role,
            phase: match role {
                Role::Initiator => Phase::AwaitReply,
                Role::Responder => Phase::AwaitRequest,
            },
            deframer: Some(deframer),
            deadline: Some(now + cfg.mpa_timeout),
            offer: None,
            neg: None,
            stream: Stream::new(cfg.mss),
            send: SendQueue::new(&cfg),
            irq: Irq::new(&cfg),
            recv: RecvSide::new(&cfg, role),
            outbox: Outbox::new(&cfg),
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
        c.stream.emit_mpa(&mpa::request(&c.cfg));
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
        IwarpCounters {
            tx_fpdus: self.stream.fpdus(),
            ..self.counters
        }
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
        self.close_wanted && self.stream.is_empty()
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
        if let Some(space) = self.stream_space(bytes.len()) {
            space.copy_from_slice(bytes);
        }
        self.handle_stream_filled(now, bytes.len(), keys, mem);
    }

    /// Room for the stream's next `max` octets, to be filled in place (a socket read
    /// straight into the deframer, without a copy through a buffer of the driver's) and
    /// then handed over with [`Connection::handle_stream_filled`]. `None` when the
    /// connection takes no more input: that call is still made, with 0.
    pub fn stream_space(&mut self, max: usize) -> Option<&mut [u8]> {
        if self.phase == Phase::Closed {
            return None;
        }
        self.deframer.as_mut()?.space(max)
    }

    /// The first `n` octets of the last [`Connection::stream_space`] hold the stream's
    /// next octets (0 with no space taken: process what is buffered, as
    /// [`Connection::handle_stream`] with an empty slice).
    pub fn handle_stream_filled<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        now: Instant,
        n: usize,
        keys: &mut K,
        mem: &mut M,
    ) {
        let Some(mut d) = self.deframer.take() else {
            return;
        };
        if self.phase != Phase::Closed {
            d.filled(n);
        }
        if n > 0 {
            self.rx_stall = None;
        }
        if let Some((u, until)) = self.held.take() {
            if !self.recv.has_recv(keys) {
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
                    let offer = mpa::offer_of(&repr);
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
                    if self.phase == Phase::Rts
                        && self.recv.needs_recv(ulpdu)
                        && !self.recv.has_recv(keys)
                        && !self.recv_wait.is_zero()
                    {
                        self.held = Some((ulpdu.to_vec(), now + self.recv_wait));
                        self.counters.recv_waits += 1;
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
        self.enter_closed();
        if !was_rts {
            self.outbox
                .event(IwarpEvent::MpaFailed(WireError::Truncated));
        }
        self.outbox.event(IwarpEvent::Closed);
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
                let off = Offender {
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
                self.enter_closed();
                self.outbox.event(IwarpEvent::MpaTimeout);
                self.outbox.event(IwarpEvent::Closed);
            }
        }
    }

    /// The next completion.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.outbox.poll_completion()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<IwarpEvent> {
        self.outbox.poll_event()
    }

    /// `ibv_post_send` on this QP. Errors: ENOMEM (queue full), EINVAL (bad opcode, inline
    /// data too long). On a closed connection the WR completes with WR_FLUSH_ERR.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), Errno> {
        self.send
            .post(wr, self.phase == Phase::Closed, &mut self.outbox)
    }

    /// `ibv_post_recv` on this QP. Errors: ENOMEM (queue full). On a closed connection
    /// the WR completes with WR_FLUSH_ERR.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), Errno> {
        self.recv
            .post(wr, self.phase == Phase::Closed, &mut self.outbox)
    }

    /// Closes the connection (`rdma_disconnect`: iWARP has no disconnect message, the
    /// TCP stream is closed). Outstanding WRs complete with WR_FLUSH_ERR.
    pub fn close(&mut self) {
        if self.phase == Phase::Closed {
            return;
        }
        self.enter_closed();
        self.outbox.event(IwarpEvent::Closed);
    }

    /// Sends a Terminate with `error` (after what is already queued) and closes.
    pub fn terminate(&mut self, error: TerminateError) {
        self.send_terminate(error, None);
    }

    /// Bytes for TCP to send, appended to `buf`; returns how many. Reads the data of
    /// send WRs and Read Responses from memory as it segments them. Call until it
    /// returns 0.
    pub fn poll_stream_transmit<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        buf: &mut Vec<u8>,
        keys: &mut K,
        mem: &mut M,
    ) -> usize {
        let start = buf.len();
        self.stream.borrow_output(buf);
        while self.stream.len() - start < TX_BUDGET && self.tx_segment(keys, mem) {}
        self.stream.give_back(buf);
        buf.len() - start
    }

    /// Generates one FPDU (or finishes one WR); false when nothing can be sent now.
    fn tx_segment<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        keys: &mut K,
        mem: &mut M,
    ) -> bool {
        if self.phase != Phase::Rts {
            return false;
        }
        let r = self.send.segment(
            &mut self.irq,
            &mut self.stream,
            &mut self.outbox,
            &self.cfg,
            keys,
            mem,
        );
        match r {
            Ok(progress) => progress,
            Err(error) => {
                self.send_terminate(error, None);
                true
            }
        }
    }

    /// One FPDU's ULPDU (a DDP segment) in full operation, to the receive side.
    fn on_ulpdu<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        u: &[u8],
        keys: &mut K,
        mem: &mut M,
    ) {
        if self.phase != Phase::Rts {
            return;
        }
        let r = self.recv.on_ulpdu(
            u,
            &mut self.send,
            &mut self.irq,
            &mut self.outbox,
            &self.cfg,
            keys,
            mem,
        );
        match r {
            Ok(()) => {}
            Err(Stop::Terminate(error, cite)) => {
                let offender = match cite {
                    Cite::Nothing => None,
                    Cite::Ddp => Some(Offender {
                        ulpdu: u,
                        rdmap: false,
                    }),
                    Cite::Rdmap => Some(Offender {
                        ulpdu: u,
                        rdmap: true,
                    }),
                };
                self.send_terminate(error, offender);
            }
            Err(Stop::Terminated(error)) => {
                tracing::debug!(qpn = self.cfg.qpn.0, ?error, "iwarp: Terminate received");
                self.counters.terminates_rcvd += 1;
                self.outbox.event(IwarpEvent::Terminated {
                    error,
                    local: false,
                });
                self.enter_error();
            }
        }
    }

    /// Responder: accepts the MPA Request with `private_data` in the Reply.
    ///
    /// Errors: EINVAL when no Request is pending or the private data is too long.
    pub fn accept(&mut self, private_data: &[u8]) -> Result<(), Errno> {
        let (Phase::RequestPending, Some(offer)) = (self.phase, &self.offer) else {
            return Err(Errno::EINVAL);
        };
        let (reply, neg) = mpa::accept(&self.cfg, offer, private_data)?;
        self.stream.emit_mpa(&reply);
        // RFC 5044 §7.1.3 / RFC 6581 §4: the responder sends nothing until the first
        // FPDU (in peer-to-peer mode, the RTR) arrived.
        self.enter_full_operation(neg);
        Ok(())
    }

    /// Responder: rejects the MPA Request (R bit) with `private_data`; the connection
    /// is then over.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), Errno> {
        let (Phase::RequestPending, Some(offer)) = (self.phase, &self.offer) else {
            return Err(Errno::EINVAL);
        };
        let reply = mpa::reject(&self.cfg, offer, private_data)?;
        self.stream.emit_mpa(&reply);
        self.enter_closed();
        self.outbox.event(IwarpEvent::Closed);
        Ok(())
    }

    fn on_request(&mut self, offer: MpaOffer) {
        if self.role != Role::Responder || self.phase != Phase::AwaitRequest {
            return;
        }
        self.offer = Some(offer.clone());
        self.phase = Phase::RequestPending;
        self.deadline = None;
        self.outbox.event(IwarpEvent::ConnectRequest(offer));
    }

    fn on_reply(&mut self, reply: MpaOffer, reject: bool) {
        if self.phase != Phase::AwaitReply {
            return;
        }
        if reject {
            self.enter_closed();
            self.outbox.event(IwarpEvent::Rejected {
                private_data: reply.private_data,
            });
            self.outbox.event(IwarpEvent::Closed);
            return;
        }
        match mpa::read_reply(&self.cfg, reply) {
            ReplyVerdict::Failed(e) => self.mpa_failed(e),
            ReplyVerdict::Established(neg, fault) => {
                let rtr = neg.rtr;
                self.enter_full_operation(neg);
                if let Some(error) = fault {
                    self.send_terminate(error, None);
                    return;
                }
                self.send.ready = true;
                if let Some(kind) = rtr {
                    self.send.emit_rtr(kind, &mut self.stream);
                }
            }
        }
    }

    /// Switches every part to the parameters `neg` settled.
    fn enter_full_operation(&mut self, neg: Negotiated) {
        self.stream.full_operation(&neg, self.cfg.mss);
        if let Some(d) = self.deframer.as_mut() {
            d.set_config(FpduConfig {
                crc: neg.crc,
                markers: neg.markers_rx,
            });
        }
        self.send.full_operation(&neg);
        self.irq.full_operation(&neg);
        self.recv.full_operation(&neg);
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
        self.outbox.event(IwarpEvent::Established(neg));
    }

    fn mpa_failed(&mut self, e: WireError) {
        if self.phase == Phase::Closed {
            return;
        }
        self.enter_closed();
        self.outbox.event(IwarpEvent::MpaFailed(e));
        self.outbox.event(IwarpEvent::Closed);
    }

    /// Sends a Terminate (RFC 5040 §5.5 / §7) and puts the QP in error.
    fn send_terminate(&mut self, error: TerminateError, offender: Option<Offender<'_>>) {
        if self.phase == Phase::Closed {
            return;
        }
        tracing::debug!(qpn = self.cfg.qpn.0, ?error, "iwarp: sending Terminate");
        if self.phase == Phase::Rts {
            self.stream.emit_msg(&RdmapMessage::Terminate {
                msn: self.send.take_msn(2),
                terminate: terminate_repr(error, offender),
            });
            self.counters.terminates_sent += 1;
        }
        self.outbox
            .event(IwarpEvent::Terminated { error, local: true });
        self.enter_error();
    }

    fn enter_error(&mut self) {
        self.enter_closed();
        self.outbox.event(IwarpEvent::Closed);
    }

    /// The connection is over: the driver is to close the stream once drained, and every
    /// outstanding WR completes with WR_FLUSH_ERR.
    fn enter_closed(&mut self) {
        self.phase = Phase::Closed;
        self.deadline = None;
        self.close_wanted = true;
        self.held = None;
        self.rx_stall = None;
        self.send.flush(&mut self.outbox);
        self.irq.clear();
        self.recv.flush(&mut self.outbox);
    }
}

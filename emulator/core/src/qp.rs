//! Queue pairs: the per-QP state. Data that exists only from RTR on lives in [`Conn`],
//! which exists only from RTR on; the requester's in [`Requester`], only from RTS on.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use wire::roce::{Msn, Psn, Qpn, RethRepr};

use crate::attr::*;
use crate::memory::Ahead;
use crate::types::*;

/// A posted send WR and its progress.
#[derive(Debug, Clone)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    /// Bytes of the message (gather total or inline length; 8 for atomics).
    pub len: u32,
    /// First PSN, once the first packet was sent.
    pub first_psn: Option<Psn>,
    /// Packets (PSNs) the WR uses: data packets, READ response packets, or 1.
    pub npkts: u32,
    /// Whether a successful completion is reported.
    pub signaled: bool,
    /// Set when the WR finished (locally complete), ready to retire in order.
    pub done: Option<WcStatus>,
    /// The QP's count of WRs posted before this one: names the WR for as long as the QP
    /// lives, so that bytes gathered ahead for it ([`Ahead`]) are never served
    /// to another.
    pub seq: u64,
}

impl SendWqe {
    /// Whether only a response completes the WR (READ, CmpSwap, FetchAdd): an ACK past
    /// it means its responses were lost.
    pub fn is_rd_atomic(&self) -> bool {
        matches!(
            self.wr.opcode,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }
    /// Whether the WR takes one of the responder's READ/atomic resources: the READ and
    /// atomics, and FLUSH and ATOMIC WRITE (annex A19). These count against
    /// `max_rd_atomic`, so that the responder never drops the resource of a READ still
    /// to be answered again, and a fenced WR waits for them.
    pub fn takes_resource(&self) -> bool {
        self.is_rd_atomic() || matches!(self.wr.opcode, WrOpcode::Flush | WrOpcode::AtomicWrite)
    }
    pub fn last_psn(&self) -> Option<Psn> {
        self.first_psn.map(|p| p.wrapping_add(self.npkts - 1))
    }
}

/// Where packets of a connected QP go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Path {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The AH's traffic class with the ECN bits cleared: the DSCP, shifted into place.
    pub traffic_class: u8,
}

/// The requester (and completer) of a QP in RTS, SQD or SQE.
#[derive(Debug, Clone)]
pub(crate) struct Requester {
    /// PSN the next new WR starts at.
    pub next_psn: Psn,
    /// Oldest unacknowledged PSN (RC).
    pub una: Psn,
    /// The next packet to send: (index into `sq`, packet within the WR).
    pub cursor: (usize, u32),
    /// Retries left after timeouts/sequence NAKs.
    pub retry_left: u8,
    /// RNR retries left (7 = forever).
    pub rnr_left: u8,
    /// Waiting for the RNR timer: no packet leaves.
    pub rnr_waiting: bool,
    /// The `una` a gap-triggered go-back last happened at (one go-back per gap).
    pub gap_retried_at: Option<Psn>,
    /// The `una` the last go-back after a timeout or sequence NAK started from. A sequence
    /// NAK for that same PSN (a duplicated NAK, or one sent before the go-back reached the
    /// responder) neither costs a retry nor starts another go-back, as rxe's
    /// `started_retry`: the responder NAKs once per gap, so only a timeout says that the
    /// retransmission itself was lost.
    pub retried_at: Option<Psn>,
    /// READ response payload accepted and not yet placed ([`ReadHeld`]).
    pub read_held: ReadHeld,
    /// Local ACK timeout (None = infinite).
    pub ack_timeout: Option<Duration>,
}

/// The payload of a READ's middle response packets, accepted in order and placed together
/// in runs (`crate::dma::place_read`) where the memory asks for runs: `bytes` are the
/// WR's message bytes from offset `at` on. Placed before the WR completes; bytes left
/// from a WR that ended otherwise are dropped when the next READ starts.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReadHeld {
    /// The WR (`SendWqe::seq`) the bytes belong to.
    pub seq: u64,
    pub at: u32,
    pub bytes: Vec<u8>,
    /// Whether the sink wants runs, asked once per READ (`Memory::prefers_runs`).
    pub runs: Option<bool>,
}

/// A READ/atomic the responder keeps for duplicates (IBA 9.7.5.1.5); FLUSH and ATOMIC
/// WRITE take one too (Memory Placement Extensions annex, as rxe's `rxe_prepare_res`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RdAtomicRes {
    pub psn: Psn,
    pub npkts: u32,
    pub kind: ResKind,
}

/// What a responder resource was taken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResKind {
    /// An RDMA READ: a duplicate is executed again.
    Read,
    /// CmpSwap/FetchAdd: a duplicate gets this original value again, never re-executed.
    Atomic(u64),
    /// FLUSH or ATOMIC WRITE: executed once; a duplicate is answered with an ACK.
    Placement,
}

/// A response waiting to leave.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RespOut {
    /// ACK / NAK / RNR NAK.
    Ack {
        psn: Psn,
        syndrome: wire::roce::Syndrome,
        msn: Msn,
    },
    /// READ response packets still to send.
    Read {
        first_psn: Psn,
        next_pkt: u32,
        npkts: u32,
        space: AddrSpace,
        host: u64,
        len: u32,
        msn: Msn,
    },
    /// ATOMIC Acknowledge.
    AtomicAck { psn: Psn, orig: u64, msn: Msn },
}

/// A multi-packet message in progress at the responder.
#[derive(Debug, Clone)]
pub(crate) enum InProgress {
    /// A SEND into this receive WQE, `offset` bytes so far, of which the last
    /// `held.len()` are accepted and not yet placed ([`crate::execute::HOLD`]).
    Send {
        rwqe: RecvWr,
        offset: u32,
        held: Vec<u8>,
        /// Whether the WQE's memory wants runs, asked once per message at its first
        /// packet that could be held (`Memory::prefers_runs`).
        runs: Option<bool>,
    },
    /// An RDMA WRITE: next host address and bytes left, and the payload accepted but
    /// not yet placed, which ends at `host` ([`crate::execute::HOLD`]).
    Write {
        space: AddrSpace,
        host: u64,
        left: u32,
        total: u32,
        held: Vec<u8>,
        /// As for `Send`.
        runs: Option<bool>,
    },
    /// UC: dropping the rest of a broken message.
    Drop,
}

/// The responder of a QP in RTR or later.
#[derive(Debug, Clone)]
pub(crate) struct Responder {
    /// Expected PSN.
    pub epsn: Psn,
    pub msn: Msn,
    /// A sequence-error NAK was sent for the current gap.
    pub nak_sent: bool,
    pub cur: Option<InProgress>,
    pub resources: VecDeque<RdAtomicRes>,
    pub out: VecDeque<RespOut>,
    /// COMM_EST raised.
    pub comm_est: bool,
    /// A fatal error was NAKed: enter the error state once the NAK is out.
    pub fatal: bool,
    /// The source of the READ response being sent, read ahead of its packets
    /// ([`Ahead::read_run`]).
    pub ahead: Ahead,
}

/// State that exists from RTR on.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    /// Path of RC/UC QPs (UD QPs take it from each WR's AH).
    pub path: Option<Path>,
    /// Path MTU in bytes.
    pub mtu: u32,
    pub dest_qpn: Qpn,
    pub resp: Responder,
    pub req: Option<Requester>,
}

/// A queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    pub qpn: Qpn,
    pub owner: ClientId,
    pub qp_type: QpType,
    pub init: QpInitAttr,
    /// An XRC target's domain.
    pub xrcd: Option<XrcdHandle>,
    pub state: QpState,
    /// The attributes as last set (for `query_qp`).
    pub attr: QpAttr,
    pub sq: VecDeque<SendWqe>,
    pub rq: VecDeque<RecvWr>,
    pub conn: Option<Box<Conn>>,
    pub counters: Counters,
    /// In the device's transmit schedule.
    pub scheduled: bool,
    /// When this QP last sent a CNP (notification point rate limit).
    pub last_cnp: Option<std::time::Instant>,
    /// The DCQCN reaction point, from the first CNP until the rate recovered.
    pub rp: Option<Box<crate::dcqcn::ReactionPoint>>,
    /// How fast the requester sent lately (the first cut's start without a line rate).
    pub tx_meter: crate::dcqcn::TxMeter,
    /// Send WRs posted so far (the next WQE's `seq`).
    pub posted: u64,
    /// Payload of the message being sent, read ahead of its packets.
    pub ahead: Ahead,
}

impl Qp {
    /// Where the QP stands, for `rdma-emu top` and `rdma-emu res qp`.
    pub fn status(&self) -> QpStatus {
        let conn = self.conn.as_deref();
        let req = conn.and_then(|c| c.req.as_ref());
        QpStatus {
            qpn: self.qpn,
            owner: self.owner,
            qp_type: self.qp_type,
            state: self.state,
            dest_qpn: conn
                .filter(|_| self.qp_type != QpType::Ud)
                .map(|c| c.dest_qpn),
            peer: conn.and_then(|c| c.path.as_ref()).map(|p| p.dst),
            next_psn: req.map(|r| r.next_psn),
            unacked_psn: req.map(|r| r.una),
            expected_psn: conn
                .filter(|_| self.qp_type != QpType::Ud)
                .map(|c| c.resp.epsn),
            in_flight: req.map_or(0, |r| r.next_psn.distance(r.una).max(0) as u32),
            send_queued: self.sq.len(),
            recv_posted: self.rq.len(),
            rnr_waiting: req.is_some_and(|r| r.rnr_waiting),
            counters: self.counters,
        }
    }

    /// `ibv_query_qp`: the attributes as last set, with the state and PSNs as they are now,
    /// and the creation attributes.
    pub fn query(&self) -> (QpAttr, QpInitAttr) {
        let mut a = self.attr;
        a.qp_state = self.state;
        a.cur_qp_state = self.state;
        a.cap = self.init.cap;
        if let Some(c) = &self.conn {
            a.rq_psn = c.resp.epsn;
            if let Some(r) = &c.req {
                a.sq_psn = r.next_psn;
            }
        }
        (a, self.init)
    }

    /// Receives posted to QP `qpn`'s own RQ and not yet completed: queued, or the one a
    /// multi-packet Send is being placed into.
    pub fn recv_outstanding(&self) -> usize {
        let placing = self
            .conn
            .as_ref()
            .is_some_and(|c| matches!(c.resp.cur, Some(InProgress::Send { .. })));
        self.rq.len() + usize::from(placing && self.init.srq.is_none())
    }

    /// Whether the QP may have something to transmit.
    pub fn wants_tx(&self) -> bool {
        match &self.conn {
            None => false,
            Some(c) => {
                !c.resp.out.is_empty()
                    || (c.req.is_some()
                        && matches!(self.state, QpState::Rts | QpState::Sqd)
                        && c.req
                            .as_ref()
                            .is_some_and(|r| !r.rnr_waiting && r.cursor.0 < self.sq.len()))
            }
        }
    }
}

/// Packets needed for `len` bytes at `mtu` (at least one).
pub(crate) fn packets_for(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

/// Reth for a retransmitted READ starting `pkt` packets into the WR.
pub(crate) fn read_reth(wqe: &SendWqe, pkt: u32, mtu: u32) -> RethRepr {
    let off = pkt * mtu;
    RethRepr {
        va: wqe.wr.rdma.remote_addr.wrapping_add(u64::from(off)),
        rkey: wqe.wr.rdma.rkey,
        dma_len: wqe.len.saturating_sub(off),
    }
}

/// A snapshot of one QP ([`Device::qp_statuses`](crate::Device::qp_statuses)).
#[derive(Debug, Clone)]
pub struct QpStatus {
    /// The QP's number on this device.
    pub qpn: Qpn,
    /// The client (session) that created the QP.
    pub owner: ClientId,
    /// The transport service (RC, UC, UD, ...).
    pub qp_type: QpType,
    /// The QP's current state in the IBA state machine (IBA 10.3.1).
    pub state: QpState,
    /// The connected peer's QP (RC, UC).
    pub dest_qpn: Option<Qpn>,
    /// The peer's address (RC, UC once past RTR).
    pub peer: Option<SocketAddr>,
    /// The PSN the next new packet gets (requester).
    pub next_psn: Option<Psn>,
    /// The oldest unacknowledged PSN (requester; equals `next_psn` when idle).
    pub unacked_psn: Option<Psn>,
    /// The PSN the responder expects next.
    pub expected_psn: Option<Psn>,
    /// Packets sent and not yet acknowledged.
    pub in_flight: u32,
    /// Send WRs not yet completed.
    pub send_queued: usize,
    /// Receive WRs posted and not yet consumed.
    pub recv_posted: usize,
    /// Waiting out an RNR NAK's timer.
    pub rnr_waiting: bool,
    /// The QP's share of the device's protocol counters (retransmissions, NAKs, drops).
    pub counters: Counters,
}

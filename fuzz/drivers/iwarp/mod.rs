//! One iWARP engine ([`emu_core::iwarp::Connection`]) in full operation, driven by a
//! scripted peer: the driver behind the `ddp_reassembly` and `rdmap_responder` fuzz
//! targets, shared with `emulator/core/tests/iwarp_hostile.rs`, which runs it over the
//! seed corpus and proptest inputs so a plain `cargo test` exercises it too.
//!
//! The input is a script (see [`ops`]): a 3-octet header picks the engine's role and
//! what the MPA exchange negotiates, then every op builds one well-framed FPDU (right
//! CRC, markers at the right stream offsets) from a few octets, posts a local verb, or
//! breaks the stream on purpose. Fields the engine checks (STag, TO, MSN, MO, queue
//! number, L bit) come from a model of what the engine expects, and the fuzzer chooses
//! to keep or perturb them, so inputs reach placement instead of dying in the framing.
//!
//! After every op the driver checks, and panics on a violation:
//! - memory: every write lands inside a valid MR of the QP's PD with a write right (a
//!   region with only `LOCAL_WRITE` only where a posted receive or a Read/Atomic result
//!   may go); every read inside an MR of the PD; the guard bytes between the regions,
//!   the read-only region and the other PD's region never change;
//! - placement: a Write or Atomic the engine kept lies in memory as sent; a completed
//!   receive, Read or Atomic holds the bytes the peer sent for it, with the message's
//!   length (not checked after the peer broke the stream on purpose, nor in batch mode,
//!   where four ops reach the engine at once);
//! - output: every octet the engine transmits deframes with the negotiated CRC and
//!   markers, every ULPDU parses (RDMAP or the negotiated extensions) and fits the
//!   MULPDU, MSN and MO run in sequence per queue, Read and Atomic Responses answer the
//!   peer's requests in order (a Read Response of the read-only region carries its
//!   bytes), and nothing follows a Terminate or a close;
//! - lifecycle: the engine closes only after sending a Terminate (or receiving one, or
//!   a close), with the Terminate's error in its event, and then wants the stream closed;
//! - completions: on the QP's CQs, each WR at most once, receives in posting order,
//!   sends in posting order, successful ones with the right opcode and length; after the
//!   final close every receive and every signaled send has completed.
//!
//! Each `transmit` loop is bounded: an engine that keeps producing output panics.

// The fuzz targets and the tests each use a part of the driver.
#![allow(dead_code)]

pub mod arena;
mod observe;
pub mod ops;
pub mod script;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use emu_core::iwarp::ext::{ExtMessage, EXT_FLAG};
use emu_core::iwarp::{
    mulpdu, Completion, Connection, IwarpConfig, IwarpEvent, MrTable, Negotiated, RtrKind, RtrOffer,
};
use emu_core::{CqHandle, PdHandle, Qpn, RecvWr, SendWr, Sge, WrId, WrOpcode};
use wire::iwarp::ddp::{DdpRepr, TAGGED_HEADER_LEN};
use wire::iwarp::deframer::Deframer;
use wire::iwarp::fpdu::{self, FpduConfig};
use wire::iwarp::mpa::{IrdOrd, MpaFrameKind, MpaRepr, MpaRevision};
use wire::iwarp::{RdmapMessage, Stag, TerminateError};

use arena::{region, Arena, Keys, REGIONS, SPACE};
pub use ops::Target;

/// The engine's QP number, PD and CQs.
pub const QPN: Qpn = Qpn(7);
pub const PD: PdHandle = PdHandle(1);
const SEND_CQ: CqHandle = CqHandle(1);
const RECV_CQ: CqHandle = CqHandle(2);
/// Siw's "enhanced" MPA flag (rdma-emu sets it on revision 2 frames).
const ENHANCED_FLAG: u8 = 0x10;
/// Send WR identifiers start here, receive WR identifiers at `RECV_ID`.
const SEND_ID: u64 = 1;
const RECV_ID: u64 = 1_000_000;

/// What a run ended with (for tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Full operation was reached.
    pub established: bool,
    /// The Terminate the engine sent, as parsed from its output.
    pub terminate_sent: Option<TerminateError>,
    /// A Terminate the engine received.
    pub terminate_received: Option<TerminateError>,
    /// The engine closed on its own (before the driver's final close).
    pub closed_by_engine: bool,
    /// Successful receive completions.
    pub recvs_ok: usize,
    /// Successful send-queue completions.
    pub sends_ok: usize,
    /// FPDUs the engine transmitted.
    pub fpdus_out: usize,
    /// Segments the peer sent.
    pub segments_in: usize,
    /// Memory writes.
    pub writes: u64,
}

/// A WR the driver posted.
#[derive(Debug, Clone)]
struct Posted {
    opcode: Option<WrOpcode>,
    sges: Vec<Sge>,
    total: u64,
    signaled: bool,
    done: bool,
}

/// A request the engine sent and the peer owes a response to (the engine's ORQ).
#[derive(Debug, Clone)]
enum EngineReq {
    Read {
        sink_stag: u32,
        sink_to: u64,
        size: u64,
        /// Octets the peer already answered.
        sent: u64,
        /// What the answer placed so far.
        placed: Placed,
    },
    Atomic {
        req_id: u32,
    },
}

/// A request the peer sent and the engine owes a response to (the engine's IRQ).
#[derive(Debug, Clone)]
enum PeerReq {
    Read {
        sink_stag: u32,
        sink_to: u64,
        size: u64,
        sent: u64,
        /// Source address when the source lies in the read-only region.
        fixed_src: Option<u64>,
    },
    Atomic {
        req_id: u32,
        original: Option<u64>,
    },
}

/// Sequence state of one direction of the untagged queues.
#[derive(Debug, Clone, Copy)]
struct Queues {
    /// Next MSN per queue 0..3.
    msn: [u32; 4],
    /// Queue 0 message in progress: its MO so far.
    mo: Option<u32>,
}

impl Default for Queues {
    fn default() -> Queues {
        Queues {
            msn: [1; 4],
            mo: None,
        }
    }
}

/// Data a completion is expected to have placed: (message offset → octet).
#[derive(Debug, Clone, Default)]
struct Placed {
    /// Per message offset: the octet and the number of the segment that put it (the
    /// later of two segments wins where a scatter list names an address twice).
    data: Vec<Option<(u8, u32)>>,
    /// The largest offset + length of any segment (the message length).
    end: u64,
    segments: u32,
}

impl Placed {
    fn put(&mut self, off: u64, bytes: &[u8]) {
        self.end = self.end.max(off.saturating_add(bytes.len() as u64));
        self.segments += 1;
        let Some(end) = off
            .checked_add(bytes.len() as u64)
            .filter(|e| *e <= 1 << 16)
        else {
            return;
        };
        if self.data.len() < end as usize {
            self.data.resize(end as usize, None);
        }
        for (i, b) in bytes.iter().enumerate() {
            self.data[off as usize + i] = Some((*b, self.segments));
        }
    }
}

/// The engine under test and the scripted peer.
pub struct Harness {
    pub conn: Connection,
    pub keys: Keys,
    pub mem: Arena,
    now: Instant,
    cfg: IwarpConfig,
    neg: Option<Negotiated>,
    /// Bytes toward the engine, delivered at the end of each op.
    pending: Vec<u8>,
    /// Largest piece handed to `handle_stream` at once (0: all).
    chunk: usize,
    /// Ops are delivered four at a time (placement is then not checked).
    batch: bool,
    /// Framing of the peer's FPDUs and the stream offset of the next one.
    peer_fpdu: FpduConfig,
    peer_pos: u64,
    /// The peer sent bytes that are not a well-formed FPDU of the model (garbage, a
    /// corrupted or raw segment): its model of the engine's expectations is void.
    desynced: bool,
    /// The peer sent a Terminate (or bytes that may parse as one).
    peer_terminated: bool,
    /// Sequence state of the peer's queues toward the engine.
    peer_q: Queues,
    /// Queue 0 message the peer is sending.
    peer_msg: Placed,
    /// Queue 0 message the peer last finished (for the receive it completes).
    finished_msg: Option<Placed>,
    /// The engine's outstanding Read/Atomic Requests.
    engine_orq: VecDeque<EngineReq>,
    /// What the last answered engine Read/Atomic should have placed.
    answered: Option<Placed>,
    /// The peer's Read/Atomic Requests the engine owes responses to.
    peer_irq: VecDeque<PeerReq>,
    next_req_id: u32,
    /// Observer of the engine's output.
    obs: Deframer,
    obs_backlog: Vec<u8>,
    obs_q: Queues,
    obs_write_to: Option<u64>,
    /// The engine sent a Terminate / closed.
    engine_term: Option<TerminateError>,
    engine_closed: bool,
    /// The driver closed (or the peer's stream ended).
    driver_closed: bool,
    sends: Vec<Posted>,
    recvs: Vec<Posted>,
    /// Index of the next receive completion (in posting order).
    recv_next: usize,
    /// Last send-queue completion (index in posting order).
    send_last: Option<usize>,
    /// Completions of this op (to check placement after it).
    op_completions: Vec<Completion>,
    pub out: Outcome,
    pattern: u8,
}

/// Payload length of a length octet: 0..199 as is, above in steps of 40 up to 2240.
pub fn payload_len(b: u8) -> usize {
    if b < 200 {
        usize::from(b)
    } else {
        usize::from(b - 199) * 40
    }
}

impl Harness {
    /// Sets up the engine from the 3 header octets and runs the MPA exchange.
    fn new(h: [u8; 3]) -> Harness {
        let now = Instant::now();
        let initiator = h[0] & 0x01 != 0;
        let p2p = h[0] & 0x40 != 0;
        let ext = h[0] & 0x20 != 0;
        const DEPTHS: [u16; 4] = [1, 2, 4, 16];
        const CHUNKS: [usize; 16] = [0, 1, 2, 3, 4, 5, 7, 11, 16, 29, 64, 100, 509, 512, 513, 0];
        const MSS: [u32; 16] = [
            160, 200, 256, 300, 512, 536, 600, 1000, 1200, 1460, 1500, 2048, 4000, 8960, 9000,
            65483,
        ];
        let cfg = IwarpConfig {
            qpn: QPN,
            pd: PD,
            send_cq: SEND_CQ,
            recv_cq: RECV_CQ,
            sq_sig_all: false,
            max_send_wr: 16,
            max_recv_wr: 16,
            srq: None,
            max_inline_data: 64,
            inline_space: SPACE,
            revision: 2,
            crc: h[0] & 0x02 != 0,
            markers: h[0] & 0x08 != 0,
            peer_to_peer: p2p,
            rtr: RtrOffer::ALL,
            ird: DEPTHS[usize::from(h[1] >> 3) & 3],
            ord: DEPTHS[usize::from(h[1] >> 5) & 3],
            mss: MSS[usize::from(h[2] >> 4)],
            private_data: Vec::new(),
            extensions: ext,
            mpa_timeout: Duration::from_secs(10),
        };
        let table = Rc::new(RefCell::new(MrTable::new()));
        for (r, stag, pd, len, access) in REGIONS {
            let (addr, _) = region(r);
            table
                .borrow_mut()
                .register(stag, pd, SPACE, addr, len, access);
        }
        let mut conn = if initiator {
            Connection::initiator(now, cfg.clone())
        } else {
            Connection::responder(now, cfg.clone())
        };
        // The harness posts receives straight into the engine, as a NIC has them in
        // place when ibv_post_recv returns: a Send with none is refused at once. (The
        // hold for a receive still on its way through the daemon is tested in
        // emulator/core/tests/iwarp.rs.)
        conn.set_recv_wait(Duration::ZERO);
        let mut hs = Harness {
            conn,
            keys: Keys(table.clone()),
            mem: Arena::new(table),
            now,
            cfg,
            neg: None,
            pending: Vec::new(),
            chunk: CHUNKS[usize::from(h[2] & 0x0f)],
            batch: h[2] & 0x0f == 15,
            peer_fpdu: FpduConfig::default(),
            peer_pos: 0,
            desynced: false,
            peer_terminated: false,
            peer_q: Queues::default(),
            peer_msg: Placed::default(),
            finished_msg: None,
            engine_orq: VecDeque::new(),
            answered: None,
            peer_irq: VecDeque::new(),
            next_req_id: 1,
            obs: if initiator {
                Deframer::expecting_request()
            } else {
                Deframer::expecting_reply()
            },
            obs_backlog: Vec::new(),
            obs_q: Queues::default(),
            obs_write_to: None,
            engine_term: None,
            engine_closed: false,
            driver_closed: false,
            sends: Vec::new(),
            recvs: Vec::new(),
            recv_next: 0,
            send_last: None,
            op_completions: Vec::new(),
            out: Outcome::default(),
            pattern: 0,
        };
        hs.handshake(h);
        hs
    }

    /// The MPA exchange: the peer's Request or Reply offers what the header asks.
    fn handshake(&mut self, h: [u8; 3]) {
        let initiator = h[0] & 0x01 != 0;
        let w = IrdOrd {
            ird: [1, 4, 16, 128][usize::from(h[1] >> 3) & 3],
            ord: [1, 2, 4, 8][usize::from(h[1] >> 5) & 3],
            peer_to_peer: h[0] & 0x40 != 0,
            rtr_send: h[1] & 0x01 != 0,
            rtr_write: h[1] & 0x02 != 0,
            rtr_read: h[1] & 0x04 != 0,
        };
        let repr = MpaRepr {
            kind: if initiator {
                MpaFrameKind::Reply
            } else {
                MpaFrameKind::Request
            },
            markers: h[0] & 0x10 != 0,
            crc: h[0] & 0x04 != 0,
            reject: false,
            reserved_flags: ENHANCED_FLAG | if h[0] & 0x20 != 0 { EXT_FLAG } else { 0 },
            revision: MpaRevision::V2(w),
            private_data: b"fuzz",
        };
        let mut frame = vec![0u8; repr.buffer_len()];
        repr.emit(&mut frame);
        // The engine's Request (initiator) goes out first.
        self.transmit();
        self.pending = frame;
        self.deliver_raw();
        while let Some(e) = self.conn.poll_event() {
            match e {
                IwarpEvent::ConnectRequest(_) => {
                    self.conn.accept(b"ok").expect("accept a pending request");
                    self.conn
                        .handle_stream(self.now, &[], &mut self.keys, &mut self.mem);
                }
                IwarpEvent::Established(_) => {}
                other => self.on_event(other),
            }
        }
        self.neg = self.conn.negotiated().cloned();
        let Some(neg) = self.neg.clone() else {
            return;
        };
        self.out.established = true;
        self.peer_fpdu = FpduConfig {
            crc: neg.crc,
            markers: neg.markers_rx,
        };
        self.transmit();
        // The RTR, unless the script sends its own.
        if let (Some(kind), false, false) = (neg.rtr, initiator, h[0] & 0x80 != 0) {
            self.send_zero(kind);
            self.deliver();
        }
        if initiator && h[0] & 0x80 == 0 {
            // Answer a zero-length Read RTR as a peer would.
            if let Some(EngineReq::Read { size: 0, .. }) = self.engine_orq.front() {
                self.answer_front(usize::MAX);
                self.deliver();
            }
        }
    }

    /// A zero-length message of `kind` (an RTR).
    fn send_zero(&mut self, kind: RtrKind) {
        match kind {
            RtrKind::Write => self.send_msg(&RdmapMessage::Write {
                last: true,
                stag: Stag(0),
                offset: 0,
                payload: &[],
            }),
            RtrKind::Send => {
                let msn = self.peer_q.msn[0];
                self.send_untagged0(3, 0, 0, msn, 0, true, &[]);
            }
            RtrKind::Read => {
                let msn = self.peer_q.msn[1];
                self.peer_q.msn[1] = msn.wrapping_add(1);
                self.peer_irq.push_back(PeerReq::Read {
                    sink_stag: 0,
                    sink_to: 0,
                    size: 0,
                    sent: 0,
                    fixed_src: None,
                });
                self.send_msg(&RdmapMessage::ReadRequest {
                    msn,
                    request: wire::iwarp::ReadRequest {
                        sink_stag: Stag(0),
                        sink_offset: 0,
                        size: 0,
                        src_stag: Stag(0),
                        src_offset: 0,
                    },
                });
            }
        }
    }

    /// A payload of `n` octets (a running pattern, so placements differ).
    fn payload(&mut self, n: usize) -> Vec<u8> {
        self.pattern = self.pattern.wrapping_add(1);
        let p = self.pattern;
        (0..n)
            .map(|i| (i as u8).wrapping_mul(7).wrapping_add(p))
            .collect()
    }

    /// Frames `ulpdu` as the next FPDU toward the engine.
    fn send_ulpdu(&mut self, ulpdu: &[u8]) {
        let n = fpdu::wire_len(ulpdu.len(), self.peer_fpdu, self.peer_pos);
        let at = self.pending.len();
        self.pending.resize(at + n, 0);
        fpdu::emit(
            ulpdu,
            self.peer_fpdu,
            self.peer_pos,
            &mut self.pending[at..],
        );
        self.peer_pos += n as u64;
        self.out.segments_in += 1;
    }

    fn send_msg(&mut self, m: &RdmapMessage<'_>) {
        let mut u = vec![0u8; m.buffer_len()];
        m.emit(&mut u);
        self.send_ulpdu(&u);
    }

    fn send_ext(&mut self, m: &ExtMessage<'_>) {
        let mut u = Vec::new();
        m.emit(&mut u);
        self.send_ulpdu(&u);
    }

    /// A DDP segment from its header fields (any control octet) and payload.
    fn send_ddp(&mut self, ddp: DdpRepr, payload: &[u8]) {
        let mut u = vec![0u8; ddp.header_len()];
        ddp.emit(&mut u);
        u.extend_from_slice(payload);
        self.send_ulpdu(&u);
    }

    /// Hands the pending bytes to the engine in pieces of `chunk`.
    fn deliver_raw(&mut self) {
        let bytes = std::mem::take(&mut self.pending);
        let chunk = if self.chunk == 0 {
            bytes.len().max(1)
        } else {
            self.chunk
        };
        for piece in bytes.chunks(chunk) {
            self.conn
                .handle_stream(self.now, piece, &mut self.keys, &mut self.mem);
        }
    }

    /// Delivers the pending bytes and checks everything that came out.
    fn deliver(&mut self) {
        self.deliver_raw();
        self.settle();
    }

    /// Drains every output of the engine and checks it.
    fn settle(&mut self) {
        self.transmit();
        while let Some(c) = self.conn.poll_completion() {
            self.on_completion(c);
        }
        while let Some(e) = self.conn.poll_event() {
            self.on_event(e);
        }
        if self.conn.is_closed() && !self.driver_closed {
            self.engine_closed = true;
            self.out.closed_by_engine = true;
        }
        if self.engine_closed && self.neg.is_some() {
            assert!(
                self.engine_term.is_some() || self.out.terminate_received.is_some(),
                "the engine closed without a Terminate"
            );
        }
        if self.conn.is_closed() {
            assert!(
                self.conn.wants_close(),
                "closed and drained, yet no close wanted"
            );
        }
    }

    /// Posts a receive WR; returns whether the engine took it.
    pub fn post_recv(&mut self, sges: Vec<Sge>) -> bool {
        let id = RECV_ID + self.recvs.len() as u64;
        for s in &sges {
            self.add_sink(s);
        }
        let total = sges.iter().map(|s| u64::from(s.length)).sum();
        let ok = self
            .conn
            .post_recv(RecvWr {
                wr_id: WrId(id),
                sg_list: sges.clone(),
            })
            .is_ok();
        if ok {
            self.recvs.push(Posted {
                opcode: None,
                sges,
                total,
                signaled: true,
                done: false,
            });
        }
        ok
    }

    /// Posts a send WR (its `wr_id` is assigned); returns whether the engine took it.
    pub fn post_send(&mut self, mut wr: SendWr) -> bool {
        let id = SEND_ID + self.sends.len() as u64;
        wr.wr_id = WrId(id);
        if matches!(
            wr.opcode,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        ) {
            for s in &wr.sg_list {
                self.add_sink(s);
            }
        }
        let total = match &wr.inline_data {
            Some(d) => d.len() as u64,
            None => wr.sg_list.iter().map(|s| u64::from(s.length)).sum(),
        };
        let signaled = wr.send_flags.contains(emu_core::SendFlags::SIGNALED);
        let posted = Posted {
            opcode: Some(wr.opcode),
            sges: wr.sg_list.clone(),
            total,
            signaled,
            done: false,
        };
        // The WR may complete (flushed) inside post_send: record it first.
        self.sends.push(posted);
        if self.conn.post_send(wr).is_err() {
            self.sends.pop();
            return false;
        }
        true
    }

    fn add_sink(&mut self, s: &Sge) {
        if s.length > 0 {
            self.mem.local_sinks.push((s.addr, u64::from(s.length)));
        }
    }

    /// The peer answers the engine's oldest Read/Atomic Request: up to `max` octets of a
    /// Read Response (in segments the peer's MULPDU allows), or the Atomic Response.
    fn answer_front(&mut self, max: usize) {
        let seg_max = mulpdu(1460, self.peer_fpdu.markers) - TAGGED_HEADER_LEN;
        match self.engine_orq.front().cloned() {
            None => {}
            Some(EngineReq::Atomic { req_id }) => {
                let original = u64::from(self.pattern) * 0x0101_0101_0101;
                self.answer_atomic(req_id, original, 0);
            }
            Some(EngineReq::Read {
                sink_stag,
                sink_to,
                size,
                sent,
                ..
            }) => {
                let mut left = ((size - sent) as usize).min(max);
                let mut at = sent;
                loop {
                    let n = left.min(seg_max);
                    let last = at + n as u64 == size;
                    let payload = self.payload(n);
                    self.read_response(sink_stag, sink_to.wrapping_add(at), &payload, last, true);
                    at += n as u64;
                    left -= n;
                    if left == 0 || last {
                        break;
                    }
                }
            }
        }
    }

    /// Sends a Read Response segment; `model` records it against the oldest request.
    fn read_response(&mut self, stag: u32, to: u64, payload: &[u8], last: bool, model: bool) {
        if model {
            if let Some(EngineReq::Read {
                sink_to,
                sent,
                placed,
                size,
                ..
            }) = self.engine_orq.front_mut()
            {
                placed.put(to.wrapping_sub(*sink_to), payload);
                *sent = (*sent + payload.len() as u64).min(*size);
                if last {
                    if let Some(EngineReq::Read { placed, .. }) = self.engine_orq.pop_front() {
                        self.answered = Some(placed);
                    }
                }
            }
        }
        self.send_msg(&RdmapMessage::ReadResponse {
            last,
            stag: Stag(stag),
            offset: to,
            payload,
        });
    }

    /// Sends an Atomic Response; `perturb` 0 answers the oldest request correctly.
    fn answer_atomic(&mut self, req_id: u32, original: u64, perturb: u8) {
        let mut msn = self.peer_q.msn[3];
        let mut req_id = req_id;
        match perturb {
            1 => req_id = req_id.wrapping_add(1),
            2 => msn = msn.wrapping_add(1),
            _ => {}
        }
        if perturb == 0 {
            if let Some(EngineReq::Atomic { .. }) = self.engine_orq.front() {
                self.engine_orq.pop_front();
                let mut p = Placed::default();
                p.put(0, &original.to_le_bytes());
                self.answered = Some(p);
            }
        }
        self.peer_q.msn[3] = self.peer_q.msn[3].wrapping_add(1);
        self.send_ext(&ExtMessage::AtomicResponse {
            msn,
            req_id,
            original,
        });
    }

    /// Ends the run: the driver closes (or the peer's stream ends), then every WR must
    /// have completed.
    fn finish(&mut self, fin: bool) {
        self.deliver();
        self.check_placement();
        self.driver_closed = true;
        if fin {
            self.conn.handle_stream_closed(self.now);
        } else {
            self.conn.close();
        }
        self.settle();
        assert!(self.conn.is_closed(), "still open after the close");
        for (i, p) in self.recvs.iter().enumerate() {
            assert!(p.done, "receive {i} never completed");
        }
        for (i, p) in self.sends.iter().enumerate() {
            assert!(!p.signaled || p.done, "signaled send {i} never completed");
        }
        self.mem.check_untouched();
        self.out.writes = self.mem.writes;
    }
}

/// Runs one input through the engine.
pub fn run(target: Target, data: &[u8]) -> Outcome {
    ops::run(target, data)
}

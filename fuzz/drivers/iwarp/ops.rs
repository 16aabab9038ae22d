//! The script format: what each input octet means, and [`Script`], which writes scripts
//! for tests and seeds.
//!
//! ```text
//! header (3 octets)
//!   h0: 0x01 the engine is the initiator (else the responder)
//!       0x02 the engine asks for CRCs     0x04 the peer asks for CRCs
//!       0x08 the engine asks for markers  0x10 the peer asks for markers
//!       0x20 both offer the extensions    0x40 peer-to-peer (RTR) mode
//!       0x80 the driver sends / answers no RTR (the script must)
//!   h1: 0x07 RTR kinds the peer offers (Send, Write, Read), 0x18 IRD, 0x60 ORD
//!       (engine: 1/2/4/16; peer IRD 1/4/16/128, ORD 1/2/4/8), 0x80 end with the
//!       peer's FIN (else a local close)
//!   h2: low nibble: largest piece handed to handle_stream (0: whole op; 15: whole,
//!       and four ops' bytes at once, so requests pile up); high nibble: the
//!       engine's MSS (160 .. 65483)
//! ops, until the input ends (at most MAX_OPS): a tag octet, then the op's operands;
//!   tag & 0x0f picks the op from the target's table, tag >> 4 are the op's flags.
//!   Operands past the end of the input read as 0.
//! ```
//!
//! A length octet `b` means `payload_len(b)` octets (0..199, then steps of 40). A
//! perturbation octet below 192 keeps every field as the engine expects; from 192 its
//! low bits pick which field to break.

use emu_core::iwarp::ext::{AtomicOp, ExtMessage, OP_IMMEDIATE, OP_SEND_IMM};
use emu_core::iwarp::RtrKind;
use emu_core::{Lkey, RdmaInfo, Rkey, SendFlags, SendWr, Sge, WrId, WrOpcode};
use wire::iwarp::ddp::{DdpBuffer, DdpRepr, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use wire::iwarp::rdmap::{RdmapMessage, ReadRequest, RDMAP_VERSION};
use wire::iwarp::Stag;

use super::arena::{region, stag, Region, REGIONS};
use super::{payload_len, EngineReq, Harness, Outcome, PeerReq};

/// Ops per input, at most.
pub const MAX_OPS: usize = 256;

/// Which fuzz target's op table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// DDP placement: tagged and untagged segments into posted buffers.
    DdpReassembly,
    /// Every RDMAP message, the extensions, and local verbs between them.
    RdmapResponder,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Write,
    ReadResponse,
    Send,
    Immediate,
    Raw,
    Garbage,
    Corrupt,
    PostRecv,
    PostSend,
    ReadRequest,
    AtomicRequest,
    AtomicResponse,
    Terminate,
    Zero,
    Answer,
}

use Kind::*;

const DDP_OPS: [Kind; 16] = [
    Write,
    Write,
    Write,
    ReadResponse,
    ReadResponse,
    Send,
    Send,
    Send,
    Raw,
    Garbage,
    Corrupt,
    PostRecv,
    PostRecv,
    Answer,
    Zero,
    Immediate,
];

const RDMAP_OPS: [Kind; 16] = [
    Write,
    ReadResponse,
    Send,
    Immediate,
    Raw,
    Garbage,
    PostRecv,
    PostSend,
    PostSend,
    ReadRequest,
    ReadRequest,
    AtomicRequest,
    AtomicResponse,
    Terminate,
    Answer,
    Zero,
];

impl Target {
    pub(super) fn ops(self) -> &'static [Kind; 16] {
        match self {
            Target::DdpReassembly => &DDP_OPS,
            Target::RdmapResponder => &RDMAP_OPS,
        }
    }
}

/// The fuzz input, read front to back; past its end every operand is 0.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    fn u64(&mut self) -> u64 {
        (u64::from(self.u32()) << 32) | u64::from(self.u32())
    }

    /// Up to `n` octets (fewer at the end of the input).
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

/// The region an operand's low 3 bits name (5..7: none).
fn region_sel(sel: u8) -> Option<Region> {
    REGIONS.get(usize::from(sel & 7)).map(|e| e.0)
}

/// An STag operand: a region's, an unknown one, 0, or the first region's.
fn stag_sel(sel: u8) -> u32 {
    match sel & 7 {
        5 => 0x7777,
        6 => 0,
        7 => stag(Region::All),
        _ => region_sel(sel).map_or(0, stag),
    }
}

/// An SGE operand. Receive buffers use the first half of the local-only region, Read
/// and Atomic results (`sink`) the second half, so completed data stays checkable.
fn sge_of(sel: u8, off: u8, len: u8, sink: bool) -> Sge {
    let len = u32::from(len) * 2;
    match sel & 7 {
        0..=2 => {
            let (base, _) = region(Region::Local);
            let half = base + if sink { 512 } else { 0 };
            let o = (u64::from(off) * 2) % 512;
            Sge {
                addr: half + o,
                length: len.min((512 - o) as u32),
                lkey: Lkey(stag(Region::Local)),
            }
        }
        7 => Sge {
            addr: region(Region::Local).0,
            length: len,
            lkey: Lkey(0x7777),
        },
        s => {
            let r = [
                Region::All,
                Region::RemoteWrite,
                Region::ReadOnly,
                Region::OtherPd,
            ][usize::from(s - 3)];
            Sge {
                addr: region(r).0 + u64::from(off) * 8,
                length: len,
                lkey: Lkey(stag(r)),
            }
        }
    }
}

/// Runs one input.
pub fn run(target: Target, data: &[u8]) -> Outcome {
    let mut inp = Input(data);
    let header = [inp.u8(), inp.u8(), inp.u8()];
    let mut h = Harness::new(header);
    if h.neg.is_some() {
        h.initial_verbs(target);
        h.settle();
        let mut n = 0;
        while !inp.is_empty() && n < MAX_OPS {
            let tag = inp.u8();
            let kind = target.ops()[usize::from(tag & 0x0f)];
            n += 1;
            // Batch mode: four ops' bytes reach the engine at once.
            let deliver = !h.batch || n % 4 == 0;
            h.op(kind, tag >> 4, &mut inp, deliver);
        }
    }
    h.finish(header[1] & 0x80 != 0);
    h.out.clone()
}

/// A write or atomic the engine must have performed if it is still open after the op.
enum Expect {
    Bytes(u64, Vec<u8>),
}

impl Harness {
    /// Receives and Reads posted before the first op.
    pub(super) fn initial_verbs(&mut self, target: Target) {
        let l = region(Region::Local).0;
        let sge = |addr, length| Sge {
            addr,
            length,
            lkey: Lkey(stag(Region::Local)),
        };
        let read = |h: &mut Harness, addr, len| {
            let mut wr = SendWr::new(WrId(0), WrOpcode::RdmaRead);
            wr.sg_list = vec![sge(addr, len)];
            wr.rdma = RdmaInfo {
                remote_addr: 0x5000,
                rkey: Rkey(0x4242),
            };
            h.post_send(wr);
        };
        match target {
            Target::DdpReassembly => {
                self.post_recv(vec![sge(l, 128)]);
                self.post_recv(vec![sge(l + 128, 128)]);
                self.post_recv(vec![sge(l + 256, 64), sge(l + 320, 192)]);
                self.post_recv(vec![Sge {
                    addr: region(Region::All).0 + 1024,
                    length: 256,
                    lkey: Lkey(stag(Region::All)),
                }]);
                read(self, l + 512, 200);
                read(self, l + 712, 312);
            }
            Target::RdmapResponder => {
                self.post_recv(vec![sge(l, 256)]);
                self.post_recv(vec![sge(l + 256, 256)]);
                read(self, l + 512, 128);
            }
        }
    }

    /// One op: builds its segment (or posts its verb), delivers, checks.
    fn op(&mut self, kind: Kind, flags: u8, inp: &mut Input<'_>, deliver: bool) {
        self.finished_msg = None;
        self.answered = None;
        let expect = match kind {
            Write => self.op_write(flags, inp),
            ReadResponse => {
                self.op_read_response(inp);
                None
            }
            Send => {
                self.op_send(flags, inp);
                None
            }
            Immediate => {
                self.op_immediate(flags, inp);
                None
            }
            Raw => {
                self.op_raw(flags, inp);
                None
            }
            Garbage => {
                let n = usize::from(inp.u8() % 64) + 1;
                let g = inp.bytes(n);
                self.pending.extend_from_slice(g);
                self.desynced = true;
                None
            }
            Corrupt => {
                self.op_corrupt(inp);
                None
            }
            PostRecv => {
                let sges = (0..flags & 3)
                    .map(|_| sge_of(inp.u8(), inp.u8(), inp.u8(), false))
                    .collect();
                self.post_recv(sges);
                None
            }
            PostSend => {
                self.op_post_send(flags, inp);
                None
            }
            ReadRequest => {
                self.op_read_request(inp);
                None
            }
            AtomicRequest => self.op_atomic_request(flags, inp),
            AtomicResponse => {
                let original = u64::from(inp.u8()) * 0x0101_0101_0101_0101;
                let p = inp.u8();
                match self.engine_orq.front() {
                    Some(EngineReq::Atomic { req_id }) => {
                        let perturb = if p >= 192 { 1 + (p & 1) } else { 0 };
                        self.answer_atomic(*req_id, original, perturb);
                    }
                    _ => self.answer_atomic(0x5151, original, 3),
                }
                None
            }
            Terminate => {
                self.op_terminate(flags, inp);
                None
            }
            Zero => {
                match flags & 3 {
                    0 => self.send_zero(RtrKind::Write),
                    1 => self.send_zero(RtrKind::Send),
                    2 => self.send_zero(RtrKind::Read),
                    _ => self.send_msg(&RdmapMessage::Write {
                        last: true,
                        stag: Stag(stag(Region::All)),
                        offset: region(Region::All).0,
                        payload: &[],
                    }),
                }
                None
            }
            Answer => {
                self.answer_front(usize::MAX);
                None
            }
        };
        if !deliver {
            return;
        }
        self.deliver();
        if let Some(Expect::Bytes(addr, want)) = expect {
            if !self.desynced && !self.batch && !self.conn.is_closed() {
                assert_eq!(
                    self.mem.get(addr, want.len()),
                    &want[..],
                    "a Write or Atomic the engine accepted is not in memory at {addr:#x}"
                );
            }
        }
        self.check_placement();
    }

    fn op_write(&mut self, flags: u8, inp: &mut Input<'_>) -> Option<Expect> {
        let sel = inp.u8();
        let off = u64::from(inp.u16());
        let len = payload_len(inp.u8());
        let (stg, to, r) = match sel & 7 {
            5 => (inp.u32(), off, None),
            6 => (stag(Region::All), inp.u64(), None),
            7 => (0, off, None),
            _ => {
                let r = region_sel(sel).expect("0..=4 name a region");
                (stag(r), region(r).0 + off, Some(r))
            }
        };
        let payload = self.payload(len);
        self.send_msg(&RdmapMessage::Write {
            last: flags & 1 == 0,
            stag: Stag(stg),
            offset: to,
            payload: &payload,
        });
        (matches!(r, Some(Region::All | Region::RemoteWrite)) && !payload.is_empty())
            .then_some(Expect::Bytes(to, payload))
    }

    fn op_read_response(&mut self, inp: &mut Input<'_>) {
        let len = payload_len(inp.u8());
        let p = inp.u8();
        let front = match self.engine_orq.front() {
            Some(EngineReq::Read {
                sink_stag,
                sink_to,
                size,
                sent,
                ..
            }) => Some((*sink_stag, *sink_to, *size, *sent)),
            _ => None,
        };
        let Some((mut stg, sink_to, size, sent)) = front else {
            // A Read Response nobody asked for.
            let payload = self.payload(len);
            let to = region(Region::Local).0 + 512;
            self.read_response(stag(Region::Local), to, &payload, true, false);
            return;
        };
        let n = (len as u64).min(size - sent);
        let mut to = sink_to.wrapping_add(sent);
        let mut last = sent + n == size;
        if p >= 192 {
            match p & 7 {
                0 => stg = stg.wrapping_add(1),
                1 => to = to.wrapping_sub(1),
                2 => to = to.wrapping_add(1),
                3 => last = true,
                4 => last = false,
                5 => to = sink_to.wrapping_add(size),
                6 => stg = 0,
                _ => to = u64::MAX - 3,
            }
        }
        let payload = self.payload(n as usize);
        self.read_response(stg, to, &payload, last, true);
    }

    /// A queue 0 segment with any opcode, queue, MSN and MO; the model advances as if
    /// the expected fields were sent.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_untagged0(
        &mut self,
        opcode: u8,
        rsvd_ulp: u32,
        qn: u32,
        msn: u32,
        mo: u32,
        last: bool,
        payload: &[u8],
    ) {
        let want_mo = self.peer_q.mo.unwrap_or(0);
        self.peer_msg.put(u64::from(mo), payload);
        if last {
            self.finished_msg = Some(std::mem::take(&mut self.peer_msg));
            self.peer_q.msn[0] = self.peer_q.msn[0].wrapping_add(1);
            self.peer_q.mo = None;
        } else {
            self.peer_q.mo = Some(want_mo.wrapping_add(payload.len() as u32));
        }
        self.send_ddp(
            DdpRepr {
                last,
                ulp_control: (RDMAP_VERSION << 6) | opcode,
                buffer: DdpBuffer::Untagged {
                    rsvd_ulp,
                    qn,
                    msn,
                    mo,
                },
            },
            payload,
        );
    }

    fn op_send(&mut self, flags: u8, inp: &mut Input<'_>) {
        let len = payload_len(inp.u8());
        let p = inp.u8();
        let imm = flags & 4 != 0;
        let last = flags & 8 == 0;
        let (opcode, rsvd) = if imm {
            (OP_SEND_IMM | (flags & 1), u32::from(self.pattern) << 8)
        } else {
            let opcode = 3 + (flags & 3);
            let rsvd = if flags & 1 != 0 {
                stag_sel(inp.u8())
            } else {
                0
            };
            (opcode, rsvd)
        };
        let mut msn = self.peer_q.msn[0];
        let mut mo = self.peer_q.mo.unwrap_or(0);
        let mut qn = 0;
        if p >= 192 {
            match p & 7 {
                0 => msn = msn.wrapping_add(1),
                1 => msn = msn.wrapping_sub(1),
                2 => mo = mo.wrapping_add(1),
                3 => mo = 0xffff_ff00,
                4 => qn = 1,
                5 => qn = 3,
                6 => qn = 7,
                _ => mo = mo.wrapping_sub(1),
            }
        }
        let payload = self.payload(len);
        self.send_untagged0(opcode, rsvd, qn, msn, mo, last, &payload);
    }

    fn op_immediate(&mut self, flags: u8, inp: &mut Input<'_>) {
        let imm = inp.u8();
        let p = inp.u8();
        let mut msn = self.peer_q.msn[0];
        let mut qn = 0;
        let mut last = true;
        let mut payload = vec![imm, 0, imm, 0, 0, 0, 0, 0];
        if p >= 192 {
            match p & 3 {
                0 => msn = msn.wrapping_add(1),
                1 => qn = 1,
                2 => payload.truncate(4),
                _ => last = false,
            }
        }
        self.peer_q.msn[0] = self.peer_q.msn[0].wrapping_add(1);
        self.peer_q.mo = None;
        self.peer_msg = Default::default();
        self.send_ddp(
            DdpRepr {
                last,
                ulp_control: (RDMAP_VERSION << 6) | OP_IMMEDIATE | (flags & 1),
                buffer: DdpBuffer::Untagged {
                    rsvd_ulp: 0,
                    qn,
                    msn,
                    mo: 0,
                },
            },
            &payload,
        );
    }

    /// A DDP header straight from the input (any control octets, queue, MSN...).
    fn op_raw(&mut self, flags: u8, inp: &mut Input<'_>) {
        let hl = if flags & 1 != 0 {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        let mut u = inp.bytes(hl).to_vec();
        u.resize(hl, 0);
        if flags & 2 != 0 {
            // Keep the T bit consistent with the header length, DDP version 1.
            u[0] = (u[0] & 0x40) | 0x01 | if hl == TAGGED_HEADER_LEN { 0x80 } else { 0 };
        }
        let n = payload_len(inp.u8());
        let payload = self.payload(n);
        u.extend_from_slice(&payload);
        self.desynced = true;
        self.send_ulpdu(&u);
    }

    /// A valid Write whose FPDU has one octet changed (CRC, length, marker or header).
    fn op_corrupt(&mut self, inp: &mut Input<'_>) {
        let pos = usize::from(inp.u16());
        let x = inp.u8() | 1;
        let payload = self.payload(16);
        let at = self.pending.len();
        self.send_msg(&RdmapMessage::Write {
            last: true,
            stag: Stag(stag(Region::All)),
            offset: region(Region::All).0,
            payload: &payload,
        });
        let n = self.pending.len() - at;
        self.pending[at + pos % n] ^= x;
        self.desynced = true;
    }

    fn op_post_send(&mut self, flags: u8, inp: &mut Input<'_>) {
        let opb = inp.u8();
        let Some(opcode) = WrOpcode::from_raw(u32::from(opb & 0x0f) % 10) else {
            return;
        };
        let sink = matches!(
            opcode,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        );
        let mut wr = SendWr::new(WrId(0), opcode);
        if flags & 4 != 0 {
            wr.send_flags = SendFlags::EMPTY;
        }
        if flags & 8 != 0 {
            wr.send_flags |= SendFlags::FENCE;
        }
        if opb & 0x10 != 0 {
            wr.send_flags |= SendFlags::SOLICITED;
        }
        wr.sg_list = (0..flags & 3)
            .map(|_| sge_of(inp.u8(), inp.u8(), inp.u8(), sink))
            .collect();
        if opb & 0x20 != 0 {
            let n = usize::from(inp.u8());
            wr.inline_data = Some(self.payload(n));
            wr.send_flags |= SendFlags::INLINE;
        }
        let r = inp.u8();
        wr.rdma = RdmaInfo {
            remote_addr: 0x2000 + u64::from(r) * 8,
            rkey: Rkey(0x100 + u32::from(r)),
        };
        wr.atomic.remote_addr = 0x3000 + u64::from(r) * 8;
        wr.atomic.rkey = Rkey(0x300 + u32::from(r));
        wr.atomic.compare_add = u64::from(r);
        wr.atomic.swap = !u64::from(r);
        wr.imm_data = u32::from(r) << 16 | 0x1234;
        wr.invalidate_rkey = Rkey(stag_sel(r));
        self.post_send(wr);
    }

    fn op_read_request(&mut self, inp: &mut Input<'_>) {
        let sel = inp.u8();
        let off = u64::from(inp.u16());
        let mut size = u64::from(inp.u16() % 4096);
        let p = inp.u8();
        let (src_stag, src_to) = match sel & 7 {
            5 => (0x7777, off),
            6 => {
                size = 0;
                (0, 0)
            }
            7 => (stag(Region::ReadOnly), u64::MAX - off),
            _ => {
                let r = region_sel(sel).expect("0..=4 name a region");
                (stag(r), region(r).0 + off)
            }
        };
        let (ro, ro_len) = region(Region::ReadOnly);
        let fixed_src = (src_stag == stag(Region::ReadOnly)
            && src_to >= ro
            && src_to.checked_add(size).is_some_and(|e| e <= ro + ro_len))
        .then_some(src_to);
        let sink_stag = 0x1234_5600 | u32::from(sel);
        let sink_to = off.wrapping_mul(3);
        let mut msn = self.peer_q.msn[1];
        self.peer_q.msn[1] = msn.wrapping_add(1);
        if p >= 192 && p & 3 == 0 {
            msn = msn.wrapping_add(1);
        }
        if p >= 192 && p & 3 == 1 {
            msn = msn.wrapping_sub(1);
        }
        self.peer_irq.push_back(PeerReq::Read {
            sink_stag,
            sink_to,
            size,
            sent: 0,
            fixed_src,
        });
        let m = RdmapMessage::ReadRequest {
            msn,
            request: ReadRequest {
                sink_stag: Stag(sink_stag),
                sink_offset: sink_to,
                size: size as u32,
                src_stag: Stag(src_stag),
                src_offset: src_to,
            },
        };
        let mut u = vec![0u8; m.buffer_len()];
        m.emit(&mut u);
        if p >= 192 && p & 3 == 2 {
            u[0] &= !0x40; // not the last segment
        }
        if p >= 192 && p & 3 == 3 {
            u.truncate(u.len() - 4);
        }
        self.send_ulpdu(&u);
    }

    fn op_atomic_request(&mut self, flags: u8, inp: &mut Input<'_>) -> Option<Expect> {
        let sel = inp.u8();
        let off = u64::from(inp.u16());
        let data = u64::from(inp.u8()) * 0x0001_0001_0001_0001;
        let p = inp.u8();
        let (all, all_len) = region(Region::All);
        let misalign = if flags & 2 != 0 { 1 + off % 7 } else { 0 };
        let (stg, to) = match sel & 7 {
            5 => (0x7777, off),
            6 => (stag(Region::All), all + all_len - 4),
            7 => (stag(Region::All), !7u64),
            _ => {
                let r = region_sel(sel).expect("0..=4 name a region");
                let (base, len) = region(r);
                (stag(r), base + (off * 8) % len + misalign)
            }
        };
        let target_ok = stg == stag(Region::All)
            && to % 8 == 0
            && to >= all
            && to.checked_add(8).is_some_and(|e| e <= all + all_len);
        // In batch mode the ops before this one are not delivered yet: the target's
        // value when the engine applies the atomic is not known here.
        let current = (target_ok && !self.batch).then(|| {
            let b = self.mem.get(to, 8);
            u64::from_le_bytes(b.try_into().expect("8 octets"))
        });
        let cmpswap = flags & 1 != 0;
        let compare = if flags & 4 != 0 {
            current.unwrap_or(0)
        } else {
            data ^ 1
        };
        let req_id = self.next_req_id;
        self.next_req_id = req_id.wrapping_add(1);
        let mut msn = self.peer_q.msn[1];
        self.peer_q.msn[1] = msn.wrapping_add(1);
        if p >= 192 && p & 1 == 0 {
            msn = msn.wrapping_add(1);
        }
        self.peer_irq.push_back(PeerReq::Atomic {
            req_id,
            original: current,
        });
        let mut u = Vec::new();
        ExtMessage::AtomicRequest {
            msn,
            op: if cmpswap {
                AtomicOp::CmpSwap
            } else {
                AtomicOp::FetchAdd
            },
            req_id,
            stag: stg,
            to,
            data,
            compare,
        }
        .emit(&mut u);
        if p >= 192 && p & 1 == 1 {
            u[6..10].copy_from_slice(&0u32.to_be_bytes()); // queue 0, not 1
        }
        self.send_ulpdu(&u);
        let new = current.map(|c| {
            if cmpswap {
                if c == compare {
                    data
                } else {
                    c
                }
            } else {
                c.wrapping_add(data)
            }
        })?;
        Some(Expect::Bytes(to, new.to_le_bytes().to_vec()))
    }

    fn op_terminate(&mut self, flags: u8, inp: &mut Input<'_>) {
        let mut hdr = vec![inp.u8(), inp.u8(), inp.u8(), 0];
        let n = usize::from(inp.u8() % 48);
        hdr.extend_from_slice(inp.bytes(n));
        let msn = self.peer_q.msn[2];
        self.peer_q.msn[2] = msn.wrapping_add(1);
        self.peer_terminated = true;
        self.send_ddp(
            DdpRepr {
                last: flags & 1 == 0,
                ulp_control: (RDMAP_VERSION << 6) | 7,
                buffer: DdpBuffer::Untagged {
                    rsvd_ulp: 0,
                    qn: if flags & 2 != 0 { 0 } else { 2 },
                    msn,
                    mo: 0,
                },
            },
            &hdr,
        );
    }
}

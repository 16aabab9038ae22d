//! [`Script`]: writes inputs in the format of [`super::ops`], op by op, for tests and
//! seeds.

use super::ops::Kind::{self, *};
use super::ops::Target;

/// An input for [`super::run`], written op by op.
#[derive(Debug, Clone)]
pub struct Script {
    target: Target,
    bytes: Vec<u8>,
}

/// The flags of an Atomic Request op.
#[derive(Debug, Clone, Copy, Default)]
pub struct AtomicFlags {
    /// CmpSwap (else FetchAdd).
    pub cmpswap: bool,
    /// A target off the 8-octet alignment.
    pub misalign: bool,
    /// Compare with the target's current value (else one that differs from the data).
    pub compare_current: bool,
}

/// The header's choices.
#[derive(Debug, Clone, Copy, Default)]
pub struct Setup {
    pub initiator: bool,
    pub crc: bool,
    pub peer_crc: bool,
    pub markers: bool,
    pub peer_markers: bool,
    pub extensions: bool,
    pub peer_to_peer: bool,
    /// The script sends (or answers) the RTR itself.
    pub no_auto_rtr: bool,
    /// RTR kinds the peer offers: bit 0 Send, 1 Write, 2 Read.
    pub rtr: u8,
    pub ird: u8,
    pub ord: u8,
    pub fin: bool,
    pub chunk: u8,
    pub mss: u8,
}

impl Setup {
    /// The three header octets.
    pub fn header(&self) -> [u8; 3] {
        let b = |v: bool, m: u8| if v { m } else { 0 };
        [
            b(self.initiator, 0x01)
                | b(self.crc, 0x02)
                | b(self.peer_crc, 0x04)
                | b(self.markers, 0x08)
                | b(self.peer_markers, 0x10)
                | b(self.extensions, 0x20)
                | b(self.peer_to_peer, 0x40)
                | b(self.no_auto_rtr, 0x80),
            (self.rtr & 7) | (self.ird & 3) << 3 | (self.ord & 3) << 5 | b(self.fin, 0x80),
            (self.chunk & 0x0f) | (self.mss & 0x0f) << 4,
        ]
    }
}

impl Script {
    /// A script for `target` with the header of `setup`.
    pub fn new(target: Target, setup: Setup) -> Script {
        Script {
            target,
            bytes: setup.header().to_vec(),
        }
    }

    /// The input octets.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn tag(mut self, kind: Kind, flags: u8) -> Script {
        let i = self
            .target
            .ops()
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_else(|| panic!("{kind:?} is not an op of {:?}", self.target));
        self.bytes.push(i as u8 | flags << 4);
        self
    }

    fn push(mut self, b: &[u8]) -> Script {
        self.bytes.extend_from_slice(b);
        self
    }

    /// An RDMA Write segment: `sel` 0..=4 a region (TO = its address + `off`), 5 STag
    /// `extra` with TO `off`, 6 the first region's STag with TO `extra`, 7 STag 0.
    pub fn write(self, sel: u8, off: u16, len: u8, last: bool, extra: u64) -> Script {
        let s = self
            .tag(Write, u8::from(!last))
            .push(&[sel])
            .push(&off.to_be_bytes())
            .push(&[len]);
        match sel & 7 {
            5 => s.push(&(extra as u32).to_be_bytes()),
            6 => s.push(&extra.to_be_bytes()),
            _ => s,
        }
    }

    /// A Read Response segment for the engine's oldest Read (or nobody's).
    pub fn read_response(self, len: u8, perturb: u8) -> Script {
        self.tag(ReadResponse, 0).push(&[len, perturb])
    }

    /// A Send segment: `variant` 0 Send, 1 with Invalidate of `inv`, 2 with SE, 3 both;
    /// `imm`: the private Send with Immediate.
    pub fn send(self, variant: u8, imm: bool, last: bool, len: u8, perturb: u8, inv: u8) -> Script {
        let flags = (variant & 3) | u8::from(imm) << 2 | u8::from(!last) << 3;
        let s = self.tag(Send, flags).push(&[len, perturb]);
        if !imm && variant & 1 != 0 {
            s.push(&[inv])
        } else {
            s
        }
    }

    /// Immediate Data (RFC 7306).
    pub fn immediate(self, solicited: bool, imm: u8, perturb: u8) -> Script {
        self.tag(Immediate, u8::from(solicited))
            .push(&[imm, perturb])
    }

    /// A segment with a raw DDP header.
    pub fn raw(self, tagged: bool, fix_control: bool, header: &[u8], len: u8) -> Script {
        let hl = if tagged { 14 } else { 18 };
        let mut h = header.to_vec();
        h.resize(hl, 0);
        self.tag(Raw, u8::from(tagged) | u8::from(fix_control) << 1)
            .push(&h)
            .push(&[len])
    }

    /// Unframed bytes into the stream (1..=64 of them).
    pub fn garbage(self, g: &[u8]) -> Script {
        let n = g.len().clamp(1, 64);
        self.tag(Garbage, 0).push(&[(n - 1) as u8]).push(&g[..n])
    }

    /// A Write FPDU with octet `pos` (mod its length) flipped by `x | 1`.
    pub fn corrupt(self, pos: u16, x: u8) -> Script {
        self.tag(Corrupt, 0).push(&pos.to_be_bytes()).push(&[x])
    }

    /// A receive WR with up to 3 SGEs `(sel, off, len)` (see the SGE operand).
    pub fn post_recv(self, sges: &[(u8, u8, u8)]) -> Script {
        let mut s = self.tag(PostRecv, sges.len().min(3) as u8);
        for (a, b, c) in sges.iter().take(3) {
            s = s.push(&[*a, *b, *c]);
        }
        s
    }

    /// A send WR: `opb` low nibble the `ibv_wr_opcode` (mod 10), 0x10 solicited, 0x20
    /// inline (`inline` octets); `r` seeds the remote fields.
    pub fn post_send(
        self,
        opb: u8,
        signaled: bool,
        fence: bool,
        sges: &[(u8, u8, u8)],
        inline: u8,
        r: u8,
    ) -> Script {
        let flags = sges.len().min(3) as u8 | u8::from(!signaled) << 2 | u8::from(fence) << 3;
        let mut s = self.tag(PostSend, flags).push(&[opb]);
        for (a, b, c) in sges.iter().take(3) {
            s = s.push(&[*a, *b, *c]);
        }
        if opb & 0x20 != 0 {
            s = s.push(&[inline]);
        }
        s.push(&[r])
    }

    /// A Read Request for `size` octets at `off` of region `sel`.
    pub fn read_request(self, sel: u8, off: u16, size: u16, perturb: u8) -> Script {
        self.tag(ReadRequest, 0)
            .push(&[sel])
            .push(&off.to_be_bytes())
            .push(&size.to_be_bytes())
            .push(&[perturb])
    }

    /// An Atomic Request on the 8 octets at `off * 8` of region `sel`.
    pub fn atomic_request(
        self,
        f: AtomicFlags,
        sel: u8,
        off: u16,
        data: u8,
        perturb: u8,
    ) -> Script {
        let flags =
            u8::from(f.cmpswap) | u8::from(f.misalign) << 1 | u8::from(f.compare_current) << 2;
        self.tag(AtomicRequest, flags)
            .push(&[sel])
            .push(&off.to_be_bytes())
            .push(&[data, perturb])
    }

    /// An Atomic Response for the engine's oldest Atomic (or nobody's).
    pub fn atomic_response(self, original: u8, perturb: u8) -> Script {
        self.tag(AtomicResponse, 0).push(&[original, perturb])
    }

    /// A Terminate whose header starts with `ctrl` and carries `extra` octets.
    pub fn terminate(self, ctrl: [u8; 3], extra: &[u8], last: bool, wrong_qn: bool) -> Script {
        let n = extra.len().min(47);
        self.tag(Terminate, u8::from(!last) | u8::from(wrong_qn) << 1)
            .push(&ctrl)
            .push(&[n as u8])
            .push(&extra[..n])
    }

    /// A zero-length Write (0), Send (1), Read Request (2), or Write to the first region (3).
    pub fn zero(self, kind: u8) -> Script {
        self.tag(Zero, kind & 3)
    }

    /// Answers the engine's oldest Read (all of it) or Atomic.
    pub fn answer(self) -> Script {
        self.tag(Answer, 0)
    }
}

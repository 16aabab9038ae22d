//! The Base Transport Header (IBA 9.2, 12 bytes).
//!
//! ```text
//! 0: OpCode | 1: SE M PadCnt(2) TVer(4) | 2-3: P_Key
//! 4: F B resv6 (RoCE v2: FECN, BECN) | 5-7: DestQP
//! 8: A resv7 | 9-11: PSN
//! ```

use super::{read_u24, write_u24, Error, Opcode, Pkey, Psn, Qpn, Result};

mod field {
    use core::ops::Range;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: Range<usize> = 2..4;
    pub const RESV8A: usize = 4;
    pub const DEST_QP: Range<usize> = 5..8;
    pub const ACK_REQ: usize = 8;
    pub const PSN: Range<usize> = 9..12;
}

/// Length of the BTH.
pub const HEADER_LEN: usize = field::PSN.end;

/// A view of a BTH at the start of a buffer.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }
    /// Wraps a buffer, checking it holds a whole BTH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the buffer holds a whole BTH.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// OpCode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[field::OPCODE])
    }
    /// SE: Solicited Event.
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }
    /// M: MigReq.
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }
    /// PadCnt: bytes of pad after the payload (0..=3).
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) & 3
    }
    /// TVer: transport header version (0).
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0x0f
    }
    /// P_Key.
    pub fn pkey(&self) -> Pkey {
        let b = &self.buffer.as_ref()[field::PKEY];
        Pkey(u16::from_be_bytes([b[0], b[1]]))
    }
    /// FECN (RoCE v2 Annex A17.9: congestion experienced, forward).
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::RESV8A] & 0x80 != 0
    }
    /// BECN (backward congestion notification).
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::RESV8A] & 0x40 != 0
    }
    /// The whole byte 4 (resv8a, masked to ones in the ICRC).
    pub fn resv8a(&self) -> u8 {
        self.buffer.as_ref()[field::RESV8A]
    }
    /// DestQP.
    pub fn dest_qp(&self) -> Qpn {
        Qpn(read_u24(&self.buffer.as_ref()[field::DEST_QP]))
    }
    /// A: AckReq.
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & 0x80 != 0
    }
    /// PSN.
    pub fn psn(&self) -> Psn {
        Psn::new(read_u24(&self.buffer.as_ref()[field::PSN]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets OpCode.
    pub fn set_opcode(&mut self, v: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = v.0;
    }
    /// Sets SE, M, PadCnt and TVer at once.
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        self.buffer.as_mut()[field::FLAGS] = (u8::from(solicited) << 7)
            | (u8::from(mig_req) << 6)
            | ((pad_count & 3) << 4)
            | (tver & 0x0f);
    }
    /// Sets P_Key.
    pub fn set_pkey(&mut self, v: Pkey) {
        self.buffer.as_mut()[field::PKEY].copy_from_slice(&v.0.to_be_bytes());
    }
    /// Sets FECN and BECN (the other six bits of byte 4 are reserved, written 0).
    pub fn set_ecn(&mut self, fecn: bool, becn: bool) {
        self.buffer.as_mut()[field::RESV8A] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }
    /// Sets DestQP (low 24 bits).
    pub fn set_dest_qp(&mut self, v: Qpn) {
        write_u24(&mut self.buffer.as_mut()[field::DEST_QP], v.0);
    }
    /// Sets AckReq (the 7 reserved bits are written 0).
    pub fn set_ack_req(&mut self, v: bool) {
        self.buffer.as_mut()[field::ACK_REQ] = u8::from(v) << 7;
    }
    /// Sets PSN.
    pub fn set_psn(&mut self, v: Psn) {
        write_u24(&mut self.buffer.as_mut()[field::PSN], v.value());
    }
}

/// A parsed BTH. [`super::PacketRepr`] derives `opcode` and `pad_count`; this repr is for
/// code that handles the BTH alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// OpCode.
    pub opcode: Opcode,
    /// SE.
    pub solicited: bool,
    /// M.
    pub mig_req: bool,
    /// PadCnt (0..=3).
    pub pad_count: u8,
    /// TVer (0..=15; only 0 is valid in a packet).
    pub tver: u8,
    /// P_Key.
    pub pkey: Pkey,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// DestQP.
    pub dest_qp: Qpn,
    /// AckReq.
    pub ack_req: bool,
    /// PSN.
    pub psn: Psn,
}

impl BthRepr {
    /// Parses a BTH (no semantic checks: the opcode and TVer are checked by
    /// [`super::PacketRepr::parse`]).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(BthRepr {
            opcode: p.opcode(),
            solicited: p.solicited(),
            mig_req: p.mig_req(),
            pad_count: p.pad_count(),
            tver: p.tver(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        })
    }
    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the BTH into the first [`HEADER_LEN`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_opcode(self.opcode);
        p.set_flags(self.solicited, self.mig_req, self.pad_count, self.tver);
        p.set_pkey(self.pkey);
        p.set_ecn(self.fecn, self.becn);
        p.set_dest_qp(self.dest_qp);
        p.set_ack_req(self.ack_req);
        p.set_psn(self.psn);
    }
}

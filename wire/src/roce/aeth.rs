//! The ACK Extended Transport Header (IBA 9.3.5, 4 bytes): syndrome and MSN.
//!
//! Syndrome bits (IBA Table 44): bit 7 reserved (0); bits 6..5 the type (`00` ACK, `01`
//! RNR NAK, `10` reserved, `11` NAK); bits 4..0 the credit count, RNR timer or NAK code.

use super::{read_u24, write_u24, Error, Msn, Result};

mod field {
    use core::ops::Range;
    pub const SYNDROME: usize = 0;
    pub const MSN: Range<usize> = 1..4;
}

/// Length of the AETH.
pub const HEADER_LEN: usize = field::MSN.end;

header_view!("AETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The raw syndrome byte.
    pub fn syndrome_raw(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }
    /// MSN.
    pub fn msn(&self) -> Msn {
        Msn(read_u24(&self.buffer.as_ref()[field::MSN]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the raw syndrome byte.
    pub fn set_syndrome_raw(&mut self, v: u8) {
        self.buffer.as_mut()[field::SYNDROME] = v;
    }
    /// Sets MSN (low 24 bits).
    pub fn set_msn(&mut self, v: Msn) {
        write_u24(&mut self.buffer.as_mut()[field::MSN], v.0);
    }
}

/// The 5-bit end-to-end credit count of an ACK (IBA 9.7.7.2.5, Table 46): a logarithmic
/// code for the number of receive WQEs available; 31 means "invalid / not limited".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CreditCode(u8);

impl CreditCode {
    /// Code 31: credits not valid (an SRQ or no flow control).
    pub const INVALID: CreditCode = CreditCode(31);

    /// A code from its 5-bit value.
    pub const fn new(code: u8) -> Self {
        CreditCode(code & 0x1f)
    }
    /// The 5-bit value.
    pub const fn code(self) -> u8 {
        self.0
    }
    /// Number of WQEs this code stands for (`None` for 31). Codes 0..=30 mean 0, 1, 2, 3,
    /// 4, 6, 8, 12, 16, 24, ... 32768: for code `c >= 2`, `2^(c/2) * (2 + c%2) / 2`.
    pub const fn credits(self) -> Option<u32> {
        match self.0 {
            31 => None,
            0 => Some(0),
            1 => Some(1),
            c => {
                let base = 1u32 << (c as u32 / 2);
                Some(if c % 2 == 0 { base } else { base + base / 2 })
            }
        }
    }
    /// The largest code whose credit count does not exceed `n`.
    pub fn from_credits(n: u32) -> Self {
        let mut best = 0;
        for c in 0..31u8 {
            match CreditCode(c).credits() {
                Some(v) if v <= n => best = c,
                _ => break,
            }
        }
        CreditCode(best)
    }
}

/// The 5-bit RNR NAK timer code (IBA 9.7.5.2.8, Table 45): the minimum time the
/// requester waits before retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RnrTimer(u8);

impl RnrTimer {
    /// A timer from its 5-bit code.
    pub const fn new(code: u8) -> Self {
        RnrTimer(code & 0x1f)
    }
    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        self.0
    }
    /// The delay, in microseconds (Table 45: code 0 = 655.36 ms, 1 = 0.01 ms, ...,
    /// 31 = 491.52 ms).
    pub const fn micros(self) -> u32 {
        const TABLE: [u32; 32] = [
            655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920,
            2_560, 3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920,
            122_880, 163_840, 245_760, 327_680, 491_520,
        ];
        TABLE[self.0 as usize]
    }
    /// The delay as a `Duration`.
    pub const fn duration(self) -> core::time::Duration {
        core::time::Duration::from_micros(self.micros() as u64)
    }
}

/// NAK codes (IBA 9.3.5, Table 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error.
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error.
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5..=31: reserved.
    Unknown(u8),
}

impl NakCode {
    /// The 5-bit code.
    pub const fn bits(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Unknown(b) => b & 0x1f,
        }
    }
    /// The code of 5 bits.
    pub const fn from_bits(b: u8) -> Self {
        match b & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            b => NakCode::Unknown(b),
        }
    }
}

/// The AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// ACK with an end-to-end credit count.
    Ack(CreditCode),
    /// Receiver Not Ready NAK with the timer the requester must wait.
    RnrNak(RnrTimer),
    /// NAK.
    Nak(NakCode),
}

impl Syndrome {
    /// The syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack(c) => c.code(),
            Syndrome::RnrNak(t) => 0x20 | t.code(),
            Syndrome::Nak(n) => 0x60 | n.bits(),
        }
    }
    /// Parses a syndrome byte; the reserved type `10` and the reserved top bit fail.
    pub const fn from_byte(b: u8) -> Result<Self> {
        if b & 0x80 != 0 {
            return Err(Error::ReservedSyndrome(b));
        }
        match (b >> 5) & 3 {
            0 => Ok(Syndrome::Ack(CreditCode::new(b))),
            1 => Ok(Syndrome::RnrNak(RnrTimer::new(b))),
            3 => Ok(Syndrome::Nak(NakCode::from_bits(b))),
            _ => Err(Error::ReservedSyndrome(b)),
        }
    }
}

/// A parsed AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// Message Sequence Number.
    pub msn: Msn,
}

impl AethRepr {
    /// Parses an AETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(AethRepr {
            syndrome: Syndrome::from_byte(p.syndrome_raw())?,
            msn: p.msn(),
        })
    }
    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the AETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_syndrome_raw(self.syndrome.to_byte());
        p.set_msn(self.msn);
    }
}

//! IB CM MADs (IBA vol. 1 ch. 12, ch. 13.4) as RDMA CM uses them over QP1.
//!
//! - [`mad`]: the common MAD header (IBA 13.4.2), 24 octets in front of every MAD.
//! - [`messages`]: the CM messages (IBA 12.6): ConnectRequest (REQ), MRA, Reject (REJ),
//!   ConnectReply (REP), ReadyToUse (RTU), DisconnectRequest (DREQ), DisconnectReply
//!   (DREP), SIDR_REQ and SIDR_REP, as one [`CmMessage`] enum keyed by attribute ID.
//! - [`cma`]: what RDMA CM puts inside: the IP private-data header of a REQ / SIDR_REQ
//!   and the service ID built from the port space and port.
//!
//! On RoCE a MAD travels as the payload of a UD SEND_ONLY to QP1 (after BTH and DETH),
//! always 256 octets.

pub mod cma;
pub mod mad;
pub mod messages;

pub use cma::{CmaHeader, PortSpace, ServiceId};
pub use mad::{MadHeader, MAD_LEN};
pub use messages::{CmMad, CmMessage, CmPath};

/// Why bytes are not a valid CM MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// Shorter than a 256-octet MAD (or than the structure asked for).
    Truncated,
    /// BaseVersion is not 1 (IBA 13.4.2).
    BadBaseVersion(u8),
    /// The management class is not CM (0x07).
    NotCmClass(u8),
    /// The RDMA CM header's version is not 0, or its IP version neither 4 nor 6.
    BadCmaHeader(u8, u8),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => write!(f, "truncated MAD"),
            Error::BadBaseVersion(v) => write!(f, "MAD base version {v} is not 1"),
            Error::NotCmClass(c) => write!(f, "management class {c:#04x} is not CM"),
            Error::BadCmaHeader(v, ip) => {
                write!(f, "RDMA CM header version {v}, IP version {ip}")
            }
        }
    }
}

impl std::error::Error for Error {}

/// `Result` with this module's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

pub(crate) fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

pub(crate) fn be24(b: &[u8]) -> u32 {
    (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2])
}

pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

pub(crate) fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

pub(crate) fn put24(b: &mut [u8], v: u32) {
    b[0] = (v >> 16) as u8;
    b[1] = (v >> 8) as u8;
    b[2] = v as u8;
}

/// `width` bits of `byte` starting `off` bits from its most significant bit (the way
/// IBA and the kernel's `CM_FIELD_BLOC` number bits).
pub(crate) fn bits(byte: u8, off: u32, width: u32) -> u8 {
    (byte >> (8 - off - width)) & ((1u16 << width) - 1) as u8
}

/// Sets `width` bits of `*byte` starting `off` bits from its most significant bit.
pub(crate) fn set_bits(byte: &mut u8, off: u32, width: u32, v: u8) {
    let mask = (((1u16 << width) - 1) as u8) << (8 - off - width);
    *byte = (*byte & !mask) | ((v << (8 - off - width)) & mask);
}

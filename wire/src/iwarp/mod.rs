//! iWARP: MPA (RFC 5044, RFC 6581), DDP (RFC 5041) and RDMAP (RFC 5040).
//!
//! The layering, outermost first, as a TCP byte stream carries it:
//!
//! - [`mpa`]: the MPA Request and Reply frames that open each direction of the stream
//!   (RFC 5044 §7.1), with the RFC 6581 IRD/ORD word of revision 2.
//! - [`fpdu`]: MPA FPDUs (Framed Protocol Data Units): ULPDU length, ULPDU, pad, CRC32c,
//!   and markers every 512 octets of the stream (RFC 5044 §4–§6).
//! - [`deframer`]: turns a byte stream, however chunked, into request/reply frames and
//!   FPDUs, the way rustls's deframer turns bytes into TLS records.
//! - [`ddp`]: the DDP tagged and untagged headers (RFC 5041 §4).
//! - [`rdmap`]: RDMAP messages (RFC 5040 §4) over DDP segments; [`terminate`]: the
//!   Terminate message's header and its named error codes (RFC 5040 §4.8, §7).
//!
//! Nothing here allocates except the deframer's own buffers.

pub mod crc;
pub mod ddp;
pub mod deframer;
pub mod fpdu;
pub mod mpa;
pub mod rdmap;
pub mod terminate;

pub use ddp::{DdpRepr, Stag};
pub use deframer::{Deframed, Deframer};
pub use fpdu::FpduConfig;
pub use mpa::{IrdOrd, MpaFrameKind, MpaRepr, MpaRevision};
pub use rdmap::{RdmapMessage, RdmapOpcode, ReadRequest};
pub use terminate::{TermLayer, TerminateError, TerminateRepr};

/// Why bytes are not a valid MPA / DDP / RDMAP unit.
///
/// Each variant maps to one Terminate cause (RFC 5040 §7, RFC 5044 §8), so the transport
/// can say precisely why it closes a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer ends before a header or a length field says it does.
    Truncated,
    /// An MPA Request/Reply frame does not start with the key the phase expects
    /// ("MPA ID Req Frame" / "MPA ID Rep Frame", RFC 5044 §7.1).
    BadMpaKey,
    /// An MPA Request/Reply frame's revision is not 1 or 2 (RFC 5044 §7.1, RFC 6581 §5).
    BadMpaRevision(u8),
    /// Private data longer than 512 octets (RFC 5044 §7.1: PD_Length at most 512).
    PrivateDataTooLong(u16),
    /// A revision 2 frame whose private data cannot hold the 4-octet IRD/ORD word
    /// (RFC 6581 §5).
    MissingIrdOrd,
    /// The MPA CRC32c of an FPDU does not match (RFC 5044 §6: the stream is lost).
    BadCrc {
        /// CRC32c computed over the received FPDU.
        computed: u32,
        /// CRC32c the FPDU carried.
        received: u32,
    },
    /// A marker's FPDUPTR does not point back to the start of the FPDU it is in
    /// (RFC 5044 §5).
    BadMarker {
        /// Stream offset of the marker (relative to the start of full operation).
        position: u64,
        /// The FPDUPTR it carried.
        fpduptr: u16,
    },
    /// The ULPDU length is smaller than the smallest DDP header, so it cannot be an
    /// iWARP FPDU (RFC 5044 §4.1, RFC 5041 §4).
    UlpduTooShort(u16),
    /// The DDP version is not 1 (RFC 5041 §4.1: DV).
    BadDdpVersion(u8),
    /// The RDMAP version is not 1 (RFC 5040 §4.2: RV).
    BadRdmapVersion(u8),
    /// An RDMAP opcode RFC 5040 does not define.
    UnknownOpcode(u8),
    /// The opcode needs the other DDP buffer model (tagged vs untagged, RFC 5040 §4.3).
    WrongBufferModel(u8),
    /// The untagged queue number does not match the opcode (RFC 5040 §5: Send = 0,
    /// Read Request = 1, Terminate = 2).
    BadQueueNumber(u32),
    /// A message that must be a single, last DDP segment is not (Read Request,
    /// Terminate: RFC 5040 §4.4, §4.8).
    NotLastSegment,
    /// A Read Request payload is not exactly 28 octets (RFC 5040 §4.4).
    BadReadRequestLength(usize),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => write!(f, "truncated iWARP header"),
            Error::BadMpaKey => write!(f, "MPA request/reply frame with a wrong key"),
            Error::BadMpaRevision(r) => write!(f, "MPA revision {r} is neither 1 nor 2"),
            Error::PrivateDataTooLong(n) => write!(f, "MPA private data length {n} > 512"),
            Error::MissingIrdOrd => write!(f, "MPA revision 2 frame without IRD/ORD word"),
            Error::BadCrc { computed, received } => {
                write!(f, "MPA CRC32c {received:#010x}, computed {computed:#010x}")
            }
            Error::BadMarker { position, fpduptr } => {
                write!(f, "MPA marker at {position} has wrong FPDUPTR {fpduptr}")
            }
            Error::UlpduTooShort(n) => write!(f, "ULPDU length {n} shorter than a DDP header"),
            Error::BadDdpVersion(v) => write!(f, "DDP version {v} is not 1"),
            Error::BadRdmapVersion(v) => write!(f, "RDMAP version {v} is not 1"),
            Error::UnknownOpcode(o) => write!(f, "unknown RDMAP opcode {o:#x}"),
            Error::WrongBufferModel(o) => {
                write!(f, "RDMAP opcode {o:#x} in the wrong DDP buffer model")
            }
            Error::BadQueueNumber(q) => write!(f, "DDP queue number {q} does not match opcode"),
            Error::NotLastSegment => write!(f, "single-segment RDMAP message without L bit"),
            Error::BadReadRequestLength(n) => write!(f, "Read Request payload of {n} octets"),
        }
    }
}

impl std::error::Error for Error {}

/// `Result` with this module's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

#[inline]
pub(crate) fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

#[inline]
pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[inline]
pub(crate) fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

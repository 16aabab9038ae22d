//! The InfiniBand transport as RoCE v2 carries it (IBA vol. 1 ch. 9, Annex A17).
//!
//! One file per header, in smoltcp's style (see the crate docs for the contract of every
//! view): [`bth`] (Base Transport Header), [`reth`] (RDMA Extended Transport Header),
//! [`aeth`] (ACK Extended Transport Header), [`atomic_eth`], [`atomic_ack_eth`],
//! [`feth`] (FLUSH, Memory Placement Extensions), [`immdt`] (Immediate Data), [`ieth`] (Invalidate), [`deth`] (Datagram), [`xrceth`]
//! (XRC), [`cnp`] (the RoCE v2 Congestion Notification Packet). [`opcode`] is the one
//! table that says which extension headers follow a BTH; [`packet`] is the whole IB
//! transport packet (BTH, extension headers, payload, pad, ICRC) as a view and a repr;
//! [`icrc`] computes and checks the invariant CRC.
//!
//! The newtypes used across the project for IB identifiers live here too: [`Qpn`],
//! [`Psn`], [`Rkey`], [`Lkey`], [`Qkey`], [`Pkey`], [`Msn`].

/// Declares the smoltcp-style view boilerplate for a fixed-length header: the `Packet<T>`
/// wrapper with `new_unchecked`, `new_checked`, `check_len` and `into_inner`.
macro_rules! header_view {
    ($name:literal) => {
        #[doc = concat!("A view of a ", $name, " at the start of a buffer.")]
        #[derive(Debug, Clone)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps a buffer without checking its length.
            pub const fn new_unchecked(buffer: T) -> Self {
                Packet { buffer }
            }
            /// Wraps a buffer, checking it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::roce::Result<Self> {
                let p = Self::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }
            /// Checks the buffer holds the whole header.
            pub fn check_len(&self) -> $crate::roce::Result<()> {
                if self.buffer.as_ref().len() < HEADER_LEN {
                    Err($crate::roce::Error::Truncated)
                } else {
                    Ok(())
                }
            }
            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod cnp;
pub mod deth;
pub mod feth;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod reth;
pub mod xrceth;

mod types;

#[cfg(test)]
mod tests;

pub use aeth::{AethRepr, CreditCode, NakCode, RnrTimer, Syndrome};
pub use atomic_ack_eth::AtomicAckEthRepr;
pub use atomic_eth::AtomicEthRepr;
pub use bth::BthRepr;
pub use cnp::CnpRepr;
pub use deth::DethRepr;
pub use feth::{FethRepr, PlacementType, Selectivity};
pub use icrc::IcrcCheck;
pub use ieth::IethRepr;
pub use immdt::ImmDt;
pub use opcode::{Layout, Op, Opcode, TransportType};
pub use packet::{
    Body, Header, Packet, PacketRepr, ReadRespSeg, Request, Response, SendSeg, UcRequest,
    UcSendSeg, WriteSeg,
};
pub use psn::Psn;
pub use reth::RethRepr;
pub use types::{Lkey, Msn, Pkey, Qkey, Qpn, Rkey};
pub use xrceth::XrcEthRepr;

/// The UDP destination port of RoCE v2 (IANA "roce", IBA Annex A17.2).
pub const ROCE_V2_UDP_PORT: u16 = 4791;

/// Length of the ICRC trailer in bytes.
pub const ICRC_LEN: usize = 4;

/// Why a buffer is not a valid IB transport packet.
///
/// Precise enough for the transport core to choose: every variant here means *drop
/// silently* (IBA 9.6: packets that fail the header checks are discarded without a NAK),
/// except where the variant's docs say the responder may NAK it as an Invalid Request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer ends before the BTH, an extension header the opcode implies, or the
    /// ICRC. Drop.
    Truncated,
    /// The packet length (BTH through ICRC) is not a multiple of 4 bytes (IBA 9.3: IB
    /// packets are 4-byte aligned). Drop.
    Unaligned,
    /// The BTH transport header version is not 0 (IBA 9.2.8). Drop.
    BadTransportVersion(u8),
    /// The opcode names no operation for its transport, or a reserved one. An RC/XRC
    /// responder may answer with a NAK Invalid Request (IBA 9.7.5.1.3); otherwise drop.
    InvalidOpcode(Opcode),
    /// The opcode belongs to a transport this implementation recognises but does not
    /// carry (RD, manufacturer-specific). Drop.
    UnsupportedTransport(TransportType),
    /// The pad count is larger than the payload, or non-zero on an opcode without payload.
    /// Drop.
    BadPadCount,
    /// Bytes follow the headers of an opcode that carries no payload (READ request,
    /// atomic, ACK, CNP). Drop.
    UnexpectedPayload,
    /// The AETH syndrome uses the reserved type `0b10` or sets the reserved top bit
    /// (IBA 9.3.5). Drop.
    ReservedSyndrome(u8),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => write!(f, "truncated IB transport packet"),
            Error::Unaligned => write!(f, "IB transport packet length not a multiple of 4"),
            Error::BadTransportVersion(v) => write!(f, "BTH transport version {v} is not 0"),
            Error::InvalidOpcode(op) => write!(f, "invalid opcode {:#04x}", op.0),
            Error::UnsupportedTransport(t) => write!(f, "unsupported transport {t:?}"),
            Error::BadPadCount => write!(f, "bad pad count"),
            Error::UnexpectedPayload => write!(f, "payload on an opcode that carries none"),
            Error::ReservedSyndrome(s) => write!(f, "reserved AETH syndrome {s:#04x}"),
        }
    }
}

impl std::error::Error for Error {}

/// `Result` with this module's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

/// Reads a big-endian 24-bit number from 3 bytes.
#[inline]
pub(crate) fn read_u24(b: &[u8]) -> u32 {
    (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2])
}

/// Writes the low 24 bits of `v` big-endian into 3 bytes.
#[inline]
pub(crate) fn write_u24(b: &mut [u8], v: u32) {
    b[0] = (v >> 16) as u8;
    b[1] = (v >> 8) as u8;
    b[2] = v as u8;
}

#[inline]
pub(crate) fn read_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[inline]
pub(crate) fn read_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

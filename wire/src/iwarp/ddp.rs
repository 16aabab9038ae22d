//! DDP segment headers (RFC 5041 §4).
//!
//! ```text
//!  0  |T|L| Rsvd (4) | DV (2) |   1  RsvdULP (8: the RDMAP control octet)
//!  tagged (T = 1):   2..6 STag, 6..14 Tagged Offset (64)               = 14 octets
//!  untagged (T = 0): 2..6 RsvdULP (32), 6..10 QN, 10..14 MSN, 14..18 MO = 18 octets
//! ```

use super::{be32, be64, Error, Result};

/// Length of a tagged buffer header.
pub const TAGGED_HEADER_LEN: usize = 14;
/// Length of an untagged buffer header.
pub const UNTAGGED_HEADER_LEN: usize = 18;
/// The DDP version this implementation speaks (RFC 5041 §4.1).
pub const DDP_VERSION: u8 = 1;
/// Length of RDMAP's Read Request header (RFC 5040 §4.4), the payload of an untagged
/// DDP segment. It is kept with DDP's header lengths because a TERMINATE (RFC 5040 §4.8)
/// copies the headers of both layers and `terminate.rs` sizes them all.
pub const READ_REQUEST_LEN: usize = 28;

mod field {
    pub const CONTROL: usize = 0;
    pub const ULP_CONTROL: usize = 1;
    pub const STAG: core::ops::Range<usize> = 2..6;
    pub const TO: core::ops::Range<usize> = 6..14;
    pub const RSVD_ULP: core::ops::Range<usize> = 2..6;
    pub const QN: core::ops::Range<usize> = 6..10;
    pub const MSN: core::ops::Range<usize> = 10..14;
    pub const MO: core::ops::Range<usize> = 14..18;

    pub const T: u8 = 0x80;
    pub const L: u8 = 0x40;
    pub const DV: u8 = 0x03;
}

/// A Steering Tag (RFC 5040 §2): names a tagged buffer at the data sink, the iWARP
/// counterpart of an R_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Stag(pub u32);

/// The buffer model of a segment and its addressing fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DdpBuffer {
    /// Tagged buffer model: data goes to `offset` in the buffer named by `stag`.
    Tagged {
        /// STag of the data sink buffer.
        stag: Stag,
        /// Tagged Offset.
        offset: u64,
    },
    /// Untagged buffer model: data goes to the `msn`th buffer of queue `qn`, at `mo`.
    Untagged {
        /// The 32 ULP-reserved bits (RDMAP: the STag to invalidate, or 0).
        rsvd_ulp: u32,
        /// Queue Number.
        qn: u32,
        /// Message Sequence Number (starts at 1 per queue).
        msn: u32,
        /// Message Offset.
        mo: u32,
    },
}

/// A parsed DDP segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DdpRepr {
    /// L: the last segment of a message.
    pub last: bool,
    /// The octet reserved for the upper layer (RDMAP: RV and opcode).
    pub ulp_control: u8,
    /// Buffer model and addressing.
    pub buffer: DdpBuffer,
}

impl DdpRepr {
    /// Parses the header at the start of `b`; returns it and the payload after it.
    pub fn parse(b: &[u8]) -> Result<(DdpRepr, &[u8])> {
        let control = *b.get(field::CONTROL).ok_or(Error::Truncated)?;
        let tagged = control & field::T != 0;
        let len = if tagged {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        if b.len() < len {
            return Err(Error::Truncated);
        }
        let dv = control & field::DV;
        if dv != DDP_VERSION {
            return Err(Error::BadDdpVersion(dv));
        }
        let buffer = if tagged {
            DdpBuffer::Tagged {
                stag: Stag(be32(&b[field::STAG])),
                offset: be64(&b[field::TO]),
            }
        } else {
            DdpBuffer::Untagged {
                rsvd_ulp: be32(&b[field::RSVD_ULP]),
                qn: be32(&b[field::QN]),
                msn: be32(&b[field::MSN]),
                mo: be32(&b[field::MO]),
            }
        };
        let repr = DdpRepr {
            last: control & field::L != 0,
            ulp_control: b[field::ULP_CONTROL],
            buffer,
        };
        Ok((repr, &b[len..]))
    }

    /// Whether the segment uses the tagged buffer model.
    pub fn is_tagged(&self) -> bool {
        matches!(self.buffer, DdpBuffer::Tagged { .. })
    }

    /// Length of the header.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }

    /// Writes the header into `buf[..self.header_len()]`.
    pub fn emit(&self, buf: &mut [u8]) {
        let mut control = DDP_VERSION;
        if self.last {
            control |= field::L;
        }
        if self.is_tagged() {
            control |= field::T;
        }
        buf[field::CONTROL] = control;
        buf[field::ULP_CONTROL] = self.ulp_control;
        match self.buffer {
            DdpBuffer::Tagged { stag, offset } => {
                buf[field::STAG].copy_from_slice(&stag.0.to_be_bytes());
                buf[field::TO].copy_from_slice(&offset.to_be_bytes());
            }
            DdpBuffer::Untagged {
                rsvd_ulp,
                qn,
                msn,
                mo,
            } => {
                buf[field::RSVD_ULP].copy_from_slice(&rsvd_ulp.to_be_bytes());
                buf[field::QN].copy_from_slice(&qn.to_be_bytes());
                buf[field::MSN].copy_from_slice(&msn.to_be_bytes());
                buf[field::MO].copy_from_slice(&mo.to_be_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_header_layout() {
        let r = DdpRepr {
            last: true,
            ulp_control: 0x40,
            buffer: DdpBuffer::Tagged {
                stag: Stag(0x11223344),
                offset: 0x0102030405060708,
            },
        };
        let mut b = [0u8; TAGGED_HEADER_LEN];
        r.emit(&mut b);
        assert_eq!(b[0], 0xc1);
        assert_eq!(&b[2..6], &[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(DdpRepr::parse(&b).unwrap(), (r, &[][..]));
    }

    #[test]
    fn untagged_header_truncated() {
        let mut b = [0u8; UNTAGGED_HEADER_LEN];
        b[0] = 0x41;
        assert_eq!(DdpRepr::parse(&b[..17]), Err(Error::Truncated));
        assert!(DdpRepr::parse(&b).is_ok());
    }

    #[test]
    fn wrong_ddp_version_is_rejected() {
        let b = [0x82u8; TAGGED_HEADER_LEN];
        assert_eq!(DdpRepr::parse(&b), Err(Error::BadDdpVersion(2)));
    }
}

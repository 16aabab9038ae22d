//! The RDMAP Terminate header (RFC 5040 §4.8) and its error codes (RFC 5040 §7,
//! RFC 5041 §7, RFC 5044 §8, RFC 6581 §9).
//!
//! ```text
//!  0  | Layer (4) | EType (4) |  1  Error Code  |  2..4  |M|D|R| Reserved (13) |
//!  if D: DDP Segment Length (16), then the terminated DDP header (14 or 18 octets,
//!        tagged or untagged by its own T bit)
//!  if R: the terminated RDMAP header (28 octets: a Read Request's)
//! ```

use super::ddp::{READ_REQUEST_LEN, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use super::{be16, Error, Result};

/// Length of the fixed Terminate control word.
pub const CONTROL_LEN: usize = 4;

const HDRCT_M: u8 = 0x80;
const HDRCT_D: u8 = 0x40;
const HDRCT_R: u8 = 0x20;

/// The layer that detected the error (RFC 5040 §4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TermLayer {
    /// 0: RDMAP.
    Rdmap,
    /// 1: DDP.
    Ddp,
    /// 2: the lower layer protocol (MPA / TCP).
    Llp,
    /// Any other 4-bit value.
    Unknown(u8),
}

impl TermLayer {
    /// From the 4-bit field.
    pub fn from_bits(v: u8) -> TermLayer {
        match v & 0x0f {
            0 => TermLayer::Rdmap,
            1 => TermLayer::Ddp,
            2 => TermLayer::Llp,
            v => TermLayer::Unknown(v),
        }
    }

    /// The 4-bit field.
    pub fn bits(self) -> u8 {
        match self {
            TermLayer::Rdmap => 0,
            TermLayer::Ddp => 1,
            TermLayer::Llp => 2,
            TermLayer::Unknown(v) => v & 0x0f,
        }
    }
}

macro_rules! term_errors {
    ($( $(#[$doc:meta])* $name:ident = ($layer:ident, $etype:expr, $code:expr, $text:expr), )*) => {
        /// A Terminate cause: layer, error type and error code, named where an RFC names
        /// them. Any other combination is [`TerminateError::Other`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum TerminateError {
            $( $(#[$doc])* $name, )*
            /// A combination no RFC names.
            Other {
                /// Layer.
                layer: TermLayer,
                /// Error type (4 bits).
                etype: u8,
                /// Error code.
                code: u8,
            },
        }

        impl TerminateError {
            /// The (layer, error type, error code) triple on the wire.
            pub fn fields(self) -> (TermLayer, u8, u8) {
                match self {
                    $( TerminateError::$name => (TermLayer::$layer, $etype, $code), )*
                    TerminateError::Other { layer, etype, code } => (layer, etype & 0x0f, code),
                }
            }

            /// Names the triple when an RFC does.
            pub fn from_fields(layer: TermLayer, etype: u8, code: u8) -> TerminateError {
                let etype = etype & 0x0f;
                $( if (TermLayer::$layer, $etype, $code) == (layer, etype, code) {
                    return TerminateError::$name;
                } )*
                TerminateError::Other { layer, etype, code }
            }

            /// A short description, as the RFCs word it.
            pub fn description(self) -> &'static str {
                match self {
                    $( TerminateError::$name => $text, )*
                    TerminateError::Other { .. } => "unnamed error",
                }
            }
        }
    };
}

term_errors! {
    /// RDMAP local catastrophic error.
    RdmapCatastrophic = (Rdmap, 0, 0x00, "RDMAP local catastrophic error"),
    /// RDMAP remote protection: invalid STag.
    RdmapInvalidStag = (Rdmap, 1, 0x00, "invalid STag"),
    /// RDMAP remote protection: base or bounds violation.
    RdmapBaseBounds = (Rdmap, 1, 0x01, "base or bounds violation"),
    /// RDMAP remote protection: access rights violation.
    RdmapAccessRights = (Rdmap, 1, 0x02, "access rights violation"),
    /// RDMAP remote protection: STag not associated with the RDMAP stream.
    RdmapStagNotAssociated = (Rdmap, 1, 0x03, "STag not associated with RDMAP stream"),
    /// RDMAP remote protection: tagged offset wrap.
    RdmapToWrap = (Rdmap, 1, 0x04, "TO wrap"),
    /// RDMAP remote protection: STag cannot be invalidated.
    RdmapProtectionCannotInvalidate = (Rdmap, 1, 0x09, "STag cannot be invalidated"),
    /// RDMAP remote protection: unspecified.
    RdmapProtectionUnspecified = (Rdmap, 1, 0xff, "unspecified protection error"),
    /// RDMAP remote operation: invalid RDMAP version.
    RdmapInvalidVersion = (Rdmap, 2, 0x05, "invalid RDMAP version"),
    /// RDMAP remote operation: unexpected opcode.
    RdmapUnexpectedOpcode = (Rdmap, 2, 0x06, "unexpected OpCode"),
    /// RDMAP remote operation: catastrophic error localized to the stream.
    RdmapCatastrophicStream = (Rdmap, 2, 0x07, "catastrophic error, localized to RDMAP stream"),
    /// RDMAP remote operation: catastrophic error, global.
    RdmapCatastrophicGlobal = (Rdmap, 2, 0x08, "catastrophic error, global"),
    /// RDMAP remote operation: STag cannot be invalidated.
    RdmapOperationCannotInvalidate = (Rdmap, 2, 0x09, "STag cannot be invalidated"),
    /// RDMAP remote operation: unspecified.
    RdmapOperationUnspecified = (Rdmap, 2, 0xff, "unspecified operation error"),
    /// DDP local catastrophic error.
    DdpCatastrophic = (Ddp, 0, 0x00, "DDP local catastrophic error"),
    /// DDP tagged buffer: invalid STag.
    DdpTaggedInvalidStag = (Ddp, 1, 0x00, "invalid STag"),
    /// DDP tagged buffer: base or bounds violation.
    DdpTaggedBaseBounds = (Ddp, 1, 0x01, "base or bounds violation"),
    /// DDP tagged buffer: STag not associated with the DDP stream.
    DdpTaggedStagNotAssociated = (Ddp, 1, 0x02, "STag not associated with DDP stream"),
    /// DDP tagged buffer: TO wrap.
    DdpTaggedToWrap = (Ddp, 1, 0x03, "TO wrap"),
    /// DDP tagged buffer: invalid DDP version.
    DdpTaggedInvalidVersion = (Ddp, 1, 0x04, "invalid DDP version"),
    /// DDP untagged buffer: invalid queue number.
    DdpUntaggedInvalidQn = (Ddp, 2, 0x01, "invalid QN"),
    /// DDP untagged buffer: invalid MSN, no buffer available.
    DdpUntaggedNoBuffer = (Ddp, 2, 0x02, "invalid MSN, no buffer available"),
    /// DDP untagged buffer: invalid MSN, MSN range.
    DdpUntaggedMsnRange = (Ddp, 2, 0x03, "invalid MSN, MSN range"),
    /// DDP untagged buffer: invalid message offset.
    DdpUntaggedInvalidMo = (Ddp, 2, 0x04, "invalid MO"),
    /// DDP untagged buffer: message too long for the receive buffer.
    DdpUntaggedTooLong = (Ddp, 2, 0x05, "DDP message too long for available buffer"),
    /// DDP untagged buffer: invalid DDP version.
    DdpUntaggedInvalidVersion = (Ddp, 2, 0x06, "invalid DDP version"),
    /// MPA: TCP connection closed, terminated or lost.
    MpaTcpLost = (Llp, 0, 0x01, "TCP connection closed, terminated or lost"),
    /// MPA: CRC error.
    MpaCrc = (Llp, 0, 0x02, "MPA CRC error"),
    /// MPA: marker and ULPDU length field mismatch.
    MpaMarker = (Llp, 0, 0x03, "MPA marker and ULPDU length mismatch"),
    /// MPA: invalid MPA Request or Reply frame.
    MpaInvalidRequestReply = (Llp, 0, 0x04, "invalid MPA request/reply"),
    /// RFC 6581: local catastrophic.
    MpaLocalCatastrophic = (Llp, 0, 0x05, "local catastrophic"),
    /// RFC 6581: insufficient IRD resources.
    MpaInsufficientIrd = (Llp, 0, 0x06, "insufficient IRD resources"),
    /// RFC 6581: no matching RTR option.
    MpaNoMatchingRtr = (Llp, 0, 0x07, "no matching RTR option"),
}

/// A parsed Terminate header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminateRepr<'a> {
    /// Layer, error type and code.
    pub error: TerminateError,
    /// M: the DDP Segment Length field is valid.
    pub segment_length_valid: bool,
    /// D: the DDP Segment Length and the terminated DDP header, if included.
    pub ddp: Option<(u16, &'a [u8])>,
    /// R: the terminated RDMAP header (28 octets), if included.
    pub rdmap_header: Option<&'a [u8]>,
}

impl<'a> TerminateRepr<'a> {
    /// Parses a Terminate header from the payload of an untagged Terminate segment.
    pub fn parse(b: &'a [u8]) -> Result<TerminateRepr<'a>> {
        if b.len() < CONTROL_LEN {
            return Err(Error::Truncated);
        }
        let layer = TermLayer::from_bits(b[0] >> 4);
        let error = TerminateError::from_fields(layer, b[0] & 0x0f, b[1]);
        let hdrct = b[2];
        let mut at = CONTROL_LEN;
        let ddp = if hdrct & HDRCT_D != 0 {
            let seg_len = be16(b.get(at..at + 2).ok_or(Error::Truncated)?);
            let t = *b.get(at + 2).ok_or(Error::Truncated)?;
            let hlen = if t & 0x80 != 0 {
                TAGGED_HEADER_LEN
            } else {
                UNTAGGED_HEADER_LEN
            };
            let h = b.get(at + 2..at + 2 + hlen).ok_or(Error::Truncated)?;
            at += 2 + hlen;
            Some((seg_len, h))
        } else {
            None
        };
        let rdmap_header = if hdrct & HDRCT_R != 0 {
            let h = b.get(at..at + READ_REQUEST_LEN).ok_or(Error::Truncated)?;
            Some(h)
        } else {
            None
        };
        Ok(TerminateRepr {
            error,
            segment_length_valid: hdrct & HDRCT_M != 0,
            ddp,
            rdmap_header,
        })
    }

    /// Length of the emitted header.
    pub fn buffer_len(&self) -> usize {
        CONTROL_LEN
            + self.ddp.map_or(0, |(_, h)| 2 + h.len())
            + self.rdmap_header.map_or(0, <[u8]>::len)
    }

    /// Writes the header into `buf[..self.buffer_len()]`.
    pub fn emit(&self, buf: &mut [u8]) {
        let (layer, etype, code) = self.error.fields();
        buf[0] = (layer.bits() << 4) | (etype & 0x0f);
        buf[1] = code;
        let mut hdrct = 0;
        if self.segment_length_valid {
            hdrct |= HDRCT_M;
        }
        if self.ddp.is_some() {
            hdrct |= HDRCT_D;
        }
        if self.rdmap_header.is_some() {
            hdrct |= HDRCT_R;
        }
        buf[2] = hdrct;
        buf[3] = 0;
        let mut at = CONTROL_LEN;
        if let Some((seg_len, h)) = self.ddp {
            buf[at..at + 2].copy_from_slice(&seg_len.to_be_bytes());
            buf[at + 2..at + 2 + h.len()].copy_from_slice(h);
            at += 2 + h.len();
        }
        if let Some(h) = self.rdmap_header {
            buf[at..at + h.len()].copy_from_slice(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_codes_round_trip_through_fields() {
        for e in [
            TerminateError::RdmapInvalidStag,
            TerminateError::DdpUntaggedNoBuffer,
            TerminateError::MpaCrc,
            TerminateError::MpaNoMatchingRtr,
        ] {
            let (l, t, c) = e.fields();
            assert_eq!(TerminateError::from_fields(l, t, c), e);
        }
        assert_eq!(
            TerminateError::from_fields(TermLayer::Ddp, 2, 0x01),
            TerminateError::DdpUntaggedInvalidQn
        );
        assert!(matches!(
            TerminateError::from_fields(TermLayer::Unknown(9), 1, 2),
            TerminateError::Other { .. }
        ));
    }

    #[test]
    fn terminate_with_ddp_header_layout() {
        let ddp = [0x41u8; UNTAGGED_HEADER_LEN];
        let t = TerminateRepr {
            error: TerminateError::DdpUntaggedTooLong,
            segment_length_valid: true,
            ddp: Some((100, &ddp)),
            rdmap_header: None,
        };
        let mut b = vec![0u8; t.buffer_len()];
        t.emit(&mut b);
        assert_eq!(&b[..4], &[0x12, 0x05, 0xc0, 0]);
        assert_eq!(TerminateRepr::parse(&b).unwrap(), t);
    }

    #[test]
    fn terminate_claiming_a_missing_header_is_truncated() {
        assert_eq!(
            TerminateRepr::parse(&[0x00, 0x00, 0x20, 0x00]),
            Err(Error::Truncated)
        );
    }
}

//! RDMAP messages (RFC 5040 §4) carried in DDP segments.
//!
//! The RDMAP control octet is DDP's RsvdULP octet: `| RV (2) | Rsvd (2) | Opcode (4) |`
//! with RV = 1. Write and Read Response use the tagged model; Send (queue 0), Read
//! Request (queue 1) and Terminate (queue 2) the untagged one (RFC 5040 §5.1).

use super::ddp::{DdpBuffer, DdpRepr, Stag};
use super::terminate::TerminateRepr;

/// Length of a Read Request header (RFC 5040 §4.4); defined beside DDP's header lengths.
pub use super::ddp::READ_REQUEST_LEN;
use super::{be32, be64, Error, Result};

/// The RDMAP version (RFC 5040 §4.2).
pub const RDMAP_VERSION: u8 = 1;
/// Untagged queue of Send messages.
pub const QN_SEND: u32 = 0;
/// Untagged queue of Read Requests.
pub const QN_READ_REQUEST: u32 = 1;
/// Untagged queue of Terminate messages.
pub const QN_TERMINATE: u32 = 2;

/// An RDMAP opcode (RFC 5040 §4.2), open for codes RFC 5040 does not define.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmapOpcode {
    /// 0000b RDMA Write.
    Write,
    /// 0001b RDMA Read Request.
    ReadRequest,
    /// 0010b RDMA Read Response.
    ReadResponse,
    /// 0011b Send.
    Send,
    /// 0100b Send with Invalidate.
    SendInvalidate,
    /// 0101b Send with Solicited Event.
    SendSe,
    /// 0110b Send with Solicited Event and Invalidate.
    SendSeInvalidate,
    /// 0111b Terminate.
    Terminate,
    /// Any other 4-bit value (RFC 7306 atomics among them).
    Unknown(u8),
}

impl RdmapOpcode {
    /// From the 4-bit field.
    pub fn from_bits(v: u8) -> RdmapOpcode {
        match v & 0x0f {
            0 => RdmapOpcode::Write,
            1 => RdmapOpcode::ReadRequest,
            2 => RdmapOpcode::ReadResponse,
            3 => RdmapOpcode::Send,
            4 => RdmapOpcode::SendInvalidate,
            5 => RdmapOpcode::SendSe,
            6 => RdmapOpcode::SendSeInvalidate,
            7 => RdmapOpcode::Terminate,
            v => RdmapOpcode::Unknown(v),
        }
    }

    /// The 4-bit field.
    pub fn bits(self) -> u8 {
        match self {
            RdmapOpcode::Write => 0,
            RdmapOpcode::ReadRequest => 1,
            RdmapOpcode::ReadResponse => 2,
            RdmapOpcode::Send => 3,
            RdmapOpcode::SendInvalidate => 4,
            RdmapOpcode::SendSe => 5,
            RdmapOpcode::SendSeInvalidate => 6,
            RdmapOpcode::Terminate => 7,
            RdmapOpcode::Unknown(v) => v & 0x0f,
        }
    }

    /// The name Wireshark and RFC 5040 use.
    pub fn name(self) -> &'static str {
        match self {
            RdmapOpcode::Write => "RDMA Write",
            RdmapOpcode::ReadRequest => "RDMA Read Request",
            RdmapOpcode::ReadResponse => "RDMA Read Response",
            RdmapOpcode::Send => "Send",
            RdmapOpcode::SendInvalidate => "Send with Invalidate",
            RdmapOpcode::SendSe => "Send with Solicited Event",
            RdmapOpcode::SendSeInvalidate => "Send with Solicited Event and Invalidate",
            RdmapOpcode::Terminate => "Terminate",
            RdmapOpcode::Unknown(_) => "Unknown",
        }
    }
}

/// The Read Request header (RFC 5040 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReadRequest {
    /// Data Sink STag (where the Read Response goes).
    pub sink_stag: Stag,
    /// Data Sink Tagged Offset.
    pub sink_offset: u64,
    /// RDMA Read Message Size.
    pub size: u32,
    /// Data Source STag.
    pub src_stag: Stag,
    /// Data Source Tagged Offset.
    pub src_offset: u64,
}

impl ReadRequest {
    fn parse(b: &[u8]) -> Result<ReadRequest> {
        if b.len() != READ_REQUEST_LEN {
            return Err(Error::BadReadRequestLength(b.len()));
        }
        Ok(ReadRequest {
            sink_stag: Stag(be32(&b[0..4])),
            sink_offset: be64(&b[4..12]),
            size: be32(&b[12..16]),
            src_stag: Stag(be32(&b[16..20])),
            src_offset: be64(&b[20..28]),
        })
    }

    fn emit(&self, b: &mut [u8]) {
        b[0..4].copy_from_slice(&self.sink_stag.0.to_be_bytes());
        b[4..12].copy_from_slice(&self.sink_offset.to_be_bytes());
        b[12..16].copy_from_slice(&self.size.to_be_bytes());
        b[16..20].copy_from_slice(&self.src_stag.0.to_be_bytes());
        b[20..28].copy_from_slice(&self.src_offset.to_be_bytes());
    }
}

/// One DDP segment of an RDMAP message: the opcode is derived from the variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmapMessage<'a> {
    /// RDMA Write segment (tagged).
    Write {
        /// Last segment of the message.
        last: bool,
        /// Data sink STag.
        stag: Stag,
        /// Data sink tagged offset of this segment.
        offset: u64,
        /// Data.
        payload: &'a [u8],
    },
    /// RDMA Read Request (untagged, queue 1, single segment).
    ReadRequest {
        /// MSN on queue 1.
        msn: u32,
        /// The request.
        request: ReadRequest,
    },
    /// RDMA Read Response segment (tagged).
    ReadResponse {
        /// Last segment of the message.
        last: bool,
        /// Data sink STag.
        stag: Stag,
        /// Data sink tagged offset of this segment.
        offset: u64,
        /// Data.
        payload: &'a [u8],
    },
    /// Send segment (untagged, queue 0), in its four flavours.
    Send {
        /// Last segment of the message.
        last: bool,
        /// With Solicited Event.
        solicited: bool,
        /// With Invalidate: the STag to invalidate.
        invalidate: Option<Stag>,
        /// MSN on queue 0.
        msn: u32,
        /// Message offset of this segment.
        mo: u32,
        /// Data.
        payload: &'a [u8],
    },
    /// Terminate (untagged, queue 2, single segment).
    Terminate {
        /// MSN on queue 2.
        msn: u32,
        /// The Terminate header.
        terminate: TerminateRepr<'a>,
    },
}

impl<'a> RdmapMessage<'a> {
    /// The opcode this message is sent with.
    pub fn opcode(&self) -> RdmapOpcode {
        match *self {
            RdmapMessage::Write { .. } => RdmapOpcode::Write,
            RdmapMessage::ReadRequest { .. } => RdmapOpcode::ReadRequest,
            RdmapMessage::ReadResponse { .. } => RdmapOpcode::ReadResponse,
            RdmapMessage::Send {
                solicited,
                invalidate,
                ..
            } => match (solicited, invalidate.is_some()) {
                (false, false) => RdmapOpcode::Send,
                (false, true) => RdmapOpcode::SendInvalidate,
                (true, false) => RdmapOpcode::SendSe,
                (true, true) => RdmapOpcode::SendSeInvalidate,
            },
            RdmapMessage::Terminate { .. } => RdmapOpcode::Terminate,
        }
    }

    /// Parses a ULPDU (DDP header + RDMAP header + payload).
    pub fn parse(ulpdu: &'a [u8]) -> Result<RdmapMessage<'a>> {
        let (ddp, rest) = DdpRepr::parse(ulpdu)?;
        let rv = ddp.ulp_control >> 6;
        if rv != RDMAP_VERSION {
            return Err(Error::BadRdmapVersion(rv));
        }
        let op = RdmapOpcode::from_bits(ddp.ulp_control);
        let raw_op = ddp.ulp_control & 0x0f;
        match (op, ddp.buffer) {
            (RdmapOpcode::Unknown(v), _) => Err(Error::UnknownOpcode(v)),
            (RdmapOpcode::Write, DdpBuffer::Tagged { stag, offset }) => Ok(RdmapMessage::Write {
                last: ddp.last,
                stag,
                offset,
                payload: rest,
            }),
            (RdmapOpcode::ReadResponse, DdpBuffer::Tagged { stag, offset }) => {
                Ok(RdmapMessage::ReadResponse {
                    last: ddp.last,
                    stag,
                    offset,
                    payload: rest,
                })
            }
            (RdmapOpcode::Write | RdmapOpcode::ReadResponse, DdpBuffer::Untagged { .. }) => {
                Err(Error::WrongBufferModel(raw_op))
            }
            (_, DdpBuffer::Tagged { .. }) => Err(Error::WrongBufferModel(raw_op)),
            (RdmapOpcode::ReadRequest, DdpBuffer::Untagged { qn, msn, .. }) => {
                if qn != QN_READ_REQUEST {
                    return Err(Error::BadQueueNumber(qn));
                }
                if !ddp.last {
                    return Err(Error::NotLastSegment);
                }
                Ok(RdmapMessage::ReadRequest {
                    msn,
                    request: ReadRequest::parse(rest)?,
                })
            }
            (RdmapOpcode::Terminate, DdpBuffer::Untagged { qn, msn, .. }) => {
                if qn != QN_TERMINATE {
                    return Err(Error::BadQueueNumber(qn));
                }
                if !ddp.last {
                    return Err(Error::NotLastSegment);
                }
                Ok(RdmapMessage::Terminate {
                    msn,
                    terminate: TerminateRepr::parse(rest)?,
                })
            }
            (
                _,
                DdpBuffer::Untagged {
                    rsvd_ulp,
                    qn,
                    msn,
                    mo,
                },
            ) => {
                if qn != QN_SEND {
                    return Err(Error::BadQueueNumber(qn));
                }
                let invalidate = matches!(
                    op,
                    RdmapOpcode::SendInvalidate | RdmapOpcode::SendSeInvalidate
                )
                .then_some(Stag(rsvd_ulp));
                Ok(RdmapMessage::Send {
                    last: ddp.last,
                    solicited: matches!(op, RdmapOpcode::SendSe | RdmapOpcode::SendSeInvalidate),
                    invalidate,
                    msn,
                    mo,
                    payload: rest,
                })
            }
        }
    }

    /// The DDP header this message is sent with.
    pub fn ddp(&self) -> DdpRepr {
        let ulp_control = (RDMAP_VERSION << 6) | self.opcode().bits();
        let (last, buffer) = match *self {
            RdmapMessage::Write {
                last, stag, offset, ..
            }
            | RdmapMessage::ReadResponse {
                last, stag, offset, ..
            } => (last, DdpBuffer::Tagged { stag, offset }),
            RdmapMessage::ReadRequest { msn, .. } => (
                true,
                DdpBuffer::Untagged {
                    rsvd_ulp: 0,
                    qn: QN_READ_REQUEST,
                    msn,
                    mo: 0,
                },
            ),
            RdmapMessage::Send {
                last,
                invalidate,
                msn,
                mo,
                ..
            } => (
                last,
                DdpBuffer::Untagged {
                    rsvd_ulp: invalidate.map_or(0, |s| s.0),
                    qn: QN_SEND,
                    msn,
                    mo,
                },
            ),
            RdmapMessage::Terminate { msn, .. } => (
                true,
                DdpBuffer::Untagged {
                    rsvd_ulp: 0,
                    qn: QN_TERMINATE,
                    msn,
                    mo: 0,
                },
            ),
        };
        DdpRepr {
            last,
            ulp_control,
            buffer,
        }
    }

    /// Length of the emitted ULPDU.
    pub fn buffer_len(&self) -> usize {
        let body = match self {
            RdmapMessage::Write { payload, .. }
            | RdmapMessage::ReadResponse { payload, .. }
            | RdmapMessage::Send { payload, .. } => payload.len(),
            RdmapMessage::ReadRequest { .. } => READ_REQUEST_LEN,
            RdmapMessage::Terminate { terminate, .. } => terminate.buffer_len(),
        };
        self.ddp().header_len() + body
    }

    /// Writes the ULPDU into `buf[..self.buffer_len()]`.
    pub fn emit(&self, buf: &mut [u8]) {
        let ddp = self.ddp();
        ddp.emit(buf);
        let at = ddp.header_len();
        match self {
            RdmapMessage::Write { payload, .. }
            | RdmapMessage::ReadResponse { payload, .. }
            | RdmapMessage::Send { payload, .. } => {
                buf[at..at + payload.len()].copy_from_slice(payload)
            }
            RdmapMessage::ReadRequest { request, .. } => request.emit(&mut buf[at..]),
            RdmapMessage::Terminate { terminate, .. } => terminate.emit(&mut buf[at..]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(m: RdmapMessage<'_>) -> Vec<u8> {
        let mut b = vec![0u8; m.buffer_len()];
        m.emit(&mut b);
        assert_eq!(RdmapMessage::parse(&b).unwrap(), m);
        b
    }

    #[test]
    fn send_with_se_and_invalidate_derives_opcode_6() {
        let b = round_trip(RdmapMessage::Send {
            last: true,
            solicited: true,
            invalidate: Some(Stag(0xabcd)),
            msn: 1,
            mo: 0,
            payload: b"hello",
        });
        assert_eq!(b[0], 0x41);
        assert_eq!(b[1], 0x46);
        assert_eq!(&b[2..6], &[0, 0, 0xab, 0xcd]);
    }

    #[test]
    fn read_request_is_untagged_queue_1() {
        let b = round_trip(RdmapMessage::ReadRequest {
            msn: 7,
            request: ReadRequest {
                sink_stag: Stag(1),
                sink_offset: 2,
                size: 3,
                src_stag: Stag(4),
                src_offset: 5,
            },
        });
        assert_eq!(b.len(), 18 + 28);
        assert_eq!(&b[6..10], &[0, 0, 0, 1]);
    }

    #[test]
    fn unknown_opcode_is_rejected() {
        let mut b = round_trip(RdmapMessage::Write {
            last: true,
            stag: Stag(1),
            offset: 0,
            payload: b"",
        });
        b[1] = 0x4c;
        assert_eq!(RdmapMessage::parse(&b), Err(Error::UnknownOpcode(0xc)));
    }

    #[test]
    fn write_in_untagged_model_is_rejected() {
        let mut b = [0u8; 18];
        b[0] = 0x41;
        b[1] = 0x40;
        assert_eq!(RdmapMessage::parse(&b), Err(Error::WrongBufferModel(0)));
    }

    #[test]
    fn wrong_rdmap_version_is_rejected() {
        let mut b = [0u8; 18];
        b[0] = 0x41;
        b[1] = 0x83;
        assert_eq!(RdmapMessage::parse(&b), Err(Error::BadRdmapVersion(2)));
    }

    #[test]
    fn send_on_wrong_queue_is_rejected() {
        let mut b = [0u8; 18];
        b[0] = 0x41;
        b[1] = 0x43;
        b[9] = 5;
        assert_eq!(RdmapMessage::parse(&b), Err(Error::BadQueueNumber(5)));
    }

    #[test]
    fn short_read_request_is_rejected() {
        let mut b = [0u8; 18 + 20];
        b[0] = 0x41;
        b[1] = 0x41;
        b[9] = 1;
        assert_eq!(
            RdmapMessage::parse(&b),
            Err(Error::BadReadRequestLength(20))
        );
    }
}

//! Extension messages beyond RFC 5040, used only when both ends are rdma-emu (the MPA
//! Request and Reply both carry [`EXT_FLAG`]).
//!
//! - RFC 7306 §4, §5: Atomic Request (opcode 1010b, untagged queue 1, shares the
//!   IRD/ORD credits of RDMA Read) and Atomic Response (1011b, untagged queue 3), laid
//!   out as RFC 7306 and Wireshark's iwarp_ddp_rdmap dissector read them.
//! - RFC 7306 §6: Immediate Data (1000b) and Immediate Data with SE (1001b), untagged
//!   queue 0, 8 octets of immediate data (the 4 octets of `ibv_send_wr.imm_data`, then 4
//!   zero octets). Sent after the RDMA Write of `IBV_WR_RDMA_WRITE_WITH_IMM`; it
//!   consumes a receive WR.
//! - rdma-emu private (no RFC names it): Send with Immediate (1100b) and Send with SE
//!   and Immediate (1101b), a Send whose 32 ULP-reserved bits carry the immediate data.

use wire::iwarp::ddp::{DdpBuffer, DdpRepr, UNTAGGED_HEADER_LEN};
use wire::iwarp::rdmap::RDMAP_VERSION;

/// The reserved MPA Request/Reply flag bit rdma-emu sets to offer the extensions
/// (0x10 is siw's and Chelsio's "enhanced" bit, 0x08 siw's GSO bit; 0x01 is unused).
pub const EXT_FLAG: u8 = 0x01;

/// Immediate Data (RFC 7306).
pub const OP_IMMEDIATE: u8 = 0x8;
/// Immediate Data with Solicited Event (RFC 7306).
pub const OP_IMMEDIATE_SE: u8 = 0x9;
/// Atomic Request (RFC 7306).
pub const OP_ATOMIC_REQUEST: u8 = 0xa;
/// Atomic Response (RFC 7306).
pub const OP_ATOMIC_RESPONSE: u8 = 0xb;
/// Send with Immediate (rdma-emu private).
pub const OP_SEND_IMM: u8 = 0xc;
/// Send with SE and Immediate (rdma-emu private).
pub const OP_SEND_SE_IMM: u8 = 0xd;

/// Untagged queue of Atomic Responses (RFC 7306).
pub const QN_ATOMIC_RESPONSE: u32 = 3;

/// Length of the Atomic Request header.
pub const ATOMIC_REQUEST_LEN: usize = 52;
/// Length of the Atomic Response header.
pub const ATOMIC_RESPONSE_LEN: usize = 12;
/// Length of the Immediate Data payload.
pub const IMMEDIATE_LEN: usize = 8;

/// The atomic operation (RFC 7306 §5.1: Atomic Operation Code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// 0: FetchAdd.
    FetchAdd,
    /// 2: CmpSwap.
    CmpSwap,
}

/// An extension message (one DDP segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtMessage<'a> {
    /// Immediate Data.
    Immediate {
        /// With Solicited Event.
        solicited: bool,
        /// MSN on queue 0.
        msn: u32,
        /// `imm_data` as the WR holds it (little-endian bytes = wire bytes).
        imm: u32,
    },
    /// Send with Immediate (private).
    SendImm {
        /// Last segment.
        last: bool,
        /// With Solicited Event.
        solicited: bool,
        /// MSN on queue 0.
        msn: u32,
        /// Message offset.
        mo: u32,
        /// `imm_data`.
        imm: u32,
        /// Data.
        payload: &'a [u8],
    },
    /// Atomic Request.
    AtomicRequest {
        /// MSN on queue 1.
        msn: u32,
        /// Operation.
        op: AtomicOp,
        /// Request identifier (echoed in the response).
        req_id: u32,
        /// Remote STag.
        stag: u32,
        /// Remote tagged offset (8-octet aligned).
        to: u64,
        /// Add data or swap data.
        data: u64,
        /// Compare data (CmpSwap).
        compare: u64,
    },
    /// Atomic Response.
    AtomicResponse {
        /// MSN on queue 3.
        msn: u32,
        /// The request's identifier.
        req_id: u32,
        /// The value before the operation.
        original: u64,
    },
}

/// Why an extension segment is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtError {
    /// Not an extension opcode.
    NotExt,
    /// Tagged, wrong queue, not last where it must be, or wrong length.
    Malformed,
    /// The untagged queue number does not match the opcode.
    BadQueue,
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

impl<'a> ExtMessage<'a> {
    /// Parses a ULPDU whose RDMAP opcode is an extension opcode.
    pub fn parse(ulpdu: &'a [u8]) -> Result<ExtMessage<'a>, ExtError> {
        let (ddp, rest) = DdpRepr::parse(ulpdu).map_err(|_| ExtError::Malformed)?;
        let op = ddp.ulp_control & 0x0f;
        if !matches!(op, 0x8..=0xd) {
            return Err(ExtError::NotExt);
        }
        let DdpBuffer::Untagged {
            rsvd_ulp,
            qn,
            msn,
            mo,
        } = ddp.buffer
        else {
            return Err(ExtError::Malformed);
        };
        let want_qn = match op {
            OP_ATOMIC_REQUEST => 1,
            OP_ATOMIC_RESPONSE => QN_ATOMIC_RESPONSE,
            _ => 0,
        };
        if qn != want_qn {
            return Err(ExtError::BadQueue);
        }
        match op {
            OP_IMMEDIATE | OP_IMMEDIATE_SE => {
                if !ddp.last || rest.len() != IMMEDIATE_LEN {
                    return Err(ExtError::Malformed);
                }
                Ok(ExtMessage::Immediate {
                    solicited: op == OP_IMMEDIATE_SE,
                    msn,
                    imm: u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]),
                })
            }
            OP_SEND_IMM | OP_SEND_SE_IMM => Ok(ExtMessage::SendImm {
                last: ddp.last,
                solicited: op == OP_SEND_SE_IMM,
                msn,
                mo,
                imm: u32::from_le_bytes(rsvd_ulp.to_be_bytes()),
                payload: rest,
            }),
            OP_ATOMIC_REQUEST => {
                if !ddp.last || rest.len() != ATOMIC_REQUEST_LEN {
                    return Err(ExtError::Malformed);
                }
                let op = match be32(&rest[0..4]) & 0xf {
                    0 => AtomicOp::FetchAdd,
                    2 => AtomicOp::CmpSwap,
                    _ => return Err(ExtError::Malformed),
                };
                Ok(ExtMessage::AtomicRequest {
                    msn,
                    op,
                    req_id: be32(&rest[4..8]),
                    stag: be32(&rest[8..12]),
                    to: be64(&rest[12..20]),
                    data: be64(&rest[20..28]),
                    compare: be64(&rest[36..44]),
                })
            }
            _ => {
                if !ddp.last || rest.len() != ATOMIC_RESPONSE_LEN {
                    return Err(ExtError::Malformed);
                }
                Ok(ExtMessage::AtomicResponse {
                    msn,
                    req_id: be32(&rest[0..4]),
                    original: be64(&rest[4..12]),
                })
            }
        }
    }

    fn opcode(&self) -> u8 {
        match *self {
            ExtMessage::Immediate { solicited, .. } => {
                if solicited {
                    OP_IMMEDIATE_SE
                } else {
                    OP_IMMEDIATE
                }
            }
            ExtMessage::SendImm { solicited, .. } => {
                if solicited {
                    OP_SEND_SE_IMM
                } else {
                    OP_SEND_IMM
                }
            }
            ExtMessage::AtomicRequest { .. } => OP_ATOMIC_REQUEST,
            ExtMessage::AtomicResponse { .. } => OP_ATOMIC_RESPONSE,
        }
    }

    /// Appends the ULPDU to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let (last, rsvd_ulp, qn, msn, mo) = match *self {
            ExtMessage::Immediate { msn, .. } => (true, 0, 0, msn, 0),
            ExtMessage::SendImm {
                last, msn, mo, imm, ..
            } => (last, u32::from_be_bytes(imm.to_le_bytes()), 0, msn, mo),
            ExtMessage::AtomicRequest { msn, .. } => (true, 0, 1, msn, 0),
            ExtMessage::AtomicResponse { msn, .. } => (true, 0, QN_ATOMIC_RESPONSE, msn, 0),
        };
        let ddp = DdpRepr {
            last,
            ulp_control: (RDMAP_VERSION << 6) | self.opcode(),
            buffer: DdpBuffer::Untagged {
                rsvd_ulp,
                qn,
                msn,
                mo,
            },
        };
        let at = out.len();
        out.resize(at + UNTAGGED_HEADER_LEN, 0);
        ddp.emit(&mut out[at..]);
        match *self {
            ExtMessage::Immediate { imm, .. } => {
                out.extend_from_slice(&imm.to_le_bytes());
                out.extend_from_slice(&[0; 4]);
            }
            ExtMessage::SendImm { payload, .. } => out.extend_from_slice(payload),
            ExtMessage::AtomicRequest {
                op,
                req_id,
                stag,
                to,
                data,
                compare,
                ..
            } => {
                let code: u32 = match op {
                    AtomicOp::FetchAdd => 0,
                    AtomicOp::CmpSwap => 2,
                };
                out.extend_from_slice(&code.to_be_bytes());
                out.extend_from_slice(&req_id.to_be_bytes());
                out.extend_from_slice(&stag.to_be_bytes());
                out.extend_from_slice(&to.to_be_bytes());
                out.extend_from_slice(&data.to_be_bytes());
                out.extend_from_slice(&u64::MAX.to_be_bytes());
                out.extend_from_slice(&compare.to_be_bytes());
                out.extend_from_slice(&u64::MAX.to_be_bytes());
            }
            ExtMessage::AtomicResponse {
                req_id, original, ..
            } => {
                out.extend_from_slice(&req_id.to_be_bytes());
                out.extend_from_slice(&original.to_be_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_messages_round_trip() {
        let msgs = [
            ExtMessage::Immediate {
                solicited: true,
                msn: 3,
                imm: 0x1234_5678,
            },
            ExtMessage::SendImm {
                last: true,
                solicited: false,
                msn: 9,
                mo: 0,
                imm: 0xdead_beef,
                payload: b"abc",
            },
            ExtMessage::AtomicRequest {
                msn: 2,
                op: AtomicOp::CmpSwap,
                req_id: 7,
                stag: 0x100,
                to: 0x1000,
                data: 5,
                compare: 6,
            },
            ExtMessage::AtomicResponse {
                msn: 1,
                req_id: 7,
                original: 99,
            },
        ];
        for m in msgs {
            let mut b = Vec::new();
            m.emit(&mut b);
            assert_eq!(ExtMessage::parse(&b), Ok(m));
        }
    }
}

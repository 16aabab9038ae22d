//! The BTH opcode (IBA 9.2.1, Table 35) and the one table that says which extension
//! headers follow the BTH for each opcode.

/// A BTH opcode byte: bits 7..5 name the transport, bits 4..0 the operation.
///
/// Every byte is representable; [`Opcode::layout`] says whether it names a valid packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode(pub u8);

/// The transport service an opcode belongs to (bits 7..5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportType {
    /// Reliable Connection (`000`).
    Rc,
    /// Unreliable Connection (`001`).
    Uc,
    /// Reliable Datagram (`010`): recognised, not carried.
    Rd,
    /// Unreliable Datagram (`011`).
    Ud,
    /// `100`: in RoCE v2 the Congestion Notification Packet (Annex A17.9.3), opcode 0x81.
    Cnp,
    /// Extended Reliable Connection (`101`).
    Xrc,
    /// `110`, `111`: manufacturer specific (the 3-bit value).
    Unknown(u8),
}

impl TransportType {
    /// The 3-bit transport code.
    pub const fn bits(self) -> u8 {
        match self {
            TransportType::Rc => 0,
            TransportType::Uc => 1,
            TransportType::Rd => 2,
            TransportType::Ud => 3,
            TransportType::Cnp => 4,
            TransportType::Xrc => 5,
            TransportType::Unknown(b) => b & 7,
        }
    }

    /// The transport of a 3-bit code.
    pub const fn from_bits(b: u8) -> Self {
        match b & 7 {
            0 => TransportType::Rc,
            1 => TransportType::Uc,
            2 => TransportType::Rd,
            3 => TransportType::Ud,
            4 => TransportType::Cnp,
            5 => TransportType::Xrc,
            b => TransportType::Unknown(b),
        }
    }
}

/// The operation an opcode names (bits 4..0), common to all transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Op {
    SendFirst,
    SendMiddle,
    SendLast,
    SendLastImm,
    SendOnly,
    SendOnlyImm,
    WriteFirst,
    WriteMiddle,
    WriteLast,
    WriteLastImm,
    WriteOnly,
    WriteOnlyImm,
    ReadRequest,
    ReadResponseFirst,
    ReadResponseMiddle,
    ReadResponseLast,
    ReadResponseOnly,
    Acknowledge,
    AtomicAcknowledge,
    CompareSwap,
    FetchAdd,
    SendLastInv,
    SendOnlyInv,
    /// FLUSH (Memory Placement Extensions): FETH and RETH, no payload.
    Flush,
    /// ATOMIC WRITE (Memory Placement Extensions): RETH and an 8-byte payload.
    AtomicWrite,
    /// A reserved or not-yet-supported operation code (5 bits).
    Unknown(u8),
}

impl Op {
    /// The 5-bit operation code.
    pub const fn bits(self) -> u8 {
        match self {
            Op::SendFirst => 0x00,
            Op::SendMiddle => 0x01,
            Op::SendLast => 0x02,
            Op::SendLastImm => 0x03,
            Op::SendOnly => 0x04,
            Op::SendOnlyImm => 0x05,
            Op::WriteFirst => 0x06,
            Op::WriteMiddle => 0x07,
            Op::WriteLast => 0x08,
            Op::WriteLastImm => 0x09,
            Op::WriteOnly => 0x0a,
            Op::WriteOnlyImm => 0x0b,
            Op::ReadRequest => 0x0c,
            Op::ReadResponseFirst => 0x0d,
            Op::ReadResponseMiddle => 0x0e,
            Op::ReadResponseLast => 0x0f,
            Op::ReadResponseOnly => 0x10,
            Op::Acknowledge => 0x11,
            Op::AtomicAcknowledge => 0x12,
            Op::CompareSwap => 0x13,
            Op::FetchAdd => 0x14,
            Op::SendLastInv => 0x16,
            Op::SendOnlyInv => 0x17,
            Op::Flush => 0x1c,
            Op::AtomicWrite => 0x1d,
            Op::Unknown(b) => b & 0x1f,
        }
    }

    /// The operation of a 5-bit code.
    pub const fn from_bits(b: u8) -> Self {
        match b & 0x1f {
            0x00 => Op::SendFirst,
            0x01 => Op::SendMiddle,
            0x02 => Op::SendLast,
            0x03 => Op::SendLastImm,
            0x04 => Op::SendOnly,
            0x05 => Op::SendOnlyImm,
            0x06 => Op::WriteFirst,
            0x07 => Op::WriteMiddle,
            0x08 => Op::WriteLast,
            0x09 => Op::WriteLastImm,
            0x0a => Op::WriteOnly,
            0x0b => Op::WriteOnlyImm,
            0x0c => Op::ReadRequest,
            0x0d => Op::ReadResponseFirst,
            0x0e => Op::ReadResponseMiddle,
            0x0f => Op::ReadResponseLast,
            0x10 => Op::ReadResponseOnly,
            0x11 => Op::Acknowledge,
            0x12 => Op::AtomicAcknowledge,
            0x13 => Op::CompareSwap,
            0x14 => Op::FetchAdd,
            0x16 => Op::SendLastInv,
            0x17 => Op::SendOnlyInv,
            0x1c => Op::Flush,
            0x1d => Op::AtomicWrite,
            b => Op::Unknown(b),
        }
    }

    /// Whether this is a request (sent by a requester) rather than a response.
    pub const fn is_request(self) -> bool {
        !matches!(
            self,
            Op::ReadResponseFirst
                | Op::ReadResponseMiddle
                | Op::ReadResponseLast
                | Op::ReadResponseOnly
                | Op::Acknowledge
                | Op::AtomicAcknowledge
                | Op::Unknown(_)
        )
    }
}

/// Which headers follow the BTH, in wire order (IBA 9.2, Table 35; Annex A17.9.3 for CNP).
///
/// Order on the wire: BTH, RDETH, DETH, XRCETH, FETH, RETH | AtomicETH | AETH, AtomicAckETH,
/// ImmDt | IETH, payload, pad, ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Layout {
    /// Reliable Datagram ETH (4 bytes; RD only).
    pub rdeth: bool,
    /// Datagram ETH (8 bytes).
    pub deth: bool,
    /// XRC ETH (4 bytes).
    pub xrceth: bool,
    /// FLUSH ETH (4 bytes; before the RETH).
    pub feth: bool,
    /// RDMA ETH (16 bytes).
    pub reth: bool,
    /// Atomic ETH (28 bytes).
    pub atomic_eth: bool,
    /// ACK ETH (4 bytes).
    pub aeth: bool,
    /// Atomic ACK ETH (8 bytes).
    pub atomic_ack_eth: bool,
    /// Immediate data (4 bytes).
    pub immdt: bool,
    /// Invalidate ETH (4 bytes).
    pub ieth: bool,
    /// The CNP's 16 reserved bytes.
    pub cnp: bool,
    /// Whether the opcode carries a payload.
    pub payload: bool,
}

impl Layout {
    /// Length of the extension headers (everything between the BTH and the payload).
    pub const fn ext_len(&self) -> usize {
        let mut n = 0;
        if self.rdeth {
            n += 4;
        }
        if self.deth {
            n += super::deth::HEADER_LEN;
        }
        if self.xrceth {
            n += super::xrceth::HEADER_LEN;
        }
        if self.feth {
            n += super::feth::HEADER_LEN;
        }
        if self.reth {
            n += super::reth::HEADER_LEN;
        }
        if self.atomic_eth {
            n += super::atomic_eth::HEADER_LEN;
        }
        if self.aeth {
            n += super::aeth::HEADER_LEN;
        }
        if self.atomic_ack_eth {
            n += super::atomic_ack_eth::HEADER_LEN;
        }
        if self.immdt {
            n += super::immdt::HEADER_LEN;
        }
        if self.ieth {
            n += super::ieth::HEADER_LEN;
        }
        if self.cnp {
            n += super::cnp::HEADER_LEN;
        }
        n
    }

    /// Length of the BTH plus the extension headers.
    pub const fn header_len(&self) -> usize {
        super::bth::HEADER_LEN + self.ext_len()
    }
}

impl Opcode {
    /// The CNP opcode (Annex A17.9.3).
    pub const CNP: Opcode = Opcode(0x81);

    /// The opcode for `transport` and `op`.
    pub const fn new(transport: TransportType, op: Op) -> Self {
        Opcode((transport.bits() << 5) | op.bits())
    }

    /// The transport service (bits 7..5).
    pub const fn transport(self) -> TransportType {
        TransportType::from_bits(self.0 >> 5)
    }

    /// The operation (bits 4..0).
    pub const fn op(self) -> Op {
        Op::from_bits(self.0)
    }

    /// The headers this opcode implies, or `None` when it names no valid packet.
    ///
    /// This is the one opcode table of rdma-emu. RC carries every operation; UC only
    /// SEND and RDMA WRITE (no invalidate); UD only SEND Only (with Immediate); RD every
    /// RC operation but SEND with Invalidate, FLUSH and ATOMIC WRITE, with an RDETH, requests also with a DETH; XRC every RC operation,
    /// requests with an XRCETH; the CNP transport only 0x81.
    ///
    /// Read from a table built at compile time: parsing and building look it up several
    /// times per packet.
    pub const fn layout(self) -> Option<Layout> {
        LAYOUTS[self.0 as usize]
    }

    /// [`layout`](Self::layout) worked out from the opcode's bits (fills [`LAYOUTS`]).
    const fn derive_layout(self) -> Option<Layout> {
        let op = self.op();
        let base = match op_layout(op) {
            Some(l) => l,
            None => return None,
        };
        let t = self.transport();
        let mut l = base;
        match t {
            TransportType::Rc => {}
            TransportType::Uc => {
                if !matches!(
                    op,
                    Op::SendFirst
                        | Op::SendMiddle
                        | Op::SendLast
                        | Op::SendLastImm
                        | Op::SendOnly
                        | Op::SendOnlyImm
                        | Op::WriteFirst
                        | Op::WriteMiddle
                        | Op::WriteLast
                        | Op::WriteLastImm
                        | Op::WriteOnly
                        | Op::WriteOnlyImm
                ) {
                    return None;
                }
            }
            TransportType::Ud => {
                if !matches!(op, Op::SendOnly | Op::SendOnlyImm) {
                    return None;
                }
                l.deth = true;
            }
            TransportType::Rd => {
                if matches!(
                    op,
                    Op::SendLastInv | Op::SendOnlyInv | Op::Flush | Op::AtomicWrite
                ) {
                    return None;
                }
                l.rdeth = true;
                l.deth = op.is_request();
            }
            TransportType::Xrc => {
                l.xrceth = op.is_request();
            }
            TransportType::Cnp => {
                if self.0 != Opcode::CNP.0 {
                    return None;
                }
                return Some(Layout {
                    rdeth: false,
                    deth: false,
                    xrceth: false,
                    feth: false,
                    reth: false,
                    atomic_eth: false,
                    aeth: false,
                    atomic_ack_eth: false,
                    immdt: false,
                    ieth: false,
                    cnp: true,
                    payload: false,
                });
            }
            TransportType::Unknown(_) => return None,
        }
        Some(l)
    }
}

/// The layout of every opcode octet, by its value ([`Opcode::layout`]).
const LAYOUTS: [Option<Layout>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = Opcode(i as u8).derive_layout();
        i += 1;
    }
    t
};

/// The RC layout of each operation.
const fn op_layout(op: Op) -> Option<Layout> {
    let none = Layout {
        rdeth: false,
        deth: false,
        xrceth: false,
        feth: false,
        reth: false,
        atomic_eth: false,
        aeth: false,
        atomic_ack_eth: false,
        immdt: false,
        ieth: false,
        cnp: false,
        payload: false,
    };
    let data = Layout {
        payload: true,
        ..none
    };
    Some(match op {
        Op::SendFirst | Op::SendMiddle | Op::SendLast | Op::SendOnly => data,
        Op::SendLastImm | Op::SendOnlyImm => Layout {
            immdt: true,
            ..data
        },
        Op::SendLastInv | Op::SendOnlyInv => Layout { ieth: true, ..data },
        Op::WriteFirst | Op::WriteOnly => Layout { reth: true, ..data },
        Op::WriteMiddle | Op::WriteLast => data,
        Op::WriteLastImm => Layout {
            immdt: true,
            ..data
        },
        Op::WriteOnlyImm => Layout {
            reth: true,
            immdt: true,
            ..data
        },
        Op::ReadRequest => Layout { reth: true, ..none },
        Op::ReadResponseFirst | Op::ReadResponseLast | Op::ReadResponseOnly => {
            Layout { aeth: true, ..data }
        }
        Op::ReadResponseMiddle => data,
        Op::Acknowledge => Layout { aeth: true, ..none },
        Op::AtomicAcknowledge => Layout {
            aeth: true,
            atomic_ack_eth: true,
            ..none
        },
        Op::CompareSwap | Op::FetchAdd => Layout {
            atomic_eth: true,
            ..none
        },
        Op::Flush => Layout {
            feth: true,
            reth: true,
            ..none
        },
        Op::AtomicWrite => Layout { reth: true, ..data },
        Op::Unknown(_) => return None,
    })
}

impl core::fmt::Display for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match (self.transport(), self.layout()) {
            (TransportType::Cnp, Some(_)) => write!(f, "CNP"),
            (t, Some(_)) => write!(f, "{:?} {:?}", t, self.op()),
            _ => write!(f, "opcode {:#04x}", self.0),
        }
    }
}

//! The rsocket wire protocol (rdma-core `librdmacm/rsocket.c`), byte for byte, so a peer
//! running rdma-core's rsockets talks to ours. No I/O here; every parser checks what a
//! hostile peer could send.
//!
//! - The connection private data (`struct rs_conn_data`, 40 bytes, multi-byte fields in
//!   network order): version 1, flags, receive credits, the address/length/rkey of the
//!   sender's target SGL (where the peer RDMA-writes buffer updates) and of the first
//!   half of its receive buffer.
//! - A 32-bit message, sent as the immediate data of an RDMA WRITE WITH IMMEDIATE, or
//!   (iWARP, no immediate data: `RS_OPT_MSG_SEND`) as a 4-byte inline SEND after a plain
//!   RDMA WRITE: bits 31..29 are the operation, bits 28..0 its argument (bytes written,
//!   credits granted, an iomap index, or a control code).
//! - An SGE (`struct rs_sge`: addr u64, key u32, length u32, 16 bytes) in the sender's
//!   byte order (`RS_CONN_FLAG_NET` says big endian); an iomap entry is an offset (u64)
//!   followed by an SGE.

/// `RS_MAX_TRANSFER`, `RS_OLAP_START_SIZE`, `RS_SNDLOWAT` of rsocket.c.
pub const MAX_TRANSFER: u32 = 65536;
pub const OLAP_START_SIZE: u32 = 2048;
pub const SNDLOWAT: u32 = 2048;
/// Bounds on queue sizes (`RS_QP_MIN_SIZE`, `RS_QP_MAX_SIZE`).
pub const QP_MIN_SIZE: u16 = 16;
pub const QP_MAX_SIZE: u16 = 0xfffe;
/// Control messages in flight at once (`RS_QP_CTRL_SIZE`).
pub const QP_CTRL_SIZE: u32 = 4;
/// Entries of the target SGL (`RS_SGL_SIZE`).
pub const SGL_SIZE: usize = 2;
/// `sizeof(struct rs_sge)`, `sizeof(struct rs_iomap)`.
pub const SGE_LEN: usize = 16;
pub const IOMAP_LEN: usize = 24;
/// The message of a SEND-carried rsocket message (`RS_MSG_SIZE`).
pub const MSG_SIZE: usize = 4;

/// Defaults of rsocket.c (before `/etc/rdma/rsocket/*` overrides, which we do not read).
pub const DEF_INLINE: u16 = 64;
pub const DEF_SQSIZE: u16 = 384;
pub const DEF_RQSIZE: u16 = 384;
pub const DEF_MEM: u32 = 1 << 17;
pub const DEF_WMEM: u32 = 1 << 17;

/// Flags of `rs_conn_data.flags`.
pub const CONN_FLAG_NET: u8 = 1 << 0;
pub const CONN_FLAG_IOMAP: u8 = 1 << 1;
/// `sizeof(struct rs_conn_data)`.
pub const CONN_DATA_LEN: usize = 40;
/// The only protocol version rsocket.c speaks.
pub const VERSION: u8 = 1;

/// Bits of a work request id: receives carry bit 63, the SEND half of a message on
/// iWARP carries bit 62; the low 32 bits are the message.
pub const WR_ID_RECV: u64 = 1 << 63;
pub const WR_ID_MSG_SEND: u64 = 1 << 62;

/// Control codes of `Op::Ctrl`.
pub const CTRL_DISCONNECT: u32 = 0;
pub const CTRL_KEEPALIVE: u32 = 1;
pub const CTRL_SHUTDOWN: u32 = 2;

/// The operation in bits 31..29 of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Bytes written into the receive buffer (argument: how many).
    Data,
    /// A direct write into an iomap (never sent; our own send-completion bookkeeping).
    Write,
    /// The sender's credit limit (argument: the receive sequence number it may reach),
    /// after an optional write of a new receive-buffer SGE into the target SGL.
    Sgl,
    /// An iomap entry was written at this index.
    IomapSgl,
    /// Disconnect, keepalive or shutdown.
    Ctrl,
    /// A reserved code (1, 3, 5): refused.
    Reserved(u8),
}

impl Op {
    fn code(self) -> u32 {
        match self {
            Op::Data => 0,
            Op::Write => 2,
            Op::Sgl => 4,
            Op::IomapSgl => 6,
            Op::Ctrl => 7,
            Op::Reserved(c) => u32::from(c & 7),
        }
    }
}

/// One rsocket message: an operation and its 29-bit argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg {
    pub op: Op,
    pub data: u32,
}

pub const MSG_DATA_MASK: u32 = 0x1fff_ffff;

impl Msg {
    pub fn new(op: Op, data: u32) -> Msg {
        Msg {
            op,
            data: data & MSG_DATA_MASK,
        }
    }

    /// The host-order 32-bit value (immediate data is this in network order).
    pub fn to_u32(self) -> u32 {
        (self.op.code() << 29) | self.data
    }

    pub fn from_u32(v: u32) -> Msg {
        let op = match v >> 29 {
            0 => Op::Data,
            2 => Op::Write,
            4 => Op::Sgl,
            6 => Op::IomapSgl,
            7 => Op::Ctrl,
            c => Op::Reserved(c as u8),
        };
        Msg {
            op,
            data: v & MSG_DATA_MASK,
        }
    }
}

/// `rs_value_to_scale`: a size in 8 bits (small values exact, larger ones in units of
/// 256 with the top bit set).
pub fn value_to_scale(value: u32, bits: u32) -> u32 {
    let half = 1u32 << (bits - 1);
    if value <= half {
        value
    } else {
        half | (value >> bits)
    }
}

/// `rs_scale_to_value`, the inverse.
pub fn scale_to_value(value: u32, bits: u32) -> u32 {
    let half = 1u32 << (bits - 1);
    if value <= half {
        value
    } else {
        (value & !half) << bits
    }
}

/// `struct rs_sge`: a remote buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteSge {
    pub addr: u64,
    pub key: u32,
    pub length: u32,
}

impl RemoteSge {
    /// Reads an SGE the peer wrote in its byte order (`swap`: the peer's order is not
    /// ours).
    pub fn read(b: &[u8; SGE_LEN], swap: bool) -> RemoteSge {
        let addr = u64::from_ne_bytes(b[0..8].try_into().unwrap_or([0; 8]));
        let key = u32::from_ne_bytes(b[8..12].try_into().unwrap_or([0; 4]));
        let length = u32::from_ne_bytes(b[12..16].try_into().unwrap_or([0; 4]));
        if swap {
            RemoteSge {
                addr: addr.swap_bytes(),
                key: key.swap_bytes(),
                length: length.swap_bytes(),
            }
        } else {
            RemoteSge { addr, key, length }
        }
    }

    /// The bytes of this SGE in the peer's order.
    pub fn emit(&self, swap: bool) -> [u8; SGE_LEN] {
        let (a, k, l) = if swap {
            (
                self.addr.swap_bytes(),
                self.key.swap_bytes(),
                self.length.swap_bytes(),
            )
        } else {
            (self.addr, self.key, self.length)
        };
        let mut out = [0u8; SGE_LEN];
        out[0..8].copy_from_slice(&a.to_ne_bytes());
        out[8..12].copy_from_slice(&k.to_ne_bytes());
        out[12..16].copy_from_slice(&l.to_ne_bytes());
        out
    }
}

/// `struct rs_conn_data`, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnData {
    pub flags: u8,
    /// Receive credits (the peer's receive queue size).
    pub credits: u16,
    /// `target_iomap_size` on the wire (scaled).
    pub target_iomap_size: u8,
    /// Where to write buffer updates: address, rkey, and the number of entries.
    pub target_sgl: RemoteSge,
    /// The first half of the peer's receive buffer.
    pub data_buf: RemoteSge,
}

/// Why a peer's connection private data was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnDataError {
    Short,
    Version(u8),
    /// An SGL with no entry or more than the protocol's, or an empty data buffer.
    Sizes,
}

impl ConnData {
    pub fn emit(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0u8; CONN_DATA_LEN];
        b[0] = VERSION;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        b[7] = self.target_iomap_size;
        for (off, s) in [(8, &self.target_sgl), (24, &self.data_buf)] {
            b[off..off + 8].copy_from_slice(&s.addr.to_be_bytes());
            b[off + 8..off + 12].copy_from_slice(&s.key.to_be_bytes());
            b[off + 12..off + 16].copy_from_slice(&s.length.to_be_bytes());
        }
        b
    }

    pub fn parse(b: &[u8]) -> Result<ConnData, ConnDataError> {
        if b.len() < CONN_DATA_LEN {
            return Err(ConnDataError::Short);
        }
        if b[0] != VERSION {
            return Err(ConnDataError::Version(b[0]));
        }
        let be32 = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let be64 = |o: usize| (u64::from(be32(o)) << 32) | u64::from(be32(o + 4));
        let sge = |o: usize| RemoteSge {
            addr: be64(o),
            key: be32(o + 8),
            length: be32(o + 12),
        };
        let c = ConnData {
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            target_iomap_size: b[7],
            target_sgl: sge(8),
            data_buf: sge(24),
        };
        // The SGL length counts entries, which we cycle through when granting buffer
        // space: anything but 1..=RS_SGL_SIZE would make us write past the peer's list.
        if c.target_sgl.length == 0
            || c.target_sgl.length as usize > SGL_SIZE
            || c.data_buf.length == 0
            || c.credits == 0
        {
            return Err(ConnDataError::Sizes);
        }
        Ok(c)
    }

    /// The peer stores SGEs big endian.
    pub fn peer_is_net(&self) -> bool {
        self.flags & CONN_FLAG_NET != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_data_round_trips_and_is_network_order() {
        let c = ConnData {
            flags: CONN_FLAG_IOMAP,
            credits: 384,
            target_iomap_size: 0,
            target_sgl: RemoteSge {
                addr: 0x1122_3344_5566_7788,
                key: 0xaabb_ccdd,
                length: 2,
            },
            data_buf: RemoteSge {
                addr: 0x10,
                key: 7,
                length: 65536,
            },
        };
        let b = c.emit();
        assert_eq!(b[0], 1);
        assert_eq!(&b[2..4], &[0x01, 0x80]);
        assert_eq!(&b[8..16], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(&b[20..24], &[0, 0, 0, 2]);
        assert_eq!(ConnData::parse(&b), Ok(c));
    }

    #[test]
    fn malformed_conn_data_is_refused() {
        let good = ConnData {
            flags: 0,
            credits: 16,
            target_iomap_size: 0,
            target_sgl: RemoteSge {
                addr: 1,
                key: 1,
                length: 2,
            },
            data_buf: RemoteSge {
                addr: 1,
                key: 1,
                length: 1,
            },
        }
        .emit();
        assert_eq!(ConnData::parse(&good[..39]), Err(ConnDataError::Short));
        let mut b = good;
        b[0] = 2;
        assert_eq!(ConnData::parse(&b), Err(ConnDataError::Version(2)));
        let mut b = good;
        b[23] = 3; // a target SGL longer than the protocol's two entries
        assert_eq!(ConnData::parse(&b), Err(ConnDataError::Sizes));
        let mut b = good;
        b[23] = 0;
        assert_eq!(ConnData::parse(&b), Err(ConnDataError::Sizes));
        let mut b = good;
        b[36..40].fill(0); // an empty receive buffer
        assert_eq!(ConnData::parse(&b), Err(ConnDataError::Sizes));
    }

    #[test]
    fn messages_match_rsocket_c() {
        // rs_msg_set(RS_OP_SGL, 0x180) and rs_msg_set(RS_OP_CTRL, RS_CTRL_SHUTDOWN)
        assert_eq!(Msg::new(Op::Sgl, 0x180).to_u32(), 0x8000_0180);
        assert_eq!(Msg::new(Op::Ctrl, CTRL_SHUTDOWN).to_u32(), 0xe000_0002);
        assert_eq!(Msg::from_u32(0x0000_1000), Msg::new(Op::Data, 0x1000));
        assert_eq!(Msg::from_u32(0x2000_0001).op, Op::Reserved(1));
        assert_eq!(Msg::from_u32(0xc000_0003), Msg::new(Op::IomapSgl, 3));
    }

    #[test]
    fn scale_matches_rsocket_c() {
        assert_eq!(value_to_scale(100, 8), 100);
        assert_eq!(scale_to_value(value_to_scale(4096, 8), 8), 4096);
        assert_eq!(value_to_scale(0, 8), 0);
    }

    #[test]
    fn sge_byte_order() {
        let s = RemoteSge {
            addr: 0x0102_0304_0506_0708,
            key: 9,
            length: 10,
        };
        assert_eq!(RemoteSge::read(&s.emit(false), false), s);
        assert_eq!(RemoteSge::read(&s.emit(true), true), s);
        assert_eq!(s.emit(true)[0], 0x01);
    }
}

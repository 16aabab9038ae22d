//! Identifiers, numbering and flags of the verbs interface, in libibverbs' numbering
//! (`<infiniband/verbs.h>`) so the daemon translates 1:1.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

macro_rules! handle {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub u32);
    };
}

handle!(
    /// A protection domain, allocated by [`crate::Device::alloc_pd`].
    PdHandle
);
handle!(
    /// A completion queue.
    CqHandle
);
handle!(
    /// A shared receive queue.
    SrqHandle
);
handle!(
    /// An address handle (UD destinations).
    AhHandle
);
handle!(
    /// A memory window.
    MwHandle
);
handle!(
    /// The owner of objects: one per client process session. Used for cleanup
    /// ([`crate::Device::release_client`]) and to route async events.
    ClientId
);
handle!(
    /// Whose memory an MR covers; the daemon uses the owning `ClientId`'s value.
    AddrSpace
);

/// The application's 64-bit work request identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WrId(pub u64);

/// An errno value as rdma-core returns it for a failing verb (positive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// Operation not permitted.
    pub const EPERM: Errno = Errno(1);
    /// No such object.
    pub const ENOENT: Errno = Errno(2);
    /// Try again.
    pub const EAGAIN: Errno = Errno(11);
    /// Out of memory / resources (queue full, too many objects).
    pub const ENOMEM: Errno = Errno(12);
    /// Permission denied.
    pub const EACCES: Errno = Errno(13);
    /// Object busy (still referenced).
    pub const EBUSY: Errno = Errno(16);
    /// Invalid argument.
    pub const EINVAL: Errno = Errno(22);
    /// Operation not supported.
    pub const EOPNOTSUPP: Errno = Errno(95);
}

impl core::fmt::Display for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "errno {}", self.0)
    }
}

impl std::error::Error for Errno {}

/// A 16-byte GID. RoCE v2 GIDs are IPv6 addresses or IPv4-mapped (`::ffff:a.b.c.d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of an IP address (IPv4 becomes IPv4-mapped).
    pub fn from_ip(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }
    /// The IP address a RoCE v2 packet to/from this GID uses.
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
    /// Whether this is the all-zero GID (an empty table slot).
    pub fn is_zero(self) -> bool {
        self.0 == [0; 16]
    }
    /// The IPv4 address, if IPv4-mapped.
    pub fn ipv4(self) -> Option<Ipv4Addr> {
        Ipv6Addr::from(self.0).to_ipv4_mapped()
    }
    /// Whether this is a multicast GID, as the kernel's `rdma_is_multicast_addr` decides:
    /// an IPv4-mapped multicast address (`::ffff:224.0.0.0/100`, what RoCE v2 uses for
    /// IPv4 groups) or an IPv6 multicast address (first octet 0xff).
    pub fn is_multicast(self) -> bool {
        match self.ipv4() {
            Some(v4) => v4.is_multicast(),
            None => self.0[0] == 0xff,
        }
    }
}

/// A path MTU (`enum ibv_mtu`: 1 = 256 ... 5 = 4096).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// Bytes.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
    /// From the `ibv_mtu` value.
    pub const fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// The largest IB MTU that fits a link MTU of `link` bytes (as rxe derives it: the link
    /// MTU minus IP, UDP, BTH, the largest extension headers and the ICRC).
    pub fn for_link_mtu(link: u32) -> Self {
        let avail = link.saturating_sub(20 + 8 + 12 + 28 + 4);
        [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
            .into_iter()
            .find(|m| m.bytes() <= avail)
            .unwrap_or(Mtu::Mtu256)
    }
}

macro_rules! flags {
    ($(#[$m:meta])* $name:ident : $t:ty { $($(#[$fm:meta])* $f:ident = $v:expr,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub $t);
        impl $name {
            $($(#[$fm])* pub const $f: $name = $name($v);)*
            /// No flag.
            pub const EMPTY: $name = $name(0);
            /// Whether every flag of `o` is set.
            pub const fn contains(self, o: $name) -> bool { self.0 & o.0 == o.0 }
            /// Whether any flag of `o` is set.
            pub const fn intersects(self, o: $name) -> bool { self.0 & o.0 != 0 }
        }
        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, o: $name) -> $name { $name(self.0 | o.0) }
        }
        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, o: $name) { self.0 |= o.0 }
        }
    };
}

flags!(
    /// `enum ibv_access_flags`.
    AccessFlags: u32 {
        /// IBV_ACCESS_LOCAL_WRITE.
        LOCAL_WRITE = 1,
        /// IBV_ACCESS_REMOTE_WRITE.
        REMOTE_WRITE = 2,
        /// IBV_ACCESS_REMOTE_READ.
        REMOTE_READ = 4,
        /// IBV_ACCESS_REMOTE_ATOMIC.
        REMOTE_ATOMIC = 8,
        /// IBV_ACCESS_MW_BIND.
        MW_BIND = 16,
        /// IBV_ACCESS_ZERO_BASED.
        ZERO_BASED = 32,
    }
);

flags!(
    /// `enum ibv_send_flags`.
    SendFlags: u32 {
        /// IBV_SEND_FENCE.
        FENCE = 1,
        /// IBV_SEND_SIGNALED.
        SIGNALED = 2,
        /// IBV_SEND_SOLICITED.
        SOLICITED = 4,
        /// IBV_SEND_INLINE.
        INLINE = 8,
    }
);

flags!(
    /// `enum ibv_wc_flags`.
    WcFlags: u32 {
        /// IBV_WC_GRH: the first 40 bytes of the receive buffer hold a GRH.
        GRH = 1,
        /// IBV_WC_WITH_IMM.
        WITH_IMM = 2,
        /// IBV_WC_WITH_INV.
        WITH_INV = 8,
    }
);

flags!(
    /// `enum ibv_qp_attr_mask`.
    QpAttrMask: u32 {
        /// IBV_QP_STATE.
        STATE = 1 << 0,
        /// IBV_QP_CUR_STATE.
        CUR_STATE = 1 << 1,
        /// IBV_QP_EN_SQD_ASYNC_NOTIFY.
        EN_SQD_ASYNC_NOTIFY = 1 << 2,
        /// IBV_QP_ACCESS_FLAGS.
        ACCESS_FLAGS = 1 << 3,
        /// IBV_QP_PKEY_INDEX.
        PKEY_INDEX = 1 << 4,
        /// IBV_QP_PORT.
        PORT = 1 << 5,
        /// IBV_QP_QKEY.
        QKEY = 1 << 6,
        /// IBV_QP_AV.
        AV = 1 << 7,
        /// IBV_QP_PATH_MTU.
        PATH_MTU = 1 << 8,
        /// IBV_QP_TIMEOUT.
        TIMEOUT = 1 << 9,
        /// IBV_QP_RETRY_CNT.
        RETRY_CNT = 1 << 10,
        /// IBV_QP_RNR_RETRY.
        RNR_RETRY = 1 << 11,
        /// IBV_QP_RQ_PSN.
        RQ_PSN = 1 << 12,
        /// IBV_QP_MAX_QP_RD_ATOMIC.
        MAX_QP_RD_ATOMIC = 1 << 13,
        /// IBV_QP_ALT_PATH.
        ALT_PATH = 1 << 14,
        /// IBV_QP_MIN_RNR_TIMER.
        MIN_RNR_TIMER = 1 << 15,
        /// IBV_QP_SQ_PSN.
        SQ_PSN = 1 << 16,
        /// IBV_QP_MAX_DEST_RD_ATOMIC.
        MAX_DEST_RD_ATOMIC = 1 << 17,
        /// IBV_QP_PATH_MIG_STATE.
        PATH_MIG_STATE = 1 << 18,
        /// IBV_QP_CAP.
        CAP = 1 << 19,
        /// IBV_QP_DEST_QPN.
        DEST_QPN = 1 << 20,
        /// IBV_QP_RATE_LIMIT.
        RATE_LIMIT = 1 << 25,
    }
);

/// `enum ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[allow(missing_docs)]
pub enum QpState {
    #[default]
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Sqd = 4,
    Sqe = 5,
    Err = 6,
}

impl QpState {
    /// All states, in numbering order.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];
    /// From the `ibv_qp_state` value.
    pub fn from_raw(v: u32) -> Option<Self> {
        Self::ALL.get(v as usize).copied()
    }
}

/// `enum ibv_qp_type` (the ones this device creates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum QpType {
    Rc = 2,
    Uc = 3,
    Ud = 4,
}

impl QpType {
    /// From the `ibv_qp_type` value.
    pub fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            2 => QpType::Rc,
            3 => QpType::Uc,
            4 => QpType::Ud,
            _ => return None,
        })
    }
}

/// `enum ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[allow(missing_docs)]
pub enum WcStatus {
    #[default]
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    FatalErr = 19,
    GeneralErr = 21,
}

/// `enum ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[allow(missing_docs)]
pub enum WcOpcode {
    #[default]
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    BindMw = 5,
    LocalInv = 6,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

/// `enum ibv_wr_opcode` (the ones this device executes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum WrOpcode {
    RdmaWrite = 0,
    RdmaWriteWithImm = 1,
    Send = 2,
    SendWithImm = 3,
    RdmaRead = 4,
    AtomicCmpAndSwp = 5,
    AtomicFetchAndAdd = 6,
    LocalInv = 7,
    BindMw = 8,
    SendWithInv = 9,
}

impl WrOpcode {
    /// From the `ibv_wr_opcode` value.
    pub fn from_raw(v: u32) -> Option<Self> {
        use WrOpcode::*;
        Some(match v {
            0 => RdmaWrite,
            1 => RdmaWriteWithImm,
            2 => Send,
            3 => SendWithImm,
            4 => RdmaRead,
            5 => AtomicCmpAndSwp,
            6 => AtomicFetchAndAdd,
            7 => LocalInv,
            8 => BindMw,
            9 => SendWithInv,
            _ => return None,
        })
    }
    /// The completion opcode of a send WR with this opcode.
    pub const fn wc_opcode(self) -> WcOpcode {
        match self {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
            WrOpcode::LocalInv => WcOpcode::LocalInv,
            WrOpcode::BindMw => WcOpcode::BindMw,
        }
    }
}

/// `enum ibv_event_type` values this device raises, with their element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// IBV_EVENT_CQ_ERR (0): a CQ overran.
    CqErr(CqHandle),
    /// IBV_EVENT_QP_FATAL (1).
    QpFatal(wire::roce::Qpn),
    /// IBV_EVENT_QP_REQ_ERR (2): the responder detected an invalid request.
    QpReqErr(wire::roce::Qpn),
    /// IBV_EVENT_QP_ACCESS_ERR (3): the responder detected an access violation.
    QpAccessErr(wire::roce::Qpn),
    /// IBV_EVENT_COMM_EST (4): first packet received in RTR.
    CommEst(wire::roce::Qpn),
    /// IBV_EVENT_SQ_DRAINED (5).
    SqDrained(wire::roce::Qpn),
    /// IBV_EVENT_SRQ_LIMIT_REACHED (15).
    SrqLimitReached(SrqHandle),
    /// IBV_EVENT_QP_LAST_WQE_REACHED (16).
    QpLastWqeReached(wire::roce::Qpn),
}

impl AsyncEvent {
    /// `(ibv_event_type, element)` as the event pipe record carries them.
    pub fn raw(self) -> (u32, u32) {
        match self {
            AsyncEvent::CqErr(c) => (0, c.0),
            AsyncEvent::QpFatal(q) => (1, q.0),
            AsyncEvent::QpReqErr(q) => (2, q.0),
            AsyncEvent::QpAccessErr(q) => (3, q.0),
            AsyncEvent::CommEst(q) => (4, q.0),
            AsyncEvent::SqDrained(q) => (5, q.0),
            AsyncEvent::SrqLimitReached(s) => (15, s.0),
            AsyncEvent::QpLastWqeReached(q) => (16, q.0),
        }
    }
}

/// A hasher for the core's `u32`-keyed tables (QPNs, handles, key indices): one
/// multiply instead of SipHash on the per-packet path. Keys are allocated by the core,
/// not chosen by peers, so flooding is not a concern.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct U32Hasher(u64);

impl std::hash::Hasher for U32Hasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = u64::from(v).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 7;
    }
}

/// A `HashMap` keyed by `u32` with [`U32Hasher`].
pub(crate) type U32Map<V> =
    std::collections::HashMap<u32, V, std::hash::BuildHasherDefault<U32Hasher>>;

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
    /// An XRC domain ([`crate::Device::open_xrcd`]): groups XRC SRQs and XRC target QPs.
    XrcdHandle
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
    /// Bad address (a prefetch outside its MR).
    pub const EFAULT: Errno = Errno(14);
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
        /// IBV_ACCESS_ON_DEMAND: on-demand paging ([`crate::mr`]); nothing is pinned here
        /// in any case, so it changes only what registration checks.
        ON_DEMAND = 64,
        /// IBV_ACCESS_HUGETLB: the ODP region is backed by huge pages (a hint, only with
        /// ON_DEMAND).
        HUGETLB = 128,
        /// IBV_ACCESS_FLUSH_GLOBAL: FLUSH with the global visibility placement type
        /// may target the MR, or be executed by the QP.
        FLUSH_GLOBAL = 1 << 8,
        /// IBV_ACCESS_FLUSH_PERSISTENT: FLUSH with the persistence placement type.
        FLUSH_PERSISTENT = 1 << 9,
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
pub enum QpState {
    /// IBV_QPS_RESET: as created; queues empty, nothing processed.
    #[default]
    Reset = 0,
    /// IBV_QPS_INIT: receives may be posted; nothing is processed yet.
    Init = 1,
    /// IBV_QPS_RTR: ready to receive; the path and remote QP are set.
    Rtr = 2,
    /// IBV_QPS_RTS: ready to send.
    Rts = 3,
    /// IBV_QPS_SQD: send queue drain; no new send WQE starts.
    Sqd = 4,
    /// IBV_QPS_SQE: send queue error (UC, UD); receives still work.
    Sqe = 5,
    /// IBV_QPS_ERR: every outstanding WQE completes with [`WcStatus::WrFlushErr`].
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
pub enum QpType {
    /// IBV_QPT_RC: reliable connected.
    Rc = 2,
    /// IBV_QPT_UC: unreliable connected (no ACKs, no READ or atomics).
    Uc = 3,
    /// IBV_QPT_UD: unreliable datagram (one address handle per send).
    Ud = 4,
    /// IBV_QPT_XRC_SEND: XRC initiator (send side only; RC transport whose requests
    /// carry an XRCETH naming the remote XRC SRQ, IBA annex A14).
    XrcSend = 9,
    /// IBV_QPT_XRC_RECV: XRC target (receive side only, no RQ: each request's XRCETH
    /// names the XRC SRQ of the QP's XRC domain that takes it).
    XrcRecv = 10,
}

impl QpType {
    /// From the `ibv_qp_type` value.
    pub fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            2 => QpType::Rc,
            3 => QpType::Uc,
            4 => QpType::Ud,
            9 => QpType::XrcSend,
            10 => QpType::XrcRecv,
            _ => return None,
        })
    }

    /// RC and both XRC halves: the reliable connected transport (ACKs, retries, READ
    /// and atomics).
    pub fn is_reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcSend | QpType::XrcRecv)
    }
}

/// `enum ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcStatus {
    /// IBV_WC_SUCCESS: the work request completed.
    #[default]
    Success = 0,
    /// IBV_WC_LOC_LEN_ERR: a length did not fit (receive buffer too short, too much
    /// inline data).
    LocLenErr = 1,
    /// IBV_WC_LOC_QP_OP_ERR: the WQE is not valid for the QP's type or state.
    LocQpOpErr = 2,
    /// IBV_WC_LOC_PROT_ERR: a local SGE's lkey, range or PD does not allow the access.
    LocProtErr = 4,
    /// IBV_WC_WR_FLUSH_ERR: the QP went to error before this WQE was done.
    WrFlushErr = 5,
    /// IBV_WC_MW_BIND_ERR: a memory window bind was refused.
    MwBindErr = 6,
    /// IBV_WC_BAD_RESP_ERR: the responder answered with an unexpected opcode or length.
    BadRespErr = 7,
    /// IBV_WC_LOC_ACCESS_ERR: incoming data hit a receive buffer it may not write.
    LocAccessErr = 8,
    /// IBV_WC_REM_INV_REQ_ERR: the responder NAKed the request as invalid.
    RemInvReqErr = 9,
    /// IBV_WC_REM_ACCESS_ERR: the responder refused the access (bad rkey, range, or
    /// rights).
    RemAccessErr = 10,
    /// IBV_WC_REM_OP_ERR: the responder could not carry out the operation.
    RemOpErr = 11,
    /// IBV_WC_RETRY_EXC_ERR: `retry_cnt` retransmissions went unanswered.
    RetryExcErr = 12,
    /// IBV_WC_RNR_RETRY_EXC_ERR: `rnr_retry` RNR NAKs in a row.
    RnrRetryExcErr = 13,
    /// IBV_WC_FATAL_ERR: the device failed.
    FatalErr = 19,
    /// IBV_WC_GENERAL_ERR: an error no other status describes.
    GeneralErr = 21,
}

/// `enum ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcOpcode {
    /// IBV_WC_SEND: a SEND (any variant) completed.
    #[default]
    Send = 0,
    /// IBV_WC_RDMA_WRITE: an RDMA WRITE (with or without immediate) completed.
    RdmaWrite = 1,
    /// IBV_WC_RDMA_READ: an RDMA READ completed.
    RdmaRead = 2,
    /// IBV_WC_COMP_SWAP: an atomic compare-and-swap completed.
    CompSwap = 3,
    /// IBV_WC_FETCH_ADD: an atomic fetch-and-add completed.
    FetchAdd = 4,
    /// IBV_WC_BIND_MW: a memory window bind completed.
    BindMw = 5,
    /// IBV_WC_LOCAL_INV: a local invalidate completed.
    LocalInv = 6,
    /// IBV_WC_FLUSH: a FLUSH completed (rdma-core v41 on).
    Flush = 8,
    /// IBV_WC_ATOMIC_WRITE: an ATOMIC WRITE completed.
    AtomicWrite = 9,
    /// IBV_WC_RECV: a receive consumed by a SEND (bit 7: receive side).
    Recv = 128,
    /// IBV_WC_RECV_RDMA_WITH_IMM: a receive consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm = 129,
}

/// `enum ibv_wr_opcode` (the ones this device executes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    /// IBV_WR_RDMA_WRITE: write local data at a remote address.
    RdmaWrite = 0,
    /// IBV_WR_RDMA_WRITE_WITH_IMM: an RDMA WRITE that also consumes a remote receive.
    RdmaWriteWithImm = 1,
    /// IBV_WR_SEND: a message into the responder's next receive.
    Send = 2,
    /// IBV_WR_SEND_WITH_IMM: a SEND with immediate data.
    SendWithImm = 3,
    /// IBV_WR_RDMA_READ: read a remote range into local SGEs.
    RdmaRead = 4,
    /// IBV_WR_ATOMIC_CMP_AND_SWP: 8-byte remote compare-and-swap.
    AtomicCmpAndSwp = 5,
    /// IBV_WR_ATOMIC_FETCH_AND_ADD: 8-byte remote fetch-and-add.
    AtomicFetchAndAdd = 6,
    /// IBV_WR_LOCAL_INV: invalidate a local key.
    LocalInv = 7,
    /// IBV_WR_BIND_MW: bind a type 2 memory window in send queue order.
    BindMw = 8,
    /// IBV_WR_SEND_WITH_INV: a SEND that invalidates the responder's rkey.
    SendWithInv = 9,
    /// IBV_WR_FLUSH: make a remote range or region globally visible or persistent
    /// (Memory Placement Extensions); RC only.
    Flush = 14,
    /// IBV_WR_ATOMIC_WRITE: write 8 bytes at a remote address as one (Memory Placement
    /// Extensions); RC only.
    AtomicWrite = 15,
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
            14 => Flush,
            15 => AtomicWrite,
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
            WrOpcode::Flush => WcOpcode::Flush,
            WrOpcode::AtomicWrite => WcOpcode::AtomicWrite,
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

/// A hasher for `u32`-keyed tables of numbers a device allocates (QPNs, CQ and SRQ ids,
/// handles, key indices): one multiply instead of SipHash on the per-packet path. Keys
/// are allocated locally, not chosen by peers, so flooding is not a concern; a lookup
/// with a peer's number only probes.
#[derive(Debug, Default, Clone, Copy)]
pub struct U32Hasher(u64);

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
pub type U32Map<V> = std::collections::HashMap<u32, V, std::hash::BuildHasherDefault<U32Hasher>>;

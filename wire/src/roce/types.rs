//! Newtypes for IB identifiers shared across rdma-emu.

/// A Queue Pair Number (IBA 9.2.3 DestQP): 24 bits. The value is kept as given; headers
/// write its low 24 bits. [`Qpn::new`] masks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Qpn(pub u32);

impl Qpn {
    /// The largest QPN (2^24 - 1).
    pub const MAX: u32 = 0x00ff_ffff;
    /// QP1, the General Services Interface QP (IBA 3.5.3).
    pub const GSI: Qpn = Qpn(1);
    /// A QPN from the low 24 bits of `v`.
    pub const fn new(v: u32) -> Self {
        Qpn(v & Self::MAX)
    }
}

/// A remote memory key (R_Key, IBA 10.6.3): names an MR or MW to a remote peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Rkey(pub u32);

/// A local memory key (L_Key, IBA 10.6.3): names an MR in a local SGE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Lkey(pub u32);

/// A Queue Key (Q_Key, IBA 10.2.4.5): authorises datagrams to a UD QP. Q_Keys with the
/// high bit set are controlled (IBA 10.2.4.5.1): a send WR's Q_Key with the high bit set
/// is replaced by the QP's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Qkey(pub u32);

impl Qkey {
    /// Whether this is a controlled Q_Key (high-order bit set).
    pub const fn is_controlled(self) -> bool {
        self.0 & 0x8000_0000 != 0
    }
}

/// A Partition Key (P_Key, IBA 10.9.1). `0xffff` is the default full-member key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pkey(pub u16);

impl Pkey {
    /// The default partition, full membership.
    pub const DEFAULT: Pkey = Pkey(0xffff);
}

impl Default for Pkey {
    fn default() -> Self {
        Pkey::DEFAULT
    }
}

/// A Message Sequence Number (IBA 9.7.5.1.2, carried in the AETH): 24 bits, counts
/// completed request messages at an RC responder; wraps modulo 2^24.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Msn(pub u32);

impl Msn {
    /// 2^24 - 1.
    pub const MASK: u32 = 0x00ff_ffff;
    /// An MSN from the low 24 bits of `v`.
    pub const fn new(v: u32) -> Self {
        Msn(v & Self::MASK)
    }
    /// `self + n` modulo 2^24.
    pub const fn wrapping_add(self, n: u32) -> Self {
        Msn(self.0.wrapping_add(n) & Self::MASK)
    }
}

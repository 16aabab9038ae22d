//! The objects clients create, named by protocol [`Handle`]s and owned by one session.

use crate::daemon::sys::Mapping;
use std::cell::Cell;
use std::os::fd::OwnedFd;
use wire::client::proto::Handle;
use wire::client::{QpCap, RingLayout, RingView};

/// A session: one connection on the control socket.
pub type SessionId = u64;

/// An object and who owns it.
pub struct Object {
    pub session: SessionId,
    /// The uid of the session's peer, whose per-user limits the object counts in.
    pub uid: u32,
    /// The device context it belongs to (itself for a context).
    pub ctx: Handle,
    pub kind: Kind,
}

pub enum Kind {
    Ctx(Ctx),
    Pd {
        id: u32,
    },
    Mr {
        lkey: u32,
        /// The registered length (counted in the user's `max_mr_bytes`); 0 for an ODP
        /// region, which pins nothing.
        length: u64,
        /// Shared page ranges (`addr`, `len`) this MR attached in the memory accessor;
        /// detached when it goes.
        shared: Vec<(u64, u64)>,
        /// Registered with a write right: `ibv_rereg_mr` may grant write rights only
        /// then (the kernel's `ib_umem_check_rereg`).
        writable: bool,
    },
    /// A memory window; `index` is its R_Key without the key byte (stable across binds).
    Mw {
        id: u32,
        index: u32,
        mw_type: u32,
    },
    Channel(Channel),
    Cq(Cq),
    Srq(Srq),
    Qp(Qp),
    Ah {
        id: u32,
    },
    /// An open of an XRC domain; `file` the (device, inode) it is tied to.
    Xrcd {
        id: u32,
        file: Option<(u64, u64)>,
    },
    /// An RDMA CM event channel; its state is in the engine's CM tables.
    CmChannel,
    /// An RDMA CM id; its state is in the engine's CM tables.
    CmId,
}

/// An open device context: the client's memory, its doorbell, session page and async
/// event pipe.
pub struct Ctx {
    pub dev: usize,
    pub doorbell: OwnedFd,
    pub page: Mapping,
    pub async_w: OwnedFd,
    /// Async events dropped because the client did not read its pipe.
    pub events_dropped: Cell<u64>,
}

pub struct Channel {
    pub write: OwnedFd,
    /// CQs that use this channel (destroying it is EBUSY meanwhile).
    pub users: Cell<u32>,
}

/// A ring the daemon consumes or produces, with the daemon's private index.
pub struct Ring {
    pub layout: RingLayout,
    pub index: Cell<u64>,
    /// The ring's indices went wild: the owner was told, nothing more is read.
    pub broken: Cell<bool>,
    /// The core's queue behind this ring is full; retried after the next completion.
    pub blocked: Cell<bool>,
}

impl Ring {
    pub fn new(layout: RingLayout) -> Ring {
        Ring {
            layout,
            index: Cell::new(0),
            broken: Cell::new(false),
            blocked: Cell::new(false),
        }
    }

    /// The ring's view inside `map`; the layout was checked against it at creation.
    pub fn view<'a>(&self, map: &'a Mapping) -> Option<RingView<'a>> {
        RingView::new(map.words(), self.layout).ok()
    }
}

pub struct Cq {
    pub id: u32,
    pub map: Mapping,
    pub ring: Ring,
    pub channel: Option<Handle>,
    /// CQ_ERR was raised (the ring overflowed).
    pub overflowed: Cell<bool>,
    /// Each CQE gets its completion timestamps when written (`CreateCq.timestamps`).
    pub timestamps: bool,
}

pub struct Srq {
    pub id: u32,
    pub map: Mapping,
    pub ring: Ring,
    pub max_sge: u32,
}

pub struct Qp {
    pub qpn: u32,
    pub qp_type: u32,
    pub cap: QpCap,
    pub map: Mapping,
    pub sq: Ring,
    pub rq: Option<Ring>,
    pub send_cq: Handle,
    pub recv_cq: Handle,
    pub srq: Option<Handle>,
    pub sq_sig_all: bool,
}

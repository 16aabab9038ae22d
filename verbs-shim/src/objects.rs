//! The objects the verbs create, each owning its state: a `#[repr(C)]` struct whose
//! first field is the `ibv_*` struct the application sees, followed by the shim's data.
//! The control-path verbs make and free them, the data path and the `ibv_wr_*` /
//! `ibv_start_poll` APIs work on them; this module names none of those.
use crate::abi::*;
use crate::ffi::{Errno, VResult};
use crate::mmap::Mapping;
use std::sync::Mutex;
use wire::client::slot::{CqeRepr, Sge};
use wire::client::verbs::qp_state;
use wire::client::{Handle, QpCap, RingLayout};

/// Casts an application pointer back to the shim object whose first field it is.
///
/// # Safety
/// `p` must be NULL or a pointer this shim returned for an object of type `T`.
pub unsafe fn obj<'a, T, I>(p: *mut I) -> VResult<&'a T> {
    // SAFETY: per the caller contract, p points at the first field of a live T.
    unsafe { (p as *const T).as_ref() }.ok_or(Errno::EINVAL)
}

// ---- protection domains, address handles, memory windows ----------------------------------

#[repr(C)]
pub struct Pd {
    pub pd: ibv_pd,
    pub handle: Handle,
}

pub fn pd_of<'a>(p: *mut ibv_pd) -> VResult<&'a Pd> {
    // SAFETY: every ibv_pd the shim returns is the first field of a Pd.
    unsafe { obj(p) }
}

#[repr(C)]
pub struct Ah {
    pub ah: ibv_ah,
    pub handle: Handle,
}

#[repr(C)]
pub struct Mw {
    pub mw: ibv_mw,
    pub handle: Handle,
}

// ---- completion queues -----------------------------------------------------------------

/// A CQ. Every CQ is an `ibv_cq_ex` (whose head is `struct ibv_cq`); the poll table is
/// filled for all of them, as rdma-core's providers do.
#[repr(C)]
pub struct Cq {
    pub cq: ibv_cq_ex,
    pub handle: Handle,
    pub poll: Mutex<CqPoll>,
}

/// The consumer side of a CQ ring: the private consumer index and, for the
/// `ibv_start_poll` API, the completion being read.
pub struct CqPoll {
    /// The ring's mapping and place: under the lock, as `ibv_resize_cq` swaps them.
    pub ring: Mapping,
    pub layout: RingLayout,
    pub tail: u64,
    pub current: CqeRepr,
    /// Polls in a row that found the CQ empty (the data path's back-off).
    pub empty: u32,
}

pub fn cq_of<'a>(p: *mut ibv_cq) -> VResult<&'a Cq> {
    // SAFETY: every ibv_cq the shim returns is the first field of a Cq.
    unsafe { obj(p) }
}

// ---- queue pairs and shared receive queues -------------------------------------------------

/// The send queue's private state (serialised by the QP's lock, like a provider's
/// SQ spinlock).
pub struct SendQueue {
    pub layout: RingLayout,
    /// Producer index, as last published.
    pub head: u64,
    /// Scratch slot.
    pub slot: Vec<u8>,
    /// WQEs built by the `ibv_wr_*` API since `wr_start`, one slot each, staged and
    /// published by `wr_complete`, dropped by `wr_abort`.
    pub batch: Vec<u8>,
    /// The `ibv_wr_*` WQE being built (extended API).
    pub pending: Option<PendingWqe>,
    /// Scratch for `ibv_post_send`: inline data and the SGE list of one WR.
    pub inline: Vec<u8>,
    pub sges: Vec<Sge>,
    pub error: Option<Errno>,
}

pub struct RecvQueue {
    pub layout: RingLayout,
    pub head: u64,
    /// Receives that may be outstanding (posted and not completed): `max_recv_wr`, or the
    /// SRQ's `max_wr`. The ring may have more slots (a power of two).
    pub max_wr: u32,
    pub slot: Vec<u8>,
    pub sges: Vec<Sge>,
}

#[repr(C)]
pub struct Qp {
    /// `ibv_qp_ex` starts with `ibv_qp`; plain QPs simply leave the `wr_*` table unused.
    pub qpx: ibv_qp_ex,
    /// What newer `ibv_qp_ex` layouts have after v44's members (`wr_flush`).
    pub qpx_tail: ibv_qp_ex_tail,
    pub handle: Handle,
    pub ring: Mapping,
    pub cap: QpCap,
    pub sq_sig_all: bool,
    /// Created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`: `ibv_qp_to_qp_ex` answers.
    pub extended: bool,
    /// A QP of an iWARP device.
    pub iwarp: bool,
    pub sq: Mutex<SendQueue>,
    pub rq: Option<Mutex<RecvQueue>>,
}

/// The immediate error of posting to a QP in RESET (IBA C10-97.2.1 for receives; rxe
/// refuses both queues, librxe from `ibv_qp.state`, as here): EINVAL. On iWARP devices
/// the daemon keeps the state (the connection moves the QP, not `ibv_modify_qp`), as
/// the kernel's siw does.
pub fn refuse_in_reset(q: &Qp) -> VResult<()> {
    if !q.iwarp && q.qpx.qp_base.state as u32 == qp_state::RESET {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

pub fn qp_of<'a>(p: *mut ibv_qp) -> VResult<&'a Qp> {
    // SAFETY: every ibv_qp the shim returns is the first field of a Qp.
    unsafe { obj(p) }
}

#[repr(C)]
pub struct Srq {
    pub srq: ibv_srq,
    pub handle: Handle,
    pub ring: Mapping,
    pub layout: RingLayout,
    pub max_sge: u32,
    /// The producer side: private index and scratch space.
    pub rq: Mutex<RecvQueue>,
    /// An XRC SRQ's number (`ibv_get_srq_num`); `None` for a basic SRQ.
    pub srqn: Option<u32>,
}

pub fn srq_of<'a>(p: *mut ibv_srq) -> VResult<&'a Srq> {
    // SAFETY: every ibv_srq the shim returns is the first field of an Srq.
    unsafe { obj(p) }
}

/// The WQE being built by the `ibv_wr_*` API between its opcode call and the next
/// opcode / `wr_complete`: the fields of one send WR, filled by its setters.
#[derive(Default)]
pub struct PendingWqe {
    pub wr_id: u64,
    pub opcode: u8,
    pub send_flags: u32,
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub remote_qpn: u32,
    pub compare_add: u64,
    pub swap: u64,
    pub ah: u32,
    pub remote_qkey: u32,
    pub sges: Vec<Sge>,
    pub inline: Option<Vec<u8>>,
}

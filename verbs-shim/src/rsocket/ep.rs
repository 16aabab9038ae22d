//! The verbs under an rsocket: buffers, memory regions, the CQ with its completion
//! channel, and work-request posting, all through the shim's own functions (the ops
//! table rdma-core's inline `ibv_post_send` would call, `ibv_reg_mr`, `rdma_create_qp`).
use crate::abi::*;
use crate::cm::abi::rdma_cm_id;
use crate::cm::request::verbs_ptr;
use crate::ffi::{Errno, VResult};
use core::ffi::{c_int, c_void};

/// `IBV_ACCESS_LOCAL_WRITE` / `IBV_ACCESS_REMOTE_WRITE`.
const ACCESS_LOCAL_WRITE: c_int = 1;
const ACCESS_REMOTE_WRITE: c_int = 2;
/// `IBV_WC_SUCCESS`, `IBV_WC_WITH_IMM`.
pub const WC_SUCCESS: c_int = 0;
pub const WC_WITH_IMM: u32 = 1 << 1;

/// Zeroed anonymous memory that stays at one address (the peer writes into it through
/// the NIC), unmapped on drop.
pub struct RawBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; access is serialised by the
// rsocket's lock (the NIC's writes are the point of it).
unsafe impl Send for RawBuf {}

impl RawBuf {
    pub fn new(len: usize) -> VResult<RawBuf> {
        let len = len.max(1);
        // SAFETY: a fresh private anonymous mapping; checked below.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Errno::ENOMEM);
        }
        Ok(RawBuf {
            ptr: p as *mut u8,
            len,
        })
    }

    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `dst.len()` bytes from `off`; false (nothing copied) when out of bounds.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        if off.checked_add(dst.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: in bounds of the mapping (checked above); volatile-free plain copy of
        // bytes the NIC finished writing before its completion was polled.
        unsafe { core::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Copies `src` to `off`; false when out of bounds.
    pub fn write(&self, off: usize, src: &[u8]) -> bool {
        if off.checked_add(src.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: in bounds of the mapping (checked above).
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) };
        true
    }

    /// Reads 16 bytes at `off` with volatile loads (the peer may write them through the
    /// NIC at any time); zeroes when out of bounds.
    pub fn read16(&self, off: usize) -> [u8; 16] {
        let mut out = [0u8; 16];
        if off.checked_add(16).is_none_or(|end| end > self.len) {
            return out;
        }
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: in bounds (checked above).
            *b = unsafe { core::ptr::read_volatile(self.ptr.add(off + i)) };
        }
        out
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new, unmapped once.
        unsafe { libc::munmap(self.ptr as *mut c_void, self.len) };
    }
}

/// A memory region over a [`RawBuf`], deregistered on drop.
pub struct Mr(*mut ibv_mr);

// SAFETY: an MR handle of this library, used under the rsocket's lock.
unsafe impl Send for Mr {}

impl Mr {
    pub fn register(pd: *mut ibv_pd, buf: &RawBuf, remote_write: bool) -> VResult<Mr> {
        let access = ACCESS_LOCAL_WRITE | if remote_write { ACCESS_REMOTE_WRITE } else { 0 };
        let p = crate::verbs::ibv_reg_mr(pd, buf.ptr as *mut c_void, buf.len, access);
        verbs_ptr(p).map(Mr)
    }

    /// Registers caller memory (`riomap`).
    pub fn register_raw(pd: *mut ibv_pd, addr: *mut c_void, len: usize) -> VResult<Mr> {
        let p = crate::verbs::ibv_reg_mr(pd, addr, len, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE);
        verbs_ptr(p).map(Mr)
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: a live MR returned by ibv_reg_mr.
        unsafe { (*self.0).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.0).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        crate::verbs::ibv_dereg_mr(self.0);
    }
}

fn ops(ctx: *mut ibv_context) -> VResult<&'static ibv_context_ops> {
    // SAFETY: the context of a live QP/CQ of this library, alive as long as the device.
    unsafe { ctx.as_ref() }.map(|c| &c.ops).ok_or(Errno::EINVAL)
}

/// `ibv_post_send` of one WR.
pub fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> VResult<()> {
    // SAFETY: qp is the rsocket's live QP.
    let f = ops(unsafe { (*qp).context })?
        .post_send
        .ok_or(Errno::ENOSYS)?;
    let mut bad = core::ptr::null_mut();
    // SAFETY: a valid QP, a WR list of one, an out-pointer.
    match unsafe { f(qp, wr, &mut bad) } {
        0 => Ok(()),
        e => Err(Errno(e)),
    }
}

/// `ibv_post_recv` of one WR.
pub fn post_recv(qp: *mut ibv_qp, wr: &mut ibv_recv_wr) -> VResult<()> {
    // SAFETY: as post_send.
    let f = ops(unsafe { (*qp).context })?
        .post_recv
        .ok_or(Errno::ENOSYS)?;
    let mut bad = core::ptr::null_mut();
    // SAFETY: a valid QP, a WR list of one, an out-pointer.
    match unsafe { f(qp, wr, &mut bad) } {
        0 => Ok(()),
        e => Err(Errno(e)),
    }
}

/// `ibv_poll_cq` for one completion.
pub fn poll_one(cq: *mut ibv_cq) -> VResult<Option<ibv_wc>> {
    // SAFETY: cq is the rsocket's live CQ.
    let f = ops(unsafe { (*cq).context })?
        .poll_cq
        .ok_or(Errno::ENOSYS)?;
    // SAFETY: plain old data.
    let mut wc: ibv_wc = unsafe { core::mem::zeroed() };
    // SAFETY: room for one completion.
    match unsafe { f(cq, 1, &mut wc) } {
        1 => Ok(Some(wc)),
        0 => Ok(None),
        e => Err(Errno(-e)),
    }
}

/// `ibv_req_notify_cq(cq, 0)`.
pub fn req_notify(cq: *mut ibv_cq) -> VResult<()> {
    // SAFETY: cq is the rsocket's live CQ.
    let f = ops(unsafe { (*cq).context })?
        .req_notify_cq
        .ok_or(Errno::ENOSYS)?;
    // SAFETY: a valid CQ.
    match unsafe { f(cq, 0) } {
        0 => Ok(()),
        e => Err(Errno(e)),
    }
}

/// Consumes the completion events waiting on the CQ's channel (non-blocking) and
/// acknowledges them; true when there was at least one.
pub fn drain_cq_events(id: *mut rdma_cm_id) -> bool {
    // SAFETY: a live id of this rsocket.
    let (ch, cq) = unsafe { ((*id).recv_cq_channel, (*id).recv_cq) };
    if ch.is_null() {
        return false;
    }
    let mut got = false;
    loop {
        let mut c = core::ptr::null_mut();
        let mut ctx = core::ptr::null_mut();
        if crate::cq::ibv_get_cq_event(ch, &mut c, &mut ctx) != 0 {
            break;
        }
        crate::cq::ibv_ack_cq_events(cq, 1);
        got = true;
    }
    got
}

pub fn set_nonblock(fd: c_int, on: bool) {
    // SAFETY: fcntl on a descriptor this rsocket owns.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            let nf = if on {
                fl | libc::O_NONBLOCK
            } else {
                fl & !libc::O_NONBLOCK
            };
            libc::fcntl(fd, libc::F_SETFL, nf);
        }
    }
}

/// Creates the completion channel (non-blocking: waits go through `poll`), the CQ and
/// the QP of an rsocket (`rs_create_cq` + `rs_create_ep`'s or `ds_create_qp`'s QP):
/// `IBV_QPT_RC` with two send SGEs for a stream, `IBV_QPT_UD` with two receive SGEs
/// (GRH, then data) for a datagram socket. Returns the inline size the QP granted.
pub fn create_qp(
    id: *mut rdma_cm_id,
    qp_type: c_int,
    sq: u16,
    rq: u16,
    inline: u32,
) -> VResult<u32> {
    let (send_sge, recv_sge) = if qp_type == IBV_QPT_UD {
        (1, 2)
    } else {
        (2, 1)
    };
    // SAFETY: a live id with a device (after route resolution or from a request).
    let c = unsafe { &mut *id };
    let ch = verbs_ptr(crate::cq::ibv_create_comp_channel(c.verbs))?;
    // SAFETY: the channel just created.
    set_nonblock(unsafe { (*ch).fd }, true);
    let cq = crate::cq::ibv_create_cq(
        c.verbs,
        c_int::from(sq) + c_int::from(rq),
        id as *mut c_void,
        ch,
        0,
    );
    let cq = match verbs_ptr(cq) {
        Ok(cq) => cq,
        Err(e) => {
            crate::cq::ibv_destroy_comp_channel(ch);
            return Err(e);
        }
    };
    c.recv_cq_channel = ch;
    c.send_cq_channel = ch;
    c.recv_cq = cq;
    c.send_cq = cq;
    req_notify(cq)?;
    let mut attr = ibv_qp_init_attr {
        qp_context: core::ptr::null_mut(),
        send_cq: cq,
        recv_cq: cq,
        srq: core::ptr::null_mut(),
        cap: ibv_qp_cap {
            max_send_wr: u32::from(sq),
            max_recv_wr: u32::from(rq),
            max_send_sge: send_sge,
            max_recv_sge: recv_sge,
            max_inline_data: inline,
        },
        qp_type,
        sq_sig_all: 1,
    };
    if crate::cm::qp::rdma_create_qp(id, core::ptr::null_mut(), &mut attr) != 0 {
        return Err(Errno::last());
    }
    Ok(attr.cap.max_inline_data)
}

/// A synchronous RDMA CM id (its own event channel) in port space `ps`
/// (`RDMA_PS_TCP` for a stream, `RDMA_PS_UDP` for a datagram QP).
pub fn create_id(ps: u32) -> VResult<*mut rdma_cm_id> {
    let mut id = core::ptr::null_mut();
    let r = crate::cm::id::rdma_create_id(
        core::ptr::null_mut(),
        &mut id,
        core::ptr::null_mut(),
        ps as c_int,
    );
    if r == 0 {
        Ok(id)
    } else {
        Err(Errno::last())
    }
}

/// Destroys what [`create_qp`] made (and the id itself).
pub fn destroy(id: *mut rdma_cm_id) {
    if id.is_null() {
        return;
    }
    // SAFETY: a live id owned by this rsocket, given up here.
    let c = unsafe { &mut *id };
    if !c.qp.is_null() {
        crate::cm::qp::rdma_destroy_qp(id);
    }
    if !c.recv_cq.is_null() {
        crate::cq::ibv_destroy_cq(c.recv_cq);
        c.recv_cq = core::ptr::null_mut();
        c.send_cq = core::ptr::null_mut();
    }
    if !c.recv_cq_channel.is_null() {
        crate::cq::ibv_destroy_comp_channel(c.recv_cq_channel);
        c.recv_cq_channel = core::ptr::null_mut();
        c.send_cq_channel = core::ptr::null_mut();
    }
    crate::cm::id::rdma_destroy_id(id);
}

/// The device's transport (`IBV_TRANSPORT_IB` or `IBV_TRANSPORT_IWARP`).
pub fn is_iwarp(id: *mut rdma_cm_id) -> bool {
    // SAFETY: a live id bound to a device.
    let verbs = unsafe { (*id).verbs };
    crate::cm::device::transport(verbs) == IBV_TRANSPORT_IWARP
}

/// An all-zero send WR (plain old data with raw pointers).
pub fn send_wr() -> ibv_send_wr {
    // SAFETY: every field of ibv_send_wr is valid when zero (NULL pointers, 0 values).
    unsafe { core::mem::zeroed() }
}

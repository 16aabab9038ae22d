//! The `ibv_wr_*` send API of `struct ibv_qp_ex` (what perftest uses by default):
//! `wr_start`, one opcode call per WQE followed by its address/data setters, then
//! `wr_complete` (publish) or `wr_abort` (drop). WQEs are laid out as ring slots as
//! they are built and reach the ring only at `wr_complete`.
use crate::abi::*;
use crate::datapath::{publish_batch, queue_send};
use crate::ffi::{self, Errno};
use crate::objects::{obj, qp_of, refuse_in_reset, Ah, Mw, PendingWqe, SendQueue};
use core::ffi::{c_int, c_void};
use wire::client::slot::{SendData, SendWqeRepr, Sge, SgeList};
use wire::client::verbs::wr_opcode as op;

/// `ibv_qp_create_send_ops_flags` the shim implements: everything but TSO, and on iWARP
/// devices neither FLUSH nor ATOMIC WRITE (siw has neither; RFC 5040 names no such
/// message).
pub fn supported_send_ops(iwarp: bool) -> u64 {
    use send_ops::*;
    let all = RDMA_WRITE
        | RDMA_WRITE_WITH_IMM
        | SEND
        | SEND_WITH_IMM
        | RDMA_READ
        | ATOMIC_CMP_AND_SWP
        | ATOMIC_FETCH_AND_ADD
        | LOCAL_INV
        | BIND_MW
        | SEND_WITH_INV
        | FLUSH
        | ATOMIC_WRITE;
    if iwarp {
        all & !(FLUSH | ATOMIC_WRITE)
    } else {
        all
    }
}

/// `enum ibv_qp_create_send_ops_flags` (rdma-core v59's `verbs.h`).
mod send_ops {
    pub const RDMA_WRITE: u64 = 1 << 0;
    pub const RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    pub const SEND: u64 = 1 << 2;
    pub const SEND_WITH_IMM: u64 = 1 << 3;
    pub const RDMA_READ: u64 = 1 << 4;
    pub const ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    pub const ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    pub const LOCAL_INV: u64 = 1 << 7;
    pub const BIND_MW: u64 = 1 << 8;
    pub const SEND_WITH_INV: u64 = 1 << 9;
    pub const FLUSH: u64 = 1 << 11;
    pub const ATOMIC_WRITE: u64 = 1 << 12;
}

/// The members after v44's `ibv_qp_ex` ([`ibv_qp_ex_tail`]).
pub fn qp_ex_tail() -> ibv_qp_ex_tail {
    ibv_qp_ex_tail {
        wr_flush: Some(wr_flush),
    }
}

/// A fresh `ibv_qp_ex` with the function table filled (the base QP is set by the caller).
pub fn qp_ex_table() -> ibv_qp_ex {
    ibv_qp_ex {
        // SAFETY: all-zero is valid for ibv_qp (pointers NULL, glibc mutex/cond initializers).
        qp_base: unsafe { core::mem::zeroed() },
        comp_mask: 0,
        wr_id: 0,
        wr_flags: 0,
        wr_atomic_cmp_swp: Some(wr_atomic_cmp_swp),
        wr_atomic_fetch_add: Some(wr_atomic_fetch_add),
        wr_bind_mw: Some(wr_bind_mw),
        wr_local_inv: Some(wr_local_inv),
        wr_rdma_read: Some(wr_rdma_read),
        wr_rdma_write: Some(wr_rdma_write),
        wr_rdma_write_imm: Some(wr_rdma_write_imm),
        wr_send: Some(wr_send),
        wr_send_imm: Some(wr_send_imm),
        wr_send_inv: Some(wr_send_inv),
        wr_send_tso: Some(wr_send_tso),
        wr_set_ud_addr: Some(wr_set_ud_addr),
        wr_set_xrc_srqn: Some(wr_set_xrc_srqn),
        wr_set_inline_data: Some(wr_set_inline_data),
        wr_set_inline_data_list: Some(wr_set_inline_data_list),
        wr_set_sge: Some(wr_set_sge),
        wr_set_sge_list: Some(wr_set_sge_list),
        wr_start: Some(wr_start),
        wr_complete: Some(wr_complete),
        wr_abort: Some(wr_abort),
        wr_atomic_write: Some(wr_atomic_write),
    }
}

/// Runs `f` on the QP's send queue; errors are remembered for `wr_complete`.
fn with_sq(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut SendQueue, &ibv_qp_ex)) {
    ffi::value((), || {
        let Ok(q) = qp_of(qp as *mut ibv_qp) else {
            return;
        };
        let mut sq = q.sq.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut sq, &q.qpx);
    })
}

fn flush(sq: &mut SendQueue, max_inline: u32) {
    let Some(p) = sq.pending.take() else { return };
    let data = match &p.inline {
        Some(d) if d.len() > max_inline as usize => {
            sq.error.get_or_insert(Errno::EINVAL);
            return;
        }
        Some(d) => SendData::Inline(d),
        None => SendData::Sges(SgeList::Slice(&p.sges)),
    };
    let repr = SendWqeRepr {
        wr_id: p.wr_id,
        opcode: p.opcode,
        send_flags: p.send_flags,
        imm_data: p.imm_data,
        remote_addr: p.remote_addr,
        rkey: p.rkey,
        remote_qpn: p.remote_qpn,
        compare_add: p.compare_add,
        swap: p.swap,
        ah: p.ah,
        remote_qkey: p.remote_qkey,
        data,
    };
    if let Err(e) = queue_send(sq, &repr) {
        sq.error.get_or_insert(e);
    }
}

fn max_inline(qpx: &ibv_qp_ex) -> u32 {
    qp_of(qpx as *const ibv_qp_ex as *mut ibv_qp).map_or(0, |q| q.cap.max_inline_data)
}

/// Starts a new WQE of `opcode`, closing the previous one.
fn begin(qp: *mut ibv_qp_ex, opcode: u8, fill: impl FnOnce(&mut PendingWqe)) {
    with_sq(qp, |sq, qpx| {
        flush(sq, max_inline(qpx));
        let mut p = PendingWqe {
            wr_id: qpx.wr_id,
            opcode,
            send_flags: qpx.wr_flags,
            ..Default::default()
        };
        fill(&mut p);
        sq.pending = Some(p);
    })
}

fn modify(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut PendingWqe)) {
    with_sq(qp, |sq, _| match sq.pending.as_mut() {
        Some(p) => f(p),
        None => {
            sq.error.get_or_insert(Errno::EINVAL);
        }
    })
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    with_sq(qp, |sq, _| {
        sq.pending = None;
        sq.batch.clear();
        sq.error = None;
    })
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    ffi::errno(|| {
        let q = qp_of(qp as *mut ibv_qp)?;
        let mut guard = q.sq.lock().unwrap_or_else(|p| p.into_inner());
        let sq = &mut *guard;
        flush(sq, q.cap.max_inline_data);
        if let Err(e) = refuse_in_reset(q) {
            sq.error = None;
            sq.batch.clear();
            return Err(e);
        }
        if let Some(e) = sq.error.take() {
            sq.batch.clear();
            return Err(e);
        }
        publish_batch(q, sq)
    })
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    with_sq(qp, |sq, _| {
        sq.pending = None;
        sq.batch.clear();
        sq.error = None;
    })
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    begin(qp, op::ATOMIC_CMP_AND_SWP, |p| {
        p.rkey = rkey;
        p.remote_addr = addr;
        p.compare_add = compare;
        p.swap = swap;
    })
}

unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    begin(qp, op::ATOMIC_FETCH_AND_ADD, |p| {
        p.rkey = rkey;
        p.remote_addr = addr;
        p.compare_add = add;
    })
}

unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    // SAFETY: an MW this shim allocated and a bind description the caller owns.
    let fields = unsafe { obj::<Mw, _>(mw).map(|m| (m.mw.rkey, info.as_ref())) };
    match fields {
        Ok((mw_rkey, Some(info))) => {
            let lkey = if info.mr.is_null() {
                0
            } else {
                // SAFETY: an MR this shim registered.
                unsafe { (*info.mr).lkey }
            };
            let (addr, length, access) = (info.addr, info.length, info.mw_access_flags);
            begin(qp, op::BIND_MW, |p| {
                p.remote_addr = addr;
                p.compare_add = length;
                p.rkey = mw_rkey;
                p.swap = u64::from(lkey);
                p.imm_data = rkey;
                p.remote_qpn = access;
            })
        }
        _ => with_sq(qp, |sq, _| {
            sq.error.get_or_insert(Errno::EINVAL);
        }),
    }
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    begin(qp, op::LOCAL_INV, |p| p.imm_data = rkey)
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    begin(qp, op::RDMA_READ, |p| {
        p.rkey = rkey;
        p.remote_addr = addr;
    })
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    begin(qp, op::RDMA_WRITE, |p| {
        p.rkey = rkey;
        p.remote_addr = addr;
    })
}

unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    begin(qp, op::RDMA_WRITE_WITH_IMM, |p| {
        p.rkey = rkey;
        p.remote_addr = addr;
        p.imm_data = imm;
    })
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    begin(qp, op::SEND, |_| {})
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
    begin(qp, op::SEND_WITH_IMM, |p| p.imm_data = imm)
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    begin(qp, op::SEND_WITH_INV, |p| p.imm_data = rkey)
}

unsafe extern "C" fn wr_send_tso(qp: *mut ibv_qp_ex, _hdr: *mut c_void, _hdr_sz: u16, _mss: u16) {
    with_sq(qp, |sq, _| {
        sq.error.get_or_insert(Errno::EOPNOTSUPP);
    })
}

/// `ibv_wr_atomic_write`: the 8 bytes at `atomic_wr` travel in `compare_add`, read as a
/// little-endian `u64` so that the wire carries them in the application's byte order.
unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    atomic_wr: *const c_void,
) {
    if atomic_wr.is_null() {
        return with_sq(qp, |sq, _| {
            sq.error.get_or_insert(Errno::EINVAL);
        });
    }
    // SAFETY: the application passes 8 readable bytes (verbs.h: `const void *atomic_wr`,
    // "8 bytes"); they need not be aligned.
    let value = unsafe { core::ptr::read_unaligned(atomic_wr as *const [u8; 8]) };
    begin(qp, op::ATOMIC_WRITE, |p| {
        p.rkey = rkey;
        p.remote_addr = addr;
        p.compare_add = u64::from_le_bytes(value);
    })
}

/// `ibv_wr_flush`: the length travels in `compare_add`, the placement type and the
/// selectivity level in `swap` (`type | level << 8`; `wire::client::slot`).
unsafe extern "C" fn wr_flush(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    len: usize,
    ptype: u8,
    level: u8,
) {
    begin(qp, op::FLUSH, |p| {
        p.rkey = rkey;
        p.remote_addr = addr;
        p.compare_add = len as u64;
        p.swap = u64::from(ptype) | u64::from(level) << 8;
    })
}

unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    // SAFETY: an AH this shim returned (or NULL, rejected).
    let handle = unsafe { obj::<Ah, _>(ah) }.map(|a| a.handle.0);
    match handle {
        Ok(h) => modify(qp, |p| {
            p.ah = h;
            p.remote_qpn = remote_qpn;
            p.remote_qkey = remote_qkey;
        }),
        Err(e) => with_sq(qp, |sq, _| {
            sq.error.get_or_insert(e);
        }),
    }
}

/// The remote XRC SRQ of the WR being built, in the slot's remote_qpn as `ibv_post_send`
/// puts it.
unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, srqn: u32) {
    modify(qp, |p| p.remote_qpn = srqn)
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let data = if length == 0 {
        Vec::new()
    } else {
        // SAFETY: the application passes `length` readable bytes at addr; inline data
        // is copied at post time.
        unsafe { core::slice::from_raw_parts(addr as *const u8, length) }.to_vec()
    };
    modify(qp, |p| p.inline = Some(data))
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    list: *const ibv_data_buf,
) {
    let mut data = Vec::new();
    if !list.is_null() {
        // SAFETY: num_buf valid ibv_data_buf entries at list.
        for b in unsafe { core::slice::from_raw_parts(list, num_buf) } {
            if b.length > 0 {
                // SAFETY: each buffer has `length` readable bytes.
                data.extend_from_slice(unsafe {
                    core::slice::from_raw_parts(b.addr as *const u8, b.length)
                });
            }
        }
    }
    modify(qp, |p| p.inline = Some(data))
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    modify(qp, |p| {
        p.sges.clear();
        p.sges.push(Sge { addr, length, lkey });
    })
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, list: *const ibv_sge) {
    let sges: Vec<Sge> = if list.is_null() {
        Vec::new()
    } else {
        // SAFETY: num_sge valid SGEs at list.
        unsafe { core::slice::from_raw_parts(list, num_sge) }
            .iter()
            .map(|s| Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            })
            .collect()
    };
    modify(qp, |p| p.sges = sges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_flush_sits_where_newer_headers_put_it() {
        // v57+ `struct ibv_qp_ex` is v44's followed by `wr_flush`: all members are
        // pointers, so it starts at v44's size, where the shim's tail is.
        assert_eq!(
            core::mem::offset_of!(crate::objects::Qp, qpx_tail),
            core::mem::size_of::<ibv_qp_ex>()
        );
        assert_eq!(core::mem::offset_of!(ibv_qp_ex_tail, wr_flush), 0);
    }

    #[test]
    fn iwarp_devices_take_neither_flush_nor_atomic_write() {
        let both = send_ops::FLUSH | send_ops::ATOMIC_WRITE;
        assert_eq!(supported_send_ops(false) & both, both);
        assert_eq!(supported_send_ops(true) & both, 0);
        assert_eq!(supported_send_ops(true) | both, supported_send_ops(false));
    }
}

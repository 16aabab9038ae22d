//! The `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` /
//! `ibv_wc_read_*` API over the same CQ ring as `ibv_poll_cq`.
use crate::abi::*;
use crate::ffi::{self, Errno, VResult};
use crate::objects::{cq_of, Cq};
use core::ffi::{c_int, c_uint};
use wire::client::slot::{Cqe, CqeRepr};
use wire::client::{Consumer, RingView};

/// An `ibv_cq_ex` with the poll table filled (the `ibv_cq` head is set by the caller).
pub fn cq_ex_table() -> ibv_cq_ex {
    ibv_cq_ex {
        context: core::ptr::null_mut(),
        channel: core::ptr::null_mut(),
        cq_context: core::ptr::null_mut(),
        handle: 0,
        cqe: 0,
        // SAFETY: all-zero is the glibc static initializer for both.
        mutex: unsafe { core::mem::zeroed() },
        // SAFETY: as above.
        cond: unsafe { core::mem::zeroed() },
        comp_events_completed: 0,
        async_events_completed: 0,
        comp_mask: 0,
        status: 0,
        wr_id: 0,
        start_poll: Some(start_poll),
        next_poll: Some(next_poll),
        end_poll: Some(end_poll),
        read_opcode: Some(read_opcode),
        read_vendor_err: Some(read_vendor_err),
        read_byte_len: Some(read_byte_len),
        read_imm_data: Some(read_imm_data),
        read_qp_num: Some(read_qp_num),
        read_src_qp: Some(read_src_qp),
        read_wc_flags: Some(read_wc_flags),
        read_slid: Some(read_slid),
        read_sl: Some(read_sl),
        read_dlid_path_bits: Some(read_dlid_path_bits),
        read_completion_ts: None,
        read_cvlan: None,
        read_flow_tag: None,
        read_tm_info: None,
        read_completion_wallclock_ns: None,
    }
}

fn cq_ex_of<'a>(cq: *mut ibv_cq_ex) -> VResult<&'a Cq> {
    cq_of(cq as *mut ibv_cq)
}

/// Takes the next CQE into `current` and publishes `wr_id`/`status` on the CQ.
fn advance(cq: *mut ibv_cq_ex) -> c_int {
    ffi::errno(|| {
        let c = cq_ex_of(cq)?;
        let mut guard = c.poll.lock().unwrap_or_else(|p| p.into_inner());
        let poll = &mut *guard;
        let view = RingView::new(poll.ring.words(), poll.layout).map_err(|_| Errno::EIO)?;
        let mut consumer = Consumer::with_index(view, poll.tail);
        let mut buf = [0u8; 64];
        if !consumer.pop(&mut buf).map_err(|_| Errno::EIO)? {
            crate::datapath::empty_poll(&mut poll.empty);
            return Err(Errno::ENOENT);
        }
        poll.empty = 0;
        poll.tail = consumer.index();
        let e = CqeRepr::parse(&Cqe::new_unchecked(&buf[..])).map_err(|_| Errno::EIO)?;
        poll.current = e;
        // SAFETY: the application-visible fields of this CQ, written as providers do.
        unsafe {
            (*cq).wr_id = e.wr_id;
            (*cq).status = e.status as c_int;
        }
        Ok(())
    })
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: attr is NULL or the caller's ibv_poll_cq_attr.
    if unsafe { attr.as_ref() }.is_some_and(|a| a.comp_mask != 0) {
        return libc::EINVAL;
    }
    advance(cq)
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    advance(cq)
}

unsafe extern "C" fn end_poll(_cq: *mut ibv_cq_ex) {}

fn current<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&CqeRepr) -> T) -> T {
    ffi::value(T::default(), || match cq_ex_of(cq) {
        Ok(c) => f(&c.poll.lock().unwrap_or_else(|p| p.into_inner()).current),
        Err(_) => T::default(),
    })
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> c_int {
    current(cq, |e| e.opcode as c_int)
}
unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |e| e.vendor_err)
}
unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |e| e.byte_len)
}
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |e| e.imm_data)
}
unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |e| e.qp_num)
}
unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |e| e.src_qp)
}
unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    current(cq, |e| e.wc_flags)
}
unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    current(cq, |e| u32::from(e.slid))
}
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    current(cq, |e| e.sl)
}
unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    current(cq, |e| e.dlid_path_bits)
}

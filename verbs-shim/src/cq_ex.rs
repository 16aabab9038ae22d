//! The `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` /
//! `ibv_wc_read_*` API over the same CQ ring as `ibv_poll_cq`, and the clock its
//! completion timestamps count (`ibv_query_rt_values_ex`).
//!
//! The clock, as `ibv_query_device_ex` reports it: `hca_core_clock` 1 000 000 kHz and a
//! 64-bit `completion_timestamp_mask` (wire's `CQE_CLOCK_KHZ`, `CQE_TIMESTAMP_MASK`), so a
//! raw `completion_ts` is `CLOCK_MONOTONIC` nanoseconds, read by the daemon when it wrote
//! the CQE. The wall-clock reader gives `CLOCK_REALTIME` nanoseconds read at the same
//! moment, as a device with real-time timestamps does (mlx5's, where hardware without them
//! converts its raw count through the kernel's clock page instead).
use crate::abi::*;
use crate::ffi::{self, Errno, VResult};
use crate::objects::{cq_of, Cq};
use core::ffi::{c_int, c_uint};
use wire::client::slot::{Cqe, CqeRepr};
use wire::client::{Consumer, RingView};

/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`.
const WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`.
const WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
/// The `wc_flags` that make the daemon stamp the CQ's completions.
pub const TIMESTAMP_WC_FLAGS: u64 =
    WC_EX_WITH_COMPLETION_TIMESTAMP | WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
/// `IBV_VALUES_MASK_RAW_CLOCK`.
const VALUES_MASK_RAW_CLOCK: u32 = 1 << 0;

/// An `ibv_cq_ex` with the poll table filled (the `ibv_cq` head is set by the caller).
/// The timestamp readers are set only when `wc_flags` asked for them, as mlx5 sets its
/// readers (a CQ without timestamps carries zeros there).
pub fn cq_ex_table(wc_flags: u64) -> ibv_cq_ex {
    let asked = |flag: u64| wc_flags & flag != 0;
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
        read_completion_ts: asked(WC_EX_WITH_COMPLETION_TIMESTAMP)
            .then_some(read_completion_ts as unsafe extern "C" fn(_) -> _),
        read_cvlan: None,
        read_flow_tag: None,
        read_tm_info: None,
        read_completion_wallclock_ns: asked(WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
            .then_some(read_completion_wallclock_ns as unsafe extern "C" fn(_) -> _),
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
            crate::backoff::empty_poll(c, &mut poll.empty);
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
unsafe extern "C" fn read_completion_ts(cq: *mut ibv_cq_ex) -> u64 {
    current(cq, |e| e.completion_ts)
}
unsafe extern "C" fn read_completion_wallclock_ns(cq: *mut ibv_cq_ex) -> u64 {
    current(cq, |e| e.completion_wallclock_ns)
}

/// `verbs_context.query_rt_values` (`ibv_query_rt_values_ex`): the raw clock CQE
/// timestamps count, now. As mlx4 and mlx5 answer, the count goes whole into
/// `raw_clock.tv_nsec` with `tv_sec` 0 (pyverbs' suite reads `tv_nsec` alone); at one
/// tick a nanosecond that is also the right `timespec`. A `comp_mask` bit beyond
/// `IBV_VALUES_MASK_RAW_CLOCK` is EINVAL; the answer's `comp_mask` says what was filled.
///
/// # Safety
/// `values` is NULL or a valid `ibv_values_ex` (called through rdma-core's inline).
pub unsafe extern "C" fn vctx_query_rt_values(
    context: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    ffi::errno(|| {
        crate::context::Context::from_ibv(context)?;
        // SAFETY: the caller's ibv_values_ex, checked for NULL.
        let v = unsafe { values.as_mut() }.ok_or(Errno::EINVAL)?;
        if v.comp_mask & !VALUES_MASK_RAW_CLOCK != 0 {
            return Err(Errno::EINVAL);
        }
        if v.comp_mask & VALUES_MASK_RAW_CLOCK != 0 {
            let mut now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes one timespec, which `now` is.
            if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) } != 0 {
                return Err(Errno::EIO);
            }
            v.raw_clock = libc::timespec {
                tv_sec: 0,
                tv_nsec: now.tv_sec * 1_000_000_000 + now.tv_nsec,
            };
        }
        Ok(())
    })
}

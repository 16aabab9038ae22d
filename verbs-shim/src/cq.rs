//! Completion channels and completion queues, plain and extended (`ibv_poll_cq` itself
//! is in [`crate::datapath`], the `ibv_start_poll` API in [`crate::cq_ex`]).
use crate::abi::*;
use crate::async_event;
use crate::context::{Context, EventObject};
use crate::cq_ex::{cq_ex_table, TIMESTAMP_WC_FLAGS};
use crate::ffi::{self, Errno, VResult};
use crate::mmap::Mapping;
use crate::objects::{cq_of, obj, Cq, CqPoll};
use core::ffi::{c_int, c_uint, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;
use wire::client::{Handle, ReplyBody, RequestBody};

fn ctx_of<'a>(p: *mut ibv_context) -> VResult<&'a Context> {
    Context::from_ibv(p)
}

// ---- completion channels ---------------------------------------------------------------------

#[repr(C)]
pub struct CompChannel {
    pub ch: ibv_comp_channel,
    pub handle: Handle,
    pub read_end: OwnedFd,
}

#[no_mangle]
pub extern "C" fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel {
    ffi::ptr(|| {
        let ctx = ctx_of(context)?;
        let mut fds = [0 as c_int; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(Errno::last());
        }
        // SAFETY: both descriptors are fresh and ours.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let (reply, _) = ctx.session.call(
            RequestBody::CreateCompChannel { ctx: ctx.handle },
            &[write_end.as_raw_fd()],
        )?;
        drop(write_end);
        let ReplyBody::CompChannel { handle } = reply else {
            return Err(Errno::EIO);
        };
        let fd = read_end.as_raw_fd();
        let ch = Box::new(CompChannel {
            ch: ibv_comp_channel {
                context,
                fd,
                refcnt: 0,
            },
            handle,
            read_end,
        });
        Ok(Box::into_raw(ch) as *mut ibv_comp_channel)
    })
}

#[no_mangle]
pub extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    ffi::errno(|| {
        // SAFETY: every ibv_comp_channel the shim returns is the first field of a CompChannel.
        let c: &CompChannel = unsafe { obj(channel)? };
        if c.ch.refcnt != 0 {
            return Err(Errno(libc::EBUSY));
        }
        ctx_of(c.ch.context)?.call(RequestBody::DestroyCompChannel { channel: c.handle })?;
        // SAFETY: boxed in ibv_create_comp_channel.
        drop(unsafe { Box::from_raw(channel as *mut CompChannel) });
        Ok(())
    })
}

// ---- completion queues ------------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    ffi::ptr(|| {
        let cqe = u32::try_from(cqe).map_err(|_| Errno::EINVAL)?;
        let comp_vector = u32::try_from(comp_vector).map_err(|_| Errno::EINVAL)?;
        create_cq(context, cqe, cq_context, channel, comp_vector, 0).map(|c| c as *mut ibv_cq)
    })
}

/// Creates a CQ (both `ibv_create_cq` and `ibv_create_cq_ex`, whose `wc_flags` were
/// checked against [`SUPPORTED_WC_FLAGS`]).
fn create_cq(
    context: *mut ibv_context,
    cqe: u32,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: u32,
    wc_flags: u64,
) -> VResult<*mut Cq> {
    let ctx = ctx_of(context)?;
    let ch = if channel.is_null() {
        None
    } else {
        // SAFETY: a non-NULL channel is one this shim returned.
        Some(unsafe { obj::<CompChannel, _>(channel)? })
    };
    let (reply, fds) = ctx.session.call(
        RequestBody::CreateCq {
            ctx: ctx.handle,
            cqe,
            channel: ch.map(|c| c.handle),
            comp_vector,
            timestamps: wc_flags & TIMESTAMP_WC_FLAGS != 0,
        },
        &[],
    )?;
    let ReplyBody::Cq { handle, cqe, ring } = reply else {
        return Err(Errno::EIO);
    };
    let fd = fds.into_iter().next().ok_or(Errno::EIO)?;
    let map = Mapping::map(&fd, ring.end() as usize)?;
    let tail = wire::client::RingView::new(map.words(), ring)
        .map_err(|_| Errno::EIO)?
        .consumer_index();
    let mut cqx = cq_ex_table(wc_flags);
    cqx.context = context;
    cqx.channel = channel;
    cqx.cq_context = cq_context;
    cqx.handle = handle.0;
    cqx.cqe = cqe as c_int;
    let cq = Box::into_raw(Box::new(Cq {
        cq: cqx,
        handle,
        poll: Mutex::new(CqPoll {
            ring: map,
            layout: ring,
            tail,
            current: Default::default(),
            empty: 0,
        }),
    }));
    if let Some(c) = ch {
        // SAFETY: refcnt is only touched under the application's own serialization,
        // as in rdma-core (which uses the context mutex).
        unsafe { (*(c as *const CompChannel as *mut CompChannel)).ch.refcnt += 1 };
    }
    ctx.objects
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .cqs
        .insert(handle.0, cq as usize);
    Ok(cq)
}

/// `IBV_WC_STANDARD_FLAGS` (the `ibv_wc` fields) and the two timestamps, which the daemon
/// writes into each CQE (wire's `CqeRepr::completion_ts`); CVLAN (raw packet QPs), flow
/// tag (flow steering) and tag matching are not produced: EOPNOTSUPP, as rdma-core's
/// providers answer for what their device lacks.
const SUPPORTED_WC_FLAGS: u64 = 0x7f | TIMESTAMP_WC_FLAGS;
const CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`: a hint, honoured by taking the lock anyway.
const CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1 << 0;

/// `verbs_context.create_cq_ex`.
///
/// # Safety
/// `context` is a context this library opened; `attr` is NULL or a valid
/// `ibv_cq_init_attr_ex` (called through rdma-core's inline `ibv_create_cq_ex`).
pub unsafe extern "C" fn vctx_create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    ffi::ptr(|| {
        let a = ffi::nonnull(attr)?;
        if a.wc_flags & !SUPPORTED_WC_FLAGS != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & !CQ_INIT_ATTR_MASK_FLAGS != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & CQ_INIT_ATTR_MASK_FLAGS != 0
            && a.flags & !CREATE_CQ_ATTR_SINGLE_THREADED != 0
        {
            return Err(Errno::EOPNOTSUPP);
        }
        create_cq(
            context,
            a.cqe,
            a.cq_context,
            a.channel,
            a.comp_vector,
            a.wc_flags,
        )
        .map(|c| c as *mut ibv_cq_ex)
    })
}

#[no_mangle]
pub extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    ffi::errno(|| {
        let c = cq_of(cq)?;
        let ctx = ctx_of(c.cq.context)?;
        ctx.call(RequestBody::DestroyCq { cq: c.handle })?;
        // SAFETY: cq is the live CQ with this handle; it is freed only below.
        unsafe { async_event::retire(ctx, EventObject::Cq, c.handle.0, cq as *mut c_void) };
        if !c.cq.channel.is_null() {
            // SAFETY: the channel outlives its CQs (destroy_comp_channel refuses while used).
            unsafe { (*c.cq.channel).refcnt -= 1 };
        }
        // SAFETY: boxed in ibv_create_cq; the daemon released it.
        drop(unsafe { Box::from_raw(cq as *mut Cq) });
        Ok(())
    })
}

/// `ibv_resize_cq`, as rdma-core's rxe provider does it: the CQ's lock is held across
/// the request, so nothing is polled from the old ring while the daemon copies what is
/// left of it into the new one (see the daemon's `queues::resize_cq`); the new ring
/// replaces the old under the same lock, its consumer index at 0, and `cqe` is updated.
#[no_mangle]
pub extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    ffi::errno(|| {
        let c = cq_of(cq)?;
        let cqe = u32::try_from(cqe).map_err(|_| Errno::EINVAL)?;
        let ctx = ctx_of(c.cq.context)?;
        let mut poll = c.poll.lock().unwrap_or_else(|p| p.into_inner());
        let (reply, fds) = ctx
            .session
            .call(RequestBody::ResizeCq { cq: c.handle, cqe }, &[])?;
        let ReplyBody::Cq {
            cqe, ring: layout, ..
        } = reply
        else {
            return Err(Errno::EIO);
        };
        // The daemon writes only to the new ring from now on: without it this CQ is
        // dead, as an rxe CQ whose new queue failed to map.
        let fd = fds.into_iter().next().ok_or(Errno::EIO)?;
        let map = Mapping::map(&fd, layout.end() as usize)?;
        let tail = wire::client::RingView::new(map.words(), layout)
            .map_err(|_| Errno::EIO)?
            .consumer_index();
        poll.ring = map;
        poll.layout = layout;
        poll.tail = tail;
        poll.empty = 0;
        // SAFETY: `cq` is this live CQ; its `cqe` is written under the CQ's lock, as
        // rdma-core's ibv_cmd_resize_cq does.
        unsafe { (*cq).cqe = cqe as c_int };
        Ok(())
    })
}

/// Removes QP `qpn`'s completions not yet polled from `cq`, under the CQ's lock, after
/// the QP moved to RESET: a reset QP starts afresh, as mlx4's and mlx5's providers make
/// it (`mlx5_cq_clean`). rxe leaves them, and a program that resets a QP after an error
/// then polls the old flushes as new work's (rdma-core's `test_mr_rereg_pd`).
pub fn clean_cq(cq: *mut ibv_cq, qpn: u32) {
    let Ok(c) = cq_of(cq) else {
        return;
    };
    let mut poll = c.poll.lock().unwrap_or_else(|p| p.into_inner());
    let Ok(view) = wire::client::RingView::new(poll.ring.words(), poll.layout) else {
        return;
    };
    let mut consumer = wire::client::Consumer::with_index(view, poll.tail);
    let mut buf = [0u8; wire::client::slot::CQE_LEN];
    let of_qp = |slot: &[u8]| {
        let cqe = wire::client::slot::Cqe::new_unchecked(slot);
        wire::client::slot::CqeRepr::parse(&cqe).is_ok_and(|e| e.qp_num == qpn)
    };
    if consumer.discard(&mut buf, of_qp).is_ok() {
        poll.tail = consumer.index();
    }
}

#[no_mangle]
pub extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    ffi::minus_one(|| {
        // SAFETY: a channel this shim returned.
        let ch: &CompChannel = unsafe { obj(channel)? };
        let mut rec = [0u8; 8];
        // SAFETY: reading 8 bytes into a live buffer.
        let n = unsafe { libc::read(ch.ch.fd, rec.as_mut_ptr() as *mut c_void, 8) };
        if n != 8 {
            return Err(if n < 0 { Errno::last() } else { Errno::EIO });
        }
        let rec = wire::client::CompEventRecord::from_bytes(rec).ok_or(Errno::EIO)?;
        let ctx = ctx_of(ch.ch.context)?;
        let objects = ctx.objects.lock().unwrap_or_else(|p| p.into_inner());
        let p = objects.cqs.get(&rec.cq.0).copied().ok_or(Errno::EIO)? as *mut ibv_cq;
        drop(objects);
        *ffi::nonnull(cq)? = p;
        // SAFETY: p is a live CQ registered in this context.
        *ffi::nonnull(cq_context)? = unsafe { (*p).cq_context };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    ffi::value((), || {
        if let Ok(c) = cq_of(cq) {
            let p = &c.cq as *const ibv_cq_ex as *mut ibv_cq_ex;
            // SAFETY: the CQ's own mutex/cond, initialised at creation.
            unsafe {
                libc::pthread_mutex_lock(&mut (*p).mutex);
                (*p).comp_events_completed = (*p).comp_events_completed.wrapping_add(nevents);
                libc::pthread_cond_signal(&mut (*p).cond);
                libc::pthread_mutex_unlock(&mut (*p).mutex);
            }
        }
    })
}

//! Asynchronous events: `ibv_get_async_event`, `ibv_ack_async_event`, and the half of
//! `ibv_destroy_{cq,qp,srq}` that keeps their promise.
//!
//! rdma-core promises two things about the object an event names:
//! - no event is reported for an object that was destroyed (the kernel drops the events
//!   still queued for it), and
//! - the object stays valid until every event reported for it was acked: the kernel's
//!   destroy returns how many events it reported for the object and libibverbs' destroy
//!   sleeps on the object's `mutex`/`cond` until its `events_completed` reaches that count.
//!
//! The daemon writes event records into a pipe and cannot take back a record once it is
//! written, so the shim keeps both promises itself. Every record is resolved under the
//! context's object table lock: a handle no longer in the table is skipped, one that is
//! there is counted as reported before the lock is released. Destroy first has the daemon
//! release the object (no record for it is written after that), then removes the handle
//! from the table under the same lock and reads the reported count, then waits for the acks.
//! Daemon handles are not reused while the daemon runs (they grow monotonically), so a stale
//! record never resolves to a newer object.
use crate::abi::*;
use crate::context::{Context, EventObject};
use crate::ffi::{self, Errno};
use core::ffi::{c_int, c_void};
use std::os::fd::AsRawFd;
use wire::client::verbs::event_type as ev;

/// Which object an event of `event_type` names; `None` for port and device events.
fn object_of(event_type: u32) -> Option<EventObject> {
    match event_type {
        ev::CQ_ERR => Some(EventObject::Cq),
        ev::QP_FATAL..=ev::PATH_MIG_ERR | ev::QP_LAST_WQE_REACHED => Some(EventObject::Qp),
        ev::SRQ_ERR | ev::SRQ_LIMIT_REACHED => Some(EventObject::Srq),
        _ => None,
    }
}

/// The per-object `mutex`, `cond` and `events_completed` counter of rdma-core's structs.
///
/// # Safety
/// `element` must point at a live object of kind `kind` this shim created.
unsafe fn ack_fields(
    kind: EventObject,
    element: *mut c_void,
) -> (
    *mut libc::pthread_mutex_t,
    *mut libc::pthread_cond_t,
    *mut u32,
) {
    // SAFETY: per the caller contract; only field addresses are taken.
    unsafe {
        match kind {
            EventObject::Cq => {
                let cq = element as *mut ibv_cq;
                (
                    &raw mut (*cq).mutex,
                    &raw mut (*cq).cond,
                    &raw mut (*cq).async_events_completed,
                )
            }
            EventObject::Qp => {
                let qp = element as *mut ibv_qp;
                (
                    &raw mut (*qp).mutex,
                    &raw mut (*qp).cond,
                    &raw mut (*qp).events_completed,
                )
            }
            EventObject::Srq => {
                let srq = element as *mut ibv_srq;
                (
                    &raw mut (*srq).mutex,
                    &raw mut (*srq).cond,
                    &raw mut (*srq).events_completed,
                )
            }
        }
    }
}

#[no_mangle]
pub extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    ffi::minus_one(|| {
        let ctx = Context::from_ibv(context)?;
        let out = ffi::nonnull(event)?;
        loop {
            let mut rec = [0u8; 8];
            // SAFETY: reading 8 bytes into a live buffer.
            let n =
                unsafe { libc::read(ctx.async_fd.as_raw_fd(), rec.as_mut_ptr() as *mut c_void, 8) };
            if n != 8 {
                // A non-blocking fd with only stale records left reports EAGAIN, as the
                // kernel does when it dropped the events of destroyed objects.
                return Err(if n < 0 { Errno::last() } else { Errno::EIO });
            }
            let wire::client::AsyncEventRecord {
                event_type,
                element,
            } = wire::client::AsyncEventRecord::from_bytes(rec);
            let ptr = match object_of(event_type) {
                None => element as usize,
                Some(kind) => {
                    let mut objects = ctx.objects.lock().unwrap_or_else(|p| p.into_inner());
                    let table = match kind {
                        EventObject::Cq => &objects.cqs,
                        EventObject::Qp => &objects.qps,
                        EventObject::Srq => &objects.srqs,
                    };
                    let Some(ptr) = table.get(&element).copied() else {
                        // The object was destroyed: its event is gone with it.
                        continue;
                    };
                    *objects.events_reported.entry((kind, element)).or_insert(0) += 1;
                    ptr
                }
            };
            *out = ibv_async_event {
                element: ptr as *mut c_void,
                event_type: event_type as c_int,
            };
            return Ok(());
        }
    })
}

#[no_mangle]
pub extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    ffi::value((), || {
        let Ok(e) = ffi::nonnull(event) else { return };
        let Some(kind) = object_of(e.event_type as u32) else {
            return;
        };
        if e.element.is_null() {
            return;
        }
        // SAFETY: ibv_get_async_event filled the element from a live object, which its
        // destroy keeps alive until this ack; the counter is bumped under the object's own
        // mutex as rdma-core does.
        unsafe {
            let (m, c, n) = ack_fields(kind, e.element);
            libc::pthread_mutex_lock(m);
            *n = n.read().wrapping_add(1);
            libc::pthread_cond_signal(c);
            libc::pthread_mutex_unlock(m);
        }
    })
}

/// Called by `ibv_destroy_{cq,qp,srq}` after the daemon released the object and before the
/// shim frees it: removes its handle from the event table, so the records still queued for it
/// are skipped, and waits until every event reported for it was acked.
///
/// # Safety
/// `element` must be the live object of kind `kind` with daemon handle `handle`.
pub unsafe fn retire(ctx: &Context, kind: EventObject, handle: u32, element: *mut c_void) {
    let reported = {
        let mut objects = ctx.objects.lock().unwrap_or_else(|p| p.into_inner());
        match kind {
            EventObject::Cq => objects.cqs.remove(&handle),
            EventObject::Qp => objects.qps.remove(&handle),
            EventObject::Srq => objects.srqs.remove(&handle),
        };
        objects.events_reported.remove(&(kind, handle)).unwrap_or(0)
    };
    if reported == 0 {
        return;
    }
    // SAFETY: per the contract the object is live; its mutex and cond are initialised
    // (all-zero is glibc's static initializer) and only used through pthread calls.
    unsafe {
        let (m, c, n) = ack_fields(kind, element);
        libc::pthread_mutex_lock(m);
        while n.read() < reported {
            libc::pthread_cond_wait(c, m);
        }
        libc::pthread_mutex_unlock(m);
    }
}

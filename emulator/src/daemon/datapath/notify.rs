//! Telling clients what happened: completions into their CQ rings (and a token to the
//! completion channel when the CQ is armed), async events into their context's pipe.
//!
//! Both take the object table and nothing else: whoever holds the objects can report, and
//! a full pipe or ring is counted or raised as the verbs API says, never waited on.

use crate::daemon::sessions::objects::{Kind, Object};
use crate::daemon::sys;
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use wire::client::proto::Handle;
use wire::client::ring::{ARM_NEXT, ARM_SOLICITED};
use wire::client::slot::CqeRepr;
use wire::client::verbs::{event_type, wc_opcode, wc_status};
use wire::client::{AsyncEventRecord, CompEventRecord, Producer};

/// Writes an async event record to a context's pipe; counts it if the pipe is full.
pub fn send_event(objects: &BTreeMap<Handle, Object>, ctx: Handle, event: u32, element: u32) {
    if let Some(Object {
        kind: Kind::Ctx(c), ..
    }) = objects.get(&ctx)
    {
        let rec = AsyncEventRecord {
            event_type: event,
            element,
        }
        .to_bytes();
        if !matches!(sys::write_record(c.async_w.as_raw_fd(), &rec), Ok(true)) {
            c.events_dropped.set(c.events_dropped.get() + 1);
        }
    }
}

/// Puts a completion into a CQ ring and fires its channel if armed. Overflow raises
/// IBV_EVENT_CQ_ERR once.
///
/// A CQ created with timestamps gets them here, as a NIC stamps the CQE it writes: every
/// completion of every device (rxe and siw, success or error) reaches its ring through
/// this function. The raw stamp is `CLOCK_MONOTONIC` nanoseconds (`CQE_CLOCK_KHZ`), the
/// wall clock `CLOCK_REALTIME` nanoseconds, both read now.
pub fn deliver_cqe(objects: &BTreeMap<Handle, Object>, cq_h: Handle, cqe: &CqeRepr) {
    let Some(Object {
        kind: Kind::Cq(cq),
        ctx,
        ..
    }) = objects.get(&cq_h)
    else {
        return;
    };
    let Some(view) = cq.ring.view(&cq.map) else {
        return;
    };
    let mut slot = [0u8; 64];
    let stamped;
    let cqe = if cq.timestamps {
        stamped = CqeRepr {
            completion_ts: sys::clock_ns(libc::CLOCK_MONOTONIC),
            completion_wallclock_ns: sys::clock_ns(libc::CLOCK_REALTIME),
            ..*cqe
        };
        &stamped
    } else {
        cqe
    };
    if cqe.emit(&mut slot).is_err() {
        return;
    }
    let mut p = Producer::with_index(view, cq.ring.index.get());
    match p.push(&slot) {
        Ok(()) => cq.ring.index.set(p.index()),
        Err(_) => {
            if !cq.overflowed.replace(true) {
                tracing::debug!(cq = cq_h.0, "CQ overrun");
                send_event(objects, *ctx, event_type::CQ_ERR, cq_h.0);
            }
            return;
        }
    }
    // Only a CQ with a channel has anyone to tell (the channel is fixed at creation), and
    // most CQs of a busy program have none: they skip the fence below.
    let Some(Object {
        kind: Kind::Channel(ch),
        ..
    }) = cq.channel.and_then(|c| objects.get(&c))
    else {
        return;
    };
    // Dekker with `ibv_req_notify_cq`, which arms and then polls: the CQE's publication
    // must be visible before the arm word is read, or both sides can miss each other (the
    // client sees no CQE, the daemon no arm) and a program waiting on its channel hangs.
    // A release store followed by a load may be reordered (x86's store buffer does it).
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    let arm = view.arm();
    let solicited = cqe.opcode & wc_opcode::RECV != 0 || cqe.status != wc_status::SUCCESS;
    if (arm == ARM_NEXT || (arm == ARM_SOLICITED && solicited)) && view.take_arm() != 0 {
        let _ = sys::write_record(
            ch.write.as_raw_fd(),
            &CompEventRecord { cq: cq_h }.to_bytes(),
        );
    }
}

//! Queue pairs: create (plain and extended), modify, query, destroy.
use crate::abi::*;
use crate::async_event;
use crate::context::{Context, EventObject};
use crate::ffi::{self, Errno, VResult};
use crate::mmap::Mapping;
use crate::objects::{cq_of, pd_of, qp_of, srq_of, Qp, RecvQueue, SendQueue};
use crate::verbs::{ah_attr_from_wire, ah_attr_to_wire};
use core::ffi::{c_int, c_void};
use std::sync::Mutex;
use wire::client::{QpAttr, QpCap, QpInitAttr, ReplyBody, RequestBody};

fn create_qp(pd: *mut ibv_pd, init: &mut ibv_qp_init_attr, extended: bool) -> VResult<*mut ibv_qp> {
    let p = pd_of(pd)?;
    let ctx = Context::from_ibv(p.pd.context)?;
    let send_cq = cq_of(init.send_cq)?;
    // An XRC initiator has no receive side: the daemon is given its send CQ. (rdma-core's
    // inline ibv_create_qp_ex comes here directly when only the PD bit is set.)
    let recv_cq = if init.qp_type == IBV_QPT_XRC_SEND {
        send_cq
    } else {
        cq_of(init.recv_cq)?
    };
    let srq = if init.srq.is_null() {
        None
    } else {
        Some(srq_of(init.srq)?)
    };
    let c = &init.cap;
    let wire_init = QpInitAttr {
        send_cq: send_cq.handle,
        recv_cq: recv_cq.handle,
        srq: srq.map(|s| s.handle),
        cap: QpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        },
        qp_type: init.qp_type as u32,
        sq_sig_all: init.sq_sig_all != 0,
    };
    let (reply, fds) = ctx.session.call(
        RequestBody::CreateQp {
            pd: p.handle,
            init: wire_init,
        },
        &[],
    )?;
    finish_qp(ctx, p.pd.context, pd, init, extended, reply, fds)
}

/// The QP the daemon's `Qp` reply describes: its rings mapped, `init.cap` set to the
/// actual capacities, recorded in the context.
pub(crate) fn finish_qp(
    ctx: &Context,
    context: *mut ibv_context,
    pd: *mut ibv_pd,
    init: &mut ibv_qp_init_attr,
    extended: bool,
    reply: ReplyBody,
    fds: Vec<std::os::fd::OwnedFd>,
) -> VResult<*mut ibv_qp> {
    let ReplyBody::Qp {
        handle,
        qpn,
        cap,
        sq,
        rq,
    } = reply
    else {
        return Err(Errno::EIO);
    };
    let fd = fds.into_iter().next().ok_or(Errno::EIO)?;
    let len = rq.map_or(sq.end(), |r| r.end().max(sq.end()));
    let ring = Mapping::map(&fd, len as usize)?;
    let view = |l| wire::client::RingView::new(ring.words(), l).map_err(|_| Errno::EIO);
    let sq_head = view(sq)?.producer_index();
    let rq_state = match rq {
        Some(l) => Some(Mutex::new(RecvQueue {
            layout: l,
            head: view(l)?.producer_index(),
            max_wr: cap.max_recv_wr,
            slot: vec![0; l.slot_size as usize],
            sges: Vec::with_capacity(cap.max_recv_sge as usize),
        })),
        None => None,
    };
    init.cap = ibv_qp_cap {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline_data: cap.max_inline_data,
    };
    let mut qpx = crate::wr_api::qp_ex_table();
    qpx.qp_base = ibv_qp {
        context,
        qp_context: init.qp_context,
        pd,
        send_cq: init.send_cq,
        recv_cq: init.recv_cq,
        srq: init.srq,
        handle: handle.0,
        qp_num: qpn,
        state: 0,
        qp_type: init.qp_type,
        // SAFETY: all-zero is the glibc static initializer for both.
        mutex: unsafe { core::mem::zeroed() },
        // SAFETY: as above.
        cond: unsafe { core::mem::zeroed() },
        events_completed: 0,
    };
    let qp = Box::into_raw(Box::new(Qp {
        qpx,
        qpx_tail: crate::wr_api::qp_ex_tail(),
        handle,
        ring,
        cap,
        sq_sig_all: init.sq_sig_all != 0,
        extended,
        // SAFETY: a context this shim opened points at one of its ibv_devices.
        iwarp: unsafe { (*(*context).device).transport_type } == IBV_TRANSPORT_IWARP,
        sq: Mutex::new(SendQueue {
            layout: sq,
            head: sq_head,
            batch: Vec::new(),
            slot: vec![0; sq.slot_size as usize],
            pending: None,
            inline: Vec::with_capacity(cap.max_inline_data as usize),
            sges: Vec::with_capacity(cap.max_send_sge as usize),
            error: None,
        }),
        rq: rq_state,
    }));
    ctx.objects
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .qps
        .insert(handle.0, qp as usize);
    Ok(qp as *mut ibv_qp)
}

#[no_mangle]
pub extern "C" fn ibv_create_qp(pd: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    ffi::ptr(|| create_qp(pd, ffi::nonnull(init)?, false))
}

/// `create_flags` is read only with IBV_QP_INIT_ATTR_CREATE_FLAGS; the bit with no flag
/// set asks for nothing (pyverbs sets it whenever a `QPInitAttrEx` names the field).
const SUPPORTED_INIT_MASK: u32 =
    IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

/// `verbs_context.create_qp_ex`: plain QPs plus the `ibv_wr_*` send API.
///
/// # Safety
/// `context` is a context this library opened; `attr` is NULL or a valid
/// `ibv_qp_init_attr_ex` (called through rdma-core's inline `ibv_create_qp_ex`).
pub unsafe extern "C" fn vctx_create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    ffi::ptr(|| {
        let a = ffi::nonnull(attr)?;
        if a.qp_type == IBV_QPT_XRC_RECV {
            return create_tgt_qp(context, a);
        }
        if a.comp_mask & !SUPPORTED_INIT_MASK != 0 || a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if Context::from_ibv(context).is_err() {
            return Err(Errno::EINVAL);
        }
        let extended = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
        // SAFETY: a context this library opened has its device.
        let iwarp = unsafe { (*(*context).device).transport_type } == IBV_TRANSPORT_IWARP;
        if extended && a.send_ops_flags & !crate::wr_api::supported_send_ops(iwarp) != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let mut init = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let qp = create_qp(a.pd, &mut init, extended)?;
        a.cap = init.cap;
        Ok(qp)
    })
}

/// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: a target QP in the `XRCD` given (the only
/// attribute it uses). It has no send or receive queue and no CQs. A `PD` given too (as
/// librdmacm always gives one) is not used, but becomes the QP's `pd`, as libibverbs
/// records it (librdmacm then takes the id's PD from the QP).
pub(crate) fn create_tgt_qp(
    context: *mut ibv_context,
    a: &mut ibv_qp_init_attr_ex,
) -> VResult<*mut ibv_qp> {
    if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 {
        return Err(Errno::EINVAL);
    }
    let taken = IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_PD;
    if a.comp_mask & !taken != 0
        || (a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
    {
        return Err(Errno::EOPNOTSUPP);
    }
    let ctx = Context::from_ibv(context)?;
    let xrcd = crate::xrc::xrcd_of(a.xrcd)?.handle;
    let (reply, fds) = ctx.session.call(
        RequestBody::Xrc(wire::client::xrc::XrcRequest::CreateTgtQp { xrcd }),
        &[],
    )?;
    let mut init = ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: core::ptr::null_mut(),
        recv_cq: core::ptr::null_mut(),
        srq: core::ptr::null_mut(),
        cap: a.cap,
        qp_type: IBV_QPT_XRC_RECV,
        sq_sig_all: 0,
    };
    let pd = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 {
        a.pd
    } else {
        core::ptr::null_mut()
    };
    let qp = finish_qp(ctx, context, pd, &mut init, false, reply, fds)?;
    a.cap = init.cap;
    Ok(qp)
}

#[no_mangle]
pub extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    ffi::value(core::ptr::null_mut(), || match qp_of(qp) {
        Ok(q) if q.extended => qp as *mut ibv_qp_ex,
        _ => core::ptr::null_mut(),
    })
}

/// `ibv_qp_attr` between the C struct and the protocol: the four enums are `c_int` on one
/// side and `u32` on the other (`$int`), the paths go through `$ah`; every other field
/// keeps its type ([`wire::qp_attr_fields`]).
macro_rules! qp_attr_c {
    ($ty:path, $cap:path, $a:ident, $int:ty, $ah:path) => {
        wire::qp_attr_fields!($ty, $a, {
            qp_state: $a.qp_state as $int,
            cur_qp_state: $a.cur_qp_state as $int,
            path_mtu: $a.path_mtu as $int,
            path_mig_state: $a.path_mig_state as $int,
            cap: wire::qp_cap_fields!($cap, $a.cap),
            ah_attr: $ah(&$a.ah_attr),
            alt_ah_attr: $ah(&$a.alt_ah_attr),
        }, copy [
            qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, en_sqd_async_notify, sq_draining
        ])
    };
}

fn qp_attr_to_wire(a: &ibv_qp_attr) -> QpAttr {
    qp_attr_c!(QpAttr, QpCap, a, u32, ah_attr_to_wire)
}

pub(crate) fn qp_attr_from_wire(a: &QpAttr) -> ibv_qp_attr {
    qp_attr_c!(ibv_qp_attr, ibv_qp_cap, a, c_int, ah_attr_from_wire)
}

#[no_mangle]
pub extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    ffi::errno(|| {
        let q = qp_of(qp)?;
        let a = ffi::nonnull(attr)?;
        let mask = attr_mask as u32;
        Context::from_ibv(q.qpx.qp_base.context)?.call(RequestBody::ModifyQp {
            qp: q.handle,
            attr: qp_attr_to_wire(a),
            mask,
        })?;
        if mask & wire::client::verbs::qp_attr_mask::STATE != 0 {
            // SAFETY: `state` is the application-visible mirror; rdma-core updates it
            // the same way after a successful modify.
            unsafe { (*qp).state = a.qp_state };
            if a.qp_state as u32 == wire::client::verbs::qp_state::RESET {
                let b = &q.qpx.qp_base;
                crate::cq::clean_cq(b.send_cq, b.qp_num);
                if b.recv_cq != b.send_cq {
                    crate::cq::clean_cq(b.recv_cq, b.qp_num);
                }
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ffi::errno(|| {
        let q = qp_of(qp)?;
        let out = ffi::nonnull(attr)?;
        let out_init = ffi::nonnull(init_attr)?;
        let reply = Context::from_ibv(q.qpx.qp_base.context)?.call(RequestBody::QueryQp {
            qp: q.handle,
            mask: attr_mask as u32,
        })?;
        let ReplyBody::QpAttrs { attr, init } = reply else {
            return Err(Errno::EIO);
        };
        *out = qp_attr_from_wire(&attr);
        let b = &q.qpx.qp_base;
        *out_init = ibv_qp_init_attr {
            qp_context: b.qp_context,
            send_cq: b.send_cq,
            recv_cq: b.recv_cq,
            srq: b.srq,
            cap: out.cap,
            qp_type: init.qp_type as c_int,
            sq_sig_all: c_int::from(init.sq_sig_all),
        };
        // SAFETY: the application-visible state mirror, as rdma-core refreshes it.
        unsafe { (*qp).state = out.qp_state };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    ffi::errno(|| {
        let q = qp_of(qp)?;
        let ctx = Context::from_ibv(q.qpx.qp_base.context)?;
        ctx.call(RequestBody::DestroyQp { qp: q.handle })?;
        // SAFETY: qp is the live QP with this handle; it is freed only below.
        unsafe { async_event::retire(ctx, EventObject::Qp, q.handle.0, qp as *mut c_void) };
        // SAFETY: boxed in create_qp; the daemon released it.
        drop(unsafe { Box::from_raw(qp as *mut Qp) });
        Ok(())
    })
}

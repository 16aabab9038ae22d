//! XRC: `ibv_open_xrcd`, `ibv_close_xrcd`, `ibv_create_srq_ex` (basic and XRC SRQs),
//! `ibv_get_srq_num`; `qp.rs` makes XRC target and initiator QPs. rdma-core's inlines
//! reach them through the `verbs_context` ops table. `ibv_open_qp` stays unimplemented
//! (EOPNOTSUPP).
use crate::abi::*;
use crate::context::Context;
use crate::ffi::{self, Errno, VResult};
use crate::objects::{cq_of, obj, pd_of, srq_of};
use core::ffi::c_int;
use std::os::fd::RawFd;
use wire::client::xrc::{XrcReply, XrcRequest};
use wire::client::{Handle, ReplyBody, RequestBody, SrqAttr};

/// The shim's XRC domain: the `ibv_xrcd` handed out, then the daemon's handle.
#[repr(C)]
pub struct Xrcd {
    pub xrcd: ibv_xrcd,
    pub handle: Handle,
}

pub(crate) fn xrcd_of<'a>(p: *mut core::ffi::c_void) -> VResult<&'a Xrcd> {
    // SAFETY: every ibv_xrcd the shim returns is the first field of an Xrcd.
    unsafe { obj(p) }
}

/// `verbs_context.open_xrcd`: as libibverbs' `ibv_cmd_open_xrcd`, both `FD` and `OFLAGS`
/// must be given and no other bit (EINVAL, EOPNOTSUPP).
///
/// # Safety
/// `context` is a context this library opened; `attr` is NULL or valid.
pub unsafe extern "C" fn vctx_open_xrcd(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    ffi::ptr(|| {
        let a = ffi::nonnull(attr)?;
        let both = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        if a.comp_mask & !both != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & both != both {
            return Err(Errno::EINVAL);
        }
        let ctx = Context::from_ibv(context)?;
        let file = a.fd != -1;
        let fds: Vec<RawFd> = if file { vec![a.fd] } else { Vec::new() };
        let req = XrcRequest::Open {
            ctx: ctx.handle,
            file,
            oflags: a.oflags as u32,
        };
        let (reply, _) = ctx.session.call(RequestBody::Xrc(req), &fds)?;
        let ReplyBody::Xrc(XrcReply::Xrcd { handle }) = reply else {
            return Err(Errno::EIO);
        };
        let x = Box::new(Xrcd {
            xrcd: ibv_xrcd { context },
            handle,
        });
        Ok(Box::into_raw(x) as *mut ibv_xrcd)
    })
}

/// `verbs_context.close_xrcd`.
///
/// # Safety
/// `xrcd` is NULL or a domain this library opened and not yet closed.
pub unsafe extern "C" fn vctx_close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    ffi::errno(|| {
        let x = xrcd_of(xrcd as *mut _)?;
        let ctx = Context::from_ibv(x.xrcd.context)?;
        ctx.call(RequestBody::Xrc(XrcRequest::Close { xrcd: x.handle }))?;
        // SAFETY: boxed in vctx_open_xrcd; the daemon closed it.
        drop(unsafe { Box::from_raw(xrcd as *mut Xrcd) });
        Ok(())
    })
}

/// `verbs_context.create_srq_ex`: a basic SRQ (as `ibv_create_srq`) or an XRC SRQ
/// (`TYPE` = `IBV_SRQT_XRC` with `XRCD`, `CQ` and `PD`); tag matching is EOPNOTSUPP.
///
/// # Safety
/// `context` is a context this library opened; `attr` is NULL or valid.
pub unsafe extern "C" fn vctx_create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    ffi::ptr(|| {
        let a = ffi::nonnull(attr)?;
        let known = IBV_SRQ_INIT_ATTR_TYPE
            | IBV_SRQ_INIT_ATTR_PD
            | IBV_SRQ_INIT_ATTR_XRCD
            | IBV_SRQ_INIT_ATTR_CQ;
        if a.comp_mask & !known != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 {
            return Err(Errno::EINVAL);
        }
        let srq_type = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 {
            a.srq_type
        } else {
            IBV_SRQT_BASIC
        };
        let ctx = Context::from_ibv(context)?;
        let p = pd_of(a.pd)?;
        let attr = SrqAttr {
            max_wr: a.attr.max_wr,
            max_sge: a.attr.max_sge,
            srq_limit: a.attr.srq_limit,
        };
        let (reply, fds) = match srq_type {
            IBV_SRQT_BASIC => ctx
                .session
                .call(RequestBody::CreateSrq { pd: p.handle, attr }, &[])?,
            IBV_SRQT_XRC => {
                let need = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
                if a.comp_mask & need != need {
                    return Err(Errno::EINVAL);
                }
                let req = XrcRequest::CreateSrq {
                    pd: p.handle,
                    xrcd: xrcd_of(a.xrcd)?.handle,
                    cq: cq_of(a.cq)?.handle,
                    attr,
                };
                ctx.session.call(RequestBody::Xrc(req), &[])?
            }
            _ => return Err(Errno::EOPNOTSUPP),
        };
        let (parts, srqn) = match reply {
            ReplyBody::Srq { handle, attr, ring } => ((handle, attr, ring), None),
            ReplyBody::Xrc(XrcReply::Srq {
                handle,
                attr,
                ring,
                srqn,
            }) => ((handle, attr, ring), Some(srqn)),
            _ => return Err(Errno::EIO),
        };
        let (srq, out) = crate::verbs::new_srq(ctx, a.pd, a.srq_context, parts, fds, srqn)?;
        a.attr = out;
        Ok(srq)
    })
}

/// `verbs_context.get_srq_num`: an XRC SRQ's number; EINVAL for a basic SRQ.
///
/// # Safety
/// `srq` is NULL or an SRQ this library created; `srq_num` NULL or writable.
pub unsafe extern "C" fn vctx_get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    ffi::errno(|| {
        let n = srq_of(srq)?.srqn.ok_or(Errno::EINVAL)?;
        *ffi::nonnull(srq_num)? = n;
        Ok(())
    })
}

//! One CM request to the daemon, and the results of the shim's own `ibv_*` exports read
//! back as `VResult`s: what every other file of `cm` sends and checks.
use crate::client::session;
use crate::ffi::{Errno, VResult};
use crate::log::shim_log;
use std::os::fd::RawFd;
use wire::client::cm::{CmReply, CmRequest};
use wire::client::{ReplyBody, RequestBody};

/// Sends one CM request (with `fds`) and returns the daemon's answer. A daemon that
/// cannot be reached reads as "no RDMA CM device" (librdmacm's `ucma_init`: ENODEV).
pub fn call_fds(req: CmRequest, fds: &[RawFd]) -> VResult<Option<CmReply>> {
    let s = session().map_err(|_| Errno::ENODEV)?;
    match s.call(RequestBody::Cm(req), fds)? {
        (ReplyBody::Cm(r), _) => Ok(Some(r)),
        (ReplyBody::Ok, _) => Ok(None),
        (other, _) => {
            shim_log!("unexpected reply to a CM request: {other:?}");
            Err(Errno::EIO)
        }
    }
}

/// [`call_fds`] without descriptors.
pub fn call(req: CmRequest) -> VResult<Option<CmReply>> {
    call_fds(req, &[])
}

/// A pointer returned by one of the shim's own `ibv_*` exports: NULL means failure with
/// `errno` set.
pub(crate) fn verbs_ptr<T>(p: *mut T) -> VResult<*mut T> {
    if p.is_null() {
        Err(Errno::last())
    } else {
        Ok(p)
    }
}

/// The return value of one of the shim's own `ibv_*` exports that answer with a
/// positive errno (`ibv_modify_qp`, `ibv_destroy_qp`, ...).
pub(crate) fn verbs_rc(rc: core::ffi::c_int) -> VResult<()> {
    match rc {
        0 => Ok(()),
        e if e > 0 => Err(Errno(e)),
        _ => Err(Errno::last()),
    }
}

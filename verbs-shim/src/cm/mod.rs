//! librdmacm.so.1 (RDMACM_1.0 … 1.3): RDMA CM over the daemon.
//!
//! The split is rdma-core's: the daemon plays the kernel's `rdma_ucm` + CMA + IB CM
//! (`wire::client::cm`), this module plays librdmacm's `cma.c`. It owns the
//! `rdma_cm_id` objects, turns the daemon's events into `rdma_cm_event`s (creating the
//! new id of a CONNECT_REQUEST, finishing the active side's handshake on
//! CONNECT_RESPONSE), and moves QPs itself with `ibv_modify_qp` using the attributes
//! the daemon computes (`CmRequest::InitQpAttr`), as librdmacm does with the kernel's
//! `ucma_init_qp_attr`.
//!
//! - [`abi`]: `#[repr(C)]` mirrors of `<rdma/rdma_cma.h>`;
//! - [`device`]: one shared `ibv_context` and default PD per device (`rdma_get_devices`);
//! - [`id`]: event channels and ids, address and route resolution, listen, migrate;
//! - [`conn`]: connect, `rdma_get_request`, accept, reject, disconnect, multicast;
//! - [`event`]: `rdma_get_cm_event` / `rdma_ack_cm_event` and per-event processing;
//! - [`qp`]: `rdma_create_qp`/`srq`/`ep`, `rdma_init_qp_attr` and the QP transitions;
//! - [`addrinfo`]: `rdma_getaddrinfo` through the system resolver (no ib_acm).
//!
//! Every export returns what librdmacm returns: 0, or -1 with `errno` set (`ERR(e)` in
//! cma.c), NULL with `errno` for the pointer functions.
pub mod abi;
pub mod addr;
pub mod addrinfo;
pub mod conn;
pub mod device;
pub mod event;
pub mod id;
pub mod qp;

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

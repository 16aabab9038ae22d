//! Addresses and routes of an id: `rdma_bind_addr`, `rdma_resolve_addr`,
//! `rdma_resolve_route`, `rdma_listen`. A synchronous id waits here for the event its
//! call started ([`complete`]).
use super::abi::*;
use super::addr;
use super::event::complete;
use super::request::call;
use super::state::cm;
use crate::ffi;
use core::ffi::c_int;
use libc::sockaddr;
use wire::client::cm::CmRequest;

#[no_mangle]
pub extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        // SAFETY: addr is NULL or a socket address of its family's size (API contract).
        let a = unsafe { addr::read(addr) }?;
        let reply = call(CmRequest::BindAddr {
            id: c.handle,
            addr: a,
        })?;
        c.apply_reply(reply)
    })
}

#[no_mangle]
pub extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut sockaddr,
    dst_addr: *mut sockaddr,
    timeout_ms: c_int,
) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        // SAFETY: both are NULL or socket addresses of their family's size (API contract).
        let dst = unsafe { addr::read(dst_addr) }?;
        let src = if src_addr.is_null() {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { addr::read(src_addr) }?)
        };
        call(CmRequest::ResolveAddr {
            id: c.handle,
            src,
            dst,
            timeout_ms: timeout_ms.max(0) as u32,
        })?;
        addr::write(&mut c.id.route.addr.dst_addr, &dst);
        complete(c)
    })
}

#[no_mangle]
pub extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        call(CmRequest::ResolveRoute {
            id: c.handle,
            timeout_ms: timeout_ms.max(0) as u32,
        })?;
        complete(c)
    })
}

#[no_mangle]
pub extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        call(CmRequest::Listen {
            id: c.handle,
            backlog,
        })?;
        c.query()
    })
}

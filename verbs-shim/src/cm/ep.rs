//! `rdma_create_ep` / `rdma_destroy_ep`: an id, its address and route resolved, and its
//! QP, in one call (librdmacm's `rdma_create_ep`).
use super::abi::*;
use super::event::complete;
use super::id::{self, rdma_set_option};
use super::qp::{destroy_qp, destroy_srq, rdma_create_qp};
use super::route::{rdma_bind_addr, rdma_resolve_addr, rdma_resolve_route};
use super::state::cm;
use crate::abi::*;
use crate::ffi::{self, Errno, VResult};
use core::ffi::c_int;

/// -1 from one of this library's own exports: its errno.
fn ok_or_errno(rc: c_int) -> VResult<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

fn create_ep(
    r: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
    idp: *mut rdma_cm_id,
) -> VResult<()> {
    let c = cm(idp)?;
    if r.ai_flags & RAI_PASSIVE != 0 {
        ok_or_errno(rdma_bind_addr(idp, r.ai_src_addr))?;
        if !pd.is_null() {
            c.id.pd = pd;
        }
        // SAFETY: NULL or a valid ibv_qp_init_attr (API contract).
        if let Some(init) = unsafe { qp_init_attr.as_ref() } {
            let mut init = *init;
            init.qp_type = r.ai_qp_type;
            c.qp_init_attr = Some(init);
        }
        return Ok(());
    }
    ok_or_errno(rdma_resolve_addr(idp, r.ai_src_addr, r.ai_dst_addr, 2000))?;
    if r.ai_route_len != 0 {
        ok_or_errno(rdma_set_option(
            idp,
            RDMA_OPTION_IB,
            RDMA_OPTION_IB_PATH,
            r.ai_route,
            r.ai_route_len,
        ))?;
        complete(c)?;
    } else {
        ok_or_errno(rdma_resolve_route(idp, 2000))?;
    }
    // SAFETY: NULL or a valid ibv_qp_init_attr (API contract).
    if let Some(init) = unsafe { qp_init_attr.as_mut() } {
        init.qp_type = r.ai_qp_type;
        ok_or_errno(rdma_create_qp(idp, pd, init))?;
    }
    if r.ai_connect_len != 0 && !r.ai_connect.is_null() {
        // SAFETY: the addrinfo holds ai_connect_len bytes at ai_connect.
        let d = unsafe { core::slice::from_raw_parts(r.ai_connect as *const u8, r.ai_connect_len) };
        c.connect = d.to_vec();
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ffi::minus_one(|| {
        let out = ffi::nonnull(id)?;
        let r = ffi::nonnull(res)?;
        let idp = id::create(
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            r.ai_port_space as u32,
            r.ai_qp_type,
        )? as *mut rdma_cm_id;
        if let Err(e) = create_ep(r, pd, qp_init_attr, idp) {
            rdma_destroy_ep(idp);
            return Err(e);
        }
        *out = idp;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    ffi::value((), || {
        let Ok(c) = cm(id) else { return };
        if !c.id.qp.is_null() {
            destroy_qp(c);
        }
        if !c.id.srq.is_null() {
            destroy_srq(c);
        }
        let _ = id::destroy(id);
    })
}

//! Connections on ids: connect, listen's `rdma_get_request`, accept, reject, establish,
//! notify, disconnect, and multicast membership.
use super::abi::*;
use super::addr;
use super::device;
use super::event::{self, complete};
use super::qp;
use super::request::call;
use super::state::{ack, cm, CmId, Multicast};
use crate::abi::{IBV_QPT_UD, IBV_TRANSPORT_IB, IBV_TRANSPORT_IWARP};
use crate::ffi::{self, Errno, VResult};
use core::ffi::{c_int, c_void};
use libc::sockaddr;
use wire::client::cm::{event as ev, ps, CmConnParam, CmRequest};

/// `ucma_valid_param`: on RDMA_PS_TCP a connection needs a QP or parameters, within the
/// device's read/atomic limits.
fn valid_param(c: &CmId, p: Option<&rdma_conn_param>) -> VResult<()> {
    if c.id.ps as u32 != ps::TCP {
        return Ok(());
    }
    let Some(p) = p else {
        return if c.id.qp.is_null() {
            Err(Errno::EINVAL)
        } else {
            Ok(())
        };
    };
    if let Some(d) = &c.dev {
        if (p.responder_resources != RDMA_MAX_RESP_RES
            && p.responder_resources > d.max_responder_resources)
            || (p.initiator_depth != RDMA_MAX_INIT_DEPTH
                && p.initiator_depth > d.max_initiator_depth)
        {
            return Err(Errno::EINVAL);
        }
    }
    Ok(())
}

/// `ucma_copy_conn_param_to_kern`: the id's negotiated depths, the endpoint's
/// `ai_connect` bytes followed by the consumer's private data.
fn wire_param(c: &CmId, p: Option<&rdma_conn_param>, qp_num: u32, srq: u8) -> CmConnParam {
    let mut private_data = c.connect.clone();
    let mut out = CmConnParam {
        responder_resources: c.responder_resources,
        initiator_depth: c.initiator_depth,
        retry_count: 7,
        rnr_retry_count: 7,
        srq,
        qp_num,
        qkey: if c.id.qp_type == IBV_QPT_UD {
            RDMA_UDP_QKEY
        } else {
            0
        },
        ..CmConnParam::default()
    };
    if let Some(p) = p {
        out.flow_control = p.flow_control;
        out.retry_count = p.retry_count;
        out.rnr_retry_count = p.rnr_retry_count;
        if !p.private_data.is_null() && p.private_data_len != 0 {
            // SAFETY: the consumer gave private_data_len readable bytes.
            private_data.extend_from_slice(unsafe {
                core::slice::from_raw_parts(
                    p.private_data as *const u8,
                    usize::from(p.private_data_len),
                )
            });
        }
    }
    out.private_data = private_data;
    out
}

/// The id's QP number and whether it uses an SRQ, else what the parameters say.
fn qp_num_srq(c: &CmId, p: Option<&rdma_conn_param>) -> (u32, u8) {
    // SAFETY: id->qp is NULL or a QP of this library.
    match unsafe { c.id.qp.as_ref() } {
        Some(q) => (q.qp_num, u8::from(!q.srq.is_null())),
        None => p.map_or((0, 0), |p| (p.qp_num, p.srq)),
    }
}

#[no_mangle]
pub extern "C" fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        // SAFETY: NULL or a valid rdma_conn_param (API contract).
        let p = unsafe { conn_param.as_ref() };
        valid_param(c, p)?;
        let (max_init, max_resp) = c.dev.map_or((0, 0), |d| {
            (d.max_initiator_depth, d.max_responder_resources)
        });
        c.initiator_depth = match p {
            Some(p) if p.initiator_depth != RDMA_MAX_INIT_DEPTH => p.initiator_depth,
            _ => max_init,
        };
        c.responder_resources = match p {
            Some(p) if p.responder_resources != RDMA_MAX_RESP_RES => p.responder_resources,
            _ => max_resp,
        };
        let (qp_num, srq) = qp_num_srq(c, p);
        let param = wire_param(c, p, qp_num, srq);
        call(CmRequest::Connect {
            id: c.handle,
            param,
        })?;
        c.connect.clear();
        complete(c)
    })
}

#[no_mangle]
pub extern "C" fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        // SAFETY: NULL or a valid rdma_conn_param (API contract).
        let p = unsafe { conn_param.as_ref() };
        valid_param(c, p)?;
        let (max_init, max_resp) = c.dev.map_or((u8::MAX, u8::MAX), |d| {
            (d.max_initiator_depth, d.max_responder_resources)
        });
        c.initiator_depth = match p {
            Some(p) if p.initiator_depth != RDMA_MAX_INIT_DEPTH => p.initiator_depth,
            _ => c.initiator_depth.min(max_init),
        };
        c.responder_resources = match p {
            Some(p) if p.responder_resources != RDMA_MAX_RESP_RES => p.responder_resources,
            _ => c.responder_resources.min(max_resp),
        };
        let ud = c.id.qp_type == IBV_QPT_UD;
        if !ud {
            qp::modify_qp_rtr(c, c.responder_resources)?;
            qp::modify_qp_rts(c, c.initiator_depth)?;
        }
        let (qp_num, srq) = qp_num_srq(c, p);
        let param = wire_param(c, p, qp_num, srq);
        if let Err(e) = call(CmRequest::Accept {
            id: c.handle,
            param,
        }) {
            let _ = qp::modify_qp_err(c);
            return Err(e);
        }
        if ud {
            if c.sync && !c.id.event.is_null() {
                ack(c.id.event);
                c.id.event = core::ptr::null_mut();
            }
            return Ok(());
        }
        complete(c)
    })
}

fn reject(id: *mut rdma_cm_id, private_data: *const c_void, len: u8) -> VResult<()> {
    let c = cm(id)?;
    let data = if private_data.is_null() || len == 0 {
        Vec::new()
    } else {
        // SAFETY: the consumer gave `len` readable bytes.
        unsafe { core::slice::from_raw_parts(private_data as *const u8, usize::from(len)) }.to_vec()
    };
    call(CmRequest::Reject {
        id: c.handle,
        private_data: data,
    })?;
    Ok(())
}

#[no_mangle]
pub extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    ffi::minus_one(|| reject(id, private_data, private_data_len))
}

/// `rdma_reject_ece`: librdmacm sends REJ reason 35 (vendor option not supported);
/// this CM has no ECE, so it is an ordinary consumer reject.
#[no_mangle]
pub extern "C" fn rdma_reject_ece(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    ffi::minus_one(|| reject(id, private_data, private_data_len))
}

#[no_mangle]
pub extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        if !c.id.qp.is_null() {
            return Err(Errno::EINVAL);
        }
        qp::finish_connect(c)
    })
}

#[no_mangle]
pub extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        call(CmRequest::Notify {
            id: c.handle,
            event: event as u32,
        })?;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        // ucma_shutdown: the QP stops first (IB: ERROR; iWARP: SQD, which sends FIN).
        match device::transport(c.id.verbs) {
            _ if c.id.verbs.is_null() => return Err(Errno::EINVAL),
            IBV_TRANSPORT_IB => qp::modify_qp_err(c)?,
            IBV_TRANSPORT_IWARP => qp::modify_qp_sqd(c)?,
            _ => return Err(Errno::EINVAL),
        }
        call(CmRequest::Disconnect { id: c.handle })?;
        complete(c)
    })
}

#[no_mangle]
pub extern "C" fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
    ffi::minus_one(|| {
        let l = cm(listen)?;
        let out = ffi::nonnull(id)?;
        if !l.sync {
            return Err(Errno::EINVAL);
        }
        if !l.id.event.is_null() {
            ack(l.id.event);
            l.id.event = core::ptr::null_mut();
        }
        let e = event::get(l.id.channel)?;
        // SAFETY: get returned a live event.
        let (event, status, new) = unsafe { ((*e).event as u32, (*e).status, (*e).id) };
        let failed = if event == ev::REJECTED {
            Some(Errno(libc::ECONNREFUSED))
        } else if status != 0 {
            Some(Errno(-status))
        } else if event != ev::CONNECT_REQUEST {
            Some(Errno::EINVAL)
        } else {
            None
        };
        if let Some(err) = failed {
            l.id.event = e;
            return Err(err);
        }
        if let Some(mut init) = l.qp_init_attr {
            if qp::rdma_create_qp(new, l.id.pd, &mut init) != 0 {
                let err = Errno::last();
                l.id.event = e;
                return Err(err);
            }
        }
        *out = new;
        cm(new)?.id.event = e;
        Ok(())
    })
}

// ---- multicast --------------------------------------------------------------------------

fn join(c: &mut CmId, a: *mut sockaddr, join_flags: u32, context: *mut c_void) -> VResult<()> {
    // SAFETY: NULL or a socket address of its family's size (API contract).
    let group = unsafe { addr::read(a) }?;
    c.mcs.push(Multicast {
        addr: group,
        context,
        join_flags,
        joined: false,
        mgid: crate::abi::ibv_gid::default(),
        mlid: 0,
    });
    if let Err(e) = call(CmRequest::JoinMulticast {
        id: c.handle,
        addr: group,
        join_flags,
    }) {
        c.mcs.pop();
        return Err(e);
    }
    complete(c)
}

#[no_mangle]
pub extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut sockaddr,
    context: *mut c_void,
) -> c_int {
    ffi::minus_one(|| join(cm(id)?, addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context))
}

#[no_mangle]
pub extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        let a = ffi::nonnull(mc_join_attr)?;
        if a.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0
            || a.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0
            || a.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED
        {
            return Err(Errno::EINVAL);
        }
        join(c, a.addr, a.join_flags, context)
    })
}

#[no_mangle]
pub extern "C" fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        // SAFETY: NULL or a socket address of its family's size (API contract).
        let group = unsafe { addr::read(addr) }?;
        let pos = c
            .mcs
            .iter()
            .position(|m| m.addr == group)
            .ok_or(Errno(libc::EADDRNOTAVAIL))?;
        let mc = c.mcs.remove(pos);
        if !c.id.qp.is_null() && mc.joined && mc.join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
        {
            crate::misc::ibv_detach_mcast(c.id.qp, &mc.mgid, mc.mlid);
        }
        call(CmRequest::LeaveMulticast {
            id: c.handle,
            addr: group,
        })?;
        Ok(())
    })
}

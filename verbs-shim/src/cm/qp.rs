//! QPs and SRQs on ids: `rdma_create_qp(_ex)`, `rdma_create_srq(_ex)`,
//! `rdma_init_qp_attr`, and the transitions librdmacm makes around
//! connect and accept (`ucma_modify_qp_rtr/rts/sqd/err`, `ucma_init_conn_qp`,
//! `ucma_init_ud_qp`), with the attributes the daemon's CM computes. XRC ids get what
//! librdmacm gives them: the device's private XRC domain (`device::xrcd`) for a target
//! QP or an XRC SRQ that names none, and an XRC SRQ's own receive CQ as the id's
//! `recv_cq`.
use super::abi::*;
use super::request::{call, verbs_ptr, verbs_rc};
use super::state::{cm, CmId};
use crate::abi::*;
use crate::cq::{ibv_create_comp_channel, ibv_create_cq, ibv_destroy_comp_channel, ibv_destroy_cq};
use crate::ffi::{self, Errno, VResult};
use crate::qp::{ibv_destroy_qp, ibv_modify_qp, qp_attr_from_wire, vctx_create_qp_ex};
use crate::verbs::{ibv_create_srq, ibv_destroy_srq};
use core::ffi::{c_int, c_void};
use wire::client::cm::{CmReply, CmRequest};
use wire::client::verbs::{qp_attr_mask as mask, qp_state};

/// `rdma_init_qp_attr`: the attributes and mask for moving the id's QP to `state`.
pub fn init_qp_attr(c: &CmId, state: u32) -> VResult<(ibv_qp_attr, c_int)> {
    match call(CmRequest::InitQpAttr {
        id: c.handle,
        qp_state: state,
    })? {
        Some(CmReply::QpAttr { attr, mask }) => Ok((qp_attr_from_wire(&attr), mask as c_int)),
        _ => Err(Errno::EIO),
    }
}

fn modify(qp: *mut ibv_qp, attr: &mut ibv_qp_attr, attr_mask: c_int) -> VResult<()> {
    verbs_rc(ibv_modify_qp(qp, attr, attr_mask))
}

/// `ucma_modify_qp_rtr`: INIT again (the path may have changed), then RTR; a consumer's
/// `responder_resources` overrides the CM's `max_dest_rd_atomic`.
pub fn modify_qp_rtr(c: &CmId, resp_res: u8) -> VResult<()> {
    if c.id.qp.is_null() {
        return Ok(());
    }
    let (mut a, m) = init_qp_attr(c, qp_state::INIT)?;
    modify(c.id.qp, &mut a, m)?;
    let (mut a, m) = init_qp_attr(c, qp_state::RTR)?;
    if resp_res != RDMA_MAX_RESP_RES {
        a.max_dest_rd_atomic = resp_res;
    }
    modify(c.id.qp, &mut a, m)
}

/// `ucma_modify_qp_rts`: a consumer's `initiator_depth` overrides `max_rd_atomic`.
pub fn modify_qp_rts(c: &CmId, init_depth: u8) -> VResult<()> {
    if c.id.qp.is_null() {
        return Ok(());
    }
    let (mut a, m) = init_qp_attr(c, qp_state::RTS)?;
    if init_depth != RDMA_MAX_INIT_DEPTH {
        a.max_rd_atomic = init_depth;
    }
    modify(c.id.qp, &mut a, m)
}

fn modify_state(c: &CmId, state: u32) -> VResult<()> {
    if c.id.qp.is_null() {
        return Ok(());
    }
    let mut a = ibv_qp_attr {
        qp_state: state as c_int,
        ..ibv_qp_attr::default()
    };
    modify(c.id.qp, &mut a, mask::STATE as c_int)
}

/// `ucma_modify_qp_sqd`.
pub fn modify_qp_sqd(c: &CmId) -> VResult<()> {
    modify_state(c, qp_state::SQD)
}

/// `ucma_modify_qp_err`.
pub fn modify_qp_err(c: &CmId) -> VResult<()> {
    modify_state(c, qp_state::ERR)
}

/// `ucma_process_conn_resp`: the active side after CONNECT_RESPONSE (and
/// `rdma_establish`): RTR, RTS, then RTU through the daemon; the QP goes to ERROR if
/// any step fails.
pub fn finish_connect(c: &CmId) -> VResult<()> {
    let done = modify_qp_rtr(c, RDMA_MAX_RESP_RES)
        .and_then(|()| modify_qp_rts(c, RDMA_MAX_INIT_DEPTH))
        .and_then(|()| call(CmRequest::Establish { id: c.handle }).map(drop));
    if done.is_err() {
        let _ = modify_qp_err(c);
    }
    done
}

/// `ucma_init_conn_qp`: RC/UC QPs start in INIT with the CM's attributes.
fn init_conn_qp(c: &CmId, qp: *mut ibv_qp) -> VResult<()> {
    let (mut a, m) = init_qp_attr(c, qp_state::INIT)?;
    modify(qp, &mut a, m)
}

/// `ucma_init_ud_qp`: UD QPs go straight to RTS (Q_Key and port from the CM).
fn init_ud_qp(c: &CmId, qp: *mut ibv_qp) -> VResult<()> {
    let (mut a, m) = init_qp_attr(c, qp_state::INIT)?;
    modify(qp, &mut a, m)?;
    a.qp_state = qp_state::RTR as c_int;
    modify(qp, &mut a, mask::STATE as c_int)?;
    a.qp_state = qp_state::RTS as c_int;
    a.sq_psn = 0;
    modify(qp, &mut a, (mask::STATE | mask::SQ_PSN) as c_int)
}

/// `ucma_create_cqs`: a completion channel and a CQ for each queue the caller gave no
/// CQ for (size 0: none).
fn create_cqs(c: &mut CmId, send_size: u32, recv_size: u32) -> VResult<()> {
    let ctx = c as *mut CmId as *mut c_void;
    let make = |size: u32| -> VResult<(*mut ibv_comp_channel, *mut ibv_cq)> {
        let ch = verbs_ptr(ibv_create_comp_channel(c.id.verbs))?;
        let size = c_int::try_from(size).map_err(|_| Errno::EINVAL)?;
        match verbs_ptr(ibv_create_cq(c.id.verbs, size, ctx, ch, 0)) {
            Ok(cq) => Ok((ch, cq)),
            Err(e) => {
                ibv_destroy_comp_channel(ch);
                Err(e)
            }
        }
    };
    if recv_size != 0 {
        let (ch, cq) = make(recv_size)?;
        c.id.recv_cq_channel = ch;
        c.id.recv_cq = cq;
    }
    if send_size != 0 {
        match make(send_size) {
            Ok((ch, cq)) => {
                c.id.send_cq_channel = ch;
                c.id.send_cq = cq;
            }
            Err(e) => {
                destroy_cqs(c);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// `ucma_destroy_cqs`. An XRC target id's CQ is its XRC SRQ's while that SRQ lives
/// (`rdma_destroy_srq` destroys it after the SRQ).
fn destroy_cqs(c: &mut CmId) {
    use core::ptr::null_mut as null;
    if c.id.qp_type == IBV_QPT_XRC_RECV && !c.id.srq.is_null() {
        return;
    }
    if !c.id.recv_cq.is_null() {
        ibv_destroy_cq(c.id.recv_cq);
        if !c.id.send_cq.is_null() && c.id.send_cq != c.id.recv_cq {
            ibv_destroy_cq(c.id.send_cq);
            c.id.send_cq = null();
        }
        c.id.recv_cq = null();
    }
    if !c.id.recv_cq_channel.is_null() {
        ibv_destroy_comp_channel(c.id.recv_cq_channel);
        if !c.id.send_cq_channel.is_null() && c.id.send_cq_channel != c.id.recv_cq_channel {
            ibv_destroy_comp_channel(c.id.send_cq_channel);
            c.id.send_cq_channel = null();
        }
        c.id.recv_cq_channel = null();
    }
}

fn create_qp_ex(c: &mut CmId, attr: &mut ibv_qp_init_attr_ex) -> VResult<()> {
    if !c.id.qp.is_null() || c.id.verbs.is_null() {
        return Err(Errno::EINVAL);
    }
    if attr.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || attr.pd.is_null() {
        attr.comp_mask |= IBV_QP_INIT_ATTR_PD;
        attr.pd = c.id.pd;
    } else {
        // SAFETY: a non-NULL pd is an ibv_pd of this library (API contract).
        if c.id.verbs != unsafe { (*attr.pd).context } {
            return Err(Errno::EINVAL);
        }
    }
    let clash = |mine: *mut ibv_cq, theirs: *mut ibv_cq| {
        !mine.is_null() && !theirs.is_null() && mine != theirs
    };
    if clash(c.id.recv_cq, attr.recv_cq) || clash(c.id.send_cq, attr.send_cq) {
        return Err(Errno::EINVAL);
    }
    // An XRC target needs a domain: the device's own when the caller names none
    // (librdmacm's rdma_create_qp_ex). The id's type decides, as in librdmacm.
    if c.id.qp_type == IBV_QPT_XRC_RECV
        && (attr.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null())
    {
        attr.xrcd = super::device::xrcd(c.id.verbs)?.cast();
        attr.comp_mask |= IBV_QP_INIT_ATTR_XRCD;
    }
    let send = if attr.send_cq.is_null() && c.id.send_cq.is_null() {
        attr.cap.max_send_wr
    } else {
        0
    };
    let recv = if attr.recv_cq.is_null() && c.id.recv_cq.is_null() {
        attr.cap.max_recv_wr
    } else {
        0
    };
    create_cqs(c, send, recv)?;
    if attr.send_cq.is_null() {
        attr.send_cq = c.id.send_cq;
    }
    if attr.recv_cq.is_null() {
        attr.recv_cq = c.id.recv_cq;
    }
    if !c.id.srq.is_null() && attr.srq.is_null() {
        attr.srq = c.id.srq;
    }
    // SAFETY: verbs is a context this library opened; attr is a valid init attr.
    let qp = match verbs_ptr(unsafe { vctx_create_qp_ex(c.id.verbs, attr) }) {
        Ok(qp) => qp,
        Err(e) => {
            destroy_cqs(c);
            return Err(e);
        }
    };
    let ready = if c.id.qp_type == IBV_QPT_UD {
        init_ud_qp(c, qp)
    } else {
        init_conn_qp(c, qp)
    };
    if let Err(e) = ready {
        ibv_destroy_qp(qp);
        destroy_cqs(c);
        return Err(e);
    }
    // SAFETY: qp was just created by this library.
    c.id.pd = unsafe { (*qp).pd };
    c.id.qp = qp;
    Ok(())
}

#[no_mangle]
pub extern "C" fn rdma_create_qp_ex(id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> c_int {
    ffi::minus_one(|| create_qp_ex(cm(id)?, ffi::nonnull(attr)?))
}

#[no_mangle]
pub extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        let init = ffi::nonnull(qp_init_attr)?;
        let mut ex = ibv_qp_init_attr_ex {
            qp_context: init.qp_context,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            cap: init.cap,
            qp_type: init.qp_type,
            sq_sig_all: init.sq_sig_all,
            comp_mask: IBV_QP_INIT_ATTR_PD,
            pd: if pd.is_null() { c.id.pd } else { pd },
            xrcd: core::ptr::null_mut(),
            create_flags: 0,
            max_tso_header: 0,
            rwq_ind_tbl: core::ptr::null_mut(),
            rx_hash_conf: ibv_rx_hash_conf {
                rx_hash_function: 0,
                rx_hash_key_len: 0,
                rx_hash_key: core::ptr::null_mut(),
                rx_hash_fields_mask: 0,
            },
            source_qpn: 0,
            send_ops_flags: 0,
        };
        let r = create_qp_ex(c, &mut ex);
        *init = ibv_qp_init_attr {
            qp_context: ex.qp_context,
            send_cq: ex.send_cq,
            recv_cq: ex.recv_cq,
            srq: ex.srq,
            cap: ex.cap,
            qp_type: ex.qp_type,
            sq_sig_all: ex.sq_sig_all,
        };
        r
    })
}

#[no_mangle]
pub extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    ffi::value((), || {
        if let Ok(c) = cm(id) {
            destroy_qp(c);
        }
    })
}

/// `rdma_destroy_qp` on a known id: the QP, then the CQs and channels made for it.
pub fn destroy_qp(c: &mut CmId) {
    ibv_destroy_qp(c.id.qp);
    c.id.qp = core::ptr::null_mut();
    destroy_cqs(c);
}

fn create_srq_ex(c: &mut CmId, attr: &mut ibv_srq_init_attr_ex) -> VResult<()> {
    if attr.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
        return Err(Errno::EINVAL);
    }
    if attr.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || attr.pd.is_null() {
        attr.pd = c.id.pd;
        attr.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    if attr.srq_type == IBV_SRQT_XRC {
        return create_xrc_srq(c, attr);
    }
    // Tag matching, and attributes a basic SRQ does not take: EOPNOTSUPP.
    if attr.srq_type != IBV_SRQT_BASIC
        || attr.comp_mask & !(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD) != 0
    {
        return Err(Errno::EOPNOTSUPP);
    }
    let mut basic = ibv_srq_init_attr {
        srq_context: attr.srq_context,
        attr: attr.attr,
    };
    let srq = verbs_ptr(ibv_create_srq(attr.pd, &mut basic))?;
    attr.attr = basic.attr;
    if c.id.pd.is_null() {
        c.id.pd = attr.pd;
    }
    c.id.srq = srq;
    Ok(())
}

/// librdmacm's XRC branch of `rdma_create_srq_ex`: the device's XRC domain when none is
/// given, and when no CQ is, a new receive CQ (with its channel) that becomes the id's
/// `recv_cq` (replacing one `rdma_create_qp` made), so `rdma_get_recv_comp` sees the
/// SRQ's completions.
fn create_xrc_srq(c: &mut CmId, attr: &mut ibv_srq_init_attr_ex) -> VResult<()> {
    if attr.comp_mask & IBV_SRQ_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null() {
        attr.xrcd = super::device::xrcd(c.id.verbs)?.cast();
    }
    if attr.comp_mask & IBV_SRQ_INIT_ATTR_CQ == 0 || attr.cq.is_null() {
        create_cqs(c, 0, attr.attr.max_wr)?;
        attr.cq = c.id.recv_cq;
    }
    attr.comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    // SAFETY: verbs is a context this library opened; attr is a valid init attr.
    let srq = verbs_ptr(unsafe { crate::xrc::vctx_create_srq_ex(c.id.verbs, attr) })?;
    c.id.srq = srq;
    Ok(())
}

#[no_mangle]
pub extern "C" fn rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    ffi::minus_one(|| create_srq_ex(cm(id)?, ffi::nonnull(attr)?))
}

#[no_mangle]
pub extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        let a = ffi::nonnull(attr)?;
        let mut ex = ibv_srq_init_attr_ex {
            srq_context: a.srq_context,
            attr: a.attr,
            comp_mask: IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD,
            srq_type: if c.id.qp_type == IBV_QPT_XRC_RECV {
                IBV_SRQT_XRC
            } else {
                IBV_SRQT_BASIC
            },
            pd,
            xrcd: core::ptr::null_mut(),
            cq: core::ptr::null_mut(),
            tm_cap: ibv_tm_cap::default(),
        };
        let r = create_srq_ex(c, &mut ex);
        a.srq_context = ex.srq_context;
        a.attr = ex.attr;
        r
    })
}

#[no_mangle]
pub extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    ffi::value((), || {
        if let Ok(c) = cm(id) {
            destroy_srq(c);
        }
    })
}

/// `rdma_destroy_srq` on a known id: the SRQ, then the CQs and channels made for it.
pub fn destroy_srq(c: &mut CmId) {
    ibv_destroy_srq(c.id.srq);
    c.id.srq = core::ptr::null_mut();
    destroy_cqs(c);
}

#[no_mangle]
pub extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        let a = ffi::nonnull(qp_attr)?;
        let m = ffi::nonnull(qp_attr_mask)?;
        let (attr, attr_mask) = init_qp_attr(c, a.qp_state as u32)?;
        *a = attr;
        *m = attr_mask;
        Ok(())
    })
}

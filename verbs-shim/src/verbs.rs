//! Control-path verbs: PDs, MRs, AHs, SRQs and memory windows. The objects they make
//! are defined in [`crate::objects`] (MRs here: nothing else reads them).
use crate::abi::*;
use crate::async_event::retire;
// The async-event exports live in `async_event`; callers of this module find them here too.
pub use crate::async_event::{ibv_ack_async_event, ibv_get_async_event};
use crate::context::{Context, EventObject};
use crate::ffi::{self, Errno, VResult};
use crate::mmap::Mapping;
use crate::objects::{obj, pd_of, srq_of, Ah, Mw, Pd, RecvQueue, Srq};
use core::ffi::{c_int, c_uint, c_void};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Mutex;
use wire::client::{AhAttr, GlobalRoute, Handle, ReplyBody, RequestBody, SrqAttr};

fn ctx_of<'a>(p: *mut ibv_context) -> VResult<&'a Context> {
    Context::from_ibv(p)
}

fn zeroed_sync<T>() -> T {
    // SAFETY: only used for pthread_mutex_t / pthread_cond_t, whose all-zero value is
    // the static initializer on glibc.
    unsafe { core::mem::zeroed() }
}

// ---- protection domains ----------------------------------------------------------------

#[no_mangle]
pub extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    ffi::ptr(|| {
        let ctx = ctx_of(context)?;
        let ReplyBody::Pd { handle } = ctx.call(RequestBody::AllocPd { ctx: ctx.handle })? else {
            return Err(Errno::EIO);
        };
        let pd = Box::new(Pd {
            pd: ibv_pd {
                context,
                handle: handle.0,
            },
            handle,
        });
        Ok(Box::into_raw(pd) as *mut ibv_pd)
    })
}

#[no_mangle]
pub extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    ffi::errno(|| {
        let p = pd_of(pd)?;
        ctx_of(p.pd.context)?.call(RequestBody::DeallocPd { pd: p.handle })?;
        // SAFETY: boxed in ibv_alloc_pd; the daemon released it.
        drop(unsafe { Box::from_raw(pd as *mut Pd) });
        Ok(())
    })
}

// ---- memory regions ---------------------------------------------------------------------

#[repr(C)]
pub struct Mr {
    pub mr: ibv_mr,
    pub handle: Handle,
    /// The memfds this region's pages were shared through ([`crate::shared_mr::share`]),
    /// released with the region.
    pub shared: Vec<u64>,
}

/// `IBV_ACCESS_OPTIONAL_RANGE`: hints a device may ignore (rdma-core strips them).
pub const ACCESS_OPTIONAL_RANGE: c_uint = 0x3ff0_0000;

fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> VResult<*mut ibv_mr> {
    let p = pd_of(pd)?;
    let ctx = ctx_of(p.pd.context)?;
    // An ODP region is never moved onto a memfd: an implicit one is the whole address
    // space, and an explicit one may cover memory that is mapped only later.
    let odp = access & wire::client::verbs::access::ON_DEMAND != 0;
    let shared = if crate::shared_mr::enabled() && !odp {
        crate::shared_mr::share(addr as u64, length as u64)
    } else {
        crate::shared_mr::Shared::default()
    };
    let raw: Vec<RawFd> = shared.fds.iter().map(AsRawFd::as_raw_fd).collect();
    let reply = ctx.session.call(
        RequestBody::RegMr {
            pd: p.handle,
            addr: addr as u64,
            length: length as u64,
            iova,
            access: access & !ACCESS_OPTIONAL_RANGE,
            shared: shared.pages,
        },
        &raw,
    );
    let Ok((ReplyBody::Mr { handle, lkey, rkey }, _)) = reply else {
        crate::shared_mr::release(&shared.inodes);
        return Err(reply.err().unwrap_or(Errno::EIO));
    };
    let mr = Box::new(Mr {
        mr: ibv_mr {
            context: p.pd.context,
            pd,
            addr,
            length,
            handle: handle.0,
            lkey,
            rkey,
        },
        handle,
        shared: shared.inodes,
    });
    Ok(Box::into_raw(mr) as *mut ibv_mr)
}

#[no_mangle]
pub extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    ffi::ptr(|| reg_mr(pd, addr, length, addr as u64, access as c_uint))
}

#[no_mangle]
pub extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    ffi::ptr(|| reg_mr(pd, addr, length, iova, access as c_uint))
}

#[no_mangle]
pub extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    ffi::ptr(|| reg_mr(pd, addr, length, iova, access))
}

#[no_mangle]
pub extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    ffi::errno(|| {
        // SAFETY: every ibv_mr the shim returns is the first field of an Mr.
        let m: &Mr = unsafe { obj(mr)? };
        ctx_of(m.mr.context)?.call(RequestBody::DeregMr { mr: m.handle })?;
        // SAFETY: boxed in reg_mr; the daemon released it.
        let m = unsafe { Box::from_raw(mr as *mut Mr) };
        crate::shared_mr::release(&m.shared);
        Ok(())
    })
}

// ---- address handles ----------------------------------------------------------------------

pub fn ah_attr_to_wire(a: &ibv_ah_attr) -> AhAttr {
    wire::ah_attr_fields!(AhAttr, GlobalRoute, a, dgid: a.grh.dgid.raw, is_global: a.is_global)
}

pub fn ah_attr_from_wire(a: &AhAttr) -> ibv_ah_attr {
    let dgid = ibv_gid { raw: a.grh.dgid };
    wire::ah_attr_fields!(ibv_ah_attr, ibv_global_route, a, dgid: dgid, is_global: a.is_global)
}

#[no_mangle]
pub extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    ffi::ptr(|| {
        let p = pd_of(pd)?;
        let attr = ffi::nonnull(attr)?;
        let reply = ctx_of(p.pd.context)?.call(RequestBody::CreateAh {
            pd: p.handle,
            attr: ah_attr_to_wire(attr),
        })?;
        let ReplyBody::Ah { handle } = reply else {
            return Err(Errno::EIO);
        };
        let ah = Box::new(Ah {
            ah: ibv_ah {
                context: p.pd.context,
                pd,
                handle: handle.0,
            },
            handle,
        });
        Ok(Box::into_raw(ah) as *mut ibv_ah)
    })
}

#[no_mangle]
pub extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    ffi::errno(|| {
        // SAFETY: every ibv_ah the shim returns is the first field of an Ah.
        let a: &Ah = unsafe { obj(ah)? };
        ctx_of(a.ah.context)?.call(RequestBody::DestroyAh { ah: a.handle })?;
        // SAFETY: boxed in ibv_create_ah; the daemon released it.
        drop(unsafe { Box::from_raw(ah as *mut Ah) });
        Ok(())
    })
}

/// The GIDs of a received GRH area (40 bytes before the payload). On RoCE v2 over
/// IPv4 the area holds the IPv4 header in its last 20 bytes (as rxe does); a GRH
/// proper (IPv6 / IB) starts with version 6.
fn gids_from_grh(grh: &[u8; 40]) -> ([u8; 16], [u8; 16], u32, u8, u8) {
    if grh[0] >> 4 == 6 {
        let mut s = [0; 16];
        let mut d = [0; 16];
        s.copy_from_slice(&grh[8..24]);
        d.copy_from_slice(&grh[24..40]);
        let vtf = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
        (s, d, vtf & 0xfffff, ((vtf >> 20) & 0xff) as u8, grh[7])
    } else {
        let ip = &grh[20..40];
        let mapped = |a: &[u8]| {
            let mut g = [0u8; 16];
            g[10] = 0xff;
            g[11] = 0xff;
            g[12..].copy_from_slice(a);
            g
        };
        (mapped(&ip[12..16]), mapped(&ip[16..20]), 0, ip[1], ip[8])
    }
}

#[no_mangle]
pub extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    ffi::minus_one(|| {
        let ctx = ctx_of(context)?;
        let wc = ffi::nonnull(wc)?;
        let out = ffi::nonnull(ah_attr)?;
        *out = ibv_ah_attr {
            port_num,
            sl: wc.sl,
            dlid: wc.slid,
            ..Default::default()
        };
        // IBV_WC_GRH = 1: RoCE always has one.
        if wc.wc_flags & 1 == 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: the caller passes the 40-byte GRH area of the received buffer.
        let raw: &[u8; 40] = unsafe { (grh as *const [u8; 40]).as_ref() }.ok_or(Errno::EINVAL)?;
        let (sgid, dgid, flow, tclass, hop) = gids_from_grh(raw);
        let sgid_index = ctx
            .gids
            .iter()
            .filter(|g| g.port_num == port_num && g.gid == dgid)
            .min_by_key(|g| {
                if g.gid_type == IBV_GID_TYPE_ROCE_V2 {
                    0
                } else {
                    1
                }
            })
            .map(|g| g.index)
            .ok_or(Errno::ENOENT)?;
        out.is_global = 1;
        out.grh = ibv_global_route {
            dgid: ibv_gid { raw: sgid },
            flow_label: flow,
            sgid_index: sgid_index as u8,
            hop_limit: if hop == 0 { 0xff } else { hop },
            traffic_class: tclass,
        };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    ffi::ptr(|| {
        let p = pd_of(pd)?;
        let mut attr = ibv_ah_attr::default();
        if ibv_init_ah_from_wc(p.pd.context, port_num, wc, grh, &mut attr) != 0 {
            return Err(Errno::last());
        }
        let ah = ibv_create_ah(pd, &mut attr);
        if ah.is_null() {
            Err(Errno::last())
        } else {
            Ok(ah)
        }
    })
}

// ---- shared receive queues ---------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn ibv_create_srq(pd: *mut ibv_pd, init: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    ffi::ptr(|| {
        let p = pd_of(pd)?;
        let init = ffi::nonnull(init)?;
        let ctx = ctx_of(p.pd.context)?;
        let a = &init.attr;
        let attr = SrqAttr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        };
        let (reply, fds) = ctx
            .session
            .call(RequestBody::CreateSrq { pd: p.handle, attr }, &[])?;
        let ReplyBody::Srq { handle, attr, ring } = reply else {
            return Err(Errno::EIO);
        };
        let srq = new_srq(ctx, pd, init.srq_context, (handle, attr, ring), fds, None)?;
        init.attr = srq.1;
        Ok(srq.0)
    })
}

/// The SRQ the daemon's reply (handle, attributes, ring layout, ring memfd) describes,
/// recorded in the context, with its attributes in `ibv_srq_attr` form.
pub(crate) fn new_srq(
    ctx: &Context,
    pd: *mut ibv_pd,
    srq_context: *mut c_void,
    (handle, attr, ring): (Handle, SrqAttr, wire::client::RingLayout),
    fds: Vec<std::os::fd::OwnedFd>,
    srqn: Option<u32>,
) -> VResult<(*mut ibv_srq, ibv_srq_attr)> {
    {
        let p = pd_of(pd)?;
        let fd = fds.into_iter().next().ok_or(Errno::EIO)?;
        let map = Mapping::map(&fd, ring.end() as usize)?;
        let head = wire::client::RingView::new(map.words(), ring)
            .map_err(|_| Errno::EIO)?
            .producer_index();
        let out = ibv_srq_attr {
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            srq_limit: attr.srq_limit,
        };
        let srq = Box::into_raw(Box::new(Srq {
            srq: ibv_srq {
                context: p.pd.context,
                srq_context,
                pd,
                handle: handle.0,
                mutex: zeroed_sync(),
                cond: zeroed_sync(),
                events_completed: 0,
            },
            handle,
            ring: map,
            layout: ring,
            max_sge: attr.max_sge,
            rq: Mutex::new(RecvQueue {
                layout: ring,
                head,
                max_wr: attr.max_wr,
                slot: vec![0; ring.slot_size as usize],
                sges: Vec::with_capacity(attr.max_sge as usize),
            }),
            srqn,
        }));
        ctx.objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .srqs
            .insert(handle.0, srq as usize);
        Ok((srq as *mut ibv_srq, out))
    }
}

#[no_mangle]
pub extern "C" fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    ffi::errno(|| {
        let s = srq_of(srq)?;
        let a = ffi::nonnull(attr)?;
        let attr = SrqAttr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        };
        ctx_of(s.srq.context)?.call(RequestBody::ModifySrq {
            srq: s.handle,
            attr,
            mask: mask as u32,
        })?;
        if mask as u32 & wire::client::verbs::srq_attr_mask::MAX_WR != 0 {
            let mut rq = s.rq.lock().unwrap_or_else(|p| p.into_inner());
            rq.max_wr = attr.max_wr.min(rq.layout.entries);
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    ffi::errno(|| {
        let s = srq_of(srq)?;
        let out = ffi::nonnull(attr)?;
        let ReplyBody::SrqAttr(a) =
            ctx_of(s.srq.context)?.call(RequestBody::QuerySrq { srq: s.handle })?
        else {
            return Err(Errno::EIO);
        };
        *out = ibv_srq_attr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    ffi::errno(|| {
        let s = srq_of(srq)?;
        let ctx = ctx_of(s.srq.context)?;
        ctx.call(RequestBody::DestroySrq { srq: s.handle })?;
        // SAFETY: srq is the live SRQ with this handle; it is freed only below.
        unsafe { retire(ctx, EventObject::Srq, s.handle.0, srq as *mut c_void) };
        // SAFETY: boxed in ibv_create_srq; the daemon released it.
        drop(unsafe { Box::from_raw(srq as *mut Srq) });
        Ok(())
    })
}

// ---- memory windows ----------------------------------------------------------------------------

/// `ops.alloc_mw` (rdma-core's inline `ibv_alloc_mw`).
pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, type_: c_int) -> *mut ibv_mw {
    ffi::ptr(|| {
        let p = pd_of(pd)?;
        let mw_type = u32::try_from(type_).map_err(|_| Errno::EINVAL)?;
        let reply = ctx_of(p.pd.context)?.call(RequestBody::AllocMw {
            pd: p.handle,
            mw_type,
        })?;
        let ReplyBody::Mw { handle, rkey } = reply else {
            return Err(Errno::EIO);
        };
        let mw = Box::new(Mw {
            mw: ibv_mw {
                context: p.pd.context,
                pd,
                rkey,
                handle: handle.0,
                type_,
            },
            handle,
        });
        Ok(Box::into_raw(mw) as *mut ibv_mw)
    })
}

/// `ops.dealloc_mw` (rdma-core's inline `ibv_dealloc_mw`).
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    ffi::errno(|| {
        // SAFETY: every ibv_mw the shim returns is the first field of an Mw.
        let m: &Mw = unsafe { obj(mw)? };
        ctx_of(m.mw.context)?.call(RequestBody::DeallocMw { mw: m.handle })?;
        // SAFETY: boxed in alloc_mw; the daemon released it.
        drop(unsafe { Box::from_raw(mw as *mut Mw) });
        Ok(())
    })
}

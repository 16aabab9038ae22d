//! Shared receive queues, basic and XRC: create, modify, destroy, post. Functions over
//! the device's [`Objects`], which the device's verbs lend them.

use std::collections::VecDeque;

use crate::attr::*;
use crate::objects::{Objects, Srq, XrcSrq};
use crate::types::*;

/// `ibv_create_srq`, and `ibv_create_srq_ex` with `IBV_SRQT_XRC` when `xrc` is set (its
/// XRC domain and CQ were checked by the caller and are referenced here).
pub(crate) fn create(
    o: &mut Objects,
    l: &DeviceLimits,
    owner: ClientId,
    pd: PdHandle,
    attr: SrqAttr,
    xrc: Option<XrcSrq>,
) -> Result<SrqHandle, Errno> {
    if attr.max_wr == 0 || attr.max_wr > l.max_srq_wr || attr.max_sge > l.max_srq_sge {
        return Err(Errno::EINVAL);
    }
    // rxe_srq_chk_init raises max_sge to RXE_MIN_SRQ_SGE (1): an SRQ asked for with
    // no SGE (TensorPipe does so) takes one-SGE receives.
    let attr = SrqAttr {
        max_sge: attr.max_sge.max(1),
        srq_limit: 0,
        ..attr
    };
    if o.srqs.len() >= l.max_srq as usize {
        return Err(Errno::ENOMEM);
    }
    o.pd_ref(pd, 1)?;
    if let Some(x) = xrc {
        if let Some(c) = o.cqs.get_mut(&x.cq.0) {
            c.refs += 1;
        }
        if let Some(d) = o.xrcds.get_mut(&x.xrcd.0) {
            d.refs += 1;
        }
    }
    let h = o.handle();
    o.srqs.insert(
        h,
        Srq {
            owner,
            pd,
            attr,
            wqes: VecDeque::new(),
            refs: 0,
            xrc,
        },
    );
    Ok(SrqHandle(h))
}

/// `ibv_modify_srq`: `LIMIT` arms the limit event, `MAX_WR` resizes.
pub(crate) fn modify(
    o: &mut Objects,
    max: u32,
    srq: SrqHandle,
    attr: &SrqAttr,
    mask: SrqAttrMask,
) -> Result<(), Errno> {
    let s = o.srqs.get_mut(&srq.0).ok_or(Errno::EINVAL)?;
    if mask.0 & !3 != 0 {
        return Err(Errno::EINVAL);
    }
    let new_max = if mask.0 & SrqAttrMask::MAX_WR.0 != 0 {
        attr.max_wr
    } else {
        s.attr.max_wr
    };
    if new_max == 0 || new_max > max || (new_max as usize) < s.wqes.len() {
        return Err(Errno::EINVAL);
    }
    if mask.0 & SrqAttrMask::LIMIT.0 != 0 && attr.srq_limit > new_max {
        return Err(Errno::EINVAL);
    }
    s.attr.max_wr = new_max;
    if mask.0 & SrqAttrMask::LIMIT.0 != 0 {
        s.attr.srq_limit = attr.srq_limit;
    }
    Ok(())
}

/// `ibv_destroy_srq`: EBUSY while a QP uses it (an XRC SRQ's targets name it per
/// message and hold no reference).
pub(crate) fn destroy(o: &mut Objects, srq: SrqHandle) -> Result<(), Errno> {
    match o.srqs.get(&srq.0) {
        None => Err(Errno::EINVAL),
        Some(s) if s.refs > 0 => Err(Errno::EBUSY),
        Some(_) => {
            let Some(s) = o.srqs.remove(&srq.0) else {
                return Err(Errno::EINVAL);
            };
            release(o, &s);
            Ok(())
        }
    }
}

/// Drops the references an SRQ held (its PD; an XRC SRQ's CQ and domain).
pub(crate) fn release(o: &mut Objects, s: &Srq) {
    let _ = o.pd_ref(s.pd, -1);
    if let Some(x) = s.xrc {
        if let Some(c) = o.cqs.get_mut(&x.cq.0) {
            c.refs = c.refs.saturating_sub(1);
        }
        if let Some(d) = o.xrcds.get_mut(&x.xrcd.0) {
            d.refs = d.refs.saturating_sub(1);
        }
    }
}

/// `ibv_post_srq_recv` (one WR).
pub(crate) fn post_recv(o: &mut Objects, srq: SrqHandle, wr: RecvWr) -> Result<(), Errno> {
    let s = o.srqs.get_mut(&srq.0).ok_or(Errno::EINVAL)?;
    if wr.sg_list.len() > s.attr.max_sge as usize {
        return Err(Errno::EINVAL);
    }
    if s.wqes.len() >= s.attr.max_wr as usize {
        return Err(Errno::ENOMEM);
    }
    s.wqes.push_back(wr);
    Ok(())
}

/// Takes the oldest receive WR of SRQ `srq` for an arriving message; when that leaves
/// fewer WRs than the armed limit, raises IBV_EVENT_SRQ_LIMIT_REACHED and disarms the
/// limit, as rxe's and siw's receive paths do. `None` when it is empty or unknown.
pub(crate) fn take(o: &mut Objects, srq: SrqHandle) -> Option<RecvWr> {
    let s = o.srqs.get_mut(&srq.0)?;
    let w = s.wqes.pop_front()?;
    if s.attr.srq_limit > 0 && (s.wqes.len() as u32) < s.attr.srq_limit {
        s.attr.srq_limit = 0;
        o.events
            .push_back((s.owner, AsyncEvent::SrqLimitReached(srq)));
    }
    Some(w)
}

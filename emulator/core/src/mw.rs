//! Memory windows, type 1 and 2 (IBA 10.6.7): allocation, binding, invalidation.

use wire::roce::{Qpn, Rkey};

use crate::attr::*;
use crate::mr::{Keys, Region};
use crate::objects::{Mw, Objects};
use crate::types::*;

/// `ibv_alloc_mw` (type 1 or 2).
pub(crate) fn alloc_mw(
    o: &mut Objects,
    limits: &DeviceLimits,
    pd: PdHandle,
    mw_type: u32,
) -> Result<(MwHandle, Rkey), Errno> {
    if mw_type != 1 && mw_type != 2 {
        return Err(Errno::EINVAL);
    }
    if o.mws.len() >= limits.max_mw as usize {
        return Err(Errno::ENOMEM);
    }
    let owner = o.pd_ref(pd, 1)?;
    let idx = o.keys.alloc_index();
    let key = (idx << 8) | o.key_byte();
    o.keys.by_index.insert(
        idx,
        Region {
            owner,
            pd,
            space: AddrSpace(0),
            host: 0,
            iova: 0,
            length: 0,
            access: AccessFlags::EMPTY,
            key,
            window_of: Some(0),
            valid: false,
            mw_type2: mw_type == 2,
            bound_qp: None,
        },
    );
    let h = o.handle();
    o.mws.insert(h, Mw { owner, pd, key });
    Ok((MwHandle(h), Rkey(key)))
}

/// `ibv_dealloc_mw`.
pub(crate) fn dealloc_mw(o: &mut Objects, mw: MwHandle) -> Result<(), Errno> {
    let m = o.mws.remove(&mw.0).ok_or(Errno::EINVAL)?;
    o.keys.by_index.remove(&(m.key >> 8));
    let _ = o.pd_ref(m.pd, -1);
    Ok(())
}

/// Binds (or, with `length == 0`, unbinds) a window to part of an MR: the work of
/// [`Device::bind_mw`](crate::Device::bind_mw) (type 1, `qpn` = None) and of an
/// `IBV_WR_BIND_MW` WR (type 1 or 2; a type 2 window is then bound to the QP `qpn`).
/// `new_rkey` must keep the window's index (type 1 may pass 0: the key byte is
/// incremented). Returns the new R_Key.
pub(crate) fn bind_window(
    keys: &mut Keys,
    qp_pd: PdHandle,
    qpn: Option<Qpn>,
    info: &BindMwInfo,
) -> Result<Rkey, WcStatus> {
    let idx = info.mw_rkey.0 >> 8;
    let mr = keys.get(info.mr_lkey.0).cloned();
    let w = keys.by_index.get(&idx).ok_or(WcStatus::MwBindErr)?;
    // Type 2 windows are bound only through a QP's send queue; type 1 either way
    // (rxe's ibv_bind_mw posts a BIND_MW WR too).
    if w.window_of.is_none() || w.pd != qp_pd || (w.mw_type2 && qpn.is_none()) {
        return Err(WcStatus::MwBindErr);
    }
    let type2 = w.mw_type2;
    // The new key keeps the window's index; its low byte is the caller's choice
    // (`new_rkey`), or for a type 1 window without one, the next value.
    let new_key = if info.new_rkey.0 >> 8 == idx {
        info.new_rkey.0
    } else if type2 {
        return Err(WcStatus::MwBindErr);
    } else {
        (idx << 8) | ((w.key + 1) & 0xff)
    };
    if info.length == 0 {
        let w = keys.by_index.get_mut(&idx).ok_or(WcStatus::MwBindErr)?;
        w.valid = false;
        w.key = new_key;
        return Ok(Rkey(new_key));
    }
    let mr = mr
        .filter(|m| m.window_of.is_none())
        .ok_or(WcStatus::MwBindErr)?;
    let off = info.addr.checked_sub(mr.iova).ok_or(WcStatus::MwBindErr)?;
    if mr.pd != qp_pd
        || !mr.access.contains(AccessFlags::MW_BIND)
        || off.checked_add(info.length).is_none_or(|e| e > mr.length)
        || (info
            .access
            .intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !mr.access.contains(AccessFlags::LOCAL_WRITE))
    {
        return Err(WcStatus::MwBindErr);
    }
    let w = keys.by_index.get_mut(&idx).ok_or(WcStatus::MwBindErr)?;
    w.window_of = Some(mr.key);
    w.space = mr.space;
    w.host = mr.host + off;
    w.iova = if info.access.contains(AccessFlags::ZERO_BASED) {
        0
    } else {
        info.addr
    };
    w.length = info.length;
    w.access = AccessFlags(info.access.0 & 0x2e);
    w.valid = true;
    w.key = new_key;
    w.bound_qp = if type2 { qpn.map(|q| q.0) } else { None };
    Ok(Rkey(new_key))
}

//! Memory windows, type 1 and 2 (IBA 10.6.7): allocation, binding, invalidation.

use wire::roce::{Qpn, Rkey};

use crate::attr::*;
use crate::device::{Device, Mw};
use crate::mr::Region;
use crate::types::*;

impl Device {
    /// `ibv_alloc_mw` (type 1 or 2).
    pub fn alloc_mw(&mut self, pd: PdHandle, mw_type: u32) -> Result<(MwHandle, Rkey), Errno> {
        if mw_type != 1 && mw_type != 2 {
            return Err(Errno::EINVAL);
        }
        if self.o.mws.len() >= self.cfg.limits.max_mw as usize {
            return Err(Errno::ENOMEM);
        }
        let owner = self.pd_ref(pd, 1)?;
        let idx = self.o.keys.alloc_index();
        let key = (idx << 8) | self.o.key_byte();
        self.o.keys.by_index.insert(
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
        let h = self.o.handle();
        self.o.mws.insert(h, Mw { owner, pd, key });
        Ok((MwHandle(h), Rkey(key)))
    }

    /// `ibv_dealloc_mw`.
    pub fn dealloc_mw(&mut self, mw: MwHandle) -> Result<(), Errno> {
        let m = self.o.mws.remove(&mw.0).ok_or(Errno::EINVAL)?;
        self.o.keys.by_index.remove(&(m.key >> 8));
        let _ = self.pd_ref(m.pd, -1);
        Ok(())
    }

    /// Binds (or, with `length == 0`, unbinds) a window to part of an MR: the work of
    /// [`Device::bind_mw`] (type 1, `qpn` = None) and of an `IBV_WR_BIND_MW` WR (type 1 or
    /// 2; a type 2 window is then bound to the QP `qpn`). `new_rkey` must keep the
    /// window's index (type 1 may pass 0: the key byte is incremented). Returns the new
    /// R_Key.
    pub(crate) fn bind_window(
        &mut self,
        qp_pd: PdHandle,
        qpn: Option<Qpn>,
        info: &BindMwInfo,
    ) -> Result<Rkey, WcStatus> {
        let idx = info.mw_rkey.0 >> 8;
        let mr = self.o.keys.get(info.mr_lkey.0).cloned();
        let w = self.o.keys.by_index.get(&idx).ok_or(WcStatus::MwBindErr)?;
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
            let w = self
                .o
                .keys
                .by_index
                .get_mut(&idx)
                .ok_or(WcStatus::MwBindErr)?;
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
        let w = self
            .o
            .keys
            .by_index
            .get_mut(&idx)
            .ok_or(WcStatus::MwBindErr)?;
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

    /// `ibv_bind_mw` for a type 1 window (executed at once; the daemon reports the
    /// completion the application asked for).
    pub fn bind_mw(&mut self, qpn: Qpn, info: &BindMwInfo) -> Result<Rkey, Errno> {
        let pd = self.qps.get(&qpn.0).ok_or(Errno::EINVAL)?.init.pd;
        self.bind_window(pd, None, info).map_err(|_| Errno::EINVAL)
    }
}

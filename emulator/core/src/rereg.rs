//! `ibv_rereg_mr` as the kernel's rxe does it (`rxe_rereg_user_mr` behind uverbs'
//! `ib_uverbs_rereg_mr`): the PD and the access rights of a registered region change in
//! place and its keys stay; a change of translation (address, length) is refused.
//!
//! Work already past its key check (a multi-packet message whose first packet was
//! accepted) finishes under the old rights, as on rxe, where the responder checks the
//! rkey on a message's first packet; every later check sees the new PD and rights.

use crate::attr::MrKeys;
use crate::mr::check_rights;
use crate::objects::Objects;
use crate::types::{AccessFlags, Errno, PdHandle};
use wire::roce::{Lkey, Rkey};

/// `IBV_REREG_MR_CHANGE_TRANSLATION`.
pub const REREG_TRANSLATION: u32 = 1 << 0;
/// `IBV_REREG_MR_CHANGE_PD`.
pub const REREG_PD: u32 = 1 << 1;
/// `IBV_REREG_MR_CHANGE_ACCESS`.
pub const REREG_ACCESS: u32 = 1 << 2;

/// What one `ibv_rereg_mr` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReregMr {
    /// `IBV_REREG_MR_CHANGE_*` ([`REREG_PD`], [`REREG_ACCESS`], [`REREG_TRANSLATION`]).
    pub flags: u32,
    /// The new PD (read with [`REREG_PD`]).
    pub pd: PdHandle,
    /// The new rights (read with [`REREG_ACCESS`]).
    pub access: AccessFlags,
    /// Whether the region's memory was checked writable when it was registered (it was
    /// registered with a write right). Without it, gaining a write right is EACCES, as
    /// the kernel's `ib_umem_check_rereg` refuses to make read-only pinned pages
    /// writable.
    pub pinned_writable: bool,
}

/// Rights that let the device write the region (the kernel's `ib_access_writable`).
const WRITABLE: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_ATOMIC.0,
);

/// Changes the MR named by `lkey`; nothing changes when the answer is an error. In
/// uverbs' and rxe's order: `flags` of 0 or unknown bits, rights `ibv_reg_mr` refuses,
/// a PD that is not the region owner's, or an unknown MR: EINVAL; a change of
/// translation, of `ZERO_BASED` or of `ON_DEMAND`: EOPNOTSUPP;
/// a write right on memory not pinned writable: EACCES.
pub(crate) fn rereg_mr(o: &mut Objects, lkey: Lkey, r: ReregMr) -> Result<MrKeys, Errno> {
    let known = REREG_TRANSLATION | REREG_PD | REREG_ACCESS;
    if r.flags == 0 || r.flags & !known != 0 {
        return Err(Errno::EINVAL);
    }
    let region = o
        .keys
        .get(lkey.0)
        .filter(|m| m.window_of.is_none())
        .ok_or(Errno::EINVAL)?;
    let (owner, old_pd, key, old_access) = (region.owner, region.pd, region.key, region.access);
    let access = r.flags & REREG_ACCESS != 0;
    if access {
        check_rights(r.access)?;
    }
    let change_pd = r.flags & REREG_PD != 0;
    if change_pd && o.pds.get(&r.pd.0).is_none_or(|p| p.owner != owner) {
        return Err(Errno::EINVAL);
    }
    if r.flags & REREG_TRANSLATION != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    // ZERO_BASED moves the region's addresses; ON_DEMAND changes how its pages are
    // reached and what it counts against the memory limit. Neither changes in place.
    let fixed = AccessFlags::ZERO_BASED.0 | AccessFlags::ON_DEMAND.0;
    if access && (r.access.0 ^ old_access.0) & fixed != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if access && r.access.intersects(WRITABLE) && !r.pinned_writable {
        return Err(Errno::EACCES);
    }
    if change_pd && r.pd != old_pd {
        o.pd_ref(r.pd, 1)?;
        let _ = o.pd_ref(old_pd, -1);
    }
    if let Some(m) = o.keys.by_index.get_mut(&(key >> 8)) {
        if change_pd {
            m.pd = r.pd;
        }
        if access {
            m.access = r.access;
        }
    }
    Ok(MrKeys {
        lkey: Lkey(key),
        rkey: Rkey(key),
    })
}

//! Memory regions and windows: key lookup with the PD, bounds and access checks of
//! IBA 10.6 (local) and 9.7.5.1.x / 10.6.7 (remote).
//!
//! On-demand paging (`IBV_ACCESS_ON_DEMAND`): a NIC with ODP does not pin a region's
//! pages at registration but faults them in when it touches them. rdma-emu never pins
//! (the daemon reaches memory with pread/pwrite on the client's `/proc/PID/mem`, and the
//! kernel faults pages in on access), so an ODP region is checked and used like any
//! other; what differs is registration: its range need not be mapped yet, and an
//! *implicit* ODP region (`ibv_reg_mr(pd, NULL, SIZE_MAX, access)`, address 0 and length
//! `u64::MAX`) covers the whole address space of its owner. Its keys reach any address of
//! that client and nothing else: the region's [`AddrSpace`] is the owner's.

use crate::types::U32Map;

use crate::types::{AccessFlags, AddrSpace, ClientId, Errno, PdHandle};

/// The rights `ibv_reg_mr` and `ibv_rereg_mr` accept, else EINVAL: only known bits,
/// `HUGETLB` only with `ON_DEMAND`, and (IBA 10.6.3.1) remote write or atomic only with
/// local write. `IBV_ACCESS_FLUSH_PERSISTENT` is not known: rxe refuses it on pages that
/// are not persistent memory, and process memory never is (see `mpe.rs`).
pub(crate) fn check_rights(access: AccessFlags) -> Result<(), Errno> {
    let known = AccessFlags(0x3f)
        | AccessFlags::ON_DEMAND
        | AccessFlags::HUGETLB
        | AccessFlags::FLUSH_GLOBAL;
    if !known.contains(access)
        || (access.contains(AccessFlags::HUGETLB) && !access.contains(AccessFlags::ON_DEMAND))
    {
        return Err(Errno::EINVAL);
    }
    if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// Checks a registration's range and access flags (`ibv_reg_mr`, as the kernel's
/// `ib_check_mr_access` and the drivers do): EINVAL for an unknown flag, remote write or
/// atomic without local write (IBA 10.6.3.1), HUGETLB without ON_DEMAND, a region longer
/// than `max_mr_size` or wrapping the address space. An implicit ODP region (ON_DEMAND,
/// address 0, length `u64::MAX`) must have IOVA 0, as the kernel's rxe and mlx5 require.
pub(crate) fn check_registration(
    addr: u64,
    length: u64,
    iova: u64,
    access: AccessFlags,
    max_mr_size: u64,
) -> Result<(), Errno> {
    check_rights(access)?;
    if access.contains(AccessFlags::ON_DEMAND) && addr == 0 && length == u64::MAX {
        return if iova == 0 {
            Ok(())
        } else {
            Err(Errno::EINVAL)
        };
    }
    if length > max_mr_size
        || addr.checked_add(length).is_none()
        || iova.checked_add(length).is_none()
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// A registered region (or a bound window, which points into one).
#[derive(Debug, Clone)]
pub(crate) struct Region {
    pub owner: ClientId,
    pub pd: PdHandle,
    pub space: AddrSpace,
    /// Host address of the first byte.
    pub host: u64,
    /// The address the first byte has for keys (IOVA; 0 when zero-based).
    pub iova: u64,
    pub length: u64,
    pub access: AccessFlags,
    /// The full key (index << 8 | key byte).
    pub key: u32,
    /// Window: the MR key it is bound to; `None` for an MR.
    pub window_of: Option<u32>,
    /// Windows: whether bound (an unbound or invalidated window grants nothing).
    pub valid: bool,
    /// Windows: type 2 (bound through the send queue) or type 1.
    pub mw_type2: bool,
    /// Windows: for type 2, the QP it is bound to.
    pub bound_qp: Option<u32>,
}

/// Why a key check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// No such key / wrong key byte / invalidated.
    BadKey,
    /// Key exists but the PD differs.
    Pd,
    /// Range outside the region.
    Bounds,
    /// Access flag missing.
    Access,
}

/// MRs and MWs by index (the key's upper 24 bits).
#[derive(Debug, Default)]
pub(crate) struct Keys {
    pub by_index: U32Map<Region>,
    next_index: u32,
}

impl Keys {
    pub fn alloc_index(&mut self) -> u32 {
        loop {
            self.next_index = (self.next_index + 1) & 0x00ff_ffff;
            if self.next_index != 0 && !self.by_index.contains_key(&self.next_index) {
                return self.next_index;
            }
        }
    }

    pub fn get(&self, key: u32) -> Option<&Region> {
        self.by_index.get(&(key >> 8)).filter(|r| r.key == key)
    }

    /// Where `ibv_advise_mr` touches `[addr, addr + len)` under `lkey` of `pd`: (space,
    /// host address). As the kernel's rxe answers: EINVAL when the key names no valid MR
    /// of `pd` with local write (rxe looks the MR up asking for LOCAL_WRITE, whatever the
    /// advice) or an MR without ON_DEMAND (rdma-core's man page requires ODP MRs; rxe
    /// does not check); EFAULT when the range leaves the MR.
    pub fn prefetch_target(
        &self,
        lkey: u32,
        pd: PdHandle,
        addr: u64,
        len: u64,
    ) -> Result<(AddrSpace, u64), Errno> {
        let r = self
            .get(lkey)
            .filter(|r| r.window_of.is_none() && r.valid && r.pd == pd)
            .filter(|r| {
                r.access
                    .contains(AccessFlags::LOCAL_WRITE | AccessFlags::ON_DEMAND)
            })
            .ok_or(Errno::EINVAL)?;
        let off = addr.checked_sub(r.iova).ok_or(Errno::EFAULT)?;
        if off.checked_add(len).is_none_or(|end| end > r.length) {
            return Err(Errno::EFAULT);
        }
        Ok((r.space, r.host.wrapping_add(off)))
    }

    #[allow(clippy::too_many_arguments)]
    /// Resolves `[addr, addr+len)` under `key` to `(space, host address)`.
    pub fn resolve(
        &self,
        key: u32,
        pd: PdHandle,
        addr: u64,
        len: u64,
        need: AccessFlags,
        remote: bool,
        qpn: u32,
    ) -> Result<(AddrSpace, u64), KeyError> {
        let r = self.get(key).ok_or(KeyError::BadKey)?;
        if !r.valid {
            return Err(KeyError::BadKey);
        }
        if remote && r.window_of.is_none() && !r.access.intersects(AccessFlags(0xe)) {
            // An MR without remote rights has no usable rkey.
            return Err(KeyError::BadKey);
        }
        if r.pd != pd {
            return Err(KeyError::Pd);
        }
        if r.mw_type2 && r.bound_qp.is_some_and(|q| q != qpn) {
            return Err(KeyError::Pd);
        }
        if !r.access.contains(need) {
            return Err(KeyError::Access);
        }
        if len == 0 {
            return Ok((r.space, r.host));
        }
        let off = addr.checked_sub(r.iova).ok_or(KeyError::Bounds)?;
        let end = off.checked_add(len).ok_or(KeyError::Bounds)?;
        if end > r.length {
            return Err(KeyError::Bounds);
        }
        Ok((r.space, r.host.wrapping_add(off)))
    }
}

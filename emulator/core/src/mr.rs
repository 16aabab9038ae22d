//! Memory regions and windows: key lookup with the PD, bounds and access checks of
//! IBA 10.6 (local) and 9.7.5.1.x / 10.6.7 (remote).

use crate::types::U32Map;

use crate::types::{AccessFlags, AddrSpace, ClientId, PdHandle};

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
        Ok((r.space, r.host + off))
    }
}

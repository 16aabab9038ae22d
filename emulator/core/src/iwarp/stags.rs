//! STag (Steering Tag, RFC 5040 §2) resolution: the iWARP name of an MR's key.
//!
//! The transport asks a [`Stags`] table to turn `(STag, tagged offset, length)` into
//! application memory after the PD, bounds and access checks. [`crate::Device`]
//! implements it with the same key table and checks the RoCE transport uses (an STag is
//! the MR's lkey/rkey); [`MrTable`] is a small stand-alone table for tests and tools.
//!
//! The same table is how a connection reaches the device's shared receive queues: a QP
//! created with an SRQ ([`super::IwarpConfig::srq`]) takes each Send's receive WR from
//! it when the Send's first segment arrives, as siw's `siw_rqe_get` does.

use crate::attr::RecvWr;
use crate::mr::KeyError;
use crate::types::{AccessFlags, AddrSpace, PdHandle, SrqHandle};

/// Why an STag check failed (RFC 5040 §7 / RFC 5041 §7 name each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StagError {
    /// No such STag, or it was invalidated.
    Invalid,
    /// The STag exists but belongs to another PD (or a type 2 window of another QP).
    NotAssociated,
    /// The range is outside the region.
    BaseBounds,
    /// The region lacks the access right.
    Access,
}

impl StagError {
    fn from_key(e: KeyError) -> StagError {
        match e {
            KeyError::BadKey => StagError::Invalid,
            KeyError::Pd => StagError::NotAssociated,
            KeyError::Bounds => StagError::BaseBounds,
            KeyError::Access => StagError::Access,
        }
    }
}

/// A table of STags with their PD, range and rights.
pub trait Stags {
    /// Resolves `[addr, addr + len)` under `stag` to `(space, host address)`.
    ///
    /// `remote` is true for STags named by the peer (then the region needs a remote
    /// right); `qpn` is the local QP (for type 2 windows).
    #[allow(clippy::too_many_arguments)]
    fn resolve(
        &self,
        stag: u32,
        pd: PdHandle,
        qpn: u32,
        addr: u64,
        len: u64,
        need: AccessFlags,
        remote: bool,
    ) -> Result<(AddrSpace, u64), StagError>;

    /// Invalidates `stag` (Send with Invalidate, RFC 5040 §5.3; Local Invalidate).
    fn invalidate(&mut self, stag: u32, pd: PdHandle) -> Result<(), StagError>;

    /// Takes the oldest receive WR of shared receive queue `srq`, with the SRQ's PD (its
    /// SGEs are checked against it), raising the SRQ's limit event when it falls below
    /// its armed limit; `None` when the SRQ is empty or unknown. A table of STags alone
    /// has no SRQs.
    fn take_srq_recv(&mut self, srq: SrqHandle) -> Option<(RecvWr, PdHandle)> {
        let _ = srq;
        None
    }

    /// Whether shared receive queue `srq` holds a receive WR.
    fn srq_has_recv(&self, srq: SrqHandle) -> bool {
        let _ = srq;
        false
    }
}

impl Stags for crate::Device {
    fn resolve(
        &self,
        stag: u32,
        pd: PdHandle,
        qpn: u32,
        addr: u64,
        len: u64,
        need: AccessFlags,
        remote: bool,
    ) -> Result<(AddrSpace, u64), StagError> {
        self.o
            .keys
            .resolve(stag, pd, addr, len, need, remote, qpn)
            .map_err(StagError::from_key)
    }

    fn invalidate(&mut self, stag: u32, pd: PdHandle) -> Result<(), StagError> {
        let r = self
            .o
            .keys
            .by_index
            .get_mut(&(stag >> 8))
            .filter(|r| r.key == stag && r.valid)
            .ok_or(StagError::Invalid)?;
        if r.pd != pd {
            return Err(StagError::NotAssociated);
        }
        // IBA 10.6.7.2: a type 1 window is never invalidated remotely.
        if r.window_of.is_some() && !r.mw_type2 {
            return Err(StagError::Access);
        }
        r.valid = false;
        Ok(())
    }

    fn take_srq_recv(&mut self, srq: SrqHandle) -> Option<(RecvWr, PdHandle)> {
        let pd = self.o.srqs.get(&srq.0)?.pd;
        crate::srq::take(&mut self.o, srq).map(|wr| (wr, pd))
    }

    fn srq_has_recv(&self, srq: SrqHandle) -> bool {
        self.o.srqs.get(&srq.0).is_some_and(|s| !s.wqes.is_empty())
    }
}

/// One region of an [`MrTable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrEntry {
    /// The STag (lkey = rkey).
    pub stag: u32,
    /// Protection domain.
    pub pd: PdHandle,
    /// Whose memory.
    pub space: AddrSpace,
    /// Address of the first byte, as tagged offsets name it (and as the host sees it).
    pub addr: u64,
    /// Length.
    pub length: u64,
    /// Rights.
    pub access: AccessFlags,
    /// Not invalidated.
    pub valid: bool,
}

/// A stand-alone STag table with the same checks as the device's key table.
#[derive(Debug, Clone, Default)]
pub struct MrTable {
    /// The regions.
    pub entries: Vec<MrEntry>,
}

impl MrTable {
    /// An empty table.
    pub fn new() -> MrTable {
        MrTable::default()
    }

    /// Registers `[addr, addr + length)` of `space` under `stag`.
    pub fn register(
        &mut self,
        stag: u32,
        pd: PdHandle,
        space: AddrSpace,
        addr: u64,
        length: u64,
        access: AccessFlags,
    ) {
        self.entries.retain(|e| e.stag != stag);
        self.entries.push(MrEntry {
            stag,
            pd,
            space,
            addr,
            length,
            access,
            valid: true,
        });
    }
}

impl Stags for MrTable {
    fn resolve(
        &self,
        stag: u32,
        pd: PdHandle,
        _qpn: u32,
        addr: u64,
        len: u64,
        need: AccessFlags,
        remote: bool,
    ) -> Result<(AddrSpace, u64), StagError> {
        let e = self
            .entries
            .iter()
            .find(|e| e.stag == stag && e.valid)
            .ok_or(StagError::Invalid)?;
        if remote && !e.access.intersects(AccessFlags(0xe)) {
            return Err(StagError::Invalid);
        }
        if e.pd != pd {
            return Err(StagError::NotAssociated);
        }
        if !e.access.contains(need) {
            return Err(StagError::Access);
        }
        if len == 0 {
            return Ok((e.space, e.addr));
        }
        let off = addr.checked_sub(e.addr).ok_or(StagError::BaseBounds)?;
        let end = off.checked_add(len).ok_or(StagError::BaseBounds)?;
        if end > e.length {
            return Err(StagError::BaseBounds);
        }
        Ok((e.space, e.addr + off))
    }

    fn invalidate(&mut self, stag: u32, pd: PdHandle) -> Result<(), StagError> {
        let e = self
            .entries
            .iter_mut()
            .find(|e| e.stag == stag && e.valid)
            .ok_or(StagError::Invalid)?;
        if e.pd != pd {
            return Err(StagError::NotAssociated);
        }
        e.valid = false;
        Ok(())
    }
}

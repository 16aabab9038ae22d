//! Registered pages a client moved onto a memfd (`RDMA_EMU_SHARED_MR=1` in the shim), the
//! fast path of DESIGN decision 1: the daemon maps the memfd and copies at memory speed
//! instead of going through the client's `/proc/self/mem`.
//!
//! The memfd is hostile input. It is accepted only when the kernel says it is sealed
//! against shrinking and growing (a client that truncated a file the daemon maps would
//! make the daemon's next access raise SIGBUS) and long enough for the pages it is said to
//! back; anything else is refused, and the pages stay on the descriptor path, which reaches
//! the same memory. A client that lies about which pages a memfd backs only misdirects its
//! own data: the core checked the keys, PD, bounds and access before any copy.
//!
//! [`SharedRanges`] is one client's map from address ranges to mapped memfds. Ranges are
//! disjoint and counted: every MR that attached a range holds one count, so overlapping or
//! repeated registrations of the same pages share one mapping, and the mapping goes when
//! the last MR using it is deregistered (or the client goes).

use crate::daemon::sys::{self, ClientPages};
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use wire::client::SharedPages;

/// The page size the client and daemon agree on (x86-64 and aarch64 4 KiB kernels; a
/// larger kernel page size only makes some valid requests refused, never unsafe).
pub const PAGE: u64 = 4096;

/// Why a memfd was not taken; the pages stay on the descriptor path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not a memfd, or not sealed against both shrinking and growing.
    NotSealed,
    /// Empty, unaligned, or larger than the memfd.
    BadRange,
    /// Overlaps pages already backed by another memfd or at another offset.
    Conflict,
    /// The kernel refused the mapping (descriptor not read-write, write-sealed, ...).
    Map,
}

/// One mapped memfd, shared by every range it backs.
#[derive(Debug)]
struct Memfd {
    pages: ClientPages,
    id: (u64, u64),
}

#[derive(Debug, Clone)]
struct Range {
    end: u64,
    memfd: Arc<Memfd>,
    /// Memfd offset of the range's first byte.
    offset: u64,
    /// MRs that attached this range.
    users: u32,
}

impl Range {
    /// `offset - start`: equal for every range that maps the same file the same way.
    fn delta(&self, start: u64) -> u64 {
        self.offset.wrapping_sub(start)
    }
}

/// What covers the start of an access.
#[derive(Debug)]
pub enum Piece<'a> {
    /// The next `len` bytes are at `offset` of a mapped memfd.
    Shared {
        pages: &'a ClientPages,
        offset: usize,
        len: usize,
    },
    /// The next `len` bytes are not shared: the descriptor path.
    Other { len: usize },
}

/// One client's shared ranges.
#[derive(Debug, Default)]
pub struct SharedRanges {
    ranges: BTreeMap<u64, Range>,
    /// Mapped memfds by file identity: a second descriptor of a file already mapped
    /// reuses the mapping.
    memfds: HashMap<(u64, u64), Arc<Memfd>>,
}

impl SharedRanges {
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Checks `fd` and adds `p` for one more user (an MR). On `Err` nothing changed.
    pub fn attach(&mut self, p: SharedPages, fd: OwnedFd) -> Result<(), Refused> {
        let info = sys::memfd_info(&fd).map_err(|_| Refused::NotSealed)?;
        let need = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        if info.seals & need != need {
            return Err(Refused::NotSealed);
        }
        let aligned = |v: u64| v.is_multiple_of(PAGE);
        let end = p.addr.checked_add(p.len).ok_or(Refused::BadRange)?;
        let fd_end = p.offset.checked_add(p.len).ok_or(Refused::BadRange)?;
        if p.len == 0
            || !aligned(p.addr)
            || !aligned(p.len)
            || !aligned(p.offset)
            || fd_end > info.size
        {
            return Err(Refused::BadRange);
        }
        let delta = p.offset.wrapping_sub(p.addr);
        let conflict = self
            .overlapping(p.addr, end)
            .any(|(&s, r)| r.memfd.id != info.id || r.delta(s) != delta);
        if conflict {
            return Err(Refused::Conflict);
        }
        let memfd = match self.memfds.get(&info.id) {
            Some(m) => m.clone(),
            None => {
                let len = usize::try_from(info.size).map_err(|_| Refused::BadRange)?;
                let pages = ClientPages::map(&fd, len).map_err(|_| Refused::Map)?;
                let m = Arc::new(Memfd { pages, id: info.id });
                self.memfds.insert(info.id, m.clone());
                m
            }
        };
        self.split_at(p.addr);
        self.split_at(end);
        // Count the ranges already there, fill the gaps between them.
        let mut at = p.addr;
        let existing: Vec<u64> = self.overlapping(p.addr, end).map(|(&s, _)| s).collect();
        for s in existing {
            self.insert_gap(at, s, &memfd, delta);
            if let Some(r) = self.ranges.get_mut(&s) {
                r.users += 1;
                at = r.end;
            }
        }
        self.insert_gap(at, end, &memfd, delta);
        Ok(())
    }

    /// Takes one user off `[addr, addr + len)` (attached before); ranges without users
    /// go, and a memfd without ranges is unmapped.
    pub fn detach(&mut self, addr: u64, len: u64) {
        let Some(end) = addr.checked_add(len) else {
            return;
        };
        self.split_at(addr);
        self.split_at(end);
        let inside: Vec<u64> = self.overlapping(addr, end).map(|(&s, _)| s).collect();
        for s in inside {
            if let Some(r) = self.ranges.get_mut(&s) {
                r.users = r.users.saturating_sub(1);
                if r.users == 0 {
                    self.ranges.remove(&s);
                }
            }
        }
        self.memfds.retain(|_, m| Arc::strong_count(m) > 1);
    }

    /// What covers `addr`, up to `end` (exclusive, `end > addr`).
    pub fn piece(&self, addr: u64, end: u64) -> Piece<'_> {
        let covering = self
            .ranges
            .range(..=addr)
            .next_back()
            .filter(|(_, r)| r.end > addr);
        if let Some((&s, r)) = covering {
            let len = r.end.min(end) - addr;
            return Piece::Shared {
                pages: &r.memfd.pages,
                offset: (r.offset + (addr - s)) as usize,
                len: len as usize,
            };
        }
        let next = self
            .ranges
            .range((Bound::Excluded(addr), Bound::Unbounded))
            .next()
            .map_or(end, |(&s, _)| s.min(end));
        Piece::Other {
            len: (next - addr) as usize,
        }
    }

    /// Ranges that intersect `[start, end)`, in address order.
    fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = (&u64, &Range)> {
        let first = self
            .ranges
            .range(..start)
            .next_back()
            .filter(|(_, r)| r.end > start);
        first.into_iter().chain(self.ranges.range(start..end))
    }

    /// Cuts the range that strictly contains `at` in two at `at`.
    fn split_at(&mut self, at: u64) {
        let Some((&s, r)) = self.ranges.range(..at).next_back() else {
            return;
        };
        if r.end <= at {
            return;
        }
        let mut tail = r.clone();
        tail.offset = r.offset + (at - s);
        if let Some(head) = self.ranges.get_mut(&s) {
            head.end = at;
        }
        self.ranges.insert(at, tail);
    }

    fn insert_gap(&mut self, start: u64, end: u64, memfd: &Arc<Memfd>, delta: u64) {
        if start < end {
            self.ranges.insert(
                start,
                Range {
                    end,
                    memfd: memfd.clone(),
                    offset: start.wrapping_add(delta),
                    users: 1,
                },
            );
        }
    }
}

#[cfg(test)]
#[path = "shared_pages_tests.rs"]
mod tests;

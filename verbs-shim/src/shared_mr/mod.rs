//! Shared memory regions: the fast path of DESIGN decision 1, on by default
//! (`RDMA_EMU_SHARED_MR=0` turns it off). At registration the whole pages of the buffer
//! move onto a memfd in place ([`swap`]: the contents are copied into a sealed memfd,
//! which then replaces the pages at the same addresses), and the memfd goes to the daemon
//! with the request, so the daemon maps the same pages and copies at memory speed instead
//! of going through `/proc/self/mem`. The descriptor path stays the fallback: partial
//! head and tail pages (which may hold other data), and anything this module does not
//! move, go through it.
//!
//! Only private, anonymous, read-write mappings move: `mmap`ed memory, `malloc` blocks
//! (the brk heap and glibc's arenas included); stacks, files and shared mappings do not.
//! The application's semantics stay those of private memory:
//! - a write by another thread during the move waits until the move is done and is not
//!   lost ([`swap::WriteFence`], a userfaultfd; where none can be made, nothing moves);
//! - a child of `fork()` gets a private copy of the pages ([`fork`]);
//! - when the last registration over the pages is gone, they move back onto private
//!   memory ([`release`]), so `MADV_DONTNEED`, `mremap` and `fork` behave as before.
//!
//! The kernel's list of mappings (`/proc/self/maps`) is the interval map of moved pages:
//! a registration over pages already on one of this process's memfds (the same buffer
//! again, or an overlapping one) finds that memfd and its offset there and reuses them
//! instead of moving twice, and a buffer that was unmapped since is not mistaken for the
//! old one. [`Converted`] keeps one descriptor per memfd still mapped somewhere, with the
//! number of registrations using it.

mod fork;
mod maps;
mod swap;

pub use maps::MapsLine;
use maps::{maps, Converted, Memfds, CONVERTED};

use crate::ffi::{Errno, VResult};
use crate::log::shim_log;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::OnceLock;
use wire::client::{SharedPages, MAX_SHARED_PAGES};

/// Environment variable that turns shared memory regions off (`0`; unset or anything
/// else leaves them on).
pub const SHARED_MR_ENV: &str = "RDMA_EMU_SHARED_MR";

pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(SHARED_MR_ENV).is_none_or(|v| v != "0"))
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).unwrap_or(4096).max(4096)
}

/// What to do with one run of whole pages of a registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Already on memfd `inode` at `offset`: offer it again.
    Reuse {
        addr: u64,
        len: u64,
        inode: u64,
        offset: u64,
    },
    /// Private anonymous pages: move them onto a new memfd.
    Convert { addr: u64, len: u64 },
}

/// The steps for the whole pages `[start, end)` given the process's mappings: runs of
/// convertible pages and of pages already on our memfds, in address order, at most
/// [`MAX_SHARED_PAGES`] of them; everything else is left to the descriptor path.
pub fn plan(maps: &[MapsLine], start: u64, end: u64, known: &Memfds) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for m in maps.iter().filter(|m| m.end > start && m.start < end) {
        let (s, e) = (m.start.max(start), m.end.min(end));
        let step = if m.convertible() {
            Step::Convert {
                addr: s,
                len: e - s,
            }
        } else if m.ours(known) {
            Step::Reuse {
                addr: s,
                len: e - s,
                inode: m.inode,
                offset: m.offset + (s - m.start),
            }
        } else {
            continue;
        };
        // Adjacent runs of one kind merge: several anonymous mappings become one memfd,
        // and pieces of one memfd at consecutive offsets are one range.
        match (steps.last_mut(), step) {
            (Some(Step::Convert { addr, len }), Step::Convert { addr: a, len: l })
                if *addr + *len == a =>
            {
                *len += l;
            }
            (
                Some(Step::Reuse {
                    addr,
                    len,
                    inode,
                    offset,
                }),
                Step::Reuse {
                    addr: a,
                    len: l,
                    inode: i,
                    offset: o,
                },
            ) if *addr + *len == a && *inode == i && *offset + *len == o => {
                *len += l;
            }
            _ => steps.push(step),
        }
    }
    steps.truncate(MAX_SHARED_PAGES);
    steps
}

/// What one registration offers the daemon: the shared page runs, one descriptor for
/// each, and the memfds it holds on to (by inode) until [`release`].
#[derive(Default)]
pub struct Shared {
    pub pages: Vec<SharedPages>,
    pub fds: Vec<OwnedFd>,
    pub inodes: Vec<u64>,
}

/// The shared pages to offer with the registration of `[addr, addr + len)`, moving pages
/// onto memfds as needed. Best effort: whatever fails stays on the descriptor path, which
/// reaches the same memory either way.
pub fn share(addr: u64, len: u64) -> Shared {
    let page = page_size();
    let start = addr.div_ceil(page).saturating_mul(page);
    let end = addr.saturating_add(len) / page * page;
    let mut out = Shared::default();
    if start >= end {
        return out;
    }
    // One registration moves at a time: two threads registering the same buffer must
    // not both move it (the first memfd would be left behind with the daemon). The maps
    // are read under the lock, so they show every move made before.
    let mut guard = CONVERTED.lock().unwrap_or_else(|p| p.into_inner());
    let maps = maps();
    let converted = guard.get_or_insert_with(|| Converted {
        memfds: HashMap::new(),
    });
    converted.memfds.retain(|ino, _| {
        maps.iter()
            .any(|m| m.inode == *ino && m.path.starts_with("/memfd:"))
    });
    for step in plan(&maps, start, end, &converted.memfds) {
        let (pages, inode) = match step {
            Step::Reuse {
                addr,
                len,
                inode,
                offset,
            } => (SharedPages { addr, len, offset }, inode),
            Step::Convert { addr, len } => match convert(addr, len) {
                Ok((fd, inode)) => {
                    converted.memfds.insert(inode, (fd, 0));
                    (
                        SharedPages {
                            addr,
                            len,
                            offset: 0,
                        },
                        inode,
                    )
                }
                Err(e) => {
                    shim_log!("shared MR: pages {addr:#x}+{len:#x} stay unshared: {e:?}");
                    continue;
                }
            },
        };
        let Some((fd, users)) = converted.memfds.get_mut(&inode) else {
            continue;
        };
        let Ok(fd) = fd.try_clone() else {
            continue;
        };
        *users += 1;
        out.pages.push(pages);
        out.fds.push(fd);
        out.inodes.push(inode);
    }
    out
}

/// Moves `[addr, addr + len)` onto a new memfd ([`swap::to_memfd`]); the memfd and its
/// inode.
fn convert(addr: u64, len: u64) -> VResult<(OwnedFd, u64)> {
    fork::install();
    let fd = swap::to_memfd(addr, len)?;
    // SAFETY: fstat on a descriptor we own, with a zeroed out-parameter.
    let inode = unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(Errno::last());
        }
        st.st_ino
    };
    shim_log!("shared MR: moved {addr:#x}+{len:#x} onto memfd inode {inode}");
    Ok((fd, inode))
}

/// A registration that [`share`]d `inodes` is gone: the pages of every memfd no
/// registration uses any more move back onto private memory, and the memfd is dropped.
pub fn release(inodes: &[u64]) {
    if inodes.is_empty() {
        return;
    }
    let mut guard = CONVERTED.lock().unwrap_or_else(|p| p.into_inner());
    let Some(converted) = guard.as_mut() else {
        return;
    };
    let mut unused = Vec::new();
    for ino in inodes {
        if let Some((_, users)) = converted.memfds.get_mut(ino) {
            *users = users.saturating_sub(1);
            if *users == 0 {
                unused.push(*ino);
            }
        }
    }
    if unused.is_empty() {
        return;
    }
    for m in maps() {
        if unused.contains(&m.inode) && m.ours(&converted.memfds) {
            if let Err(e) = swap::to_private(m.start, m.end - m.start) {
                // The pages stay on the memfd: still the same bytes at the same place.
                shim_log!(
                    "shared MR: pages {:#x}-{:#x} stay shared: {e:?}",
                    m.start,
                    m.end
                );
                continue;
            }
        }
    }
    for ino in unused {
        converted.memfds.remove(&ino);
    }
}

#[cfg(test)]
mod tests;

//! The process's mappings as `/proc/self/maps` lists them, and the registry of the memfds
//! pages were moved onto: what [`super::share`], [`super::release`] and the fork
//! handlers all consult.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// The name every memfd of this module carries (`/memfd:NAME (deleted)` in maps).
pub const MEMFD_NAME: &core::ffi::CStr = c"rdma-emu-mr";

/// One line of `/proc/self/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsLine {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    /// File offset of `start`.
    pub offset: u64,
    pub inode: u64,
    pub path: String,
}

impl MapsLine {
    /// `start-end perms offset dev inode [path]`, as proc(5) describes it.
    pub fn parse(line: &str) -> Option<MapsLine> {
        let mut f = line.split_ascii_whitespace();
        let (start, end) = f.next()?.split_once('-')?;
        let perms = f.next()?.to_string();
        let offset = u64::from_str_radix(f.next()?, 16).ok()?;
        let _dev = f.next()?;
        let inode = f.next()?.parse().ok()?;
        let path = f.collect::<Vec<_>>().join(" ");
        Some(MapsLine {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            perms,
            offset,
            inode,
            path,
        })
    }

    /// Private, anonymous, read-write, and not a stack.
    pub fn convertible(&self) -> bool {
        self.perms.starts_with("rw")
            && self.perms.ends_with('p')
            && self.inode == 0
            && (self.path.is_empty() || self.path == "[heap]")
    }

    /// Read-write shared mapping of one of our memfds.
    pub fn ours(&self, known: &Memfds) -> bool {
        self.perms.starts_with("rw")
            && self.perms.ends_with('s')
            && known.contains_key(&self.inode)
            && self.path.starts_with("/memfd:rdma-emu-mr")
    }
}

/// Our memfds by inode: the descriptor and how many registrations use it.
pub type Memfds = HashMap<u64, (OwnedFd, usize)>;

/// The memfds this process moved pages onto, while any of their pages is still mapped
/// and registered (the kernel holds the pages; the descriptor is what goes to the daemon).
pub struct Converted {
    pub memfds: Memfds,
}

pub static CONVERTED: Mutex<Option<Converted>> = Mutex::new(None);

/// This process's mappings now (empty if `/proc/self/maps` cannot be read).
pub fn maps() -> Vec<MapsLine> {
    std::fs::read_to_string("/proc/self/maps")
        .map(|text| text.lines().filter_map(MapsLine::parse).collect())
        .unwrap_or_default()
}

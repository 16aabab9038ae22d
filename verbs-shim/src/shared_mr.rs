//! Shared memory regions, opt-in (`RDMA_EMU_SHARED_MR=1`): the fast path of DESIGN
//! decision 1. At registration the whole pages of the buffer move onto a memfd in place
//! (the contents are copied into a sealed memfd, which is then mapped `MAP_FIXED |
//! MAP_SHARED` over the same addresses), and the memfd goes to the daemon with the
//! request, so the daemon maps the same pages and copies at memory speed instead of
//! going through `/proc/self/mem`. The descriptor path stays the default and the fallback:
//! partial head and tail pages, and anything this module does not convert, go through it.
//!
//! Only private, anonymous, read-write mappings are converted (what `mmap` and large
//! `malloc`/`posix_memalign` blocks are); the brk heap, stacks, files and shared mappings
//! are not. Converted pages get `MADV_DONTFORK`, as rdma-core's `ibv_fork_init` does for
//! registered memory, so a child of `fork()` never shares them with its parent. The
//! hazards (DESIGN decision 1): a write by another thread while the pages are being moved
//! is lost; after the move the pages are shared memory (`MADV_DONTNEED` no longer zeroes
//! them); a forked child does not have them at all.
//!
//! The kernel's list of mappings (`/proc/self/maps`) is the interval map of converted
//! pages: a registration over pages already on one of this process's memfds (the same
//! buffer again, or an overlapping one) finds that memfd and its offset there and reuses
//! them instead of converting twice, and a buffer that was unmapped since is not mistaken
//! for the old one. [`Converted`] keeps one descriptor per memfd still mapped somewhere.
//! Deregistration leaves the pages where they are: they are still the process's memory.

use crate::ffi::{Errno, VResult};
use crate::log::shim_log;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock};
use wire::client::{SharedPages, MAX_SHARED_PAGES};

/// Environment variable that turns shared memory regions on (`1`; anything else, or
/// unset, keeps every region on the `/proc/self/mem` descriptor).
pub const SHARED_MR_ENV: &str = "RDMA_EMU_SHARED_MR";

/// The name every memfd of this module carries (`/memfd:NAME (deleted)` in maps).
const MEMFD_NAME: &core::ffi::CStr = c"rdma-emu-mr";

pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(SHARED_MR_ENV).is_some_and(|v| v == "1"))
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).unwrap_or(4096).max(4096)
}

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

    /// Private, anonymous, read-write, and not the brk heap or a stack.
    fn convertible(&self) -> bool {
        self.perms.starts_with("rw")
            && self.perms.ends_with('p')
            && self.inode == 0
            && self.path.is_empty()
    }

    /// Read-write shared mapping of one of our memfds.
    fn ours(&self, known: &HashMap<u64, OwnedFd>) -> bool {
        self.perms.starts_with("rw")
            && self.perms.ends_with('s')
            && known.contains_key(&self.inode)
            && self.path.starts_with("/memfd:rdma-emu-mr")
    }
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
pub fn plan(maps: &[MapsLine], start: u64, end: u64, known: &HashMap<u64, OwnedFd>) -> Vec<Step> {
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

/// The memfds this process moved pages onto, by inode, while any of their pages is still
/// mapped (the kernel holds the pages; this descriptor is what goes to the daemon).
struct Converted {
    memfds: HashMap<u64, OwnedFd>,
}

static CONVERTED: Mutex<Option<Converted>> = Mutex::new(None);

/// The shared pages to offer with the registration of `[addr, addr + len)`, converting
/// pages as needed, with one descriptor each. Best effort: whatever fails stays on the
/// descriptor path, which reaches the same memory either way.
pub fn share(addr: u64, len: u64) -> (Vec<SharedPages>, Vec<OwnedFd>) {
    let page = page_size();
    let start = addr.div_ceil(page).saturating_mul(page);
    let end = addr.saturating_add(len) / page * page;
    if start >= end {
        return (Vec::new(), Vec::new());
    }
    let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
        return (Vec::new(), Vec::new());
    };
    let maps: Vec<MapsLine> = text.lines().filter_map(MapsLine::parse).collect();
    // One registration converts at a time: two threads registering the same buffer
    // must not both move it (the first memfd would be left behind with the daemon).
    let mut guard = CONVERTED.lock().unwrap_or_else(|p| p.into_inner());
    let converted = guard.get_or_insert_with(|| Converted {
        memfds: HashMap::new(),
    });
    converted.memfds.retain(|ino, _| {
        maps.iter()
            .any(|m| m.inode == *ino && m.path.starts_with("/memfd:"))
    });
    let mut shared = Vec::new();
    let mut fds = Vec::new();
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
                    converted.memfds.insert(inode, fd);
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
        let Some(fd) = converted
            .memfds
            .get(&inode)
            .and_then(|f| f.try_clone().ok())
        else {
            continue;
        };
        shared.push(pages);
        fds.push(fd);
    }
    (shared, fds)
}

/// Moves the private pages `[addr, addr + len)` onto a new sealed memfd in place; the
/// memfd and its inode. Another thread's write to these pages between the copy and the
/// remap is lost (see the module docs).
fn convert(addr: u64, len: u64) -> VResult<(OwnedFd, u64)> {
    let size = libc::off_t::try_from(len).map_err(|_| Errno::EINVAL)?;
    let ulen = usize::try_from(len).map_err(|_| Errno::EINVAL)?;
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
    let raw = unsafe {
        libc::memfd_create(
            MEMFD_NAME.as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if raw < 0 {
        return Err(Errno::last());
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: ftruncate/fcntl on a descriptor we own.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0
        || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0
    {
        return Err(Errno::last());
    }
    let mut done = 0usize;
    while done < ulen {
        // SAFETY: the source is the process's own readable private mapping (maps said
        // rw-p), `done < len` keeps the range inside it.
        let n = unsafe {
            libc::pwrite(
                fd.as_raw_fd(),
                (addr as usize + done) as *const libc::c_void,
                ulen - done,
                done as libc::off_t,
            )
        };
        if n <= 0 {
            return Err(Errno::last());
        }
        done += n as usize;
    }
    // SAFETY: replaces exactly the pages `[addr, addr + len)`, which maps said are a
    // private anonymous mapping of this process, with the memfd that now holds the same
    // bytes; the application sees the same contents at the same addresses.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            ulen,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED || p as u64 != addr {
        return Err(Errno::last());
    }
    // SAFETY: advice on pages just mapped; a failure only loses the fork protection.
    if unsafe { libc::madvise(p, ulen, libc::MADV_DONTFORK) } != 0 {
        shim_log!("shared MR: MADV_DONTFORK failed on {addr:#x}+{len:#x}");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> MapsLine {
        MapsLine::parse(s).unwrap()
    }

    fn known(inodes: &[u64]) -> HashMap<u64, OwnedFd> {
        inodes
            .iter()
            .map(|&i| (i, std::fs::File::open("/dev/null").unwrap().into()))
            .collect()
    }

    #[test]
    fn parses_maps_lines_with_and_without_a_path() {
        let m = line(
            "7f0000001000-7f0000005000 rw-s 00002000 00:01 4242    /memfd:rdma-emu-mr (deleted)",
        );
        assert_eq!(
            m,
            MapsLine {
                start: 0x7f00_0000_1000,
                end: 0x7f00_0000_5000,
                perms: "rw-s".into(),
                offset: 0x2000,
                inode: 4242,
                path: "/memfd:rdma-emu-mr (deleted)".into(),
            }
        );
        let anon = line("7f0000005000-7f0000009000 rw-p 00000000 00:00 0 ");
        assert!(anon.path.is_empty() && anon.convertible());
        assert!(!line("5555000-5556000 rw-p 00000000 00:00 0   [heap]").convertible());
        assert!(!line("7f00-7f01 r--p 00000000 00:00 0").convertible());
        assert!(!line("7f00-7f01 rw-p 00000000 08:01 77 /usr/lib/x.so").convertible());
        assert_eq!(MapsLine::parse("garbage"), None);
    }

    #[test]
    fn plans_conversion_of_anonymous_pages_and_reuse_of_our_memfds() {
        let maps = [
            line("1000-3000 rw-p 00000000 00:00 0"),
            line("3000-5000 rw-p 00000000 00:00 0"),
            line("5000-6000 r--p 00000000 08:01 9 /usr/lib/libc.so.6"),
            line("6000-8000 rw-s 00004000 00:01 77 /memfd:rdma-emu-mr (deleted)"),
            line("8000-9000 rw-s 00006000 00:01 77 /memfd:rdma-emu-mr (deleted)"),
            line("9000-a000 rw-s 00000000 00:01 78 /memfd:someone-else (deleted)"),
        ];
        let steps = plan(&maps, 0x2000, 0xa000, &known(&[77]));
        assert_eq!(
            steps,
            vec![
                Step::Convert {
                    addr: 0x2000,
                    len: 0x3000
                },
                Step::Reuse {
                    addr: 0x6000,
                    len: 0x3000,
                    inode: 77,
                    offset: 0x4000
                },
            ]
        );
        // A memfd of ours that is no longer known (its pages went) is not reused.
        assert_eq!(plan(&maps, 0x6000, 0x8000, &known(&[])), vec![]);
    }

    #[test]
    fn reuse_splits_where_offsets_are_not_consecutive() {
        let maps = [
            line("6000-8000 rw-s 00004000 00:01 77 /memfd:rdma-emu-mr (deleted)"),
            line("8000-9000 rw-s 00000000 00:01 77 /memfd:rdma-emu-mr (deleted)"),
        ];
        assert_eq!(plan(&maps, 0x7000, 0x9000, &known(&[77])).len(), 2);
    }

    #[test]
    fn converts_pages_in_place_keeping_their_contents() {
        let page = page_size() as usize;
        // SAFETY: a fresh private anonymous mapping of 3 pages, unmapped at the end.
        let base = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                3 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let addr = base as u64;
        // SAFETY: the mapping is ours and 3 pages long.
        let buf = unsafe { core::slice::from_raw_parts_mut(base as *mut u8, 3 * page) };
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        // A region that starts mid-page: only pages 1 and 2 are whole.
        let (shared, fds) = share(addr + 100, 3 * page as u64 - 100);
        assert_eq!(
            shared,
            vec![SharedPages {
                addr: addr + page as u64,
                len: 2 * page as u64,
                offset: 0
            }]
        );
        assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
        // The memfd holds the same bytes, and writes through either side are seen by both.
        let mut head = [0u8; 4];
        // SAFETY: pread into a local buffer from a descriptor we hold.
        let n = unsafe { libc::pread(fds[0].as_raw_fd(), head.as_mut_ptr().cast(), 4, 0) };
        assert_eq!(n, 4);
        assert_eq!(&head[..], &buf[page..page + 4]);
        buf[page] = 0xee;
        // SAFETY: as above.
        unsafe { libc::pread(fds[0].as_raw_fd(), head.as_mut_ptr().cast(), 1, 0) };
        assert_eq!(head[0], 0xee);
        // The same pages again (an overlapping registration): reused, not converted.
        let (again, fds2) = share(addr + page as u64, page as u64);
        assert_eq!(
            again,
            vec![SharedPages {
                addr: addr + page as u64,
                len: page as u64,
                offset: 0
            }]
        );
        // SAFETY: fstat on descriptors we hold.
        let ino = |fd: &OwnedFd| unsafe {
            let mut st: libc::stat = core::mem::zeroed();
            libc::fstat(fd.as_raw_fd(), &mut st);
            st.st_ino
        };
        assert_eq!(ino(&fds[0]), ino(&fds2[0]));
        // SAFETY: unmapping what this test mapped.
        unsafe { libc::munmap(base, 3 * page) };
    }
}

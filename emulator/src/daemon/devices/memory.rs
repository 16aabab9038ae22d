//! Application memory as the NIC's DMA engine reaches it: through the descriptor of the
//! client's own `/proc/self/mem`, handed over at `OpenDevice` (DESIGN decision 1), and,
//! for pages the client moved onto a memfd at registration (`RDMA_EMU_SHARED_MR=1`),
//! through the daemon's own mapping of that memfd ([`crate::daemon::devices::shared_pages`]).
//!
//! The core has already checked keys, PD, bounds and access before it asks for a read
//! or write; this layer only moves bytes, and a fault (unmapped page) is an error, never a
//! crash of the daemon. An access is split into the parts a shared mapping covers (copied
//! with `memcpy`) and the rest (`pread`/`pwrite` on the descriptor).

use crate::daemon::devices::nic::{AppMemory, MemFault, Owner};
use crate::daemon::devices::shared_pages::{Piece, Refused, SharedRanges};
use crate::daemon::sys::{self, ClientPages};
use emu_core::U32Map;
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};
use wire::client::SharedPages;

/// One client address space.
#[derive(Debug)]
struct Space {
    mem: OwnedFd,
    shared: SharedRanges,
}

/// Bytes moved, by path (`rdma-emu stat`: `memory_shared_bytes`, `memory_fd_bytes`,
/// `memory_shared_refused`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MemCounters {
    /// Copied through a shared memfd mapping.
    pub shared_bytes: u64,
    /// Moved with pread/pwrite on `/proc/<pid>/mem`.
    pub fd_bytes: u64,
    /// Shared page ranges offered at registration and refused (left on the descriptor).
    pub shared_refused: u64,
}

/// The address spaces of all open device contexts.
#[derive(Debug, Default)]
pub struct ProcMem {
    spaces: U32Map<Space>,
    /// Reads and writes that faulted.
    pub faults: u64,
    pub counters: MemCounters,
}

impl ProcMem {
    pub fn insert(&mut self, owner: Owner, fd: OwnedFd) {
        self.spaces.insert(
            owner,
            Space {
                mem: fd,
                shared: SharedRanges::default(),
            },
        );
    }

    /// Forgets a client address space, with every shared mapping of it.
    pub fn remove(&mut self, owner: Owner) {
        self.spaces.remove(&owner);
    }

    /// Maps the memfd `fd` for the pages `p` of `owner`, for one more MR. Refused
    /// memfds are counted and dropped: the descriptor path still reaches those pages.
    pub fn attach_shared(&mut self, owner: Owner, p: SharedPages, fd: OwnedFd) -> bool {
        let result = match self.spaces.get_mut(&owner) {
            Some(space) => space.shared.attach(p, fd),
            None => Err(Refused::BadRange),
        };
        if let Err(why) = result {
            self.counters.shared_refused += 1;
            tracing::debug!(
                owner,
                addr = p.addr,
                len = p.len,
                ?why,
                "shared pages refused"
            );
        }
        result.is_ok()
    }

    /// Takes one MR's use of the shared pages `[addr, addr + len)` away.
    pub fn detach_shared(&mut self, owner: Owner, addr: u64, len: u64) {
        if let Some(space) = self.spaces.get_mut(&owner) {
            space.shared.detach(addr, len);
        }
    }

    /// Whether `[addr, addr + len)` can be read now (first and last byte). Used to refuse
    /// memory registrations over unmapped memory with EFAULT, as the kernel's pinning does.
    pub fn probe(&self, owner: Owner, addr: u64, len: u64) -> bool {
        let Some(Space { mem: fd, .. }) = self.spaces.get(&owner) else {
            return false;
        };
        if len == 0 {
            return true;
        }
        let Some(last) = addr.checked_add(len - 1) else {
            return false;
        };
        let mut b = [0u8; 1];
        sys::pread_exact(fd.as_raw_fd(), addr, &mut b).is_ok()
            && sys::pread_exact(fd.as_raw_fd(), last, &mut b).is_ok()
    }
}

impl ProcMem {
    /// Faults `[addr, addr + len)` of `owner` in for reading: one byte of each page read
    /// through the descriptor (`ibv_advise_mr`'s prefetch, [`crate::daemon::devices::odp`]). False at the
    /// first page that cannot be read.
    pub fn touch(&mut self, owner: Owner, addr: u64, len: u64) -> bool {
        use crate::daemon::devices::shared_pages::PAGE;
        let Some(Space { mem: fd, .. }) = self.spaces.get(&owner) else {
            return false;
        };
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        let mut at = addr;
        let mut b = [0u8; 1];
        while at < end {
            if sys::pread_exact(fd.as_raw_fd(), at, &mut b).is_err() {
                self.faults += 1;
                return false;
            }
            match (at | (PAGE - 1)).checked_add(1) {
                Some(next) => at = next,
                None => break,
            }
        }
        true
    }
}

/// Where one part of an access is.
enum Part<'a> {
    /// In a shared memfd mapping, at this offset.
    Shared(&'a ClientPages, usize),
    /// Behind the client's `/proc/<pid>/mem` descriptor, at this client address.
    Descriptor(RawFd, u64),
}

impl ProcMem {
    /// Moves `len` bytes at `addr` of `owner` one part at a time: `step` moves the part of
    /// the access at that range and says whether it worked. Counts the bytes per path.
    fn walk(
        &mut self,
        owner: Owner,
        addr: u64,
        len: usize,
        mut step: impl FnMut(Part<'_>, Range<usize>) -> bool,
    ) -> Result<(), MemFault> {
        let space = self.spaces.get(&owner).ok_or(MemFault)?;
        let Some(end) = addr.checked_add(len as u64) else {
            self.faults += 1;
            return Err(MemFault);
        };
        let mut done = 0;
        while done < len {
            let at = addr + done as u64;
            let (part, n) = match space.shared.piece(at, end) {
                Piece::Shared { pages, offset, len } => {
                    self.counters.shared_bytes += len as u64;
                    (Part::Shared(pages, offset), len)
                }
                Piece::Other { len } => {
                    self.counters.fd_bytes += len as u64;
                    (Part::Descriptor(space.mem.as_raw_fd(), at), len)
                }
            };
            if !step(part, done..done + n) {
                self.faults += 1;
                return Err(MemFault);
            }
            done += n;
        }
        Ok(())
    }
}

/// How long a write through the descriptor is retried when it fails: the client's shim
/// write-protects pages while it moves them between private memory and a memfd, or copies
/// them for a child of `fork` (`verbs-shim/src/shared_mr`), and a write from outside the
/// process fails (EIO, EFAULT) instead of waiting, as the client's own threads do.
const FENCE_WAIT: Duration = Duration::from_millis(20);

/// `pwrite_all`, retried for up to [`FENCE_WAIT`] while it fails as on fenced pages.
fn pwrite_through_fence(fd: RawFd, at: u64, data: &[u8]) -> bool {
    let mut since = None;
    loop {
        let e = match sys::pwrite_all(fd, at, data) {
            Ok(()) => return true,
            Err(e) => e,
        };
        let fenced = matches!(e.raw_os_error(), Some(libc::EIO | libc::EFAULT));
        let start = *since.get_or_insert_with(Instant::now);
        if !fenced || start.elapsed() > FENCE_WAIT {
            return false;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

impl AppMemory for ProcMem {
    fn read(&mut self, owner: Owner, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        self.walk(owner, addr, buf.len(), |part, r| match part {
            Part::Shared(pages, offset) => pages.copy_out(offset, &mut buf[r]).is_some(),
            Part::Descriptor(fd, at) => sys::pread_exact(fd, at, &mut buf[r]).is_ok(),
        })
    }

    fn write(&mut self, owner: Owner, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        self.walk(owner, addr, data.len(), |part, r| match part {
            Part::Shared(pages, offset) => pages.copy_in(offset, &data[r]).is_some(),
            Part::Descriptor(fd, at) => pwrite_through_fence(fd, at, &data[r]),
        })
    }

    /// Pages the client shares with the daemon are mapped here: a copy each. Everything
    /// else goes through the `/proc/PID/mem` descriptor, a `pread`/`pwrite` each.
    fn prefers_runs(&self, owner: Owner, addr: u64) -> bool {
        self.spaces.get(&owner).is_some_and(|space| {
            !matches!(
                space.shared.piece(addr, addr.saturating_add(1)),
                Piece::Shared { .. }
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's memory as the address space of owner `owner`.
    fn own_memory_as(owner: Owner) -> ProcMem {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/self/mem")
            .unwrap();
        let mut mem = ProcMem::default();
        mem.insert(owner, f.into());
        mem
    }

    #[test]
    fn reads_and_writes_own_memory_through_proc_self_mem() {
        let mut mem = own_memory_as(7);
        let mut target = vec![0u8; 32];
        let addr = target.as_mut_ptr() as u64;
        mem.write(7, addr + 4, b"rdma").unwrap();
        let mut back = [0u8; 4];
        mem.read(7, addr + 4, &mut back).unwrap();
        assert_eq!(&back, b"rdma");
        assert_eq!(&std::hint::black_box(&target)[4..8], b"rdma");
        assert!(mem.probe(7, addr, 32));
        assert!(!mem.probe(7, 0, 4096));
        assert!(mem.read(7, 0, &mut back).is_err());
        assert!(mem.read(8, addr, &mut back).is_err());
        assert_eq!(mem.counters.shared_bytes, 0);
    }

    #[test]
    fn touch_faults_pages_in_and_fails_on_unmapped_ones() {
        let mut mem = own_memory_as(7);
        let pages = vec![0u8; 3 * 4096];
        let addr = pages.as_ptr() as u64;
        assert!(mem.touch(7, addr + 100, 2 * 4096));
        assert!(mem.touch(7, addr, 0));
        assert!(!mem.touch(7, 0, 4096));
        assert!(!mem.touch(8, addr, 1));
        assert!(!mem.touch(7, u64::MAX - 10, 20));
        assert_eq!(mem.faults, 1);
    }

    #[test]
    fn splits_accesses_between_shared_pages_and_the_descriptor() {
        use crate::daemon::devices::shared_pages::PAGE;
        let mut mem = own_memory_as(7);
        // "The client's" buffer: two pages of a sealed memfd, mapped in this process.
        let memfd = sys::sealed_memfd("test-client-pages", 2 * PAGE as usize).unwrap();
        let client = ClientPages::map(&memfd, 2 * PAGE as usize).unwrap();
        let base = client.addr();
        // Only the second page is offered as shared; the first stays on the descriptor.
        let p = SharedPages {
            addr: base + PAGE,
            len: PAGE,
            offset: PAGE,
        };
        assert!(mem.attach_shared(7, p, memfd.try_clone().unwrap()));
        let data: Vec<u8> = (0..32u8).collect();
        mem.write(7, base + PAGE - 8, &data).unwrap();
        assert_eq!(
            mem.counters,
            MemCounters {
                shared_bytes: 24,
                fd_bytes: 8,
                shared_refused: 0
            }
        );
        let mut seen = [0u8; 32];
        client.copy_out(PAGE as usize - 8, &mut seen).unwrap();
        assert_eq!(&seen[..], &data[..]);
        let mut back = [0u8; 32];
        mem.read(7, base + PAGE - 8, &mut back).unwrap();
        assert_eq!(back, seen);
        assert_eq!(mem.counters.shared_bytes, 48);
        assert_eq!(mem.counters.fd_bytes, 16);
        // The core moves payload in runs only where an access is a system call.
        assert!(mem.prefers_runs(7, base + PAGE - 1));
        assert!(!mem.prefers_runs(7, base + PAGE));
        assert!(!mem.prefers_runs(7, base + 2 * PAGE - 1));
        // After the MR goes, the same bytes come through the descriptor only.
        mem.detach_shared(7, p.addr, p.len);
        assert!(mem.prefers_runs(7, base + PAGE));
        mem.read(7, base + PAGE - 8, &mut back).unwrap();
        assert_eq!(back, seen);
        assert_eq!(mem.counters.shared_bytes, 48);
        assert_eq!(mem.counters.fd_bytes, 48);
        // An unknown owner is refused and counted.
        assert!(!mem.attach_shared(8, p, memfd));
        assert_eq!(mem.counters.shared_refused, 1);
    }
}

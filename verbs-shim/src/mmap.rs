//! Shared mappings of the daemon's memfds (rings, session page).
use crate::ffi::{Errno, VResult};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;

/// A `MAP_SHARED` read/write mapping, unmapped on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory accessed only through atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above; `words()` hands out `&[AtomicU64]`, which is Sync.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `fd`. The daemon sealed the memfd's size, so the
    /// mapping can never lose its backing pages.
    pub fn map(fd: &OwnedFd, len: usize) -> VResult<Mapping> {
        if len == 0 || !len.is_multiple_of(8) {
            return Err(Errno::EINVAL);
        }
        // SAFETY: mmap of a descriptor we hold; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        Ok(Mapping {
            ptr: ptr as *mut u8,
            len,
        })
    }

    /// The mapping as 64-bit words, the form wire's ring views take.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: ptr is page-aligned, len is a multiple of 8, and the pages stay mapped
        // until drop; AtomicU64 has the layout of u64 and tolerates concurrent writers.
        unsafe { core::slice::from_raw_parts(self.ptr as *const AtomicU64, self.len / 8) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

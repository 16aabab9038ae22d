//! Sealed memfds and their shared mappings: the rings and session pages the daemon
//! creates, and the pages a client shares with `RDMA_EMU_SHARED_MR`.

use super::cvt::{cvt, own};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;

/// A sealed memfd of `len` bytes (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`): a client
/// that maps it cannot truncate it under the daemon.
pub fn sealed_memfd(name: &str, len: usize) -> io::Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `cname` is a valid NUL-terminated string that outlives the call.
    let fd = own(unsafe {
        libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    })?;
    let len_off =
        libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: plain syscalls on a descriptor we own.
    unsafe {
        cvt(libc::ftruncate(fd.as_raw_fd(), len_off))?;
        cvt(libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        ))?;
    }
    Ok(fd)
}

/// Maps the first `len` bytes of `fd` shared and read-write, where the kernel chooses.
fn map_shared(fd: &OwnedFd, len: usize) -> io::Result<*mut libc::c_void> {
    // SAFETY: a fresh mapping chosen by the kernel (no MAP_FIXED) of a descriptor we
    // hold, so no existing memory is affected; the result is checked.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(ptr)
}

/// A shared read-write mapping of a whole memfd, seen as 64-bit atomic words.
#[derive(Debug)]
pub struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is plain shared memory accessed only through atomics
// (`words()`); moving or sharing the handle between threads is sound.
unsafe impl Send for Mapping {}
// SAFETY: as above; all access goes through `&[AtomicU64]`.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` shared. `len` must be a nonzero multiple of 8.
    pub fn new(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        if len == 0 || len & 7 != 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        // A memfd we created and sealed against shrinking: the pages stay valid while mapped.
        let ptr = map_shared(fd, len)?;
        Ok(Mapping { ptr, len })
    }

    /// The mapping as words; the peer writes the same memory concurrently, which atomics
    /// make well defined.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` is page aligned (so aligned for AtomicU64), valid for `len` bytes
        // for as long as `self` lives (unmapped only in Drop), and `len` is a multiple
        // of 8. Every access is atomic, so concurrent writes by the other process are not
        // data races in Rust's model.
        unsafe { std::slice::from_raw_parts(self.ptr as *const AtomicU64, self.len / 8) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping made in `new`, unmapped only here.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

/// What the daemon needs to know about a memfd a client handed over for a memory
/// region, read from the descriptor itself (never from the client's message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemfdInfo {
    /// `F_GET_SEALS`; fails (so no `MemfdInfo`) on anything but a memfd/shmem file.
    pub seals: libc::c_int,
    pub size: u64,
    /// (`st_dev`, `st_ino`): the same file through two descriptors is one mapping.
    pub id: (u64, u64),
}

/// Seals, size and identity of a descriptor that should be a memfd.
pub fn memfd_info(fd: &OwnedFd) -> io::Result<MemfdInfo> {
    // SAFETY: fcntl(F_GET_SEALS) on a descriptor we own.
    let seals = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) })?;
    let st = super::fd::fstat(fd)?;
    Ok(MemfdInfo {
        seals,
        size: u64::try_from(st.st_size).unwrap_or(0),
        id: (st.st_dev, st.st_ino),
    })
}

/// A whole client memfd mapped shared and read-write: application pages the client moved
/// onto the memfd, so the daemon reaches them with `memcpy`. The client writes them
/// concurrently, so nothing ever takes a Rust reference into the mapping: bytes move with
/// raw-pointer copies only.
#[derive(Debug)]
pub struct ClientPages {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the handle owns a mapping reached only through raw-pointer copies; moving or
// sharing it between threads is sound.
unsafe impl Send for ClientPages {}
// SAFETY: as above; `&self` methods never create references into the mapping.
unsafe impl Sync for ClientPages {}

impl ClientPages {
    /// Maps `len` bytes of `fd` from offset 0. The caller has checked that the memfd is
    /// sealed against shrinking and at least `len` long: a client that could truncate a
    /// mapped file would make the daemon's next access raise SIGBUS.
    pub fn map(fd: &OwnedFd, len: usize) -> io::Result<ClientPages> {
        if len == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let ptr = map_shared(fd, len)?;
        Ok(ClientPages { ptr, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the mapping starts in the daemon's address space (tests use it as "the
    /// client's" buffer).
    #[cfg(test)]
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Copies `dst.len()` bytes from `offset`; `None` when that leaves the mapping.
    pub fn copy_out(&self, offset: usize, dst: &mut [u8]) -> Option<()> {
        if offset.checked_add(dst.len())? > self.len {
            return None;
        }
        // SAFETY: the source range is inside the live mapping (checked above); `dst` is
        // daemon memory, disjoint from it. The client may write the source concurrently:
        // the copy goes through raw pointers and no reference to the mapping exists.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.cast::<u8>().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            );
        }
        Some(())
    }

    /// Copies `src` to `offset`; `None` when that leaves the mapping.
    pub fn copy_in(&self, offset: usize, src: &[u8]) -> Option<()> {
        if offset.checked_add(src.len())? > self.len {
            return None;
        }
        // SAFETY: as in `copy_out`, with the roles of the two ranges swapped.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.ptr.cast::<u8>().add(offset),
                src.len(),
            );
        }
        Some(())
    }
}

impl Drop for ClientPages {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping made in `map`, unmapped only here.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

//! Moving pages in place between private memory and a memfd while the application runs.
//!
//! A move copies the pages into their new backing at a scratch address and then
//! `mremap`s that over the old pages in one step. A write by another thread between the
//! copy and the `mremap` would land in the old pages and be lost, so for the whole move
//! the old pages are write-protected with a userfaultfd ([`WriteFence`]): such a write
//! waits in the kernel, and when the fence is dropped (its descriptor closed) the write
//! is retried and lands in the new pages. Reads go on during the move.
//!
//! What the fence does not cover: a write the kernel makes on the application's behalf
//! (`read(2)` into the buffer, `/proc/PID/mem`) fails with `EFAULT`/`EIO` instead of
//! waiting while the fence stands, and a write from a signal handler of the moving
//! thread itself would wait forever. Between the fence and its drop this module
//! therefore makes system calls only: no allocation, no lock, no log.
//!
//! The memory system calls go straight to the kernel ([`sys`]), not through libc's
//! wrappers: a move changes no byte the application sees, and a hook on those wrappers
//! (UCX's UCM patches `mmap`, `mremap` and `madvise` to learn of unmapped memory) must
//! not take it for an unmap and invalidate the registration being made.

use crate::ffi::{Errno, VResult};
use core::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering::Relaxed};

// linux/userfaultfd.h; the libc crate has only the system call number.
const UFFD_API: u64 = 0xaa;
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
/// `UFFD_FEATURE_PAGEFAULT_FLAG_WP`: write-protect mode.
const FEATURE_WP: u64 = 1 << 0;
/// `UFFD_FEATURE_WP_HUGETLBFS_SHMEM`: write protection of shared memory (Linux 6.0).
const FEATURE_WP_SHMEM: u64 = 1 << 12;
/// `UFFD_FEATURE_WP_UNPOPULATED`: pages never touched are protected too (Linux 6.4).
const FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const REGISTER_MODE_WP: u64 = 1 << 1;
const WRITEPROTECT_MODE_WP: u64 = 1 << 0;
// _IOWR(0xAA, nr, struct): 3 << 30 | size << 16 | 0xAA << 8 | nr.
const IOCTL_API: libc::c_ulong = 0xc018_aa3f;
const IOCTL_REGISTER: libc::c_ulong = 0xc020_aa00;
const IOCTL_WRITEPROTECT: libc::c_ulong = 0xc018_aa06;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

fn check(r: libc::c_int) -> VResult<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// A userfaultfd that has agreed to `features`: one that can wait on the kernel's own
/// faults when this process may have it (root, or `vm.unprivileged_userfaultfd`), else
/// one for faults from user mode, which every user may create. The kind that worked is
/// remembered (each refused attempt costs a line in the kernel's log).
fn userfaultfd(features: u64) -> VResult<OwnedFd> {
    static KIND: AtomicI32 = AtomicI32::new(-1);
    let mut last = Errno::ENOSYS;
    let known = KIND.load(Relaxed);
    let kinds: &[libc::c_int] = match known {
        -1 => &[0, UFFD_USER_MODE_ONLY],
        0 => &[0],
        _ => &[UFFD_USER_MODE_ONLY],
    };
    for &flags in kinds {
        // SAFETY: userfaultfd takes flags only; the result is checked.
        let raw = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | flags) };
        if raw < 0 {
            last = Errno::last();
            continue;
        }
        KIND.store(flags, Relaxed);
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw as libc::c_int) };
        let mut api = UffdioApi {
            api: UFFD_API,
            features,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API with the structure it expects.
        return check(unsafe { libc::ioctl(fd.as_raw_fd(), IOCTL_API, &mut api) }).map(|()| fd);
    }
    Err(last)
}

/// Other threads' writes to a range held off until this is dropped.
pub struct WriteFence {
    /// Closing it lifts the protection and wakes the waiting writers.
    uffd: OwnedFd,
    /// Pages must be present to be protected (no `UFFD_FEATURE_WP_UNPOPULATED`).
    populate: bool,
}

impl WriteFence {
    /// Write-protects `[addr, addr + len)` (whole pages of one kind of mapping: private
    /// anonymous, or shared memory when `shmem`).
    pub fn new(addr: u64, len: u64, shmem: bool) -> VResult<WriteFence> {
        let fence = WriteFence::open(shmem)?;
        fence.protect(addr, len)?;
        Ok(fence)
    }

    /// A fence that protects nothing yet ([`WriteFence::protect`] adds ranges).
    pub fn open(shmem: bool) -> VResult<WriteFence> {
        let base = FEATURE_WP | if shmem { FEATURE_WP_SHMEM } else { 0 };
        let (uffd, populate) = match userfaultfd(base | FEATURE_WP_UNPOPULATED) {
            Ok(fd) => (fd, false),
            // Before Linux 6.4 only present pages can be protected: `protect` faults
            // them in first.
            Err(_) => (userfaultfd(base)?, true),
        };
        Ok(WriteFence { uffd, populate })
    }

    /// Adds `[addr, addr + len)` to what this fence protects.
    pub fn protect(&self, addr: u64, len: u64) -> VResult<()> {
        if self.populate {
            // SAFETY: MADV_POPULATE_WRITE faults the pages in without changing them.
            check(unsafe {
                sys::madvise(addr as *mut c_void, len as usize, libc::MADV_POPULATE_WRITE)
            })?;
        }
        let range = || UffdioRange { start: addr, len };
        let mut reg = UffdioRegister {
            range: range(),
            mode: REGISTER_MODE_WP,
            ioctls: 0,
        };
        let fd = self.uffd.as_raw_fd();
        // SAFETY: UFFDIO_REGISTER with the structure it expects, on this process's pages.
        check(unsafe { libc::ioctl(fd, IOCTL_REGISTER, &mut reg) })?;
        let mut wp = UffdioWriteprotect {
            range: range(),
            mode: WRITEPROTECT_MODE_WP,
        };
        // SAFETY: as above, UFFDIO_WRITEPROTECT.
        check(unsafe { libc::ioctl(fd, IOCTL_WRITEPROTECT, &mut wp) })
    }
}

/// `mmap`, `mremap`, `munmap` and `madvise` as system calls (the C library's `syscall`
/// returns -1 and sets `errno` on failure, so `mmap`'s result compares with `MAP_FAILED`).
pub(super) mod sys {
    use core::ffi::c_void;
    use libc::{c_int, c_long};

    /// # Safety
    /// As `mmap(2)`.
    pub unsafe fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
    ) -> *mut c_void {
        // SAFETY: the caller upholds mmap's contract; offset 0.
        unsafe {
            libc::syscall(
                libc::SYS_mmap,
                addr,
                len,
                prot as c_long,
                flags as c_long,
                fd as c_long,
                0 as c_long,
            ) as *mut c_void
        }
    }

    /// # Safety
    /// As `mremap(2)` with `MREMAP_MAYMOVE | MREMAP_FIXED`.
    pub unsafe fn mremap_fixed(from: *mut c_void, len: usize, to: *mut c_void) -> *mut c_void {
        let flags = (libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED) as c_long;
        // SAFETY: the caller upholds mremap's contract.
        unsafe { libc::syscall(libc::SYS_mremap, from, len, len, flags, to) as *mut c_void }
    }

    /// # Safety
    /// As `munmap(2)`.
    pub unsafe fn munmap(addr: *mut c_void, len: usize) -> c_int {
        // SAFETY: the caller upholds munmap's contract.
        unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
    }

    /// # Safety
    /// As `madvise(2)`.
    pub unsafe fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int {
        // SAFETY: the caller upholds madvise's contract.
        unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice as c_long) as c_int }
    }
}

/// A mapping this module made and has not handed over yet (unmapped on drop).
pub(super) struct Scratch {
    pub(super) addr: *mut c_void,
    pub(super) len: usize,
}

impl Scratch {
    pub(super) fn map(len: usize, flags: libc::c_int, fd: libc::c_int) -> VResult<Scratch> {
        // SAFETY: a new mapping at an address the kernel picks; the result is checked.
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let p = unsafe { sys::mmap(core::ptr::null_mut(), len, rw, flags, fd) };
        if p == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        Ok(Scratch { addr: p, len })
    }

    /// Moves this mapping over `[addr, addr + len)`, replacing what was there.
    fn replace(self, addr: u64) -> VResult<()> {
        // SAFETY: moves our own scratch mapping over pages the caller chose to replace;
        // on success the scratch range no longer exists, so it is not unmapped again.
        let p = unsafe { sys::mremap_fixed(self.addr, self.len, addr as *mut c_void) };
        if p as u64 != addr {
            return Err(Errno::last());
        }
        core::mem::forget(self);
        Ok(())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: unmaps the scratch mapping this value owns.
        unsafe { sys::munmap(self.addr, self.len) };
    }
}

/// Moves the private pages `[addr, addr + len)` onto a new sealed memfd in place; the
/// memfd. The application sees the same bytes at the same addresses throughout.
pub fn to_memfd(addr: u64, len: u64) -> VResult<OwnedFd> {
    let ulen = usize::try_from(len).map_err(|_| Errno::EINVAL)?;
    let size = libc::off_t::try_from(len).map_err(|_| Errno::EINVAL)?;
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
    let raw = unsafe {
        libc::memfd_create(
            super::maps::MEMFD_NAME.as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if raw < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: ftruncate and fcntl on a descriptor we own.
    check(unsafe { libc::ftruncate(fd.as_raw_fd(), size) })?;
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) })?;
    let scratch = Scratch::map(ulen, libc::MAP_SHARED, fd.as_raw_fd())?;
    let fence = WriteFence::new(addr, len, false)?;
    let mut done = 0usize;
    while done < ulen {
        // SAFETY: reads the caller's private pages `[addr, addr + len)`, which stay
        // mapped (only other threads' writes are held off); `done < len`.
        let n = unsafe {
            libc::pwrite(
                fd.as_raw_fd(),
                (addr as usize + done) as *const c_void,
                ulen - done,
                done as libc::off_t,
            )
        };
        if n <= 0 {
            return Err(Errno::last());
        }
        done += n as usize;
    }
    scratch.replace(addr)?;
    drop(fence);
    // SAFETY: advice on the pages just moved. A child of fork() gets its own copy from
    // the fork handler (`fork.rs`) instead of sharing them with its parent.
    unsafe { sys::madvise(addr as *mut c_void, ulen, libc::MADV_DONTFORK) };
    Ok(fd)
}

/// Moves the memfd pages `[addr, addr + len)` back onto private anonymous memory in
/// place, as they were before [`to_memfd`].
pub fn to_private(addr: u64, len: u64) -> VResult<()> {
    let ulen = usize::try_from(len).map_err(|_| Errno::EINVAL)?;
    let scratch = Scratch::map(ulen, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)?;
    let fence = WriteFence::new(addr, len, true)?;
    // SAFETY: the scratch mapping is ours and `len` long; the source pages are the
    // caller's, mapped, and only read.
    unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, scratch.addr.cast(), ulen) };
    scratch.replace(addr)?;
    drop(fence);
    Ok(())
}

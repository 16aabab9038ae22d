//! `fork()` with pages on memfds: the child gets a private copy, as it would of any
//! private memory, instead of pages shared with its parent.
//!
//! Moved pages carry `MADV_DONTFORK`, so the kernel leaves them out of the child. The
//! handlers registered with `pthread_atfork` give the child back private pages at the
//! same addresses, filled from the memfds, with the bytes they held at the fork:
//! - the parent's prepare handler lists the moved ranges, holds the registry's lock (no
//!   move runs across the fork) and write-protects the ranges ([`WriteFence`]), so that
//!   the parent's other threads cannot change them until the child has its copy;
//! - the child's handler maps and fills the pages, then says so through a pipe;
//! - the parent's handler waits for that (or for the child's end of the pipe to close)
//!   before lifting the protection and returning from `fork`.
//!
//! The copy costs what the kernel's copy-on-fork of pinned pages costs: the registered
//! bytes, once per fork. The daemon writes through its own mapping and is not held off:
//! a WRITE that arrives during the fork may be in the child's copy. A child made without
//! glibc's `fork` (a raw `clone`, `vfork`) lacks the pages, as after rdma-core's
//! `ibv_fork_init`; one that calls `exec` straight away does not notice.

use super::maps::{maps, Converted, MapsLine, CONVERTED};
use super::swap::{sys, WriteFence};
use core::ffi::c_void;
use std::cell::RefCell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{MutexGuard, Once};

/// One moved range: where it is and where its bytes are on which memfd.
struct Moved {
    addr: u64,
    len: u64,
    inode: u64,
    offset: u64,
}

/// What the prepare handler sets up for the other two.
struct Held {
    guard: MutexGuard<'static, Option<Converted>>,
    moved: Vec<Moved>,
    /// The child writes a byte into `done.1` when its copy is made.
    done: Option<(OwnedFd, OwnedFd)>,
    /// The moved ranges, write-protected in the parent until then.
    fence: Option<WriteFence>,
}

thread_local! {
    /// Between prepare and the parent's or child's handler: the registry's lock and the
    /// moved ranges (the three handlers run on the thread that calls `fork`).
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// Registers the handlers, once per process (at the first move).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the three handlers are `extern "C" fn()` that live as long as the process.
        let r = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        if r != 0 {
            crate::log::shim_log!("shared MR: pthread_atfork failed ({r})");
        }
    });
}

extern "C" fn prepare() {
    let guard = CONVERTED.lock().unwrap_or_else(|p| p.into_inner());
    let moved: Vec<Moved> = match guard.as_ref() {
        Some(c) if !c.memfds.is_empty() => maps()
            .iter()
            .filter(|m| m.ours(&c.memfds))
            .map(|m: &MapsLine| Moved {
                addr: m.start,
                len: m.end - m.start,
                inode: m.inode,
                offset: m.offset,
            })
            .collect(),
        _ => Vec::new(),
    };
    let (done, fence) = if moved.is_empty() {
        (None, None)
    } else {
        // One userfaultfd for every range; a range it cannot protect is copied anyway.
        let fence = WriteFence::open(true).ok();
        if let Some(f) = &fence {
            for m in &moved {
                let _ = f.protect(m.addr, m.len);
            }
        }
        (pipe(), fence)
    };
    HELD.with(|h| {
        *h.borrow_mut() = Some(Held {
            guard,
            moved,
            done,
            fence,
        })
    });
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> Option<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 into a local array; both descriptors are then owned.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: fresh descriptors nobody else owns.
    Some(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

extern "C" fn parent() {
    let Some(held) = HELD.with(|h| h.borrow_mut().take()) else {
        return;
    };
    if let Some((read, write)) = held.done {
        // Only the child's end is left open: a byte when its copy is made, or end of
        // file if it is gone (or was never made).
        drop(write);
        let mut b = 0u8;
        loop {
            // SAFETY: one byte into a local from a descriptor we own.
            let n = unsafe { libc::read(read.as_raw_fd(), (&mut b as *mut u8).cast(), 1) };
            if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break;
            }
        }
    }
    drop(held.fence);
    drop(held.guard);
}

extern "C" fn child() {
    let Some(mut held) = HELD.with(|h| h.borrow_mut().take()) else {
        return;
    };
    // The fence is the parent's: the child has no moved pages to protect.
    drop(held.fence.take());
    if let Some(c) = held.guard.as_mut() {
        for m in &held.moved {
            if let Some((fd, _)) = c.memfds.get(&m.inode) {
                restore(m, fd.as_raw_fd());
            }
        }
        // The memfds are the parent's: the child keeps none of them alive.
        c.memfds.clear();
    }
    if let Some((read, write)) = held.done {
        drop(read);
        // SAFETY: one byte from a local to a descriptor we own.
        unsafe { libc::write(write.as_raw_fd(), b"c".as_ptr().cast(), 1) };
    }
}

/// Maps private pages where the parent has `m` and fills them from its memfd. Leaves
/// the range alone if anything is mapped there.
fn restore(m: &Moved, fd: libc::c_int) {
    let len = m.len as usize;
    // SAFETY: maps fresh private pages only where nothing is mapped (NOREPLACE).
    let p = unsafe {
        sys::mmap(
            m.addr as *mut c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
        )
    };
    if p == libc::MAP_FAILED {
        return;
    }
    if p as u64 != m.addr {
        // SAFETY: a kernel without MAP_FIXED_NOREPLACE put it elsewhere: take it back.
        unsafe { sys::munmap(p, len) };
        return;
    }
    let mut done = 0usize;
    while done < len {
        // SAFETY: reads into the pages just mapped, `done < len`.
        let n = unsafe {
            libc::pread(
                fd,
                (m.addr as usize + done) as *mut c_void,
                len - done,
                (m.offset as usize + done) as libc::off_t,
            )
        };
        if n <= 0 {
            return;
        }
        done += n as usize;
    }
}

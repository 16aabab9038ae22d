//! The one shape of every exported function: panics are caught here and never unwind
//! into C, and errors become what rdma-core returns for that function (NULL + errno,
//! a positive errno, -1 + errno, or a negative errno) in one place.
use core::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A positive errno value as rdma-core reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub c_int);

impl Errno {
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    pub const ENODEV: Errno = Errno(libc::ENODEV);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const ENOENT: Errno = Errno(libc::ENOENT);

    /// The calling thread's current `errno`.
    pub fn last() -> Errno {
        Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }
}

impl From<std::io::Error> for Errno {
    fn from(e: std::io::Error) -> Self {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

pub type VResult<T> = Result<T, Errno>;

pub fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e.0 };
}

fn guarded<T>(f: impl FnOnce() -> VResult<T>) -> VResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            crate::log::log(format_args!("panic caught at the C boundary"));
            Err(Errno::EIO)
        }
    }
}

/// A pointer, or NULL with `errno` set.
pub fn ptr<T>(f: impl FnOnce() -> VResult<*mut T>) -> *mut T {
    match guarded(f) {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            core::ptr::null_mut()
        }
    }
}

/// 0, or the positive errno (also stored in `errno`).
pub fn errno(f: impl FnOnce() -> VResult<()>) -> c_int {
    match guarded(f) {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e.0
        }
    }
}

/// 0, or -1 with `errno` set.
pub fn minus_one(f: impl FnOnce() -> VResult<()>) -> c_int {
    match guarded(f) {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// A non-negative count, or the negative errno (also stored in `errno`).
pub fn count(f: impl FnOnce() -> VResult<c_int>) -> c_int {
    match guarded(f) {
        Ok(n) => n,
        Err(e) => {
            set_errno(e);
            -e.0
        }
    }
}

/// A value with no error channel; `on_panic` is returned if the body panics.
pub fn value<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// Reads a `*mut T` the caller promised is either NULL or valid.
pub fn nonnull<'a, T>(p: *mut T) -> VResult<&'a mut T> {
    // SAFETY: callers pass pointers that C code handed to an exported function, which
    // by the verbs API contract are NULL or point to a live object of type T.
    unsafe { p.as_mut() }.ok_or(Errno::EINVAL)
}

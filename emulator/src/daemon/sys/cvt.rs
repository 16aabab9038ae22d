//! Turning the C convention (-1 and `errno`) into `io::Result`, and owning new descriptors.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

pub(super) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

pub(super) fn cvt_isize(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

pub(super) fn own(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: `fd` was just returned by a successful syscall that creates a descriptor,
    // so we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

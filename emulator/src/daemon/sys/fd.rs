//! Descriptors as byte pipes: eventfd doorbells and counters, pipes, non-blocking mode,
//! whole-record writes, and positioned reads and writes (`/proc/PID/mem`).

use super::cvt::{cvt, cvt_isize, own};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A nonblocking eventfd (the doorbell).
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    own(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })
}

/// Reads an eventfd or timerfd counter to reset it; ignores "nothing to read".
pub fn drain_counter(fd: RawFd) {
    let mut buf = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a local buffer.
    unsafe {
        libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
    }
}

/// Adds 1 to an eventfd counter.
pub fn eventfd_signal(fd: RawFd) -> io::Result<()> {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a local buffer.
    cvt_isize(unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) }).map(|_| ())
}

/// A pipe: (read end, write end), both close-on-exec; the write end nonblocking so a
/// client that never reads cannot block the daemon.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both were just created by pipe2 and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    set_nonblocking(w.as_raw_fd())?;
    Ok((r, w))
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller holds.
    unsafe {
        let flags = cvt(libc::fcntl(fd, libc::F_GETFL))?;
        cvt(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK))?;
    }
    Ok(())
}

/// Writes a whole small record (≤ PIPE_BUF, so atomic) to a nonblocking pipe.
/// `Ok(false)` when the pipe is full (the record is dropped).
pub fn write_record(fd: RawFd, rec: &[u8]) -> io::Result<bool> {
    // SAFETY: writes `rec.len()` bytes from a valid slice.
    let n = unsafe { libc::write(fd, rec.as_ptr().cast(), rec.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(true)
}

/// One write(2): how many bytes went out.
pub fn write_some(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: writes at most data.len() bytes from a valid slice.
    cvt_isize(unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) })
}

/// Reads exactly `buf.len()` bytes at `offset` of `fd` (pread), or fails.
pub fn pread_exact(fd: RawFd, mut offset: u64, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let off = libc::off64_t::try_from(offset)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: reads at most buf.len() bytes into a valid slice.
        let n = unsafe { libc::pread64(fd, buf.as_mut_ptr().cast(), buf.len(), off) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        let n = n as usize;
        buf = &mut buf[n..];
        offset += n as u64;
    }
    Ok(())
}

/// Writes all of `data` at `offset` of `fd` (pwrite), or fails.
pub fn pwrite_all(fd: RawFd, mut offset: u64, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        let off = libc::off64_t::try_from(offset)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: writes at most data.len() bytes from a valid slice.
        let n = unsafe { libc::pwrite64(fd, data.as_ptr().cast(), data.len(), off) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        let n = n as usize;
        data = &data[n..];
        offset += n as u64;
    }
    Ok(())
}

/// `fstat(2)` of an open descriptor.
pub fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open for the call; st is a valid out pointer.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// Checks the descriptor is the write end of a pipe, and makes it nonblocking.
pub fn is_pipe_write_end(fd: &OwnedFd) -> bool {
    let fifo = fstat(fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFIFO);
    // SAFETY: fcntl(F_GETFL) on a descriptor we own.
    let write_only =
        || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) } & libc::O_ACCMODE == libc::O_WRONLY;
    fifo && write_only() && set_nonblocking(fd.as_raw_fd()).is_ok()
}

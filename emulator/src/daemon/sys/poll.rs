//! Waiting and time: timerfds, an epoll set and clock reads.

use super::cvt::{cvt, own};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Nanoseconds of `clock` (`CLOCK_MONOTONIC`, `CLOCK_REALTIME`, ...) as one u64: what a
/// CQE timestamp holds. 0 if the clock cannot be read (an unknown clock id), which a
/// timestamp never is otherwise.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// A CLOCK_MONOTONIC timerfd, nonblocking.
pub fn timerfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    own(unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_CLOEXEC | libc::TFD_NONBLOCK,
        )
    })
}

/// Arms a timerfd to fire once after `after` (`None` disarms it). A zero delay fires at once.
pub fn timerfd_set(fd: RawFd, after: Option<Duration>) -> io::Result<()> {
    let value = match after {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        Some(d) => {
            let d = d.max(Duration::from_nanos(1));
            libc::timespec {
                tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            }
        }
    };
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: value,
    };
    // SAFETY: `spec` is a valid itimerspec; the old value is not requested.
    cvt(unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) }).map(|_| ())
}

/// An epoll instance; each registered descriptor carries a caller-chosen u64 token.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall.
        Ok(Epoll {
            fd: own(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?,
        })
    }

    /// Watches `fd` for input.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })
            .map(|_| ())
    }

    pub fn remove(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `add`; failure (already closed) is harmless.
        unsafe {
            libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev);
        }
    }

    /// Waits up to `timeout` (`None` = forever); returns the ready tokens in `out`.
    pub fn wait(&self, out: &mut Vec<u64>, timeout: Option<Duration>) -> io::Result<()> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let ms = match timeout {
            None => -1,
            Some(d) => d.as_millis().min(i32::MAX as u128) as libc::c_int,
        };
        // SAFETY: `events` has room for 64 entries, as passed.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                ms,
            )
        };
        out.clear();
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        out.extend(events[..n as usize].iter().map(|e| e.u64));
        Ok(())
    }
}

//! How the long-running commands (`rdma-emu capture`, `rdma-emu top`) stop: SIGINT and
//! SIGTERM both ask for a clean end (output flushed, exit 0), through the same handler
//! the daemon's shutdown uses ([`crate::daemon::sys::forward_signals`]): the signal
//! writes to an eventfd, which the command's loop polls beside its own input. A loop
//! must not block anywhere else, or a signal that arrives while it blocks goes unseen.

use crate::daemon::sys;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// The stop request of a command: readable once SIGINT or SIGTERM arrived.
#[derive(Debug)]
pub struct Stop {
    fd: OwnedFd,
}

/// What [`Stop::wait_readable`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// A stop signal arrived.
    Stop,
    /// The descriptor waited for is readable (or hung up).
    Readable,
    /// The time passed.
    Timeout,
}

impl Stop {
    /// Installs the handlers for SIGINT and SIGTERM (SIGPIPE is ignored: a closed
    /// output is an error to return, not a death).
    pub fn install() -> io::Result<Stop> {
        let fd = sys::eventfd()?;
        sys::forward_signals(fd.as_raw_fd(), &[libc::SIGINT, libc::SIGTERM], &[])?;
        Ok(Stop { fd })
    }

    /// The pollable descriptor.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Whether a stop signal arrived (without waiting).
    pub fn requested(&self) -> bool {
        self.wait_readable(None, Some(Duration::ZERO)) == Woken::Stop
    }

    /// Sleeps up to `limit` (forever: `None`), ending early on a stop signal.
    /// Whether one arrived.
    pub fn sleep(&self, limit: Duration) -> bool {
        self.wait_readable(None, Some(limit)) == Woken::Stop
    }

    /// Waits until `fd` is readable, a stop signal arrives, or `limit` passes. A stop
    /// wins over input ready at the same time. Interrupted waits are resumed with the
    /// time left.
    pub fn wait_readable(&self, fd: Option<RawFd>, limit: Option<Duration>) -> Woken {
        let end = limit.map(|l| Instant::now() + l);
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: self.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: fd.unwrap_or(-1),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let ms = match end {
                None => -1,
                Some(e) => {
                    let left = e.saturating_duration_since(Instant::now());
                    // Rounded up, so a wait never ends before its time.
                    i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
                }
            };
            // SAFETY: two valid pollfds (a negative fd is ignored by poll(2)).
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
            if n < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue; // the handler wrote to our eventfd: seen on the next poll
                }
                return Woken::Stop; // poll itself failed: nothing sensible but to stop
            }
            if fds[0].revents != 0 {
                return Woken::Stop;
            }
            if fds[1].revents != 0 {
                return Woken::Readable;
            }
            if end.is_some_and(|e| Instant::now() >= e) {
                return Woken::Timeout;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_wakes_a_sleep_and_stays_requested() {
        let stop = Stop::install().unwrap();
        assert!(!stop.requested());
        assert!(!stop.sleep(Duration::from_millis(20)));
        // SAFETY: raising SIGTERM in this process runs the handler just installed.
        unsafe { libc::raise(libc::SIGTERM) };
        let t = Instant::now();
        assert!(stop.sleep(Duration::from_secs(60)));
        assert!(t.elapsed() < Duration::from_secs(30));
        assert!(stop.requested());
    }
}

//! Stopping the engine from another thread or a signal handler: a flag and an eventfd
//! in the engine's epoll set that wakes it to see the flag.

use crate::daemon::sys;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A way to stop a running engine from another thread or a signal handler.
#[derive(Clone)]
pub struct Shutdown {
    flag: Arc<AtomicBool>,
    wake: Arc<OwnedFd>,
}

impl Shutdown {
    pub fn new() -> io::Result<Shutdown> {
        Ok(Shutdown {
            flag: Arc::new(AtomicBool::new(false)),
            wake: Arc::new(sys::eventfd()?),
        })
    }

    pub fn trigger(&self) {
        self.flag.store(true, Ordering::SeqCst);
        let _ = sys::eventfd_signal(self.wake.as_raw_fd());
    }

    /// The eventfd a signal handler may write to (after setting nothing else).
    pub fn wake_fd(&self) -> std::os::fd::RawFd {
        self.wake.as_raw_fd()
    }

    /// The wake eventfd fired: only a shutdown (or a signal handler) writes it.
    pub(in crate::daemon) fn woken(&self) {
        sys::drain_counter(self.wake.as_raw_fd());
        self.flag.store(true, Ordering::SeqCst);
    }

    pub(in crate::daemon) fn requested(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}

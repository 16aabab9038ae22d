//! librdmacm.so.1's rsocket API (`<rdma/rsocket.h>`), which rdma-emu does not provide:
//! `rsocket` fails as librdmacm does when it cannot create an rsocket, every call on
//! one fails with EBADF (no rsocket descriptor can exist), and `rpoll`/`rselect` are
//! `poll(2)`/`select(2)` on what can only be ordinary descriptors. The RDMA CM itself
//! is [`crate::cm`].
//!
//! Arguments the stubs never read are not declared: under the C calling convention a
//! callee may ignore trailing arguments, and none of these return through memory.
use crate::ffi::{self, Errno};
use core::ffi::c_int;

macro_rules! bad_socket {
    ($ret:ty: $($name:ident),* $(,)?) => {$(
        /// No rsocket can exist: -1 with `errno` = EBADF.
        #[no_mangle]
        pub extern "C" fn $name() -> $ret {
            ffi::set_errno(Errno(libc::EBADF));
            -1
        }
    )*};
}

/// No rsocket support: -1 with `errno` = ENODEV.
#[no_mangle]
pub extern "C" fn rsocket() -> c_int {
    ffi::set_errno(Errno::ENODEV);
    -1
}

bad_socket!(c_int: rbind, rlisten, raccept, rconnect, rshutdown, rclose, rgetpeername,
    rgetsockname, rsetsockopt, rgetsockopt, rfcntl, riounmap);
bad_socket!(isize: rrecv, rrecvfrom, rrecvmsg, rsend, rsendto, rsendmsg, rread, rreadv,
    rwrite, rwritev, riomap, riowrite);

/// No rsocket exists, so every descriptor is a plain one: `poll(2)`.
#[no_mangle]
pub extern "C" fn rpoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: forwards the caller's arguments unchanged to poll(2).
    unsafe { libc::poll(fds, nfds, timeout) }
}

/// No rsocket exists, so every descriptor is a plain one: `select(2)`.
#[no_mangle]
pub extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    // SAFETY: forwards the caller's arguments unchanged to select(2).
    unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) }
}

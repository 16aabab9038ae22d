//! librdmacm.so.1 (RDMACM_1.0 … 1.3), for now without a connection manager: every
//! call answers as the real librdmacm does on a host with no RDMA CM device
//! (`ENODEV` from its initialisation), so programs load and fail cleanly.
//! Issue 6 replaces this with RDMA CM over the daemon.
//!
//! Arguments the stubs never read are not declared: under the C calling convention a
//! callee may ignore trailing arguments, and none of these return through memory.
use crate::ffi::{self, Errno};
use core::ffi::{c_char, c_int, c_void, CStr};

macro_rules! no_cm_int {
    ($($name:ident),* $(,)?) => {$(
        /// No RDMA CM device: -1 with `errno` = ENODEV.
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            ffi::set_errno(Errno::ENODEV);
            -1
        }
    )*};
}

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

macro_rules! nothing {
    ($($name:ident),* $(,)?) => {$(
        /// Releases an object that cannot exist: nothing to do.
        #[no_mangle]
        pub extern "C" fn $name() {}
    )*};
}

no_cm_int!(
    rdma_create_id,
    rdma_create_ep,
    rdma_destroy_id,
    rdma_bind_addr,
    rdma_resolve_addr,
    rdma_resolve_route,
    rdma_create_qp,
    rdma_create_qp_ex,
    rdma_create_srq,
    rdma_create_srq_ex,
    rdma_connect,
    rdma_listen,
    rdma_get_request,
    rdma_accept,
    rdma_reject,
    rdma_reject_ece,
    rdma_notify,
    rdma_disconnect,
    rdma_join_multicast,
    rdma_join_multicast_ex,
    rdma_leave_multicast,
    rdma_get_cm_event,
    rdma_ack_cm_event,
    rdma_set_option,
    rdma_migrate_id,
    rdma_getaddrinfo,
    rdma_establish,
    rdma_init_qp_attr,
    rdma_get_remote_ece,
    rdma_set_local_ece,
    rsocket,
);

bad_socket!(c_int: rbind, rlisten, raccept, rconnect, rshutdown, rclose, rgetpeername,
    rgetsockname, rsetsockopt, rgetsockopt, rfcntl, riounmap);
bad_socket!(isize: rrecv, rrecvfrom, rrecvmsg, rsend, rsendto, rsendmsg, rread, rreadv,
    rwrite, rwritev, riomap, riowrite);

nothing!(
    rdma_destroy_event_channel,
    rdma_destroy_qp,
    rdma_destroy_srq,
    rdma_destroy_ep,
    rdma_freeaddrinfo
);

#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut c_void {
    ffi::ptr(|| Err(Errno::ENODEV))
}

#[no_mangle]
pub extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut c_void {
    if let Ok(n) = ffi::nonnull(num_devices) {
        *n = 0;
    }
    ffi::ptr(|| Err(Errno::ENODEV))
}

#[no_mangle]
pub extern "C" fn rdma_free_devices(_list: *mut *mut c_void) {}

#[no_mangle]
pub extern "C" fn rdma_get_src_port() -> u16 {
    0
}

#[no_mangle]
pub extern "C" fn rdma_get_dst_port() -> u16 {
    0
}

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

#[no_mangle]
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"RDMA_CM_EVENT_ADDR_RESOLVED",
        c"RDMA_CM_EVENT_ADDR_ERROR",
        c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        c"RDMA_CM_EVENT_ROUTE_ERROR",
        c"RDMA_CM_EVENT_CONNECT_REQUEST",
        c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        c"RDMA_CM_EVENT_CONNECT_ERROR",
        c"RDMA_CM_EVENT_UNREACHABLE",
        c"RDMA_CM_EVENT_REJECTED",
        c"RDMA_CM_EVENT_ESTABLISHED",
        c"RDMA_CM_EVENT_DISCONNECTED",
        c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        c"RDMA_CM_EVENT_MULTICAST_JOIN",
        c"RDMA_CM_EVENT_MULTICAST_ERROR",
        c"RDMA_CM_EVENT_ADDR_CHANGE",
        c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
    ];
    usize::try_from(event)
        .ok()
        .and_then(|i| T.get(i))
        .unwrap_or(&c"UNKNOWN EVENT")
        .as_ptr()
}

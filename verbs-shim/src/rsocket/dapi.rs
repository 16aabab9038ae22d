//! The rsocket calls on a datagram socket: the table of the process's datagram
//! rsockets, blocking and non-blocking waits, socket options, and what `rpoll` needs.
//! [`super::api`] hands a call here when its descriptor is a datagram rsocket.
use super::dgram::DSock;
use super::dhdr;
use super::opts::{RDMA_INLINE, RDMA_RQSIZE, RDMA_SQSIZE, SOL_RDMA};
use super::proto;
use crate::ffi::{self, Errno, VResult};
use core::ffi::{c_int, c_void};
use libc::{sockaddr, socklen_t, POLLIN, POLLOUT};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// One datagram rsocket: its state, and a second lock that serialises sleeping on its
/// epoll set (as `RSock` does for a stream).
pub struct DSocket {
    inner: Mutex<DSock>,
    wait: Mutex<()>,
}

impl DSocket {
    pub fn lock(&self) -> MutexGuard<'_, DSock> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn table() -> MutexGuard<'static, HashMap<i32, Arc<DSocket>>> {
    static T: OnceLock<Mutex<HashMap<i32, Arc<DSocket>>>> = OnceLock::new();
    T.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// The datagram rsocket numbered `fd`, if there is one.
pub fn lookup(fd: c_int) -> Option<Arc<DSocket>> {
    table().get(&fd).cloned()
}

/// `rsocket(domain, SOCK_DGRAM, ...)`.
pub fn socket(domain: c_int, nonblock: bool) -> VResult<c_int> {
    let s = DSock::new(domain, nonblock)?;
    let fd = s.fd();
    table().insert(
        fd,
        Arc::new(DSocket {
            inner: Mutex::new(s),
            wait: Mutex::new(()),
        }),
    );
    Ok(fd)
}

/// `ds_get_comp`: progresses until `ready` holds; EAGAIN when non-blocking, ETIMEDOUT
/// past `deadline`. Sleeps on the epoll set with the socket unlocked.
fn wait<'a>(
    ds: &'a DSocket,
    mut g: MutexGuard<'a, DSock>,
    ready: fn(&DSock) -> bool,
    nonblock: bool,
    deadline: Option<Instant>,
) -> VResult<MutexGuard<'a, DSock>> {
    let mut spins = 0u32;
    loop {
        g.progress();
        if ready(&g) {
            return Ok(g);
        }
        if nonblock {
            return Err(Errno::EAGAIN);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Errno(libc::ETIMEDOUT));
        }
        // rsocket.c polls for a while (polling_time) before sleeping.
        if spins < 64 {
            spins += 1;
            drop(g);
            std::thread::yield_now();
            g = ds.lock();
            continue;
        }
        g.arm();
        g.progress();
        if ready(&g) {
            return Ok(g);
        }
        let fd = g.wait_fd();
        drop(g);
        {
            let _w = ds.wait.lock().unwrap_or_else(|p| p.into_inner());
            let mut p = libc::pollfd {
                fd,
                events: POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd; bounded so a missed wake-up costs 100 ms at most.
            unsafe { libc::poll(&mut p, 1, 100) };
        }
        g = ds.lock();
        g.woke();
    }
}

/// `rsendto`/`rsend` on a datagram socket: one datagram, to `to` or the connected peer.
pub fn send(ds: &DSocket, data: &[u8], flags: c_int, to: Option<SocketAddr>) -> VResult<usize> {
    let g = ds.lock();
    let nonblock = g.nonblock || flags & libc::MSG_DONTWAIT != 0;
    let mut g = wait(ds, g, DSock::can_send, nonblock, None)?;
    g.send(to, data)
}

/// `ds_recvfrom`: one datagram (the rest of it is dropped if `buf` is shorter), and
/// its source when asked.
pub fn recv(
    ds: &DSocket,
    buf: &mut [u8],
    flags: c_int,
    src: *mut sockaddr,
    srclen: *mut socklen_t,
) -> VResult<usize> {
    let g = ds.lock();
    let nonblock = g.nonblock || flags & libc::MSG_DONTWAIT != 0;
    let mut g = wait(ds, g, DSock::have_rdata, nonblock, None)?;
    let (n, from) = g.recv(buf, flags & libc::MSG_PEEK != 0)?;
    if !src.is_null() && !srclen.is_null() {
        write_addr(&from, src, srclen)?;
    }
    Ok(n)
}

/// Copies `a` to the caller's address buffer, truncated as `getsockname` truncates.
pub fn write_addr(a: &SocketAddr, addr: *mut sockaddr, len: *mut socklen_t) -> VResult<()> {
    let l = ffi::nonnull(len)?;
    let (s, full) = dhdr::to_sockaddr(a);
    let n = (full as usize).min(*l as usize);
    if !addr.is_null() {
        // SAFETY: the caller gave *len writable bytes at addr; n is at most that.
        unsafe { core::ptr::copy_nonoverlapping(&s as *const _ as *const u8, addr as *mut u8, n) };
    }
    *l = full;
    Ok(())
}

/// `rclose` (`ds_shutdown` + `ds_free`): lets the posted sends complete (bounded: a UD
/// send completes once it left), then frees everything.
pub fn close(fd: c_int) -> bool {
    let Some(ds) = table().remove(&fd) else {
        return false;
    };
    let g = ds.lock();
    let deadline = Instant::now() + Duration::from_secs(2);
    let drained = wait(&ds, g, DSock::all_sends_done, false, Some(deadline));
    drop(drained);
    true
}

/// `rsetsockopt`: every level but `SOL_RDMA` goes to the UDP socket first (rsocket.c
/// does so too); buffer and queue sizes count until the first QP exists.
pub fn setsockopt(
    ds: &DSocket,
    level: c_int,
    opt: c_int,
    v: *const c_void,
    len: socklen_t,
) -> VResult<()> {
    let mut g = ds.lock();
    if level != SOL_RDMA {
        // SAFETY: the caller's option buffer (API contract).
        let r = unsafe { libc::setsockopt(g.fd(), level, opt, v, len) };
        if r != 0 {
            return Err(Errno::last());
        }
    }
    let n = || -> VResult<u32> {
        if v.is_null() || (len as usize) < core::mem::size_of::<c_int>() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: an int readable at v (checked length).
        Ok(unsafe { (v as *const c_int).read_unaligned() }.max(0) as u32)
    };
    let max = u32::from(proto::QP_MAX_SIZE);
    match (level, opt) {
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => g.sizes.rbuf_size = n()?.saturating_mul(2),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            g.sizes.sbuf_size = n()?.saturating_mul(2).max(proto::SNDLOWAT * 2)
        }
        (SOL_RDMA, RDMA_SQSIZE) => g.sizes.sq_size = n()?.min(max) as u16,
        (SOL_RDMA, RDMA_RQSIZE) => g.sizes.rq_size = n()?.min(max) as u16,
        (SOL_RDMA, RDMA_INLINE) => g.sizes.sq_inline = n()?.min(max),
        (SOL_RDMA, _) => return Err(Errno::EOPNOTSUPP),
        _ => {}
    }
    Ok(())
}

/// `rgetsockopt`: `SOL_RDMA` from the socket's sizes, the rest from the UDP socket.
pub fn getsockopt(
    ds: &DSocket,
    level: c_int,
    opt: c_int,
    v: *mut c_void,
    len: *mut socklen_t,
) -> VResult<()> {
    let g = ds.lock();
    if level != SOL_RDMA {
        // SAFETY: the caller's buffer and length (API contract).
        let r = unsafe { libc::getsockopt(g.fd(), level, opt, v, len) };
        return if r == 0 { Ok(()) } else { Err(Errno::last()) };
    }
    let val = match opt {
        RDMA_SQSIZE => u32::from(g.sizes.sq_size),
        RDMA_RQSIZE => u32::from(g.sizes.rq_size),
        RDMA_INLINE => g.sizes.sq_inline,
        _ => return Err(Errno::EOPNOTSUPP),
    };
    let l = ffi::nonnull(len)?;
    if v.is_null() || (*l as usize) < core::mem::size_of::<c_int>() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: room for an int (checked).
    unsafe { (v as *mut c_int).write_unaligned(val as c_int) };
    *l = core::mem::size_of::<c_int>() as socklen_t;
    Ok(())
}

/// The events of a datagram rsocket now (`rs_poll_rs`'s datagram half).
pub fn revents(ds: &DSocket, events: i16) -> i16 {
    let mut g = ds.lock();
    g.progress();
    let mut r = 0;
    if events & POLLIN != 0 && g.have_rdata() {
        r |= POLLIN;
    }
    if events & POLLOUT != 0 && g.can_send() {
        r |= POLLOUT;
    }
    r
}

/// Arms the socket's CQs; the descriptor to sleep on, or the events that became true.
pub fn arm(ds: &DSocket, events: i16) -> Result<c_int, i16> {
    let fd = {
        let mut g = ds.lock();
        g.arm();
        g.wait_fd()
    };
    match revents(ds, events) {
        0 => Ok(fd),
        r => Err(r),
    }
}

/// After `rpoll` woke on the socket's epoll set.
pub fn woke(ds: &DSocket) {
    let _w = ds.wait.lock().unwrap_or_else(|p| p.into_inner());
    ds.lock().woke();
}

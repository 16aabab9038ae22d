//! The exported rsocket functions, each in the shape of [`crate::ffi`]: panics caught,
//! -1 with `errno` on failure (rsocket.c's `ERR(e)`), except `rclose`, which like
//! rsocket.c answers an unknown socket with a positive EBADF.
use super::sock::RSock;
use super::sock::{self, Phase, Sock, Want};
use super::stream::{self, Stream};
use super::table::{self, lookup};
use super::{dapi, dhdr, iomap, keepalive, proto};
use crate::ffi::{self, Errno, VResult};
use core::ffi::{c_int, c_long, c_void};
use libc::{iovec, msghdr, sockaddr, socklen_t};
use std::sync::Arc;

pub use super::opts::{RDMA_INLINE, RDMA_IOMAPSIZE, RDMA_RQSIZE, RDMA_SQSIZE, SOL_RDMA};

fn ssize(f: impl FnOnce() -> VResult<usize>) -> isize {
    ffi::value(-1, || match f() {
        Ok(n) => n as isize,
        Err(e) => {
            ffi::set_errno(e);
            -1
        }
    })
}

fn int(f: impl FnOnce() -> VResult<c_int>) -> c_int {
    ffi::value(-1, || match f() {
        Ok(n) => n,
        Err(e) => {
            ffi::set_errno(e);
            -1
        }
    })
}

fn get(fd: c_int) -> VResult<Arc<RSock>> {
    lookup(fd).ok_or(Errno(libc::EBADF))
}

#[no_mangle]
pub extern "C" fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> c_int {
    int(|| {
        let t = type_ & !(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK);
        let nonblock = type_ & libc::SOCK_NONBLOCK != 0;
        let proto_ok = match t {
            libc::SOCK_STREAM => protocol == 0 || protocol == libc::IPPROTO_TCP,
            libc::SOCK_DGRAM => protocol == 0 || protocol == libc::IPPROTO_UDP,
            _ => false,
        };
        if (domain != libc::AF_INET && domain != libc::AF_INET6) || !proto_ok {
            return Err(Errno::EOPNOTSUPP);
        }
        if t == libc::SOCK_DGRAM {
            return dapi::socket(domain, nonblock);
        }
        let s = Sock::new(nonblock)?;
        Ok(table::insert(s))
    })
}

#[no_mangle]
pub extern "C" fn rbind(socket: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    ffi::minus_one(|| match dapi::lookup(socket) {
        Some(d) => d.lock().bind(addr, len),
        None => get(socket)?.lock().bind(addr),
    })
}

#[no_mangle]
pub extern "C" fn rlisten(socket: c_int, backlog: c_int) -> c_int {
    ffi::minus_one(|| {
        if dapi::lookup(socket).is_some() {
            return Err(Errno::EOPNOTSUPP);
        }
        get(socket)?.lock().listen(backlog)
    })
}

#[no_mangle]
pub extern "C" fn raccept(socket: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    int(|| {
        if dapi::lookup(socket).is_some() {
            return Err(Errno::EOPNOTSUPP);
        }
        let rs = get(socket)?;
        let new = rs.lock().accept()?;
        let fd = table::insert(new);
        if !addr.is_null() && !len.is_null() {
            rgetpeername(fd, addr, len);
        }
        Ok(fd)
    })
}

#[no_mangle]
pub extern "C" fn rconnect(socket: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    ffi::minus_one(|| match dapi::lookup(socket) {
        Some(d) => d.lock().connect(addr, len),
        None => get(socket)?.lock().connect(addr),
    })
}

fn connected<'a>(rs: &'a RSock) -> VResult<std::sync::MutexGuard<'a, Sock>> {
    let g = rs.lock();
    match g.phase {
        Phase::Connected => Ok(g),
        Phase::ConnectError(_) => Err(Errno(libc::ENOTCONN)),
        _ => Err(Errno(libc::ENOTCONN)),
    }
}

fn stream<'a>(g: &'a mut std::sync::MutexGuard<'_, Sock>) -> VResult<&'a mut Stream> {
    g.stream.as_mut().ok_or(Errno(libc::ENOTCONN))
}

/// `rrecv`: waits for data (unless non-blocking), keeps returning queued data after
/// the peer left, 0 at the end of the stream.
fn recv(socket: c_int, buf: &mut [u8], flags: c_int) -> VResult<usize> {
    if let Some(d) = dapi::lookup(socket) {
        return dapi::recv(&d, buf, flags, core::ptr::null_mut(), core::ptr::null_mut());
    }
    let rs = get(socket)?;
    let mut g = connected(&rs)?;
    let nonblock = g.nonblock || flags & libc::MSG_DONTWAIT != 0;
    let mut got = 0;
    loop {
        if !stream(&mut g)?.have_rdata() {
            g = match sock::wait(&rs, g, Want::Readable, nonblock) {
                Ok(g) => g,
                Err(e) if got == 0 => return Err(e),
                Err(_) => return Ok(got),
            };
        }
        let s = stream(&mut g)?;
        let n = s.recv_into(&mut buf[got..], flags & libc::MSG_PEEK != 0);
        got += n;
        s.progress();
        if flags & libc::MSG_PEEK != 0
            || got == buf.len()
            || flags & libc::MSG_WAITALL == 0
            || s.state & stream::READABLE == 0
        {
            if got == 0 && s.state & stream::ERROR != 0 && s.err != 0 {
                return Err(Errno(libc::ECONNRESET));
            }
            return Ok(got);
        }
    }
}

fn send(socket: c_int, buf: &[u8], flags: c_int) -> VResult<usize> {
    if let Some(d) = dapi::lookup(socket) {
        return dapi::send(&d, buf, flags, None);
    }
    let rs = get(socket)?;
    let mut g = connected(&rs)?;
    let nonblock = g.nonblock || flags & libc::MSG_DONTWAIT != 0;
    g = flush_iomaps(&rs, g, nonblock)?;
    let mut sent = 0;
    let mut olen = proto::OLAP_START_SIZE;
    while sent < buf.len() {
        if !stream(&mut g)?.can_send() {
            g = match sock::wait(&rs, g, Want::Writable, nonblock) {
                Ok(g) => g,
                Err(e) if sent == 0 => return Err(e),
                Err(_) => return Ok(sent),
            };
            if stream(&mut g)?.state & stream::WRITABLE == 0 {
                return if sent == 0 {
                    Err(Errno(libc::ECONNRESET))
                } else {
                    Ok(sent)
                };
            }
        }
        match stream(&mut g)?.send_chunk(&buf[sent..], &mut olen) {
            Ok(n) => sent += n,
            Err(e) if sent == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(sent)
}

/// Sends the iomap entries `riomap` queued (`rs_send_iomaps`).
fn flush_iomaps<'a>(
    rs: &'a RSock,
    mut g: std::sync::MutexGuard<'a, Sock>,
    nonblock: bool,
) -> VResult<std::sync::MutexGuard<'a, Sock>> {
    while let Some(i) = g.maps.iter().position(|m| m.index.is_some() && !m.sent) {
        if !stream(&mut g)?.can_send() {
            g = sock::wait(rs, g, Want::Writable, nonblock)?;
        }
        let sock = &mut *g;
        let s = sock.stream.as_mut().ok_or(Errno(libc::ENOTCONN))?;
        let m = &mut sock.maps[i];
        let entry = iomap::entry(m, s.swap());
        m.sent = true;
        s.write_iomap(&entry, m.index.unwrap_or(0))?;
    }
    Ok(g)
}

fn slice<'a>(p: *const c_void, len: usize) -> VResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: the caller gave `len` readable bytes (socket API contract).
    Ok(unsafe { core::slice::from_raw_parts(p as *const u8, len) })
}

fn slice_mut<'a>(p: *mut c_void, len: usize) -> VResult<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: the caller gave `len` writable bytes (socket API contract).
    Ok(unsafe { core::slice::from_raw_parts_mut(p as *mut u8, len) })
}

#[no_mangle]
pub extern "C" fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    ssize(|| recv(socket, slice_mut(buf, len)?, flags))
}

#[no_mangle]
pub extern "C" fn rrecvfrom(
    socket: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    src: *mut sockaddr,
    srclen: *mut socklen_t,
) -> isize {
    ssize(|| {
        if let Some(d) = dapi::lookup(socket) {
            return dapi::recv(&d, slice_mut(buf, len)?, flags, src, srclen);
        }
        let n = recv(socket, slice_mut(buf, len)?, flags)?;
        if n > 0 && !src.is_null() && !srclen.is_null() {
            rgetpeername(socket, src, srclen);
        }
        Ok(n)
    })
}

/// The first vector only, as rsocket.c does.
fn first_iov<'a>(iov: *const iovec, cnt: c_int) -> VResult<Option<&'a iovec>> {
    if cnt <= 0 || iov.is_null() {
        return Ok(None);
    }
    // SAFETY: at least one iovec (cnt > 0, API contract).
    Ok(Some(unsafe { &*iov }))
}

#[no_mangle]
pub extern "C" fn rrecvmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> isize {
    ssize(|| {
        // SAFETY: a valid msghdr (API contract).
        let m = unsafe { msg.as_ref() }.ok_or(Errno(libc::EFAULT))?;
        if !m.msg_control.is_null() && m.msg_controllen != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        match first_iov(m.msg_iov, m.msg_iovlen as c_int)? {
            Some(v) => recv(
                socket,
                slice_mut(v.iov_base, v.iov_len)?,
                flags | m.msg_flags,
            ),
            None => Ok(0),
        }
    })
}

#[no_mangle]
pub extern "C" fn rread(socket: c_int, buf: *mut c_void, count: usize) -> isize {
    rrecv(socket, buf, count, 0)
}

#[no_mangle]
pub extern "C" fn rreadv(socket: c_int, iov: *const iovec, cnt: c_int) -> isize {
    ssize(|| match first_iov(iov, cnt)? {
        Some(v) => recv(socket, slice_mut(v.iov_base, v.iov_len)?, 0),
        None => Ok(0),
    })
}

#[no_mangle]
pub extern "C" fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize {
    ssize(|| send(socket, slice(buf, len)?, flags))
}

#[no_mangle]
pub extern "C" fn rsendto(
    socket: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    dest: *const sockaddr,
    destlen: socklen_t,
) -> isize {
    ssize(|| {
        if let Some(d) = dapi::lookup(socket) {
            // SAFETY: NULL or the caller's address of `destlen` bytes (API contract).
            let to = match unsafe { dhdr::from_sockaddr(dest, destlen) } {
                Some(a) => Some(a),
                None if dest.is_null() => None,
                None => return Err(Errno(libc::EAFNOSUPPORT)),
            };
            return dapi::send(&d, slice(buf, len)?, flags, to);
        }
        if !dest.is_null() {
            return Err(Errno(libc::EISCONN));
        }
        send(socket, slice(buf, len)?, flags)
    })
}

fn sendv(socket: c_int, iov: *const iovec, cnt: c_int, flags: c_int) -> VResult<usize> {
    if cnt < 0 {
        return Err(Errno::EINVAL);
    }
    if let Some(d) = dapi::lookup(socket) {
        // One datagram of all the vectors.
        let mut all = Vec::new();
        for i in 0..cnt as usize {
            // SAFETY: cnt iovecs (API contract).
            let v = unsafe { &*iov.add(i) };
            all.extend_from_slice(slice(v.iov_base, v.iov_len)?);
        }
        return dapi::send(&d, &all, flags, None);
    }
    let mut total = 0;
    for i in 0..cnt as usize {
        // SAFETY: cnt iovecs (API contract).
        let v = unsafe { &*iov.add(i) };
        let n = match send(socket, slice(v.iov_base, v.iov_len)?, flags) {
            Ok(n) => n,
            Err(e) if total == 0 => return Err(e),
            Err(_) => return Ok(total),
        };
        total += n;
        if n < v.iov_len {
            break;
        }
    }
    Ok(total)
}

#[no_mangle]
pub extern "C" fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> isize {
    ssize(|| {
        // SAFETY: a valid msghdr (API contract).
        let m = unsafe { msg.as_ref() }.ok_or(Errno(libc::EFAULT))?;
        if !m.msg_control.is_null() && m.msg_controllen != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        sendv(socket, m.msg_iov, m.msg_iovlen as c_int, flags)
    })
}

#[no_mangle]
pub extern "C" fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> isize {
    rsend(socket, buf, count, 0)
}

#[no_mangle]
pub extern "C" fn rwritev(socket: c_int, iov: *const iovec, cnt: c_int) -> isize {
    ssize(|| sendv(socket, iov, cnt, 0))
}

#[no_mangle]
pub extern "C" fn rshutdown(socket: c_int, how: c_int) -> c_int {
    ffi::minus_one(|| {
        if dapi::lookup(socket).is_some() {
            // What a UDP socket answers (ENOTCONN unless connected).
            // SAFETY: the datagram rsocket's own UDP socket.
            return match unsafe { libc::shutdown(socket, how) } {
                0 => Ok(()),
                _ => Err(Errno::last()),
            };
        }
        shutdown(&*get(socket)?, how)
    })
}

fn shutdown(rs: &RSock, how: c_int) -> VResult<()> {
    let mut g = rs.lock();
    if g.stream.is_none() {
        return Err(Errno(libc::ENOTCONN));
    }
    if !stream(&mut g)?.ctrl_slot_free() {
        g = sock::wait(rs, g, Want::CtrlSlot, false)?;
    }
    g.shutdown_msg(how)?;
    if stream(&mut g)?.state & stream::CONNECTED != 0 {
        // Best effort, bounded by the QP's own retries: what was sent completes.
        g = sock::wait(rs, g, Want::SendsDone, false)?;
    }
    drop(g);
    Ok(())
}

#[no_mangle]
pub extern "C" fn rclose(socket: c_int) -> c_int {
    ffi::value(libc::EBADF, || {
        if dapi::close(socket) {
            return 0;
        }
        let Some(rs) = table::remove(socket) else {
            return libc::EBADF;
        };
        let connected = rs
            .lock()
            .stream
            .as_ref()
            .is_some_and(|s| s.state & stream::CONNECTED != 0);
        if connected {
            let _ = shutdown(&rs, libc::SHUT_RDWR);
        }
        // The socket is dropped (QP, buffers, id) with its last reference.
        0
    })
}

fn copy_addr(
    src: &libc::sockaddr_storage,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> VResult<()> {
    let l = ffi::nonnull(len)?;
    let full = match c_int::from(src.ss_family) {
        libc::AF_INET6 => core::mem::size_of::<libc::sockaddr_in6>(),
        _ => core::mem::size_of::<libc::sockaddr_in>(),
    };
    let n = full.min(*l as usize);
    if !addr.is_null() {
        // SAFETY: the caller gave *len writable bytes at addr; n is at most that.
        unsafe { core::ptr::copy_nonoverlapping(src as *const _ as *const u8, addr as *mut u8, n) };
    }
    *l = full as socklen_t;
    Ok(())
}

#[no_mangle]
pub extern "C" fn rgetpeername(socket: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    ffi::minus_one(|| {
        if let Some(d) = dapi::lookup(socket) {
            let a = d.lock().name(true)?;
            return dapi::write_addr(&a, addr, len);
        }
        let rs = get(socket)?;
        let g = rs.lock();
        // SAFETY: the socket's live id.
        copy_addr(unsafe { &(*g.id).route.addr.dst_addr }, addr, len)
    })
}

#[no_mangle]
pub extern "C" fn rgetsockname(socket: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    ffi::minus_one(|| {
        if let Some(d) = dapi::lookup(socket) {
            let a = d.lock().name(false)?;
            return dapi::write_addr(&a, addr, len);
        }
        let rs = get(socket)?;
        let g = rs.lock();
        // SAFETY: the socket's live id.
        copy_addr(unsafe { &(*g.id).route.addr.src_addr }, addr, len)
    })
}

/// `rfcntl(F_GETFL / F_SETFL)`: only O_NONBLOCK matters to an rsocket. Declared with its
/// one variadic argument, read as the x86-64 C convention passes it.
#[no_mangle]
pub extern "C" fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> c_int {
    int(|| {
        let nonblock = |nb: &mut bool| match cmd {
            libc::F_GETFL => Ok(if *nb { libc::O_NONBLOCK } else { 0 } | libc::O_RDWR),
            libc::F_SETFL => {
                *nb = (arg as c_int) & libc::O_NONBLOCK != 0;
                Ok(0)
            }
            _ => Err(Errno::EOPNOTSUPP),
        };
        if let Some(d) = dapi::lookup(socket) {
            return nonblock(&mut d.lock().nonblock);
        }
        let rs = get(socket)?;
        let mut g = rs.lock();
        nonblock(&mut g.nonblock)
    })
}

#[no_mangle]
pub extern "C" fn riomap(
    socket: c_int,
    buf: *mut c_void,
    len: usize,
    prot: c_int,
    _flags: c_int,
    offset: i64,
) -> i64 {
    ffi::value(-1, || {
        let r = (|| -> VResult<i64> {
            let rs = get(socket)?;
            let mut g = rs.lock();
            if prot & !(libc::PROT_WRITE | libc::PROT_NONE) != 0 {
                return Err(Errno::EINVAL);
            }
            let s = g.stream.as_ref().ok_or(Errno::EINVAL)?;
            let pd = s.pd();
            let index = if prot & libc::PROT_WRITE != 0 {
                Some(iomap::free_index(s, &g.maps)?)
            } else {
                None
            };
            let mr = super::ep::Mr::register_raw(pd, buf, len)?;
            let off = if offset == -1 { buf as i64 } else { offset };
            g.maps.push(iomap::IoMap {
                offset: off as u64,
                addr: buf as u64,
                len,
                mr,
                index,
                sent: index.is_none(),
            });
            Ok(off)
        })();
        r.unwrap_or_else(|e| {
            ffi::set_errno(e);
            -1
        })
    })
}

#[no_mangle]
pub extern "C" fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int {
    ffi::minus_one(|| {
        let rs = get(socket)?;
        let mut g = rs.lock();
        let i = g
            .maps
            .iter()
            .position(|m| m.addr == buf as u64 && m.len == len)
            .ok_or(Errno::EINVAL)?;
        g.maps.remove(i);
        Ok(())
    })
}

/// `riowrite`: RDMA-writes into the peer's mapping at `offset`; stops at the first byte
/// no mapping covers. Returns `size_t` like rsocket.c (-1 as its all-ones value).
#[no_mangle]
pub extern "C" fn riowrite(
    socket: c_int,
    buf: *const c_void,
    count: usize,
    offset: i64,
    flags: c_int,
) -> usize {
    ssize(|| {
        let data = slice(buf, count)?;
        let rs = get(socket)?;
        let mut g = connected(&rs)?;
        let nonblock = g.nonblock || flags & libc::MSG_DONTWAIT != 0;
        g = flush_iomaps(&rs, g, nonblock)?;
        let mut done = 0usize;
        let mut olen = proto::OLAP_START_SIZE;
        while done < count {
            let off = (offset as u64).wrapping_add(done as u64);
            let Some((start, sge)) = iomap::find(stream(&mut g)?, off) else {
                break;
            };
            if !stream(&mut g)?.can_send() {
                g = match sock::wait(&rs, g, Want::Writable, nonblock) {
                    Ok(g) => g,
                    Err(e) if done == 0 => return Err(e),
                    Err(_) => break,
                };
                if stream(&mut g)?.state & stream::WRITABLE == 0 {
                    return if done == 0 {
                        Err(Errno(libc::ECONNRESET))
                    } else {
                        Ok(done)
                    };
                }
            }
            let s = stream(&mut g)?;
            let mut xfer = (count - done) as u64;
            if u64::from(olen) < xfer {
                xfer = u64::from(olen);
                if olen < proto::MAX_TRANSFER {
                    olen <<= 1;
                }
            }
            let room = start + u64::from(sge.length) - off;
            let xfer = xfer.min(u64::from(s.sbuf_avail())).min(room) as usize;
            let addr = sge.addr.wrapping_add(off - start);
            if let Err(e) = s.write_direct(&data[done..done + xfer], addr, sge.key) {
                if done == 0 {
                    return Err(e);
                }
                break;
            }
            done += xfer;
        }
        Ok(done)
    }) as usize
}

#[no_mangle]
pub extern "C" fn rsetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: socklen_t,
) -> c_int {
    ffi::minus_one(|| {
        if let Some(d) = dapi::lookup(socket) {
            return dapi::setsockopt(&d, level, optname, optval, optlen);
        }
        let rs = get(socket)?;
        let mut g = rs.lock();
        super::opts::set(&mut g, level, optname, optval, optlen)?;
        if (level, optname) == (libc::SOL_SOCKET, libc::SO_KEEPALIVE)
            || (level, optname) == (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE)
        {
            // rs_set_keepalive / RS_SVC_MOD_KEEPALIVE.
            let on = g.so_opts & (1 << libc::SO_KEEPALIVE) != 0;
            if on && g.keepalive_time == 0 {
                g.keepalive_time = keepalive::default_time();
            }
            let every = on.then(|| std::time::Duration::from_secs(u64::from(g.keepalive_time)));
            drop(g);
            keepalive::set(&rs, every);
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn rgetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut socklen_t,
) -> c_int {
    ffi::minus_one(|| match dapi::lookup(socket) {
        Some(d) => dapi::getsockopt(&d, level, optname, optval, optlen),
        None => super::opts::get(&mut get(socket)?.lock(), level, optname, optval, optlen),
    })
}

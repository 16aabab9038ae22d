//! `rsetsockopt`/`rgetsockopt`: the options rsocket.c knows (and librspreload sets).
//! Options with no meaning on a reliable connection are accepted and remembered, as
//! rsocket.c does; sizes only change before the connection exists.
use super::proto;
use super::sock::Sock;
use crate::ffi::{self, Errno, VResult};
use core::ffi::{c_int, c_void};
use libc::socklen_t;

/// `SOL_RDMA` and its options (`<rdma/rsocket.h>`).
pub const SOL_RDMA: c_int = 0x10000;
pub const RDMA_SQSIZE: c_int = 0;
pub const RDMA_RQSIZE: c_int = 1;
pub const RDMA_INLINE: c_int = 2;
pub const RDMA_IOMAPSIZE: c_int = 3;

fn read_int(v: *const c_void, len: socklen_t) -> VResult<c_int> {
    if v.is_null() || (len as usize) < core::mem::size_of::<c_int>() {
        return Err(Errno(libc::EINVAL));
    }
    // SAFETY: at least an int readable at v (checked length, API contract).
    Ok(unsafe { (v as *const c_int).read_unaligned() })
}

fn flag(bits: &mut u64, opt: c_int, on: bool) {
    let b = 1u64 << (opt & 63);
    if on {
        *bits |= b;
    } else {
        *bits &= !b;
    }
}

pub fn set(
    s: &mut Sock,
    level: c_int,
    opt: c_int,
    v: *const c_void,
    len: socklen_t,
) -> VResult<()> {
    let before = s.stream.is_none();
    match (level, opt) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
            let on = read_int(v, len)?;
            // The CM's port reuse; a device that refuses it changes nothing for us.
            let mut val = on;
            // RDMA_OPTION_ID (0), RDMA_OPTION_ID_REUSEADDR (1).
            crate::cm::id::rdma_set_option(s.id, 0, 1, &mut val as *mut c_int as *mut c_void, 4);
            flag(&mut s.so_opts, opt, on != 0);
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            let n = read_int(v, len)? as u32;
            if before {
                s.sizes.rbuf_size = n.saturating_mul(2).clamp(proto::SNDLOWAT * 2, 1 << 28);
            }
        }
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            let n = read_int(v, len)? as u32;
            if before {
                s.sizes.sbuf_size = n.saturating_mul(2).clamp(proto::SNDLOWAT * 2, 1 << 28);
            }
        }
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            let on = read_int(v, len)?;
            flag(&mut s.so_opts, opt, on != 0);
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if v.is_null() || (len as usize) < core::mem::size_of::<libc::linger>() {
                return Err(Errno::EINVAL);
            }
            // SAFETY: a struct linger (checked length).
            let l = unsafe { (v as *const libc::linger).read_unaligned() };
            flag(&mut s.so_opts, opt, l.l_onoff == 0);
        }
        (libc::IPPROTO_IP, libc::IP_TOS) => {}
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => {
            let on = read_int(v, len)?;
            flag(&mut s.tcp_opts, opt, on != 0);
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            let t = read_int(v, len)?;
            if t <= 0 {
                return Err(Errno::EINVAL);
            }
            s.keepalive_time = t as u32;
        }
        (
            libc::IPPROTO_TCP,
            libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG | libc::TCP_CONGESTION,
        ) => {}
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {}
        (SOL_RDMA, _) => {
            if !before {
                return Err(Errno::EINVAL);
            }
            let n = read_int(v, len)?.max(0) as u32;
            let max = u32::from(proto::QP_MAX_SIZE);
            match opt {
                RDMA_SQSIZE => s.sizes.sq_size = n.min(max) as u16,
                RDMA_RQSIZE => s.sizes.rq_size = n.min(max) as u16,
                RDMA_INLINE => s.sizes.sq_inline = n.min(max),
                RDMA_IOMAPSIZE => {
                    s.sizes.target_iomap_size =
                        proto::scale_to_value(proto::value_to_scale(n, 8) & 0xff, 8) as u16
                }
                _ => return Err(Errno::EOPNOTSUPP),
            }
        }
        _ => return Err(Errno::EOPNOTSUPP),
    }
    Ok(())
}

pub fn get(
    s: &mut Sock,
    level: c_int,
    opt: c_int,
    v: *mut c_void,
    len: *mut socklen_t,
) -> VResult<()> {
    let l = ffi::nonnull(len)?;
    let bit = |bits: u64| c_int::from(bits & (1u64 << (opt & 63)) != 0);
    let val: c_int = match (level, opt) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            bit(s.so_opts)
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => s.sizes.rbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => s.sizes.sbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_ERROR) => {
            let e = match s.phase {
                super::sock::Phase::ConnectError(e) => e,
                _ => s
                    .stream
                    .as_mut()
                    .map_or(0, |st| core::mem::take(&mut st.err)),
            };
            e
        }
        (libc::SOL_SOCKET, libc::SO_TYPE) => libc::SOCK_STREAM,
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => bit(s.tcp_opts),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => s.keepalive_time as c_int,
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => 2048,
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_CONGESTION) => 1,
        (SOL_RDMA, RDMA_SQSIZE) => c_int::from(s.sizes.sq_size),
        (SOL_RDMA, RDMA_RQSIZE) => c_int::from(s.sizes.rq_size),
        (SOL_RDMA, RDMA_INLINE) => s.sizes.sq_inline as c_int,
        (SOL_RDMA, RDMA_IOMAPSIZE) => c_int::from(s.sizes.target_iomap_size),
        (libc::IPPROTO_TCP, libc::TCP_INFO) => {
            // As rsocket.c: zeroes but the state and a window of sq_size.
            if v.is_null() {
                return Err(Errno::EINVAL);
            }
            // SAFETY: plain old data; all-zero is valid.
            let mut info: libc::tcp_info = unsafe { core::mem::zeroed() };
            let up = s
                .stream
                .as_ref()
                .is_some_and(|st| st.state & super::stream::CONNECTED != 0);
            info.tcpi_state = if up { 1 } else { 7 }; // TCP_ESTABLISHED, TCP_CLOSE
            info.tcpi_snd_cwnd = u32::from(s.sizes.sq_size);
            // The caller's struct may be an older, shorter one: fill what it has room for.
            let n = (*l as usize).min(core::mem::size_of::<libc::tcp_info>());
            // SAFETY: n bytes writable at v (the caller's length) and readable in info.
            unsafe {
                core::ptr::copy_nonoverlapping(&info as *const _ as *const u8, v as *mut u8, n)
            };
            *l = n as socklen_t;
            return Ok(());
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if v.is_null() || (*l as usize) < core::mem::size_of::<libc::linger>() {
                return Err(Errno::EINVAL);
            }
            let lg = libc::linger {
                l_onoff: 1 - bit(s.so_opts),
                l_linger: 0,
            };
            // SAFETY: room for a struct linger (checked).
            unsafe { (v as *mut libc::linger).write_unaligned(lg) };
            *l = core::mem::size_of::<libc::linger>() as socklen_t;
            return Ok(());
        }
        _ => return Err(Errno::EOPNOTSUPP),
    };
    if v.is_null() || (*l as usize) < core::mem::size_of::<c_int>() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: room for an int (checked).
    unsafe { (v as *mut c_int).write_unaligned(val) };
    *l = core::mem::size_of::<c_int>() as socklen_t;
    Ok(())
}

//! `rdma_getaddrinfo` / `rdma_freeaddrinfo` as librdmacm's addrinfo.c does them without
//! ib_acm: the system resolver (`getaddrinfo(3)`) with hints translated both ways (QP
//! type ↔ socket type, port space ↔ protocol, `RAI_PASSIVE`, `RAI_NUMERICHOST`), the
//! first answer kept. Memory comes from `malloc` as in librdmacm, so the list can be
//! released by `rdma_freeaddrinfo` only.
use super::abi::*;
use super::device;
use crate::abi::{IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
use crate::ffi::{self, Errno};
use core::ffi::{c_char, c_int, c_void};
use libc::{addrinfo, sockaddr, socklen_t};
use wire::client::cm::ps;
use wire::client::verbs::qp_type;

/// `ucma_convert_to_ai`: the `struct addrinfo` hints for the system resolver.
fn to_ai(rai: &rdma_addrinfo) -> addrinfo {
    // SAFETY: addrinfo is plain old data; all-zero is the "no hints" value.
    let mut ai: addrinfo = unsafe { core::mem::zeroed() };
    if rai.ai_flags & RAI_PASSIVE != 0 {
        ai.ai_flags = libc::AI_PASSIVE;
    }
    if rai.ai_flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    if rai.ai_family != AF_IB {
        ai.ai_family = rai.ai_family;
    }
    ai.ai_socktype = match rai.ai_qp_type {
        t if t == IBV_QPT_RC
            || t == IBV_QPT_UC
            || t as u32 == qp_type::XRC_SEND
            || t as u32 == qp_type::XRC_RECV =>
        {
            libc::SOCK_STREAM
        }
        t if t == IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match rai.ai_port_space as u32 {
        ps::TCP => libc::IPPROTO_TCP,
        ps::IPOIB | ps::UDP => libc::IPPROTO_UDP,
        ps::IB if ai.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
        ps::IB if ai.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
        _ => 0,
    };
    ai
}

/// A `malloc`ed copy of `len` bytes at `src`, or ENOMEM.
fn dup_bytes(src: *const c_void, len: usize) -> Result<*mut c_void, Errno> {
    // SAFETY: malloc of a positive size; checked for NULL below.
    let p = unsafe { libc::malloc(len.max(1)) };
    if p.is_null() {
        return Err(Errno::ENOMEM);
    }
    // SAFETY: src holds len readable bytes (caller), p len writable ones.
    unsafe { core::ptr::copy_nonoverlapping(src as *const u8, p as *mut u8, len) };
    Ok(p)
}

fn dup_str(s: *const c_char) -> *mut c_char {
    if s.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: s is a NUL-terminated string from getaddrinfo.
    unsafe { libc::strdup(s) }
}

/// `ucma_convert_to_rai`: the resolver's first answer as the source (passive) or the
/// destination of `rai`.
fn from_ai(rai: &mut rdma_addrinfo, hints: &rdma_addrinfo, ai: &addrinfo) -> Result<(), Errno> {
    rai.ai_qp_type = if hints.ai_qp_type != 0 {
        hints.ai_qp_type
    } else {
        match ai.ai_socktype {
            libc::SOCK_STREAM => IBV_QPT_RC,
            libc::SOCK_DGRAM => IBV_QPT_UD,
            _ => 0,
        }
    };
    rai.ai_port_space = if hints.ai_port_space != 0 {
        hints.ai_port_space
    } else {
        match ai.ai_protocol {
            libc::IPPROTO_TCP => ps::TCP as c_int,
            libc::IPPROTO_UDP => ps::UDP as c_int,
            _ => 0,
        }
    };
    if hints.ai_flags & RAI_FAMILY != 0
        && hints.ai_family == AF_IB
        && hints.ai_flags & RAI_NUMERICHOST != 0
    {
        // AF_IB addresses need a kernel with AF_IB support in the CM; this one has none.
        return Err(Errno(libc::EAFNOSUPPORT));
    }
    rai.ai_family = ai.ai_family;
    let addr = dup_bytes(ai.ai_addr as *const c_void, ai.ai_addrlen as usize)? as *mut sockaddr;
    if ai.ai_flags & libc::AI_PASSIVE != 0 {
        rai.ai_flags = RAI_PASSIVE;
        rai.ai_src_canonname = dup_str(ai.ai_canonname);
        rai.ai_src_addr = addr;
        rai.ai_src_len = ai.ai_addrlen;
    } else {
        rai.ai_dst_canonname = dup_str(ai.ai_canonname);
        rai.ai_dst_addr = addr;
        rai.ai_dst_len = ai.ai_addrlen;
    }
    Ok(())
}

/// Why a lookup failed: an `EAI_*` code from the resolver (returned as is, as
/// librdmacm does) or an errno (-1 returned).
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    Resolver(c_int),
    Errno(Errno),
}

/// `rdma_getaddrinfo` without librdmacm's device check.
pub fn lookup(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
) -> Result<*mut rdma_addrinfo, Failure> {
    if node.is_null() && service.is_null() && hints.is_null() {
        return Err(Failure::Errno(Errno::EINVAL));
    }
    // SAFETY: calloc of one rdma_addrinfo; checked for NULL.
    let rai =
        unsafe { libc::calloc(1, core::mem::size_of::<rdma_addrinfo>()) } as *mut rdma_addrinfo;
    if rai.is_null() {
        return Err(Failure::Errno(Errno::ENOMEM));
    }
    let result = fill(rai, node, service, hints);
    match result {
        Ok(()) => Ok(rai),
        Err(f) => {
            rdma_freeaddrinfo(rai);
            Err(f)
        }
    }
}

fn fill(
    rai: *mut rdma_addrinfo,
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
) -> Result<(), Failure> {
    // SAFETY: rai was calloc'ed by lookup: a zeroed, exclusively owned rdma_addrinfo.
    let r = unsafe { &mut *rai };
    // SAFETY: all-zero is librdmacm's `nohints`.
    let nohints: rdma_addrinfo = unsafe { core::mem::zeroed() };
    // SAFETY: hints is NULL or a valid rdma_addrinfo (API contract).
    let h = unsafe { hints.as_ref() }.unwrap_or(&nohints);
    if !node.is_null() || !service.is_null() {
        let ai_hints = to_ai(h);
        let mut ai: *mut addrinfo = core::ptr::null_mut();
        let hp = if hints.is_null() {
            core::ptr::null()
        } else {
            &ai_hints as *const addrinfo
        };
        // SAFETY: node/service are NULL or NUL-terminated (API contract); hp is NULL or
        // a live addrinfo; ai receives the resolver's list.
        let ret = unsafe { libc::getaddrinfo(node, service, hp, &mut ai) };
        if ret != 0 {
            return Err(Failure::Resolver(ret));
        }
        // SAFETY: on success getaddrinfo returned a non-empty list.
        let converted = from_ai(r, h, unsafe { &*ai });
        // SAFETY: ai came from getaddrinfo and is freed once.
        unsafe { libc::freeaddrinfo(ai) };
        converted.map_err(Failure::Errno)?;
    } else {
        r.ai_flags = h.ai_flags;
        r.ai_family = h.ai_family;
        r.ai_qp_type = h.ai_qp_type;
        r.ai_port_space = h.ai_port_space;
        if h.ai_dst_len != 0 {
            r.ai_dst_addr = dup_bytes(h.ai_dst_addr as *const c_void, h.ai_dst_len as usize)
                .map_err(Failure::Errno)? as *mut sockaddr;
            r.ai_dst_len = h.ai_dst_len;
        }
    }
    if r.ai_src_len == 0 && h.ai_src_len != 0 {
        r.ai_src_addr = dup_bytes(h.ai_src_addr as *const c_void, h.ai_src_len as usize)
            .map_err(Failure::Errno)? as *mut sockaddr;
        r.ai_src_len = h.ai_src_len as socklen_t;
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    let mut code = -1;
    let rc = ffi::minus_one(|| {
        if node.is_null() && service.is_null() && hints.is_null() {
            return Err(Errno::EINVAL);
        }
        device::init()?;
        let out = ffi::nonnull(res)?;
        match lookup(node, service, hints) {
            Ok(rai) => {
                *out = rai;
                Ok(())
            }
            Err(Failure::Resolver(e)) => {
                code = e;
                Ok(())
            }
            Err(Failure::Errno(e)) => Err(e),
        }
    });
    if rc == 0 && code != -1 {
        code
    } else {
        rc
    }
}

#[no_mangle]
pub extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    ffi::value((), || {
        let mut next = res;
        while !next.is_null() {
            // SAFETY: every node and every pointer in it was malloc'ed by lookup (or is
            // NULL), and the list is given up here.
            unsafe {
                let r = &*next;
                let following = r.ai_next;
                for p in [
                    r.ai_connect,
                    r.ai_route,
                    r.ai_src_canonname as *mut c_void,
                    r.ai_dst_canonname as *mut c_void,
                    r.ai_src_addr as *mut c_void,
                    r.ai_dst_addr as *mut c_void,
                ] {
                    libc::free(p);
                }
                libc::free(next as *mut c_void);
                next = following;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn hints(flags: c_int, port_space: u32) -> rdma_addrinfo {
        // SAFETY: all-zero is a valid rdma_addrinfo.
        let mut h: rdma_addrinfo = unsafe { core::mem::zeroed() };
        h.ai_flags = flags;
        h.ai_port_space = port_space as c_int;
        h
    }

    fn first(rai: *mut rdma_addrinfo) -> &'static rdma_addrinfo {
        // SAFETY: lookup returned a live list.
        unsafe { &*rai }
    }

    #[test]
    fn passive_numeric_lookup_fills_the_source() {
        let h = hints(RAI_PASSIVE | RAI_NUMERICHOST, ps::TCP);
        let rai = lookup(c"127.0.0.1".as_ptr(), c"7471".as_ptr(), &h).unwrap();
        let r = first(rai);
        assert_eq!(r.ai_flags, RAI_PASSIVE);
        assert_eq!(r.ai_family, libc::AF_INET);
        assert_eq!(r.ai_port_space, ps::TCP as c_int);
        assert_eq!(r.ai_qp_type, IBV_QPT_RC);
        assert!(r.ai_dst_addr.is_null());
        // SAFETY: the source address holds an IPv4 sockaddr.
        let a = unsafe { super::super::addr::read(r.ai_src_addr) }.unwrap();
        assert_eq!(a, "127.0.0.1:7471".parse::<SocketAddr>().unwrap());
        rdma_freeaddrinfo(rai);
    }

    #[test]
    fn active_lookup_fills_the_destination_and_keeps_the_hinted_source() {
        let mut h = hints(RAI_NUMERICHOST, ps::UDP);
        let src = super::super::addr::storage(&"[::1]:0".parse().unwrap());
        h.ai_src_addr = &src.0 as *const _ as *mut sockaddr;
        h.ai_src_len = src.1;
        let rai = lookup(c"::1".as_ptr(), c"20079".as_ptr(), &h).unwrap();
        let r = first(rai);
        assert_eq!(r.ai_flags, 0);
        assert_eq!(r.ai_family, libc::AF_INET6);
        assert_eq!(r.ai_qp_type, IBV_QPT_UD);
        assert_eq!(r.ai_src_len, src.1);
        // SAFETY: both addresses hold IPv6 sockaddrs.
        let d = unsafe { super::super::addr::read(r.ai_dst_addr) }.unwrap();
        assert_eq!(d, "[::1]:20079".parse::<SocketAddr>().unwrap());
        rdma_freeaddrinfo(rai);
    }

    #[test]
    fn bad_names_return_the_resolver_code_and_nothing_is_an_error() {
        let h = hints(RAI_NUMERICHOST, ps::TCP);
        let r = lookup(c"not-an-address".as_ptr(), core::ptr::null(), &h);
        assert_eq!(r.err(), Some(Failure::Resolver(libc::EAI_NONAME)));
        let r = lookup(core::ptr::null(), core::ptr::null(), core::ptr::null());
        assert_eq!(r.err(), Some(Failure::Errno(Errno::EINVAL)));
    }

    #[test]
    fn hints_alone_are_copied() {
        let mut h = hints(0, ps::TCP);
        let dst = super::super::addr::storage(&"10.1.2.3:99".parse().unwrap());
        h.ai_dst_addr = &dst.0 as *const _ as *mut sockaddr;
        h.ai_dst_len = dst.1;
        h.ai_qp_type = IBV_QPT_RC;
        let rai = lookup(core::ptr::null(), core::ptr::null(), &h).unwrap();
        let r = first(rai);
        assert_eq!(r.ai_port_space, ps::TCP as c_int);
        assert_eq!(r.ai_dst_len, dst.1);
        rdma_freeaddrinfo(rai);
    }
}

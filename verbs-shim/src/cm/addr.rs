//! Socket addresses between C (`struct sockaddr*`) and the protocol (`SocketAddr`).
use crate::ffi::{Errno, VResult};
use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t, AF_INET, AF_INET6};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// `ucma_addrlen`: the size of an IPv4 or IPv6 address, 0 for anything else (AF_IB is
/// not supported, as on a kernel without AF_IB support).
///
/// # Safety
/// `addr` is NULL or points to at least a `sa_family_t`.
pub unsafe fn addrlen(addr: *const sockaddr) -> usize {
    // SAFETY: the caller's contract.
    match unsafe { addr.as_ref() }.map(|a| c_int_of(a.sa_family)) {
        Some(AF_INET) => core::mem::size_of::<sockaddr_in>(),
        Some(AF_INET6) => core::mem::size_of::<sockaddr_in6>(),
        _ => 0,
    }
}

fn c_int_of(f: libc::sa_family_t) -> core::ffi::c_int {
    core::ffi::c_int::from(f)
}

/// Reads an IPv4/IPv6 address; EINVAL for NULL or another family.
///
/// # Safety
/// `addr` is NULL or points to a socket address of its family's full size.
pub unsafe fn read(addr: *const sockaddr) -> VResult<SocketAddr> {
    // SAFETY: the caller's contract: NULL or a sockaddr of the size its family implies.
    unsafe {
        match addr.as_ref().map(|a| c_int_of(a.sa_family)) {
            Some(AF_INET) => {
                let a = &*(addr as *const sockaddr_in);
                Ok(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                )))
            }
            Some(AF_INET6) => {
                let a = &*(addr as *const sockaddr_in6);
                Ok(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    u32::from_be(a.sin6_flowinfo),
                    a.sin6_scope_id,
                )))
            }
            _ => Err(Errno::EINVAL),
        }
    }
}

/// A `sockaddr_storage` holding `a` (zeroed elsewhere), and the length of the family's
/// address.
pub fn storage(a: &SocketAddr) -> (sockaddr_storage, socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
    let mut s: sockaddr_storage = unsafe { core::mem::zeroed() };
    let len = write(&mut s, a);
    (s, len)
}

/// Overwrites `dst` with `a` (the rest zeroed); returns the address length.
pub fn write(dst: &mut sockaddr_storage, a: &SocketAddr) -> socklen_t {
    // SAFETY: all-zero is a valid sockaddr_storage.
    *dst = unsafe { core::mem::zeroed() };
    let p = dst as *mut sockaddr_storage;
    match a {
        SocketAddr::V4(v4) => {
            let sin = sockaddr_in {
                sin_family: AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and as aligned as sockaddr_in.
            unsafe { (p as *mut sockaddr_in).write(sin) };
            core::mem::size_of::<sockaddr_in>() as socklen_t
        }
        SocketAddr::V6(v6) => {
            let sin6 = sockaddr_in6 {
                sin6_family: AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and as aligned as sockaddr_in6.
            unsafe { (p as *mut sockaddr_in6).write(sin6) };
            core::mem::size_of::<sockaddr_in6>() as socklen_t
        }
    }
}

/// The port of an address as stored (network order), 0 for other families
/// (`ucma_get_port`).
pub fn port_be(s: &sockaddr_storage) -> u16 {
    let p = s as *const sockaddr_storage;
    match c_int_of(s.ss_family) {
        // SAFETY: the family says which view of the storage is valid.
        AF_INET => unsafe { (*(p as *const sockaddr_in)).sin_port },
        // SAFETY: as above.
        AF_INET6 => unsafe { (*(p as *const sockaddr_in6)).sin6_port },
        _ => 0,
    }
}

/// The address in `s`, if it holds one (family set).
pub fn from_storage(s: &sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: sockaddr_storage is large enough for every family `read` accepts.
    unsafe { read(s as *const sockaddr_storage as *const sockaddr) }.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_and_ipv6_round_trip_through_storage() {
        for text in ["10.0.0.1:7471", "[fe80::1%3]:20079", "[::ffff:127.0.0.1]:1"] {
            let a: SocketAddr = text.parse().unwrap();
            let (s, len) = storage(&a);
            assert_eq!(from_storage(&s), Some(a));
            assert_eq!(u16::from_be(port_be(&s)), a.port());
            let expect = if a.is_ipv4() { 16 } else { 28 };
            assert_eq!(len as usize, expect);
            // SAFETY: s is a live sockaddr_storage.
            assert_eq!(
                unsafe { addrlen(&s as *const _ as *const sockaddr) },
                expect
            );
        }
    }

    #[test]
    fn other_families_have_no_length_and_no_port() {
        // SAFETY: all-zero is a valid sockaddr_storage (AF_UNSPEC).
        let s: sockaddr_storage = unsafe { core::mem::zeroed() };
        // SAFETY: s is live.
        assert_eq!(unsafe { addrlen(&s as *const _ as *const sockaddr) }, 0);
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { addrlen(core::ptr::null()) }, 0);
        assert_eq!(port_be(&s), 0);
        assert_eq!(from_storage(&s), None);
    }
}

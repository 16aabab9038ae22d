//! The socket calls `std` does not offer the TCP backend: a nonblocking connect from a
//! chosen source address, whether a port is free for one, `TCP_MAXSEG`, and an epoll set whose interest (input, output)
//! changes per descriptor.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `addr` as a `sockaddr_storage` and its length.
fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// A nonblocking TCP socket of `addr`'s family with SO_REUSEADDR, bound to `addr`.
///
/// The RDMA CM picks the source port: an earlier connection from it may still be in
/// TIME_WAIT (a restarted daemon, a reconnect), which without SO_REUSEADDR makes the bind
/// fail with EADDRINUSE although the new connection's 4-tuple is free. (The kernel's siw
/// marks its sockets reusable the same way.)
fn bound_socket(addr: SocketAddr) -> io::Result<OwnedFd> {
    let owned = unbound_socket(&addr)?;
    crate::daemon::sys::setsockopt_int(owned.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    bind(&owned, &addr)?;
    Ok(owned)
}

fn bind(fd: &OwnedFd, addr: &SocketAddr) -> io::Result<()> {
    let (ss, len) = sockaddr(addr);
    // SAFETY: `ss` is a valid sockaddr of `len` octets for the duration of the call.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &ss as *const _ as *const libc::sockaddr,
            len,
        )
    })
    .map(drop)
}

/// A nonblocking TCP socket of `addr`'s family.
fn unbound_socket(addr: &SocketAddr) -> io::Result<OwnedFd> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain syscall; the descriptor is owned at once below.
    let fd = cvt(unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A TCP socket bound to `addr` and nothing more, holding the port for a connection
/// that does not go through the kernel (`local.rs`); the address bound. A chosen port is
/// bound with SO_REUSEADDR, as [`connect_nonblocking`] binds it; port 0 gets an
/// ephemeral port no kernel connect will share.
pub fn reserve_port(addr: SocketAddr) -> io::Result<(OwnedFd, SocketAddr)> {
    if addr.port() != 0 {
        return bound_socket(addr).and_then(named);
    }
    let fd = unbound_socket(&addr)?;
    bind(&fd, &addr)?;
    named(fd)
}

/// `fd` with the address it is bound to.
fn named(fd: OwnedFd) -> io::Result<(OwnedFd, SocketAddr)> {
    let l = std::net::TcpListener::from(fd);
    let local = l.local_addr()?;
    Ok((OwnedFd::from(l), local))
}

/// Whether [`connect_nonblocking`] could bind a connection to port `port` of the
/// wildcard address of `family_of`'s family: false when the kernel has a socket on that
/// port that does not let it be shared (a listener, or a connection of a program that
/// did not set SO_REUSEADDR, TIME_WAIT included). An error other than EADDRINUSE (no
/// IPv6, say) is not the port's fault and answers true.
pub fn tcp_port_free(family_of: std::net::IpAddr, port: u16) -> bool {
    let any: std::net::IpAddr = match family_of {
        std::net::IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        std::net::IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    !matches!(
        bound_socket(SocketAddr::new(any, port)),
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE)
    )
}

/// A nonblocking TCP socket bound to `src` (port 0: any) connecting to `dst`. The
/// boolean is true when the connection is already up (loopback may finish at once);
/// otherwise it completes when the socket turns writable (`take_error` tells how).
pub fn connect_nonblocking(src: SocketAddr, dst: SocketAddr) -> io::Result<(TcpStream, bool)> {
    let owned = bound_socket(src)?;
    let fd = owned.as_raw_fd();
    let (ss, len) = sockaddr(&dst);
    // SAFETY: `ss` is a valid sockaddr of `len` octets for the duration of the call.
    let r = unsafe { libc::connect(fd, &ss as *const _ as *const libc::sockaddr, len) };
    let now = if r == 0 {
        true
    } else {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
        false
    };
    Ok((TcpStream::from(owned), now))
}

/// The socket's `TCP_MAXSEG` (the path's MSS), or `fallback` when it cannot be read.
pub fn mss(fd: RawFd, fallback: u32) -> u32 {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            &mut v as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if r == 0 && v > 0 {
        v as u32
    } else {
        fallback
    }
}

/// An epoll set (level-triggered) with per-descriptor input/output interest.
#[derive(Debug)]
pub struct Poller {
    fd: OwnedFd,
}

/// What a ready descriptor reported.
#[derive(Debug, Clone, Copy)]
pub struct Ready {
    pub token: u64,
    pub input: bool,
    pub output: bool,
    /// Error or hang-up.
    pub hup: bool,
}

impl Poller {
    pub fn new() -> io::Result<Poller> {
        // SAFETY: plain syscall; the descriptor is owned at once.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(Poller {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn ctl(
        &self,
        op: libc::c_int,
        fd: RawFd,
        token: u64,
        input: bool,
        output: bool,
    ) -> io::Result<()> {
        let mut events = 0u32;
        if input {
            events |= (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
        }
        if output {
            events |= libc::EPOLLOUT as u32;
        }
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) }).map(|_| ())
    }

    pub fn add(&self, fd: RawFd, token: u64, input: bool, output: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, input, output)
    }

    pub fn modify(&self, fd: RawFd, token: u64, input: bool, output: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, input, output)
    }

    pub fn remove(&self, fd: RawFd) {
        // Failure (already closed) is harmless.
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0, false, false);
    }

    /// The ready descriptors, without waiting.
    pub fn poll(&self, out: &mut Vec<Ready>) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        out.clear();
        // SAFETY: `events` has room for 64 entries, as passed.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                0,
            )
        };
        if n <= 0 {
            return;
        }
        out.extend(events[..n as usize].iter().map(|e| {
            let ev = e.events;
            Ready {
                token: e.u64,
                input: ev & (libc::EPOLLIN | libc::EPOLLRDHUP) as u32 != 0,
                output: ev & libc::EPOLLOUT as u32 != 0,
                hup: ev & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0,
            }
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    #[test]
    fn a_port_another_program_holds_is_not_free() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = listener.local_addr().unwrap();
        let any = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
        assert!(!tcp_port_free(any, at.port()), "a listener's port");
        // std's connect sets no SO_REUSEADDR, as perftest's exchange sockets do not.
        let client = TcpStream::connect(at).unwrap();
        let from = client.local_addr().unwrap().port();
        assert!(
            !tcp_port_free(any, from),
            "an unshareable connection's port"
        );
        // One of ours, with SO_REUSEADDR, leaves its port shareable.
        let src = SocketAddr::new(any, 0);
        let ours = connect_up(src, at);
        assert!(tcp_port_free(any, ours.local_addr().unwrap().port()));
    }

    /// Connects from `src` to `to` and waits until the connection is up.
    fn connect_up(src: SocketAddr, to: SocketAddr) -> TcpStream {
        let (s, up) = connect_nonblocking(src, to).expect("connect");
        if !up {
            let start = Instant::now();
            while s.peer_addr().is_err() {
                assert!(start.elapsed() < Duration::from_secs(5), "connect hangs");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert!(s.take_error().unwrap().is_none());
        s
    }

    #[test]
    fn a_source_port_in_time_wait_can_be_bound_again() {
        let first = TcpListener::bind("127.0.0.1:0").unwrap();
        let second = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = connect_up("127.0.0.1:0".parse().unwrap(), first.local_addr().unwrap());
        let src = client.local_addr().unwrap();
        let (mut served, _) = first.accept().unwrap();
        // The client closes first: its end of the connection goes to TIME_WAIT.
        drop(client);
        let mut rest = Vec::new();
        served.read_to_end(&mut rest).unwrap();
        drop(served);
        // Same source port, another peer: a free 4-tuple, so it must connect.
        let again = connect_up(src, second.local_addr().unwrap());
        assert_eq!(again.local_addr().unwrap(), src);
    }
}

//! The kernel UDP backend for RoCE v2: one unconnected socket per local address of the
//! device, on UDP port 4791 (IBA Annex A17.2.1), with DF set so that Linux sends IP ID 0
//! (which the ICRC is computed over).

use super::sys;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

/// The RoCE v2 UDP destination port.
pub const ROCE_V2_PORT: u16 = 4791;

/// One bound socket.
#[derive(Debug)]
pub struct BoundSocket {
    pub socket: UdpSocket,
    pub local: SocketAddr,
}

/// The sockets of one device.
#[derive(Debug, Default)]
pub struct UdpBackend {
    pub sockets: Vec<BoundSocket>,
}

impl UdpBackend {
    /// Binds `addr:port` for each address. IPv6 link-local addresses are scoped to
    /// `ifindex`. Fails if any address cannot be bound (another daemon or rxe owns it).
    pub fn bind(addrs: &[IpAddr], port: u16, ifindex: u32) -> io::Result<UdpBackend> {
        let mut sockets = Vec::new();
        for &ip in addrs {
            let local = match ip {
                IpAddr::V4(_) => SocketAddr::new(ip, port),
                IpAddr::V6(v6) => {
                    let scope = if v6.segments()[0] & 0xffc0 == 0xfe80 {
                        ifindex
                    } else {
                        0
                    };
                    SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope))
                }
            };
            let socket = UdpSocket::bind(local)
                .map_err(|e| io::Error::new(e.kind(), format!("bind UDP {local}: {e}")))?;
            socket.set_nonblocking(true)?;
            let fd = socket.as_raw_fd();
            match ip {
                IpAddr::V4(_) => sys::setsockopt_int(
                    fd,
                    libc::IPPROTO_IP,
                    libc::IP_MTU_DISCOVER,
                    libc::IP_PMTUDISC_DO,
                )?,
                IpAddr::V6(_) => sys::setsockopt_int(
                    fd,
                    libc::IPPROTO_IPV6,
                    libc::IPV6_MTU_DISCOVER,
                    libc::IPV6_PMTUDISC_DO,
                )?,
            }
            // Bigger buffers absorb bursts of a window of packets; failure is not fatal.
            let _ = sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
            let _ = sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
            let local = socket.local_addr()?;
            sockets.push(BoundSocket { socket, local });
        }
        Ok(UdpBackend { sockets })
    }

    pub fn fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.sockets.iter().map(|s| s.socket.as_raw_fd())
    }

    /// Receives one datagram on socket `i`: (length, source, local destination).
    pub fn recv(
        &self,
        i: usize,
        buf: &mut [u8],
    ) -> io::Result<Option<(usize, SocketAddr, SocketAddr)>> {
        let Some(s) = self.sockets.get(i) else {
            return Ok(None);
        };
        match s.socket.recv_from(buf) {
            Ok((n, src)) => Ok(Some((n, src, s.local))),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Sends from the socket bound to `src`'s address (any socket of the family if none).
    pub fn send(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> io::Result<()> {
        let same_ip = |s: &&BoundSocket| s.local.ip() == src.ip();
        let same_family = |s: &&BoundSocket| s.local.is_ipv4() == dst.is_ipv4();
        let sock = self
            .sockets
            .iter()
            .find(same_ip)
            .or_else(|| self.sockets.iter().find(same_family))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!("no socket for {src}"),
                )
            })?;
        let dst = match (dst, sock.local) {
            (SocketAddr::V6(d), SocketAddr::V6(l))
                if d.scope_id() == 0 && d.ip().segments()[0] & 0xffc0 == 0xfe80 =>
            {
                SocketAddr::V6(SocketAddrV6::new(*d.ip(), d.port(), 0, l.scope_id()))
            }
            _ => dst,
        };
        match sock.socket.send_to(payload, dst) {
            Ok(_) => Ok(()),
            // A full socket buffer is a lost packet on a real wire: the transport retries.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(e),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_sockets_exchange_datagrams_with_addresses() {
        let a: IpAddr = "127.0.0.77".parse().unwrap();
        let b = UdpBackend::bind(&[a], 0, 1).unwrap();
        let local = b.sockets[0].local;
        b.send(local, local, b"hello").unwrap();
        let mut buf = [0u8; 64];
        let mut got = None;
        for _ in 0..1000 {
            got = b.recv(0, &mut buf).unwrap();
            if got.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let (n, src, dst) = got.expect("datagram arrives");
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(src, local);
        assert_eq!(dst, local);
    }
}

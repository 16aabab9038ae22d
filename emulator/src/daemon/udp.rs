//! The kernel UDP backend for RoCE v2: one unconnected socket per local address of the
//! device, on UDP port 4791 (IBA Annex A17.2.1), with DF set so that Linux sends IP ID 0
//! (which the ICRC is computed over).

use super::{mmsg, sys};
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
    /// Sockets bound to the IP multicast groups the device joined (socket indices from
    /// [`super::mcast::MCAST_BASE`] on).
    pub mcast: super::mcast::McastSockets,
}

impl UdpBackend {
    /// Binds `addr:port` for each address. IPv6 link-local addresses are scoped to
    /// `ifindex`. An address the kernel does not offer (yet: IPv6 duplicate address
    /// detection) is left out; one already bound by another daemon or rxe is an error.
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
            let socket = match UdpSocket::bind(local) {
                Ok(s) => s,
                // A tentative (DAD) or vanishing address: serve the others.
                Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
                    tracing::warn!(%local, "address not available, left out of the GID table");
                    continue;
                }
                Err(e) => return Err(io::Error::new(e.kind(), format!("bind UDP {local}: {e}"))),
            };
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
            // UD multicast leaves through the device's interface and loops back to local
            // listeners; an interface without multicast only fails multicast sends.
            let _ = sys::mcast_sender(fd, ip.is_ipv6(), ifindex, super::mcast::MCAST_TTL);
            let local = socket.local_addr()?;
            sockets.push(BoundSocket { socket, local });
        }
        if sockets.is_empty() && !addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                "no address could be bound",
            ));
        }
        Ok(UdpBackend {
            sockets,
            mcast: Default::default(),
        })
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

    /// Receives a batch of datagrams on socket `i` (recvmmsg); returns how many arrived
    /// and the local address they arrived on.
    pub fn recv_batch(
        &self,
        i: usize,
        batch: &mut mmsg::RecvBatch,
    ) -> io::Result<(usize, SocketAddr)> {
        let Some(s) = self.sockets.get(i).or_else(|| self.mcast.get(i)) else {
            return Ok((0, SocketAddr::from(([0, 0, 0, 0], 0))));
        };
        Ok((mmsg::recv_batch(s.socket.as_raw_fd(), batch)?, s.local))
    }

    /// The socket packets from `src` to `dst` leave from: the one bound to `src`'s
    /// address, else any of `dst`'s family.
    pub fn socket_for(&self, src: SocketAddr, dst: SocketAddr) -> Option<usize> {
        self.sockets
            .iter()
            .position(|s| s.local.ip() == src.ip())
            .or_else(|| {
                self.sockets
                    .iter()
                    .position(|s| s.local.is_ipv4() == dst.is_ipv4())
            })
    }

    /// `dst` with the socket's scope when it is an unscoped IPv6 link-local address.
    fn scoped(&self, i: usize, dst: SocketAddr) -> SocketAddr {
        match (dst, self.sockets.get(i).map(|s| s.local)) {
            (SocketAddr::V6(d), Some(SocketAddr::V6(l)))
                if d.scope_id() == 0 && d.ip().segments()[0] & 0xffc0 == 0xfe80 =>
            {
                SocketAddr::V6(SocketAddrV6::new(*d.ip(), d.port(), 0, l.scope_id()))
            }
            _ => dst,
        }
    }

    /// Sends one datagram from the socket for `src`.
    pub fn send(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> io::Result<()> {
        let i = self.socket_for(src, dst).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("no socket for {src}"),
            )
        })?;
        self.sockets[i]
            .socket
            .send_to(payload, self.scoped(i, dst))
            .map(|_| ())
    }

    /// Sends datagrams from socket `i` with sendmmsg; returns how many went out.
    pub fn send_batch(&self, i: usize, msgs: &mut [(SocketAddr, &[u8])]) -> io::Result<usize> {
        let Some(s) = self.sockets.get(i) else {
            return Ok(0);
        };
        for m in msgs.iter_mut() {
            m.0 = self.scoped(i, m.0);
        }
        mmsg::send_batch(s.socket.as_raw_fd(), msgs)
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

#[cfg(test)]
mod batch_tests {
    use super::*;

    #[test]
    fn batches_of_datagrams_go_out_and_come_back_in_order() {
        let a: IpAddr = "127.0.0.78".parse().unwrap();
        let b = UdpBackend::bind(&[a], 0, 1).unwrap();
        let local = b.sockets[0].local;
        let payloads: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 100 + usize::from(i)]).collect();
        let mut msgs: Vec<(SocketAddr, &[u8])> = payloads.iter().map(|p| (local, &p[..])).collect();
        assert_eq!(b.send_batch(0, &mut msgs).unwrap(), 10);
        let mut batch = mmsg::RecvBatch::new(16, 2048);
        let mut got = Vec::new();
        for _ in 0..1000 {
            let (n, dst) = b.recv_batch(0, &mut batch).unwrap();
            assert!(n == 0 || dst == local);
            for i in 0..n {
                got.push((
                    batch.srcs[i],
                    batch.bufs[i][..batch.lens[i].unwrap()].to_vec(),
                ));
            }
            if got.len() == 10 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got.len(), 10);
        for (i, (src, data)) in got.iter().enumerate() {
            assert_eq!(*src, Some(local));
            assert_eq!(data, &payloads[i]);
        }
    }
}

//! The TCP a siw device's connections run over, behind one small interface
//! ([`StreamNet`], the stream trait of DESIGN decision 5, beside the datagram links'
//! `link::datagram::DatagramLink`), so that the connection handling of `tcp.rs` (MPA exchange, feeding
//! `iwarp::Connection`, lingering closes, stall timeouts) serves every backend:
//!
//! - [`KernelNet`]: the kernel's TCP (`backend tcp`), nonblocking sockets in an epoll set
//!   of their own;
//! - `smol::SmolNet`: smoltcp on an AF_PACKET socket (`backend smoltcp`).
//!
//! Sockets are named by the ids `tcp.rs` allocates (a connection's [`ConnId`] value, a
//! listener's key), and readiness comes back as [`Ready`] with a token made of a kind
//! ([`TOKEN_LISTENER`], [`TOKEN_CONN`]) and that id. Readiness is level-triggered: a
//! socket is reported on every pass while it has what its interest asks for.
//!
//! [`ConnId`]: super::cm::ConnId

use super::sock::{self, Poller};
use crate::daemon::devices::nic::Errno;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

pub use super::sock::Ready;

pub const TOKEN_LISTENER: u64 = 1 << 32;
pub const TOKEN_CONN: u64 = 2 << 32;
pub const TOKEN_KIND: u64 = !0xffff_ffff;

/// The MSS assumed when the real one cannot be learnt (Ethernet, IPv4, no options).
pub const DEFAULT_MSS: u32 = 1460;

/// A connection taken from a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// The segment size FPDUs are cut to (RFC 5044 §4.1).
    pub mss: u32,
}

/// The TCP of a siw device. Reads and writes follow `std::io`: `Ok(0)` from `read` is
/// the peer's FIN (or a reset), `ErrorKind::WouldBlock` means "not now".
pub trait StreamNet: std::fmt::Debug + Send {
    /// The descriptor the engine watches; readable when [`StreamNet::poll`] has work.
    fn fd(&self) -> RawFd;
    /// Moves the network on (`readable`: the engine saw [`StreamNet::fd`] ready) and
    /// leaves in `out` the sockets that are ready for what their interest asks.
    fn poll(&mut self, now: Instant, readable: bool, out: &mut Vec<Ready>);
    /// Sends what the sockets queued since the last poll. Whether anything left.
    fn transmit(&mut self, _now: Instant) -> bool {
        false
    }
    /// When [`StreamNet::poll`] must run again although nothing arrives.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// Counters of this TCP beyond the device's (`rdma-emu stat`).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Listens on `local` (port 0: an ephemeral port) under `id`; the bound address.
    fn listen(&mut self, id: u32, local: SocketAddr) -> Result<SocketAddr, Errno>;
    /// Whether listener `id`'s new connections are reported (a closed listener lingers,
    /// still completing handshakes, unwatched).
    fn watch_listener(&mut self, id: u32, on: bool);
    fn close_listener(&mut self, id: u32);
    /// The next connection listener `listener` completed, registered as `id` (interest:
    /// input). `None`: no more now.
    fn accept(&mut self, listener: u32, id: u32) -> Option<Accepted>;
    /// Opens connection `id` from `src` (port 0: an ephemeral one) to `dst`; the local
    /// address. It reports output (or hang-up) once up or failed: then
    /// [`StreamNet::connected`] tells which.
    fn connect(&mut self, id: u32, src: SocketAddr, dst: SocketAddr) -> Result<SocketAddr, Errno>;
    /// How a connect ended: the MSS, or the errno (ECONNREFUSED, ETIMEDOUT...).
    fn connected(&mut self, id: u32) -> Result<u32, Errno>;
    fn read(&mut self, id: u32, buf: &mut [u8]) -> io::Result<usize>;
    fn write(&mut self, id: u32, buf: &[u8]) -> io::Result<usize>;
    /// Sends a FIN after what was written.
    fn shutdown_write(&mut self, id: u32);
    /// Forgets connection `id`.
    fn close(&mut self, id: u32);
    /// What connection `id` is to be reported for. Whether that took effect.
    fn set_interest(&mut self, id: u32, input: bool, output: bool) -> bool;
}

pub fn errno_of(e: &io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The kernel's TCP (`backend tcp`).
#[derive(Debug)]
pub struct KernelNet {
    poller: Poller,
    conns: HashMap<u32, TcpStream>,
    listeners: HashMap<u32, TcpListener>,
}

impl KernelNet {
    pub fn new() -> io::Result<KernelNet> {
        Ok(KernelNet {
            poller: Poller::new()?,
            conns: HashMap::new(),
            listeners: HashMap::new(),
        })
    }
}

impl StreamNet for KernelNet {
    fn fd(&self) -> RawFd {
        self.poller.raw()
    }

    fn poll(&mut self, _now: Instant, readable: bool, out: &mut Vec<Ready>) {
        out.clear();
        if readable {
            self.poller.poll(out);
        }
    }

    fn listen(&mut self, id: u32, local: SocketAddr) -> Result<SocketAddr, Errno> {
        let sock = TcpListener::bind(local).map_err(|e| errno_of(&e))?;
        sock.set_nonblocking(true).map_err(|e| errno_of(&e))?;
        let bound = sock.local_addr().map_err(|e| errno_of(&e))?;
        self.listeners.insert(id, sock);
        self.watch_listener(id, true);
        Ok(bound)
    }

    fn watch_listener(&mut self, id: u32, on: bool) {
        let Some(l) = self.listeners.get(&id) else {
            return;
        };
        if on {
            let token = TOKEN_LISTENER | u64::from(id);
            if let Err(e) = self.poller.add(l.as_raw_fd(), token, true, false) {
                tracing::debug!(listener = id, error = %e, "siw: listener not watched");
            }
        } else {
            self.poller.remove(l.as_raw_fd());
        }
    }

    fn close_listener(&mut self, id: u32) {
        if let Some(l) = self.listeners.remove(&id) {
            self.poller.remove(l.as_raw_fd());
        }
    }

    fn accept(&mut self, listener: u32, id: u32) -> Option<Accepted> {
        let l = self.listeners.get(&listener)?;
        loop {
            let (sock, peer) = match l.accept() {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) => {
                    tracing::debug!(listener, error = %e, "siw: accept failed");
                    return None;
                }
            };
            if sock.set_nonblocking(true).is_err() {
                continue;
            }
            let _ = sock.set_nodelay(true);
            let Ok(local) = sock.local_addr() else {
                continue;
            };
            if self
                .poller
                .add(sock.as_raw_fd(), TOKEN_CONN | u64::from(id), true, false)
                .is_err()
            {
                continue;
            }
            let mss = sock::mss(sock.as_raw_fd(), DEFAULT_MSS);
            self.conns.insert(id, sock);
            return Some(Accepted { local, peer, mss });
        }
    }

    fn connect(&mut self, id: u32, src: SocketAddr, dst: SocketAddr) -> Result<SocketAddr, Errno> {
        let (sock, _up) = sock::connect_nonblocking(src, dst).map_err(|e| errno_of(&e))?;
        let local = sock.local_addr().map_err(|e| errno_of(&e))?;
        // Writable once connected (or failed): loopback may already be up.
        self.poller
            .add(sock.as_raw_fd(), TOKEN_CONN | u64::from(id), false, true)
            .map_err(|e| errno_of(&e))?;
        self.conns.insert(id, sock);
        Ok(local)
    }

    fn connected(&mut self, id: u32) -> Result<u32, Errno> {
        let sock = self.conns.get(&id).ok_or(libc::ENOENT)?;
        let err = match sock.take_error() {
            Ok(None) => match sock.peer_addr() {
                Ok(_) => None,
                Err(e) => Some(errno_of(&e)),
            },
            Ok(Some(e)) | Err(e) => Some(errno_of(&e)),
        };
        match err {
            // ENOTCONN from peer_addr: refused before SO_ERROR was read.
            Some(libc::ENOTCONN) => Err(libc::ECONNREFUSED),
            Some(errno) => Err(errno),
            None => {
                let _ = sock.set_nodelay(true);
                Ok(sock::mss(sock.as_raw_fd(), DEFAULT_MSS))
            }
        }
    }

    fn read(&mut self, id: u32, buf: &mut [u8]) -> io::Result<usize> {
        let mut sock = self.conns.get(&id).ok_or(io::ErrorKind::NotConnected)?;
        sock.read(buf)
    }

    fn write(&mut self, id: u32, buf: &[u8]) -> io::Result<usize> {
        let mut sock = self.conns.get(&id).ok_or(io::ErrorKind::NotConnected)?;
        sock.write(buf)
    }

    fn shutdown_write(&mut self, id: u32) {
        if let Some(sock) = self.conns.get(&id) {
            let _ = sock.shutdown(Shutdown::Write);
        }
    }

    fn close(&mut self, id: u32) {
        if let Some(sock) = self.conns.remove(&id) {
            self.poller.remove(sock.as_raw_fd());
        }
    }

    fn set_interest(&mut self, id: u32, input: bool, output: bool) -> bool {
        let Some(sock) = self.conns.get(&id) else {
            return false;
        };
        self.poller
            .modify(sock.as_raw_fd(), TOKEN_CONN | u64::from(id), input, output)
            .is_ok()
    }
}

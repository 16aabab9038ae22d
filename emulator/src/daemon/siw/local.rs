//! The local path of a siw device's TCP: a connection whose two ends the device serves
//! itself (a connect to an address and port one of its own listeners holds) runs over a
//! pair of in-memory pipes instead of the kernel's loopback TCP.
//!
//! [`LocalNet`] wraps the device's [`StreamNet`] (a wrapper, not a branch in each
//! backend): everything else goes to the wrapped TCP. The MPA exchange, the FPDUs and the
//! closes are the same octets in the same order as over the kernel. What is skipped is the
//! kernel itself: a `send` and a `recv` per hop, the loopback softirq inside the `send`,
//! and the epoll report between them. The port a local connection is said to come from is
//! bound in the kernel for as long as the connection lives, so no other socket takes it.
//!
//! The RDMA CM asks for it per connection with the daemon's `local_path` option (on by
//! default, as for RoCE's local path); off, every connection goes through the kernel,
//! where `tcpdump` on `lo` sees it.
//!
//! Semantics kept from TCP: bytes arrive in order and whole; a connect completes before
//! it is accepted and the listener's backlog holds it (up to [`BACKLOG`], past which
//! connects go to the kernel); a closed listener resets what its backlog held; a write
//! blocks once [`PIPE_CAP`] octets wait unread (output readiness reports room again);
//! `shutdown_write` and `close` end the peer's stream after what was written (`read`
//! answers `Ok(0)`), and writing to a closed peer fails with EPIPE.

use super::net::{Accepted, Ready, StreamNet, TOKEN_CONN, TOKEN_LISTENER};
use super::sock;
use crate::daemon::devices::nic::Errno;
use emu_core::U32Map;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{OwnedFd, RawFd};
use std::time::Instant;

/// Octets one direction holds unread before a write blocks, the order of a loopback
/// TCP socket's autotuned buffers.
pub const PIPE_CAP: usize = 4 << 20;

/// Connections a listener holds before they are accepted (`somaxconn`'s default).
pub const BACKLOG: usize = 4096;

/// The MSS of a local connection: loopback's 65536-octet MTU less the IPv4 and TCP
/// headers and TCP's timestamp option. FPDUs are cut to it (MPA clamps the MULPDU to
/// 65532).
pub const LOCAL_MSS: u32 = 65_536 - 20 - 20 - 12;

/// A pipe's buffer is given back once it is empty and larger than this.
const KEEP_CAPACITY: usize = 1 << 20;

/// Where an end is kept: under the id [`StreamNet`] names it by, or (a connection in a
/// listener's backlog, not accepted yet) under a number of the backlog's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Id(u32),
    Pending(u32),
}

/// One direction: the octets written and not read yet, `buf[at..]`.
#[derive(Debug, Default)]
struct Pipe {
    buf: Vec<u8>,
    at: usize,
    /// The writer shut down or closed: after the unread octets, end of stream.
    shut: bool,
}

impl Pipe {
    fn unread(&self) -> usize {
        self.buf.len() - self.at
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.shut {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let room = PIPE_CAP.saturating_sub(self.unread());
        if room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if self.at > 0 && self.at >= self.buf.len() / 2 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        let n = room.min(data.len());
        self.buf.extend_from_slice(&data[..n]);
        Ok(n)
    }

    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.unread().min(out.len());
        if n == 0 {
            return if self.shut || out.is_empty() {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        if self.at == self.buf.len() {
            self.at = 0;
            if self.buf.capacity() > KEEP_CAPACITY {
                self.buf = Vec::new();
            } else {
                self.buf.clear();
            }
        }
        Ok(n)
    }
}

/// One end of a local connection.
#[derive(Debug)]
struct End {
    /// What the other end wrote to this one.
    rx: Pipe,
    /// The other end; `None` once it closed.
    peer: Option<Key>,
    /// (input, output), as [`StreamNet::set_interest`] set it.
    interest: (bool, bool),
    local: SocketAddr,
    remote: SocketAddr,
    /// The connecting end's port, bound in the kernel while the connection lives.
    port: Option<OwnedFd>,
}

impl End {
    /// An end from `local` to `remote` joined to `peer`, with no interest yet.
    fn new(peer: Key, local: SocketAddr, remote: SocketAddr) -> End {
        End {
            rx: Pipe::default(),
            peer: Some(peer),
            interest: (false, false),
            local,
            remote,
            port: None,
        }
    }
}

#[derive(Debug)]
struct Listener {
    local: SocketAddr,
    watched: bool,
    /// Connections made and not accepted yet (in [`LocalNet::pending`]).
    backlog: VecDeque<u32>,
}

/// Counters of the local path (`rdma-emu stat`).
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    connections: u64,
    bytes: u64,
}

/// A siw device's TCP with the local path in front of it.
#[derive(Debug)]
pub struct LocalNet {
    inner: Box<dyn StreamNet>,
    /// The device's addresses: a wildcard listener serves connects to these.
    addrs: Vec<IpAddr>,
    listeners: U32Map<Listener>,
    /// The ends named by [`StreamNet`] ids.
    ends: U32Map<End>,
    /// The accepting ends of connections in a backlog.
    pending: U32Map<End>,
    next_pending: u32,
    /// A local end was written to, shut or closed since [`LocalNet::take_moved`].
    moved: bool,
    counters: Counters,
}

impl LocalNet {
    pub fn new(inner: Box<dyn StreamNet>, addrs: &[IpAddr]) -> LocalNet {
        LocalNet {
            inner,
            addrs: addrs.to_vec(),
            listeners: U32Map::default(),
            ends: U32Map::default(),
            pending: U32Map::default(),
            next_pending: 0,
            moved: false,
            counters: Counters::default(),
        }
    }

    /// Opens connection `id` from `src` to `dst` over the local path when one of this
    /// device's listeners holds `dst` (see [`StreamNet::connect`]); `None` when none does
    /// or its backlog is full, and the connect is the wrapped TCP's to make.
    pub fn connect_local(
        &mut self,
        id: u32,
        src: SocketAddr,
        dst: SocketAddr,
    ) -> Option<Result<SocketAddr, Errno>> {
        let addrs = &self.addrs;
        let serves = |l: &Listener| {
            l.local.port() == dst.port()
                && l.local.is_ipv4() == dst.is_ipv4()
                && (l.local.ip() == dst.ip()
                    || (l.local.ip().is_unspecified() && addrs.contains(&dst.ip())))
        };
        let (&lid, l) = self.listeners.iter().find(|(_, l)| serves(l))?;
        if l.backlog.len() >= BACKLOG {
            return None;
        }
        // The source address the kernel would pick for a local destination is the
        // destination itself.
        let ip = if src.ip().is_unspecified() {
            dst.ip()
        } else {
            src.ip()
        };
        let mut from = dst;
        from.set_ip(ip);
        from.set_port(src.port());
        let (port, local) = match sock::reserve_port(from) {
            Ok(got) => got,
            Err(e) => return Some(Err(super::net::errno_of(&e))),
        };
        let pending = self.next_pending;
        self.next_pending = self.next_pending.wrapping_add(1);
        // The connecting end reports output (connected) at once, as a connect to a
        // listening loopback port completes into its backlog.
        let mut connecting = End::new(Key::Pending(pending), local, dst);
        connecting.interest = (false, true);
        connecting.port = Some(port);
        self.ends.insert(id, connecting);
        self.pending
            .insert(pending, End::new(Key::Id(id), dst, local));
        if let Some(l) = self.listeners.get_mut(&lid) {
            l.backlog.push_back(pending);
        }
        self.counters.connections += 1;
        Some(Ok(local))
    }

    /// Whether a local end's readiness may have changed (octets written, a stream
    /// ended) since the last call: the caller can serve the other end in the same pass
    /// instead of the next one.
    pub fn take_moved(&mut self) -> bool {
        std::mem::take(&mut self.moved)
    }

    fn end(&self, key: Key) -> Option<&End> {
        match key {
            Key::Id(id) => self.ends.get(&id),
            Key::Pending(n) => self.pending.get(&n),
        }
    }

    fn end_mut(&mut self, key: Key) -> Option<&mut End> {
        match key {
            Key::Id(id) => self.ends.get_mut(&id),
            Key::Pending(n) => self.pending.get_mut(&n),
        }
    }

    /// The other end of `id`, if `id` is a local connection (`Some(None)`: its peer
    /// closed).
    fn peer_of(&mut self, id: u32) -> Option<Option<&mut End>> {
        let peer = self.ends.get(&id)?.peer;
        Some(peer.and_then(|p| self.end_mut(p)))
    }

    /// Forgets end `key`: its peer's stream ends after what it holds, and the peer's
    /// writes fail from now on.
    fn close_end(&mut self, key: Key) {
        let end = match key {
            Key::Id(id) => self.ends.remove(&id),
            Key::Pending(n) => self.pending.remove(&n),
        };
        let Some(end) = end else {
            return;
        };
        if let Some(p) = end.peer.and_then(|p| self.end_mut(p)) {
            p.peer = None;
            p.rx.shut = true;
            self.moved = true;
        }
    }

    fn readiness(&self, id: u32, end: &End) -> Option<Ready> {
        let peer = end.peer.and_then(|p| self.end(p));
        let input = end.interest.0 && (end.rx.unread() > 0 || end.rx.shut);
        let output = end.interest.1 && peer.is_none_or(|p| p.rx.unread() < PIPE_CAP);
        // Both directions over: the kernel reports a hang-up whatever the interest.
        let hup = peer.is_none() && end.rx.shut;
        (input || output || hup).then_some(Ready {
            token: TOKEN_CONN | u64::from(id),
            input,
            output,
            hup,
        })
    }
}

impl StreamNet for LocalNet {
    fn fd(&self) -> RawFd {
        self.inner.fd()
    }

    fn poll(&mut self, now: Instant, readable: bool, out: &mut Vec<Ready>) {
        self.inner.poll(now, readable, out);
        for (&id, l) in &self.listeners {
            let token = TOKEN_LISTENER | u64::from(id);
            if l.watched && !l.backlog.is_empty() && !out.iter().any(|r| r.token == token) {
                out.push(Ready {
                    token,
                    input: true,
                    output: false,
                    hup: false,
                });
            }
        }
        for (&id, end) in &self.ends {
            out.extend(self.readiness(id, end));
        }
    }

    fn transmit(&mut self, now: Instant) -> bool {
        self.inner.transmit(now)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = self.inner.counters();
        c.push(("tcp_local_connections", self.counters.connections));
        c.push(("tcp_local_bytes", self.counters.bytes));
        c
    }

    fn listen(&mut self, id: u32, local: SocketAddr) -> Result<SocketAddr, Errno> {
        let bound = self.inner.listen(id, local)?;
        self.listeners.insert(
            id,
            Listener {
                local: bound,
                watched: true,
                backlog: VecDeque::new(),
            },
        );
        Ok(bound)
    }

    fn watch_listener(&mut self, id: u32, on: bool) {
        self.inner.watch_listener(id, on);
        if let Some(l) = self.listeners.get_mut(&id) {
            l.watched = on;
        }
    }

    fn close_listener(&mut self, id: u32) {
        self.inner.close_listener(id);
        if let Some(l) = self.listeners.remove(&id) {
            for n in l.backlog {
                self.close_end(Key::Pending(n));
            }
        }
    }

    fn accept(&mut self, listener: u32, id: u32) -> Option<Accepted> {
        let pending = self
            .listeners
            .get_mut(&listener)
            .and_then(|l| l.backlog.pop_front());
        let Some(pending) = pending else {
            return self.inner.accept(listener, id);
        };
        let mut end = self.pending.remove(&pending)?;
        if let Some(p) = end.peer.and_then(|p| self.end_mut(p)) {
            p.peer = Some(Key::Id(id));
        }
        end.interest = (true, false);
        let accepted = Accepted {
            local: end.local,
            peer: end.remote,
            mss: LOCAL_MSS,
        };
        self.ends.insert(id, end);
        Some(accepted)
    }

    fn connect(&mut self, id: u32, src: SocketAddr, dst: SocketAddr) -> Result<SocketAddr, Errno> {
        self.inner.connect(id, src, dst)
    }

    fn connected(&mut self, id: u32) -> Result<u32, Errno> {
        if self.ends.contains_key(&id) {
            // Made when it was asked for: the backlog held it (a reset since shows as
            // the end of the stream).
            return Ok(LOCAL_MSS);
        }
        self.inner.connected(id)
    }

    fn read(&mut self, id: u32, buf: &mut [u8]) -> io::Result<usize> {
        match self.ends.get_mut(&id) {
            Some(end) => end.rx.read(buf),
            None => self.inner.read(id, buf),
        }
    }

    fn write(&mut self, id: u32, buf: &[u8]) -> io::Result<usize> {
        let Some(peer) = self.peer_of(id) else {
            return self.inner.write(id, buf);
        };
        let n = peer.ok_or(io::ErrorKind::BrokenPipe)?.rx.write(buf)?;
        self.counters.bytes += n as u64;
        self.moved = true;
        Ok(n)
    }

    fn shutdown_write(&mut self, id: u32) {
        let Some(peer) = self.peer_of(id) else {
            return self.inner.shutdown_write(id);
        };
        if let Some(p) = peer {
            p.rx.shut = true;
            self.moved = true;
        }
    }

    fn close(&mut self, id: u32) {
        if self.ends.contains_key(&id) {
            self.close_end(Key::Id(id));
        } else {
            self.inner.close(id);
        }
    }

    fn set_interest(&mut self, id: u32, input: bool, output: bool) -> bool {
        match self.ends.get_mut(&id) {
            Some(end) => {
                end.interest = (input, output);
                true
            }
            None => self.inner.set_interest(id, input, output),
        }
    }
}

#[cfg(test)]
#[path = "local_tests.rs"]
mod tests;

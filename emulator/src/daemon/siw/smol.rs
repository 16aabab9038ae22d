//! The smoltcp backend of siw devices (`link add … backend smoltcp`): the device's TCP
//! is smoltcp's, on an AF_PACKET socket of the interface ([`RawLink`]), so an iWARP
//! device runs entirely outside the kernel's TCP stack.
//!
//! The device owns IP addresses the kernel does not have (`addr` / `addrs`; a device
//! refuses to open when one of them is also on the kernel's interface, which would
//! answer our peers' SYNs with RST). smoltcp answers ARP and neighbour solicitations
//! for them with the interface's MAC, and every destination is taken to be on the link
//! (prefix 0: no gateway). Only the frames of those addresses leave the kernel's view
//! for ours (`link.rs`); the kernel sees them pass on the interface and drops them as
//! not its own (no RST, no ICMP).
//!
//! smoltcp keeps no accept queue: a listener keeps [`LISTEN_POOL`] sockets in LISTEN,
//! hands out those whose handshake completed and opens new ones. Every socket has
//! [`SOCKET_BUFFER`] octets of buffer each way (window scaling follows from it); the
//! device holds at most [`MAX_SOCKETS`] sockets and [`MAX_LISTENERS`] listeners, so
//! what a peer can make it allocate is bounded. Closed sockets stay until their FIN
//! exchange ends or [`CLOSE_LINGER`] passes.

use super::link::RawLink;
use super::net::{Accepted, Ready, StreamNet, DEFAULT_MSS, TOKEN_CONN, TOKEN_LISTENER};
use crate::daemon::devices::nic::Errno;
use smoltcp::iface::{Config, Interface, PollResult, SocketHandle, SocketSet};
use smoltcp::socket::tcp::{self, State};
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, IpEndpoint, IpListenEndpoint};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// Buffer of every socket, each direction.
pub const SOCKET_BUFFER: usize = 1 << 20;
/// Sockets (connections, closing ones, listening ones) per device.
pub const MAX_SOCKETS: usize = 256;
/// Listeners per device.
pub const MAX_LISTENERS: usize = 8;
/// Sockets kept in LISTEN per listener: the handshakes that may be under way at once (a
/// SYN beyond them is answered with RST, as by a full accept queue with
/// `tcp_abort_on_overflow`). Their buffers are allocated but not touched until used.
pub const LISTEN_POOL: usize = 16;
/// How long a closed connection's socket may take to finish its FIN exchange.
pub const CLOSE_LINGER: Duration = Duration::from_secs(10);
/// A connection attempt (or a handshake a listener's socket answered) gives up after
/// this long without an answer (ETIMEDOUT).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// An established connection gives up after this long without hearing from its peer
/// while it has data the peer has not acknowledged: RFC 9293 §3.8.3's R2 ("at least
/// 100 seconds"). A connection with nothing to send waits for its peer forever, as the
/// kernel's does (no keep-alive): how long an application takes between two messages
/// is not the network's business.
const DATA_TIMEOUT: Duration = Duration::from_secs(100);
/// Egress passes per poll: up to this many segments per socket leave at once (a 1 MiB
/// window is about 720 segments of 1460 octets).
const EGRESS_PASSES: usize = 1024;
/// Ephemeral ports of connections whose source port is 0 (the kernel's default range).
const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;

#[derive(Debug)]
struct SmolConn {
    handle: SocketHandle,
    interest: (bool, bool),
    /// A connect's start (its failure is ECONNREFUSED before [`CONNECT_TIMEOUT`], else
    /// ETIMEDOUT).
    connecting_since: Option<Instant>,
}

#[derive(Debug)]
struct SmolListener {
    local: SocketAddr,
    pool: Vec<SocketHandle>,
    watched: bool,
}

/// smoltcp on the device's link.
pub struct SmolNet {
    link: RawLink,
    iface: Interface,
    sockets: SocketSet<'static>,
    epoch: Instant,
    addrs: Vec<IpAddr>,
    ifindex: u32,
    /// The largest MSS our MTU allows, IPv4 and IPv6.
    own_mss: (u32, u32),
    conns: HashMap<u32, SmolConn>,
    listeners: HashMap<u32, SmolListener>,
    closing: Vec<(Instant, SocketHandle)>,
    next_port: u16,
    deadline: Option<Instant>,
}

impl std::fmt::Debug for SmolNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmolNet")
            .field("addrs", &self.addrs)
            .field("conns", &self.conns.len())
            .field("listeners", &self.listeners.len())
            .field("link", &self.link.counters)
            .finish()
    }
}

fn ip_of(a: IpAddress) -> IpAddr {
    match a {
        IpAddress::Ipv4(v4) => IpAddr::V4(v4),
        IpAddress::Ipv6(v6) => IpAddr::V6(v6),
    }
}

impl SmolNet {
    /// smoltcp on interface `ifindex` (`mac`, IP `mtu`) serving `addrs`, which the
    /// caller checked (`siw::smoltcp_addrs`).
    pub fn open(
        netdev: &str,
        ifindex: u32,
        mac: [u8; 6],
        mtu: u32,
        addrs: &[IpAddr],
        seed: u64,
    ) -> io::Result<SmolNet> {
        let mut link = RawLink::open(netdev, ifindex, mtu, addrs)?;
        let mut config = Config::new(EthernetAddress(mac).into());
        config.random_seed = seed;
        let epoch = Instant::now();
        let mut iface = Interface::new(config, &mut link, smoltcp::time::Instant::ZERO);
        iface.update_ip_addrs(|ips| {
            for a in addrs {
                // Every destination on the link: no route through a gateway.
                let _ = ips.push(IpCidr::new(IpAddress::from(*a), 0));
            }
        });
        Ok(SmolNet {
            link,
            iface,
            sockets: SocketSet::new(Vec::new()),
            epoch,
            addrs: addrs.to_vec(),
            ifindex,
            own_mss: (mtu.saturating_sub(40), mtu.saturating_sub(60)),
            conns: HashMap::new(),
            listeners: HashMap::new(),
            closing: Vec::new(),
            next_port: *EPHEMERAL.start(),
            deadline: None,
        })
    }

    fn stamp(&self, now: Instant) -> smoltcp::time::Instant {
        let us = now.saturating_duration_since(self.epoch).as_micros();
        smoltcp::time::Instant::from_micros(i64::try_from(us).unwrap_or(i64::MAX))
    }

    fn socket(&self, h: SocketHandle) -> &tcp::Socket<'static> {
        self.sockets.get::<tcp::Socket>(h)
    }

    fn socket_mut(&mut self, h: SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(h)
    }

    /// The socket of connection `id`.
    fn conn_socket(&mut self, id: u32) -> io::Result<&mut tcp::Socket<'static>> {
        let h = self
            .conns
            .get(&id)
            .ok_or(io::ErrorKind::NotConnected)?
            .handle;
        Ok(self.socket_mut(h))
    }

    /// A new socket, or ENOBUFS past [`MAX_SOCKETS`].
    fn new_socket(&mut self) -> Result<SocketHandle, Errno> {
        if self.sockets.iter().count() >= MAX_SOCKETS {
            return Err(libc::ENOBUFS);
        }
        let mut s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0u8; SOCKET_BUFFER]),
            tcp::SocketBuffer::new(vec![0u8; SOCKET_BUFFER]),
        );
        s.set_nagle_enabled(false);
        arm_timeout(&mut s);
        Ok(self.sockets.add(s))
    }

    /// A socket address as the kernel reports it (link-local peers scoped).
    fn socket_addr(&self, e: IpEndpoint) -> SocketAddr {
        match ip_of(e.addr) {
            IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => {
                SocketAddr::V6(SocketAddrV6::new(v6, e.port, 0, self.ifindex))
            }
            ip => SocketAddr::new(ip, e.port),
        }
    }

    /// The MSS FPDUs are cut to on connection `h`: the peer's SYN option, within what
    /// our MTU allows.
    fn mss_of(&self, h: SocketHandle) -> u32 {
        let s = self.socket(h);
        let (Some(local), Some(peer)) = (s.local_endpoint(), s.remote_endpoint()) else {
            return DEFAULT_MSS;
        };
        let own = match peer.addr {
            IpAddress::Ipv4(_) => self.own_mss.0,
            IpAddress::Ipv6(_) => self.own_mss.1,
        };
        let peer = self.socket_addr(peer);
        // RFC 9293 §3.7.1: no option means 536 (IPv4) / 1220 (IPv6).
        let theirs = self
            .link
            .peer_mss(local.port, peer)
            .map_or(if peer.is_ipv4() { 536 } else { 1220 }, u32::from);
        own.min(theirs).max(64)
    }

    fn port_in_use(&self, port: u16) -> bool {
        self.listeners.values().any(|l| l.local.port() == port)
            || self
                .sockets
                .iter()
                .filter_map(|(_, s)| match s {
                    smoltcp::socket::Socket::Tcp(t) => t.local_endpoint(),
                    #[allow(unreachable_patterns)]
                    _ => None,
                })
                .any(|e| e.port == port)
    }

    fn ephemeral_port(&mut self) -> Result<u16, Errno> {
        let span = usize::from(EPHEMERAL.end() - EPHEMERAL.start()) + 1;
        for _ in 0..span {
            let p = self.next_port;
            self.next_port = if p >= *EPHEMERAL.end() {
                *EPHEMERAL.start()
            } else {
                p + 1
            };
            if !self.port_in_use(p) {
                return Ok(p);
            }
        }
        Err(libc::EADDRNOTAVAIL)
    }

    /// Whether `ip` is one of ours (or the wildcard).
    fn serves(&self, ip: IpAddr) -> bool {
        ip.is_unspecified() || self.addrs.contains(&ip)
    }

    /// Keeps every listener's pool full of LISTEN sockets, as room allows, after dropping
    /// those whose handshake failed (reset, or timed out: a SYN flood leaves nothing).
    fn refill_pools(&mut self) {
        let ids: Vec<u32> = self.listeners.keys().copied().collect();
        for id in ids {
            let Some(mut pool) = self
                .listeners
                .get_mut(&id)
                .map(|l| std::mem::take(&mut l.pool))
            else {
                continue;
            };
            pool.retain(|h| {
                let dead = self.socket(*h).state() == State::Closed;
                if dead {
                    self.sockets.remove(*h);
                }
                !dead
            });
            if let Some(l) = self.listeners.get_mut(&id) {
                l.pool = pool;
            }
            let (local, listening) = {
                let l = &self.listeners[&id];
                let n = l
                    .pool
                    .iter()
                    .filter(|h| self.socket(**h).state() == State::Listen)
                    .count();
                (l.local, n)
            };
            for _ in listening..LISTEN_POOL {
                let Ok(h) = self.new_socket() else {
                    return;
                };
                let ep = IpListenEndpoint {
                    addr: (!local.ip().is_unspecified()).then(|| IpAddress::from(local.ip())),
                    port: local.port(),
                };
                if self.socket_mut(h).listen(ep).is_err() {
                    self.sockets.remove(h);
                    return;
                }
                if let Some(l) = self.listeners.get_mut(&id) {
                    l.pool.push(h);
                }
            }
        }
    }

    /// Forgets closing sockets whose exchange ended; aborts those past their time.
    fn reap_closing(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.closing.len() {
            let (until, h) = self.closing[i];
            let state = self.socket(h).state();
            if matches!(state, State::Closed | State::TimeWait) {
                self.sockets.remove(h);
                self.closing.swap_remove(i);
                continue;
            }
            if until <= now {
                // RST on the next poll; the socket goes once it is out.
                self.socket_mut(h).abort();
            }
            i += 1;
        }
    }

    /// Every socket's give-up timeout for its state now ([`arm_timeout`]).
    fn arm_timeouts(&mut self) {
        for (_, socket) in self.sockets.iter_mut() {
            if let smoltcp::socket::Socket::Tcp(s) = socket {
                arm_timeout(s);
            }
        }
    }

    /// Lets the sockets send what they have: smoltcp emits at most one segment per
    /// socket per egress pass, so passes are repeated while any socket sent, up to
    /// [`EGRESS_PASSES`].
    fn egress(&mut self, now: Instant) {
        let stamp = self.stamp(now);
        for _ in 0..EGRESS_PASSES {
            let r = self
                .iface
                .poll_egress(stamp, &mut self.link, &mut self.sockets);
            if r == PollResult::None {
                break;
            }
        }
    }

    fn update_deadline(&mut self, now: Instant) {
        let stamp = self.stamp(now);
        let at = self
            .iface
            .poll_at(stamp, &self.sockets)
            .map(|t| self.epoch + Duration::from_micros(t.total_micros().max(0) as u64));
        let closing = self.closing.iter().map(|(t, _)| *t).min();
        self.deadline = match (at, closing) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// Gives socket `s` the give-up timeout its state calls for: [`CONNECT_TIMEOUT`] while a
/// handshake is under way, [`DATA_TIMEOUT`] while sent data (or a FIN) waits for its
/// acknowledgement, none otherwise. smoltcp's own timeout counts from the last segment
/// received whatever the socket holds, so a connection idle for that long (perftest's
/// exchange connection while a long run goes on) would be aborted: it is set here
/// before every pass that may check it. Going from nothing to send to something restarts
/// smoltcp's count (`send_slice` on an empty buffer), so a long idle time never counts.
fn arm_timeout(s: &mut tcp::Socket<'_>) {
    let timeout = match s.state() {
        State::SynSent | State::SynReceived => Some(CONNECT_TIMEOUT),
        State::Established | State::CloseWait if s.send_queue() > 0 => Some(DATA_TIMEOUT),
        State::FinWait1 | State::Closing | State::LastAck => Some(DATA_TIMEOUT),
        _ => None,
    };
    if s.timeout() != timeout.map(Into::into) {
        s.set_timeout(timeout.map(Into::into));
    }
}

/// Whether a handshake is still under way.
fn opening(state: State) -> bool {
    matches!(state, State::SynSent | State::SynReceived | State::Listen)
}

impl StreamNet for SmolNet {
    fn fd(&self) -> RawFd {
        self.link.fd()
    }

    fn poll(&mut self, now: Instant, readable: bool, out: &mut Vec<Ready>) {
        out.clear();
        // Frames arrived, or a timer (retransmission, delayed ACK, a closing socket) is
        // due: smoltcp runs. Otherwise only the sockets' state is looked at (the engine
        // calls this every pass; the link's socket is level-triggered in its epoll).
        if readable || self.deadline.is_some_and(|t| t <= now) {
            let stamp = self.stamp(now);
            self.arm_timeouts();
            self.link.refill();
            self.iface.poll(stamp, &mut self.link, &mut self.sockets);
            self.egress(now);
            self.link.flush();
            self.reap_closing(now);
            self.refill_pools();
        }
        for (&id, c) in &self.conns {
            let s = self.socket(c.handle);
            let state = s.state();
            let input = c.interest.0 && !opening(state) && (s.can_recv() || !s.may_recv());
            let output = c.interest.1
                && match state {
                    State::SynSent | State::SynReceived | State::Listen => false,
                    State::Closed => true,
                    _ => s.can_send() || !s.may_send(),
                };
            let hup = state == State::Closed;
            if input || output || hup {
                out.push(Ready {
                    token: TOKEN_CONN | u64::from(id),
                    input,
                    output,
                    hup,
                });
            }
        }
        for (&id, l) in &self.listeners {
            let done = l.pool.iter().any(|h| {
                let st = self.socket(*h).state();
                !opening(st) && st != State::Closed
            });
            if l.watched && done {
                out.push(Ready {
                    token: TOKEN_LISTENER | u64::from(id),
                    input: true,
                    output: false,
                    hup: false,
                });
            }
        }
        self.update_deadline(now);
    }

    fn transmit(&mut self, now: Instant) -> bool {
        self.arm_timeouts();
        self.egress(now);
        let sent = self.link.flush();
        self.update_deadline(now);
        sent
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.link.counters;
        vec![
            ("smoltcp_rx_frames", c.rx_frames),
            ("smoltcp_tx_frames", c.tx_frames),
            ("smoltcp_rx_bad_checksum", c.rx_bad_checksum),
            ("smoltcp_rx_truncated", c.rx_truncated),
            ("smoltcp_tx_errors", c.tx_errors),
            ("smoltcp_sockets", self.sockets.iter().count() as u64),
        ]
    }

    fn listen(&mut self, id: u32, local: SocketAddr) -> Result<SocketAddr, Errno> {
        if !self.serves(local.ip()) {
            return Err(libc::EADDRNOTAVAIL);
        }
        if self.listeners.len() >= MAX_LISTENERS {
            return Err(libc::ENOBUFS);
        }
        let port = match local.port() {
            0 => self.ephemeral_port()?,
            p => {
                let taken = self.listeners.values().any(|l| {
                    l.local.port() == p
                        && (l.local.ip() == local.ip()
                            || l.local.ip().is_unspecified()
                            || local.ip().is_unspecified())
                });
                if taken {
                    return Err(libc::EADDRINUSE);
                }
                p
            }
        };
        let mut bound = local;
        bound.set_port(port);
        self.listeners.insert(
            id,
            SmolListener {
                local: bound,
                pool: Vec::new(),
                watched: true,
            },
        );
        self.refill_pools();
        if self.listeners.get(&id).is_none_or(|l| l.pool.is_empty()) {
            self.listeners.remove(&id);
            return Err(libc::ENOBUFS);
        }
        Ok(bound)
    }

    fn watch_listener(&mut self, id: u32, on: bool) {
        if let Some(l) = self.listeners.get_mut(&id) {
            l.watched = on;
        }
    }

    fn close_listener(&mut self, id: u32) {
        if let Some(l) = self.listeners.remove(&id) {
            for h in l.pool {
                // A handshake half done is reset; a LISTEN socket just goes.
                self.socket_mut(h).abort();
                self.closing.push((Instant::now(), h));
            }
        }
    }

    fn accept(&mut self, listener: u32, id: u32) -> Option<Accepted> {
        let l = self.listeners.get(&listener)?;
        let at = l.pool.iter().position(|h| {
            let st = self.socket(*h).state();
            !opening(st) && st != State::Closed
        })?;
        let h = self.listeners.get_mut(&listener)?.pool.swap_remove(at);
        let s = self.socket(h);
        let (Some(local), Some(peer)) = (s.local_endpoint(), s.remote_endpoint()) else {
            self.sockets.remove(h);
            return None;
        };
        let mss = self.mss_of(h);
        self.conns.insert(
            id,
            SmolConn {
                handle: h,
                interest: (true, false),
                connecting_since: None,
            },
        );
        self.refill_pools();
        Some(Accepted {
            local: self.socket_addr(local),
            peer: self.socket_addr(peer),
            mss,
        })
    }

    fn connect(&mut self, id: u32, src: SocketAddr, dst: SocketAddr) -> Result<SocketAddr, Errno> {
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(libc::EAFNOSUPPORT);
        }
        let src_ip = if src.ip().is_unspecified() {
            *self
                .addrs
                .iter()
                .find(|a| a.is_ipv4() == dst.is_ipv4())
                .ok_or(libc::EADDRNOTAVAIL)?
        } else if self.addrs.contains(&src.ip()) {
            src.ip()
        } else {
            return Err(libc::EADDRNOTAVAIL);
        };
        let port = match src.port() {
            0 => self.ephemeral_port()?,
            p => p,
        };
        let h = self.new_socket()?;
        let local = IpEndpoint::new(IpAddress::from(src_ip), port);
        let remote = IpEndpoint::new(IpAddress::from(dst.ip()), dst.port());
        let cx = self.iface.context();
        if let Err(e) = self
            .sockets
            .get_mut::<tcp::Socket>(h)
            .connect(cx, remote, local)
        {
            tracing::debug!(error = %e, %dst, "siw smoltcp: connect refused");
            self.sockets.remove(h);
            return Err(libc::EINVAL);
        }
        self.conns.insert(
            id,
            SmolConn {
                handle: h,
                interest: (false, true),
                connecting_since: Some(Instant::now()),
            },
        );
        Ok(SocketAddr::new(src_ip, port))
    }

    fn connected(&mut self, id: u32) -> Result<u32, Errno> {
        let c = self.conns.get(&id).ok_or(libc::ENOENT)?;
        match self.socket(c.handle).state() {
            State::Closed | State::TimeWait => {
                let late = c
                    .connecting_since
                    .is_some_and(|t| t.elapsed() >= CONNECT_TIMEOUT);
                Err(if late {
                    libc::ETIMEDOUT
                } else {
                    libc::ECONNREFUSED
                })
            }
            st if opening(st) => Err(libc::EINPROGRESS),
            _ => Ok(self.mss_of(c.handle)),
        }
    }

    fn read(&mut self, id: u32, buf: &mut [u8]) -> io::Result<usize> {
        let s = self.conn_socket(id)?;
        match s.recv_slice(buf) {
            Ok(0) if s.may_recv() => Err(io::ErrorKind::WouldBlock.into()),
            Ok(n) => Ok(n),
            // FIN received and everything read, or the connection is gone.
            Err(_) => Ok(0),
        }
    }

    fn write(&mut self, id: u32, buf: &[u8]) -> io::Result<usize> {
        let s = self.conn_socket(id)?;
        if !s.may_send() {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        match s.send_slice(buf) {
            Ok(0) if !buf.is_empty() => Err(io::ErrorKind::WouldBlock.into()),
            Ok(n) => Ok(n),
            Err(_) => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    fn shutdown_write(&mut self, id: u32) {
        if let Some(c) = self.conns.get(&id) {
            let h = c.handle;
            self.socket_mut(h).close();
        }
    }

    fn close(&mut self, id: u32) {
        let Some(c) = self.conns.remove(&id) else {
            return;
        };
        let s = self.socket_mut(c.handle);
        if s.state() == State::Closed {
            self.sockets.remove(c.handle);
            return;
        }
        // As the kernel does: a FIN after what is queued (a connection still opening,
        // or one with input nobody will read, is reset).
        if opening(s.state()) || s.recv_queue() > 0 {
            s.abort();
        } else {
            s.close();
        }
        self.closing.push((Instant::now() + CLOSE_LINGER, c.handle));
    }

    fn set_interest(&mut self, id: u32, input: bool, output: bool) -> bool {
        match self.conns.get_mut(&id) {
            Some(c) => {
                c.interest = (input, output);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
#[path = "smol_tests.rs"]
mod tests;

//! The kernel UDP backend for RoCE v2 ([`KernelLink`], a [`DatagramLink`]), and the
//! device's link ([`UdpBackend`]: its 4791 sockets and the backend it runs on): one unconnected socket per local address of the
//! device, on UDP port 4791 (IBA Annex A17.2.1), with DF set so that Linux sends IP ID 0
//! (which the ICRC is computed over).
//!
//! RoCE v2 source port entropy: the core hashes each QP pair's UDP source port into
//! 0xC000..=0xFFFF (`emu_core`'s `DeviceConfig::udp_src_port = None`) and computes the ICRC
//! over that port, so a packet must leave from a socket bound to exactly that port. The
//! send sockets are therefore derived from the core's output, not from a second copy of its
//! hash: the first packet with a new (address, port) binds a send-only socket on it
//! (`ensure_sender`), later ones reuse it; at most [`MAX_SENDERS`] per device. A send
//! socket no packet left from for [`SENDER_IDLE`] is closed, so the descriptors held follow
//! the QP pairs in use, not every pair there ever was; the next packet on its port binds it
//! again. Receiving stays on 4791.
//!
//! GSO and GRO (DESIGN decision 5): a RoCE message is a run of equal-size packets to one
//! destination, and such a run leaves as one GSO super-datagram (`UDP_SEGMENT`, `mmsg.rs`);
//! the 4791 sockets receive with `UDP_GRO`, and a coalesced datagram is split into its
//! packets before the core. Both are detected when the device binds (a kernel without them
//! refuses the socket option) and switched off for the device, logged once and counted,
//! when the kernel refuses a GSO send; `RDMA_EMU_UDP_OFFLOAD=0` switches both off.
//!
//! The 4791 sockets sit at the index of their address in the device's GID table
//! (`gid_table.rs`), and keep it while the address stays: a socket's index is part of its
//! epoll token, and the table's indices are stable, so an address coming or going opens or
//! closes its own socket and touches no other.

use super::backend::Backend;
use super::capture::{Capture, Captured};
use super::datagram::{
    self, BoundSocket, Caps, DatagramLink, McastSockets, Ports, SenderKey, Sock, MCAST_TTL,
    NOWHERE, ROCE_V2_PORT,
};
use super::mmsg::{self, Outgoing, RecvBatch, ECN_ECT0};
use super::packet::{self, PacketLink};
use super::xdp::{Mode, XdpLink};
use crate::daemon::sys;
use std::cell::Cell;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// Send-only sockets a device binds for hashed source ports, at most: every port the
/// core's hash yields (0xC000..=0xFFFF). A packet whose port could not be bound leaves
/// from 4791 and fails its ICRC at the peer (which covers the UDP source port), so a
/// smaller cap broke every QP pair past it (`ib_write_bw -q 1000`: retry exceeded).
pub const MAX_SENDERS: usize = 0x4000;

/// A send socket no packet left from for this long is closed. Long against any
/// retransmission timer (the longest, ACK timeout 31, is 8.8 ks only in theory; perftest's
/// 14 is 67 ms), so a QP pair that still talks keeps its socket; an idle one gives its
/// descriptor back and binds the port again on its next packet.
pub const SENDER_IDLE: Duration = Duration::from_secs(60);

/// How often idle send sockets are looked for.
const SENDER_SWEEP: Duration = Duration::from_secs(5);

/// A send-only socket on a hashed source port, and when a packet last left from it.
#[derive(Debug)]
struct Sender {
    bound: BoundSocket,
    used: Instant,
}

/// What GSO and GRO did on a device (`rdma-emu stat`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OffloadCounters {
    /// GSO super-datagrams sent (two packets or more each), and the packets in them.
    pub gso_datagrams: u64,
    pub gso_packets: u64,
    /// Coalesced datagrams received (GRO, two packets or more each), and the packets in them.
    pub gro_datagrams: u64,
    pub gro_packets: u64,
    /// GSO sends the kernel refused (then GSO is off for the device and the packets go one
    /// datagram each).
    pub gso_refused: u64,
    /// Send sockets closed after [`SENDER_IDLE`] without a packet.
    pub senders_closed: u64,
}

/// Whether the environment switches GSO and GRO off (`RDMA_EMU_UDP_OFFLOAD=0`).
fn offload_wanted() -> bool {
    std::env::var("RDMA_EMU_UDP_OFFLOAD").map_or(true, |v| v != "0")
}

/// Sets UDP socket option `name` (`UDP_GRO` on, or `UDP_SEGMENT` 0 as a probe); false,
/// logged, when the kernel has no such option: the device then goes one datagram per packet.
fn udp_offload(fd: RawFd, name: libc::c_int, value: libc::c_int, what: &str) -> bool {
    sys::setsockopt_int(fd, libc::SOL_UDP, name, value)
        .map_err(|e| tracing::info!("UDP {what} not available ({e}): one datagram per packet"))
        .is_ok()
}

/// Turns GRO on for a receiving socket; false when the kernel has none.
fn enable_gro(fd: RawFd) -> bool {
    udp_offload(fd, libc::UDP_GRO, 1, "GRO")
}

/// Whether the kernel does GSO on a UDP socket (`UDP_SEGMENT`, Linux 4.18+).
fn gso_available(fd: RawFd) -> bool {
    udp_offload(fd, libc::UDP_SEGMENT, 0, "GSO")
}

/// `ip:port`, scoped to `ifindex` when `ip` is IPv6 link-local.
fn scoped_local(ip: IpAddr, port: u16, ifindex: u32) -> SocketAddr {
    match ip {
        IpAddr::V4(_) => SocketAddr::new(ip, port),
        IpAddr::V6(v6) => {
            let scope = if v6.segments()[0] & 0xffc0 == 0xfe80 {
                ifindex
            } else {
                0
            };
            SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope))
        }
    }
}

/// A nonblocking UDP socket on `local` with DF set (so IP ID 0) and large buffers; UD
/// multicast it sends leaves through interface `ifindex` and loops back to local
/// listeners (an interface without multicast only fails multicast sends).
fn open_socket(local: SocketAddr, ifindex: u32) -> io::Result<BoundSocket> {
    let socket = UdpSocket::bind(local)?;
    socket.set_nonblocking(true)?;
    let fd = socket.as_raw_fd();
    match local {
        SocketAddr::V4(_) => sys::setsockopt_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?,
        SocketAddr::V6(_) => sys::setsockopt_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )?,
    }
    // RoCE v2 packets leave ECN-capable (ECT(0)), and the IP ECN field of every received
    // one is reported (the notification point answers Congestion Experienced with a CNP).
    // Failure is not fatal: without it, congestion is simply not seen.
    let (level, tos, recv) = match local {
        SocketAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_TOS, libc::IP_RECVTOS),
        SocketAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_TCLASS, libc::IPV6_RECVTCLASS),
    };
    let _ = sys::setsockopt_int(fd, level, tos, i32::from(ECN_ECT0));
    let _ = sys::setsockopt_int(fd, level, recv, 1);
    // Bigger buffers absorb bursts of a window of packets; failure is not fatal.
    let _ = sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
    let _ = sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
    let _ = sys::mcast_sender(fd, local.is_ipv6(), ifindex, MCAST_TTL);
    let local = socket.local_addr()?;
    Ok(BoundSocket { socket, local })
}

/// The kernel UDP link (`backend udp`): the 4791 sockets receive (with GRO) and send, and
/// send-only sockets on the source ports the core hashed send the rest (with GSO).
#[derive(Debug, Default)]
pub struct KernelLink {
    /// Send-only sockets on the source ports the core hashed.
    senders: HashMap<SenderKey, Sender>,
    /// When idle send sockets are next looked for.
    next_sweep: Option<Instant>,
    ifindex: u32,
    /// Whether runs of packets leave as GSO super-datagrams, and whether the 4791 sockets
    /// receive with GRO.
    gso: Cell<bool>,
    gro: bool,
    offload: Cell<OffloadCounters>,
}

impl KernelLink {
    fn count(&self, f: impl FnOnce(&mut OffloadCounters)) {
        let mut c = self.offload.get();
        f(&mut c);
        self.offload.set(c);
    }

    /// Closes the send sockets no packet left from for [`SENDER_IDLE`], at most once every
    /// [`SENDER_SWEEP`].
    fn close_idle_senders(&mut self, now: Instant) {
        if self.next_sweep.is_some_and(|t| now < t) {
            return;
        }
        self.next_sweep = Some(now + SENDER_SWEEP);
        let before = self.senders.len();
        self.senders
            .retain(|_, s| now.saturating_duration_since(s.used) < SENDER_IDLE);
        let closed = before - self.senders.len();
        if closed > 0 {
            tracing::debug!(
                closed,
                open = self.senders.len(),
                "idle send sockets closed"
            );
            self.count(|c| c.senders_closed += closed as u64);
        }
    }

    fn get<'a>(&'a self, ports: &'a Ports, i: Sock) -> Option<&'a BoundSocket> {
        match i {
            Sock::Slot(i) | Sock::Frames(i, _) => datagram::port(ports, i),
            Sock::Sender(k) => self.senders.get(&k).map(|s| &s.bound),
        }
    }

    /// `dst` with the socket's scope when it is an unscoped IPv6 link-local address.
    fn scoped(local: SocketAddr, dst: SocketAddr) -> SocketAddr {
        match (dst, local) {
            (SocketAddr::V6(d), SocketAddr::V6(l))
                if d.scope_id() == 0 && d.ip().segments()[0] & 0xffc0 == 0xfe80 =>
            {
                SocketAddr::V6(SocketAddrV6::new(*d.ip(), d.port(), 0, l.scope_id()))
            }
            _ => dst,
        }
    }
}

/// The bound sockets of `ports` with their GID indices.
fn bound(ports: &Ports) -> impl Iterator<Item = (usize, &BoundSocket)> + '_ {
    ports
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
}

impl DatagramLink for KernelLink {
    fn backend(&self) -> Backend {
        Backend::Udp
    }

    fn caps(&self) -> Caps {
        Caps {
            writes_headers: false,
        }
    }

    fn open_slot(&mut self, _slot: usize, port: &BoundSocket) -> io::Result<()> {
        if self.gro && !enable_gro(port.socket.as_raw_fd()) {
            // Receives one datagram per packet, which the batch takes as it is.
            tracing::warn!(local = %port.local, "GRO refused on a new address");
        }
        Ok(())
    }

    fn close_slot(&mut self, _slot: usize, ip: IpAddr) -> Vec<BoundSocket> {
        let gone: Vec<SenderKey> = self.senders.keys().filter(|k| k.0 == ip).copied().collect();
        gone.iter()
            .filter_map(|k| self.senders.remove(k))
            .map(|x| x.bound)
            .collect()
    }

    fn watch(&self, ports: &Ports) -> Vec<(usize, RawFd)> {
        bound(ports)
            .map(|(i, s)| (i, s.socket.as_raw_fd()))
            .collect()
    }

    fn fd(&self, ports: &Ports, slot: usize) -> Option<RawFd> {
        datagram::port(ports, slot).map(|s| s.socket.as_raw_fd())
    }

    /// The one bound to `src` (address and port), else the one on 4791 of `src`'s address.
    fn socket_for(&self, ports: &Ports, src: SocketAddr) -> Option<Sock> {
        let same = |s: &BoundSocket| s.local.ip() == src.ip() && s.local.port() == src.port();
        bound(ports)
            .find(|(_, s)| same(s))
            .map(|(i, _)| Sock::Slot(i))
            .or_else(|| {
                let key = (src.ip(), src.port());
                self.senders.contains_key(&key).then_some(Sock::Sender(key))
            })
            .or_else(|| {
                bound(ports)
                    .find(|(_, s)| s.local.ip() == src.ip())
                    .map(|(i, _)| Sock::Slot(i))
            })
    }

    /// Makes sure a socket bound to `src` (address and port) exists when the port is a
    /// hashed one, and notes that a packet leaves from it at `now`; a port that cannot be
    /// bound (in use) is reported and left to the fallback of `socket_for`. Closes the send
    /// sockets idle for [`SENDER_IDLE`].
    fn prepare(&mut self, ports: &Ports, src: SocketAddr, now: Instant) {
        self.close_idle_senders(now);
        let key = (src.ip(), src.port());
        if let Some(s) = self.senders.get_mut(&key) {
            s.used = now;
            return;
        }
        if src.port() == ROCE_V2_PORT
            || !bound(ports).any(|(_, s)| s.local.ip() == src.ip())
            || bound(ports).any(|(_, s)| s.local.ip() == src.ip() && s.local.port() == src.port())
        {
            return;
        }
        if self.senders.len() >= MAX_SENDERS {
            tracing::warn!(%src, "too many source ports in use; not bound");
            return;
        }
        let local = scoped_local(src.ip(), src.port(), self.ifindex);
        match open_socket(local, self.ifindex) {
            Ok(s) => {
                // Nothing is received here: keep what strays in small.
                let fd = s.socket.as_raw_fd();
                let _ = sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 0);
                tracing::debug!(%local, "send socket bound");
                self.senders.insert(
                    key,
                    Sender {
                        bound: s,
                        used: now,
                    },
                );
            }
            Err(e) => tracing::warn!(%local, "source port not bound: {e}"),
        }
    }

    fn recv_batch(
        &self,
        ports: &Ports,
        sock: usize,
        batch: &mut RecvBatch,
    ) -> io::Result<(usize, SocketAddr)> {
        let Some(s) = datagram::port(ports, sock) else {
            return Ok((0, NOWHERE));
        };
        if self.gro {
            batch.hold_coalesced();
        }
        let before = (batch.coalesced, batch.coalesced_packets);
        let n = mmsg::recv_batch(s.socket.as_raw_fd(), batch)?;
        if batch.coalesced != before.0 {
            self.count(|c| {
                c.gro_datagrams += batch.coalesced - before.0;
                c.gro_packets += batch.coalesced_packets - before.1;
            });
        }
        Ok((n, s.local))
    }

    fn send_batch(
        &self,
        ports: &Ports,
        from: Sock,
        msgs: &mut [Outgoing<'_>],
    ) -> io::Result<usize> {
        let Some(s) = self.get(ports, from) else {
            return Ok(0);
        };
        for m in msgs.iter_mut() {
            m.dst = KernelLink::scoped(s.local, m.dst);
        }
        let fd = s.socket.as_raw_fd();
        let sent = mmsg::send_batch(fd, msgs, self.gso.get())?;
        self.count(|c| {
            c.gso_datagrams += sent.super_datagrams as u64;
            c.gso_packets += sent.super_packets as u64;
        });
        if !sent.gso_refused {
            return Ok(sent.packets);
        }
        // Logged once: GSO stays off for the device from here on.
        tracing::warn!(local = %s.local, "the kernel refused a GSO send: one datagram per packet from now on");
        self.gso.set(false);
        self.count(|c| c.gso_refused += 1);
        match mmsg::send_batch(fd, &msgs[sent.packets..], false) {
            Ok(rest) => Ok(sent.packets + rest.packets),
            Err(_) if sent.packets > 0 => Ok(sent.packets),
            Err(e) => Err(e),
        }
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let c = self.offload.get();
        [
            ("udp_tx_gso_datagrams", c.gso_datagrams),
            ("udp_tx_gso_packets", c.gso_packets),
            ("udp_rx_gro_datagrams", c.gro_datagrams),
            ("udp_rx_gro_packets", c.gro_packets),
            ("udp_tx_gso_refused", c.gso_refused),
            ("udp_tx_port_sockets", self.senders.len() as u64),
            ("udp_tx_port_sockets_closed", c.senders_closed),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// The backend a device runs on: the closed set of [`DatagramLink`]s, dispatched with a
/// `match` (the per-packet calls stay direct calls).
#[derive(Debug)]
pub enum AnyLink {
    Udp(KernelLink),
    Packet(PacketLink),
    Xdp(XdpLink),
}

/// No address and no offload: the link of a device that sends no datagram (siw).
impl Default for AnyLink {
    fn default() -> AnyLink {
        AnyLink::Udp(KernelLink::default())
    }
}

/// Calls `$call` on the link inside `$link`, whichever backend it is.
macro_rules! each {
    ($link:expr, $l:ident => $call:expr) => {
        match $link {
            AnyLink::Udp($l) => $call,
            AnyLink::Packet($l) => $call,
            AnyLink::Xdp($l) => $call,
        }
    };
}

impl DatagramLink for AnyLink {
    fn backend(&self) -> Backend {
        each!(self, l => l.backend())
    }
    fn caps(&self) -> Caps {
        each!(self, l => l.caps())
    }
    fn open_slot(&mut self, slot: usize, port: &BoundSocket) -> io::Result<()> {
        each!(self, l => l.open_slot(slot, port))
    }
    fn close_slot(&mut self, slot: usize, ip: IpAddr) -> Vec<BoundSocket> {
        each!(self, l => l.close_slot(slot, ip))
    }
    fn watch(&self, ports: &Ports) -> Vec<(usize, RawFd)> {
        each!(self, l => l.watch(ports))
    }
    fn fd(&self, ports: &Ports, slot: usize) -> Option<RawFd> {
        each!(self, l => l.fd(ports, slot))
    }
    fn socket_for(&self, ports: &Ports, src: SocketAddr) -> Option<Sock> {
        each!(self, l => l.socket_for(ports, src))
    }
    fn prepare(&mut self, ports: &Ports, src: SocketAddr, now: Instant) {
        each!(self, l => l.prepare(ports, src, now))
    }
    fn recv_batch(
        &self,
        ports: &Ports,
        sock: usize,
        batch: &mut RecvBatch,
    ) -> io::Result<(usize, SocketAddr)> {
        each!(self, l => l.recv_batch(ports, sock, batch))
    }
    fn send_batch(
        &self,
        ports: &Ports,
        from: Sock,
        msgs: &mut [Outgoing<'_>],
    ) -> io::Result<usize> {
        each!(self, l => l.send_batch(ports, from, msgs))
    }
    fn counters(&self) -> Vec<(String, u64)> {
        each!(self, l => l.counters())
    }
}

/// Makes a 4791 socket only hold its port when `link` writes the frames itself.
fn hold_port(link: &impl DatagramLink, s: &BoundSocket) -> io::Result<()> {
    if link.caps().writes_headers {
        packet::drop_everything(s.socket.as_raw_fd())?;
    }
    Ok(())
}

/// The network side of one device: its 4791 sockets (by GID slot), its multicast group
/// sockets, and the link its packets go through.
#[derive(Debug, Default)]
pub struct UdpBackend {
    /// One per address on 4791, at its GID index (`None`: an empty GID slot).
    sockets: Vec<Option<BoundSocket>>,
    ifindex: u32,
    /// Sockets bound to the IP multicast groups the device joined (socket indices from
    /// [`datagram::MCAST_BASE`] on), on every backend: the kernel receives
    /// multicast and loops it back.
    pub mcast: McastSockets,
    /// The backend, with the device's capture streams around it.
    link: Captured<AnyLink>,
}

impl UdpBackend {
    /// Binds `addr:port` for each address, on the udp link. IPv6 link-local addresses are
    /// scoped to `ifindex`. An address the kernel does not offer (yet: IPv6 duplicate
    /// address detection) is left out; one already bound by another daemon or rxe is an
    /// error.
    pub fn bind(addrs: &[IpAddr], port: u16, ifindex: u32) -> io::Result<UdpBackend> {
        let mut sockets = Vec::new();
        let wanted = offload_wanted();
        let (mut gso, mut gro) = (wanted, wanted);
        for &ip in addrs {
            let local = scoped_local(ip, port, ifindex);
            match open_socket(local, ifindex) {
                Ok(s) => {
                    let fd = s.socket.as_raw_fd();
                    gso = gso && gso_available(fd);
                    gro = gro && enable_gro(fd);
                    sockets.push(Some(s))
                }
                // A tentative (DAD) or vanishing address: serve the others.
                Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
                    tracing::warn!(%local, "address not available, left out of the GID table");
                }
                Err(e) => return Err(io::Error::new(e.kind(), format!("bind UDP {local}: {e}"))),
            }
        }
        if sockets.is_empty() && !addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                "no address could be bound",
            ));
        }
        Ok(UdpBackend {
            sockets,
            ifindex,
            mcast: Default::default(),
            link: Captured::new(AnyLink::Udp(KernelLink {
                senders: HashMap::new(),
                next_sweep: None,
                ifindex,
                gso: Cell::new(gso),
                gro,
                offload: Cell::new(OffloadCounters::default()),
            })),
        })
    }

    /// Moves the device to `link`, which serves every bound address from now on (when
    /// the device opens, before any capture can start).
    fn use_link(&mut self, mut link: AnyLink) -> io::Result<()> {
        for (slot, s) in bound(&self.sockets) {
            hold_port(&link, s)?;
            link.open_slot(slot, s)?;
        }
        self.link = Captured::new(link);
        Ok(())
    }

    /// Moves the device to the AF_PACKET `link` (`backend packet`).
    pub fn use_packet(&mut self, link: PacketLink) -> io::Result<()> {
        self.use_link(AnyLink::Packet(link))
    }

    /// Moves the device to the AF_XDP `link` (`backend xdp`).
    pub fn use_xdp(&mut self, link: XdpLink) -> io::Result<()> {
        self.use_link(AnyLink::Xdp(link))
    }

    /// The backend's name (`link show`).
    pub fn backend(&self) -> Backend {
        self.link.backend()
    }

    /// How the xdp backend's program runs (`None` on the other backends).
    pub fn xdp_mode(&self) -> Option<Mode> {
        match self.link.inner() {
            AnyLink::Xdp(x) => Some(x.mode()),
            _ => None,
        }
    }

    /// Starts a capture stream (`rdma-emu capture`).
    pub fn add_capture(&mut self, stream: Capture) {
        self.link.add(stream);
    }

    /// Whether a capture (`rdma-emu capture`) records the device's datagrams.
    pub fn capturing(&self) -> bool {
        self.link.capturing()
    }

    /// Records a datagram of the local path (the device's packets to itself, which no
    /// link carries).
    pub fn record(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        self.link.record(src, dst, payload);
    }

    /// Writes what the capture pipes take; ends the streams nobody reads any more.
    pub fn flush_captures(&mut self) {
        self.link.flush();
    }

    /// What the link counted (`rdma-emu stat`).
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.link.counters()
    }

    /// Binds `ip` on 4791 at GID index `slot` (which must be free).
    pub fn open_slot(&mut self, slot: usize, ip: IpAddr) -> io::Result<()> {
        debug_assert!(self.socket(slot).is_none(), "slot {slot} is taken");
        let s = open_socket(scoped_local(ip, ROCE_V2_PORT, self.ifindex), self.ifindex)?;
        hold_port(&self.link, &s)?;
        self.link.open_slot(slot, &s)?;
        if self.sockets.len() <= slot {
            self.sockets.resize_with(slot + 1, || None);
        }
        self.sockets[slot] = Some(s);
        Ok(())
    }

    /// Takes the socket at GID index `slot` out (its address went away), and the sockets
    /// the link held for that address with it; the caller deregisters and drops them.
    pub fn close_slot(&mut self, slot: usize) -> Vec<BoundSocket> {
        let Some(s) = self.sockets.get_mut(slot).and_then(Option::take) else {
            return Vec::new();
        };
        while matches!(self.sockets.last(), Some(None)) {
            self.sockets.pop();
        }
        let mut out = self.link.close_slot(slot, s.local.ip());
        out.insert(0, s);
        out
    }

    /// The 4791 socket at GID index `slot`.
    pub fn socket(&self, slot: usize) -> Option<&BoundSocket> {
        datagram::port(&self.sockets, slot)
    }

    /// The 4791 sockets with their GID indices.
    pub fn bound(&self) -> impl Iterator<Item = (usize, &BoundSocket)> + '_ {
        bound(&self.sockets)
    }

    /// The descriptors the engine watches with their socket indices (the epoll set).
    pub fn fds(&self) -> Vec<(usize, RawFd)> {
        self.link.watch(&self.sockets)
    }

    /// The descriptor the engine watches for GID index `slot` (none with `backend xdp`,
    /// whose sockets serve every address).
    pub fn fd(&self, slot: usize) -> Option<RawFd> {
        self.link.fd(&self.sockets, slot)
    }

    /// The udp link (for its tests).
    #[cfg(test)]
    fn kernel(&self) -> &KernelLink {
        match self.link.inner() {
            AnyLink::Udp(k) => k,
            other => panic!("not the udp link: {other:?}"),
        }
    }

    /// Send-only sockets bound now.
    #[cfg(test)]
    pub fn senders(&self) -> impl Iterator<Item = &BoundSocket> + '_ {
        self.kernel().senders.values().map(|s| &s.bound)
    }

    /// Receives one datagram on socket `i`: (length, source, local destination).
    #[cfg(test)]
    pub fn recv(
        &self,
        i: usize,
        buf: &mut [u8],
    ) -> io::Result<Option<(usize, SocketAddr, SocketAddr)>> {
        let Some(s) = self.socket(i) else {
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

    /// Receives a batch of packets on socket `i` (a multicast group socket, or one the
    /// link watches); returns how many arrived and the local address they arrived on.
    pub fn recv_batch(&self, i: usize, batch: &mut RecvBatch) -> io::Result<(usize, SocketAddr)> {
        batch.one_packet_per_buffer();
        if let Some(s) = self.mcast.get(i) {
            let n = mmsg::recv_batch(s.socket.as_raw_fd(), batch)?;
            self.link.record_received(batch, n, s.local);
            return Ok((n, s.local));
        }
        self.link.recv_batch(&self.sockets, i, batch)
    }

    /// Makes sure packets from `src` can leave at `now` (see [`DatagramLink::prepare`]).
    pub fn ensure_sender(&mut self, src: SocketAddr, now: Instant) {
        self.link.prepare(&self.sockets, src, now);
    }

    /// The socket packets from `src` leave from (see [`DatagramLink::socket_for`]).
    pub fn socket_for(&self, src: SocketAddr) -> Option<Sock> {
        self.link.socket_for(&self.sockets, src)
    }

    /// Sends one datagram from the socket for `src`.
    #[cfg(test)]
    pub fn send(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> io::Result<()> {
        let i = self.socket_for(src).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("no socket for {src}"),
            )
        })?;
        let msg = Outgoing {
            dst,
            traffic_class: 0,
            payload,
        };
        match self.send_batch(i, &mut [msg])? {
            1 => Ok(()),
            _ => Err(io::Error::from(io::ErrorKind::WouldBlock)),
        }
    }

    /// Sends datagrams from socket `i` through the link; returns how many went out.
    pub fn send_batch(&self, i: Sock, msgs: &mut [Outgoing<'_>]) -> io::Result<usize> {
        self.link.send_batch(&self.sockets, i, msgs)
    }
}

#[cfg(test)]
#[path = "udp_tests.rs"]
mod tests;

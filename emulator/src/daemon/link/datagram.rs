//! The datagram link (DESIGN decision 5): what a RoCE v2 device sends its packets through
//! and receives them from, one trait that each backend implements: the kernel's UDP
//! sockets (`udp.rs`), AF_PACKET (`packet.rs`) and AF_XDP (`xdp/`).
//!
//! Every device keeps one kernel UDP socket on 4791 per served address (its [`Ports`], by
//! GID slot), whatever its backend: the udp link sends and receives through them, a link
//! that writes the frames itself ([`Caps::writes_headers`]) leaves them holding the port,
//! so the kernel does not answer RoCE packets with ICMP port unreachable. A link is asked
//! per batch; the only per-packet calls ([`DatagramLink::socket_for`],
//! [`DatagramLink::prepare`]) reach it through the device's closed set of backends
//! (`udp::AnyLink`), a `match` and no virtual call.

use super::backend::Backend;
use super::mmsg::{Outgoing, RecvBatch};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::RawFd;
use std::time::Instant;

/// The RoCE v2 UDP destination port (IBA Annex A17.2.1).
pub const ROCE_V2_PORT: u16 = wire::roce::ROCE_V2_UDP_PORT;

/// One bound kernel UDP socket.
#[derive(Debug)]
pub struct BoundSocket {
    pub socket: UdpSocket,
    pub local: SocketAddr,
}

/// A device's sockets on 4791, at the GID index of their address (`None`: an empty slot).
pub type Ports = [Option<BoundSocket>];

/// Where a send-only socket of the udp link is found: its local address and port
/// (unscoped).
pub type SenderKey = (IpAddr, u16);

/// Which socket of a device a batch of packets leaves from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sock {
    /// The 4791 socket at this GID index.
    Slot(usize),
    /// A send-only socket of the udp link on a hashed source port.
    Sender(SenderKey),
    /// The frames of a link that writes them (packet, xdp), from the address at this GID
    /// index and this UDP port.
    Frames(usize, u16),
}

/// What a link does itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// It writes the Ethernet, IP and UDP headers and reads whole frames (so the
    /// device's 4791 sockets only hold the port and receive nothing).
    pub writes_headers: bool,
}

/// A RoCE v2 datagram link: the device's packets out and in, by batches.
pub trait DatagramLink {
    /// The backend's name (`link show`).
    fn backend(&self) -> Backend;
    /// What the link does itself.
    fn caps(&self) -> Caps;
    /// Serves the address of `port`, newly bound at GID slot `slot`.
    fn open_slot(&mut self, slot: usize, port: &BoundSocket) -> io::Result<()>;
    /// Stops serving `ip` at GID slot `slot` (its address went away); the sockets the
    /// link held for it, for the caller to deregister and drop.
    fn close_slot(&mut self, slot: usize, ip: IpAddr) -> Vec<BoundSocket>;
    /// The descriptors the engine watches, with their socket indices.
    fn watch(&self, ports: &Ports) -> Vec<(usize, RawFd)>;
    /// The descriptor the engine watches for GID slot `slot`, if one of its own.
    fn fd(&self, ports: &Ports, slot: usize) -> Option<RawFd>;
    /// The socket packets from `src` leave from; `None` when `src`'s address is not served
    /// (any more): a packet sent from another address would fail its ICRC at the peer, so
    /// it is not sent at all. A link that writes the frames sends from any port.
    fn socket_for(&self, ports: &Ports, src: SocketAddr) -> Option<Sock> {
        ports
            .iter()
            .enumerate()
            .find(|(_, s)| s.as_ref().is_some_and(|s| s.local.ip() == src.ip()))
            .map(|(i, _)| Sock::Frames(i, src.port()))
    }
    /// A packet from `src` is about to leave at `now` (the udp link binds its port).
    fn prepare(&mut self, _ports: &Ports, _src: SocketAddr, _now: Instant) {}
    /// Receives a batch on socket index `sock` (one of [`DatagramLink::watch`]'s): how
    /// many packets arrived, and the local address they arrived on unless `batch.dsts`
    /// names it per packet.
    fn recv_batch(
        &self,
        ports: &Ports,
        sock: usize,
        batch: &mut RecvBatch,
    ) -> io::Result<(usize, SocketAddr)>;
    /// Sends datagrams from socket `from`; how many went out (the rest are lost on the
    /// wire, and the transport retransmits).
    fn send_batch(&self, ports: &Ports, from: Sock, msgs: &mut [Outgoing<'_>])
        -> io::Result<usize>;
    /// What the link counted, by the names `rdma-emu stat` shows.
    fn counters(&self) -> Vec<(String, u64)>;
}

/// Socket indices of group sockets start here (below: the device's unicast sockets).
pub const MCAST_BASE: usize = 0x8000;

/// IP TTL / hop limit of multicast the daemon sends. rxe copies the AH's hop limit into
/// each packet; the kernel UDP backend cannot set it per packet and uses the kernel's
/// default unicast TTL for unicast, so multicast gets the same.
pub const MCAST_TTL: u8 = 64;

/// The group sockets of one device, by slot (joined and left by `mcast.rs`; every
/// backend receives multicast through them).
#[derive(Debug, Default)]
pub struct McastSockets {
    pub(crate) slots: Vec<Option<BoundSocket>>,
}

impl McastSockets {
    /// The socket at index `i` (`MCAST_BASE + slot`).
    pub fn get(&self, i: usize) -> Option<&BoundSocket> {
        self.slots
            .get(i.checked_sub(MCAST_BASE)?)
            .and_then(Option::as_ref)
    }

    /// The groups joined, by slot.
    pub(crate) fn joined(&self) -> impl Iterator<Item = (usize, IpAddr)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s.local.ip())))
    }
}

/// The address a batch arrived on when no socket took it.
pub const NOWHERE: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::UNSPECIFIED,
    0,
));

/// The 4791 socket at GID slot `slot`.
pub fn port(ports: &Ports, slot: usize) -> Option<&BoundSocket> {
    ports.get(slot).and_then(Option::as_ref)
}

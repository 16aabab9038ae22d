//! The AF_PACKET backend for RoCE v2 (`link add … backend packet`): the daemon writes
//! the Ethernet, IP and UDP headers of every packet itself and reads whole frames, the
//! way a NIC sees them (packet(7)).
//!
//! - One AF_PACKET socket per served address (GID slot), bound to the interface and to
//!   IPv4 or IPv6, with a classic BPF filter that passes only UDP to port 4791 of that
//!   address (IPv4: not a later fragment; IPv6: UDP as the first next header). A socket
//!   bound to one protocol sees what arrives, not what the host sends.
//! - Sent frames carry: the interface's MAC; the next hop's MAC from the kernel's
//!   neighbour table (`neigh.rs`); IPv4 with DF set, an IP ID counting up per device, TTL
//!   64, DSCP 0 and ECN ECT(0), UDP checksum 0 (IBA Annex A17.2.1 allows it over IPv4);
//!   IPv6 with traffic class ECT(0), flow label 0, hop limit 64 and the UDP checksum IPv6
//!   requires (RFC 8200 8.1). The core computes each ICRC for IP ID 0; as CRC-32 is
//!   affine, the ID's share is XORed in (`icrc::ipv4_id_delta`) instead of computing the
//!   CRC again.
//! - Received frames have their ICRC verified over their real IP and UDP headers; those
//!   failing are dropped here and counted (the core verifies again over the header it
//!   reconstructs, which also passes). Their IP ECN field is reported like `IP_RECVTOS`.
//! - The kernel sees the same frames: the device keeps its UDP socket on 4791 of each
//!   address (`udp.rs`), which answers for the port (no ICMP port unreachable) and drops
//!   everything with a socket filter that accepts nothing.
//!
//! Needs CAP_NET_RAW. On `lo` the frames carry all-zero MACs and no neighbour is asked.

use super::backend::Backend;
use super::datagram::{self, BoundSocket, Caps, DatagramLink, Ports, Sock, NOWHERE};
use super::mmsg::{self, Outgoing, Packet, RecvBatch, ECN_ECT0};
use super::vnet::{gso_size_of, PACKET_VNET_HDR, VNET_HDR_LEN};
use crate::daemon::devices::neigh::Neighbours;
use crate::daemon::devices::netdev::Netdev;
use crate::daemon::sys;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, UdpPacket,
};
use std::cell::{Cell, RefCell};
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;
use wire::frame::{self, IpHeader, Transport, ETHERNET_HEADER_LEN, UDP_HEADER_LEN};
use wire::roce::{icrc, ICRC_LEN, ROCE_V2_UDP_PORT};

/// IP TTL / IPv6 hop limit of sent packets.
const HOP_LIMIT: u8 = 64;
/// The snap length the socket filter accepts (whole frames).
const ACCEPT: u32 = 0x0004_0000;

/// What the backend drops or cannot send, beyond the engine's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PacketCounters {
    /// Frames whose ICRC does not verify over their real headers.
    pub rx_icrc_errors: u64,
    /// Frames the filter passed that are not a RoCE v2 datagram to the slot's address.
    pub rx_malformed: u64,
    /// Packets not sent because the next hop's MAC is unknown.
    pub tx_no_neighbour: u64,
    /// Frames the kernel dropped because a packet socket's receive queue was full
    /// (`PACKET_STATISTICS`).
    pub rx_queue_drops: u64,
}

/// `PACKET_STATISTICS` (linux/if_packet.h) and its `struct tpacket_stats`.
const PACKET_STATISTICS: libc::c_int = 6;
#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    packets: u32,
    drops: u32,
}

/// The frames the kernel dropped on `fd` since the last call (reading resets them).
fn queue_drops(fd: RawFd) -> u64 {
    let mut st = TpacketStats::default();
    let mut len = std::mem::size_of::<TpacketStats>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into the live `st`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            PACKET_STATISTICS,
            (&mut st as *mut TpacketStats).cast(),
            &mut len,
        )
    };
    if r < 0 {
        0
    } else {
        u64::from(st.drops)
    }
}

/// The AF_PACKET side of one device.
#[derive(Debug)]
pub struct PacketLink {
    /// The interface's name (for messages) and index.
    netdev: String,
    ifindex: u32,
    mac: [u8; 6],
    loopback: bool,
    /// One socket per GID slot (`None`: an empty slot), and whether it was given
    /// `PACKET_VNET_HDR` (each frame then comes and goes after a `virtio_net_hdr`, which
    /// tells a UDP GSO super-frame apart).
    slots: Vec<Option<(OwnedFd, bool)>>,
    next_id: Cell<u16>,
    neigh: RefCell<Neighbours>,
    /// Frames being sent (reused).
    frames: RefCell<Vec<Vec<u8>>>,
    counters: Cell<PacketCounters>,
}

/// Why an AF_PACKET socket could not be opened, and what to do instead.
fn open_error(e: io::Error, netdev: &str) -> io::Error {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "backend packet on {netdev}: AF_PACKET needs CAP_NET_RAW (run rdma-emud as \
                 root or give it the capability: setcap cap_net_raw+ep rdma-emud); \
                 backend udp needs none"
            ),
        ),
        Some(libc::EAFNOSUPPORT) => io::Error::new(
            io::ErrorKind::Unsupported,
            format!("backend packet on {netdev}: this kernel has no AF_PACKET; use backend udp"),
        ),
        _ => io::Error::new(e.kind(), format!("backend packet on {netdev}: {e}")),
    }
}

/// A classic BPF instruction (`struct sock_filter`).
pub(super) fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

// Classic BPF opcodes (linux/filter.h).
pub(super) const LDH_ABS: u16 = 0x28;
pub(super) const LDW_ABS: u16 = 0x20;
pub(super) const LDB_ABS: u16 = 0x30;
pub(super) const LDH_IND: u16 = 0x48;
pub(super) const LDXB_MSH: u16 = 0xb1;
pub(super) const JEQ_K: u16 = 0x15;
pub(super) const JSET_K: u16 = 0x45;
pub(super) const RET_K: u16 = 0x06;

/// The filter passing Ethernet frames with a UDP datagram to `addr`:4791 and nothing else.
fn roce_filter(addr: IpAddr) -> Vec<libc::sock_filter> {
    // Each check: load, then "equal: next instruction; else: the final `ret 0`". Offsets
    // count from the Ethernet header.
    let mut checks: Vec<(u16, u32, u16, u32)> = Vec::new(); // (load, offset, test, value)
    match addr {
        IpAddr::V4(v4) => {
            checks.push((LDH_ABS, 12, JEQ_K, 0x0800));
            checks.push((LDW_ABS, 30, JEQ_K, u32::from(v4)));
            checks.push((LDB_ABS, 23, JEQ_K, 17));
            // Not a later fragment (offset 0), then the UDP destination port after the
            // header's real length.
            checks.push((LDH_ABS, 20, JSET_K, 0x1fff));
            checks.push((LDXB_MSH, 14, 0, 0));
            checks.push((LDH_IND, 16, JEQ_K, u32::from(ROCE_V2_UDP_PORT)));
        }
        IpAddr::V6(v6) => {
            checks.push((LDH_ABS, 12, JEQ_K, 0x86dd));
            checks.push((LDB_ABS, 20, JEQ_K, 17));
            for (i, word) in v6.octets().chunks_exact(4).enumerate() {
                let w = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
                checks.push((LDW_ABS, 38 + 4 * i as u32, JEQ_K, w));
            }
            checks.push((LDH_ABS, 56, JEQ_K, u32::from(ROCE_V2_UDP_PORT)));
        }
    }
    let len = checks
        .iter()
        .map(|c| if c.2 == 0 { 1 } else { 2 })
        .sum::<usize>()
        + 2;
    let drop_at = len - 1;
    let mut prog = Vec::with_capacity(len);
    for (load, offset, test, value) in checks {
        prog.push(insn(load, 0, 0, offset));
        if test == 0 {
            continue;
        }
        let to_drop = (drop_at - prog.len() - 1) as u8;
        prog.push(match test {
            // JSET: bits set (a later fragment) drops.
            JSET_K => insn(test, to_drop, 0, value),
            _ => insn(test, 0, to_drop, value),
        });
    }
    prog.push(insn(RET_K, 0, 0, ACCEPT));
    prog.push(insn(RET_K, 0, 0, 0));
    prog
}

/// Attaches a classic BPF program to a socket.
pub fn attach_filter(fd: RawFd, prog: &mut [libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `prog`, live for the call; the kernel copies the program.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes a socket receive nothing (the kernel UDP socket that only holds port 4791).
pub fn drop_everything(fd: RawFd) -> io::Result<()> {
    attach_filter(fd, &mut [insn(RET_K, 0, 0, 0)])
}

/// A nonblocking AF_PACKET socket (raw frames) for protocol 0: it receives nothing
/// until bound ([`bind_to_interface`]), so a filter attached first sees every frame.
pub fn unbound_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the descriptor is owned at once.
    let raw = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// An AF_PACKET socket on `ifindex` bound to EtherType `protocol`, receiving what `prog`
/// passes (nothing is queued before the filter is in place).
pub(super) fn open_filtered(
    ifindex: u32,
    protocol: u16,
    prog: &mut [libc::sock_filter],
) -> io::Result<OwnedFd> {
    let fd = unbound_socket()?;
    attach_filter(fd.as_raw_fd(), prog)?;
    bind_to_interface(fd.as_raw_fd(), ifindex, protocol)?;
    Ok(fd)
}

/// An AF_PACKET socket on `ifindex` receiving the RoCE v2 frames to `addr`.
fn open_socket(ifindex: u32, addr: IpAddr) -> io::Result<OwnedFd> {
    let proto = match addr {
        IpAddr::V4(_) => libc::ETH_P_IP,
        IpAddr::V6(_) => libc::ETH_P_IPV6,
    } as u16;
    let fd = open_filtered(ifindex, proto, &mut roce_filter(addr))?;
    let _ = sys::setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
    let _ = sys::setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
    Ok(fd)
}

/// Binds an AF_PACKET socket to interface `ifindex` and ethertype `proto` (`ETH_P_ALL`:
/// every frame, the host's outgoing ones included).
pub fn bind_to_interface(fd: RawFd, ifindex: u32, proto: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all zeroes is valid.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: passes a live sockaddr_ll and its size.
    let r = unsafe {
        libc::bind(
            fd,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the interface is a loopback (`IFF_LOOPBACK` in its flags).
fn is_loopback(name: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{name}/flags"))
        .ok()
        .and_then(|f| u32::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok())
        .is_some_and(|f| f & libc::IFF_LOOPBACK as u32 != 0)
}

/// Where a received frame's RoCE datagram is and what came with it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Received {
    pub(super) at: usize,
    pub(super) len: usize,
    pub(super) src: SocketAddr,
    pub(super) tos: u8,
}

/// Why a received frame was dropped.
pub(super) enum Refused {
    Malformed,
    Icrc,
}

/// Checks one received frame for the slot's `local` address.
pub(super) fn accept(buf: &[u8], local: IpAddr, ifindex: u32) -> Result<Received, Refused> {
    let f = frame::parse(buf).map_err(|_| Refused::Malformed)?;
    if f.verify_icrc() != Some(true) {
        // Not the frame's own ICRC (or not RoCE at all): `addressed` tells which.
        addressed(&f, buf, local, ifindex)?;
        return Err(Refused::Icrc);
    }
    addressed(&f, buf, local, ifindex)
}

/// Checks a UDP GSO super-frame cut at `size` for the slot's `local` address: each
/// segment's ICRC is verified over the headers it carries once segmented (IP ID counting
/// up from the super-frame's, IP and UDP lengths of the segment; DESIGN decision 6), and
/// moved to the super-frame's own ID, as the UDP backend's GRO split does. Every segment
/// or none: a bad one refuses the frame.
pub(super) fn accept_segments(
    buf: &mut [u8],
    local: IpAddr,
    ifindex: u32,
    size: usize,
) -> Result<Vec<Received>, Refused> {
    let (whole, mut ip, mut udp) = {
        let f = frame::parse(buf).map_err(|_| Refused::Malformed)?;
        let whole = addressed(&f, buf, local, ifindex)?;
        let Transport::Udp { header, .. } = f.transport else {
            return Err(Refused::Malformed);
        };
        let udp: [u8; 8] = header.try_into().map_err(|_| Refused::Malformed)?;
        let ip: Vec<u8> = match f.ip {
            IpHeader::V4 { header, .. } if header.len() == 20 => header.to_vec(),
            IpHeader::V6 { header, .. } => header.to_vec(),
            IpHeader::V4 { .. } => return Err(Refused::Malformed),
        };
        (whole, ip, udp)
    };
    let count = whole.len.div_ceil(size);
    let v4 = (ip.len() == 20).then(|| {
        let id0 = u16::from_be_bytes([ip[4], ip[5]]);
        (id0, mmsg::run_shifts(size, count))
    });
    let mut out = Vec::with_capacity(count);
    for (k, at) in (0..whole.len).step_by(size).enumerate() {
        let len = size.min(whole.len - at);
        let seg = &mut buf[whole.at + at..whole.at + at + len];
        let udp_len = (UDP_HEADER_LEN + len) as u16;
        udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        let ok = match &v4 {
            Some((id0, run)) => {
                let total = 20 + udp_len;
                ip[2..4].copy_from_slice(&total.to_be_bytes());
                ip[4..6].copy_from_slice(&id0.wrapping_add(k as u16).to_be_bytes());
                let hdr: &[u8; 20] = ip[..].try_into().map_err(|_| Refused::Malformed)?;
                let ok = icrc::verify_ipv4(hdr, &udp, seg);
                mmsg::undo_gso_id(seg, k, run);
                ok
            }
            None => {
                ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
                let hdr: &[u8; 40] = ip[..].try_into().map_err(|_| Refused::Malformed)?;
                icrc::verify_ipv6(hdr, &udp, seg)
            }
        };
        if !ok {
            return Err(Refused::Icrc);
        }
        out.push(Received {
            at: whole.at + at,
            len,
            ..whole
        });
    }
    Ok(out)
}

/// Where the RoCE datagram of a parsed frame is, when it is one to `local`:4791.
fn addressed(
    f: &frame::Frame<'_>,
    buf: &[u8],
    local: IpAddr,
    ifindex: u32,
) -> Result<Received, Refused> {
    let Transport::Udp {
        src_port,
        dst_port,
        payload,
        ..
    } = f.transport
    else {
        return Err(Refused::Malformed);
    };
    if dst_port != ROCE_V2_UDP_PORT || f.ip.dst() != local {
        return Err(Refused::Malformed);
    }
    let (src_ip, tos) = match &f.ip {
        IpHeader::V4 { repr, tos, .. } => (IpAddr::V4(repr.src_addr), *tos),
        IpHeader::V6 {
            repr,
            traffic_class,
            ..
        } => (IpAddr::V6(repr.src_addr), *traffic_class),
    };
    let src = match src_ip {
        // As a kernel socket reports it: link-local peers scoped to the interface.
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => {
            SocketAddr::V6(SocketAddrV6::new(v6, src_port, 0, ifindex))
        }
        ip => SocketAddr::new(ip, src_port),
    };
    let at = payload.as_ptr() as usize - buf.as_ptr() as usize;
    Ok(Received {
        at,
        len: payload.len(),
        src,
        tos,
    })
}

impl PacketLink {
    /// Opens the link on `netdev` (no slot yet): fails, saying why and what to use
    /// instead, when AF_PACKET sockets cannot be had.
    pub fn open(netdev: &Netdev) -> io::Result<PacketLink> {
        // SAFETY: plain syscall; a probe for the capability, closed at once.
        let probe =
            unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if probe < 0 {
            return Err(open_error(io::Error::last_os_error(), &netdev.name));
        }
        // SAFETY: `probe` is ours and closed once.
        drop(unsafe { OwnedFd::from_raw_fd(probe) });
        Ok(PacketLink::frames_only(netdev))
    }

    /// The link without sockets: what writes frames, resolves next hops and counts, for
    /// a backend that moves the frames itself (`xdp`).
    pub(super) fn frames_only(netdev: &Netdev) -> PacketLink {
        PacketLink {
            netdev: netdev.name.clone(),
            ifindex: netdev.index,
            mac: netdev.mac,
            loopback: is_loopback(&netdev.name),
            slots: Vec::new(),
            next_id: Cell::new(1),
            neigh: RefCell::new(Neighbours::new(netdev.index)),
            frames: RefCell::new(Vec::new()),
            counters: Cell::new(PacketCounters::default()),
        }
    }

    /// Opens the socket of GID slot `slot`, serving `addr`.
    fn serve(&mut self, slot: usize, addr: IpAddr) -> io::Result<()> {
        let fd = open_socket(self.ifindex, addr).map_err(|e| open_error(e, &self.netdev))?;
        let vnet = sys::setsockopt_int(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_VNET_HDR, 1)
            .map_err(|e| {
                tracing::info!(
                    "PACKET_VNET_HDR refused ({e}): UDP GSO super-frames from kernel senders \
                     on {} fail their ICRC here",
                    self.netdev
                )
            })
            .is_ok();
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, || None);
        }
        self.slots[slot] = Some((fd, vnet));
        Ok(())
    }

    /// The socket of GID slot `slot`.
    fn slot_fd(&self, slot: usize) -> Option<RawFd> {
        self.slots.get(slot)?.as_ref().map(|(fd, _)| fd.as_raw_fd())
    }

    /// Whether slot `slot`'s socket has `PACKET_VNET_HDR`.
    fn vnet(&self, slot: usize) -> bool {
        self.slots
            .get(slot)
            .and_then(Option::as_ref)
            .is_some_and(|s| s.1)
    }

    /// The frame counters, with the frames the kernel dropped since the last call.
    pub(super) fn frame_counters(&self) -> PacketCounters {
        let drops: u64 = self
            .slots
            .iter()
            .flatten()
            .map(|(fd, _)| queue_drops(fd.as_raw_fd()))
            .sum();
        self.count(|c| c.rx_queue_drops += drops);
        self.counters.get()
    }

    /// Next hops resolved by asking the kernel, and destinations it could not resolve.
    pub(super) fn neighbour_counters(&self) -> (u64, u64) {
        let n = self.neigh.borrow();
        (n.resolved, n.unresolved)
    }

    pub(super) fn count(&self, f: impl FnOnce(&mut PacketCounters)) {
        let mut c = self.counters.get();
        f(&mut c);
        self.counters.set(c);
    }

    /// Receives a batch of frames on slot `slot` (serving `local`) and leaves in `batch`,
    /// at its front, the RoCE datagrams (BTH through ICRC) that verify, with their
    /// sources and TOS octets, as the UDP backend would; returns how many.
    fn recv_frames(&self, slot: usize, local: IpAddr, batch: &mut RecvBatch) -> io::Result<usize> {
        let Some(fd) = self.slot_fd(slot) else {
            return Ok(0);
        };
        let vnet = self.vnet(slot);
        if vnet {
            batch.hold_coalesced();
        }
        let skip = if vnet { VNET_HDR_LEN } else { 0 };
        let n = mmsg::recv_batch(fd, batch)?;
        let lens: Vec<Option<usize>> = batch.lens[..n].to_vec();
        let mut kept: Vec<Packet> = Vec::with_capacity(n);
        for (i, len) in lens.into_iter().enumerate() {
            let Some(len) = len.filter(|&l| l >= skip) else {
                // Larger than a receive buffer: the engine counts it as truncated.
                kept.push(Packet {
                    buf: i,
                    at: 0,
                    len: None,
                    src: None,
                    tos: None,
                });
                continue;
            };
            let (vnet_hdr, frame) = batch.bufs[i][..len].split_at_mut(skip);
            let got = match gso_size_of(vnet_hdr) {
                Some(size) => accept_segments(frame, local, self.ifindex, size),
                None => accept(frame, local, self.ifindex).map(|r| vec![r]),
            };
            match got {
                Ok(rs) => kept.extend(rs.into_iter().enumerate().map(|(k, r)| Packet {
                    buf: i,
                    at: skip + r.at,
                    len: Some(r.len),
                    src: Some(r.src),
                    tos: mmsg::segment_tos(Some(r.tos), k),
                })),
                Err(Refused::Icrc) => self.count(|c| c.rx_icrc_errors += 1),
                Err(Refused::Malformed) => self.count(|c| c.rx_malformed += 1),
            }
        }
        batch.set_packets(&kept);
        Ok(kept.len())
    }

    /// Writes the frame carrying `payload` (BTH through ICRC, the ICRC computed for IP
    /// ID 0) from `src` to `dst` into `buf`, its TOS / traffic class the DSCP of
    /// `traffic_class` with ECT(0); false (nothing written) when the two addresses are of
    /// different families.
    fn emit(
        &self,
        buf: &mut Vec<u8>,
        eth_dst: [u8; 6],
        src: SocketAddr,
        dst: SocketAddr,
        traffic_class: u8,
        payload: &[u8],
    ) -> bool {
        if src.is_ipv4() != dst.is_ipv4() {
            return false;
        }
        let ip_len = if src.is_ipv4() { 20 } else { 40 };
        let udp_at = ETHERNET_HEADER_LEN + ip_len;
        let udp_len = UDP_HEADER_LEN + payload.len();
        buf.clear();
        buf.resize(udp_at + udp_len, 0);
        let ethertype = if src.is_ipv4() {
            EthernetProtocol::Ipv4
        } else {
            EthernetProtocol::Ipv6
        };
        EthernetRepr {
            src_addr: EthernetAddress(self.mac),
            dst_addr: EthernetAddress(eth_dst),
            ethertype,
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
        let l3 = &mut buf[ETHERNET_HEADER_LEN..];
        let (s, d) = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut p = Ipv4Packet::new_unchecked(&mut l3[..]);
                Ipv4Repr {
                    src_addr: s,
                    dst_addr: d,
                    next_header: IpProtocol::Udp,
                    payload_len: udp_len,
                    hop_limit: HOP_LIMIT,
                }
                .emit(&mut p, &ChecksumCapabilities::ignored());
                let id = self.next_id.get();
                self.next_id.set(id.wrapping_add(1));
                p.set_ident(id);
                p.set_dont_frag(true);
                p.set_dscp(traffic_class >> 2);
                p.set_ecn(ECN_ECT0);
                p.fill_checksum();
                (IpAddress::Ipv4(s), IpAddress::Ipv4(d))
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut p = Ipv6Packet::new_unchecked(&mut l3[..]);
                Ipv6Repr {
                    src_addr: s,
                    dst_addr: d,
                    next_header: IpProtocol::Udp,
                    payload_len: udp_len,
                    hop_limit: HOP_LIMIT,
                }
                .emit(&mut p);
                p.set_traffic_class(traffic_class & !emu_core::ECN_MASK | ECN_ECT0);
                (IpAddress::Ipv6(s), IpAddress::Ipv6(d))
            }
            _ => return false,
        };
        let mut u = UdpPacket::new_unchecked(&mut buf[udp_at..]);
        u.set_src_port(src.port());
        u.set_dst_port(dst.port());
        u.set_len(udp_len as u16);
        u.set_checksum(0);
        u.payload_mut().copy_from_slice(payload);
        if let IpAddress::Ipv6(_) = s {
            u.fill_checksum(&s, &d);
        } else if payload.len() >= ICRC_LEN {
            // The ICRC covers the IP ID (Annex A17.4.1): move it from ID 0 to this one.
            let id = Ipv4Packet::new_unchecked(&buf[ETHERNET_HEADER_LEN..]).ident();
            let end = buf.len();
            let c = &mut buf[end - ICRC_LEN..];
            let stored = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let fixed = stored ^ icrc::ipv4_id_delta(id, payload.len() - ICRC_LEN);
            c.copy_from_slice(&fixed.to_le_bytes());
        }
        true
    }

    /// Sends datagrams from `src` (address and port) through slot `slot`'s socket, as
    /// frames; returns how many went out. Sending stops at the first destination whose
    /// next hop cannot be resolved (that packet and the rest are lost on the wire).
    fn send_frames(
        &self,
        slot: usize,
        src: SocketAddr,
        msgs: &[Outgoing<'_>],
    ) -> io::Result<usize> {
        let Some(fd) = self.slot_fd(slot) else {
            return Ok(0);
        };
        let now = Instant::now();
        let mut frames = self.frames.borrow_mut();
        if frames.len() < msgs.len() {
            frames.resize_with(msgs.len(), || Vec::with_capacity(4400));
        }
        let mut ready = 0;
        for (i, m) in msgs.iter().enumerate() {
            if !self.frame_for(&mut frames[i], src, m, now) {
                break;
            }
            ready += 1;
        }
        // A plain frame: a `virtio_net_hdr` of zeroes (no GSO, no checksum to fill in).
        let prefix: &[u8] = if self.vnet(slot) {
            &[0; VNET_HDR_LEN]
        } else {
            &[]
        };
        mmsg::send_frames(fd, prefix, &frames[..ready])
    }

    /// Writes the frame of `m` from `src` into `buf`, to the next hop's MAC; false
    /// (counted) when that is unknown, or when the addresses' families differ.
    pub(super) fn frame_for(
        &self,
        buf: &mut Vec<u8>,
        src: SocketAddr,
        m: &Outgoing<'_>,
        now: Instant,
    ) -> bool {
        let mac = if self.loopback {
            [0; 6]
        } else {
            match self.neigh.borrow_mut().mac_for(m.dst.ip(), now) {
                Some(m) => m,
                None => {
                    self.count(|c| c.tx_no_neighbour += 1);
                    return false;
                }
            }
        };
        self.emit(buf, mac, src, m.dst, m.traffic_class, m.payload)
    }
}

impl DatagramLink for PacketLink {
    fn backend(&self) -> Backend {
        Backend::Packet
    }

    fn caps(&self) -> Caps {
        Caps {
            writes_headers: true,
        }
    }

    fn open_slot(&mut self, slot: usize, port: &BoundSocket) -> io::Result<()> {
        self.serve(slot, port.local.ip())
    }

    fn close_slot(&mut self, slot: usize, _ip: IpAddr) -> Vec<BoundSocket> {
        if let Some(s) = self.slots.get_mut(slot) {
            *s = None;
        }
        Vec::new()
    }

    fn watch(&self, ports: &Ports) -> Vec<(usize, RawFd)> {
        let served = |i: usize| datagram::port(ports, i).and(self.slot_fd(i));
        (0..ports.len())
            .filter_map(|i| served(i).map(|fd| (i, fd)))
            .collect()
    }

    fn fd(&self, _ports: &Ports, slot: usize) -> Option<RawFd> {
        self.slot_fd(slot)
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
        Ok((self.recv_frames(sock, s.local.ip(), batch)?, s.local))
    }

    fn send_batch(
        &self,
        ports: &Ports,
        from: Sock,
        msgs: &mut [Outgoing<'_>],
    ) -> io::Result<usize> {
        let Sock::Frames(slot, port) = from else {
            return Ok(0);
        };
        datagram::port(ports, slot).map_or(Ok(0), |s| {
            self.send_frames(slot, SocketAddr::new(s.local.ip(), port), msgs)
        })
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let p = self.frame_counters();
        let (resolved, unresolved) = self.neighbour_counters();
        [
            ("packet_rx_icrc_errors", p.rx_icrc_errors),
            ("packet_rx_malformed", p.rx_malformed),
            ("packet_rx_queue_drops", p.rx_queue_drops),
            ("packet_tx_no_neighbour", p.tx_no_neighbour),
            ("packet_neigh_resolved", resolved),
            ("packet_neigh_unresolved", unresolved),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

#[cfg(test)]
#[path = "packet_tests.rs"]
mod tests;

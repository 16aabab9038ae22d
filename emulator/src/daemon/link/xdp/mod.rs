//! The AF_XDP backend for RoCE v2 (`link add … backend xdp`): an XDP program on the
//! interface hands the device's RoCE v2 frames to AF_XDP sockets of the daemon, below the
//! kernel's IP stack; the daemon writes and reads whole frames as the packet backend does
//! (`packet.rs`: the same headers, next hops, ICRC check over the real IP header, DSCP
//! and ECN, counters), and differs only in how frames get in and out.
//!
//! - The program (`bpf.rs`, built here as eBPF instructions) redirects UDP 4791 to the
//!   device's addresses (a hash map the daemon keeps in step with the GID table) to the
//!   socket of the receive queue the frame arrived on, and passes everything else to the
//!   kernel. It is attached through a BPF link: native (driver) mode first, generic (SKB)
//!   mode when that fails (a driver without it; veth above an MTU of about 3500); the kernel detaches it when the link's descriptor
//!   closes, so neither `link del` nor a killed daemon leaves it behind. An interface
//!   that already has an XDP program is refused.
//! - One socket per receive queue (`xsk.rs`), each with a UMEM of 4 KiB frames, bound in
//!   copy mode (veth, the test network, has no zero-copy). A received frame must fit a
//!   frame less the kernel's headroom: the interface's MTU is at most
//!   [`MAX_NETDEV_MTU`] (RoCE MTU 2048), larger ones are refused.
//! - The device keeps its kernel UDP socket on 4791 of each address, which receives
//!   nothing (as with `packet`): frames the program passes (a queue without socket, IPv4
//!   options, fragments) then meet a bound port instead of ICMP port unreachable.
//!
//! Needs CAP_NET_ADMIN (attach), CAP_BPF (maps, program; or CAP_SYS_ADMIN) and
//! CAP_NET_RAW (AF_XDP sockets).

pub mod bpf;
pub mod xsk;

use super::backend::Backend;
use super::datagram::{BoundSocket, Caps, DatagramLink, Ports, Sock, NOWHERE};
use super::mmsg::{Outgoing, RecvBatch};
use super::packet::{self, PacketLink, Refused};
use crate::daemon::devices::netdev::{self, Netdev};
use std::cell::{Cell, RefCell};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Instant;
use xsk::Xsk;

/// Socket indices of the AF_XDP sockets in the engine's epoll tokens: this plus the
/// queue (GID slots lie below, multicast sockets from `datagram::MCAST_BASE` above).
pub const XSK_BASE: usize = 0x4000;
/// The largest interface MTU whose frames fit a UMEM frame.
pub const MAX_NETDEV_MTU: u32 = (xsk::MAX_RX_FRAME - 14) as u32;
/// Addresses one device serves at most (the address map's size).
const MAX_ADDRS: u32 = 256;
/// Receive queues served at most.
const MAX_QUEUES: u32 = 64;

/// How the program runs on the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// In the driver, before any socket buffer exists.
    Native,
    /// In the kernel's generic path (any interface; slower).
    Generic,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Generic => "generic",
        }
    }
}

/// What the xdp backend counts beyond the packet backend's frame counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XdpCounters {
    /// The kernel's counts, summed over the sockets (`XDP_STATISTICS`).
    pub xsk: xsk::XskStats,
    /// Descriptors from the kernel pointing outside the UMEM (dropped, never touched).
    pub bad_descs: u64,
    /// Frames not sent because the transmit ring or its frames were all in use.
    pub tx_ring_full: u64,
}

/// The AF_XDP side of one device.
#[derive(Debug)]
pub struct XdpLink {
    netdev: String,
    ifindex: u32,
    /// Writes frames, resolves next hops, verifies received frames, counts.
    frames: PacketLink,
    /// The device's addresses (the program's map).
    addrs: OwnedFd,
    mode: Mode,
    /// One socket per receive queue, by queue.
    sockets: Vec<RefCell<Xsk>>,
    /// Frames being sent (reused).
    staging: RefCell<Vec<Vec<u8>>>,
    tx_ring_full: Cell<u64>,
    // Dropped last: closing the link detaches the program.
    _xsks: OwnedFd,
    _prog: OwnedFd,
    _attached: OwnedFd,
}

/// What the error of a bpf(2) or AF_XDP call on `netdev` means, and what to do instead.
fn open_error(e: io::Error, netdev: &str, what: &str) -> io::Error {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "backend xdp on {netdev}: {what}: AF_XDP needs CAP_NET_ADMIN, CAP_BPF (or \
                 CAP_SYS_ADMIN) and CAP_NET_RAW (run rdma-emud as root or give it the \
                 capabilities); use backend udp or packet"
            ),
        ),
        Some(libc::EAFNOSUPPORT) | Some(libc::ENOSYS) | Some(libc::EINVAL)
            if what == "AF_XDP socket" || what == "bpf map" =>
        {
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "backend xdp on {netdev}: this kernel has no AF_XDP ({what}: {e}); use \
                     backend udp or packet"
                ),
            )
        }
        Some(libc::EBUSY) => io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!(
                "backend xdp on {netdev}: {what}: a queue of the interface is taken by another \
                 AF_XDP socket; use backend packet or udp"
            ),
        ),
        _ => io::Error::new(e.kind(), format!("backend xdp on {netdev}: {what}: {e}")),
    }
}

/// The receive queues of an interface (`/sys/class/net/IF/queues/rx-N`), at least one.
fn rx_queues(name: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(1)
        .clamp(1, MAX_QUEUES)
}

/// The IP destination of an Ethernet frame carrying IPv4 or IPv6 (no VLAN tag, as the
/// program redirects them).
fn dst_of(frame: &[u8]) -> Option<IpAddr> {
    match frame.get(12..14)? {
        [0x08, 0x00] => {
            let a: [u8; 4] = frame.get(30..34)?.try_into().ok()?;
            Some(IpAddr::V4(Ipv4Addr::from(a)))
        }
        [0x86, 0xdd] => {
            let a: [u8; 16] = frame.get(38..54)?.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(a)))
        }
        _ => None,
    }
}

impl XdpLink {
    /// Loads and attaches the program on `netdev` and opens a socket on each of its
    /// receive queues; fails saying why (capability, MTU, a program already there) and
    /// what to use instead.
    pub fn open(netdev: &Netdev) -> io::Result<XdpLink> {
        let name = netdev.name.as_str();
        // The capabilities first: that is what an xdp device most likely lacks.
        let addrs = bpf::map_create("hash", 16, 4, MAX_ADDRS)
            .map_err(|e| open_error(e, name, "bpf map"))?;
        Xsk::probe().map_err(|e| open_error(e, name, "AF_XDP socket"))?;
        if netdev.mtu > MAX_NETDEV_MTU {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "backend xdp on {name}: MTU {} does not fit a 4 KiB AF_XDP frame (at most \
                     {MAX_NETDEV_MTU}, which gives RoCE MTU 2048): lower it (ip link set {name} \
                     mtu {MAX_NETDEV_MTU}) or use backend packet or udp",
                    netdev.mtu
                ),
            ));
        }
        let queues = rx_queues(name);
        let xsks =
            bpf::map_create("xskmap", 4, 4, queues).map_err(|e| open_error(e, name, "bpf map"))?;
        let prog = bpf::prog_load(&bpf::roce_redirect(addrs.as_raw_fd(), xsks.as_raw_fd()))
            .map_err(|e| open_error(e, name, "loading the XDP program"))?;
        // The program first: an interface that has one is refused before its queues are
        // touched. Until the sockets are in the map, it passes every frame on.
        let (attached, mode) = attach(&prog, netdev)?;
        let mut sockets = Vec::new();
        for q in 0..queues {
            let x = Xsk::open(netdev.index, q).map_err(|e| open_error(e, name, "AF_XDP socket"))?;
            bpf::map_update(&xsks, &q.to_ne_bytes(), &(x.fd() as u32).to_ne_bytes())
                .map_err(|e| open_error(e, name, "XSKMAP"))?;
            sockets.push(RefCell::new(x));
        }
        tracing::info!(
            netdev = name,
            mode = mode.name(),
            queues,
            "XDP program attached"
        );
        Ok(XdpLink {
            netdev: netdev.name.clone(),
            ifindex: netdev.index,
            frames: PacketLink::frames_only(netdev),
            addrs,
            mode,
            sockets,
            staging: RefCell::new(Vec::new()),
            tx_ring_full: Cell::new(0),
            _xsks: xsks,
            _prog: prog,
            _attached: attached,
        })
    }

    /// How the program runs (`link show`).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Starts redirecting RoCE v2 frames to `ip`.
    fn add_addr(&self, ip: IpAddr) -> io::Result<()> {
        bpf::map_update(&self.addrs, &netdev::gid_of(ip), &1u32.to_ne_bytes())
            .map_err(|e| io::Error::new(e.kind(), format!("backend xdp on {}: {e}", self.netdev)))
    }

    /// Stops redirecting frames to `ip` (its address went away).
    fn remove_addr(&self, ip: IpAddr) {
        let _ = bpf::map_delete(&self.addrs, &netdev::gid_of(ip));
    }

    /// The counters of the sockets, summed.
    fn xdp_counters(&self) -> XdpCounters {
        let mut c = XdpCounters {
            tx_ring_full: self.tx_ring_full.get(),
            ..XdpCounters::default()
        };
        for x in &self.sockets {
            let x = x.borrow();
            let s = x.stats();
            c.bad_descs += x.bad_descs;
            c.xsk.rx_dropped += s.rx_dropped;
            c.xsk.rx_invalid_descs += s.rx_invalid_descs;
            c.xsk.tx_invalid_descs += s.tx_invalid_descs;
            c.xsk.rx_ring_full += s.rx_ring_full;
            c.xsk.rx_fill_ring_empty_descs += s.rx_fill_ring_empty_descs;
            c.xsk.tx_ring_empty_descs += s.tx_ring_empty_descs;
        }
        c
    }

    /// Receives a batch of frames on queue `queue` and leaves in `batch`, at its front,
    /// the RoCE datagrams (BTH through ICRC) that verify, with their sources, TOS octets
    /// and local addresses (`local_of`: the served address a destination is, with its
    /// port and scope), as the UDP backend would; returns how many.
    fn recv_queue(
        &self,
        queue: usize,
        local_of: impl Fn(IpAddr) -> Option<SocketAddr>,
        batch: &mut RecvBatch,
    ) -> usize {
        let Some(x) = self.sockets.get(queue) else {
            return 0;
        };
        let mut kept = 0;
        let max = batch.bufs.len();
        x.borrow_mut().receive(max, |f| {
            let Some((ip, local)) = dst_of(f).and_then(|ip| Some((ip, local_of(ip)?))) else {
                self.frames.count(|c| c.rx_malformed += 1);
                return;
            };
            match packet::accept(f, ip, self.ifindex) {
                Ok(r) => {
                    let buf = &mut batch.bufs[kept];
                    if r.len <= buf.len() {
                        buf[..r.len].copy_from_slice(&f[r.at..r.at + r.len]);
                        batch.lens[kept] = Some(r.len);
                        batch.srcs[kept] = Some(r.src);
                    } else {
                        // The engine counts it as truncated.
                        batch.lens[kept] = None;
                        batch.srcs[kept] = None;
                    }
                    batch.tos[kept] = Some(r.tos);
                    batch.dsts[kept] = Some(local);
                    kept += 1;
                }
                Err(Refused::Icrc) => self.frames.count(|c| c.rx_icrc_errors += 1),
                Err(Refused::Malformed) => self.frames.count(|c| c.rx_malformed += 1),
            }
        });
        kept
    }

    /// Sends datagrams from `src` (address and port) as frames on the first queue's
    /// socket; returns how many went out. Sending stops at the first destination whose
    /// next hop cannot be resolved, or when the transmit ring is full (those packets and
    /// the rest are lost on the wire; the transport retransmits).
    fn send_frames(&self, src: SocketAddr, msgs: &[Outgoing<'_>]) -> usize {
        let Some(x) = self.sockets.first() else {
            return 0;
        };
        let now = Instant::now();
        let mut staging = self.staging.borrow_mut();
        if staging.len() < msgs.len() {
            staging.resize_with(msgs.len(), || Vec::with_capacity(xsk::FRAME));
        }
        let mut ready = 0;
        for (i, m) in msgs.iter().enumerate() {
            if !self.frames.frame_for(&mut staging[i], src, m, now) {
                break;
            }
            ready += 1;
        }
        let sent = x
            .borrow_mut()
            .transmit(staging[..ready].iter().map(Vec::as_slice));
        if sent < ready {
            self.tx_ring_full
                .set(self.tx_ring_full.get() + (ready - sent) as u64);
        }
        sent
    }
}

impl DatagramLink for XdpLink {
    fn backend(&self) -> Backend {
        Backend::Xdp
    }

    fn caps(&self) -> Caps {
        Caps {
            writes_headers: true,
        }
    }

    fn open_slot(&mut self, _slot: usize, port: &BoundSocket) -> io::Result<()> {
        self.add_addr(port.local.ip())
    }

    fn close_slot(&mut self, _slot: usize, ip: IpAddr) -> Vec<BoundSocket> {
        self.remove_addr(ip);
        Vec::new()
    }

    /// The AF_XDP sockets, from [`XSK_BASE`] on: they serve every address.
    fn watch(&self, _ports: &Ports) -> Vec<(usize, RawFd)> {
        self.sockets
            .iter()
            .enumerate()
            .map(|(q, x)| (XSK_BASE + q, x.borrow().fd()))
            .collect()
    }

    fn fd(&self, _ports: &Ports, _slot: usize) -> Option<RawFd> {
        None
    }

    fn recv_batch(
        &self,
        ports: &Ports,
        sock: usize,
        batch: &mut RecvBatch,
    ) -> io::Result<(usize, SocketAddr)> {
        let Some(queue) = sock.checked_sub(XSK_BASE) else {
            return Ok((0, NOWHERE));
        };
        let local_of = |ip: IpAddr| {
            ports
                .iter()
                .flatten()
                .find(|s| s.local.ip() == ip)
                .map(|s| s.local)
        };
        Ok((self.recv_queue(queue, local_of, batch), NOWHERE))
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
        let Some(Some(s)) = ports.get(slot) else {
            return Ok(0);
        };
        Ok(self.send_frames(SocketAddr::new(s.local.ip(), port), msgs))
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let p = self.frames.frame_counters();
        let x = self.xdp_counters();
        let (resolved, unresolved) = self.frames.neighbour_counters();
        [
            ("xdp_rx_icrc_errors", p.rx_icrc_errors),
            ("xdp_rx_malformed", p.rx_malformed),
            ("xdp_rx_bad_descs", x.bad_descs),
            ("xdp_rx_dropped", x.xsk.rx_dropped),
            ("xdp_rx_ring_full", x.xsk.rx_ring_full),
            (
                "xdp_rx_fill_ring_empty_descs",
                x.xsk.rx_fill_ring_empty_descs,
            ),
            ("xdp_rx_invalid_descs", x.xsk.rx_invalid_descs),
            ("xdp_tx_invalid_descs", x.xsk.tx_invalid_descs),
            ("xdp_tx_ring_full", x.tx_ring_full),
            ("xdp_tx_no_neighbour", p.tx_no_neighbour),
            ("xdp_neigh_resolved", resolved),
            ("xdp_neigh_unresolved", unresolved),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// Attaches the program through a BPF link, natively when the driver can, else in
/// generic mode; refuses an interface that already has a program.
fn attach(prog: &OwnedFd, netdev: &Netdev) -> io::Result<(OwnedFd, Mode)> {
    let name = &netdev.name;
    let taken = |e: &io::Error| matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EEXIST));
    let refuse = |e: io::Error| {
        if taken(&e) {
            io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "backend xdp on {name}: the interface already has an XDP program \
                     (ip -d link show {name}); remove it or use backend packet or udp"
                ),
            )
        } else {
            open_error(e, name, "attaching the XDP program")
        }
    };
    match bpf::link_create(prog, netdev.index, bpf::XDP_FLAGS_DRV_MODE) {
        Ok(l) => return Ok((l, Mode::Native)),
        Err(e) if taken(&e) || e.raw_os_error() == Some(libc::EPERM) => return Err(refuse(e)),
        Err(e) => tracing::debug!(netdev = %name, "no native XDP ({e}); generic mode"),
    }
    bpf::link_create(prog, netdev.index, bpf::XDP_FLAGS_SKB_MODE)
        .map(|l| (l, Mode::Generic))
        .map_err(refuse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_name_their_ip_destination_or_nothing() {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[30..34].copy_from_slice(&[10, 1, 0, 2]);
        assert_eq!(dst_of(&f), Some("10.1.0.2".parse().unwrap()));
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(dst_of(&f), Some(IpAddr::V6(Ipv6Addr::from([0; 16]))));
        assert_eq!(dst_of(&f[..40]), None, "short IPv6");
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        assert_eq!(dst_of(&f), None, "VLAN tagged");
        assert_eq!(dst_of(&[]), None);
    }

    proptest::proptest! {
        /// Bytes from the wire are refused or accepted, never a panic.
        #[test]
        fn any_frame_is_refused_or_accepted_without_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
            ethertype in 0usize..3,
        ) {
            let mut bytes = bytes;
            if bytes.len() >= 14 {
                let types = [[0x08, 0x00], [0x86, 0xdd], [0x81, 0x00]];
                bytes[12..14].copy_from_slice(&types[ethertype]);
            }
            if let Some(ip) = dst_of(&bytes) {
                let _ = packet::accept(&bytes, ip, 1);
            }
        }
    }

    #[test]
    fn the_mtu_limit_leaves_room_for_a_2048_roce_mtu() {
        assert_eq!(MAX_NETDEV_MTU, 3826);
        assert_eq!(netdev::ib_mtu_for(MAX_NETDEV_MTU), 2048);
    }
}

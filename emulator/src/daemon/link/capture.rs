//! Packet capture: every frame a device sends and receives, as Ethernet / IP / UDP / RoCE
//! frames in a pcap stream written to a pipe (`rdma-emu capture DEVICE FILE.pcap`).
//!
//! [`Captured`] wraps any [`DatagramLink`] (DESIGN decision 5): what the link sent and what
//! it received is recorded on the way, so the data path knows nothing of captures. With
//! no stream open, a batch costs one emptiness check.
//!
//! The kernel UDP socket hides the IP header: frames are rebuilt with `wire::frame`
//! (IPv4 with DF and IP ID 0, what Linux sends for our sockets), so the ICRC of every frame
//! this daemon sent verifies in the capture.

use super::backend::Backend;
use super::datagram::{BoundSocket, Caps, DatagramLink, Ports, Sock};
use super::mmsg::{Outgoing, RecvBatch};
use crate::daemon::sys;
use std::cell::RefCell;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Instant;
use std::time::{SystemTime, UNIX_EPOCH};
use wire::frame::{build_udp, FrameAddrs};

/// Bytes kept for a reader that lags before frames are dropped.
const MAX_PENDING: usize = 4 << 20;

/// One capture stream.
#[derive(Debug)]
pub struct Capture {
    fd: OwnedFd,
    /// The device's MAC, both ends of every frame (the IP header is rebuilt; the next
    /// hop is not known here).
    mac: [u8; 6],
    pending: Vec<u8>,
    pub dropped: u64,
    closed: bool,
}

/// pcap global header: magic, version 2.4, no time zone, snaplen 65535, LINKTYPE_ETHERNET.
fn pcap_header() -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    h[16..20].copy_from_slice(&65535u32.to_le_bytes());
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h
}

impl Capture {
    /// Starts a stream on the write end of a pipe (made nonblocking), for a device whose
    /// interface has `mac`.
    pub fn new(fd: OwnedFd, mac: [u8; 6]) -> std::io::Result<Capture> {
        sys::set_nonblocking(fd.as_raw_fd())?;
        let mut c = Capture {
            fd,
            mac,
            pending: pcap_header().to_vec(),
            dropped: 0,
            closed: false,
        };
        c.flush();
        Ok(c)
    }

    /// Whether the reader went away (the capture is over).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Records one datagram (`payload` = the UDP payload) between `src` and `dst`.
    pub fn record(&mut self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        if self.closed || src.is_ipv4() != dst.is_ipv4() {
            return;
        }
        let addrs = FrameAddrs {
            eth_src: self.mac,
            eth_dst: self.mac,
            src: src.ip(),
            dst: dst.ip(),
        };
        let frame = build_udp(&addrs, src.port(), dst.port(), 0, payload);
        if self.pending.len() + frame.len() + 16 > MAX_PENDING {
            self.dropped += 1;
            return;
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let len = frame.len() as u32;
        self.pending
            .extend_from_slice(&(ts.as_secs() as u32).to_le_bytes());
        self.pending
            .extend_from_slice(&ts.subsec_micros().to_le_bytes());
        self.pending.extend_from_slice(&len.to_le_bytes());
        self.pending.extend_from_slice(&len.to_le_bytes());
        self.pending.extend_from_slice(&frame);
        self.flush();
    }

    /// Writes as much pending data as the pipe takes.
    pub fn flush(&mut self) {
        while !self.pending.is_empty() && !self.closed {
            match sys::write_some(self.fd.as_raw_fd(), &self.pending) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) => match e.kind() {
                    std::io::ErrorKind::Interrupted => continue,
                    std::io::ErrorKind::WouldBlock => return,
                    _ => self.closed = true,
                },
            }
        }
    }
}

/// A link whose datagrams are captured: the streams of `rdma-emu capture` on its device.
#[derive(Debug, Default)]
pub struct Captured<L> {
    link: L,
    streams: RefCell<Vec<Capture>>,
}

impl<L> Captured<L> {
    pub fn new(link: L) -> Captured<L> {
        Captured {
            link,
            streams: RefCell::new(Vec::new()),
        }
    }

    /// The link inside.
    pub fn inner(&self) -> &L {
        &self.link
    }

    /// Whether any stream records.
    pub fn capturing(&self) -> bool {
        !self.streams.borrow().is_empty()
    }

    /// Starts recording into `stream`.
    pub fn add(&mut self, stream: Capture) {
        self.streams.get_mut().push(stream);
    }

    /// Records one datagram from `src` to `dst` (one the link did not carry: the local
    /// path, a multicast group socket).
    pub fn record(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        let mut streams = self.streams.borrow_mut();
        for c in streams.iter_mut() {
            c.record(src, dst, payload);
        }
    }

    /// Records the first `n` packets of `batch`, received on `local` (unless the batch
    /// names each packet's own).
    pub fn record_received(&self, batch: &RecvBatch, n: usize, local: SocketAddr) {
        let mut streams = self.streams.borrow_mut();
        if streams.is_empty() {
            return;
        }
        for i in 0..n {
            if let (Some(len), Some(src)) = (batch.lens[i], batch.srcs[i]) {
                let dst = batch.dsts[i].unwrap_or(local);
                for c in streams.iter_mut() {
                    c.record(src, dst, batch.payload(i, len));
                }
            }
        }
    }

    /// Writes what the pipes take, and ends the streams whose reader went away.
    pub fn flush(&mut self) {
        let streams = self.streams.get_mut();
        if streams.is_empty() {
            return;
        }
        streams.iter_mut().for_each(Capture::flush);
        streams.retain(|c| !c.is_closed());
    }
}

/// The address packets sent from `from` leave with.
fn source_of(ports: &Ports, from: Sock) -> Option<SocketAddr> {
    match from {
        Sock::Slot(i) => ports.get(i)?.as_ref().map(|s| s.local),
        Sock::Sender((ip, port)) => Some(SocketAddr::new(ip, port)),
        Sock::Frames(i, port) => ports
            .get(i)?
            .as_ref()
            .map(|s| SocketAddr::new(s.local.ip(), port)),
    }
}

impl<L: DatagramLink> DatagramLink for Captured<L> {
    fn backend(&self) -> Backend {
        self.link.backend()
    }
    fn caps(&self) -> Caps {
        self.link.caps()
    }
    fn open_slot(&mut self, slot: usize, port: &BoundSocket) -> io::Result<()> {
        self.link.open_slot(slot, port)
    }
    fn close_slot(&mut self, slot: usize, ip: IpAddr) -> Vec<BoundSocket> {
        self.link.close_slot(slot, ip)
    }
    fn watch(&self, ports: &Ports) -> Vec<(usize, RawFd)> {
        self.link.watch(ports)
    }
    fn fd(&self, ports: &Ports, slot: usize) -> Option<RawFd> {
        self.link.fd(ports, slot)
    }
    fn socket_for(&self, ports: &Ports, src: SocketAddr) -> Option<Sock> {
        self.link.socket_for(ports, src)
    }
    fn prepare(&mut self, ports: &Ports, src: SocketAddr, now: Instant) {
        self.link.prepare(ports, src, now)
    }

    /// Records every packet the link received.
    fn recv_batch(
        &self,
        ports: &Ports,
        sock: usize,
        batch: &mut RecvBatch,
    ) -> io::Result<(usize, SocketAddr)> {
        let (n, local) = self.link.recv_batch(ports, sock, batch)?;
        self.record_received(batch, n, local);
        Ok((n, local))
    }

    /// Records the packets the link took (the rest never reached the wire).
    fn send_batch(
        &self,
        ports: &Ports,
        from: Sock,
        msgs: &mut [Outgoing<'_>],
    ) -> io::Result<usize> {
        let sent = self.link.send_batch(ports, from, msgs)?;
        let mut streams = self.streams.borrow_mut();
        if let (false, Some(src)) = (streams.is_empty(), source_of(ports, from)) {
            for m in &msgs[..sent] {
                for c in streams.iter_mut() {
                    c.record(src, m.dst, m.payload);
                }
            }
        }
        Ok(sent)
    }

    fn counters(&self) -> Vec<(String, u64)> {
        self.link.counters()
    }
}

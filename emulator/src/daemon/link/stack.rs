//! A device's link stack: the layers a RoCE device's datagrams pass through between the
//! core and the wire, each a [`Layer`] that wraps the one below (DESIGN decision 5).
//!
//! ```text
//!  core ─► Faulty (fault.rs's rules: tx on the way down, rx on the way up)
//!            └► Local (a packet to the device's own address loops back up)
//!                 └► UdpBackend (4791 sockets, group sockets, Captured<AnyLink>)
//! ```
//!
//! A layer speaks addressed datagrams (buffers with their `TxMeta` down, [`Arrival`]s up); the socket-level
//! [`DatagramLink`](super::datagram::DatagramLink) of the backends (and the capture that
//! wraps them) is inside the bottom layer. What comes up carries what the layers above
//! the core decided for it: how many copies to deliver and the response the core's
//! responder must give it (a forced RNR or NAK), which the device sets on the core just
//! before it delivers the packet.

use super::mmsg::{Outgoing, RecvBatch};
use super::udp::UdpBackend;
use crate::daemon::devices::nic::TxMeta;
use emu_core::ForcedResponse;
use std::io;
use std::net::SocketAddr;
use std::time::Instant;

/// The socket index of the local path's loopback queue (above the group sockets'
/// [`MCAST_BASE`](super::datagram::MCAST_BASE) range, which ends at `0xffff`).
pub const LOOPBACK: usize = 0x1_0000;

/// What a send did, for the device's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Datagrams the link took.
    pub sent: u64,
    /// Datagrams that could not leave (no socket for their source, a full socket): lost
    /// on the wire, and the transport retransmits.
    pub errors: u64,
    /// Datagrams that looped back to the device itself (sent and received at once).
    pub looped: u64,
}

impl std::ops::AddAssign for Sent {
    fn add_assign(&mut self, o: Sent) {
        self.sent += o.sent;
        self.errors += o.errors;
        self.looped += o.looped;
    }
}

/// Where a received packet's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// Packet `i` of the receive batch, `len` bytes.
    Batch { i: usize, len: usize },
    /// An owned copy in [`Arrivals`] (the loopback queue, a packet held back and let go).
    Owned(usize),
}

/// One packet on its way up, and what the layers decided for it.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The TOS / traffic class octet it came with, when the socket reports it (its ECN
    /// bits count whether or not the packet is delivered).
    pub tos: Option<u8>,
    /// The bytes as they arrived.
    pub body: Body,
    /// The bytes to deliver instead (a corrupted copy), in [`Arrivals`].
    pub replaced: Option<usize>,
    /// How many times it is delivered: 1, 2 when duplicated, 0 when dropped or held back.
    pub copies: u8,
    /// The response the core's responder must give it (QPN, response), set right before
    /// each copy is delivered.
    pub force: Option<(u32, ForcedResponse)>,
}

/// The packets one receive brought up, in order.
#[derive(Debug, Default)]
pub struct Arrivals {
    pub items: Vec<Arrival>,
    owned: Vec<Vec<u8>>,
    /// Packets too large for a receive buffer (dropped before any layer saw them).
    pub truncated: u64,
}

impl Arrivals {
    /// Empties the list; the buffers of owned packets, for reuse.
    pub fn clear(&mut self) -> std::vec::Drain<'_, Vec<u8>> {
        self.items.clear();
        self.truncated = 0;
        self.owned.drain(..)
    }

    /// Adds packet `i` of a receive batch.
    pub fn push_batch(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        tos: Option<u8>,
        i: usize,
        len: usize,
    ) {
        self.items.push(Arrival {
            src,
            dst,
            tos,
            body: Body::Batch { i, len },
            replaced: None,
            copies: 1,
            force: None,
        });
    }

    /// Adds a packet the layers hold the bytes of.
    pub fn push_owned(&mut self, src: SocketAddr, dst: SocketAddr, bytes: Vec<u8>) {
        let body = Body::Owned(self.keep(bytes));
        self.items.push(Arrival {
            src,
            dst,
            tos: None,
            body,
            replaced: None,
            copies: 1,
            force: None,
        });
    }

    /// Keeps `bytes` for an arrival; where they are.
    pub fn keep(&mut self, bytes: Vec<u8>) -> usize {
        self.owned.push(bytes);
        self.owned.len() - 1
    }

    /// The bytes of `a` as they arrived.
    pub fn arrived<'a>(&'a self, a: &Arrival, batch: &'a RecvBatch) -> &'a [u8] {
        match a.body {
            Body::Batch { i, len } => batch.payload(i, len),
            Body::Owned(o) => &self.owned[o],
        }
    }

    /// The bytes of `a` to deliver.
    pub fn delivered<'a>(&'a self, a: &Arrival, batch: &'a RecvBatch) -> &'a [u8] {
        match a.replaced {
            Some(o) => &self.owned[o],
            None => self.arrived(a, batch),
        }
    }
}

/// What a device receives its local path's loopback into, kept between passes so that a
/// looped packet costs no allocation: the arrivals, and the empty receive batch their
/// owned bodies are read beside.
#[derive(Debug)]
pub struct LoopScratch {
    pub arrivals: Arrivals,
    pub batch: RecvBatch,
}

impl Default for LoopScratch {
    fn default() -> LoopScratch {
        LoopScratch {
            arrivals: Arrivals::default(),
            batch: RecvBatch::new(0, 0),
        }
    }
}

/// One layer of a device's link stack.
pub trait Layer {
    /// Sends datagrams (`bufs[i]` with `meta[i]`) at `now`. A layer may take a buffer
    /// (leaving another in its place): the caller refills them anyway.
    fn send(&mut self, now: Instant, bufs: &mut [Vec<u8>], meta: &[TxMeta]) -> Sent;
    /// Receives a batch on socket index `sock` (one the engine watches, or
    /// [`LOOPBACK`]) into `batch`, appending the packets to `arrivals`; how many packets
    /// the socket gave (a full batch: there may be more).
    fn recv(
        &mut self,
        now: Instant,
        sock: usize,
        batch: &mut RecvBatch,
        arrivals: &mut Arrivals,
    ) -> io::Result<usize>;
    /// Whether `dst` is one of the device's own bound addresses.
    fn serves(&self, dst: SocketAddr) -> bool;
    /// Records a datagram on the device's captures (one no link carried).
    fn record(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]);
}

/// The bottom of the stack: the device's sockets and the link (with its captures).
impl Layer for UdpBackend {
    /// Sends the datagrams, batching consecutive ones that leave from the same socket.
    /// The socket is looked up once per run of packets from one source (a QP's packets
    /// come in runs), not per packet: the lookups hash the address.
    fn send(&mut self, now: Instant, bufs: &mut [Vec<u8>], meta: &[TxMeta]) -> Sent {
        for (i, m) in meta.iter().enumerate() {
            if i == 0 || meta[i - 1].src != m.src {
                self.ensure_sender(m.src, now);
            }
        }
        let mut done = Sent::default();
        let mut at = 0;
        while at < meta.len() {
            let Some(sock) = self.socket_for(meta[at].src) else {
                done.errors += 1;
                at += 1;
                continue;
            };
            let mut end = at + 1;
            while end < meta.len()
                && (meta[end].src == meta[end - 1].src
                    || self.socket_for(meta[end].src) == Some(sock))
            {
                end += 1;
            }
            let mut msgs: Vec<Outgoing<'_>> = (at..end)
                .map(|i| Outgoing {
                    dst: meta[i].dst,
                    traffic_class: meta[i].traffic_class,
                    payload: &bufs[i],
                })
                .collect();
            let sent = match self.send_batch(sock, &mut msgs) {
                Ok(n) => n,
                Err(e) => {
                    tracing::trace!(error = %e, "UDP send failed");
                    0
                }
            };
            // Unsent packets are lost on the wire: the transport retransmits.
            done.sent += sent as u64;
            done.errors += (end - at - sent) as u64;
            at = end;
        }
        done
    }

    fn recv(
        &mut self,
        _now: Instant,
        sock: usize,
        batch: &mut RecvBatch,
        arrivals: &mut Arrivals,
    ) -> io::Result<usize> {
        let (n, local) = self.recv_batch(sock, batch)?;
        for i in 0..n {
            let (Some(len), Some(src)) = (batch.lens[i], batch.srcs[i]) else {
                arrivals.truncated += 1;
                continue;
            };
            let dst = batch.dsts[i].unwrap_or(local);
            arrivals.push_batch(src, dst, batch.tos[i], i, len);
        }
        Ok(n)
    }

    fn serves(&self, dst: SocketAddr) -> bool {
        // Multicast always goes through the kernel, which loops it back to this device's
        // group sockets as to every other listener (IP_MULTICAST_LOOP).
        !dst.ip().is_multicast()
            && self
                .bound()
                .any(|(_, s)| s.local.ip() == dst.ip() && s.local.port() == dst.port())
    }

    fn record(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        UdpBackend::record(self, src, dst, payload);
    }
}

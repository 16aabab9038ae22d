//! The local path as a layer of the link stack: a packet a device sends to one of its own
//! addresses loops back to its receive side instead of going through the kernel (the
//! daemon's `local_path` option, on by default), the way a NIC serves two QPs of one port.
//!
//! Sending queues the packet; the device then receives the queue as a socket of its own
//! ([`LOOPBACK`]), so the layers above see a looped packet arrive as they see one from
//! the wire (fault rules included). The captures record it twice, as sent and as
//! received, as they would on a wire.

use super::mmsg::RecvBatch;
use super::stack::{Arrivals, Layer, Sent, LOOPBACK};
use crate::daemon::devices::nic::TxMeta;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::Instant;

/// A packet on its way round.
#[derive(Debug)]
struct Looped {
    src: SocketAddr,
    dst: SocketAddr,
    bytes: Vec<u8>,
}

/// A link with the device's loopback in front of it.
#[derive(Debug, Default)]
pub struct Local<L> {
    link: L,
    /// Whether packets to the device's own addresses loop back (`local_path`).
    enabled: bool,
    queue: VecDeque<Looped>,
    /// Buffers that came back from the receive side, swapped into the sender's place for
    /// the ones that loop (no copy, no allocation per packet).
    spare: Vec<Vec<u8>>,
}

/// Spare buffers kept at most.
const MAX_SPARE: usize = 256;

impl<L> Local<L> {
    /// `link` with the loopback on.
    pub fn new(link: L) -> Local<L> {
        Local {
            link,
            enabled: true,
            queue: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    /// The link below.
    pub fn inner(&self) -> &L {
        &self.link
    }

    /// The link below.
    pub fn inner_mut(&mut self) -> &mut L {
        &mut self.link
    }

    /// Turns the loopback on or off (the daemon's `local_path` option).
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// Whether packets wait to be received on [`LOOPBACK`].
    pub fn looped(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Takes back buffers the receive side is done with.
    pub fn recycle(&mut self, bufs: impl Iterator<Item = Vec<u8>>) {
        let room = MAX_SPARE.saturating_sub(self.spare.len());
        self.spare.extend(bufs.take(room));
    }
}

impl<L: Layer> Layer for Local<L> {
    /// Queues what is addressed to the device itself; sends the rest through the link,
    /// each run of packets between looped ones in one call.
    fn send(&mut self, now: Instant, bufs: &mut [Vec<u8>], meta: &[TxMeta]) -> Sent {
        if !self.enabled || !meta.iter().any(|m| self.link.serves(m.dst)) {
            return self.link.send(now, bufs, meta);
        }
        let mut done = Sent::default();
        let mut run = 0;
        for i in 0..meta.len() {
            let TxMeta { src, dst, .. } = meta[i];
            if !self.link.serves(dst) {
                continue;
            }
            if run < i {
                done += self.link.send(now, &mut bufs[run..i], &meta[run..i]);
            }
            run = i + 1;
            self.link.record(src, dst, &bufs[i]);
            self.link.record(src, dst, &bufs[i]);
            let spare = self.spare.pop().unwrap_or_default();
            let bytes = std::mem::replace(&mut bufs[i], spare);
            self.queue.push_back(Looped { src, dst, bytes });
            done.looped += 1;
        }
        if run < meta.len() {
            done += self.link.send(now, &mut bufs[run..], &meta[run..]);
        }
        done
    }

    /// Takes the queue on [`LOOPBACK`]; anything else comes from the link.
    fn recv(
        &mut self,
        now: Instant,
        sock: usize,
        batch: &mut RecvBatch,
        arrivals: &mut Arrivals,
    ) -> io::Result<usize> {
        if sock != LOOPBACK {
            return self.link.recv(now, sock, batch, arrivals);
        }
        let n = self.queue.len();
        for p in self.queue.drain(..) {
            arrivals.push_owned(p.src, p.dst, p.bytes);
        }
        Ok(n)
    }

    fn serves(&self, dst: SocketAddr) -> bool {
        self.link.serves(dst)
    }

    fn record(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        self.link.record(src, dst, payload);
    }
}

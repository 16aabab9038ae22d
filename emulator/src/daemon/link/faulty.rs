//! Fault injection as a layer of the link stack (DESIGN decision 5): [`Faulty`] takes
//! what a device sends through `fault.rs`'s rules on the way down (`tx`) and what it
//! receives on the way up (`rx`), over any layer below: a backend, or the local path
//! that loops a device's packets to itself.
//!
//! The layer reaches nothing outside itself. A forced RNR or NAK travels up with the
//! packet ([`Arrival::force`]) for the device to set on the core; a rule's `--qp` filter
//! on sent packets matches by the remote QP the filtered QP sends to, which the device
//! tells the layer before each send ([`Faulty::learn_qps`]).

use super::fault::{Faults, Passage};
use super::mmsg::RecvBatch;
use super::stack::{Arrivals, Layer, Sent};
use crate::daemon::devices::nic::TxMeta;
use std::borrow::Cow;
use std::io;
use std::net::SocketAddr;
use std::time::Instant;
use wire::client::fault::Direction;

/// A link whose packets pass through a device's fault rules.
#[derive(Debug, Default)]
pub struct Faulty<L> {
    link: L,
    faults: Faults,
    /// A local QP named by a rule's `--qp` → the remote QP it sends to (`None`: no
    /// such QP), as the device last told.
    qp_dests: Vec<(u32, Option<u32>)>,
}

impl<L> Faulty<L> {
    /// `link` with no rules.
    pub fn new(link: L) -> Faulty<L> {
        Faulty {
            link,
            faults: Faults::default(),
            qp_dests: Vec::new(),
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

    /// The rules, held packets and link state.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The rules, held packets and link state.
    pub fn faults_mut(&mut self) -> &mut Faults {
        &mut self.faults
    }

    /// Learns, before a send, the remote QP of each local QP a rule's `--qp` names
    /// (`dest_of`: the core's answer), so the rules can tell which QP sends a packet.
    pub fn learn_qps(&mut self, dest_of: impl Fn(u32) -> Option<u32>) {
        self.qp_dests.clear();
        if !self.faults.active() {
            return;
        }
        for q in self.faults.filtered_qps() {
            if !self.qp_dests.iter().any(|&(k, _)| k == q) {
                self.qp_dests.push((q, dest_of(q)));
            }
        }
    }

    /// A forced response no request took (a duplicate or out-of-order PSN).
    pub fn forced_unused(&mut self) {
        self.faults.forced_unused();
    }
}

impl<L: Layer> Faulty<L> {
    /// Lets go of the held packets whose time has come: sent ones go down now, received
    /// ones are appended to `arrivals` (as they arrived, with no forced response).
    pub fn release(&mut self, now: Instant, arrivals: &mut Arrivals) -> Sent {
        let due = self.faults.take_due(now);
        if due.is_empty() {
            return Sent::default();
        }
        let mut bufs = Vec::new();
        let mut meta = Vec::new();
        for h in due {
            match h.dir {
                Direction::Tx => {
                    bufs.push(h.bytes);
                    meta.push(TxMeta {
                        src: h.src,
                        dst: h.dst,
                        traffic_class: h.traffic_class,
                    });
                }
                Direction::Rx => arrivals.push_owned(h.src, h.dst, h.bytes),
            }
        }
        self.link.send(now, &mut bufs, &meta)
    }
}

impl<L: Layer> Layer for Faulty<L> {
    /// Takes each packet through the `tx` rules, then sends what goes on now (duplicates
    /// twice); the held ones leave with [`Faulty::release`].
    fn send(&mut self, now: Instant, bufs: &mut [Vec<u8>], meta: &[TxMeta]) -> Sent {
        if !self.faults.active() {
            return self.link.send(now, bufs, meta);
        }
        let mut out_bufs = Vec::with_capacity(bufs.len());
        let mut out_meta = Vec::with_capacity(meta.len());
        let dests = &self.qp_dests;
        let dest_of = |q| dests.iter().find(|&&(k, _)| k == q).and_then(|&(_, d)| d);
        for (buf, &m) in bufs.iter().zip(meta) {
            let passage = self.faults.pass(
                now,
                Direction::Tx,
                m.src,
                m.dst,
                m.traffic_class,
                buf,
                &dest_of,
            );
            if let Passage::Through { bytes, copies, .. } = passage {
                let bytes = bytes.into_owned();
                for _ in 1..copies {
                    out_bufs.push(bytes.clone());
                    out_meta.push(m);
                }
                out_bufs.push(bytes);
                out_meta.push(m);
            }
        }
        self.link.send(now, &mut out_bufs, &out_meta)
    }

    /// Receives from the link, then takes each packet through the `rx` rules: what they
    /// drop or hold stays in the list with no copy to deliver (its ECN mark still
    /// counts), a corrupted one carries its changed bytes, a forced response its slot.
    fn recv(
        &mut self,
        now: Instant,
        sock: usize,
        batch: &mut RecvBatch,
        arrivals: &mut Arrivals,
    ) -> io::Result<usize> {
        let first = arrivals.items.len();
        let n = self.link.recv(now, sock, batch, arrivals)?;
        if !self.faults.active() {
            return Ok(n);
        }
        for k in first..arrivals.items.len() {
            let a = arrivals.items[k];
            let bytes = arrivals.arrived(&a, batch);
            let passage = self
                .faults
                .pass(now, Direction::Rx, a.src, a.dst, 0, bytes, &|_| None);
            let (changed, copies, force) = match passage {
                Passage::Gone => (None, 0, None),
                Passage::Through {
                    bytes,
                    copies,
                    force,
                } => {
                    let changed = match bytes {
                        Cow::Owned(v) => Some(v),
                        Cow::Borrowed(_) => None,
                    };
                    (changed, copies, force)
                }
            };
            let replaced = changed.map(|v| arrivals.keep(v));
            let a = &mut arrivals.items[k];
            a.replaced = replaced;
            a.copies = copies;
            a.force = force;
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

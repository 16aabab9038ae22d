//! The data path: draining SQ/RQ/SRQ rings into the core, driving the core's timers and
//! output (transmits, completions into CQ rings, async events into pipes).

use crate::daemon::datapath::notify::{deliver_cqe, send_event};
use crate::daemon::devices::device::ServedDevice;
use crate::daemon::devices::io::transmit;
use crate::daemon::devices::memory::ProcMem;
use crate::daemon::devices::nic::{EventElement, Nic, TxMeta};
use crate::daemon::sessions::clients::DaemonCounters;
use crate::daemon::sessions::objects::{Kind, Object, Qp, Ring};
use crate::daemon::sys::Mapping;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;
use wire::client::proto::Handle;
use wire::client::slot::{CqeRepr, RecvWqe, RecvWqeRepr, SendData, SendWqe, SendWqeRepr};
use wire::client::verbs::{event_type, qp_type, wc_opcode, wc_status, wr_opcode};
use wire::client::{Consumer, RingError};

/// WQEs taken from one ring per pass (fairness between QPs).
const RING_BATCH: usize = 64;
/// Largest slot the daemon creates (send WQE with 32 SGEs or 512 inline bytes).
const MAX_SLOT: usize = 1024;
/// sendmmsg batches per pass and device.
const TX_ROUNDS: usize = 16;

/// The completion opcode of a send WQE opcode (for error completions the daemon makes).
fn wc_of_wr(op: u8) -> u32 {
    match op {
        wr_opcode::RDMA_WRITE | wr_opcode::RDMA_WRITE_WITH_IMM => wc_opcode::RDMA_WRITE,
        wr_opcode::RDMA_READ => wc_opcode::RDMA_READ,
        wr_opcode::ATOMIC_CMP_AND_SWP => wc_opcode::COMP_SWAP,
        wr_opcode::ATOMIC_FETCH_AND_ADD => wc_opcode::FETCH_ADD,
        wr_opcode::BIND_MW => wc_opcode::BIND_MW,
        wr_opcode::LOCAL_INV => wc_opcode::LOCAL_INV,
        _ => wc_opcode::SEND,
    }
}

fn error_cqe(wr_id: u64, opcode: u32, status: u32, errno: i32, qpn: u32) -> CqeRepr {
    CqeRepr {
        wr_id,
        status,
        opcode,
        vendor_err: errno as u32,
        qp_num: qpn,
        ..CqeRepr::default()
    }
}

/// Checks a send WQE against the QP it was posted to (what rdma-core/rxe's post_send
/// refuses with EINVAL); the core checks the rest.
fn check_send(wqe: &SendWqeRepr<'_>, qp: &Qp) -> Result<(), (u32, i32)> {
    match wqe.data {
        SendData::Sges(s) if s.len() as u32 > qp.cap.max_send_sge => {
            return Err((wc_status::LOC_LEN_ERR, libc::EINVAL))
        }
        SendData::Inline(d) if d.len() as u32 > qp.cap.max_inline_data => {
            return Err((wc_status::LOC_LEN_ERR, libc::EINVAL))
        }
        _ => {}
    }
    Ok(())
}

/// Publishes a receive ring's consumer index: the WQEs read, less the `outstanding` ones
/// the core still holds (all of them released when the device does not say).
fn release(ring: &Ring, map: &Mapping, outstanding: Option<usize>) {
    if ring.broken.get() {
        return;
    }
    if let Some(view) = ring.view(map) {
        let read = ring.index.get();
        let held = outstanding.map_or(0, |n| n as u64);
        Consumer::with_index(view, read).release_to(read.wrapping_sub(held));
    }
}

/// Gives back to the shim the ring slots of QP or SRQ `h`'s receives that completed, or
/// that a reset dropped: the published consumer index is the WQEs read minus those the
/// core still holds (`wire::client::ring`). A QP on an SRQ releases the SRQ's.
fn release_recv_slots(objects: &BTreeMap<Handle, Object>, nic: &dyn Nic, h: Handle) {
    let srq = match objects.get(&h).map(|o| &o.kind) {
        Some(Kind::Qp(qp)) => {
            if let Some(rq) = &qp.rq {
                release(rq, &qp.map, nic.recv_outstanding(qp.qpn));
            }
            qp.srq.and_then(|s| objects.get(&s)).map(|o| &o.kind)
        }
        other => other,
    };
    if let Some(Kind::Srq(s)) = srq {
        release(&s.ring, &s.map, nic.srq_outstanding(s.id));
    }
}

fn is_xrc_tgt(objects: &BTreeMap<Handle, Object>, h: Handle) -> bool {
    matches!(objects.get(&h).map(|o| &o.kind), Some(Kind::Qp(q)) if q.qp_type == qp_type::XRC_RECV)
}

/// Whether any SQ/RQ/SRQ ring of `rings` holds unconsumed work (checked before sleeping).
pub(in crate::daemon) fn rings_pending(
    objects: &BTreeMap<Handle, Object>,
    rings: &BTreeSet<Handle>,
) -> bool {
    let pending = |ring: &Ring, map: &Mapping| {
        !ring.broken.get()
            && !ring.blocked.get()
            && ring.view(map).is_some_and(|v| {
                Consumer::with_index(v, ring.index.get())
                    .available()
                    .map_or(true, |n| n > 0)
            })
    };
    rings.iter().any(|h| match objects.get(h).map(|o| &o.kind) {
        Some(Kind::Qp(qp)) => {
            pending(&qp.sq, &qp.map) || qp.rq.as_ref().is_some_and(|rq| pending(rq, &qp.map))
        }
        Some(Kind::Srq(srq)) => pending(&srq.ring, &srq.map),
        _ => false,
    })
}

/// The device index of context `ctx`.
fn ctx_dev(objects: &BTreeMap<Handle, Object>, ctx: Handle) -> Option<usize> {
    match objects.get(&ctx) {
        Some(Object {
            kind: Kind::Ctx(c), ..
        }) => Some(c.dev),
        _ => None,
    }
}

/// [`release_recv_slots`] for QP or SRQ `h` (after a reset dropped its receives).
pub(in crate::daemon) fn release_recv_slots_of(
    objects: &BTreeMap<Handle, Object>,
    devices: &[Option<ServedDevice>],
    h: Handle,
) {
    let dev = objects.get(&h).and_then(|o| ctx_dev(objects, o.ctx));
    if let Some(Some(d)) = dev.and_then(|i| devices.get(i)) {
        release_recv_slots(objects, &*d.nic, h);
    }
}

/// What the data path touches, lent by the engine for one pass: the objects and their
/// rings, the devices, the client memory, the counters of broken input, and the staging
/// buffers of transmits.
pub(in crate::daemon) struct DataPath<'a> {
    pub objects: &'a BTreeMap<Handle, Object>,
    pub rings: &'a BTreeSet<Handle>,
    pub devices: &'a mut [Option<ServedDevice>],
    pub mem: &'a mut ProcMem,
    pub counters: &'a mut DaemonCounters,
    pub tx_bufs: &'a mut [Vec<u8>],
    pub tx_meta: &'a mut Vec<TxMeta>,
    /// Scratch of [`DataPath::drain_rings`]: the send rings' producer indices.
    pub ring_ends: &'a mut Vec<(Handle, u64)>,
    /// The daemon's `local_path` option.
    pub local_path: bool,
}

impl DataPath<'_> {
    /// Moves posted work from every ring into the cores. Whether any was found.
    pub fn drain_rings(&mut self, now: Instant) -> bool {
        let mut worked = false;
        // Receives first and whole: a process that posts a receive and then a send
        // expects, as on a NIC, the receive to be in place before anything the send
        // provokes can arrive (a peer's answer, or its own Send to a QP of its own).
        // So the send rings are read only up to where they stood before the receive
        // rings were read: a send seen then was posted before the receive drain
        // began, and every receive its poster made before it is drained too. Sends
        // posted later wait for the next pass (the rings still read as pending).
        self.ring_ends.clear();
        for &h in self.rings {
            if let Some(end) = self.sq_producer(h) {
                self.ring_ends.push((h, end));
            }
        }
        for &h in self.rings {
            worked |= self.drain_rq(now, h);
        }
        for i in 0..self.ring_ends.len() {
            let (h, end) = self.ring_ends[i];
            worked |= self.drain_sq(now, h, end);
        }
        worked
    }

    /// A ring's indices went wild: the QP goes to error and its owner hears of it.
    fn ring_broken(&mut self, now: Instant, h: Handle) {
        self.counters.broken_rings += 1;
        let Some(obj) = self.objects.get(&h) else {
            return;
        };
        let dev = ctx_dev(self.objects, obj.ctx);
        let (event, qpn) = match &obj.kind {
            Kind::Qp(qp) => (event_type::QP_FATAL, Some(qp.qpn)),
            _ => (event_type::SRQ_ERR, None),
        };
        tracing::debug!(handle = h.0, "broken ring");
        if let (Some(qpn), Some(d)) = (
            qpn,
            dev.and_then(|i| self.devices.get_mut(i))
                .and_then(Option::as_mut),
        ) {
            d.nic.qp_to_error(now, qpn);
        }
        send_event(self.objects, obj.ctx, event, h.0);
    }

    /// Where QP `h`'s send ring's producer stands now (`Acquire`), if `h` is a QP with a
    /// mapped send ring and WQEs the daemon has not read yet (or indices gone wild, which
    /// reading finds).
    fn sq_producer(&self, h: Handle) -> Option<u64> {
        match &self.objects.get(&h)?.kind {
            Kind::Qp(qp) => qp
                .sq
                .view(&qp.map)
                .map(|v| v.producer_index())
                .filter(|&end| end != qp.sq.index.get()),
            _ => None,
        }
    }

    /// Moves QP `h`'s posted sends into its core, up to producer index `end`.
    fn drain_sq(&mut self, now: Instant, h: Handle, end: u64) -> bool {
        let mut slot = [0u8; MAX_SLOT];
        let mut worked = false;
        let mut broken = false;
        {
            let Some(obj) = self.objects.get(&h) else {
                return false;
            };
            let Kind::Qp(qp) = &obj.kind else {
                return false;
            };
            let Some(dev) = ctx_dev(self.objects, obj.ctx) else {
                return false;
            };
            if qp.sq.broken.get() || qp.sq.blocked.get() {
                return false;
            }
            let Some(view) = qp.sq.view(&qp.map) else {
                return false;
            };
            let size = (qp.sq.layout.slot_size as usize).min(MAX_SLOT);
            let mut cons = Consumer::with_index(view, qp.sq.index.get());
            for _ in 0..RING_BATCH {
                if cons.index() == end {
                    break;
                }
                match cons.peek(&mut slot[..size]) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(RingError::Broken) | Err(_) => {
                        broken = true;
                        qp.sq.broken.set(true);
                        break;
                    }
                }
                worked = true;
                let wqe = SendWqe::new_unchecked(&slot[..size]);
                let (wr_id, op) = (wqe.wr_id(), wqe.opcode());
                let result = match SendWqeRepr::parse(&wqe) {
                    Err(_) => Err((wc_status::LOC_LEN_ERR, libc::EINVAL)),
                    Ok(repr) => check_send(&repr, qp).and_then(|()| {
                        // A UD WR's AH handle as the device's AH number, if it names an
                        // AH of this device; whether the QP may use it is the core's call.
                        let ah = (qp.qp_type == qp_type::UD)
                            .then(|| match self.objects.get(&Handle(repr.ah)) {
                                Some(Object {
                                    kind: Kind::Ah { id },
                                    ctx,
                                    ..
                                }) if matches!(
                                    self.objects.get(ctx),
                                    Some(Object { kind: Kind::Ctx(c), .. }) if c.dev == dev
                                ) =>
                                {
                                    Some(*id)
                                }
                                _ => None,
                            })
                            .flatten();
                        let Some(Some(d)) = self.devices.get_mut(dev) else {
                            return Err((wc_status::FATAL_ERR, libc::ENODEV));
                        };
                        d.nic
                            .post_send(now, qp.qpn, &repr, ah, self.mem)
                            .map_err(|r| (r.status as u32, r.errno.0))
                    }),
                };
                if matches!(result, Err((_, libc::ENOMEM))) {
                    // The core's send queue is full: leave the WQE in the ring until
                    // completions make room.
                    qp.sq.blocked.set(true);
                    break;
                }
                cons.advance();
                if let Err((status, errno)) = result {
                    self.counters.bad_wqes += 1;
                    tracing::debug!(qpn = qp.qpn, wr_id, errno, "send WQE refused");
                    deliver_cqe(
                        self.objects,
                        qp.send_cq,
                        &error_cqe(wr_id, wc_of_wr(op), status, errno, qp.qpn),
                    );
                }
            }
            qp.sq.index.set(cons.index());
        }
        if broken {
            self.ring_broken(now, h);
        }
        worked
    }

    fn drain_rq(&mut self, now: Instant, h: Handle) -> bool {
        let mut worked = false;
        let mut broken = false;
        {
            let Some(obj) = self.objects.get(&h) else {
                return false;
            };
            let (ring, map, max_sge, target) = match &obj.kind {
                Kind::Qp(qp) => match &qp.rq {
                    Some(rq) => (rq, &qp.map, qp.cap.max_recv_sge, Ok((qp.qpn, qp.recv_cq))),
                    None => return false,
                },
                Kind::Srq(srq) => (&srq.ring, &srq.map, srq.max_sge, Err(srq.id)),
                _ => return false,
            };
            if ring.broken.get() || ring.blocked.get() {
                return false;
            }
            let Some(view) = ring.view(map) else {
                return false;
            };
            let mut cons = Consumer::with_index(view, ring.index.get());
            if cons.available().is_ok_and(|n| n == 0) {
                // Nothing posted since the last pass (the common case when spinning).
                return false;
            }
            let Some(dev) = ctx_dev(self.objects, obj.ctx) else {
                return false;
            };
            let size = (ring.layout.slot_size as usize).min(MAX_SLOT);
            let mut slot = [0u8; MAX_SLOT];
            // Posting a receive only queues it: the whole ring, at most once round.
            for _ in 0..ring.layout.entries {
                match cons.peek(&mut slot[..size]) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(_) => {
                        broken = true;
                        ring.broken.set(true);
                        break;
                    }
                }
                worked = true;
                let wqe = RecvWqe::new_unchecked(&slot[..size]);
                let wr_id = wqe.wr_id();
                let result = match RecvWqeRepr::parse(&wqe) {
                    Err(_) => Err(libc::EINVAL),
                    Ok(r) if r.sg_list.len() as u32 > max_sge => Err(libc::EINVAL),
                    Ok(r) => match self.devices.get_mut(dev) {
                        Some(Some(d)) => match target {
                            Ok((qpn, _)) => d.nic.post_recv(qpn, r.wr_id, r.sg_list),
                            Err(srq) => d.nic.post_srq_recv(srq, r.wr_id, r.sg_list),
                        },
                        _ => Err(libc::ENODEV),
                    },
                };
                if result == Err(libc::ENOMEM) {
                    ring.blocked.set(true);
                    break;
                }
                cons.take();
                if let Err(errno) = result {
                    self.counters.bad_wqes += 1;
                    // Its slot goes back before the owner can see the completion and post.
                    ring.index.set(cons.index());
                    if let Some(Some(d)) = self.devices.get(dev) {
                        release_recv_slots(self.objects, &*d.nic, h);
                    }
                    match target {
                        Ok((qpn, cq)) => deliver_cqe(
                            self.objects,
                            cq,
                            &error_cqe(wr_id, wc_opcode::RECV, wc_status::LOC_LEN_ERR, errno, qpn),
                        ),
                        Err(_) => send_event(self.objects, obj.ctx, event_type::SRQ_ERR, h.0),
                    }
                }
            }
            ring.index.set(cons.index());
            // Slots read are published as consumed, less those the core still holds
            // (completions publish the rest, in `drive_cores`).
            if let (true, Some(Some(d))) = (worked, self.devices.get(dev)) {
                release_recv_slots(self.objects, &*d.nic, h);
            }
        }
        if broken {
            self.ring_broken(now, h);
        }
        worked
    }

    /// Timers, transmits, completions and events of every device. Whether any happened.
    pub fn drive_cores(&mut self, now: Instant) -> bool {
        let mut worked = false;
        let mut unblock = false;
        for d in self.devices.iter_mut().flatten() {
            if d.nic.poll_timeout().is_some_and(|t| t <= now) {
                d.nic.handle_timeout(now, self.mem);
                worked = true;
            }
            // siw: TCP output of what the rings just posted, engine events (no-op on RoCE).
            worked |= d.nic.handle_streams(now, false, self.mem);
            for _ in 0..TX_ROUNDS {
                self.tx_meta.clear();
                for buf in self.tx_bufs.iter_mut() {
                    let Some(addrs) = d.nic.poll_transmit(now, self.mem, buf) else {
                        break;
                    };
                    self.tx_meta.push(addrs);
                }
                let staged = self.tx_meta.len();
                if staged == 0 {
                    break;
                }
                worked = true;
                let delivered_locally = transmit(
                    d,
                    &mut self.tx_bufs[..staged],
                    self.tx_meta,
                    self.local_path,
                    now,
                    self.mem,
                );
                // A short batch means the core is drained, unless local delivery just
                // made new output: the responder's ACK must leave before the requester's
                // peer sees its completion and, say, exits and destroys the QP that
                // would have sent it.
                if staged < self.tx_bufs.len() && !delivered_locally {
                    break;
                }
            }
            d.port_mut().flush_captures();
            while let Some((cq, cqe)) = d.nic.poll_completion() {
                worked = true;
                unblock = true;
                // The slot first: the application may post again as soon as it polls.
                if cqe.opcode & wc_opcode::RECV != 0 {
                    if let Some(&qp) = d.qp_by_qpn.get(&cqe.qp_num) {
                        release_recv_slots(self.objects, &*d.nic, qp);
                        // An XRC target took the receive from the SRQ its request
                        // named: the device's SRQs give their completed slots back.
                        if is_xrc_tgt(self.objects, qp) {
                            for &s in d.srq_by_id.values() {
                                release_recv_slots(self.objects, &*d.nic, s);
                            }
                        }
                    }
                }
                if let Some(h) = d.cq_by_id.get(&cq) {
                    deliver_cqe(self.objects, *h, &cqe);
                }
            }
            while let Some((owner, event, element)) = d.nic.poll_event() {
                worked = true;
                let element = match element {
                    EventElement::Qp(qpn) => d.qp_by_qpn.get(&qpn).map(|h| h.0),
                    EventElement::Cq(id) => d.cq_by_id.get(&id).map(|h| h.0),
                    EventElement::Srq(id) => d.srq_by_id.get(&id).map(|h| h.0),
                    EventElement::Port(p) => Some(u32::from(p)),
                    EventElement::Device => Some(0),
                };
                if let Some(element) = element {
                    send_event(self.objects, Handle(owner), event, element);
                }
            }
        }
        if unblock {
            self.unblock_rings();
        }
        worked
    }

    /// Completions made room in the cores' queues: retry rings that were full.
    fn unblock_rings(&self) {
        for h in self.rings {
            match self.objects.get(h).map(|o| &o.kind) {
                Some(Kind::Qp(qp)) => {
                    qp.sq.blocked.set(false);
                    if let Some(rq) = &qp.rq {
                        rq.blocked.set(false);
                    }
                }
                Some(Kind::Srq(srq)) => srq.ring.blocked.set(false),
                _ => {}
            }
        }
    }
}

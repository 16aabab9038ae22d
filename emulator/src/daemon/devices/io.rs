//! A device's datagrams in and out through its link stack (`link/stack.rs`: the fault
//! rules over the local path over the sockets and the backend), and what comes up
//! delivered to the CM agent or the core, with the response the rules force on it.
//!
//! These take one device and the client memory, nothing of the engine: the CM's QP1 code,
//! the data path and the engine's receive all go through them.

use crate::daemon::devices::device::ServedDevice;
use crate::daemon::devices::memory::ProcMem;
use crate::daemon::devices::nic::TxMeta;
use crate::daemon::link::mmsg::{RecvBatch, ECN_CE};
use crate::daemon::link::stack::{Arrivals, Layer, Sent, LOOPBACK};
use emu_core::cm::gsi_route;
use std::time::Instant;

/// Sends staged packets down the device's link stack (`local`: the daemon's `local_path`
/// option), then lets go of held packets that are due. True when anything was delivered
/// locally or let go: the core may then have new output (ACKs, READ responses) that must
/// leave before this pass hands out completions.
pub fn transmit(
    d: &mut ServedDevice,
    bufs: &mut [Vec<u8>],
    meta: &[TxMeta],
    local: bool,
    now: Instant,
    mem: &mut ProcMem,
) -> bool {
    d.link.inner_mut().set_enabled(local);
    let nic = &d.nic;
    d.link
        .learn_qps(|q| nic.query_qp(q).ok().map(|a| a.dest_qp_num));
    // The core leaves the ICRC to us (`Device::defer_icrc`). A packet the local path
    // loops back needs none while no fault rule can alter it on the way and no capture
    // records it; QP1's packets are checked wherever they come from. The rest is sealed.
    let unsealed = local && !d.faults().active() && !d.port().capturing();
    for (buf, m) in bufs.iter_mut().zip(meta) {
        if !(unsealed && d.link.serves(m.dst) && !gsi_route::to_gsi(buf)) {
            emu_core::seal_icrc(buf, m.src, m.dst);
        }
    }
    let sent = d.link.send(now, bufs, meta);
    count(d, sent);
    let looped = sent.looped > 0;
    if looped {
        deliver_looped(d, now, !unsealed, mem);
    }
    let released = d.faults().active() && release_held(d, local, now, mem);
    looped || released
}

/// Sends (or delivers) the packets the fault rules held back whose time has come.
/// Whether anything was released.
pub fn release_held(d: &mut ServedDevice, local: bool, now: Instant, mem: &mut ProcMem) -> bool {
    if d.faults().next_release().is_none_or(|t| t > now) {
        return false;
    }
    d.link.inner_mut().set_enabled(local);
    let mut arrivals = Arrivals::default();
    let sent = d.link.release(now, &mut arrivals);
    count(d, sent);
    deliver(d, now, &arrivals, &RecvBatch::new(0, 0), true, mem);
    deliver_looped(d, now, true, mem);
    true
}

/// Adds what a send did to the device's counters (a looped packet was sent and received).
fn count(d: &mut ServedDevice, s: Sent) {
    d.tx_datagrams += s.sent + s.looped;
    d.rx_datagrams += s.looped;
    d.tx_errors += s.errors;
}

/// Receives what the local path looped back, through the layers above it, and delivers it
/// (`sealed`: with ICRCs, see [`transmit`]). The device's scratch is taken for the while:
/// `deliver` needs the device itself.
fn deliver_looped(d: &mut ServedDevice, now: Instant, sealed: bool, mem: &mut ProcMem) {
    if !d.link.inner().looped() {
        return;
    }
    let mut s = d.loop_scratch.take().unwrap_or_default();
    while d.link.inner().looped() {
        if d.link
            .recv(now, LOOPBACK, &mut s.batch, &mut s.arrivals)
            .is_err()
        {
            break;
        }
        deliver(d, now, &s.arrivals, &s.batch, sealed, mem);
        let spent = s.arrivals.clear();
        d.link.inner_mut().recycle(spent);
    }
    d.loop_scratch = Some(s);
}

/// Receives up to 8 batches on socket index `sock` of the device and delivers them;
/// `batch` and `arrivals` are the engine's buffers.
pub fn receive(
    d: &mut ServedDevice,
    now: Instant,
    sock: usize,
    batch: &mut RecvBatch,
    arrivals: &mut Arrivals,
    mem: &mut ProcMem,
) {
    for _ in 0..8 {
        arrivals.clear();
        let n = match d.link.recv(now, sock, batch, arrivals) {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(device = d.name(), error = %e, "UDP receive error");
                break;
            }
        };
        d.rx_datagrams += n as u64;
        d.rx_truncated += arrivals.truncated;
        deliver(d, now, arrivals, batch, true, mem);
        if n < batch.bufs.len() {
            break;
        }
    }
    arrivals.clear();
}

/// Delivers what came up the stack into the CM agent or the core, in order: each copy
/// with its forced response set on the core right before it, then the packet's ECN mark.
/// Without `sealed`, the packets are the device's own, looped back without an ICRC.
fn deliver(
    d: &mut ServedDevice,
    now: Instant,
    arrivals: &Arrivals,
    batch: &RecvBatch,
    sealed: bool,
    mem: &mut ProcMem,
) {
    for a in &arrivals.items {
        let bytes = arrivals.delivered(a, batch);
        for _ in 0..a.copies {
            if let Some((qpn, response)) = a.force {
                d.nic.force_next_response(qpn, response);
            }
            d.deliver(now, a.src, a.dst, bytes, sealed, mem);
            if a.force.is_some() && d.nic.clear_forced_response() {
                d.link.forced_unused();
            }
        }
        if a.tos.is_some_and(|t| t & 0b11 == ECN_CE) {
            d.nic
                .congestion_experienced(now, a.src, a.dst, arrivals.arrived(a, batch));
        }
    }
}

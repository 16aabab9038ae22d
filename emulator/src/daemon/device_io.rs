//! A device's datagrams in and out: through its fault rules (when it has any), then the
//! local path (a packet to the device's own address goes straight to its receive side),
//! the link (its captures record what it carries) and sendmmsg on the socket of the
//! source address.
//!
//! These take one device and the client memory, nothing of the engine: the CM's QP1 code
//! and the data path both send through them.

use super::device::ServedDevice;
use super::link::fault::Passage;
use super::link::mmsg::Outgoing;
use super::memory::ProcMem;
use super::nic::TxMeta;
use std::net::SocketAddr;
use std::time::Instant;
use wire::client::fault::Direction;

/// Whether `dst` is one of the device's own bound addresses (the local path's test).
fn is_local(d: &ServedDevice, dst: SocketAddr) -> bool {
    // Multicast always goes through the kernel, which loops it back to this device's
    // group sockets as to every other listener (IP_MULTICAST_LOOP).
    !dst.ip().is_multicast()
        && d.udp
            .bound()
            .any(|(_, s)| s.local.ip() == dst.ip() && s.local.port() == dst.port())
}

/// Sends staged packets through the device's fault rules (when it has any), then out.
/// True when anything was delivered locally: the core may then have new output (ACKs,
/// READ responses) that must leave before this pass hands out completions.
pub fn transmit(
    d: &mut ServedDevice,
    bufs: &[Vec<u8>],
    meta: &[TxMeta],
    local: bool,
    now: Instant,
    mem: &mut ProcMem,
) -> bool {
    if !d.faults.active() {
        return transmit_now(d, bufs, meta, local, now, mem);
    }
    let mut out_bufs = Vec::with_capacity(bufs.len());
    let mut out_meta = Vec::with_capacity(meta.len());
    for (buf, &m) in bufs.iter().zip(meta) {
        let nic = &d.nic;
        let dest_of = |q| nic.query_qp(q).ok().map(|a| a.dest_qp_num);
        let passage = d.faults.pass(
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
    let delivered = transmit_now(d, &out_bufs, &out_meta, local, now, mem);
    release_held(d, local, now, mem) || delivered
}

/// Sends (or delivers) the packets the fault rules held back whose time has come.
/// Whether anything was released.
pub fn release_held(d: &mut ServedDevice, local: bool, now: Instant, mem: &mut ProcMem) -> bool {
    let due = d.faults.take_due(now);
    if due.is_empty() {
        return false;
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
            Direction::Rx => d.deliver(now, h.src, h.dst, &h.bytes, mem),
        }
    }
    transmit_now(d, &bufs, &meta, local, now, mem);
    true
}

/// A datagram arrived for the device (from its socket or its own local path): through
/// the fault rules, then into the CM agent or the core.
pub fn receive(
    d: &mut ServedDevice,
    now: Instant,
    src: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
    mem: &mut ProcMem,
) {
    if !d.faults.active() {
        d.deliver(now, src, dst, payload, mem);
        return;
    }
    let Passage::Through {
        bytes,
        copies,
        force,
    } = d
        .faults
        .pass(now, Direction::Rx, src, dst, 0, payload, &|_| None)
    else {
        return;
    };
    for _ in 0..copies {
        if let Some((qpn, response)) = force {
            d.nic.force_next_response(qpn, response);
        }
        d.deliver(now, src, dst, &bytes, mem);
        if d.nic.clear_forced_response() {
            d.faults.forced_unused();
        }
    }
}

/// Sends staged packets, batching consecutive ones that leave from the same socket.
/// With `local`, packets addressed to the device itself go straight to its receive path.
fn transmit_now(
    d: &mut ServedDevice,
    bufs: &[Vec<u8>],
    meta: &[TxMeta],
    local: bool,
    now: Instant,
    mem: &mut ProcMem,
) -> bool {
    for m in meta {
        if !(local && is_local(d, m.dst)) {
            d.udp.ensure_sender(m.src, now);
        }
    }
    let mut delivered_locally = false;
    let mut at = 0;
    while at < meta.len() {
        if local && is_local(d, meta[at].dst) {
            let TxMeta { src, dst, .. } = meta[at];
            d.tx_datagrams += 1;
            d.rx_datagrams += 1;
            d.udp.record(src, dst, &bufs[at]);
            receive(d, now, src, dst, &bufs[at], mem);
            delivered_locally = true;
            d.udp.record(src, dst, &bufs[at]);
            at += 1;
            continue;
        }
        let Some(sock) = d.udp.socket_for(meta[at].src) else {
            d.tx_errors += 1;
            at += 1;
            continue;
        };
        let mut end = at + 1;
        while end < meta.len()
            && d.udp.socket_for(meta[end].src) == Some(sock)
            && !(local && is_local(d, meta[end].dst))
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
        let sent = match d.udp.send_batch(sock, &mut msgs) {
            Ok(n) => n,
            Err(e) => {
                tracing::trace!(error = %e, "UDP send failed");
                0
            }
        };
        // Unsent packets are lost on the wire: the transport retransmits.
        d.tx_datagrams += sent as u64;
        d.tx_errors += (end - at - sent) as u64;
        at = end;
    }
    delivered_locally
}

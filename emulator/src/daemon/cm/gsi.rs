//! QP1 (the GSI) on a device: received RoCE v2 datagrams the core routes to QP1
//! (`emu_core::cm::gsi_route`) go to the device's CM agent instead of the transport core,
//! and the agent's MADs leave as GSI packets
//! (`emu_core::cm::gsi`) through the same transmit path as every other packet (local
//! delivery, captures, sendmmsg).

use crate::daemon::device::ServedDevice;
use crate::daemon::link::datagram::ROCE_V2_PORT;
use crate::daemon::nic::{AppMemory, TxMeta};
use emu_core::cm::gsi;
use emu_core::cm::gsi_route::{self, Rx};
use emu_core::cm::ServiceId;
use emu_core::Psn;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use wire::cm::{CmMad, CmMessage};

impl ServedDevice {
    /// A received RoCE v2 datagram: QP1 traffic to the CM agent, the rest to the core.
    pub(in crate::daemon) fn deliver(
        &mut self,
        now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        payload: &[u8],
        mem: &mut dyn AppMemory,
    ) {
        match gsi_route::route(src, dst, payload) {
            Rx::Transport => self.nic.handle_datagram(now, src, dst, payload, mem),
            Rx::Gsi { src, dst, mad } if self.park_if_unlistened(now, src, dst, mad) => {}
            Rx::Gsi { src, dst, mad } => self.cm.handle_mad(now, src.ip(), dst.ip(), mad),
            Rx::Dropped(why) => {
                self.gsi_rx_dropped += 1;
                tracing::trace!(%src, ?why, "QP1 packet dropped");
            }
        }
    }
}

/// How long a REQ for a service nobody listens on waits for a listener before the
/// agent rejects it (REJ reason 8). The kernel rejects at once, but there the network
/// and its address resolution leave a server time to listen again: perftest's `-R`
/// tests close their first connection's listener and listen anew while the client
/// connects a second time, and on one host through this daemon the client's REQ
/// arrives first. A connection to a port nobody listens on is still refused quickly.
pub(in crate::daemon) const LISTEN_GRACE: Duration = Duration::from_millis(200);

/// Most REQs a device holds back at once (more are handed to the agent at once).
const MAX_PARKED: usize = 64;

/// A REQ or SIDR_REQ waiting for a listener.
pub(in crate::daemon) struct ParkedReq {
    until: Instant,
    service_id: u64,
    src: SocketAddr,
    dst: SocketAddr,
    mad: Vec<u8>,
}

/// The service ID a REQ or SIDR_REQ asks for.
fn requested_service(mad: &[u8]) -> Option<u64> {
    match CmMad::parse(mad).ok()?.message {
        CmMessage::Req(r) => Some(r.service_id),
        CmMessage::SidrReq(r) => Some(r.service_id),
        _ => None,
    }
}

impl ServedDevice {
    /// Holds back a REQ/SIDR_REQ for a service nobody listens on (see [`LISTEN_GRACE`]).
    fn park_if_unlistened(
        &mut self,
        now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        mad: &[u8],
    ) -> bool {
        let Some(service_id) = requested_service(mad) else {
            return false;
        };
        if self.cm.is_listening(ServiceId(service_id)) || self.parked_reqs.len() >= MAX_PARKED {
            return false;
        }
        tracing::debug!(%src, service_id, "REQ for a service nobody listens on held back");
        self.parked_reqs.push(ParkedReq {
            until: now + LISTEN_GRACE,
            service_id,
            src,
            dst,
            mad: mad.to_vec(),
        });
        true
    }

    /// Hands held-back REQs to the agent once their service is listened on or their
    /// grace is over. Whether any went.
    pub(in crate::daemon) fn release_parked_reqs(&mut self, now: Instant) -> bool {
        if self.parked_reqs.is_empty() {
            return false;
        }
        let (go, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked_reqs)
            .into_iter()
            .partition(|p| p.until <= now || self.cm.is_listening(ServiceId(p.service_id)));
        self.parked_reqs = keep;
        for p in &go {
            self.cm.handle_mad(now, p.src.ip(), p.dst.ip(), &p.mad);
        }
        !go.is_empty()
    }

    /// When the oldest held-back REQ's grace ends.
    pub(in crate::daemon) fn parked_deadline(&self) -> Option<Instant> {
        self.parked_reqs.iter().map(|p| p.until).min()
    }
}

/// Stages the MADs the device's agent has queued, as many as `bufs` holds, as GSI packets
/// from the device's socket for the MAD's source address to the peer's port 4791. Returns
/// how many were staged (0: none left); the caller sends them.
pub(in crate::daemon) fn stage_gsi_transmits(
    d: &mut ServedDevice,
    bufs: &mut [Vec<u8>],
    meta: &mut Vec<TxMeta>,
) -> usize {
    meta.clear();
    for buf in bufs.iter_mut() {
        let Some(t) = d.cm.poll_transmit() else {
            break;
        };
        buf.clear();
        buf.resize(gsi::GSI_PACKET_LEN, 0);
        let psn = Psn::new(d.gsi_psn);
        d.gsi_psn = d.gsi_psn.wrapping_add(1) & 0xff_ffff;
        // Our sockets send from 4791: the ICRC must cover that source port.
        gsi::encapsulate_from(t.src, t.dst, ROCE_V2_PORT, psn, &t.mad, buf);
        // MADs leave with DSCP 0: the connection's traffic class is for its own QP.
        meta.push(TxMeta {
            src: SocketAddr::new(t.src, ROCE_V2_PORT),
            dst: SocketAddr::new(t.dst, ROCE_V2_PORT),
            traffic_class: 0,
        });
    }
    meta.len()
}

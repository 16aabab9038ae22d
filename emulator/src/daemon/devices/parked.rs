//! REQs received on QP1 for a service nobody listens on yet, held back for a moment
//! before the device's CM agent gets them ([`ParkedReqs`]).

use emu_core::cm::{CmAgent, ServiceId};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use wire::cm::{CmMad, CmMessage};

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
struct ParkedReq {
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

/// The REQs and SIDR_REQs a device holds back for a moment ([`LISTEN_GRACE`]) because
/// nobody listens on their service yet; the device's CM agent gets them later.
#[derive(Default)]
pub(in crate::daemon) struct ParkedReqs(Vec<ParkedReq>);

impl ParkedReqs {
    /// A MAD received on QP1: held back if it is a REQ/SIDR_REQ for a service nobody
    /// listens on (and fewer than `MAX_PARKED` are held), otherwise handed to `cm`.
    pub(in crate::daemon) fn handle_mad(
        &mut self,
        cm: &mut CmAgent,
        now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        mad: &[u8],
    ) {
        match requested_service(mad) {
            Some(service_id)
                if !cm.is_listening(ServiceId(service_id)) && self.0.len() < MAX_PARKED =>
            {
                tracing::debug!(%src, service_id, "REQ for a service nobody listens on held back");
                self.0.push(ParkedReq {
                    until: now + LISTEN_GRACE,
                    service_id,
                    src,
                    dst,
                    mad: mad.to_vec(),
                });
            }
            _ => cm.handle_mad(now, src.ip(), dst.ip(), mad),
        }
    }

    /// Hands held-back REQs to `cm` once their service is listened on or their grace is
    /// over. Whether any went.
    pub(in crate::daemon) fn release(&mut self, cm: &mut CmAgent, now: Instant) -> bool {
        if self.0.is_empty() {
            return false;
        }
        let (go, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|p| p.until <= now || cm.is_listening(ServiceId(p.service_id)));
        self.0 = keep;
        for p in &go {
            cm.handle_mad(now, p.src.ip(), p.dst.ip(), &p.mad);
        }
        !go.is_empty()
    }

    /// When the oldest held-back REQ's grace ends.
    pub(in crate::daemon) fn deadline(&self) -> Option<Instant> {
        self.0.iter().map(|p| p.until).min()
    }
}

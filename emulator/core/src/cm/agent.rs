//! [`CmAgent`]: the verbs (librdmacm names), the listeners, the timers and the input entry
//! point, over the connection machine of `machine.rs` that carries out the table's steps.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;

use wire::cm::ServiceId;
use wire::roce::{Qkey, Qpn};

use super::conn::{Payload, Sidr};
use super::format;
use super::input::MadInput;
use super::machine::Machine;
use super::qp_attr::conn_qp_attr;
use super::table::{CmState, Input};
use super::types::{
    reason, sidr_status, CmConfig, CmCounters, CmEvent, CmTransmit, ConnId, ConnParams, ConnPath,
    Owner, PeerInfo, Route,
};
use crate::attr::QpAttr;
use crate::types::{Errno, QpAttrMask, QpState, QpType};

/// EADDRINUSE: the service ID already has a listener.
const EADDRINUSE: Errno = Errno(98);

/// The connection manager of one device. See the [module docs](super).
#[derive(Debug)]
pub struct CmAgent {
    pub(super) m: Machine,
    pub(super) listeners: HashMap<u64, Owner>,
}

impl CmAgent {
    /// An agent with no connections.
    pub fn new(cfg: CmConfig) -> Self {
        CmAgent {
            m: Machine::new(cfg),
            listeners: HashMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.m.cfg
    }

    /// Counters.
    pub fn counters(&self) -> &CmCounters {
        &self.m.counters
    }

    /// `rdma_init_qp_attr` for `state` (INIT, RTR or RTS) of connection `id`.
    ///
    /// - INIT: remote write, plus read and atomic when this side accepts READ/atomic
    ///   requests (no access at all before the peer answered).
    /// - RTR: the AV (GRH to the peer's GID, flow label, hop limit, traffic class, the
    ///   local GID's index), path MTU, the peer's QPN, `rq_psn` = the starting PSN *we*
    ///   sent (the Linux CM: the starting PSN of a REQ or REP is the PSN its sender
    ///   expects to receive first; `ib_send_cm_req` keeps the REQ's as `rq_psn`),
    ///   `max_dest_rd_atomic`, `min_rnr_timer` 0 (RC).
    /// - RTS: `sq_psn` = the peer's starting PSN, local ACK timeout (packet lifetime + 1),
    ///   retry counts
    ///   (transport: the active side's own, the passive side the REQ's; RNR: the peer's),
    ///   `max_rd_atomic` (RC).
    ///
    /// EINVAL: another state, or RTR/RTS before the peer's REQ/REP is known.
    pub fn init_qp_attr(&self, id: ConnId, state: QpState) -> Result<(QpAttr, QpAttrMask), Errno> {
        conn_qp_attr(self.m.conn(id)?, state)
    }

    /// The state of a connection (`None`: unknown or gone).
    pub fn state(&self, id: ConnId) -> Option<CmState> {
        self.m.conns.get(&id.0).map(|c| c.state)
    }

    /// What the peer of a connection said (after REQ or REP).
    pub fn peer(&self, id: ConnId) -> Option<PeerInfo> {
        self.m.conns.get(&id.0).and_then(|c| c.peer)
    }

    /// The path of a connection (what `rdma_cm_id.route` shows for it).
    pub fn path(&self, id: ConnId) -> Option<ConnPath> {
        self.m.conns.get(&id.0).map(|c| ConnPath {
            local: c.local,
            remote: c.remote,
            service_id: c.service_id,
            sgid_index: c.sgid_index,
            flow_label: c.flow_label,
            hop_limit: c.hop_limit,
            traffic_class: c.traffic_class,
            mtu: c.mtu,
        })
    }

    /// Number of connection records (time-wait ones included).
    pub fn connection_count(&self) -> usize {
        self.m.conns.len()
    }

    // ---- verbs -------------------------------------------------------------------

    /// Listens on `service_id` for `owner` (rdma_listen). EADDRINUSE if taken.
    pub fn listen(&mut self, service_id: ServiceId, owner: Owner) -> Result<(), Errno> {
        if self.listeners.contains_key(&service_id.0) {
            return Err(EADDRINUSE);
        }
        self.listeners.insert(service_id.0, owner);
        Ok(())
    }

    /// The device's GID table changed (an address came or went; indices are stable).
    pub fn set_gids(&mut self, gids: Vec<crate::types::Gid>) {
        self.m.cfg.gids = gids;
    }

    /// Whether somebody listens on `service_id`.
    pub fn is_listening(&self, service_id: ServiceId) -> bool {
        self.listeners.contains_key(&service_id.0)
    }

    /// Stops listening (ENOENT if nobody listened).
    pub fn unlisten(&mut self, service_id: ServiceId) -> Result<(), Errno> {
        self.listeners
            .remove(&service_id.0)
            .map(|_| ())
            .ok_or(Errno::ENOENT)
    }

    /// Sends a REQ (rdma_connect on RC/UC, or an XRC initiator). EINVAL: private data
    /// over 56 octets, another QP type.
    pub fn connect(
        &mut self,
        now: Instant,
        owner: Owner,
        params: ConnParams,
        route: Route,
    ) -> Result<ConnId, Errno> {
        if params.private_data.len() > format::REQ_USER_PRIVATE
            || !matches!(params.qp_type, QpType::Rc | QpType::Uc | QpType::XrcSend)
        {
            return Err(Errno::EINVAL);
        }
        let id = self.m.new_conn(owner, true, route, params);
        self.m.apply(now, id, Input::Connect, Payload::default())?;
        Ok(ConnId(id))
    }

    /// Sends a SIDR_REQ (rdma_connect on UD): the answer is
    /// [`CmEvent::SidrResolved`], [`CmEvent::SidrRejected`] or [`CmEvent::Unreachable`].
    pub fn resolve_sidr(
        &mut self,
        now: Instant,
        owner: Owner,
        route: Route,
        private_data: &[u8],
    ) -> Result<ConnId, Errno> {
        if private_data.len() > format::SIDR_REQ_USER_PRIVATE {
            return Err(Errno::EINVAL);
        }
        let mut params = ConnParams::rc(Qpn(0));
        params.qp_type = QpType::Ud;
        params.private_data = private_data.to_vec();
        let id = self.m.new_conn(owner, true, route, params);
        self.m
            .apply(now, id, Input::SidrResolve, Payload::default())?;
        Ok(ConnId(id))
    }

    /// Accepts a connection request with a REP (rdma_accept). The starting PSN,
    /// resources and private data are the consumer's; path MTU, retry counts come from
    /// the REQ.
    pub fn accept(&mut self, now: Instant, id: ConnId, params: ConnParams) -> Result<(), Errno> {
        if params.private_data.len() > format::REP_PRIVATE {
            return Err(Errno::EINVAL);
        }
        let c = self.m.conns.get_mut(&id.0).ok_or(Errno::ENOENT)?;
        if c.active || !matches!(c.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(Errno::EINVAL);
        }
        // The starting PSN was drawn when the REQ arrived, so the QP can be readied
        // (init_qp_attr) before the REP is sent, as the CMA does.
        if let Some(psn) = params.starting_psn {
            c.psn = psn;
        }
        c.params = params;
        self.m.apply(now, id.0, Input::Accept, Payload::default())
    }

    /// Accepts a SIDR request: the SIDR_REP carries the UD QP and its Q_Key.
    pub fn accept_sidr(
        &mut self,
        now: Instant,
        id: ConnId,
        qpn: Qpn,
        qkey: Qkey,
        private_data: &[u8],
    ) -> Result<(), Errno> {
        if private_data.len() > format::SIDR_REP_PRIVATE {
            return Err(Errno::EINVAL);
        }
        let c = self.m.conns.get_mut(&id.0).ok_or(Errno::ENOENT)?;
        if c.state != CmState::SidrReqRcvd {
            return Err(Errno::EINVAL);
        }
        c.sidr = Sidr {
            status: sidr_status::SUCCESS,
            qpn,
            qkey,
        };
        c.out_private = private_data.to_vec();
        self.m.apply(now, id.0, Input::Accept, Payload::default())
    }

    /// Rejects a connection request (passive) or a REP (active) with `reason`
    /// (rdma_reject: [`reason::CONSUMER_DEFINED`]) and private data (≤ 148 octets); a
    /// SIDR request gets a SIDR_REP with status REJECT (≤ 136 octets).
    pub fn reject(
        &mut self,
        now: Instant,
        id: ConnId,
        reason: u16,
        private_data: &[u8],
    ) -> Result<(), Errno> {
        let c = self.m.conns.get_mut(&id.0).ok_or(Errno::ENOENT)?;
        let max = if c.state == CmState::SidrReqRcvd {
            format::SIDR_REP_PRIVATE
        } else {
            format::REJ_PRIVATE
        };
        if private_data.len() > max {
            return Err(Errno::EINVAL);
        }
        c.rej = (reason, Vec::new(), private_data.to_vec());
        c.sidr.status = sidr_status::REJECT;
        c.out_private = private_data.to_vec();
        self.m.apply(now, id.0, Input::Reject, Payload::default())
    }

    /// Rejects a connection request whose QP type is not the listener's (the Linux CMA's
    /// `cma_check_req_qp_type` refusal: a consumer REJ), and counts it
    /// ([`CmCounters::rx_qp_type_mismatch`]).
    pub fn reject_qp_type_mismatch(&mut self, now: Instant, id: ConnId) -> Result<(), Errno> {
        self.reject(now, id, reason::CONSUMER_DEFINED, &[])?;
        self.m.counters.rx_qp_type_mismatch += 1;
        Ok(())
    }

    /// Active side after REP: sends the RTU (rdma_establish, or the CMA once the QP is
    /// in RTS). Passive side before RTU: the QP received traffic (COMM_EST), the
    /// connection is established ([`CmEvent::Established`]).
    pub fn establish(&mut self, now: Instant, id: ConnId) -> Result<(), Errno> {
        self.m
            .apply(now, id.0, Input::Establish, Payload::default())
    }

    /// rdma_disconnect: DREQ when established, DREP when the peer's DREQ came first.
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: ConnId,
        private_data: &[u8],
    ) -> Result<(), Errno> {
        if private_data.len() > format::DREQ_PRIVATE {
            return Err(Errno::EINVAL);
        }
        let c = self.m.conns.get_mut(&id.0).ok_or(Errno::ENOENT)?;
        c.out_private = private_data.to_vec();
        self.m
            .apply(now, id.0, Input::Disconnect, Payload::default())
    }

    /// rdma_destroy_id: the consumer is gone. The agent ends the protocol as the Linux
    /// CM does (REJ with reason timeout before a REP, consumer-defined REJ for a pending
    /// request, DREQ on an established connection, DREP on a received DREQ) and raises no
    /// more events for it.
    pub fn destroy(&mut self, now: Instant, id: ConnId) -> Result<(), Errno> {
        let c = self.m.conns.get_mut(&id.0).ok_or(Errno::ENOENT)?;
        c.orphan = true;
        c.out_private.clear();
        if matches!(c.state, CmState::ReqSent | CmState::MraReqRcvd) {
            c.rej = (
                reason::TIMEOUT,
                self.m.cfg.local_ca_guid.to_be_bytes().to_vec(),
                Vec::new(),
            );
        } else {
            c.rej = (reason::CONSUMER_DEFINED, Vec::new(), Vec::new());
        }
        c.sidr.status = sidr_status::REJECT;
        self.m.apply(now, id.0, Input::Destroy, Payload::default())
    }

    /// Drops every listener and connection of `owner` as [`CmAgent::destroy`] would
    /// (its process died).
    pub fn release_owner(&mut self, now: Instant, owner: Owner) {
        self.listeners.retain(|_, o| *o != owner);
        let mut ids: Vec<u32> = self
            .m
            .conns
            .iter()
            .filter(|(_, c)| c.owner == owner && !c.orphan)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            let _ = self.destroy(now, ConnId(id));
        }
    }

    // ---- output ------------------------------------------------------------------

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<CmTransmit> {
        self.m.transmits.pop_front()
    }

    /// The next event for a consumer: the connection, its owner, what happened.
    pub fn poll_event(&mut self) -> Option<(ConnId, Owner, CmEvent)> {
        self.m.events.pop_front()
    }

    /// When [`CmAgent::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.m.conns.values().filter_map(|c| c.deadline).min()
    }

    /// A MAD received on QP1 from `from` (the GRH source) to `to` (our address).
    /// Anything that is not a CM MAD of class version 2 sent with method Send is dropped.
    pub fn handle_mad(&mut self, now: Instant, from: IpAddr, to: IpAddr, bytes: &[u8]) {
        MadInput {
            m: &mut self.m,
            listeners: &self.listeners,
        }
        .handle_mad(now, from, to, bytes)
    }

    /// Runs every timer due at `now`: retransmissions, give-ups, time-wait exits.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due: Vec<u32> = self
            .m
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        due.sort_unstable();
        for id in due {
            let Some(c) = self.m.conns.get_mut(&id) else {
                continue;
            };
            c.deadline = None;
            let retrying = matches!(
                c.state,
                CmState::ReqSent
                    | CmState::MraReqRcvd
                    | CmState::RepSent
                    | CmState::MraRepRcvd
                    | CmState::DreqSent
                    | CmState::SidrReqSent
            );
            let input = if retrying && c.retries_left == 0 {
                Input::RetriesExhausted
            } else {
                Input::Timeout
            };
            let _ = self.m.apply(now, id, input, Payload::default());
        }
    }
}

//! [`CmAgent`]: connections, listeners, timers; carries out the steps of [`super::table`].

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Instant;

use tracing::{debug, trace};
use wire::cm::{mad, ServiceId};
use wire::roce::{Psn, Qkey, Qpn};

use super::conn::{Conn, Payload, Sidr};
use super::format;
use super::qp_attr::conn_qp_attr;
use super::table::{step, CmState, Ev, Input, Msg, Timer};
use super::types::{
    iba_time, reason, sidr_status, CmConfig, CmCounters, CmEvent, CmTransmit, ConnId, ConnParams,
    ConnPath, Owner, PeerInfo, Route,
};
use crate::attr::QpAttr;
use crate::sim::Rng;
use crate::types::{Errno, QpAttrMask, QpState, QpType};

/// EADDRINUSE: the service ID already has a listener.
const EADDRINUSE: Errno = Errno(98);

/// The connection manager of one device. See the [module docs](super).
#[derive(Debug)]
pub struct CmAgent {
    pub(super) cfg: CmConfig,
    pub(super) rng: Rng,
    pub(super) id_operand: u32,
    pub(super) next_id: u32,
    pub(super) conns: HashMap<u32, Conn>,
    /// (peer address, peer comm ID) → local comm ID: duplicate REQs, REJ/SIDR matching.
    pub(super) by_remote: HashMap<(IpAddr, u32), u32>,
    pub(super) listeners: HashMap<u64, Owner>,
    pub(super) transmits: VecDeque<CmTransmit>,
    pub(super) events: VecDeque<(ConnId, Owner, CmEvent)>,
    pub(super) counters: CmCounters,
}

impl CmAgent {
    /// An agent with no connections.
    pub fn new(cfg: CmConfig) -> Self {
        let mut rng = Rng::new(cfg.seed ^ 0x636d_5f61_6765_6e74);
        let id_operand = rng.next_u64() as u32;
        CmAgent {
            cfg,
            rng,
            id_operand,
            next_id: 0,
            conns: HashMap::new(),
            by_remote: HashMap::new(),
            listeners: HashMap::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    /// Counters.
    pub fn counters(&self) -> &CmCounters {
        &self.counters
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
        conn_qp_attr(self.conn(id)?, state)
    }

    /// The state of a connection (`None`: unknown or gone).
    pub fn state(&self, id: ConnId) -> Option<CmState> {
        self.conns.get(&id.0).map(|c| c.state)
    }

    /// What the peer of a connection said (after REQ or REP).
    pub fn peer(&self, id: ConnId) -> Option<PeerInfo> {
        self.conns.get(&id.0).and_then(|c| c.peer)
    }

    /// The path of a connection (what `rdma_cm_id.route` shows for it).
    pub fn path(&self, id: ConnId) -> Option<ConnPath> {
        self.conns.get(&id.0).map(|c| ConnPath {
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
        self.conns.len()
    }

    pub(crate) fn conn(&self, id: ConnId) -> Result<&Conn, Errno> {
        self.conns.get(&id.0).ok_or(Errno::ENOENT)
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
        self.cfg.gids = gids;
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

    /// Sends a REQ (rdma_connect on RC/UC). EINVAL: private data over 56 octets, a QP
    /// type other than RC/UC.
    pub fn connect(
        &mut self,
        now: Instant,
        owner: Owner,
        params: ConnParams,
        route: Route,
    ) -> Result<ConnId, Errno> {
        if params.private_data.len() > format::REQ_USER_PRIVATE
            || !matches!(params.qp_type, QpType::Rc | QpType::Uc)
        {
            return Err(Errno::EINVAL);
        }
        let id = self.new_conn(owner, true, route, params);
        self.apply(now, id, Input::Connect, Payload::default())?;
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
        let id = self.new_conn(owner, true, route, params);
        self.apply(now, id, Input::SidrResolve, Payload::default())?;
        Ok(ConnId(id))
    }

    /// Accepts a connection request with a REP (rdma_accept). The starting PSN,
    /// resources and private data are the consumer's; path MTU, retry counts come from
    /// the REQ.
    pub fn accept(&mut self, now: Instant, id: ConnId, params: ConnParams) -> Result<(), Errno> {
        if params.private_data.len() > format::REP_PRIVATE {
            return Err(Errno::EINVAL);
        }
        let c = self.conns.get_mut(&id.0).ok_or(Errno::ENOENT)?;
        if c.active || !matches!(c.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(Errno::EINVAL);
        }
        // The starting PSN was drawn when the REQ arrived, so the QP can be readied
        // (init_qp_attr) before the REP is sent, as the CMA does.
        if let Some(psn) = params.starting_psn {
            c.psn = psn;
        }
        c.params = params;
        self.apply(now, id.0, Input::Accept, Payload::default())
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
        let c = self.conns.get_mut(&id.0).ok_or(Errno::ENOENT)?;
        if c.state != CmState::SidrReqRcvd {
            return Err(Errno::EINVAL);
        }
        c.sidr = Sidr {
            status: sidr_status::SUCCESS,
            qpn,
            qkey,
        };
        c.out_private = private_data.to_vec();
        self.apply(now, id.0, Input::Accept, Payload::default())
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
        let c = self.conns.get_mut(&id.0).ok_or(Errno::ENOENT)?;
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
        self.apply(now, id.0, Input::Reject, Payload::default())
    }

    /// Active side after REP: sends the RTU (rdma_establish, or the CMA once the QP is
    /// in RTS). Passive side before RTU: the QP received traffic (COMM_EST), the
    /// connection is established ([`CmEvent::Established`]).
    pub fn establish(&mut self, now: Instant, id: ConnId) -> Result<(), Errno> {
        self.apply(now, id.0, Input::Establish, Payload::default())
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
        let c = self.conns.get_mut(&id.0).ok_or(Errno::ENOENT)?;
        c.out_private = private_data.to_vec();
        self.apply(now, id.0, Input::Disconnect, Payload::default())
    }

    /// rdma_destroy_id: the consumer is gone. The agent ends the protocol as the Linux
    /// CM does (REJ with reason timeout before a REP, consumer-defined REJ for a pending
    /// request, DREQ on an established connection, DREP on a received DREQ) and raises no
    /// more events for it.
    pub fn destroy(&mut self, now: Instant, id: ConnId) -> Result<(), Errno> {
        let c = self.conns.get_mut(&id.0).ok_or(Errno::ENOENT)?;
        c.orphan = true;
        c.out_private.clear();
        if matches!(c.state, CmState::ReqSent | CmState::MraReqRcvd) {
            c.rej = (
                reason::TIMEOUT,
                self.cfg.local_ca_guid.to_be_bytes().to_vec(),
                Vec::new(),
            );
        } else {
            c.rej = (reason::CONSUMER_DEFINED, Vec::new(), Vec::new());
        }
        c.sidr.status = sidr_status::REJECT;
        self.apply(now, id.0, Input::Destroy, Payload::default())
    }

    /// Drops every listener and connection of `owner` as [`CmAgent::destroy`] would
    /// (its process died).
    pub fn release_owner(&mut self, now: Instant, owner: Owner) {
        self.listeners.retain(|_, o| *o != owner);
        let mut ids: Vec<u32> = self
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
        self.transmits.pop_front()
    }

    /// The next event for a consumer: the connection, its owner, what happened.
    pub fn poll_event(&mut self) -> Option<(ConnId, Owner, CmEvent)> {
        self.events.pop_front()
    }

    /// When [`CmAgent::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns.values().filter_map(|c| c.deadline).min()
    }

    /// Runs every timer due at `now`: retransmissions, give-ups, time-wait exits.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        due.sort_unstable();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
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
            let _ = self.apply(now, id, input, Payload::default());
        }
    }

    // ---- machinery -----------------------------------------------------------------

    fn new_comm_id(&mut self) -> u32 {
        loop {
            // Like the Linux CM: a counter XORed with a random operand, stored in network
            // order as the kernel's `__be32` does (so the wire shows it byte-swapped).
            let raw = self.next_id ^ self.id_operand;
            self.next_id = self.next_id.wrapping_add(1);
            let id = raw.swap_bytes();
            if id != 0 && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    pub(super) fn new_conn(
        &mut self,
        owner: Owner,
        active: bool,
        route: Route,
        params: ConnParams,
    ) -> u32 {
        let id = self.new_comm_id();
        let sgid_index = self
            .cfg
            .gids
            .iter()
            .position(|g| g.to_ip() == route.local)
            .unwrap_or(0) as u8;
        let psn = params
            .starting_psn
            .unwrap_or_else(|| Psn::new(self.rng.next_u64() as u32));
        let plt = self.cfg.packet_life_time;
        let mtu = params.path_mtu.min(self.cfg.active_mtu);
        let response_timeout = if params.qp_type == QpType::Ud {
            iba_time(self.cfg.cm_response_timeout)
        } else {
            iba_time(plt) * 2 + iba_time(self.cfg.cm_response_timeout)
        };
        let c = Conn {
            owner,
            state: CmState::Idle,
            active,
            orphan: false,
            local_comm_id: id,
            remote_comm_id: 0,
            tid: self.cfg.tid_for(id),
            dreq_tid: 0,
            service_id: route.service_id(),
            local: route.local,
            remote: route.remote,
            sgid_index,
            src_port: route.src_port,
            params,
            psn,
            peer: None,
            mtu,
            flow_label: route.flow_label(),
            hop_limit: route.hop_limit,
            traffic_class: route.traffic_class,
            ack_timeout: plt + 1,
            response_timeout,
            sent: None,
            retries_left: self.cfg.max_cm_retries,
            deadline: None,
            mra_timeout: 0,
            rej: (reason::CONSUMER_DEFINED, Vec::new(), Vec::new()),
            out_private: Vec::new(),
            sidr: Sidr::default(),
        };
        self.conns.insert(id, c);
        id
    }

    pub(super) fn push(&mut self, src: IpAddr, dst: IpAddr, mad: [u8; mad::MAD_LEN]) {
        self.counters.tx += 1;
        self.transmits.push_back(CmTransmit { src, dst, mad });
    }

    /// A REJ answering a REQ that gets no connection.
    pub(super) fn reply_rej(
        &mut self,
        from: IpAddr,
        to: IpAddr,
        tid: u64,
        remote: u32,
        local: u32,
        why: u16,
    ) {
        let m = format::rej_reply(tid, local, remote, 0, why);
        self.push(to, from, m);
    }

    /// Carries out one cell of the table.
    pub(super) fn apply(
        &mut self,
        now: Instant,
        id: u32,
        input: Input,
        payload: Payload,
    ) -> Result<(), Errno> {
        let cfg_retries = self.cfg.max_cm_retries;
        let timewait = iba_time(self.cfg.packet_life_time + 1);
        let sidr_hold =
            iba_time(self.cfg.cm_response_timeout) * (u32::from(self.cfg.max_cm_retries) + 1);
        let Some(c) = self.conns.get(&id) else {
            return Err(Errno::ENOENT);
        };
        let Some(st) = step(c.state, input) else {
            trace!(
                state = c.state.name(),
                ?input,
                "cm input not valid in state"
            );
            if c.state == CmState::Idle {
                self.remove(id);
            }
            return Err(Errno::EINVAL);
        };
        if st.next != c.state {
            debug!(
                comm_id = id,
                from = c.state.name(),
                to = st.next.name(),
                ?input,
                "cm state"
            );
        }
        let from_state = c.state;
        if let Some(send) = st.send {
            let mad = match send {
                Msg::Resend => {
                    self.counters.tx_retries += 1;
                    c.sent.as_deref().copied()
                }
                _ => Some(format::build(&self.cfg, c, from_state, send)),
            };
            let (src, dst) = (c.local, c.remote);
            let keep = matches!(send, Msg::Req | Msg::Rep | Msg::Dreq | Msg::SidrReq);
            if let Some(m) = mad {
                self.push(src, dst, m);
                if keep {
                    if let Some(c) = self.conns.get_mut(&id) {
                        c.sent = Some(Box::new(m));
                    }
                }
            }
        }
        let Some(c) = self.conns.get_mut(&id) else {
            return Ok(());
        };
        c.state = st.next;
        match st.timer {
            Timer::Keep => {}
            Timer::Stop => c.deadline = None,
            Timer::Response => {
                if st.send == Some(Msg::Resend) {
                    c.retries_left = c.retries_left.saturating_sub(1);
                } else {
                    c.retries_left = cfg_retries;
                }
                c.deadline = Some(now + c.response_timeout);
            }
            Timer::Mra => {
                c.deadline = Some(now + iba_time(c.mra_timeout) + iba_time(c.ack_timeout));
            }
            Timer::Timewait => c.deadline = Some(now + timewait),
            Timer::SidrHold => c.deadline = Some(now + sidr_hold),
        }
        if let Some(ev) = st.event {
            if !c.orphan {
                let event = make_event(ev, c, payload);
                self.events.push_back((ConnId(id), c.owner, event));
            }
        }
        if st.next == CmState::Idle {
            self.remove(id);
        }
        Ok(())
    }

    fn remove(&mut self, id: u32) {
        if let Some(c) = self.conns.remove(&id) {
            if self.by_remote.get(&(c.remote, c.remote_comm_id)) == Some(&id) {
                self.by_remote.remove(&(c.remote, c.remote_comm_id));
            }
        }
    }
}

fn make_event(ev: Ev, c: &Conn, p: Payload) -> CmEvent {
    match ev {
        Ev::ConnectRequest => match c.peer {
            Some(peer) => CmEvent::ConnectRequest {
                service_id: c.service_id,
                peer,
                cma: p.cma,
                private_data: p.private_data,
            },
            None => CmEvent::Unreachable,
        },
        Ev::SidrRequest => CmEvent::SidrRequest {
            service_id: c.service_id,
            addr: c.remote,
            cma: p.cma,
            private_data: p.private_data,
        },
        Ev::ConnectResponse => match c.peer {
            Some(peer) => CmEvent::ConnectResponse {
                peer,
                private_data: p.private_data,
            },
            None => CmEvent::Unreachable,
        },
        Ev::Established => CmEvent::Established,
        Ev::Rejected => CmEvent::Rejected {
            reason: p.reason,
            private_data: p.private_data,
            ari: p.ari,
        },
        Ev::Unreachable => CmEvent::Unreachable,
        Ev::Disconnected => CmEvent::Disconnected {
            timed_out: false,
            private_data: p.private_data,
        },
        Ev::DisconnectTimedOut => CmEvent::Disconnected {
            timed_out: true,
            private_data: Vec::new(),
        },
        Ev::TimewaitExit => CmEvent::TimewaitExit,
        Ev::SidrReply => match p.sidr {
            Some((sidr_status::SUCCESS, qpn, qkey)) => CmEvent::SidrResolved {
                qpn,
                qkey,
                private_data: p.private_data,
            },
            Some((status, _, _)) => CmEvent::SidrRejected {
                status,
                private_data: p.private_data,
            },
            None => CmEvent::Unreachable,
        },
    }
}

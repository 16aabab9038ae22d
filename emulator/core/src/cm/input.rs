//! Received MADs: which connection and which table input each one is.

use std::net::IpAddr;
use std::time::Instant;

use tracing::trace;
use wire::cm::messages::{CommIds, Dreq, Mra, Rej, Rep, Req, SidrRep, SidrReq};
use wire::cm::{mad, CmMad, CmMessage, CmaHeader, ServiceId};
use wire::roce::Qpn;

use std::collections::HashMap;

use super::conn::Payload;
use super::format;
use super::machine::Machine;
use super::table::{CmState, Input};
use super::types::{iba_time, reason, ConnParams, Owner, PeerInfo, Route};
use crate::types::{Mtu, QpType};

/// What a received MAD touches: the connection machine and the listeners.
#[derive(Debug)]
pub(super) struct MadInput<'a> {
    pub m: &'a mut Machine,
    pub listeners: &'a HashMap<u64, Owner>,
}

impl MadInput<'_> {
    // ---- input -------------------------------------------------------------------

    /// A MAD received on QP1 from `from` (the GRH source) to `to` (our address).
    /// Anything that is not a CM MAD of class version 2 sent with method Send is dropped.
    pub(super) fn handle_mad(&mut self, now: Instant, from: IpAddr, to: IpAddr, bytes: &[u8]) {
        let Ok(m) = CmMad::parse(bytes) else {
            self.m.counters.rx_dropped += 1;
            return;
        };
        if m.header.class_version != mad::CM_CLASS_VERSION
            || m.header.method != mad::METHOD_SEND
            || m.header.response
        {
            self.m.counters.rx_dropped += 1;
            return;
        }
        self.m.counters.rx += 1;
        trace!(msg = m.message.name(), %from, "cm rx");
        let tid = m.header.transaction_id;
        let handled = match m.message {
            CmMessage::Req(r) => self.on_req(now, from, to, tid, &r),
            CmMessage::Rep(r) => self.on_rep(now, from, to, tid, &r),
            CmMessage::Rtu(r) => self.on_ids(now, &r, Input::RecvRtu),
            CmMessage::Mra(r) => self.on_mra(now, &r),
            CmMessage::Rej(r) => self.on_rej(now, from, &r),
            CmMessage::Dreq(r) => self.on_dreq(now, from, to, tid, &r),
            CmMessage::Drep(r) => self.on_ids(now, &r, Input::RecvDrep),
            CmMessage::SidrReq(r) => self.on_sidr_req(now, from, to, tid, &r),
            CmMessage::SidrRep(r) => self.on_sidr_rep(now, &r),
            CmMessage::Other { .. } => false,
        };
        if !handled {
            self.m.counters.rx_dropped += 1;
        }
    }

    fn on_req(&mut self, now: Instant, from: IpAddr, to: IpAddr, tid: u64, r: &Req) -> bool {
        if let Some(&id) = self.m.by_remote.get(&(from, r.local_comm_id)) {
            self.m.counters.rx_duplicates += 1;
            return self
                .m
                .apply(now, id, Input::RecvReq, Payload::default())
                .is_ok();
        }
        let Some(mtu) = Mtu::from_raw(u32::from(r.path_mtu)) else {
            return false;
        };
        let Some(qp_type) = req_qp_type(r) else {
            // IBA 12.6.5: a transport this CM does not serve (RD, or an extended type
            // other than XRC) is rejected with reason 9.
            self.m.counters.rx_bad_transport += 1;
            self.m.reply_rej(
                from,
                to,
                tid,
                r.local_comm_id,
                0,
                reason::INVALID_TRANSPORT_TYPE,
            );
            return true;
        };
        // A REQ from a QP that is still connected here under another comm ID: the old
        // connection is stale (IBA ch. 12): like the Linux CM, reject the REQ and
        // disconnect the old connection.
        let stale = self.m.conns.iter().find_map(|(id, c)| {
            let p = c.peer?;
            (p.addr == from
                && p.qpn == r.local_qpn
                && p.ca_guid == r.local_ca_guid
                && !matches!(c.state, CmState::Timewait | CmState::Idle))
            .then_some(*id)
        });
        if let Some(old) = stale {
            self.m
                .reply_rej(from, to, tid, r.local_comm_id, 0, reason::STALE_CONN);
            if self.m.conns.get(&old).map(|c| c.state) == Some(CmState::Established) {
                let _ = self
                    .m
                    .apply(now, old, Input::Disconnect, Payload::default());
            }
            return true;
        }
        let Some(&owner) = self.listeners.get(&r.service_id) else {
            self.m.reply_rej(
                from,
                to,
                tid,
                r.local_comm_id,
                0,
                reason::INVALID_SERVICE_ID,
            );
            return true;
        };
        let cma = CmaHeader::parse(r.private_data).ok();
        let user = if cma.is_some() {
            &r.private_data[wire::cm::cma::CMA_HEADER_LEN..]
        } else {
            r.private_data
        };
        let peer = PeerInfo {
            addr: from,
            comm_id: r.local_comm_id,
            ca_guid: r.local_ca_guid,
            qpn: r.local_qpn,
            starting_psn: r.starting_psn,
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            path_mtu: mtu,
            qp_type,
            srq: r.srq,
            flow_control: r.end_to_end_flow_control,
        };
        let route = Route {
            local: to,
            remote: from,
            port_space: wire::cm::PortSpace::Tcp,
            src_port: 0,
            dst_port: 0,
            hop_limit: r.primary_path.hop_limit,
            traffic_class: r.primary_path.traffic_class,
            flow_label: Some(r.primary_path.flow_label),
        };
        let mut params = ConnParams::rc(Qpn(0));
        params.qp_type = qp_type;
        let id = self.m.new_conn(owner, false, route, params);
        let plt = r.primary_path.local_ack_timeout.saturating_sub(1);
        let active_mtu = self.m.cfg.active_mtu;
        if let Some(c) = self.m.conns.get_mut(&id) {
            c.service_id = ServiceId(r.service_id);
            c.tid = tid;
            c.remote_comm_id = r.local_comm_id;
            c.peer = Some(peer);
            c.mtu = mtu.min(active_mtu);
            c.ack_timeout = plt + 1;
            c.response_timeout = iba_time(plt) * 2 + iba_time(r.local_cm_response_timeout);
        }
        self.m.by_remote.insert((from, r.local_comm_id), id);
        let payload = Payload {
            private_data: user.to_vec(),
            cma,
            ..Payload::default()
        };
        self.m.apply(now, id, Input::RecvReq, payload).is_ok()
    }

    fn on_rep(&mut self, now: Instant, from: IpAddr, to: IpAddr, tid: u64, r: &Rep) -> bool {
        let Some(c) = self.m.conns.get_mut(&r.remote_comm_id) else {
            // Linux (cm_rep_handler): a REP nobody waits for gets a REJ.
            let m = format::rej_reply(
                tid,
                r.remote_comm_id,
                r.local_comm_id,
                1,
                reason::INVALID_COMM_ID,
            );
            self.m.push(to, from, m);
            return true;
        };
        if !c.active || c.remote != from {
            return false;
        }
        match c.state {
            CmState::ReqSent | CmState::MraReqRcvd => {
                c.remote_comm_id = r.local_comm_id;
                c.peer = Some(PeerInfo {
                    addr: from,
                    comm_id: r.local_comm_id,
                    ca_guid: r.local_ca_guid,
                    // An XRC target names its QP in the Local EE Context Number
                    // (Linux: cm_rep_get_qpn).
                    qpn: if c.params.qp_type == QpType::XrcSend {
                        Qpn(r.local_eecn)
                    } else {
                        r.local_qpn
                    },
                    starting_psn: r.starting_psn,
                    responder_resources: r.responder_resources,
                    initiator_depth: r.initiator_depth,
                    retry_count: 0,
                    rnr_retry_count: r.rnr_retry_count,
                    path_mtu: c.mtu,
                    qp_type: c.params.qp_type,
                    srq: r.srq,
                    flow_control: r.end_to_end_flow_control,
                });
                let id = c.local_comm_id;
                self.m.by_remote.insert((from, r.local_comm_id), id);
                let payload = Payload {
                    private_data: r.private_data.to_vec(),
                    ..Payload::default()
                };
                self.m.apply(now, id, Input::RecvRep, payload).is_ok()
            }
            _ if c.remote_comm_id == r.local_comm_id => {
                self.m.counters.rx_duplicates += 1;
                let id = c.local_comm_id;
                self.m
                    .apply(now, id, Input::RecvRep, Payload::default())
                    .is_ok()
            }
            _ => false,
        }
    }

    /// RTU and DREP: two comm IDs and private data.
    fn on_ids(&mut self, now: Instant, r: &CommIds, input: Input) -> bool {
        let Some(c) = self.m.conns.get(&r.remote_comm_id) else {
            return false;
        };
        if c.remote_comm_id != r.local_comm_id {
            return false;
        }
        let payload = Payload {
            private_data: r.private_data.to_vec(),
            ..Payload::default()
        };
        self.m.apply(now, r.remote_comm_id, input, payload).is_ok()
    }

    fn on_mra(&mut self, now: Instant, r: &Mra) -> bool {
        let Some(c) = self.m.conns.get_mut(&r.remote_comm_id) else {
            return false;
        };
        let input = match r.message_mraed {
            0 if c.active => Input::RecvMraReq,
            1 if !c.active && c.remote_comm_id == r.local_comm_id => Input::RecvMraRep,
            _ => return false,
        };
        c.mra_timeout = r.service_timeout;
        if input == Input::RecvMraReq {
            // The MRA tells us the peer's comm ID before its REP does.
            c.remote_comm_id = r.local_comm_id;
        }
        self.m
            .apply(now, r.remote_comm_id, input, Payload::default())
            .is_ok()
    }

    fn on_rej(&mut self, now: Instant, from: IpAddr, r: &Rej) -> bool {
        // A REJ names our comm ID, except the one an active side sends when it gives up
        // before knowing it (reason timeout): then its own comm ID finds us.
        let id = if r.remote_comm_id != 0 && self.m.conns.contains_key(&r.remote_comm_id) {
            r.remote_comm_id
        } else if let Some(&id) = self.m.by_remote.get(&(from, r.local_comm_id)) {
            id
        } else {
            return false;
        };
        let Some(c) = self.m.conns.get(&id) else {
            return false;
        };
        if c.remote != from
            || (c.remote_comm_id != 0
                && r.local_comm_id != 0
                && c.remote_comm_id != r.local_comm_id)
        {
            return false;
        }
        let input = if r.reason == reason::STALE_CONN {
            Input::RecvRejStale
        } else {
            Input::RecvRej
        };
        let ari_len = usize::from(r.rejected_info_length).min(r.ari.len());
        let payload = Payload {
            private_data: r.private_data.to_vec(),
            reason: r.reason,
            ari: r.ari[..ari_len].to_vec(),
            ..Payload::default()
        };
        self.m.apply(now, id, input, payload).is_ok()
    }

    fn on_dreq(&mut self, now: Instant, from: IpAddr, to: IpAddr, tid: u64, r: &Dreq) -> bool {
        let known = self.m.conns.get(&r.remote_comm_id).is_some_and(|c| {
            c.remote == from && c.remote_comm_id == r.local_comm_id && c.params.qpn == r.remote_qpn
        });
        if !known {
            // Linux answers a DREQ for a connection it does not know with a DREP, so a
            // peer that lost its state is not left retrying.
            let m = format::drep_for_unknown(tid, r.remote_comm_id, r.local_comm_id);
            self.m.push(to, from, m);
            return true;
        }
        if let Some(c) = self.m.conns.get_mut(&r.remote_comm_id) {
            if matches!(c.state, CmState::DreqRcvd | CmState::Timewait) {
                self.m.counters.rx_duplicates += 1;
            }
            c.dreq_tid = tid;
        }
        let payload = Payload {
            private_data: r.private_data.to_vec(),
            ..Payload::default()
        };
        self.m
            .apply(now, r.remote_comm_id, Input::RecvDreq, payload)
            .is_ok()
    }

    fn on_sidr_req(
        &mut self,
        now: Instant,
        from: IpAddr,
        to: IpAddr,
        tid: u64,
        r: &SidrReq,
    ) -> bool {
        if let Some(&id) = self.m.by_remote.get(&(from, r.request_id)) {
            self.m.counters.rx_duplicates += 1;
            return self
                .m
                .apply(now, id, Input::RecvSidrReq, Payload::default())
                .is_ok();
        }
        let cma = CmaHeader::parse(r.private_data).ok();
        let Some(&owner) = self.listeners.get(&r.service_id) else {
            let m = format::sidr_rep_unsupported(tid, r.request_id, r.service_id);
            self.m.push(to, from, m);
            return true;
        };
        let route = Route {
            local: to,
            remote: from,
            port_space: wire::cm::PortSpace::Udp,
            src_port: 0,
            dst_port: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: Some(0),
        };
        let mut params = ConnParams::rc(Qpn(0));
        params.qp_type = QpType::Ud;
        let id = self.m.new_conn(owner, false, route, params);
        if let Some(c) = self.m.conns.get_mut(&id) {
            c.service_id = ServiceId(r.service_id);
            c.tid = tid;
            c.remote_comm_id = r.request_id;
        }
        self.m.by_remote.insert((from, r.request_id), id);
        let user = if cma.is_some() {
            &r.private_data[wire::cm::cma::CMA_HEADER_LEN..]
        } else {
            r.private_data
        };
        let payload = Payload {
            private_data: user.to_vec(),
            cma,
            ..Payload::default()
        };
        self.m.apply(now, id, Input::RecvSidrReq, payload).is_ok()
    }

    fn on_sidr_rep(&mut self, now: Instant, r: &SidrRep) -> bool {
        let Some(c) = self.m.conns.get(&r.request_id) else {
            return false;
        };
        if c.state != CmState::SidrReqSent {
            return false;
        }
        let payload = Payload {
            private_data: r.private_data.to_vec(),
            sidr: Some((r.status, r.qpn, r.qkey)),
            ..Payload::default()
        };
        self.m
            .apply(now, r.request_id, Input::RecvSidrRep, payload)
            .is_ok()
    }
}

/// The QP type a REQ asks for, as the answering side sees it (Linux: `cm_req_get_qp_type`):
/// transport service type 0 RC, 1 UC, 3 with extended transport type 1 an XRC initiator,
/// answered by an XRC target. `None`: RD or an unknown extended type.
pub(super) fn req_qp_type(r: &Req) -> Option<QpType> {
    match (r.transport_service_type, r.extended_transport_type) {
        (0, _) => Some(QpType::Rc),
        (1, _) => Some(QpType::Uc),
        (3, 1) => Some(QpType::XrcRecv),
        _ => None,
    }
}

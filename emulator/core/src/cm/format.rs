//! Building the CM MADs a connection sends, with the field values the Linux CM/CMA put
//! in them on rxe (checked against `tests/corpora/rxe/rdma_cm.pcap` and `rping.pcap`).

use wire::cm::cma::CMA_HEADER_LEN;
use wire::cm::messages::{CommIds, Dreq, Mra, Rej, Rep, Req, SidrRep, SidrReq};
use wire::cm::{mad, CmMad, CmMessage, CmPath, CmaHeader, MadHeader};
use wire::roce::{Pkey, Qkey, Qpn};

use super::conn::Conn;
use super::table::{CmState, Msg};
use super::types::{reason, sidr_status, CmConfig};
use crate::types::{Gid, QpType};

/// Consumer private data in a REQ (92 octets minus the CMA header).
pub(crate) const REQ_USER_PRIVATE: usize = 92 - CMA_HEADER_LEN;
/// Consumer private data in a SIDR_REQ (216 minus the CMA header).
pub(crate) const SIDR_REQ_USER_PRIVATE: usize = 216 - CMA_HEADER_LEN;
/// Private data in a REP.
pub(crate) const REP_PRIVATE: usize = 196;
/// Private data in a REJ.
pub(crate) const REJ_PRIVATE: usize = 148;
/// Private data in a SIDR_REP.
pub(crate) const SIDR_REP_PRIVATE: usize = 136;
/// Private data in a DREQ (a DREP holds 224; disconnect may send either).
pub(crate) const DREQ_PRIVATE: usize = 220;

/// The permissive LID the Linux CM writes in both LID fields of a RoCE path (RoCE has no LIDs).
const PERMISSIVE_LID: u16 = 0xffff;

fn emit(tid: u64, message: CmMessage<'_>) -> [u8; mad::MAD_LEN] {
    let mut b = [0u8; mad::MAD_LEN];
    CmMad {
        header: MadHeader::cm(message.attribute_id(), tid),
        message,
    }
    .emit(&mut b);
    b
}

fn cma_private(c: &Conn) -> Vec<u8> {
    let mut pd = vec![0u8; CMA_HEADER_LEN];
    CmaHeader {
        src_port: c.src_port,
        src: c.local,
        dst: c.remote,
    }
    .emit(&mut pd);
    pd.extend_from_slice(&c.params.private_data);
    pd
}

/// The MAD for `send` on connection `c` (which was in `state`).
pub(crate) fn build(cfg: &CmConfig, c: &Conn, state: CmState, send: Msg) -> [u8; mad::MAD_LEN] {
    let peer_qpn = c.peer.map_or(Qpn(0), |p| p.qpn);
    match send {
        Msg::Req => {
            let pd = cma_private(c);
            // Linux (cm_format_req, cm_req_set_qp_type): an XRC initiator's REQ is
            // transport type 3, extended type 1, and leaves responder resources, both
            // retry counts and the SRQ bit 0.
            let xrc = c.params.qp_type == QpType::XrcSend;
            let rc_only = |v: u8| if xrc { 0 } else { v };
            let transport = match c.params.qp_type {
                QpType::Uc => 1,
                QpType::XrcSend => 3,
                _ => 0,
            };
            emit(
                c.tid,
                CmMessage::Req(Req {
                    local_comm_id: c.local_comm_id,
                    vendor_id: 0,
                    service_id: c.service_id.0,
                    local_ca_guid: cfg.local_ca_guid,
                    local_qkey: Qkey(0),
                    local_qpn: c.params.qpn,
                    responder_resources: rc_only(c.params.responder_resources),
                    local_eecn: 0,
                    initiator_depth: c.params.initiator_depth,
                    remote_eecn: 0,
                    remote_cm_response_timeout: cfg.cm_response_timeout,
                    transport_service_type: transport,
                    end_to_end_flow_control: c.params.flow_control,
                    starting_psn: c.psn,
                    local_cm_response_timeout: cfg.cm_response_timeout,
                    retry_count: rc_only(c.params.retry_count.min(7)),
                    pkey: Pkey::DEFAULT,
                    path_mtu: c.mtu as u8,
                    rdc_exists: false,
                    rnr_retry_count: rc_only(c.params.rnr_retry_count.min(7)),
                    max_cm_retries: cfg.max_cm_retries.min(15),
                    srq: c.params.srq && !xrc,
                    extended_transport_type: u8::from(xrc),
                    primary_path: CmPath {
                        local_lid: PERMISSIVE_LID,
                        remote_lid: PERMISSIVE_LID,
                        local_gid: Gid::from_ip(c.local).0,
                        remote_gid: Gid::from_ip(c.remote).0,
                        flow_label: c.flow_label,
                        packet_rate: 0,
                        traffic_class: c.traffic_class,
                        hop_limit: c.hop_limit,
                        sl: 0,
                        subnet_local: c.hop_limit <= 1,
                        local_ack_timeout: c.ack_timeout,
                    },
                    alternate_path: CmPath::default(),
                    sap_supported: false,
                    private_data: &pd,
                }),
            )
        }
        Msg::Rep => {
            // Linux (cm_format_rep): an XRC target names its QP in the Local EE Context
            // Number, sets the SRQ bit, and leaves the Local QPN, initiator depth and
            // flow control 0.
            let tgt = c.params.qp_type == QpType::XrcRecv;
            let (qpn, eecn) = if tgt {
                (Qpn(0), c.params.qpn.0)
            } else {
                (c.params.qpn, 0)
            };
            emit(
                c.tid,
                CmMessage::Rep(Rep {
                    local_comm_id: c.local_comm_id,
                    remote_comm_id: c.remote_comm_id,
                    local_qkey: Qkey(0),
                    local_qpn: qpn,
                    local_eecn: eecn,
                    starting_psn: c.psn,
                    vendor_id: 0,
                    responder_resources: c.params.responder_resources,
                    initiator_depth: if tgt { 0 } else { c.params.initiator_depth },
                    target_ack_delay: cfg.target_ack_delay,
                    failover_accepted: 0,
                    end_to_end_flow_control: c.params.flow_control && !tgt,
                    rnr_retry_count: c.params.rnr_retry_count.min(7),
                    srq: c.params.srq || tgt,
                    local_ca_guid: cfg.local_ca_guid,
                    private_data: &c.params.private_data,
                }),
            )
        }
        Msg::Rtu => emit(
            c.tid,
            CmMessage::Rtu(CommIds {
                local_comm_id: c.local_comm_id,
                remote_comm_id: c.remote_comm_id,
                private_data: &[],
            }),
        ),
        Msg::MraReq | Msg::MraRep => emit(
            c.tid,
            CmMessage::Mra(Mra {
                local_comm_id: c.local_comm_id,
                remote_comm_id: c.remote_comm_id,
                message_mraed: u8::from(send == Msg::MraRep),
                service_timeout: cfg.mra_service_timeout,
                private_data: &[],
            }),
        ),
        Msg::Rej | Msg::RejStale => {
            let (reason, ari, pd) = if send == Msg::RejStale {
                (reason::STALE_CONN, &[][..], &[][..])
            } else {
                (c.rej.0, &c.rej.1[..], &c.rej.2[..])
            };
            // Linux (cm_format_rej): a REJ of a REQ not yet MRAed carries local comm
            // ID 0; which message is rejected follows the state.
            let (local, message_rejected) = match state {
                CmState::ReqRcvd => (0, 0),
                CmState::MraReqSent => (c.local_comm_id, 0),
                CmState::RepRcvd | CmState::MraRepSent => (c.local_comm_id, 1),
                _ => (c.local_comm_id, 2),
            };
            emit(
                c.tid,
                CmMessage::Rej(Rej {
                    local_comm_id: local,
                    remote_comm_id: c.remote_comm_id,
                    message_rejected,
                    rejected_info_length: ari.len().min(72) as u8,
                    reason,
                    ari,
                    private_data: pd,
                }),
            )
        }
        Msg::Dreq => emit(
            cfg.tid_for(c.local_comm_id),
            CmMessage::Dreq(Dreq {
                local_comm_id: c.local_comm_id,
                remote_comm_id: c.remote_comm_id,
                remote_qpn: peer_qpn,
                private_data: &c.out_private,
            }),
        ),
        Msg::Drep => emit(
            c.dreq_tid,
            CmMessage::Drep(CommIds {
                local_comm_id: c.local_comm_id,
                remote_comm_id: c.remote_comm_id,
                private_data: &c.out_private,
            }),
        ),
        Msg::SidrReq => {
            let pd = cma_private(c);
            emit(
                c.tid,
                CmMessage::SidrReq(SidrReq {
                    request_id: c.local_comm_id,
                    pkey: Pkey::DEFAULT,
                    service_id: c.service_id.0,
                    private_data: &pd,
                }),
            )
        }
        Msg::SidrRep => emit(
            c.tid,
            CmMessage::SidrRep(SidrRep {
                request_id: c.remote_comm_id,
                status: c.sidr.status,
                additional_info_length: 0,
                vendor_id: 0,
                qpn: c.sidr.qpn,
                service_id: c.service_id.0,
                qkey: c.sidr.qkey,
                additional_info: &[],
                private_data: &c.out_private,
            }),
        ),
        // The agent resends the kept MAD itself; nothing is built.
        Msg::Resend => c.sent.as_deref().copied().unwrap_or([0u8; mad::MAD_LEN]),
    }
}

/// A REJ answering a message that has no connection (`message_rejected`: 0 REQ, 1 REP).
pub(crate) fn rej_reply(
    tid: u64,
    local: u32,
    remote: u32,
    message_rejected: u8,
    reason: u16,
) -> [u8; mad::MAD_LEN] {
    emit(
        tid,
        CmMessage::Rej(Rej {
            local_comm_id: local,
            remote_comm_id: remote,
            message_rejected,
            rejected_info_length: 0,
            reason,
            ari: &[],
            private_data: &[],
        }),
    )
}

/// A DREP for a DREQ whose connection is unknown.
pub(crate) fn drep_for_unknown(tid: u64, local: u32, remote: u32) -> [u8; mad::MAD_LEN] {
    emit(
        tid,
        CmMessage::Drep(CommIds {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: &[],
        }),
    )
}

/// A SIDR_REP for a service ID nobody listens on.
pub(crate) fn sidr_rep_unsupported(
    tid: u64,
    request_id: u32,
    service_id: u64,
) -> [u8; mad::MAD_LEN] {
    emit(
        tid,
        CmMessage::SidrRep(SidrRep {
            request_id,
            status: sidr_status::UNSUPPORTED,
            additional_info_length: 0,
            vendor_id: 0,
            qpn: Qpn(0),
            service_id,
            qkey: Qkey(0),
            additional_info: &[],
            private_data: &[],
        }),
    )
}

//! `rdma_init_qp_attr`: the QP attributes a negotiated connection implies, so the daemon
//! drives the application's QP through INIT → RTR → RTS the way the kernel's CMA does
//! (values as the Linux CM's `cm_init_qp_{init,rtr,rts}_attr` derive them).

use wire::roce::{Psn, Qkey};

use super::conn::Conn;
use super::table::CmState;
use crate::attr::{AhAttr, GlobalRoute, QpAttr};
use crate::types::{AccessFlags, Errno, Gid, QpAttrMask, QpState, QpType};

/// The Q_Key RDMA CM gives UD QPs of the UDP port space (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: Qkey = Qkey(0x0123_4567);

/// INIT attributes of a QP created on an id that is not connected yet (rdma_create_qp):
/// RC/UC get no remote access until the connection says otherwise, UD gets `qkey`.
pub fn unconnected_init_attr(qp_type: QpType, qkey: Qkey) -> (QpAttr, QpAttrMask) {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        ..QpAttr::default()
    };
    let mut m = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
    if qp_type == QpType::Ud {
        a.qkey = qkey;
        m |= QpAttrMask::QKEY;
    } else {
        a.qp_access_flags = AccessFlags::EMPTY;
        m |= QpAttrMask::ACCESS_FLAGS;
    }
    (a, m)
}

/// The attributes of a UD QP for `state` (INIT with the Q_Key, RTR, RTS with `sq_psn`).
pub fn ud_qp_attr(state: QpState, qkey: Qkey, sq_psn: Psn) -> Result<(QpAttr, QpAttrMask), Errno> {
    match state {
        QpState::Init => Ok(unconnected_init_attr(QpType::Ud, qkey)),
        QpState::Rtr => Ok((
            QpAttr {
                qp_state: QpState::Rtr,
                ..QpAttr::default()
            },
            QpAttrMask::STATE,
        )),
        QpState::Rts => Ok((
            QpAttr {
                qp_state: QpState::Rts,
                sq_psn,
                ..QpAttr::default()
            },
            QpAttrMask::STATE | QpAttrMask::SQ_PSN,
        )),
        _ => Err(Errno::EINVAL),
    }
}

/// [`CmAgent::init_qp_attr`](super::CmAgent::init_qp_attr) for connection `c`.
pub(super) fn conn_qp_attr(c: &Conn, state: QpState) -> Result<(QpAttr, QpAttrMask), Errno> {
    let qp_type = c.params.qp_type;
    if qp_type == QpType::Ud {
        return ud_qp_attr(state, RDMA_UDP_QKEY, c.psn);
    }
    // Reliable: RC and both XRC halves. Linux (cm_init_qp_rtr_attr/rts_attr): the
    // responder attributes go to RC and XRC targets, the requester ones to RC and XRC
    // initiators, the ACK timeout to all three.
    let rc = matches!(qp_type, QpType::Rc | QpType::XrcSend | QpType::XrcRecv);
    let responds = matches!(qp_type, QpType::Rc | QpType::XrcRecv);
    let requests = matches!(qp_type, QpType::Rc | QpType::XrcSend);
    let Some(peer) = c.peer else {
        return match state {
            QpState::Init => Ok(unconnected_init_attr(qp_type, Qkey(0))),
            _ => Err(Errno::EINVAL),
        };
    };
    // What this side accepts (max_dest_rd_atomic) and issues (max_rd_atomic).
    // Before accept the passive side has only the REQ (the CMA then overrides both
    // with its rdma_conn_param, as the daemon may).
    let accepted = !matches!(c.state, CmState::ReqRcvd | CmState::MraReqSent);
    let (responder, initiator) = if c.active || !accepted {
        (peer.initiator_depth, peer.responder_resources)
    } else {
        (c.params.responder_resources, c.params.initiator_depth)
    };
    match state {
        QpState::Init => {
            let (mut a, m) = unconnected_init_attr(qp_type, Qkey(0));
            a.qp_access_flags = AccessFlags::REMOTE_WRITE;
            if rc && responder > 0 {
                // Since Linux 6.2 the CM also makes the QP flushable on a device that
                // has FLUSH, as every RoCE device of the daemon has.
                a.qp_access_flags = a.qp_access_flags
                    | AccessFlags::REMOTE_READ
                    | AccessFlags::REMOTE_ATOMIC
                    | AccessFlags::FLUSH_GLOBAL
                    | AccessFlags::FLUSH_PERSISTENT;
            }
            Ok((a, m))
        }
        QpState::Rtr => {
            let a = QpAttr {
                qp_state: QpState::Rtr,
                ah_attr: AhAttr {
                    grh: GlobalRoute {
                        dgid: Gid::from_ip(c.remote),
                        flow_label: c.flow_label,
                        sgid_index: c.sgid_index,
                        hop_limit: c.hop_limit,
                        traffic_class: c.traffic_class,
                    },
                    is_global: true,
                    port_num: 1,
                    ..AhAttr::default()
                },
                path_mtu: c.mtu as u32,
                dest_qp_num: peer.qpn,
                rq_psn: c.psn,
                max_dest_rd_atomic: responder,
                min_rnr_timer: 0,
                ..QpAttr::default()
            };
            let mut m = QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN;
            if responds {
                m |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
            }
            Ok((a, m))
        }
        QpState::Rts => {
            let retry = if c.active {
                c.params.retry_count
            } else {
                peer.retry_count
            };
            let a = QpAttr {
                qp_state: QpState::Rts,
                sq_psn: peer.starting_psn,
                timeout: c.ack_timeout,
                retry_cnt: retry.min(7),
                rnr_retry: peer.rnr_retry_count.min(7),
                max_rd_atomic: initiator,
                ..QpAttr::default()
            };
            let mut m = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
            if rc {
                m |= QpAttrMask::TIMEOUT;
            }
            if requests {
                m |= QpAttrMask::RETRY_CNT | QpAttrMask::RNR_RETRY | QpAttrMask::MAX_QP_RD_ATOMIC;
            }
            Ok((a, m))
        }
        _ => Err(Errno::EINVAL),
    }
}

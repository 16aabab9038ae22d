//! What a siw device keeps of its QPs and counts, shared by the verbs (`nic.rs`) and the
//! TCP service (`tcp/service.rs`).

use super::cm::ConnId;
use crate::daemon::devices::nic::Owner;
use emu_core as core;
use emu_core::siw_state::SiwQpState;
use wire::client::{self as proto};

/// One RC QP of a siw device.
#[derive(Debug)]
pub(in crate::daemon::siw) struct SiwQp {
    pub owner: Owner,
    pub pd: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub cap: proto::QpCap,
    pub sq_sig_all: bool,
    /// The iWARP state (read back as `ibv_qp_state`).
    pub state: SiwQpState,
    pub access: u32,
    /// The TCP connection the RDMA CM bound (connect or accept).
    pub conn: Option<ConnId>,
    /// Receives posted before the connection's engine exists.
    pub pending_recvs: Vec<core::RecvWr>,
    /// The SRQ (the core's id) its receives come from, if it was created with one.
    pub srq: Option<u32>,
}

/// Counters of the device (`rdma-emu stat siw0`).
#[derive(Debug, Default, Clone, Copy)]
pub(in crate::daemon::siw) struct SiwCounters {
    pub connections: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub terminates_sent: u64,
    pub terminates_rcvd: u64,
    pub mpa_failures: u64,
}

//! One connection of the CM agent as it keeps it, and what came with a message.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use wire::cm::{mad, CmaHeader, ServiceId};
use wire::roce::{Psn, Qkey, Qpn};

use super::table::CmState;
use super::types::{ConnParams, Owner, PeerInfo};
use crate::types::Mtu;

/// The UD side of a SIDR exchange.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sidr {
    /// SIDR_REP status (passive side, what we answer).
    pub status: u8,
    /// The UD QP (ours on the passive side, the peer's on the active side).
    pub qpn: Qpn,
    /// Its Q_Key.
    pub qkey: Qkey,
}

/// One connection.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub owner: Owner,
    pub state: CmState,
    pub active: bool,
    /// Destroyed by the consumer: the protocol finishes, no more events.
    pub orphan: bool,
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// Transaction ID of the REQ (REP, RTU, MRA, REJ reuse it).
    pub tid: u64,
    /// Transaction ID of the peer's DREQ (our DREP reuses it).
    pub dreq_tid: u64,
    pub service_id: ServiceId,
    pub local: IpAddr,
    pub remote: IpAddr,
    pub sgid_index: u8,
    pub src_port: u16,
    pub params: ConnParams,
    pub psn: Psn,
    pub peer: Option<PeerInfo>,
    pub mtu: Mtu,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// Local ACK timeout exponent of the path (packet lifetime + 1).
    pub ack_timeout: u8,
    /// Retransmission interval (the peer's CM response time + 2 packet lifetimes).
    pub response_timeout: Duration,
    /// The kept REQ / REP / DREQ / SIDR_REQ.
    pub sent: Option<Box<[u8; mad::MAD_LEN]>>,
    pub retries_left: u8,
    pub deadline: Option<Instant>,
    /// Service timeout of the last MRA received.
    pub mra_timeout: u8,
    /// REJ we send (reason, ARI, private data), set by reject/destroy.
    pub rej: (u16, Vec<u8>, Vec<u8>),
    /// Private data of DREQ/DREP/RTU we send.
    pub out_private: Vec<u8>,
    pub sidr: Sidr,
}

/// What came with a message, for the event it raises.
#[derive(Debug, Default)]
pub(super) struct Payload {
    pub(super) private_data: Vec<u8>,
    pub(super) reason: u16,
    pub(super) ari: Vec<u8>,
    pub(super) cma: Option<CmaHeader>,
    pub(super) sidr: Option<(u8, Qpn, Qkey)>,
}

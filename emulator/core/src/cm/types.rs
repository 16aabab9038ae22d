//! The CM's vocabulary, shared by the agent, its input and its wire format: the
//! configuration, the consumer's parameters and route, what the agent reports (events,
//! transmits, counters), and the REJ reasons and SIDR statuses it uses.

use std::net::IpAddr;
use std::time::Duration;
use wire::cm::{CmaHeader, PortSpace, ServiceId};

use crate::types::{ClientId, Gid, Mtu, QpType};
use wire::roce::{Psn, Qkey, Qpn};

/// REJ reasons (IBA table 109) the agent sends or the daemon may pass to
/// [`CmAgent::reject`](super::CmAgent::reject) (`enum ib_cm_rej_reason` numbering).
pub mod reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// Timeout (the active side gave up; ARI = its CA GUID).
    pub const TIMEOUT: u16 = 4;
    /// Invalid communication ID (a REP for a connection we do not know).
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid service ID: nobody listens (what the Linux CM sends; librdmacm reports
    /// RDMA_CM_EVENT_REJECTED with status 8).
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport service type: a REQ for a transport the CM does not serve (RD,
    /// or an extended type other than XRC).
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection.
    pub const STALE_CONN: u16 = 10;
    /// Consumer reject (`rdma_reject`).
    pub const CONSUMER_DEFINED: u16 = 28;
}

/// SIDR_REP status values (`enum ib_cm_sidr_status`).
pub mod sidr_status {
    /// The QP is valid.
    pub const SUCCESS: u8 = 0;
    /// Service ID not supported: nobody listens.
    pub const UNSUPPORTED: u8 = 1;
    /// The consumer rejected the request.
    pub const REJECT: u8 = 2;
}

/// How a device's CM behaves. [`CmConfig::new`] gives the values rxe and the Linux
/// CM/CMA put on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmConfig {
    /// The local CA GUID (rxe: the EUI-64 of the netdev's MAC).
    pub local_ca_guid: u64,
    /// The device's GID table (to find the `sgid_index` of a connection).
    pub gids: Vec<Gid>,
    /// The port's active MTU (a path MTU never exceeds it).
    pub active_mtu: Mtu,
    /// Seed of communication IDs, transaction IDs and starting PSNs.
    pub seed: u64,
    /// High 32 bits of transaction IDs (the Linux MAD agent's `hi_tid`).
    pub hi_tid: u32,
    /// The CA's ACK delay sent in REP (rxe: 15).
    pub target_ack_delay: u8,
    /// CM response timeout exponent sent in REQ (CMA: 20, i.e. 4.096 µs × 2^20 ≈ 4.3 s).
    pub cm_response_timeout: u8,
    /// Retransmissions of REQ/REP/DREQ/SIDR_REQ before giving up (CMA: 15).
    pub max_cm_retries: u8,
    /// Packet lifetime exponent of RoCE paths (CMA: 16); the local ACK timeout of a path
    /// is one more (17).
    pub packet_life_time: u8,
    /// Service timeout exponent put in MRAs (CMA: 24).
    pub mra_service_timeout: u8,
}

impl CmConfig {
    /// The values the Linux CM/CMA use on rxe.
    pub fn new(local_ca_guid: u64, gids: Vec<Gid>, active_mtu: Mtu, seed: u64) -> Self {
        CmConfig {
            local_ca_guid,
            gids,
            active_mtu,
            seed,
            hi_tid: 1,
            target_ack_delay: 15,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 16,
            mra_service_timeout: 24,
        }
    }

    /// The transaction ID of the messages of connection `comm_id`: `hi_tid` above the
    /// communication ID in host order.
    pub(crate) fn tid_for(&self, comm_id: u32) -> u64 {
        (u64::from(self.hi_tid) << 32) | u64::from(comm_id.swap_bytes())
    }
}

/// 4.096 µs × 2^`exp` (the encoding of every CM timeout field), capped at exponent 31.
pub fn iba_time(exp: u8) -> Duration {
    Duration::from_nanos(4096u64 << u32::from(exp.min(31)))
}

/// A connection (or SIDR request) of the agent: its local communication ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

/// The consumer's side of a connection (`struct rdma_conn_param` plus the QP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParams {
    /// RC, UC, or an XRC half: `XrcSend` connects (an XRC REQ), `XrcRecv` accepts.
    pub qp_type: QpType,
    /// The local QP.
    pub qpn: Qpn,
    /// First PSN this side sends; `None`: drawn from the seed (the CMA draws a random one).
    pub starting_psn: Option<Psn>,
    /// READ/atomic requests this side accepts at once.
    pub responder_resources: u8,
    /// READ/atomic requests this side issues at once.
    pub initiator_depth: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// RNR retries (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
    /// Path MTU (active side; the passive side takes the REQ's).
    pub path_mtu: Mtu,
    /// The QP uses an SRQ.
    pub srq: bool,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Private data (REQ: at most 56 octets after the CMA header; REP: 196).
    pub private_data: Vec<u8>,
}

impl ConnParams {
    /// Parameters as `rping`/`ib_send_bw -R` pass them for an RC QP.
    pub fn rc(qpn: Qpn) -> Self {
        ConnParams {
            qp_type: QpType::Rc,
            qpn,
            starting_psn: None,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: Mtu::Mtu1024,
            srq: false,
            flow_control: false,
            private_data: Vec::new(),
        }
    }
}

/// Where an active connection goes (what rdma_resolve_addr/route found).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Local address (a GID of this device).
    pub local: IpAddr,
    /// The peer's address.
    pub remote: IpAddr,
    /// RDMA CM port space.
    pub port_space: PortSpace,
    /// Local port (in the CMA header).
    pub src_port: u16,
    /// Destination port (in the service ID).
    pub dst_port: u16,
    /// IP TTL of the path (CMA on RoCE: 64).
    pub hop_limit: u8,
    /// Traffic class (IP TOS).
    pub traffic_class: u8,
    /// Flow label; `None`: the CMA's hash of the ports (`sport * 31 + dport`, 20 bits).
    pub flow_label: Option<u32>,
}

impl Route {
    /// An IPv4/IPv6 route in the TCP port space with the CMA's defaults.
    pub fn tcp(local: IpAddr, remote: IpAddr, src_port: u16, dst_port: u16) -> Self {
        Route {
            local,
            remote,
            port_space: PortSpace::Tcp,
            src_port,
            dst_port,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: None,
        }
    }

    /// The service ID of the destination.
    pub fn service_id(&self) -> ServiceId {
        ServiceId::rdma_ip(self.port_space, self.dst_port)
    }

    /// The flow label the path uses.
    pub fn flow_label(&self) -> u32 {
        self.flow_label.unwrap_or_else(|| {
            (u32::from(self.src_port) * 31 + u32::from(self.dst_port)) & 0xf_ffff
        })
    }
}

/// The path of a connection as the agent keeps it ([`CmAgent::path`](super::CmAgent::path)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnPath {
    /// Local address (a GID of this device).
    pub local: IpAddr,
    /// The peer's address.
    pub remote: IpAddr,
    /// The service ID (the listened one on the passive side).
    pub service_id: ServiceId,
    /// Index of the local GID in the device's table.
    pub sgid_index: u8,
    /// Flow label of the path.
    pub flow_label: u32,
    /// IP TTL / hop limit of the path.
    pub hop_limit: u8,
    /// Traffic class (IP TOS).
    pub traffic_class: u8,
    /// The connection's path MTU.
    pub mtu: Mtu,
}

/// What the peer said about itself in its REQ or REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's address.
    pub addr: IpAddr,
    /// Its communication ID.
    pub comm_id: u32,
    /// Its CA GUID.
    pub ca_guid: u64,
    /// Its QP.
    pub qpn: Qpn,
    /// The first PSN it sends.
    pub starting_psn: Psn,
    /// READ/atomic requests it accepts at once.
    pub responder_resources: u8,
    /// READ/atomic requests it issues at once.
    pub initiator_depth: u8,
    /// Transport retries it asks for (REQ only; 0 in a REP).
    pub retry_count: u8,
    /// RNR retries it asks for.
    pub rnr_retry_count: u8,
    /// Path MTU (REQ: the path's; REP: the connection's).
    pub path_mtu: Mtu,
    /// RC, UC or, from an XRC REQ, `XrcRecv` (the QP this side answers with).
    pub qp_type: QpType,
    /// It uses an SRQ.
    pub srq: bool,
    /// End-to-end flow control.
    pub flow_control: bool,
}

/// What the consumer learns (each maps to one `enum rdma_cm_event_type`; see `docs/cm.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// RDMA_CM_EVENT_CONNECT_REQUEST: a REQ for a listened service ID. The event's
    /// connection is new (answer with accept/reject). `private_data` is the consumer's,
    /// after the CMA header. (librdmacm swaps the peer's resources: its
    /// `param.conn.responder_resources` is the peer's `initiator_depth`.)
    ConnectRequest {
        /// The listened service ID.
        service_id: ServiceId,
        /// The peer.
        peer: PeerInfo,
        /// The CMA header (addresses and source port), if the REQ had a valid one.
        cma: Option<CmaHeader>,
        /// The consumer's private data.
        private_data: Vec<u8>,
    },
    /// RDMA_CM_EVENT_CONNECT_REQUEST on a UD port space: a SIDR_REQ.
    SidrRequest {
        /// The listened service ID.
        service_id: ServiceId,
        /// The peer's address.
        addr: IpAddr,
        /// The CMA header, if valid.
        cma: Option<CmaHeader>,
        /// The consumer's private data.
        private_data: Vec<u8>,
    },
    /// REP received (active side). With a QP the daemon moves it to RTR/RTS
    /// ([`CmAgent::init_qp_attr`](super::CmAgent::init_qp_attr)), calls
    /// [`CmAgent::establish`](super::CmAgent::establish) and reports
    /// RDMA_CM_EVENT_ESTABLISHED; without one it reports RDMA_CM_EVENT_CONNECT_RESPONSE
    /// and waits for rdma_establish.
    ConnectResponse {
        /// The peer.
        peer: PeerInfo,
        /// The REP's private data (196 octets).
        private_data: Vec<u8>,
    },
    /// RDMA_CM_EVENT_ESTABLISHED (passive side: RTU received or the QP saw traffic).
    Established,
    /// RDMA_CM_EVENT_ESTABLISHED on UD: the SIDR_REP's QP and Q_Key.
    SidrResolved {
        /// The remote UD QP.
        qpn: Qpn,
        /// Its Q_Key.
        qkey: Qkey,
        /// The SIDR_REP's private data (136 octets).
        private_data: Vec<u8>,
    },
    /// RDMA_CM_EVENT_REJECTED, `status` = `reason`.
    Rejected {
        /// IBA table 109 reason.
        reason: u16,
        /// The REJ's private data (148 octets).
        private_data: Vec<u8>,
        /// Additional rejection information (its valid length).
        ari: Vec<u8>,
    },
    /// RDMA_CM_EVENT_UNREACHABLE: a SIDR_REP with a non-zero `status`.
    SidrRejected {
        /// The SIDR_REP status.
        status: u8,
        /// Its private data.
        private_data: Vec<u8>,
    },
    /// RDMA_CM_EVENT_UNREACHABLE with ETIMEDOUT: REQ, REP or SIDR_REQ unanswered after
    /// every retry.
    Unreachable,
    /// RDMA_CM_EVENT_DISCONNECTED (`timed_out`: our DREQ was never answered, status
    /// ETIMEDOUT). The daemon moves the QP to ERROR.
    Disconnected {
        /// No DREP came.
        timed_out: bool,
        /// The DREQ's or DREP's private data, if one was received.
        private_data: Vec<u8>,
    },
    /// RDMA_CM_EVENT_TIMEWAIT_EXIT: the connection is gone, the QP may be reused.
    TimewaitExit,
}

/// A MAD to send to the peer's QP1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmTransmit {
    /// Local address it leaves from (the GRH source).
    pub src: IpAddr,
    /// The peer (the GRH destination).
    pub dst: IpAddr,
    /// The 256-octet MAD.
    pub mad: [u8; wire::cm::MAD_LEN],
}

/// Counters of the agent (like the Linux CM's `cm_tx_msgs`, `cm_rx_duplicates`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmCounters {
    /// MADs sent (retransmissions included).
    pub tx: u64,
    /// Retransmissions.
    pub tx_retries: u64,
    /// MADs received and parsed.
    pub rx: u64,
    /// Duplicates received (REQ, REP, DREQ, SIDR_REQ repeated).
    pub rx_duplicates: u64,
    /// MADs dropped: unparsable, unknown connection, or not valid in the state.
    pub rx_dropped: u64,
    /// REQs rejected for their transport service type (RD, or an extended transport
    /// type other than XRC): REJ reason 9.
    pub rx_bad_transport: u64,
    /// REQs the consumer side refused because their QP type is not the listener's
    /// (an XRC REQ at an RC listener, or the reverse): a consumer REJ.
    pub rx_qp_type_mismatch: u64,
}

/// Who a connection belongs to (for events).
pub type Owner = ClientId;

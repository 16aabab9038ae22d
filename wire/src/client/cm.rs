//! RDMA CM over the control socket: what librdmacm (the shim) asks the daemon's connection
//! manager, and the events it gets back. The split is rdma-core's: the daemon plays the
//! kernel's `rdma_ucm` + CMA + IB CM (address resolution, port spaces, the CM protocol on
//! QP1), the shim plays `librdmacm` (the `rdma_cm_id` objects, the QP transitions around
//! connect/accept, `rdma_get_cm_event`). The daemon never touches a QP for the CM: the shim
//! moves it with `ModifyQp`, using the attributes of [`CmRequest::InitQpAttr`], exactly as
//! librdmacm does with `ucma_init_qp_attr`.
//!
//! Event channels: `CreateChannel` carries the write end of a pipe the shim made. For every
//! event the daemon queues on the channel it writes one [`CmEventToken`] (8 bytes, below
//! `PIPE_BUF`) into the pipe; the read end is the channel's `fd` (pollable, blocking or
//! not as the application sets it). `rdma_get_cm_event` reads one token, then fetches the
//! oldest queued event with [`CmRequest::GetEvent`]. Events stay queued in the daemon until
//! fetched, so a slow reader loses none; the token is only a wake-up.
//!
//! Numbers follow `<rdma/rdma_cma.h>`: `RDMA_PS_*` port spaces, `RDMA_CM_EVENT_*` event
//! types, IBV QP types; `status` is what librdmacm puts in `rdma_cm_event.status`
//! (0, a negative errno, or a REJ reason).

use super::attr::{AhAttr, Handle, QpAttr};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// `enum rdma_port_space` values.
pub mod ps {
    /// RDMA_PS_IPOIB: IP over IB's port space; its ids are UD.
    pub const IPOIB: u32 = 0x0002;
    /// RDMA_PS_IB: any QP type, named by `CreateId::qp_type`.
    pub const IB: u32 = 0x013f;
    /// RDMA_PS_TCP: reliable connected (RC) ids, in a port space of their own.
    pub const TCP: u32 = 0x0106;
    /// RDMA_PS_UDP: datagram (UD) ids.
    pub const UDP: u32 = 0x0111;
}

/// `enum rdma_cm_event_type` values.
pub mod event {
    /// RDMA_CM_EVENT_ADDR_RESOLVED: `ResolveAddr` found the source address and device.
    pub const ADDR_RESOLVED: u32 = 0;
    /// RDMA_CM_EVENT_ADDR_ERROR: `ResolveAddr` failed; `status` is the negative errno.
    pub const ADDR_ERROR: u32 = 1;
    /// RDMA_CM_EVENT_ROUTE_RESOLVED: `ResolveRoute` filled the path ([`super::CmIdInfo::path`]).
    pub const ROUTE_RESOLVED: u32 = 2;
    /// RDMA_CM_EVENT_ROUTE_ERROR: `ResolveRoute` failed (-ENODEV: the device went away).
    pub const ROUTE_ERROR: u32 = 3;
    /// RDMA_CM_EVENT_CONNECT_REQUEST: a REQ (or SIDR_REQ, MPA Request) reached a
    /// listener; the event is for a new id ([`super::CmEventRecord::new_id`]).
    pub const CONNECT_REQUEST: u32 = 4;
    /// RDMA_CM_EVENT_CONNECT_RESPONSE: the passive side's REP arrived; the shim moves the
    /// QP to RTR and RTS, sends `Establish` and reports ESTABLISHED.
    pub const CONNECT_RESPONSE: u32 = 5;
    /// RDMA_CM_EVENT_CONNECT_ERROR: the connection failed otherwise (iWARP: a TCP or MPA
    /// error other than a refusal or a timeout).
    pub const CONNECT_ERROR: u32 = 6;
    /// RDMA_CM_EVENT_UNREACHABLE: the peer never answered (`status` -ETIMEDOUT), or its
    /// SIDR_REP refused (`status` the SIDR status: 1 no listener, 2 rejected).
    pub const UNREACHABLE: u32 = 7;
    /// RDMA_CM_EVENT_REJECTED: the peer answered with a REJ (`status` the reason: 8 no
    /// listener, 28 consumer) or, on iWARP, refused the connection (-ECONNREFUSED).
    pub const REJECTED: u32 = 8;
    /// RDMA_CM_EVENT_ESTABLISHED: the connection is up (passive side: RTU or COMM_EST;
    /// UD: the SIDR_REP, with `param.ud`).
    pub const ESTABLISHED: u32 = 9;
    /// RDMA_CM_EVENT_DISCONNECTED: the connection ended (DREQ/DREP, or the peer went
    /// away).
    pub const DISCONNECTED: u32 = 10;
    /// RDMA_CM_EVENT_DEVICE_REMOVAL: the id's device was deleted; the id is unusable.
    pub const DEVICE_REMOVAL: u32 = 11;
    /// RDMA_CM_EVENT_MULTICAST_JOIN: `JoinMulticast` succeeded; `param.ud` says how to
    /// send to the group.
    pub const MULTICAST_JOIN: u32 = 12;
    /// RDMA_CM_EVENT_MULTICAST_ERROR: a multicast join was lost; the daemon does not raise
    /// it (its join errors are the reply's errno).
    pub const MULTICAST_ERROR: u32 = 13;
    /// RDMA_CM_EVENT_ADDR_CHANGE: the address the id is bound to moved or went away; the
    /// daemon does not raise it.
    pub const ADDR_CHANGE: u32 = 14;
    /// RDMA_CM_EVENT_TIMEWAIT_EXIT: the QP of a closed connection left time wait and may
    /// be reused.
    pub const TIMEWAIT_EXIT: u32 = 15;
}

/// A request to the connection manager (inside `RequestBody::Cm`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CmRequest {
    /// `rdma_create_event_channel`. `fd[0]`: write end of a pipe. Reply: `Channel`.
    CreateChannel,
    /// `rdma_destroy_event_channel` (EBUSY while ids still use it).
    DestroyChannel {
        /// The channel to destroy.
        channel: Handle,
    },
    /// `rdma_create_id`: `ps` an `RDMA_PS_*`, `qp_type` an `IBV_QPT_*`. Reply: `Id`.
    CreateId {
        /// The event channel the id's events go to.
        channel: Handle,
        /// `RDMA_PS_*` ([`ps`]); EINVAL for another value.
        ps: u32,
        /// `IBV_QPT_*`; only read for [`ps::IB`] (TCP means RC, UDP and IPOIB mean UD).
        qp_type: u32,
    },
    /// `rdma_destroy_id`: leaves the protocol quietly (a connected id sends DREQ, a
    /// listener stops listening); queued events of the id are discarded.
    DestroyId {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
    },
    /// `rdma_migrate_id`: later events of `id` (and queued ones) go to `channel`.
    MigrateId {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// The channel that gets the id's events from now on.
        channel: Handle,
    },
    /// `rdma_bind_addr`. Port 0 picks a free port. Reply: `Info`.
    BindAddr {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// A local address (or a wildcard) and port; port 0 takes a free one of
        /// 32768..=60999 in the id's port space; a port below 1024 is EACCES unless the
        /// client is root or the daemon's user.
        addr: SocketAddr,
    },
    /// `rdma_resolve_addr`: binds (to `src`, or to the address the kernel's routing picks
    /// for `dst`) and finds the device; ADDR_RESOLVED or ADDR_ERROR follows.
    ResolveAddr {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// The source to bind to first when the id is unbound; `None` lets the routing table
        /// pick it.
        src: Option<SocketAddr>,
        /// The peer; an unscoped IPv6 link-local address takes the source's interface, a
        /// wildcard means this host.
        dst: SocketAddr,
        /// librdmacm's timeout in milliseconds. Ignored: the daemon resolves at once and
        /// queues the event before it answers.
        timeout_ms: u32,
    },
    /// `rdma_resolve_route`: ROUTE_RESOLVED or ROUTE_ERROR follows.
    ResolveRoute {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// librdmacm's timeout in milliseconds. Ignored: the route is resolved at once.
        timeout_ms: u32,
    },
    /// `rdma_listen` on a bound id (an unbound one binds to the wildcard first).
    Listen {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// Connect requests not yet fetched with `GetEvent` that the listener holds; more are
        /// rejected. ≤ 0 or > 1024 means 1024.
        backlog: i32,
    },
    /// `rdma_connect` (RC/UC: REQ; UD: SIDR_REQ). `qpn` the id's QP.
    Connect {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// The connection parameters; `param.qp_num` is the id's QP, which must not be
        /// another session's (EINVAL).
        param: CmConnParam,
    },
    /// `rdma_accept` (RC/UC: REP; UD: SIDR_REP). The shim has moved the QP to RTR/RTS.
    Accept {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// The connection parameters; `param.qp_num` is the id's QP, which must not be
        /// another session's (EINVAL).
        param: CmConnParam,
    },
    /// `rdma_reject` with the consumer's private data (REJ reason 28, or SIDR status 2).
    Reject {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// Sent in the REJ (or SIDR_REP) to the active side.
        private_data: Vec<u8>,
    },
    /// `rdma_establish`, and what librdmacm does after CONNECT_RESPONSE (RTU).
    Establish {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
    },
    /// `rdma_notify` with an `IBV_EVENT_*` (COMM_EST establishes a passive connection).
    Notify {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// An `IBV_EVENT_*`; only `IBV_EVENT_COMM_EST` is accepted (EINVAL otherwise).
        event: u32,
    },
    /// `rdma_disconnect`: DREQ, or DREP after the peer's DREQ.
    Disconnect {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
    },
    /// `rdma_init_qp_attr` for `qp_state` (`IBV_QPS_*`). Reply: `QpAttr`.
    InitQpAttr {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// The `IBV_QPS_*` the shim is about to move the QP to (INIT, RTR or RTS).
        qp_state: u32,
    },
    /// Addresses, device and route of an id. Reply: `Info`.
    Query {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
    },
    /// The oldest event queued on `channel`, or EAGAIN. Reply: `Event`.
    GetEvent {
        /// The channel whose oldest event to fetch.
        channel: Handle,
    },
    /// `rdma_join_multicast` on a UD id; MULTICAST_JOIN follows.
    JoinMulticast {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// The group's IP address (IPv4 224.0.0.0/4 or IPv6 ff00::/8).
        addr: SocketAddr,
        /// `RDMA_MC_JOIN_FLAG_FULLMEMBER` or `..._SENDONLY_FULLMEMBER` (EINVAL otherwise).
        join_flags: u32,
    },
    /// `rdma_leave_multicast`.
    LeaveMulticast {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// The group joined with `JoinMulticast`.
        addr: SocketAddr,
    },
    /// `rdma_set_option` (`level`, `optname` as in `<rdma/rdma_cma.h>`, the value's bytes).
    SetOption {
        /// The `rdma_cm_id`: an id handle of this session (ENOENT otherwise).
        id: Handle,
        /// `RDMA_OPTION_ID` (0) or `RDMA_OPTION_IB` (1); options the daemon does not know are
        /// ENOSYS.
        level: i32,
        /// `RDMA_OPTION_ID_TOS`, `_REUSEADDR`, `_AFONLY` or `_ACK_TIMEOUT`.
        optname: i32,
        /// The option's bytes as the application passed them (one byte for TOS and
        /// ACK_TIMEOUT, a native-endian `int` for the others); EINVAL for another length.
        value: Vec<u8>,
    },
    /// Every id of the calling user's sessions, for `rdma-emu res cm_id` (iproute2's
    /// `rdma resource show cm_id`). Reply: `Ids`.
    ListIds,
}

/// The connection manager's answer (inside `ReplyBody::Cm`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CmReply {
    /// `CreateChannel`: the new event channel.
    Channel {
        /// The event channel.
        handle: Handle,
    },
    /// `CreateId`: the new id.
    Id {
        /// The new id.
        handle: Handle,
    },
    /// `BindAddr`, `Query`: what the shim copies into its `rdma_cm_id`.
    Info(CmIdInfo),
    /// `rdma_init_qp_attr`: the attributes and `IBV_QP_*` mask to pass to `ibv_modify_qp`.
    QpAttr {
        /// The attributes; only those named by `mask` are meaningful.
        attr: QpAttr,
        /// `IBV_QP_*` bits ([`super::verbs::qp_attr_mask`]).
        mask: u32,
    },
    /// `GetEvent`: the oldest event queued on the channel.
    Event(CmEventRecord),
    /// `ListIds`: the ids, ordered by handle.
    Ids(Vec<CmIdSummary>),
}

/// One id in `rdma-emu res cm_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmIdSummary {
    /// The id's handle (in its owner's session).
    pub id: Handle,
    /// The process that owns it.
    pub pid: u32,
    /// The device the id is bound to, if any.
    pub device: Option<String>,
    /// 1 when bound to a device, else 0.
    pub port_num: u8,
    /// `RDMA_PS_*`.
    pub ps: u32,
    /// `IBV_QPT_*`.
    pub qp_type: u32,
    /// The kernel's names: IDLE, ADDR_QUERY, ADDR_RESOLVED, ROUTE_QUERY, ROUTE_RESOLVED,
    /// CONNECT, DISCONNECT, ADDR_BOUND, LISTEN, DEVICE_REMOVAL, DESTROYING.
    pub state: String,
    /// The local address, once bound.
    pub src: Option<SocketAddr>,
    /// The peer's address, once resolved or connected.
    pub dst: Option<SocketAddr>,
    /// The connection's QP number, once known.
    pub qpn: Option<u32>,
}

/// `struct rdma_conn_param` (and the id's QP number, which librdmacm reads from `id->qp`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmConnParam {
    /// Sent in the REQ/REP/SIDR_REQ/MPA message; EINVAL beyond what the message holds
    /// (56 octets in a REQ).
    pub private_data: Vec<u8>,
    /// RDMA READs/atomics this side accepts at once (REQ/REP field).
    pub responder_resources: u8,
    /// RDMA READs/atomics this side issues at once (REQ/REP field).
    pub initiator_depth: u8,
    /// Nonzero: end-to-end flow control (REQ/REP field).
    pub flow_control: u8,
    /// Transport retries the peer should allow (REQ field; at most 7).
    pub retry_count: u8,
    /// RNR retries (REQ/REP field; at most 7, 7 = infinite).
    pub rnr_retry_count: u8,
    /// Nonzero: the QP receives from an SRQ (REQ/REP field).
    pub srq: u8,
    /// The id's QP number (low 24 bits), advertised to the peer.
    pub qp_num: u32,
    /// UD: the Q_Key the SIDR_REP carries (`RDMA_UDP_QKEY` unless set).
    pub qkey: u32,
}

/// What the shim fills `rdma_cm_id` with: device, addresses and the resolved route.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmIdInfo {
    /// The device the id is bound to (`id->verbs`), once an address on one is bound.
    pub device: Option<String>,
    /// The device's node GUID (0 without a device).
    pub node_guid: u64,
    /// 1 once the id has a device, else 0.
    pub port_num: u8,
    /// The local address, once bound.
    pub src: Option<SocketAddr>,
    /// The peer's address, once resolved.
    pub dst: Option<SocketAddr>,
    /// `route.addr.addr.ibaddr`: source and destination GIDs (network order), P_Key.
    pub sgid: [u8; 16],
    /// The destination GID (network order).
    pub dgid: [u8; 16],
    /// The P_Key; always 0xffff, the default partition, as on RoCE.
    pub pkey: u16,
    /// Index of `sgid` in the device's GID table.
    pub sgid_index: u8,
    /// `route.num_paths` (0 before the route is resolved, 1 after) and the path record.
    pub num_paths: i32,
    /// The path record, once the route is resolved.
    pub path: Option<CmPath>,
}

/// The parts of `struct ibv_sa_path_rec` the CMA fills on RoCE.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmPath {
    /// IPv6 flow label (20 bits), hashed from the ports as the CMA does.
    pub flow_label: u32,
    /// IP hop limit / TTL (64).
    pub hop_limit: u8,
    /// IP traffic class (TOS byte) from `RDMA_OPTION_ID_TOS` or the device default.
    pub traffic_class: u8,
    /// Service level (0 on RoCE).
    pub sl: u8,
    /// `enum ibv_mtu`.
    pub mtu: u32,
    /// Static rate (`enum ibv_rate`).
    pub rate: u8,
    /// Packet lifetime exponent (4.096 µs × 2^n), 16 as the CMA sets on RoCE.
    pub packet_life_time: u8,
}

/// One event (`struct rdma_cm_event`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CmEventRecord {
    /// The id the event is for. For CONNECT_REQUEST, a new id the daemon created on the
    /// listener's channel (described by `new_id`); `listen_id` names the listener.
    pub id: Handle,
    /// CONNECT_REQUEST: the listener whose backlog the request counts against.
    pub listen_id: Option<Handle>,
    /// `RDMA_CM_EVENT_*`.
    pub event: u32,
    /// `rdma_cm_event.status`: 0, a negative errno, or a REJ reason.
    pub status: i32,
    /// A new id's addresses and device (CONNECT_REQUEST).
    pub new_id: Option<CmIdInfo>,
    /// `conn` or `ud`, as the event type implies.
    pub param: CmEventParam,
}

/// `rdma_cm_event.param`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmEventParam {
    /// The event carries no parameters.
    #[default]
    None,
    /// `param.conn` (RC/UC): the peer's private data and its side of the resources,
    /// already swapped as librdmacm reports them to a passive side.
    Conn(CmConnParam),
    /// `param.ud` (UD: SIDR reply, multicast join): how to reach the peer.
    Ud {
        /// The private data of the SIDR_REP (empty for a multicast join).
        private_data: Vec<u8>,
        /// The address handle attributes that reach the peer or group.
        ah_attr: AhAttr,
        /// The remote QP (0xffffff for a multicast group).
        qp_num: u32,
        /// The Q_Key to send with.
        qkey: u32,
    },
}

/// The wake-up the daemon writes into a channel's pipe per queued event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmEventToken;

impl CmEventToken {
    /// Bytes of a token.
    pub const LEN: usize = 8;
    /// What a token holds ("rdmaCMev").
    pub const BYTES: [u8; 8] = *b"rdmaCMev";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Reply, ReplyBody, Request, RequestBody};

    #[test]
    fn requests_and_events_round_trip() {
        let req = Request {
            seq: 7,
            body: RequestBody::Cm(CmRequest::ResolveAddr {
                id: Handle(3),
                src: None,
                dst: "[fe80::1]:7471".parse().unwrap(),
                timeout_ms: 2000,
            }),
        };
        assert_eq!(Request::decode(&req.encode().unwrap()).unwrap(), req);
        let ev = CmEventRecord {
            id: Handle(9),
            listen_id: Some(Handle(4)),
            event: event::CONNECT_REQUEST,
            status: 0,
            new_id: Some(CmIdInfo {
                device: Some("rxe0".into()),
                src: Some("10.0.0.1:7174".parse().unwrap()),
                dst: Some("10.0.0.2:40000".parse().unwrap()),
                num_paths: 1,
                path: Some(CmPath::default()),
                ..CmIdInfo::default()
            }),
            param: CmEventParam::Conn(CmConnParam {
                private_data: vec![0xab; 56],
                responder_resources: 1,
                ..CmConnParam::default()
            }),
        };
        let reply = Reply {
            seq: 7,
            result: Ok(ReplyBody::Cm(CmReply::Event(ev))),
        };
        assert_eq!(Reply::decode(&reply.encode().unwrap()).unwrap(), reply);
    }
}

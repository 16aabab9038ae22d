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

use super::proto::{AhAttr, Handle, QpAttr};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// `enum rdma_port_space` values.
pub mod ps {
    pub const IPOIB: u32 = 0x0002;
    pub const IB: u32 = 0x013f;
    pub const TCP: u32 = 0x0106;
    pub const UDP: u32 = 0x0111;
}

/// `enum rdma_cm_event_type` values.
pub mod event {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const ROUTE_ERROR: u32 = 3;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_RESPONSE: u32 = 5;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
    pub const DEVICE_REMOVAL: u32 = 11;
    pub const MULTICAST_JOIN: u32 = 12;
    pub const MULTICAST_ERROR: u32 = 13;
    pub const ADDR_CHANGE: u32 = 14;
    pub const TIMEWAIT_EXIT: u32 = 15;
}

/// A request to the connection manager (inside `RequestBody::Cm`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CmRequest {
    /// `rdma_create_event_channel`. fd[0]: write end of a pipe. Reply: `Channel`.
    CreateChannel,
    /// `rdma_destroy_event_channel` (EBUSY while ids still use it).
    DestroyChannel { channel: Handle },
    /// `rdma_create_id`: `ps` an `RDMA_PS_*`, `qp_type` an `IBV_QPT_*`. Reply: `Id`.
    CreateId {
        channel: Handle,
        ps: u32,
        qp_type: u32,
    },
    /// `rdma_destroy_id`: leaves the protocol quietly (a connected id sends DREQ, a
    /// listener stops listening); queued events of the id are discarded.
    DestroyId { id: Handle },
    /// `rdma_migrate_id`: later events of `id` (and queued ones) go to `channel`.
    MigrateId { id: Handle, channel: Handle },
    /// `rdma_bind_addr`. Port 0 picks a free port. Reply: `Info`.
    BindAddr { id: Handle, addr: SocketAddr },
    /// `rdma_resolve_addr`: binds (to `src`, or to the address the kernel's routing picks
    /// for `dst`) and finds the device; ADDR_RESOLVED or ADDR_ERROR follows.
    ResolveAddr {
        id: Handle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: u32,
    },
    /// `rdma_resolve_route`: ROUTE_RESOLVED or ROUTE_ERROR follows.
    ResolveRoute { id: Handle, timeout_ms: u32 },
    /// `rdma_listen` on a bound id (an unbound one binds to the wildcard first).
    Listen { id: Handle, backlog: i32 },
    /// `rdma_connect` (RC/UC: REQ; UD: SIDR_REQ). `qpn` the id's QP.
    Connect { id: Handle, param: CmConnParam },
    /// `rdma_accept` (RC/UC: REP; UD: SIDR_REP). The shim has moved the QP to RTR/RTS.
    Accept { id: Handle, param: CmConnParam },
    /// `rdma_reject` with the consumer's private data (REJ reason 28, or SIDR status 2).
    Reject { id: Handle, private_data: Vec<u8> },
    /// `rdma_establish`, and what librdmacm does after CONNECT_RESPONSE (RTU).
    Establish { id: Handle },
    /// `rdma_notify` with an `IBV_EVENT_*` (COMM_EST establishes a passive connection).
    Notify { id: Handle, event: u32 },
    /// `rdma_disconnect`: DREQ, or DREP after the peer's DREQ.
    Disconnect { id: Handle },
    /// `rdma_init_qp_attr` for `qp_state` (`IBV_QPS_*`). Reply: `QpAttr`.
    InitQpAttr { id: Handle, qp_state: u32 },
    /// Addresses, device and route of an id. Reply: `Info`.
    Query { id: Handle },
    /// The oldest event queued on `channel`, or EAGAIN. Reply: `Event`.
    GetEvent { channel: Handle },
    /// `rdma_join_multicast` on a UD id; MULTICAST_JOIN or MULTICAST_ERROR follows.
    JoinMulticast {
        id: Handle,
        addr: SocketAddr,
        join_flags: u32,
    },
    /// `rdma_leave_multicast`.
    LeaveMulticast { id: Handle, addr: SocketAddr },
    /// `rdma_set_option` (`level`, `optname` as in `<rdma/rdma_cma.h>`, the value's bytes).
    SetOption {
        id: Handle,
        level: i32,
        optname: i32,
        value: Vec<u8>,
    },
    /// Every id of the calling user's sessions, for `rdma-emu res cm_id` (iproute2's
    /// `rdma resource show cm_id`). Reply: `Ids`.
    ListIds,
}

/// The connection manager's answer (inside `ReplyBody::Cm`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CmReply {
    Channel {
        handle: Handle,
    },
    Id {
        handle: Handle,
    },
    Info(CmIdInfo),
    /// `rdma_init_qp_attr`: the attributes and `IBV_QP_*` mask to pass to `ibv_modify_qp`.
    QpAttr {
        attr: QpAttr,
        mask: u32,
    },
    Event(CmEventRecord),
    Ids(Vec<CmIdSummary>),
}

/// One id in `rdma-emu res cm_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmIdSummary {
    pub id: Handle,
    /// The process that owns it.
    pub pid: u32,
    pub device: Option<String>,
    pub port_num: u8,
    /// `RDMA_PS_*`.
    pub ps: u32,
    /// `IBV_QPT_*`.
    pub qp_type: u32,
    /// The kernel's names: IDLE, ADDR_QUERY, ADDR_RESOLVED, ROUTE_QUERY, ROUTE_RESOLVED,
    /// CONNECT, DISCONNECT, ADDR_BOUND, LISTEN, DEVICE_REMOVAL, DESTROYING.
    pub state: String,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// The connection's QP number, once known.
    pub qpn: Option<u32>,
}

/// `struct rdma_conn_param` (and the id's QP number, which librdmacm reads from `id->qp`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmConnParam {
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
    /// UD: the Q_Key the SIDR_REP carries (`RDMA_UDP_QKEY` unless set).
    pub qkey: u32,
}

/// What the shim fills `rdma_cm_id` with: device, addresses and the resolved route.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmIdInfo {
    /// The device the id is bound to (`id->verbs`), once an address on one is bound.
    pub device: Option<String>,
    pub node_guid: u64,
    pub port_num: u8,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// `route.addr.addr.ibaddr`: source and destination GIDs (network order), P_Key.
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub pkey: u16,
    /// Index of `sgid` in the device's GID table.
    pub sgid_index: u8,
    /// `route.num_paths` (0 before the route is resolved, 1 after) and the path record.
    pub num_paths: i32,
    pub path: Option<CmPath>,
}

/// The parts of `struct ibv_sa_path_rec` the CMA fills on RoCE.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmPath {
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    /// `enum ibv_mtu`.
    pub mtu: u32,
    pub rate: u8,
    pub packet_life_time: u8,
}

/// One event (`struct rdma_cm_event`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CmEventRecord {
    /// The id the event is for. For CONNECT_REQUEST, a new id the daemon created on the
    /// listener's channel (described by `new_id`); `listen_id` names the listener.
    pub id: Handle,
    pub listen_id: Option<Handle>,
    /// `RDMA_CM_EVENT_*`.
    pub event: u32,
    pub status: i32,
    /// A new id's addresses and device (CONNECT_REQUEST).
    pub new_id: Option<CmIdInfo>,
    pub param: CmEventParam,
}

/// `rdma_cm_event.param`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmEventParam {
    #[default]
    None,
    /// `param.conn` (RC/UC): the peer's private data and its side of the resources,
    /// already swapped as librdmacm reports them to a passive side.
    Conn(CmConnParam),
    /// `param.ud` (UD: SIDR reply, multicast join): how to reach the peer.
    Ud {
        private_data: Vec<u8>,
        ah_attr: AhAttr,
        qp_num: u32,
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
